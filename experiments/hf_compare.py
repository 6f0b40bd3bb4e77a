"""Paired check: our SpeculativeDecoder against HF assisted generation (`generate(..., assistant_model=draft)`) on
the Qwen2.5-Coder 1.5B <- 0.5B pair, fp32 CPU, greedy, same prompts, same γ (constant schedule).

Each round times four runs back to back, in this order, over the same model objects:
- ours        — the executor as shipped: stock kernels, fused prefill, γ clipped on the last step like HF;
- hf          — HF's generate as a user runs it: stock kernels (same passes, so the decoding loops are compared);
- ours_rowgemm — our executor with the opt-in row-gemm kernels (`use_row_gemm`, scoped to our own passes);
- hf_rowgemm  — HF's generate with the row-gemm kernels switched on for it too.
Ratios are per round (paired under one load), then the median over rounds. The machine's speed drifts by ~10%
between runs, more than the loops differ, so every run also logs each model call (forward hooks on both models:
calls, rows fed, time inside): both sides must run the same passes, and walltime minus the time inside the passes
is each loop's own overhead — a figure the drift barely touches. Writes
experiments/results/hf_compare.{md,json}. Usage: .venv/bin/python experiments/hf_compare.py [--prompts 2]
[--tokens 32] [--gamma 3] [--rounds 5]"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUNS = ("ours", "hf", "ours_rowgemm", "hf_rowgemm")
RATIOS = {"ours / hf": ("ours", "hf"), "ours_rowgemm / hf_rowgemm": ("ours_rowgemm", "hf_rowgemm"),
          "ours_rowgemm / hf": ("ours_rowgemm", "hf")}


class PassLog:
    """Forward hooks on a model: calls, rows fed (input_ids numel) and seconds inside, per label."""

    def __init__(self, models: dict):
        self.calls: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.inside_s = 0.0
        self._t0 = 0.0
        for label, m in models.items():
            m.register_forward_pre_hook(self._pre(label), with_kwargs=True)
            m.register_forward_hook(self._post)

    def _pre(self, label):
        def hook(module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.calls[label] = self.calls.get(label, 0) + 1
            self.rows[label] = self.rows.get(label, 0) + (int(ids.numel()) if ids is not None else 0)
            self._t0 = time.perf_counter()
        return hook

    def _post(self, module, args, out):
        self.inside_s += time.perf_counter() - self._t0

    def reset(self) -> None:
        self.calls, self.rows, self.inside_s = {}, {}, 0.0

    def take(self, walltime_s: float) -> dict:
        out = {"calls": dict(self.calls), "rows": dict(self.rows), "inside_s": self.inside_s,
               "outside_s": walltime_s - self.inside_s}
        self.reset()
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="hf_compare", help="results file stem under experiments/results/")
    args = ap.parse_args()

    import torch
    import transformers

    from specsim.executor.fetch import cached_model_dir
    from specsim.executor.measure import hf_assisted
    from specsim.executor.record import load_prompts
    from specsim.executor.sampling import SamplingConfig
    from specsim.executor.sources import HFSource, hf_source, row_gemm_scope
    from specsim.executor.speculative import SpeculativeDecoder

    dirs = [cached_model_dir(n) for n in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")]
    if None in dirs:
        raise SystemExit("hf_compare: fetch the pair first (specsim models fetch qwen2.5-coder-1.5b-instruct, "
                         "... qwen2.5-coder-0.5b-instruct)")
    target, draft = (hf_source(d, dtype="fp32") for d in dirs)   # stock kernels
    t_row, d_row = (HFSource(s.model, s.name, s.tokenizer, kernels="row-gemm") for s in (target, draft))
    prompts = load_prompts(ROOT / "experiments/prompts/code_prompts.txt", target.tokenizer, target.vocab_size,
                           chat=True, limit=args.prompts)
    greedy = SamplingConfig(temperature=0.0)
    ours_dec = SpeculativeDecoder(target, draft, args.gamma, greedy, timing=False)
    row_dec = SpeculativeDecoder(t_row, d_row, args.gamma, greedy, timing=False)
    log = PassLog({"target": target.model, "draft": draft.model})

    def ours(dec):
        t0 = time.perf_counter()
        res = [dec.generate(p, args.tokens, seed=i) for i, p in enumerate(prompts)]
        return time.perf_counter() - t0, res

    def hf():
        return hf_assisted(target, draft, prompts, args.gamma, args.tokens, greedy, seed=0, repeats=1,
                           warmup=0)["walltime_s"]

    def hf_rowgemm():
        with row_gemm_scope():
            return hf()

    with torch.inference_mode():
        ours(ours_dec), hf(), ours(row_dec), hf_rowgemm()   # warm-up
        log.reset()
        rounds = []
        for r in range(args.rounds):
            t, passes = {}, {}
            t["ours"], res = ours(ours_dec)
            passes["ours"] = log.take(t["ours"])
            t["hf"] = hf()
            passes["hf"] = log.take(t["hf"])
            t["ours_rowgemm"], res_row = ours(row_dec)
            passes["ours_rowgemm"] = log.take(t["ours_rowgemm"])
            t["hf_rowgemm"] = hf_rowgemm()
            passes["hf_rowgemm"] = log.take(t["hf_rowgemm"])
            same = [x.tokens for x in res] == [x.tokens for x in res_row]
            rounds.append({**{f"{k}_s": v for k, v in t.items()},
                           **{k: t[a] / t[b] for k, (a, b) in RATIOS.items()}, "same_tokens": same,
                           "passes": passes})
            print(f"round {r}: " + "  ".join(f"{k} {v:.3f}s" for k, v in t.items()) + "  "
                  + "  ".join(f"{k} {rounds[-1][k]:.3f}" for k in RATIOS), flush=True)
    keys = [f"{k}_s" for k in RUNS] + list(RATIOS)
    med = {k: statistics.median(x[k] for x in rounds) for k in keys}
    for k in RUNS:
        med[f"{k}_outside_s"] = statistics.median(x["passes"][k]["outside_s"] for x in rounds)
        med[f"{k}_inside_s"] = statistics.median(x["passes"][k]["inside_s"] for x in rounds)
    first = rounds[0]["passes"]
    same_passes = all(x["passes"][k]["calls"] == first[k]["calls"] and x["passes"][k]["rows"] == first[k]["rows"]
                      for x in rounds for k in RUNS)
    steps = sum(len(a) for a in (x.accepted for x in res))
    cmd = "python experiments/hf_compare.py " + " ".join(sys.argv[1:])
    out = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "command": cmd,
           "args": vars(args), "prompt_lens": [len(p) for p in prompts], "torch_threads": torch.get_num_threads(),
           "torch": torch.__version__, "transformers": transformers.__version__, "load_after": os.getloadavg()[0],
           "rounds": rounds, "median": med, "accepted": [x.accepted for x in res], "target_runs": steps,
           "pass_counts_stable": same_passes}
    res_dir = ROOT / "experiments/results"
    (res_dir / f"{args.out}.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    lines = ["# Our executor vs HF assisted generation (Qwen2.5-Coder-1.5B <- 0.5B, fp32, CPU, greedy)", "",
             f"{out['date']}; `{cmd}`; {args.prompts} prompts (lengths {out['prompt_lens']}) x {args.tokens} new "
             f"tokens, γ = {args.gamma}, {args.rounds} interleaved rounds after one warm-up, "
             f"{out['torch_threads']} torch threads, torch {torch.__version__}, transformers "
             f"{transformers.__version__}. Walltime for the whole prompt set, seconds.", "",
             "ours = the executor as shipped (stock kernels, fused prefill); hf = HF's assisted generate (stock "
             "kernels); ours_rowgemm / hf_rowgemm = the same two with the opt-in row-gemm kernels. Our two runs "
             "emit the same tokens: "
             f"{all(x['same_tokens'] for x in rounds)}.", "",
             "| round | " + " | ".join(f"{k} (s)" for k in RUNS) + " | " + " | ".join(RATIOS) + " |",
             "|---" * (1 + len(RUNS) + len(RATIOS)) + "|"]
    for i, x in enumerate(rounds + [med]):
        lines.append(f"| {i if i < len(rounds) else '**median**'} | "
                     + " | ".join(f"{x[f'{k}_s']:.3f}" for k in RUNS) + " | "
                     + " | ".join(f"{x[k]:.3f}" for k in RATIOS) + " |")
    lines += ["", "Model calls per run (forward hooks on both models; every round the same: "
              f"{same_passes}), and the time spent outside them — each loop's own overhead (median over rounds; "
              f"{steps} target runs per run of ours):", "",
              "| run | target calls | target rows | draft calls | draft rows | inside passes (s) | outside (s) | "
              "outside per target run (ms) |", "|---|---|---|---|---|---|---|---|"]
    for k in RUNS:
        c, rws = first[k]["calls"], first[k]["rows"]
        lines.append(f"| {k} | {c.get('target', 0)} | {rws.get('target', 0)} | {c.get('draft', 0)} | "
                     f"{rws.get('draft', 0)} | {med[f'{k}_inside_s']:.3f} | {med[f'{k}_outside_s']:.3f} | "
                     f"{1e3 * med[f'{k}_outside_s'] / max(1, c.get('target', 1)):.1f} |")
    (res_dir / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(med))


if __name__ == "__main__":
    main()
