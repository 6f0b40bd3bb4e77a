"""Does a replica count keep up with its load? The plan's check, on top of its SLOs (issue 21).

An open-loop run always ends: every request finishes eventually, so its latency percentiles can look fine on a
system that serves a third of what arrives (a TPOT objective, say, is met by whoever gets into the batch). The
planner therefore runs each point through `run_point`, which adds to the simulation row, for the speculative run
and (prefixed `baseline_`) its paired baseline, over the measured window [warm-up, last arrival] and its two
halves:

- `served_tok_s`: output tokens emitted in the second half per second, each request's tokens after the first spread
  evenly over its decode (first token → finish; every engine's records carry those times);
  `offered_tok_s`: output tokens of the requests arriving in the second half, per second;
  `served_ratio` = served / offered. Both count the same tokens, so the ratio differs from 1 by the change in the
  tokens still owed (the backlog) between the half's two ends: it stays near 1 while the replicas keep up and
  falls to μ/λ when they do not;
- `served_noise`: that ratio's sampling noise — √(Σ remaining² of the requests in flight at the two ends) over
  the offered tokens (a compound-Poisson backlog's spread): a few heavy-tailed requests in flight move a short
  run's ratio by tens of percent, which is not a shortfall;
- `ttft_growth_s_per_s`: mean TTFT of the second half's arrivals minus the first half's, per second between the
  halves' mean arrival times. While they keep up it stays at ~0 (±0.001 in runs from 50 to 3,840 requests); a queue that
  grows by a fraction f of what arrives makes it ≈ f.

A point keeps up iff `served_ratio ≥ 1 − SERVED_TOL − NOISE_SIGMAS · served_noise` and
`ttft_growth_s_per_s ≤ QUEUE_GROWTH_MAX`; `why_not_keeping_up` says which failed, with its figures.

Before simulating, `replica_bounds` brackets the count from the step costs alone (the planner starts its search
there; every answer is still simulated, and so is the count below it):
- lower: fewer replicas serve less than what arrives even in the best case — every step at max_batch and the
  shortest context, prefills free, the speculative steps at the most efficient γ with eq. (1)'s mean tokens per
  step (the mean, not a worst case: at that count the queue grows in expectation);
- stable: that many replicas serve more than what arrives even in the worst case — every step at the longest
  context, the batch the KV reservation holds of the largest requests, one token per request per step, γ_max
  with every request catching up, and a prefill alone at the longest prompt for every request (so the queue drains
  in expectation; the SLOs may still need more);
- likely: where the search starts — the count whose replicas serve the offered tokens at a mean-value estimate
  (max_batch at the mean context, eq. (1)'s tokens per step, every request's prefill priced alone at the mean
  prompt); never below `lower`. It is only a guess: each answer and the count below it are simulated anyway.
"""

from __future__ import annotations

import math

import numpy as np

SERVED_TOL = 0.05  # served throughput may fall short of offered by 5 % (beyond the run's sampling noise)
NOISE_SIGMAS = 2.0  # ... and by twice its sampling noise (tokens in flight at the half's ends)
QUEUE_GROWTH_MAX = 0.01  # TTFT may grow by 10 ms per second of arrivals (≈ 1 % of the load left waiting)
KEYS = ("served_tok_s", "offered_tok_s", "served_ratio", "served_noise", "ttft_growth_s_per_s")


def _emitted(rec, t: float) -> np.ndarray:
    """Per request, output tokens emitted by time t: token 0 at the first token, the rest evenly to the finish."""
    first, fin, n = rec.first_token_s, rec.finish_s, rec.output_len
    span = fin - first
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(span > 0, np.clip((t - first) / span, 0.0, 1.0), (t >= fin).astype(float))
    return (first <= t) * 1.0 + (n - 1) * frac


def keepup(rec, warmup_s: float = 0.0) -> dict:
    """The keep-up figures of one run's records (see the module docstring); None where the window is empty."""
    arr, n = rec.arrival_s, rec.output_len
    none = dict.fromkeys(KEYS)
    if arr.size < 4 or not np.isfinite(arr).all():  # closed loop has no arrivals to keep up with
        return none
    b = float(arr.max())
    a = warmup_s if warmup_s < b else float(arr.min())
    a = max(a, float(arr.min()))
    m = 0.5 * (a + b)
    second = (arr > m) & (arr <= b)
    first = (arr >= a) & (arr <= m)
    offered = math.fsum(n[second].tolist())
    if b <= m or offered <= 0 or not first.any():
        return none
    em, eb = _emitted(rec, m), _emitted(rec, b)
    served = math.fsum((eb - em).tolist())
    owed_m = np.where(arr <= m, n - em, 0.0)
    owed_b = np.where(arr <= b, n - eb, 0.0)
    noise = math.sqrt(math.fsum((owed_m * owed_m).tolist()) + math.fsum((owed_b * owed_b).tolist())) / offered
    ttft = rec.first_token_s - arr

    def mean(x, k):
        return math.fsum(x[k].tolist()) / int(k.sum())

    growth = (mean(ttft, second) - mean(ttft, first)) / (mean(arr, second) - mean(arr, first))
    return {"served_tok_s": served / (b - m), "offered_tok_s": offered / (b - m), "served_ratio": served / offered,
            "served_noise": noise, "ttft_growth_s_per_s": growth}


def run_point(cfg) -> dict:
    """The plan's point function: the simulation row plus the keep-up figures of both runs."""
    from specsim.engine.simpy_engine import reuse_baselines
    from specsim.simulate import simulate

    with reuse_baselines(3):  # the candidates at one (option, rate, replicas) share one plain-decoding run
        res = simulate(cfg)
    row = dict(res.summary)
    warm = cfg.slo.slo_warmup_s
    row.update(keepup(res.spec, warm))
    row.update({f"baseline_{k}": v for k, v in keepup(res.baseline, warm).items()})
    return row


def why_not_keeping_up(row: dict, prefix: str = "") -> str | None:
    """None when the run (prefix "" = speculative, "baseline_" = plain) keeps up; else the reason, with figures.
    A row without the figures (a closed loop, an arrivals log of under 4 requests) is not judged."""
    ratio, noise, growth = (row.get(prefix + k) for k in ("served_ratio", "served_noise", "ttft_growth_s_per_s"))
    if ratio is None or growth is None:
        return None
    floor = 1.0 - SERVED_TOL - NOISE_SIGMAS * (noise or 0.0)
    out = []
    if ratio < floor:
        out.append(f"serves {ratio:.0%} of the offered tokens (needs ≥ {max(floor, 0):.0%}: {1 - SERVED_TOL:.0%} "
                   f"less {NOISE_SIGMAS:g}× noise {noise:.1%})")
    if growth > QUEUE_GROWTH_MAX:
        out.append(f"TTFT grows {growth:.3g} s per s over the run (limit {QUEUE_GROWTH_MAX:g})")
    return ("does not keep up: " + "; ".join(out)) if out else None


def replica_bounds(cfg, plain: bool) -> tuple[int, int, int | None]:
    """(lower, likely, stable) replica counts for `cfg`'s offered load (its replicas ignored), from its step costs
    (the module docstring says what each is); plain: the paired baseline's. (1, 1, None) where none holds: a closed
    loop, fixed_c (its times are in target passes, its rate in requests per second), a token tree."""
    from specsim.simulate import resolved

    s = resolved(cfg)
    wl, costs = s.workload, s.costs
    span = float(wl.arrival_s.max() - wl.arrival_s.min()) if wl.n > 1 else 0.0
    if wl.mode == "closed" or costs.fixed_c is not None or span <= 0 or (not plain and costs.tree is not None):
        return 1, 1, None
    offered = math.fsum(wl.output_len.tolist()) / wl.n * (wl.n - 1) / span  # tokens/s: rate × mean output
    best = _best_tok_s(s, plain)
    worst = _worst_tok_s(s, plain)
    lower = max(1, math.ceil(offered / best))
    likely = max(lower, math.ceil(offered / _mean_tok_s(s, plain)))
    stable = None if worst is None else max(lower, math.floor(offered / worst) + 1)
    return lower, likely, stable


def _gammas(s, B: int) -> tuple:
    """The γ a step at live batch B uses: the policy's one γ, its γ for that batch, or (unknown) every γ."""
    pol = s.policy
    G = pol.fixed_gamma if pol.fixed_gamma is not None else getattr(pol, "gamma_at", lambda b: None)(B)
    return (G,) if G is not None else tuple(range(1, pol.max_gamma + 1))


def _mean_tok_s(s, plain: bool) -> float:
    """One replica's throughput at a mean-value estimate: max_batch at the mean context, each request's prefill
    alone at the mean prompt (the start of the search, not a bound)."""
    from specsim import theory

    wl, costs = s.workload, s.costs
    B = int(wl.max_batch)
    P, Out = float(wl.prompt_len.mean()), float(wl.output_len.mean())
    L, X = P + Out / 2, (P if costs.enc_dec else 0.0)
    prefill = costs.prefill(1, P, not plain)[0]
    if plain:
        return B / (costs.plain_step(B, L, X)[0] + B / Out * prefill)
    return max(B * theory.expected_tokens(s.acceptance.alpha, g) / (costs.spec_step(B, g, L, X)[0] + B / Out * prefill)
               for g in _gammas(s, B))


def _best_tok_s(s, plain: bool) -> float:
    """One replica's best-case mean throughput: max_batch, the shortest context, the most efficient γ."""
    from specsim import theory

    wl, costs = s.workload, s.costs
    B, L = int(wl.max_batch), float(wl.prompt_len.min())
    X = L if costs.enc_dec else 0.0
    if plain:
        return B / costs.plain_step(B, L, X)[0]
    return max(B * theory.expected_tokens(s.acceptance.alpha, g) / costs.spec_step(B, g, L, X)[0]
               for g in _gammas(s, B))  # the batch's γ, or the best of any


def _worst_tok_s(s, plain: bool) -> float | None:
    """One replica's worst-case throughput while its queue is not empty (None: not even one request fits)."""
    wl, costs = s.workload, s.costs
    mem = s.mem_base if plain else s.mem_spec
    P, Out = int(wl.prompt_len.max()), int(wl.output_len.max())
    B = int(wl.max_batch)
    if mem is not None:
        B = min(B, int(mem.kv_budget // float(mem.request_bytes(np.array([P]), np.array([Out]))[0])))
    if B < 1:
        return None
    L = float(P + Out)
    X = float(P) if costs.enc_dec else 0.0
    G = s.policy.max_gamma
    step = costs.plain_step(B, L, X)[0] if plain else costs.spec_step(B, G, L, X, B)[0]
    prefill = costs.prefill(1, P, not plain)[0]
    # per step B tokens; B / (mean output) requests finish per step, each with its own prefill
    per_req = math.fsum(wl.output_len.tolist()) / wl.n
    return B / (step + B / per_req * prefill)
