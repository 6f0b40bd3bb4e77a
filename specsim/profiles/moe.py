"""Mixture-of-experts layers and multi-head latent attention: the derived sizes `ModelProfile` delegates here.

MoE (Mixtral, Jiang et al. 2024; Qwen3-MoE; DeepSeek-V3, DeepSeek-AI 2024): each of the n_layers - n_dense_layers
MoE layers holds a router (d_model x E, none when E = 1), n_shared_experts experts every token uses, and E routed
experts of which each token uses k; a dense layer holds the ordinary d_ff FFN. A pass over N tokens reads the
attention, router and shared weights plus the *distinct* routed experts those N tokens route to. With per-token
inclusion probabilities pi_i (sum k, each <= 1) and tokens routed independently, the expected count per layer is
sum_i 1 - (1 - pi_i)^N; uniform routing (pi_i = k/E) gives E(1 - (1 - k/E)^N). This holds for any within-token rule
(top-k, DeepSeek's group-limited top-k): only the marginals matter. A measured skew is `expert_load` (relative
tokens per expert, the same in every MoE layer): pi = k * load / sum(load), capped at 1 with the excess spread over
the rest (an expert cannot be chosen twice by one token). A dense model is exactly the E = k = 1 case.

MLA (DeepSeek-V2/V3): queries through a q_lora_rank bottleneck (or a full projection), keys and values through a
kv_lora_rank latent plus one shared qk_rope_head_dim rotary key; the KV cache holds kv_lora_rank + qk_rope_head_dim
elements per token per layer (one "head" shared by all query heads, so n_kv_heads = 1 and under TP every chip keeps
the whole latent, as vLLM's MLA backends do). Attention FLOPs follow the weight-absorbed form vLLM decodes with
(FlashMLA): per head, QK^T over kv_lora_rank + qk_rope_head_dim dims and AV over kv_lora_rank dims.
"""

from __future__ import annotations

from functools import lru_cache

from specsim.errors import FieldError

MOE_FIELDS = ("n_experts", "experts_per_token", "n_shared_experts", "expert_d_ff", "n_dense_layers", "expert_load",
              "published_active_params")
MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim")


# --- validation ---------------------------------------------------------------------------------------------------

def _given(m, name: str) -> bool:
    v = getattr(m, name)
    return v is not None and v != 0


def check_moe(m) -> None:
    """Cross-field rules of the MoE fields (one FieldError each)."""
    if (m.n_experts is None) != (m.experts_per_token is None):
        have, lack = ("n_experts", "experts_per_token") if m.experts_per_token is None else \
            ("experts_per_token", "n_experts")
        raise FieldError(f"{have} needs {lack} (a MoE layer is E experts, k per token)", field=lack, value=None,
                         allowed="set n_experts and experts_per_token together, or neither (a dense model)")
    if m.n_experts is None:
        extra = next((f for f in MOE_FIELDS if _given(m, f)), None)
        if extra:
            raise FieldError("a MoE field on a dense model", field=extra, value=getattr(m, extra),
                             allowed="set n_experts and experts_per_token too, or drop it")
        return
    E, k = m.n_experts, m.experts_per_token
    if k > E:
        raise FieldError("more experts per token than experts", field="experts_per_token", value=k,
                         allowed=f"<= n_experts = {E}")
    if m.architecture != "decoder":
        raise FieldError("MoE layers are modelled in decoder-only models", field="n_experts", value=E,
                         allowed="architecture = 'decoder'")
    if m.n_dense_layers >= m.n_layers:
        raise FieldError("no MoE layer left", field="n_dense_layers", value=m.n_dense_layers,
                         allowed=f"< n_layers = {m.n_layers}")
    if m.expert_load is not None and len(m.expert_load) != E:
        raise FieldError(f"{len(m.expert_load)} loads for {E} experts", field="expert_load",
                         value=len(m.expert_load), allowed=f"one relative load per expert ({E} numbers > 0)")


def check_mla(m) -> None:
    """Cross-field rules of multi-head latent attention."""
    if m.kv_lora_rank is None:
        extra = next((f for f in MLA_FIELDS if getattr(m, f) is not None), None)
        if extra:
            raise FieldError("an MLA field without kv_lora_rank", field=extra, value=getattr(m, extra),
                             allowed="set kv_lora_rank, qk_rope_head_dim and v_head_dim together, or none")
        return
    for f in ("qk_rope_head_dim", "v_head_dim"):
        if getattr(m, f) is None:
            raise FieldError("multi-head latent attention needs it", field=f, value=None,
                             allowed="a positive integer (DeepSeek-V3: qk_rope_head_dim 64, v_head_dim 128)")
    if m.n_kv_heads != 1:
        raise FieldError("MLA keeps one latent shared by every head", field="n_kv_heads", value=m.n_kv_heads,
                         allowed="1 with kv_lora_rank")
    if m.qk_rope_head_dim >= m.head_dim:
        raise FieldError("the rotary part must be narrower than the query/key head", field="qk_rope_head_dim",
                         value=m.qk_rope_head_dim, allowed=f"< head_dim = {m.head_dim} (qk_nope + qk_rope)")
    if m.architecture != "decoder" or m.attention_bias:
        field = "architecture" if m.architecture != "decoder" else "attention_bias"
        raise FieldError("MLA is modelled for bias-free decoder-only models", field=field,
                         value=getattr(m, field), allowed="architecture 'decoder', attention_bias false")


# --- MLA sizes -------------------------------------------------------------------------------------------------------

def mla_attention_params(m) -> int:
    """q (bottleneck + norm, or full), kv_a (latent + rope key) + its norm, kv_b (latent -> nope keys and values),
    o; DeepSeek-V3 report §2.1.1 and HF DeepseekV3Attention."""
    H, d, r, lr = m.n_heads, m.d_model, m.qk_rope_head_dim, m.kv_lora_rank
    q = d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * H * m.head_dim if m.q_lora_rank else d * H * m.head_dim
    kv = d * (lr + r) + lr + lr * H * (m.head_dim - r + m.v_head_dim)
    return q + kv + H * m.v_head_dim * d


def mla_kv_elements(m) -> int:
    """Cached elements per token per layer: the latent and the shared rotary key."""
    return m.kv_lora_rank + m.qk_rope_head_dim


def mla_attention_flops_per_key(m) -> int:
    """FLOPs per layer per new token per attended key, weight-absorbed (module doc)."""
    return 2 * m.n_heads * (mla_kv_elements(m) + m.kv_lora_rank)


# --- MoE sizes ---------------------------------------------------------------------------------------------------

def expert_params(m) -> int:
    """One expert's FFN (gated: up, gate, down)."""
    return (3 if m.ffn == "gated" else 2) * m.d_model * (m.expert_d_ff or m.d_ff)


def router_params(m) -> int:
    return m.d_model * m.n_experts if m.n_experts > 1 else 0  # one expert needs no router


def moe_layers(m) -> int:
    return m.n_layers - m.n_dense_layers


def _layer_base(m) -> int:
    """A decoder layer without its FFN: attention, norms, relative-position projection."""
    return m.decoder_layer_params - m.ffn_params


def decoder_params(m) -> int:
    """All decoder weights, every expert included (what memory holds)."""
    moe = router_params(m) + (m.n_experts + m.n_shared_experts) * expert_params(m)
    return m.n_layers * _layer_base(m) + m.n_dense_layers * m.ffn_params + moe_layers(m) * moe


def active_matmul_params(m) -> int:
    """Matmul parameters one token uses: attention, dense FFNs, router, shared and k routed experts, LM head."""
    moe = router_params(m) + (m.experts_per_token + m.n_shared_experts) * expert_params(m)
    attn = m.self_attention_params + m.cross_attention_params
    return m.n_layers * attn + m.n_dense_layers * m.ffn_params + moe_layers(m) * moe + m.vocab_size * m.d_model


def active_params(m) -> int:
    """Parameters one token touches (embedding row table and LM head counted, as published 'active' figures do)."""
    moe = router_params(m) + (m.experts_per_token + m.n_shared_experts) * expert_params(m)
    decoder = m.n_layers * _layer_base(m) + m.n_dense_layers * m.ffn_params + moe_layers(m) * moe
    return m.embedding_params + m.lm_head_params + decoder


@lru_cache(maxsize=256)
def inclusion_probabilities(load: tuple[float, ...] | None, n_experts: int, k: int) -> tuple[float, ...]:
    """Per-token probability that each expert is among its k (module doc: capped at 1, excess spread)."""
    if load is None:
        return (k / n_experts,) * n_experts
    pi = [0.0] * n_experts
    free, budget = list(range(n_experts)), float(k)
    while free:
        total = sum(load[i] for i in free)
        over = [i for i in free if budget * load[i] / total >= 1.0]
        if not over:
            for i in free:
                pi[i] = budget * load[i] / total
            break
        for i in over:
            pi[i] = 1.0
        budget -= len(over)
        free = [i for i in free if i not in over]
    return tuple(pi)


def expected_distinct_experts(m, tokens: int) -> float:
    """Expected routed experts woken per MoE layer by a pass over `tokens` tokens (module doc)."""
    E, k = m.n_experts, m.experts_per_token
    if m.expert_load is None:
        return E * (1.0 - (1.0 - k / E) ** tokens)
    return sum(1.0 - (1.0 - p) ** tokens for p in inclusion_probabilities(tuple(m.expert_load), E, k))


def pass_params(m, tokens: int) -> float:
    """Weights a pass over `tokens` tokens reads: attention, dense FFNs, routers, shared experts, the expected
    distinct routed experts, LM head (read in full, tied or not)."""
    fixed = router_params(m) + m.n_shared_experts * expert_params(m)
    always = m.n_layers * _layer_base(m) + m.n_dense_layers * m.ffn_params + moe_layers(m) * fixed
    woken = moe_layers(m) * expected_distinct_experts(m, tokens) * expert_params(m)
    return always + woken + m.vocab_size * m.d_model
