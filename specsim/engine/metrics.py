"""What a run produced, and the serving metrics computed from it (named as vLLM / serving benchmarks name them).

Definitions (spec run and baseline alike):
- TTFT: arrival → output token 0, which the target's prefill produces (queueing + prefill; the prefill of the
  requests admitted together is one pass that stalls the running batch for its duration).
- TPOT: (finish − first token) / (output tokens − 1), per request (requests with one output token have none).
- ITL: gaps between successive emissions of one request (first token, then the end of every iteration it took
  part in). With speculation several tokens arrive in one emission, as in vLLM's benchmark.
- E2E latency: arrival → last token. In closed loop, arrival = the moment the client issued the request.
- Output throughput: output tokens / makespan (t = 0 to the last finish). Goodput: requests meeting both SLOs
  (TTFT ≤ slo_ttft_s and TPOT ≤ slo_tpot_s) per second of makespan.
- τ (tokens_per_target_run, vLLM's mean acceptance length): mean over request-steps of accepted + 1, before the
  truncation at the request's end, so under i.i.d. β it estimates eq. (1) without end effects.
- draft acceptance rate = accepted / drafted (the request's own γ); acceptance by position k = P(slot k accepted |
  slot k drafted and reached).
- MBU / MFU: per iteration, bytes / (duration · peak bandwidth) and FLOPs / (duration · peak FLOP/s) per chip,
  then the mean over iterations (datasheet peaks, not the stack's achievable fractions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import NamedTuple

import numpy as np

PCTS = (50, 90, 99)


class StepRow(NamedTuple):
    """One iteration that ran a decode step, as the engines log it."""

    end_s: float
    dur_s: float
    batch: int  # requests in the step
    gamma: int  # draft passes (the batch's largest γ)
    bytes: float
    flops: float


class RequestStep(NamedTuple):
    """One request's part in one iteration (the step-by-step engine profiles log these)."""

    step: int  # index of the iteration's StepRow
    request: int
    accepted: int
    gamma: int  # the request's own γ


def step_columns(rows: list) -> dict:
    """The `Records` step_* arrays from a list of StepRows (or plain tuples in its field order), by field name."""
    k = len(StepRow._fields)
    st = np.fromiter(chain.from_iterable(rows), float, count=k * len(rows)).reshape(-1, k)
    c = dict(zip(StepRow._fields, st.T))
    return {"step_end_s": c["end_s"], "step_dur_s": c["dur_s"], "step_batch": c["batch"].astype(np.int64),
            "step_gamma": c["gamma"].astype(np.int64), "step_bytes": c["bytes"], "step_flops": c["flops"]}


def request_step_columns(rows: list) -> dict:
    """The `Records` rs_* arrays from RequestSteps, sorted by request, then step."""
    rs = np.array(rows, dtype=np.int64).reshape(-1, len(RequestStep._fields))
    rs = rs[np.lexsort((rs[:, 0], rs[:, 1]))]
    c = dict(zip(RequestStep._fields, rs.T))
    return {"rs_step": c["step"], "rs_request": c["request"], "rs_accepted": c["accepted"], "rs_gamma": c["gamma"]}


@dataclass
class Records:
    """Raw outcome of one engine run (numpy arrays; time in seconds, or in units under fixed_c)."""

    arrival_s: np.ndarray
    admit_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_len: np.ndarray
    # one row per iteration that ran a decode step
    step_end_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_dur_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_batch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_gamma: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # passes' γ (batch max)
    step_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_flops: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # one row per (iteration, active request), sorted by request, then step
    rs_step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rs_request: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rs_accepted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rs_gamma: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the request's own γ

    def accepted_by_request(self) -> list[np.ndarray]:
        """Per request, its accepted counts step by step (what the fast path must reproduce)."""
        order = np.argsort(self.rs_request, kind="stable")
        r = self.rs_request[order]
        cuts = np.flatnonzero(np.diff(r)) + 1
        groups = np.split(self.rs_accepted[order], cuts)
        ids = r[np.r_[0, cuts]] if len(r) else []
        out = [np.zeros(0, np.int64)] * len(self.output_len)
        for i, g in zip(ids, groups):
            out[int(i)] = g
        return out


def emissions(rec: Records, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Request i's emission times and tokens per emission: output token 0 at the prefill, then each step it took
    part in (accepted + 1 tokens, the last one truncated to the request's length)."""
    rows = np.flatnonzero(rec.rs_request == i)
    tok = rec.rs_accepted[rows] + 1
    owed = int(rec.output_len[i]) - 1
    cum = np.minimum(np.cumsum(tok), owed)
    tok = np.diff(np.r_[0, cum])
    return np.r_[rec.first_token_s[i], rec.step_end_s[rec.rs_step[rows]]], np.r_[1, tok].astype(np.int64)


_Q = tuple(p / 100 for p in PCTS)  # = np.true_divide(PCTS, 100), what np.percentile uses


def percentiles(x: np.ndarray) -> list[float]:
    """`np.percentile(x, PCTS)` (method 'linear') for a 1-D float array without NaN, bit for bit, from one sort.

    numpy's recipe, done in Python floats (IEEE doubles, so the same roundings): virtual index v = (n − 1)·q,
    i = ⌊v⌋, g = v − i; below g = 0.5 the value is a + (b − a)·g, from 0.5 on it is b − (b − a)·(1 − g), where a, b
    are the i-th and (i+1)-th smallest values; at v ≥ n − 1 it is the largest value. (np.percentile costs ~30 µs
    per call in argument handling; sweeps call this 24 times per point.) tests/test_metrics.py checks it."""
    n1 = x.size - 1
    vs = [n1 * q for q in _Q]
    if x.size > 64:  # only the order statistics used need to be in place (as np.percentile does)
        kth = sorted({n1} | {min(int(v // 1) + k, n1) for v in vs for k in (0, 1)})
        xs = np.partition(x, kth)
    else:
        xs = np.sort(x)
    out = []
    for v in vs:
        if v >= n1:
            out.append(float(xs[n1]))
            continue
        i = int(v // 1)
        g = v - i
        a, b = float(xs[i]), float(xs[i + 1])
        d = b - a
        out.append(b - d * (1 - g) if g >= 0.5 else a + d * g)
    return out


def _pct(prefix: str, x: np.ndarray, out: dict) -> None:
    x = x[np.isfinite(x)]
    out[f"{prefix}_mean_s"] = float(np.add.reduce(x) / x.size) if x.size else None  # = x.mean(), less overhead
    vals = percentiles(x) if x.size else [None] * len(PCTS)
    for p, v in zip(PCTS, vals):
        out[f"{prefix}_p{p}_s"] = v


def itl_gaps(rec: Records, with_requests: bool = False):
    """Gaps between a request's consecutive emissions (its first after the prefill token), request by request;
    with `with_requests`, also the request of each gap."""
    if rec.rs_request.size == 0:
        return (np.zeros(0), np.zeros(0, np.int64)) if with_requests else np.zeros(0)
    r, st = rec.rs_request, rec.rs_step
    if not bool((r[1:] >= r[:-1]).all()):  # Records come sorted by request, then step (sort only if not)
        order = np.argsort(r, kind="stable")
        r, st = r[order], st[order]
    t = rec.step_end_s[st]
    prev = np.concatenate(([np.nan], t[:-1]))
    first = np.concatenate(([True], r[1:] != r[:-1]))
    prev[first] = rec.first_token_s[r[first]]
    return (t - prev, r) if with_requests else t - prev


def latency_metrics(rec: Records, slo_ttft_s: float, slo_tpot_s: float, warmup_s: float = 0.0) -> dict:
    """Latency percentiles, SLO attainment and goodput of the requests arriving at or after `warmup_s` (all of
    them at 0: a run starts from an empty engine, so its first requests see no queue — a steady-state figure
    leaves them out, as serving benchmarks' warm-up does); makespan and throughput always cover the whole run."""
    out: dict = {}
    ttft = rec.first_token_s - rec.arrival_s
    e2e = rec.finish_s - rec.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(rec.output_len > 1, (rec.finish_s - rec.first_token_s) / (rec.output_len - 1), np.nan)
    out_len, queue = rec.output_len, rec.admit_s - rec.arrival_s
    if warmup_s > 0:
        keep = rec.arrival_s >= warmup_s
        ttft, e2e, tpot, out_len, queue = ttft[keep], e2e[keep], tpot[keep], out_len[keep], queue[keep]
        gaps, req = itl_gaps(rec, with_requests=True)
        gaps = gaps[keep[req]]
    else:
        gaps = itl_gaps(rec)
    _pct("ttft", ttft, out)
    _pct("tpot", tpot, out)
    _pct("itl", gaps, out)
    _pct("e2e", e2e, out)
    makespan = float(rec.finish_s.max()) if rec.finish_s.size else 0.0
    out["walltime_s"] = makespan
    tokens = int(rec.output_len.sum())
    out["output_tokens"] = tokens
    out["throughput_tok_s"] = tokens / makespan if makespan > 0 else None
    ok = (ttft <= slo_ttft_s) & ((out_len <= 1) | (tpot <= slo_tpot_s))
    window = makespan - warmup_s
    out["goodput_req_s"] = float(ok.sum()) / window if window > 0 else None
    out["slo_attained"] = float(ok.mean()) if ok.size else None
    out["queue_mean_s"] = float(np.mean(queue)) if queue.size else None
    return out


def utilisation(rec: Records, peak_bytes_s: float | None, peak_flops: float | None):
    """Per-step (MBU, MFU) arrays: bytes / (duration · peak bandwidth), FLOPs / (duration · peak); None without
    peaks or steps. `step_metrics` averages them; the power model (`cost.power.run_energy`) takes the same ratios
    per part of a step (draft passes, verification), from whatever cost basis priced the bytes and FLOPs."""
    if not peak_bytes_s or not rec.step_dur_s.size:
        return None
    return rec.step_bytes / (rec.step_dur_s * peak_bytes_s), rec.step_flops / (rec.step_dur_s * peak_flops)


def step_metrics(rec: Records, peak_bytes_s: float | None, peak_flops: float | None, util=None) -> dict:
    out: dict = {"steps": int(rec.step_end_s.size)}
    out["batch_mean"] = float(rec.step_batch.mean()) if rec.step_batch.size else None
    out["batch_max"] = int(rec.step_batch.max()) if rec.step_batch.size else 0
    if peak_bytes_s and rec.step_dur_s.size:
        mbu, mfu = util if util is not None else utilisation(rec, peak_bytes_s, peak_flops)
        out["mbu_mean"] = float(np.mean(mbu))
        out["mfu_mean"] = float(np.mean(mfu))
    else:
        out["mbu_mean"] = out["mfu_mean"] = None
    return out


def acceptance_metrics(rec: Records) -> dict:
    n, g = rec.rs_accepted, rec.rs_gamma
    out: dict = {"target_runs": int(rec.step_end_s.size), "request_steps": int(n.size)}
    if n.size == 0:
        out.update(tokens_per_target_run=None, gamma_mean=None, draft_acceptance_rate=None,
                   acceptance_by_position=[], tokens_per_run_hist=[], draft_passes=0)
        return out
    out["tokens_per_target_run"] = float(n.mean() + 1.0)
    out["gamma_mean"] = float(g.mean())
    drafted = int(g.sum())
    out["draft_acceptance_rate"] = float(n.sum() / drafted) if drafted else None
    gmax = int(g.max())
    hist = np.bincount(n, minlength=gmax + 1)
    out["tokens_per_run_hist"] = hist.tolist()  # index j ↔ j + 1 tokens
    ge = np.cumsum(hist[::-1])[::-1]  # ge[k] = #{n >= k}
    clean_at = np.bincount(n[n == g], minlength=gmax + 1)  # clean sweeps end with n = γ: slot γ not drafted
    reached = ge[:gmax] - clean_at[:gmax]
    accepted = ge[1:gmax + 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["acceptance_by_position"] = [float(a / r) if r else None for a, r in zip(accepted, reached)]
    out["draft_passes"] = int(rec.step_gamma.sum())
    return out
