"""Each grid pair priced at its own moment: the plain run's host factor, carried to the speculative run's larger
steps by the host's shape as measured without speculation (issue 24, session 18).

    .venv/bin/python experiments/vllm_moments.py --out experiments/results/vllm_cpu_lockstep2 \\
        [--fit-from SEL.json] [--blocks 'r9-*'] [--report DIR]

Why (docs/validation.md, session 17): on this host a moment's speed does not move every step size alike. Without
any speculation (experiments/vllm_shape_probe.py, 12 repeats) a 32-token decode step moved about half as much as an
8-token one (d log t32 / d log t8 = 0.52), and across the campaign's blocks the speculative / plain step ratio of a
lockstep pair fell as the pair's plain step grew. A table measured at other moments, rescaled by one factor for
every size (or none), cannot carry the pair's moment; the pair's own plain run measures that moment, on small steps.

How: every run is priced as experiments/vllm_analyze.py prices it (the fit the selection file names, per block as
its pool says), each table wrapped in specsim.validation.host_scale.ShapedHostTable with
- f_ref = host_factor(target table, the pair's plain run's steps): the moment, measured without speculation;
- t_ref = the plain run's median step size in tokens;
- beta = -ln(e) / ln(32 / 8), e the shape probe's elasticity, recomputed from its committed runs.
Both runs of a pair and both models get the same moment (the draft's steps are as small as the plain ones). Nothing
speculative sets f_ref, t_ref or beta. What this scores: the speculative run predicted from its own moment's costs
without speculation. What it does not: the plain run's absolute times (priced at their own factor they sit close to
the measurement by construction; vllm_analyze.py scores them from the tables alone). Writes moments.json,
moments.md and moments.png to --report (default: --out).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import vllm_analyze as va  # noqa: E402
import vllm_scores as vs  # noqa: E402
from specsim.validation import host_scale as hs  # noqa: E402
from vllm_host_shape import full_steps, shape_stats  # noqa: E402
from vllm_select import fixed  # noqa: E402

PROBE = ROOT / "experiments" / "results" / "vllm_shape_probe"
LARGE, SMALL = 32, 8  # the shape probe's two decode sizes (experiments/vllm_shape_probe.py)


def probe_beta(probe: Path = PROBE) -> tuple[float, float, int]:
    """(elasticity, beta, repeats) from the shape probe's committed runs: two target-alone engines in lockstep,
    32- and 8-request decodes; beta is the power of tokens the host's log-factor falls with."""
    pairs = []
    for a in sorted((probe / "runs").glob("A__r*.json")):
        b = a.with_name("B" + a.name[1:])
        if b.exists():
            pairs.append((json.loads(a.read_text()), json.loads(b.read_text())))
    if len(pairs) < 3:
        raise SystemExit(f"vllm_moments: {probe / 'runs'}: {len(pairs)} shape-probe repeats (A__rN.json with "
                         f"B__rN.json), need at least 3; run experiments/vllm_shape_probe.py --out {probe}")
    large = np.array([full_steps(a, LARGE) for a, _ in pairs], float)
    small = np.array([full_steps(b, SMALL) for _, b in pairs], float)
    el = shape_stats(small, large)[2]
    if not 0 < el <= 1:
        raise SystemExit(f"vllm_moments: shape-probe elasticity {el:.3f} is outside (0, 1]: a large step moving more "
                         f"than a small one is not what ShapedHostTable models")
    return el, -math.log(el) / math.log(LARGE / SMALL), len(pairs)


def moment_of(run: dict, target) -> tuple[float, float]:
    """(f_ref, t_ref) of a plain run: its measured / `target`-priced steps (median), its median step in tokens."""
    steps = [s for s in run["steps"] if s["ctx_tokens"] + s["gen_tokens"] > 0]
    f = hs.host_factor(target, steps, run.get("_file", "plain run"))
    return f, float(np.median([s["ctx_tokens"] + s["gen_tokens"] for s in steps]))


def moment_pick(runs: list[dict], tabs: dict, beta: float, moments: dict):
    """run -> (target, draft) tables at the moment of the run's pair (its plain partner in the same block); a run
    without a plain partner keeps its block's tables. Fills `moments` (plain run file -> (f_ref, t_ref))."""
    plain = {(r["point"], va._unit(r)): r for r in runs if r.get("mode") == "plain"}
    shaped: dict = {}

    def pick(r):
        t, d = tabs.get(r.get("block"), tabs[None])
        p = plain.get((r["point"], va._unit(r)))
        if p is None:
            return t, d
        if p["_file"] not in shaped:
            f, tref = moments[p["_file"]] = moment_of(p, t)
            shaped[p["_file"]] = (hs.ShapedHostTable(t, f, tref, beta), hs.ShapedHostTable(d, f, tref, beta))
        return shaped[p["_file"]]

    return pick


def priced_by_fit(out: Path, blocks: list[str] | None, fit_from: Path | None, who: str) -> tuple:
    """(every run, the grid runs of `blocks`, the selection, tables by block under its fit, session 12's tables for
    the closed-form baseline): what a pricing beside vllm_analyze.py starts from."""
    every = va.load_runs(out)
    cal = [r for r in every if r.get("mode") in va.CAL.values()]
    grid = [r for r in every if r.get("mode") not in va.CAL.values()
            and (not blocks or any(fnmatch.fnmatch(r.get("block") or "", b) for b in blocks))]
    if not grid:
        raise SystemExit(f"{who}: no grid runs in {out / 'runs'}" + (f" of blocks {blocks}" if blocks else ""))
    sel = fixed(fit_from or out / "table_selection.json")
    fit = (sel["kind"], sel["monotone"], sel["pool"], sel["kv"])
    return every, grid, sel, va.tables_by_block(grid + cal, fit), va.fit_tables(grid + cal, va.SESSION12)


def analyze(out: Path, dst: Path | None = None, blocks: list[str] | None = None, fit_from: Path | None = None,
            probe: Path = PROBE) -> dict:
    dst = out if dst is None else dst
    dst.mkdir(parents=True, exist_ok=True)
    _, grid, sel, tabs, (tt, td) = priced_by_fit(out, blocks, fit_from, "vllm_moments")
    el, beta, reps = probe_beta(probe)
    moments: dict = {}
    res = {"fit": sel["chosen"], "fit_from": sel["fixed_from"], "elasticity": el, "beta": beta, "probe_repeats": reps,
           "blocks": sorted({r["block"] for r in grid if r.get("block")}), "runs": len(grid)}
    for name, pick in (("tables", lambda r: tabs.get(r.get("block"), tabs[None])),
                       ("moment", moment_pick(grid, tabs, beta, moments))):
        rows, points = va._scored(out, grid, pick)
        res[name] = vs.summarize(points, grid, tt, td) | {"points": points, "cells_over_10": cells_over(points)}
    f = np.array([m[0] for m in moments.values()])
    if not f.size:
        raise SystemExit(f"vllm_moments: no grid pair in {out / 'runs'} has a plain run to measure its moment")
    res["f_ref"] = {"pairs": len(f), "min": float(f.min()), "median": float(np.median(f)), "max": float(f.max())}
    (dst / "moments.json").write_text(json.dumps(res, indent=1, default=float, sort_keys=True))
    from vllm_moments_report import plot, report  # experiments/vllm_moments_report.py

    report(dst, res)
    plot(dst, res)
    return res


def cells_over(points: list[dict], limit: float = 0.10) -> dict:
    """How many (point, metric) cells of the speculative p50 times and the two speedups are beyond `limit`."""
    keys = ("speedup_throughput", "speedup_tpot", "spec_ttft_p50_s", "spec_tpot_p50_s")
    return {k: sum(1 for p in points if abs(p[f"err_{k}"]) > limit) for k in keys} | {"points": len(points)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a results folder of experiments/vllm_cpu.py measure")
    ap.add_argument("--fit-from", type=Path, help="the table_selection.json whose fit prices the runs (default: "
                    "OUT/table_selection.json)")
    ap.add_argument("--blocks", nargs="+", help="only these blocks' grid runs (glob patterns, e.g. 'r9-*')")
    ap.add_argument("--report", type=Path, help="where moments.{json,md,png} go (default: --out)")
    ap.add_argument("--probe", type=Path, default=PROBE, help="the shape probe's results folder")
    a = ap.parse_args()
    res = analyze(a.out, a.report, a.blocks, a.fit_from, a.probe)
    for name in ("tables", "moment"):
        r = res[name]
        print(f"{name:7s}: speedup error throughput ratio {r['median_abs_err_speedup_throughput']:.1%} (max "
              f"{r['max_abs_err_speedup_throughput']:.1%}), TPOT ratio {r['median_abs_err_speedup_tpot']:.1%} (max "
              f"{r['max_abs_err_speedup_tpot']:.1%}); paired {r['median_abs_paired_err_speedup_throughput']:.1%} / "
              f"{r['median_abs_paired_err_speedup_tpot']:.1%}")


if __name__ == "__main__":
    main()
