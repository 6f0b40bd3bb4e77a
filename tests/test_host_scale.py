"""specsim.validation.host_scale: a pooled table's shape times one block's host factor."""

import numpy as np
import pytest

from specsim.errors import ConfigError
from specsim.validation import host_scale as hs
from specsim.validation.request_table import fit_request_table
from specsim.validation.step_fit import StepSamples, fit_step_table


def _steps(scale: float):
    """Decodes of T requests and one-request chunks of T + 1 tokens, a line in tokens, `scale` times slower."""
    out = []
    for T in (1, 2, 4, 8, 16):
        out.append({"ctx_requests": 0, "gen_requests": T, "ctx_tokens": 0, "gen_tokens": T,
                    "time_s": scale * (0.1 + 0.01 * T), "kv_ctx_tokens": 50 * T})
        out.append({"ctx_requests": 1, "gen_requests": 0, "ctx_tokens": T + 1, "gen_tokens": 0,
                    "time_s": scale * (0.1 + 0.01 * (T + 1)), "kv_ctx_tokens": 0})
    return out


def test_the_factor_is_the_median_ratio_of_measured_to_priced():
    base = fit_step_table(StepSamples.from_steps(_steps(1.0)), monotone=False)
    assert hs.host_factor(base, _steps(1.0)) == pytest.approx(1.0, rel=1e-12)
    assert hs.host_factor(base, _steps(1.7)) == pytest.approx(1.7, rel=1e-12)
    # a host hiccup on a few steps moves a median, not the factor
    slow = _steps(1.0)
    slow[0]["time_s"] *= 10
    assert hs.host_factor(base, slow) == pytest.approx(1.0, rel=1e-12)


def test_a_scaled_table_prices_and_counts_as_its_base():
    base = fit_step_table(StepSamples.from_steps(_steps(1.0)), monotone=False)
    t = hs.ScaledTable(base, 1.5)
    assert t.time_at(4, count=False) == pytest.approx(1.5 * base.time_at(4, count=False))
    p = t.price(np.array([1, 1, 1]), np.array([10, 10, 10]))
    assert p[0] == pytest.approx(1.5 * base.price(np.array([1, 1, 1]), np.array([10, 10, 10]))[0])
    before = base.unmeasured.queries
    t.price(np.array([200]), np.array([0]))  # above the measured range: counted once, in the base's counter
    assert t.unmeasured is base.unmeasured and base.unmeasured.queries == before + 1 and base.unmeasured.above >= 1


def test_a_request_table_is_priced_with_the_steps_requests():
    rq = fit_request_table(_steps(1.0), monotone=False)
    s = {"ctx_requests": 0, "gen_requests": 4, "ctx_tokens": 0, "gen_tokens": 4, "time_s": 1.0, "kv_ctx_tokens": 200}
    assert hs.step_price(rq, s) == pytest.approx(rq.time_at(4, 4, 200, count=False))
    assert hs.host_factor(rq, _steps(2.0)) == pytest.approx(2.0, rel=1e-9)


@pytest.mark.parametrize("factor", [0.0, -1.0, float("nan"), float("inf")])
def test_a_factor_that_is_not_a_positive_number_is_refused(factor):
    base = fit_step_table(StepSamples.from_steps(_steps(1.0)))
    with pytest.raises(ConfigError, match="factor"):
        hs.ScaledTable(base, factor)


def test_no_steps_no_factor():
    base = fit_step_table(StepSamples.from_steps(_steps(1.0)))
    with pytest.raises(ConfigError, match="no calibration steps"):
        hs.host_factor(base, [])


def test_a_shaped_host_factor_moves_large_steps_less_than_the_reference_step():
    """f_ref 1.44 measured at 4 tokens, beta 0.5: a 16-token step moves by 1.44 ** 0.5 = 1.2, a 64-token one by
    1.44 ** 0.25; a step at or below 4 tokens by 1.44; beta 0 is one factor for every size (ScaledTable)."""
    base = fit_step_table(StepSamples.from_steps(_steps(1.0)), monotone=False)
    t = hs.ShapedHostTable(base, 1.44, 4, 0.5)
    assert t.factor(4) == pytest.approx(1.44) and t.factor(16) == pytest.approx(1.2)
    assert t.factor(64) == pytest.approx(1.44 ** 0.25) and t.factor(1) == pytest.approx(1.44)
    assert t.time_at(16, count=False) == pytest.approx(1.2 * base.time_at(16, count=False))
    assert t.price(np.array([8, 8]), np.array([10, 10]))[0] == pytest.approx(
        1.2 * base.price(np.array([8, 8]), np.array([10, 10]))[0])
    flat = hs.ShapedHostTable(base, 1.44, 4, 0.0)
    assert flat.time_at(16, count=False) == pytest.approx(hs.ScaledTable(base, 1.44).time_at(16, count=False))
    assert t.unmeasured is base.unmeasured


def test_a_rescaled_request_table_is_still_priced_with_its_steps_requests():
    """host_factor sees through the wrappers: a request table times 2 measured against steps 3x slower is 1.5."""
    rq = fit_request_table(_steps(1.0), monotone=False)
    assert hs.host_factor(hs.ScaledTable(rq, 2.0), _steps(3.0)) == pytest.approx(1.5, rel=1e-9)
    assert hs.host_factor(hs.ShapedHostTable(rq, 3.0, 1, 0.0), _steps(3.0)) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("args", [(0.0, 4, 0.5), (1.2, 0.5, 0.5), (1.2, 4, -0.1), (float("nan"), 4, 0.5),
                                  (1.2, 4, float("inf"))])
def test_a_shaped_host_factor_that_cannot_price_is_refused(args):
    base = fit_step_table(StepSamples.from_steps(_steps(1.0)))
    with pytest.raises(ConfigError, match="shaped host factor"):
        hs.ShapedHostTable(base, *args)
