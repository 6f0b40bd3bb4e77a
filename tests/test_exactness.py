"""Speculative decoding changes nothing about the output distribution (Leviathan et al., Thm 3.5 / App. A.1).

- temperature 0: the speculative output is the target's greedy output, token for token;
- temperature 1: over many seeded runs, the joint distribution of the first two tokens matches the target's,
  computed exactly from its probabilities (chi-square goodness of fit, p-value threshold 0.001; cells with an
  expected count below 5 are merged into one). The same test rejects deliberately broken rules, so it can fail;
- the accept/reject rule alone, batched over many trials, reproduces p under top-k / top-p, and lenience l < 1
  is visibly lossy.
Tiny random-init Llama pairs (vocab 32): the draft is the target plus weight noise, so 0 < β < 1.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from scipy import stats

from specsim.executor.sampling import SamplingConfig, adjust, overlap, speculative_accept
from specsim.executor.sources import BigramDraft, PromptLookupDraft
from specsim.executor.speculative import PlainDecoder, SpeculativeDecoder

P_THRESHOLD = 1e-3   # reject "same distribution" below this p-value
V = 32
T1 = SamplingConfig(temperature=1.0)
from tiny_models import tiny_pair as _tiny_pair  # noqa: E402  (tests/ is on sys.path)

GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):  # conftest's fixture, applied to every test here
    yield


def tiny_pair(seed: int, noise: float, scale: float = 16.0):
    return _tiny_pair(seed, noise, scale, vocab=V, max_positions=256)


def chi2_pvalue(observed: np.ndarray, probs: np.ndarray) -> float:
    """Goodness of fit of counts to exact probabilities; cells expected < 5 are pooled (with the next-smallest
    cells until the pool itself reaches 5)."""
    observed, probs = observed.ravel().astype(float), probs.ravel().astype(float)
    expected = probs / probs.sum() * observed.sum()
    order = np.argsort(expected)
    pool = np.zeros(len(expected), bool)
    acc = 0.0
    for i in order:
        if expected[i] >= 5 and acc >= 5:
            break
        pool[i] = True
        acc += expected[i]
    obs = np.append(observed[~pool], observed[pool].sum())
    exp = np.append(expected[~pool], expected[pool].sum())
    return float(stats.chisquare(obs, exp).pvalue)


def test_chi2_helper_detects_a_wrong_distribution():
    rng = np.random.default_rng(0)
    probs = np.array([0.5, 0.3, 0.15, 0.04, 0.01])
    good = np.bincount(rng.choice(5, 2000, p=probs), minlength=5)
    bad = np.bincount(rng.choice(5, 2000, p=[0.40, 0.40, 0.15, 0.04, 0.01]), minlength=5)
    assert chi2_pvalue(good, probs) > P_THRESHOLD > chi2_pvalue(bad, probs)


# --- temperature 0: token for token ---------------------------------------------------------------------------

@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_speculative_equals_greedy_target(gamma):
    accepted, drafted = 0, 0
    for seed in (0, 1):
        target, draft = tiny_pair(seed, noise=0.2)
        for prompt in ([1, 2, 3], [7], [30, 4, 4, 9, 12]):
            ref = PlainDecoder(target, GREEDY).generate(prompt, 24).tokens
            res = SpeculativeDecoder(target, draft, gamma, GREEDY).generate(prompt, 24, seed=seed)
            assert res.tokens == ref
            accepted += sum(res.accepted)
            drafted += sum(res.gammas)
    assert 0 < accepted < drafted  # both accepts and rejections were exercised


def test_greedy_with_ngram_drafts_equals_greedy_target():
    target, _ = tiny_pair(0, noise=0.2)
    prompt = [5, 6, 7, 8, 5, 6, 7]
    ref = PlainDecoder(target, GREEDY).generate(prompt, 30).tokens
    for draft in (BigramDraft([prompt, ref], V), PromptLookupDraft(V, max_n=2)):
        res = SpeculativeDecoder(target, draft, 4, GREEDY).generate(prompt, 30)
        assert res.tokens == ref and sum(res.accepted) > 0


# --- temperature 1: distribution of the first two tokens ------------------------------------------------------

PROMPT = [5]


@pytest.fixture(scope="module")
def sampled_pair():
    target, draft = tiny_pair(0, noise=0.5)
    with torch.inference_mode():
        ctx = torch.tensor([PROMPT + [x] for x in range(V)])
        logits = target.model(ctx).logits.double()
        p1 = adjust(logits[0, -2], T1).double()                  # p(x1 | prompt)
        p2 = adjust(logits[:, -1], T1).double()                  # p(x2 | prompt, x1), one row per x1
        q1 = adjust(draft.model(ctx[:1, :1]).logits[0, -1], T1).double()
    joint = (p1[:, None] * p2).numpy()
    beta1 = overlap(p1, q1).item()
    assert 0.3 < beta1 < 0.9, beta1                              # a draft that is neither useless nor perfect
    return target, draft, joint


def _first_two(target, draft, runs: int, gamma: int, broken: str | None = None) -> np.ndarray:
    dec = SpeculativeDecoder(target, draft, gamma, T1, broken=broken, clip_gamma=False, timing=False)
    counts = Counter(tuple(dec.generate(PROMPT, 2, seed=s).tokens) for s in range(runs))
    out = np.zeros((V, V))
    for (a, b), c in counts.items():
        out[a, b] = c
    return out


def test_speculative_sampling_matches_the_target_joint_distribution(sampled_pair):
    target, draft, joint = sampled_pair
    pval = chi2_pvalue(_first_two(target, draft, 2000, gamma=3), joint)
    print(f"exact rule: chi-square p-value {pval:.4g}")
    assert pval > P_THRESHOLD


@pytest.mark.parametrize("broken", ["no_residual", "resample_p"])
def test_the_same_test_rejects_a_broken_rule(sampled_pair, broken):
    target, draft, joint = sampled_pair
    pval = chi2_pvalue(_first_two(target, draft, 600, gamma=2, broken=broken), joint)
    print(f"broken={broken}: chi-square p-value {pval:.4g}")
    assert pval < P_THRESHOLD


# --- the rule alone, batched --------------------------------------------------------------------------------

def _rule_output(p_logits, q_logits, cfg, trials, gamma=1, lenience=1.0, broken=None, seed=0):
    """Push `trials` independent single-position proposals through speculative_accept in one call."""
    gen = torch.Generator().manual_seed(seed)
    p = adjust(p_logits, cfg).expand(trials, gamma + 1, -1)
    q = adjust(q_logits, cfg).expand(trials, gamma, -1)
    drafts = torch.multinomial(q.reshape(-1, q.shape[-1]), 1, generator=gen).view(trials, gamma)
    n, tok = speculative_accept(p, q, drafts, gen, lenience=lenience, broken=broken)
    first = torch.where(n > 0, drafts[:, 0], tok)
    return first.numpy(), n.numpy()


@pytest.mark.parametrize("cfg", [SamplingConfig(1.0), SamplingConfig(0.7, top_k=5), SamplingConfig(1.3, top_p=0.8)])
def test_rule_reproduces_p_under_sampling_adjustments(cfg):
    g = torch.Generator().manual_seed(1)
    p_logits, q_logits = 2 * torch.randn(V, generator=g), 2 * torch.randn(V, generator=g)
    first, n = _rule_output(p_logits, q_logits, cfg, 100_000)
    p = adjust(p_logits, cfg).double().numpy()
    pval = chi2_pvalue(np.bincount(first, minlength=V), p)
    print(f"rule alone, {cfg}: p-value {pval:.4g}")
    assert pval > P_THRESHOLD, pval
    beta = overlap(adjust(p_logits, cfg), adjust(q_logits, cfg)).item()
    assert (n > 0).mean() == pytest.approx(beta, abs=0.01)       # acceptance rate = β
    for broken in ("no_residual", "resample_p"):
        bad, _ = _rule_output(p_logits, q_logits, cfg, 100_000, broken=broken)
        bad_pval = chi2_pvalue(np.bincount(bad, minlength=V), p)
        print(f"rule alone, broken={broken}: p-value {bad_pval:.4g}")
        assert bad_pval < P_THRESHOLD


def test_lenience_accepts_more_and_is_lossy():
    g = torch.Generator().manual_seed(2)
    p_logits, q_logits = 2 * torch.randn(V, generator=g), 2 * torch.randn(V, generator=g)
    _, exact_n = _rule_output(p_logits, q_logits, T1, 100_000)
    first, n = _rule_output(p_logits, q_logits, T1, 100_000, lenience=0.3)
    pp, qq = adjust(p_logits, T1), adjust(q_logits, T1)
    assert (n > 0).mean() == pytest.approx(overlap(pp, qq, 0.3).item(), abs=0.01)
    assert (n > 0).mean() > (exact_n > 0).mean() + 0.05
    assert chi2_pvalue(np.bincount(first, minlength=V), pp.double().numpy()) < P_THRESHOLD
    # App. A.5's bound: no token comes out more than 1/l times as often as under p
    freq = np.bincount(first, minlength=V) / len(first)
    assert (freq <= pp.numpy() / 0.3 + 0.01).all()
