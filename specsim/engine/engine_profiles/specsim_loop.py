"""The `specsim` engine profile: specsim's own engine (`specsim.engine.simpy_engine`, or its batch-1 fast path).

One iteration = γ draft passes over the running batch, then one verification pass of B·(γ + 1) positions; the
requests admitted at an iteration are prefilled together first (both models; the prefill emits output token 0),
stalling the running batch; with `draft_catchup` the draft re-feeds 2 positions only after a clean sweep. At
batch 1 this is what specsim's own executor runs (`specsim.executor.speculative`), which is what it was
validated against (experiments/results/validate_cpu.md). Not a model of a particular serving engine: see
`hf-assisted` (Hugging Face) and `vllm-v1` (vLLM).
"""

from __future__ import annotations

from specsim.engine.engine_profiles.base import EngineProfile, closed_batch_one
from specsim.engine.fastpath import run_fast
from specsim.engine.simpy_engine import run_engine
from specsim.errors import ConfigError


class SpecsimLoop(EngineProfile):
    name = "specsim"
    explains_steps = True  # cost.explain prices a step as this engine runs it (γ draft passes, one verification)

    def accepts(self, cfg) -> list[ConfigError]:
        if cfg.engine.engine == "fast" and not closed_batch_one(cfg):
            return [ConfigError("the fast path simulates closed-loop batch 1 only", field="engine", value="fast",
                                allowed="simpy or auto, or batch 1 without rate / arrivals_csv / replicas")]
        return []

    def path(self, cfg) -> tuple[str, str]:
        if cfg.engine.engine == "fast":
            return "fast", "engine 'fast' asked for"
        if cfg.engine.engine == "simpy":
            return "simpy", "engine 'simpy' asked for"
        if closed_batch_one(cfg):
            return "fast", "auto: closed loop, batch 1, one replica (the fast path is exact there)"
        return "simpy", "auto: batching, arrivals or replicas need the event engine"

    def run(self, setup) -> tuple:
        s = setup
        if s.engine_path == "fast":
            spec, base = run_fast(s.workload, s.costs, s.acceptance, s.policy), run_fast(s.workload, s.costs)
        else:
            w = s.cfg.workload
            spec = run_engine(s.workload, s.costs, s.acceptance, s.policy, s.mem_spec, w.replicas, router=w.router,
                              seed=w.seed)
            base = run_engine(s.workload, s.costs, None, None, s.mem_base, w.replicas, router=w.router, seed=w.seed)
        return spec, base, {"engine": s.engine_path}


PROFILE = SpecsimLoop()
