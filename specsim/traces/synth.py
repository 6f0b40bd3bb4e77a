"""Synthetic β traces with known structure, to see what the mean α alone hides.

Every generator draws sequence i from `specsim.rng.stream(seed, TRACE_SYNTH, i)`, so the same seed gives
identical traces and adding sequences never changes the earlier ones. The metadata records source="synthetic",
the generator's kind and parameters, and the seed.

- `iid(alpha, ...)`: β_t = α at every position (i.i.d. acceptance with fixed α — eq. (1) holds exactly);
  bernoulli=True draws β_t ∈ {0, 1} with P(1) = α instead, like a temperature-0 trace.
- `beta_dist(mean, concentration, ...)`: β_t i.i.d. ~ Beta(a, b), a = mean·κ, b = (1 − mean)·κ.
- `markov(alpha, mean_stretch, ...)`: a two-state chain of easy and hard stretches (β = beta_easy / beta_hard),
  see `markov_chain` for the exact transition probabilities; each sequence starts in the stationary distribution.
- `decay(alpha0, decay, ...)`: β_t = alpha0 everywhere plus metadata slot_decay = r, so draft slot k is accepted
  with probability alpha0·r^k (see `specsim.traces.format`).
- `ranked(topk_acceptance, ...)`: a temperature-0 trace with a `rank` column (i.i.d. ranks), for token trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specsim.errors import ConfigError, check_range
from specsim.rng import TRACE_SYNTH, stream
from specsim.traces.format import RANK_NONE, Trace

MAX_TOKENS = 100_000_000  # our choice: 800 MB of float64 β, the most a synthetic trace may allocate
KINDS = ("iid", "beta", "markov", "decay")


def _shape(n_sequences: int, length: int) -> tuple[int, int]:
    for name, v in (("n_sequences", n_sequences), ("length", length)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ConfigError("value out of range", field=name, value=v, allowed="integers >= 1")
    if n_sequences * length > MAX_TOKENS:
        raise ConfigError("trace too large", field="n_sequences*length", value=n_sequences * length,
                          allowed=f"<= {MAX_TOKENS}")
    return int(n_sequences), int(length)


def _trace(betas: list[np.ndarray], kind: str, seed: int, params: dict, **extra) -> Trace:
    meta = {"source": "synthetic", "how_recorded": f"specsim.traces.synth.{kind}", "seed": int(seed),
            "generator": {"kind": kind, **params}, **extra}
    return Trace.from_sequences(betas, meta)


def iid(alpha: float, n_sequences: int = 16, length: int = 256, seed: int = 0, *,
        bernoulli: bool = False) -> Trace:
    """β_t = α everywhere, or (bernoulli=True) β_t ∈ {0, 1} with P(1) = α."""
    check_range("alpha", alpha, lo=0, hi=1)
    n, L = _shape(n_sequences, length)
    if bernoulli:
        betas = [(stream(seed, TRACE_SYNTH, i).random(L) < alpha).astype(np.float64) for i in range(n)]
    else:
        betas = [np.full(L, float(alpha)) for _ in range(n)]
    return _trace(betas, "iid", seed, {"alpha": float(alpha), "bernoulli": bool(bernoulli),
                                       "n_sequences": n, "length": L})


def beta_dist(mean: float, concentration: float, n_sequences: int = 16, length: int = 256,
              seed: int = 0) -> Trace:
    """β_t i.i.d. ~ Beta(mean·κ, (1 − mean)·κ); larger κ = β closer to the mean."""
    check_range("alpha", mean, lo=0, hi=1, lo_open=True, hi_open=True)
    check_range("concentration", concentration, lo=0, lo_open=True, hi=1e9)
    n, L = _shape(n_sequences, length)
    a, b = mean * concentration, (1.0 - mean) * concentration
    betas = [np.clip(stream(seed, TRACE_SYNTH, i).beta(a, b, L), 0.0, 1.0) for i in range(n)]
    return _trace(betas, "beta", seed, {"mean": float(mean), "concentration": float(concentration),
                                        "a": a, "b": b, "n_sequences": n, "length": L})


@dataclass(frozen=True)
class MarkovChain:
    """Two-state chain over [easy, hard] stretches with stationary mean β = α and mean stretch length S.

    π_easy = (α − β_hard) / (β_easy − β_hard). Stretches alternate, so the mean stretch length over all
    stretches is S = (L_easy + L_hard) / 2 with L_x = 2·S·π_x the mean sojourn in state x; hence
      p_easy_to_hard = 1 / (2·S·π_easy),   p_hard_to_easy = 1 / (2·S·π_hard),
    a stretch ends at a random position with probability 1/S, and corr(β_t, β_{t+k}) = λ^k with
    λ = 1 − p_easy_to_hard − p_hard_to_easy. Each row of `transition` gives P(next state | state).
    """

    alpha: float
    mean_stretch: float
    beta_easy: float
    beta_hard: float
    pi_easy: float
    p_easy_to_hard: float
    p_hard_to_easy: float

    @property
    def transition(self) -> np.ndarray:
        e, h = self.p_easy_to_hard, self.p_hard_to_easy
        return np.array([[1.0 - e, e], [h, 1.0 - h]])

    @property
    def stationary(self) -> np.ndarray:
        return np.array([self.pi_easy, 1.0 - self.pi_easy])

    @property
    def betas(self) -> np.ndarray:
        return np.array([self.beta_easy, self.beta_hard])

    @property
    def eigenvalue(self) -> float:
        return 1.0 - self.p_easy_to_hard - self.p_hard_to_easy


# Defaults of the synthetic kinds (β_easy 0.95, β_hard 0.2, stretches of 20, κ = 20, decay 0.9) are our choice:
# illustrative shapes — easy stretches nearly always accepted, hard ones mostly rejected — not fitted to a model.
def markov_chain(alpha: float, mean_stretch: float, beta_easy: float = 0.95, beta_hard: float = 0.2) -> MarkovChain:
    """The chain `markov` samples from; ConfigError if α or the stretch length cannot be reached."""
    check_range("beta_easy", beta_easy, lo=0, hi=1)
    check_range("beta_hard", beta_hard, lo=0, hi=1)
    if not beta_hard < beta_easy:
        raise ConfigError("beta_hard must be below beta_easy", field="beta_hard", value=beta_hard,
                          allowed=f"[0, {beta_easy:g})")
    if not beta_hard < alpha < beta_easy:
        raise ConfigError(f"alpha not reachable with beta_hard={beta_hard:g}, beta_easy={beta_easy:g}",
                          field="alpha", value=alpha, allowed=f"({beta_hard:g}, {beta_easy:g})")
    pi_easy = (alpha - beta_hard) / (beta_easy - beta_hard)
    shortest = 1.0 / (2.0 * min(pi_easy, 1.0 - pi_easy))  # every mean sojourn must be >= 1 position
    check_range("mean_stretch", mean_stretch, lo=shortest, hi=1e12)
    return MarkovChain(alpha=float(alpha), mean_stretch=float(mean_stretch), beta_easy=float(beta_easy),
                       beta_hard=float(beta_hard), pi_easy=pi_easy,
                       p_easy_to_hard=1.0 / (2.0 * mean_stretch * pi_easy),
                       p_hard_to_easy=1.0 / (2.0 * mean_stretch * (1.0 - pi_easy)))


def _markov_states(chain: MarkovChain, rng: np.random.Generator, length: int) -> np.ndarray:
    """Easy (True) / hard (False) per position: stationary start, geometric sojourns (memoryless)."""
    easy = np.empty(length, dtype=bool)
    state = bool(rng.random() < chain.pi_easy)
    pos = 0
    while pos < length:
        n = int(rng.geometric(chain.p_easy_to_hard if state else chain.p_hard_to_easy))
        easy[pos:pos + n] = state
        pos += n
        state = not state
    return easy


def markov(alpha: float, mean_stretch: float, n_sequences: int = 16, length: int = 256, seed: int = 0, *,
           beta_easy: float = 0.95, beta_hard: float = 0.2, bernoulli: bool = False) -> Trace:
    """Clustered β: easy and hard stretches with stationary mean α; bernoulli=True draws β ∈ {0, 1}."""
    chain = markov_chain(alpha, mean_stretch, beta_easy, beta_hard)
    n, L = _shape(n_sequences, length)
    betas = []
    for i in range(n):
        rng = stream(seed, TRACE_SYNTH, i)
        b = np.where(_markov_states(chain, rng, L), chain.beta_easy, chain.beta_hard)
        betas.append((rng.random(L) < b).astype(np.float64) if bernoulli else b)
    params = {"alpha": chain.alpha, "mean_stretch": chain.mean_stretch, "beta_easy": chain.beta_easy,
              "beta_hard": chain.beta_hard, "pi_easy": chain.pi_easy, "p_easy_to_hard": chain.p_easy_to_hard,
              "p_hard_to_easy": chain.p_hard_to_easy, "initial_state": "stationary", "bernoulli": bool(bernoulli),
              "n_sequences": n, "length": L}
    return _trace(betas, "markov", seed, params)


def decay(alpha0: float, decay: float, n_sequences: int = 16, length: int = 256, seed: int = 0) -> Trace:
    """β_t = alpha0 with slot_decay = r: draft slot k accepted with probability alpha0·r^k."""
    check_range("alpha", alpha0, lo=0, hi=1)
    check_range("decay", decay, lo=0, hi=1)
    n, L = _shape(n_sequences, length)
    betas = [np.full(L, float(alpha0)) for _ in range(n)]
    return _trace(betas, "decay", seed, {"alpha0": float(alpha0), "decay": float(decay), "n_sequences": n,
                                         "length": L}, slot_decay=float(decay))


def ranked(topk_acceptance, n_sequences: int = 16, length: int = 256, seed: int = 0) -> Trace:
    """A temperature-0 trace with ranks (`specsim.traces.format`): i.i.d. ranks with P(rank < k) =
    topk_acceptance[k − 1] (the draft's top-k acceptance, Sequoia's "acceptance vector", Chen et al. 2024), the
    rest of the mass RANK_NONE, and β = 1 exactly at rank 0 — what a token tree is judged on."""
    v = np.asarray(topk_acceptance, dtype=float) if isinstance(topk_acceptance, (list, tuple)) else np.zeros(0)
    if not v.size or not np.all(np.isfinite(v)) or v[0] < 0 or v[-1] > 1 or np.any(np.diff(v) < 0):
        raise ConfigError("not a cumulative top-k acceptance", field="topk_acceptance", value=topk_acceptance,
                          allowed="a non-decreasing list [P(rank < 1), P(rank < 2), ...] in [0, 1]")
    n, L = _shape(n_sequences, length)
    ranks = []
    for i in range(n):
        r = np.searchsorted(v, stream(seed, TRACE_SYNTH, i).random(L), side="right").astype(np.int64)
        ranks.append(np.where(r >= v.size, RANK_NONE, r))
    meta = {"source": "synthetic", "how_recorded": "specsim.traces.synth.ranked", "seed": int(seed), "temperature": 0,
            "generator": {"kind": "ranked", "topk_acceptance": v.tolist(), "n_sequences": n, "length": L}}
    return Trace.from_sequences([(r == 0).astype(np.float64) for r in ranks], meta, ranks=ranks)


def synthesize(kind: str, alpha: float, *, n_sequences: int = 16, length: int = 256, seed: int = 0,
               mean_stretch: float = 20.0, concentration: float = 20.0, decay_rate: float = 0.9,
               beta_easy: float = 0.95, beta_hard: float = 0.2, bernoulli: bool = False) -> Trace:
    """One entry point by kind name (iid | beta | markov | decay), as the CLI uses it."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError("seed must be an integer >= 0", field="seed", value=seed, allowed="integers >= 0")
    shape = {"n_sequences": n_sequences, "length": length, "seed": seed}
    if kind == "iid":
        return iid(alpha, bernoulli=bernoulli, **shape)
    if kind == "beta":
        return beta_dist(alpha, concentration, **shape)
    if kind == "markov":
        return markov(alpha, mean_stretch, beta_easy=beta_easy, beta_hard=beta_hard, bernoulli=bernoulli, **shape)
    if kind == "decay":
        return decay(alpha, decay_rate, **shape)
    raise ConfigError("unknown trace generator", field="kind", value=kind, allowed=" | ".join(KINDS))
