"""The measured-kernel stacks (--stack vllm / sglang / trtllm): passes priced from aiconfigurator-core's kernels.

The spec: a plain decode step's kernel part is aiconfigurator-core's own step latency (same model, system, engine,
TP); a verification of k + 1 tokens is never cheaper than a one-token step and grows with k, its attention inside
stated bounds; a pass's parts sum to the pass; the engine's own term is calibrated on the plain figure only;
hardware without measured kernels and unknown versions are refused in one line.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("aiconfigurator_core")

from aiconfigurator_core.sdk.engine import EngineHandle  # noqa: E402

from specsim.cost import kernels_db as kd  # noqa: E402
from specsim.cost import measured_stack as ms  # noqa: E402
from specsim.methods import measured_heads as mh  # noqa: E402
from specsim.errors import ConfigError  # noqa: E402
from specsim.setup.deployment import Deployment  # noqa: E402

SETUPS = [("llama-3.1-8b", 1, "meta-llama/Meta-Llama-3.1-8B", {}),
          ("llama-3.1-70b", 4, "meta-llama/Meta-Llama-3.1-70B", {}),
          ("qwen3-30b-a3b", 4, "Qwen/Qwen3-30B-A3B", {"moe_tp_size": 4})]
SYSTEMS = [("h100-sxm", "h100_sxm"), ("h200", "h200_sxm")]


def _target(hw: str, model: str, tp: int = 1, stack: str = "vllm"):
    return Deployment.resolve(hw, model, stack=stack, tp=tp).cost_models[0]


@pytest.mark.parametrize("hw,system", SYSTEMS)
@pytest.mark.parametrize("model,tp,path,kw", SETUPS)
def test_plain_decode_kernels_equal_aiconfigurators_own_step(hw, system, model, tp, path, kw):
    """Kernel part of a plain step = EngineHandle.decode_step_latency(B, isl=L, osl=1) (s = L + 1) within 1%."""
    cm = _target(hw, model, tp)
    own = EngineHandle.compile(path, system, "vllm", backend_version=cm.kernels.key[3], tp_size=tp, **kw)
    for batch in (1, 16, 64):
        for context in (255, 2047):
            ours = cm.kernel_s(batch, 1, context)
            theirs = own.decode_step_latency(batch, context, 1) * 1e-3
            assert ours == pytest.approx(theirs, rel=0.01), (batch, context)
    assert cm.parts(1, 1, 255)["moe" if "qwen" in model else "gemm"] > 0
    assert (cm.parts(1, 1, 255)["allreduce"] > 0) == (tp > 1)


@pytest.mark.parametrize("hw", ["h100-sxm", "h200"])
def test_verification_never_cheaper_and_grows_with_k(hw):
    cm = _target(hw, "llama-3.1-8b")
    for batch in (1, 8, 64):
        for context in (128, 2000):
            one = cm.pass_time_s(batch, 1, context)
            times = [cm.pass_time_s(batch, k + 1, context) for k in range(1, 9)]
            assert times[0] >= one
            assert all(b > a for a, b in zip(times, times[1:])), (batch, context, times)


def test_verification_attention_within_its_bounds():
    """k + 1 query rows over a cache of L: at least the one-token step's attention, at most aiconfigurator-core's
    own MTP rule (decode attention at batch B·(k + 1), the cache read k + 1 times)."""
    cm = _target("h100-sxm", "llama-3.1-8b")
    k = cm.kernels
    for batch in (1, 8, 32):
        for context in (64, 1024, 4096):
            for p in (2, 4, 8):
                att = cm.parts(batch, p, context)["attention"]
                lo = cm.parts(batch, 1, context)["attention"]
                hi = sum(e[1] for e in k.h.evaluate_generation_ops(k.attn_idx, batch_size=batch * p,
                                                                   s=context + p)) * 1e-3
                assert lo <= att <= hi + 1e-12, (batch, context, p)


def test_token_envelope_moves_no_pass_by_more_than_8_percent():
    """The running maximum over P (kernels_db.KernelPricer.rest) only smooths the GEMM tables' dips (at most 7.0%
    on H100 and H200 for the 8B and the 70B at TP 4, batch 1-128, P 1-16: H100, batch 16, P = 3)."""
    for hw in ("h100-sxm", "h200"):
        k = _target(hw, "llama-3.1-8b").kernels
        for batch in (1, 4, 16, 64):
            for p in range(1, 17):
                raw, env = sum(k.raw_rest(batch, p).values()), sum(k.rest(batch, p).values())
                assert raw <= env <= 1.08 * raw, (hw, batch, p)


def test_parts_sum_to_the_pass_and_engine_term_is_separate():
    d = Deployment.resolve("h100-sxm", "llama-3.1-8b", "eagle3-llama-3.1-8b", stack="vllm", method="eagle3")
    target, head = d.cost_models
    for cm in (target, head):
        for p in (1, 5):
            parts = cm.parts(4, p, 700)
            assert set(parts) == set(kd.PARTS) | {"engine"}
            assert sum(parts.values()) == pytest.approx(cm.pass_time_s(4, p, 700), rel=1e-12)
            assert parts["engine"] > 0
    # a one-layer head with a 32k LM head: its kernels are a small fraction of the 32-layer target's
    assert head.kernel_s(1, 1, 256) < 0.1 * target.kernel_s(1, 1, 256)
    assert head.step_once_cost(1)[0] > 0  # EAGLE-3's fc, once per step


def test_plain_term_is_calibrated_on_the_plain_figure_only():
    t = mh.engine_terms("vllm", "0.24.0")
    cm = _target("h100-sxm", "llama-3.1-8b")
    assert cm.pass_time_s(1, 1, ms.CAL_CONTEXT) == pytest.approx(ms.PLAIN["vllm"].tpot_s, rel=1e-9)
    assert 0 < t.step_s < ms.PLAIN["vllm"].tpot_s
    assert "plain TPOT" in t.sources["step_s"]
    for method in ("eagle", "eagle3"):
        assert "K = 4 row" in t.sources[f"draft_pass_s.{method}"]
    assert t.draft_term("mtp")[1].startswith("borrowed from eagle")
    # engines without a published plain figure say so: kernels only
    st = mh.measured_stack(None, "trtllm")
    assert st.step_s == 0 and "uncalibrated" in st.term_sources["step_s"]


def test_default_stack_stays_the_roofline_and_pins_resolve():
    d = Deployment.resolve("h100-sxm", "llama-3.1-8b")
    assert type(d.cost_models[0]).__name__ == "CostModel"
    assert Deployment.resolve("h100-sxm", "llama-3.1-8b", stack="vllm@0.24.0").stack.name == "vllm@0.24.0"
    assert Deployment.resolve("h200", "llama-3.1-8b", stack="sglang").stack.engine == "sglang"


def test_by_shape_model_prices_like_the_shipped_config():
    """A dense profile aiconfigurator-core does not ship is compiled from its shape; the 8B written by shape gives
    the shipped 8B's step."""
    by_shape = kd.config_dir(kd.llama_config(32, 4096, 14336, 32, 8, 128, 128256))
    a = kd.pricer(by_shape, "h100_sxm", "vllm", "0.24.0", 1, False)
    b = _target("h100-sxm", "llama-3.1-8b").kernels
    assert sum(a.parts(8, 1, 500).values()) == pytest.approx(sum(b.parts(8, 1, 500).values()), rel=1e-9)
    small = _target("h100-sxm", "llama-3.2-1b")
    assert small.kernel_s(1, 1, 256) < 0.5 * b.h.decode_step_latency(1, 256, 1) * 1e-3


@pytest.mark.parametrize("hw,stack,needle", [("h100-pcie", "vllm", "has no measured kernels"),
                                             ("h100-sxm", "vllm@9.9.9", "is not measured on h100_sxm"),
                                             ("a100-80gb", "vllm@0.24.0", "is not measured on a100_sxm")])
def test_refusals_are_one_line(hw, stack, needle):
    with pytest.raises(ConfigError) as e:
        _ = Deployment.resolve(hw, "llama-3.1-8b", stack=stack).cost_models
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cli_refusal_exits_2_with_one_line():
    r = subprocess.run([sys.executable, "-m", "specsim", "roofline", "--hardware", "h100-pcie", "--model",
                        "llama-3.1-8b", "--stack", "vllm"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "no measured kernels" in lines[0] and "Traceback" not in r.stderr


def test_unpriceable_model_refused():
    with pytest.raises(ConfigError) as e:
        _ = Deployment.resolve("h100-sxm", "t5-v1_1-small", stack="vllm").cost_models
    assert "Llama-like decoders" in str(e.value)


def test_roofline_cli_prints_parts_and_engine_term_apart():
    import json

    r = subprocess.run([sys.executable, "-m", "specsim", "roofline", "--hardware", "h200", "--model", "llama-3.1-70b",
                        "--stack", "vllm", "--tp", "4", "--batch", "8", "--positions", "1,5", "--context", "1000",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["mode"] == "measured-kernels" and "plain TPOT" in out["engine_term_source"]
    for p in out["passes"]:
        parts = p["parts_s"]
        assert set(parts) == set(kd.PARTS) | {"engine"} and parts["allreduce"] > 0
        assert sum(parts.values()) == pytest.approx(p["time_s"], rel=1e-12)
        assert p["kernel_time_s"] == pytest.approx(p["time_s"] - parts["engine"], rel=1e-12)
    r = subprocess.run([sys.executable, "-m", "specsim", "roofline", "--hardware", "h100-sxm", "--model",
                        "llama-3.1-8b", "--stack", "vllm"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "engine ms" in r.stdout and "attention ms" in r.stdout


def test_head_single_layer_is_one_target_layer_plus_its_own_gemms():
    """A draft head's single layer (a shape no table has as such) is the target's per-layer kernels once: the
    EAGLE-1 head (the 8B's layer shape, the 8B's LM head) costs the 8B's layers / 32 + its LM head, embedding and
    the fc GEMM (2d -> d) — within 1%."""
    d = Deployment.resolve("h100-sxm", "llama-3.1-8b", "eagle-llama-3.1-8b", stack="vllm", method="eagle")
    target, head = d.cost_models
    k = target.kernels
    for batch in (1, 16):
        ops = {e[0]: e[1] * 1e-3 for e in k.h.evaluate_generation_ops(k.all_idx, batch_size=batch, s=513)}
        once = ops["generation_logits_gemm"] + ops["generation_embedding"]
        per_layer = (sum(ops.values()) - once) / 32
        fc = head.kernels.gemm_s((("fc", 1.0, 4096, 8192),), batch)
        assert head.kernel_s(batch, 1, 512) == pytest.approx(per_layer + once + fc, rel=0.01), batch


@pytest.mark.parametrize("draft,method", [("llama-3.2-1b", "draft_model"), ("ngram", "ngram"),
                                          ("mtp-llama-3.1-8b", "mtp")])
def test_every_proposer_runs_on_the_measured_stack(draft, method):
    from specsim.config import SimConfig
    from specsim.simulate import run

    cfg = SimConfig.from_flat({"hardware": "h200", "target": "llama-3.1-8b", "draft": draft, "method": method,
                               "stack": "vllm", "alpha": 0.7, "gamma": 3, "batch": 4, "requests": 8,
                               "prompt_len": 64, "output_len": 32})
    row = run(cfg)
    assert 1.0 < row["speedup"] < 3.0
    assert row["baseline_tpot_mean_s"] > mh.engine_terms("vllm", "0.24.0").step_s


def test_moe_verification_wakes_more_experts():
    """An MoE target's verification of k + 1 tokens reads the experts those tokens route to: the MoE tables at
    B·(k + 1) tokens grow as the roofline's woken-expert count does (Qwen3-30B-A3B, batch 1: 8 tokens wake ~4x
    the expert bytes of one; measured MoE time 3.2x)."""
    cm = _target("h100-sxm", "qwen3-30b-a3b")
    one, eight = cm.parts(1, 1, 512)["moe"], cm.parts(1, 8, 512)["moe"]
    assert 2.0 * one < eight < cm.roof.pass_bytes(1, 8, 512) / cm.roof.pass_bytes(1, 1, 512) * one


def test_vllm_v1_ragged_steps_price_from_the_kernels():
    """Under --engine-profile vllm-v1 a step of B decodes costs the measured one-token pass (KV bucket 16 apart);
    a prefill chunk adds the context-attention table's time; the engine term is paid once per step."""
    import numpy as np

    cm = _target("h100-sxm", "llama-3.1-8b")
    rp = cm.ragged_pricer()
    for batch, ctx in ((1, 256), (16, 1024), (64, 2000)):
        t, b, f = rp.price(np.ones(batch, np.int64), np.full(batch, ctx, np.int64))
        assert t == pytest.approx(cm.pass_time_s(batch, 1, ctx), rel=0.005)
        assert b == pytest.approx(cm.pass_cost(batch, 1, ctx).bytes, rel=1e-9)
    plain, _, _ = rp.price(np.ones(8, np.int64), np.full(8, 500, np.int64))
    mixed, _, _ = rp.price(np.array([1] * 8 + [512]), np.array([500] * 8 + [0]))
    assert mixed > plain + cm.kernels.chunk_attention_s(512, 0)
    assert mixed < plain + cm.prefill_cost(1, 512).time_s  # one step: the engine term once, not twice


def test_simulate_under_vllm_v1_on_the_measured_stack():
    from specsim.config import SimConfig
    from specsim.simulate import run

    cfg = SimConfig.from_flat({"hardware": "h100-sxm", "target": "llama-3.1-8b", "draft": "llama-3.2-1b",
                               "stack": "vllm", "engine_profile": "vllm-v1", "alpha": 0.7, "gamma": 3,
                               "requests": 16, "rate": 4.0, "prompt_len": 128, "output_len": 64})
    row = run(cfg)
    assert row["engine_profile"] == "vllm-v1" and 1.0 < row["speedup"] < 3.0
    # the plain step on the measured stack is the kernels + the calibrated engine term (~7.1 ms at low load)
    assert 0.006 < row["baseline_tpot_mean_s"] < 0.009


def test_models_never_download(monkeypatch):
    """Every config comes from the package or the profile's shape: no network (Mixtral's config ships in
    aiconfigurator-core's model_configs/ but is not among its default ids, which made it try Hugging Face)."""
    import urllib.request

    def no_network(*a, **k):
        raise AssertionError("network access")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    cm = Deployment.resolve("h200", "mixtral-8x7b", stack="vllm", tp=2).cost_models[0]
    parts = cm.parts(8, 1, 512)
    assert parts["moe"] > parts["gemm"] > 0 and parts["allreduce"] > 0


def test_token_tree_prices_its_nodes_on_the_measured_stack():
    """A token tree's verification carries its nodes + 1 positions (the k + 1 rule: KV read once): a wider tree's
    step costs more than the chain of the same depth, and both still gain over plain decoding at batch 4."""
    from specsim.config import SimConfig
    from specsim.simulate import run

    base = {"hardware": "h100-sxm", "target": "llama-3.1-8b", "method": "eagle3", "stack": "vllm", "alpha": 0.7,
            "batch": 4, "requests": 8, "prompt_len": 64, "output_len": 32, "tree_topk_acceptance": [0.7, 0.85]}
    chain = run(SimConfig.from_flat({**base, "speculative_token_tree": "[[0], [0, 0], [0, 0, 0]]"}))
    tree = run(SimConfig.from_flat({**base, "speculative_token_tree": "[[0], [1], [0, 0], [1, 0], [0, 0, 0]]"}))
    assert tree["tree_nodes"] > chain["tree_nodes"]
    assert tree["tokens_per_target_run"] > chain["tokens_per_target_run"]
    # time per step = TPOT x tokens per step: the wider tree's verification carries more nodes
    step = {n: r["tpot_mean_s"] * r["tokens_per_target_run"] for n, r in (("chain", chain), ("tree", tree))}
    assert step["tree"] > step["chain"]
    assert 1.0 < chain["speedup"] and 1.0 < tree["speedup"]


def test_vllm_v1_ragged_steps_price_the_lm_head_at_logit_positions():
    """vLLM computes logits at each request's last scheduled token and at every position of a verification
    (logits_indices), none for a prefill chunk's other tokens: the LM head GEMM is priced over those positions,
    the rest of the non-attention ops over all the step's tokens (8B on H100: the head over 2048 tokens is ~6% of
    the step)."""
    import numpy as np

    cm = _target("h100-sxm", "llama-3.1-8b")
    rp, k = cm.ragged_pricer(), cm.kernels

    def head(x):
        return sum(e[1] for e in k.h.evaluate_generation_ops(k.logits_idx, batch_size=1, s=2, x=x)) * 1e-3

    chunk, _, _ = rp.price(np.array([2048]), np.array([0]))  # default: one logit per request
    every, _, _ = rp.price(np.array([2048]), np.array([0]), np.array([2048]))
    assert every - chunk == pytest.approx(head(2048) - head(1), rel=1e-9)
    assert every - chunk > 0.04 * every
    verify = rp.price(np.full(4, 4), np.full(4, 512), np.full(4, 4))[0]  # every verified position: the head at 16
    assert verify > rp.price(np.full(4, 4), np.full(4, 512))[0]
    for bad in (np.array([9]), np.array([0])):
        with pytest.raises(ConfigError, match="logits"):
            rp.price(np.array([8]), np.array([0]), bad)
