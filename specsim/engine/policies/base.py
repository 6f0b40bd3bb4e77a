"""What a γ policy is to the engines: how many uniforms a step needs, its largest step, the next γ, its closed form.

A policy is a strategy object; the engines (`specsim.engine.simpy_engine`'s kernels, `specsim.engine.fastpath`) and
`specsim.simulate._summarize` read only the attributes and methods of `Policy` below and never ask which policy it
is. One step of a set of requests (the live batch, or the fast path's lockstep):

    out = policy.step(draw, state, batch)

`draw(G, gamma=None)` is the acceptance step written once (`specsim.engine.draws.LiveDraws.draw`): each request is
judged on G drafts (or on its own gamma[r] ≤ G of them) and the number of leading accepts comes back. The policy
calls it once and returns a `Step`'s fields, in order: the accepted counts, how many draft passes the iteration
runs, the γ each request used, how many uniforms each consumed and its per-request state for the next step
(heuristic: the next γ; bands: none — its γ comes from the live batch size each step).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from specsim import theory


class Step(NamedTuple):
    """One step's outcome for the requests of a batch (arrays over the batch, or one int for all of them).

    `Policy.step` returns these fields in this order; the built-in policies return them as a plain tuple, which
    the kernels unpack by name (a NamedTuple built every iteration costs ~2% of a live step, by callgrind)."""

    accepted: np.ndarray  # leading accepted drafts per request
    passes: int  # draft passes the iteration runs (the largest γ used; the verification has B·(passes + 1) positions)
    gamma: int | np.ndarray  # the γ each request used (what acceptance metrics count as drafted)
    consumed: int | np.ndarray  # uniforms each request's stream advanced by
    state: np.ndarray | None  # per-request state for the next step (None: the policy keeps none)


class Baseline(NamedTuple):
    """The closed forms beside the simulated figures (see `specsim.simulate`)."""

    eq1: float  # tokens per target run, eq. (1) (or its average / limit)
    eq5: float  # speedup, eq. (5)
    dist: list | None  # P(k tokens per run), k = 1 … γ+1, when one γ was used throughout
    acceptance_rate: float | None  # draft acceptance rate, (eq1 − 1)/γ, idem


class Policy:
    """The protocol every policy follows (subclasses set the attributes and override what they change)."""

    name = "policy"
    max_gamma: int  # most drafts a step may use: sizes the KV reservation (γ_max + 1 positions per request)
    draws: int  # most uniforms a step looks at (the acceptance step's gather width)
    step_draws: int  # most uniforms a step may consume (when the uniform windows must be refilled)
    fixed_gamma: int | None = None  # the γ of every step of every request, when nothing can change it: then a
    # request's life does not depend on the batch and engines may draw it whole, ahead (`acceptance.FixedRuns`)
    reported_gamma: int | None = None  # the summary's "gamma" (the configured or initial γ; None: none fixed)
    batch_free: bool = False  # True when a request's γ, draws and state never depend on the rest of its batch and a
    # step's draft passes are the largest γ in it: then a closed loop can be simulated from each request's life
    # drawn alone (`specsim.engine.closed`)

    @classmethod
    def build(cls, gamma: int, alpha: float, c: float, cfg=None, **resolved) -> Policy:
        """The policy for a run (`make_policy`): configured γ, the run's α and derived c, the SimConfig, and what
        the setup stage worked out for it (`resolved`, e.g. the bands policy's default bands: no policy runs a
        simulation or a study itself)."""
        return cls(gamma)

    def start(self, k: int) -> np.ndarray | None:
        """Per-request state of k newly admitted requests (None: the policy keeps none)."""
        return None

    def step(self, draw, state, batch: int) -> tuple:  # pragma: no cover - every policy overrides it
        raise NotImplementedError

    def baseline(self, alpha: float, c: float, gamma_used: np.ndarray) -> Baseline:  # pragma: no cover
        """eq. (1) and eq. (5) at the run's α and c; gamma_used = the γ of every request-step the run took."""
        raise NotImplementedError

    def summary(self) -> dict:
        """Extra summary keys (only policies with something to say add any)."""
        return {}


@lru_cache(maxsize=4096)  # sweeps evaluate the same (α, γ) point after point
def eq1(a: float, gamma: int) -> float:
    """eq. (1) at α, γ (`theory.expected_tokens`, γ + 1 at α = 1); γ = 0 (speculation off) is one token."""
    return float(theory.expected_tokens(a, gamma)) if gamma else 1.0


@lru_cache(maxsize=4096)
def dist_eq1(a: float, gamma: int) -> tuple:
    return tuple(theory.expected_tokens_distribution(a, gamma).tolist())


def constant_baseline(a: float, c: float, gamma: int) -> Baseline:
    """One γ at every step: eq. (1), eq. (5), the tokens-per-run distribution and the draft acceptance rate."""
    gamma = max(1, int(gamma))
    e1 = eq1(a, gamma)
    return Baseline(e1, e1 / (gamma * c + 1.0), list(dist_eq1(a, gamma)), (e1 - 1.0) / gamma)


def averaged_baseline(a: float, c: float, gamma_used: np.ndarray) -> Baseline:
    """γ varying from step to step: eq. (1)/(5) averaged over the γ each request-step used,
    Σ eq1(α, γ_step) / steps and Σ eq1 / Σ(γ_step·c + 1)."""
    gs, counts = np.unique(gamma_used, return_counts=True)
    e1 = np.array([eq1(a, int(x)) for x in gs])
    tokens = (e1 * counts).sum()
    return Baseline(float(tokens / counts.sum()), float(tokens / ((gs * c + 1.0) * counts).sum()), None, None)
