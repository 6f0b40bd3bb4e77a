"""Step tables fitted to an engine's per-step log of runs WITHOUT speculation, used only where they were measured.

Why (issue 24): the vLLM calibration of experiments/vllm_analyze.py fitted fixed knots (1, 2, 4, ... 64) by least
squares to plain runs whose steps carried 1-3 decode tokens and 35-90 prefill tokens, then priced verification steps
of 3-18 tokens in the gap between: the fit said T(4 tokens) < T(1 token) and predicted speculation 11-30% too fast.
Here:
- knots sit at the token counts that were measured (every distinct count, weighted by its number of steps), never
  at counts chosen in advance;
- the table is monotone (more tokens never cost less): a weighted isotonic regression of the per-count medians —
  pool-adjacent-violators as `scipy.optimize.isotonic_regression` implements it (SciPy >= 1.12; Best & Chakravarti,
  Math. Prog. 1990) — so a 3-request decode measured faster than a 1-request one is pooled with it, not turned into
  a cheap verification;
- between knots the time is interpolated linearly; a query at a token count the data do not cover — below the first
  knot, above the last, or inside a gap wider than `MAX_GAP_TOKENS` / `MAX_GAP_FRACTION` of the lower knot — is
  priced (from the nearest covered segment: the end knot's segment continued, flat at a gap's ends' interpolation)
  but COUNTED: `FittedStepTable.unmeasured` says how many steps of a prediction left the measured range and at
  which counts, so a prediction built on unmeasured steps says so in its output;
- each step's KV context (tokens already cached, summed over the step's requests) is kept beside it when the log
  gives it; the table carries the median context per knot and a within-knot slope (seconds per cached token,
  least squares of the deviations from each knot's means, clipped at 0), so a step at a longer context costs more;
- the KV term's measure is chosen per fit (`KV_MEASURES`): "context", the cached tokens summed over the step's
  requests (each request read once), or "attended", the query x key pairs its attention computes (per request new
  tokens x cached tokens + the new tokens' causal pairs): a verification of k + 1 tokens reads its context k + 1
  times, as a decode of k + 1 requests reads theirs, where "context" counts it once (issue 24, session 15);
- no shared per-step overhead is split out of any table: the draft's table is priced as measured (the speculative
  step pays the draft's own step work too, which the split of the old analysis removed).
`check_no_speculation` refuses a run that drafted anything: the calibration never sees a speculative run.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import isotonic_regression

from specsim.cost.ragged import StepTable
from specsim.errors import ConfigError

# Coverage, fixed before any data was looked at: two adjacent knots cover the counts between them when they are at
# most MAX_GAP_TOKENS apart or within MAX_GAP_FRACTION of the lower one (16 -> 20 is covered, 3 -> 35 is not).
MAX_GAP_TOKENS = 2
MAX_GAP_FRACTION = 0.25


def check_no_speculation(run: dict, where: str = "run") -> dict:
    """`run` unchanged if nothing in it speculated; else a ConfigError naming what drafted."""
    cfg = run.get("config") or {}
    spec = run.get("spec") or {}
    why = []
    if cfg.get("speculative_config"):
        why.append(("config.speculative_config", cfg["speculative_config"]))
    if _positive(cfg.get("k")):
        why.append(("config.k", cfg["k"]))
    if _positive(spec.get("drafts")) or _positive(spec.get("draft_tokens")):
        why.append(("spec.drafts", spec.get("drafts")))
    for i, r in enumerate(run.get("request_spec") or []):
        if (r or {}).get("per_step_drafted"):
            why.append((f"request_spec[{i}].per_step_drafted", len(r["per_step_drafted"])))
            break
    for i, ch in enumerate(run.get("final_chunks") or []):
        sd = (((ch or {}).get("metrics") or {}).get("speculative_decoding") or {})
        if sd.get("num_draft_tokens") or sd.get("per_step_drafted"):
            why.append((f"final_chunks[{i}].metrics.speculative_decoding", sd.get("num_draft_tokens")))
            break
    if why:
        f, v = why[0]
        raise ConfigError("a speculative run cannot calibrate a step table (calibration sees runs without "
                          "speculation only)", file=where, field=f, value=v, allowed="a run that drafted nothing")
    return run


def _positive(v) -> bool:
    """A count that says something was drafted: a number > 0 (anything that is not a number is not a count and is
    refused where it matters, by vllm_runs.run_config and vllm_outputs.check_counters)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _step_number(s, i: int, key: str, where, integer: bool) -> float:
    v = s.get(key) if isinstance(s, dict) else None
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not np.isfinite(v) or v < 0:
        raise ConfigError(f"a step without a valid {key}", file=where, field=f"steps[{i}].{key}", value=v,
                          allowed="an integer >= 0" if integer else "seconds >= 0")
    return float(v)


KV_MEASURES = ("context", "attended")  # what the KV slope multiplies (module docstring)


def _check_measure(kv: str) -> str:
    if kv not in KV_MEASURES:
        raise ConfigError("unknown KV measure", file="step table", field="kv", value=kv, allowed=str(KV_MEASURES))
    return kv


def step_kv(s: dict, i: int = 0, where="steps", kv: str = "context") -> float:
    """A logged step's KV measure: "context" is kv_ctx_tokens; "attended" is kv_attended_tokens where logged, else
    derived where the log determines it (one request: T x context + T(T+1)/2; a pure one-token decode of R
    requests: context + R); NaN where it is not logged or not determined (a chunk beside decodes in an older log)."""
    if _check_measure(kv) == "attended" and s.get("kv_attended_tokens") is not None:
        return _step_number(s, i, "kv_attended_tokens", where, True)
    if s.get("kv_ctx_tokens") is None:
        return float("nan")
    c = _step_number(s, i, "kv_ctx_tokens", where, True)
    if kv == "context":
        return c
    T = _step_number(s, i, "ctx_tokens", where, True) + _step_number(s, i, "gen_tokens", where, True)
    if s.get("ctx_requests", 0) + s.get("gen_requests", 0) == 1:
        return T * c + T * (T + 1) / 2
    if s.get("ctx_requests", 0) == 0 and s.get("gen_tokens") == s.get("gen_requests"):
        return c + T
    return float("nan")


def attended_pairs(new, ctx) -> float:
    """Query x key pairs of a step: sum over requests of new x cached + new(new + 1)/2 (exact sum, no BLAS)."""
    n, c = np.asarray(new, float), np.asarray(ctx, float)
    return math.fsum((n * c + n * (n + 1) / 2).tolist())


@dataclass
class StepSamples:
    """Per-step samples of one model served alone: tokens scheduled, time, KV measure (NaN where not logged)."""

    tokens: np.ndarray
    time_s: np.ndarray
    ctx_tokens: np.ndarray
    kv_measure: str = "context"
    left_out: int = 0  # steps whose attended pairs an older log does not determine (kv="attended" only)

    @classmethod
    def from_steps(cls, steps: list[dict], where: str = "steps", kv: str = "context") -> StepSamples:
        """From step dicts with ctx_tokens + gen_tokens (the per-step log's prefill and decode tokens), time_s and
        optionally kv_ctx_tokens (the cached tokens the step read) and kv_attended_tokens. With kv="attended" a
        step whose pairs the log does not determine is left out (counted in `left_out`) where others have them."""
        tok = np.array([_step_number(s, i, "ctx_tokens", where, True) + _step_number(s, i, "gen_tokens", where, True)
                        for i, s in enumerate(steps)], float)
        ts = np.array([_step_number(s, i, "time_s", where, False) for i, s in enumerate(steps)], float)
        kvs = np.array([step_kv(s, i, where, kv) for i, s in enumerate(steps)], float)
        keep = tok > 0
        left = 0
        if kv == "attended" and np.isfinite(kvs[keep]).any():
            left = int((keep & ~np.isfinite(kvs)).sum())
            keep &= np.isfinite(kvs)
        if not keep.any():
            raise ConfigError("no steps with tokens to fit", file=where, field="steps", value=len(steps),
                              allowed="a per-step log of at least two distinct token counts")
        if not np.isfinite(ts[keep]).all() or (ts[keep] <= 0).any():
            raise ConfigError("a step time that is not a positive number", file=where, field="time_s",
                              value=float(ts[keep][~(np.isfinite(ts[keep]) & (ts[keep] > 0))][0]),
                              allowed="seconds > 0")
        return cls(tok[keep], ts[keep], kvs[keep], kv, left)


def covered(knots: np.ndarray) -> np.ndarray:
    """Per segment between adjacent knots: whether the data cover the counts inside it."""
    a, b = knots[:-1], knots[1:]
    return (b - a <= MAX_GAP_TOKENS) | (b - a <= MAX_GAP_FRACTION * a)


@dataclass
class Unmeasured:
    """Steps a prediction priced outside the measured range: how many, at which counts."""

    below: int = 0
    above: int = 0
    gap: int = 0
    queries: int = 0
    tokens: set = field(default_factory=set)

    @property
    def steps(self) -> int:
        return self.below + self.above + self.gap

    def summary(self) -> dict:
        t = sorted(self.tokens)
        return {"unmeasured_steps": self.steps, "priced_steps": self.queries, "unmeasured_below": self.below,
                "unmeasured_above": self.above, "unmeasured_in_gaps": self.gap,
                "unmeasured_token_counts": (t if len(t) <= 12 else t[:6] + ["..."] + t[-6:]),
                "extrapolated": self.steps > 0}


class FittedStepTable(StepTable):
    """A monotone step table with knots at measured counts that counts every price it had to guess."""

    def __init__(self, tokens, time_s, ctx_tokens, steps, raw_median_s, kv_slope_s_per_token: float,
                 where: str = "fitted step table", monotone: bool = True, kv_measure: str = "context",
                 left_out: int = 0):
        super().__init__(tokens, time_s, where=where, envelope=monotone)
        self.monotone = bool(monotone)
        self.kv_measure, self.left_out = _check_measure(kv_measure), int(left_out)
        self.ctx_tokens = np.asarray(ctx_tokens, float)
        self.steps = np.asarray(steps, np.int64)
        self.raw_median_s = np.asarray(raw_median_s, float)
        self.kv_slope_s_per_token = float(kv_slope_s_per_token)
        self.covered = covered(self.tokens)
        self.unmeasured = Unmeasured()

    def classify(self, T: float) -> str:
        """'in', 'below', 'above' or 'gap' for a step of T tokens."""
        t = self.tokens
        if T < t[0]:
            return "below"
        if T > t[-1]:
            return "above"
        j = int(np.searchsorted(t, T, side="left"))
        if t[j] == T:
            return "in"
        return "in" if self.covered[j - 1] else "gap"

    def time_at(self, T: float, ctx: float | None = None, count: bool = True) -> float:
        """Seconds for a step of T tokens (at KV context ctx); counted in `unmeasured` unless count=False (a
        caller that counts the step itself)."""
        where = self.classify(T)
        if count:
            self.unmeasured.queries += 1
            if where != "in":
                setattr(self.unmeasured, where, getattr(self.unmeasured, where) + 1)
                self.unmeasured.tokens.add(int(T))
        t, s = self.tokens, self.time_s
        if where == "below":
            base = float(s[0])  # no step is cheaper than the smallest measured one (monotone)
        elif where == "above":  # continued along the last segment, never falling (a table fitted with dips may)
            base = float(s[-1] + max(0.0, (s[-1] - s[-2]) / (t[-1] - t[-2])) * (T - t[-1]))
        else:
            base = StepTable.time_at(self, T)
        if ctx is None or self.kv_slope_s_per_token == 0.0 or not np.isfinite(self.ctx_tokens).all():
            return base
        ref = float(np.interp(T, t, self.ctx_tokens))
        return max(0.5 * base, base + self.kv_slope_s_per_token * (ctx - ref))

    def kv_of(self, new: np.ndarray, ctx: np.ndarray) -> float:
        """The step's KV measure from its requests' new and cached tokens, as the table was fitted."""
        if self.kv_measure == "attended":
            return attended_pairs(new, ctx)
        return math.fsum(np.asarray(ctx, float).tolist())

    def price(self, new: np.ndarray, ctx: np.ndarray, logits=None) -> tuple[float, float, float]:
        """`logits` (positions per request) is not read: a token-only table has no axis for it."""
        T = float(np.sum(new))
        if T <= 0:
            return 0.0, 0.0, 0.0
        return self.time_at(T, self.kv_of(new, ctx)), 0.0, 0.0

    def describe(self) -> str:
        """One line: how the table was fitted, its KV slope, measured range and uncovered gaps."""
        gaps = [f"{int(a)}-{int(b)}" for a, b, c in zip(self.tokens[:-1], self.tokens[1:], self.covered) if not c]
        fit = "monotone (isotonic) fit" if self.monotone else "per-count medians as measured (dips kept)"
        kv = "query x key pairs" if self.kv_measure == "attended" else "cached tokens"
        left = f" ({self.left_out} steps of an older log without them left out)" if self.left_out else ""
        return (f"knots at measured token counts, {fit}; kv_slope_s_per_token ({kv}{left}): "
                f"{self.kv_slope_s_per_token:.6g}; measured range {int(self.tokens[0])}-{int(self.tokens[-1])}"
                f" tokens; uncovered gaps: {', '.join(gaps) or 'none'}")

    COLUMNS = ("tokens", "time_s", "ctx_tokens", "steps", "raw_median_s")

    def rows(self) -> list[list[str]]:
        """Per knot: tokens, fitted time, median context, step count, raw median (the CSV's columns)."""
        return [[str(int(a)), f"{b:.6g}", "" if not np.isfinite(c) else f"{c:.6g}", str(int(n)), f"{r:.6g}"]
                for a, b, c, n, r in zip(self.tokens, self.time_s, self.ctx_tokens, self.steps, self.raw_median_s)]

    def write_csv(self, path: str | Path, comment: str = "") -> Path:
        """tokens,time_s (what `StepTable.read_csv` and `specsim simulate --step-table-*` read), then the context,
        the step count and the raw median per knot, the KV slope and the coverage in `#` comments."""
        p = Path(path)
        with open(p, "w", newline="", encoding="utf-8") as fh:
            for line in (comment.splitlines() if comment else []):
                fh.write(f"# {line}\n")
            fh.write(f"# {self.describe()}\n")
            w = csv.writer(fh)
            w.writerow(self.COLUMNS)
            w.writerows(self.rows())
        return p


def _kv_slope(tok: np.ndarray, ts: np.ndarray, kv: np.ndarray) -> float:
    """Seconds per cached token from the deviations within each token count (no BLAS: fsum of products)."""
    if not np.isfinite(kv).all():
        return 0.0
    num, den = [], []
    for T in np.unique(tok):
        m = tok == T
        if m.sum() < 2:
            continue
        dc, dt = kv[m] - kv[m].mean(), ts[m] - ts[m].mean()
        num.extend((dc * dt).tolist())
        den.extend((dc * dc).tolist())
    d = math.fsum(den)
    return max(0.0, math.fsum(num) / d) if d > 0 else 0.0


def fit_step_table(samples: StepSamples, where: str = "fitted step table", monotone: bool = True) -> FittedStepTable:
    """Knots at every measured count; per knot the median step time (robust to a host's hiccups) weighted by its
    step count; isotonic regression (monotone=False: the per-count medians as measured, dips kept); the KV slope
    from within-knot deviations."""
    tok, ts, kv = samples.tokens, samples.time_s, samples.ctx_tokens
    knots = np.unique(tok)
    if knots.size < 2:
        raise ConfigError("a step table needs steps at two or more distinct token counts", file=where,
                          field="tokens", value=knots.tolist(), allowed=">= 2 distinct counts")
    slope = _kv_slope(tok, ts, kv)
    med = np.array([float(np.median(ts[tok == T])) for T in knots])
    n = np.array([int((tok == T).sum()) for T in knots])
    ctx = np.array([float(np.median(kv[tok == T])) for T in knots]) if np.isfinite(kv).all() \
        else np.full(knots.size, np.nan)
    fit = isotonic_regression(med, weights=n.astype(float), increasing=True).x if monotone else med
    return FittedStepTable(knots, np.maximum(fit, 1e-9), ctx, n, med, slope, where=where, monotone=monotone,
                           kv_measure=samples.kv_measure, left_out=samples.left_out)
