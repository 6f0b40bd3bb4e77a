"""The executor: runs speculative decoding with PyTorch, measures pass times, records β traces.

Importing this package stays cheap and torch-free (so `specsim.executor.fetch` and the CLI load without torch);
the names below are resolved on first use. The simulator core never imports anything from here.

    from specsim.executor import load_source, SpeculativeDecoder, SamplingConfig
    target = load_source("profile:llama-3.1-8b:layers=4")
    draft = load_source("bigram", vocab_size=target.vocab_size, corpus=prompts)
    SpeculativeDecoder(target, draft, gamma=4, sampling=SamplingConfig(temperature=0)).generate(prompt, 64)
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "SamplingConfig": "sampling", "adjust": "sampling", "overlap": "sampling", "residual": "sampling",
    "speculative_accept": "sampling",
    "Source": "sources", "HFSource": "sources", "BigramDraft": "sources", "PromptLookupDraft": "sources",
    "load_source": "sources", "random_source": "sources", "hf_source": "sources",
    "SpeculativeDecoder": "speculative", "PlainDecoder": "speculative", "DecodeResult": "speculative",
    "StepRecord": "speculative",
    "record_trace": "record", "record_sequence": "record", "replay_accepts": "record", "load_prompts": "record",
    "pass_times": "measure", "sampling_overhead": "measure", "end_to_end": "measure", "hf_assisted": "measure",
    "compare_with_hf": "measure",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"specsim.executor.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'specsim.executor' has no attribute {name!r}")
