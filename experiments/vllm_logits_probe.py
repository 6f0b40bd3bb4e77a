"""Diagnosis, not a figure of record: does one request's multi-token step cost more when it computes logits at every
position, as a verification step does, than as a prefill chunk (one position)? No speculation anywhere.

    /work/vllm-env/venv/bin/python experiments/vllm_logits_probe.py --out experiments/results/vllm_logits_probe

Why (issue 24, session 13, docs/validation.md): at concurrency 1 the analysis prices a verification of k + 1 tokens
from calibration steps of k + 1 tokens, mostly multi-request decodes, and c1 comes out optimistic as k grows. A
verification step of one request computes k + 1 rows of logits; a prefill chunk of one request computes one. Here
the target alone runs one-request prefill chunks of n = 3, 4, 6 tokens (the scheduler's budget lowered to n) with
and without `prompt_logprobs=0` (vLLM then computes the logits of every prompt position, plus a log-softmax), in
ABBA order over repeats, and one-token decodes beside them. Writes probe.json (every step) and prints the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_cpu as vc  # noqa: E402  (constants, engine arguments; imports no vLLM)

SIZES = (3, 4, 6)


def _point(n: int) -> dict:
    return {"point": f"chunk{n}", "concurrency": 1, "requests": 1, "output_len": 2, "budget": n,
            "concat": max(1, min(vc.MAX_CONCAT, -(-6 * n // vc.MEAN_PROMPT_TOKENS)))}


def target_alone(out: Path, name: str):
    """(session, prompts, params, run_point): one target engine alone in this process (the offline engine, as
    vllm_serve.py runs it), warmed by one short run; params(logprobs) is the factory of greedy sampling params,
    with `prompt_logprobs=0` (logits and a log-softmax at every prompt position) when `logprobs`. Imports vLLM."""
    os.environ.update(vc._env(kv_gb=1))
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    from vllm_session import Session, run_point

    mode = vc.modes()["cal-target"]
    ses = Session({"session": name, "mode": "cal-target", "k": 0, "engine": vc.engine_kwargs(mode), "configs": {},
                   "out": str(out), "prompts": str(vc.PROMPTS), "cpu_model": vc.cpu_model()})
    prompts = [p for p in vc.PROMPTS.read_text().splitlines() if p.strip()]

    def params(logprobs: bool):
        return lambda out_len: SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True,
                                              output_kind=RequestOutputKind.CUMULATIVE,
                                              prompt_logprobs=0 if logprobs else None)

    run_point(ses, prompts, {"point": "warm", "concurrency": 2, "requests": 2, "output_len": 8}, 0)
    return ses, prompts, params, run_point


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=4)
    a = ap.parse_args()
    ses, prompts, params, run_point = target_alone(a.out, "L")
    rows = []
    for rep in range(a.repeats):
        for n in (SIZES if rep % 2 == 0 else SIZES[::-1]):
            for lp in ((False, True) if (rep + n) % 2 == 0 else (True, False)):
                ses.params = params(lp)
                d = run_point(ses, prompts, _point(n), rep)
                rows += [dict(s, n=n, prompt_logprobs=lp, repeat=rep) for s in d["steps"]]
        ses.params = params(False)
        d = run_point(ses, prompts, {"point": "dec1", "concurrency": 1, "requests": 1, "output_len": 16}, rep)
        rows += [dict(s, n=1, prompt_logprobs=False, repeat=rep, decode=True) for s in d["steps"]]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "probe.json").write_text(json.dumps({"cpu_model": vc.cpu_model(), "steps": rows}, indent=1))
    for n in SIZES:
        for lp in (False, True):
            ts = [r["time_s"] for r in rows if r["n"] == n and r["prompt_logprobs"] == lp and r["ctx_requests"] == 1
                  and r["ctx_tokens"] == n]
            print(f"one request, {n} tokens, prompt_logprobs={lp}: median {np.median(ts):.4f} s over {len(ts)} steps "
                  f"(p25 {np.percentile(ts, 25):.4f}, p75 {np.percentile(ts, 75):.4f})")
    ts = [r["time_s"] for r in rows if r.get("decode") and r["gen_requests"] == 1 and r["ctx_tokens"] == 0]
    print(f"one request, one-token decode: median {np.median(ts):.4f} s over {len(ts)} steps")


if __name__ == "__main__":  # vLLM may start workers with spawn: the entry point must be guarded
    main()
