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

An incumbent is kept unless beaten beyond noise (session 18): the choice flipped with almost every new block (six
choices in seven selections, the winner 0.03-0.3 points ahead), and on the 28-block record one such flip moved the
speedup's TPOT-ratio error from 2.4% to 5.7% (docs/validation.md). So when a choice exists (the `chosen` of the
table_selection.json already at the destination, or `--incumbent`), the lowest-scoring challenger replaces it only
if it scores lower in at least WIN_SHARE of BOOTSTRAP paired resamples of the blocks (every plain run of a drawn
block, drawn with replacement, both candidates on the same draw; the tables are not refitted per draw). Without an
incumbent the lowest score wins, as before.
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


BOOTSTRAP, WIN_SHARE, SEED = 2000, 0.95, 24  # paired block resamples; share a challenger must win; the rule's stream


def errors(out: Path, runs: list[dict], fit: tuple[str, bool, str, str]) -> tuple[list, np.ndarray, np.ndarray]:
    """Per plain run (in the order given): its block, and the relative error of TPOT p50 and TTFT p50, each run
    priced by the target table the fit gives its block (`vllm_analyze.tables_by_block`; the pooled one for a run
    outside the block protocol)."""
    tables = va.tables_by_block(runs, fit, ("target",))
    blocks, tpot, ttft = [], [], []
    for i, r in enumerate(r for r in runs if r.get("mode") == "plain"):
        t = tables.get(r.get("block"), tables[None])[0]
        p, m = predict(r, r["cfg"], t, None, va.kv_blocks(out, r)), va.measured(r)
        blocks.append(r.get("block") or f"run {i}")
        tpot.append(p["tpot_p50"] / m["tpot_p50"] - 1.0)
        ttft.append(p["ttft_p50"] / m["ttft_p50"] - 1.0)
    if not tpot:
        raise SystemExit(f"vllm_select: no plain runs in {out} to choose a step-table fit on")
    return blocks, np.array(tpot), np.array(ttft)


def summary(tpot: np.ndarray, ttft: np.ndarray) -> dict:
    """The criterion (`score`) over the given plain runs' errors, and its parts."""
    a, b = np.abs(tpot), np.abs(ttft)
    return {"runs": len(tpot), "median_abs_err_tpot_p50": float(np.median(a)),
            "median_abs_err_ttft_p50": float(np.median(b)), "score": float((np.median(a) + np.median(b)) / 2),
            "median_err_tpot_p50": float(np.median(tpot)), "median_err_ttft_p50": float(np.median(ttft))}


def wins_share(blocks: list, errs: dict[str, tuple[np.ndarray, np.ndarray]], challenger: str, incumbent: str,
               draws: int = BOOTSTRAP, seed: int = SEED) -> float:
    """Share of paired block-bootstrap draws in which `challenger` scores strictly lower than `incumbent`: the
    criterion's own noise, from which plain runs happen to be in the set (one seeded stream, so bit for bit)."""
    names = sorted(set(blocks))
    idx = {b: np.flatnonzero(np.array(blocks, dtype=object) == b) for b in names}
    rng = np.random.default_rng(seed)

    def crit(name, sel):
        tpot, ttft = errs[name]
        return summary(tpot[sel], ttft[sel])["score"]

    won = 0
    for _ in range(draws):
        sel = np.concatenate([idx[names[j]] for j in rng.integers(0, len(names), len(names))])
        won += crit(challenger, sel) < crit(incumbent, sel)
    return won / draws


def previous(dst: Path) -> str | None:
    """The choice a table_selection.json already at `dst` made (the incumbent), or None."""
    try:
        chosen = json.loads((dst / "table_selection.json").read_text()).get("chosen")
    except (OSError, ValueError, AttributeError):
        return None
    return chosen if chosen in CANDIDATES else None


def select(out: Path, runs: list[dict] | None = None, dst: Path | None = None, blocks: bool = False,
           incumbent: str | None = None) -> dict:
    """The chosen fit and every candidate's score; `runs` (as vllm_analyze.load_runs) are filtered to plain and
    calibration runs first, so nothing speculative is read. With an `incumbent` (a candidate's name) the lowest
    scorer replaces it only if it wins WIN_SHARE of the paired block resamples (`wins_share`)."""
    runs = [r for r in (va.load_runs(out) if runs is None else runs)
            if r.get("mode") in ("plain", "cal-target", "cal-draft")]
    if incumbent is not None and incumbent not in CANDIDATES:
        raise SystemExit(f"vllm_select: incumbent {incumbent!r} is not one of {list(CANDIDATES)}")
    per = {name: errors(out, runs, fit) for name, fit in CANDIDATES.items()}
    res = {name: summary(tpot, ttft) for name, (_, tpot, ttft) in per.items()}
    best = min(res, key=lambda n: res[n]["score"])
    rule = {"incumbent": incumbent, "challenger": best, "win_share_needed": WIN_SHARE, "draws": BOOTSTRAP}
    if incumbent is not None and best != incumbent:
        blocks_of = next(iter(per.values()))[0]
        rule["challenger_wins_share"] = wins_share(blocks_of, {n: per[n][1:] for n in (best, incumbent)}, best,
                                                   incumbent)
        best = best if rule["challenger_wins_share"] >= WIN_SHARE else incumbent
    kind, monotone, pool, kv = CANDIDATES[best]
    sel = {"chosen": best, "kind": kind, "monotone": monotone, "pool": pool, "kv": kv, "candidates": res,
           "criterion": "lowest (median |TPOT p50 err| + median |TTFT p50 err|) / 2 over plain grid runs; an "
                        f"incumbent stays unless the lowest wins {WIN_SHARE:.0%} of {BOOTSTRAP} paired block "
                        "resamples", "rule": rule}
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
    inc = ap.add_mutually_exclusive_group()
    inc.add_argument("--incumbent", choices=list(CANDIDATES), help="the choice in force (default: the chosen fit of "
                     "the table_selection.json already at the destination, if any)")
    inc.add_argument("--no-incumbent", action="store_true", help="ignore any choice in force: the lowest wins")
    a = ap.parse_args()
    runs = [r for r in va.load_runs(a.out)
            if not a.blocks or any(fnmatch.fnmatch(r.get("block") or "", b) for b in a.blocks)]
    if a.dst:
        a.dst.mkdir(parents=True, exist_ok=True)
    inc = None if a.no_incumbent else a.incumbent or previous(a.dst or a.out)
    sel = select(a.out, runs, a.dst, blocks=bool(a.blocks), incumbent=inc)
    for name, r in sel["candidates"].items():
        print(f"{name:48s} score {r['score']:.2%}: TPOT p50 |err| {r['median_abs_err_tpot_p50']:.2%} (median "
              f"{r['median_err_tpot_p50']:+.2%}), TTFT p50 |err| {r['median_abs_err_ttft_p50']:.2%} (median "
              f"{r['median_err_ttft_p50']:+.2%}) over {r['runs']} plain runs")
    r = sel["rule"]
    if r["incumbent"] and r["incumbent"] != r["challenger"]:
        print(f"incumbent {r['incumbent']}; lowest {r['challenger']} wins {r['challenger_wins_share']:.1%} of "
              f"{r['draws']} paired block resamples (needs {r['win_share_needed']:.0%})")
    print(f"chosen: {sel['chosen']}")


if __name__ == "__main__":
    main()
