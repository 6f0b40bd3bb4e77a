"""Draft catch-up (`draft_catchup`): after a clean sweep the next first draft pass feeds 2 positions.

The specification: off by default (every result so far is unchanged); on, a step after a clean sweep costs exactly
T_d(B, 2, L) − T_d(B, 1, L) more (batch 1), a step after a rejection nothing more; the SimPy engine's two kernels
and the vectorized fast path agree bit for bit, as they do without it."""

import numpy as np
import pytest

from specsim.traces import synth as trace_synth
from specsim.simulate import make_config, simulate

# a CPU-like stack: passes of more than one row read the weights at a quarter of the rate, so catching up costs
STACK = """name = "cpu-multi-row-test"
description = "test stack: multi-row passes at a quarter of the bandwidth"  # test fixture, not a measurement
bandwidth_fraction = 0.6  # test value
multi_row_bandwidth_fraction = 0.15  # test value
compute_fraction = 0.5  # test value
per_call_overhead_s = 0.0  # test value
per_layer_overhead_s = 0.001  # test value
"""


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    d = tmp_path_factory.mktemp("catchup")
    (d / "stack.toml").write_text(STACK)
    tr = trace_synth.markov(0.8, 12.0, n_sequences=4, length=300, seed=5, bernoulli=True)
    tr.write(d / "t0.parquet")
    return {"hardware": "cpu-2core", "target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b",
            "stack": str(d / "stack.toml"), "trace_path": str(d / "t0.parquet")}


def _cfg(cpu, **kw):
    base = {k: v for k, v in cpu.items() if k != "trace_path"}
    if kw.pop("trace", False):
        kw["trace"] = cpu["trace_path"]
    return make_config(**base, requests=kw.pop("requests", 6), prompt_len=48, output_len=80, seed=3, **kw)


def test_off_by_default_and_on_costs_exactly_the_wider_pass(cpu):
    from specsim.simulate import _costs
    cfg = _cfg(cpu, alpha=0.8, gamma=3)
    assert cfg.deployment.draft_catchup is False
    off = simulate(cfg)
    on = simulate(cfg.replace(**{"draft_catchup": True}))
    np.testing.assert_array_equal(off.spec.rs_accepted, on.spec.rs_accepted)  # acceptance does not move
    np.testing.assert_array_equal(off.baseline.step_dur_s, on.baseline.step_dur_s)
    costs, *_ = _costs(on.cfg)
    extra = on.spec.step_dur_s - off.spec.step_dur_s
    # step s catches up iff the same request's step s − 1 was a clean sweep (batch 1: one request-step per step)
    req, n = on.spec.rs_request, on.spec.rs_accepted
    prev_clean = np.zeros(req.size, bool)
    prev_clean[1:] = (n[:-1] == 3) & (req[1:] == req[:-1])
    assert prev_clean.sum() > 20 and (~prev_clean).sum() > 20
    np.testing.assert_array_equal(extra[~prev_clean], 0.0)
    wl = on.workload
    first = np.concatenate(([True], req[1:] != req[:-1]))
    tok = n + 1  # tokens per step (only the last step of a request is truncated, and no context follows it)
    before = np.cumsum(tok) - tok
    emitted = before - before[np.flatnonzero(first)[np.cumsum(first) - 1]] + 1  # + output token 0 (prefill)
    L = costs.context(wl.prompt_len[req], emitted).astype(float)
    want = [costs.catchup_extra(1, float(x), 0)[0] for x in L[prev_clean]]
    np.testing.assert_allclose(extra[prev_clean], want, rtol=1e-12)
    # the wider pass costs here: 2 rows read the weights at the multi-row rate
    assert min(want) > 0.5 * costs.draft.pass_time_s(1, 1, 48)
    assert on.summary["speedup"] < off.summary["speedup"]


@pytest.mark.parametrize("kw", [dict(alpha=0.8, gamma=3), dict(alpha=0.7, gamma=5, length_dist="uniform"),
                                dict(trace=True, gamma=4), dict(trace=True, policy="heuristic", gamma=2),
                                dict(alpha=0.75, policy="oracle")],
                         ids=["fixed", "uniform-lengths", "trace", "heuristic", "oracle"])
def test_fast_path_and_engine_agree_with_catchup(cpu, kw):
    cfg = _cfg(cpu, draft_catchup=True, **kw)
    eng = simulate(cfg)
    fast = simulate(cfg.replace(**{"engine": "fast"}))
    np.testing.assert_array_equal(eng.spec.rs_accepted, fast.spec.rs_accepted)
    np.testing.assert_allclose(eng.spec.step_dur_s, fast.spec.step_dur_s, rtol=1e-12)
    assert fast.summary["speedup"] == pytest.approx(eng.summary["speedup"], rel=1e-12)


@pytest.mark.parametrize("kw", [dict(batch=8), dict(rate=2.0), dict(batch=3, replicas=2)])
def test_the_two_step_kernels_agree_with_catchup(cpu, kw):
    from specsim.engine.acceptance import Acceptance
    from specsim.engine.simpy_engine import run_engine
    from specsim.engine.policies import FixedPolicy
    from specsim.simulate import _costs
    from specsim.engine.workload import build_workload

    cfg = _cfg(cpu, alpha=0.8, gamma=3, draft_catchup=True, requests=24, **kw)
    wl, acc = build_workload(cfg), Acceptance.from_config(cfg)
    costs, *_ = _costs(cfg)
    a = run_engine(wl, costs, acc, FixedPolicy(3), None, cfg.workload.replicas, kernel="ahead")
    b = run_engine(wl, costs, acc, FixedPolicy(3), None, cfg.workload.replicas, kernel="live")
    for f in a.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f"{kw} {f}")
    off = run_engine(wl, _costs(cfg.replace(**{"draft_catchup": False}))[0], acc, FixedPolicy(3), None,
                     cfg.workload.replicas)
    assert a.step_dur_s.sum() > off.step_dur_s.sum()  # batched steps pay for the catching-up rows too


def test_sweep_point_ids_do_not_move_for_configs_without_catchup():
    """A sweep written before draft_catchup existed keeps its point ids (resumes without recomputing)."""
    import json

    from specsim.sweep.spec import canonical_json, point_id
    cfg = make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7)
    assert "draft_catchup" not in json.loads(canonical_json(cfg))
    on = cfg.replace(**{"draft_catchup": True})
    assert json.loads(canonical_json(on))["draft_catchup"] is True and point_id(on) != point_id(cfg)
    assert point_id(cfg) == point_id(make_config(**json.loads(canonical_json(cfg))))
