"""`--speculative-config '{...}'`: vLLM's speculative config JSON (vllm/config/speculative.py, `SpeculativeConfig`)
read into SimConfig's flat fields.

Keys (vLLM's names): method -> `method` (default draft_model when a model is given), model -> `draft` (a draft
model profile, or a head profile; none = the target's shipped head), num_speculative_tokens -> `gamma`,
draft_tensor_parallel_size -> `draft_tp`, speculative_token_tree -> `speculative_token_tree`; prompt_lookup_min / prompt_lookup_max (ngram) are checked as vLLM checks
them (1 <= min <= max) and do not enter the model (the hit rate is α). Anything else is refused in one line naming
the key, its value and what is allowed.
"""

from __future__ import annotations

import json
from typing import Any

from specsim.engine.acceptance import GAMMA_CAP
from specsim.errors import ConfigError
from specsim.methods import METHODS

FLAG = "--speculative-config"
_TO_FIELD = {"method": "method", "model": "draft", "num_speculative_tokens": "gamma",
             "draft_tensor_parallel_size": "draft_tp"}
_NGRAM_KEYS = ("prompt_lookup_min", "prompt_lookup_max")
TREE_KEY = "speculative_token_tree"  # vLLM's key, a string; a JSON list or object is taken too
KEYS = tuple(_TO_FIELD) + _NGRAM_KEYS + (TREE_KEY,)
EXAMPLE = '{"method": "eagle3", "num_speculative_tokens": 3}'


def read_json(text: str, flag: str = FLAG) -> dict:
    """The JSON object; anything else is one line."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ConfigError("not JSON", field=flag, value=text, allowed=f"a JSON object, e.g. {EXAMPLE}") from None
    if not isinstance(data, dict):
        raise ConfigError("must be a JSON object", field=flag, value=text, allowed=f"e.g. {EXAMPLE}")
    return data


def _int(data: dict, key: str, lo: int, hi: int, flag: str) -> int | None:
    v = data.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError("must be an integer in range", field=f"{flag}.{key}", value=v, allowed=f"{lo}..{hi}")
    return v


def parse(text: str | dict, flag: str = FLAG, extra_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The flat SimConfig fields a speculative config sets (only those it gives); `extra_keys` are passed through
    untouched for the caller (choose-draft's acceptance)."""
    data = read_json(text, flag) if isinstance(text, str) else dict(text)
    allowed = KEYS + extra_keys
    for k in data:
        if k not in allowed:
            raise ConfigError("unknown key", field=f"{flag}.{k}", value=data[k], allowed=", ".join(allowed))
    method = data.get("method", "draft_model" if data.get("model") is not None else None)
    if method is None:
        raise ConfigError("say which method", field=f"{flag}.method", allowed=", ".join(METHODS))
    if method not in METHODS:
        raise ConfigError("unknown method", field=f"{flag}.method", value=method, allowed=", ".join(METHODS))
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ConfigError("must be a profile name or path", field=f"{flag}.model", value=model,
                          allowed="a model or head profile name, or a TOML path")
    if method == "draft_model" and model is None:
        raise ConfigError("method draft_model needs its draft model", field=f"{flag}.model",
                          allowed="a model profile name or TOML path, e.g. llama-3.2-1b")
    out: dict[str, Any] = {"method": method}
    if model is not None:
        out["draft"] = model
    for key, field, hi in (("num_speculative_tokens", "gamma", GAMMA_CAP), ("draft_tensor_parallel_size",
                                                                            "draft_tp", 1024)):
        v = _int(data, key, 1, hi, flag)
        if v is not None:
            out[field] = v
    tree = data.get(TREE_KEY)
    if tree is not None:
        if not isinstance(tree, (str, list, dict)):
            raise ConfigError("must be a tree", field=f"{flag}.{TREE_KEY}", value=tree,
                              allowed='"[(0,), (1,), (0, 0)]", a list of rank paths, or {"widths": [...]}')
        out[TREE_KEY] = tree if isinstance(tree, str) else json.dumps(tree)
    _check_ngram_keys(data, method, flag)
    out.update({k: data[k] for k in extra_keys if k in data})
    return out


def _check_ngram_keys(data: dict, method: str, flag: str) -> None:
    lo, hi = (_int(data, k, 1, 1 << 20, flag) for k in _NGRAM_KEYS)
    given = [k for k in _NGRAM_KEYS if data.get(k) is not None]
    if given and method != "ngram":
        raise ConfigError(f"belongs to method ngram (got {method})", field=f"{flag}.{given[0]}",
                          value=data[given[0]], allowed="method ngram, or drop the key")
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError("prompt_lookup_min exceeds prompt_lookup_max", field=f"{flag}.prompt_lookup_min",
                          value=lo, allowed=f"1..{hi}")


def expand(groups: dict, flag: str = FLAG) -> dict:
    """SimConfig's grouped input with its `speculative_config` read into the fields it sets (`parse`); a field
    also given on its own with another value is one line (`given twice`)."""
    from specsim.config import FLAT, flag as flag_of

    text = (groups.get("speculation") or {}).get("speculative_config")
    if text is None:
        return groups
    if not isinstance(text, str):
        raise ConfigError("must be JSON text", field=flag, value=text, allowed=f"e.g. {EXAMPLE}")
    out = dict(groups)
    for field, v in parse(text, flag).items():
        group = dict(out.get(FLAT[field]) or {})
        if group.get(field) is not None and group[field] != v:
            key = next((k for k, f in _TO_FIELD.items() if f == field), field)
            raise ConfigError(f"given twice: {flag_of(field)} and {flag} {key}", field=flag_of(field),
                              value=group[field], allowed=f"one of them, or the same value")
        group[field] = v
        out[FLAT[field]] = group
    return out
