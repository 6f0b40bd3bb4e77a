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


def innermost(table):
    """The fitted table under any rescaling (a rescaled table prices as its base does, times a factor)."""
    while isinstance(table, (ScaledTable, _SizedFactor)):
        table = table.base
    return table


def step_price(table, s: dict) -> float:
    """`table`'s price of one step of the per-step log (tokens, requests, KV context), not counted as a query."""
    T = s["ctx_tokens"] + s["gen_tokens"]
    ctx = step_kv(s, kv=getattr(innermost(table), "kv_measure", "context"))
    ctx = None if np.isnan(ctx) else ctx
    if isinstance(innermost(table), RequestStepTable):
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

    def price(self, new, ctx, logits=None) -> tuple[float, float, float]:
        t, b, f = self.base.price(new, ctx, logits)
        return self.factor * t, self.factor * b, self.factor * f


class _SizedFactor:
    """`base`'s prices times a factor that depends on the step's size in tokens (`factor(T)`, a subclass's);
    counts unmeasured steps in `base`'s counter."""

    base: object

    @property
    def unmeasured(self):
        return self.base.unmeasured

    def factor(self, T: float) -> float:
        raise NotImplementedError

    def time_at(self, T: float, *a, **kw) -> float:
        return self.factor(T) * self.base.time_at(T, *a, **kw)

    def price(self, new, ctx, logits=None) -> tuple[float, float, float]:
        t, b, f = self.base.price(new, ctx, logits)
        x = self.factor(float(np.sum(new)))
        return x * t, x * b, x * f


class ShapedHostTable(_SizedFactor):
    """`base`'s prices times one moment's host factor, carried to each step size by the host's shape: a step of T
    tokens is priced `f_ref ** min(1, (T / t_ref) ** -beta)` times `base`, where `f_ref` is measured on steps of
    about `t_ref` tokens at that moment. beta = 0 is ScaledTable (one factor for every size). Why (issue 24,
    session 18, docs/validation.md): without any speculation, a moment of this host moved a 32-token step about
    half as much as an 8-token one (experiments/vllm_shape_probe.py: d log t32 / d log t8 = 0.52), so a factor
    measured on small steps overstates the moment for large ones. Below `t_ref` a step moves as the reference.
    Counts unmeasured steps in `base`'s counter."""

    def __init__(self, base, f_ref: float, t_ref: float, beta: float):
        for name, v, ok in (("f_ref", f_ref, f_ref > 0), ("t_ref", t_ref, t_ref >= 1), ("beta", beta, beta >= 0)):
            if not (np.isfinite(v) and ok):
                raise ConfigError("a shaped host factor needs f_ref > 0, t_ref >= 1 token and beta >= 0",
                                  file="host_scale", field=name, value=v, allowed={"f_ref": "> 0", "t_ref": ">= 1",
                                                                                   "beta": ">= 0"}[name])
        self.base, self.f_ref, self.t_ref, self.beta = base, float(f_ref), float(t_ref), float(beta)

    def factor(self, T: float) -> float:
        return self.f_ref ** min(1.0, (max(float(T), 1.0) / self.t_ref) ** -self.beta)


class TwoPointHostTable(_SizedFactor):
    """`base`'s prices times a host factor measured at one moment on two step sizes: `f_small` on steps of `t_small`
    tokens, `f_large` on steps of `t_large` tokens, log-linear in log tokens between them and held outside. Why
    (issue 24, session 19, docs/validation.md): a pair's speculative steps are large (a verification of requests x
    (k + 1) tokens), its plain steps small, and at one moment this host does not move both alike; both factors come
    from runs without speculation right after the pair (experiments/vllm_blocks.py moment_points). Counts
    unmeasured steps in `base`'s counter."""

    def __init__(self, base, small: tuple[float, float], large: tuple[float, float]):
        (ts, fs), (tl, fl) = small, large
        for name, v, ok in (("f_small", fs, fs > 0), ("f_large", fl, fl > 0), ("t_small", ts, ts >= 1),
                            ("t_large", tl, tl > ts)):
            if not (np.isfinite(v) and ok):
                raise ConfigError("a two-point host factor needs factors > 0 and 1 <= t_small < t_large tokens",
                                  file="host_scale", field=name, value=v, allowed="> 0" if name[0] == "f" else
                                  (">= 1" if name == "t_small" else "> t_small"))
        self.base, self.small, self.large = base, (float(ts), float(fs)), (float(tl), float(fl))

    def factor(self, T: float) -> float:
        (ts, fs), (tl, fl) = self.small, self.large
        w = min(1.0, max(0.0, np.log(max(float(T), 1.0) / ts) / np.log(tl / ts)))
        return float(np.exp((1.0 - w) * np.log(fs) + w * np.log(fl)))
