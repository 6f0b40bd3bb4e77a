"""fixed: the configured γ at every step of every request (`--policy fixed`, the default)."""

from __future__ import annotations

import numpy as np

from specsim.engine.policies.base import Baseline, Policy, constant_baseline


class FixedPolicy(Policy):
    """γ fixed for every step of every request."""

    name = "fixed"
    batch_free = True

    def __init__(self, gamma: int):
        self.gamma = int(gamma)
        self.max_gamma = self.step_draws = self.fixed_gamma = self.reported_gamma = self.gamma
        self.draws = self.gamma + 1

    def step(self, draw, state, batch: int) -> tuple:  # a Step's fields
        G = self.gamma
        return draw(G), G, G, G, None

    def baseline(self, alpha: float, c: float, gamma_used: np.ndarray) -> Baseline:
        return constant_baseline(alpha, c, self.gamma)
