"""Choose a draft: rank candidate drafts for one target on one hardware setup, and pick γ per load band.

For every draft (α given as a number, or a β trace whose α *and clustering* are used) and every load point
(closed-loop batch sizes, or Poisson request rates), the engine (`specsim.simulate.run`, fast path at batch 1)
is run at each γ in 1..gamma_max against the paired no-speculation baseline. Per load point:
- best γ = the smallest γ whose simulated speedup is within GAMMA_TOLERANCE (2%) of the largest one (near the
  optimum the curve is flat and a finite run's noise would otherwise flip γ between neighbours; a shorter draft
  wastes less work), and each γ's speedup carries its noise (`speedup_noise_by_gamma`, one standard error);
- recommended γ = the schedule over the load points (`specsim.setup.gamma_schedule.monotone`): never rising with load,
  a band boundary moved only where the speedup difference exceeds the noise, 0 (off) from the first load where
  no allowed γ gives a speedup > 1; the realized speedup is the simulated one at that γ (1.0 when off);
- bands = contiguous runs of load points sharing the recommended γ, in the shape of vLLM's
  `num_speculative_tokens_per_batch_size` (batch mode: band [min, max] holds every integer batch size from its
  first measured point up to the next band's first point − 1; the last band ends at the largest measured point —
  nothing beyond the range is predicted; rate mode: the same with rates, max exclusive except for the last band),
  and in batch mode also as the configs an engine takes (`engine_configs`: vLLM's per-band --speculative-config
  and specsim's bands policy, TensorRT-LLM's draft_len_schedule; `specsim.studies.schedule`);
- break-even load = the smallest measured load where no γ gives speedup ≥ 1 (None = none within the range);
  `why` (batch mode, present only then) = one line from `specsim.cost.explain` at the break-even batch, or for a
  mixture-of-experts target at the first batch: draft cost, compute-bound verification or experts woken.
A candidate given as a vLLM speculative config (`--speculative-config`) that sets num_speculative_tokens still has
γ searched; its configured γ and the speedup at it (per point, and averaged) are reported beside the advice.
Drafts are ranked by the realized speedup averaged over the load points (ties: the speedup at the first load).
Memory: weights of target + draft plus the KV reservation of every concurrent request (steptime.Memory: prompt +
output + γ_max + 1 positions, cross-attention K/V for encoder-decoders) must fit per chip. In batch mode a load
point above the largest batch that fits is not simulated and carries a does-not-fit line (the engine would
silently cap the concurrency); a draft with no load point left is not ranked, and if no draft fits at all the
call raises DoesNotFitError with the figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from specsim.engine.acceptance import GAMMA_CAP
from specsim.errors import ConfigError, DoesNotFitError
from specsim.setup import advice
from specsim.setup.advice import DEFAULT_BATCHES, DEFAULT_GAMMA_MAX, DraftSpec, bands  # noqa: F401  (the study's API)
from specsim.setup.deployment import Deployment, load_profile
from specsim.setup.gamma_schedule import GAMMA_TOLERANCE  # noqa: F401  (the rule's tolerance, used by the studies)
from specsim.studies import schedule

_FORMAT = "NAME:ALPHA (ALPHA in [0, 1)) or NAME:TRACE_FILE (.parquet, .pq, .csv)"


def parse_draft(text: str) -> DraftSpec:
    """`NAME:ALPHA` or `NAME:TRACE_FILE` → DraftSpec; any problem is a one-line ConfigError on --draft."""
    name, sep, value = str(text).rpartition(":")
    if not sep or not name.strip() or not value.strip():
        raise ConfigError("a draft must name a model and its acceptance", field="--draft", value=text,
                          allowed=_FORMAT)
    name, value = name.strip(), value.strip()
    try:
        method = getattr(load_profile("draft", name), "method", "draft_model")  # a head profile names its method
    except ConfigError as e:
        if e.field == "draft" and e.file is None:  # not a known profile name
            raise ConfigError(f"unknown draft model {name!r}", field="--draft", value=text,
                              allowed=e.allowed) from None
        raise ConfigError(f"bad draft model profile {name!r}: {e}", field="--draft", value=text) from None
    try:
        alpha = float(value)
    except ValueError:
        alpha = None
    if alpha is not None:
        if not (0.0 <= alpha < 1.0):  # NaN fails too
            raise ConfigError("acceptance rate out of range", field="--draft", value=text, allowed=_FORMAT)
        return DraftSpec(text=str(text), model=name, alpha=alpha, method=method)
    if not Path(value).is_file():
        raise ConfigError("neither an acceptance rate nor an existing trace file", field="--draft", value=text,
                          allowed=_FORMAT)
    from specsim.traces.format import Trace

    trace = Trace.read(value)
    if not trace.alpha < 1.0:
        raise ConfigError("the trace accepts every draft (α = 1): speedup is unbounded", field="--draft",
                          value=text, allowed="a trace with mean β < 1")
    return DraftSpec(text=str(text), model=name, alpha=float(trace.alpha), trace=value, method=method)


def _as_spec(d) -> DraftSpec:
    return d if isinstance(d, DraftSpec) else parse_draft(d)


def _loads(batches, rates) -> tuple[str, list]:
    if batches is not None and rates is not None:
        raise ConfigError("give batch sizes or request rates, not both", field="--rate",
                          allowed="--batch B,B,... or --rate R,R,...")
    if rates is not None:
        vals = [float(r) for r in rates]
        if not vals or any(not (math.isfinite(r) and 0 < r <= 1e6) for r in vals):
            raise ConfigError("request rates must be > 0", field="--rate", value=list(rates),
                              allowed="(0, 1e6] requests/s")
        return "rate", sorted(set(vals))
    vals = list(DEFAULT_BATCHES if batches is None else batches)
    if not vals or any(int(b) != b or not 1 <= b <= 4096 for b in vals):
        raise ConfigError("batch sizes must be integers in [1, 4096]", field="--batch", value=list(vals),
                          allowed="e.g. 1,4,16,64")
    return "batch", sorted({int(b) for b in vals})


def bands_text(bs: list[dict], kind: str = "batch") -> str:
    def rng(b):
        if b["min"] == b["max"]:
            return f"{b['min']:g}"
        return f"{b['min']:g}–{b['max']:g}" if b["max_inclusive"] else f"{b['min']:g}–<{b['max']:g}"
    unit = "batch " if kind == "batch" else "rate "
    return ", ".join(f"{unit}{rng(b)}: " + (f"γ={b['gamma']}" if b["gamma"] else "off") for b in bs)


def choose_draft(hardware: str, target: str, drafts, *, batches=None, rates=None,
                 gamma_max: int = DEFAULT_GAMMA_MAX, tp: int = 1, stack: str | None = None, prompt_len: int = 128,
                 output_len: int = 128, requests: int | None = None, seed: int = 0, progress=None) -> dict:
    """Rank drafts for `target` on `hardware` by simulated speedup; γ bands and break-even per draft.

    `drafts`: DraftSpec objects or "NAME:ALPHA" / "NAME:TRACE_FILE" strings. Returns one JSON-able dict:
    {hardware, target, stack, tp, load_kind, loads, gamma_max, drafts: [...per draft...], ranking, recommendation}.
    `progress(draft_name, load)` is called before each load point (for a progress bar)."""
    specs = _checked_inputs(drafts, gamma_max, tp)
    kind, loads = _loads(batches, rates)
    base = {"hardware": hardware, "target": target, "stack": stack, "tp": int(tp), "prompt_len": int(prompt_len),
            "output_len": int(output_len), "seed": int(seed), "engine": "auto"}
    deps = [Deployment.resolve(hardware, target, spec.model, stack=stack, tp=int(tp), method=spec.method,
                               draft_tp=spec.draft_tp) for spec in specs]
    for spec, dep in zip(specs, deps):
        arch = dep.target.architecture
        if dep.draft.architecture != arch:
            raise ConfigError("target and draft must both be decoder-only or both encoder-decoder", field="--draft",
                              value=spec.text, allowed=f"a {arch} model like the target {target}")
    rows = [_draft_row(spec, dep, base, kind, loads, int(gamma_max), requests, progress)
            for spec, dep in zip(specs, deps)]
    order = _ranked(rows)
    best = order[0]
    out = {"hardware": deps[0].hardware.name, "target": target, "stack": deps[0].stack.name, "tp": int(tp),
           "load_kind": kind,
           "loads": loads, "gamma_max": int(gamma_max), "prompt_len": int(prompt_len), "output_len": int(output_len),
           "seed": int(seed), "drafts": rows, "ranking": [r["draft"] for r in order]}
    out["recommendation"] = {"draft": best["draft"], "spec": best["spec"], "bands": best["bands"],
                             "break_even": best["break_even"], "mean_realized_speedup": best["mean_realized_speedup"],
                             "engine_configs": best["engine_configs"],
                             "text": recommendation_text(best, kind, loads)}
    if best.get("why"):
        out["recommendation"]["why"] = best["why"]
    return out


def _checked_inputs(drafts, gamma_max, tp) -> list:
    """The draft specs, after the search bound and TP degree are checked (one-line errors)."""
    if isinstance(gamma_max, bool) or int(gamma_max) != gamma_max or not 1 <= gamma_max <= GAMMA_CAP:
        raise ConfigError("draft length search bound out of range", field="--gamma-max", value=gamma_max,
                          allowed=f"integers in [1, {GAMMA_CAP}]")
    if isinstance(tp, bool) or int(tp) != tp or tp < 1:
        raise ConfigError("tensor-parallel degree out of range", field="--tp", value=tp, allowed="integers >= 1")
    specs = [_as_spec(d) for d in drafts]
    if not specs:
        raise ConfigError("no draft given", field="--draft", allowed=_FORMAT)
    for spec in specs:
        if spec.configured_gamma is not None and spec.tree is None and spec.configured_gamma > gamma_max:
            raise ConfigError(f"the configured γ is beyond the search (--gamma-max {gamma_max})",
                              field="--speculative-config.num_speculative_tokens", value=spec.configured_gamma,
                              allowed=f"1..{gamma_max}, or a larger --gamma-max")
    return specs


def _draft_row(spec, dep, base, kind, loads, gamma_max, requests, progress) -> dict:
    """One draft's points over the loads (a load that does not fit is a point marked so), bands and break-even."""
    from specsim.simulate import run_point

    points, mem, lines = advice.load_points(run_point, spec, dep, base, kind, loads, gamma_max, requests, progress)
    sims = [p for p in points if p["fits"]]
    below = [p["load"] for p in sims if p["max_speedup"] < 1.0]
    name = spec.model if spec.tree is None else f"{spec.model} ({spec.tree_nodes()}-node tree)"
    row = {"draft": name, "method": spec.method, "spec": spec.text, "alpha": spec.alpha, "trace": spec.trace,
           **({"tree": spec.tree, "tree_nodes": spec.tree_nodes()} if spec.tree is not None else {}),
           "alpha_source": "trace" if spec.trace else "given", "memory": dict(mem, fits=not lines,
                                                                              message=lines[0] if lines else None),
           **_configured(spec, points), "fits": bool(sims), "points": points,
           "bands": bands(loads, [p["recommended_gamma"] for p in points], kind),
           "break_even": below[0] if below else None,
           "mean_realized_speedup": float(np.mean([p["realized_speedup"] for p in points])),
           "first_speedup": sims[0]["best_speedup"] if sims and sims[0]["load"] == loads[0] else None,
           "c": sims[0]["c"] if sims else None,
           "clustering_delta": sims[0]["clustering_delta"] if sims else None}
    row["bands_text"] = bands_text(row["bands"], kind)
    tree_vllm = schedule.vllm_tree(spec.tree, spec.tree_topk, None if spec.trace else spec.alpha)
    row["engine_configs"] = schedule.engine_configs(dict(row, draft_tp=spec.draft_tp, tree_vllm=tree_vllm),
                                                    dep.target.name, kind)
    why = _why(dep, kind, points, spec.alpha, base["prompt_len"])
    if why:  # only then: a dense target that wins everywhere keeps its output as it was
        row["why"] = why
    return row


def _configured(spec: DraftSpec, points: list) -> dict:
    """A pasted config's own γ (num_speculative_tokens) and its speedup averaged over the load points that fit; the
    keys it gave that change nothing here."""
    out = {"speculative_config_ignored": list(spec.ignored)} if spec.ignored else {}
    if spec.configured_gamma is None:
        return out
    got = [p["speedup_at_configured_gamma"] for p in points if p["fits"]]
    return {**out, "configured_gamma": spec.configured_gamma,
            "mean_speedup_at_configured_gamma": float(np.mean(got)) if got else None}


def _why(dep, kind: str, points: list, alpha: float, prompt_len: int) -> str | None:
    """One line on what limits speculation (`specsim.cost.explain`) at the first batch where it loses, else, for
    a mixture-of-experts target, at the first batch (verifying γ+1 tokens wakes more experts than one token does);
    None in rate mode (no one batch to explain) or for a dense target that wins at every batch."""
    sims = [p for p in points if p["fits"]]
    lost = [p for p in sims if p["max_speedup"] < 1.0]
    p = lost[0] if lost else (sims[0] if sims and getattr(dep.target, "is_moe", False) else None)
    if kind != "batch" or p is None:
        return None
    from specsim.cost.explain import explain

    target, draft = dep.cost_models
    return explain(target, draft, batch=int(p["load"]), gamma=p["best_gamma"], alpha=alpha, context=prompt_len,
                   speedup=p["best_speedup"]).line


def _ranked(rows: list[dict]) -> list[dict]:
    """Drafts that fit, best first (mean realized speedup over the loads, then the first load's); ranks set."""
    fitting = [r for r in rows if r["fits"]]
    if not fitting:
        raise DoesNotFitError(rows[0]["memory"]["message"])
    order = sorted(fitting, key=lambda r: (-r["mean_realized_speedup"], -(r["first_speedup"] or 0.0)))
    for i, r in enumerate(order):
        r["rank"] = i + 1
    for r in rows:
        r.setdefault("rank", None)
    return order


def recommendation_text(row: dict, kind: str, loads: list) -> str:
    p0 = row["points"][0]
    unit = "batch" if kind == "batch" else "rate"
    head = f"use {row['draft']} (α={row['alpha']:.3g})"
    if p0["fits"] and p0["recommended_gamma"]:
        head += f": {p0['realized_speedup']:.2f}× at {unit} {loads[0]:g} with γ={p0['recommended_gamma']}"
    be = f"break-even {unit} {row['break_even']:g}" if row["break_even"] is not None else \
        f"break-even {unit}: none within the range (≤ {loads[-1]:g})"
    return f"{head}; {bands_text(row['bands'], kind)}; {be}"


def to_frame(result: dict):
    """One row per (draft, load point): the table behind the human output."""
    import pandas as pd

    rows = []
    for d in result["drafts"]:
        for p in d["points"]:
            rows.append({"draft": d["draft"], "alpha": d["alpha"], "rank": d["rank"], result["load_kind"]: p["load"],
                         **{k: v for k, v in p.items() if k not in ("load", "speedup_by_gamma",
                                                                     "speedup_eq5_by_gamma")}})
    return pd.DataFrame(rows)
