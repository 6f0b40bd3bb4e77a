"""Engine profiles: how a serving engine schedules one step — a strategy the user picks (`--engine-profile`).

Each profile is one module with `run(cfg, wl, acc, policy, costs, target, draft, mem_spec, mem_base)` returning
(speculative Records, baseline Records, extra summary keys); `specsim.simulate` never branches on a profile.
- `specsim` (`specsim_loop.py`, the default): specsim's own engine — one draft-then-verify iteration over the
  batch, the admitted requests' prefill stalling it (what specsim has always simulated; its executor's loop).
- `hf-assisted` (`hf_assisted.py`): Hugging Face assisted generation as transformers runs it, batch 1 only —
  prefill fused into the first round, the draft re-fed 2 positions every round, γ clipped at the end.
- `vllm-v1` (`vllm_v1.py`): vLLM's V1 scheduler — token budget, chunked prefill mixed with decodes, KV blocks
  and preemption by recompute, the draft's passes after the target's in one step.
"""

from __future__ import annotations

from importlib import import_module

PROFILES = {"specsim": "specsim.engine.engine_profiles.specsim_loop",
            "hf-assisted": "specsim.engine.engine_profiles.hf_assisted",
            "vllm-v1": "specsim.engine.engine_profiles.vllm_v1"}


def get(name: str):
    """The profile module for `name` (SimConfig has already checked that the name is one of PROFILES)."""
    return import_module(PROFILES[name])
