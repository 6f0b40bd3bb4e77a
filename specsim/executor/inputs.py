"""Checks on executor inputs (model folders, GGUF files, SRC strings), done before any weights load.

Why: transformers meets a folder with a broken `config.json`, or one without weights, with a multi-line traceback
from deep inside `from_pretrained`, and a command that loads a target first finds a bad draft only after the
target's weights are in memory. `check_source(spec)` answers for a SRC string in milliseconds; the CLI calls it
for every model before it loads any, and `specsim.executor.sources.hf_source` calls `check_model_dir` itself.

What a Hugging Face model folder needs here: `config.json`, a UTF-8 JSON object whose `model_type` transformers
knows, and weights — `model.safetensors`, `pytorch_model.bin`, or a sharded checkpoint (`*.index.json` whose
`weight_map` names shard files that all exist).
"""

from __future__ import annotations

import json
from pathlib import Path

from specsim.errors import ConfigError
from specsim.inputs.files import check_nesting

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
GGUF_MAGIC = b"GGUF"
NGRAM_DRAFTS = ("bigram", "prompt-lookup")


def _json_object(path: Path, what: str) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
        check_nesting(text, file=path)  # 20,000 nested [ are one line, not a RecursionError
        data = json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"{what} is not UTF-8 text", file=path) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what} is not valid JSON ({e.msg} at line {e.lineno})", file=path) from None
    except OSError as e:
        raise ConfigError(f"cannot read {what}: {e.strerror or type(e).__name__}", file=path) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} must hold a JSON object", file=path, value=type(data).__name__)
    return data


def check_config_json(folder: Path) -> dict:
    """The folder's config.json as a dict, with a model_type transformers knows."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ConfigError("not a Hugging Face model folder: no config.json", file=folder,
                          allowed="a folder with config.json and model.safetensors (or pytorch_model.bin)")
    cfg = _json_object(cfg_path, "config.json")
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError("config.json has no model_type", file=cfg_path, field="model_type", value=model_type,
                          allowed="a transformers model type such as llama, qwen2, mistral")
    try:
        from transformers import CONFIG_MAPPING
    except ImportError:  # the CLI checks for transformers before this; the API may call without it
        return cfg
    if model_type not in CONFIG_MAPPING:
        raise ConfigError("unknown model_type in config.json", file=cfg_path, field="model_type", value=model_type,
                          allowed="a model type this transformers version knows (e.g. llama, qwen2, mistral)")
    return cfg


def check_weights(folder: Path) -> None:
    """The folder holds weights: a single-file checkpoint, or an index whose shards all exist."""
    if any((folder / w).is_file() and (folder / w).stat().st_size > 0 for w in WEIGHT_FILES):
        return
    for name in INDEX_FILES:
        index = folder / name
        if not index.is_file():
            continue
        wmap = _json_object(index, name).get("weight_map")
        if not isinstance(wmap, dict) or not wmap:
            raise ConfigError("checkpoint index has no weight_map", file=index, field="weight_map")
        missing = sorted({str(v) for v in wmap.values() if not (folder / str(v)).is_file()})
        if missing:
            raise ConfigError(f"checkpoint shard missing ({len(missing)} of {len(set(wmap.values()))})",
                              file=folder / missing[0], field="weight_map")
        return
    raise ConfigError("model folder has no weights", file=folder,
                      allowed=", ".join(WEIGHT_FILES + INDEX_FILES) + " (with its shards)")


def check_model_dir(folder: str | Path) -> dict:
    """A Hugging Face model folder fit to load: config.json valid and weights present; returns the config."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError("not a folder", file=folder, allowed="a Hugging Face model folder")
    cfg = check_config_json(folder)
    check_weights(folder)
    return cfg


def check_gguf(path: str | Path) -> None:
    p = Path(path)
    if not p.is_file():
        raise ConfigError("GGUF file not found" if not p.exists() else "GGUF path is not a file", file=p)
    try:
        with p.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ConfigError(f"cannot read GGUF file: {e.strerror or type(e).__name__}", file=p) from None
    if magic != GGUF_MAGIC:
        raise ConfigError("not a GGUF file (its first bytes are not 'GGUF')", file=p)


def check_source(spec: str, field: str = "source", ngram_ok: bool = True) -> None:
    """Check a SRC string without loading anything: a model folder, a .gguf file, profile:<name>[...], or (where
    `ngram_ok`) an n-gram draft (whose options are checked when it is built; it loads nothing)."""
    head, *rest = spec.split(":")
    if head in NGRAM_DRAFTS:
        if not ngram_ok:
            raise ConfigError("an n-gram draft has no weights to time", field=field, value=spec,
                              allowed="a Hugging Face model folder, a .gguf file or profile:<name>[:layers=N]")
        return
    if head == "profile":
        if not rest or not rest[0]:
            raise ConfigError("missing profile name", field=field, value=spec, allowed="profile:<name>[:layers=N]")
        from specsim import profiles
        profiles.model(rest[0])
        return
    p = Path(spec)
    if p.suffix.lower() == ".gguf":
        check_gguf(p)
    elif p.is_dir():
        check_model_dir(p)
    elif p.exists():
        raise ConfigError("a model file must be a .gguf file", file=p, field=field,
                          allowed="a Hugging Face model folder, a .gguf file, profile:<name>, bigram, prompt-lookup")
    else:
        raise ConfigError("unknown model source: no such file or folder", field=field, value=spec,
                          allowed="a Hugging Face model folder, a .gguf file, profile:<name>[:layers=N], "
                                  "bigram[:k=K], prompt-lookup[:n=N][:eps=E]")
