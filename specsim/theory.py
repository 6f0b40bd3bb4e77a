"""The paper's closed forms (Leviathan, Kalman, Matias, ICML 2023) under i.i.d. acceptance β with mean α.

Everything here is analytic: no cost model, no randomness. The simulator is checked against these
formulas, and the experiments print them next to simulated numbers. Functions accept Python scalars or
numpy arrays (broadcast together) and return a float / bool / int for all-scalar input, an ndarray
otherwise. Bad input raises `ConfigError` naming the field ('alpha', 'gamma', 'c', 'c_hat', 'gamma_max').

α = 1 (every draft accepted, e.g. a trace whose β are all 1) is allowed wherever eq. (1) is finite: eq. (1) is
then its limit γ + 1 exactly, and everything built on it (eq. 5, Thm 3.11, the distribution, vLLM's rates)
follows. Only the oracle forms, 1/(1 − α), refuse it (they are infinite there).

Numerics: eq. (1) is evaluated as -expm1((γ+1)·ln α) / (1 − α), which keeps full relative precision as
α → 1 (the textbook form loses digits to cancellation there), so the α = 1 limit joins continuously; it is
exactly 1 at α = 0. This is the one implementation of eq. (1): other modules call `expected_tokens`.
"""

from __future__ import annotations

import numpy as np

from specsim.errors import ConfigError

__all__ = [
    "TABLE1_SETTINGS",
    "draft_acceptance_rate",
    "expected_tokens",
    "expected_tokens_distribution",
    "helps_gamma1",
    "ops_factor",
    "optimal_gamma",
    "oracle_expected_tokens",
    "oracle_speedup",
    "speedup",
    "speedup_gamma1",
    "system_efficiency",
    "table1",
    "worth_speculating",
]

# The (α, γ) settings of the paper's Table 1 (inputs only; the table's values are computed by `table1`).
TABLE1_SETTINGS: tuple[tuple[float, int], ...] = ((0.6, 2), (0.7, 3), (0.8, 2), (0.8, 5), (0.9, 2), (0.9, 10))


# --- input validation -------------------------------------------------------------------------------

def _first_bad(original, arr: np.ndarray, bad: np.ndarray):
    """The offending value as the user gave it (scalar) or the first offending element (array)."""
    if arr.ndim == 0:
        return original.item() if isinstance(original, np.generic) else original
    return arr[bad].flat[0].item()


def _as_float(x, field: str, allowed: str) -> np.ndarray:
    if isinstance(x, (bool, np.bool_)) or (isinstance(x, np.ndarray) and x.dtype == bool):
        raise ConfigError("expected a number, not a boolean", field=field, value=x, allowed=allowed)
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError("expected a number", field=field, value=x, allowed=allowed) from None
    return arr


def _alpha(alpha, closed: bool = True) -> np.ndarray:
    """α as an array: in [0, 1] (closed, eq. 1 and what builds on it) or [0, 1) (the oracle's 1/(1 − α))."""
    allowed = "[0, 1]" if closed else "[0, 1)"
    a = _as_float(alpha, "alpha", allowed)
    bad = ~((a >= 0) & ((a <= 1) if closed else (a < 1)))  # NaN fails every comparison
    if np.any(bad):
        raise ConfigError("acceptance rate out of range", field="alpha", value=_first_bad(alpha, a, bad),
                          allowed=allowed)
    return a


def _nonneg(x, field: str) -> np.ndarray:
    a = _as_float(x, field, ">= 0")
    bad = ~((a >= 0) & np.isfinite(a))
    if np.any(bad):
        raise ConfigError("cost fraction out of range", field=field, value=_first_bad(x, a, bad), allowed=">= 0")
    return a


def _int_ge1(x, field: str) -> np.ndarray:
    allowed = ">= 1 (integer)"
    g = _as_float(x, field, allowed)
    bad = ~(np.isfinite(g) & (g >= 1) & (g == np.floor(g)))
    if np.any(bad):
        raise ConfigError("draft length must be a positive integer" if field == "gamma" else "must be a positive "
                          "integer", field=field, value=_first_bad(x, g, bad), allowed=allowed)
    return g.astype(np.int64)


def _ret(x, *inputs):
    """Python scalar out for all-scalar input, ndarray otherwise."""
    if all(np.ndim(i) == 0 for i in inputs):
        return np.asarray(x).item()
    return x


# --- unchecked kernels (inputs already validated arrays) ------------------------------------------

def _tokens(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Eq. (1); γ + 1 exactly at α = 1 (where the quotient is 0/0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_a = np.log(a)  # -inf at α = 0, then expm1(-inf) = -1 and the result is exactly 1
        t = -np.expm1((g + 1) * log_a) / (1.0 - a)
    return np.where(a == 1.0, g + 1.0, t)


def _speedup(a, g, c):
    return _tokens(a, g) / (g * c + 1.0)


# --- eq. (1) and Thm 3.8 / 3.11 ----------------------------------------------------------------------

def expected_tokens(alpha, gamma):
    """Eq. (1): expected tokens per target run, (1 − α^(γ+1)) / (1 − α), and γ + 1 at α = 1. Also τ, vLLM's mean
    acceptance length."""
    a, g = _alpha(alpha), _int_ge1(gamma, "gamma")
    return _ret(_tokens(a, g), alpha, gamma)


def speedup(alpha, gamma, c):
    """Eq. (5) / Thm 3.8: expected walltime improvement (1 − α^(γ+1)) / ((1 − α)(γc + 1)), c = T_draft / T_target.

    Assumes the target's γ+1 positions cost one pass (the memory-bound regime of Figure 1)."""
    a, g, cc = _alpha(alpha), _int_ge1(gamma, "gamma"), _nonneg(c, "c")
    return _ret(_speedup(a, g, cc), alpha, gamma, c)


def ops_factor(alpha, gamma, c_hat):
    """Thm 3.11: factor by which total arithmetic grows, (1 − α)(γĉ + γ + 1) / (1 − α^(γ+1)).

    ĉ is the draft's operations per token as a fraction of the target's; rejected drafts are wasted work."""
    a, g, ch = _alpha(alpha), _int_ge1(gamma, "gamma"), _nonneg(c_hat, "c_hat")
    return _ret((g * ch + g + 1.0) / _tokens(a, g), alpha, gamma, c_hat)


def speedup_gamma1(alpha, c):
    """Cor. 3.9: with γ = 1 the improvement is (1 + α) / (1 + c)."""
    a, cc = _alpha(alpha), _nonneg(c, "c")
    return _ret((1.0 + a) / (1.0 + cc), alpha, c)


def helps_gamma1(alpha, c):
    """Cor. 3.9: γ = 1 gives a speedup (> 1) iff α > c."""
    a, cc = _alpha(alpha), _nonneg(c, "c")
    return _ret(a > cc, alpha, c)


def worth_speculating(alpha, c):
    """Whether some γ ≥ 1 gives speedup > 1, i.e. max_γ eq. (5) > 1.

    Equivalent to α > c: eq. (5) > 1 iff α + α² + … + α^γ > γc, and each α^k ≤ α, so α > c is necessary, and
    γ = 1 shows it is sufficient. When it is False, `optimal_gamma` still returns its best γ ≥ 1 (speedup ≤ 1);
    the caller should then decode without a draft (γ = 0)."""
    return helps_gamma1(alpha, c)


# = specsim.engine.acceptance.GAMMA_CAP, the simulator's one γ cap (tests/test_theory.py holds them equal)
GAMMA_MAX = 64


def optimal_gamma(alpha, c, gamma_max: int = GAMMA_MAX):
    """The integer γ in [1, gamma_max] maximizing eq. (5); ties (equal floats) go to the smaller γ.

    Always ≥ 1, even when no γ helps (see `worth_speculating`). With c = 0 eq. (5) grows with γ without bound, so
    the answer is gamma_max unless α^(γ+1) has underflowed first. Brute force over all γ (the curve is cheap)."""
    a, cc = _alpha(alpha), _nonneg(c, "c")
    gm = int(_int_ge1(gamma_max, "gamma_max"))
    a, cc = np.broadcast_arrays(a, cc)
    gs = np.arange(1, gm + 1, dtype=np.int64)
    s = _speedup(a[..., None], gs, cc[..., None])
    best = np.argmax(s, axis=-1) + 1  # argmax returns the first maximum: the smaller γ on ties
    return _ret(best.astype(np.int64), alpha, c)


# --- the oracle bound -----------------------------------------------------------------------------------

def oracle_expected_tokens(alpha):
    """Tokens per target run if γ were chosen each step as the number of drafts about to be accepted: 1/(1 − α)."""
    a = _alpha(alpha, closed=False)
    return _ret(1.0 / (1.0 - a), alpha)


def oracle_speedup(alpha, c):
    """Walltime improvement of the oracle schedule: 1 / (1 − α + αc).

    Assumption (ours; the paper gives only the token bound): each step the oracle drafts exactly the N tokens
    that will be accepted, N ~ Geometric with P(N = k) = α^k (1 − α), so a step costs T(1 + cN) and yields
    N + 1 tokens; no draft is spent on the token that would have been rejected. By renewal-reward the speedup
    is E[N + 1] / E[1 + cN] = (1/(1 − α)) / (1 + cα/(1 − α)). It bounds every fixed γ only for c ≤ 1: with
    c > 1 drafting E[N] = α/(1 − α) tokens per step can cost more than a short fixed draft."""
    a, cc = _alpha(alpha, closed=False), _nonneg(c, "c")
    return _ret(1.0 / (1.0 - a + a * cc), alpha, c)


# --- the serving engines' words for the same quantities -------------------------------------------------

def draft_acceptance_rate(alpha, gamma):
    """vLLM's "draft acceptance rate" = accepted drafts / drafted tokens = α(1 − α^γ) / ((1 − α)γ). It is not α."""
    a, g = _alpha(alpha), _int_ge1(gamma, "gamma")
    return _ret((_tokens(a, g) - 1.0) / g, alpha, gamma)


def system_efficiency(alpha, gamma):
    """vLLM v0 "system efficiency" = τ / (γ + 1): tokens produced over the most a target run could produce."""
    a, g = _alpha(alpha), _int_ge1(gamma, "gamma")
    return _ret(_tokens(a, g) / (g + 1.0), alpha, gamma)


def expected_tokens_distribution(alpha, gamma: int) -> np.ndarray:
    """P(k tokens from one target run), k = 1 … γ+1: α^(k−1)(1 − α) for k ≤ γ, α^γ for the clean sweep (at α = 1:
    all mass on γ + 1).

    γ must be a scalar (it sets the length); α may be an array, giving shape alpha.shape + (γ+1,)."""
    a = _alpha(alpha)
    if np.ndim(gamma) != 0:
        raise ConfigError("the distribution needs one draft length", field="gamma", value=gamma,
                          allowed=">= 1 (integer)")
    g = int(_int_ge1(gamma, "gamma"))
    k = np.arange(1, g + 2)
    a = a[..., None]
    p = a ** (k - 1) * (1.0 - a)
    p[..., -1] = a[..., 0] ** g
    return p


# --- Table 1 ----------------------------------------------------------------------------------------------

def table1() -> list[dict]:
    """The paper's Table 1 (c = ĉ = 0), computed from Thm 3.11 and eq. (5) at its six (α, γ) settings."""
    return [{"alpha": a, "gamma": g, "operations": ops_factor(a, g, 0.0), "speed": speedup(a, g, 0.0)}
            for a, g in TABLE1_SETTINGS]
