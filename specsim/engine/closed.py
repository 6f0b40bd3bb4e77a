"""The step-by-step engine's closed loop, computed in iteration space: the same Records without stepping.

In a closed loop of one replica (clients ≤ the batch cap) where the KV reservation can never refuse a request and
no request's life depends on the rest of its batch (the baseline, or a policy's `batch_free`), nothing depends on
time: request i is admitted at the iteration its client frees up (FCFS), takes its count_i decode steps in
consecutive iterations and frees its client at the end of the last one (a one-token request, done at its prefill,
at the end of its admission's iteration). So each request's life is drawn alone first (`acceptance.FixedRuns`, or
the fast path's lockstep `fastpath.acceptance_lockstep`), the admissions follow from a heap of client free-at
iterations, every iteration's batch, summed context, catch-up count, largest γ and prefill are bincounts over
request-steps, and the clock is a running sum. The arithmetic is the event loop's, value for value: each step is
priced by the same `StepCosts.spec_step` / `plain_step` call with the same arguments (one call per distinct
step, or a per-batch table over the summed contexts when that is fewer), and the clock is checked to be SimPy's
`now + (t_end − now)` (else computed step by step). `simpy_engine.run_engine` uses it wherever `eligible` holds.
"""

from __future__ import annotations

import heapq

import numpy as np

from specsim.engine.acceptance import FixedRuns
from specsim.engine.fastpath import BLOCK, acceptance_lockstep
from specsim.engine.metrics import Records

_I64 = np.int64
KV_MARGIN = 1e-9  # relative slack so rounding in the event loop's running KV total cannot matter


def eligible(wl, acc, policy, req_bytes: np.ndarray, kv_budget: float | None, replicas: int) -> bool:
    """Where the iteration-space computation gives the event loop's results (see the module doc)."""
    if replicas != 1 or wl.concurrency is None or wl.concurrency > wl.max_batch or wl.n == 0:
        return False
    if policy is not None and not policy.batch_free:
        return False
    if kv_budget is not None:
        worst = np.sort(req_bytes)[-min(wl.concurrency, wl.n):].sum()
        if not worst * (1 + KV_MARGIN) < kv_budget:
            return False
    return True


def lives(wl, acc, policy):
    """Every request's life alone: (steps per request, then per request-step in request order: accepted, γ,
    tokens emitted — the last step truncated)."""
    owed = np.maximum(wl.output_len - 1, 0).astype(_I64)
    if policy is None:
        z = np.zeros(int(owed.sum()), _I64)
        return owed, z, z, np.ones(z.size, _I64)
    if policy.fixed_gamma is not None and acc.constant:
        n, tok, count = FixedRuns(acc, policy.fixed_gamma, owed).all()
        return count.astype(_I64), n, np.full(n.size, policy.fixed_gamma, _I64), tok
    parts = [acceptance_lockstep(wl, acc, policy, np.arange(s, min(s + BLOCK, wl.n), dtype=_I64))
             for s in range(0, wl.n, BLOCK)]
    req, g, n, tok = (np.concatenate([p[k] for p in parts]) for k in range(4))
    order = np.argsort(req, kind="stable")  # within a request, lockstep order is step order
    return np.bincount(req, minlength=wl.n).astype(_I64), n[order], g[order], tok[order]


def admissions(occupancy: np.ndarray, clients: int) -> np.ndarray:
    """Iteration at which each request is admitted: FCFS, each taking the earliest free client, which it holds
    for `occupancy` iterations."""
    if clients == 1:
        return np.cumsum(occupancy) - occupancy
    heap, adm = [0] * min(clients, occupancy.size), []
    push, pop = heapq.heappush, heapq.heappop
    for c in occupancy.tolist():
        a = pop(heap)
        adm.append(a)
        push(heap, a + c)
    return np.array(adm, dtype=_I64)


def _key(cols: list[np.ndarray]) -> np.ndarray:
    """One int64 per row of non-negative integer columns (a group label, packed when the bits fit)."""
    bits = [max(1, int(c.max()).bit_length()) if c.size else 1 for c in cols]
    if sum(bits) <= 62:
        k = np.zeros(cols[0].size, _I64)
        for c, b in zip(cols, bits):
            k = (k << b) | c
        return k
    return np.unique(np.stack(cols, 1), axis=0, return_inverse=True)[1].reshape(-1)


def price(costs, spec: bool, B, G, S, Xs, K):
    """(time, bytes, FLOPs) of every step, each from the engine's own call at L = S/B, X = Xs/B (Python numbers,
    as the event loop passes them): per group of equal (B, G, Xs, K), one call per step or one per summed context
    in the group's range, whichever is fewer."""
    m = B.size
    if not m:
        return np.empty((3, 0))
    varying = [c for c in (B, G, Xs, K) if not (c == c[0]).all()]
    if not varying:
        return _price_group(costs, spec, B, G, S, Xs, K, slice(None))
    key = varying[0] if len(varying) == 1 else _key(varying)
    order = np.argsort(key, kind="stable")
    out = np.empty((3, m))
    for idx in np.split(order, np.flatnonzero(np.diff(key[order])) + 1):
        out[:, idx] = _price_group(costs, spec, B, G, S, Xs, K, idx)
    return out


def _price_group(costs, spec: bool, B, G, S, Xs, K, idx) -> np.ndarray:
    """`price` for steps idx, whose B, G, Xs and K are all the same."""
    s = S[idx]
    i0 = 0 if isinstance(idx, slice) else idx[0]
    b, g, x, k = int(B[i0]), int(G[i0]), int(Xs[i0]), int(K[i0])
    X = x / b
    lo, hi = int(s.min()), int(s.max())
    table = hi - lo + 1 < s.size  # a table over the range, then a lookup
    vals = range(lo, hi + 1) if table else s.tolist()
    if spec:
        f = costs.spec_step
        res = [f(b, g, v / b, X, k) for v in vals]
    else:
        f = costs.plain_step
        res = [f(b, v / b, X) for v in vals]
    res = np.array(res).T
    return res.take(s - lo, axis=1) if table else res


def clock(dur: np.ndarray) -> np.ndarray:
    """Start time of every iteration and the end of the last: SimPy's clock, now' = now + ((now + d) − now)."""
    end = np.cumsum(dur)  # = now + d, added left to right
    start = np.concatenate(([0.0], end[:-1]))
    if np.array_equal(start + (end - start), end):  # the clock's arithmetic lands on now + d at every step
        return np.concatenate((start, end[-1:]))
    out, now = [0.0], 0.0
    for d in dur.tolist():
        t_end = now + d
        now = now + (t_end - now)
        out.append(now)
    return np.array(out)


def _span_sum(adm, count, w, J: int) -> np.ndarray:
    """Σ of the integers w_i (None: 1) over the requests decoding at each iteration (request i at adm_i … adm_i +
    count_i − 1), by a difference array."""
    has = count > 0
    d = np.zeros(J + 1, _I64)
    w = 1 if w is None else np.asarray(w, _I64)[has]
    np.add.at(d, adm[has], w)
    np.add.at(d, (adm + count)[has], -w)
    return np.cumsum(d[:J])


def _iterations(wl, costs, spec: bool, catchup: bool, fixed_g, count, n, g, tok):
    """Per iteration: (admitted, prompt sum of the admitted, batch, summed context, summed cross context, catch-up
    count, largest γ); each request's admission iteration; the offset from a request's step index to its step's
    iteration (start iteration − first request-step index, repeated per request-step)."""
    occ = np.maximum(count, 1)
    adm = admissions(occ, wl.concurrency)
    J = int((adm + occ).max())
    start = np.cumsum(count) - count
    k = np.bincount(adm, minlength=J)
    psum = np.bincount(adm, weights=wl.prompt_len, minlength=J).astype(_I64)  # whole numbers: exact
    B = _span_sum(adm, count, None, J)
    ctx0 = costs.context(wl.prompt_len, 1).astype(_I64)
    Xs = _span_sum(adm, count, np.asarray(costs.cross(wl.prompt_len)) * np.ones(count.size, _I64), J) \
        if costs.enc_dec else np.zeros(J, _I64)
    K, G = np.zeros(J, _I64), np.zeros(J, _I64)
    if not spec:  # one token per step: a request's context grows by one per iteration
        S = _span_sum(adm, count, ctx0 - adm, J) + np.arange(J, dtype=_I64) * B
        return adm, start, (k, psum, B, S, Xs, K, G)
    it = np.arange(tok.size, dtype=_I64) + np.repeat(adm - start, count)  # each request-step's iteration
    before = np.cumsum(tok) - tok  # tokens emitted before the step, over all requests …
    first = before[np.minimum(start, max(tok.size - 1, 0))] if tok.size else start
    ctx = before + np.repeat(ctx0 - first, count)  # … made per request: the step's live context
    S = np.bincount(it, weights=ctx, minlength=J).astype(_I64)
    if catchup and n.size:  # the request's previous step was a clean sweep
        clean = np.zeros(n.size, bool)
        clean[1:] = (n[:-1] == g[:-1]) & (g[:-1] > 0)
        clean[start[count > 0]] = False
        K = np.bincount(it[clean], minlength=J)
    if fixed_g is not None:
        G = np.where(B > 0, fixed_g, 0).astype(_I64)
    elif g.size:
        np.maximum.at(G, it, g)
    return adm, start, (k, psum, B, S, Xs, K, G)


def _prefills(costs, spec: bool, k: np.ndarray, psum: np.ndarray) -> np.ndarray:
    """(time, bytes, FLOPs) of each iteration's prefill of its k admitted requests (zeros where none), one
    `StepCosts.prefill` call per distinct (k, mean prompt)."""
    pre = np.zeros((3, k.size))
    new = np.flatnonzero(k)
    pairs = list(zip(k[new].tolist(), (psum[new] / k[new]).tolist()))  # = sum(prompts) / len(new), as the loop
    uniq = {p: i for i, p in enumerate(dict.fromkeys(pairs))}
    vals = np.array([costs.prefill(kk, p, spec) for kk, p in uniq]).reshape(-1, 3).T
    pre[:, new] = vals[:, [uniq[p] for p in pairs]]
    return pre


def run_closed(wl, costs, acc, policy) -> Records:
    """The closed-loop run (speculative when `policy` is given) in iteration space; call where `eligible`."""
    spec = policy is not None
    count, n, g, tok = lives(wl, acc, policy)
    fixed_g = None if policy is None else policy.fixed_gamma
    adm, start, (k, psum, B, S, Xs, K, G) = _iterations(wl, costs, spec, spec and costs.catchup, fixed_g, count, n,
                                                        g, tok)
    pre = _prefills(costs, spec, k, psum)
    run = np.flatnonzero(B)  # iterations with a decode step
    step = price(costs, spec, B[run], G[run], S[run], Xs[run], K[run])
    both = np.flatnonzero(k[run])  # the prefill of the admitted stalls the step (the event loop's t + pre_t)
    step[:, both] += pre[:, run[both]]
    dur = pre[0].copy()
    dur[run] = step[0]
    t = clock(dur)
    now, end = t[:-1], t[:-1] + dur  # end = now + t, as the event loop records it
    row = np.cumsum(B > 0) - 1  # iteration → its step row
    first = now[adm] + pre[0, adm]
    last = np.where(count > 0, adm + count - 1, adm)
    finish = np.where(count > 0, end[last], first)  # one-token requests finish with their prefill
    z = np.zeros(n.size, _I64)
    # a request's steps are in consecutive iterations, each with a step row: consecutive rows
    rs_step = np.arange(n.size, dtype=_I64) + np.repeat(row[adm] - start, count)
    return Records(arrival_s=now[adm], admit_s=now[adm].copy(), first_token_s=first, finish_s=finish,
                   output_len=wl.output_len, step_end_s=end[run], step_dur_s=step[0], step_batch=B[run].astype(_I64),
                   step_gamma=G[run], step_bytes=step[1], step_flops=step[2], rs_step=rs_step, rs_request=np.repeat(
                       np.arange(wl.n, dtype=_I64), count), rs_accepted=n if spec else z, rs_gamma=g if spec else z)
