"""Routed replicas on the SimPy engine (engine/routers.py, engine/simpy_engine.py) and the user-process hook."""

import numpy as np
import pytest

from specsim.engine.acceptance import Acceptance
from specsim.engine.policies import FixedPolicy
from specsim.engine.routers import ROUTERS, Router
from specsim.engine.simpy_engine import run_engine
from specsim.engine.workload import build_workload
from specsim.simulate import _costs, make_config, run

PAIR = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, gamma=3, stack="ideal")


def _setup(**kw):
    cfg = make_config(**(PAIR | kw))
    wl, acc = build_workload(cfg), Acceptance.from_config(cfg)
    costs, dep = _costs(cfg)
    mem, _ = dep.memory(cfg.speculation.gamma + 1)
    return cfg, wl, acc, costs, mem


def _same(a, b):
    for f in a.__dataclass_fields__:
        if f == "step_end_s" or not f.startswith("step"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_no_request_is_admitted_before_it_arrives(router):
    """The hand-written event loop this engine replaced admitted up to 0.10 s early with two replicas (an idle
    replica's 'arrived by now' mark let a busy one take a request that had not come yet)."""
    for pol in (None, FixedPolicy(3)):
        _, wl, acc, costs, mem = _setup(rate=30.0, max_batch=8, requests=120, length_dist="uniform", seed=3)
        rec = run_engine(wl, costs, acc if pol else None, pol, mem, 3, router=router)
        assert np.all(rec.admit_s >= rec.arrival_s) and np.all(rec.finish_s >= rec.first_token_s)


def test_one_replica_is_the_same_run_under_every_router():
    _, wl, acc, costs, mem = _setup(rate=25.0, max_batch=8, requests=80, length_dist="lognormal", seed=1)
    runs = [run_engine(wl, costs, acc, FixedPolicy(3), mem, 1, router=r) for r in sorted(ROUTERS)]
    for r in runs[1:]:
        _same(runs[0], r)


def test_routers_differ_in_tail_latency_at_the_same_load_and_the_shared_queue_is_the_bound():
    """Four replicas near saturation with heavy-tailed lengths: a request routed on arrival waits behind its own
    replica's queue while another idles, so round-robin's TTFT p99 is above the shared queue's; least-outstanding
    sits between."""
    ttft = {}
    for router in ("shared-queue", "round-robin", "least-outstanding", "power-of-two"):
        r = run(make_config(**PAIR, rate=40.0, max_batch=4, requests=600, replicas=4, router=router,
                            length_dist="lognormal", output_len=96, prompt_len=256, seed=7))
        ttft[router] = r["ttft_p99_s"]
    assert ttft["round-robin"] > 1.2 * ttft["shared-queue"], ttft
    assert ttft["shared-queue"] <= ttft["least-outstanding"] <= ttft["round-robin"], ttft
    assert len({round(v, 9) for v in ttft.values()}) == 4, ttft


def test_power_of_two_is_seeded():
    _, wl, acc, costs, mem = _setup(rate=30.0, max_batch=4, requests=200, length_dist="uniform", seed=2)
    a = run_engine(wl, costs, None, None, mem, 4, router="power-of-two", seed=2)
    b = run_engine(wl, costs, None, None, mem, 4, router="power-of-two", seed=2)
    c = run_engine(wl, costs, None, None, mem, 4, router="power-of-two", seed=3)
    _same(a, b)
    assert not np.array_equal(a.finish_s, c.finish_s)


class _AllToZero(Router):
    """A user's router: every request to replica 0."""

    name = "all-to-0"

    def pick(self, i, wl, outstanding):
        return 0


def test_a_user_router_plugs_in_and_one_busy_replica_is_one_replica():
    _, wl, acc, costs, mem = _setup(rate=20.0, max_batch=8, requests=60, length_dist="uniform", seed=5)
    one = run_engine(wl, costs, acc, FixedPolicy(3), mem, 1)
    routed = run_engine(wl, costs, acc, FixedPolicy(3), mem, 3, router=_AllToZero(3))
    _same(one, routed)
    np.testing.assert_array_equal(one.step_end_s, routed.step_end_s)


def test_a_user_process_that_takes_a_replica_down_for_30_s_delays_its_requests_by_30_s():
    """The docstring's example: at t = 2 s replica 0 stops for 30 s at its next iteration boundary t_b. With one
    replica, requests done by t_b are untouched, every other one finishes after t_b + 30 s, nothing finishes
    during the outage, and hold(0) changes nothing."""
    _, wl, acc, costs, mem = _setup(rate=10.0, max_batch=8, requests=60, seed=6)

    def outage(duration):
        def proc(env, sim):
            yield env.timeout(2.0)
            sim.replicas[0].hold(duration)
        return proc

    base = run_engine(wl, costs, acc, FixedPolicy(3), mem, 1, kernel="ahead")
    same = run_engine(wl, costs, acc, FixedPolicy(3), mem, 1, processes=[outage(0.0)])
    _same(base, same)
    down = run_engine(wl, costs, acc, FixedPolicy(3), mem, 1, processes=[outage(30.0)])
    t_b = float(base.step_end_s[np.searchsorted(base.step_end_s, 2.0)])  # the first iteration boundary >= 2 s
    early = base.finish_s <= t_b
    assert early.any() and (~early).any()
    np.testing.assert_array_equal(down.finish_s[early], base.finish_s[early])   # done before the outage
    assert np.all(down.finish_s[~early] >= t_b + 30.0)                           # the rest waited it out
    assert not np.any((down.finish_s > t_b) & (down.finish_s < t_b + 30.0))     # nothing finished during it
    with pytest.raises(ValueError, match="duration"):
        run_engine(wl, costs, acc, FixedPolicy(3), mem, 1,
                   processes=[lambda env, sim: (sim.replicas[0].hold(-1.0), (yield env.timeout(0)))])


def test_the_router_is_a_config_field_with_a_one_line_refusal():
    from specsim.errors import ConfigError, SpecsimError
    with pytest.raises((ConfigError, SpecsimError, ValueError), match="router"):
        make_config(**PAIR, replicas=2, router="random")
