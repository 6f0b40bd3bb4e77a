"""The `specsim` engine profile: specsim's own engine (`specsim.engine.simpy_engine`, or its batch-1 fast path).

One iteration = γ draft passes over the running batch, then one verification pass of B·(γ + 1) positions; the
requests admitted at an iteration are prefilled together first (both models; the prefill emits output token 0),
stalling the running batch; with `draft_catchup` the draft re-feeds 2 positions only after a clean sweep. At
batch 1 this is what specsim's own executor runs (`specsim.executor.speculative`), which is what it was
validated against (experiments/results/validate_cpu.md). Not a model of a particular serving engine: see
`hf-assisted` (Hugging Face) and `vllm-v1` (vLLM).
"""

from __future__ import annotations

from specsim.engine.simpy_engine import run_engine
from specsim.errors import ConfigError
from specsim.engine.fastpath import eligible, run_fast


def run(cfg, wl, acc, policy, costs, target, draft, mem_spec, mem_base):
    fast = cfg.engine.engine == "fast" or (cfg.engine.engine == "auto" and eligible(wl, cfg.workload.replicas))
    if fast:
        if not eligible(wl, cfg.workload.replicas):
            raise ConfigError("the fast path simulates closed-loop batch 1 only", field="engine", value="fast",
                              allowed="simpy or auto, or batch 1 without rate / arrivals_csv / replicas")
        spec, base = run_fast(wl, costs, acc, policy), run_fast(wl, costs)
    else:
        w = cfg.workload
        spec = run_engine(wl, costs, acc, policy, mem_spec, w.replicas, router=w.router, seed=w.seed)
        base = run_engine(wl, costs, None, None, mem_base, w.replicas, router=w.router, seed=w.seed)
    return spec, base, {"engine": "fast" if fast else "simpy"}
