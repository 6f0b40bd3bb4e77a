"""What one ragged engine step costs: a forward pass over requests that each bring a different number of new tokens
at a different cached context (vLLM's continuous batching mixes prefill chunks and decodes in one pass).

Two pricers, one interface `price(new, ctx, logits=None) -> (time_s, bytes, flops)` (`logits`: positions per
request whose logits the step computes, None = one each; a pricer without a term for them ignores it):
- `RooflinePricer` — the roofline of `specsim.cost.roofline.CostModel` summed over the requests: the weights are read
  once, every request reads its own KV (ctx_i entries) and writes new_i entries, FLOPs are 2·params·Σ new_i plus
  attention over each request's own keys (causal within its new tokens). This is what the uniform pass
  T(B, P, L) computes when all requests are alike (tests check that), so a vLLM-profile step of B decodes costs
  exactly the batch-B pass.
- `StepTable` — measured step times against the number of tokens the step scheduled, read from vLLM's own
  per-step log of runs WITHOUT speculation (`specsim.validation.vllm_outputs.parse_steps`), interpolated piecewise
  linearly between the knots (and linearly extrapolated past the last two). Where the log gives no context,
  neither does the table: on the short contexts measured it is a small term, and a table is calibrated and used
  at the same contexts.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from specsim.cost.roofline import CostModel
from specsim.errors import ConfigError
from specsim.inputs.tables import rising


def check_logit_positions(tokens: float, requests: int, positions: int, where: str | None = None) -> None:
    """The rule every ragged pricer holds a step's logit positions to (vLLM's logits_indices: one per request at
    least, every scheduled token at most); one line naming the counts otherwise."""
    if requests < 1 or tokens < requests or not requests <= positions <= tokens:
        raise ConfigError("a step has at least one request and one token per request, and computes logits at one "
                          "position per request at least and at no more positions than tokens", file=where,
                          field="tokens/requests/positions", value=f"{tokens}/{requests}/{positions}",
                          allowed="1 <= requests <= positions <= tokens")


class RooflinePricer:
    def __init__(self, cm: CostModel):
        self.cm = cm
        self.model = cm.model

    def price(self, new: np.ndarray, ctx: np.ndarray, logits=None) -> tuple[float, float, float]:
        cm, m = self.cm, self.model
        new = np.asarray(new, dtype=np.float64)
        ctx = np.asarray(ctx, dtype=np.float64)
        T = float(new.sum())
        if T <= 0:
            return 0.0, 0.0, 0.0
        kv = cm.kv_bytes_per_token_per_chip  # per chip, replicated KV heads counted (as CostModel.pass_bytes)
        # a MoE step reads the experts its T tokens wake (ModelProfile.pass_params, as CostModel.pass_bytes)
        weights = m.pass_params(int(T)) if m.is_moe else m.step_params
        b = weights * m.bytes_per_param / cm.tp + (float(ctx.sum()) + T) * kv
        keys = ctx + (new + 1.0) / 2.0  # as CostModel.pass_flops: context + causal half of the new tokens
        if m.kv_lora_rank is None:
            attn = 4.0 * m.n_layers * m.n_heads * m.head_dim * float((keys * new).sum())
        else:  # MLA, weight-absorbed (specsim.profiles.moe), as CostModel.pass_flops
            attn = float(m.n_layers * m.attention_flops_per_key) * float((keys * new).sum())
        f = (2.0 * m.matmul_params_per_token * T + attn) / cm.tp
        n = len(new)
        if bool((new == new[0]).all()):  # a uniform batch: exactly the CostModel pass (same rows, positions)
            c = cm._finish(n, int(new[0]), 0, b, f, m.n_layers)
        else:
            c = cm._finish(1, int(T), 0, b, f, m.n_layers)
        return c.time_s, b, f


class StepTable:
    """Step time against tokens scheduled in the step (knots strictly increasing, times > 0)."""

    def __init__(self, tokens, time_s, where: str = "step table", envelope: bool = True):
        t = np.asarray(tokens, dtype=np.float64)
        s = np.asarray(time_s, dtype=np.float64)
        if t.size < 2 or t.size != s.size:
            raise ConfigError("a step table needs at least two knots", file=where, field="tokens",
                              value=int(t.size), allowed=">= 2 rows of tokens,time_s")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(s))):
            raise ConfigError("not a number in the step table", file=where, field="tokens/time_s")
        if np.any(np.diff(t) <= 0) or t[0] < 1:
            raise ConfigError("knots must be strictly increasing token counts >= 1", file=where, field="tokens",
                              value=t.tolist())
        if np.any(s <= 0):
            raise ConfigError("step times must be positive", file=where, field="time_s", value=float(s.min()),
                              allowed="(0, inf)")
        # a step over more tokens is not faster beyond measurement noise; priced on the monotone envelope, so
        # extrapolation past the last knot never falls (a falling table gave negative step times). envelope=False
        # only for a table fitted to a measured per-step log whose dips rest on many steps
        # (specsim.validation.step_fit, monotone=False), which prices past its last knot flat or rising
        if envelope:
            s = rising(s, [("tokens", t)], where)
        self.tokens, self.time_s, self.where = t, s, where

    def time_at(self, T: float) -> float:
        t, s = self.tokens, self.time_s
        if T <= t[-1]:
            return float(np.interp(T, t, s))
        slope = (s[-1] - s[-2]) / (t[-1] - t[-2])
        return float(s[-1] + slope * (T - t[-1]))

    def price(self, new: np.ndarray, ctx: np.ndarray, logits=None) -> tuple[float, float, float]:
        T = float(np.sum(new))
        return (self.time_at(T), 0.0, 0.0) if T > 0 else (0.0, 0.0, 0.0)

    @classmethod
    def read_csv(cls, path: str | Path) -> StepTable:
        """CSV tokens,time_s, read strictly (`specsim.inputs.tables`: integer token counts >= 1, times in
        (0, MAX_PASS_TIME_S] s, one line naming file, column, row and cell)."""
        from specsim.cost.measured import MAX_PASS_TIME_S, MAX_ROWS
        from specsim.inputs.tables import CsvTable, check_rows, float_column, int_column, require_columns

        from specsim.inputs.files import input_file

        p = input_file(path, "step table (a CSV with columns tokens,time_s)", field="step table")
        table = CsvTable(p, comment="#")
        df = table.frame
        require_columns(df, ("tokens", "time_s"), p)
        check_rows(len(df), p, MAX_ROWS)
        tok = int_column(df["tokens"], "tokens", p, lo=1, hi=10_000_000, raw=table.raw)
        ts = float_column(df["time_s"], "time_s", p, lo=0.0, hi=MAX_PASS_TIME_S, lo_open=True, raw=table.raw)
        return cls(tok, ts, where=str(p))

    def write_csv(self, path: str | Path, comment: str = "") -> Path:
        p = Path(path)
        with open(p, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["tokens", "time_s"])
            for a, b in zip(self.tokens, self.time_s):
                w.writerow([str(int(a)) if float(a).is_integer() else f"{a:g}", f"{b:.6g}"])
        return p
