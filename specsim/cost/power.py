"""Energy and dollars of a simulated run: a chip's power as a function of what each pass does, and the hourly price.

Power of one chip (the form; where each figure comes from follows):
    idle (the engine not running a step: no request in flight)       P = idle_w
    running a pass with per-chip utilisation (MBU, MFU)              P = floor + (tdp_w − floor) · s / (1 + s),
                                                                      s = w_mbu · MBU + w_mfu · MFU
    waiting inside a step for other chips (a TP rank while a draft on fewer chips runs)     P = floor
floor = running_floor_w, w_mbu = power_mbu_weight, w_mfu = power_mfu_weight. A pass that moves nothing draws the
running floor (a GPU inside a serving loop does not fall back to idle between passes), power rises with the bytes
and FLOPs a pass keeps in flight and saturates towards TDP at large batch, never reaching it (s / (1 + s) < 1).
Why this form: 20 were tried on the same rows, each held out model by model, on the roofline and the measured-kernel
stack, prefills separate or mixed (experiments/power_forms.py -> experiments/results/power_forms.md): 1 − e^(−s),
min(1, s), Hill s^p/(1+s^p), MFU alone, the busier unit, all-reduce or launch overhead drawing the floor, energy per
byte and per FLOP shared across chips. None meets issue 23's line (every H100 row within 10%, B200 within 15%),
and none beats this one at every assumed prompt / output length (min(1, w_mfu·MFU) wins at 70 / 215 and loses at
512 / 512 and 1000 / 250); a division also rounds the same on every CPU where an exp need not. What no per-pass
curve can follow: at like utilisation the models draw unlike power (H100, batch 64: Llama-3.1-8B 87% of TDP,
Qwen3-14B 75%, Llama-3.1-70B on 4 GPUs 71%, at MFU 0.15, 0.16, 0.14; B200, batch 8: 8B 64%, 70B on 2 GPUs 85% at
the same MBU and MFU; B200 8B draws less at batch 64 than at 8).
- idle_w: a truly idle chip, sourced per chip in its profile (H100: 75 W, the Splitwise simulator's measured
  constant, ../shared/reference/measured-power.md).
- tdp_w: the datasheet's maximum board power.
- running_floor_w, power_mbu_weight, power_mfu_weight: fitted by `specsim calibrate-power` to measured serving rows
  (W per GPU at a batch, `specsim.cost.power_fit`); the shipped H100 and B200 profiles carry the fit to the ML.ENERGY
  v3 rows with its source. A profile without them uses `DEFAULT_CURVE`, that fit in fractions of its own tdp_w (an
  assumption for a chip no row measured; the floor is at least the chip's idle_w). Those rows (batch >= 8) do not
  identify the floor: on the roofline's utilisation the fit puts it at its bound, idle (on the measured-kernel
  stack's it lands at 0.44 of TDP; experiments/results/power_fit.md).
- MBU, MFU: a pass's bytes / (its time · datasheet bandwidth) and FLOPs / (its time · datasheet peak), per chip —
  what any cost basis (the roofline today, a measured-kernel stack) gives for the pass; `engine.metrics.utilisation`.

Per pass, per chip. A speculative step is draft passes, then one verification: each part draws what its own
utilisation says (`run_energy_j` takes the draft's share of every step, `draft_shares`). The target's TP ranks all
run the verification; a draft on fewer chips (draft_tp < tp) runs on draft_tp of them while the others wait at the
floor — so a one-chip draft is billed on one chip, not on the target's eight.
Energy of a run, for chips = tp × replicas:
    E = Σ_steps [tp · P(u_verify) · t_verify + (draft_tp · P(u_draft) + (tp − draft_tp) · floor) · t_draft]
        + idle_w · (chips · walltime − tp · Σ_steps t_step)
(steps of every replica concatenated; the time no step covers — an open loop waiting for arrivals — is idle).
Sums run strictly left to right over element-wise products (`_sum`): order-fixed, so the same on every CPU.
Mean power per chip = E / (chips · walltime), what `nvidia-smi` averages over the run.
What it leaves out: clocks throttling near TDP (the cap does not slow the step); power within a pass is uniform;
a step's split between draft and verification is priced at the run's mean live context (`draft_shares`):
within 0.01% of splitting each step at its own context, where not splitting at all moves the joules 3-12%
(experiments/power_split_check.py).
Dollars: chips · price_usd_per_hour · walltime / 3600, and per million output tokens ×1e6 / tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The curve fitted to all 18 ML.ENERGY v3 rows (H100 and B200 pooled, in fractions of each chip's TDP) by
# experiments/power_validation.py (experiments/results/power_fit.md): the figures shipped profiles without a fit
# of their own use. floor as a fraction of tdp_w (raised to the chip's idle_w where that is higher).
DEFAULT_CURVE = {"floor_fraction": 0.1071, "mbu_weight": 2.002, "mfu_weight": 14.23}
DEFAULT_SOURCE = "the ML.ENERGY v3 fit in fractions of TDP (cost.power.DEFAULT_CURVE; no rows of this chip)"


@dataclass(frozen=True)
class PowerCurve:
    """One chip's power figures (module docstring)."""

    idle_w: float
    floor_w: float
    tdp_w: float
    mbu_weight: float
    mfu_weight: float
    source: str

    @classmethod
    def of(cls, hardware) -> PowerCurve | None:
        """The profile's curve; None without tdp_w / idle_w (J/token is then null)."""
        if hardware.tdp_w is None or hardware.idle_w is None:
            return None
        if hardware.running_floor_w is not None:
            return cls(hardware.idle_w, hardware.running_floor_w, hardware.tdp_w, hardware.power_mbu_weight,
                       hardware.power_mfu_weight, f"fitted ({hardware.name} profile)")
        floor = min(hardware.tdp_w, max(hardware.idle_w, DEFAULT_CURVE["floor_fraction"] * hardware.tdp_w))
        return cls(hardware.idle_w, floor, hardware.tdp_w, DEFAULT_CURVE["mbu_weight"], DEFAULT_CURVE["mfu_weight"],
                   DEFAULT_SOURCE)

    def pass_power_w(self, mbu, mfu) -> np.ndarray:
        """Watts per chip while a pass of this utilisation runs (element-wise; negative inputs read as 0)."""
        s = self.mbu_weight * np.maximum(0.0, np.asarray(mbu, float)) + \
            self.mfu_weight * np.maximum(0.0, np.asarray(mfu, float))
        return self.floor_w + (self.tdp_w - self.floor_w) * (s / (1.0 + s))


def _sum(x: np.ndarray) -> float:
    """Σ x strictly left to right (numpy's cumsum: never pairwise, never reassociated by SIMD, unlike np.sum and
    np.dot), so the same bits on every CPU; 0 for no elements."""
    return float(np.add.accumulate(x)[-1]) if x.size else 0.0


def run_energy(hardware, tp: int, replicas: int, walltime_s: float, dur_s, bytes_, flops, peak_bytes_s: float,
               peak_flops: float, draft=None, draft_tp: int | None = None) -> tuple[float, float] | None:
    """(joules, mean watts per chip) of a whole run (module docstring); None without the profile's power figures,
    or when the steps carry no bytes or FLOPs (step tables give times only, so their utilisation is unknown).
    `draft`: (time, bytes, FLOPs) arrays of each step's draft part (`draft_shares`), None = all verification;
    `draft_tp`: chips the draft runs on (default tp)."""
    curve = PowerCurve.of(hardware)
    if curve is None:
        return None
    dur = np.asarray(dur_s, float)
    b, f = np.asarray(bytes_, float), np.asarray(flops, float)
    if dur.size and not (np.any(b) or np.any(f)):
        return None
    ok = dur > 0
    dur, b, f = dur[ok], b[ok], f[ok]
    if not ok.all():
        dur, b, f = dur[ok], b[ok], f[ok]
    draft_part = None
    if draft is None:
        verify = (dur, *_utilisation(dur, b, f, peak_bytes_s, peak_flops))
    else:
        dd, db, df = (np.asarray(x, float)[ok] for x in draft)
        dd, db, df = np.minimum(dd, dur), np.minimum(db, b), np.minimum(df, f)
        verify = (dur - dd, *_utilisation(dur - dd, b - db, f - df, peak_bytes_s, peak_flops))
        draft_part = (dd, *_utilisation(dd, db, df, peak_bytes_s, peak_flops))
    e_steps = steps_energy_j(curve, tp, tp if draft_tp is None else draft_tp, verify, draft_part)
    chips = tp * replicas
    idle_chip_s = max(0.0, chips * walltime_s - tp * _sum(dur))
    e = e_steps + curve.idle_w * idle_chip_s
    return e, (e / (chips * walltime_s) if walltime_s > 0 else curve.idle_w)


def steps_energy_j(curve: PowerCurve, tp: int, draft_tp: int, verify, draft=None) -> float:
    """Joules of a run's steps from per-step utilisation, whatever cost basis gave it: `verify` and `draft` are
    (time, MBU, MFU) arrays of each step's verification (or plain) part and draft part; the verification runs on tp
    chips, the draft on draft_tp of them while the rest wait at the floor (module docstring)."""
    dtp = min(int(draft_tp), tp)
    dv, uv, fv = (np.asarray(x, float) for x in verify)
    e = tp * _sum(curve.pass_power_w(uv, fv) * dv)  # a part of no time adds nothing, whatever its P
    if draft is not None:
        dd, ud, fd = (np.asarray(x, float) for x in draft)
        e += dtp * _sum(curve.pass_power_w(ud, fd) * dd) + (tp - dtp) * curve.floor_w * _sum(dd)
    return e


def _utilisation(dur, b, f, peak_bytes_s: float, peak_flops: float):
    """(MBU, MFU) of each part (0 where the part takes no time: it adds no energy)."""
    pos = dur > 0
    mbu, mfu = np.zeros_like(dur), np.zeros_like(dur)
    np.divide(b, dur * peak_bytes_s, out=mbu, where=pos)
    np.divide(f, dur * peak_flops, out=mfu, where=pos)
    return mbu, mfu


def run_energy_j(hardware, tp: int, replicas: int, walltime_s: float, dur_s, bytes_, flops, peak_bytes_s: float,
                 peak_flops: float, draft=None, draft_tp: int | None = None) -> float | None:
    """Joules of a whole run (`run_energy`)."""
    r = run_energy(hardware, tp, replicas, walltime_s, dur_s, bytes_, flops, peak_bytes_s, peak_flops, draft,
                   draft_tp)
    return None if r is None else r[0]


def draft_shares(costs, batch, gamma, dur_s, bytes_, flops, context: float, cross: float = 0.0):
    """Each step's draft part (time, bytes, FLOPs), priced at the run's mean live `context`: the step's totals
    times the draft's share of a step of that batch and γ (`StepCosts.spec_step` less its verification pass), so
    the parts add up to the recorded step. None when the costs cannot say (fixed_c, no draft)."""
    if costs.fixed_c is not None or costs.draft is None or not len(dur_s):
        return None
    batch, gamma = np.asarray(batch, np.int64), np.asarray(gamma, np.int64)
    span = int(gamma.max()) + 1 if gamma.size else 1
    keys, inv = np.unique(batch * span + gamma, return_inverse=True)  # one key per (batch, γ)
    share = np.zeros((3, keys.size))
    for j, (B, G) in enumerate(zip((keys // span).tolist(), (keys % span).tolist())):
        if G <= 0 or B <= 0:
            continue
        total = costs.spec_step(B, G, context, cross)
        verify = _verify(costs, B, G, context, cross)
        share[:, j] = [min(1.0, max(0.0, (t - v) / t)) if t > 0 else 0.0 for t, v in zip(total, verify)]
    inv = np.asarray(inv).reshape(-1)
    return tuple(np.asarray(x, float) * share[k][inv] for k, x in enumerate((dur_s, bytes_, flops)))


def _verify(costs, B: int, G: int, L: float, X: float):
    """The verification pass of a step (what `StepCosts.spec_step` adds its draft passes to)."""
    from specsim.cost.steptime import CONTEXT_BUCKET

    positions = costs.tree.nodes + 1 if costs.tree is not None else G + 1
    i = int(L // CONTEXT_BUCKET)
    t0, st, b0, sb, f0, sf = costs.t._seg(B, positions, i, int(round(X)))
    d = L - i * CONTEXT_BUCKET
    return t0 + d * st, b0 + d * sb, f0 + d * sf


def run_usd(hardware, tp: int, replicas: int, walltime_s: float) -> float | None:
    """Dollars of a run: every chip billed at the on-demand price over the makespan; None without a price."""
    if hardware.price_usd_per_hour is None:
        return None
    return tp * replicas * hardware.price_usd_per_hour * walltime_s / 3600.0


def per_token(total: float | None, tokens: int, scale: float = 1.0) -> float | None:
    """total / tokens × scale (J/token: scale 1; $/Mtok: scale 1e6); None when either is missing."""
    return None if total is None or not tokens else total / tokens * scale


def pass_power_w(hardware, bytes_: float, flops: float, time_s: float, dtype: str) -> float | None:
    """Modelled watts per chip while one pass runs (what `specsim roofline` prints); None without power figures."""
    curve = PowerCurve.of(hardware)
    if curve is None or time_s <= 0:
        return None
    mbu = bytes_ / (time_s * hardware.bandwidth_bytes_s)
    return float(curve.pass_power_w(mbu, flops / (time_s * hardware.peak_flops(dtype))))
