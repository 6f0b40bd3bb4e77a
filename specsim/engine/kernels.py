"""The two step kernels of the event loop, behind one small protocol (see `specsim.engine.simpy_engine`).

A kernel holds one replica's running batch: `size` requests and their live context totals `ctx_sum` (KV entries)
and `cross_sum` (encoder outputs), and it answers three calls of the replica's loop —
- `admit(new, now, t_first)`: the requests just prefilled join; returns (how many finished at the prefill, their
  KV bytes) — one-token requests are done with output token 0;
- `step()`: the batch's decode step — its accepted counts and tokens, after the loop has read the batch's mean
  context; returns (draft passes G, requests catching up K, the requests leaving at its end or None);
- `leave(gone, t_end)`: the finished requests leave; returns (how many, their KV bytes) —
and, once the run is over, `request_steps(...)` lays out the per-request-step records of all its replicas.

- `AheadKernel`: a request's accepted counts never depend on the rest of the batch, so with a fixed γ and a
  constant α (and for the baseline) its whole life is known before it is admitted: `acceptance.FixedRuns` draws and
  judges blocks of requests at once, vectorized over all their steps; admission adds the request's tokens per
  step to a context schedule, and a step only reads that schedule — no per-iteration array work.
- `LiveKernel`: per-request state in numpy arrays compacted over the active batch (traces, policies whose γ changes
  with the outcome or the batch): each step asks the policy (`specsim.engine.policies`) for the γ and draws with
  the one acceptance step (`specsim.engine.draws.LiveDraws`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specsim.engine.acceptance import FixedRuns
from specsim.engine.draws import LiveDraws

_I64 = np.int64
_E = np.zeros(0, _I64)


class RequestSteps(NamedTuple):
    """One row per (iteration, active request), sorted by request, then step."""

    step: np.ndarray
    request: np.ndarray
    accepted: np.ndarray
    gamma: np.ndarray


def leave_arrays(sim, k, gone: np.ndarray, t_end: float) -> tuple[int, float]:
    """Requests `gone` leave kernel k at t_end (vectorized): their finish time, context and KV bytes."""
    sim.shared.finish[gone] = t_end
    prompt = sim.wl.prompt_len[gone]
    k.ctx_sum -= int(sim.costs.context(prompt, sim.wl.output_len[gone]).sum())
    if sim.costs.enc_dec:
        k.cross_sum -= int(sim.costs.cross(prompt).sum())
    return int(gone.size), float(sim.req_bytes[gone].sum())


class AheadPlan:
    """Per-run constants of the ahead kernel: each request's context at admission and at the end as Python ints
    (for the plain-Python admission), and its whole life of acceptance (`FixedRuns`; None for the baseline)."""

    def __init__(self, sim):
        wl, costs, pol = sim.wl, sim.costs, sim.policy
        self.ctx0_l = costs.context(wl.prompt_len, 1).astype(_I64).tolist()
        self.ctx_end_l = costs.context(wl.prompt_len, wl.output_len).astype(_I64).tolist()
        self.cross_l = np.asarray(costs.cross(wl.prompt_len)).astype(_I64).tolist() if costs.enc_dec else None
        self.G = 0 if pol is None else pol.fixed_gamma
        self.runs = None if pol is None else FixedRuns(sim.acc, self.G, wl.output_len - 1)


class AheadKernel:
    """Whole request lives drawn before admission; the loop reads a context schedule (see the module doc)."""

    plan = AheadPlan

    def __init__(self, sim, plan: AheadPlan):
        self.sim, self.plan, self.G = sim, plan, plan.G
        self.size = self.ctx_sum = self.cross_sum = 0
        self.j = 0  # local iteration index
        self.delta = np.zeros(1024, _I64)  # context growth at each future local iteration
        self.catch = np.zeros(1024, _I64) if sim.catchup else None  # catching-up requests per local iteration
        self.finish_at: dict[int, list[int]] = {}
        self.rs_i: list[int] = []  # requests this replica admitted that take steps, with their first local step
        self.rs_j: list[int] = []

    def admit(self, new: list[int], now: float, t_first: float) -> tuple[int, float]:
        """Add each new request's whole life to the context schedule; plain Python."""
        sim, sh, plan, j = self.sim, self.sim.shared, self.plan, self.j
        runs, ctx0_l, cross_l, out_l, bytes_l = plan.runs, plan.ctx0_l, plan.cross_l, sim.out_l, sim.bytes_l
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
            self._schedule(j, s, n_i, tok)
            fin = self.finish_at.get(j + s - 1)
            if fin is None:
                self.finish_at[j + s - 1] = [i]
            else:
                fin.append(i)
            self.rs_i.append(i)
            self.rs_j.append(j)
            self.size += 1
        return early_n, early_b

    def _schedule(self, j: int, s: int, n_i, tok) -> None:
        """Add a request's s steps from local iteration j to the context (and catch-up) schedule."""
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

    def step(self):
        j = self.j
        K = 0 if self.catch is None else self.catch.item(j)
        self.ctx_sum += self.delta.item(j)
        self.j = j + 1
        return self.G, K, self.finish_at.pop(j, None)

    def leave(self, gone: list[int], t_end: float) -> tuple[int, float]:
        """`leave_arrays` for a list of requests in plain Python, with the same sums (integers, and KV bytes summed
        in any order only when every order gives the same float)."""
        sim = self.sim
        self.size -= len(gone)
        if len(gone) > 1 and not sim.bytes_exact:
            return leave_arrays(sim, self, np.array(gone, dtype=_I64), t_end)
        finish, ctx_end_l, cross_l, bytes_l = sim.shared.finish, self.plan.ctx_end_l, self.plan.cross_l, sim.bytes_l
        freed = 0.0
        for i in gone:
            finish[i] = t_end
            self.ctx_sum -= ctx_end_l[i]
            if cross_l is not None:
                self.cross_sum -= cross_l[i]
            freed += bytes_l[i]
        return len(gone), freed

    @staticmethod
    def request_steps(sim, plan: AheadPlan, kernels: list, batch: np.ndarray) -> RequestSteps:
        """In request order: request i's steps are consecutive local iterations of its replica from rs_j; map them
        through the replicas' global step indices (concatenated; abs0 = where its first step lies in that)."""
        nreq = sim.wl.n
        n, _, count = plan.runs.all() if plan.runs else (None, None, np.maximum(sim.wl.output_len - 1, 0))
        abs0, off, globs = np.zeros(nreq, _I64), 0, []
        for r, k in zip(sim.replicas, kernels):
            if k.rs_i:
                abs0[k.rs_i] = np.asarray(k.rs_j, dtype=_I64) + off
            globs.append(r.global_steps())
            off += len(globs[-1])
        total = int(count.sum())
        req = np.repeat(np.arange(nreq, dtype=_I64), count)
        local = np.arange(total, dtype=_I64) - np.repeat(np.cumsum(count) - count, count)
        step = np.concatenate(globs)[abs0[req] + local] if total else np.zeros(0, _I64)
        g = np.full(total, plan.G, _I64)
        return RequestSteps(step, req, np.zeros(total, _I64) if n is None else n, g)


class LivePlan:
    """Per-run state of the live kernel: the request-step log of all replicas, in global step order (each entry
    one iteration's requests, accepted counts and γ — an int when every request used the same)."""

    def __init__(self, sim):
        self.req: list = []
        self.n: list = []
        self.g: list = []
        if sim.acc is not None:
            sim.acc.streams.expect(sim.wl.n)


class LiveKernel:
    """Per-request numpy state compacted over the active batch; the policy picks γ each step (see the module doc)."""

    plan = LivePlan

    def __init__(self, sim, plan: LivePlan):
        self.sim, self.plan, self.policy = sim, plan, sim.policy
        wl, pol = sim.wl, sim.policy
        self.size = self.ctx_sum = self.cross_sum = 0
        self.req, self.rem = _E, _E
        self.clean = np.zeros(0, bool)  # the request's previous step was a clean sweep (draft catch-up next)
        self.state = None  # the policy's per-request state (None while it keeps none)
        self.draws = LiveDraws(sim.acc, wl.max_batch, pol.draws, pol.step_draws,
                               float(wl.output_len.mean()) * pol.step_draws / 2)
        # bound once (this kernel's step runs every iteration)
        self.catchup, self.policy_step, self.draw = sim.catchup, pol.step, self.draws.draw
        self.log_req, self.log_n, self.log_g = plan.req.append, plan.n.append, plan.g.append

    def admit(self, new: list[int], now: float, t_first: float) -> tuple[int, float]:
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
        self.req, self.rem = cat((self.req, idx)), cat((self.rem, wl.output_len[idx] - 1))
        self.clean = cat((self.clean, np.zeros(idx.size, bool)))
        self.draws.admit(idx)
        s = self.policy.start(idx.size)
        if s is not None:
            self.state = s if self.state is None else cat((self.state, s))
        self.size = self.req.size
        return early

    def step(self):
        catchup = self.catchup
        K = int(self.clean.sum()) if catchup else 0
        n, G, gam, consumed, self.state = self.policy_step(self.draw, self.state, self.size)
        tok = np.minimum(n + 1, self.rem)
        self.draws.advance(consumed, tok)
        if catchup:
            self.clean = (n == gam) & (gam > 0)
        self.rem -= tok
        self.ctx_sum += int(tok.sum())
        self.log_req(self.req)
        self.log_n(n)
        self.log_g(gam)
        done = self.rem == 0
        return G, K, self._compact(done) if done.any() else None

    def _compact(self, done: np.ndarray) -> np.ndarray:
        gone, keep = self.req[done], ~done
        self.req, self.rem, self.clean = self.req[keep], self.rem[keep], self.clean[keep]
        self.draws.keep(keep)
        if self.state is not None:
            self.state = self.state[keep]
        self.size = self.req.size
        return gone

    def leave(self, gone: np.ndarray, t_end: float) -> tuple[int, float]:
        return leave_arrays(self.sim, self, gone, t_end)

    @staticmethod
    def request_steps(sim, plan: LivePlan, kernels: list, batch: np.ndarray) -> RequestSteps:
        req = np.concatenate(plan.req) if plan.req else _E
        n = np.concatenate(plan.n).astype(_I64) if plan.n else _E
        if not any(isinstance(x, np.ndarray) for x in plan.g):  # one γ per iteration
            g = np.repeat(np.array(plan.g, dtype=_I64), batch)
        else:
            g = np.concatenate([x if isinstance(x, np.ndarray) else np.full(b, x, _I64) for x, b in zip(plan.g, batch)])
            g = g.astype(_I64)
        step = np.repeat(np.arange(len(batch), dtype=_I64), batch)
        order = np.argsort(req, kind="stable")
        return RequestSteps(step[order], req[order], n[order], g[order])
