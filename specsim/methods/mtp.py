"""`mtp`: multi-token-prediction modules as DeepSeek-V3 trains them (DeepSeek-AI 2024, arXiv 2412.19437, §2.2).

Module k: one Transformer block on M_k [RMSNorm(h); RMSNorm(Emb(t))] (M_k: 2·d -> d), then the output head —
embedding and output head shared with the target, so the head's weights are one layer + M_k, but every pass still
reads the full (shared) LM head. vLLM drives MTP like EAGLE (vllm/v1/spec_decode/eagle.py; one module reused for
all num_speculative_tokens proposals): a chain of γ passes (`pricing.LayerHeadCost`).
"""

from __future__ import annotations

from specsim.methods.base import Method
from specsim.methods.pricing import LayerHeadCost


class Mtp(Method):
    name = "mtp"

    def cost_model(self, head, hardware, stack, tp: int):
        return LayerHeadCost(head, hardware, stack, tp)
