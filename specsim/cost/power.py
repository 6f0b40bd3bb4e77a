"""Energy and dollars of a simulated run: a linear power model over the roofline's utilisation, and the hourly price.

Power model (an assumption, calibratable from a measured power trace with `fit_power`). One chip draws
    P(u) = idle_w + (tdp_w − idle_w) · u,        u = min(1, MBU + MFU) of the step,
where MBU = step bytes / (step time · datasheet bandwidth) and MFU = step FLOPs / (step time · datasheet peak FLOP/s)
are the per-chip figures `engine.metrics.step_metrics` averages. So the dynamic energy of a step is
(tdp_w − idle_w) · (bytes / peak bandwidth + FLOPs / peak FLOP/s): a fixed energy per byte moved and per FLOP
done, each priced so that either resource alone at its datasheet peak draws TDP, and capped at TDP.
Why the sum and not max(MBU, MFU): energy is spent per byte and per FLOP, so it adds over the passes of a step, and
the step records carry only the step's totals; a speculative step is memory-bound draft passes plus a verification
that turns compute-bound at large batch, and max() of the step's averaged MBU and MFU would under-read such a step
(each resource is busy only part of it: llama-3.1-8b + llama-3.2-1b, γ 4, batch 128 on h100-sxm averages MBU 0.30
and MFU 0.32 per step, so max() reads 0.32 for steps whose passes each kept one resource near its stack's ceiling).
The sum is exact over passes in this linear model, and it charges the extra FLOPs speculation spends
(Theorem 3.11) even while the step stays memory-bound. Under the idealized stack every pass saturates one resource,
so u ≈ 1 and energy follows time; with a stack's achievable fractions below 1 the two separate.
What it leaves out (why it is an assumption): memory traffic and FLOPs do not cost the same fraction of TDP on real
chips; power is not exactly linear; clocks throttle near TDP (the cap does not slow the step). Fit idle_w and the
dynamic coefficient (tdp_w − idle_w) to (utilisation, watts) pairs from a real run (nvidia-smi / DCGM power samples
against the simulator's step utilisation) with `fit_power` — `specsim calibrate-power SAMPLES.csv --hardware NAME
--out MINE.toml` does it and writes that copy.

Energy of a run, for chips = tp × replicas (every chip of a tensor-parallel group does the same per-chip work):
    E = chips · idle_w · walltime + tp · (tdp_w − idle_w) · Σ_steps u_step · dur_step
The idle floor is charged over the whole makespan (a provisioned chip draws it busy or not, over the same span its
hour is paid for); Σ over steps runs over every replica's steps (their step records are concatenated). With one
replica in closed loop the steps tile the makespan (prefills are folded into steps), so E = tp · Σ P(u) · dur.
Dollars: chips · price_usd_per_hour · walltime / 3600, and per million output tokens ×1e6 / tokens.
"""

from __future__ import annotations

import math

import numpy as np

from specsim.errors import ConfigError


def step_utilisation(dur_s: np.ndarray, bytes_: np.ndarray, flops: np.ndarray, peak_bytes_s: float,
                     peak_flops: float) -> np.ndarray:
    """u per step = min(1, MBU + MFU) (the module docstring says why)."""
    dur = np.asarray(dur_s, float)
    mbu = np.asarray(bytes_, float) / (dur * peak_bytes_s)
    mfu = np.asarray(flops, float) / (dur * peak_flops)
    return np.minimum(1.0, mbu + mfu)


def chip_power_w(u, idle_w: float, tdp_w: float):
    """P(u) = idle_w + (tdp_w − idle_w) · u per chip."""
    return idle_w + (tdp_w - idle_w) * np.asarray(u, float)


def run_energy_j(hardware, tp: int, replicas: int, walltime_s: float, dur_s: np.ndarray, bytes_: np.ndarray,
                 flops: np.ndarray, peak_bytes_s: float, peak_flops: float, util=None) -> float | None:
    """Joules of a whole run (module docstring); None when the profile has no power figures, or when the steps
    carry no bytes or FLOPs (step tables give times only, so their utilisation is unknown). `util`: the per-step
    (MBU, MFU) arrays already computed for the same steps (`engine.metrics.utilisation`), the same values."""
    if hardware.tdp_w is None or hardware.idle_w is None:
        return None
    dur = np.asarray(dur_s, float)
    if dur.size and not (np.any(bytes_) or np.any(flops)):
        return None
    ok = dur > 0
    if util is not None and ok.all():
        # = step_utilisation(...) element for element; dot over a fresh copy, as dur[ok] is (BLAS sums by alignment)
        u, dur_ok = np.minimum(1.0, util[0] + util[1]), dur.copy()
    else:
        u, dur_ok = step_utilisation(dur[ok], np.asarray(bytes_)[ok], np.asarray(flops)[ok], peak_bytes_s,
                                     peak_flops), dur[ok]
    # math.fsum, not a BLAS dot: exactly rounded, hence the same on Intel and AMD and in any worker process
    dynamic = (hardware.tdp_w - hardware.idle_w) * math.fsum(np.asarray(u, float) * dur_ok)
    return tp * replicas * hardware.idle_w * walltime_s + tp * dynamic


def run_usd(hardware, tp: int, replicas: int, walltime_s: float) -> float | None:
    """Dollars of a run: every chip billed at the on-demand price over the makespan; None without a price."""
    if hardware.price_usd_per_hour is None:
        return None
    return tp * replicas * hardware.price_usd_per_hour * walltime_s / 3600.0


def per_token(total: float | None, tokens: int, scale: float = 1.0) -> float | None:
    """total / tokens × scale (J/token: scale 1; $/Mtok: scale 1e6); None when either is missing."""
    return None if total is None or not tokens else total / tokens * scale


def fit_power(utilisation, watts) -> tuple[float, float]:
    """Least-squares fit of watts = idle_w + dynamic_w · u to measured pairs; returns (idle_w, dynamic_w).

    dynamic_w is the profile's tdp_w − idle_w (so tdp_w = idle_w + dynamic_w). Pairs are per-chip samples: a
    power reading averaged over a window and the simulator's utilisation of the same window."""
    u = np.asarray(utilisation, float).ravel()
    w = np.asarray(watts, float).ravel()
    if u.size != w.size or u.size < 2 or not (np.isfinite(u).all() and np.isfinite(w).all()):
        raise ConfigError("a power fit needs two or more finite (utilisation, watts) pairs of equal length",
                          field="power trace", value=(u.size, w.size))
    if np.ptp(u) == 0:
        raise ConfigError("a power fit needs samples at two or more utilisations", field="power trace",
                          value=float(u[0]), allowed="samples spanning idle and busy steps")
    a = np.column_stack([np.ones_like(u), u])
    (idle, dyn), *_ = np.linalg.lstsq(a, w, rcond=None)
    return float(idle), float(dyn)
