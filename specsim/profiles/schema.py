"""The profile schemas: typed hardware, software-stack and model profiles (loading is `specsim.profiles.loader`).

Chip figures (datasheet) and software-stack figures (overheads, achievable fractions) live apart so
each can be calibrated on its own. Model parameter counts are *derived* from architecture fields.
Every schema is strict: numbers must be numbers (`"3350"` and `true` are refused, an integer is fine where a
float is expected), floats must be finite, and cross-field rules bound what the fields may say together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specsim.errors import ConfigError, FieldError
from specsim.profiles import moe

# Storage bytes per parameter: IEEE 754 binary32 / bfloat16 / binary16, OCP FP8 (E4M3, E5M2), int8, and int4
# packed two to a byte (GPTQ/AWQ layouts; their per-group scales are ignored).
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
DType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
Overlap = Literal["max", "sum"]  # how a pass combines its memory and compute times (StackProfile.overlap)
OVERLAPS: tuple[str, ...] = get_args(Overlap)

# n_heads·head_dim / d_model. Decoder-only families keep the attention width near the residual width (Llama, Qwen2,
# Mistral: 1; Gemma-7B 16·256/3072 = 1.33; Gemma-2-9B 1.14; Qwen3-0.6B 2); T5 treats d_kv as its own knob
# (T5 v1.1 small 0.75, the original T5-3B 4 and T5-11B 16). Outside these bounds a field is almost surely a typo.
ATTENTION_WIDTH_RATIO = {"decoder": (0.25, 4.0), "encoder-decoder": (0.25, 16.0)}
# |derived / published_params - 1|. Published totals are rounded ("4B" has one significant figure: 3.5-4.5B) and
# some count a table or a bias differently; the shipped profiles agree within 3.5% (tests/test_profiles.py holds
# them to 3%). Beyond 15% the architecture fields and the published figure describe different models.
PUBLISHED_PARAMS_TOLERANCE = 0.15

# Upper bounds on profile fields (le=...) are our choice: one to three orders of magnitude beyond today's largest
# figure (an H200's 4.8 TB/s and 141 GB, an NVL72 rack's 72 chips, a 405B model's 126 layers and 128k vocabulary),
# so they only catch unit mistakes (MB/s for GB/s, bytes for GB) and never a real device or model.
PeakTflops = Annotated[float, Field(gt=0, le=1e6)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    # Smallest physical figure per field (beyond its `gt=0`): a bandwidth of 1e-300 GB/s is a typo that would
    # turn every pass time into inf. "peak_tflops" applies to each dtype's entry.
    _floors: ClassVar[dict[str, float]] = {}

    @model_validator(mode="after")
    def _above_floors(self):
        for name, floor in self._floors.items():
            v = getattr(self, name)
            for key, x in (v.items() if isinstance(v, dict) else [(None, v)]):
                if x is not None and x < floor:
                    raise FieldError("below the smallest figure specsim models", field=name if key is None
                                     else f"{name}.{key}", value=x, allowed=f">= {floor:g}")
        return self


class HardwareProfile(_Strict):
    """One accelerator chip (or CPU socket) as the datasheet gives it."""

    name: str
    description: str = ""
    kind: Literal["gpu", "tpu", "cpu"] = "gpu"
    peak_tflops: dict[DType, PeakTflops] = Field(min_length=1, description="dense peak per dtype, TFLOP/s")
    memory_bandwidth_gb_s: float = Field(gt=0, le=1e5)
    memory_capacity_gb: float = Field(gt=0, le=1e5)
    interconnect_bandwidth_gb_s: float | None = Field(default=None, gt=0, le=1e5)
    interconnect_latency_us: float | None = Field(default=None, ge=0, le=1e4)
    chips_per_node: int = Field(default=1, ge=1, le=1024, description="chips in one node / host")
    # Chips one tensor-parallel group may span: the chips one fast interconnect joins (a GPU's NVLink domain, a TPU
    # slice's ICI torus). Unset = chips_per_node (a GPU node's NVLink domain is its board); `max_tp` reads it.
    tp_domain_chips: int | None = Field(default=None, ge=1, le=65536,
                                        description="chips one tensor-parallel group may span (unset: chips_per_node)")
    default_stack: str | None = Field(default=None, description="stack profile used in calibrated mode")
    measured_system: str | None = Field(default=None, description="aiconfigurator-core's system name of this chip "
                                        "(its measured kernels: --stack vllm / sglang / trtllm); None = none")
    # Cost and power (specsim.cost.power), per chip; optional: a result's $/Mtok or J/token is null without them.
    # A user prices their own contract or measured power by copying the profile TOML and editing these lines.
    price_usd_per_hour: float | None = Field(default=None, gt=0, le=1e4, description="on-demand price per chip")
    tdp_w: float | None = Field(default=None, gt=0, le=1e5, description="datasheet TDP / max board power per chip")
    idle_w: float | None = Field(default=None, ge=0, le=1e5, description="idle floor per chip (calibratable)")
    # The power curve while the engine runs (specsim.cost.power: P = running_floor_w + (tdp_w − running_floor_w)
    # · s/(1+s), s = power_mbu_weight·MBU + power_mfu_weight·MFU); fitted by `specsim calibrate-power`; all three
    # or none (none: the curve fitted to the ML.ENERGY rows, in fractions of tdp_w, `cost.power.DEFAULT_CURVE`).
    running_floor_w: float | None = Field(default=None, ge=0, le=1e5, description="a running engine's floor per chip")
    power_mbu_weight: float | None = Field(default=None, ge=0, le=1e3, description="power curve: weight of MBU")
    power_mfu_weight: float | None = Field(default=None, ge=0, le=1e3, description="power curve: weight of MFU")
    _floors = {"peak_tflops": 1e-6, "memory_bandwidth_gb_s": 1e-3, "memory_capacity_gb": 1e-3,
               "interconnect_bandwidth_gb_s": 1e-3, "price_usd_per_hour": 1e-6, "tdp_w": 1e-3}

    @model_validator(mode="after")
    def _power_pair(self) -> "HardwareProfile":
        """The power model needs both figures, and the idle floor cannot exceed the maximum."""
        if (self.tdp_w is None) != (self.idle_w is None):
            have, lack = ("tdp_w", "idle_w") if self.idle_w is None else ("idle_w", "tdp_w")
            raise FieldError(f"{have} needs {lack} (the power model uses both)", field=lack, value=None,
                             allowed="set both tdp_w and idle_w, or neither (idle_w = 0 is allowed)")
        if self.tdp_w is not None and self.idle_w > self.tdp_w:
            raise FieldError("the idle floor exceeds the maximum power", field="idle_w", value=self.idle_w,
                             allowed=f"<= tdp_w = {self.tdp_w:g}")
        return self._power_curve()

    def _power_curve(self) -> "HardwareProfile":
        """The running curve's three figures come together, with tdp_w and idle_w, and its floor lies between them."""
        curve = ("running_floor_w", "power_mbu_weight", "power_mfu_weight")
        have = [k for k in curve if getattr(self, k) is not None]
        if have and (len(have) < 3 or self.tdp_w is None):
            lack = [k for k in curve + ("tdp_w",) if getattr(self, k) is None]
            raise FieldError("the power curve needs all of its figures", field=lack[0], value=None,
                             allowed="set running_floor_w, power_mbu_weight, power_mfu_weight, tdp_w and idle_w "
                                     "together, or no curve figure")
        if have and not self.idle_w <= self.running_floor_w <= self.tdp_w:
            raise FieldError("a running engine's floor lies between the idle and the maximum power",
                             field="running_floor_w", value=self.running_floor_w,
                             allowed=f"idle_w = {self.idle_w:g} .. tdp_w = {self.tdp_w:g}")
        return self

    def peak_flops(self, dtype: str) -> float:
        if dtype not in self.peak_tflops:
            raise ConfigError("no peak throughput for this dtype", file=f"hardware profile {self.name}",
                              field="peak_tflops", value=dtype, allowed=", ".join(self.peak_tflops))
        return self.peak_tflops[dtype] * 1e12

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.memory_bandwidth_gb_s * 1e9

    @property
    def max_tp(self) -> int:
        """The largest tensor-parallel group: tp_domain_chips where the profile states it, else one node."""
        return self.tp_domain_chips if self.tp_domain_chips is not None else self.chips_per_node


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
    _floors = {"bandwidth_fraction": 1e-4, "multi_row_bandwidth_fraction": 1e-4, "compute_fraction": 1e-4}


IDEAL_STACK = StackProfile(name="ideal", description="idealized roofline: full peak, no overheads")


class ModelProfile(_Strict):
    """Transformer architecture; every size follows from these fields. Mixture-of-experts layers and multi-head
    latent attention are optional field groups whose sizes `specsim.profiles.moe` derives; d_ff is then the dense
    layers' FFN width (and every expert's unless expert_d_ff is set)."""

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
    learned_positions: int = Field(default=0, ge=0, le=10_000_000, description="rows of a learned position table")
    # The longest sequence (prompt + output) the model serves: HF config max_position_embeddings (GPT-2:
    # n_positions), which vLLM takes as max_model_len. Unset = no position table to run off: relative positions
    # (T5's bucketed biases, Transformer-XL in Gopher/Chinchilla) reach any distance; the trained length is then
    # stated in the profile's comment and not enforced.
    max_position_embeddings: int | None = Field(default=None, ge=1, le=10_000_000,
                                                description="longest prompt + output, tokens (unset = no limit)")
    attention_bias: bool = False
    relative_position_projection: bool = Field(
        default=False, description="Transformer-XL relative positions (Gopher, Chinchilla): one d_model x "
                                   "n_heads*head_dim projection of the position embeddings per layer")
    dtype: DType = "bf16"
    published_params: float | None = Field(default=None, gt=0, le=1e15,
                                           description="published total; must agree with the derived count "
                                                       "within PUBLISHED_PARAMS_TOLERANCE")
    # Mixture of experts (all unset = a dense model; sizes and routing in specsim.profiles.moe). Mixtral: Jiang et al.
    # 2024; DeepSeek-V3 report (DeepSeek-AI 2024); Qwen3 technical report (Qwen team 2025).
    n_experts: int | None = Field(default=None, ge=1, le=65_536, description="routed experts per MoE layer (E)")
    experts_per_token: int | None = Field(default=None, ge=1, le=65_536, description="routed experts per token (k)")
    n_shared_experts: int = Field(default=0, ge=0, le=1024, description="experts every token uses (DeepSeek)")
    expert_d_ff: int | None = Field(default=None, ge=1, le=10_000_000, description="one expert's FFN width [d_ff]")
    n_dense_layers: int = Field(default=0, ge=0, le=1000, description="decoder layers with the dense d_ff FFN")
    expert_load: list[Annotated[float, Field(gt=0, le=1e15)]] | None = Field(
        default=None, min_length=1, max_length=65_536,
        description="measured relative tokens per routed expert (any scale; unset = uniform routing)")
    published_active_params: float | None = Field(default=None, gt=0, le=1e15,
                                                  description="published active parameters per token")
    # Multi-head latent attention (DeepSeek-V2/V3; all unset = grouped-query attention): head_dim is then the
    # query/key head (qk_nope_head_dim + qk_rope_head_dim) and n_kv_heads is 1 (specsim.profiles.moe).
    # vLLM's kv_cache_dtype: "auto" keeps the KV cache in the activations' dtype, which is bf16 for weight-quantized
    # checkpoints (DeepSeek-V3's fp8 weights run bf16 activations); unset = the weights' dtype
    kv_dtype: DType | None = Field(default=None, description="KV cache dtype; unset = dtype")
    kv_lora_rank: int | None = Field(default=None, ge=1, le=1_000_000)
    q_lora_rank: int | None = Field(default=None, ge=1, le=1_000_000, description="unset = a full query projection")
    qk_rope_head_dim: int | None = Field(default=None, ge=1, le=10_000)
    v_head_dim: int | None = Field(default=None, ge=1, le=10_000)

    @model_validator(mode="after")
    def _consistent(self) -> "ModelProfile":
        if self.n_heads % self.n_kv_heads:
            raise FieldError("n_heads must be a multiple of n_kv_heads (grouped-query attention)", field="n_kv_heads",
                             value=self.n_kv_heads, allowed=f"a divisor of n_heads = {self.n_heads}")
        if self.architecture == "decoder" and self.n_encoder_layers:
            raise FieldError("must be 0 for a decoder-only model", field="n_encoder_layers",
                             value=self.n_encoder_layers, allowed="0, or architecture = 'encoder-decoder'")
        if self.architecture == "encoder-decoder" and not self.n_encoder_layers:
            raise FieldError("an encoder-decoder model needs encoder layers", field="n_encoder_layers",
                             value=self.n_encoder_layers, allowed=">= 1")
        if self.learned_positions and (self.max_position_embeddings or 0) > self.learned_positions:
            raise FieldError("a learned position table has no row past its last", field="max_position_embeddings",
                             value=self.max_position_embeddings,
                             allowed=f"<= learned_positions = {self.learned_positions}")
        if self.head_dim > self.d_model:
            raise FieldError("a head wider than the model", field="head_dim", value=self.head_dim,
                             allowed=f"<= d_model = {self.d_model}")
        lo, hi = ATTENTION_WIDTH_RATIO[self.architecture]
        ratio = self._q_dim / self.d_model
        if not lo <= ratio <= hi:
            raise FieldError(f"n_heads·head_dim = {self._q_dim} is {ratio:.3g}× d_model = {self.d_model}",
                             field="head_dim", value=self.head_dim,
                             allowed=f"n_heads·head_dim between {lo:g}× and {hi:g}× d_model for a {self.architecture}"
                                     f" model")
        moe.check_moe(self)
        moe.check_mla(self)
        for field, derived in (("published_params", self.total_params),
                               ("published_active_params", self.active_params)):
            published = getattr(self, field)
            err = 0.0 if published is None else derived / published - 1
            if abs(err) > PUBLISHED_PARAMS_TOLERANCE:
                raise FieldError(f"the architecture fields give {derived:,} parameters, "
                                 f"{100 * err:+.0f}% off the published figure", field=field, value=published,
                                 allowed=f"within ±{PUBLISHED_PARAMS_TOLERANCE:.0%} of the derived count "
                                         f"(fix the architecture fields, or the figure)")
        return self

    # --- derived sizes -------------------------------------------------------------------
    @property
    def bytes_per_param(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes_per_element(self) -> float:
        return DTYPE_BYTES[self.kv_dtype or self.dtype]

    @property
    def _q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def _kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.n_experts is not None

    @property
    def self_attention_params(self) -> int:
        if self.kv_lora_rank is not None:
            return moe.mla_attention_params(self)
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
    def decoder_params(self) -> int:
        """Every decoder layer's weights; a MoE model's all experts (`decoder_layer_params` is a dense layer)."""
        return moe.decoder_params(self) if self.is_moe else self.n_layers * self.decoder_layer_params

    @property
    def total_params(self) -> int:
        return self.embedding_params + self.lm_head_params + self.encoder_params + self.decoder_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses (published 'active' figures): the total for a dense model."""
        return moe.active_params(self) if self.is_moe else self.total_params

    @property
    def step_params(self) -> int:
        """Weights a decode step reads when every expert wakes: decoder layers + LM head (the encoder ran once per
        request). A dense model always reads these; a MoE pass reads `pass_params(tokens)`, at most this."""
        head = self.vocab_size * self.d_model  # tied or not, the head matrix is read in full
        return self.decoder_params + head

    def pass_params(self, tokens: int) -> float:
        """Weights a pass over `tokens` tokens (batch x positions) reads: `step_params` for a dense model, the
        attention, shared weights and expected distinct experts for a MoE one (`specsim.profiles.moe`)."""
        return moe.pass_params(self, tokens) if self.is_moe else self.step_params

    def expected_distinct_experts(self, tokens: int) -> float:
        """Routed experts a pass over `tokens` tokens wakes per MoE layer (1 for a dense model: its one FFN)."""
        return moe.expected_distinct_experts(self, tokens) if self.is_moe else 1.0

    @property
    def matmul_params_per_token(self) -> int:
        """Parameters that take part in a matmul for one new decoder position (2 FLOPs each; MoE: active ones)."""
        if self.is_moe:
            return moe.active_matmul_params(self)
        return self.n_layers * (self.self_attention_params + self.cross_attention_params + self.ffn_params) \
            + self.vocab_size * self.d_model

    @property
    def attention_flops_per_key(self) -> int:
        """FLOPs per decoder layer per new token per attended key: QK^T and AV, 2 each per multiply-add."""
        return moe.mla_attention_flops_per_key(self) if self.kv_lora_rank else 4 * self.n_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        """Self-attention K and V for one position, all decoder layers (all chips together; see costs.py for TP);
        MLA caches its latent and rotary key instead."""
        if self.kv_lora_rank is not None:
            return self.n_layers * moe.mla_kv_elements(self) * self.kv_bytes_per_element
        return 2 * self.n_layers * self._kv_dim * self.kv_bytes_per_element

    @property
    def cross_kv_bytes_per_token(self) -> float:
        """Cross-attention K and V of one encoder position, all decoder layers (all chips together; TP splits these
        full heads evenly): T5 decoders keep them for the whole request and re-read them every step. 0 for
        decoder-only models. The one definition: the roofline's pass bytes and the KV reservation use it."""
        if self.architecture != "encoder-decoder":
            return 0.0
        return 2 * self.n_layers * self._q_dim * self.kv_bytes_per_element

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.bytes_per_param

    def check_context(self, prompt_len: int, output_len: int, role: str = "target") -> None:
        """Refuse a request longer than the positions the model has (`max_position_embeddings`; vLLM refuses a
        request whose prompt + max_tokens exceed max_model_len). An encoder-decoder model holds the prompt in its
        encoder and the output in its decoder: each is checked on its own."""
        limit = self.max_position_embeddings
        if limit is None:
            return
        if self.architecture == "encoder-decoder":
            over = [(f, n) for f, n in (("prompt_len", prompt_len), ("output_len", output_len)) if n > limit]
            if over:
                raise ConfigError(f"{over[0][0]} = {over[0][1]} tokens is past the {role} {self.name}'s "
                                  f"{limit} positions", field=over[0][0], value=over[0][1],
                                  allowed=f"<= {limit} (max_position_embeddings of {self.name})")
            return
        if prompt_len + output_len > limit:
            raise ConfigError(f"prompt {prompt_len} + output {output_len} = {prompt_len + output_len} tokens "
                              f"exceed the {role} {self.name}'s context", field="prompt_len + output_len",
                              value=prompt_len + output_len,
                              allowed=f"<= {limit} (max_position_embeddings of {self.name})")

    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> "ModelProfile":
        """Build a profile from a Hugging Face `config.json` or its folder (see `specsim.profiles.hf_import`)."""
        from specsim.profiles.hf_import import profile_from_hf_config

        return profile_from_hf_config(path, name)
