"""specsim.theory: the paper's closed forms, its Table 1, and the properties the paper states about them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim import theory as th
from specsim.errors import ConfigError

SETTINGS = settings(max_examples=200, deadline=None)
alphas = st.floats(min_value=0.0, max_value=0.999, allow_nan=False)
gammas = st.integers(min_value=1, max_value=64)
costs = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


def brute_tokens(alpha: float, gamma: int) -> float:
    """Eq. (1) as the paper derives it: Σ_{k=0..γ} α^k (prefix of k accepted drafts has probability α^k)."""
    return sum(alpha ** k for k in range(gamma + 1))


# --- Table 1 (c = ĉ = 0), typed from the paper -----------------------------------------------------------

PAPER_TABLE1 = [  # alpha, gamma, operations, speed
    (0.6, 2, 1.53, 1.96),
    (0.7, 3, 1.58, 2.53),
    (0.8, 2, 1.23, 2.44),
    (0.8, 5, 1.63, 3.69),
    (0.9, 2, 1.11, 2.71),
    (0.9, 10, 1.60, 6.86),
]


def test_table1_reproduced_to_two_decimals():
    rows = th.table1()
    assert [(r["alpha"], r["gamma"]) for r in rows] == [(a, g) for a, g, _, _ in PAPER_TABLE1]
    for r, (_, _, ops, speed) in zip(rows, PAPER_TABLE1):
        assert round(r["operations"], 2) == pytest.approx(ops, abs=1e-9), r
        assert round(r["speed"], 2) == pytest.approx(speed, abs=1e-9), r


def test_table1_uses_the_formulas_not_typed_values():
    for r in th.table1():
        assert r["speed"] == pytest.approx(brute_tokens(r["alpha"], r["gamma"]), rel=1e-12)
        assert r["operations"] == pytest.approx((r["gamma"] + 1) / brute_tokens(r["alpha"], r["gamma"]), rel=1e-12)


def test_seed_worked_examples():
    # α = 0.75, γ = 7: 3.60 tokens per run; with c = 0.02 the speedup is 3.60 / 1.14 = 3.16.
    assert th.expected_tokens(0.75, 7) == pytest.approx(3.5995, abs=1e-4)
    assert th.speedup(0.75, 7, 0.02) == pytest.approx(3.5995 / 1.14, abs=1e-4)
    # bigram draft: α = 0.2, γ = 3, c ≈ 0 gives 1.25×
    assert round(th.speedup(0.2, 3, 0.0), 2) == 1.25
    # distribution at α = 0.75, γ = 7: all 8 tokens 13% of the time, a single token 25%
    p = th.expected_tokens_distribution(0.75, 7)
    assert round(p[-1], 2) == 0.13 and p[0] == pytest.approx(0.25)
    # oracle: α = 0.75 can never give more than 4 tokens per run, α = 0.9 tops out at 10
    assert th.oracle_expected_tokens(0.75) == pytest.approx(4.0)
    assert th.oracle_expected_tokens(0.9) == pytest.approx(10.0)


# --- eq. (1) ------------------------------------------------------------------------------------------------

@SETTINGS
@given(alphas, gammas)
def test_eq1_is_the_capped_geometric_sum(alpha, gamma):
    assert th.expected_tokens(alpha, gamma) == pytest.approx(brute_tokens(alpha, gamma), rel=1e-12)


@SETTINGS
@given(st.floats(min_value=0.0, max_value=0.99), st.integers(min_value=1, max_value=100_000))
def test_eq1_tends_to_oracle_bound(alpha, gamma):
    """The gap to 1/(1 − α) is exactly α^(γ+1)/(1 − α), so it vanishes as γ → ∞."""
    gap = th.oracle_expected_tokens(alpha) - th.expected_tokens(alpha, gamma)
    assert gap == pytest.approx(alpha ** (gamma + 1) / (1 - alpha), rel=1e-6, abs=1e-12)
    if gamma >= 5000:  # α ≤ 0.99: α^5001 < 1e-21
        assert th.expected_tokens(alpha, gamma) == pytest.approx(1 / (1 - alpha), rel=1e-12)


@SETTINGS
@given(alphas, alphas, gammas)
def test_eq1_increasing_in_alpha(a1, a2, gamma):
    lo, hi = sorted((a1, a2))
    assert th.expected_tokens(lo, gamma) <= th.expected_tokens(hi, gamma)
    if hi - lo > 1e-9:
        assert th.expected_tokens(lo, gamma) < th.expected_tokens(hi, gamma)


@SETTINGS
@given(st.floats(min_value=0.01, max_value=0.999), st.integers(min_value=1, max_value=200))
def test_eq1_increasing_in_gamma(alpha, gamma):
    e0, e1 = th.expected_tokens(alpha, gamma), th.expected_tokens(alpha, gamma + 1)
    step = alpha ** (gamma + 1)  # one more draft adds α^(γ+1)
    assert e1 >= e0
    if step > 1e-12 * e0:  # below that the increment is lost to float rounding
        assert e1 > e0
    assert e1 - e0 == pytest.approx(step, rel=1e-6, abs=1e-14 * e1)


def test_eq1_edges():
    assert th.expected_tokens(0.0, 5) == 1.0  # useless draft: one token per run, never fewer
    assert th.expected_tokens(0.5, 1) == pytest.approx(1.5)
    # near α = 1 the value approaches γ + 1 without cancellation error
    assert th.expected_tokens(1 - 1e-12, 9) == pytest.approx(10.0, rel=1e-9)


# --- eq. (5), Cor. 3.9 ---------------------------------------------------------------------------------------

@SETTINGS
@given(alphas, gammas, costs)
def test_speedup_is_tokens_over_step_cost(alpha, gamma, c):
    assert th.speedup(alpha, gamma, c) == pytest.approx(brute_tokens(alpha, gamma) / (gamma * c + 1), rel=1e-12)


@SETTINGS
@given(alphas, costs)
def test_gamma1_equals_corollary_3_9(alpha, c):
    assert th.speedup(alpha, 1, c) == pytest.approx(th.speedup_gamma1(alpha, c), rel=1e-12)
    assert th.speedup_gamma1(alpha, c) == pytest.approx((1 + alpha) / (1 + c), rel=1e-12)
    if abs(alpha - c) > 1e-9:
        assert th.helps_gamma1(alpha, c) == (th.speedup_gamma1(alpha, c) > 1)


@SETTINGS
@given(st.floats(min_value=1e-6, max_value=0.999), st.floats(min_value=0.0, max_value=1.0), gammas)
def test_no_gamma_helps_when_alpha_at_most_c(c, frac, gamma):
    """α ≤ c: every γ ≥ 1 gives speedup ≤ 1, strictly < 1 except at γ = 1, α = c where it is exactly 1."""
    alpha = c * frac
    s = th.speedup(alpha, gamma, c)
    assert s <= 1 + 1e-12
    if gamma >= 2 or c - alpha > 1e-9:
        assert s < 1
    assert not th.worth_speculating(alpha, c)


def test_alpha_equal_c_gamma1_is_break_even():
    assert th.speedup(0.3, 1, 0.3) == pytest.approx(1.0)
    assert not th.helps_gamma1(0.3, 0.3)


# --- choosing γ ------------------------------------------------------------------------------------------------

@SETTINGS
@given(alphas, st.floats(min_value=0.0, max_value=1.5), st.integers(min_value=1, max_value=40))
def test_optimal_gamma_is_brute_force_argmax(alpha, c, gamma_max):
    best = th.optimal_gamma(alpha, c, gamma_max)
    assert isinstance(best, int) and 1 <= best <= gamma_max
    curve = [brute_tokens(alpha, g) / (g * c + 1) for g in range(1, gamma_max + 1)]
    top = max(curve)
    assert curve[best - 1] >= top * (1 - 1e-12)
    # no smaller γ is clearly as good (ties go to the smaller γ)
    assert all(v < curve[best - 1] * (1 + 1e-12) for v in curve[: best - 1])


@SETTINGS
@given(alphas, costs)
def test_worth_speculating_matches_best_speedup(alpha, c):
    if abs(alpha - c) < 1e-9:
        return
    best = max(th.speedup(alpha, g, c) for g in range(1, 65))
    assert th.worth_speculating(alpha, c) == (best > 1)


def test_optimal_gamma_ties_go_to_smaller_gamma():
    assert th.optimal_gamma(0.0, 0.0) == 1  # every γ gives exactly 1×
    assert th.optimal_gamma(0.0, 0.5) == 1


def test_optimal_gamma_known_values_and_vectorized():
    # c = 0: more drafts never hurt, so the cap wins
    assert th.optimal_gamma(0.8, 0.0, gamma_max=12) == 12
    # T5-small on EnDe (α = 0.75, c = 0.02): eq. (5) peaks at γ = 9 (3.20×); the paper ran γ = 7 (3.16×)
    assert th.optimal_gamma(0.75, 0.02) == 9
    out = th.optimal_gamma(np.array([0.75, 0.75, 0.1]), np.array([0.02, 0.11, 0.5]))
    assert isinstance(out, np.ndarray) and out.tolist() == [9, th.optimal_gamma(0.75, 0.11), 1]


# --- operations, oracle, serving-engine conversions ---------------------------------------------------------------

@SETTINGS
@given(alphas, gammas, costs)
def test_ops_factor_is_work_per_token(alpha, gamma, c_hat):
    assert th.ops_factor(alpha, gamma, c_hat) == pytest.approx(
        (gamma * c_hat + gamma + 1) / brute_tokens(alpha, gamma), rel=1e-12)
    assert th.ops_factor(alpha, gamma, c_hat) >= 1 - 1e-12  # speculation never saves arithmetic


@SETTINGS
@given(alphas, st.floats(min_value=0.0, max_value=1.0), gammas)
def test_oracle_bounds_fixed_gamma_when_draft_cheaper_than_target(alpha, c, gamma):
    assert th.oracle_speedup(alpha, c) >= th.speedup(alpha, gamma, c) * (1 - 1e-12)
    assert th.oracle_speedup(alpha, c) == pytest.approx(
        th.oracle_expected_tokens(alpha) / (1 + c * alpha / (1 - alpha)), rel=1e-12)


def test_oracle_with_free_draft_is_token_bound():
    assert th.oracle_speedup(0.8, 0.0) == pytest.approx(5.0)


@SETTINGS
@given(alphas, gammas)
def test_vllm_conversions(alpha, gamma):
    tau = th.expected_tokens(alpha, gamma)
    rate = th.draft_acceptance_rate(alpha, gamma)
    assert rate == pytest.approx((tau - 1) / gamma, rel=1e-9, abs=1e-15)
    if alpha < 1 - 1e-6:
        assert rate == pytest.approx(alpha * (1 - alpha ** gamma) / ((1 - alpha) * gamma), rel=1e-9, abs=1e-15)
    assert rate <= alpha + 1e-12  # later drafts need all earlier ones accepted
    assert th.system_efficiency(alpha, gamma) == pytest.approx(tau / (gamma + 1), rel=1e-12)


@pytest.mark.parametrize("gamma", [1, 2, 5, 64])
def test_eq1_at_alpha_one_is_its_limit(gamma):
    """Every draft accepted (a trace of β = 1): γ + 1 tokens per run, exactly, for scalars and arrays, and eq. (5)
    and the distribution follow; the closed form joins it continuously (no jump below α = 1)."""
    assert th.expected_tokens(1.0, gamma) == gamma + 1.0
    assert isinstance(th.expected_tokens(1, gamma), float)
    np.testing.assert_array_equal(th.expected_tokens(np.array([1.0, 0.0]), gamma), [gamma + 1.0, 1.0])
    np.testing.assert_array_equal(th.expected_tokens(1.0, np.array([1, gamma])), [2.0, gamma + 1.0])
    assert th.speedup(1.0, gamma, 0.1) == (gamma + 1.0) / (gamma * 0.1 + 1.0)
    np.testing.assert_array_equal(th.speedup(np.array([1.0]), gamma, 0.0), [gamma + 1.0])
    assert th.expected_tokens_distribution(1.0, gamma).tolist() == [0.0] * gamma + [1.0]
    p = th.expected_tokens_distribution(np.array([0.5, 1.0]), gamma)
    assert p[1].tolist() == [0.0] * gamma + [1.0] and p[0].sum() == pytest.approx(1.0)
    assert th.draft_acceptance_rate(1.0, gamma) == 1.0 and th.system_efficiency(1.0, gamma) == 1.0
    for eps in (1e-3, 1e-6, 1e-9, 1e-12):
        below = th.expected_tokens(1.0 - eps, gamma)
        assert below < gamma + 1.0
        # eq. (1) = Σ α^k, so 1 − ε loses about ε·γ(γ+1)/2 tokens: the gap closes linearly in ε
        assert gamma + 1.0 - below == pytest.approx(eps * gamma * (gamma + 1) / 2, rel=1e-2 + 1e-3 * gamma)
        np.testing.assert_allclose(th.expected_tokens_distribution(1.0 - eps, gamma),
                                   th.expected_tokens_distribution(1.0, gamma), atol=2 * gamma * eps)


def test_draft_acceptance_rate_is_not_alpha():
    assert th.draft_acceptance_rate(0.8, 4) == pytest.approx(0.5904)
    assert th.draft_acceptance_rate(0.8, 1) == pytest.approx(0.8)  # they agree only at γ = 1


# --- distribution of tokens per run --------------------------------------------------------------------------------

@SETTINGS
@given(alphas, gammas)
def test_distribution_sums_to_one_and_has_eq1_mean(alpha, gamma):
    p = th.expected_tokens_distribution(alpha, gamma)
    assert p.shape == (gamma + 1,)
    assert np.all(p >= 0)
    assert p.sum() == pytest.approx(1.0, rel=1e-12)
    assert float(np.dot(np.arange(1, gamma + 2), p)) == pytest.approx(th.expected_tokens(alpha, gamma), rel=1e-9)


def test_distribution_vectorized_over_alpha():
    p = th.expected_tokens_distribution(np.array([0.0, 0.5]), 2)
    np.testing.assert_allclose(p, [[1.0, 0.0, 0.0], [0.5, 0.25, 0.25]])


# --- vectorization ---------------------------------------------------------------------------------------------------

def test_vectorized_matches_scalar_and_scalar_returns_python_types():
    a = np.linspace(0, 0.95, 7)
    g = np.array([1, 2, 3, 4, 5, 6, 7])
    s = th.speedup(a, g, 0.05)
    assert isinstance(s, np.ndarray) and s.shape == (7,)
    np.testing.assert_allclose(s, [th.speedup(x, y, 0.05) for x, y in zip(a, g)], rtol=1e-15)
    assert isinstance(th.speedup(0.5, 2, 0.1), float)
    assert isinstance(th.helps_gamma1(0.5, 0.1), bool)
    grid = th.expected_tokens(a[:, None], g[None, :])
    assert grid.shape == (7, 7)


# --- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, field, allowed", [
    (lambda: th.expected_tokens(1.01, 3), "alpha", "[0, 1]"),
    (lambda: th.expected_tokens(-0.01, 3), "alpha", "[0, 1]"),
    (lambda: th.speedup(math.nan, 3, 0.1), "alpha", "[0, 1]"),
    (lambda: th.speedup(np.array([0.5, 1.2]), 3, 0.1), "alpha", "[0, 1]"),
    (lambda: th.expected_tokens("high", 3), "alpha", "[0, 1]"),
    (lambda: th.expected_tokens_distribution(1.5, 3), "alpha", "[0, 1]"),
    (lambda: th.expected_tokens(0.5, 0), "gamma", ">= 1 (integer)"),
    (lambda: th.expected_tokens(0.5, 2.5), "gamma", ">= 1 (integer)"),
    (lambda: th.ops_factor(0.5, -1, 0.0), "gamma", ">= 1 (integer)"),
    (lambda: th.expected_tokens_distribution(0.5, 1.5), "gamma", ">= 1 (integer)"),
    (lambda: th.speedup(0.5, 3, -0.1), "c", ">= 0"),
    (lambda: th.optimal_gamma(0.5, -1.0), "c", ">= 0"),
    (lambda: th.speedup(0.5, 3, math.inf), "c", ">= 0"),
    (lambda: th.ops_factor(0.5, 3, -0.5), "c_hat", ">= 0"),
    (lambda: th.optimal_gamma(0.5, 0.1, gamma_max=0), "gamma_max", ">= 1 (integer)"),
    (lambda: th.oracle_speedup(1.0, 0.1), "alpha", "[0, 1)"),  # the oracle forms are infinite at α = 1
    (lambda: th.oracle_expected_tokens(1.0), "alpha", "[0, 1)"),
    (lambda: th.draft_acceptance_rate(0.5, 0), "gamma", ">= 1 (integer)"),
])
def test_bad_input_raises_config_error_naming_field(call, field, allowed):
    with pytest.raises(ConfigError) as exc:
        call()
    assert exc.value.field == field
    assert exc.value.allowed == allowed
    assert f"'{field}'" in str(exc.value) and allowed in str(exc.value)


def test_bad_value_reported_as_given():
    with pytest.raises(ConfigError) as exc:
        th.speedup(0.5, 0, 0.1)
    assert exc.value.value == 0
    with pytest.raises(ConfigError) as exc:
        th.speedup(np.array([0.5, 1.5, 2.0]), 1, 0.1)
    assert exc.value.value == 1.5


def test_theory_and_the_engine_share_one_gamma_cap():
    from specsim.engine.acceptance import GAMMA_CAP
    from specsim.theory import GAMMA_MAX

    assert GAMMA_MAX == GAMMA_CAP
