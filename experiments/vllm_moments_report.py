"""moments.md and moments.png of experiments/vllm_moments.py: the same runs priced by the block's tables and at each
pair's own moment, side by side, every point with its measured spread."""

from __future__ import annotations

from pathlib import Path

import numpy as np

NAMES = {"tables": "block tables (as vllm_analyze.py)", "moment": "at the pair's own moment"}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _summary_rows(res: dict) -> list[str]:
    rows = ["| pricing | throughput ratio: median (max) abs. error | TPOT ratio | paired (thr. / TPOT) | "
            "spec TTFT / TPOT p50 median abs. error | cells beyond 10% (of points) |", "|---|---|---|---|---|---|"]
    for name, label in NAMES.items():
        r = res[name]
        c = r["cells_over_10"]
        rows.append(f"| {label} | {_pct(r['median_abs_err_speedup_throughput'])} "
                    f"({_pct(r['max_abs_err_speedup_throughput'])}) | {_pct(r['median_abs_err_speedup_tpot'])} "
                    f"({_pct(r['max_abs_err_speedup_tpot'])}) | {_pct(r['median_abs_paired_err_speedup_throughput'])}"
                    f" / {_pct(r['median_abs_paired_err_speedup_tpot'])} | "
                    f"{_pct(_med(r, 'spec_ttft_p50_s'))} / {_pct(_med(r, 'spec_tpot_p50_s'))} | "
                    f"speedups {c['speedup_throughput']} + {c['speedup_tpot']}, spec p50 {c['spec_ttft_p50_s']} + "
                    f"{c['spec_tpot_p50_s']} (of {c['points']}) |")
    return rows


def _med(r: dict, key: str) -> float:
    return float(np.median([abs(p[f"err_{key}"]) for p in r["points"]]))


def _variant_rows(res: dict) -> list[str]:
    rows = ["| variant | alpha | tables: thr. / TPOT ratio median | moment: thr. / TPOT ratio median | break-even "
            "closed: measured / tables / moment | Poisson: measured / tables / moment |", "|---|---|---|---|---|---|"]
    for v, t in res["tables"]["variants"].items():
        m = res["moment"]["variants"][v]
        rows.append(f"| {v} | {t['alpha']:.3f} | {_pct(t['median_abs_err_speedup_throughput'])} / "
                    f"{_pct(t['median_abs_err_speedup_tpot'])} | {_pct(m['median_abs_err_speedup_throughput'])} / "
                    f"{_pct(m['median_abs_err_speedup_tpot'])} | {t['break_even_closed_measured']} / "
                    f"{t['break_even_closed_predicted']} / {m['break_even_closed_predicted']} | "
                    f"{t['break_even_poisson_measured']} / {t['break_even_poisson_predicted']} / "
                    f"{m['break_even_poisson_predicted']} |")
    return rows


def _point_rows(res: dict) -> list[str]:
    rows = ["| variant | point | repeats | measured thr. ratio (min-max) | tables (err) | moment (err) | measured TPOT "
            "ratio (min-max) | tables (err) | moment (err) |", "|---|---|---|---|---|---|---|---|---|"]
    mom = {(p["variant"], p["point"]): p for p in res["moment"]["points"]}
    for p in res["tables"]["points"]:
        q = mom[(p["variant"], p["point"])]
        cells = []
        for key in ("speedup_throughput", "speedup_tpot"):
            cells.append(f"{p[f'meas_{key}']:.3f} ({p[f'meas_{key}_min']:.3f}-{p[f'meas_{key}_max']:.3f}) | "
                         f"{p[f'pred_{key}']:.3f} ({100 * p[f'err_{key}']:+.1f}%) | "
                         f"{q[f'pred_{key}']:.3f} ({100 * q[f'err_{key}']:+.1f}%)")
        rows.append(f"| {p['variant']} | {p['point']} | {p['repeats']} | " + " | ".join(cells) + " |")
    return rows


def _spread(res: dict) -> str:
    t = res["tables"]
    if all(p["repeats"] == 1 for p in t["points"]):
        return "One repeat per point: no measured spread here (the record's points show theirs)."
    return (f"Measured spread between repeats ((max - min) / median of a point): throughput ratio "
            f"{_pct(t['median_spread_speedup_throughput'])} (max {_pct(t['max_spread_speedup_throughput'])}), TPOT "
            f"ratio {_pct(t['median_spread_speedup_tpot'])} (max {_pct(t['max_spread_speedup_tpot'])}).")


def report(dst: Path, res: dict) -> None:
    f = res["f_ref"]
    lines = [
        "# Each grid pair priced at its own moment (experiments/vllm_moments.py)", "",
        f"{res['runs']} grid runs of {len(res['blocks'])} blocks ({', '.join(res['blocks'])}); fit: **{res['fit']}** "
        f"(from `{res['fit_from']}`), each block's tables as its pool says. At the pair's moment: every table times "
        f"f_ref ** min(1, (T / t_ref) ** -beta) (specsim.validation.host_scale.ShapedHostTable), f_ref and t_ref "
        f"from the pair's plain run ({f['pairs']} plain runs: f_ref {f['min']:.3f}-{f['max']:.3f}, median "
        f"{f['median']:.3f}), beta = {res['beta']:.3f} from the shape probe's elasticity {res['elasticity']:.3f} "
        f"({res['probe_repeats']} repeats, no speculation). The plain runs' own absolute times are priced at their "
        f"own factor here (close by construction): vllm_analyze.py scores them from the tables alone.", "",
        *_summary_rows(res), "",
        _spread(res), "", *_variant_rows(res), "", *_point_rows(res), "",
        "![measured vs predicted speedup](moments.png)", ""]
    (dst / "moments.md").write_text("\n".join(lines))


def plot(dst: Path, res: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, key, title in zip(axes, ("speedup_throughput", "speedup_tpot"), ("throughput ratio", "TPOT-p50 ratio")):
        lo, hi = 10.0, 0.0
        for name, marker in (("tables", "o"), ("moment", "s")):
            ps = res[name]["points"]
            x = [p[f"meas_{key}"] for p in ps]
            y = [p[f"pred_{key}"] for p in ps]
            ax.scatter(x, y, marker=marker, s=28, alpha=0.75, label=NAMES[name])
            lo, hi = min(lo, *x, *y), max(hi, *x, *y)
        ps = res["tables"]["points"]
        ax.errorbar([p[f"meas_{key}"] for p in ps], [p[f"meas_{key}"] for p in ps], fmt="none", ecolor="0.6",
                    xerr=[[p[f"meas_{key}"] - p[f"meas_{key}_min"] for p in ps],
                          [p[f"meas_{key}_max"] - p[f"meas_{key}"] for p in ps]], lw=0.8)
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for s in (0.9, 1.1):
            ax.plot([lo, hi], [s * lo, s * hi], "k:", lw=0.6)
        ax.set(xlabel=f"measured speedup ({title}); grey: min-max over repeats", ylabel="predicted", title=title)
        ax.legend(fontsize=8)
    fig.suptitle("vLLM 0.32 on this CPU: speculative speedup, predicted vs measured (dotted: +-10%)", fontsize=10)
    fig.tight_layout()
    fig.savefig(dst / "moments.png", dpi=110)
    plt.close(fig)
