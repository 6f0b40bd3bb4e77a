"""Serving physics of the batched engine (issue 4 item 3) and the serving metrics."""

import itertools

import numpy as np
import pytest

from specsim.engine.metrics import emissions
from specsim.simulate import make_config, run, simulate

# Llama-3.1-8B target, Llama-3.2-1B draft on one H100 SXM, the hardware's default (calibrated) stack.
PAIR = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, gamma=3)


def test_concurrency_one_equals_the_batch_1_path():
    cfg = make_config(**PAIR, requests=6, output_len=90, length_dist="uniform", seed=4)
    eng, fast = simulate(cfg), simulate(cfg.replace(**{"engine": "fast"}))
    for x, y in zip(eng.spec.accepted_by_request(), fast.spec.accepted_by_request()):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(eng.spec.step_end_s, fast.spec.step_end_s, rtol=1e-12)
    assert eng.summary["speedup"] == pytest.approx(fast.summary["speedup"], rel=1e-12)
    # open loop, one request at a time (rate far below service rate, max batch 1): each request's service equals
    # its batch-1 service
    op = simulate(cfg.replace(**{"rate": 0.01, "max_batch": 1}))
    assert op.summary["batch_max"] == 1
    for x, y in zip(op.spec.accepted_by_request(), fast.spec.accepted_by_request()):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(op.spec.finish_s - op.spec.admit_s, fast.spec.finish_s - fast.spec.arrival_s,
                               rtol=1e-9)
    np.testing.assert_allclose(op.baseline.finish_s - op.baseline.admit_s,
                               fast.baseline.finish_s - fast.baseline.arrival_s, rtol=1e-9)


BATCHES = [1, 4, 16, 64, 128, 192, 256]


def test_speedup_falls_with_batch_and_crosses_one():
    rows = [run(make_config(**PAIR, batch=b, requests=4 * b, seed=2)) for b in BATCHES]
    s = [r["speedup"] for r in rows]
    print("\nbatch    speedup  eq5(c at batch 1)  c at batch   MFU spec/base")
    for b, r in zip(BATCHES, rows):
        print(f"{b:5d}  {r['speedup']:8.3f}  {r['speedup_eq5']:8.3f}  {r['c_at_batch']:10.4f}   "
              f"{r['mfu_mean']:.3f}/{r['baseline_mfu_mean']:.3f}")
    assert all(x > y for x, y in itertools.pairwise(s)), s
    assert s[0] > 1.2 and s[-1] < 1.0, s
    k = next(i for i, x in enumerate(s) if x < 1.0)
    # linear interpolation between the last batch that gains and the first that loses
    b0, b1, s0, s1 = BATCHES[k - 1], BATCHES[k], s[k - 1], s[k]
    breakeven = b0 + (s0 - 1.0) / (s0 - s1) * (b1 - b0)
    print(f"break-even batch ≈ {breakeven:.0f} (speedup {s0:.3f} at {b0}, {s1:.3f} at {b1})")
    assert 16 < breakeven < 256
    # the physics behind it: the verification pass turns compute-bound as the batch grows
    assert rows[-1]["mfu_mean"] > 10 * rows[0]["mfu_mean"]


def test_poisson_low_rate_approaches_batch_1_and_near_saturation_drops_below_one():
    b1 = run(make_config(**PAIR, requests=150, seed=3))["speedup"]  # the same 150 requests, one at a time
    low = run(make_config(**PAIR, rate=0.2, requests=150, seed=3))
    # baseline capacity at max batch 256 is ~115 req/s and the speculative one ~90 req/s (closed loop, 256)
    high = run(make_config(**PAIR, rate=120.0, requests=600, seed=3))
    print(f"\nbatch 1 {b1:.3f}  rate 0.2/s {low['speedup']:.3f} (mean batch {low['batch_mean']:.2f})  "
          f"rate 120/s {high['speedup']:.3f} (mean batch {high['batch_mean']:.0f})")
    assert low["batch_mean"] < 1.2
    assert low["speedup"] == pytest.approx(b1, rel=0.01)
    assert high["speedup"] < 1.0
    assert high["ttft_p99_s"] > high["baseline_ttft_p99_s"]  # the speculative replica saturates first


def test_serving_metrics_are_consistent():
    res = simulate(make_config(**PAIR, rate=40.0, requests=120, length_dist="uniform", seed=8))
    r, rec = res.summary, res.spec
    assert r["mode"] == "poisson"
    for m in ("ttft", "tpot", "itl", "e2e"):
        assert 0 < r[f"{m}_p50_s"] <= r[f"{m}_p90_s"] <= r[f"{m}_p99_s"]
    assert r["ttft_p50_s"] < r["e2e_p50_s"]
    assert r["output_tokens"] == int(res.workload.output_len.sum())
    assert r["throughput_tok_s"] == pytest.approx(r["output_tokens"] / r["walltime_s"])
    assert 0 <= r["goodput_req_s"] <= r["requests"] / r["walltime_s"]
    assert 0 < r["mbu_mean"] <= 1 and 0 < r["mfu_mean"] <= 1
    # τ: tokens per target run, bonus included; histogram counts 1 … γ+1 tokens over all request-steps
    assert sum(r["tokens_per_run_hist"]) == r["request_steps"] == rec.rs_accepted.size
    assert len(r["tokens_per_run_hist"]) == PAIR["gamma"] + 1
    assert r["tokens_per_target_run"] == pytest.approx(
        np.dot(np.arange(1, PAIR["gamma"] + 2), r["tokens_per_run_hist"]) / r["request_steps"])
    assert r["draft_acceptance_rate"] == pytest.approx(rec.rs_accepted.sum() / (PAIR["gamma"] * rec.rs_accepted.size))
    # i.i.d. β: acceptance at every reached slot ≈ α; draft acceptance rate ≈ α(1 − α^γ)/((1 − α)γ), not α
    assert np.allclose(r["acceptance_by_position"], 0.7, atol=0.03)
    assert r["draft_acceptance_rate"] == pytest.approx(r["draft_acceptance_rate_eq"], abs=0.02)
    # per request: TPOT = (finish − first token)/(tokens − 1); ITL gaps sum to the same span
    i = int(np.argmax(res.workload.output_len))
    steps = rec.rs_step[rec.rs_request == i]
    gaps = np.diff(np.r_[rec.first_token_s[i], rec.step_end_s[steps]])
    assert gaps.sum() == pytest.approx(rec.finish_s[i] - rec.first_token_s[i])
    times, tokens = emissions(rec, i)
    assert tokens.sum() == res.workload.output_len[i] and np.all(tokens >= 1) and np.all(np.diff(times) > 0)
    assert times[-1] == rec.finish_s[i] and times[0] == rec.first_token_s[i]
    assert r["baseline_tpot_p50_s"] > r["tpot_p50_s"]  # light load: speculation helps per token


def test_replayed_arrivals_and_replicas(tmp_path):
    csv = tmp_path / "arrivals.csv"
    csv.write_text("arrival_s,prompt_len,output_len\n0.5,64,20\n0.0,100,30\n0.0,80,10\n2.0,50,5\n")
    res = simulate(make_config(**PAIR, arrivals_csv=str(csv), max_batch=8, stack="ideal"))
    assert res.summary["mode"] == "replay" and res.summary["requests"] == 4
    # sorted by arrival; every request arrives when the file says and is admitted no earlier
    np.testing.assert_array_equal(res.spec.arrival_s, [0.0, 0.0, 0.5, 2.0])
    np.testing.assert_array_equal(res.workload.output_len, [30, 10, 20, 5])
    assert np.all(res.spec.admit_s >= res.spec.arrival_s) and np.all(res.baseline.admit_s >= res.baseline.arrival_s)
    assert res.summary["output_tokens"] == 65
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_len\n0.0,10\n")
    from specsim.errors import ConfigError
    with pytest.raises(ConfigError, match="output_len"):
        run(make_config(**PAIR, arrivals_csv=str(bad)))
    # two replicas share one queue: each keeps its own batch cap, together they finish sooner
    one = run(make_config(**PAIR, batch=4, requests=32, stack="ideal"))
    two = run(make_config(**PAIR, batch=4, requests=32, replicas=2, stack="ideal"))
    assert two["batch_max"] == 4 and two["walltime_s"] < 0.6 * one["walltime_s"]
