"""The γ advice per load: simulated fixed-γ points, the schedule over them, and the bands it makes.

Two users, one implementation: choose-draft (`specsim.studies.choose`, the study) and the setup stage, which works
out the bands policy's default bands (`policy_inputs`). Without `num_speculative_tokens_per_batch_size` given,
`--policy bands` runs the bands choose-draft advises for the config's setup (`specsim.engine.policies.bands` states
the rule): the config's hardware, stack, TP, target, and the draft with the run's α (or its trace), prompt and
output lengths and seed, at DEFAULT_BATCHES and γ ≤ DEFAULT_GAMMA_MAX, each point simulated with ADVICE_REQUESTS
requests; cached per setup within a process.

Simulating a point is the simulate layer's job, above this one: the caller passes it in as `run_point(**flat
fields) -> summary row` (`specsim.simulate` passes its own `run`), so imports still go one way and a fixed-γ point
(which needs no advice) is what is run. Per load point (`simulate_point`): every γ in 1..gamma_max, best γ = the
smallest within the schedule's tolerance of the largest speedup (`specsim.setup.gamma_schedule`); over the loads
(`load_points`) a load that does not fit in memory is a point marked so, and the recommended γ is the schedule
(`gamma_schedule.monotone`); `bands` writes the recommended γ as contiguous load bands.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specsim.errors import ConfigError
from specsim.setup.deployment import Deployment
from specsim.setup.gamma_schedule import index_of, monotone, scheduled_speedup, speedup_noise, tolerance

ADVICE_REQUESTS = 64  # requests per point when the bands policy's bands come from the advice (see the docstring)

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_GAMMA_MAX = 8

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



def requests_for(kind: str, load, requests: int | None) -> int:
    """Enough requests for a steady state: several waves of the batch, or a few hundred Poisson arrivals."""
    if requests is not None:
        return int(requests)
    return max(64, 4 * int(load)) if kind == "batch" else 200



# --- memory -----------------------------------------------------------------------------------------------------

def memory_fit(dep: Deployment, gamma_max: int, prompt_len: int, output_len: int) -> dict:
    """Weights + KV per concurrent request per chip, the largest batch that fits, and the does-not-fit text."""
    mem, _ = dep.memory(gamma_max + 1)
    per_req = float(mem.request_bytes(np.array([prompt_len]), np.array([output_len]))[0])
    max_batch = int(max(0.0, mem.kv_budget) // per_req) if per_req > 0 else 4096
    return {"capacity_gb": mem.capacity / 1e9, "weights_gb": mem.weights / 1e9, "kv_per_request_gb": per_req / 1e9,
            "max_batch": max_batch, "tp": dep.tp, "hardware": dep.hardware.name, "stack": dep.stack.name}


def no_fit_line(draft: str, m: dict, batch: int) -> str:
    need = m["weights_gb"] + batch * m["kv_per_request_gb"]
    best = f"the largest batch that fits is {m['max_batch']}" if m["max_batch"] >= 1 else \
        "not even one request fits"
    return (f"does not fit: target + {draft} at batch {batch} need {need:.2f} GB per chip (weights "
            f"{m['weights_gb']:.2f} GB + KV {batch * m['kv_per_request_gb']:.2f} GB) but {m['hardware']} has "
            f"{m['capacity_gb']:g} GB (tp {m['tp']}); {best}; allowed: a larger --tp, a smaller batch or shorter "
            f"requests, or a larger device")



# --- per-point search --------------------------------------------------------------------------------------------

def simulate_point(run_point, base: dict, spec: DraftSpec, kind: str, load, gamma_max: int) -> dict:
    """The best γ at one load: every γ in 1..gamma_max simulated (`run_point(**flat fields) -> summary row`)."""
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
        r = run_point(**kw)
        by_gamma.append(r)
    s = np.array([r["speedup"] for r in by_gamma], dtype=float)
    sd = [speedup_noise(r) for r in by_gamma]
    top = int(np.argmax(s))
    ok = np.array([x >= s[top] - tolerance(s[top], e, sd[top]) for x, e in zip(s, sd)])
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


def load_points(run_point, spec: DraftSpec, dep: Deployment, base: dict, kind: str, loads: list, gamma_max: int,
                requests: int | None, progress=None) -> tuple[list[dict], dict, list[str]]:
    """One draft's points over the loads, each with its recommended γ; the memory figures; the does-not-fit lines."""
    mem = memory_fit(dep, max(gamma_max, spec.tree_nodes()), base["prompt_len"], base["output_len"])  # a tree
    points, lines = [], []  # ... writes nodes + 1 KV slots
    for load in loads:
        need = int(load) if kind == "batch" else 1
        if mem["max_batch"] < need:
            lines.append(no_fit_line(spec.model, mem, need))
            points.append({"load": load, "fits": False, "best_gamma": None, "best_speedup": None,
                           "recommended_gamma": 0, "realized_speedup": 1.0})
            continue
        if progress is not None:
            progress(spec.model, load)
        points.append(simulate_point(run_point, dict(base, requests=requests_for(kind, load, requests)), spec, kind,
                                     load, gamma_max))
    for p, g in zip(points, monotone(points)):
        p["recommended_gamma"], p["realized_speedup"] = g, scheduled_speedup(p, g)
        if p["fits"]:  # what the table shows: the figures at the scheduled γ (at the best γ where it is off)
            j = index_of(p, g or p["best_gamma"])
            p["speedup_at_recommended"] = p["speedup_by_gamma"][j]
            p["speedup_eq5_at_recommended"] = p["speedup_eq5_by_gamma"][j]
    return points, mem, lines


def policy_inputs(cfg, alpha: float, run_point=None) -> dict:
    """What `BandsPolicy.build` needs beyond the config: the advised bands when none are given."""
    if cfg.get("num_speculative_tokens_per_batch_size") is not None:
        return {}
    if run_point is None:
        raise ConfigError("--policy bands without num_speculative_tokens_per_batch_size takes choose-draft's advice, "
                          "which simulates fixed-γ points: run it through specsim.simulate (or give the bands)",
                          field="num_speculative_tokens_per_batch_size", allowed="[[start, end, γ], ...]")
    return {"bands": advised_bands(cfg, alpha, run_point)}


def advised_bands(cfg, alpha: float, run_point) -> tuple:
    """The bands the advice gives for the config's setup, as ((start, end, γ), ...) (see the docstring)."""
    g = cfg.get
    draft_tp = None if g("draft_tp") is None else int(g("draft_tp"))
    return _advice(run_point, g("hardware"), g("target"), g("draft"), float(alpha), g("trace"), g("stack"),
                   int(g("tp")), int(g("prompt_len")), int(g("output_len")), int(g("seed")), g("method"), draft_tp)


@lru_cache(maxsize=64)
def _advice(run_point, hardware, target, draft, alpha, trace, stack, tp, prompt_len, output_len, seed, method,
            draft_tp) -> tuple:
    # the run's own method and draft TP: an EAGLE-3 head is advised as a head, not as a draft model
    spec = DraftSpec(text=f"{draft}:{trace or alpha}", model=draft, alpha=alpha, trace=trace, method=method,
                     draft_tp=draft_tp)
    dep = Deployment.resolve(hardware, target, draft, stack=stack, tp=tp, method=method, draft_tp=draft_tp)
    base = {"hardware": hardware, "target": target, "stack": stack, "tp": tp, "prompt_len": prompt_len,
            "output_len": output_len, "seed": seed, "engine": "auto"}
    loads = list(DEFAULT_BATCHES)
    points, _, _ = load_points(run_point, spec, dep, base, "batch", loads, DEFAULT_GAMMA_MAX, ADVICE_REQUESTS)
    return tuple((int(b["min"]), int(b["max"]), int(b["gamma"]))
                 for b in bands(loads, [p["recommended_gamma"] for p in points], "batch"))
