"""The SimPy engine of record: replicas serving requests with continuous batching, speculating or not.

One engine-loop process per replica, one SimPy timeout per iteration. An iteration at time `now`:
1. finished requests have left (at the previous iteration's end); clients/arrivals up to `now` join the shared
   FCFS queue; the replica admits from its head while the batch is under max_batch and the KV reservation fits
   (`steptime.Memory`: weights + KV of target and draft; no queue skipping, no preemption).
2. the newly admitted requests are prefilled together in one pass (both models when speculating); the prefill
   emits their output token 0 (TTFT) and stalls the running batch for its duration.
3. one decode step over the whole active batch (the new requests included):
   speculating — each request gets its γ from the policy; the iteration runs γ_max = max γ draft passes over the
   B sequences and one verification pass of B·(γ_max + 1) positions at the mean live context (see
   `specsim.cost.steptime`); each request accepts n of its own γ drafts (`specsim.engine.acceptance`) and emits n + 1 tokens,
   truncated to what it still owes; rejected drafts roll back (the KV holds emitted tokens only). With the draft
   catch-up priced (`StepCosts.catchup`), the requests whose previous step was a clean sweep make the first draft
   pass wider (see `specsim.cost.steptime`).
   baseline — one target pass of B·1 positions; every request emits one token.
4. requests that emitted their last token finish at the iteration's end.

Two step kernels give identical results (tests/test_engine.py checks it):
- "ahead": a request's accepted counts never depend on the rest of the batch, so with a fixed γ and a constant α
  (and for the baseline) its whole life is known before it is admitted: `acceptance.FixedRuns` draws and judges
  blocks of requests at once, vectorized over all their steps; admission adds the request's tokens per step to a
  context schedule, and the loop only reads that schedule and prices the passes — no per-iteration array work.
- "live": per-request state in numpy arrays compacted over the active batch (traces, adaptive policies, oracle).
"""

from __future__ import annotations

from collections import deque
from itertools import chain

import numpy as np
import simpy

from specsim.engine.acceptance import ORACLE_CAP, FixedRuns, UniformPool
from specsim.engine.metrics import Records

_AR = np.arange(ORACLE_CAP + 2, dtype=np.int64)
_I64 = np.int64


class _Shared:
    """The arrival side, shared by all replicas: issues requests into one FCFS queue."""

    def __init__(self, env, wl):
        self.env, self.wl = env, wl
        self.n = n = wl.n
        self.concurrency = wl.concurrency
        self.arrival = wl.arrival_s.astype(float).copy()
        self.admit, self.first, self.finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.queue: deque = deque()
        self.next = self.in_flight = self.done = 0
        self.force = -1  # open loop: requests up to this index count as arrived (timeouts may round early)
        self.finished_event = env.event()

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
        if self.finished_event.callbacks:  # an idle replica is waiting for a client to free up
            ev, self.finished_event = self.finished_event, self.env.event()
            ev.succeed()


class _Replica:
    def __init__(self, sim: _Sim):
        self.sim = sim
        wl, pol = sim.wl, sim.policy
        self.ctx_sum = self.cross_sum = 0
        self.kv_used = 0.0
        self.steps_global: list[int] = []  # global step-record index of each local iteration
        self.ahead = sim.ahead
        if self.ahead:
            self.B = 0
            self.j = 0
            self.delta = np.zeros(1024, _I64)  # context growth at each future local iteration
            self.finish_at: dict[int, list[int]] = {}
            self.rs_i: list[int] = []  # requests this replica admitted that take steps, with their first local step
            self.rs_j: list[int] = []
            self.G = 0 if pol is None else pol.gamma
            self.catch = np.zeros(1024, _I64) if sim.catchup else None  # catching-up requests per local iteration
            return
        S = wl.max_batch
        self.free_slots = list(range(S - 1, -1, -1))
        e = np.zeros(0, _I64)
        self.req, self.slot, self.ucur, self.bpos, self.rem, self.gam = e, e, e, e, e, e
        self.clean = np.zeros(0, bool)  # the request's previous step was a clean sweep (draft catch-up next)
        self.countdown = 0
        self.need = ORACLE_CAP + 1 if (pol.oracle or pol.adaptive) else pol.gamma + 1
        self.step_max = ORACLE_CAP + 1 if pol.oracle else pol.max_gamma
        self.pool = UniformPool(sim.acc, S, self.need, float(wl.output_len.mean()) * self.step_max / 2)

    # --- admission ------------------------------------------------------------------------------------
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

    def _join(self, new: list[int], now: float, t_first: float) -> tuple[int, float]:
        """Admit `new` (prefilled by now + prefill); return (#finished at prefill, their KV bytes)."""
        if self.ahead:
            return self._join_ahead(new, now, t_first)
        sim, sh, wl = self.sim, self.sim.shared, self.sim.wl
        idx = np.array(new, dtype=_I64)
        sh.admit[idx] = now
        sh.first[idx] = t_first
        one = wl.output_len[idx] <= 1
        sh.finish[idx[one]] = t_first
        early = (int(one.sum()), float(sim.req_bytes[idx[one]].sum()))
        idx = idx[~one]
        if idx.size == 0:
            return early
        prompt = wl.prompt_len[idx]
        self.ctx_sum += int(sim.costs.context(prompt, 1).sum())
        if sim.costs.enc_dec:
            self.cross_sum += int(sim.costs.cross(prompt).sum())
        cat = np.concatenate
        slots = np.array([self.free_slots.pop() for _ in range(idx.size)], dtype=_I64)
        self.req, self.slot = cat((self.req, idx)), cat((self.slot, slots))
        self.rem = cat((self.rem, wl.output_len[idx] - 1))
        self.clean = cat((self.clean, np.zeros(idx.size, bool)))
        self.ucur = cat((self.ucur, [self.pool.assign(int(s), int(i)) for s, i in zip(slots, idx)]))
        if not sim.acc.constant:
            self.bpos = cat((self.bpos, sim.acc.walk_start(idx) + 1))
        if sim.policy.adaptive:
            self.gam = cat((self.gam, np.full(idx.size, sim.policy.initial_gamma(), _I64)))
        return early

    def _join_ahead(self, new: list[int], now: float, t_first: float) -> tuple[int, float]:
        """Add each new request's whole life to the context schedule (its acceptance is independent of the batch
        and was drawn ahead, block by block, by `FixedRuns`); plain Python."""
        sim, sh, j = self.sim, self.sim.shared, self.j
        runs, ctx0_l, cross_l, out_l, bytes_l = sim.runs, sim.ctx0_l, sim.cross_l, sim.out_l, sim.bytes_l
        early_n, early_b = 0, 0.0
        for i in new:
            sh.admit[i] = now
            sh.first[i] = t_first
            owed = out_l[i] - 1
            if owed <= 0:
                sh.finish[i] = t_first
                early_n += 1
                early_b += bytes_l[i]
                continue
            self.ctx_sum += ctx0_l[i]
            if cross_l is not None:
                self.cross_sum += cross_l[i]
            n_i, tok = (None, None) if runs is None else runs.get(i)  # tokens per step, the last one truncated
            s = owed if tok is None else tok.size
            if j + s > self.delta.size:
                grow = max(self.delta.size, j + s)
                self.delta = np.concatenate((self.delta, np.zeros(grow, _I64)))
                if self.catch is not None:
                    self.catch = np.concatenate((self.catch, np.zeros(grow, _I64)))
            if tok is None:
                self.delta[j:j + s] += 1
            else:
                self.delta[j:j + s] += tok
                if self.catch is not None and s > 1:
                    self.catch[j + 1:j + s] += n_i[:-1] == self.G
            fin = self.finish_at.get(j + s - 1)
            if fin is None:
                self.finish_at[j + s - 1] = [i]
            else:
                fin.append(i)
            self.rs_i.append(i)
            self.rs_j.append(j)
            self.B += 1
        return early_n, early_b

    def _leave_ahead(self, gone: list[int], t_end: float) -> int:
        """`_leave` for a list of requests in plain Python, with the same sums (integers, and KV bytes summed in
        any order only when every order gives the same float)."""
        sim = self.sim
        if len(gone) > 1 and not sim.bytes_exact:
            return self._leave(np.array(gone, dtype=_I64), t_end)
        finish, ctx_end_l, cross_l, bytes_l = sim.shared.finish, sim.ctx_end_l, sim.cross_l, sim.bytes_l
        freed = 0.0
        for i in gone:
            finish[i] = t_end
            self.ctx_sum -= ctx_end_l[i]
            if cross_l is not None:
                self.cross_sum -= cross_l[i]
            freed += bytes_l[i]
        self.kv_used -= freed
        return len(gone)

    def _leave(self, gone: np.ndarray, t_end: float) -> int:
        sim = self.sim
        sim.shared.finish[gone] = t_end
        prompt = sim.wl.prompt_len[gone]
        self.ctx_sum -= int(sim.costs.context(prompt, sim.wl.output_len[gone]).sum())
        if sim.costs.enc_dec:
            self.cross_sum -= int(sim.costs.cross(prompt).sum())
        self.kv_used -= float(sim.req_bytes[gone].sum())
        return int(gone.size)

    def _compact(self, done: np.ndarray) -> np.ndarray:
        gone, keep = self.req[done], ~done
        self.free_slots.extend(self.slot[done].tolist())
        self.req, self.slot, self.rem, self.ucur = self.req[keep], self.slot[keep], self.rem[keep], self.ucur[keep]
        self.clean = self.clean[keep]
        if self.bpos.size:
            self.bpos = self.bpos[keep]
        if self.gam.size:
            self.gam = self.gam[keep]
        return gone

    # --- one live speculative step -----------------------------------------------------------------------
    def _live_step(self):
        pol, acc, pool = self.sim.policy, self.sim.acc, self.pool
        if self.countdown <= 0:
            self.ucur = pool.refill(self.ucur, self.slot, self.step_max)
            self.countdown = int(pool.headroom(self.ucur, self.slot).min()) // self.step_max + 1
        self.countdown -= 1
        bpos = None if acc.constant else self.bpos
        if pol.oracle:
            U = pool.buf.take(self.ucur[:, None] + _AR[:ORACLE_CAP + 1])
            n = (U < acc.thresholds(ORACLE_CAP, bpos)).argmin(1)
            self.ucur += np.minimum(n + 1, ORACLE_CAP)
            gam, G = n, int(n.max())
        elif pol.adaptive:
            gam = self.gam
            G = int(gam.max())
            U = pool.buf.take(self.ucur[:, None] + _AR[:G + 1])
            n = (U < np.where(_AR[:G + 1] >= gam[:, None], -1.0, acc.thresholds(G, bpos))).argmin(1)
            self.ucur += gam
            self.gam = pol.update(gam, n)
        else:
            G = gam = pol.gamma
            U = pool.buf.take(self.ucur[:, None] + _AR[:G + 1])
            n = (U < acc.thresholds(G, bpos)).argmin(1)
            self.ucur += G
        tok = np.minimum(n + 1, self.rem)
        if self.sim.catchup:
            self.clean = (n == gam) & (gam > 0)
        if bpos is not None:
            self.bpos += tok
        self.rem -= tok
        self.ctx_sum += int(tok.sum())
        return G, gam, n

    def loop(self):
        sim, sh, env = self.sim, self.sim.shared, self.sim.env
        costs, spec, wl, ahead = sim.costs, sim.policy is not None, sim.wl, self.ahead
        steps, glob = sim.steps, self.steps_global
        spec_step, plain_step, timeout = costs.spec_step, costs.plain_step, env.timeout
        conc, prompt_l = sh.concurrency, sim.prompt_l
        while True:
            now = env.now
            if sh.next < sh.n and (conc is None or sh.in_flight < conc):  # else pump() would do nothing
                sh.pump(now)
            B = self.B if ahead else len(self.req)
            new = self._admit(B) if sh.queue else []
            if not new and not B:
                if sh.done == wl.n:
                    return
                nxt = sh.next_arrival()
                if nxt is not None:
                    sh.force = max(sh.force, sh.next)
                    yield env.timeout(max(0.0, nxt - now))
                elif sh.in_flight > 0 or sh.queue:
                    yield sh.finished_event
                else:
                    return
                continue
            pre_t, early = 0.0, None
            if new:
                pmean = sum(prompt_l[i] for i in new) / len(new)  # = prompt_len[new].mean() (exact integers)
                pre_t, pre_b, pre_f = costs.prefill(len(new), pmean, spec)
                early = self._join(new, now, now + pre_t)
            B = self.B if ahead else len(self.req)
            gone = None
            if B:
                L, X = self.ctx_sum / B, self.cross_sum / B
                K = 0
                if ahead:
                    G, j = self.G, self.j
                    if self.catch is not None:
                        K = int(self.catch[j])
                    self.ctx_sum += int(self.delta[j])
                    gone = self.finish_at.pop(j, None)
                    self.j = j + 1
                elif spec:
                    if sim.catchup:
                        K = int(self.clean.sum())
                    G, gam, n = self._live_step()
                    sim.rs_req.append(self.req)
                    sim.rs_n.append(n)
                    sim.rs_g.append(gam)
                    done = self.rem == 0
                    if done.any():
                        gone = self._compact(done)
                t, b, f = spec_step(B, G, L, X, K) if spec else plain_step(B, L, X)
                if new:
                    t, b, f = t + pre_t, b + pre_b, f + pre_f
                glob.append(len(steps))
                steps.append((now + t, t, B, G, b, f))
                t_end = now + t
            else:
                t_end = now + pre_t
            yield timeout(t_end - now)
            k = 0
            if early is not None:
                k = early[0]
                self.kv_used -= early[1]
            if gone is not None:
                if ahead:
                    k += self._leave_ahead(gone, t_end)
                    self.B -= len(gone)
                else:
                    k += self._leave(gone, t_end)
            if k:
                sh.finished(k)


class _Sim:
    def __init__(self, wl, costs, acc, policy, memory, replicas, kernel):
        self.env = simpy.Environment()
        self.wl, self.costs, self.acc, self.policy = wl, costs, acc, policy
        self.catchup = policy is not None and costs.catchup
        can_ahead = policy is None or (not policy.adaptive and not policy.oracle and acc.constant)
        if kernel == "ahead" and not can_ahead:
            raise ValueError("the 'ahead' kernel needs a fixed γ and a constant α")
        self.ahead = can_ahead if kernel == "auto" else kernel == "ahead"
        if self.ahead is False and policy is None:
            self.ahead = True  # the baseline has nothing to draw
        self.req_bytes = memory.request_bytes(wl.prompt_len, wl.output_len) if memory is not None \
            else np.zeros(wl.n)
        self.kv_budget = memory.kv_budget if memory is not None else None
        self.prompt_l, self.out_l = wl.prompt_len.tolist(), wl.output_len.tolist()
        self.bytes_l = self.req_bytes.tolist()
        # whole numbers with a total below 2**53 add up exactly in any order (so Python may sum them)
        self.bytes_exact = bool(np.all(self.req_bytes == np.floor(self.req_bytes))) and \
            float(self.req_bytes.sum()) < 2.0 ** 53
        if self.ahead:  # per-request constants as Python scalars for the plain-Python admission
            self.ctx0_l = costs.context(wl.prompt_len, 1).astype(_I64).tolist()
            self.ctx_end_l = costs.context(wl.prompt_len, wl.output_len).astype(_I64).tolist()
            self.cross_l = np.asarray(costs.cross(wl.prompt_len)).astype(_I64).tolist() if costs.enc_dec else None
            self.runs = None if policy is None else FixedRuns(acc, policy.gamma, wl.output_len - 1)
        elif acc is not None:
            acc.streams.expect(wl.n)
        self.shared = _Shared(self.env, wl)
        self.steps: list = []
        self.rs_req, self.rs_n, self.rs_g = [], [], []
        self.replicas = [_Replica(self) for _ in range(replicas)]
        for r in self.replicas:
            self.env.process(r.loop())

    def request_steps(self, batch: np.ndarray):
        """(step index, request, accepted, γ) per request-step, sorted by request, then step."""
        if not self.ahead:
            req = np.concatenate(self.rs_req) if self.rs_req else np.zeros(0, _I64)
            n = np.concatenate(self.rs_n).astype(_I64) if self.rs_n else np.zeros(0, _I64)
            if self.policy.adaptive or self.policy.oracle:
                g = np.concatenate(self.rs_g).astype(_I64) if self.rs_g else np.zeros(0, _I64)
            else:
                g = np.full(req.size, self.policy.gamma, _I64)
            step = np.repeat(np.arange(len(batch), dtype=_I64), batch)
            order = np.argsort(req, kind="stable")
            return step[order], req[order], n[order], g[order]
        # ahead, in request order: request i's steps are consecutive local iterations of its replica from rs_j; map
        # them through the replicas' steps_global (concatenated; abs0 = where its first step lies in that)
        nreq = self.wl.n
        n, _, count = self.runs.all() if self.runs else (None, None, np.maximum(self.wl.output_len - 1, 0))
        abs0, off, globs = np.zeros(nreq, _I64), 0, []
        for r in self.replicas:
            if r.rs_i:
                abs0[r.rs_i] = np.asarray(r.rs_j, dtype=_I64) + off
            globs.append(np.asarray(r.steps_global, dtype=_I64))
            off += len(r.steps_global)
        total = int(count.sum())
        req = np.repeat(np.arange(nreq, dtype=_I64), count)
        local = np.arange(total, dtype=_I64) - np.repeat(np.cumsum(count) - count, count)
        step = np.concatenate(globs)[abs0[req] + local] if total else np.zeros(0, _I64)
        g = np.full(total, 0 if self.policy is None else self.policy.gamma, _I64)
        return step, req, np.zeros(total, _I64) if n is None else n, g


def run_engine(wl, costs, acc=None, policy=None, memory=None, replicas: int = 1, kernel: str = "auto") -> Records:
    """Simulate the workload; speculative when `policy` is given, else the plain-decoding baseline.

    kernel: 'auto' (ahead where possible), 'live' or 'ahead' — results are identical; tests compare them."""
    sim = _Sim(wl, costs, acc, policy, memory, replicas, kernel)
    sim.env.run()
    sh = sim.shared
    if sh.done != wl.n:  # pragma: no cover - an engine bug, not a user error
        raise RuntimeError(f"engine stopped with {wl.n - sh.done} requests unfinished")
    st = np.fromiter(chain.from_iterable(sim.steps), float, count=6 * len(sim.steps)).reshape(-1, 6)
    batch, gamma = st[:, 2].astype(_I64), st[:, 3].astype(_I64)
    step, req, n, g = sim.request_steps(batch)
    return Records(arrival_s=sh.arrival, admit_s=sh.admit, first_token_s=sh.first, finish_s=sh.finish,
                   output_len=wl.output_len, step_end_s=st[:, 0], step_dur_s=st[:, 1], step_batch=batch,
                   step_gamma=gamma, step_bytes=st[:, 4], step_flops=st[:, 5], rs_step=step, rs_request=req,
                   rs_accepted=n, rs_gamma=g)
