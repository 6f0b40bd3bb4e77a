"""A step table fitted on every block's calibration, rescaled to one block's host speed.

Why (issue 24, session 14, docs/validation.md): the block protocol prices each block's runs with tables fitted on
that block's own calibration, which follows the host's speed from block to block but rests on few steps per token
count (a one-request prefill chunk of a given size: about three steps per block), so a table's shape moves from
block to block with the sampling as much as with the host. A table's shape (how a step's time grows with its
tokens) is a property of the engine and the CPU; the host's drift on a shared machine is mostly one factor over
every step. So: the shape from the table fitted on every block's calibration (`base`), the scale from this block's
own calibration steps: the median over them of measured time / `base`'s price of the same step (hundreds of steps,
so the factor is steady where a per-count median is not). One factor per model (target, draft), each from that
model's own calibration runs, never from a speculative run.
"""

from __future__ import annotations

import numpy as np

from specsim.errors import ConfigError
from specsim.validation.request_table import RequestStepTable
from specsim.validation.step_fit import step_kv


def step_price(table, s: dict) -> float:
    """`table`'s price of one step of the per-step log (tokens, requests, KV context), not counted as a query."""
    T = s["ctx_tokens"] + s["gen_tokens"]
    ctx = step_kv(s, kv=getattr(table, "kv_measure", "context"))
    ctx = None if np.isnan(ctx) else ctx
    if isinstance(table, RequestStepTable):
        return table.time_at(T, max(1, s["ctx_requests"] + s["gen_requests"]), ctx, count=False)
    return table.time_at(T, ctx, count=False)


def host_factor(table, steps: list[dict], where: str = "calibration steps") -> float:
    """Median of measured / priced over `steps` (those with tokens): how much slower than `table` this host ran."""
    r = [s["time_s"] / step_price(table, s) for s in steps if s["ctx_tokens"] + s["gen_tokens"] > 0]
    if not r:
        raise ConfigError("no calibration steps to scale a table by", file=where, field="steps", value=len(steps),
                          allowed="at least one step with tokens")
    return float(np.median(r))


class ScaledTable:
    """`base`'s prices times `factor`; counts unmeasured steps in `base`'s counter (one counter per base table)."""

    def __init__(self, base, factor: float):
        if not (np.isfinite(factor) and factor > 0):
            raise ConfigError("a host factor must be a positive number", file="host_scale", field="factor",
                              value=factor, allowed="> 0")
        self.base, self.factor = base, float(factor)

    @property
    def unmeasured(self):
        return self.base.unmeasured

    def time_at(self, *a, **kw) -> float:
        return self.factor * self.base.time_at(*a, **kw)

    def price(self, new, ctx) -> tuple[float, float, float]:
        t, b, f = self.base.price(new, ctx)
        return self.factor * t, self.factor * b, self.factor * f
