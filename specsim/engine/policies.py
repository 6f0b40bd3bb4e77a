"""γ policies: how many tokens to draft per step. One small class each, chosen with `--policy NAME`.

Engines ask a policy for the initial γ, and (adaptive policies only) for each request's next γ given what the
last step accepted, vectorized over the active batch. In a batch, requests may want different γ: every request
draws and is judged against its own γ, but the pass count of the iteration is the batch's largest γ (the other
requests idle through the extra draft passes and pad the verification pass to B·(γ_max + 1) positions, as
static-shape serving engines do).
"""

from __future__ import annotations

import numpy as np

from specsim.engine.acceptance import GAMMA_CAP, ORACLE_CAP


class FixedPolicy:
    """γ fixed for every step of every request."""

    name = "fixed"
    adaptive = False
    oracle = False

    def __init__(self, gamma: int):
        self.gamma = int(gamma)

    def initial_gamma(self) -> int:
        return self.gamma

    @property
    def max_gamma(self) -> int:
        return self.gamma

    def update(self, gamma: np.ndarray, accepted: np.ndarray) -> np.ndarray:  # pragma: no cover - not adaptive
        return gamma


class OptimalPolicy(FixedPolicy):
    """The integer γ maximizing eq. (5) at the run's α and the derived c (`theory.optimal_gamma`, γ ≤ 64).

    eq. (5) has no notion of batch size: at batch > 1 this is still the batch-1 optimum."""

    name = "optimal"

    def __init__(self, alpha: float, c: float, gamma_max: int = GAMMA_CAP):
        from specsim import theory

        super().__init__(int(theory.optimal_gamma(min(alpha, 1.0 - 1e-12), c, gamma_max=gamma_max)))
        self.alpha, self.c = alpha, c


class HeuristicPolicy:
    """Hugging Face `num_assistant_tokens_schedule="heuristic"`, per request: start at γ0, +2 after a clean sweep
    (all γ drafts accepted), −1 otherwise, floor 1. We also cap at GAMMA_CAP = 64 (HF has no cap)."""

    name = "heuristic"
    adaptive = True
    oracle = False

    def __init__(self, gamma: int, cap: int = GAMMA_CAP):
        self.gamma, self.cap = int(gamma), int(cap)

    def initial_gamma(self) -> int:
        return self.gamma

    @property
    def max_gamma(self) -> int:
        return self.cap

    def update(self, gamma: np.ndarray, accepted: np.ndarray) -> np.ndarray:
        nxt = np.where(accepted >= gamma, gamma + 2, gamma - 1)
        return np.clip(nxt, 1, self.cap)


class OraclePolicy:
    """γ = the number of drafts about to be accepted (the paper's upper bound, E[tokens] = 1/(1 − α) under i.i.d.
    β). Not realizable: the engine looks at the step's draws first (see `specsim.engine.acceptance`)."""

    name = "oracle"
    adaptive = False
    oracle = True
    gamma = ORACLE_CAP

    def initial_gamma(self) -> int:
        return ORACLE_CAP

    @property
    def max_gamma(self) -> int:
        return ORACLE_CAP


def heuristic_schedule(gamma0: int, accepted: list[int], cap: int = GAMMA_CAP) -> list[int]:
    """γ used at each step of one request whose steps accept `accepted[i]` drafts (reference, for tests/docs)."""
    g, out = int(gamma0), []
    for n in accepted:
        out.append(g)
        g = min(cap, g + 2) if n >= g else max(1, g - 1)
    return out


POLICIES = ("fixed", "optimal", "heuristic", "oracle")


def make_policy(name: str, gamma: int, alpha: float, c: float):
    if name == "fixed":
        return FixedPolicy(gamma)
    if name == "optimal":
        return OptimalPolicy(alpha, c)
    if name == "heuristic":
        return HeuristicPolicy(gamma)
    if name == "oracle":
        return OraclePolicy()
    from specsim.errors import ConfigError
    raise ConfigError("unknown policy", field="policy", value=name, allowed=", ".join(POLICIES))
