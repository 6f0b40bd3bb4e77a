"""`resolve(cfg) -> RunSetup`: everything a run needs, built once, in one place, in a fixed order.

1. the engine profile (`specsim.engine.engine_profiles`) is asked what of the config it cannot model
   (`accepts`): the first violation is refused as one ConfigError before anything is read;
2. the workload (arrivals, lengths) and the acceptance source (α, a β trace, a token tree's slot rates);
3. the deployment (`deployment.Deployment`: hardware, stack, TP, models or heads; none under fixed_c) and the
   step costs (`steptime.StepCosts`, a method's pricing, a token tree), and c at the prompt length;
4. the γ policy, with what it needs worked out here (`POLICY_INPUTS`: the bands choose-draft advises, from
   fixed-γ points the caller's `run_point` simulates), wrapped in
   vLLM's disable_by_batch_size when set;
5. memory (admission control with and without the draft) and the longest request checked against the models'
   positions and the KV capacity;
6. the engine path the profile takes, and why (`EngineProfile.path`).

`specsim.simulate` runs the RunSetup (`setup.profile.run(setup)`) and summarizes it; nothing here simulates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.config import SimConfig
from specsim.cost.steptime import Memory, StepCosts
from specsim.engine import engine_profiles
from specsim.engine.acceptance import Acceptance
from specsim.engine.engine_profiles.base import EngineProfile
from specsim.engine.policies import Policy, make_policy
from specsim.engine.workload import Workload, build_workload
from specsim.setup import advice
from specsim.setup.deployment import Deployment

# what a γ policy needs beyond the config, worked out by the setup stage: policy name -> f(cfg, α, run_point) ->
# build kwargs (run_point: how to simulate a fixed-γ point, passed down by the simulate layer; `setup.advice`)
POLICY_INPUTS = {"bands": advice.policy_inputs}


@dataclass(frozen=True)
class RunSetup:
    cfg: SimConfig
    workload: Workload
    acceptance: Acceptance
    deployment: Deployment | None  # None under fixed_c: no profile is read then
    costs: StepCosts
    c: float  # derived c at the configured prompt length (batch 1)
    policy: Policy
    mem_spec: Memory | None  # admission control with the draft's weights and KV (None under fixed_c)
    mem_base: Memory | None  # ... and without (the paired baseline)
    profile: EngineProfile
    engine_path: str  # the engine that runs the loop: 'fast', 'simpy', 'hf-assisted', 'vllm-v1'
    engine_reason: str  # why that one

    @property
    def target(self) -> Any:
        """The target's pass-time model (None under fixed_c)."""
        return None if self.deployment is None else self.deployment.cost_models[0]

    @property
    def draft(self) -> Any:
        return None if self.deployment is None else self.deployment.cost_models[1]

    @property
    def peaks(self) -> tuple[float | None, float | None]:
        """(peak bytes/s, peak FLOP/s) MBU and MFU are fractions of (None under fixed_c)."""
        d = self.deployment
        return (None, None) if d is None else (d.peak_bytes_s, d.peak_flops)


def check(cfg: SimConfig) -> EngineProfile:
    """The config's engine profile, after refusing the first thing it cannot model (`EngineProfile.accepts`)."""
    profile = engine_profiles.get(cfg.engine.engine_profile)
    violations = profile.accepts(cfg)
    if violations:
        raise violations[0]
    return profile


def step_costs(cfg: SimConfig) -> tuple[StepCosts, Deployment | None]:
    """Step costs and the resolved deployment (None under fixed_c: no profile is read then)."""
    from specsim import methods
    from specsim.methods.tree_config import from_config as tree_of

    d = cfg.deployment
    if d.fixed_c is not None:
        return StepCosts(None, None, d.fixed_c), None
    dep = Deployment.from_config(cfg)
    tree_setup = tree_of(cfg)
    tree = None if tree_setup is None or tree_setup.tree.is_chain else tree_setup.tree  # width 1: priced as a chain
    if cfg.speculation.method == "draft_model":
        return StepCosts(*dep.cost_models, draft_catchup=d.draft_catchup, tree=tree), dep
    method = methods.get(cfg.speculation.method)
    method.check(cfg.speculation.gamma, dep.draft)
    return StepCosts(*dep.cost_models, method=method, gamma=cfg.speculation.gamma, tree=tree), dep


def policy(cfg: SimConfig, alpha: float, c: float, run_point=None) -> Policy:
    """The configured γ policy with what the setup works out for it (`POLICY_INPUTS`)."""
    name = cfg.speculation.policy
    inputs = POLICY_INPUTS[name](cfg, alpha, run_point) if name in POLICY_INPUTS else {}
    return make_policy(name, cfg.speculation.gamma, alpha, c, cfg, **inputs)


def _memory(dep: Deployment | None, wl: Workload, pol: Policy, costs: StepCosts):
    if dep is None:
        return None, None
    dep.check_context(wl.prompt_len, wl.output_len)  # prompt + output within the models' positions
    # KV slots the verification writes per request: γ + 1, or a tree's nodes + 1
    mem_spec, mem_base = dep.memory(pol.max_gamma + 1 if costs.tree is None else costs.tree.nodes + 1)
    worst = int(np.argmax(mem_spec.request_bytes(wl.prompt_len, wl.output_len)))
    mem_spec.check_one(int(wl.prompt_len[worst]), int(wl.output_len[worst]))
    return mem_spec, mem_base


def resolve(cfg: SimConfig, run_point=None) -> RunSetup:
    """Everything a run of `cfg` needs (the module docstring gives the order). `run_point(**flat fields) -> summary
    row` simulates a fixed-γ point: what the bands policy's default bands are worked out with (`setup.advice`);
    `specsim.simulate.resolved` passes it — this layer never imports the simulate layer above it."""
    profile = check(cfg)
    wl = build_workload(cfg)
    acc = Acceptance.from_config(cfg)
    costs, dep = step_costs(cfg)
    c = costs.derived_c(cfg.workload.prompt_len)
    pol = policy(cfg, acc.alpha, c, run_point)
    mem_spec, mem_base = _memory(dep, wl, pol, costs)
    path, reason = profile.path(cfg)
    return RunSetup(cfg, wl, acc, dep, costs, c, pol, mem_spec, mem_base, profile, path, reason)
