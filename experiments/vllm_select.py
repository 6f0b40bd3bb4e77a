"""Which step-table fit the vLLM analysis uses, chosen on runs WITHOUT speculation only.

    .venv/bin/python experiments/vllm_select.py --out experiments/results/vllm_cpu_lockstep2 [--blocks 'r[0-4]-*']

Why (issue 24, session 13): on this CPU the target's decode step is not monotone in its size (2-3 tokens slower
than 4-6, in the plain runs as in the calibration: docs/validation.md), so whether a fit may keep such dips, and
whether steps are priced along tokens alone or along (tokens, requests), is a modelling choice. It is made here on
what the speedup's prediction never compares against: every plain grid run (target alone, no drafts) is predicted
with each candidate's tables, and the candidate with the lowest score wins:

    score = (median |TPOT p50 error| + median |TTFT p50 error|) / 2    over every plain grid run

Candidates: token-only or (tokens, requests) table (`specsim.validation.request_table`), each monotone (isotonic)
or with the per-count medians as measured; each fitted on the run's own block's calibration (session 13's four), on
every block's calibration ("pooled", session 14), or on every block's times the block's host factor ("pooled x
block host factor", session 14: specsim/validation/host_scale.py; a shape from hundreds of steps per count, a
scale from the block). The criterion is session 13's, unchanged. Nothing speculative is read: the runs' modes are
filtered to "plain", "cal-target" and "cal-draft" before anything else. Writes table_selection.json beside the runs.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import vllm_analyze as va  # noqa: E402
from vllm_predict import predict  # noqa: E402

FITS = {"token, monotone": ("token", True), "token, as measured": ("token", False),
        "requests, monotone": ("request", True), "requests, as measured": ("request", False)}
# how a block's runs are priced (experiments/vllm_analyze.py tables_by_block); the unsuffixed names are session
# 13's candidates (its committed table_selection.json files name them), all per block
POOL_NAMES = {"block": "", "pooled": ", pooled", "scaled": ", pooled x block host factor"}
# what the KV slope multiplies (specsim/validation/step_fit.py KV_MEASURES): unsuffixed = cached tokens (sessions
# 12-14); "attended KV" = query x key pairs (session 15)
KV_NAMES = {"context": "", "attended": ", attended KV"}
CANDIDATES = {name + suffix + ks: (*fit, pool, kv) for kv, ks in KV_NAMES.items() for pool, suffix in POOL_NAMES.items()
              for name, fit in FITS.items()}


def score(out: Path, runs: list[dict], fit: tuple[str, bool, str, str]) -> dict:
    """Per plain run: relative error of TPOT p50 and TTFT p50, each run priced by the target table the fit gives
    its block (`vllm_analyze.tables_by_block`; the pooled one for a run outside the block protocol)."""
    tables = va.tables_by_block(runs, fit, ("target",))
    tpot, ttft = [], []
    for r in (r for r in runs if r.get("mode") == "plain"):
        t = tables.get(r.get("block"), tables[None])[0]
        p, m = predict(r, r["cfg"], t, None, va.kv_blocks(out, r)), va.measured(r)
        tpot.append(p["tpot_p50"] / m["tpot_p50"] - 1.0)
        ttft.append(p["ttft_p50"] / m["ttft_p50"] - 1.0)
    if not tpot:
        raise SystemExit(f"vllm_select: no plain runs in {out} to choose a step-table fit on")
    a, b = np.abs(tpot), np.abs(ttft)
    return {"runs": len(tpot), "median_abs_err_tpot_p50": float(np.median(a)),
            "median_abs_err_ttft_p50": float(np.median(b)), "score": float((np.median(a) + np.median(b)) / 2),
            "median_err_tpot_p50": float(np.median(tpot)), "median_err_ttft_p50": float(np.median(ttft))}


def select(out: Path, runs: list[dict] | None = None, dst: Path | None = None, blocks: bool = False) -> dict:
    """The chosen fit (lowest score) and every candidate's score; `runs` (as vllm_analyze.load_runs) are filtered
    to plain and calibration runs first, so nothing speculative is read."""
    runs = [r for r in (va.load_runs(out) if runs is None else runs)
            if r.get("mode") in ("plain", "cal-target", "cal-draft")]
    res = {name: score(out, runs, fit) for name, fit in CANDIDATES.items()}
    best = min(res, key=lambda n: res[n]["score"])
    kind, monotone, pool, kv = CANDIDATES[best]
    sel = {"chosen": best, "kind": kind, "monotone": monotone, "pool": pool, "kv": kv, "candidates": res,
           "criterion": "lowest (median |TPOT p50 err| + median |TTFT p50 err|) / 2 over plain grid runs"}
    if blocks:  # chosen on some blocks only (--blocks): say which
        sel["chosen_on_blocks"] = sorted({r["block"] for r in runs if r.get("block")})
    (out if dst is None else dst).joinpath("table_selection.json").write_text(json.dumps(sel, indent=1,
                                                                                          sort_keys=True))
    return sel


def fixed(path: Path) -> dict:
    """The fit a committed table_selection.json chose (to score blocks measured after that choice with it)."""
    try:
        sel = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"vllm_select: {path}: not a readable table_selection.json "
                         f"({e.__class__.__name__}: {e})") from None
    chosen = sel.get("chosen") if isinstance(sel, dict) else None
    got = (sel.get("kind"), sel.get("monotone"), sel.get("pool", "block"), sel.get("kv", "context")) \
        if isinstance(sel, dict) else None
    if chosen not in CANDIDATES or CANDIDATES[chosen] != got:
        raise SystemExit(f"vllm_select: {path}: chosen = {chosen!r} (kind, monotone, pool, kv) {got} is not one of "
                         f"{dict(CANDIDATES)}")
    return dict(sel, pool=got[2], kv=got[3], fixed_from=str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a results folder of experiments/vllm_cpu.py measure")
    ap.add_argument("--blocks", nargs="+", help="choose on these blocks' runs only (glob patterns, e.g. 'r[0-4]-*'):"
                    " a choice made before later blocks are looked at")
    ap.add_argument("--dst", type=Path, help="where table_selection.json goes (default: --out)")
    a = ap.parse_args()
    runs = [r for r in va.load_runs(a.out)
            if not a.blocks or any(fnmatch.fnmatch(r.get("block") or "", b) for b in a.blocks)]
    if a.dst:
        a.dst.mkdir(parents=True, exist_ok=True)
    sel = select(a.out, runs, a.dst, blocks=bool(a.blocks))
    for name, r in sel["candidates"].items():
        print(f"{name:48s} score {r['score']:.2%}: TPOT p50 |err| {r['median_abs_err_tpot_p50']:.2%} (median "
              f"{r['median_err_tpot_p50']:+.2%}), TTFT p50 |err| {r['median_abs_err_ttft_p50']:.2%} (median "
              f"{r['median_err_ttft_p50']:+.2%}) over {r['runs']} plain runs")
    print(f"chosen: {sel['chosen']}")


if __name__ == "__main__":
    main()
