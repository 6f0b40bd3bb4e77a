"""Engine profiles: how a serving engine schedules one step — a strategy the user picks (`--engine-profile`).

Each profile is a plugin (`base.EngineProfile`): one module defining `PROFILE`, whose `accepts(cfg)` lists what of a
config it cannot model (the setup stage refuses the first before building anything), `path(cfg)` the engine it runs
and why, and `run(setup)` (a resolved `specsim.setup.run.RunSetup`) returns (speculative Records, baseline Records,
extra summary keys). A new profile is its module, its test and one line in `specsim.registry.ENGINE_PROFILES`;
`specsim.simulate` and the setup never branch on a profile.
- `specsim` (`specsim_loop.py`, the default): specsim's own engine — one draft-then-verify iteration over the
  batch, the admitted requests' prefill stalling it (what specsim has always simulated; its executor's loop).
- `hf-assisted` (`hf_assisted.py`): Hugging Face assisted generation as transformers runs it, batch 1 only —
  prefill fused into the first round, the draft re-fed 2 positions every round, γ clipped at the end.
- `vllm-v1` (`vllm_v1.py`): vLLM's V1 scheduler — token budget, chunked prefill mixed with decodes, KV blocks
  and preemption by recompute, the draft's passes after the target's in one step.
"""

from __future__ import annotations

from specsim import registry
from specsim.engine.engine_profiles.base import EngineProfile

PROFILES = registry.ENGINE_PROFILES  # name -> "module:PROFILE" (specsim.registry: the one line a profile adds)


def get(name: str) -> EngineProfile:
    """The profile `name` (SimConfig has already checked that the name is one of PROFILES; imported on first use)."""
    return registry.load(PROFILES[name])
