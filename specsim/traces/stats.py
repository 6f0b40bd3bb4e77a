"""Statistics of a β trace: what about it matters for speculative decoding beyond its mean α.

Everything here is computed exactly from β along the trace, with the acceptances treated as independent
Bernoulli(β_t · slot_factor(k)) draws given the trace — the expectation of what a seeded replay would average to,
so no rng and no sampling noise. At temperature 0 (β ∈ {0, 1}) the walk is deterministic and these are exact counts.

- `walk(trace, gamma)`: the draft walk of DESIGN.md "Simulation semantics". A step starting at output position t
  drafts slots k = 0..γ−1 onto positions t+k; slot k is accepted with probability β_{t+k}·slot_factor(k); the step
  ends at the first rejection (at slot k → next step starts at t+k+1) or after γ accepts (bonus token at t+γ →
  next step starts at t+γ+1). A dynamic program carries s_t = P(a step starts at t) along each sequence; then
  P(accept at slot k | slot k reached) = Σ_t s_t R_{t,k} b_{t,k} / Σ_t s_t R_{t,k}, with R_{t,k} the probability
  that a step started at t reaches slot k. Slots falling past a sequence's end are not counted (the request has
  finished). tokens_per_target_run = tokens in the trace / expected number of steps (the last step of a sequence
  is counted whole). With constant β = α this is eq. (1) up to end effects.
- `autocorrelation(trace, max_lag)`: lag-k correlation of β_t with β_{t+k} over pairs inside the same sequence,
  using the trace-wide mean and variance; NaN when β is constant (zero variance) or no pair exists.
- `run_lengths(trace)`: mean over positions t of the expected number of consecutive acceptances starting at t,
  R_t = β_t (1 + R_{t+1}) (the tokens an oracle γ would accept there), against the i.i.d. value with the same α,
  α(1 − α^m)/(1 − α) = eq. (1) at γ = m, minus the bonus token, with m = positions left in the sequence — the
  geometric α/(1 − α), truncated at each sequence's end so short sequences compare like with like.
  clustering_index = observed / i.i.d.: 1 for i.i.d. β, above 1 when easy positions come in stretches.
  slot_decay is ignored here (a trace-level property).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from specsim.limits import GAMMA_CAP
from specsim.errors import ConfigError
from specsim.theory import expected_tokens
from specsim.traces.format import Trace

_MAX_CELLS = 1 << 20  # padded cells per chunk: bounds memory for long traces


def _chunks(trace: Trace, max_cells: int = _MAX_CELLS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Sequences padded into (beta, valid) matrices, similar lengths together, ≤ max_cells per chunk
    (a single longer sequence gets a chunk of its own)."""
    seqs = sorted(trace.sequences(), key=len)
    i = 0
    while i < len(seqs):
        j = i + 1
        while j < len(seqs) and (j + 1 - i) * len(seqs[j]) <= max_cells:
            j += 1
        group = seqs[i:j]
        width = len(group[-1])
        beta = np.zeros((len(group), width))
        valid = np.zeros((len(group), width), dtype=bool)
        for r, s in enumerate(group):
            beta[r, :len(s)] = s
            valid[r, :len(s)] = True
        yield beta, valid
        i = j


def _check_int(name: str, value: int, lo: int, hi: int) -> int:
    if isinstance(value, bool) or int(value) != value or not lo <= value <= hi:
        raise ConfigError("value out of range", field=name, value=value, allowed=f"integers in [{lo}, {hi}]")
    return int(value)


def walk(trace: Trace, gamma: int) -> dict:
    """Exact draft walk over the trace: acceptance_by_position (length γ) and tokens_per_target_run."""
    gamma = _check_int("gamma", gamma, 1, GAMMA_CAP)  # SimConfig's γ range
    f = np.array([trace.slot_factor(k) for k in range(gamma)])
    reached = np.zeros(gamma)
    accepted = np.zeros(gamma)
    steps = 0.0
    for beta, valid in _chunks(trace, max(1, (4 << 20) // (gamma + 1))):  # ~32 MB per (seq, t, k) array
        n_seq, width = beta.shape
        idx = np.arange(width)[:, None] + np.arange(gamma)[None, :]          # position of slot k from start t
        bpad = np.concatenate([beta, np.zeros((n_seq, gamma))], axis=1)
        vpad = np.concatenate([valid, np.zeros((n_seq, gamma), dtype=bool)], axis=1)
        b = bpad[:, idx] * f                                                   # (seq, t, k), 0 past the end
        reach = np.ones((n_seq, width, gamma + 1))
        reach[..., 1:] = np.cumprod(b, axis=2)
        move = np.empty_like(reach)                                            # next start = t + 1 + m
        move[..., :gamma] = reach[..., :gamma] * (1.0 - b)
        move[..., gamma] = reach[..., gamma]
        start = np.zeros((n_seq, width + gamma + 1))
        start[:, 0] = 1.0
        for t in range(width):
            start[:, t + 1:t + gamma + 2] += start[:, t:t + 1] * move[:, t, :]
        s = start[:, :width] * valid
        reached += (s[..., None] * reach[..., :gamma] * vpad[:, idx]).sum(axis=(0, 1))  # no einsum: CPU-independent
        accepted += (s[..., None] * reach[..., :gamma] * b).sum(axis=(0, 1))
        steps += float(s.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        by_pos = np.where(reached > 0, accepted / np.where(reached > 0, reached, 1.0), np.nan)
    return {"acceptance_by_position": by_pos, "tokens_per_target_run": trace.n_tokens / steps,
            "expected_steps": steps}


def acceptance_by_position(trace: Trace, gamma: int) -> np.ndarray:
    """P(accept at draft slot k | slot k reached), k = 0..γ−1, exact over the walk (NaN if never reached)."""
    return walk(trace, gamma)["acceptance_by_position"]


def autocorrelation(trace: Trace, max_lag: int) -> np.ndarray:
    """Lag-k autocorrelation of β for k = 1..max_lag, pooled over pairs within each sequence."""
    max_lag = _check_int("max_lag", max_lag, 1, 100_000)  # our choice: a bound on the loop, far past any use
    mean = trace.alpha
    var = float(np.mean((trace.beta - mean) ** 2))
    num = np.zeros(max_lag)
    pairs = np.zeros(max_lag)
    for beta, valid in _chunks(trace):
        x = (beta - mean) * valid
        for k in range(1, min(max_lag, beta.shape[1] - 1) + 1):
            num[k - 1] += float((x[:, :-k] * x[:, k:]).sum())
            pairs[k - 1] += float((valid[:, :-k] & valid[:, k:]).sum())
    if trace.beta.min() == trace.beta.max():  # constant β (var would be rounding noise)
        return np.full(max_lag, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, num / np.where(pairs > 0, pairs, 1.0) / var, np.nan)


def run_lengths(trace: Trace) -> tuple[float, float]:
    """(observed, i.i.d.) mean number of consecutive acceptances from a position; see the module docstring."""
    total = 0.0
    for beta, _ in _chunks(trace):
        run = np.zeros(beta.shape[0])
        for t in range(beta.shape[1] - 1, -1, -1):  # padding is β = 0, so runs stop at each sequence's end
            run = beta[:, t] * (1.0 + run)
            total += float(run.sum())
    observed = total / trace.n_tokens
    a = trace.alpha
    left = np.concatenate([np.arange(len(s), 0, -1, dtype=np.float64) for s in trace.sequences()])
    iid = expected_tokens(a, left) - 1.0  # Σ_{k=1..m} α^k (m = left; = m at α = 1)
    return observed, float(iid.mean())


def summarize(trace: Trace, gamma: int = 4, max_lag: int = 10) -> dict:
    """Everything `specsim trace stats` reports, JSON-ready (lists and floats; NaN where undefined)."""
    w = walk(trace, gamma)
    observed, iid = run_lengths(trace)
    return {
        "alpha": trace.alpha,
        "n_tokens": trace.n_tokens,
        "n_sequences": trace.n_sequences,
        "gamma": int(gamma),
        "acceptance_by_position": [float(x) for x in w["acceptance_by_position"]],
        "tokens_per_target_run": float(w["tokens_per_target_run"]),
        "tokens_per_target_run_eq1": float(expected_tokens(trace.alpha, int(gamma))),  # γ + 1 at α = 1
        "autocorrelation": [float(x) for x in autocorrelation(trace, max_lag)],
        "mean_run_length": observed,
        "mean_run_length_iid": iid,
        "clustering_index": observed / iid if iid > 0 else float("nan"),
        "topk_acceptance": topk_acceptance(trace),
        "metadata": trace.metadata,
    }


TOPK_SHOWN = 8  # our choice: shipped trees branch on at most the top 4-8 candidates (EAGLE, Medusa, Sequoia)


def topk_acceptance(trace: Trace, k: int = TOPK_SHOWN) -> list[float] | None:
    """The measured cumulative top-k acceptance [P(rank < 1), ..., P(rank < k)] of a trace with ranks (None
    without): what `--tree-topk-acceptance` takes, so a trace's measured rank model can drive i.i.d. trees."""
    if trace.rank is None:
        return None
    return [float(x) for x in np.cumsum(trace.rank_probabilities(k))]
