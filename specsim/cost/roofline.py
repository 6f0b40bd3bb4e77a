"""The roofline cost model: time of one forward pass of one model.

A pass is (batch B, new positions per sequence P, cached context L). Idealized mode is the seed's
picture, max(bytes / bandwidth, FLOPs / peak); calibrated mode applies the software stack's
achievable fractions and its fixed per-call and per-layer costs (and, for a stack whose `overlap` is "sum",
adds the memory and compute times instead of taking the larger); measured mode (see
`specsim.cost.measured`) interpolates pass times a real run recorded.

Tensor parallelism splits weights and FLOPs tp ways and adds two all-reduces per layer; `check_tp` refuses a
degree the model's heads or the node cannot take (TP_RULE), and the KV cache per chip counts replicated KV heads.

Mixture of experts: a pass over N = batch x positions tokens reads the attention and shared weights plus the
expected distinct experts those tokens route to (`ModelProfile.pass_params`, specsim.profiles.moe), so verifying
γ+1 positions costs more bytes than one even at batch 1; FLOPs count the active parameters; memory holds every
expert. Under TP the experts split tp ways like the dense FFN (no expert parallelism).

A KV budget (`kv_budget_tokens`, the draft's `draft_kv_budget_tokens`) caps the cached context a pass reads and
attends to, and the KV it keeps, at that many tokens per sequence (StreamingLLM's attention sinks + sliding window,
Xiao et al. 2023; long-context speculation with a capped-KV draft, MagicDec, Chen et al. 2024, TriForce, Sun et al.
2024): context L is priced as min(L, budget), so a pass under the budget costs exactly what it did.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Literal

from specsim.errors import ConfigError, DoesNotFitError
from specsim.profiles import IDEAL_STACK, HardwareProfile, ModelProfile, StackProfile

Mode = Literal["ideal", "calibrated"]


# --- tensor parallelism --------------------------------------------------------------------------------------

# vLLM's rule (QKVParallelLinear, MergedColumnParallelLinear): query heads and the FFN split evenly; KV heads split
# evenly too, or, when tp exceeds n_kv_heads, each chip holds one replica of a KV head (tp a multiple of n_kv_heads).
# A group spans at most one TP domain (`HardwareProfile.max_tp`): the profile's tp_domain_chips where it states one
# (a TPU slice over ICI), else one node (chips_per_node: a GPU board's NVLink domain).
# A MoE model's experts split tp ways like the dense FFN (each expert's d_ff sharded on every chip, vLLM's FusedMoE
# without expert parallelism, which specsim does not model), so tp must divide expert_d_ff too; MLA's one latent
# "KV head" is kept whole on every chip (n_kv_heads = 1).
TP_RULE = "tp must divide n_heads and d_ff (and expert_d_ff), and divide n_kv_heads or be a multiple of it (KV " \
          "heads then replicated)"


def _tp_problem(model: ModelProfile, tp: int) -> str | None:
    if model.n_heads % tp:
        return f"{tp} does not divide n_heads = {model.n_heads}"
    expert_d_ff = getattr(model, "expert_d_ff", None) if getattr(model, "n_experts", None) else None
    if model.d_ff % tp and not (expert_d_ff and model.n_dense_layers == 0):  # d_ff unused without dense layers
        return f"{tp} does not divide d_ff = {model.d_ff}"
    if expert_d_ff and expert_d_ff % tp:
        return f"{tp} does not divide expert_d_ff = {expert_d_ff}"
    if model.n_kv_heads % tp and tp % model.n_kv_heads:
        return f"{tp} neither divides n_kv_heads = {model.n_kv_heads} nor is a multiple of it"
    return None


def valid_tp(model: ModelProfile, hardware: HardwareProfile) -> list[int]:
    """Every tensor-parallel degree the model can be split into within one TP domain of this hardware."""
    return [t for t in range(1, hardware.max_tp + 1) if _tp_problem(model, t) is None]


def check_tp(model: ModelProfile, hardware: HardwareProfile, tp) -> int:
    """Refuse a tensor-parallel degree the model or the node cannot take (see TP_RULE), in one line; return it."""
    try:
        degree = operator.index(tp) if not isinstance(tp, bool) else 0
    except TypeError:
        degree = 0
    if degree < 1:
        raise ConfigError("tensor parallelism must be a positive integer", field="tp", value=tp, allowed=">= 1")
    tp = degree
    if tp > 1 and hardware.interconnect_bandwidth_gb_s is None:
        raise ConfigError("tensor parallelism needs an interconnect", file=f"hardware profile {hardware.name}",
                          field="interconnect_bandwidth_gb_s", value=None, allowed="set it to use --tp > 1")
    if tp > hardware.max_tp:
        span = f"chips_per_node = {hardware.chips_per_node}" if hardware.tp_domain_chips is None else \
            f"tp_domain_chips = {hardware.tp_domain_chips}"
        raise ConfigError(f"tensor parallelism spans one TP domain: {hardware.name} has {span}", field="tp", value=tp,
                          allowed=f"1..{hardware.max_tp} (a profile sets tp_domain_chips to span more than a node)")
    problem = _tp_problem(model, tp)
    if problem:
        ok = ", ".join(map(str, valid_tp(model, hardware)))
        raise ConfigError(f"{model.name} cannot be split over {tp} chips: {problem}", field="tp", value=tp,
                          allowed=f"{ok} on {hardware.name} ({TP_RULE})")
    return tp


def kv_heads_per_chip(model: ModelProfile, tp: int) -> int:
    """KV heads each chip stores: n_kv_heads / tp, or one replicated head once tp >= n_kv_heads."""
    return max(1, model.n_kv_heads // tp)


def kv_bytes_per_token_per_chip(model: ModelProfile, tp: int) -> float:
    """Self-attention K and V for one position on one chip of a tp group (replicated KV heads counted)."""
    n_kv = getattr(model, "n_kv_heads", None)  # a weightless stand-in (measured.free_model) has none
    if not n_kv:
        return model.kv_bytes_per_token / tp
    return model.kv_bytes_per_token * kv_heads_per_chip(model, tp) / n_kv


@dataclass(frozen=True)
class PassCost:
    positions: int
    batch: int
    context: int
    time_s: float
    bytes: float
    flops: float
    bound: Literal["memory", "compute"]
    memory_time_s: float
    compute_time_s: float
    overhead_time_s: float
    comm_time_s: float

    def as_dict(self) -> dict:
        return {"positions": self.positions, "batch": self.batch, "context": self.context, "time_s": self.time_s,
                "bytes": self.bytes, "flops": self.flops, "bound": self.bound}


class CostModel:
    """Pass times of one model on one (possibly tensor-parallel) hardware setup."""

    def __init__(self, model: ModelProfile, hardware: HardwareProfile, stack: StackProfile | None = None,
                 tp: int = 1, cross_context: int = 0, kv_budget_tokens: int | None = None):
        tp = check_tp(model, hardware, tp)
        self.kv_budget_tokens = kv_budget_tokens  # None = the full context (module doc)
        self.model, self.hardware, self.tp = model, hardware, tp
        self.stack = stack or IDEAL_STACK
        self.cross_context = cross_context
        self.kv_bytes_per_token_per_chip = kv_bytes_per_token_per_chip(model, tp)
        self._bw = hardware.bandwidth_bytes_s * self.stack.bandwidth_fraction
        self._bw_multi = hardware.bandwidth_bytes_s * (self.stack.multi_row_bandwidth_fraction
                                                       or self.stack.bandwidth_fraction)
        self._peak = hardware.peak_flops(model.dtype) * self.stack.compute_fraction

    @property
    def mode(self) -> Mode:
        return "ideal" if self.stack == IDEAL_STACK else "calibrated"

    def kv_context(self, context: int) -> int:
        """Cached tokens a pass reads per sequence: the context, capped at the KV budget when there is one."""
        return context if self.kv_budget_tokens is None else min(context, self.kv_budget_tokens)

    # --- the two sides of the roofline -------------------------------------------------------
    def pass_bytes(self, batch: int, positions: int, context: int, cross_context: int | None = None) -> float:
        m = self.model
        cross_context = self.cross_context if cross_context is None else cross_context
        # a MoE pass reads the experts its batch x positions tokens wake (ModelProfile.pass_params); dense: all
        weights = m.pass_params(batch * positions) * m.bytes_per_param
        # per chip: each holds n_kv_heads / tp KV heads, or one replicated head when tp exceeds n_kv_heads
        kv = batch * (self.kv_context(context) + positions) * self.kv_bytes_per_token_per_chip
        # T5 decoders re-read the encoder's cross-attention K/V every step (full heads, split evenly).
        cross = batch * cross_context * m.cross_kv_bytes_per_token
        return (weights + cross) / self.tp + kv

    def pass_flops(self, batch: int, positions: int, context: int, cross_context: int | None = None) -> float:
        m = self.model
        cross_context = self.cross_context if cross_context is None else cross_context
        tokens = batch * positions
        dense = 2.0 * m.matmul_params_per_token * tokens  # MoE: the active parameters only
        # QK^T and AV: 2 matmuls x 2 FLOPs per multiply-add over the live keys (causal within the P new ones).
        keys = self.kv_context(context) + (positions + 1) / 2.0
        if m.kv_lora_rank is None:
            attn = 4.0 * m.n_layers * m.n_heads * m.head_dim * keys * tokens
        else:  # MLA, weight-absorbed (specsim.profiles.moe)
            attn = float(m.n_layers * m.attention_flops_per_key) * keys * tokens
        if m.architecture == "encoder-decoder":
            attn += 4.0 * m.n_layers * m.n_heads * m.head_dim * cross_context * tokens
        return (dense + attn) / self.tp

    def comm_time_s(self, batch: int, positions: int) -> float:
        """Two ring all-reduces of the activations per layer under tensor parallelism.

        Two per layer: Megatron-LM's split (Shoeybi et al. 2019, §3: one after attention, one after the MLP). A ring
        all-reduce moves 2(p − 1)/p of the message over each link and takes 2(p − 1) hops (Patarasuk & Yuan 2009),
        each paying the profile's interconnect latency."""
        if self.tp == 1:
            return 0.0
        hw = self.hardware
        msg = batch * positions * self.model.d_model * self.model.bytes_per_param
        ring = 2.0 * (self.tp - 1) / self.tp * msg / (hw.interconnect_bandwidth_gb_s * 1e9)
        lat = (hw.interconnect_latency_us or 0.0) * 1e-6 * 2 * (self.tp - 1)
        return 2 * self.model.n_layers * (ring + lat)

    def pass_cost(self, batch: int = 1, positions: int = 1, context: int = 0,
                  cross_context: int | None = None) -> PassCost:
        if batch < 1 or positions < 1 or context < 0:
            raise ConfigError("a pass needs batch >= 1, positions >= 1, context >= 0", field="pass",
                              value=(batch, positions, context))
        b = self.pass_bytes(batch, positions, context, cross_context)
        f = self.pass_flops(batch, positions, context, cross_context)
        return self._finish(batch, positions, context, b, f, self.model.n_layers)

    def _finish(self, batch: int, positions: int, context: int, b: float, f: float, layers: int) -> PassCost:
        t_mem = b / (self._bw if batch * positions < self.stack.multi_row_min_rows else self._bw_multi)
        t_cmp = f / self._peak
        s = self.stack
        overhead = s.per_call_overhead_s + s.per_layer_overhead_s * layers
        if positions > 1:
            overhead += s.multi_position_overhead_s
        comm = self.comm_time_s(batch, positions)
        t_run = max(t_mem, t_cmp) if s.overlap == "max" else t_mem + t_cmp
        return PassCost(positions=positions, batch=batch, context=context,
                        time_s=t_run + overhead + comm, bytes=b, flops=f,
                        bound="memory" if t_mem >= t_cmp else "compute", memory_time_s=t_mem,
                        compute_time_s=t_cmp, overhead_time_s=overhead, comm_time_s=comm)

    def pass_time_s(self, batch: int = 1, positions: int = 1, context: int = 0,
                    cross_context: int | None = None) -> float:
        return self.pass_cost(batch, positions, context, cross_context).time_s

    def prefill_cost(self, batch: int, prompt_len: int) -> PassCost:
        """Prompt processing at admission: the encoder for encoder-decoder models, else a decoder pass."""
        m = self.model
        if m.architecture == "decoder":
            return self.pass_cost(batch, prompt_len, 0)
        enc_layer = m.self_attention_params + m.ffn_params
        tokens = batch * prompt_len
        b = (m.n_encoder_layers * enc_layer * m.bytes_per_param) / self.tp
        f = (2.0 * m.n_encoder_layers * enc_layer * tokens
             + 4.0 * m.n_encoder_layers * m.n_heads * m.head_dim * prompt_len * tokens) / self.tp
        return self._finish(batch, prompt_len, 0, b, f, m.n_encoder_layers)

    def ridge_positions(self, batch: int = 1, context: int = 0) -> int:
        """Smallest number of new positions per sequence at which the pass turns compute-bound."""
        lo, hi = 1, 1
        while self.pass_cost(batch, hi, context).bound == "memory":
            hi *= 2
            if hi > 1 << 24:  # our choice: 16M positions per sequence exceeds every model's context; stop doubling
                return hi
        while lo < hi:
            mid = (lo + hi) // 2
            if self.pass_cost(batch, mid, context).bound == "memory":
                lo = mid + 1
            else:
                hi = mid
        return lo

    # --- memory --------------------------------------------------------------------------------
    def memory_bytes(self, batch: int, context: int) -> float:
        """Per chip: all weights (encoder included) split tp ways, plus the KV cache for batch x context (each
        chip's share, replicated KV heads included)."""
        return self.model.weight_bytes / self.tp + batch * self.kv_context(context) * self.kv_bytes_per_token_per_chip


def check_fits(models: list[CostModel], batch: int, context: int) -> float:
    """Refuse a setup whose weights + KV exceed the device memory; return the bytes used per chip."""
    hw = models[0].hardware
    cap = hw.memory_capacity_gb * 1e9
    used = sum(cm.memory_bytes(batch, context) for cm in models)
    if used > cap:
        parts = ", ".join(
            f"{cm.model.name}: weights {cm.memory_bytes(batch, 0) / 1e9:.2f} GB + KV "
            f"{(cm.memory_bytes(batch, context) - cm.memory_bytes(batch, 0)) / 1e9:.2f} GB" for cm in models)
        raise DoesNotFitError(
            f"does not fit: needs {used / 1e9:.2f} GB per chip ({parts}) at batch {batch}, context {context}, "
            f"tp {models[0].tp}, but {hw.name} has {hw.memory_capacity_gb:g} GB; allowed: a larger --tp, a smaller "
            f"batch or context, or a larger device")
    return used


def cost_ratio_c(target, draft, prompt_len: int = 0, batch: int = 1) -> float:
    """c = T_draft / T_target for one decode step each at the first step's live context: the one definition of c
    (`Deployment.c`, `StepCosts.derived_c` and every command use it; never assumed).

    The first decode step of a decoder-only model attends to the prompt's KV (context = prompt_len); an
    encoder-decoder's decoder has no self-attention context yet and cross-attends to the encoded prompt. Works for
    any cost model with `pass_time_s(batch, positions, context, cross_context)` (roofline or measured)."""
    L, X = first_step_context(target, prompt_len)
    return draft.pass_time_s(batch, 1, L, X) / target.pass_time_s(batch, 1, L, X)


def first_step_context(target, prompt_len: int) -> tuple[int, int]:
    """(self-attention context, cross context) of the first decode step: the prompt's KV for a decoder-only model;
    none yet, and the encoded prompt to cross-attend to, for an encoder-decoder (`cost_ratio_c`'s rule)."""
    return (0, prompt_len) if target.model.architecture == "encoder-decoder" else (prompt_len, 0)
