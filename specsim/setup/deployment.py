"""Deployment: hardware, stack, TP degrees, target and draft, resolved once — what every command prices passes with.

`Deployment.resolve(hardware, target, draft, stack=..., tp=...)` (or `.from_config(cfg)`) turns names or paths into
profiles by one rule each, and then yields:
- `cost_models`: the target's and the draft's pass-time models — the roofline `CostModel` (its TP degree checked by
  `check_tp`), or the measured tables (`MeasuredCosts`) where `measured_target` / `measured_draft` are given;
- `memory(spec_extra)`: the admission-control inputs (`steptime.Memory`) with and without the draft;
- `peak_bytes_s`, `peak_flops`: the datasheet peaks MBU and MFU are fractions of;
- `c(prompt_len, batch)`: the cost coefficient c (`roofline.cost_ratio_c`, the one definition);
- `hashes`: a content hash of every profile and table it read (the sweep's point ids hash the same way).

The stack rule, the same for every command (simulate, compare, choose-draft, roofline, calibrate's base, the
sweep): no stack (or 'default') = the hardware's `default_stack` (the idealized roofline when it names none);
'ideal' = the idealized roofline; 'vllm', 'sglang', 'trtllm' (or 'vllm@0.24.0') = measured kernels of that
engine on this hardware (`specsim.cost.measured_stack`); anything else = that stack profile's name or TOML path.
The draft's TP degree defaults to the target's (`draft_tp`, vLLM's draft_tensor_parallel_size): the draft's cost
model, its TP checks and its share of the weights and KV per chip follow it.

The speculation method (`method`, `specsim.methods`) says what the draft slot holds: a draft model profile
(draft_model) or a head profile (eagle, eagle3, mtp, medusa, ngram, suffix; `specsim.methods.heads`), and builds
the draft's cost model from it (`specsim.methods.pricing`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from specsim.config import flag
from specsim.errors import ConfigError
from specsim.profiles import loader
from specsim.profiles.schema import HardwareProfile, ModelProfile, StackProfile

DEFAULT_STACK = "default"  # spelled out: the same as giving no stack
STACK_HELP = ("software-stack profile name or TOML path; 'ideal' = the idealized roofline; 'vllm', 'sglang', "
              "'trtllm' (@version) = measured kernels; default: the hardware's default_stack")


def resolve_stack(hardware: HardwareProfile | None, name: str | None) -> StackProfile:
    """The one stack rule (see the module docstring)."""
    from specsim.cost import kernels_db

    if kernels_db.parse_stack(name) is not None:  # 'vllm', 'sglang', 'trtllm' (@version): measured kernels
        from specsim.methods.measured_heads import measured_stack

        return measured_stack(hardware, name)
    if name is None or name == DEFAULT_STACK:
        return loader.stack(hardware.default_stack)  # None -> the idealized roofline
    return loader.stack(name)


# --- content hashes: one function for profiles, one for data files (the sweep's point ids use both) -------------

def profile_digest(profile) -> str:
    """Content hash of a profile as loaded (what the simulation uses), not of its file's bytes."""
    return hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]


_FILE_DIGESTS: dict[tuple, str] = {}


def file_digest(path: str) -> str:
    """Content hash of a data file's bytes (cached by path, size and modification time)."""
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _FILE_DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _FILE_DIGESTS[key] = h.hexdigest()[:16]
    return _FILE_DIGESTS[key]


def _measured_name(name) -> bool:
    from specsim.cost import kernels_db

    return kernels_db.parse_stack(name) is not None


def _head(name):
    from specsim.methods import heads

    return heads.head(name)


def _draft(name):
    """The draft slot: a model profile, or a head profile (a head name or a TOML file naming a method)."""
    from specsim.methods import heads

    return heads.head(name) if heads.is_head(name) else loader.model(name)


_LOADERS = {"hardware": loader.hardware, "stack": loader.stack, "target": loader.model, "draft": _draft,
            "head": _head}


def load_profile(role: str, name, hardware: HardwareProfile | None = None):
    """The profile for one role (hardware, stack, target, draft, head) by the loader; an unknown *name* is refused
    naming the role, not the kind ("unknown draft profile"). A stack follows `resolve_stack` on `hardware`; a
    draft may be a model or a head profile."""
    if role in ("target", "draft") and isinstance(name, str):
        name = _from_repo_id(role, name)
    load = (lambda n: resolve_stack(hardware, n)) if role == "stack" and (
        hardware is not None or _measured_name(name)) else _LOADERS[role]
    try:
        return load(name)
    except ConfigError as e:
        if e.file is None and e.field in ("hardware", "stack", "model", "head"):
            raise ConfigError(f"unknown {role} profile{str(e.message).removeprefix(f'unknown {e.field} profile')}",
                              field=role, value=e.value, allowed=e.allowed) from None
        raise


def _from_repo_id(role: str, name: str) -> str:
    """`--target` / `--draft` given a Hugging Face repo id (as a vLLM command line names models): the shipped
    profile it maps to (`profiles.repo_ids`, as --speculative-config's model does), or one line saying which to give.
    A path that exists is a path."""
    from pathlib import Path

    from specsim.profiles import repo_ids

    if not repo_ids.looks_like_repo_id(name) or Path(name).exists():
        return name
    hit = repo_ids.lookup(name)
    if hit is not None and (hit[0] == "model" or role == "draft"):
        return hit[1]
    raise ConfigError("no shipped profile for this Hugging Face repo id", field=role, value=name,
                      allowed="a shipped profile name (specsim profiles), a repo id listed in "
                              "specsim/profiles/repo_ids.py, or a local folder holding the repo's config.json")


@dataclass(frozen=True)
class Deployment:
    hardware: HardwareProfile
    stack: StackProfile
    target: ModelProfile
    draft: ModelProfile | None = None
    tp: int = 1
    draft_tp: int | None = None  # None = the target's tp
    measured_target: str | None = None  # CSV of measured pass times instead of the roofline
    measured_draft: str | None = None
    draft_kv_budget_tokens: int | None = None  # the draft's KV cap per sequence (roofline only; None = full context)
    method: str = "draft_model"  # what the draft slot holds and how it is priced (specsim.methods)

    @classmethod
    def resolve(cls, hardware: str, target: str, draft: str | None = None, *, stack: str | None = None, tp: int = 1,
                draft_tp: int | None = None, measured_target: str | None = None,
                measured_draft: str | None = None, draft_kv_budget_tokens: int | None = None,
                method: str = "draft_model") -> "Deployment":
        hw = load_profile("hardware", hardware)
        st = load_profile("stack", stack, hw)
        t = load_profile("target", target)
        d = None if draft is None else _method_draft(method, draft, t)
        return cls(hw, st, t, d, tp, draft_tp, measured_target, measured_draft, draft_kv_budget_tokens, method)

    @classmethod
    def from_config(cls, cfg) -> "Deployment":
        """From a SimConfig (or its deployment group: the method is then draft_model)."""
        d = getattr(cfg, "deployment", cfg)
        spec = getattr(cfg, "speculation", None)
        return cls.resolve(d.hardware, d.target, d.draft, stack=d.stack, tp=d.tp, draft_tp=d.draft_tp,
                           measured_target=d.measured_target, measured_draft=d.measured_draft,
                           draft_kv_budget_tokens=d.draft_kv_budget_tokens,
                           method=spec.method if spec is not None else "draft_model")

    @property
    def draft_tp_degree(self) -> int:
        return self.tp if self.draft_tp is None else self.draft_tp

    # --- what it yields ---------------------------------------------------------------------------------------
    @cached_property
    def cost_models(self) -> tuple:
        """(target, draft) pass-time models; the draft's is None without a draft."""
        t = self._cost_model(self.target, self.tp, self.measured_target, flag("measured_target"))
        if self.draft is None:
            return t, None
        try:
            return t, self._draft_cost_model()
        except ConfigError as e:  # the draft's own TP degree, when given, is the flag to name
            if self.draft_tp is None or e.field != "tp":
                raise
            raise ConfigError(e.message, file=e.file, field=flag("draft_tp"), value=e.value, allowed=e.allowed) \
                from None

    def _draft_cost_model(self):
        if self.method != "draft_model":
            return self._head_cost_model()
        if self.target.architecture != self.draft.architecture:
            raise ConfigError("target and draft must both be decoder-only or both encoder-decoder", field="draft",
                              value=self.draft.name, allowed=f"a {self.target.architecture} model like the target")
        budget = self.draft_kv_budget_tokens
        if budget is not None and (self.measured_draft is not None or self.draft.architecture != "decoder"):
            raise ConfigError("a draft KV budget needs a decoder-only roofline draft", field=flag(
                "draft_kv_budget_tokens"), value=budget, allowed="no measured draft table, a decoder-only draft")
        return self._cost_model(self.draft, self.draft_tp_degree, self.measured_draft, flag("measured_draft"), budget)

    def _head_cost_model(self):
        from specsim import methods
        from specsim.cost.roofline import check_tp

        if self.target.architecture != "decoder":
            raise ConfigError(f"method {self.method} needs a decoder-only target", field="target",
                              value=self.target.name, allowed="a decoder-only target, or method draft_model")
        if _is_measured(self.stack):
            from specsim.methods.measured_heads import head_cost

            cm = head_cost(self.draft, self.hardware, self.stack.engine, self.stack.version, self.draft_tp_degree,
                           self.stack.terms())
        else:
            cm = methods.get(self.method).cost_model(self.draft, self.hardware, self.stack, self.draft_tp_degree)
        if not getattr(cm, "host_only", False):
            check_tp(cm.model, self.hardware, self.draft_tp_degree)
        return cm

    def _cost_model(self, model: ModelProfile, tp: int, measured: str | None, field: str,
                    kv_budget_tokens: int | None = None):
        from specsim.cost.roofline import CostModel, check_tp

        if not isinstance(model, ModelProfile) and _is_measured(self.stack):
            from specsim.methods.measured_heads import head_cost

            return head_cost(model, self.hardware, self.stack.engine, self.stack.version, tp, self.stack.terms())
        if not isinstance(model, ModelProfile):  # a head standing alone (the sweep's per-profile check)
            from specsim import methods

            return methods.get(model.method).cost_model(model, self.hardware, self.stack, tp)
        if measured is None and _is_measured(self.stack):  # kernels measured under an engine (cost.measured_stack)
            from specsim.cost.measured_stack import model_cost

            role = "target" if model is self.target else "draft"
            return model_cost(model, self.hardware, self.stack.engine, self.stack.version, tp, self.stack.terms(),
                              role, self.method, kv_budget_tokens)
        if measured is None:
            return CostModel(model, self.hardware, self.stack, tp=tp, kv_budget_tokens=kv_budget_tokens)
        check_tp(model, self.hardware, tp)
        return _measured(model, self.hardware, tp, measured, field)

    def memory(self, spec_extra: int):
        """(speculative, baseline) admission control: weights + KV per chip, with and without the draft."""
        from specsim.cost.steptime import Memory

        target, draft = self.cost_models
        models = [target] + ([] if draft is None or getattr(draft, "host_only", False) else [draft])
        return Memory(models, spec_extra), Memory([target], 0)

    def check_context(self, prompt_len, output_len) -> None:
        """The longest request (prompt + output) against the target's and a draft model's positions
        (`ModelProfile.check_context`); one line naming --prompt-len / --output-len."""
        import numpy as np

        total = np.asarray(prompt_len) + np.asarray(output_len)
        i = int(np.argmax(total))
        p, o = int(np.asarray(prompt_len).flat[i]), int(np.asarray(output_len).flat[i])
        for role, m in (("target", self.target), ("draft", self.draft)):
            if isinstance(m, ModelProfile):
                try:
                    m.check_context(p, o, role)
                except ConfigError as e:
                    names = {"prompt_len": flag("prompt_len"), "output_len": flag("output_len")}
                    field = " + ".join(names[f] for f in names if f in e.field)
                    raise ConfigError(e.message, field=field, value=e.value, allowed=e.allowed) from None

    @property
    def peak_bytes_s(self) -> float:
        return self.hardware.bandwidth_bytes_s

    @property
    def peak_flops(self) -> float:
        return self.hardware.peak_flops(self.target.dtype)

    def c(self, prompt_len: int = 0, batch: int = 1) -> float:
        """c = T_draft / T_target of one decode step at the first step's live context (`cost_ratio_c`)."""
        from specsim.cost.roofline import cost_ratio_c

        return cost_ratio_c(*self.cost_models, prompt_len, batch)

    @cached_property
    def hashes(self) -> dict[str, str]:
        """Content hash of every profile and table this deployment read."""
        out = {"hardware": profile_digest(self.hardware), "stack": profile_digest(self.stack),
               "target": profile_digest(self.target)}
        if self.draft is not None:
            out["draft"] = profile_digest(self.draft)
        for k in ("measured_target", "measured_draft"):
            if getattr(self, k) is not None:
                out[k] = file_digest(getattr(self, k))
        return out


def _is_measured(stack) -> bool:
    return getattr(stack, "engine", None) is not None and getattr(stack, "system", None) is not None


def _method_draft(method: str, name: str, target: ModelProfile):
    """The draft slot's profile for `method`: a model profile for draft_model, else a head profile of that method
    (one line naming what to pass when it is missing or of another method)."""
    from specsim import methods
    from specsim.methods import heads

    m = methods.get(method)
    if m.model_kind == "model":
        prof = load_profile("draft", name)
        if not isinstance(prof, ModelProfile):
            raise ConfigError(f"{prof.name!r} is a {prof.method} head, not a draft model", field="draft", value=name,
                              allowed=f"a model profile, or method {prof.method}")
        return prof
    if not heads.is_head(name):
        if loader.is_path(name):
            if not Path(name).is_file():
                raise ConfigError(f"no such {method} head profile file", file=name, field="draft",
                                  allowed=", ".join(heads.heads_for(method)) + "; or an existing head TOML path")
            heads.load_head(name)  # a damaged or incomplete file: its own one-line error (line, field)
        if loader.is_path(name) or name != heads.shipped_head_name(method, target.name):
            raise ConfigError(f"method {method} takes a {method} head profile", field="draft", value=name,
                              allowed=", ".join(heads.heads_for(method)) + "; or a head TOML path")
        raise ConfigError(f"no {method} head ships for {target.name}", field="--speculative-config",
                          value=f"method {method} without a model", allowed=f'a "model": a head profile of method '
                          f"{method} (shipped: {', '.join(heads.heads_for(method)) or 'none'}) or a head TOML path")
    h = heads.head(name)
    if h.method != method:
        raise m.wrong_head(h)
    if h.target not in ("*", target.name):
        raise ConfigError(f"head {h.name!r} was trained for {h.target}, not {target.name}", field="draft",
                          value=name, allowed=f"a {method} head for {target.name}")
    heads.check_against_target(h, target, name if loader.is_path(name) else None)  # hidden size, vocabulary
    return h


def _measured(model: ModelProfile, hardware: HardwareProfile, tp: int, path: str, field: str):
    """Measured cost mode: pass times interpolated from the CSV at `path` (decoder-only models)."""
    import csv

    from specsim.cost.measured import MeasuredCosts

    if model.architecture == "encoder-decoder":
        raise ConfigError("measured cost mode supports decoder-only models", field=field, value=path,
                          allowed=f"a decoder-only model (got {model.name}, {model.architecture})")
    try:
        mc = MeasuredCosts.read_csv(path, model, hardware, field=field)
    except (OSError, UnicodeDecodeError, csv.Error) as e:  # FileNotFoundError is already a ConfigError
        raise ConfigError(f"cannot read measured table ({type(e).__name__})", file=path, field=field) from None
    mc.tp = tp  # the table times the whole TP group; memory accounting is per chip like the roofline's
    return mc
