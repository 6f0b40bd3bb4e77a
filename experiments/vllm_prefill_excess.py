"""Diagnosis, never a fit: a request's prefill step at concurrency 1, speculative against plain, measured and
priced, per k (what the speculative TTFT p50 cells rest on).

    .venv/bin/python experiments/vllm_prefill_excess.py --out experiments/results/vllm_cpu_lockstep2

Why (issue 24, session 21): on the 45-block record the speculative TTFT p50 cells are the ones most often beyond
10%, all too fast. At c1 a closed loop's request starts alone, so its first step is a pure prefill of its prompt in
both modes, and the two runs of a block issue the same prompts in the same order: the speculative step minus the
plain step of the same prompt is the draft's part of it (its pass over the prompt, then k - 1 one-token passes)
plus whatever else a speculative step pays, measured at nearly the same moment (lockstep). Each is priced by the
fit of record (requests, as measured, pooled x block host factor, attended KV, logit positions) as
experiments/vllm_predict.py prices it. Prints per k the medians over (block, request) of the measured and priced
plain step, speculative step and their difference; then whether taking steps in turn with the other engine
(lockstep) costs a plain step anything, against the same run's steps taken alone after its partner ended, and
whether a request's first prefill chunk costs more than its next in the calibration. Since session 22 also: the c1
prefill steps by their order in the run (the first follows the harness's touch, the second the first request's last
decode), the calibration's last chunk of a request (the one that yields its first token) against the chunk before,
every plain grid point's one-request prefills and decodes, measured / priced (whether the excess is the
prefill's alone or the grid's steps at large), the calibration's full-budget prefills against the lowered-budget
chunks around them, and the grid's 17- and 19-token prefills against the calibration's chunks of those sizes in the
same block, with no table between them.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_analyze as va  # noqa: E402

FIT = ("request", False, "scaled", "attended", "positions")


def prefills(run: dict) -> list[dict]:
    """The run's pure one-request prefill steps, in order."""
    return [s for s in run["steps"] if s["ctx_requests"] == 1 and not s["gen_requests"]]


def rows(runs: list[dict]) -> list[dict]:
    tables = va.tables_by_block(runs, FIT)
    by = {(r["mode"], r["_file"].split("__")[1], r.get("block")): r for r in runs}
    out = []
    for (mode, point, block), r in sorted(by.items(), key=lambda x: str(x[0])):
        plain = by.get(("plain", point, block))
        if point != "c1" or not mode.startswith("draft") or plain is None:
            continue
        k, (tt, td) = r["cfg"]["k"], tables[block]
        one = np.ones(1, np.int64)
        for s, p in zip(prefills(r), prefills(plain)):
            if s["ctx_tokens"] != p["ctx_tokens"]:
                continue  # not the same prompt: the pairing is off, leave it out
            T = np.array([s["ctx_tokens"]], np.int64)
            t_plain = tt.price(T, np.zeros(1, np.int64), one)[0]
            draft = td.price(T, np.zeros(1, np.int64))[0] + sum(td.price(one, T + j)[0] for j in range(k - 1))
            out.append({"k": k, "block": block, "tokens": int(T[0]), "meas_plain": p["time_s"],
                        "meas_spec": s["time_s"], "pred_plain": t_plain, "pred_spec": t_plain + draft})
    return out


def alternation(runs: list[dict]) -> list[float]:
    """Per block, a plain c1 run's decode steps taken in turn with its speculative run's (lockstep: one engine step
    each) over those after the speculative run ended (alone), median / median: a cost of switching engines would
    make it > 1."""
    by = {(r["mode"], r["_file"].split("__")[1], r.get("block")): r for r in runs}
    out = []
    for (mode, point, block), s in by.items():
        p = by.get(("plain", point, block))
        if point != "c1" or not mode.startswith("draft") or p is None:
            continue
        n = len(s["steps"])
        dec = [(i, x["time_s"]) for i, x in enumerate(p["steps"]) if not x["ctx_requests"]]
        alt, alone = [t for i, t in dec if 5 <= i < n - 2], [t for i, t in dec if i >= n + 2]
        if len(alt) >= 10 and len(alone) >= 10:
            out.append(float(np.median(alt) / np.median(alone)))
    return out


def by_order(runs: list[dict], tables: dict) -> dict:
    """c1 runs (plain and speculative): measured / priced of each pure prefill step by its order in the run."""
    one, out = np.ones(1, np.int64), defaultdict(list)
    for r in runs:
        if r["_file"].split("__")[1] != "c1" or r["mode"].startswith("cal"):
            continue
        k, (tt, td) = r["cfg"]["k"] if r["mode"] != "plain" else 0, tables[r.get("block")]
        for j, s in enumerate(prefills(r)):
            T, z = np.array([s["ctx_tokens"]], np.int64), np.zeros(1, np.int64)
            p = tt.price(T, z, one)[0]
            if k:
                p += td.price(T, z)[0] + sum(td.price(one, T + i)[0] for i in range(k - 1))
            out[("plain" if not k else "speculative", j)].append(s["time_s"] / p)
    return out


def last_chunks(runs: list[dict], model: str) -> tuple[list[float], list[float]]:
    """Calibration runs whose last three prefill chunks have one size: the last (it yields the request's first
    token) over the one before, beside the one before over the one before that (the same comparison without it)."""
    last, before = [], []
    for r in va.calibration_runs(runs, model):
        pre = prefills(r)
        if len(pre) >= 3 and pre[-1]["ctx_tokens"] == pre[-2]["ctx_tokens"] == pre[-3]["ctx_tokens"]:
            last.append(pre[-1]["time_s"] / pre[-2]["time_s"])
            before.append(pre[-2]["time_s"] / pre[-3]["time_s"])
    return last, before


def grid_steps(runs: list[dict], tables: dict) -> dict:
    """Every plain grid run: the median over its one-request prefills and over its one-request decodes of measured
    / priced, per point (is the grid dearer than its calibration in prefills only, or in every step?)."""
    one, out = np.ones(1, np.int64), defaultdict(list)
    for r in runs:
        if r["mode"] != "plain":
            continue
        tt, kind = tables[r.get("block")][0], defaultdict(list)
        for s in r["steps"]:
            if s["ctx_requests"] + s["gen_requests"] != 1:
                continue
            new = s["ctx_tokens"] if s["ctx_requests"] else s["gen_tokens"]
            p = tt.price(np.array([new], np.int64), np.array([s["kv_ctx_tokens"]], np.int64), one)[0]
            kind["prefill" if s["ctx_requests"] else "decode"].append(s["time_s"] / p)
        for key, v in kind.items():
            out[(r["_file"].split("__")[1], key)].append(float(np.median(v)))
    return out


def same_size(runs: list[dict], sizes=(17, 19)) -> dict:
    """Per block, the plain grid runs' one-request prefills of a size over the target calibration's chunks of that
    size (medians, no table between them): where the grid's prompts and the calibration's chunks meet."""
    g: dict = defaultdict(list)
    for r in runs:
        kind = "grid" if r["mode"] == "plain" else "cal" if r in va.calibration_runs([r], "target") else None
        for s in prefills(r) if kind else []:
            if s["ctx_tokens"] in sizes:
                g[(r.get("block"), kind, s["ctx_tokens"])].append(s["time_s"])
    out = defaultdict(list)
    for (b, kind, n), v in g.items():
        if kind == "grid" and g.get((b, "cal", n)):
            out[n].append(float(np.median(v) / np.median(g[(b, "cal", n)])))
    return out


def full_budget(runs: list[dict], model: str) -> list[float]:
    """Per block, the calibration's one-request prefills at the full token budget (the decode points' prompts) over
    what the same block's lowered-budget chunks on either side of that size interpolate (medians): does lowering
    the budget to measure chunks change what a chunk costs?"""
    g: dict = defaultdict(list)
    for r in va.calibration_runs(runs, model):
        full = r["cfg"].get("max_num_batched_tokens", 0) >= 2048
        for s in prefills(r):
            g[(r.get("block"), full, s["ctx_tokens"])].append(s["time_s"])
    out = []
    for (b, full, n), v in sorted(g.items(), key=str):
        lo = max((m for (bb, f, m) in g if bb == b and not f and m < n), default=None)
        hi = min((m for (bb, f, m) in g if bb == b and not f and m > n), default=None)
        if full and lo is not None and hi is not None:
            tl, th = np.median(g[(b, False, lo)]), np.median(g[(b, False, hi)])
            out.append(float(np.median(v) / (tl + (th - tl) * (n - lo) / (hi - lo))))
    return out


def _q(v: list[float]) -> str:
    return f"{np.median(v):.3f} [p10 {np.percentile(v, 10):.3f}, p90 {np.percentile(v, 90):.3f}] over {len(v)}"


def first_chunks(runs: list[dict], model: str) -> list[float]:
    """Calibration (cal-chunk runs of one model alone): a request's first prefill chunk (nothing cached) over its
    second of the same size: a cost of starting a request would make it > 1."""
    out = []
    for r in va.calibration_runs(runs, model):
        pre = prefills(r)
        if len(pre) >= 2 and pre[0]["kv_ctx_tokens"] == 0 and pre[1]["ctx_tokens"] == pre[0]["ctx_tokens"]:
            out.append(pre[0]["time_s"] / pre[1]["time_s"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    out = ap.parse_args().out
    runs = va.load_runs(out) if (out / "runs").is_dir() else []
    if not runs:
        print(f"vllm_prefill_excess: {out / 'runs'}: no measured runs here (experiments/vllm_cpu.py measure --out DIR)")
        raise SystemExit(2)
    res = rows(runs)
    g = defaultdict(list)
    for e in res:
        g[e["k"]].append(e)
    print("c1 prefill steps (medians over block x request, seconds): measured -> priced")
    for k, es in sorted(g.items()):
        m = {key: float(np.median([e[key] for e in es])) for key in es[0] if key.startswith(("meas", "pred"))}
        dm = float(np.median([e["meas_spec"] - e["meas_plain"] for e in es]))
        dp = float(np.median([e["pred_spec"] - e["pred_plain"] for e in es]))
        rp = float(np.median([e["meas_plain"] / e["pred_plain"] for e in es]))
        rs = float(np.median([e["meas_spec"] / e["pred_spec"] for e in es]))
        print(f"k{k}: {len(es)} pairs in {len({e['block'] for e in es})} blocks, prompts "
              f"{min(e['tokens'] for e in es)}-{max(e['tokens'] for e in es)} tokens; plain {m['meas_plain']:.3f} -> "
              f"{m['pred_plain']:.3f} (measured / priced {rp:.3f}); speculative {m['meas_spec']:.3f} -> "
              f"{m['pred_spec']:.3f} ({rs:.3f}); speculative - plain {dm:.3f} -> {dp:.3f}")
    for model in ("target", "draft"):
        fc = first_chunks(runs, model)
        print(f"{model} alone, a request's first prefill chunk / its second of the same size: median "
              f"{np.median(fc):.3f} over {len(fc)} requests")
    tables = va.tables_by_block(runs, FIT)
    for (mode, j), v in sorted(by_order(runs, tables).items()):
        print(f"c1 {mode} prefill #{j + 1} of its run, measured / priced: {_q(v)} runs")
    for model in ("target", "draft"):
        last, before = last_chunks(runs, model)
        print(f"{model} alone, a request's last prefill chunk / the one before (same size): {_q(last)} requests; the "
              f"one before / the one before it: {_q(before)}")
    for (point, kind), v in sorted(grid_steps(runs, tables).items()):
        print(f"plain {point}, one-request {kind} steps, measured / priced (median per run): {_q(v)} runs")
    for model in ("target", "draft"):
        print(f"{model} alone, a prefill at the full budget / the lowered-budget chunks around its size, same block: "
              f"{_q(full_budget(runs, model))} (block, size)")
    for n, v in sorted(same_size(runs).items()):
        print(f"plain grid prefills of {n} tokens / the target calibration's chunks of {n}, same block: {_q(v)} blocks")
    alt = alternation(runs)
    print(f"plain c1 decode steps taken in turn with the speculative run's / taken alone after it: median {_q(alt)} "
          f"blocks")


if __name__ == "__main__":
    main()
