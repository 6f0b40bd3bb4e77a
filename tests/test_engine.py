"""The engine as a specification: eq. (1) and eq. (5) under i.i.d. β, clustering under a Markov trace, the draw
convention, determinism, timing definitions, memory admission."""

import json

import numpy as np
import pytest

from specsim.engine.acceptance import LENIENCE_KAPPA, Acceptance, accepted_reference, lenient
from specsim.errors import ConfigError, DoesNotFitError
from specsim.simulate import make_config, run, simulate
from specsim.traces.format import Trace

HW = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b")


def eq1(a, g):
    return (1 - a ** (g + 1)) / (1 - a)


def eq5(a, g, c):
    return eq1(a, g) / (g * c + 1)


# --- i.i.d. β: eq. (1) and eq. (5) -------------------------------------------------------------------------------
IID = [(a, g) for a in (0.5, 0.75, 0.9) for g in (1, 3, 7)]


def iid_cfg(a, g, engine):
    # 10 requests × 20 000 decode tokens = 200k tokens; long requests keep end-of-request truncation negligible.
    return make_config(**HW, alpha=a, gamma=g, fixed_c=0.05, requests=10, output_len=20_001, seed=1, engine=engine)


@pytest.mark.parametrize("a,g", IID)
def test_iid_tokens_per_run_and_speedup_match_eq1_eq5(a, g):
    r = run(iid_cfg(a, g, "fast"))
    assert r["output_tokens"] - r["requests"] >= 200_000
    assert r["tokens_per_target_run"] == pytest.approx(eq1(a, g), rel=0.01)
    assert r["tokens_per_target_run_eq1"] == pytest.approx(eq1(a, g), rel=1e-12)
    # free verification (target pass = 1 unit whatever its positions), draft pass = c units
    assert r["speedup"] == pytest.approx(eq5(a, g, 0.05), rel=0.01)
    assert r["speedup_eq5"] == pytest.approx(eq5(a, g, 0.05), rel=1e-12)


@pytest.mark.parametrize("a,g", [(0.5, 1), (0.75, 3), (0.9, 7)])
def test_iid_simpy_engine_of_record_matches_eq1_eq5_and_the_fast_path(a, g):
    res = simulate(iid_cfg(a, g, "simpy"))
    r = res.summary
    assert r["engine"] == "simpy"
    assert r["tokens_per_target_run"] == pytest.approx(eq1(a, g), rel=0.01)
    assert r["speedup"] == pytest.approx(eq5(a, g, 0.05), rel=0.01)
    fast = simulate(iid_cfg(a, g, "fast"))
    for x, y in zip(res.spec.accepted_by_request(), fast.spec.accepted_by_request()):
        np.testing.assert_array_equal(x, y)


# --- clustering: a two-state Markov chain of easy and hard stretches ------------------------------------------
BETA = np.array([0.95, 0.25])  # easy, hard
P = np.array([[0.95, 0.05],  # mean easy stretch 20 positions
              [0.10, 0.90]])  # mean hard stretch 10 positions


def stationary(M):
    w, v = np.linalg.eig(M.T)
    p = np.real(v[:, np.argmin(np.abs(w - 1))])
    return p / p.sum()


def markov_trace(n_seq, length, seed):
    """Sequences of the chain: alternating stretches, geometric lengths (memoryless), stationary start."""
    g = np.random.default_rng(seed)
    pi = stationary(P)
    seqs = []
    for _ in range(n_seq):
        state, parts, n = int(g.random() >= pi[0]), [], 0
        while n < length:
            k = int(g.geometric(1 - P[state, state]))
            parts.append(np.full(k, BETA[state]))
            n += k
            state = 1 - state
        seqs.append(np.concatenate(parts)[:length])
    return Trace.from_sequences(seqs, {"source": "test", "generator": "two-state markov"})


def exact_tokens_per_run(gamma):
    """Long-run mean tokens per target run for the chain, by dynamic programming over its states.

    A step starting at position t (state s) accepts slot k (position t + k) with probability β(X_{t+k}); v_k(x) =
    P(slots < k accepted, X_{t+k} = x). A rejection at slot k emits k + 1 tokens, a clean sweep γ + 1; the next step
    starts one position after the last emitted token. The start states form a Markov chain M; renewal-reward gives
    the mean tokens per step as Σ_s π_M(s)·E[tokens | s]."""
    M = np.zeros((2, 2))
    T = np.zeros(2)
    for s in range(2):
        v = np.eye(2)[s]
        for k in range(gamma):
            rej = v * (1 - BETA)
            T[s] += (k + 1) * rej.sum()
            M[s] += rej @ P
            v = (v * BETA) @ P
        T[s] += (gamma + 1) * v.sum()
        M[s] += v @ P
    return float(stationary(M) @ T)


def test_markov_trace_differs_from_eq1_and_matches_the_chains_exact_expectation(tmp_path):
    alpha = float(stationary(P) @ BETA)
    gamma = 5
    path = tmp_path / "markov.parquet"
    markov_trace(32, 20_001, seed=7).write(path)  # 640k positions: the estimate's s.d. is ~0.25%
    # Acceptance never depends on the batch (per-request streams), so batch 32 gives batch 1's accepted counts, faster.
    res = simulate(make_config(**HW, trace=str(path), gamma=gamma, fixed_c=0.05, requests=32, output_len=20_001,
                               batch=32, seed=3))
    r = res.summary
    exact = exact_tokens_per_run(gamma)
    print(f"alpha {alpha:.4f}  eq1 {eq1(alpha, gamma):.4f}  exact chain {exact:.4f}  "
          f"engine {r['tokens_per_target_run']:.4f}")
    assert r["alpha"] == pytest.approx(alpha, abs=0.01)  # the realized trace's mean β
    assert abs(exact / eq1(alpha, gamma) - 1) > 0.05  # clustering matters for this chain
    assert r["tokens_per_target_run"] == pytest.approx(exact, rel=0.01)
    assert r["clustering_delta"] == pytest.approx(r["tokens_per_target_run"] - r["tokens_per_target_run_eq1"])
    assert abs(r["clustering_delta"]) > 0.05 * eq1(alpha, gamma)


# --- the draw convention ----------------------------------------------------------------------------------------
def test_block_draws_equal_per_step_draws():
    g1, g2 = np.random.default_rng((5, 2, 9)), np.random.default_rng((5, 2, 9))
    per_step = np.concatenate([g1.random(k) for k in (3, 1, 7, 64, 2)])
    np.testing.assert_array_equal(per_step, g2.random(per_step.size))


def test_engine_accepted_counts_follow_the_reference_rule():
    """Step s of request i reads uniforms s·γ … s·γ+γ−1 of stream (seed, 2, i); n = leading u_k < β_{t+k}."""
    beta = np.random.default_rng(0).uniform(0.2, 1.0, 400)
    tr = Trace.from_sequences([beta], {"slot_decay": 0.9})
    acc = Acceptance(trace=tr, seed=4, lenience=0.5)
    gamma, out = 3, 120
    from specsim.engine.simpy_engine import run_engine
    from specsim.engine.policies import FixedPolicy
    from specsim.cost.steptime import StepCosts
    from specsim.engine.workload import Workload

    wl = Workload("closed", np.full(2, np.nan), np.full(2, 10), np.full(2, out), 1, 1)
    rec = run_engine(wl, StepCosts(None, None, 0.1), acc, FixedPolicy(gamma))
    for i, got in enumerate(rec.accepted_by_request()):
        u = np.random.default_rng((4, 2, i)).random(10_000)
        t, want = 1, []
        while t < out:
            n = accepted_reference(u[len(want) * gamma:], beta, t, gamma, tr.slot_factor, 0.5)
            want.append(n)
            t += n + 1
        np.testing.assert_array_equal(got, want)


def test_lenience_approximation_reproduces_the_papers_t5_small_figures():
    for lenience, a in ((1.0, 0.62), (0.5, 0.71), (0.3, 0.76), (0.1, 0.84)):
        assert lenient(0.62, lenience) == pytest.approx(a, abs=0.006)
    assert LENIENCE_KAPPA == 0.38
    r = run(make_config(**HW, alpha=0.62, lenience=0.5, fixed_c=0.05, requests=2, output_len=50))
    assert r["alpha"] == pytest.approx(lenient(0.62, 0.5)) and r["alpha_trace_raw"] == 0.62


# --- timing definitions on a deterministic case -------------------------------------------------------------------
def test_ttft_tpot_itl_and_speedup_on_a_deterministic_trace(tmp_path):
    path = tmp_path / "ones.csv"
    Trace.from_sequences([np.ones(50)]).write(path)  # β ≡ 1: every draft accepted
    res = simulate(make_config(**HW, trace=str(path), gamma=3, fixed_c=0.1, requests=1, output_len=9))
    r = res.summary
    # prefill (free under fixed_c) emits token 0; then 2 steps of 4 tokens, each 3·0.1 + 1 = 1.3 units
    assert r["ttft_p50_s"] == 0.0
    assert r["walltime_s"] == pytest.approx(2.6)
    assert r["tpot_p50_s"] == pytest.approx(2.6 / 8)
    np.testing.assert_allclose(res.spec.step_dur_s, [1.3, 1.3])
    assert r["itl_p50_s"] == pytest.approx(1.3)
    assert r["tokens_per_target_run"] == 4.0 and r["tokens_per_run_hist"] == [0, 0, 0, 2]
    assert r["acceptance_by_position"] == [1.0, 1.0, 1.0]
    assert r["baseline_walltime_s"] == pytest.approx(8.0) and r["baseline_itl_p50_s"] == pytest.approx(1.0)
    assert r["speedup"] == pytest.approx(8.0 / 2.6)


def test_the_two_step_kernels_are_bit_identical():
    from specsim.engine.acceptance import Acceptance
    from specsim.engine.simpy_engine import run_engine
    from specsim.engine.policies import FixedPolicy
    from specsim.simulate import _costs
    from specsim.engine.workload import build_workload

    for kw in (dict(batch=8), dict(rate=40.0), dict(batch=3, replicas=2), dict(batch=16, length_dist="uniform")):
        cfg = make_config(**HW, stack="ideal", alpha=0.7, gamma=4, requests=40, output_len=64, **kw)
        wl, acc = build_workload(cfg), Acceptance.from_config(cfg)
        costs, dep = _costs(cfg)
        mem, _ = dep.memory(5)
        a = run_engine(wl, costs, acc, FixedPolicy(4), mem, cfg.workload.replicas, kernel="ahead")
        b = run_engine(wl, costs, acc, FixedPolicy(4), mem, cfg.workload.replicas, kernel="live")
        for f in a.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f"{kw} {f}")


CLOSED_CASES = [dict(batch=1), dict(batch=5, output_len=1), dict(batch=8, length_dist="uniform"),
                dict(batch=16, length_dist="lognormal", gamma=2), dict(batch=32, gamma=1),
                dict(batch=8, policy="heuristic"),
                dict(batch=8, policy="oracle"), dict(batch=8, draft_catchup=True),
                dict(batch=8, target="t5-v1_1-xxl", draft="t5-v1_1-small", hardware="tpu-v4"),
                dict(batch=8, fixed_c=0.1)]


@pytest.mark.parametrize("kw", CLOSED_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_the_closed_loop_kernel_equals_the_event_loop(kw):
    """engine/closed.py computes a closed loop in iteration space; every Records array must equal the event
    loop's, bit for bit, for the speculative run (a batch-free policy) and for the baseline."""
    from specsim.engine.acceptance import Acceptance
    from specsim.engine.policies import make_policy
    from specsim.engine.simpy_engine import run_engine
    from specsim.engine.workload import build_workload
    from specsim.simulate import _costs

    fields = dict(HW, stack="ideal", alpha=0.7, gamma=4, requests=48, output_len=64, engine="simpy") | kw
    cfg = make_config(**fields)
    wl, acc = build_workload(cfg), Acceptance.from_config(cfg)
    costs, dep = _costs(cfg)
    c = costs.derived_c(cfg.workload.prompt_len)
    policy = make_policy(cfg.speculation.policy, cfg.speculation.gamma, acc.alpha, c, cfg)
    assert policy.batch_free
    mems = dep.memory(policy.max_gamma + 1) if dep is not None else (None, None)
    for pol, mem in ((policy, mems[0]), (None, mems[1])):
        a = run_engine(wl, costs, acc, pol, mem, 1, kernel="closed")
        for other in ("ahead", "live") if pol is not None and pol.fixed_gamma else ("live",):
            b = run_engine(wl, costs, acc, pol, mem, 1, kernel=other)
            for f in a.__dataclass_fields__:
                np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f"{kw} {other} {f}")


def test_a_policy_that_reads_the_live_batch_is_not_batch_free():
    from specsim.engine.policies import make_policy

    cfg = make_config(**HW, alpha=0.7, policy="bands", num_speculative_tokens_per_batch_size=[[1, 4, 4], [5, 64, 2]])
    assert not make_policy("bands", 4, 0.7, 0.1, cfg).batch_free
    one = make_config(**HW, alpha=0.7, policy="bands", num_speculative_tokens_per_batch_size=[[1, 64, 3]])
    assert make_policy("bands", 4, 0.7, 0.1, one).batch_free


# --- determinism ----------------------------------------------------------------------------------------------------
SIM_ARGS = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
            "--stack", "ideal", "--alpha", "0.7", "--requests", "12", "--output-len", "40", "--seed", "11"]


from conftest import cli_capsys as cli  # noqa: E402  (the shared CLI runner)


def test_same_seed_gives_byte_identical_json(capsys):
    outs = []
    for _ in range(2):
        code, out, err = cli(capsys, *SIM_ARGS, "--rate", "30", "--json")
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]
    d = json.loads(outs[0])
    for k in ("speedup", "speedup_eq5", "tokens_per_target_run", "tokens_per_target_run_eq1", "c", "alpha", "gamma",
              "walltime_s", "baseline_walltime_s", "ttft_p50_s", "tpot_p99_s", "itl_p90_s", "e2e_p50_s",
              "throughput_tok_s", "baseline_throughput_tok_s", "goodput_req_s", "mbu_mean", "mfu_mean",
              "tokens_per_run_hist", "acceptance_by_position", "clustering_delta", "gamma_mean",
              "draft_acceptance_rate"):
        assert k in d, k
    code, out2, _ = cli(capsys, *SIM_ARGS[:-1], "12", "--rate", "30", "--json")
    assert out2 != outs[0]  # another seed, another result


def test_human_output_puts_simulated_beside_closed_form(capsys):
    code, out, err = cli(capsys, *SIM_ARGS, "--batch", "4")
    assert code == 0, err
    for text in ("simulated", "closed form", "eq. (5)", "eq. (1)", "TTFT", "TPOT", "ITL", "goodput"):
        assert text in out, text


def test_gamma_and_policy_do_not_change_arrivals_or_lengths():
    base = dict(**HW, stack="ideal", alpha=0.7, rate=25.0, requests=30, length_dist="uniform", seed=5)
    runs = [simulate(make_config(**base, gamma=g, policy=p)) for g, p in ((2, "fixed"), (7, "fixed"),
                                                                         (3, "heuristic"), (4, "oracle"))]
    w0 = runs[0].workload.records()
    assert len(set(w0["prompt_len"])) > 1 and w0["arrival_s"][1] > 0
    for r in runs[1:]:
        assert r.workload.records() == w0
        np.testing.assert_array_equal(r.spec.arrival_s, runs[0].spec.arrival_s)
        np.testing.assert_array_equal(r.baseline.finish_s, runs[0].baseline.finish_s)  # same baseline
    assert runs[0].summary["walltime_s"] != runs[1].summary["walltime_s"]


# --- user errors and memory ----------------------------------------------------------------------------------------
def test_bad_values_are_one_line_config_errors(capsys):
    for args, field in ((["--alpha", "1.5"], "--alpha"), (["--alpha", "0.5", "--gamma", "0"], "--gamma"),
                        (["--alpha", "0.5", "--policy", "best"], "--policy"),
                        (["--alpha", "0.5", "--lenience", "0"], "--lenience"),
                        (["--alpha", "0.5", "--batch", "2", "--rate", "3"], "--batch")):
        code, out, err = cli(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                             "llama-3.2-1b", "--stack", "ideal", *args)
        assert code == 2 and out == "" and err.count("\n") == 1 and field in err, (args, err)
    with pytest.raises(ConfigError, match="exactly one of --alpha and --trace"):
        make_config(**HW)
    with pytest.raises(ConfigError, match="fast path"):
        run(make_config(**HW, stack="ideal", alpha=0.5, batch=4, engine="fast"))


def test_a_request_that_cannot_fit_is_refused_with_figures():
    with pytest.raises(DoesNotFitError, match=r"llama-3.1-70b: weights 141\.\d+ GB"):
        run(make_config(hardware="h100-sxm", target="llama-3.1-70b", draft="llama-3.2-1b", stack="ideal",
                        alpha=0.7, requests=1))


def test_kv_memory_of_target_and_draft_limits_admission():
    # 8B: 128 KiB KV per token, 1B: 32 KiB; a 32k-token request reserves ~5.4 GB of KV with its draft, ~4.3 without.
    r = run(make_config(**HW, stack="ideal", alpha=0.7, batch=64, requests=40, prompt_len=32_000, output_len=64))
    weights = r["memory_weights_gb"]
    per_req = (32_000 + 64 + 5) * (131072 + 32768) / 1e9
    assert r["batch_max"] == int((80 - weights) // per_req) < 64
    assert r["baseline_batch_max"] > r["batch_max"]  # the baseline holds no draft
