"""Plain-numpy reference programs: the arithmetic a speculative-decoding simulator must do, and nothing else.

`experiments/bench_engine.py` times every `specsim.simulate.run` mode against one of these (issue 14 item 8). They
share no code with the simulator: the only specsim pieces used are INPUTS — the roofline pass costs
(`specsim.cost.roofline.CostModel.pass_cost` / `prefill_cost`, evaluated at the 16-token context buckets specsim's
step-cost cache interpolates between, `specsim.cost.steptime.CONTEXT_BUCKET`), the profiles they come from, the KV
bytes per token, and a trace's β values. Every number a run reports (steps, tokens, walltime, mean TTFT and
end-to-end latency, for the speculative run and its plain-decoding baseline) is recomputed here and checked against
specsim's output (`check()`), so a reference is a faithful program, not a lower bound that skips work.

What each reference does (fixed γ, fixed prompt/output lengths per request, seed s):
- draws: request i's uniforms come from `numpy.random.default_rng((s, 2, i))` (specsim.rng's ACCEPTANCE stream),
  γ per step, in order; a step accepts the number of leading u_k < β (α, or the trace's β at the request's output
  positions times the slot factor) and emits that + 1 tokens, truncated to what the request still owes.
  i.i.d. α: one flat buffer of every request's uniforms (enough rows for mean + 6 sd steps; the rare request that
  needs more is redrawn with its worst case), one vectorized leading-accept count and one cumulative sum over all
  rows. Trace: the requests advance in lockstep (step m of every live request at once), thresholds gathered from β.
- step-time tables (built once per setup and reused across runs, as specsim's cost caches are): spec step
  T(B, S) = target pass of B·(γ + 1) positions at the mean context S / B + γ draft passes at S / B + (γ − 1)/2,
  indexed by batch B and summed live context S (integers); plain step T(B, S) with one target position; prefill
  of k requests together P(k). Linear interpolation inside a 16-token bucket, as specsim prices a pass.
- batch 1, closed loop (`batch1`): fully vectorized — per request-step context = prompt + tokens emitted before it,
  durations from the table, the first step of a request carrying its prefill; requests laid end to end.
- batch B (`loop`): one plain-Python iteration per engine step, scalars only: admit (closed loop: a client's next
  request the moment its previous one finished; open loop: arrivals up to now; both under the batch cap and the KV
  reservation), prefill the admitted together, look the step up in T(B, S), advance the clock, add the step's
  tokens to S (a per-iteration context-growth schedule written at admission), release the requests that finished.
  That is the minimal discrete-event loop any simulator needs where admission depends on time.
- batch B closed loop, vectorized (`closed_vectorized`, an extra lower bound): in closed loop nothing depends on
  time, so who runs at which iteration follows from a heap of client free-at iterations; per-iteration B and S are
  two `bincount`s over request-steps and the clock one `cumsum`. It shows what a batch-B fast kernel could reach.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from specsim import profiles as prof
from specsim.cost.roofline import CostModel, kv_bytes_per_token_per_chip
from specsim.cost.steptime import CONTEXT_BUCKET as W

ACCEPTANCE_STREAM, ARRIVALS_STREAM = 2, 0  # specsim.rng's stream numbers (the convention, restated)


# --- cost tables ----------------------------------------------------------------------------------------------
@dataclass
class Tables:
    """Step-time tables of one deployment: T(B, S) per batch B over summed contexts S, filled lazily by B."""

    target: CostModel
    draft: CostModel
    gamma: int
    lo_ctx: int  # smallest per-request context a step sees (prompt)
    hi_ctx: int  # largest (prompt + output − 2), plus slack
    capacity_bytes: float
    weights_bytes: float
    kv_per_token: float  # target + draft
    kv_target: float
    weights_target: float
    spec: dict = field(default_factory=dict)
    plain: dict = field(default_factory=dict)
    pre: dict = field(default_factory=dict)

    def _seg(self, cm: CostModel, B: int, P: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(time at bucket i's low end, slope per token) for buckets 0 … n − 1."""
        t = np.array([cm.pass_cost(B, P, i * W).time_s for i in range(n + 1)])
        return t[:-1], (t[1:] - t[:-1]) / W

    def _row(self, B: int, spec: bool) -> list[float]:
        S = np.arange(B * self.lo_ctx, B * self.hi_ctx + 1, dtype=np.int64)
        L = S / B
        n = int(self.hi_ctx + self.gamma) // W + 2
        G = self.gamma if spec else 0
        t0, st = self._seg(self.target, B, G + 1, n)
        i = (L // W).astype(np.int64)
        t = t0[i] + (L - i * W) * st[i]
        if G:
            d0, ds = self._seg(self.draft, B, 1, n)
            Ld = L + (G - 1) / 2
            i2 = (Ld // W).astype(np.int64)
            t = t + G * (d0[i2] + (Ld - i2 * W) * ds[i2])
        return t.tolist()

    def step(self, B: int, spec: bool) -> list[float]:
        """T(B, ·) as a Python list indexed by S − B·lo_ctx."""
        d = self.spec if spec else self.plain
        r = d.get(B)
        if r is None:
            r = d[B] = self._row(B, spec)
        return r

    def flat(self, batch: int, spec: bool) -> tuple[np.ndarray, np.ndarray]:
        """T(B, ·) for B = 1 … batch in one array, and each row's offset (index by B)."""
        key = ("flat", batch, spec)
        f = self.pre.get(key)
        if f is None:
            rows = [self.step(b, spec) for b in range(1, batch + 1)]
            off = np.concatenate(([0, 0], np.cumsum([len(r) for r in rows])[:-1])).astype(np.int64)
            f = self.pre[key] = (np.concatenate([np.asarray(r) for r in rows]), off)
        return f

    def prefill(self, k: int, prompt: int, spec: bool) -> float:
        key = (k, prompt, spec)
        p = self.pre.get(key)
        if p is None:
            p = self.target.prefill_cost(k, prompt).time_s
            if spec:
                p += self.draft.prefill_cost(k, prompt).time_s
            self.pre[key] = p
        return p


def tables(hardware: str, target: str, draft: str, gamma: int, prompt_len: int, output_len: int) -> Tables:
    hw = prof.hardware(hardware)
    st = prof.stack(hw.default_stack)
    t, d = CostModel(prof.model(target), hw, st), CostModel(prof.model(draft), hw, st)
    return Tables(t, d, gamma, prompt_len, prompt_len + output_len, hw.memory_capacity_gb * 1e9,
                  t.model.weight_bytes + d.model.weight_bytes,
                  kv_bytes_per_token_per_chip(t.model, 1) + kv_bytes_per_token_per_chip(d.model, 1),
                  kv_bytes_per_token_per_chip(t.model, 1), t.model.weight_bytes)


# --- acceptance draws ---------------------------------------------------------------------------------------------
def _leading(u: np.ndarray, thr) -> np.ndarray:
    """Leading accepts per row of u (R, G) against thresholds thr (G,) or (R, G)."""
    ok = u < thr
    return np.where(ok.all(1), u.shape[1], ok.argmin(1))


def draws_iid(seed: int, alpha: float, G: int, owed: np.ndarray):
    """Tokens per step of every request (flat, request after request) and each request's step count."""
    p = alpha ** np.arange(G + 1)
    mu = p.sum()  # mean tokens per step
    var = (p * (2 * np.arange(G + 1) + 1)).sum() - mu * mu
    k = np.minimum(owed, np.ceil(owed / mu + 6 * np.sqrt(owed * var / mu ** 3)).astype(np.int64) + 4)
    while True:
        row0 = np.cumsum(k) - k
        U = np.empty(int(k.sum()) * G)
        for i, (a, kk) in enumerate(zip((row0 * G).tolist(), (k * G).tolist())):
            np.random.default_rng((seed, ACCEPTANCE_STREAM, i)).random(out=U[a:a + kk])
        tok = _leading(U.reshape(-1, G), alpha) + 1
        cs = np.cumsum(tok)
        base = cs[row0] - tok[row0]
        cut = np.searchsorted(cs, base + owed)  # the row where request i has emitted all it owes
        short = cut >= row0 + k
        if not short.any():
            break
        k[short] = owed[short]  # ~1e-9 of requests: redraw everything with their worst case (rare)
    count = cut - row0 + 1
    keep = np.repeat(row0, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
    out = tok[keep]
    last = np.cumsum(count) - 1
    out[last] -= cs[cut] - base - owed  # truncate each request's last step
    return out, count


def draws_trace(seed: int, beta: np.ndarray, starts: np.ndarray, slot: np.ndarray, G: int, owed: np.ndarray):
    """As draws_iid for a β trace: request i walks β from starts[i mod n] + 1 (output position 1), wrapping; the
    requests advance in lockstep, each reading γ fresh uniforms of its own stream per step."""
    n = owed.size
    U = np.empty((n, int(owed.max()) * G))
    for i in range(n):
        np.random.default_rng((seed, ACCEPTANCE_STREAM, i)).random(out=U[i, :int(owed[i]) * G])
    live = np.arange(n)
    pos = starts[live % starts.size] + 1
    rem = owed.copy()
    cols = np.arange(G)
    steps_req, steps_tok, m = [], [], 0
    live = live[rem > 0]
    pos, rem_l = pos[live], rem[live]
    while live.size:
        u = U[live[:, None], m * G + cols]
        thr = beta.take(pos[:, None] + cols, mode="wrap") * slot
        tok = np.minimum(_leading(u, thr) + 1, rem_l)
        steps_req.append(live)
        steps_tok.append(tok)
        pos, rem_l, m = pos + tok, rem_l - tok, m + 1
        keep = rem_l > 0
        live, pos, rem_l = live[keep], pos[keep], rem_l[keep]
    req, tok = np.concatenate(steps_req), np.concatenate(steps_tok)
    order = np.argsort(req, kind="stable")
    return tok[order], np.bincount(req, minlength=n)


# --- batch 1, closed loop: vectorized -------------------------------------------------------------------------------
def batch1(tb: Tables, prompt: int, tok: np.ndarray, count: np.ndarray, spec: bool) -> dict:
    """Requests end to end; tok/count from the draws (baseline: one token per step)."""
    first = np.cumsum(count) - count
    before = np.cumsum(tok) - tok
    ctx = (before - np.repeat(before[first], count)) + prompt  # prompt + tokens emitted before the step (− 1 + 1)
    row = tb.step(1, spec)
    dur = np.asarray(row).take(ctx - tb.lo_ctx)
    pre = tb.prefill(1, prompt, spec)
    per_req = np.add.reduceat(dur, first) + pre if dur.size else np.full(count.size, pre)
    finish = np.cumsum(per_req)
    return {"steps": int(dur.size), "walltime_s": float(finish[-1]), "ttft_mean_s": pre,
            "e2e_mean_s": float(per_req.mean()), "output_tokens": int(tok.sum() + count.size)}


# --- batch B: one plain-Python iteration per engine step ------------------------------------------------------------
def _kv(tb: Tables, prompt: int, out_len: np.ndarray, spec: bool) -> tuple[list[float], float]:
    """KV reservation per request (prompt + output + the γ + 1 transient positions when speculating) and budget."""
    if spec:
        return ((prompt + out_len + tb.gamma + 1) * tb.kv_per_token).tolist(), tb.capacity_bytes - tb.weights_bytes
    return ((prompt + out_len) * tb.kv_target).tolist(), tb.capacity_bytes - tb.weights_target


def loop(tb: Tables, prompt: int, tok: np.ndarray, count: np.ndarray, spec: bool, batch: int,
         arrival: np.ndarray | None = None) -> dict:
    """Closed loop with `batch` clients (arrival None), or open loop at the given arrival times, batch cap `batch`."""
    n = count.size
    start, cnt = (np.cumsum(count) - count).tolist(), count.tolist()
    out_len = np.add.reduceat(tok, np.cumsum(count) - count) + 1
    need, budget = _kv(tb, prompt, out_len, spec)
    ctx_end = (prompt + out_len - 1).tolist()
    delta = np.zeros(int(count.sum()) + 2, np.int64)  # context growth at each future iteration
    finish_at: dict[int, list[int]] = {}
    closed = arrival is None
    arr = [0.0] * n if closed else arrival.tolist()
    first, fin = [0.0] * n, [0.0] * n
    now, j, S, B, kv, nxt, issued, force, in_flight, done = 0.0, 0, 0, 0, 0.0, 0, 0, -1, 0, 0
    lo, step = tb.lo_ctx, tb.step
    while done < n:
        if closed:  # clients issue their next request
            while in_flight < batch and issued < n:
                arr[issued] = now
                issued += 1
                in_flight += 1
        else:
            while issued < n and (arr[issued] <= now or issued <= force):
                issued += 1
        k = 0  # admit from the FCFS queue under the batch cap and the KV reservation
        while nxt < issued and B + k < batch and kv + need[nxt] <= budget:
            kv += need[nxt]
            a, c = start[nxt], cnt[nxt]
            delta[j:j + c] += tok[a:a + c]
            finish_at.setdefault(j + c - 1, []).append(nxt)
            S += prompt
            k += 1
            nxt += 1
        if not k and not B:  # idle until the next arrival (the SimPy clock's arithmetic)
            force = issued
            now = now + max(0.0, arr[issued] - now)
            continue
        B += k
        t = step(B, spec)[S - B * lo]
        if k:
            pre = tb.prefill(k, prompt, spec)
            t = t + pre
            for i in range(nxt - k, nxt):
                first[i] = now + pre
        S += delta.item(j)
        gone = finish_at.pop(j, ())
        j += 1
        t_end = now + t
        now = now + (t_end - now)
        for i in gone:
            fin[i] = t_end
            S -= ctx_end[i]
            kv -= need[i]
        B -= len(gone)
        done += len(gone)
        in_flight -= len(gone)
    fa, aa = np.array(fin), np.array(arr)
    return {"steps": j, "walltime_s": float(fa.max()), "ttft_mean_s": float((np.array(first) - aa).mean()),
            "e2e_mean_s": float((fa - aa).mean()), "output_tokens": int(out_len.sum())}


# --- batch B, closed loop: vectorized in iteration space -----------------------------------------------------------
def closed_vectorized(tb: Tables, prompt: int, tok: np.ndarray, count: np.ndarray, spec: bool, batch: int) -> dict:
    """The closed loop without a per-iteration loop: request i is admitted at the iteration its client frees up
    (FCFS, a heap of free-at iterations), runs count[i] consecutive iterations; per-iteration B and summed context
    are bincounts over request-steps, the clock a cumsum. Assumes the KV reservation never binds (checked)."""
    n = count.size
    out_len = np.add.reduceat(tok, np.cumsum(count) - count) + 1
    need, budget = _kv(tb, prompt, out_len, spec)
    if sum(sorted(need)[-batch:]) > budget:
        raise ValueError("closed_vectorized assumes the KV reservation never binds")
    heap, adm = [0] * min(batch, n), [0] * n
    for i, c in enumerate(count.tolist()):
        a = heapq.heappop(heap)
        adm[i] = a
        heapq.heappush(heap, a + c)
    adm = np.array(adm, dtype=np.int64)
    first = np.cumsum(count) - count
    local = np.arange(tok.size) - np.repeat(first, count)
    it = np.repeat(adm, count) + local
    before = np.cumsum(tok) - tok
    ctx = before - np.repeat(before[first], count) + prompt
    Bj = np.bincount(it)
    Sj = np.bincount(it, weights=ctx).astype(np.int64)  # whole numbers below 2**53: exact
    kj = np.bincount(adm, minlength=Bj.size)
    flat, off = tb.flat(batch, spec)
    pre = np.array([0.0] + [tb.prefill(k, prompt, spec) for k in range(1, batch + 1)])
    dur = flat.take(off[Bj] + Sj - Bj * tb.lo_ctx) + pre[kj]
    end = np.cumsum(dur)
    begin = end - dur
    fin = end[adm + count - 1]
    arr = begin[adm]
    return {"steps": int(Bj.size), "walltime_s": float(fin.max()), "ttft_mean_s": float(pre[kj[adm]].mean()),
            "e2e_mean_s": float((fin - arr).mean()), "output_tokens": int(out_len.sum())}


# --- one run: workload, draws, the speculative run and its baseline -------------------------------------------------
_TABLES: dict = {}
_TRACES: dict = {}


def _trace(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(β of all sequences concatenated, each sequence's start, slot factors 0 … 64): the trace as input data."""
    hit = _TRACES.get(path)
    if hit is None:
        from specsim.traces.format import Trace

        tr = Trace.read(path)
        seqs = tr.sequences()
        starts = np.r_[0, np.cumsum([len(s) for s in seqs])[:-1]].astype(np.int64)
        hit = _TRACES[path] = (np.concatenate(seqs), starts, np.array([tr.slot_factor(k) for k in range(65)]))
    return hit


def _tables(s: dict) -> Tables:
    key = (s["hardware"], s["target"], s["draft"], s["gamma"], s["prompt_len"], s["output_len"])
    tb = _TABLES.get(key)
    if tb is None:
        tb = _TABLES[key] = tables(*key)
    return tb


def draws(s: dict):
    """The acceptance draws of setup `s` (speculative tokens per step and steps per request; the baseline's are
    one token per step) and the arrival times (None in closed loop): the part of a reference before the clock."""
    n, G = s["requests"], s["gamma"]
    owed = np.full(n, s["output_len"] - 1, np.int64)
    seed = s.get("seed", 0)
    if s.get("trace"):
        beta, starts, slot = _trace(s["trace"])
        tok, count = draws_trace(seed, beta, starts, slot[:G], G, owed)
    else:
        tok, count = draws_iid(seed, s["alpha"], G, owed)
    arrival = None
    if s.get("rate"):
        gaps = np.random.default_rng((seed, ARRIVALS_STREAM, 0)).exponential(1.0 / s["rate"], size=n)
        arrival = np.cumsum(gaps) - gaps[0]
    return (tok, count), (np.ones(int(owed.sum()), np.int64), owed), arrival


def open_streams(s: dict) -> list:
    """Only the stream opening of the draws (`default_rng((seed, 2, i))` for every request): ~10–25 µs each, which
    specsim's `rng.StreamFamily` does ~8× cheaper; timed apart so the reports can show a stricter ratio."""
    seed = s.get("seed", 0)
    return [np.random.default_rng((seed, ACCEPTANCE_STREAM, i)) for i in range(s["requests"])]


def reference(s: dict, kernel: str) -> dict:
    """The reference run for setup `s` (SimConfig-like keys; fixed γ, fixed lengths, one replica):
    kernel 'batch1' | 'loop' | 'closed_vectorized'. Returns {'spec': totals, 'baseline': totals}."""
    tb, P = _tables(s), s["prompt_len"]
    spec, base, arrival = draws(s)
    if kernel == "batch1":
        return {"spec": batch1(tb, P, *spec, True), "baseline": batch1(tb, P, *base, False)}
    cap = (s.get("max_batch") or 256) if arrival is not None else s["batch"]  # 256: specsim's open-loop default
    if kernel == "closed_vectorized":
        return {"spec": closed_vectorized(tb, P, *spec, True, cap),
                "baseline": closed_vectorized(tb, P, *base, False, cap)}
    return {"spec": loop(tb, P, *spec, True, cap, arrival), "baseline": loop(tb, P, *base, False, cap, arrival)}


COMPARED = ("steps", "output_tokens", "walltime_s", "ttft_mean_s", "e2e_mean_s")


def check(ref: dict, row: dict, rel: float = 1e-9) -> list[str]:
    """Where the reference disagrees with `specsim.simulate.run`'s row (integers exactly, times to `rel`)."""
    bad = []
    for part, prefix in (("spec", ""), ("baseline", "baseline_")):
        for k in COMPARED:
            if part == "baseline" and k == "output_tokens":
                continue
            a, b = ref[part][k], row[prefix + k]
            ok = a == b if isinstance(a, int) else abs(a - b) <= rel * max(abs(b), 1e-300)
            if not ok:
                bad.append(f"{prefix}{k}: reference {a!r} vs specsim {b!r}")
    return bad
