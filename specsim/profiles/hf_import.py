"""A ModelProfile from a Hugging Face `config.json` (Llama, Qwen2, Mistral, GPT-2, T5; MoE: Mixtral, Qwen3-MoE,
DeepSeek-V2/V3 with its multi-head latent attention).

Other mixture-of-experts families (Qwen2-MoE, DBRX, OLMoE, Jamba, ...) are refused: their routing or shared-expert
layouts are not read, and pricing their experts as one dense FFN would report a model several times too slow and
too large. A quantized checkpoint is refused (its `torch_dtype` is the activations' dtype, not the weights'),
except quant_method "fp8" (DeepSeek-V3's published checkpoint: float8 e4m3 weights with per-block scales, which are
ignored), read as dtype fp8 with a bf16 KV cache (vLLM's kv_cache_dtype "auto"). Every problem — not JSON, not an
object, a missing key, a value of the wrong type — is one ConfigError naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from specsim.errors import ConfigError
from specsim.inputs.files import check_nesting

# keys that hold an expert count (Mixtral / GPT-OSS / Llama 4, Qwen-MoE / OLMoE / Jamba, DeepSeek, DBRX's ffn_config)
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_MOE_TYPES = {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "olmoe", "jamba",
              "granitemoe", "phimoe", "jetmoe", "switch_transformers", "nllb_moe", "gpt_oss", "llama4", "arctic"}
_MOE_IMPORTED = ("mixtral", "qwen3_moe", "deepseek_v2", "deepseek_v3")
_HF_DTYPES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
_MISSING = object()


def _read(path: Path) -> tuple[Path, dict]:
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
        check_nesting(text, file=path)  # 20,000 nested [ are one line, not a RecursionError
        cfg = json.loads(text)
    except FileNotFoundError:
        raise ConfigError("file not found", file=path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a config.json", file=path) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"not a UTF-8 text file (byte {e.start})", file=path) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"not valid JSON ({e.msg} at line {e.lineno})", file=path) from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the file ({type(e).__name__}: {e})", file=path) from None
    if not isinstance(cfg, dict):
        raise ConfigError("not a Hugging Face config: the JSON is not an object", file=path,
                          value=type(cfg).__name__, allowed="a JSON object of config keys")
    return path, cfg


def _experts(cfg: dict) -> tuple[str, object] | None:
    """The first key that says the model is a mixture of experts, with its value."""
    for where, d in (("", cfg), ("text_config.", cfg.get("text_config")), ("ffn_config.", cfg.get("ffn_config"))):
        if not isinstance(d, dict):
            continue
        for k in _EXPERT_KEYS:
            v = d.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1:
                return where + k, v
    mt = cfg.get("model_type")
    if isinstance(mt, str) and (mt in _MOE_TYPES or "moe" in mt):
        return "model_type", mt
    return None


def _refuse_unrepresentable(cfg: dict, path: Path) -> None:
    moe = _experts(cfg)
    if moe is not None and cfg.get("model_type") not in _MOE_IMPORTED:
        raise ConfigError("a mixture-of-experts family specsim does not import: its experts would be priced as one "
                          "dense FFN", file=path, field=moe[0], value=moe[1],
                          allowed=f"a dense model's config.json, or model_type {', '.join(_MOE_IMPORTED)}")
    q = cfg.get("quantization_config")
    if q is not None and not _fp8(cfg):
        method = q.get("quant_method") if isinstance(q, dict) else q
        raise ConfigError("a quantized checkpoint: torch_dtype gives the activations, not the stored weights; "
                          "write a TOML profile with the weights' dtype (int4, int8 or fp8) instead", file=path,
                          field="quantization_config", value=method, allowed="an unquantized config.json")


class _Cfg:
    """Typed access to the config's keys, each failure one line naming the key."""

    def __init__(self, cfg: dict, path: Path):
        self.cfg, self.path = cfg, path
        mt = cfg.get("model_type", "")
        if not isinstance(mt, str):
            raise ConfigError("not a string", file=path, field="model_type", value=mt, allowed="e.g. 'llama'")
        self.model_type = mt

    def int_(self, key: str, default=_MISSING, lo: int = 1) -> int:
        v = self.cfg.get(key)
        if v is None:
            if default is _MISSING:
                raise ConfigError("missing field in Hugging Face config", file=self.path, field=key,
                                  allowed=f"a config of model_type {self.model_type!r} must define it")
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError("not an integer", file=self.path, field=key, value=v, allowed="a positive integer")
        if v < lo:
            raise ConfigError("value out of range", file=self.path, field=key, value=v, allowed=f">= {lo}")
        return v

    def ints(self, key: str) -> list[int]:
        """A list of non-negative integers (absent or null: empty)."""
        v = self.cfg.get(key) or []
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in v):
            raise ConfigError("not a list of layer indices", file=self.path, field=key, value=v,
                              allowed="a list of integers >= 0")
        return v

    def _typed(self, key: str, default, kind: type, what: str, allowed: str):
        """The value at `key` if it is a `kind` (`default` when absent or null); otherwise one line naming it."""
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, kind):
            raise ConfigError(f"not a {what}", file=self.path, field=key, value=v, allowed=allowed)
        return v

    def bool_(self, key: str, default: bool) -> bool:
        return self._typed(key, default, bool, "boolean", "true or false")

    def str_(self, key: str, default: str) -> str:
        return self._typed(key, default, str, "string", "a string")

    def dtype(self) -> str:
        if _fp8(self.cfg):
            return "fp8"
        key = "torch_dtype" if self.cfg.get("torch_dtype") is not None else "dtype"
        v = self.str_(key, "bfloat16")
        if v not in _HF_DTYPES:
            raise ConfigError("unsupported dtype", file=self.path, field=key, value=v,
                              allowed=", ".join(sorted(_HF_DTYPES)))
        return _HF_DTYPES[v]


def _fields(c: _Cfg) -> dict:
    """The ModelProfile fields for the config's family.

    Defaults for keys a config may omit are transformers' own config-class defaults: T5Config
    (feed_forward_proj "relu", num_decoder_layers = num_layers, tie_word_embeddings True), GPT2Config
    (n_inner None → 4·n_embd), LlamaConfig (num_key_value_heads = num_attention_heads, head_dim = hidden_size //
    num_attention_heads);
    Qwen2 projects q/k/v with biases (Qwen2Attention). A missing dtype is read as bf16 (what these checkpoints
    ship in). The context is `max_position_embeddings` as written (GPT-2: n_positions), which vLLM takes as
    max_model_len; rope_scaling is not applied on top (the released long-context configs, Llama 3.1's llama3 and
    DeepSeek-V3's yarn, already write the extended length there). A config without the key, and T5 (relative
    position buckets, no table), leave it unset: no limit is checked."""
    if c.model_type == "t5":
        n_heads = c.int_("num_heads")
        proj = c.str_("feed_forward_proj", "relu")
        return dict(architecture="encoder-decoder", n_layers=c.int_("num_decoder_layers", c.int_("num_layers")),
                    n_encoder_layers=c.int_("num_layers"), d_model=c.int_("d_model"), d_ff=c.int_("d_ff"),
                    n_heads=n_heads, n_kv_heads=n_heads, head_dim=c.int_("d_kv"), vocab_size=c.int_("vocab_size"),
                    ffn="gated" if c.bool_("is_gated_act", False) or "gated" in proj else "plain",
                    tied_embeddings=c.bool_("tie_word_embeddings", True))  # T5Config's default (T5 v1.0 ties)
    if c.model_type == "gpt2":
        d_model, n_heads = c.int_("n_embd"), c.int_("n_head")
        return dict(n_layers=c.int_("n_layer"), d_model=d_model, d_ff=c.int_("n_inner", 4 * d_model),
                    n_heads=n_heads, n_kv_heads=n_heads, head_dim=d_model // n_heads, vocab_size=c.int_("vocab_size"),
                    ffn="plain", tied_embeddings=True, learned_positions=c.int_("n_positions"), attention_bias=True,
                    max_position_embeddings=c.int_("n_positions"))
    d_model, n_heads = c.int_("hidden_size"), c.int_("num_attention_heads")
    return dict(n_layers=c.int_("num_hidden_layers"), d_model=d_model, d_ff=c.int_("intermediate_size"),
                n_heads=n_heads, n_kv_heads=c.int_("num_key_value_heads", n_heads),
                head_dim=c.int_("head_dim", max(1, d_model // n_heads)), vocab_size=c.int_("vocab_size"), ffn="gated",
                tied_embeddings=c.bool_("tie_word_embeddings", False),
                attention_bias=c.bool_("attention_bias", c.model_type == "qwen2"),
                max_position_embeddings=c.int_("max_position_embeddings", None))


def _fp8(cfg: dict) -> bool:
    q = cfg.get("quantization_config")
    return isinstance(q, dict) and q.get("quant_method") == "fp8"


def _moe_layers(c: _Cfg) -> int:
    """MoE layers by the family's own rule: Qwen3MoeDecoderLayer (not in mlp_only_layers, (i + 1) divisible by
    decoder_sparse_step), DeepseekV3DecoderLayer (i >= first_k_dense_replace, i divisible by moe_layer_freq)."""
    n = c.int_("num_hidden_layers")
    if c.model_type == "qwen3_moe":
        step, dense = c.int_("decoder_sparse_step", 1), set(c.ints("mlp_only_layers"))
        return sum(1 for i in range(n) if i not in dense and (i + 1) % step == 0)
    if c.model_type.startswith("deepseek"):
        first, freq = c.int_("first_k_dense_replace", 0, lo=0), c.int_("moe_layer_freq", 1)
        return sum(1 for i in range(n) if i >= first and i % freq == 0)
    return n  # Mixtral: every layer


def _moe_family_fields(c: _Cfg) -> dict:
    """The MoE (and, for DeepSeek, MLA) fields; keys and defaults as the transformers config classes."""
    key = {"mixtral": "num_local_experts", "qwen3_moe": "num_experts"}.get(c.model_type, "n_routed_experts")
    out = dict(n_experts=c.int_(key), experts_per_token=c.int_("num_experts_per_tok"),
               n_dense_layers=c.int_("num_hidden_layers") - _moe_layers(c))
    if c.model_type != "mixtral":  # Mixtral's experts are intermediate_size wide
        out["expert_d_ff"] = c.int_("moe_intermediate_size")
    if c.model_type.startswith("deepseek"):
        rope = c.int_("qk_rope_head_dim")
        out.update(n_shared_experts=c.int_("n_shared_experts", 0, lo=0), kv_lora_rank=c.int_("kv_lora_rank"),
                   q_lora_rank=c.int_("q_lora_rank", None), qk_rope_head_dim=rope, v_head_dim=c.int_("v_head_dim"),
                   head_dim=c.int_("qk_nope_head_dim") + rope, n_kv_heads=1)
    return out


def _moe_fields(c: _Cfg) -> dict:
    """`_moe_family_fields`, a missing key reported as an incomplete mixture-of-experts config."""
    try:
        return _moe_family_fields(c)
    except ConfigError as e:
        if not e.message.startswith("missing field"):
            raise
        found = _experts(c.cfg) or ("model_type", c.model_type)
        raise ConfigError(f"a mixture-of-experts config without {e.field}", file=c.path, field=found[0],
                          value=found[1], allowed=f"a {c.model_type} config.json that defines {e.field}") from None


def profile_from_hf_config(path: str | Path, name: str | None = None):
    """`config.json` (or a folder holding it) → ModelProfile; refuses what the cost model cannot represent."""
    from specsim.profiles import ModelProfile
    from specsim.profiles.loader import _translate

    path, cfg = _read(Path(path))
    _refuse_unrepresentable(cfg, path)
    c = _Cfg(cfg, path)
    fields = _fields(c)
    if c.model_type in _MOE_IMPORTED:
        fields.update(_moe_fields(c))
    given = cfg.get("_name_or_path")
    stem = path.resolve().parent.name if path.name == "config.json" else path.stem
    name = name or (given if isinstance(given, str) and given else None) or stem or "hf-model"
    try:
        # fp8 weights with bf16 activations: vLLM's kv_cache_dtype "auto" keeps the KV cache in bf16
        kv = {"kv_dtype": "bf16"} if _fp8(c.cfg) else {}
        return ModelProfile(name=name, description=f"from {path}", dtype=c.dtype(), **fields, **kv)
    except ValidationError as e:
        raise _translate(e, path, ModelProfile) from None
