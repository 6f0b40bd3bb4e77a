"""Typed hardware, software-stack and model profiles, loaded from TOML.

Chip figures (datasheet) and software-stack figures (overheads, achievable fractions) live apart so
each can be calibrated on its own. Model parameter counts are *derived* from architecture fields.
"""

from __future__ import annotations

import json
import os
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specsim.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
HARDWARE_DIR = REPO_ROOT / "hardware_profiles"
STACK_DIR = HARDWARE_DIR / "stacks"
MODEL_DIR = REPO_ROOT / "model_profiles"

DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
DType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
Overlap = Literal["max", "sum"]  # how a pass combines its memory and compute times (StackProfile.overlap)
OVERLAPS: tuple[str, ...] = get_args(Overlap)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HardwareProfile(_Strict):
    """One accelerator chip (or CPU socket) as the datasheet gives it."""

    name: str
    description: str = ""
    kind: Literal["gpu", "tpu", "cpu"] = "gpu"
    peak_tflops: dict[DType, float] = Field(description="dense peak per dtype, TFLOP/s")
    memory_bandwidth_gb_s: float = Field(gt=0, le=1e5)
    memory_capacity_gb: float = Field(gt=0, le=1e5)
    interconnect_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=1e5)
    interconnect_latency_us: float | None = Field(default=None, ge=0, le=1e4)
    chips_per_node: int = Field(default=1, ge=1, le=1024)
    default_stack: str | None = Field(default=None, description="stack profile used in calibrated mode")

    @model_validator(mode="after")
    def _positive_peaks(self) -> "HardwareProfile":
        for dtype, v in self.peak_tflops.items():
            if not (v > 0):
                raise ValueError(f"peak_tflops.{dtype} must be > 0, got {v}")
        return self

    def peak_flops(self, dtype: str) -> float:
        if dtype not in self.peak_tflops:
            raise ConfigError("no peak throughput for this dtype", file=f"hardware profile {self.name}",
                              field="peak_tflops", value=dtype, allowed=", ".join(self.peak_tflops))
        return self.peak_tflops[dtype] * 1e12

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.memory_bandwidth_gb_s * 1e9


class StackProfile(_Strict):
    """What the software stack adds to the chip: achievable fractions and fixed per-call costs."""

    name: str
    description: str = ""
    bandwidth_fraction: float = Field(default=1.0, gt=0, le=1)
    # Passes of at least multi_row_min_rows rows (B·P) may stream weights at their own fraction: eager fp32 PyTorch
    # on a CPU runs one row as matrix-vector products but several rows as small, slower matrix products, and the BLAS
    # switches kernels at a row count of its own (2 on the AMD EPYC, 4 on the Intel Xeon we measured; calibrate.py).
    multi_row_bandwidth_fraction: float | None = Field(default=None, gt=0, le=1)
    multi_row_min_rows: int = Field(default=2, ge=2, le=4096)
    # "max": memory and compute overlap (the roofline; GPUs, TPUs); "sum": they take turns, as in eager fp32 PyTorch
    # on a CPU, whose kernels stream a weight block and then multiply it (calibrate.py fits either).
    overlap: Overlap = "max"
    compute_fraction: float = Field(default=1.0, gt=0, le=1)
    per_call_overhead_s: float = Field(default=0.0, ge=0, le=10)
    per_layer_overhead_s: float = Field(default=0.0, ge=0, le=1)
    # Added to every pass of more than one position per sequence: eager HF attention builds a causal mask and leaves
    # SDPA's mask-free path once a pass has several query positions (fitted 1-5 ms on the 2-core CPU; calibrate.py)
    multi_position_overhead_s: float = Field(default=0.0, ge=0, le=1)
    provenance: str = ""


IDEAL_STACK = StackProfile(name="ideal", description="idealized roofline: full peak, no overheads")


class ModelProfile(_Strict):
    """Transformer architecture; every size follows from these fields."""

    name: str
    description: str = ""
    architecture: Literal["decoder", "encoder-decoder"] = "decoder"
    n_layers: int = Field(ge=1, le=1000, description="decoder layers")
    n_encoder_layers: int = Field(default=0, ge=0, le=1000)
    d_model: int = Field(ge=1, le=1_000_000)
    d_ff: int = Field(ge=1, le=10_000_000)
    n_heads: int = Field(ge=1, le=10_000)
    n_kv_heads: int = Field(ge=1, le=10_000)
    head_dim: int = Field(ge=1, le=10_000)
    vocab_size: int = Field(ge=1, le=10_000_000)
    ffn: Literal["gated", "plain"] = "gated"
    tied_embeddings: bool = False
    learned_positions: int = Field(default=0, ge=0, description="rows of a learned position table")
    attention_bias: bool = False
    relative_position_projection: bool = Field(
        default=False, description="Transformer-XL relative positions (Gopher, Chinchilla): one d_model x "
                                   "n_heads*head_dim projection of the position embeddings per layer")
    dtype: DType = "bf16"
    published_params: float | None = Field(default=None, gt=0, description="published total, for checks only")

    @model_validator(mode="after")
    def _heads(self) -> "ModelProfile":
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.architecture == "decoder" and self.n_encoder_layers:
            raise ValueError("n_encoder_layers must be 0 for a decoder-only model")
        if self.architecture == "encoder-decoder" and not self.n_encoder_layers:
            raise ValueError("an encoder-decoder model needs n_encoder_layers >= 1")
        return self

    # --- derived sizes -------------------------------------------------------------------
    @property
    def bytes_per_param(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def _q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def _kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def self_attention_params(self) -> int:
        p = self.d_model * self._q_dim * 2 + self.d_model * self._kv_dim * 2
        if self.attention_bias:
            p += self._q_dim + 2 * self._kv_dim
        return p

    @property
    def cross_attention_params(self) -> int:
        """T5 decoder layers attend to the encoder output with full (non-grouped) heads."""
        return 4 * self.d_model * self._q_dim if self.architecture == "encoder-decoder" else 0

    @property
    def ffn_params(self) -> int:
        return (3 if self.ffn == "gated" else 2) * self.d_model * self.d_ff

    @property
    def relative_position_params(self) -> int:
        return self.d_model * self._q_dim if self.relative_position_projection else 0

    @property
    def decoder_layer_params(self) -> int:
        return (self.self_attention_params + self.cross_attention_params + self.ffn_params + 2 * self.d_model
                + self.relative_position_params)

    @property
    def encoder_params(self) -> int:
        return self.n_encoder_layers * (self.self_attention_params + self.ffn_params + 2 * self.d_model)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model + self.learned_positions * self.d_model

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab_size * self.d_model

    @property
    def total_params(self) -> int:
        return (self.embedding_params + self.lm_head_params + self.encoder_params
                + self.n_layers * self.decoder_layer_params)

    @property
    def step_params(self) -> int:
        """Weights one decode step reads: decoder layers + LM head (the encoder ran once per request)."""
        head = self.vocab_size * self.d_model  # tied or not, the head matrix is read in full
        return self.n_layers * self.decoder_layer_params + head

    @property
    def matmul_params_per_token(self) -> int:
        """Parameters that take part in a matmul for one new decoder position (2 FLOPs each)."""
        return self.n_layers * (self.self_attention_params + self.cross_attention_params + self.ffn_params) \
            + self.vocab_size * self.d_model

    @property
    def kv_bytes_per_token(self) -> float:
        """Self-attention K and V for one position, all decoder layers."""
        return 2 * self.n_layers * self._kv_dim * self.bytes_per_param

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.bytes_per_param

    # --- construction from a Hugging Face config ------------------------------------------
    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> "ModelProfile":
        """Build a profile from a Hugging Face `config.json` (Llama, Qwen2, Mistral, T5 families)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            cfg = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError("file not found", file=path) from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"not valid JSON ({e.msg} at line {e.lineno})", file=path) from None
        model_type = cfg.get("model_type", "")

        def need(key: str):
            if key not in cfg:
                raise ConfigError("missing field in Hugging Face config", file=path, field=key,
                                  allowed=f"a config of model_type {model_type!r} must define it")
            return cfg[key]

        name = name or cfg.get("_name_or_path") or path.parent.name
        hf_dtypes = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
        dtype = hf_dtypes.get(cfg.get("torch_dtype", "bfloat16"), "bf16")
        try:
            if model_type == "t5":
                d_model, n_heads = need("d_model"), need("num_heads")
                return cls(name=name, description=f"from {path}", architecture="encoder-decoder",
                           n_layers=cfg.get("num_decoder_layers") or need("num_layers"),
                           n_encoder_layers=need("num_layers"), d_model=d_model, d_ff=need("d_ff"),
                           n_heads=n_heads, n_kv_heads=n_heads, head_dim=need("d_kv"), vocab_size=need("vocab_size"),
                           ffn="gated" if cfg.get("is_gated_act") or "gated" in cfg.get("feed_forward_proj", "")
                           else "plain",
                           tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), dtype=dtype)
            if model_type in ("gpt2",):
                d_model, n_heads = need("n_embd"), need("n_head")
                return cls(name=name, description=f"from {path}", n_layers=need("n_layer"), d_model=d_model,
                           d_ff=cfg.get("n_inner") or 4 * d_model, n_heads=n_heads, n_kv_heads=n_heads,
                           head_dim=d_model // n_heads, vocab_size=need("vocab_size"), ffn="plain",
                           tied_embeddings=True, learned_positions=need("n_positions"), attention_bias=True,
                           dtype=dtype)
            d_model, n_heads = need("hidden_size"), need("num_attention_heads")
            return cls(name=name, description=f"from {path}", n_layers=need("num_hidden_layers"), d_model=d_model,
                       d_ff=need("intermediate_size"), n_heads=n_heads,
                       n_kv_heads=cfg.get("num_key_value_heads") or n_heads,
                       head_dim=cfg.get("head_dim") or d_model // n_heads, vocab_size=need("vocab_size"),
                       ffn="gated", tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                       attention_bias=bool(cfg.get("attention_bias", model_type == "qwen2")), dtype=dtype)
        except ValidationError as e:
            raise _translate(e, path) from None


# --- loading ----------------------------------------------------------------------------------

def _translate(err: ValidationError, file: str | Path) -> ConfigError:
    """Turn pydantic's report into one line naming file, field, value and allowed range."""
    e = err.errors()[0]
    field = ".".join(str(p) for p in e["loc"]) or None
    kind = e["type"]
    ctx = e.get("ctx", {})
    allowed = None
    if kind == "extra_forbidden":
        return ConfigError("unknown field", file=file, field=field, allowed="see the schema in specsim/profiles.py")
    if kind == "missing":
        return ConfigError("required field is missing", file=file, field=field)
    if "gt" in ctx or "ge" in ctx or "lt" in ctx or "le" in ctx:
        lo = f"> {ctx['gt']}" if "gt" in ctx else (f">= {ctx['ge']}" if "ge" in ctx else "")
        hi = f"< {ctx['lt']}" if "lt" in ctx else (f"<= {ctx['le']}" if "le" in ctx else "")
        allowed = " and ".join(x for x in (lo, hi) if x)
    elif "expected" in ctx:
        allowed = str(ctx["expected"])
    msg = e["msg"]
    return ConfigError(msg, file=file, field=field, value=e.get("input") if kind != "missing" else None,
                       allowed=allowed)


def load_toml(path: str | Path) -> dict:
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError("file not found", file=path) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"malformed TOML: {e}", file=path) from None


def _load(cls, path: Path):
    data = load_toml(path)
    data.setdefault("name", path.stem)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise _translate(e, path) from None


def _search_dirs(default: Path) -> list[Path]:
    extra = os.environ.get("SPECSIM_PROFILE_PATH", "")
    return [Path(p) for p in extra.split(os.pathsep) if p] + [default]


def _resolve(name_or_path: str | Path, default_dir: Path, kind: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if not p.exists():
            raise ConfigError("file not found", file=p)
        return p
    for d in _search_dirs(default_dir):
        cand = d / f"{name_or_path}.toml"
        if cand.exists():
            return cand
    known = ", ".join(list_names(default_dir))
    raise ConfigError(f"unknown {kind} profile", field=kind, value=str(name_or_path), allowed=known)


def list_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.toml"))


def load_hardware(name: str | Path) -> HardwareProfile:
    return _load(HardwareProfile, _resolve(name, HARDWARE_DIR, "hardware"))


def load_stack(name: str | Path | None) -> StackProfile:
    if name is None or name == "ideal":
        return IDEAL_STACK
    return _load(StackProfile, _resolve(name, STACK_DIR, "stack"))


def load_model(name: str | Path) -> ModelProfile:
    return _load(ModelProfile, _resolve(name, MODEL_DIR, "model"))


class _Cache:
    """Profiles are immutable; load each file once per process (sweeps load them thousands of times)."""

    def __init__(self):
        self._d: dict = {}

    def get(self, fn, name):
        key = (fn.__name__, str(name))
        if key not in self._d:
            self._d[key] = fn(name)
        return self._d[key]


_CACHE = _Cache()


def hardware(name: str | Path) -> HardwareProfile:
    return _CACHE.get(load_hardware, name)


def stack(name: str | Path | None) -> StackProfile:
    return _CACHE.get(load_stack, name)


def model(name: str | Path) -> ModelProfile:
    return _CACHE.get(load_model, name)


