"""Public API: `run(cfg) -> dict` (one flat row of JSON-able values) and `simulate(cfg) -> SimResult`.

Every run simulates speculative decoding and, on the same requests, plain decoding (the paired baseline), and
reports the closed forms beside the simulated figures:
- speedup: closed loop — baseline makespan / speculative makespan (batch 1: total time to finish the same
  requests); open loop (Poisson, replay) — baseline mean end-to-end latency / speculative mean end-to-end latency
  (makespan is set by the arrivals there). Both are also reported as speedup_walltime and speedup_latency, and
  speedup_basis names which one `speedup` is ('walltime' or 'latency').
- speedup_eq5 and tokens_per_target_run_eq1 at the run's α (config α, or the trace's mean β, after lenience) and
  the derived c, as the γ policy states them (`Policy.baseline`): for one γ throughout, eq. (1)/(5) at it; for
  policies whose γ varies (heuristic, bands), eq. (1)/(5) averaged over the γ each request-step actually used
  (Σ eq1(α, γ_step) / steps and Σ eq1 / Σ(γ_step·c + 1)); for the oracle, 1/(1 − α) and 1/(1 − α + αc).
- clustering_delta = tokens_per_target_run − tokens_per_target_run_eq1 (≈ 0 for i.i.d. β; the effect of
  clustered or position-dependent β otherwise).
- method (`specsim.methods`, vLLM's names): what the draft slot is and how a step's proposals are priced; c and
  so speedup_eq5 are the method's own (per proposal; Medusa / n-gram: their one pass per step / γ), and
  method_host_s_per_request is the host time of one lookup (ngram / suffix; 0 otherwise).
Time keys ending in _s are in seconds, or in "target-pass units" under fixed_c (time_unit says which).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from specsim.config import RuleViolation, SimConfig, field_of_loc, flag
from specsim.cost.steptime import StepCosts
from specsim.engine.metrics import Records, acceptance_metrics, latency_metrics, step_metrics, utilisation
from specsim.engine.workload import Workload
from specsim.errors import ConfigError
from specsim.setup.deployment import Deployment
from specsim.setup.run import resolve, step_costs


def make_config(**kwargs) -> SimConfig:
    """Build a SimConfig from flat fields (None = the default); a bad value becomes a one-line ConfigError naming
    the `simulate` flag (`config.flag`) and the allowed range."""
    from specsim.profiles.loader import _translate

    try:
        return SimConfig.from_flat({k: v for k, v in kwargs.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        rule = (first.get("ctx") or {}).get("error")
        if isinstance(rule, RuleViolation):  # a cross-field rule: its fields named by their flags
            raise ConfigError(rule.render(flag)) from None
        if not first["loc"]:
            raise ConfigError(str(first["msg"]).removeprefix("Value error, ")) from None
        err = _translate(e, None)
        field = field_of_loc(first["loc"])
        raise ConfigError(err.message, field=flag(field), value=err.value, allowed=err.allowed) from None


@dataclass
class SimResult:
    cfg: SimConfig
    summary: dict
    workload: Workload
    spec: Records
    baseline: Records


_costs = step_costs  # kept under its old name for tests and experiments


def run_point(**kwargs) -> dict:
    """One point from flat fields (`make_config` then `run`): how the setup stage's advice simulates fixed-γ points."""
    return run(make_config(**kwargs))


def resolved(cfg: SimConfig):
    """`setup.run.resolve` with this layer's `run_point` (a bands policy without bands needs it): the RunSetup."""
    return resolve(cfg, run_point=run_point)


def simulate(cfg: SimConfig) -> SimResult:
    s = resolved(cfg)  # everything the run needs, built once (specsim.setup.run)
    wl, acc, policy, costs, c, dep = s.workload, s.acceptance, s.policy, s.costs, s.c, s.deployment
    spec, base, extra = s.profile.run(s)
    peak_bw, peak_fl = s.peaks
    util = [utilisation(r, peak_bw, peak_fl) for r in (spec, base)]  # per-step MBU, MFU: computed once
    summary = _summarize(cfg, wl, acc, policy, costs, c, spec, base, peak_bw, peak_fl, s.mem_spec, util)
    summary.update(_cost_keys(cfg, dep, spec, base, summary, costs, wl))
    summary["engine_profile"] = cfg.engine.engine_profile
    summary.update(_method_keys(cfg, costs))
    summary.update(extra)
    summary.update(_why(cfg, costs, wl, summary, spec.step_gamma) if s.profile.explains_steps else {})
    return SimResult(cfg, summary, wl, spec, base)


def run(cfg: SimConfig) -> dict:
    """One simulation point as a flat dict of JSON-able scalars and lists (one parquet row in a sweep)."""
    return simulate(cfg).summary


def _summarize(cfg, wl, acc, policy, costs, c, spec, base, peak_bw, peak_fl, mem, util=(None, None)) -> dict:
    out: dict = {"alpha": acc.alpha, "alpha_trace_raw": acc.alpha_raw, "lenience": cfg.acceptance.lenience, "c": c,
                 "policy": cfg.speculation.policy,
                 "gamma": policy.reported_gamma, "mode": wl.mode,
                 "requests": wl.n, "time_unit": "s" if cfg.deployment.fixed_c is None else "target_pass"}
    out["c_at_batch"] = costs.derived_c(cfg.workload.prompt_len, batch=max(1, wl.max_batch if wl.mode != "closed"
                                                                           else cfg.workload.batch))
    out.update(acceptance_metrics(spec))
    out.update(latency_metrics(spec, cfg.slo.slo_ttft_s, cfg.slo.slo_tpot_s, cfg.slo.slo_warmup_s))
    out.update(step_metrics(spec, peak_bw, peak_fl, util[0]))
    b = latency_metrics(base, cfg.slo.slo_ttft_s, cfg.slo.slo_tpot_s, cfg.slo.slo_warmup_s)
    b.update(step_metrics(base, peak_bw, peak_fl, util[1]))
    for k, v in b.items():
        if k != "output_tokens":
            out[f"baseline_{k}"] = v
    # closed forms at the run's α and derived c, as the policy states them for the γ it used (see the docstring)
    eq = _tree_closed_form(cfg, policy.baseline(acc.alpha, c, spec.rs_gamma), out)
    out["tokens_per_target_run_eq1"] = float(eq.eq1)
    out["speedup_eq5"] = float(eq.eq5)
    out["tokens_per_run_dist_eq1"] = eq.dist
    tau = out.get("tokens_per_target_run")
    out["clustering_delta"] = None if tau is None else tau - float(eq.eq1)
    out["draft_acceptance_rate_eq"] = eq.acceptance_rate
    out["speedup_walltime"] = _ratio(out["baseline_walltime_s"], out["walltime_s"])
    out["speedup_latency"] = _ratio(out["baseline_e2e_mean_s"], out["e2e_mean_s"])
    out["speedup_throughput"] = _ratio(out["throughput_tok_s"], out["baseline_throughput_tok_s"])
    out["speedup"] = out["speedup_walltime"] if wl.mode == "closed" else out["speedup_latency"]
    out["speedup_basis"] = "walltime" if wl.mode == "closed" else "latency"  # which of the two `speedup` is
    if mem is not None:
        out["memory_weights_gb"] = mem.weights / 1e9
        out["memory_capacity_gb"] = mem.capacity / 1e9
    out.update(policy.summary())
    return out


def _tree_closed_form(cfg, eq, out: dict):
    """A token tree's own closed form in place of eq. (1)/(5) (`specsim.methods.tree`): τ = 1 + Σ_d P(n ≥ d) and
    τ / (γ·c + 1), γ the depth (the draft passes priced as eq. (5) prices them, verification free); the tree's
    shape joins the row. A chain (no tree) keeps the policy's eq. (1)/(5). On a trace the rank model is the trace's
    own P(rank = r) over its positions (ranks taken i.i.d., so clustering_delta shows what their order adds)."""
    from specsim.engine.acceptance import read_trace
    from specsim.methods.tree_config import TreeSetup, from_config as tree_of

    setup = tree_of(cfg)
    if setup is None:
        return eq
    t = setup.tree
    out.update(tree_nodes=t.nodes, tree_depth=t.depth, tree_per_depth=list(t.per_depth))
    if t.is_chain:
        return eq
    if cfg.acceptance.alpha is None:
        setup = TreeSetup(t, read_trace(cfg.acceptance.trace).rank_probabilities(t.max_rank + 1))
    tau = t.expected_tokens(setup.p_rank)
    return eq._replace(eq1=tau, eq5=tau * float(eq.eq5) / float(eq.eq1), dist=setup.dist(), acceptance_rate=None)


def _cost_keys(cfg, dep: Deployment | None, spec: Records, base: Records, out: dict, costs: StepCosts,
               wl: Workload) -> dict:
    """J/token, mean power per chip and $/Mtok of both runs (`specsim.cost.power`); None under fixed_c or without
    the figures. A speculative step's draft part is split off (`draft_shares`, at the run's mean live context) so
    each part draws its own power, the draft on its own chips (draft_tp)."""
    from specsim.cost.power import draft_shares, per_token, run_energy, run_usd

    keys: dict = {}
    tp, replicas = cfg.deployment.tp, cfg.workload.replicas
    prompt_mean = float(np.mean(wl.prompt_len)) if wl.n else 0.0
    context = float(costs.context(prompt_mean, float(np.mean(wl.output_len)) / 2 + 1)) if wl.n else 0.0
    for prefix, rec in (("", spec), ("baseline_", base)):
        wall, tokens = out[f"{prefix}walltime_s"], int(rec.output_len.sum())
        e = usd = None
        if dep is not None:
            draft = draft_shares(costs, rec.step_batch, rec.step_gamma, rec.step_dur_s, rec.step_bytes,
                                 rec.step_flops, context, float(costs.cross(prompt_mean))) if rec is spec else None
            e = run_energy(dep.hardware, tp, replicas, wall, rec.step_dur_s, rec.step_bytes, rec.step_flops,
                           dep.peak_bytes_s, dep.peak_flops, draft, dep.draft_tp_degree)
            usd = run_usd(dep.hardware, tp, replicas, wall)
        keys[f"{prefix}energy_j_per_token"] = per_token(None if e is None else e[0], tokens)
        keys[f"{prefix}power_w_per_chip_mean"] = None if e is None else e[1]
        keys[f"{prefix}usd_per_mtok"] = per_token(usd, tokens, 1e6)
    keys["energy_ratio"] = _ratio(keys["energy_j_per_token"], keys["baseline_energy_j_per_token"])
    keys["usd_ratio"] = _ratio(keys["usd_per_mtok"], keys["baseline_usd_per_mtok"])
    return keys


def _method_keys(cfg, costs: StepCosts) -> dict:
    """method and its host time per lookup (`Method.summary`); a speculative config's ignored keys, if any."""
    from specsim import methods
    from specsim.methods.spec_config import summary_keys

    return {**methods.get(cfg.speculation.method).summary(costs.draft), **summary_keys(cfg)}


def _why(cfg, costs: StepCosts, wl: Workload, out: dict, step_gammas=None) -> dict:
    """`why`: one line on what makes speculation lose (`specsim.cost.explain.explain_step`), only when the
    simulated speedup is below 1 and the roofline prices the passes, at the run's mean batch and mean context and
    the γ its steps ran (`step_gammas`, the records' batch-largest γ per step); asked only of an engine profile
    whose steps it prices (`EngineProfile.explains_steps`)."""
    s, tau = out.get("speedup"), out.get("tokens_per_target_run")
    if s is None or s >= 1.0 or tau is None or cfg.deployment.fixed_c is not None \
            or not hasattr(costs.target, "pass_cost"):
        return {}
    from specsim.cost.explain import explain_step

    batch = max(1, int(round(out.get("batch_mean") or 1)))
    context = float(np.mean(wl.prompt_len) + np.mean(wl.output_len) / 2)
    return {"why": explain_step(costs, batch=batch, gamma=cfg.speculation.gamma, context=context,
                                tokens_per_step=tau, speedup=s, alpha=out["alpha"], step_gammas=step_gammas).line}


def _ratio(a, b):
    return float(a / b) if a is not None and b else None
