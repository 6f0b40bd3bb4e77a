"""Head profiles: the proposers that are not stand-alone draft models (model_profiles/heads/*.toml).

A head is what vLLM's `speculative_config.model` names for `eagle`, `eagle3`, `mtp` and `medusa`: a small network
run on the target's hidden states. `ngram` and `suffix` have no network; their profile holds the host cost of one
lookup. Every head says which `method` it serves and which `target` it was trained for ("*" = any target), so a
config without a model picks the target's shipped head (`shipped_head`). Loading follows `specsim.profiles.loader`
(names on the profile search path, then model_profiles/heads/; paths as given; one-line errors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specsim.errors import ConfigError, FieldError
from specsim.profiles import loader
from specsim.profiles.schema import DTYPE_BYTES, DType, ModelProfile

HEAD_DIR = loader.MODEL_DIR / "heads"
HeadMethod = Literal["eagle", "eagle3", "mtp", "medusa", "ngram", "suffix"]
_LAYER_METHODS = ("eagle", "eagle3", "mtp")  # one (or a few) decoder layers + projection + LM head per proposal
_LAYER_FIELDS = ("d_model", "d_ff", "n_heads", "n_kv_heads", "head_dim", "lm_head_vocab")


class HeadProfile(BaseModel):
    """One head (strict like the model profiles; which fields a head needs depends on its method)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    name: str
    description: str = ""
    method: HeadMethod
    target: str = Field(description="target profile name the head was trained for; '*' = any target")
    architecture: Literal["decoder"] = "decoder"  # heads follow decoder-only targets
    dtype: DType = "bf16"
    n_layers: int = Field(default=0, ge=0, le=16, description="decoder layers of the head (eagle/eagle3/mtp: 1)")
    d_model: int | None = Field(default=None, ge=1, le=1_000_000)
    d_ff: int | None = Field(default=None, ge=1, le=10_000_000)
    n_heads: int | None = Field(default=None, ge=1, le=10_000)
    n_kv_heads: int | None = Field(default=None, ge=1, le=10_000)
    head_dim: int | None = Field(default=None, ge=1, le=10_000)
    attention_input_multiple: int = Field(default=1, ge=1, le=8, description="q/k/v read this many · d_model "
                                          "inputs (EAGLE-3: cat(embedding, hidden) = 2)")
    fc_input_multiple: int = Field(default=0, ge=0, le=8, description="feature projection k·d_model -> d_model "
                                   "per proposal (EAGLE-3: 3 fused target states; EAGLE, MTP: 2); 0 = none")
    lm_head_vocab: int | None = Field(default=None, ge=1, le=10_000_000, description="LM-head rows read per pass")
    shares_lm_head: bool = Field(default=False, description="the LM head is the target's: read every pass, "
                                 "not stored again (MTP, EAGLE-1)")
    medusa_heads: int = Field(default=0, ge=0, le=64, description="Medusa: K heads, each a d×d residual block "
                              "and an LM head, all in one pass")
    host_s_per_request: float = Field(default=0.0, ge=0, le=1.0, description="ngram/suffix: host time of one "
                                      "lookup per request per step, s")

    @model_validator(mode="after")
    def _fields_for_method(self) -> "HeadProfile":
        m = self.method
        need = _LAYER_FIELDS if m in _LAYER_METHODS else ("d_model", "lm_head_vocab") if m == "medusa" else ()
        for f in need:
            if getattr(self, f) is None:
                raise FieldError(f"a {m} head needs {f}", field=f, value=None, allowed="a positive integer")
        if m in _LAYER_METHODS and self.n_layers < 1:
            raise FieldError(f"a {m} head has at least one decoder layer", field="n_layers", value=self.n_layers,
                             allowed=">= 1")
        if m == "medusa" and self.medusa_heads < 1:
            raise FieldError("a medusa head profile needs its number of heads", field="medusa_heads",
                             value=self.medusa_heads, allowed=">= 1")
        if m in ("ngram", "suffix") and self.host_s_per_request <= 0:
            raise FieldError(f"a {m} proposer needs its host cost", field="host_s_per_request",
                             value=self.host_s_per_request, allowed="> 0 s")
        if m in _LAYER_METHODS:
            _check_layer(self)
        return self

    @property
    def bytes_per_param(self) -> float:
        return DTYPE_BYTES[self.dtype]


def layer_profile(head: HeadProfile) -> ModelProfile:
    """The head's decoder layer(s) and LM head as a model profile (the LM head counted once: `tied_embeddings`);
    `specsim.methods.pricing` prices a proposal with it."""
    return ModelProfile(name=head.name, description=f"{head.method} head (stand-in)", n_layers=head.n_layers,
                        d_model=head.d_model, d_ff=head.d_ff, n_heads=head.n_heads, n_kv_heads=head.n_kv_heads,
                        head_dim=head.head_dim, vocab_size=head.lm_head_vocab, tied_embeddings=True,
                        dtype=head.dtype)


def _check_layer(head: HeadProfile) -> None:
    """A head's layer obeys a model layer's rules (grouped-query heads, head width against d_model): the stand-in
    profile is validated here, so a bad head is one line about its own field, not a pydantic dump at pricing."""
    try:
        layer_profile(head)
    except ValidationError as e:
        err = e.errors()[0]
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, FieldError):
            raise FieldError(inner.message, field=_HEAD_FIELD.get(inner.field, inner.field), value=inner.value,
                             allowed=inner.allowed) from None
        field = ".".join(str(x) for x in err["loc"]) or "n_layers"
        raise FieldError(str(err["msg"]).removeprefix("Value error, "), field=_HEAD_FIELD.get(field, field),
                         value=err.get("input") if err["loc"] else None) from None


_HEAD_FIELD = {"vocab_size": "lm_head_vocab"}  # the stand-in's field -> the head's


def check_against_target(head: HeadProfile, target: ModelProfile, where: str | Path | None = None) -> None:
    """Refuse a head that cannot run on this target (one line naming the head's field).

    - eagle / eagle3 / mtp / medusa read the target's hidden states (EAGLE-3's fc takes 3 of them, cat'd; Medusa's
      heads sit on the last one; MTP's projection takes [h; Emb(t)]), and the profile prices fc and the q/k/v input
      as multiples of its own d_model: the head's d_model must be the target's. (vLLM's EAGLE-3 config may set a
      `target_hidden_size` of its own; a head profile has no such field, so a mismatch is refused, not guessed.)
    - its proposals are the target's tokens: a shared LM head (MTP, EAGLE-1, `shares_lm_head`) and Medusa's heads
      are the target's vocabulary; EAGLE-3's own LM head is a subset of it (draft_vocab_size, mapped by d2t).
    """
    if head.method in ("ngram", "suffix"):
        return
    file = where if where is not None else f"head profile {head.name}"
    if head.d_model != target.d_model:
        raise ConfigError(f"the {head.method} head reads {target.name}'s hidden states: its hidden size must be the "
                          f"target's", file=file, field="d_model", value=head.d_model,
                          allowed=f"{target.d_model} ({target.name}'s d_model)")
    V = target.vocab_size
    if (head.shares_lm_head or head.method == "medusa") and head.lm_head_vocab != V:
        raise ConfigError(f"the head's LM head is {target.name}'s vocabulary", file=file, field="lm_head_vocab",
                          value=head.lm_head_vocab, allowed=f"{V} ({target.name}'s vocab_size)")
    if head.lm_head_vocab > V:
        raise ConfigError(f"a draft vocabulary larger than {target.name}'s", file=file, field="lm_head_vocab",
                          value=head.lm_head_vocab, allowed=f"<= {V} ({target.name}'s vocab_size)")


def is_head_file(path: Path) -> bool:
    """A TOML file is a head profile when it says which method it serves."""
    return path.suffix == ".toml" and "method" in loader.load_toml(path)


def load_head(name: str | Path) -> HeadProfile:
    """A head by name (profile search path, then model_profiles/heads/) or by TOML path; one-line errors."""
    path = loader._resolve(name, HEAD_DIR, "head")
    if path.is_dir() or path.suffix != ".toml":
        raise ConfigError("a head profile is a TOML file", file=path, allowed="a .toml head profile")
    data = loader.load_toml(path)
    data.setdefault("name", path.stem)
    try:
        return HeadProfile.model_validate(data)
    except ValidationError as e:
        raise loader._translate(e, path, HeadProfile, schema="HeadProfile (specsim/methods/heads.py)") from None


def head(name: str | Path) -> HeadProfile:
    """`load_head`, cached per process like the other profiles."""
    return loader._CACHE.get(load_head, name)


def head_names() -> list[str]:
    return loader.list_names(HEAD_DIR)


def is_head(name: str | Path) -> bool:
    """Does `name` point at a head profile (a head name, or a TOML path whose file names a method)?"""
    if loader.is_path(name):
        p = Path(name)
        try:
            return p.is_file() and is_head_file(p)
        except ConfigError:
            return False
    for d in loader._search_dirs(HEAD_DIR):
        cand = d / f"{name}.toml"
        if str(name) and cand.is_file():  # the first match wins, as in the loader
            try:
                return is_head_file(cand)
            except ConfigError:
                return False
    return False


def head_method(name) -> str | None:
    """The method a draft name serves when it names a head profile (None: a model profile, or nothing loadable);
    SimConfig infers `method` from it when none is given (a sweep's draft axis may then mix models and heads)."""
    if not isinstance(name, str) or not name:
        return None
    try:
        return head(name).method if is_head(name) else None
    except ConfigError:
        return None  # refused with its own message when the deployment loads it


def shipped_head_name(method: str, target: str | Path) -> str:
    """The name a target's shipped head of `method` has: `<method>-<target>`; ngram / suffix serve any target."""
    if method in ("ngram", "suffix"):
        return method
    stem = Path(str(target)).stem if loader.is_path(target) else str(target)
    return f"{method}-{stem}"


def heads_for(method: str) -> list[str]:
    """The shipped heads of one method (for messages)."""
    out = []
    for n in head_names():
        try:
            if head(n).method == method:
                out.append(n)
        except ConfigError:
            continue
    return out
