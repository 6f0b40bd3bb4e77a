"""Request lengths (engine/workload.py): the 'lognormal' ShareGPT-like distribution keeps its mean, is heavy-tailed,
clipped, and does not disturb the other distributions."""

import numpy as np
import pytest

from specsim.config import SimConfig
from specsim.engine.workload import LOGNORMAL_CLIP, build_workload


def _wl(dist, n=20_000, prompt=161, output=338, seed=0):
    return build_workload(SimConfig.from_flat(dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b",
                                                   alpha=0.7, requests=n, prompt_len=prompt, output_len=output,
                                                   length_dist=dist, seed=seed)))


def test_lognormal_keeps_the_mean_and_has_a_heavy_tail():
    wl = _wl("lognormal")
    for x, mean in ((wl.prompt_len, 161), (wl.output_len, 338)):
        assert x.min() >= 1 and x.max() <= LOGNORMAL_CLIP * mean
        assert abs(x.mean() / mean - 1) < 0.03  # the clip at 8x removes ~0.5% of the mass at log-sigma 1
        assert np.median(x) < 0.7 * mean  # median = exp(-1/2) = 0.61 x mean: most requests are short
        assert np.percentile(x, 99) > 3 * mean


def test_lognormal_is_deterministic_and_seeded():
    a, b, c = _wl("lognormal", 500), _wl("lognormal", 500), _wl("lognormal", 500, seed=1)
    assert np.array_equal(a.output_len, b.output_len)
    assert not np.array_equal(a.output_len, c.output_len)


@pytest.mark.parametrize("dist", ["fixed", "uniform"])
def test_other_distributions_unchanged(dist):
    wl = _wl(dist, 1000, 100, 100)
    if dist == "fixed":
        assert (wl.output_len == 100).all()
    else:
        assert wl.output_len.min() >= 50 and wl.output_len.max() <= 150
