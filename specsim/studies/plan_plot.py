"""The plan's picture: replicas and $/Mtok against request rate, with and without speculation, one colour per option."""

from __future__ import annotations

from pathlib import Path


def plot_plan(rows: list[dict], path: str | Path, title: str = "") -> Path | None:
    """Two panels (replicas needed; $/Mtok at those replicas), solid = speculation, dashed = baseline; None when no
    row has a rate (a replayed arrivals CSV gives one point per option: the table says it better)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keyed: dict = {}
    for r in rows:
        if r.get("rate") is not None:
            keyed.setdefault(f"{r['option']} (tp {r['tp']})", []).append(r)
    if not keyed or all(len(v) < 2 for v in keyed.values()):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, rs) in enumerate(keyed.items()):
        rs = sorted(rs, key=lambda r: r["rate"])
        x = [r["rate"] for r in rs]
        col = colours[i % len(colours)]
        for ax, spec_key, base_key in ((axes[0], "replicas_spec", "replicas_baseline"),
                                       (axes[1], "usd_per_mtok_spec", "usd_per_mtok_baseline")):
            ax.plot(x, [r.get(spec_key) for r in rs], "-o", color=col, ms=4, label=f"{label}, speculative")
            ax.plot(x, [r.get(base_key) for r in rs], "--s", color=col, ms=4, mfc="none",
                    label=f"{label}, no speculation")
    for ax, ylabel in ((axes[0], "replicas meeting the SLOs"), (axes[1], "$ per million output tokens")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("request rate (req/s, Poisson)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_yscale("log", base=2)
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
