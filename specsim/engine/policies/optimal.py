"""optimal: the integer γ maximizing eq. (5) at the run's α and derived c, then fixed (`--policy optimal`)."""

from __future__ import annotations

from specsim import theory
from specsim.engine.acceptance import GAMMA_CAP
from specsim.engine.policies.fixed import FixedPolicy


class OptimalPolicy(FixedPolicy):
    """The integer γ maximizing eq. (5) at the run's α and the derived c (`theory.optimal_gamma`, γ ≤ GAMMA_CAP).

    eq. (5) has no notion of batch size: at batch > 1 this is still the batch-1 optimum."""

    name = "optimal"

    def __init__(self, alpha: float, c: float, gamma_max: int = GAMMA_CAP):
        super().__init__(int(theory.optimal_gamma(min(alpha, 1.0 - 1e-12), c, gamma_max=gamma_max)))
        self.alpha, self.c = alpha, c

    @classmethod
    def build(cls, gamma: int, alpha: float, c: float, cfg=None, **resolved) -> OptimalPolicy:
        return cls(alpha, c)
