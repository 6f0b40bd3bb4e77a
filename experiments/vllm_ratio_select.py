"""Which step-table fit prices the ratios a speedup rests on, measured at one moment without speculation: a fit
criterion on the moment runs (issue 24, session 19; a diagnosis, not the rule of record).

    .venv/bin/python experiments/vllm_ratio_select.py --out experiments/results/vllm_cpu_lockstep2 [--dst DIR]

Why (docs/validation.md): a pair's speedup is, step for step, the speculative step over the plain one: the
target's verification (c requests x (k + 1) tokens) plus the draft's passes (c tokens), over the target's decode of
c tokens. vllm_select.py's criterion (plain TTFT / TPOT) and vllm_holdout.py's (held-out decodes) both score
absolute steps measured at other moments, and both prefer the fits whose speculative record is worse. The moment
runs (experiments/vllm_blocks.py moment_points, blocks measured with --moment-cal) measure, seconds apart on
engines without speculation, the three steps of that ratio. For each candidate of vllm_select.py and each pair
with moment runs: f_dec, f_ver, f_draft = measured / the candidate's price (vllm_moment_cal.moment_factors); the
candidate's error on the verification-over-decode ratio is f_ver / f_dec - 1, on the draft-over-decode ratio
f_draft / f_dec - 1 (a host factor common to the moment cancels). Score: the mean of the two medians of |error|
over every pair. Only moment runs (mode cal-target / cal-draft) and the tables' calibration are read.
Writes ratio_selection.json and table_selection_ratio_lowest.json (its lowest, for `analyze --fit-from`) to
--dst (default: --out).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import vllm_analyze as va  # noqa: E402
from vllm_blocks import MOMENT  # noqa: E402
from vllm_moment_cal import moment_factors, moment_runs  # noqa: E402
from vllm_select import CANDIDATES  # noqa: E402


def pairs_with_moments(runs: list[dict]) -> tuple[dict, list[tuple[str, str]]]:
    """(moment runs by (mode, point, block), the (block, grid point) of every pair that has a target ver run)."""
    mom = moment_runs(runs)
    pairs = sorted({(b, p[len(f"{MOMENT}-ver-"):]) for m, p, b in mom if b and p.startswith(f"{MOMENT}-ver-")})
    return mom, pairs


def ratio_errors(runs: list[dict], fit: tuple) -> list[dict]:
    """Per pair with usable moment runs: its two ratio errors under `fit` (tables as the fit's pool gives them)."""
    mom, pairs = pairs_with_moments(runs)
    cal = [r for r in runs if r.get("mode") in va.CAL.values()]
    pooled = va.fit_tables(cal, fit) if fit[2] != "block" else None
    tabs = {b: va.block_tables(cal, fit, b, pooled) for b in sorted({b for b, _ in pairs})}
    out = []
    for b, p in pairs:
        f = moment_factors(mom, b, p, *tabs[b])
        if f is not None:
            out.append({"pair": f"{b} {p}", "ver_over_dec": f["f_ver"] / f["f_dec"] - 1.0,
                        "draft_over_dec": f["f_draft"] / f["f_dec"] - 1.0})
    return out


def summarize(errs: list[dict]) -> dict:
    ver = float(np.median([abs(e["ver_over_dec"]) for e in errs]))
    dra = float(np.median([abs(e["draft_over_dec"]) for e in errs]))
    return {"pairs": len(errs), "median_abs_err_ver_over_dec": ver, "median_abs_err_draft_over_dec": dra,
            "median_err_ver_over_dec": float(np.median([e["ver_over_dec"] for e in errs])),
            "median_err_draft_over_dec": float(np.median([e["draft_over_dec"] for e in errs])),
            "score": (ver + dra) / 2}


def ratio_select(out: Path, dst: Path | None = None, candidates: dict = CANDIDATES) -> dict:
    runs = [r for r in va.load_runs(out) if r.get("mode") in va.CAL.values()]
    if not pairs_with_moments(runs)[1]:
        raise SystemExit(f"vllm_ratio_select: {out / 'runs'} has no moment runs (measure with --moment-cal; "
                         f"experiments/vllm_blocks.py moment_points)")
    res = {}
    for name, fit in candidates.items():
        errs = ratio_errors(runs, fit)
        if not errs:
            raise SystemExit(f"vllm_ratio_select: no pair in {out / 'runs'} has moment runs with at least "
                             f"3 full-size steps each")
        res[name] = summarize(errs)
    best = min(res, key=lambda n: res[n]["score"])
    sel = {"lowest": best, "candidates": res, "criterion": "mean of the medians of |f_ver / f_dec - 1| and "
           "|f_draft / f_dec - 1| over every pair's moment runs (no speculation)"}
    dst = out if dst is None else dst
    dst.joinpath("ratio_selection.json").write_text(json.dumps(sel, indent=1, sort_keys=True))
    kind, monotone, pool, kv = candidates[best]  # the lowest as a selection file analyze --fit-from reads
    dst.joinpath("table_selection_ratio_lowest.json").write_text(json.dumps(
        {"chosen": best, "kind": kind, "monotone": monotone, "pool": pool, "kv": kv, "criterion": sel["criterion"]},
        indent=1, sort_keys=True))
    return sel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a results folder of experiments/vllm_cpu.py measure")
    ap.add_argument("--dst", type=Path, help="where ratio_selection.json goes (default: --out)")
    a = ap.parse_args()
    if a.dst:
        a.dst.mkdir(parents=True, exist_ok=True)
    sel = ratio_select(a.out, a.dst)
    for name, r in sorted(sel["candidates"].items(), key=lambda x: x[1]["score"]):
        print(f"{name:64s} {r['score']:.2%} (ver/dec {r['median_abs_err_ver_over_dec']:.2%}, median "
              f"{r['median_err_ver_over_dec']:+.2%}; draft/dec {r['median_abs_err_draft_over_dec']:.2%}, median "
              f"{r['median_err_draft_over_dec']:+.2%}) over {r['pairs']} pairs")
    print(f"lowest: {sel['lowest']}")


if __name__ == "__main__":
    main()
