"""`--speculative-config '{...}'`: vLLM's speculative config JSON (vllm/config/speculative.py, `SpeculativeConfig`)
read into SimConfig's flat fields, as users paste it from a deployment.

Keys (vLLM's names):
- read into fields: method -> `method`; model -> `draft`; num_speculative_tokens -> `gamma`;
  draft_tensor_parallel_size -> `draft_tp`; speculative_token_tree -> `speculative_token_tree`.
- `model` as vLLM takes it: a shipped profile name, a TOML path, a local folder holding a Hugging Face config.json,
  or a Hugging Face repo id, mapped to the shipped profile of that architecture (`specsim.profiles.repo_ids`; a
  repo id listed nowhere is one line naming the field, the value and the shipped choices). Without a `method`, a
  head's own method is taken (vLLM infers it from the model too), else draft_model. For `mtp` the model is the
  target's own checkpoint (vLLM sets it to the target's when none is given): its repo id selects the target's
  shipped MTP head. vLLM's MTP method names (deepseek_mtp, ...) are read as `mtp` (vLLM renames them so too).
- modelled: disable_by_batch_size -> speculation off in an iteration whose running batch reaches it (a γ-policy
  rule: `specsim.engine.policies.disable_by_batch`; vLLM requires it > 1).
- accepted, checked as vLLM types them, and listed in the run's `speculative_config_ignored`: keys that do not
  change timing here — max_model_len, revision, code_revision, disable_logprobs, disable_padded_drafter_batch
  (EAGLE's drafter input padding, not modelled), and for ngram prompt_lookup_min / prompt_lookup_max (checked
  1 <= min <= max; the lookup's hit rate is α). A key given as null is vLLM's default and lists nothing.
- refused in one line: `quantization` (it changes the draft's weight bytes: give a draft profile of that dtype)
  and any key not above (naming the key, its value and the allowed keys).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any

from specsim.limits import GAMMA_CAP, MAX_TP
from specsim.errors import ConfigError
from specsim.methods import METHODS

FLAG = "--speculative-config"
_TO_FIELD = {"method": "method", "model": "draft", "num_speculative_tokens": "gamma",
             "draft_tensor_parallel_size": "draft_tp"}
_NGRAM_KEYS = ("prompt_lookup_min", "prompt_lookup_max")
TREE_KEY = "speculative_token_tree"  # vLLM's key, a string; a JSON list or object is taken too
DISABLE_KEY = "disable_by_batch_size"
# keys vLLM accepts that do not change timing here -> the type vLLM gives them
IGNORED: dict[str, type] = {"max_model_len": int, "revision": str, "code_revision": str, "disable_logprobs": bool,
                            "disable_padded_drafter_batch": bool}
NOT_MODELLED = {"quantization": "it changes the draft's weight bytes: give a draft profile with that dtype "
                                "(a TOML copy with dtype set), or drop the key"}
KEYS = tuple(_TO_FIELD) + _NGRAM_KEYS + (TREE_KEY, DISABLE_KEY) + tuple(IGNORED) + tuple(NOT_MODELLED)
# vLLM's per-model MTP method names, renamed to "mtp" by SpeculativeConfig.__post_init__ (with a deprecation warning)
METHOD_ALIASES = {m: "mtp" for m in ("deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp")}
EXAMPLE = '{"method": "eagle3", "num_speculative_tokens": 3}'


@dataclass
class Parsed:
    """A speculative config read: the flat fields it sets, what it left out of the timing, the modelled extras."""

    fields: dict[str, Any]
    ignored: list[str] = dc_field(default_factory=list)  # keys accepted that change nothing here
    disable_by_batch_size: int | None = None
    extra: dict[str, Any] = dc_field(default_factory=dict)  # the caller's own keys (choose-draft's acceptance)


def read_json(text: str, flag: str = FLAG) -> dict:
    """The JSON object; anything else is one line."""
    from specsim.inputs.files import loads_json

    # the one reader of JSON from a user: depth-bounded, a key given twice refused (vLLM would keep the last)
    data = loads_json(text, field=flag, allowed=f"a JSON object, e.g. {EXAMPLE}")
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


def read(text: str | dict, flag: str = FLAG, extra_keys: tuple[str, ...] = (), target: str | None = None) -> Parsed:
    """The config read (see the module doc); `extra_keys` pass through untouched for the caller, `target` (the
    run's target profile) lets an MTP config name the target's own checkpoint."""
    data = read_json(text, flag) if isinstance(text, str) else dict(text)
    allowed = KEYS + extra_keys
    for k in data:
        if k not in allowed:
            raise ConfigError("unknown key", field=f"{flag}.{k}", value=data[k], allowed=", ".join(allowed))
    for k, why in NOT_MODELLED.items():
        if data.get(k) is not None:
            raise ConfigError(f"not modelled: {why}", field=f"{flag}.{k}", value=data[k], allowed="null or absent")
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ConfigError("must be a profile name, path or Hugging Face repo id", field=f"{flag}.model",
                          value=model, allowed="a model or head profile name, a TOML path, or a repo id")
    method = _method(data, model, flag)
    out: dict[str, Any] = {"method": method}
    if model is not None:
        draft = _draft(model, method, flag, target)
        if draft is not None:
            out["draft"] = draft
    elif method == "draft_model":
        raise ConfigError("method draft_model needs its draft model", field=f"{flag}.model",
                          allowed="a model profile name, TOML path or repo id, e.g. llama-3.2-1b")
    for key, fld, hi in (("num_speculative_tokens", "gamma", GAMMA_CAP), ("draft_tensor_parallel_size",
                                                                          "draft_tp", MAX_TP)):
        v = _int(data, key, 1, hi, flag)
        if v is not None:
            out[fld] = v
    tree = data.get(TREE_KEY)
    if tree is not None:
        if not isinstance(tree, (str, list, dict)):
            raise ConfigError("must be a tree", field=f"{flag}.{TREE_KEY}", value=tree,
                              allowed='"[(0,), (1,), (0, 0)]", a list of rank paths, or {"widths": [...]}')
        out[TREE_KEY] = tree if isinstance(tree, str) else json.dumps(tree)
    ignored = _check_ngram_keys(data, method, flag) + _check_ignored(data, flag)
    # vLLM: SpeculativeConfig.__post_init__ refuses disable_by_batch_size < 2 ("Expect the batch size threshold of
    # disabling speculative decoding is > 1")
    dbs = _int(data, DISABLE_KEY, 2, 1 << 20, flag)
    return Parsed(out, ignored, dbs, {k: data[k] for k in extra_keys if k in data})


def parse(text: str | dict, flag: str = FLAG, extra_keys: tuple[str, ...] = (),
          target: str | None = None) -> dict[str, Any]:
    """The flat SimConfig fields a speculative config sets (only those it gives), plus the `extra_keys` given."""
    p = read(text, flag, extra_keys, target)
    return {**p.fields, **p.extra}


def _method(data: dict, model, flag: str) -> str:
    """The method: as given (vLLM's MTP aliases renamed), else the head's own when `model` names a head, else
    draft_model when a model is given."""
    method = data.get("method")
    if method is None:
        if model is None:
            raise ConfigError("say which method", field=f"{flag}.method", allowed=", ".join(METHODS))
        return _head_method_of(model) or "draft_model"
    method = METHOD_ALIASES.get(method, method) if isinstance(method, str) else method
    if not isinstance(method, str) or method not in METHODS:
        raise ConfigError("unknown method", field=f"{flag}.method", value=data.get("method"),
                          allowed=", ".join(METHODS) + " (and vLLM's " + ", ".join(METHOD_ALIASES) + " = mtp)")
    return method


def _head_method_of(model: str) -> str | None:
    from specsim.methods.heads import head, head_method
    from specsim.profiles.repo_ids import lookup

    hit = None if Path(model).exists() else lookup(model)
    if hit is not None:
        return head(hit[1]).method if hit[0] == "head" else None
    return head_method(model)


def _draft(model: str, method: str, flag: str, target: str | None) -> str | None:
    """The `draft` field for `model` (a repo id mapped, a name or existing path as given); None = the target's
    shipped head (mtp on the target's own checkpoint)."""
    from specsim.profiles import loader
    from specsim.profiles.repo_ids import looks_like_repo_id, lookup

    name, kind = model.strip(), None
    if not (loader.is_path(name) and Path(name).exists()):
        hit = lookup(name)
        if hit is not None:
            kind, name = hit
        elif loader.is_path(name):
            why = "no shipped profile for this Hugging Face repo id" if looks_like_repo_id(name) else "file not found"
            raise ConfigError(why, field=f"{flag}.model", value=model, allowed=_choices(method))
    tstem = None if target is None else (Path(target).stem if loader.is_path(target) else str(target))
    if method == "mtp" and (kind == "model" or (kind is None and name == tstem)):
        if tstem is not None and name != tstem:
            raise ConfigError(f"method mtp drafts with the target's own MTP module: {model!r} is {name}, the "
                              f"target is {tstem}", field=f"{flag}.model", value=model,
                              allowed="the target's repo id or profile, an mtp head profile, or no model")
        return None
    want = METHODS[method].model_kind
    if kind is not None and kind != want:
        what = "a draft model" if kind == "model" else "a head"
        raise ConfigError(f"maps to {name}, {what}, which method {method} does not take", field=f"{flag}.model",
                          value=model, allowed=_choices(method))
    if kind == "head" and tstem is not None:
        from specsim.methods.heads import head, heads_for

        trained = head(name).target
        if trained not in ("*", tstem):
            fits = [h for h in heads_for(method) if head(h).target in ("*", tstem)]
            raise ConfigError(f"maps to {name}, a head trained for {trained}, not the target {tstem}",
                              field=f"{flag}.model", value=model, allowed=f"a {method} head for {tstem} (shipped: "
                              f"{', '.join(fits) or 'none'}), or a head TOML path")
    return name


def _choices(method: str) -> str:
    """The shipped choices for `model` under `method`, for a message."""
    from specsim.methods.heads import heads_for
    from specsim.profiles import loader
    from specsim.profiles.repo_ids import HEAD_REPOS

    if METHODS[method].model_kind == "model":
        return (f"a shipped model profile ({', '.join(loader.list_names(loader.MODEL_DIR))}) or a repo id mapped to "
                "one (specsim/profiles/repo_ids.py), a model TOML path, or a local folder holding the repo's "
                "config.json")
    heads = heads_for(method)
    repos = [r for r, h in HEAD_REPOS.items() if h in heads]
    return (f"a shipped {method} head ({', '.join(heads) or 'none'}" + (f"; repo ids {', '.join(repos)}" if repos
                                                                      else "") + "), or a head TOML path")


def _check_ngram_keys(data: dict, method: str, flag: str) -> list[str]:
    lo, hi = (_int(data, k, 1, 1 << 20, flag) for k in _NGRAM_KEYS)
    given = [k for k in _NGRAM_KEYS if data.get(k) is not None]
    if given and method != "ngram":
        raise ConfigError(f"belongs to method ngram (got {method})", field=f"{flag}.{given[0]}",
                          value=data[given[0]], allowed="method ngram, or drop the key")
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError("prompt_lookup_min exceeds prompt_lookup_max", field=f"{flag}.prompt_lookup_min",
                          value=lo, allowed=f"1..{hi}")
    return given


def _check_ignored(data: dict, flag: str) -> list[str]:
    """The timing-free keys given, each of vLLM's type (max_model_len a positive integer)."""
    out = []
    for k, typ in IGNORED.items():
        v = data.get(k)
        if v is None:
            continue
        if typ is int:
            _int(data, k, 1, 1 << 40, flag)
        elif not isinstance(v, typ) or (typ is str and not v.strip()):
            raise ConfigError(f"must be a {typ.__name__}", field=f"{flag}.{k}", value=v,
                              allowed="true or false" if typ is bool else "a non-empty string")
        out.append(k)
    return out


def expand(groups: dict, flag: str, flat: dict[str, str]) -> dict:
    """SimConfig's grouped input with its `speculative_config` read into the fields it sets (`read`); a field
    also given on its own with another value is one line (`given twice`). `flat` is SimConfig's field -> group map
    (`config.FLAT`, passed in: config calls this, so this never imports config)."""
    from specsim.config_rules import flag as flag_of

    text = (groups.get("speculation") or {}).get("speculative_config")
    if text is None:
        return groups
    if not isinstance(text, str):
        raise ConfigError("must be JSON text", field=flag, value=text, allowed=f"e.g. {EXAMPLE}")
    target = (groups.get("deployment") or {}).get("target")
    p = read(text, flag, target=target if isinstance(target, str) else None)
    profile = (groups.get("engine") or {}).get("engine_profile")
    if p.disable_by_batch_size is not None and profile == "vllm-v1":
        raise ConfigError("modelled by engine profile specsim (an iteration's γ rule); the vllm-v1 profile drafts "
                          "num_speculative_tokens every step", field=f"{flag}.{DISABLE_KEY}",
                          value=p.disable_by_batch_size, allowed="engine_profile specsim, or drop the key")
    out = dict(groups)
    for fld, v in p.fields.items():
        group = dict(out.get(flat[fld]) or {})
        if group.get(fld) is not None and group[fld] != v:
            key = next((k for k, f in _TO_FIELD.items() if f == fld), fld)
            raise ConfigError(f"given twice: {flag_of(fld)} and {flag} {key}", field=flag_of(fld),
                              value=group[fld], allowed="one of them, or the same value")
        group[fld] = v
        out[flat[fld]] = group
    return out


def summary_keys(cfg) -> dict:
    """The run's `speculative_config_ignored` (the accepted keys that change nothing here), when there are any."""
    text = cfg.speculation.speculative_config
    if text is None:
        return {}
    ignored = read(text, target=cfg.deployment.target).ignored
    return {"speculative_config_ignored": ignored} if ignored else {}


def choose_ignored(text: str) -> tuple[str, ...]:
    """What choose-draft leaves out of a candidate's config: the timing-free keys, and disable_by_batch_size (its
    bands say at which loads speculation stops paying, which is what that key would decide)."""
    p = read(text, extra_keys=("alpha", "trace", "tree_topk_acceptance"))
    return tuple(p.ignored) + ((DISABLE_KEY,) if p.disable_by_batch_size is not None else ())
