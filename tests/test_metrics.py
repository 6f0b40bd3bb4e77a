"""The one-sort percentiles equal np.percentile bit for bit (the sweep tables must not move when metrics get faster)."""

import numpy as np
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
