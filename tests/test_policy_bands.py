"""The `bands` policy (vLLM's num_speculative_tokens_per_batch_size) as a specification: γ follows the replica's
live batch size through [[start, end, γ], ...] bands; no bands = what choose-draft advises for the setup."""

import numpy as np
import pytest

from conftest import cli_capsys
from specsim.engine.policies import BandsPolicy, FixedPolicy, make_policy
from specsim.simulate import make_config, simulate

HW = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b")
TRACE = "tests/golden/inputs/trace_qwen.csv"
QWEN = dict(hardware="cpu-2core", target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b")


def _same_records(a, b):
    for k, v in vars(a).items():
        np.testing.assert_array_equal(v, getattr(b, k), err_msg=k)


@pytest.mark.parametrize("kw", [dict(HW, alpha=0.7, batch=8, requests=32, output_len=48),
                                dict(HW, alpha=0.7, rate=30.0, max_batch=6, requests=30, length_dist="uniform"),
                                dict(HW, alpha=0.8, batch=1, requests=12, engine="fast"),
                                dict(QWEN, trace=TRACE, batch=4, requests=12, output_len=32, draft_catchup=True)],
                         ids=["closed-b8", "poisson", "fast-b1", "trace-catchup"])
@pytest.mark.parametrize("bands", [[[1, 4096, 3]], [[2, 5, 3]]], ids=["one-band", "nearest-band"])
def test_one_band_is_the_fixed_policy_bit_for_bit(kw, bands):
    fixed = simulate(make_config(**kw, gamma=3))
    band = simulate(make_config(**kw, policy="bands", num_speculative_tokens_per_batch_size=bands))
    _same_records(fixed.spec, band.spec)
    _same_records(fixed.baseline, band.baseline)
    assert band.summary.pop("gamma_bands") == bands and band.summary.pop("gamma_bands_source") == "given"
    assert band.summary.pop("policy") == "bands" and fixed.summary.pop("policy") == "fixed"
    assert band.summary == fixed.summary


def test_one_band_through_the_live_kernel_equals_fixed_through_the_ahead_kernel():
    from specsim.engine.acceptance import Acceptance
    from specsim.engine.simpy_engine import run_engine
    from specsim.engine.workload import build_workload
    from specsim.simulate import _costs

    cfg = make_config(**HW, alpha=0.7, batch=8, requests=40, output_len=64, length_dist="uniform")
    wl, costs = build_workload(cfg), _costs(cfg)[0]
    a = run_engine(wl, costs, Acceptance.from_config(cfg), FixedPolicy(4), kernel="ahead")
    b = run_engine(wl, costs, Acceptance.from_config(cfg), BandsPolicy([[1, 64, 4]]), kernel="live")
    _same_records(a, b)


def test_gamma_switches_when_the_live_batch_crosses_a_band_boundary():
    bands = [[1, 4, 5], [5, 64, 2]]
    # closed loop, batch 8, uniform lengths: the batch is 8 until requests run out, then shrinks below 5
    res = simulate(make_config(**HW, alpha=0.7, batch=8, requests=40, output_len=64, length_dist="uniform",
                               policy="bands", num_speculative_tokens_per_batch_size=bands))
    rec = res.spec
    want = np.where(rec.step_batch <= 4, 5, 2)
    np.testing.assert_array_equal(rec.step_gamma, want)  # the iteration drafts its band's γ
    assert set(rec.step_gamma.tolist()) == {2, 5} and rec.step_batch.max() == 8 and rec.step_batch.min() <= 4
    np.testing.assert_array_equal(rec.rs_gamma, want[rec.rs_step])  # every request in it drafts that γ
    assert (rec.rs_accepted <= rec.rs_gamma).all()
    # the closed forms average eq. (1)/(5) over the γ the request-steps used
    from specsim import theory
    g = rec.rs_gamma
    e1 = np.array([theory.expected_tokens(0.7, int(x)) for x in g])
    assert res.summary["tokens_per_target_run_eq1"] == pytest.approx(e1.mean())
    assert res.summary["speedup_eq5"] == pytest.approx(e1.sum() / (g * res.summary["c"] + 1.0).sum())
    assert res.summary["gamma"] is None and res.summary["tokens_per_run_dist_eq1"] is None


def test_bands_on_a_trace_and_under_poisson_arrivals_follow_the_live_batch():
    bands = [[1, 2, 4], [3, 8, 1]]
    for kw in (dict(QWEN, trace=TRACE, batch=6, requests=20, output_len=32, length_dist="uniform"),
               dict(HW, alpha=0.7, rate=40.0, max_batch=8, requests=40, replicas=2)):
        rec = simulate(make_config(**kw, policy="bands", num_speculative_tokens_per_batch_size=bands)).spec
        np.testing.assert_array_equal(rec.step_gamma, np.where(rec.step_batch <= 2, 4, 1))
        assert set(rec.step_gamma.tolist()) == {1, 4}


def test_a_batch_outside_every_band_takes_the_nearest_bands_gamma():
    p = BandsPolicy([[2, 3, 7], [10, 20, 1]])
    assert [p.gamma_at(b) for b in (1, 2, 3, 5, 6, 7, 9, 10, 20, 21, 4096)] == [7, 7, 7, 7, 7, 1, 1, 1, 1, 1, 1]
    assert BandsPolicy([[1, 2, 7], [6, 8, 1]]).gamma_at(4) == 7  # equally close: the lower band
    assert p.max_gamma == 7 and p.fixed_gamma is None
    assert BandsPolicy([[1, 2, 3], [5, 9, 3]]).fixed_gamma == 3  # one γ everywhere: as `fixed`


def test_default_bands_are_what_choose_draft_advises_for_the_setup(monkeypatch):
    from specsim.setup import advice
    from specsim.studies.choose import choose_draft

    seen = []
    real = advice.load_points

    def spy(*a, **k):
        seen.append((a, k))
        return real(*a, **k)

    advice._advice.cache_clear()
    monkeypatch.setattr(advice, "load_points", spy)
    kw = dict(HW, alpha=0.7, batch=16, requests=48, output_len=48, seed=5)
    res = simulate(make_config(**kw, policy="bands"))
    (args, kwargs), = seen
    run_point, spec, dep, base = args[:4]
    assert (dep.hardware.name, dep.target.name, spec.model, spec.alpha) == ("h100-sxm", "llama-3.1-8b",
                                                                          "llama-3.2-1b", 0.7)
    assert base["output_len"] == 48 and base["seed"] == 5 and args[7] == advice.ADVICE_REQUESTS
    # the same advice choose-draft gives for the setup (the study and the setup share `setup.advice`)
    study = choose_draft("h100-sxm", "llama-3.1-8b", ["llama-3.2-1b:0.7"], output_len=48, seed=5,
                         requests=advice.ADVICE_REQUESTS)["drafts"][0]["bands"]
    want = [[b["min"], b["max"], b["gamma"]] for b in study]
    assert res.summary["gamma_bands"] == want and res.summary["gamma_bands_source"] == "choose-draft"
    assert want[0][0] == 1 and want[-1][1] == 64  # choose-draft's batch range, contiguous
    p = BandsPolicy(want)
    rec = res.spec
    np.testing.assert_array_equal(rec.step_gamma, [p.gamma_at(int(b)) for b in rec.step_batch])
    assert len(seen) == 2  # the study's own call went through the same point search
    # the same setup again asks for no more points (the advice is cached)
    simulate(make_config(**kw, policy="bands"))
    assert len(seen) == 2


def test_default_bands_need_a_point_runner_from_the_layer_above():
    """resolve() alone never simulates: without `run_point` a bands policy with no bands is refused plainly."""
    from specsim.errors import ConfigError
    from specsim.setup.run import resolve

    cfg = make_config(**HW, alpha=0.7, batch=4, requests=8, policy="bands")
    with pytest.raises(ConfigError, match="choose-draft's advice"):
        resolve(cfg)
    assert resolve(make_config(**HW, alpha=0.7, batch=4, requests=8, policy="bands",
                               num_speculative_tokens_per_batch_size=[[1, 9, 3]])).policy.bands == ((1, 9, 3),)


def test_given_bands_are_used_as_given():
    kw = dict(HW, alpha=0.7, batch=16, requests=48, output_len=48, seed=5)
    assert make_policy("bands", 4, 0.7, 0.1, make_config(**kw, policy="bands",
                       num_speculative_tokens_per_batch_size=[[1, 9, 3]])).bands == ((1, 9, 3),)


def test_simulate_policy_bands_end_to_end_through_the_cli(capsys):
    import json

    code, out, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                                "llama-3.2-1b", "--alpha", "0.7", "--batch", "8", "--requests", "24", "--policy",
                                "bands", "--num-speculative-tokens-per-batch-size", "[[1,4,5],[5,64,2]]", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["policy"] == "bands" and r["gamma_bands"] == [[1, 4, 5], [5, 64, 2]]
    assert 2 <= r["gamma_mean"] <= 5 and r["speedup"] > 0


@pytest.mark.parametrize("bands, needle", [
    ("[[1,4,5],[4,64,2]]", "overlaps"),
    ("[[5,4,2]]", "start <= end"),
    ("[[1,4,-1]]", "0..64"),
    ("[[1,4,65]]", "0..64"),
    ("[]", "empty"),
    ("[[1,4]]", "--num-speculative-tokens-per-batch-size"),
    ("[[1,4,5]", "not valid JSON"),
])
def test_bad_bands_are_one_line_errors(capsys, bands, needle):
    code, out, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                                "llama-3.2-1b", "--alpha", "0.7", "--policy", "bands",
                                "--num-speculative-tokens-per-batch-size", bands, "--json")
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert needle in lines[0], lines[0]


def test_bands_without_policy_bands_is_a_one_line_error(capsys):
    code, _, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                              "llama-3.2-1b", "--alpha", "0.7", "--num-speculative-tokens-per-batch-size",
                              "[[1,4,5]]", "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--num-speculative-tokens-per-batch-size" in err and "--policy" in err


def test_a_band_ending_far_beyond_any_batch_builds_at_once():
    """[[1, 10^9, 3]] is a valid band; its lookup table stops at the largest live batch SimConfig allows."""
    from specsim.engine.policies.bands import LARGEST_LIVE_BATCH, BandsPolicy
    p = BandsPolicy([(1, 8, 4), (9, 10**9, 3)])  # before the cap: a 10^9-entry table (minutes, ~8 GB)
    assert len(p._by_batch) == LARGEST_LIVE_BATCH + 1
    assert p.gamma_at(8) == 4 and p.gamma_at(9) == 3 and p.gamma_at(LARGEST_LIVE_BATCH) == 3


def test_default_bands_advise_the_runs_own_method():
    """An EAGLE-3 head's bands are advised with the head (method eagle3), not as a draft model (which refused it)."""
    from specsim.setup import advice

    seen = []
    real = advice.load_points

    def spy(*a, **k):
        seen.append(a[1])
        return real(*a, **k)

    advice._advice.cache_clear()
    try:
        advice.load_points = spy
        res = simulate(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="eagle3-llama-3.1-8b",
                                   method="eagle3", alpha=0.7, batch=4, requests=8, policy="bands"))
    finally:
        advice.load_points = real
    assert seen[0].method == "eagle3" and res.summary["gamma_bands_source"] == "choose-draft"
