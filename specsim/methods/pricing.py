"""What one proposal costs on the accelerator (or the host): cost models of heads, priced like any model pass.

Each class has the interface `specsim.cost.steptime.StepCosts` and `Memory` read from a draft's cost model
(`pass_cost(batch, positions, context, cross)`, `pass_time_s`, `prefill_cost`, `memory_bytes`, and the weights and
KV it holds itself: `own_weight_bytes`, `kv_bytes_per_token_per_chip`):
- `LayerHeadCost` (EAGLE, EAGLE-3, MTP): the roofline `CostModel` of a stand-in profile holding the head's decoder
  layer(s) and its LM head (`tied_embeddings` = the head matrix counted once), plus what a Llama layer lacks — the
  feature projection (k·d -> d; EAGLE-3's once per step, `step_once_cost`) and the wider q/k/v input of EAGLE-3
  (2·d). A shared LM head (MTP, EAGLE-1) is
  read every pass but not stored again. The head keeps its own KV (one layer per layer).
- `MedusaCost` (Cai et al. 2024, §2.1.1: head k = W2_k · (SiLU(W1_k h) + h), W1 d×d, W2 d×V): K heads in one pass
  on the target's last hidden state; no KV, no attention, so its cost depends neither on γ nor on the context.
- `HostCost` (ngram, suffix): no accelerator pass, no bytes, no FLOPs; a host time per request per step.
"""

from __future__ import annotations

from specsim.cost.roofline import CostModel, PassCost
from specsim.methods.heads import HeadProfile
from specsim.methods.heads import layer_profile as heads_layer_profile
from specsim.profiles.schema import HardwareProfile, ModelProfile, StackProfile


def layer_profile(head: HeadProfile) -> ModelProfile:
    """The head's decoder layer(s) and LM head as a model profile (`heads.layer_profile`, checked at load)."""
    return heads_layer_profile(head)


def extra_params(head: HeadProfile) -> int:
    """Weights a plain Llama layer lacks: the projection (fc_input_multiple·d × d) and, for EAGLE-3, the q/k/v
    input widened from d to 2·d (its first layer reads cat(embedding, hidden))."""
    d = head.d_model
    qkv_out = (head.n_heads + 2 * head.n_kv_heads) * head.head_dim
    return head.fc_input_multiple * d * d + (head.attention_input_multiple - 1) * d * qkv_out


class LayerHeadCost(CostModel):
    """EAGLE / EAGLE-3 / MTP: one proposal = the head's layer(s) + projection + LM head, at the head's own KV."""

    def __init__(self, head: HeadProfile, hardware: HardwareProfile, stack: StackProfile | None = None,
                 tp: int = 1):
        stand_in = layer_profile(head)
        super().__init__(stand_in, hardware, stack, tp=tp)
        self.head = head
        # EAGLE-3's fc fuses the target's three layers' states once per step: vLLM's EagleProposer.propose applies
        # combine_hidden_states to the target's hidden states before its loop, and every later pass feeds the
        # head's own d-wide state (vllm/v1/spec_decode/eagle.py; llama_eagle3.py). EAGLE-1 and MTP project
        # cat(embedding, feature) on every pass (EAGLE cnets.py; DeepSeek-V3 §2.2).
        fc = head.fc_input_multiple * head.d_model * head.d_model
        self.step_once_params = fc if head.method == "eagle3" else 0
        self.extra_params = extra_params(head) - self.step_once_params
        lm = 0 if head.shares_lm_head else head.lm_head_vocab * head.d_model
        own = stand_in.n_layers * stand_in.decoder_layer_params + extra_params(head) + lm
        self.own_weight_bytes = own * head.bytes_per_param  # all chips together, as ModelProfile.weight_bytes

    def step_once_cost(self, batch: int) -> tuple[float, float, float]:
        """(time, bytes, FLOPs) a step pays once whatever its passes: EAGLE-3's fc over the batch's target states,
        on the roofline without a call of its own (it runs inside the step's first pass)."""
        if not self.step_once_params:
            return 0.0, 0.0, 0.0
        b = self.step_once_params * self.head.bytes_per_param / self.tp
        f = 2.0 * self.step_once_params * batch / self.tp
        t_mem = b / (self._bw if batch < self.stack.multi_row_min_rows else self._bw_multi)
        t_cmp = f / self._peak
        return (max(t_mem, t_cmp) if self.stack.overlap == "max" else t_mem + t_cmp), b, f

    def pass_bytes(self, batch: int, positions: int, context: int, cross_context: int | None = None) -> float:
        return super().pass_bytes(batch, positions, context, cross_context) + \
            self.extra_params * self.head.bytes_per_param / self.tp

    def pass_flops(self, batch: int, positions: int, context: int, cross_context: int | None = None) -> float:
        return super().pass_flops(batch, positions, context, cross_context) + \
            2.0 * self.extra_params * batch * positions / self.tp

    def memory_bytes(self, batch: int, context: int) -> float:
        return self.own_weight_bytes / self.tp + batch * self.kv_context(context) * self.kv_bytes_per_token_per_chip


def _medusa_stand_in(head: HeadProfile) -> ModelProfile:
    """A profile only for the roofline's TP checks, overheads and all-reduces (one layer's worth)."""
    d = head.d_model
    n = d // 128 if d % 128 == 0 else 1  # our choice: 128-wide pseudo-heads so common TP degrees divide
    return ModelProfile(name=head.name, description="medusa heads (stand-in)", n_layers=1, d_model=d, d_ff=d,
                        n_heads=n, n_kv_heads=n, head_dim=d // n, vocab_size=head.lm_head_vocab,
                        tied_embeddings=True, dtype=head.dtype)


class MedusaCost(CostModel):
    """Medusa: all K heads in one pass per step (residual block d×d + bias, LM head d×V each; one shared LM head
    matrix when `shares_lm_head`), read once whatever γ ≤ K is used; no KV."""

    def __init__(self, head: HeadProfile, hardware: HardwareProfile, stack: StackProfile | None = None,
                 tp: int = 1):
        super().__init__(_medusa_stand_in(head), hardware, stack, tp=tp)
        self.head = head
        d, V, K = head.d_model, head.lm_head_vocab, head.medusa_heads
        self.read_params = K * (d * d + d) + (1 if head.shares_lm_head else K) * d * V
        self.matmul_params = K * (d * d + d * V)  # every head's hidden goes through an LM head
        self.own_weight_bytes = self.read_params * head.bytes_per_param
        self.kv_bytes_per_token_per_chip = 0.0

    def pass_bytes(self, batch: int, positions: int, context: int, cross_context: int | None = None) -> float:
        return self.read_params * self.head.bytes_per_param / self.tp

    def pass_flops(self, batch: int, positions: int, context: int, cross_context: int | None = None) -> float:
        return 2.0 * self.matmul_params * batch * positions / self.tp

    def prefill_cost(self, batch: int, prompt_len: int) -> PassCost:
        """The heads read only the prompt's last hidden state: one pass at one position."""
        return self.pass_cost(batch, 1, 0)

    def memory_bytes(self, batch: int, context: int) -> float:
        return self.own_weight_bytes / self.tp


class HostCost:
    """ngram / suffix: a host lookup per request per step; zero accelerator time, bytes and FLOPs."""

    host_only = True
    kv_budget_tokens = None
    cross_context = 0
    own_weight_bytes = 0.0
    kv_bytes_per_token_per_chip = 0.0

    def __init__(self, head: HeadProfile, hardware: HardwareProfile, stack: StackProfile | None = None,
                 tp: int = 1):
        self.head, self.hardware, self.stack, self.tp = head, hardware, stack, tp
        self.model = head  # name and architecture, for messages
        self.host_s_per_request = head.host_s_per_request

    def pass_cost(self, batch: int = 1, positions: int = 1, context: int = 0,
                  cross_context: int | None = None) -> PassCost:
        t = batch * self.host_s_per_request
        return PassCost(positions=positions, batch=batch, context=context, time_s=t, bytes=0.0, flops=0.0,
                        bound="memory", memory_time_s=0.0, compute_time_s=0.0, overhead_time_s=t, comm_time_s=0.0)

    def pass_time_s(self, batch: int = 1, positions: int = 1, context: int = 0,
                    cross_context: int | None = None) -> float:
        return self.pass_cost(batch, positions, context, cross_context).time_s

    def prefill_cost(self, batch: int, prompt_len: int) -> PassCost:
        """Indexing the prompt on the host is left out (our choice: it overlaps the target's prefill)."""
        return PassCost(positions=prompt_len, batch=batch, context=0, time_s=0.0, bytes=0.0, flops=0.0,
                        bound="memory", memory_time_s=0.0, compute_time_s=0.0, overhead_time_s=0.0, comm_time_s=0.0)

    def memory_bytes(self, batch: int, context: int) -> float:
        return 0.0
