"""Replay of a recorded β trace through the SimPy engine: what the simulator predicts for a measured run.

No torch here: the half of validation that needs no model (`validate_cpu.py --refit` runs it on saved measurements).

Position mapping (why the trace is shifted): the executor's prefill reads prompt[:-1] and its first step already
drafts output position 0, while the engine's prefill emits output position 0 and its first step drafts position
1. So the engine gets prompt_len = len(prompt) − 1, output_len = max_new_tokens + 1 and each sequence with one
dummy β in front; then the engine's contexts, step count and drafted positions equal the executor's exactly, and
at temperature 0 (β ∈ {0, 1}) its per-step accepted counts equal the executor's (`replay_matches`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specsim.errors import ConfigError

QUANTITIES = ("tokens_per_target_run", "draft_step_s", "verify_pass_s", "plain_step_s", "spec_walltime_s",
              "plain_walltime_s", "speedup")  # what `compare` scores, in report order


def shifted_trace(trace):
    """The executor's trace with one dummy position in front of every sequence (see the module docstring)."""
    from specsim.traces.format import Trace

    seqs = trace.sequences()
    return Trace.from_sequences([np.r_[0.0, s] for s in seqs], dict(trace.metadata, validate_shift=1),
                                sequence_ids=trace.sequence_ids)


def predict_replay(trace, prompt_lens: Sequence[int], max_new_tokens: int, gamma: int, target_costs,
                   draft_costs, seed: int = 0) -> dict:
    """Replay the executor's trace through the SimPy engine: predicted walltimes, speedup and per-step accepts.

    `prompt_lens` are the executor's prompt lengths (the engine gets len − 1); costs are CostModel-like objects
    (calibrated `CostModel` or `MeasuredCosts`)."""
    return _replays(trace, prompt_lens, max_new_tokens, [gamma], target_costs, draft_costs, seed)[0]


def _replays(trace, prompt_lens: Sequence[int], max_new_tokens: int, gammas: Sequence[int], target_costs,
             draft_costs, seed: int) -> list[dict]:
    """`predict_replay` at each γ; the plain baseline does not depend on γ, so it runs once."""
    from specsim.engine.acceptance import Acceptance
    from specsim.engine.simpy_engine import run_engine
    from specsim.engine.policies import make_policy
    from specsim.cost.steptime import StepCosts
    from specsim.engine.workload import Workload

    n = len(prompt_lens)
    if trace.n_sequences != n:
        raise ConfigError("trace and prompts differ in number", field="trace", value=trace.n_sequences,
                          allowed=f"{n} sequences, one per prompt")
    wl = Workload("closed", np.full(n, np.nan), np.asarray(prompt_lens, np.int64) - 1,
                  np.full(n, max_new_tokens + 1, np.int64), 1, 1)
    shifted = shifted_trace(trace)
    costs = StepCosts(target_costs, draft_costs, draft_catchup=True)  # as the executor runs (SpeculativeDecoder)
    base = run_engine(wl, costs, None, None, None, 1)
    t_plain = float(base.finish_s.max())
    plain_req = base.finish_s - base.arrival_s
    L = float(np.mean(wl.prompt_len)) + max_new_tokens / 2
    d1 = draft_costs.pass_time_s(1, 1, L)
    out = []
    for gamma in gammas:
        acc = Acceptance(trace=shifted, seed=seed)
        policy = make_policy("fixed", gamma, acc.alpha, costs.derived_c(int(wl.prompt_len[0])))
        spec = run_engine(wl, costs, acc, policy, None, 1)
        accepted = [a.tolist() for a in spec.accepted_by_request()]
        steps = sum(len(a) for a in accepted)
        catchup_share = sum(int(x == gamma) for a in accepted for x in a[:-1]) / max(1, steps)
        t_spec = float(spec.finish_s.max())
        spec_req = spec.finish_s - spec.arrival_s
        out.append({
            "spec_walltime_s": t_spec, "plain_walltime_s": t_plain, "speedup": t_plain / t_spec,
            "prompt_speedups": (plain_req / spec_req).tolist(), "spec_prompt_s": spec_req.tolist(),
            "plain_prompt_s": plain_req.tolist(),
            "accepted": accepted, "target_runs": int(spec.rs_accepted.size),
            "tokens_per_target_run": float(spec.rs_accepted.mean() + 1) if spec.rs_accepted.size else None,
            "draft_step_s": d1 + catchup_share * (draft_costs.pass_time_s(1, 2, L) - d1) / gamma,
            "catchup_share": catchup_share,
            "verify_pass_s": target_costs.pass_time_s(1, gamma + 1, L),
            "plain_step_s": target_costs.pass_time_s(1, 1, L), "mean_context": L})
    return out


def predict_gammas(trace, prompt_lens: Sequence[int], max_new_tokens: int, gammas: Sequence[int], target_costs,
                   draft_costs, seed: int = 0) -> list[dict]:
    """The replay at other γ ≥ 1 (a β trace does not depend on γ), with eq. (5)'s closed form beside it (c = draft
    over target one-token step at the mean context; the closed form prices a verification as one target step)."""
    from specsim.theory import speedup as closed_form

    out = []
    for g, p in zip(gammas, _replays(trace, prompt_lens, max_new_tokens, [int(g) for g in gammas], target_costs,
                                     draft_costs, seed)):
        c = draft_costs.pass_time_s(1, 1, p["mean_context"]) / p["plain_step_s"]
        out.append({"gamma": int(g), "speedup": p["speedup"], "tokens_per_target_run": p["tokens_per_target_run"],
                    "verify_over_plain": p["verify_pass_s"] / p["plain_step_s"], "c": c,
                    "closed_form_speedup": float(closed_form(trace.alpha, int(g), c))})
    return out


def replay_matches(measured_accepted: Sequence[Sequence[int]], predicted_accepted: Sequence[Sequence[int]]) -> dict:
    """Step-for-step comparison of accepted counts per prompt."""
    same = [list(a) == list(b) for a, b in zip(measured_accepted, predicted_accepted)]
    steps = sum(len(a) for a in measured_accepted)
    agree = sum(int(x == y) for a, b in zip(measured_accepted, predicted_accepted) for x, y in zip(a, b))
    return {"sequences_identical": int(sum(same)), "sequences": len(same), "all_identical": all(same),
            "steps_agreeing": agree, "steps": steps}


def compare(measured: dict, predicted: dict) -> dict:
    """Predicted against measured for the validated quantities, with the error in percent."""
    out = {}
    for k in QUANTITIES:
        m, p = measured.get(k), predicted.get(k)
        out[k] = {"measured": m, "predicted": p,
                  "error_pct": None if not m or p is None else 100.0 * (p / m - 1.0)}
    return out
