"""choose-draft's load → γ schedule: monotone in load, stable under the simulation's noise, and written as the
configs the engines take.

The schedule (`monotone`): load points in ascending order; at each one the candidate γ are those not above the
previous point's (γ never rises with load: non-increasing in batch size or rate), and among them
- the previous point's γ is kept while its speedup is within the tolerance of the best candidate's — the larger of
  GAMMA_TOLERANCE (2%) of that speedup and NOISE_SIGMAS (2) standard errors of the difference — so a band
  boundary moves only where the speedup difference exceeds the noise;
- otherwise the smallest γ within that tolerance of the best (a shorter draft wastes less work), as choose-draft
  has always picked;
- off (γ = 0) where no candidate γ has a speedup > 1, and from there on (monotone: speculation that loses at a
  load is not switched back on at a larger one; a load that does not fit in memory is off too).
The noise (`speedup_noise`): the standard error of τ, the tokens a request-step emits, from the run's own
histogram (`tokens_per_run_hist`, one count per request-step), as a fraction of τ, times the speedup. The paired
baseline runs the same requests with no acceptance draws, so acceptance is what varies; what the tolerance weighs
is the difference of two γ's speedups at one load (same requests, same seed), taken as √(σ₁² + σ₂²). Against the
spread of that difference over six seeds (Llama-3.1-8B + 1B draft, α 0.7, H100, `--stack vllm`, choose-draft's
request counts; γ 2 − γ 1 / γ 3 − γ 2): batch 1 estimated 0.011 / 0.015 vs 0.008 / 0.008 measured, batch 16
0.010 / 0.014 vs 0.017 / 0.013, batch 64 0.005 / 0.006 vs 0.013 / 0.010, batch 128 0.003 / 0.004 vs 0.006 /
0.005: within a factor 3 (low at large batch, where a closed loop's makespan is its busiest slot's); the 2%
floor covers the rest (twice the largest measured spread, 0.027, is 2% of a 1.3× speedup).

The configs (`engine_configs`, batch mode only — both engines switch on the live batch size, not on a rate):
- vLLM: `num_speculative_tokens_per_batch_size` = [[start, end, γ], ...] as specsim's `bands` policy takes it
  (`--policy bands`; 0 = off), and, since one vLLM server runs one `num_speculative_tokens`, per band the
  `--speculative-config` JSON a server sized for that band runs (None = no speculation in that band). `model` is
  the Hugging Face repo id of the shipped profile (`specsim.profiles.repo_ids`; its first listed id), the
  profile name where none is listed, the target's repo for MTP, and absent for n-gram.
- TensorRT-LLM: `speculative_config`'s `max_draft_len` and `draft_len_schedule`, a dict batch-size threshold →
  draft length: a batch of size B drafts the value of the largest threshold ≤ B; threshold 1 is required and
  equals max_draft_len; 0 disables speculation; none for a token tree, whose depth is its shape (TensorRT-LLM 1.2, tensorrt_llm/llmapi/llm_args.py,
  DecodingBaseConfig.draft_len_schedule, a developer interface there; not checked against its code in this
  repository — the package index ships only a stub of tensorrt-llm). JSON keys are strings; TensorRT-LLM's
  pydantic model reads "8" as 8. Below the first simulated batch the first band's γ holds, above the last the
  last band's (as specsim's bands policy's nearest-band rule).
"""

from __future__ import annotations

import json
import math

GAMMA_TOLERANCE = 0.02  # prefer the smallest γ within 2% of the best simulated speedup (choose.GAMMA_TOLERANCE)
NOISE_SIGMAS = 2.0  # ... or within twice the standard error of the difference, whichever is larger


def speedup_noise(row: dict) -> float:
    """Standard error of one run's speedup: speedup × SE(τ) / τ from the run's tokens-per-request-step histogram
    (bin i = i + 1 tokens); 0 when the run carries none."""
    hist = row.get("tokens_per_run_hist") or []
    total = math.fsum(hist)
    if total <= 1:
        return 0.0
    mean = math.fsum((i + 1) * h for i, h in enumerate(hist)) / total
    var = max(0.0, math.fsum((i + 1) ** 2 * h for i, h in enumerate(hist)) / total - mean * mean)
    return float(row["speedup"]) * math.sqrt(var / total) / mean


def _gammas(point: dict) -> list[int]:
    """The γ each entry of `speedup_by_gamma` ran: 1..G for a chain, the tree's depth for a tree's one entry."""
    n = len(point["speedup_by_gamma"])
    return [int(point["best_gamma"])] if n == 1 else list(range(1, n + 1))


def tolerance(s_best: float, sd_a: float, sd_b: float) -> float:
    """How far below the best speedup a γ may fall and still count as as good (module docstring)."""
    return max(GAMMA_TOLERANCE * s_best, NOISE_SIGMAS * math.hypot(sd_a, sd_b))


def monotone(points: list[dict]) -> list[int]:
    """The scheduled γ per load point (ascending loads), 0 = off; see the module docstring."""
    out: list[int] = []
    prev: int | None = None
    for p in points:
        if not p.get("fits", True) or prev == 0:
            prev = 0
            out.append(0)
            continue
        s = [float(x) for x in p["speedup_by_gamma"]]
        sd = [float(x) for x in p.get("speedup_noise_by_gamma") or [0.0] * len(s)]
        cand = [i for i, g in enumerate(_gammas(p)) if prev is None or g <= prev]
        cand = [i for i in cand if s[i] > 1.0]
        if not cand:
            prev = 0
            out.append(0)
            continue
        top = max(cand, key=lambda i: s[i])
        near = [i for i in cand if s[i] >= s[top] - tolerance(s[top], sd[i], sd[top])]
        keep = [i for i in near if _gammas(p)[i] == prev]
        i = keep[0] if keep else near[0]
        prev = _gammas(p)[i]
        out.append(prev)
    return out


def scheduled_speedup(point: dict, gamma: int) -> float:
    """The simulated speedup at the scheduled γ (1.0 when off: plain decoding)."""
    if not gamma or not point.get("fits", True):
        return 1.0
    return float(point["speedup_by_gamma"][index_of(point, gamma)])


def index_of(point: dict, gamma: int) -> int:
    """The entry of `speedup_by_gamma` that ran `gamma`."""
    return _gammas(point).index(int(gamma))


# --- the configs an engine takes ------------------------------------------------------------------------------

def _repo_id(profile: str) -> str:
    from specsim.profiles.repo_ids import HEAD_REPOS, MODEL_REPOS

    for table in (HEAD_REPOS, MODEL_REPOS):
        for repo, name in table.items():
            if name == profile:
                return repo
    return profile


def vllm_speculative_config(row: dict, target: str, gamma: int) -> dict | None:
    """The `--speculative-config` of a vLLM server running `gamma` for this draft row (None: plain decoding)."""
    if not gamma:
        return None
    method = row["method"]
    cfg: dict = {"method": method}
    if method == "mtp":
        cfg["model"] = _repo_id(target)
    elif method != "ngram":
        cfg["model"] = _repo_id(row["draft"].split(" (")[0])
    cfg["num_speculative_tokens"] = int(gamma)
    if row.get("draft_tp"):
        cfg["draft_tensor_parallel_size"] = int(row["draft_tp"])
    if row.get("tree"):  # vLLM's own form: the rank paths as a Python literal (specsim's widths/dynamic forms expanded)
        cfg["speculative_token_tree"] = row.get("tree_vllm") or row["tree"]
    return cfg


def vllm_tree(tree: str | None, topk, alpha: float | None) -> str | None:
    """A token tree as vLLM's `speculative_token_tree` takes it: "[(0,), (1,), (0, 0)]" (every node's rank path)."""
    if tree is None:
        return None
    from specsim.methods.tree_config import tree_setup

    return str([tuple(p) for p in tree_setup(tree, topk, alpha).tree.paths])


def engine_configs(row: dict, target: str, kind: str) -> dict | None:
    """vLLM's and TensorRT-LLM's forms of one draft row's bands (module docstring); None in rate mode."""
    if kind != "batch":
        return None
    bs = row["bands"]
    per_band = [{"batch_min": int(b["min"]), "batch_max": int(b["max"]), "num_speculative_tokens": int(b["gamma"]),
                 "speculative_config": vllm_speculative_config(row, target, b["gamma"])} for b in bs]
    first = int(bs[0]["gamma"])
    sched = {str(1 if k == 0 else int(b["min"])): int(b["gamma"]) for k, b in enumerate(bs)}
    # a chain only: a token tree's depth is fixed by its shape, so its schedule is on/off, not a draft length
    trt = None if first == 0 or row.get("tree") else {"max_draft_len": first, "draft_len_schedule": sched}
    return {"vllm": {"num_speculative_tokens_per_batch_size": [[int(b["min"]), int(b["max"]), int(b["gamma"])]
                                                               for b in bs], "per_band": per_band},
            "trtllm": trt}


def config_lines(res: dict) -> list[str]:
    """The recommended draft's schedule as the lines a user pastes (empty in rate mode)."""
    row = next((d for d in res["drafts"] if d.get("rank") == 1), None)
    cfg = None if row is None else row.get("engine_configs")
    if cfg is None:
        return ["engine configs: none in rate mode (vLLM and TensorRT-LLM switch γ on the live batch size: "
                "rerun with --batch)"] if res.get("load_kind") == "rate" else []
    v = cfg["vllm"]
    lines = [f"schedule for {row['draft']} (γ never rises with batch; a band moves only beyond the noise):",
             "  specsim --policy bands: num_speculative_tokens_per_batch_size = "
             + json.dumps(v["num_speculative_tokens_per_batch_size"]),
             "  vLLM takes one num_speculative_tokens per server; per batch band:"]
    for b in v["per_band"]:
        band = f"batch {b['batch_min']}" + (f"–{b['batch_max']}" if b["batch_max"] > b["batch_min"] else "")
        sc = b["speculative_config"]
        lines.append(f"    {band}: " + (f"--speculative-config '{json.dumps(sc)}'" if sc else
                                        "no --speculative-config (plain decoding pays more)"))
    t = cfg["trtllm"]
    if t is None:
        lines.append("  TensorRT-LLM: " + ("no draft_len_schedule for a token tree (its depth is its shape)"
                                          if row.get("tree") else "no speculation (it does not pay at the first batch)"))
    else:
        sched = ", ".join(f"{k}: {g}" for k, g in t["draft_len_schedule"].items())
        lines.append(f"  TensorRT-LLM speculative_config: max_draft_len: {t['max_draft_len']}, draft_len_schedule: "
                     f"{{{sched}}}  (batch ≥ key drafts the value; 0 = off)")
    return lines
