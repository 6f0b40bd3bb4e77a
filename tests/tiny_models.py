"""Tiny random-init target/draft pairs for the executor tests (built in-process, no downloads)."""

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specsim.executor.sources import HFSource  # noqa: E402


def tiny_pair(seed: int = 0, noise: float = 0.2, scale: float = 16.0, vocab: int = 32, max_positions: int = 512):
    """Target: random Llama with a sharpened head (peaked distributions); draft: the same weights plus noise, so it
    agrees with the target sometimes (0 < β < 1)."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions)
    target = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(scale)
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p) * p.abs().mean())
    return HFSource(target, "tiny-target"), HFSource(draft, "tiny-draft")
