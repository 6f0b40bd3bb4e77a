"""What a verification-shaped step of the target costs without speculation, with and without logits at every
position, beside the decode of as many requests (issue 24, session 19; a probe, never fitted).

    /work/vllm-env/venv/bin/python experiments/vllm_verify_probe.py --out experiments/results/vllm_verify_probe

Why (docs/validation.md, session 19): the moment runs measured steps of c requests x (k + 1) tokens as prefill
chunks (experiments/vllm_blocks.py moment_points), which compute no logits but at a prompt's last token, while a
verification computes the target's logits at all k + 1 positions of every request (vLLM's rejection sampler reads
them). At one request the session-13 logits probe put that at 20-25 ms a step. Here, one target engine alone
(the offline engine in this process, as vllm_serve.py runs it), for c = 1, 2, 4, 8 and k + 1 = 6: the decode of c
requests, the chunk steps of c x 6 tokens without logits and with `prompt_logprobs=0` (logits and a log-softmax at
every prompt position, the closest a run without speculation gets to a verification), in ABBA order over
repeats. Writes probe.json (every step) and summary.txt (medians, quartiles, step counts).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_blocks as vb  # noqa: E402  (moment_points: the verification-shaped point; imports no vLLM)
import vllm_cpu as vc  # noqa: E402  (constants, engine arguments; imports no vLLM)
from vllm_logits_probe import target_alone  # noqa: E402  (the engine alone, greedy params with or without logits)

CS, M = (1, 2, 4, 8), 6


def points(c: int) -> dict:
    """The moment runs' decode and verification-shaped points of c requests (k + 1 = M)."""
    dec, ver, _ = (p for _, _, p in vb.moment_points({"point": f"c{c}", "concurrency": c}, M - 1))
    return {"dec": dec, "ver": ver}


def full(steps: list[dict], c: int, tokens: int) -> list[float]:
    return [s["time_s"] for s in steps if s["ctx_requests"] + s["gen_requests"] == c
            and s["ctx_tokens"] + s["gen_tokens"] == tokens]


def summary(rows: list[dict], repeats: int) -> list[str]:
    """summary.txt's lines: per c the medians (quartiles, step counts) of the full-size steps of each kind."""
    lines = [f"one target engine alone ({vc.cpu_model()}), {repeats} repeats ABBA; k + 1 = {M}; medians of full-size "
             f"steps (p25-p75, steps)"]
    for c in CS:
        cell = {}
        for kind, lp, T in (("dec", False, c), ("ver", False, c * M), ("ver", True, c * M)):
            ts = full([r for r in rows if r["c"] == c and r["kind"] == kind and r["prompt_logprobs"] == lp], c, T)
            cell[(kind, lp)] = np.median(ts) if ts else float("nan")
            lines.append(f"c{c} {kind} {T} tokens prompt_logprobs={lp}: {cell[(kind, lp)]:.4f} s "
                         f"({np.percentile(ts, 25):.4f}-{np.percentile(ts, 75):.4f}, {len(ts)} steps)" if ts else
                         f"c{c} {kind} {T} tokens prompt_logprobs={lp}: no full-size steps")
        lines.append(f"c{c}: logits at every position add {cell[('ver', True)] - cell[('ver', False)]:+.4f} s; "
                     f"ver with logits / decode = {cell[('ver', True)] / cell[('dec', False)]:.3f}, without "
                     f"{cell[('ver', False)] / cell[('dec', False)]:.3f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    ses, prompts, params, run_point = target_alone(a.out, "V")
    rows = []
    for rep in range(a.repeats):
        order = [("dec", False), ("ver", False), ("ver", True)]
        for c in (CS if rep % 2 == 0 else CS[::-1]):
            for kind, lp in (order if (rep + c) % 2 == 0 else order[::-1]):
                ses.params = params(lp)
                d = run_point(ses, prompts, points(c)[kind], rep)
                rows += [dict(s, c=c, kind=kind, prompt_logprobs=lp, repeat=rep) for s in d["steps"]]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "probe.json").write_text(json.dumps({"cpu_model": vc.cpu_model(), "steps": rows}, indent=1))
    lines = summary(rows, a.repeats)
    (a.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
