"""A step table over (tokens, requests): one request's line plus what more requests add, both measured.

Why (issue 24, session 12's diagnosis, docs/validation.md): one token axis prices 4 requests x 1 token (a
decode) and 1 request x 4 tokens (a prefill chunk, or a verification's 4 tokens) alike, and the calibration
measures both: decodes of C requests (cal-decC) and one request's prefill in chunks (cal-chunkN). Their steps
were pooled per token count, so the table a verification step read at T tokens was a mixture of the two
families in the proportions the calibration happened to run, and the residual errors of the lockstep campaign
had the shape of that mixture (concurrency 2 priced slow, 4 fast, for every k).

The model, fixed before it was scored (the same rule for target and draft):
    t(T, R) = t1(T) + [td(R) - t1(R)]
- t1: steps of exactly one request (its prefill chunks, its one-token decodes), a `FittedStepTable` over tokens;
- td: pure decode steps (R requests, one token each), a `FittedStepTable` over requests (= tokens);
- the bracket is what R requests cost beyond one request at the same token count, measured where both families
  were; a step's cost is additive in a token term and a request term (t = g(T) + h(R) gives exactly this).
A one-request step reads t1 alone, a pure decode td alone; every other step (a verification, a multi-request
prefill, a mixed step) reads both. A step whose T is outside t1's measured range, or whose R is outside td's or
t1's, is priced and counted in `unmeasured`, as `FittedStepTable` counts. Multi-request prefill steps (the first
step of every cal-decC run) are in neither family: `holdout` scores the rule on them, a check no fit saw.

Logit positions (session 20): a decode of N requests differs from one request's N-token chunk by N - 1 logit
positions (vLLM computes logits at each request's last scheduled token, and at every position of a request that
verifies drafts: `v1/worker/gpu_model_runner.py _calc_spec_decode_metadata`) and N - 1 requests' bookkeeping.
With P the positions whose logits the step computes (the engine passes them; P = R for every step without drafts,
which is all the calibration holds), `logits="positions"` reads the bracket at P (its range checked at P):
    t(T, R, P) = t1(T) + [td(P) - t1(P)]
which also charges P - R requests' bookkeeping the step does not pay (small on the CPU measured: the bracket is
flat to N = 8 and grows with the logits after). `logits="last"` (the class's default, sessions 12-19) keeps it at
R: one logit per request. The vLLM analysis prices with "positions" since session 20, when blocks measured after
its commit said so (experiments/results/vllm_cpu_lockstep2/preregistered_r14.md).

On the 2026-12-02 lockstep campaign it fails that check (multi-request prefills priced +15% median, where the
token-only table is unbiased) and loses to the token-only table on the plain runs; it stays a candidate of
experiments/vllm_select.py, which chooses the fit on plain runs alone (docs/validation.md).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.cost.ragged import check_logit_positions
from specsim.errors import ConfigError
from specsim.validation.step_fit import FittedStepTable, StepSamples, Unmeasured, fit_step_table, step_kv


def _requests(s: dict, i: int, where: str) -> tuple[int, int, int]:
    """(requests, tokens, decode tokens) of a step of the per-step log; the request counts must be integers."""
    out = []
    for key in ("ctx_requests", "gen_requests", "ctx_tokens", "gen_tokens"):
        v = s.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"a step without a valid {key}", file=where, field=f"steps[{i}].{key}", value=v,
                              allowed="an integer >= 0")
        out.append(v)
    return out[0] + out[1], out[2] + out[3], out[3]


@dataclass
class Families:
    """A per-step log split into the two fitted families and the rest (which neither fit sees)."""

    single: list[dict]
    decode: list[dict]
    other: list[dict]

    @classmethod
    def split(cls, steps: list[dict], where: str = "steps") -> Families:
        single, decode, other = [], [], []
        for i, s in enumerate(steps):
            r, t, g = _requests(s, i, where)
            if t == 0:
                continue
            if r == 1:
                single.append(s)
            elif s["ctx_requests"] == 0 and g == s["gen_requests"]:
                decode.append(s)
            else:
                other.append(s)
        return cls(single, decode, other)


LOGITS = ("last", "positions")  # the bracket read at the step's requests (the record's rule), or at its logit positions


class RequestStepTable:
    """t(T, R) = t1(T) + td(R) - t1(R), or t1(T) + td(P) - t1(P) with logits="positions"; `price(new, ctx,
    logits)` as every pricer (len(new) = the step's requests, `logits` the positions per request whose logits the
    step computes)."""

    def __init__(self, single: FittedStepTable, decode: FittedStepTable, where: str = "request step table",
                 logits: str = "last"):
        if logits not in LOGITS:
            raise ConfigError("unknown logits rule", file=where, field="logits", value=logits, allowed=str(LOGITS))
        self.single, self.decode, self.where, self.logits = single, decode, where, logits
        self.unmeasured = Unmeasured()

    @property
    def kv_measure(self) -> str:
        return self.single.kv_measure

    def _count(self, T: float, R: int) -> None:
        """R: the count the bracket is read at (requests, or logit positions)."""
        u = self.unmeasured
        u.queries += 1
        where = self.single.classify(T)
        if R > 1 and where == "in":
            where = self.decode.classify(R)
            where = where if where != "in" else self.single.classify(R)
        if where != "in":
            setattr(u, where, getattr(u, where) + 1)
            u.tokens.add(int(T))

    def time_at(self, T: float, R: int = 1, ctx: float | None = None, count: bool = True,
                positions: int | None = None) -> float:
        """Seconds for a step of T tokens over R requests (R = 1: one request; T = R: a pure decode) computing
        logits at `positions` (default R; the bracket is read there unless logits="last"); counted in
        `unmeasured` unless count=False. The families' own counters are never touched: the step is counted once,
        here."""
        P = R if positions is None else positions
        check_logit_positions(T, R, P, self.where)
        P = R if self.logits == "last" else P
        if count:
            self._count(T, P)
        if T == P and P > 1:
            return self.decode.time_at(P, ctx, count=False)
        one = self.single.time_at(T, ctx, count=False)
        if P == 1:
            return one
        extra = self.decode.time_at(P, None, count=False) - self.single.time_at(P, None, count=False)
        return max(0.5 * one, one + extra)

    def write_csv(self, path: str | Path, comment: str = "") -> Path:
        """Both families in one file: a `family` column (one_request | decode), then `FittedStepTable`'s."""
        p = Path(path)
        with open(p, "w", newline="", encoding="utf-8") as fh:
            for line in (comment.splitlines() if comment else []):
                fh.write(f"# {line}\n")
            fh.write("# t(T, R) = t_one_request(T) + t_decode(R) - t_one_request(R) "
                     "(specsim.validation.request_table)\n")
            for fam, t in (("one_request", self.single), ("decode", self.decode)):
                fh.write(f"# {fam}: {t.describe()}\n")
            w = csv.writer(fh)
            w.writerow(("family",) + FittedStepTable.COLUMNS)
            for fam, t in (("one_request", self.single), ("decode", self.decode)):
                w.writerows([fam] + r for r in t.rows())
        return p

    def price(self, new: np.ndarray, ctx: np.ndarray, logits: np.ndarray | None = None) -> tuple[float, float, float]:
        new = np.asarray(new, np.int64)
        keep = new > 0
        new = new[keep]
        if new.size == 0:
            return 0.0, 0.0, 0.0
        c = self.single.kv_of(new, np.asarray(ctx)[keep])
        P = None if logits is None else int(np.asarray(logits, np.int64)[keep].sum())
        return self.time_at(float(new.sum()), int(new.size), c, positions=P), 0.0, 0.0


def fit_request_table(steps: list[dict], where: str = "request step table", monotone: bool = True,
                      kv: str = "context", logits: str = "last") -> RequestStepTable:
    """Both families fitted as `fit_step_table` fits one (knots at measured counts, isotonic unless
    monotone=False, KV slope over the `kv` measure); `logits` as `RequestStepTable`."""
    f = Families.split(steps, where)
    if not f.single or not f.decode:
        raise ConfigError("a (tokens, requests) table needs one-request steps and multi-request decode steps",
                          file=where, field="steps", value=f"{len(f.single)} one-request, {len(f.decode)} decode",
                          allowed=">= 2 distinct counts of each")
    single = fit_step_table(StepSamples.from_steps(f.single, where, kv), where=f"{where}: one request",
                            monotone=monotone)
    # a pure decode's token count is its request count: the decode table's axis is both
    decode = fit_step_table(StepSamples.from_steps(f.decode + [s for s in f.single if _is_decode1(s)], where, kv),
                            where=f"{where}: decodes", monotone=monotone)
    return RequestStepTable(single, decode, where=where, logits=logits)


def _is_decode1(s: dict) -> bool:
    """A one-request one-token decode: the R = 1 end of the decode family (in both)."""
    return s.get("ctx_requests") == 0 and s.get("gen_requests") == 1 and s.get("gen_tokens") == 1


def holdout(table: RequestStepTable, steps: list[dict], token_table: FittedStepTable | None = None) -> dict:
    """The rule scored on steps neither family holds (multi-request prefills, mixed steps of plain runs): median
    and spread of predicted/measured - 1, and the token-only table's beside it when given. Not counted as
    predictions (the tables' unmeasured counters are left as they were)."""
    other = Families.split(steps, table.where).other
    if not other:
        return {"steps": 0}
    meas = np.array([s["time_s"] for s in other], float)
    T = [s["ctx_tokens"] + s["gen_tokens"] for s in other]
    R = [s["ctx_requests"] + s["gen_requests"] for s in other]
    kv = [None if np.isnan(c) else c for c in (step_kv(s, i, table.where, table.kv_measure)
                                               for i, s in enumerate(other))]
    pred = np.array([table.time_at(t, r, k, count=False) for t, r, k in zip(T, R, kv)])
    res = {"steps": len(other), "requests_range": [min(R), max(R)], "tokens_range": [min(T), max(T)]}
    res.update(_err("request_table", pred, meas))
    if token_table is not None:
        res.update(_err("token_table", np.array([token_table.time_at(t, k, count=False) for t, k in zip(T, kv)]), meas))
    return res


def _err(name: str, pred: np.ndarray, meas: np.ndarray) -> dict:
    e = pred / meas - 1.0
    return {f"{name}_median_err": float(np.median(e)), f"{name}_p10_err": float(np.percentile(e, 10)),
            f"{name}_p90_err": float(np.percentile(e, 90))}
