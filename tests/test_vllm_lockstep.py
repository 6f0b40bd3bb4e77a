"""The lockstep protocol (experiments/vllm_blocks.py --lockstep, vllm_serve.py's busy clock): two engines step in
turns, and each run's clock counts only its own engine's work, so time the other engine took is nobody's."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
vs = pytest.importorskip("vllm_session")
vsv = pytest.importorskip("vllm_serve")
vb = pytest.importorskip("vllm_blocks")


class _Out:
    def __init__(self, rid, n, finished):
        self.request_id, self.finished, self.prompt_token_ids = rid, finished, [1] * 5
        self.outputs = [types.SimpleNamespace(token_ids=list(range(n)))]


class _Engine:
    """Every step gives each request one token; a request is done after 4."""

    def __init__(self):
        self.reqs: dict[str, int] = {}

    def add_request(self, rid, text, params):
        self.reqs[rid] = 0

    def has_unfinished_requests(self):
        return bool(self.reqs)

    def step(self):
        out = []
        for rid in list(self.reqs):
            self.reqs[rid] += 1
            out.append(_Out(rid, self.reqs[rid], self.reqs[rid] >= 4))
            if self.reqs[rid] >= 4:
                del self.reqs[rid]
        return out


def _session():
    ses = types.SimpleNamespace(engine=_Engine(), rec=types.SimpleNamespace(sched=None, take=lambda: None), nstep=0,
                                points=0, spec={"k": 0}, params=lambda n: None, log=types.SimpleNamespace(lines=[]))
    ses.step = lambda: vs.Session.step(ses)
    return ses


def _drain(it, clock, pause_s):
    while True:
        clock.resume()
        try:
            next(it)
        except StopIteration as stop:
            clock.pause()
            return stop.value
        clock.pause()
        time.sleep(pause_s)  # another engine's step


def test_the_busy_clock_leaves_out_the_other_engines_time():
    pt = {"point": "c2", "concurrency": 2, "requests": 3, "output_len": 4}
    clock = vsv.BusyClock()
    d = _drain(vs.iter_point(_session(), ["a", "b"], pt, 0, clock), clock, 0.02)
    assert d["output_lens"] == [4, 4, 4] and d["duration"] < 0.02  # 8 steps of ~0.02 s waited, none counted


def test_an_idle_engine_jumps_to_the_next_arrival():
    pt = {"point": "r", "rate": 2.0, "requests": 3, "output_len": 4}
    clock = vsv.BusyClock()
    d = _drain(vs.iter_point(_session(), ["a"], pt, 0, clock), clock, 0.0)
    arr = d["start_times"]
    assert d["duration"] >= arr[-1] and d["duration"] < arr[-1] + 0.5  # jumped, not slept
    assert all(t >= 0 for t in d["ttfts"])


class _Fake:
    """An engine whose every step takes `step_s` of its own clock, done after `steps`."""

    def __init__(self, name, steps, step_s, log):
        self.name, self.left, self.step_s, self.t, self.log = name, steps, step_s, 0.0, log

    def ask(self, cmd):
        self.log.append((self.name, cmd["op"]))
        if cmd["op"] == "step":
            self.left -= 1
            self.t += self.step_s
            return {"done": True, "ok": self.name} if self.left == 0 else {"done": False, "t": self.t}
        return {"begun": True}


def test_lockstep_steps_the_run_whose_clock_is_behind():
    """Plain steps of 0.125 s against speculative steps of 0.375 s: three plain steps per speculative one, so both
    runs cover their own time together."""
    log: list = []
    ans = vb.lockstep([(_Fake("P", 6, 0.125, log), {}), (_Fake("S", 2, 0.375, log), {})])
    assert [a["ok"] for a in ans] == ["P", "S"]
    steps = "".join(n for n, op in log if op == "step")
    assert log[:2] == [("P", "begin"), ("S", "begin")] and steps == "PSPPPSPP"
