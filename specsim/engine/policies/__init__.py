"""γ policies: how many tokens to draft per step, one strategy object per file, chosen with `--policy NAME`.

The protocol the engines see is `base.Policy` (draws per step, largest step, the next γ per request from the last
outcome and the live batch size, the closed-form baseline). In a batch, requests may use different γ: every
request draws and is judged against its own γ, but the pass count of the iteration is the batch's largest γ (the
other requests idle through the extra draft passes and pad the verification pass to B·(γ_max + 1) positions, as
static-shape serving engines do).

A new policy is one module here with a `Policy` subclass (its `build` classmethod makes it from the config; what it
needs worked out beforehand, e.g. default bands, comes from `specsim.setup.run.POLICY_INPUTS`), its test, and one
line in `specsim.registry.POLICIES` (config's choices and POLICIES here follow from it). vLLM's
`disable_by_batch_size` is a rule over whichever policy runs (`disable_by_batch.wrap`, applied by `make_policy`).
"""

from __future__ import annotations

from specsim import registry
from specsim.engine.policies import disable_by_batch
from specsim.engine.policies.bands import BandsPolicy
from specsim.engine.policies.base import Baseline, Policy, Step
from specsim.engine.policies.fixed import FixedPolicy
from specsim.engine.policies.heuristic import HeuristicPolicy, heuristic_schedule
from specsim.engine.policies.optimal import OptimalPolicy
from specsim.engine.policies.oracle import OraclePolicy

POLICIES: dict[str, type[Policy]] = {name: registry.load(where) for name, where in registry.POLICIES.items()}

__all__ = ["POLICIES", "Baseline", "BandsPolicy", "FixedPolicy", "HeuristicPolicy", "OptimalPolicy", "OraclePolicy",
           "Policy", "Step", "heuristic_schedule", "make_policy"]


def make_policy(name: str, gamma: int, alpha: float, c: float, cfg=None, **resolved) -> Policy:
    """The policy `name` for a run: the configured γ, the run's α (after lenience), the derived c, the SimConfig
    (for what a policy reads beyond those, e.g. given bands) and what the setup stage worked out for it
    (`resolved`: `specsim.setup.run.POLICY_INPUTS`, e.g. the bands choose-draft advises)."""
    cls = POLICIES.get(name)
    if cls is None:
        from specsim.errors import ConfigError
        raise ConfigError("unknown policy", field="policy", value=name, allowed=", ".join(POLICIES))
    # vLLM's disable_by_batch_size, if set, wraps whichever policy runs
    return disable_by_batch.wrap(cls.build(gamma, alpha, c, cfg, **resolved), cfg)
