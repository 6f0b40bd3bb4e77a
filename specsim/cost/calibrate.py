"""Fit a software-stack profile to measured pass times (numpy/scipy only; the executor does the measuring).

The calibrated cost model of one pass is
    time = max(bytes / (f_bw · BW), FLOPs / (f_c · peak)) + o_call + L · o_layer
with bytes and FLOPs from the model profile (`specsim.cost.roofline.CostModel`), BW and peak from the hardware profile,
and the four stack parameters f_bw, f_c (achievable fractions, in (0, 1]), o_call, o_layer (seconds, >= 0).

How the fit works (why: the max() makes the problem piecewise linear, and a plain nonlinear solver gets stuck at
the kink): with a = 1/f_bw and b = 1/f_c the time is linear in (a, b, o_call, o_layer) once every point is assigned
to its side of the roofline. We alternate "assign each point to the side that is larger at the current
parameters" and "solve the bounded linear least-squares problem for that assignment" (scipy `lsq_linear`,
residuals relative to the measured time, so a 1 ms pass counts as much as a 1 s pass), from several starting
assignments, and keep the best. Parameters the data cannot determine are taken from a base stack and reported:
- all points on one side of the roofline: the other fraction is not identified (kept at the base value, moved
  only as far as needed so that every point stays on the side it was fitted on);
- one layer count only: o_call and o_layer are not separable; their sum is fitted and split in the base
  stack's proportion at that layer count.
Every `holdout_every`-th point (indices k-1, 2k-1, ...) is held out of the fit and its error reported.

`multi_row=True` fits a fifth parameter, a separate bandwidth fraction for passes of at least R rows (B·P ≥ R),
which `CostModel` applies (`StackProfile.multi_row_bandwidth_fraction`), and the row count R itself (the best
fit over R = 2..8 among the row counts measured): on this project's 2-core CPUs eager fp32 PyTorch streams
weights at about half the rate in small matrix products (verification) that it reaches in matrix-vector products
(one-token steps), which one fraction cannot describe, and where the BLAS switches kernels depends on the CPU
(R = 2 on an AMD EPYC, 4 on an Intel Xeon; see experiments/results/validate_cpu.md).

With multi_row=True the fit also takes o_multi, a fixed cost of every pass of more than one position
(`StackProfile.multi_position_overhead_s`): eager HF attention builds a causal mask and leaves SDPA's mask-free path
once a pass has several query positions, which costs a 135M model ~4 ms (+9-12% of its one-token step) on the
2-core CPU — far more than the extra FLOPs — and which no roofline term reproduces.

`overlap="sum"` fits time = bytes / (f_bw · BW) + FLOPs / (f_c · peak) + o_call + L · o_layer instead (the stack's
`overlap`): eager fp32 PyTorch on a CPU streams a block of weights and then multiplies it, so the two times add up
rather than hide each other; the fit is then one bounded linear least-squares problem, with no sides to assign.
On the validate_cpu grids it cuts the hold-out error against the max() form (Qwen pair: 3.1–4.2% vs 5.5–7.0%,
experiments/results/validate_cpu.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import ValidationError
from scipy.optimize import lsq_linear

from specsim.cost.roofline import CostModel
from specsim.errors import ConfigError
from specsim.profiles import IDEAL_STACK, OVERLAPS, HardwareProfile, ModelProfile, StackProfile

MAX_INVERSE_FRACTION = 1e4  # f >= 1e-4: anything slower is a broken measurement, not a stack
OVERHEAD_TOLERANCE_S = 1e-9  # a fitted overhead in [-1 ns, 0) is solver rounding: clamped to 0 (see _overhead)


@dataclass(frozen=True)
class PassPoint:
    """One measured pass: model, batch B, new positions P per sequence, cached context L, median time."""

    model: ModelProfile
    batch: int
    positions: int
    context: int
    time_s: float


def points_from_rows(rows: Iterable[dict], model: ModelProfile) -> list[PassPoint]:
    """Rows as `specsim.executor.measure.pass_times` returns them (batch defaults to 1)."""
    return [PassPoint(model, int(r.get("batch", 1)), int(r["positions"]), int(r.get("context", 0)),
                      float(r["time_s"])) for r in rows]


@dataclass
class Terms:
    """Ideal memory and compute times of each point on the datasheet roofline, its layer count and rows (B·P)."""

    memory_s: np.ndarray
    compute_s: np.ndarray
    layers: np.ndarray
    time_s: np.ndarray
    rows: np.ndarray
    multi_pos: np.ndarray  # 1.0 where a pass has more than one position per sequence

    def take(self, idx: np.ndarray) -> "Terms":
        return Terms(self.memory_s[idx], self.compute_s[idx], self.layers[idx], self.time_s[idx], self.rows[idx],
                     self.multi_pos[idx])


def roofline_terms(points: Sequence[PassPoint], hardware: HardwareProfile) -> Terms:
    mem, cmp_, lay, t, rows, mp = [], [], [], [], [], []
    models: dict = {}
    for p in points:
        if not (p.time_s > 0 and np.isfinite(p.time_s)):
            raise ConfigError("measured pass time must be a positive number", field="time_s", value=p.time_s)
        cm = models.get(p.model)
        if cm is None:
            cm = models[p.model] = CostModel(p.model, hardware, IDEAL_STACK)
        mem.append(cm.pass_bytes(p.batch, p.positions, p.context) / hardware.bandwidth_bytes_s)
        cmp_.append(cm.pass_flops(p.batch, p.positions, p.context) / hardware.peak_flops(p.model.dtype))
        lay.append(p.model.n_layers)
        t.append(p.time_s)
        rows.append(p.batch * p.positions)
        mp.append(float(p.positions > 1))
    return Terms(np.array(mem), np.array(cmp_), np.array(lay, dtype=float), np.array(t), np.array(rows),
                 np.array(mp))


def predict_times(stack: StackProfile, terms: Terms, multi_row_bandwidth_fraction: float | None = None,
                  multi_row_min_rows: int | None = None) -> np.ndarray:
    """The calibrated cost model's times for the points (same arithmetic as `CostModel._finish`, TP 1); passes of
    at least `multi_row_min_rows` rows (default: the stack's) use `multi_row_bandwidth_fraction` (default: the
    stack's, else its bandwidth_fraction) instead (`StackProfile.multi_row_bandwidth_fraction`)."""
    R = multi_row_min_rows or stack.multi_row_min_rows
    multi = multi_row_bandwidth_fraction or stack.multi_row_bandwidth_fraction or stack.bandwidth_fraction
    f_bw = np.where(terms.rows >= R, multi, stack.bandwidth_fraction)
    run = _run(terms.memory_s / f_bw, terms.compute_s / stack.compute_fraction, stack.overlap)
    return (run + stack.per_call_overhead_s + stack.per_layer_overhead_s * terms.layers
            + stack.multi_position_overhead_s * terms.multi_pos)


def _run(mem_s: np.ndarray, compute_s: np.ndarray, overlap: str) -> np.ndarray:
    """A pass's memory and compute times combined as the stack's `overlap` says (`CostModel._finish`'s rule)."""
    return np.maximum(mem_s, compute_s) if overlap == "max" else mem_s + compute_s


def error_stats(pred: np.ndarray, meas: np.ndarray) -> dict:
    """Relative errors in percent: median and max of |pred/meas - 1|, mean signed error, count."""
    if len(meas) == 0:
        return {"n": 0, "median_abs_pct": None, "max_abs_pct": None, "mean_abs_pct": None, "mean_pct": None}
    e = 100.0 * (np.asarray(pred) / np.asarray(meas) - 1.0)
    return {"n": len(e), "median_abs_pct": float(np.median(np.abs(e))), "max_abs_pct": float(np.abs(e).max()),
            "mean_abs_pct": float(np.abs(e).mean()), "mean_pct": float(e.mean())}


@dataclass
class FitResult:
    stack: StackProfile
    fit_error: dict
    holdout_error: dict
    identified: dict
    fit_index: np.ndarray
    holdout_index: np.ndarray
    predicted_s: np.ndarray  # for every point, fitted and held out
    measured_s: np.ndarray
    points: list = field(repr=False, default_factory=list)
    multi_row_bandwidth_fraction: float | None = None  # fitted only with fit_stack(..., multi_row=True)

    def cost_model(self, model: ModelProfile, hardware: HardwareProfile) -> CostModel:
        """The fitted cost model for `model`: the roofline `CostModel` on the fitted stack, which carries the
        multi-row fraction when one was fitted (`CostModel` applies it to passes of B·P ≥ multi_row_min_rows)."""
        if self.multi_row_bandwidth_fraction is None:
            return CostModel(model, hardware, self.stack)
        stack = self.stack.model_copy(update={"multi_row_bandwidth_fraction": self.multi_row_bandwidth_fraction})
        return CostModel(model, hardware, stack)

    def rows(self) -> list[dict]:
        """One dict per point: model, B, P, L, measured, predicted, error %, whether it was held out."""
        held = set(self.holdout_index.tolist())
        return [{"model": p.model.name, "layers": p.model.n_layers, "batch": p.batch, "positions": p.positions,
                 "context": p.context, "measured_s": float(m), "predicted_s": float(q),
                 "error_pct": float(100 * (q / m - 1)), "held_out": i in held}
                for i, (p, m, q) in enumerate(zip(self.points, self.measured_s, self.predicted_s))]

    def summary(self) -> dict:
        s = self.stack
        return {"stack": s.model_dump(), "multi_row_bandwidth_fraction": self.multi_row_bandwidth_fraction,
                "multi_row_min_rows": s.multi_row_min_rows if self.multi_row_bandwidth_fraction else None,
                "fit_error": self.fit_error, "holdout_error": self.holdout_error, "identified": self.identified,
                "n_points": len(self.measured_s)}


# Parameters x = (a_0[, a_1], b, o_call[, o_layer][, o_multi]) with a_k = 1 / bandwidth fraction of memory class k
# (class 0: one-row passes, or all passes; class 1: multi-row passes), b = 1 / compute fraction and o_multi the
# multi-position overhead (fitted with multi_row=True).
def _unpack(x, n_cls: int, merged: bool, mp: bool = False):
    a = np.asarray(x[:n_cls])
    b, oc = x[n_cls], x[n_cls + 1]
    ol = 0.0 if merged else x[n_cls + 2]
    om = x[-1] if mp else 0.0
    return a, b, oc, ol, om


def _solve(mem_side: np.ndarray, cls: np.ndarray, n_cls: int, T: Terms, merged: bool,
           overlap: str = "max", mp: bool = False) -> np.ndarray:
    """Bounded linear least squares (relative residuals) for one assignment of points to roofline sides
    (overlap "sum": every point pays both sides)."""
    cmp_side = ~mem_side if overlap == "max" else np.ones_like(mem_side)
    cols = [np.where(mem_side & (cls == k), T.memory_s, 0.0) for k in range(n_cls)]
    cols += [np.where(cmp_side, T.compute_s, 0.0), np.ones_like(T.time_s)]
    if not merged:
        cols.append(T.layers)
    if mp:
        cols.append(T.multi_pos)
    A = np.column_stack(cols) / T.time_s[:, None]
    lo = [1.0] * (n_cls + 1) + [0.0] * (len(cols) - n_cls - 1)
    hi = [MAX_INVERSE_FRACTION] * (n_cls + 1) + [np.inf] * (len(cols) - n_cls - 1)
    return lsq_linear(A, np.ones(len(T.time_s)), bounds=(lo, hi), method="bvls").x


def _sides(x, cls, n_cls, T: Terms, merged: bool) -> np.ndarray:
    a, b = _unpack(x, n_cls, merged)[:2]
    return a[cls] * T.memory_s >= b * T.compute_s


def _loss(x, cls, n_cls, T: Terms, merged: bool, overlap: str = "max", mp: bool = False) -> float:
    a, b, oc, ol, om = _unpack(x, n_cls, merged, mp)
    pred = _run(a[cls] * T.memory_s, b * T.compute_s, overlap) + oc + ol * T.layers + om * T.multi_pos
    return float(np.sum((pred / T.time_s - 1.0) ** 2))


def _fit_params(T: Terms, cls: np.ndarray, n_cls: int, merged: bool, overlap: str = "max",
                mp: bool = False) -> np.ndarray:
    if overlap == "sum":  # linear in the parameters: one solve
        return _solve(np.ones(len(T.time_s), bool), cls, n_cls, T, merged, "sum", mp)
    ratio = T.compute_s / T.memory_s
    starts = [ratio <= 0, ratio >= 0]  # everything memory-bound / everything compute-bound
    # compute side when b·C > a·M, for b/a = k; our choice: 13 ratios over 1..1000 (fractions as low as 0.1% of
    # peak relative to bandwidth) cover every stack we fitted, at 13 cheap solves
    for k in np.geomspace(1.0, 1e3, 13):
        starts.append(k * ratio < 1.0)
    best, best_loss = None, np.inf
    for mem_side in starts:
        seen = set()
        for _ in range(50):  # our choice: a bound only; it stops as soon as an assignment repeats
            key = mem_side.tobytes()
            if key in seen:
                break
            seen.add(key)
            x = _solve(mem_side, cls, n_cls, T, merged, mp=mp)
            mem_side = _sides(x, cls, n_cls, T, merged)
        loss = _loss(x, cls, n_cls, T, merged, mp=mp)
        if loss < best_loss - 1e-15:  # our choice: better beyond rounding (the first start wins a tie)
            best, best_loss = x, loss
    return best


def fit_stack(points: Sequence[PassPoint], hardware: HardwareProfile, name: str = "calibrated",
              holdout_every: int = 4, base: StackProfile | None = None, description: str = "",
              multi_row: bool = False, overlap: str = "max") -> FitResult:
    """Fit f_bw, f_c, o_call, o_layer to `points`; every `holdout_every`-th point is held out (0 = none).

    overlap: "max" (the roofline) or "sum" (memory and compute times add; see the module docstring).

    multi_row: also fit a separate bandwidth fraction for passes of at least R rows (B·P ≥ R) and R (2..8, the fit
    with the least loss on the fitted points; the smallest R on a tie); `FitResult.cost_model` applies it. Not
    identified (and then equal to f_bw) when no multi-row point is memory-bound."""
    if len(points) < 3:
        raise ConfigError("calibration needs at least 3 measured passes", field="points", value=len(points))
    if overlap not in OVERLAPS:
        raise ConfigError("unknown overlap", field="overlap", value=overlap, allowed=" | ".join(OVERLAPS))
    base = base or IDEAL_STACK
    T_all = roofline_terms(points, hardware)
    idx = np.arange(len(points))
    held = (idx % holdout_every == holdout_every - 1) if holdout_every and holdout_every > 1 else np.zeros(
        len(points), bool)
    if (~held).sum() < 3:
        held[:] = False
    fit_i, hold_i = idx[~held], idx[held]
    T = T_all.take(fit_i)
    n_cls = 2 if multi_row else 1
    merged = len(np.unique(T.layers)) < 2
    mp = multi_row and 0 < T.multi_pos.sum() < len(T.multi_pos)  # both kinds of pass measured
    if multi_row:
        x, R, cls = _best_min_rows(T, n_cls, merged, overlap, mp)
    else:
        x, R, cls = _fit_params(T, np.zeros(len(T.rows), int), n_cls, merged, overlap), 2, np.zeros(len(T.rows), int)
    a, b, oc, ol, om = _unpack(x, n_cls, merged, mp)
    a, b, om = [float(v) for v in a], float(b), float(om)
    oc, ol = _split_overheads(float(oc), float(ol), T, merged, base)
    a, b, ident = _identified(a, b, cls, T, overlap, base, merged, multi_row, mp)
    prov = (f"fitted by specsim calibrate on {len(fit_i)} measured passes on {hardware.name}; "
            f"hold-out {len(hold_i)} points")
    # the caps (10 s, 1 s) are StackProfile's own bounds: a fit never writes a profile that fails to load
    stack = _stack(name=name, description=description or f"calibrated on {hardware.name}",
                   bandwidth_fraction=min(1.0, 1.0 / a[0]), compute_fraction=min(1.0, 1.0 / b),
                   per_call_overhead_s=min(_overhead("per_call_overhead_s", oc), 10.0),
                   per_layer_overhead_s=min(_overhead("per_layer_overhead_s", ol), 1.0), provenance=prov,
                   multi_row_min_rows=R, overlap=overlap,
                   multi_position_overhead_s=min(_overhead("multi_position_overhead_s", om), 1.0))
    multi = min(1.0, 1.0 / a[1]) if multi_row else None
    pred = predict_times(stack, T_all, multi)
    return FitResult(stack=stack, fit_error=error_stats(pred[fit_i], T_all.time_s[fit_i]),
                     holdout_error=error_stats(pred[hold_i], T_all.time_s[hold_i]), identified=ident,
                     fit_index=fit_i, holdout_index=hold_i, predicted_s=pred, measured_s=T_all.time_s,
                     points=list(points), multi_row_bandwidth_fraction=multi)


def _best_min_rows(T: Terms, n_cls: int, merged: bool, overlap: str, mp: bool):
    """(parameters, R, class per point) of the least-loss fit over the row counts R measured (2..8)."""
    best, x, R, cls = np.inf, None, 2, np.zeros(len(T.rows), int)
    # 2..8: the BLAS kernel switch sits at 2 (AMD EPYC) or 4 (Intel Xeon) rows in our measurements (module doc)
    for r in sorted({int(v) for v in T.rows if 2 <= v <= 8} | {2}):
        c = (T.rows >= r).astype(int)
        if r > 2 and (not c.any() or c.all()):
            continue
        xr = _fit_params(T, c, n_cls, merged, overlap, mp)
        loss = _loss(xr, c, n_cls, T, merged, overlap, mp)
        if loss < best * (1 - 1e-9):  # our choice: a larger R must fit clearly better, not by rounding
            best, x, R, cls = loss, xr, r, c
    return x, R, cls


def _split_overheads(oc: float, ol: float, T: Terms, merged: bool, base: StackProfile) -> tuple[float, float]:
    """With one layer count only o_call + L·o_layer is fitted: split it in the base stack's proportion."""
    if not merged:
        return oc, ol
    L = float(T.layers[0])
    base_total = base.per_call_overhead_s + L * base.per_layer_overhead_s
    share = base.per_call_overhead_s / base_total if base_total > 0 else 1.0
    return oc * share, oc * (1 - share) / L


def _identified(a: list, b: float, cls: np.ndarray, T: Terms, overlap: str, base: StackProfile, merged: bool,
                multi_row: bool, mp: bool) -> tuple[list, float, dict]:
    """Which parameters the data determine; the others from the base stack, moved only as far as needed to keep
    every fitted point on the roofline side it was fitted on."""
    # with overlap "sum" every point pays both times, so both fractions are in play wherever they are
    mem_side = (np.array(a)[cls] * T.memory_s >= b * T.compute_s) | (overlap == "sum")
    cmp_any = bool((~mem_side).any()) or overlap == "sum"
    ident = {"bandwidth_fraction": bool((mem_side & (cls == 0)).any()), "compute_fraction": cmp_any,
             "overhead_split": not merged}
    if multi_row:
        ident["multi_row_bandwidth_fraction"] = bool((mem_side & (cls == 1)).any())
        ident["multi_position_overhead"] = mp
    if not ident["compute_fraction"]:
        b = max(1.0, min(max(1.0 / base.compute_fraction, 1.0),
                         float(np.min(np.array(a)[cls] * T.memory_s / T.compute_s))))
    if not ident["bandwidth_fraction"]:
        one = cls == 0
        lim = float(np.min(b * T.compute_s[one] / T.memory_s[one])) if one.any() else np.inf
        a[0] = max(1.0, min(max(1.0 / base.bandwidth_fraction, 1.0), lim))
    if multi_row and not ident["multi_row_bandwidth_fraction"]:
        a[1] = a[0]
    return a, b, ident


def _overhead(name: str, value: float) -> float:
    """A fitted overhead as a valid profile value: the bounded solver keeps overheads >= 0 up to its arithmetic
    (it has returned -1.7e-18 s under CPU load), so values within OVERHEAD_TOLERANCE_S below 0 are 0. A value
    further below 0, or not finite, means the measurements are inconsistent: one line, not a traceback."""
    if not np.isfinite(value) or value < -OVERHEAD_TOLERANCE_S:
        raise ConfigError("the fit gave an impossible overhead; the measured times are inconsistent (repeat the "
                          "measurement with more --repeats)", field=name, value=value,
                          allowed=f">= 0 s (values down to -{OVERHEAD_TOLERANCE_S:g} s are rounding and read as 0)")
    return max(0.0, float(value))


def _stack(**fields) -> StackProfile:
    """The fitted StackProfile; a value the profile rejects is one ConfigError line naming the field."""
    try:
        return StackProfile(**fields)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err.get("loc", ())) or "stack"
        raise ConfigError(f"the fit gave a value the stack profile rejects ({err.get('msg', 'invalid')})",
                          field=field, value=err.get("input")) from None


# --- writing the profile: specsim.cost.calibrate_io (re-exported here, where callers have always found it) ---------
from specsim.cost.calibrate_io import provenance_lines, write_stack_toml  # noqa: E402,F401
