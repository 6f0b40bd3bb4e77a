"""`ngram` and `suffix`: proposals looked up in the context on the host — no weights, no accelerator pass.

ngram: prompt-lookup decoding (Saxena 2023; vLLM's `ngram` method, vllm/v1/spec_decode/ngram_proposer.py, the
longest suffix of the output that recurs earlier in the context, of prompt_lookup_min..prompt_lookup_max tokens).
suffix: SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975; vLLM's `suffix` method), a suffix tree over the
prompt, the output and earlier requests. One host lookup per request per step (`pricing.HostCost`, the host time
in the profile model_profiles/heads/{ngram,suffix}.toml); the step waits for it. α is the hit-and-accept rate: the
probability that position k is proposed *and* accepted given the ones before were (a miss is a rejection).
Closed form: eq. (5) at c_eff = host time / (γ·T_target).
"""

from __future__ import annotations

from specsim.methods.base import Method
from specsim.methods.pricing import HostCost


class Ngram(Method):
    name = "ngram"
    one_pass = True
    acceptance = ("α = hit-and-accept rate: P(position k is proposed and accepted | the ones before were), "
                  "i.i.d. or from a β trace")

    def cost_model(self, head, hardware, stack, tp: int):
        return HostCost(head, hardware, stack, tp)


class Suffix(Ngram):
    name = "suffix"
