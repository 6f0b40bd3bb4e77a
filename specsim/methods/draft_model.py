"""`draft_model`: a separate, smaller model proposes γ tokens in γ passes (Leviathan et al. 2023; Chen et al. 2023;
vLLM's `SpeculativeConfig` method "draft_model"). The default: priced exactly as specsim always did — γ roofline
(or measured) passes of the draft's `CostModel` per step (`specsim.cost.steptime.StepCosts`)."""

from __future__ import annotations

from specsim.methods.base import Method


class DraftModel(Method):
    name = "draft_model"
    model_kind = "model"
    # vLLM 0.32's DraftModelProposer passes no hidden states (pass_hidden_states_to_model=False), so its first pass
    # does not shift the inputs: each request's sampled token takes one new slot after the scheduled tokens
    # (llm_base_proposer.py set_inputs_first_pass, extend_all_queries_by_N with N = 1): R (k + 1) + R tokens for R
    # requests verifying k drafts
    draft_input_slots = 1

    def cost_model(self, head, hardware, stack, tp: int):  # pragma: no cover - Deployment builds it
        raise NotImplementedError("a draft model's cost model is built by Deployment (roofline or measured)")
