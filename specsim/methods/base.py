"""What a speculation method is to the simulator: what one step's proposals cost, and how it is verified and read.

A method is a strategy object named as vLLM names it (`SpeculativeConfig.method`: draft_model, eagle, eagle3, mtp,
medusa, ngram, suffix). The engines never ask which method runs: they see `StepCosts` (built with the method),
whose draft side is the method's cost model and its pass count per step:
- `passes(γ)`: accelerator (or host) passes one step runs to propose γ tokens — γ for chain proposers (a draft
  model, an EAGLE / MTP head: one pass per token, each on the previous one's output), 1 for Medusa (all heads at
  once) and for the n-gram / suffix lookups;
- `verify_positions(γ)`: positions per sequence the target's verification pass carries — γ + 1 for every method
  here (vLLM V1 verifies a chain of γ drafts plus the bonus position; tree attention is not modelled);
- `acceptance`: how α (or a β trace) is read — the probability that draft position k is accepted given the ones
  before it were; for ngram / suffix it is the hit-and-accept rate (a lookup that finds no match proposes
  nothing useful and counts as a rejection at its first position);
- the closed form: eq. (1) / (5) at the method's effective c — a chain method's c is one pass / one target pass;
  a one-pass method's c_eff is its one step's pass / γ per token (`c_divisor`), so eq. (5) reads
  E[tokens] / (1 + T_pass / T_target).
"""

from __future__ import annotations

from specsim.errors import ConfigError


class Method:
    """The protocol every method follows (subclasses set the attributes and override what they change)."""

    name = "method"
    model_kind = "head"  # what the config's `draft` (vLLM's `model`) names: "model" (a model profile) or "head"
    one_pass = False  # one pass per step whatever γ (Medusa, n-gram, suffix)
    # new input slots per request in the proposer's first pass beyond the step's scheduled tokens (vLLM 0.32
    # v1/spec_decode/llm_base_proposer.py: net_num_new_slots_per_request = 1 - 1 when the proposer reads the
    # target's hidden states, EAGLE / MTP, whose inputs shift by one; n-gram and suffix run no model pass)
    draft_input_slots = 0
    acceptance = "α = P(draft position k accepted | the ones before accepted), i.i.d. or from a β trace"

    def passes(self, gamma: int) -> int:
        """Draft passes one step of γ proposals runs (see the module doc)."""
        if gamma <= 0:
            return 0
        return 1 if self.one_pass else int(gamma)

    def verify_positions(self, gamma: int) -> int:
        return int(gamma) + 1

    def c_divisor(self, gamma: int) -> int:
        """c_eff = c of one pass / this: γ for one-pass methods (the pass serves γ tokens), else 1."""
        return max(1, int(gamma)) if self.one_pass else 1

    def cost_model(self, head, hardware, stack, tp: int):  # pragma: no cover - each head method overrides it
        """The cost model of one proposal pass (`specsim.methods.pricing`)."""
        raise NotImplementedError

    def check(self, gamma: int, head) -> None:
        """Refuse a γ the proposer cannot serve (one line)."""

    def summary(self, draft_cost) -> dict:
        """Keys the run's summary carries for this method."""
        return {"method": self.name, "method_host_s_per_request": float(getattr(draft_cost, "host_s_per_request",
                                                                                 0.0))}

    def wrong_head(self, head) -> ConfigError:
        return ConfigError(f"head profile {head.name!r} serves method {head.method}", field="--speculative-config",
                           value=f"method {self.name}", allowed=f"method {head.method}, or a {self.name} head")
