"""choose-draft's load → γ schedule written as the configs the engines take.

The schedule itself (which γ at which load: monotone in load, stable under the simulation's noise) is the setup
stage's rule, `specsim.setup.gamma_schedule`: the bands policy's default bands come from it too.

The configs (`engine_configs`, batch mode only — both engines switch on the live batch size, not on a rate):
- vLLM: `num_speculative_tokens_per_batch_size` = [[start, end, γ], ...] as specsim's `bands` policy takes it
  (`--policy bands`; 0 = off), and, since one vLLM server runs one `num_speculative_tokens`, per band the
  `--speculative-config` JSON a server sized for that band runs (None = no speculation in that band). `model` is
  the Hugging Face repo id of the shipped profile (`specsim.profiles.repo_ids`; its first listed id), the
  profile name where none is listed, the target's repo for MTP, and absent for n-gram.
- TensorRT-LLM: `speculative_config`'s `max_draft_len` and `draft_len_schedule`, a dict batch-size threshold →
  draft length: a batch of size B drafts the value of the largest threshold ≤ B; threshold 1 is required and
  equals max_draft_len; 0 disables speculation; none for a token tree, whose depth is its shape (TensorRT-LLM 1.2,
  tensorrt_llm/llmapi/llm_args.py, DecodingBaseConfig.draft_len_schedule, a developer interface there; not checked
  against its code in this repository — the package index ships only a stub of tensorrt-llm). JSON keys are
  strings; TensorRT-LLM's pydantic model reads "8" as 8. Below the first simulated batch the first band's γ holds,
  above the last the last band's (as specsim's bands policy's nearest-band rule).
"""

from __future__ import annotations

import json

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
        why = ("no draft_len_schedule for a token tree (its depth is its shape)" if row.get("tree")
               else "no speculation (it does not pay at the first batch)")
        lines.append("  TensorRT-LLM: " + why)
    else:
        sched = ", ".join(f"{k}: {g}" for k, g in t["draft_len_schedule"].items())
        lines.append(f"  TensorRT-LLM speculative_config: max_draft_len: {t['max_draft_len']}, draft_len_schedule: "
                     f"{{{sched}}}  (batch ≥ key drafts the value; 0 = off)")
    return lines
