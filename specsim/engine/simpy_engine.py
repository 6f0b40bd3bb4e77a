"""The step-by-step engine of record: replicas serving requests with continuous batching, speculating or not.

(`engine="simpy"` keeps its name from when this ran on SimPy; it now runs on `specsim.engine.events`, which keeps
SimPy's event order and clock arithmetic, so every result is the same bit for bit.) One engine-loop generator per
replica, one event per iteration. An iteration at time `now`:
1. finished requests have left (at the previous iteration's end); clients/arrivals up to `now` join the shared
   FCFS queue; the replica admits from its head while the batch is under max_batch and the KV reservation fits
   (`steptime.Memory`: weights + KV of target and draft; no queue skipping, no preemption).
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

Two step kernels (`specsim.engine.kernels`, one protocol: admit, step, leave) give identical results
(tests/test_engine.py checks it): "ahead" when a request's life cannot depend on the batch (the policy's
`fixed_gamma` with a constant α, and the baseline) — drawn whole before admission; "live" otherwise (traces,
policies whose γ changes) — per-request state in numpy arrays. A closed loop of one replica whose KV reservation
never binds, under a batch-free policy, needs no stepping at all: `specsim.engine.closed` computes the same
Records in iteration space (kernel 'closed', what 'auto' picks there; the loop was ~2 µs per iteration of Python).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from specsim.engine import closed
from specsim.engine.events import WAIT, Clock
from specsim.engine.kernels import AheadKernel, LiveKernel
from specsim.engine.metrics import Records, step_columns

_I64 = np.int64


class _Shared:
    """The arrival side, shared by all replicas: issues requests into one FCFS queue."""

    def __init__(self, clock: Clock, wl):
        self.clock, self.wl = clock, wl
        self.n = n = wl.n
        self.concurrency = wl.concurrency
        self.arrival = wl.arrival_s.astype(float).copy()
        self.admit, self.first, self.finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.queue: deque = deque()
        self.next = self.in_flight = self.done = 0
        self.force = -1  # open loop: requests up to this index count as arrived (timeouts may round early)

    def pump(self, now: float) -> None:
        q, n, conc = self.queue, self.n, self.concurrency
        if conc is not None:
            while self.in_flight < conc and self.next < n:
                self.arrival[self.next] = now
                q.append(self.next)
                self.next += 1
                self.in_flight += 1
        else:
            while self.next < n and (self.arrival[self.next] <= now or self.next <= self.force):
                q.append(self.next)
                self.next += 1

    def next_arrival(self):
        if self.wl.concurrency is None and self.next < self.wl.n:
            return float(self.arrival[self.next])
        return None

    def finished(self, k: int) -> None:
        self.done += k
        self.in_flight -= k
        self.clock.signal()  # wakes the idle replicas waiting for a client to free up, if any


class _Replica:
    """One replica's engine loop: admission under the KV budget, prefill, the kernel's decode step, departures."""

    def __init__(self, sim: _Sim, kernel):
        self.sim, self.kernel = sim, kernel
        self.kv_used = 0.0
        # global step-row index of each local decode step (one replica: they are the same)
        self.steps_global: list[int] | None = [] if sim.n_replicas > 1 else None

    def global_steps(self) -> np.ndarray:
        """The global step-row index of each of this replica's decode steps (its own order)."""
        if self.steps_global is None:
            return np.arange(len(self.sim.steps), dtype=_I64)
        return np.asarray(self.steps_global, dtype=_I64)

    def _admit(self, active: int) -> list[int]:
        sim, q = self.sim, self.sim.shared.queue
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

    def _idle(self, now: float):
        """Nothing to run: what to wait for — the delay to the next arrival, or WAIT for a client to free up —
        or None when done."""
        sh = self.sim.shared
        if sh.done == sh.n:
            return None
        nxt = sh.next_arrival()
        if nxt is not None:
            sh.force = max(sh.force, sh.next)
            return max(0.0, nxt - now)
        if sh.in_flight > 0 or sh.queue:
            return WAIT
        return None

    def loop(self):
        """The module docstring's four steps, once per iteration."""
        sim, sh, clock, k = self.sim, self.sim.shared, self.sim.clock, self.kernel
        costs, spec, steps, glob = sim.costs, sim.policy is not None, sim.steps, self.steps_global
        spec_step, plain_step = costs.spec_step, costs.plain_step
        conc, prompt_l = sh.concurrency, sim.prompt_l
        arr = sh.arrival.tolist() + [float("inf")] if conc is None else None  # open loop: fixed arrival times
        while True:
            now = clock.now
            # 1. arrivals join the queue (pump() only where its first test passes); admit from its head
            if (sh.next <= sh.force or arr[sh.next] <= now) if conc is None else (sh.in_flight < conc and
                                                                                    sh.next < sh.n):
                sh.pump(now)
            new = self._admit(k.size) if sh.queue else []
            if not new and not k.size:
                ev = self._idle(now)
                if ev is None:
                    return
                yield ev
                continue
            # 2. prefill the admitted requests together (output token 0)
            pre_t, early = 0.0, None
            if new:
                pmean = sum(prompt_l[i] for i in new) / len(new)  # = prompt_len[new].mean() (exact integers)
                pre_t, pre_b, pre_f = costs.prefill(len(new), pmean, spec)
                early = k.admit(new, now, now + pre_t)
            # 3. one decode step over the active batch, priced at its mean live context
            B, gone = k.size, None
            if B:
                L, X = k.ctx_sum / B, k.cross_sum / B
                G, K, gone = k.step()
                t, b, f = spec_step(B, G, L, X, K) if spec else plain_step(B, L, X)
                if new:
                    t, b, f = t + pre_t, b + pre_b, f + pre_f
                if glob is not None:
                    glob.append(len(steps))
                steps.append((now + t, t, B, G, b, f))  # a StepRow's fields in order (see _Sim.steps)
                t_end = now + t
            else:
                t_end = now + pre_t
            yield t_end - now  # the clock becomes now + (t_end - now), as SimPy's was
            # 4. the requests done at the prefill or in this step leave
            if early is not None or gone is not None:
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
            self.sim.shared.finished(n)


class _Sim:
    def __init__(self, wl, costs, acc, policy, memory, replicas, kernel):
        self.clock = Clock()
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
        self.shared = _Shared(self.clock, wl)
        # one row per decode step: StepRow's fields as a plain tuple (read by name in `metrics.step_columns`); a
        # NamedTuple built per iteration costs ~8% of a plain-decoding step (callgrind, batch 64)
        self.steps: list[tuple] = []
        self.replicas = [_Replica(self, self.kernel_cls(self, self.plan)) for _ in range(replicas)]


def run_engine(wl, costs, acc=None, policy=None, memory=None, replicas: int = 1, kernel: str = "auto") -> Records:
    """Simulate the workload; speculative when `policy` is given, else the plain-decoding baseline.

    kernel: 'auto' (the closed loop in iteration space where `closed.eligible`, else the event loop with the ahead
    kernel where possible), 'closed', or the event loop with 'live' or 'ahead' — results are identical; tests
    compare them."""
    if kernel in ("auto", "closed"):
        need = memory.request_bytes(wl.prompt_len, wl.output_len) if memory is not None else np.zeros(wl.n)
        if closed.eligible(wl, acc, policy, need, None if memory is None else memory.kv_budget, replicas):
            return closed.run_closed(wl, costs, acc, policy)
        if kernel == "closed":
            raise ValueError("the 'closed' kernel needs a closed loop of one replica, a batch-free policy and a KV "
                             "reservation that never binds")
    sim = _Sim(wl, costs, acc, policy, memory, replicas, kernel)
    sim.clock.run([r.loop() for r in sim.replicas])
    sh = sim.shared
    if sh.done != wl.n:  # pragma: no cover - an engine bug, not a user error
        raise RuntimeError(f"engine stopped with {wl.n - sh.done} requests unfinished")
    cols = step_columns(sim.steps)
    rs = sim.kernel_cls.request_steps(sim, sim.plan, [r.kernel for r in sim.replicas], cols["step_batch"])
    return Records(arrival_s=sh.arrival, admit_s=sh.admit, first_token_s=sh.first, finish_s=sh.finish,
                   output_len=wl.output_len, **cols, rs_step=rs.step, rs_request=rs.request, rs_accepted=rs.accepted,
                   rs_gamma=rs.gamma)
