"""Diagnosis, not a figure of record and never a calibration: does a one-request prefill step cost more when its
engine is driven one step per command (the grid's lockstep) than in a run on the wall clock (the calibration)?

    .venv/bin/python experiments/vllm_prefill_probe.py --out experiments/results/vllm_prefill_probe

Why (issue 24, session 22, experiments/results/vllm_cpu_lockstep2/prefill_excess.txt): over 51 blocks the grid's
plain one-request prefill steps cost 4-8% more than the tables price them at every point (c1 1.065, Poisson
1.044-1.076, median per run), its one-request decodes 0-4% (c1 1.042, Poisson 0.984-1.007), while in the
calibration, measured on the wall clock, a full-budget 75-token prefill costs what the lowered-budget chunks around it
say (0.987 target, 0.975 draft, 51 blocks) and a request's first chunk what its second does (0.998). Here two
resident engines (P: the target alone; S: draft model, k = 5), the campaign's layout, run the same point — c1, 24
short requests (96-token outputs are not needed: each request's first step is a pure prefill of its 15-27-token
prompt, then one decode) — three ways, order rotated over repeats: `wall` (each engine's run alone on the wall
clock, as the calibration runs), `stepped` (each alone, one engine step per command on a busy clock), `lockstep`
(both in turns, as the grid runs). Paired by (repeat, request): the prefill step in `stepped` and `lockstep` over the
same prompt's in `wall`. Writes the runs and summary.txt.

`--vs-chunks` (the question the first probe left): the target alone, on the wall clock, alternates the same short
requests with the calibration's kind of run — two prompts joined, the budget lowered to 19 tokens, so each request is
a 19-token first chunk (nothing cached) and a last chunk of about 17 (19 cached) — and compares prefill steps of one
size (medians per repeat, grid-like over chunk). Writes runs and summary_chunks.txt.

`--after-decodes`: the target alone, on the wall clock, alternates the short requests with the grid's c1 shape — the
same first four prompts, each decoding 96 tokens — so a request's prefill follows either one decode step (short) or
96 (long) of the request before; the first request follows the harness's touch in both (the control). Paired by
(repeat, request): long over short. Writes runs and summary_after_decodes.txt.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_blocks as vb  # noqa: E402

HOWS = ("wall", "stepped", "lockstep")
POINT = {"point": "pf", "concurrency": 1, "requests": 24, "output_len": 2}
LONG = {"point": "long", "concurrency": 1, "requests": 4, "output_len": 96}
CHUNK = {"point": "chunk19", "concurrency": 1, "requests": 24, "output_len": 2, "concat": 2, "budget": 19}


def one_repeat(r: int, engines: list, out: Path) -> list[str]:
    """The three ways, in an order rotated by repeat; the files written."""
    files = []
    for how in HOWS[r % 3:] + HOWS[:r % 3]:
        cmds = [(e, {"mode": m, "point": POINT, "repeat": r, "block": how,
                     "file": str(out / "runs" / f"{m}__{how}__r{r}.json")}) for e, m in engines]
        if how == "lockstep":
            vb.lockstep(cmds)
        else:
            for e, c in (cmds if r % 2 == 0 else cmds[::-1]):
                if how == "wall":
                    e.ask(dict(c, op="run"))
                else:
                    vb.lockstep([(e, c)])
        files += [c["file"] for _, c in cmds]
        print(f"repeat {r} {how} done", flush=True)
    return files


def steps_of(run: dict, prefill: bool) -> list[float]:
    """The run's one-request prefill steps (in request order at c1) or its one-request decodes."""
    return [s["time_s"] for s in run["steps"] if s["ctx_requests"] + s["gen_requests"] == 1
            and bool(s["ctx_requests"]) == prefill]


def _q(v: list[float]) -> str:
    return f"{np.median(v):.3f} [p10 {np.percentile(v, 10):.3f}, p90 {np.percentile(v, 90):.3f}, n {len(v)}]"


def summarize(runs: list[dict]) -> list[str]:
    by = {(r["mode"], r["_how"], r["repeat"]): r for r in runs}
    out = []
    for mode in sorted({r["mode"] for r in runs}):
        for prefill in (True, False):
            kind = "prefill" if prefill else "decode"
            med = {h: [t for (m, hh, _), r in by.items() if m == mode and hh == h for t in steps_of(r, prefill)]
                   for h in HOWS}
            out.append(f"{mode} {kind} step, s: " + "; ".join(f"{h} {np.median(v):.4f} (n {len(v)})"
                                                               for h, v in med.items() if v))
            ratio = defaultdict(list)
            for (m, h, rep), r in by.items():
                w = by.get((m, "wall", rep))
                if m != mode or h == "wall" or w is None:
                    continue
                a, b = steps_of(r, prefill), steps_of(w, prefill)
                if prefill and len(a) == len(b):  # same prompts, same order: paired per request
                    ratio[h] += [x / y for x, y in zip(a, b)]
                elif not prefill and a and b:  # decodes: per repeat, median over median
                    ratio[h].append(float(np.median(a) / np.median(b)))
            for h, v in sorted(ratio.items()):
                out.append(f"  {mode} {kind}, {h} / wall ({'per request' if prefill else 'per repeat'}): {_q(v)}")
    return out


def alternate(P, other: dict, repeats: int, out: Path) -> list[str]:
    """The short requests and `other`, alternating (ABBA), each on the wall clock."""
    files = []
    for r in range(repeats):
        for pt in ((POINT, other) if r % 2 == 0 else (other, POINT)):
            f = str(out / "runs" / f"plain__{pt['point']}__r{r}.json")
            P.ask({"op": "run", "mode": "plain", "point": pt, "repeat": r, "block": pt["point"], "file": f})
            files.append(f)
        print(f"repeat {r} done", flush=True)
    return files


def summarize_chunks(runs: list[dict]) -> list[str]:
    """One-request prefill steps by (tokens, cached tokens), grid-like against chunked: medians, and per repeat the
    ratio of medians at the sizes both have."""
    med: dict = defaultdict(lambda: defaultdict(list))
    for r in runs:
        for s in r["steps"]:
            if s["ctx_requests"] == 1 and not s["gen_requests"]:
                med[(r["point"], s["ctx_tokens"], s["kv_ctx_tokens"] > 0)][r["repeat"]].append(s["time_s"])
    out = []
    for (pt, n, cached), by_rep in sorted(med.items()):
        v = [t for ts in by_rep.values() for t in ts]
        out.append(f"{pt} prefill of {n} tokens, {'after cached tokens' if cached else 'nothing cached'}: "
                   f"{np.median(v):.4f} s (n {len(v)})")
    for n in sorted({n for (pt, n, _) in med if pt == "pf"}):
        for cached in (False, True):
            a, b = med.get(("pf", n, False)), med.get(("chunk19", n, cached))
            if not a or not b:
                continue
            rs = [float(np.median(a[r]) / np.median(b[r])) for r in a if r in b]
            if rs:
                out.append(f"  {n} tokens: grid-like / chunk ({'cached' if cached else 'nothing cached'}), per repeat: "
                           f"{_q(rs)}")
    return out


def summarize_after_decodes(runs: list[dict]) -> list[str]:
    """Per request index (< LONG's requests), the long run's prefill over the short run's, same repeat and prompt."""
    by = {(r["point"], r["repeat"]): steps_of(r, True) for r in runs}
    ratio: dict = defaultdict(list)
    for (pt, rep), pre in by.items():
        short = by.get(("pf", rep))
        if pt == "long" and short:
            for i, (a, b) in enumerate(zip(pre, short)):
                key = "first request (after the touch in both)" if i == 0 else "later requests (after 96 decodes / 1)"
                ratio[key].append(a / b)
    return [f"long / short prefill, {k}: {_q(v)} pairs" for k, v in sorted(ratio.items())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vllm-python", default="/work/vllm-env/venv/bin/python")
    ap.add_argument("--vs-chunks", action="store_true", help="the target alone: short requests against the "
                    "calibration's chunked prefills (summary_chunks.txt)")
    ap.add_argument("--after-decodes", action="store_true", help="the target alone: a prefill after 96 decodes "
                    "against one after a single decode (summary_after_decodes.txt)")
    a = ap.parse_args()
    if a.vs_chunks and a.after_decodes:
        ap.error("--vs-chunks and --after-decodes are two probes: run one at a time")
    if a.repeats < 1 or a.k < 1:
        ap.error(f"--repeats {a.repeats}, --k {a.k}: both must be at least 1")  # one line, exit 2
    (a.out / "runs").mkdir(parents=True, exist_ok=True)
    mode = f"draft-k{a.k}"
    P = vb.Engine(a, a.out, "P", ["plain"], "plain")
    if a.vs_chunks or a.after_decodes:
        try:
            files = alternate(P, CHUNK if a.vs_chunks else LONG, a.repeats, a.out)
        finally:
            P.close()
        runs = [json.loads(Path(f).read_text()) for f in files]
        lines = summarize_chunks(runs) if a.vs_chunks else summarize_after_decodes(runs)
        name = "summary_chunks.txt" if a.vs_chunks else "summary_after_decodes.txt"
        (a.out / name).write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    S = vb.Engine(a, a.out, "S", [mode], mode)
    files = []
    try:
        for r in range(a.repeats):
            files += one_repeat(r, [(P, "plain"), (S, mode)], a.out)
    finally:
        for e in (P, S):
            e.close()
    runs = [json.loads(Path(f).read_text()) | {"_how": Path(f).name.split("__")[1]} for f in files]
    lines = summarize(runs)
    (a.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
