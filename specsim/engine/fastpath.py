"""Vectorized batch-1 simulation, for sweeps. The step-by-step engine (`simpy_engine`) stays the engine of record.

At batch 1 in closed loop, request j starts when request j − 1 finishes and nothing else interacts, so each
request's acceptance can be simulated independently. This path runs all requests in lockstep — step s of every
unfinished request at once, as numpy arrays over requests — with exactly the engine's draw convention
(`specsim.engine.acceptance`, the same acceptance step `specsim.engine.draws.LiveDraws` and γ policy) and the
engine's step costs (`specsim.cost.steptime`, bit-identical interpolation), then lays the requests end to end in
time. It produces the same `Records` as the engine (tests/test_fastpath.py checks the
per-step accepted counts are identical and the times equal to rounding).
"""

from __future__ import annotations

import numpy as np

from specsim.engine.acceptance import FixedRuns
from specsim.engine.draws import LiveDraws
from specsim.engine.metrics import Records

BLOCK = 1024  # requests simulated together (bounds the uniform buffers' memory)


def eligible(wl, replicas: int = 1) -> bool:
    return wl.concurrency == 1 and wl.max_batch == 1 and replicas == 1


def acceptance_lockstep(wl, acc, policy, idx: np.ndarray):
    """Per request-step (request, γ, accepted, tokens) for requests `idx`, in lockstep: each step is every
    unfinished request's next step at batch 1, drawn with the engine's acceptance step and the policy's γ."""
    acc.streams.expect(wl.n)
    draws = LiveDraws(acc, len(idx), policy.draws, policy.step_draws,
                      float(wl.output_len[idx].mean()) * policy.step_draws / 2)
    rem = wl.output_len[idx] - 1
    live = rem > 0
    req, rem = idx[live], rem[live]
    draws.admit(req)
    state = policy.start(req.size)
    out_req, out_g, out_n, out_tok = [], [], [], []
    while req.size:
        n, _, gam, consumed, state = policy.step(draws.draw, state, 1)  # each request is alone in its batch
        tok = np.minimum(n + 1, rem)
        draws.advance(consumed, tok)
        rem = rem - tok
        out_req.append(req)
        out_g.append(np.broadcast_to(np.asarray(gam, np.int64), req.shape))
        out_n.append(n)
        out_tok.append(tok)
        live = rem > 0
        if not live.all():
            req, rem = req[live], rem[live]
            draws.keep(live)
            if state is not None:
                state = state[live]
    if not out_req:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    return (np.concatenate(out_req), np.concatenate(out_g).astype(np.int64), np.concatenate(out_n).astype(np.int64),
            np.concatenate(out_tok).astype(np.int64))


def _step_costs(costs, spec: bool, G: np.ndarray, ctx: np.ndarray, X: np.ndarray, K):
    """(time, bytes, FLOPs) of batch-1 steps at integer contexts ctx: `spec_step_vec` / `plain_step_vec`, priced
    once per context in the range and looked up when γ and X are the same throughout (element by element the same
    values), else priced step by step."""
    n = ctx.size
    same = n and (K is None or not K.any()) and (not spec or (G == G[0]).all()) and (X is None or (X == X[0]).all())
    if same and int(ctx.max()) - int(ctx.min()) < n:
        lo = int(ctx.min())
        L = np.arange(lo, int(ctx.max()) + 1).astype(float)
        Xt = np.full(L.size, 0.0 if X is None else X[0])
        tab = costs.spec_step_vec(np.full(L.size, G[0]), L, Xt) if spec else costs.plain_step_vec(L, Xt)
        i = ctx - lo
        return tuple(np.asarray(a).take(i) for a in tab)
    L = ctx.astype(float)
    X = np.zeros(n) if X is None else X
    return costs.spec_step_vec(G, L, X, K) if spec else costs.plain_step_vec(L, X)


def _lay_out(wl, costs, spec: bool, rs_req, rs_g, rs_n, rs_tok) -> Records:
    """Order request-steps by request, price them, and place the requests end to end (closed loop, batch 1)."""
    n_req = wl.n
    if not bool((rs_req[1:] >= rs_req[:-1]).all()):  # FixedRuns' come in request order; the lockstep's do not
        order = np.argsort(rs_req, kind="stable")  # within a request, lockstep order = step order
        rs_req, rs_g, rs_n, rs_tok = rs_req[order], rs_g[order], rs_n[order], rs_tok[order]
    prompt = wl.prompt_len[rs_req]
    first_step = np.concatenate(([True], rs_req[1:] != rs_req[:-1])) if rs_req.size else np.zeros(0, bool)
    emitted_before = np.cumsum(rs_tok) - rs_tok  # tokens emitted by earlier steps, made per request below
    if rs_req.size:
        starts = np.flatnonzero(first_step)
        base = np.repeat(emitted_before[starts], np.diff(np.append(starts, rs_req.size)))
        emitted = emitted_before - base + 1  # + output token 0 from the prefill
    else:
        emitted = np.zeros(0, np.int64)
    ctx = costs.context(prompt, emitted)
    X = np.asarray(costs.cross(prompt)) * np.ones(rs_req.size) if costs.enc_dec else None  # None: all 0
    K = None
    if spec and costs.catchup and rs_req.size:  # the previous step of the same request was a clean sweep
        K = np.zeros(rs_req.size, np.int64)
        K[1:] = (rs_n[:-1] == rs_g[:-1]) & (rs_g[:-1] > 0)
        K[first_step] = 0
    dur, byt, flo = _step_costs(costs, spec, rs_g, ctx, X, K)
    # prefill per request (batch 1), folded into its first step as in the engine
    if n_req:  # one prefill per distinct prompt length
        up, inv = np.unique(wl.prompt_len, return_inverse=True)
        pre = np.array([costs.prefill(1, float(p), spec) for p in up]).reshape(-1, 3)[inv.reshape(-1)]
    else:
        pre = np.zeros((0, 3))
    dur, byt, flo = (a if a.flags.writeable and a.base is None else a.copy() for a in (dur, byt, flo))
    fr = rs_req[first_step]
    dur[first_step] += pre[fr, 0]
    byt[first_step] += pre[fr, 1]
    flo[first_step] += pre[fr, 2]
    # request j: issued at the previous finish; its steps end one after another
    per_req = np.bincount(rs_req, weights=dur, minlength=n_req).astype(float)
    no_steps = np.bincount(rs_req, minlength=n_req) == 0
    per_req[no_steps] += pre[no_steps, 0]  # one-token requests: prefill only
    finish = np.cumsum(per_req)
    arrival = finish - per_req
    first = arrival + pre[:, 0]
    # step end times: arrival of its request + running sum of durations within the request
    csum = np.cumsum(dur)
    req_start_csum = np.concatenate(([0.0], np.cumsum(np.bincount(rs_req, weights=dur, minlength=n_req))))[rs_req]
    step_end = arrival[rs_req] + (csum - req_start_csum)
    m = rs_req.size
    zeros = np.zeros(m, np.int64)
    return Records(arrival_s=arrival, admit_s=arrival.copy(), first_token_s=first, finish_s=finish,
                   output_len=wl.output_len, step_end_s=step_end, step_dur_s=dur, step_batch=np.ones(m, np.int64),
                   step_gamma=rs_g if spec else zeros, step_bytes=byt, step_flops=flo,
                   rs_step=np.arange(m, dtype=np.int64), rs_request=rs_req,
                   rs_accepted=rs_n if spec else zeros, rs_gamma=rs_g if spec else zeros)


def run_fast(wl, costs, acc=None, policy=None) -> Records:
    """Batch-1 closed-loop run (speculative when `policy` is given, else the baseline)."""
    if policy is None:
        out = wl.output_len - 1
        rs_req = np.repeat(np.arange(wl.n, dtype=np.int64), out)
        z = np.zeros(rs_req.size, np.int64)
        return _lay_out(wl, costs, False, rs_req, z, z, np.ones(rs_req.size, np.int64))
    if policy.fixed_gamma is not None and acc.constant:  # whole lives at once, vectorized (FixedRuns)
        G = policy.fixed_gamma
        rs_n, tok, count = FixedRuns(acc, G, wl.output_len - 1).all()
        rs_req = np.repeat(np.arange(wl.n, dtype=np.int64), count)
        return _lay_out(wl, costs, True, rs_req, np.full(rs_n.size, G, np.int64), rs_n, tok)
    parts = [acceptance_lockstep(wl, acc, policy, np.arange(s, min(s + BLOCK, wl.n), dtype=np.int64))
             for s in range(0, wl.n, BLOCK)]
    rs = [np.concatenate([p[k] for p in parts]) for k in range(4)]
    return _lay_out(wl, costs, True, *rs)
