"""bands: γ by the live batch size, vLLM's `num_speculative_tokens_per_batch_size` (`--policy bands`).

Bands are vLLM's shape [[start, end, γ], ...]: inclusive batch-size ranges, ascending and disjoint (checked by
`specsim.config`). Each iteration every request of the replica drafts the γ of the band holding the replica's live
batch size B (the requests decoding in that iteration, the newly admitted included). A B outside every band takes
the nearest band's γ: below the first band its γ, above the last band its γ, in a gap between two bands the γ of
the closer one (equally close: the lower band's).

Without bands given, they are what choose-draft advises for the setup, worked out by the setup stage before the
policy is built (`specsim.setup.advice`: choose-draft's point search and schedule on the config's hardware, stack, TP,
target, and the draft with the run's α — or its trace —, prompt and output lengths and seed): its recommended γ
per batch size at choose-draft's default batch sizes 1 … 64 and γ ≤ 8, each point simulated with 64 requests (one
wave at batch 64; a small count keeps the advice cheap — it is cached per setup within a process). The policy
itself never runs a simulation. Above 64 the last band's γ holds (the nearest-band rule; choose-draft predicts
nothing beyond its range). Where choose-draft advises no speculation its band has γ = 0: those iterations draft
nothing and verify one position per request (priced as a plain decode step; the draft still prefills the request's
prompt).
The advice prices passes with the roofline of the hardware profile, whatever cost mode the run itself uses.
"""

from __future__ import annotations

import numpy as np

from specsim.engine.policies.base import Baseline, Policy, averaged_baseline, constant_baseline
from specsim.limits import MAX_BATCH

LARGEST_LIVE_BATCH = MAX_BATCH  # SimConfig bounds batch and max_batch by it: no replica's live batch is larger


class BandsPolicy(Policy):
    """γ switched with the live batch size of the replica, from [[start, end, γ], ...] bands."""

    name = "bands"

    def __init__(self, bands, source: str = "given"):
        self.bands = tuple((int(s), int(e), int(g)) for s, e, g in bands)
        self.source = source
        top = min(self.bands[-1][1], LARGEST_LIVE_BATCH)  # a band may end far beyond any live batch
        self._by_batch = [self._nearest(b) for b in range(top + 1)]  # γ for live batch 0 … top; above: the last
        gammas = {g for _, _, g in self.bands}
        self.max_gamma = max(gammas)
        self.draws, self.step_draws = self.max_gamma + 1, max(1, self.max_gamma)
        # one γ at every batch size: a request's life no longer depends on the batch (as under `fixed`)
        self.fixed_gamma = self.reported_gamma = gammas.pop() if len(gammas) == 1 else None
        self.batch_free = self.fixed_gamma is not None

    @classmethod
    def build(cls, gamma: int, alpha: float, c: float, cfg=None, bands=None, **resolved) -> BandsPolicy:
        """The config's bands if given; else `bands`, the default the setup stage worked out (choose-draft's)."""
        given = None if cfg is None else cfg.get("num_speculative_tokens_per_batch_size")
        if given is not None:
            return cls(given, "given")
        if bands is None:
            raise ValueError("policy 'bands' needs its bands: given in the config, or worked out by the setup "
                             "stage (specsim.setup.run.resolve)")
        return cls(bands, "choose-draft")

    def _nearest(self, batch: int) -> int:
        best = None
        for s, e, g in self.bands:
            d = s - batch if batch < s else (batch - e if batch > e else 0)
            if best is None or d < best[0]:
                best = (d, g)
        return best[1]

    def gamma_at(self, batch: int) -> int:
        """The γ of live batch size `batch`."""
        t = self._by_batch
        return t[batch] if batch < len(t) else t[-1]

    def step(self, draw, state, batch: int) -> tuple:  # a Step's fields
        G = self.gamma_at(batch)
        return draw(G), G, G, G, None

    def baseline(self, alpha: float, c: float, gamma_used: np.ndarray) -> Baseline:
        """As `fixed` with one γ; otherwise eq. (1)/(5) averaged over the γ each request-step used (γ = 0 steps
        count one token at the cost of one target pass)."""
        if self.fixed_gamma is not None:
            return constant_baseline(alpha, c, self.fixed_gamma)
        return averaged_baseline(alpha, c, gamma_used if gamma_used.size else np.array([self.gamma_at(1)]))

    def summary(self) -> dict:
        return {"gamma_bands": [list(b) for b in self.bands], "gamma_bands_source": self.source}
