"""Why speculation loses (or what limits it), in one line.

Per speculative step the target gains τ = eq. (1) tokens for the price of γ draft passes and one verification pass;
in decode steps of the target that price is γ·c + T(B, γ+1) / T(B, 1), so the predicted speedup is
τ / (γ·c + T(B, γ+1)/T(B, 1)) — eq. (5) with the verification ratio the roofline gives instead of eq. (5)'s 1.
Of the price above one decode step, the larger part names the reason:
- draft cost: γ·c, the draft passes (a draft too large for its α, or a CPU-bound stack);
- verification, split by why the γ+1-position pass costs more than a 1-position one:
  - compute-bound verification: the pass is past the roofline's ridge (large batch), time grows with positions;
  - experts woken: a mixture-of-experts target whose B·(γ+1) tokens route to more distinct experts than B tokens
    do (E·(1 − (1 − k/E)^N) per layer, `specsim.profiles.moe`), so the pass reads more weights even at batch 1;
  - otherwise the extra KV writes and overheads of the wider pass.

The step is priced at the γ the run's steps actually ran (`explain_step(step_gammas=...)`: a batch step drafts the
largest γ of its requests, and a policy such as `heuristic` grows γ well past the configured one), averaged over the
steps. The line never implies a gain when the speedup is below 1: where the step arithmetic alone would pay
(τ above the step's price) but the run still loses, the line says so and puts the loss outside the decode step
(prefills, queueing, the batch a slower step builds up under load).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specsim.theory import expected_tokens


@dataclass(frozen=True)
class Why:
    speedup: float  # predicted (or the caller's simulated) speedup at this point
    reason: str  # "draft cost", "compute-bound verification", "experts woken", "verification cost"
    line: str


FREE_VERIFY = 1.05  # our choice: a verification within 5% of a decode step is "nearly free" (eq. (5)'s assumption)


def _verify_reason(target, batch: int, gamma: int, context: int, verify: float) -> tuple[str, str]:
    """Why the verification pass costs more than a decode step: (reason, detail)."""
    cost = target.pass_cost(batch, gamma + 1, context) if hasattr(target, "pass_cost") else None
    if cost is not None and cost.bound == "compute":
        return "compute-bound verification", f"the {gamma + 1}-position pass at batch {batch} is compute-bound"
    m = getattr(target, "model", None)
    if getattr(m, "is_moe", False) and hasattr(target, "pass_bytes"):
        one, many = batch, batch * (gamma + 1)
        woken = (m.pass_params(many) - m.pass_params(one)) * m.bytes_per_param / target.tp
        extra = target.pass_bytes(batch, gamma + 1, context) - target.pass_bytes(batch, 1, context)
        if extra > 0 and woken >= 0.5 * extra:
            ratio = target.pass_bytes(batch, gamma + 1, context) / target.pass_bytes(batch, 1, context)
            return "experts woken", (f"verifying {many} tokens wakes {m.expected_distinct_experts(many):.1f} of "
                                     f"{m.n_experts} experts per layer vs {m.expected_distinct_experts(one):.1f} for "
                                     f"{one}, so the pass reads {ratio:.2f}× the bytes of a decode step")
    if verify < FREE_VERIFY:
        return "verification cost", "nearly free: the pass stays memory-bound on the same weights"
    return "verification cost", f"the {gamma + 1}-position pass's extra KV, FLOPs and overheads"


def explain(target, draft, *, batch: int, gamma: int, alpha: float, context: int = 0,
            speedup: float | None = None) -> Why:
    """The dominant cost of speculation at one point (module doc), with the other one's figure; `speedup` overrides
    the predicted figure (e.g. a simulated one) in the line. `target` / `draft` are cost models with
    `pass_time_s(batch, positions, context)`."""
    t1 = target.pass_time_s(batch, 1, context)
    verify = target.pass_time_s(batch, gamma + 1, context) / t1
    drafting = gamma * draft.pass_time_s(batch, 1, context) / t1
    tau = float(expected_tokens(alpha, gamma))
    s = tau / (drafting + verify) if speedup is None else float(speedup)
    return _why(drafting, f"drafting γ·c = {gamma} × {drafting / gamma:.3g} = {drafting:.2f} decode steps", verify,
                _verify_reason(target, batch, gamma, context, verify), s,
                f"at batch {batch}, γ={gamma}, α={alpha:.3g}", tau)


def _why(drafting: float, drafting_text: str, verify: float, v: tuple[str, str], speedup: float, where: str,
         tau: float) -> Why:
    """The line: the larger of the two costs above one decode step names the reason, the other follows. When the
    step's own arithmetic pays (τ > its price) yet the speedup is below 1, the line says the loss lies elsewhere."""
    parts = [drafting_text, f"verification {verify:.2f} decode steps ({v[0]}: {v[1]})"]
    reason = "draft cost" if drafting >= verify - 1.0 else v[0]
    if reason != "draft cost":
        parts.reverse()
    per_step = tau / (drafting + verify)
    if speedup < 1.0 and per_step >= 1.0:
        reason = "load, not the step"
        line = (f"speculation loses ({speedup:.2f}× {where}) outside the decode step: a step costs "
                f"{drafting + verify:.2f} decode steps ({'; '.join(parts)}) and yields τ = {tau:.2f} tokens, "
                f"{per_step:.2f}× per step, so the loss comes from prefills, queueing or the larger batch a slower "
                f"step builds up under load")
        return Why(speedup=float(speedup), reason=reason, line=line)
    head = "speculation loses" if speedup < 1.0 else "speculation is limited"
    line = (f"{head} ({speedup:.2f}× {where}) by {reason}: {'; '.join(parts)}; each step yields τ = {tau:.2f} tokens "
            f"for {drafting + verify:.2f} decode steps ({per_step:.2f}× per step)")
    return Why(speedup=float(speedup), reason=reason, line=line)


def why_speculation_loses(target, draft, *, batch: int, gamma: int, alpha: float, context: int = 0) -> str | None:
    """One line naming the dominant reason when the predicted speedup is below 1; None when speculation wins."""
    w = explain(target, draft, batch=batch, gamma=gamma, alpha=alpha, context=context)
    return w.line if w.speedup < 1.0 else None


def explain_step(costs, *, batch: int, gamma: int, context: float, tokens_per_step: float, speedup: float,
                 alpha: float, step_gammas=None) -> Why:
    """`explain` for any method and tree, from the run's own step costs (`specsim.cost.steptime.StepCosts`): the
    drafting share is the speculative step minus its verification pass, both in the run's decode steps; τ is the
    simulated tokens per step. `step_gammas`: the γ each of the run's steps drafted (the batch's largest; 0 = a
    plain step); the price is their mean, so a policy that grows γ is priced at the γ it ran (None = every step at
    `gamma`). Used by `simulate` when the simulated speedup is below 1."""
    target = costs.target
    tree = getattr(costs, "tree", None)
    ctx = int(round(context))
    t1 = costs.plain_step(batch, float(ctx))[0]
    gs, counts = (np.array([gamma]), np.array([1])) if step_gammas is None or not len(step_gammas) else \
        np.unique(np.asarray(step_gammas, dtype=np.int64), return_counts=True)
    n = int(counts.sum())
    verify_g, draft_g = [], []
    for g, w in zip(gs.tolist(), counts.tolist()):
        positions = (tree.nodes + 1 if tree is not None else g + 1) if g else 1
        v = target.pass_time_s(batch, positions, ctx) / t1
        verify_g.append(w * v)
        draft_g.append(w * (costs.spec_step(batch, g, float(ctx))[0] / t1 - v))
    verify, drafting = math.fsum(verify_g) / n, math.fsum(draft_g) / n
    ran = math.fsum(g * w for g, w in zip(gs.tolist(), counts.tolist())) / n
    what = f"{costs.method.name if costs.method else 'draft_model'}, γ = {gamma}" + \
        (f", a {tree.nodes}-node tree" if tree is not None else "")
    if abs(ran - gamma) >= 0.05:
        what += f"; the steps drafted γ = {ran:.2f} on average, the batch's largest"
    top = int(gs[counts.argmax()]) if ran else gamma  # the verification's reason at the commonest γ
    positions = tree.nodes + 1 if tree is not None else max(top, 1) + 1
    return _why(drafting, f"drafting {drafting:.2f} decode steps ({what})", verify,
                _verify_reason(target, batch, positions - 1, ctx, verify), speedup,
                f"at batch {batch}, α={alpha:.3g}", tokens_per_step)
