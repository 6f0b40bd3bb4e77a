"""Public API: `run(cfg) -> dict` (one flat row of JSON-able values) and `simulate(cfg) -> SimResult`.

Every run simulates speculative decoding and, on the same requests, plain decoding (the paired baseline), and
reports the closed forms beside the simulated figures:
- speedup: closed loop — baseline makespan / speculative makespan (batch 1: total time to finish the same
  requests); open loop (Poisson, replay) — baseline mean end-to-end latency / speculative mean end-to-end latency
  (makespan is set by the arrivals there). Both are also reported as speedup_walltime and speedup_latency.
- speedup_eq5 and tokens_per_target_run_eq1 at the run's α (config α, or the trace's mean β, after lenience) and
  the derived c. For adaptive policies they are eq. (1)/(5) averaged over the γ each request actually used
  (Σ eq1(α, γ_step) / steps and Σ eq1 / Σ(γ_step·c + 1)); for the oracle, 1/(1 − α) and 1/(1 − α + αc).
- clustering_delta = tokens_per_target_run − tokens_per_target_run_eq1 (≈ 0 for i.i.d. β; the effect of
  clustered or position-dependent β otherwise).
Time keys ending in _s are in seconds, or in "target-pass units" under fixed_c (time_unit says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from pydantic import ValidationError

from specsim.engine import engine_profiles
from specsim import theory
from specsim.engine.acceptance import ORACLE_CAP, Acceptance
from specsim.config import SimConfig
from specsim.errors import ConfigError
from specsim.engine.metrics import Records, acceptance_metrics, latency_metrics, step_metrics
from specsim.engine.policies import make_policy
from specsim.cost.steptime import Memory, StepCosts
from specsim.engine.workload import Workload, build_workload


def make_config(**kwargs) -> SimConfig:
    """Build a SimConfig; a bad value becomes a one-line ConfigError naming the field and the allowed range."""
    from specsim.profiles.loader import _translate

    try:
        return SimConfig(**{k: v for k, v in kwargs.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        if not first["loc"]:  # a cross-field rule (model validator)
            raise ConfigError(str(first["msg"]).removeprefix("Value error, ")) from None
        err = _translate(e, None)
        flag = "--" + str(err.field).replace("_", "-")
        raise ConfigError(err.message, field=flag, value=err.value, allowed=err.allowed) from None


@dataclass
class SimResult:
    cfg: SimConfig
    summary: dict
    workload: Workload
    spec: Records
    baseline: Records


def _costs(cfg: SimConfig):
    """Step costs, c, memory controls and datasheet peaks for the config."""
    if cfg.fixed_c is not None:
        return StepCosts(None, None, cfg.fixed_c), None, None, None, None
    from specsim import profiles as prof

    hw = prof.hardware(cfg.hardware)
    st = prof.stack(hw.default_stack if cfg.stack is None else cfg.stack)
    target = _cost_model(prof.model(cfg.target), hw, st, cfg.tp, cfg.measured_target, "measured_target")
    draft = _cost_model(prof.model(cfg.draft), hw, st, cfg.tp, cfg.measured_draft, "measured_draft")
    if target.model.architecture != draft.model.architecture:
        raise ConfigError("target and draft must both be decoder-only or both encoder-decoder", field="draft",
                          value=cfg.draft, allowed=f"a {target.model.architecture} model like the target")
    return (StepCosts(target, draft, draft_catchup=cfg.draft_catchup), target, draft, hw.bandwidth_bytes_s,
            hw.peak_flops(target.model.dtype))


def _cost_model(model, hw, st, tp: int, measured: str | None, field: str):
    """The roofline CostModel, or (measured cost mode) pass times interpolated from the CSV at `measured`."""
    from specsim.cost.roofline import CostModel

    if measured is None:
        return CostModel(model, hw, st, tp=tp)
    import csv

    from specsim.cost.roofline import check_tp

    check_tp(model, hw, tp)
    from specsim.cost.measured import MeasuredCosts

    if model.architecture == "encoder-decoder":
        raise ConfigError("measured cost mode supports decoder-only models", field=field, value=measured,
                          allowed=f"a decoder-only model (got {model.name}, {model.architecture})")
    try:
        mc = MeasuredCosts.read_csv(measured, model, hw, field=field)
    except (OSError, UnicodeDecodeError, csv.Error) as e:  # FileNotFoundError is already a ConfigError
        raise ConfigError(f"cannot read measured table ({type(e).__name__})", file=measured, field=field) from None
    mc.tp = tp  # the table times the whole TP group; memory accounting is per chip like the roofline's
    return mc


def simulate(cfg: SimConfig) -> SimResult:
    wl = build_workload(cfg)
    acc = Acceptance.from_config(cfg)
    costs, target, draft, peak_bw, peak_fl = _costs(cfg)
    c = costs.derived_c(cfg.prompt_len)
    policy = make_policy(cfg.policy, cfg.gamma, acc.alpha, c)
    mem_spec = mem_base = None
    if target is not None:
        mem_spec = Memory([target, draft], policy.max_gamma + 1)
        mem_base = Memory([target], 0)
        worst = int(np.argmax(mem_spec.request_bytes(wl.prompt_len, wl.output_len)))
        mem_spec.check_one(int(wl.prompt_len[worst]), int(wl.output_len[worst]))
    profile = engine_profiles.get(cfg.engine_profile)
    spec, base, extra = profile.run(cfg, wl, acc, policy, costs, target, draft, mem_spec, mem_base)
    summary = _summarize(cfg, wl, acc, policy, costs, c, spec, base, peak_bw, peak_fl, mem_spec)
    summary["engine_profile"] = cfg.engine_profile
    summary.update(extra)
    return SimResult(cfg, summary, wl, spec, base)


def run(cfg: SimConfig) -> dict:
    """One simulation point as a flat dict of JSON-able scalars and lists (one parquet row in a sweep)."""
    return simulate(cfg).summary


def _summarize(cfg, wl, acc, policy, costs, c, spec, base, peak_bw, peak_fl, mem) -> dict:
    a = acc.alpha
    out: dict = {"alpha": a, "alpha_trace_raw": acc.alpha_raw, "lenience": cfg.lenience, "c": c,
                 "policy": cfg.policy, "gamma": int(policy.initial_gamma()) if not policy.oracle else None,
                 "mode": wl.mode, "requests": wl.n, "time_unit": "s" if cfg.fixed_c is None else "target_pass"}
    out["c_at_batch"] = costs.derived_c(cfg.prompt_len, batch=max(1, wl.max_batch if wl.mode != "closed"
                                                                   else cfg.batch))
    out.update(acceptance_metrics(spec))
    out.update(latency_metrics(spec, cfg.slo_ttft_s, cfg.slo_tpot_s))
    out.update(step_metrics(spec, peak_bw, peak_fl))
    b = latency_metrics(base, cfg.slo_ttft_s, cfg.slo_tpot_s)
    b.update(step_metrics(base, peak_bw, peak_fl))
    for k, v in b.items():
        if k != "output_tokens":
            out[f"baseline_{k}"] = v
    # closed forms at the run's α and derived c (a trace may have α = 1: the limits are used there)
    g = spec.rs_gamma
    dist = None
    if policy.oracle:
        eq1 = theory.oracle_expected_tokens(a) if a < 1 else float(ORACLE_CAP + 1)
        eq5 = theory.oracle_speedup(a, c) if a < 1 else eq1 / (ORACLE_CAP * c + 1.0)
    elif policy.adaptive and g.size:
        gs, counts = np.unique(np.maximum(g, 1), return_counts=True)
        e1 = np.array([_eq1(a, int(x)) for x in gs])
        eq1 = float((e1 * counts).sum() / counts.sum())
        eq5 = float((e1 * counts).sum() / ((gs * c + 1.0) * counts).sum())
    else:
        gamma = max(1, int(policy.gamma))
        eq1 = _eq1(a, gamma)
        eq5 = eq1 / (gamma * c + 1.0)
        dist = list(_dist_eq1(a, gamma)) if a < 1 else [0.0] * gamma + [1.0]
    out["tokens_per_target_run_eq1"] = float(eq1)
    out["speedup_eq5"] = float(eq5)
    out["tokens_per_run_dist_eq1"] = dist
    tau = out.get("tokens_per_target_run")
    out["clustering_delta"] = None if tau is None else tau - float(eq1)
    out["draft_acceptance_rate_eq"] = (eq1 - 1.0) / policy.gamma if dist is not None else None
    out["speedup_walltime"] = _ratio(out["baseline_walltime_s"], out["walltime_s"])
    out["speedup_latency"] = _ratio(out["baseline_e2e_mean_s"], out["e2e_mean_s"])
    out["speedup_throughput"] = _ratio(out["throughput_tok_s"], out["baseline_throughput_tok_s"])
    out["speedup"] = out["speedup_walltime"] if wl.mode == "closed" else out["speedup_latency"]
    if mem is not None:
        out["memory_weights_gb"] = mem.weights / 1e9
        out["memory_capacity_gb"] = mem.capacity / 1e9
    return out


@lru_cache(maxsize=4096)  # sweeps evaluate the same (α, γ) point after point
def _eq1(a: float, gamma: int) -> float:
    """eq. (1), with its limit γ + 1 at α = 1."""
    return float(theory.expected_tokens(a, gamma)) if a < 1 else gamma + 1.0


@lru_cache(maxsize=4096)
def _dist_eq1(a: float, gamma: int) -> tuple:
    return tuple(theory.expected_tokens_distribution(a, gamma).tolist())


def _ratio(a, b):
    return float(a / b) if a is not None and b else None
