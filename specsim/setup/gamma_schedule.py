"""choose-draft's load → γ schedule: monotone in load and stable under the simulation's noise.

It lives in the setup stage because the bands policy's default bands are this schedule over simulated fixed-γ
points (`specsim.setup.advice`); choose-draft (`specsim.studies.choose`) and the capacity study use the same rule,
and `specsim.studies.schedule` writes its result as the configs the engines take.

The schedule (`monotone`): load points in ascending order; at each one the candidate γ are those not above the
previous point's (γ never rises with load: non-increasing in batch size or rate), and among them
- the previous point's γ is kept while its speedup is within the tolerance of the best candidate's — the larger of
  GAMMA_TOLERANCE (2%) of that speedup and NOISE_SIGMAS (2) standard errors of the difference — so a band
  boundary moves only where the speedup difference exceeds the noise;
- otherwise the smallest γ within that tolerance of the best (a shorter draft wastes less work), as choose-draft
  has always picked;
- off (γ = 0) where no candidate γ has a speedup > 1, and from there on (monotone: speculation that loses at a
  load is not switched back on at a larger one; a load that does not fit in memory is off too).
The noise (`speedup_noise`): the standard error of τ, the tokens a request-step emits, from the run's own
histogram (`tokens_per_run_hist`, one count per request-step), as a fraction of τ, times the speedup. The paired
baseline runs the same requests with no acceptance draws, so acceptance is what varies; what the tolerance weighs
is the difference of two γ's speedups at one load (same requests, same seed), taken as √(σ₁² + σ₂²). Against the
spread of that difference over six seeds (Llama-3.1-8B + 1B draft, α 0.7, H100, `--stack vllm`, choose-draft's
request counts; γ 2 − γ 1 / γ 3 − γ 2): batch 1 estimated 0.011 / 0.015 vs 0.008 / 0.008 measured, batch 16
0.010 / 0.014 vs 0.017 / 0.013, batch 64 0.005 / 0.006 vs 0.013 / 0.010, batch 128 0.003 / 0.004 vs 0.006 /
0.005: within a factor 3 (low at large batch, where a closed loop's makespan is its busiest slot's); the 2%
floor covers the rest (twice the largest measured spread, 0.027, is 2% of a 1.3× speedup).
"""

from __future__ import annotations

import math

GAMMA_TOLERANCE = 0.02  # prefer the smallest γ within 2% of the best simulated speedup (choose.GAMMA_TOLERANCE)
NOISE_SIGMAS = 2.0  # ... or within twice the standard error of the difference, whichever is larger


def speedup_noise(row: dict) -> float:
    """Standard error of one run's speedup: speedup × SE(τ) / τ from the run's tokens-per-request-step histogram
    (bin i = i + 1 tokens); 0 when the run carries none."""
    hist = row.get("tokens_per_run_hist") or []
    total = math.fsum(hist)
    if total <= 1:
        return 0.0
    mean = math.fsum((i + 1) * h for i, h in enumerate(hist)) / total
    var = max(0.0, math.fsum((i + 1) ** 2 * h for i, h in enumerate(hist)) / total - mean * mean)
    return float(row["speedup"]) * math.sqrt(var / total) / mean


def _gammas(point: dict) -> list[int]:
    """The γ each entry of `speedup_by_gamma` ran: 1..G for a chain, the tree's depth for a tree's one entry."""
    n = len(point["speedup_by_gamma"])
    return [int(point["best_gamma"])] if n == 1 else list(range(1, n + 1))


def tolerance(s_best: float, sd_a: float, sd_b: float) -> float:
    """How far below the best speedup a γ may fall and still count as as good (module docstring)."""
    return max(GAMMA_TOLERANCE * s_best, NOISE_SIGMAS * math.hypot(sd_a, sd_b))


def monotone(points: list[dict]) -> list[int]:
    """The scheduled γ per load point (ascending loads), 0 = off; see the module docstring."""
    out: list[int] = []
    prev: int | None = None
    for p in points:
        if not p.get("fits", True) or prev == 0:
            prev = 0
            out.append(0)
            continue
        s = [float(x) for x in p["speedup_by_gamma"]]
        sd = [float(x) for x in p.get("speedup_noise_by_gamma") or [0.0] * len(s)]
        cand = [i for i, g in enumerate(_gammas(p)) if prev is None or g <= prev]
        cand = [i for i in cand if s[i] > 1.0]
        if not cand:
            prev = 0
            out.append(0)
            continue
        top = max(cand, key=lambda i: s[i])
        near = [i for i in cand if s[i] >= s[top] - tolerance(s[top], sd[i], sd[top])]
        keep = [i for i in near if _gammas(p)[i] == prev]
        i = keep[0] if keep else near[0]
        prev = _gammas(p)[i]
        out.append(prev)
    return out


def scheduled_speedup(point: dict, gamma: int) -> float:
    """The simulated speedup at the scheduled γ (1.0 when off: plain decoding)."""
    if not gamma or not point.get("fits", True):
        return 1.0
    return float(point["speedup_by_gamma"][index_of(point, gamma)])


def index_of(point: dict, gamma: int) -> int:
    """The entry of `speedup_by_gamma` that ran `gamma`."""
    return _gammas(point).index(int(gamma))
