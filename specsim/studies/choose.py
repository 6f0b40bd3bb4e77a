"""Choose a draft: rank candidate drafts for one target on one hardware setup, and pick γ per load band.

For every draft (α given as a number, or a β trace whose α *and clustering* are used) and every load point
(closed-loop batch sizes, or Poisson request rates), the engine (`specsim.simulate.run`, fast path at batch 1)
is run at each γ in 1..gamma_max against the paired no-speculation baseline. Per load point:
- best γ = the smallest γ whose simulated speedup is within GAMMA_TOLERANCE (2%) of the largest one (near the
  optimum the curve is flat and a finite run's noise would otherwise flip γ between neighbours; a shorter draft
  wastes less work), and each γ's speedup carries its noise (`speedup_noise_by_gamma`, one standard error);
- recommended γ = the schedule over the load points (`specsim.studies.schedule.monotone`): never rising with load,
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.engine.acceptance import GAMMA_CAP
from specsim.errors import ConfigError, DoesNotFitError
from specsim.setup.deployment import Deployment, load_profile
from specsim.studies import schedule
from specsim.studies.schedule import GAMMA_TOLERANCE  # noqa: F401  (the rule's tolerance, used by the studies)

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_GAMMA_MAX = 8
_FORMAT = "NAME:ALPHA (ALPHA in [0, 1)) or NAME:TRACE_FILE (.parquet, .pq, .csv)"


@dataclass(frozen=True)
class DraftSpec:
    """One candidate draft as the user named it: a model profile plus its acceptance source."""

    text: str  # as given, e.g. "llama-3.2-1b:0.7"
    model: str  # model profile name or TOML path
    alpha: float  # the given α, or the trace's mean β
    trace: str | None = None  # β trace path when α came from a trace
    method: str = "draft_model"  # the speculation method (specsim.methods): a head profile's own, or the config's
    draft_tp: int | None = None  # the draft's TP degree (vLLM's draft_tensor_parallel_size); None = the target's
    tree: str | None = None  # a token tree (speculative_token_tree): its depth is γ, so no γ is searched
    tree_topk: tuple | None = None  # its tree_topk_acceptance
    configured_gamma: int | None = None  # the γ the pasted config runs (num_speculative_tokens): still searched,
    # and its own speedup reported beside the recommendation
    ignored: tuple[str, ...] = ()  # the config's keys that change nothing here (`spec_config.choose_ignored`)

    def tree_nodes(self) -> int:
        """Verified positions beyond the root: the tree's nodes (0 without a tree)."""
        if self.tree is None:
            return 0
        from specsim.methods.tree_config import tree_setup

        return tree_setup(self.tree, self.tree_topk, None if self.trace else self.alpha).tree.nodes


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


def _requests_for(kind: str, load, requests: int | None) -> int:
    """Enough requests for a steady state: several waves of the batch, or a few hundred Poisson arrivals."""
    if requests is not None:
        return int(requests)
    return max(64, 4 * int(load)) if kind == "batch" else 200


# --- memory -----------------------------------------------------------------------------------------------------

def _memory(dep: Deployment, gamma_max: int, prompt_len: int, output_len: int) -> dict:
    """Weights + KV per concurrent request per chip, the largest batch that fits, and the does-not-fit text."""
    mem, _ = dep.memory(gamma_max + 1)
    per_req = float(mem.request_bytes(np.array([prompt_len]), np.array([output_len]))[0])
    max_batch = int(max(0.0, mem.kv_budget) // per_req) if per_req > 0 else 4096
    return {"capacity_gb": mem.capacity / 1e9, "weights_gb": mem.weights / 1e9, "kv_per_request_gb": per_req / 1e9,
            "max_batch": max_batch, "tp": dep.tp, "hardware": dep.hardware.name, "stack": dep.stack.name}


def _no_fit_line(draft: str, m: dict, batch: int) -> str:
    need = m["weights_gb"] + batch * m["kv_per_request_gb"]
    best = f"the largest batch that fits is {m['max_batch']}" if m["max_batch"] >= 1 else \
        "not even one request fits"
    return (f"does not fit: target + {draft} at batch {batch} need {need:.2f} GB per chip (weights "
            f"{m['weights_gb']:.2f} GB + KV {batch * m['kv_per_request_gb']:.2f} GB) but {m['hardware']} has "
            f"{m['capacity_gb']:g} GB (tp {m['tp']}); {best}; allowed: a larger --tp, a smaller batch or shorter "
            f"requests, or a larger device")


# --- per-point search --------------------------------------------------------------------------------------------

def _simulate_point(base: dict, spec: DraftSpec, kind: str, load, gamma_max: int) -> dict:
    from specsim.simulate import make_config, run

    by_gamma = []
    for g in ([None] if spec.tree is not None else range(1, gamma_max + 1)):  # a tree's depth is its one γ
        kw = dict(base, draft=spec.model, method=spec.method, draft_tp=spec.draft_tp)
        if g is None:
            kw.update(speculative_token_tree=spec.tree, tree_topk_acceptance=spec.tree_topk,
                      gamma=spec.configured_gamma)  # a tree's γ is its depth: a configured one must agree
        else:
            kw["gamma"] = g
        kw.update(alpha=spec.alpha if spec.trace is None else None, trace=spec.trace)
        kw.update(batch=int(load)) if kind == "batch" else kw.update(rate=float(load))
        r = run(make_config(**kw))
        by_gamma.append(r)
    s = np.array([r["speedup"] for r in by_gamma], dtype=float)
    sd = [schedule.speedup_noise(r) for r in by_gamma]
    top = int(np.argmax(s))
    ok = np.array([x >= s[top] - schedule.tolerance(s[top], e, sd[top]) for x, e in zip(s, sd)])
    if s.max() > 1.0:
        ok &= s > 1.0  # never let the tolerance switch a speedup into a slowdown
    i = int(np.flatnonzero(ok)[0])
    best = by_gamma[i]
    g_best = int(best["gamma"])
    mine = {} if spec.configured_gamma is None else \
        {"speedup_at_configured_gamma": float(s[0] if spec.tree is not None else s[spec.configured_gamma - 1])}
    return {**mine, "load": load, "fits": True, "best_gamma": g_best, "best_speedup": float(s[i]),
            "max_speedup": float(s.max()), "speedup_eq5_at_best": best["speedup_eq5"],
            "tokens_per_target_run": best["tokens_per_target_run"],
            "tokens_per_target_run_eq1": best["tokens_per_target_run_eq1"],
            "clustering_delta": best["clustering_delta"], "c": best["c"], "c_at_batch": best["c_at_batch"],
            "speedup_by_gamma": [float(x) for x in s],
            "speedup_noise_by_gamma": sd,
            "speedup_eq5_by_gamma": [float(r["speedup_eq5"]) for r in by_gamma], "engine": best["engine"]}


def bands(loads: list, gammas: list[int], kind: str = "batch") -> list[dict]:
    """Contiguous runs of load points with the same recommended γ (see the module docstring)."""
    out: list[dict] = []
    for x, g in zip(loads, gammas):
        if out and out[-1]["gamma"] == g:
            continue
        out.append({"min": x, "gamma": int(g)})
    for k, b in enumerate(out):
        if k + 1 < len(out):
            nxt = out[k + 1]["min"]
            b["max"] = nxt - 1 if kind == "batch" else nxt
            b["max_inclusive"] = kind == "batch"
        else:
            b["max"] = loads[-1]
            b["max_inclusive"] = True
    return [{"min": b["min"], "max": b["max"], "max_inclusive": b["max_inclusive"], "gamma": b["gamma"]}
            for b in out]


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
    rows = [_draft_row(spec, dep, base, kind, loads, int(gamma_max), prompt_len, output_len, requests, progress)
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


def _draft_row(spec, dep, base, kind, loads, gamma_max, prompt_len, output_len, requests, progress) -> dict:
    """One draft's points over the loads (a load that does not fit is a point marked so), bands and break-even."""
    mem = _memory(dep, max(gamma_max, spec.tree_nodes()), prompt_len, output_len)  # a tree writes nodes + 1
    points, lines = [], []
    for load in loads:
        need = int(load) if kind == "batch" else 1
        if mem["max_batch"] < need:
            lines.append(_no_fit_line(spec.model, mem, need))
            points.append({"load": load, "fits": False, "best_gamma": None, "best_speedup": None,
                           "recommended_gamma": 0, "realized_speedup": 1.0})
            continue
        if progress is not None:
            progress(spec.model, load)
        points.append(_simulate_point(dict(base, requests=_requests_for(kind, load, requests)), spec, kind,
                                      load, gamma_max))
    for p, g in zip(points, schedule.monotone(points)):
        p["recommended_gamma"], p["realized_speedup"] = g, schedule.scheduled_speedup(p, g)
        if p["fits"]:  # what the table shows: the figures at the scheduled γ (at the best γ where it is off)
            j = schedule.index_of(p, g or p["best_gamma"])
            p["speedup_at_recommended"] = p["speedup_by_gamma"][j]
            p["speedup_eq5_at_recommended"] = p["speedup_eq5_by_gamma"][j]
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
    why = _why(dep, kind, points, spec.alpha, prompt_len)
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
