"""Plugin names, each with where its code lives: the one line a new engine profile or γ policy adds.

Strings only — nothing is imported here (ground floor) — so `specsim.config` takes its choices from the names
(`config.Policy`, `config.EngineProfile`) and the engine imports the code on first use (`"module:attribute"`:
a `Policy` subclass; an `EngineProfile` instance). Adding a policy: its module under `specsim/engine/policies/`,
its test, and one line in POLICIES; an engine profile likewise under `specsim/engine/engine_profiles/` and
ENGINE_PROFILES (specsim/CONVENTIONS.md shows an example); a router under `specsim/engine/routers.py` and ROUTERS.
"""

from __future__ import annotations

# γ policies (`--policy`), in the order messages list them
POLICIES: dict[str, str] = {
    "fixed": "specsim.engine.policies.fixed:FixedPolicy",
    "optimal": "specsim.engine.policies.optimal:OptimalPolicy",
    "heuristic": "specsim.engine.policies.heuristic:HeuristicPolicy",
    "oracle": "specsim.engine.policies.oracle:OraclePolicy",
    "bands": "specsim.engine.policies.bands:BandsPolicy",
}

# engine profiles (`--engine-profile`): how a serving engine schedules a step
ENGINE_PROFILES: dict[str, str] = {
    "specsim": "specsim.engine.engine_profiles.specsim_loop:PROFILE",
    "hf-assisted": "specsim.engine.engine_profiles.hf_assisted:PROFILE",
    "vllm-v1": "specsim.engine.engine_profiles.vllm_v1:PROFILE",
}

# routers (`--router`): which replica an arriving request joins (engine/routers.py; the first is the default)
ROUTERS: dict[str, str] = {
    "round-robin": "specsim.engine.routers:RoundRobin",
    "least-outstanding": "specsim.engine.routers:LeastOutstanding",
    "power-of-two": "specsim.engine.routers:PowerOfTwo",
    "shared-queue": "specsim.engine.routers:SharedQueue",
}


def load(target: str):
    """The object a registry entry names ("module:attribute"), its module imported on first use."""
    from importlib import import_module

    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)
