"""Hugging Face repo ids -> the shipped profile of the same architecture (the one table; data only).

A vLLM `--speculative-config` names its draft or head by repo id (`"model": "meta-llama/Llama-3.2-1B-Instruct"`).
Where a shipped profile holds that repo's architecture, the id maps to it: the source of each entry is the repo id
itself read against the profile's header, which names the HF config it was built from (an `-Instruct` release
has its base model's config fields; a renamed repo, e.g. Meta-Llama-3.1-8B -> Llama-3.1-8B, is the same
checkpoint). Anything not listed maps to nothing: the caller then names the field and the shipped choices (or a
local folder holding the repo's config.json, which `ModelProfile.from_hf_config` imports). Matching ignores case,
as the Hub's own repo resolution does.
"""

from __future__ import annotations

import re

# repo id -> model profile (model_profiles/<name>.toml); the comment is the profile header's source line
MODEL_REPOS: dict[str, str] = {
    "meta-llama/Llama-3.2-1B": "llama-3.2-1b",  # llama-3.2-1b.toml: HF config meta-llama/Llama-3.2-1B
    "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b",  # the instruct release of the same config
    "meta-llama/Llama-3.2-3B": "llama-3.2-3b",  # llama-3.2-3b.toml: HF config meta-llama/Llama-3.2-3B
    "meta-llama/Llama-3.2-3B-Instruct": "llama-3.2-3b",  # the instruct release of the same config
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",  # llama-3.1-8b.toml: HF config meta-llama/Llama-3.1-8B
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",  # the instruct release of the same config
    "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",  # the repo's name before Meta renamed it
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",  # idem
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",  # llama-3.1-70b.toml: HF config meta-llama/Llama-3.1-70B
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",  # the instruct release of the same config
    "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b",  # the repo's name before Meta renamed it
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",  # idem
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.1-70b",  # Llama 3.3 70B has Llama 3.1 70B's config fields
    # (heads/eagle3-llama-3.1-70b.toml: the EAGLE-3 head released for 3.3 70B serves this profile)
    "lmsys/vicuna-7b-v1.3": "llama-7b",  # llama-7b.toml: HF config lmsys/vicuna-7b-v1.3
    "lmsys/vicuna-13b-v1.3": "llama-13b",  # llama-13b.toml: HF config lmsys/vicuna-13b-v1.3
    "lmsys/vicuna-33b-v1.3": "llama-33b",  # llama-33b.toml: HF config lmsys/vicuna-33b-v1.3
    "JackFram/llama-68m": "llama-68m",  # llama-68m.toml: HF config JackFram/llama-68m
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",  # mixtral-8x7b.toml: HF config mistralai/Mixtral-8x7B-v0.1
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",  # the instruct release of the same config
    "Qwen/Qwen2.5-Coder-0.5B": "qwen2.5-coder-0.5b",  # qwen2.5-coder-0.5b.toml: "-Instruct has the same shape"
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": "qwen2.5-coder-0.5b",  # its HF config (tests/fixtures/hf_qwen2_config.json)
    "Qwen/Qwen2.5-Coder-1.5B": "qwen2.5-coder-1.5b",  # qwen2.5-coder-1.5b.toml: "-Instruct has the same shape"
    "Qwen/Qwen2.5-Coder-1.5B-Instruct": "qwen2.5-coder-1.5b",  # its HF config
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",  # qwen3-30b-a3b.toml: HF config Qwen/Qwen3-30B-A3B
    "HuggingFaceTB/SmolLM2-135M": "smollm2-135m",  # smollm2-135m.toml: HF config HuggingFaceTB/SmolLM2-135M
    "HuggingFaceTB/SmolLM2-135M-Instruct": "smollm2-135m",  # idem: "-Instruct has the same shape"
    "google/t5-v1_1-small": "t5-v1_1-small",  # t5-v1_1-small.toml: HF config google/t5-v1_1-small
    "google/t5-v1_1-base": "t5-v1_1-base",  # t5-v1_1-base.toml: HF config google/t5-v1_1-base
    "google/t5-v1_1-large": "t5-v1_1-large",  # t5-v1_1-large.toml: HF config google/t5-v1_1-large
    "google/t5-v1_1-xxl": "t5-v1_1-xxl",  # t5-v1_1-xxl.toml: HF config google/t5-v1_1-xxl
}

# repo id -> head profile (model_profiles/heads/<name>.toml); the head's own `method` says which method it serves
HEAD_REPOS: dict[str, str] = {
    "yuhuili/EAGLE-LLaMA3.1-Instruct-8B": "eagle-llama-3.1-8b",  # heads/eagle-llama-3.1-8b.toml: config.json of
    # the released head yuhuili/EAGLE-LLaMA3.1-Instruct-8B
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": "eagle3-llama-3.1-8b",  # heads/eagle3-llama-3.1-8b.toml: config.json
    # of the released head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B
    "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B": "eagle3-llama-3.1-70b",  # heads/eagle3-llama-3.1-70b.toml: config.json
    # of the released head yuhuili/EAGLE3-LLaMA3.3-Instruct-70B
}

_MODELS = {k.lower(): v for k, v in MODEL_REPOS.items()}
_HEADS = {k.lower(): v for k, v in HEAD_REPOS.items()}
# the Hub's repo id shape: owner/name, letters, digits, '-', '_', '.' (no leading '.', no suffix of a profile file)
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def looks_like_repo_id(text: str) -> bool:
    """`owner/name` as the Hub writes it, and not a profile file (`.toml` / `.json`)."""
    return bool(_REPO_ID.match(text)) and not text.endswith((".toml", ".json"))


def lookup(repo_id: str) -> tuple[str, str] | None:
    """(kind, profile name) for a listed repo id — kind "model" or "head" —, else None."""
    key = str(repo_id).strip().lower()
    if key in _HEADS:
        return "head", _HEADS[key]
    if key in _MODELS:
        return "model", _MODELS[key]
    return None


def repos_for(profile: str) -> list[str]:
    """The repo ids that map to `profile` (for messages and the profile listing)."""
    return [k for k, v in {**MODEL_REPOS, **HEAD_REPOS}.items() if v == profile]
