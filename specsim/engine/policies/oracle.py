"""oracle: γ = the number of drafts about to be accepted, the paper's upper bound (`--policy oracle`)."""

from __future__ import annotations

import numpy as np

from specsim import theory
from specsim.engine.acceptance import ORACLE_CAP
from specsim.engine.policies.base import Baseline, Policy


class OraclePolicy(Policy):
    """γ = the number of drafts about to be accepted (E[tokens] = 1/(1 − α) under i.i.d. β). Not realizable: the
    step looks at its draws first — judged on ORACLE_CAP drafts, each request's γ is what it accepted and its
    stream advances by the n accepted + the rejecting uniform, or ORACLE_CAP when capped (see
    `specsim.engine.acceptance`)."""

    name = "oracle"
    gamma = ORACLE_CAP
    max_gamma = ORACLE_CAP
    draws = ORACLE_CAP + 1
    batch_free = True  # γ is what the request itself accepts
    step_draws = ORACLE_CAP + 1

    @classmethod
    def build(cls, gamma: int, alpha: float, c: float, cfg=None, **resolved) -> OraclePolicy:
        return cls()

    def step(self, draw, state, batch: int) -> tuple:  # a Step's fields
        n = draw(ORACLE_CAP)
        return n, int(n.max()), n, np.minimum(n + 1, ORACLE_CAP), None

    def baseline(self, alpha: float, c: float, gamma_used: np.ndarray) -> Baseline:
        """1/(1 − α) and 1/(1 − α + αc); at α = 1 (a trace of clean sweeps) every step drafts ORACLE_CAP."""
        if alpha < 1:
            return Baseline(theory.oracle_expected_tokens(alpha), theory.oracle_speedup(alpha, c), None, None)
        e1 = float(ORACLE_CAP + 1)
        return Baseline(e1, e1 / (ORACLE_CAP * c + 1.0), None, None)
