"""`medusa`: K extra decoding heads on the target's last hidden state propose K tokens in one pass
(Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding Heads", §2.1.1;
vLLM's `medusa` method, vllm/model_executor/models/medusa.py: every head's residual block and LM head each step).

One pass per step whatever γ ≤ K (`pricing.MedusaCost`); vLLM verifies the first γ proposals as a chain (no tree),
so verification carries γ + 1 positions. Acceptance of head k is read as the chain's α (Medusa's own heads accept
less at deeper positions: give a β trace for that). Closed form: eq. (5) at c_eff = T_pass / (γ·T_target).
"""

from __future__ import annotations

from specsim.errors import ConfigError
from specsim.methods.base import Method
from specsim.methods.pricing import MedusaCost


class Medusa(Method):
    name = "medusa"
    one_pass = True

    def cost_model(self, head, hardware, stack, tp: int):
        return MedusaCost(head, hardware, stack, tp)

    def check(self, gamma: int, head) -> None:
        if gamma > head.medusa_heads:
            raise ConfigError(f"{head.name} has {head.medusa_heads} heads: it proposes at most that many tokens",
                              field="--speculative-config", value=f"num_speculative_tokens {gamma}",
                              allowed=f"1..{head.medusa_heads}")
