"""The step-by-step engine of record: replicas serving requests with continuous batching, speculating or not.

It runs on SimPy (one `simpy.Environment`): the arrival process, the router it calls and one engine loop per
replica are SimPy processes, and a replica carries one event per iteration (its step's timeout) — the per-step
work stays vectorized in the kernels. An iteration of a replica at time `now`:
1. finished requests have left (at the previous iteration's end); the replica admits from the head of its queue
   while its batch is under max_batch and its KV reservation fits (`steptime.Memory`: weights + KV of target and
   draft; no queue skipping, no preemption). Requests reach the queues through the router
   (`specsim.engine.routers`) at their arrival: open loop, the arrival process at each arrival time; closed loop,
   a client issues its next request when its previous one finishes. Router `shared-queue` is one queue for all
   replicas (the ideal bound); the others give each replica its own queue.
2. the newly admitted requests are prefilled together in one pass (both models when speculating); the prefill
   emits their output token 0 (TTFT) and stalls the running batch for its duration.
3. one decode step over the whole active batch (the new requests included):
   speculating — each request gets its γ from the policy (`specsim.engine.policies`: from its last outcome, or
   the live batch size); the iteration runs γ_max = max γ draft passes over the B sequences and one verification
   pass of B·(γ_max + 1) positions at the mean live context (see `specsim.cost.steptime`); each request accepts n
   of its own γ drafts (`specsim.engine.acceptance`) and emits n + 1 tokens, truncated to what it still owes;
   rejected drafts roll back (the KV holds emitted tokens only). With the draft catch-up priced
   (`StepCosts.catchup`), the requests whose previous step was a clean sweep make the first draft pass wider (see
   `specsim.cost.steptime`).
   baseline — one target pass of B·1 positions; every request emits one token.
4. requests that emitted their last token finish at the iteration's end.
An idle replica waits on its own wake-up event, which the router fires when it hands the replica a request (for the
shared queue: every idle replica, in the order they went idle).

Your own processes: `run_engine(..., processes=[f])` calls `f(env, sim)` for each f and runs the generator it
returns as a SimPy process beside the engine's — e.g. a replica that fails for 30 s at t = 60 s:

    def outage(env, sim):
        yield env.timeout(60.0)
        sim.replicas[0].hold(30.0)   # at its next iteration boundary it stops for 30 s, its batch stalled

and `run_engine(..., router=MyRouter(n))` takes a `routers.Router` of your own (tests/test_routers.py has both).

Two step kernels (`specsim.engine.kernels`, one protocol: admit, step, leave) give identical results
(tests/test_engine.py checks it): "ahead" when a request's life cannot depend on the batch (the policy's
`fixed_gamma` with a constant α, and the baseline) — drawn whole before admission; "live" otherwise (traces,
policies whose γ changes) — per-request state in numpy arrays. A closed loop of one replica whose KV reservation
never binds, under a batch-free policy, needs no stepping at all: `specsim.engine.closed` computes the same
Records in iteration space (kernel 'closed', what 'auto' picks there; an exact shortcut, tested equal).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict, deque
from contextlib import contextmanager

import numpy as np
import simpy

from specsim.engine import closed
from specsim.engine.kernels import AheadKernel, LiveKernel
from specsim.engine.metrics import Records, step_columns
from specsim.engine.routers import Router, make_router

_I64 = np.int64


def _delay_to(now: float, t: float) -> float:
    """The smallest delay d with now + d >= t in floating point (a - now alone can land one ulp short of a, and a
    request would then be admitted before it arrived)."""
    d = t - now
    while now + d < t:
        d = float(np.nextafter(d, np.inf))
    return d


class _Shared:
    """The arrival side: issues requests and routes each into a replica's queue (or the one shared queue)."""

    def __init__(self, env: simpy.Environment, wl, n_replicas: int, router: Router):
        self.env, self.wl, self.router = env, wl, router
        self.n = n = wl.n
        self.concurrency = wl.concurrency
        self.arrival = wl.arrival_s.astype(float).copy()
        self.admit, self.first, self.finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        one = deque()
        self.queues = [one] * n_replicas if router.shared else [deque() for _ in range(n_replicas)]
        self.outstanding = [0] * n_replicas
        self.idle: dict[int, simpy.Event] = {}  # replica -> its wake-up event, in the order they went idle
        self.next = self.in_flight = self.done = 0

    def route(self, i: int) -> None:
        """Request i joins a queue now; the replica(s) that could take it wake up."""
        if self.router.shared:
            self.queues[0].append(i)
            if self.idle:
                waiting, self.idle = self.idle, {}
                for ev in waiting.values():
                    ev.succeed()
            return
        r = self.router.pick(i, self.wl, self.outstanding)
        self.queues[r].append(i)
        self.outstanding[r] += 1
        ev = self.idle.pop(r, None)
        if ev is not None:
            ev.succeed()

    def issue(self, now: float) -> None:
        """Closed loop: every client with no request in flight issues its next one now."""
        while self.in_flight < self.concurrency and self.next < self.n:
            self.arrival[self.next] = now
            self.next += 1
            self.in_flight += 1
            self.route(self.next - 1)

    def arrivals(self):
        """Open loop: the arrival process — each request is routed at its arrival time."""
        env, arr, n, route, timeout = self.env, self.arrival.tolist(), self.n, self.route, self.env.timeout
        while self.next < n:
            a = arr[self.next]
            now = env.now
            if a > now:
                d = a - now
                yield timeout(d if now + d >= a else _delay_to(now, a))
            self.next += 1
            route(self.next - 1)

    def wait(self, r: int) -> simpy.Event:
        ev = self.idle[r] = self.env.event()
        return ev

    def finished(self, r: int, k: int) -> None:
        self.done += k
        self.outstanding[r] -= k
        if self.concurrency is not None:
            self.in_flight -= k
            self.issue(self.env.now)


class _Replica:
    """One replica's engine loop: admission under the KV budget, prefill, the kernel's decode step, departures."""

    def __init__(self, sim: _Sim, index: int, kernel):
        self.sim, self.index, self.kernel = sim, index, kernel
        self.queue = sim.shared.queues[index]
        self.kv_used = 0.0
        self.hold_s = 0.0  # a user process's outage: served at the next iteration boundary (see `hold`)
        # global step-row index of each local decode step (one replica: they are the same)
        self.steps_global: list[int] | None = [] if sim.n_replicas > 1 else None

    def hold(self, duration_s: float) -> None:
        """Stop this replica for `duration_s` at its next iteration boundary (its running batch stalls, its queue
        keeps filling): the hook for a user's failure or maintenance process."""
        if not duration_s >= 0.0:
            raise ValueError(f"hold needs a duration >= 0 s, got {duration_s!r}")
        self.hold_s += float(duration_s)
        ev = self.sim.shared.idle.pop(self.index, None)
        if ev is not None:  # an idle replica holds from now
            ev.succeed()

    def global_steps(self) -> np.ndarray:
        """The global step-row index of each of this replica's decode steps (its own order)."""
        if self.steps_global is None:
            return np.arange(len(self.sim.steps), dtype=_I64)
        return np.asarray(self.steps_global, dtype=_I64)

    def _admit(self, active: int) -> list[int]:
        sim, q = self.sim, self.queue
        cap = sim.wl.max_batch - active
        budget, bytes_l = sim.kv_budget, sim.bytes_l
        new = []
        while q and len(new) < cap:
            need = bytes_l[q[0]]
            if budget is not None and self.kv_used + need > budget:
                break
            self.kv_used += need
            new.append(q.popleft())
        return new

    def loop(self):
        """The module docstring's four steps, once per iteration. (Hot path: names bound once; the clock after a
        step's timeout is SimPy's own `now + (t_end − now)`, computed alike here instead of read back.)"""
        sim, sh, env, k, q, r = self.sim, self.sim.shared, self.sim.env, self.kernel, self.queue, self.index
        costs, spec, steps, glob = sim.costs, sim.policy is not None, sim.steps, self.steps_global
        spec_step, plain_step, timeout = costs.spec_step, costs.plain_step, env.timeout
        prefill, admit, kstep, add_row = costs.prefill, self._admit, k.step, steps.append
        prompt_l = sim.prompt_l
        now = env.now
        while True:
            if self.hold_s:
                d, self.hold_s = self.hold_s, 0.0
                yield timeout(d)
                now = env.now
            # 1. admit from the head of this replica's queue (the router filled it)
            new = admit(k.size) if q else None
            if not new and not k.size:
                if sh.done == sh.n:
                    return
                yield sh.wait(r)  # the router wakes this replica when a request reaches its queue
                now = env.now
                continue
            # 2. prefill the admitted requests together (output token 0)
            early = None
            if new:
                pmean = sum(prompt_l[i] for i in new) / len(new)  # = prompt_len[new].mean() (exact integers)
                pre_t, pre_b, pre_f = prefill(len(new), pmean, spec)
                early = k.admit(new, now, now + pre_t)
            # 3. one decode step over the active batch, priced at its mean live context
            B = k.size
            if B:
                L, X = k.ctx_sum / B, k.cross_sum / B
                G, K, gone = kstep()
                t, b, f = spec_step(B, G, L, X, K) if spec else plain_step(B, L, X)
                if new:
                    t, b, f = t + pre_t, b + pre_b, f + pre_f
                if glob is not None:
                    glob.append(len(steps))
                t_end = now + t
                add_row((t_end, t, B, G, b, f))  # a StepRow's fields in order (see _Sim.steps)
            else:
                t_end, gone = now + pre_t, None
            d = t_end - now
            yield timeout(d)
            now = now + d  # = env.now: SimPy's clock became now + (t_end − now)
            # 4. the requests done at the prefill or in this step leave
            if gone is not None and early is None:
                left, freed = k.leave(gone, t_end)
                self.kv_used -= freed
                if left:
                    sh.finished(r, left)
            elif early is not None or gone is not None:
                self._leave(early, gone, t_end)

    def _leave(self, early, gone, t_end: float) -> None:
        """early = (how many finished at the prefill, their KV bytes); gone = the kernel's requests done now."""
        n = 0
        if early is not None:
            n, freed = early
            self.kv_used -= freed
        if gone is not None:
            left, freed = self.kernel.leave(gone, t_end)
            n += left
            self.kv_used -= freed
        if n:
            self.sim.shared.finished(self.index, n)


class _Sim:
    def __init__(self, wl, costs, acc, policy, memory, replicas, kernel, router: Router):
        self.env = simpy.Environment()
        self.wl, self.costs, self.acc, self.policy, self.n_replicas = wl, costs, acc, policy, replicas
        self.catchup = policy is not None and costs.catchup
        can_ahead = policy is None or (policy.fixed_gamma is not None and acc.constant)
        if kernel == "ahead" and not can_ahead:
            raise ValueError("the 'ahead' kernel needs a fixed γ and a constant α")
        ahead = can_ahead if kernel == "auto" else kernel == "ahead"
        self.kernel_cls = AheadKernel if ahead or policy is None else LiveKernel  # the baseline draws nothing
        self.req_bytes = memory.request_bytes(wl.prompt_len, wl.output_len) if memory is not None \
            else np.zeros(wl.n)
        self.kv_budget = memory.kv_budget if memory is not None else None
        self.prompt_l, self.out_l = wl.prompt_len.tolist(), wl.output_len.tolist()
        self.bytes_l = self.req_bytes.tolist()
        # whole numbers with a total below 2**53 add up exactly in any order (so Python may sum them)
        self.bytes_exact = bool(np.all(self.req_bytes == np.floor(self.req_bytes))) and \
            float(self.req_bytes.sum()) < 2.0 ** 53
        self.plan = self.kernel_cls.plan(self)
        self.shared = _Shared(self.env, wl, replicas, router)
        # one row per decode step: StepRow's fields as a plain tuple (read by name in `metrics.step_columns`); a
        # NamedTuple built per iteration costs ~8% of a plain-decoding step (callgrind, batch 64)
        self.steps: list[tuple] = []
        self.replicas = [_Replica(self, r, self.kernel_cls(self, self.plan)) for r in range(replicas)]

    def run(self, processes=()) -> None:
        """The arrival process (open loop) or the clients' first requests (closed loop), every replica's loop and
        the user's processes, on one SimPy environment until no event is pending."""
        env, sh = self.env, self.shared
        if sh.concurrency is None:
            env.process(sh.arrivals())
        else:
            sh.issue(0.0)
        for rep in self.replicas:
            env.process(rep.loop())
        for make in processes:
            env.process(make(env, self))
        env.run()


# --- the planner's opt-in reuse of plain-decoding runs --------------------------------------------------------------
_REUSE = {"on": 0, "runs": OrderedDict(), "size": 2, "hits": 0}


@contextmanager
def reuse_baselines(size: int = 2):
    """Within the block, a plain-decoding run identical to one of the last `size` ones is not simulated again.

    A plan (`specsim.studies.plan_keepup.run_point`) simulates each candidate at the same (option, rate, replicas)
    with its paired baseline, and plain decoding does not depend on γ, the policy or the draft: the same workload,
    target pass prices, KV admission (`memory`), replicas, router and seed give the same Records. The key holds
    exactly those inputs (the workload's and each request's KV bytes by content; the target's prices by its shared
    segment cache, which a roofline cost model of the same profiles, TP and context reuses — any other cost model
    has its own and is never matched). A hit returns a copy. Off outside the block: a benchmark or a sweep point
    simulates every run it reports."""
    _REUSE["on"] += 1
    _REUSE["size"] = size
    try:
        yield
    finally:
        _REUSE["on"] -= 1


def _digest(*arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _baseline_key(wl, costs, memory, replicas, kernel, router, seed):
    """What a plain-decoding run depends on (see `reuse_baselines`); None where it cannot be stated safely."""
    if not isinstance(router, str):
        return None
    if costs.fixed_c is not None:
        prices = ("fixed_c", costs.fixed_c)
    else:
        prices = ("segments", costs.t._seg, costs.enc_dec)  # the object itself: its id can never be reused
    mem = None if memory is None else (memory.kv_budget, _digest(memory.request_bytes(wl.prompt_len,
                                                                                       wl.output_len)))
    return (prices, wl.mode, wl.max_batch, wl.concurrency, _digest(wl.arrival_s, wl.prompt_len, wl.output_len),
            mem, replicas, kernel, router, seed)


def _copy(rec: Records) -> Records:
    return dataclasses.replace(rec, **{f.name: np.array(getattr(rec, f.name), copy=True)
                                       for f in dataclasses.fields(rec)})


def run_engine(wl, costs, acc=None, policy=None, memory=None, replicas: int = 1, kernel: str = "auto",
               router: str | Router = "round-robin", seed: int = 0, processes=()) -> Records:
    """`_run_engine`, a plain-decoding run served from the last ones inside `reuse_baselines` (see there)."""
    key = None
    if _REUSE["on"] and policy is None and acc is None and not processes:
        key = _baseline_key(wl, costs, memory, replicas, kernel, router, seed)
        runs = _REUSE["runs"]
        rec = runs.get(key)
        if rec is not None:
            _REUSE["hits"] += 1
            runs.move_to_end(key)
            return _copy(rec)
    rec = _run_engine(wl, costs, acc, policy, memory, replicas, kernel, router, seed, processes)
    if key is not None:
        runs = _REUSE["runs"]
        runs[key] = _copy(rec)
        while len(runs) > _REUSE["size"]:
            runs.popitem(last=False)
    return rec


def _run_engine(wl, costs, acc=None, policy=None, memory=None, replicas: int = 1, kernel: str = "auto",
                router: str | Router = "round-robin", seed: int = 0, processes=()) -> Records:
    """Simulate the workload; speculative when `policy` is given, else the plain-decoding baseline.

    kernel: 'auto' (the closed loop in iteration space where `closed.eligible`, else the event loop with the ahead
    kernel where possible), 'closed', or the event loop with 'live' or 'ahead' — results are identical; tests
    compare them. router: a name in `routers.ROUTERS` or a `Router` (its seed: `seed`). processes: callables
    f(env, sim) whose generators run as SimPy processes beside the engine's (the module docstring's example)."""
    if not isinstance(router, Router):
        router = make_router(router, replicas, seed)
    if kernel in ("auto", "closed") and not processes:
        need = memory.request_bytes(wl.prompt_len, wl.output_len) if memory is not None else np.zeros(wl.n)
        if closed.eligible(wl, acc, policy, need, None if memory is None else memory.kv_budget, replicas):
            return closed.run_closed(wl, costs, acc, policy)
        if kernel == "closed":
            raise ValueError("the 'closed' kernel needs a closed loop of one replica, a batch-free policy and a KV "
                             "reservation that never binds")
    sim = _Sim(wl, costs, acc, policy, memory, replicas, kernel if kernel != "closed" else "auto", router)
    sim.run(processes)
    sh = sim.shared
    if sh.done != wl.n:  # pragma: no cover - an engine bug, not a user error
        raise RuntimeError(f"engine stopped with {wl.n - sh.done} requests unfinished")
    cols = step_columns(sim.steps)
    rs = sim.kernel_cls.request_steps(sim, sim.plan, [r.kernel for r in sim.replicas], cols["step_batch"])
    return Records(arrival_s=sh.arrival, admit_s=sh.admit, first_token_s=sh.first, finish_s=sh.finish,
                   output_len=wl.output_len, **cols, rs_step=rs.step, rs_request=rs.request, rs_accepted=rs.accepted,
                   rs_gamma=rs.gamma)
