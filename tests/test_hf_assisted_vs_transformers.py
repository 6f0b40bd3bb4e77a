"""The hf-assisted profile's passes are the passes transformers' own assisted generation makes (installed version,
tiny random models, forward hooks recording positions and cached context of every call)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specsim.engine.acceptance import Acceptance  # noqa: E402
from specsim.engine.engine_profiles import hf_assisted as hf  # noqa: E402


def _tiny(vocab=64):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg).eval()


def _record(model, calls):
    def hook(mod, args, kwargs):
        ids = kwargs.get("input_ids")
        pkv = kwargs.get("past_key_values", kwargs.get("cache"))  # transformers 5 names it cache
        past = 0 if pkv is None else int(pkv.get_seq_length())
        calls.append((int(ids.shape[1]), past))
    return model.register_forward_pre_hook(hook, with_kwargs=True)


class _Rec:
    def __init__(self):
        self.calls = []

    def pass_cost(self, batch, positions, context):
        self.calls.append((positions, context))
        from types import SimpleNamespace
        return SimpleNamespace(time_s=1.0, bytes=0.0, flops=0.0)

    def prefill_cost(self, batch, positions):
        """A prompt pass is a pass at context 0 (the profile prices it through the cost model's prefill_cost)."""
        return self.pass_cost(batch, positions, 0)


@pytest.mark.parametrize("P,out,G", [(7, 12, 3), (5, 9, 4)])
def test_passes_match_transformers_when_every_draft_is_accepted(P, out, G):
    target = _tiny()
    draft = copy.deepcopy(target)  # the same model: greedy drafts always match
    for m in (target, draft):
        m.generation_config.eos_token_id = None
        m.generation_config.pad_token_id = 0
    t_calls, d_calls = [], []
    h1, h2 = _record(target, t_calls), _record(draft, d_calls)
    ids = torch.randint(1, 64, (1, P))
    draft.generation_config.num_assistant_tokens = G
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0  # HF's default 0.4 stops drafting early
    with torch.no_grad():
        res = target.generate(ids, assistant_model=draft, max_new_tokens=out, do_sample=False)
    h1.remove()
    h2.remove()
    assert res.shape[1] == P + out
    t, d = _Rec(), _Rec()
    hf._request(0, P, out, G, hf._Passes(t), hf._Passes(d), Acceptance(alpha=1 - 1e-12, seed=0))
    # the profile caches repeated (positions, context) pairs; compare the distinct sequences in order
    assert _dedup(t_calls) == _dedup(t.calls)
    assert _dedup(d_calls) == _dedup(d.calls)


def _dedup(calls):
    seen, out = set(), []
    for c in calls:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


class _Scripted:
    """An acceptance source that accepts exactly the given counts, round after round."""

    constant = True

    def __init__(self, counts):
        self.counts = list(counts)

    def walk_start(self, i):
        return 0

    def generator(self, i):
        src = self

        class _G:
            def random(self, g):
                import numpy as np
                n = src.counts.pop(0)
                return np.array([0.0] * n + [0.9] * (g - n))
        return _G()

    def thresholds(self, g, bpos):
        import numpy as np
        return np.array([0.5] * g + [-1.0])


def test_passes_match_transformers_with_rejections():
    target = _tiny(vocab=8)
    with torch.no_grad():
        target.lm_head.weight.mul_(16.0)  # peaked distributions
    draft = copy.deepcopy(target)
    with torch.no_grad():  # a perturbed copy: agrees with the target only sometimes
        for p in draft.parameters():
            p.add_(0.3 * torch.randn_like(p) * p.abs().mean())
    for m in (target, draft):
        m.generation_config.eos_token_id = None
        m.generation_config.pad_token_id = 0
    draft.generation_config.num_assistant_tokens = 3
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    t_calls, d_calls = [], []
    h1, h2 = _record(target, t_calls), _record(draft, d_calls)
    P, out = 6, 20
    with torch.no_grad():
        target.generate(torch.randint(1, 8, (1, P)), assistant_model=draft, max_new_tokens=out, do_sample=False)
    h1.remove()
    h2.remove()
    cur = [c[1] + c[0] if i == 0 else c[1] + 1 for i, c in enumerate(t_calls)] + [P + out]  # tokens before each round
    cur[0] = P
    counts = [cur[r + 1] - cur[r] - 1 for r in range(len(t_calls))]  # drafts accepted in each round
    assert 0 in counts and any(c > 0 for c in counts)  # both outcomes occur, so the test can tell them apart
    t, d = _Rec(), _Rec()
    hf._request(0, P, out, 3, hf._Passes(t), hf._Passes(d), _Scripted(counts))
    assert _dedup(t_calls) == _dedup(t.calls)
    assert _dedup(d_calls) == _dedup(d.calls)
