"""Long-context, KV-bound regimes (issue 16 item 3) and the draft's KV budget (`draft_kv_budget_tokens`).

At long context the KV reads of a large batch outweigh the weights, so the verification pass that was
compute-bound at short context is memory-bound again and its extra positions are nearly free: speculation pays
again at a batch where it lost at short context. Lengths and batches are the issue's; nothing is tuned."""

from __future__ import annotations

import pytest
from conftest import cli_capsys

from specsim.cost.roofline import CostModel
from specsim.setup.deployment import Deployment
from specsim.simulate import make_config, run

PAIR = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, gamma=4)


def _costs(**kw):
    return Deployment.resolve("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", **kw).cost_models


@pytest.mark.parametrize("context", [32_768, 131_072])
def test_verification_is_memory_bound_again_at_long_context(context):
    target, _ = _costs()
    ridge = target.hardware.peak_flops(target.model.dtype) / target.hardware.bandwidth_bytes_s  # FLOPs per byte
    weights = target.model.step_params * target.model.bytes_per_param
    short, long = target.pass_cost(64, 5, 128), target.pass_cost(64, 5, context)  # batch 64, γ 4 verification
    assert short.flops / short.bytes > ridge and short.bound == "compute"
    assert long.flops / long.bytes < ridge and long.bound == "memory"
    assert long.bytes - weights > weights  # KV reads dominate the weights
    assert long.time_s == pytest.approx(long.memory_time_s + long.overhead_time_s + long.comm_time_s)


def _speedup(prompt_len, batch, **kw):
    cfg = {**PAIR, "batch": batch, "requests": batch, "prompt_len": prompt_len, "output_len": 256, **kw}
    return run(make_config(**cfg))["speedup"]


def test_70b_speculation_loses_at_short_context_and_pays_at_long():
    """Llama-3.1-70B on 4×H100 (tp 4), 1B draft, batch 256: verification compute-bound at prompt 128 (speculation
    loses), KV-bound at prompt 32k (it pays; admission holds ~14 of the 32k requests at a time)."""
    kw = dict(target="llama-3.1-70b", tp=4)
    assert _speedup(128, 256, **kw) < 1.0
    assert _speedup(32_768, 256, **kw) > 1.0


def test_8b_pays_at_long_context_only_with_a_draft_kv_budget():
    """8B + 1B on one H100 at batch 256: loses at prompt 128; at 32k the draft's own KV reads grow with the
    context too and it still loses; capping the draft's KV (256 tokens) makes it pay."""
    assert _speedup(128, 256) < 1.0
    assert _speedup(32_768, 256) < 1.0
    assert _speedup(32_768, 256, draft_kv_budget_tokens=256) > 1.0


def test_budget_lowers_draft_pass_time_at_long_context_only():
    _, full = _costs()
    _, capped = _costs(draft_kv_budget_tokens=4096)
    assert isinstance(capped, CostModel) and capped.kv_budget_tokens == 4096
    assert capped.pass_time_s(32, 1, 65_536) < full.pass_time_s(32, 1, 65_536)
    assert capped.pass_cost(32, 1, 65_536).bytes == full.pass_cost(32, 1, 4096).bytes
    for ctx in (0, 1000, 4096):
        assert capped.pass_cost(32, 1, ctx) == full.pass_cost(32, 1, ctx)
    assert capped.memory_bytes(8, 65_536) == full.memory_bytes(8, 4096)


def test_budget_above_every_context_changes_nothing():
    base = {**PAIR, "batch": 8, "requests": 16, "prompt_len": 128, "output_len": 128}
    assert run(make_config(**base)) == run(make_config(**base, draft_kv_budget_tokens=4096))


def test_budget_caps_draft_kv_in_admission():
    full, _ = Deployment.from_config(make_config(**PAIR)).memory(5)
    capped, _ = Deployment.from_config(make_config(**PAIR, draft_kv_budget_tokens=1024)).memory(5)
    import numpy as np
    p, o = np.array([32_768, 100]), np.array([256, 100])
    draft_per_token = full.kv_per_token - _costs()[0].kv_bytes_per_token_per_chip
    assert capped.request_bytes(p, o)[1] == full.request_bytes(p, o)[1]
    assert capped.request_bytes(p, o)[0] == pytest.approx(
        full.request_bytes(p, o)[0] - (32_768 + 256 + 5 - 1024) * draft_per_token)


@pytest.mark.parametrize("extra, words", [
    (["--draft-kv-budget-tokens", "0"], ">= 1"),
    (["--draft-kv-budget-tokens", "20000000"], "<= 10000000"),
    (["--draft-kv-budget-tokens", "512", "--fixed-c", "0.3"], "--fixed-c"),
    (["--draft-kv-budget-tokens", "512", "--engine-profile", "vllm-v1"], "--engine-profile"),
    (["--draft-kv-budget-tokens", "512", "--engine-profile", "hf-assisted"], "--engine-profile"),
])
def test_bad_budget_is_one_line_exit_2(capsys, extra, words):
    code, out, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                                "--draft", "llama-3.2-1b", "--alpha", "0.8", "--requests", "2", *extra)
    assert code == 2 and out == "", (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--draft-kv-budget-tokens" in lines[0] and words in lines[0], err
