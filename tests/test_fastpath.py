"""The vectorized batch-1 fast path reproduces the SimPy engine of record step for step."""

import numpy as np
import pytest

from specsim.traces import synth as trace_synth
from specsim.errors import ConfigError
from specsim.simulate import make_config, run, simulate

HW = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", stack="ideal")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    out = {}
    for name, tr in (("beta", trace_synth.beta_dist(0.7, 5.0, n_sequences=5, length=300, seed=1)),
                     ("markov", trace_synth.markov(0.7, 15.0, n_sequences=3, length=500, seed=2)),
                     ("t0", trace_synth.markov(0.75, 10.0, n_sequences=4, length=200, seed=3, bernoulli=True)),
                     ("decay", trace_synth.decay(0.85, 0.9, n_sequences=2, length=100, seed=4))):
        p = d / f"{name}.parquet"
        tr.write(p)
        out[name] = str(p)
    return out


SETTINGS = [
    dict(alpha=0.5, gamma=1),
    dict(alpha=0.8, gamma=5),
    dict(alpha=0.9, gamma=12, length_dist="uniform"),
    dict(alpha=0.7, gamma=3, lenience=0.3),
    dict(alpha=0.75, policy="heuristic", gamma=3),
    dict(alpha=0.7, policy="oracle"),
    dict(alpha=0.7, policy="optimal"),
    dict(trace="beta", gamma=4),
    dict(trace="markov", gamma=6),
    dict(trace="t0", gamma=3, policy="heuristic"),
    dict(trace="decay", gamma=7),
    dict(trace="markov", policy="oracle"),
    dict(alpha=0.6, gamma=4, fixed_c=0.1),
]


@pytest.mark.parametrize("kw", SETTINGS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_fast_path_gives_the_engines_accepted_counts_and_times(kw, traces):
    kw = dict(kw)
    if "trace" in kw:
        kw["trace"] = traces[kw["trace"]]
    cfg = make_config(**HW, requests=7, prompt_len=96, output_len=150, seed=9, engine="simpy", **kw)
    eng = simulate(cfg)
    fast = simulate(cfg.replace(**{"engine": "fast"}))
    assert eng.summary["engine"] == "simpy" and fast.summary["engine"] == "fast"
    a, b = eng.spec.accepted_by_request(), fast.spec.accepted_by_request()
    assert sum(x.size for x in a) > 100
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(eng.spec.rs_gamma, fast.spec.rs_gamma)
    np.testing.assert_allclose(eng.spec.step_dur_s, fast.spec.step_dur_s, rtol=1e-12)
    np.testing.assert_allclose(eng.spec.finish_s, fast.spec.finish_s, rtol=1e-9)
    np.testing.assert_allclose(eng.baseline.finish_s, fast.baseline.finish_s, rtol=1e-9)
    for k, v in eng.summary.items():
        if k == "engine":
            continue
        if isinstance(v, float):
            assert fast.summary[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
        else:
            assert fast.summary[k] == v, k


def test_fast_path_on_an_encoder_decoder_pair():
    cfg = make_config(hardware="tpu-v4", target="t5-v1_1-xxl", draft="t5-v1_1-small", stack="ideal", alpha=0.75,
                      gamma=7, requests=4, prompt_len=80, output_len=100, length_dist="uniform")
    eng, fast = run(cfg), run(cfg.replace(**{"engine": "fast"}))
    for k in ("speedup", "walltime_s", "baseline_walltime_s", "ttft_p50_s", "tpot_p99_s", "mbu_mean"):
        assert fast[k] == pytest.approx(eng[k], rel=1e-9), k


def test_the_default_engine_is_auto():
    """No --engine: the fast path at closed-loop batch 1 (where it is exact), SimPy elsewhere."""
    assert run(make_config(**HW, alpha=0.7, requests=2, output_len=20))["engine"] == "fast"
    assert run(make_config(**HW, alpha=0.7, requests=4, output_len=20, batch=2))["engine"] == "simpy"


def test_auto_picks_the_fast_path_only_where_it_is_exact():
    assert run(make_config(**HW, alpha=0.7, requests=2, output_len=20, engine="auto"))["engine"] == "fast"
    assert run(make_config(**HW, alpha=0.7, requests=4, output_len=20, batch=2, engine="auto"))["engine"] == "simpy"
    assert run(make_config(**HW, alpha=0.7, requests=4, output_len=20, rate=5.0, max_batch=1,
                           engine="auto"))["engine"] == "simpy"
    with pytest.raises(ConfigError, match="fast path"):
        run(make_config(**HW, alpha=0.7, requests=4, rate=5.0, engine="fast"))
