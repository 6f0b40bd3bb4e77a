"""Each grid pair priced by a calibration measured at its own moment, at the sizes its steps have, without
speculation (issue 24, session 19).

    .venv/bin/python experiments/vllm_moment_cal.py --out experiments/results/vllm_cpu_lockstep2 \\
        [--fit-from SEL.json] [--blocks 'r11-*'] [--report DIR]

Why (docs/validation.md, sessions 17-18): the tables are measured at other moments of the block than the pair they
price, and on this host a moment does not move small and large steps alike; the speedup rests on the ratio of a
pair's large steps (a verification: requests x (k + 1) tokens) to its small ones (a decode of that many requests).
Session 18 carried the plain run's factor to larger steps by a shape fitted on a probe (vllm_moments.py); here the
ratio is measured. Blocks measured with `measure --moment-cal` run, right after each grid pair, three runs without
speculation (experiments/vllm_blocks.py moment_points): the target's decode of the pair's request count c, the
target's steps of c requests x (k + 1) tokens (prefill chunks capped by the scheduler's long-prefill threshold), the
draft's decode of c requests. Each run's full-size steps give a factor, measured / the fit's price (its median):
the target's table is wrapped in host_scale.TwoPointHostTable (f_dec at c tokens, f_ver at c (k + 1), log-linear
between), the draft's in ScaledTable(f_draft); both runs of the pair are priced with them. A pair without its
moment runs (blocks measured before) keeps its block's tables and is counted. Nothing speculative sets a factor,
and the grid runs themselves are never read for one. Writes moment_cal.json and moment_cal.md to --report.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import vllm_analyze as va  # noqa: E402
import vllm_scores as vs  # noqa: E402
from specsim.validation import host_scale as hs  # noqa: E402
from vllm_blocks import MOMENT  # noqa: E402
from vllm_moments import cells_over, priced_by_fit  # noqa: E402

MIN_STEPS = 3  # full-size steps a moment run needs to give a factor


def sized_steps(run: dict, requests: int, tokens: int) -> list[dict]:
    """The run's steps of exactly `requests` requests and `tokens` tokens (a moment run's full-size steps)."""
    return [s for s in run["steps"] if s["ctx_requests"] + s["gen_requests"] == requests
            and s["ctx_tokens"] + s["gen_tokens"] == tokens]


def moment_factors(runs: dict, block: str, point: str, t, d) -> dict | None:
    """{c, m, f_dec, f_ver, f_draft, steps} of one pair's moment runs priced by tables (t, d); None where a run is
    missing or has fewer than MIN_STEPS full-size steps."""
    dec, ver = runs.get(("cal-target", f"{MOMENT}-dec-{point}", block)), runs.get(
        ("cal-target", f"{MOMENT}-ver-{point}", block))
    ddec = runs.get(("cal-draft", f"{MOMENT}-dec-{point}", block))
    if not (dec and ver and ddec):
        return None
    c, m = int(ver["config"]["concurrency"]), int(ver["config"]["long_prefill_token_threshold"])
    parts = {"f_dec": (t, sized_steps(dec, c, c)), "f_ver": (t, sized_steps(ver, c, c * m)),
             "f_draft": (d, sized_steps(ddec, c, c))}
    if any(len(st) < MIN_STEPS for _, st in parts.values()) or not ver["config"].get("threshold_applied", c == 1):
        return None
    out = {k: hs.host_factor(tab, st, f"{block} {point}") for k, (tab, st) in parts.items()}
    return out | {"c": c, "m": m, "steps": {k: len(st) for k, (_, st) in parts.items()}}


def moment_runs(runs: list[dict]) -> dict:
    """The moment runs (experiments/vllm_blocks.py MOMENT) by (mode, point, block)."""
    return {(r["mode"], r["point"], r.get("block")): r for r in runs
            if str(r.get("point", "")).startswith(MOMENT) and r.get("mode") in va.CAL.values()}


def moment_pick(every: list[dict], tabs: dict, factors: dict):
    """run -> (target, draft) tables at its pair's moment; a pair without moment runs keeps its block's tables.
    Fills `factors` ((block, point) -> moment_factors or None)."""
    mom = moment_runs(every)
    made: dict = {}

    def pick(r):
        t, d = tabs.get(r.get("block"), tabs[None])
        key = (r.get("block"), r["point"])
        if key not in made:
            f = factors[key] = moment_factors(mom, *key, t, d) if key[0] else None
            made[key] = (t, d) if f is None else (
                hs.TwoPointHostTable(t, (f["c"], f["f_dec"]), (f["c"] * f["m"], f["f_ver"])),
                hs.ScaledTable(d, f["f_draft"]))
        return made[key]

    return pick


def analyze(out: Path, dst: Path | None = None, blocks: list[str] | None = None, fit_from: Path | None = None) -> dict:
    dst = out if dst is None else dst
    dst.mkdir(parents=True, exist_ok=True)
    every, grid, sel, tabs, (tt, td) = priced_by_fit(out, blocks, fit_from, "vllm_moment_cal")
    factors: dict = {}
    res = {"fit": sel["chosen"], "fit_from": sel["fixed_from"], "runs": len(grid),
           "blocks": sorted({r["block"] for r in grid if r.get("block")})}
    for name, pick in (("tables", lambda r: tabs.get(r.get("block"), tabs[None])),
                       ("moment", moment_pick(every, tabs, factors))):
        rows, points = va._scored(out, grid, pick)
        res[name] = vs.summarize(points, grid, tt, td) | {"points": points, "cells_over_10": cells_over(points)}
    got = {f"{b} {p}": f for (b, p), f in sorted(factors.items()) if f is not None}
    if not got:
        raise SystemExit(f"vllm_moment_cal: no grid pair in {out / 'runs'} has its moment runs (measure with "
                         f"--moment-cal; experiments/vllm_blocks.py moment_points)")
    res["factors"], res["pairs_without_moment"] = got, sorted(f"{b} {p}" for (b, p), f in factors.items() if f is None)
    (dst / "moment_cal.json").write_text(json.dumps(res, indent=1, default=float, sort_keys=True))
    (dst / "moment_cal.md").write_text(report(res))
    return res


def report(res: dict) -> str:
    """moment_cal.md: the summary of both pricings, every point, every pair's factors."""
    lines = ["# Each grid pair priced by a calibration at its own moment (experiments/vllm_moment_cal.py)", "",
             f"{res['runs']} grid runs of {', '.join(res['blocks'])}; fit **{res['fit']}** (`{res['fit_from']}`). "
             f"Pairs without moment runs (priced by the tables alone): {len(res['pairs_without_moment'])}.", "",
             "| pricing | throughput ratio median (max) | TPOT ratio median (max) | spec p50 cells beyond 10% |",
             "|---|---|---|---|"]
    for name in ("tables", "moment"):
        r, c = res[name], res[name]["cells_over_10"]
        lines.append(f"| {name} | {r['median_abs_err_speedup_throughput']:.1%} "
                     f"({r['max_abs_err_speedup_throughput']:.1%}) | {r['median_abs_err_speedup_tpot']:.1%} "
                     f"({r['max_abs_err_speedup_tpot']:.1%}) | "
                     f"{c['spec_ttft_p50_s'] + c['spec_tpot_p50_s']} of {2 * c['points']} |")
    lines += ["", "| variant | point | measured thr. / TPOT ratio | tables (err) | moment (err) |",
              "|---|---|---|---|---|"]
    mom = {(p["variant"], p["point"]): p for p in res["moment"]["points"]}
    for p in res["tables"]["points"]:
        q = mom[(p["variant"], p["point"])]
        cells = [f"{x[f'pred_speedup_{k}']:.3f} ({x[f'err_speedup_{k}']:+.1%})" for x in (p, q)
                 for k in ("throughput", "tpot")]
        lines.append(f"| {p['variant']} | {p['point']} | {p['meas_speedup_throughput']:.3f} / "
                     f"{p['meas_speedup_tpot']:.3f} | {cells[0]} / {cells[1]} | {cells[2]} / {cells[3]} |")
    lines += ["", "| pair | c x (k + 1) | f_dec | f_ver | f_draft | steps (dec / ver / draft) |",
              "|---|---|---|---|---|---|"]
    for pair, f in res["factors"].items():
        s = f["steps"]
        lines.append(f"| {pair} | {f['c']} x {f['m']} | {f['f_dec']:.3f} | {f['f_ver']:.3f} | {f['f_draft']:.3f} | "
                     f"{s['f_dec']} / {s['f_ver']} / {s['f_draft']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a results folder of experiments/vllm_cpu.py measure")
    ap.add_argument("--fit-from", type=Path, help="the table_selection.json whose fit prices the runs (default: "
                    "OUT/table_selection.json)")
    ap.add_argument("--blocks", nargs="+", help="only these blocks' grid runs (glob patterns, e.g. 'r11-*')")
    ap.add_argument("--report", type=Path, help="where moment_cal.{json,md} go (default: --out)")
    a = ap.parse_args()
    res = analyze(a.out, a.report, a.blocks, a.fit_from)
    for name in ("tables", "moment"):
        r = res[name]
        print(f"{name:7s}: speedup error throughput ratio {r['median_abs_err_speedup_throughput']:.1%} (max "
              f"{r['max_abs_err_speedup_throughput']:.1%}), TPOT ratio {r['median_abs_err_speedup_tpot']:.1%} (max "
              f"{r['max_abs_err_speedup_tpot']:.1%})")


if __name__ == "__main__":
    main()
