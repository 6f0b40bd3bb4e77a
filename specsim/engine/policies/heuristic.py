"""heuristic: Hugging Face's `num_assistant_tokens_schedule="heuristic"`, per request (`--policy heuristic`)."""

from __future__ import annotations

import numpy as np

from specsim.engine.acceptance import GAMMA_CAP
from specsim.engine.policies.base import Baseline, Policy, averaged_baseline, constant_baseline


class HeuristicPolicy(Policy):
    """Start at γ0, +2 after a clean sweep (all γ drafts accepted), −1 otherwise, floor 1; we also cap at
    GAMMA_CAP (HF has no cap). Each request carries its own γ (the state); the iteration drafts the batch's
    largest, every request is judged on its own γ."""

    name = "heuristic"
    batch_free = True  # γ follows the request's own outcomes

    def __init__(self, gamma: int, cap: int = GAMMA_CAP):
        self.gamma, self.cap = int(gamma), int(cap)
        self.reported_gamma = self.gamma
        self.max_gamma = self.step_draws = self.cap
        self.draws = self.cap + 1

    def start(self, k: int) -> np.ndarray:
        return np.full(k, self.gamma, np.int64)

    def step(self, draw, state, batch: int) -> tuple:  # a Step's fields
        G = int(state.max())
        n = draw(G, state)
        return n, G, state, state, self.update(state, n)

    def update(self, gamma: np.ndarray, accepted: np.ndarray) -> np.ndarray:
        """Each request's next γ from its last one and what it accepted (vectorized over the batch)."""
        nxt = np.where(accepted >= gamma, gamma + 2, gamma - 1)
        return np.clip(nxt, 1, self.cap)

    def baseline(self, alpha: float, c: float, gamma_used: np.ndarray) -> Baseline:
        if not gamma_used.size:  # no request took a step (all one token long): the initial γ's closed form
            return constant_baseline(alpha, c, self.gamma)
        return averaged_baseline(alpha, c, gamma_used)


def heuristic_schedule(gamma0: int, accepted: list[int], cap: int = GAMMA_CAP) -> list[int]:
    """γ used at each step of one request whose steps accept `accepted[i]` drafts (reference, for tests/docs)."""
    g, out = int(gamma0), []
    for n in accepted:
        out.append(g)
        g = min(cap, g + 2) if n >= g else max(1, g - 1)
    return out
