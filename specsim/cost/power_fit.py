"""Fitting the power curve (`specsim.cost.power`) to measured serving runs, and checking a fit on rows it never saw.

A row is what public measurements give (ML.ENERGY, vendor notes, a user's own `nvidia-smi`): model, GPU, TP,
the running batch (or max_num_seqs), W per GPU and/or J/token, and output tokens/s. What the model needs from a
row is the utilisation of the passes the GPU ran; it is the simulator's own, so the curve maps what the
simulator will feed it to watts:
- a serving step at batch B is one decode pass (B sequences × 1 position at the mean live context
  prompt + output / 2) plus its share of prefills: B / output_len requests are admitted per step in steady state,
  each a prefill pass over its prompt (ML.ENERGY's energy window includes them). Each part's (MBU, MFU) comes from
  the row's cost model (`specsim.setup.power_rows.row_parts`, through `Deployment.resolve`: the roofline under a
  stack profile, or a measured-kernel stack), and the row's power is the time-weighted mean of the parts' powers —
  the same per-pass rule `run_energy` applies to a simulated run.
- prompt and output lengths are the row's own when given, else the caller's defaults (an assumption, stated where
  used).
The fit: least squares on relative error of W per GPU, over (floor fraction of TDP, w_mbu, w_mfu), each row in
fractions of its own GPU's TDP so rows of several chips can be pooled; the floor is bounded below by the chips'
idle fraction and the weights by the profile schema's range, so a fit can never write a value the loader refuses.
J/token predicted for a row = predicted W per GPU × TP / the row's measured tokens/s (the power check, not the cost
model's speed: the simulated tokens/s is the cost model's business).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specsim.errors import ConfigError

WEIGHT_MAX = 1e3  # = HardwareProfile.power_mbu_weight / power_mfu_weight's le


@dataclass(frozen=True)
class PowerRow:
    """One measured serving configuration."""

    model: str
    gpu: str
    tp: int
    batch: float
    tok_s: float
    w_per_gpu: float
    j_per_token: float | None = None
    prompt_len: int = 70
    output_len: int = 215
    stack: str = "cuda-graphs"
    source: str = ""


@dataclass(frozen=True)
class RowParts:
    """The passes of a row's steady-state step: (time weight, MBU, MFU) each, and the chip's TDP and idle."""

    row: PowerRow
    parts: tuple[tuple[float, float, float], ...]
    tdp_w: float
    idle_w: float


def predict_w(theta, rp: RowParts) -> float:
    """W per GPU of a row under (floor fraction, w_mbu, w_mfu): the parts' powers weighted by their times."""
    frac, wm, wf = theta
    floor = max(rp.idle_w, frac * rp.tdp_w)
    e = t = 0.0
    for dt, mbu, mfu in rp.parts:
        s = wm * mbu + wf * mfu
        e += dt * (floor + (rp.tdp_w - floor) * s / (1.0 + s))
        t += dt
    return e / t


@dataclass
class PowerFit:
    floor_fraction: float
    mbu_weight: float
    mfu_weight: float
    rows: list[RowParts] = field(repr=False)
    at_bound: list[str] = field(default_factory=list)  # figures the data did not pull off their bounds

    def figures(self, tdp_w: float, idle_w: float) -> dict:
        """The profile fields for a chip of this TDP and idle (rounded to 4 significant figures)."""
        floor = max(idle_w, self.floor_fraction * tdp_w)
        return {"running_floor_w": _sig(floor), "power_mbu_weight": _sig(self.mbu_weight),
                "power_mfu_weight": _sig(self.mfu_weight)}

    def errors_pct(self, rows: list[RowParts] | None = None) -> list[float]:
        return [100.0 * (predict_w(self.theta, rp) / rp.row.w_per_gpu - 1.0) for rp in (rows or self.rows)]

    @property
    def theta(self):
        return self.floor_fraction, self.mbu_weight, self.mfu_weight


def _sig(x: float, n: int = 4) -> float:
    return float(f"{x:.{n}g}")


def fit_curve(rows: list[RowParts]) -> PowerFit:
    """Least squares on relative W-per-GPU error (module docstring); needs rows at three or more settings."""
    from scipy.optimize import least_squares

    if len({(rp.row.model, rp.row.gpu, rp.row.tp, rp.row.batch) for rp in rows}) < 3:
        raise ConfigError("a power fit needs three or more distinct rows (model, GPU, TP, batch)", field="rows",
                          value=len(rows), allowed=">= 3 rows (the curve has three figures)")
    lo_floor = max(rp.idle_w / rp.tdp_w for rp in rows)
    lo, hi = [lo_floor, 0.0, 0.0], [1.0, WEIGHT_MAX, WEIGHT_MAX]
    meas = [rp.row.w_per_gpu for rp in rows]
    res = least_squares(lambda th: [predict_w(th, rp) / m - 1.0 for rp, m in zip(rows, meas)],
                        x0=[min(0.5, max(lo_floor, 0.3)), 1.0, 3.0], bounds=(lo, hi), xtol=1e-12, ftol=1e-12)
    th = [float(x) for x in res.x]
    names = ("floor_fraction", "mbu_weight", "mfu_weight")
    bound = [n for n, x, a, b in zip(names, th, lo, hi) if math.isclose(x, a, abs_tol=1e-6) or
             math.isclose(x, b, rel_tol=1e-6)]
    return PowerFit(th[0], th[1], th[2], list(rows), bound)


def leave_one_model_out(rows: list[RowParts]) -> list[dict]:
    """For each model, the fit on every other model's rows and its error on this model's rows."""
    out = []
    for m in sorted({rp.row.model for rp in rows}):
        held = [rp for rp in rows if rp.row.model == m]
        fit = fit_curve([rp for rp in rows if rp.row.model != m])
        for rp, err in zip(held, fit.errors_pct(held)):
            out.append(lomo_record(rp, fit, err))
    return out


def lomo_record(rp: RowParts, fit: PowerFit, err_w_pct: float) -> dict:
    r = rp.row
    w = predict_w(fit.theta, rp)
    j = w * r.tp / r.tok_s
    j_meas = r.j_per_token if r.j_per_token is not None else r.w_per_gpu * r.tp / r.tok_s
    return {"model": r.model, "gpu": r.gpu, "tp": r.tp, "batch": r.batch, "w_per_gpu_measured": r.w_per_gpu,
            "w_per_gpu_predicted": w, "w_err_pct": err_w_pct, "j_per_token_measured": j_meas,
            "j_per_token_predicted": j, "j_err_pct": 100.0 * (j / j_meas - 1.0),
            "fit_floor_fraction": fit.floor_fraction, "fit_mbu_weight": fit.mbu_weight,
            "fit_mfu_weight": fit.mfu_weight}


def mean_abs(xs) -> float:
    xs = [abs(x) for x in xs]
    return math.fsum(xs) / len(xs) if xs else float("nan")


def as_array(rows: list[dict], key: str) -> np.ndarray:
    return np.array([r[key] for r in rows], float)
