"""The hf-assisted engine profile does what transformers' assisted generation does (batch 1): prefill fused into
round 1, the draft's cache rolled back by the refused candidates (1 position re-fed after a rejection, 2 after a
clean sweep: transformers 5.25), γ clipped at the end."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specsim.engine.acceptance import Acceptance
from specsim.engine.engine_profiles import hf_assisted as hf
from specsim.errors import ConfigError
from specsim.simulate import make_config, run


class _Rec:
    """A cost model that records the passes asked of it (1 ms per position)."""

    def __init__(self, name):
        self.name, self.calls = name, []

    def pass_cost(self, batch, positions, context):
        self.calls.append((positions, context))
        return SimpleNamespace(time_s=1e-3 * positions, bytes=0.0, flops=0.0)

    def prefill_cost(self, batch, prompt_len):  # a pass over the prompt at context 0
        return self.pass_cost(batch, prompt_len, 0)


def _rounds(alpha, P, out, G):
    t, d = _Rec("t"), _Rec("d")
    rounds = hf._request(0, P, out, G, hf._Passes(t), hf._Passes(d), Acceptance(alpha=alpha, seed=1))
    return rounds, t.calls, d.calls


def test_round_one_fuses_the_prefill_and_a_rejection_refeeds_one_position():
    rounds, t, d = _rounds(0.0, P=10, out=4, G=3)  # α = 0: every round accepts nothing and emits 1 token
    assert len(rounds) == 4 - 0  # 1 token per round
    assert t[0] == (13, 0)  # one target pass over the prompt and the 3 candidates
    assert d[:3] == [(10, 0), (1, 10), (1, 11)]  # the draft's generate over the prompt, then γ − 1 single passes
    assert t[1] == (3, 10)  # round 2 (11 tokens so far): γ clipped to min(3, 14 − 11 − 1) = 2, 3 positions verified
    # round 2's draft: the cache rolled back to 10, the target's token fed alone (1, 10), then (1, 11); 1 ms/position
    assert rounds[1][0] == pytest.approx(1e-3 * (1 + 1 + 3))


def test_a_clean_sweep_refeeds_two_positions():
    rounds, t, d = _rounds(1.0 - 1e-12, P=10, out=12, G=3)  # every draft accepted
    assert d[:3] == [(10, 0), (1, 10), (1, 11)]
    assert d[3] == (2, 12)  # round 2 (14 tokens so far): no crop, the last draft and the bonus token fed
    assert t[1] == (4, 13)
    assert rounds[1][0] == pytest.approx(1e-3 * (2 + 1 + 1 + 4))


def test_gamma_is_clipped_at_the_end():
    rounds, t, d = _rounds(1.0 - 1e-12, P=10, out=5, G=3)  # every draft accepted
    assert [r[3] for r in rounds] == [3, 0]  # round 1 emits 4 tokens; then γ = min(3, 15 − 14 − 1) = 0
    assert t[-1] == (1, 13)  # the last round is a plain one-position target pass
    assert sum(r[4] + 1 for r in rounds) == 5


def _cfg(**kw):
    base = dict(hardware="cpu-2core", target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", alpha=0.7, gamma=3,
                batch=1, requests=12, prompt_len=20, output_len=24, seed=2, engine_profile="hf-assisted")
    base.update(kw)
    return make_config(**base)


def test_every_request_gets_its_tokens_and_ttft_is_round_one():
    r = run(_cfg())
    assert r["engine"] == "hf-assisted"
    assert r["output_tokens"] == 12 * 24
    assert r["ttft_p50_s"] > r["baseline_ttft_p50_s"]  # round 1 = the prefill plus the draft's passes
    assert r["speedup"] > 1.0


def test_refuses_batches_and_adaptive_policies():
    with pytest.raises(ConfigError, match="batch 1"):
        run(_cfg(batch=2))
    with pytest.raises(ConfigError, match="policy"):
        run(_cfg(policy="heuristic"))


def test_iid_tokens_per_round_follow_eq1_away_from_the_end():
    from specsim import theory

    r = run(_cfg(requests=200, output_len=400, alpha=0.6))
    assert r["tokens_per_target_run"] == pytest.approx(float(theory.expected_tokens(0.6, 3)), rel=0.03)
    assert np.isfinite(r["speedup_eq5"])
