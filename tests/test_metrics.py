"""The one-sort percentiles equal np.percentile bit for bit (the sweep tables must not move when metrics get faster)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.engine.metrics import PCTS, percentiles

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=400, deadline=None)
@given(st.lists(finite, min_size=1, max_size=200))
def test_percentiles_equal_numpy_bit_for_bit(xs):
    x = np.array(xs)
    want = [float(np.percentile(x, p)) for p in PCTS]
    assert percentiles(x) == want


def test_percentiles_on_latency_like_samples():
    g = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 10, 11, 100, 101, 1000, 4099):
        for x in (g.exponential(0.02, n), np.round(g.random(n) * 5, 1), np.full(n, 0.1) + g.random(n) * 1e-15):
            assert percentiles(x) == np.percentile(x, PCTS).tolist()


def test_a_warm_up_measures_only_the_requests_after_it():
    """latency_metrics(warmup_s): percentiles, SLO attainment and queueing of the requests arriving at or after the
    warm-up, by hand; makespan and throughput stay the whole run's; 0 leaves every figure as it was."""
    from specsim.engine.metrics import PCTS, latency_metrics
    from specsim.simulate import make_config, simulate

    res = simulate(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7,
                               rate=40.0, requests=120, output_len=32))
    rec = res.spec
    keep = rec.arrival_s >= 1.0
    m = latency_metrics(rec, 1.0, 0.05, 1.0)
    ttft = (rec.first_token_s - rec.arrival_s)[keep]
    for p in PCTS:
        assert m[f"ttft_p{p}_s"] == np.percentile(ttft, p)
    assert m["walltime_s"] == latency_metrics(rec, 1.0, 0.05)["walltime_s"]
    assert m["queue_mean_s"] == pytest.approx(float(np.mean((rec.admit_s - rec.arrival_s)[keep])))
    assert latency_metrics(rec, 1.0, 0.05, 0.0) == latency_metrics(rec, 1.0, 0.05)
