"""γ policies as a specification: fixed, eq. (5)-optimal, Hugging Face's heuristic schedule, the oracle bound."""

import numpy as np
import pytest

from specsim import theory
from specsim.errors import ConfigError
from specsim.engine.policies import HeuristicPolicy, heuristic_schedule, make_policy
from specsim.simulate import make_config, run, simulate
from specsim.traces.format import Trace

HW = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b")


def test_heuristic_schedule_on_a_hand_made_acceptance_sequence():
    # γ0 = 4: clean sweep (4/4) → 6; clean (6/6) → 8; 2/8 → 7; 0/7 → 6; 6/6 → 8; 1/8 → 7 …; floor at 1
    assert heuristic_schedule(4, [4, 6, 2, 0, 6, 1]) == [4, 6, 8, 7, 6, 8]
    assert heuristic_schedule(2, [0, 0, 0, 1, 0]) == [2, 1, 1, 1, 3]
    # the vectorized update the engines use agrees with the reference, request by request
    p = HeuristicPolicy(4)
    np.testing.assert_array_equal(p.update(np.array([4, 6, 8, 1, 1]), np.array([4, 6, 2, 0, 1])), [6, 8, 7, 1, 3])
    assert p.update(np.array([64]), np.array([64]))[0] == 64  # capped at 64


def test_heuristic_schedule_through_the_engine_on_a_temperature_0_trace(tmp_path):
    # β ∈ {0, 1}: acceptance is deterministic. Rejections at output positions 7 and 8 and 20.
    beta = np.ones(40)
    beta[[7, 8, 20]] = 0.0
    path = tmp_path / "t0.csv"
    Trace.from_sequences([beta]).write(path)
    res = simulate(make_config(**HW, trace=str(path), policy="heuristic", gamma=2, fixed_c=0.1, requests=1,
                               output_len=30))
    rec = res.spec
    # steps start after the prefill's token 0: t=1 γ2 accepts 2 (+1) → t=4 γ4: slots 4,5,6 accepted, 7 rejected →
    # 3 accepted, emits 4 → t=8 γ3: 8 rejected → 0 → t=9 γ2: 2 → t=12 γ4: 4 → t=17 γ6: 17,18,19 ok, 20 no → 3 → t=21
    # γ5: 5 → t=27 γ7: owes 3 more tokens (emits 3, truncated)
    assert rec.rs_gamma.tolist() == [2, 4, 3, 2, 4, 6, 5, 7]
    assert rec.rs_accepted.tolist() == [2, 3, 0, 2, 4, 3, 5, 7]
    assert rec.rs_gamma.tolist() == heuristic_schedule(2, rec.rs_accepted.tolist())
    assert res.summary["gamma"] == 2 and res.summary["gamma_mean"] == pytest.approx(33 / 8)


def test_optimal_policy_uses_theory_optimal_gamma_at_the_derived_c():
    for a in (0.6, 0.8, 0.9):
        r = run(make_config(**HW, stack="ideal", alpha=a, policy="optimal", requests=2, output_len=32))
        assert r["gamma"] == theory.optimal_gamma(a, r["c"])
        assert r["speedup_eq5"] == pytest.approx(theory.speedup(a, r["gamma"], r["c"]))
    r = run(make_config(**HW, alpha=0.8, policy="optimal", fixed_c=0.05, requests=1, output_len=16))
    assert r["gamma"] == theory.optimal_gamma(0.8, 0.05) and r["c"] == 0.05


def test_fixed_policy_keeps_gamma():
    res = simulate(make_config(**HW, alpha=0.7, gamma=5, fixed_c=0.1, requests=3, output_len=200))
    assert set(res.spec.rs_gamma.tolist()) == {5} and set(res.spec.step_gamma.tolist()) == {5}


@pytest.mark.parametrize("alpha", [0.6, 0.8, 0.9])
def test_oracle_tokens_per_run_is_one_over_one_minus_alpha(alpha):
    res = simulate(make_config(**HW, alpha=alpha, policy="oracle", fixed_c=0.05, requests=8, output_len=25_001,
                               batch=8))
    r = res.summary
    assert r["tokens_per_target_run"] == pytest.approx(1 / (1 - alpha), rel=0.01)
    assert r["tokens_per_target_run_eq1"] == pytest.approx(1 / (1 - alpha))
    # γ is the number about to be accepted: every drafted token is accepted
    assert r["draft_acceptance_rate"] == 1.0
    np.testing.assert_array_equal(res.spec.rs_gamma, res.spec.rs_accepted)
    # at batch 1 (each step costs n·c + 1 under fixed c) the speedup is 1 / (1 − α + αc); the fast path is the
    # batch-1 engine (tests/test_fastpath.py shows they agree step for step)
    r1 = run(make_config(**HW, alpha=alpha, policy="oracle", fixed_c=0.05, requests=8, output_len=25_001,
                         engine="fast"))
    assert r1["tokens_per_target_run"] == r["tokens_per_target_run"]  # acceptance does not depend on the batch
    assert r1["speedup"] == pytest.approx(theory.oracle_speedup(alpha, 0.05), rel=0.01)
    assert r1["speedup_eq5"] == pytest.approx(theory.oracle_speedup(alpha, 0.05))
    # at batch 8 every iteration drafts as long as its luckiest request: less than batch 1
    assert r["speedup"] < r1["speedup"]


def test_heuristic_iid_matches_eq1_averaged_over_the_gammas_it_used():
    r = run(make_config(**HW, alpha=0.8, policy="heuristic", gamma=4, fixed_c=0.05, requests=8, output_len=25_001,
                        batch=8))
    assert r["gamma_mean"] > 1
    assert r["tokens_per_target_run"] == pytest.approx(r["tokens_per_target_run_eq1"], rel=0.01)


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="--policy"):
        make_config(**HW, alpha=0.5, policy="greedy")
    with pytest.raises(ConfigError):
        make_policy("greedy", 4, 0.5, 0.1)
