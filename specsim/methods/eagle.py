"""`eagle` and `eagle3`: a one-layer head on the target's hidden states proposes γ tokens in γ passes.

EAGLE (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty"): fc(cat(embedding,
feature)) 2·d -> d, one decoder layer, the target's LM head. EAGLE-3 (Li et al. 2025, arXiv 2503.01840): fc fuses
three target layers' states (3·d -> d), the layer's q/k/v read cat(embedding, hidden) (2·d), and an own LM head
over a reduced draft vocabulary (32k for Llama 3). vLLM runs both as a chain (vllm/v1/spec_decode/eagle.py:
`EagleProposer.propose` loops num_speculative_tokens passes of the head, each reading the head's own KV).
Priced per proposal as layer (+ EAGLE-1's projection) + LM head (`pricing.LayerHeadCost`); EAGLE-3's fc runs once
per step, on the target's states only (vLLM's combine_hidden_states before the proposer's loop), so a step pays
it once (`LayerHeadCost.step_once_cost`, added by `StepCosts`).
"""

from __future__ import annotations

from specsim.methods.base import Method
from specsim.methods.pricing import LayerHeadCost


class Eagle(Method):
    name = "eagle"

    def cost_model(self, head, hardware, stack, tp: int):
        return LayerHeadCost(head, hardware, stack, tp)


class Eagle3(Eagle):
    name = "eagle3"
