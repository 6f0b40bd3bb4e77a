"""Which step-table fit predicts a step measured at ANOTHER moment of the same block, over the decode sizes the
verification needs: a criterion without speculation (issue 24, session 18; a diagnosis, not the rule of record).

    .venv/bin/python experiments/vllm_holdout.py --out experiments/results/vllm_cpu_lockstep2 [--dst DIR]

Why (docs/validation.md): vllm_select.py's criterion predicts the plain grid runs, whose decodes carry 1-8 tokens;
its candidates sit within a fraction of a point there while their speculative predictions differ by a factor of
two, because a speculative run is priced mostly by steps of 4-48 tokens, measured in the block's calibration at
other moments than the pair. So: each block's calibration decodes are measured in rounds (vllm_blocks.calibration:
counts <= 8 three times, <= 16 twice, a third of a block apart). Hold out one round of one block's target decodes
(only counts measured in another round too, so no held-out count leaves the table), fit every candidate without
them (the block's own tables, or the pool without them, or the pool x the block's factor from what is left), and
predict each held-out run's median full decode step (its own steps, priced at their own KV context). The score:
median |error| over every held-out run of every block and round. Only cal-target runs are read (a test guards it).
Writes holdout.json to --dst (default: --out).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import vllm_analyze as va  # noqa: E402
from specsim.validation import host_scale as hs  # noqa: E402
from vllm_select import CANDIDATES  # noqa: E402

DEC = re.compile(r"^cal-dec(\d+)(?:-(\d+))?$")  # cal-decN (round 1), cal-decN-2, cal-decN-3


def decode_round(r: dict) -> tuple[int, int] | None:
    """(requests, round) of a calibration decode run, None for anything else."""
    m = DEC.match(str(r.get("point", "")))
    return (int(m.group(1)), int(m.group(2) or 1)) if m else None


def held_out_sets(runs: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """(block, round) -> that round's target decode runs whose count the block measured in another round too."""
    dec = [(r, *decode_round(r)) for r in runs if r.get("mode") == "cal-target" and decode_round(r)]
    rounds = Counter((r.get("block"), n) for r, n, _ in dec)
    out: dict = {}
    for r, n, j in dec:
        if r.get("block") and rounds[(r["block"], n)] > 1:
            out.setdefault((r["block"], j), []).append(r)
    return out


def run_error(table, r: dict, n: int) -> float | None:
    """Predicted / measured median of the run's full decode steps (n requests, no prefill) - 1."""
    steps = [s for s in r["steps"] if not s["ctx_requests"] and s["gen_requests"] == n and s["gen_tokens"] == n]
    if not steps:
        return None
    pred = float(np.median([hs.step_price(table, s) for s in steps]))
    return pred / float(np.median([s["time_s"] for s in steps])) - 1.0


def errors(runs: list[dict], fit: tuple) -> list[tuple[str, int, int, float]]:
    """(block, round, requests, error) for every held-out run under `fit`."""
    cal = [r for r in runs if r.get("mode") == "cal-target"]
    out = []
    for (b, j), held in sorted(held_out_sets(cal).items()):
        ids = {id(r) for r in held}
        rest = [r for r in cal if id(r) not in ids]
        pooled = va.fit_tables(rest, fit, None, ("target",)) if fit[2] != "block" else None
        (t,) = va.block_tables(rest, fit, b, pooled, ("target",))
        for r in held:
            n = decode_round(r)[0]
            e = run_error(t, r, n)
            if e is not None:
                out.append((b, j, n, e))
    return out


def summarize(errs: list[tuple[str, int, int, float]]) -> dict:
    a = np.array([abs(e) for *_, e in errs])
    small = np.array([abs(e) for _, _, n, e in errs if n <= 8])
    large = np.array([abs(e) for _, _, n, e in errs if n > 8])
    return {"held_out_runs": len(errs), "median_abs_err": float(np.median(a)),
            "median_abs_err_up_to_8": float(np.median(small)) if small.size else None,
            "median_abs_err_10_to_16": float(np.median(large)) if large.size else None,
            "median_err": float(np.median([e for *_, e in errs]))}


def holdout(out: Path, dst: Path | None = None, candidates: dict = CANDIDATES) -> dict:
    runs = [r for r in va.load_runs(out) if r.get("mode") == "cal-target"]
    if not held_out_sets(runs):
        raise SystemExit(f"vllm_holdout: {out / 'runs'} has no block whose target decodes were measured in more "
                         f"than one round (experiments/vllm_blocks.py calibration)")
    res = {name: summarize(errors(runs, fit)) for name, fit in candidates.items()}
    best = min(res, key=lambda n: res[n]["median_abs_err"])
    sel = {"lowest": best, "candidates": res, "criterion": "median |predicted / measured - 1| of held-out target "
           "decode runs (one round of one block at a time), fitted without them"}
    (out if dst is None else dst).joinpath("holdout.json").write_text(json.dumps(sel, indent=1, sort_keys=True))
    return sel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a results folder of experiments/vllm_cpu.py measure")
    ap.add_argument("--dst", type=Path, help="where holdout.json goes (default: --out)")
    a = ap.parse_args()
    if a.dst:
        a.dst.mkdir(parents=True, exist_ok=True)
    sel = holdout(a.out, a.dst)
    for name, r in sorted(sel["candidates"].items(), key=lambda x: x[1]["median_abs_err"]):
        print(f"{name:64s} {r['median_abs_err']:.2%} (<= 8: {r['median_abs_err_up_to_8']:.2%}, 10-16: "
              f"{r['median_abs_err_10_to_16']:.2%}; median {r['median_err']:+.2%}) over {r['held_out_runs']} runs")
    print(f"lowest: {sel['lowest']}")


if __name__ == "__main__":
    main()
