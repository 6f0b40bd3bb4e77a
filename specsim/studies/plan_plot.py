"""The plan's picture: replicas and $/Mtok against request rate, with and without speculation, one colour per option.

Read as a meeting would: the title states the SLOs and the keep-up rule the answers meet, both axes count in plain
numbers (1, 2, 4, … req/s and replicas, not 2^k), and each line is nudged sideways by a few percent with its own
marker, so a speculative line lying on the plain one (the same replicas, common at low load) stays visible. A
rate with no answer is an × on the panel's top edge; with no answer anywhere the panels say so (no crash).
"""

from __future__ import annotations

from pathlib import Path

NUDGE = 0.06  # each line is shifted by ±NUDGE octaves (a 4 % step in rate) so coinciding lines both show


def _slo_text(slo: dict) -> str:
    def one(key: str, limit: float) -> str:
        metric, pct, _ = key.split("_")
        value = f"{limit * 1000:g} ms" if limit < 1 else f"{limit:g} s"
        return f"{metric.upper()} {pct} ≤ {value}"

    return "; ".join(one(k, v) for k, v in slo.items())


def _title(title: str, slo: dict | None) -> str:
    from specsim.studies.plan_keepup import QUEUE_GROWTH_MAX, SERVED_TOL

    rule = (f"and keep up (serve ≥ {1 - SERVED_TOL:.0%} of the offered tokens, less sampling noise; TTFT growing "
            f"≤ {QUEUE_GROWTH_MAX * 1000:g} ms per s)")
    slos = f"fewest replicas meeting {_slo_text(slo)} " if slo else "fewest replicas "
    return (f"{title}\n" if title else "") + slos + rule


def _plain_axis(axis, values) -> None:
    import matplotlib.ticker as mt

    ticks = sorted({float(v) for v in values if v is not None and v > 0})
    if len(ticks) > 12:  # too many to label each: every other one
        ticks = ticks[::2]
    axis.set_major_locator(mt.FixedLocator(ticks))
    axis.set_major_formatter(mt.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(mt.NullFormatter())


def plot_plan(rows: list[dict], path: str | Path, title: str = "", slo: dict | None = None) -> Path | None:
    """Two panels (replicas needed; $/Mtok served at those replicas), solid = speculation, dashed = plain; None
    when no option has two rates (a replayed arrivals CSV gives one point per option: the table says it better)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keyed: dict = {}
    for r in rows:
        if r.get("rate") is not None:
            keyed.setdefault(f"{r['option']} (tp {r['tp']})", []).append(r)
    if not keyed or all(len(v) < 2 for v in keyed.values()):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.8))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = {0: [], 1: []}  # y values drawn per panel
    rates = sorted({r["rate"] for rs in keyed.values() for r in rs})
    n_lines = 2 * len(keyed)
    for i, (label, rs) in enumerate(keyed.items()):
        rs = sorted(rs, key=lambda r: r["rate"])
        col = colours[i % len(colours)]
        for j, (kind, style, marker, fill) in enumerate((("spec", "-", "o", col), ("baseline", "--", "s", "none"))):
            k = 2 * i + j
            shift = 2 ** (NUDGE * (k - (n_lines - 1) / 2))
            name = f"{label}, {'speculative' if kind == 'spec' else 'plain decoding'}"
            for p, key in enumerate((f"replicas_{kind}", f"usd_per_mtok_{kind}")):
                pts = [(r["rate"] * shift, r.get(key)) for r in rs]
                y = [b for _, b in pts if b is not None]
                if y:
                    axes[p].plot([a if b is not None else float("nan") for a, b in pts],
                                 [b if b is not None else float("nan") for _, b in pts], style, marker=marker,
                                 color=col, ms=5, mfc=fill, label=name)
                    drawn[p] += y
                missing = [a for a, b in pts if b is None]
                if missing:  # no answer at these rates: an x on the top edge
                    axes[p].plot(missing, [1.0] * len(missing), "x", color=col, ms=7, clip_on=False,
                                 transform=axes[p].get_xaxis_transform())
    _style(axes, drawn, rates)
    fig.text(0.5, 0.005, "× on the top edge: no answer at that rate (plan.csv says why); lines nudged sideways a "
                         "few % so coinciding ones show", ha="center", fontsize=7)
    fig.suptitle(_title(title, slo), fontsize=9)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _style(axes, drawn: dict, rates: list) -> None:
    """Plain-number axes; a panel with nothing drawn says there is no answer instead of log-scaling nothing."""
    for p, (ax, ylabel) in enumerate(((axes[0], "replicas (fewest that pass)"),
                                      (axes[1], "$ per million output tokens served"))):
        ax.set_xscale("log", base=2)
        _plain_axis(ax.xaxis, rates)
        ax.set_xlim(min(rates) / 2 ** 0.3, max(rates) * 2 ** 0.3)
        ax.set_xlabel("request rate (req/s, Poisson)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if not drawn[p]:
            ax.text(0.5, 0.5, "no feasible answer at any rate\n(plan.csv: why_not, why_not_baseline)",
                    ha="center", va="center", transform=ax.transAxes, fontsize=9)
            ax.set_yticks([])
    if drawn[0]:
        axes[0].set_yscale("log", base=2)
        top = max(drawn[0])
        powers = [2 ** k for k in range(0, int(top).bit_length() + 1)]
        _plain_axis(axes[0].yaxis, powers + (drawn[0] if len(set(drawn[0])) <= 8 else []))
        axes[0].set_ylim(2 ** -0.3, 2 ** (int(top).bit_length() + 0.1))
    if drawn[1] and min(drawn[1]) > 0:  # $/Mtok spans decades across rates: log, labelled 0.5, 1, 2, 5, …
        import matplotlib.ticker as mt

        axes[1].set_yscale("log")
        axes[1].yaxis.set_major_locator(mt.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes[1].yaxis.set_major_formatter(mt.FuncFormatter(lambda v, _: f"{v:g}"))
        axes[1].yaxis.set_minor_formatter(mt.NullFormatter())
    if drawn[0] or drawn[1]:
        axes[1 if drawn[1] else 0].legend(fontsize=7, loc="best")
