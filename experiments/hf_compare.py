"""Short paired check: our SpeculativeDecoder (fused prefill, and the separate-prefill variant) against HF assisted
generation on the Qwen2.5-Coder 1.5B <- 0.5B pair, fp32 CPU, greedy. Interleaved rounds; writes
experiments/results/hf_compare.{md,json}. Usage: .venv/bin/python experiments/hf_compare.py [--prompts 2]
[--tokens 32] [--gamma 3] [--rounds 3]"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--row-gemm", action="store_true", help="use_row_gemm on both models (HF's runs share them)")
    ap.add_argument("--out", default="hf_compare", help="results file stem under experiments/results/")
    args = ap.parse_args()

    import torch

    from specsim.executor.fetch import cached_model_dir
    from specsim.executor.measure import hf_assisted
    from specsim.executor.record import load_prompts
    from specsim.executor.sampling import SamplingConfig
    from specsim.executor.sources import hf_source, use_row_gemm
    from specsim.executor.speculative import SpeculativeDecoder

    target = hf_source(cached_model_dir("qwen2.5-coder-1.5b-instruct"), dtype="fp32")
    draft = hf_source(cached_model_dir("qwen2.5-coder-0.5b-instruct"), dtype="fp32")
    if args.row_gemm:
        use_row_gemm(target.model), use_row_gemm(draft.model)
    prompts = load_prompts(ROOT / "experiments/prompts/code_prompts.txt", target.tokenizer, target.vocab_size,
                           chat=True, limit=args.prompts)
    greedy = SamplingConfig(temperature=0.0)
    fused = SpeculativeDecoder(target, draft, args.gamma, greedy, timing=False)
    split = SpeculativeDecoder(target, draft, args.gamma, greedy, timing=False, fuse_prefill=False)

    def ours(dec):
        t0 = time.perf_counter()
        res = [dec.generate(p, args.tokens, seed=i) for i, p in enumerate(prompts)]
        return time.perf_counter() - t0, res

    def hf():
        return hf_assisted(target, draft, prompts, args.gamma, args.tokens, greedy, seed=0, repeats=1,
                           warmup=0)["walltime_s"]

    with torch.inference_mode():
        ours(fused), ours(split), hf()   # warm-up
        rounds = []
        for r in range(args.rounds):
            tf, res_f = ours(fused)
            th = hf()
            ts, res_s = ours(split)
            assert [x.tokens for x in res_f] == [x.tokens for x in res_s]
            rounds.append({"fused_s": tf, "hf_s": th, "split_s": ts, "fused_over_hf": tf / th,
                           "split_over_hf": ts / th})
            print(f"round {r}: fused {tf:.3f}s  hf {th:.3f}s  split {ts:.3f}s  fused/hf {tf / th:.3f}  "
                  f"split/hf {ts / th:.3f}", flush=True)
    med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
    cmd = "python experiments/hf_compare.py " + " ".join(sys.argv[1:])
    out = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "command": cmd,
           "args": vars(args), "prompt_lens": [len(p) for p in prompts], "torch_threads": torch.get_num_threads(),
           "rounds": rounds, "median": med, "accepted": [x.accepted for x in res_f]}
    res_dir = ROOT / "experiments/results"
    (res_dir / f"{args.out}.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    lines = ["# Our executor vs HF assisted generation (Qwen2.5-Coder-1.5B <- 0.5B, fp32, CPU, greedy)", "",
             f"{out['date']}; `{cmd}`; {args.prompts} prompts (lengths {out['prompt_lens']}) x {args.tokens} new "
             f"tokens, γ = {args.gamma}, {args.rounds} interleaved rounds (fused, HF, split) after one warm-up, "
             f"{out['torch_threads']} torch threads, row-gemm {args.row_gemm}. "
             "Walltime for the whole prompt set, seconds.", "",
             "fused = default executor (prompt prefill fused into the first verification); split = "
             "`fuse_prefill=False` (separate prefill, the structure the simulator models). Same tokens in both.", "",
             "| round | fused (s) | HF (s) | split (s) | fused / HF | split / HF |", "|---|---|---|---|---|---|"]
    for i, x in enumerate(rounds + [med]):
        lines.append(f"| {i if i < len(rounds) else 'median'} | {x['fused_s']:.3f} | {x['hf_s']:.3f} | "
                     f"{x['split_s']:.3f} | {x['fused_over_hf']:.3f} | {x['split_over_hf']:.3f} |")
    (res_dir / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(med))


if __name__ == "__main__":
    main()
