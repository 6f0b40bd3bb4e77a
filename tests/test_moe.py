"""Mixture-of-experts targets as a specification: a pass over N tokens reads the experts those tokens wake
(E·(1 − (1 − k/E)^N) per layer under uniform routing), FLOPs follow the active parameters, memory holds every
expert, a dense model is the E = k = 1 case, Hugging Face MoE configs import, and choose-draft says why a MoE
target's speedup falls below a dense one's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli_capsys

from specsim import profiles as prof
from specsim.cost.roofline import CostModel, check_tp
from specsim.errors import ConfigError
from specsim.profiles import ModelProfile
from specsim.simulate import make_config, run
from specsim.studies.choose import choose_draft
from specsim.cost.explain import explain, why_speculation_loses

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H100 = prof.hardware("h100-sxm")
MIXTRAL = prof.model("mixtral-8x7b")
DENSE = prof.model("mixtral-8x7b-dense-active")
EXPERT_BYTES = 3 * 4096 * 14336 * 2  # one SwiGLU expert of Mixtral (up, gate, down), bf16


def _distinct(E: int, k: int, n: int) -> float:
    return E * (1.0 - (1.0 - k / E) ** n)


# --- pass bytes, FLOPs, memory ------------------------------------------------------------------------------------

def test_pass_bytes_rise_with_positions_at_batch_1_as_the_formula_says():
    cm = CostModel(MIXTRAL, H100)
    kv = MIXTRAL.kv_bytes_per_token
    one = cm.pass_bytes(1, 1, 100)
    prev = one
    for p in range(2, 10):
        b = cm.pass_bytes(1, p, 100)
        woken = 32 * (_distinct(8, 2, p) - 2) * EXPERT_BYTES  # 32 MoE layers
        assert b - one == pytest.approx(woken + (p - 1) * kv, rel=1e-12)
        assert b > prev
        prev = b
    assert MIXTRAL.expected_distinct_experts(5) == pytest.approx(8 * (1 - 0.75 ** 5), rel=1e-15)  # 6.10 of 8
    assert cm.pass_bytes(1, 5, 100) / one == pytest.approx(2.81, abs=0.01)
    # a dense model of the same active size reads the same weights at any width
    dense = CostModel(DENSE, H100)
    assert dense.pass_bytes(1, 5, 100) - dense.pass_bytes(1, 1, 100) == pytest.approx(4 * kv)


def test_batch_times_positions_is_what_wakes_experts_and_prefill_reads_them_all():
    cm = CostModel(MIXTRAL, H100)
    kv = MIXTRAL.kv_bytes_per_token
    assert cm.pass_bytes(4, 1, 0) - 4 * kv == pytest.approx(cm.pass_bytes(1, 4, 0) - 4 * kv, rel=1e-12)
    all_weights = MIXTRAL.step_params * 2
    assert cm.prefill_cost(1, 512).bytes == pytest.approx(all_weights + 512 * kv, rel=1e-9)
    assert cm.pass_bytes(1, 1, 0) < 0.3 * all_weights


def test_flops_count_active_parameters_and_memory_holds_every_expert():
    cm, dense = CostModel(MIXTRAL, H100), CostModel(DENSE, H100)
    router = 32 * 4096 * 8
    assert MIXTRAL.matmul_params_per_token == DENSE.matmul_params_per_token + router
    assert cm.pass_flops(1, 1, 0) - dense.pass_flops(1, 1, 0) == pytest.approx(2 * router)
    assert cm.memory_bytes(1, 0) == MIXTRAL.total_params * 2
    assert MIXTRAL.total_params > 3.5 * MIXTRAL.active_params


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_experts_split_tp_ways_like_the_dense_ffn(tp):
    one, split = CostModel(MIXTRAL, H100), CostModel(MIXTRAL, H100, tp=tp)
    kv1, kvt = one.kv_bytes_per_token_per_chip, split.kv_bytes_per_token_per_chip
    for p in (1, 5):
        assert split.pass_bytes(1, p, 64) - (64 + p) * kvt == pytest.approx(
            (one.pass_bytes(1, p, 64) - (64 + p) * kv1) / tp, rel=1e-12)
    assert split.memory_bytes(1, 0) == pytest.approx(MIXTRAL.weight_bytes / tp)


def test_tp_must_divide_each_experts_width():
    odd = prof.model("qwen3-30b-a3b").model_copy(update={"expert_d_ff": 770})
    with pytest.raises(ConfigError, match="expert_d_ff = 770"):
        check_tp(odd, H100, 4)
    assert check_tp(odd, H100, 2) == 2


# --- a dense model is the E = k = 1 case ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-coder-0.5b", "mixtral-8x7b-dense-active"])
def test_a_dense_model_is_the_one_expert_case(name):
    dense = prof.model(name)
    moe = dense.model_copy(update={"n_experts": 1, "experts_per_token": 1})
    moe = ModelProfile.model_validate(moe.model_dump())  # through the validators
    assert moe.is_moe and not dense.is_moe
    for attr in ("total_params", "active_params", "step_params", "matmul_params_per_token", "weight_bytes",
                 "kv_bytes_per_token"):
        assert getattr(moe, attr) == getattr(dense, attr), attr
    cd, cm = CostModel(dense, H100, tp=2), CostModel(moe, H100, tp=2)
    for b, p, ctx in [(1, 1, 0), (1, 5, 300), (32, 9, 1000), (256, 1, 4096)]:
        assert cm.pass_cost(b, p, ctx) == cd.pass_cost(b, p, ctx)
    assert cm.prefill_cost(4, 512) == cd.prefill_cost(4, 512)
    assert cm.memory_bytes(8, 2048) == cd.memory_bytes(8, 2048)


def test_all_experts_per_token_means_every_expert_every_pass():
    full = MIXTRAL.model_copy(update={"experts_per_token": 8})
    assert full.expected_distinct_experts(1) == 8 and full.pass_params(1) == full.step_params


# --- routing skew -----------------------------------------------------------------------------------------------

def test_a_measured_routing_skew_wakes_fewer_experts_than_uniform():
    uniform = MIXTRAL.model_copy(update={"expert_load": [3.0] * 8})
    assert uniform.expected_distinct_experts(5) == pytest.approx(MIXTRAL.expected_distinct_experts(5), rel=1e-12)
    zipf = [1.0 / (i + 1) for i in range(8)]
    skewed = ModelProfile.model_validate(dict(MIXTRAL.model_dump(), expert_load=zipf))
    for n in (2, 5, 16):
        assert skewed.expected_distinct_experts(n) < MIXTRAL.expected_distinct_experts(n)
    assert skewed.expected_distinct_experts(1) == pytest.approx(2.0)  # one token: still its k experts
    hot = MIXTRAL.model_copy(update={"expert_load": [100.0] + [1.0] * 7})  # chosen by every token, never twice
    assert hot.expected_distinct_experts(1) == pytest.approx(2.0)
    assert hot.expected_distinct_experts(3) == pytest.approx(1 + 7 * (1 - (1 - 1 / 7) ** 3))


# --- bad fields: one line, exit 2 ------------------------------------------------------------------------------

@pytest.mark.parametrize("old, new, needles", [
    ("experts_per_token = 2 ", "experts_per_token = 9 ", ["experts_per_token", "more experts per token", "(got 9)"]),
    ("experts_per_token = 2 ", "# experts_per_token = 2 ", ["experts_per_token", "n_experts needs experts_per_token"]),
    ("n_experts = 8 ", "n_experts = 8\nn_dense_layers = 32 ", ["n_dense_layers", "no MoE layer left"]),
    ("n_experts = 8 ", "n_experts = 8\nexpert_load = [1.0, 2.0, 3.0] ", ["expert_load", "3 loads for 8 experts"]),
    ("n_experts = 8 ", "n_experts = 8\nexpert_load = [1.0, -2.0, 3.0, 1, 1, 1, 1, 1] ", ["expert_load", "> 0"]),
    ("n_experts = 8 ", "n_experts = 0 ", ["n_experts", ">= 1"]),
    ("n_experts = 8 ", 'n_experts = "8" ', ["n_experts", "not an integer"]),
    ("published_active_params = 12.9e9 ", "published_active_params = 40e9 ",
     ["published_active_params", "off the published figure"]),
])
def test_bad_moe_fields_exit_2_with_one_line(tmp_path, capsys, old, new, needles):
    text = (prof.MODEL_DIR / "mixtral-8x7b.toml").read_text()
    assert old in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(old, new, 1))
    code, out, err = cli_capsys(capsys, "simulate", "--json", "--hardware", "h100-sxm", "--target", path, "--draft",
                                "llama-3.2-1b", "--alpha", "0.8", "--tp", "2", "--requests", "4")
    assert code == 2 and out == "", (code, out, err)
    line = err.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in err, err
    assert str(path) in line
    for n in needles:
        assert n in line, (n, line)


def test_moe_fields_on_a_dense_model_are_refused():
    with pytest.raises(ValueError, match="a MoE field on a dense model"):
        ModelProfile.model_validate(dict(prof.model("llama-3.1-8b").model_dump(), n_shared_experts=1))


# --- Hugging Face import ------------------------------------------------------------------------------------------

MOE_FIELDS = ("n_layers", "d_model", "d_ff", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "ffn",
              "tied_embeddings", "dtype", "n_experts", "experts_per_token", "n_shared_experts", "n_dense_layers")


@pytest.mark.parametrize("fixture, name", [("hf_mixtral_config.json", "mixtral-8x7b"),
                                           ("hf_qwen3_moe_config.json", "qwen3-30b-a3b")])
def test_hf_moe_config_gives_the_toml_profile(fixture, name):
    hf, toml = ModelProfile.from_hf_config(FIXTURES / fixture), prof.model(name)
    for f in MOE_FIELDS:
        assert getattr(hf, f) == getattr(toml, f), f
    assert (hf.expert_d_ff or hf.d_ff) == (toml.expert_d_ff or toml.d_ff)
    assert hf.total_params == toml.total_params and hf.active_params == toml.active_params
    assert hf.pass_params(5) == toml.pass_params(5)


def test_hf_deepseek_v3_imports_with_latent_attention():
    m = ModelProfile.from_hf_config(FIXTURES / "hf_deepseek_v3_config.json")
    assert (m.n_experts, m.experts_per_token, m.n_shared_experts, m.expert_d_ff) == (256, 8, 1, 2048)
    assert (m.n_dense_layers, m.d_ff, m.dtype) == (3, 18432, "fp8")  # first_k_dense_replace; fp8 weights
    assert (m.kv_lora_rank, m.q_lora_rank, m.head_dim, m.v_head_dim, m.n_kv_heads) == (512, 1536, 192, 128, 1)
    # DeepSeek-V3 report: 671B total, 37B activated per token (the multi-token-prediction module not counted)
    assert m.total_params == pytest.approx(671e9, rel=0.01)
    assert m.active_params == pytest.approx(37e9, rel=0.03)
    # the latent and rotary key, not 2·128 heads of 192, in bf16: fp8 weights, bf16 activations and KV (vLLM's
    # kv_cache_dtype "auto")
    assert m.kv_dtype == "bf16" and m.kv_bytes_per_token == 61 * (512 + 64) * 2
    cm = CostModel(m, prof.hardware("h200"), tp=8)
    assert cm.kv_bytes_per_token_per_chip == m.kv_bytes_per_token  # one latent, whole on every chip
    assert cm.pass_bytes(1, 5, 0) > 2 * cm.pass_bytes(1, 1, 0)  # 8 of 256 experts per token: each token wakes new


def test_hf_deepseek_without_a_query_bottleneck_projects_queries_in_full(tmp_path):
    """DeepSeek-V2-Lite's config has q_lora_rank null: q_proj is then one d_model x n_heads·head_dim matrix."""
    cfg = json.loads((FIXTURES / "hf_deepseek_v3_config.json").read_text())
    cfg.update(model_type="deepseek_v2", q_lora_rank=None)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    lite = ModelProfile.from_hf_config(tmp_path)
    v3 = ModelProfile.from_hf_config(FIXTURES / "hf_deepseek_v3_config.json")
    assert lite.q_lora_rank is None
    bottleneck = 7168 * 1536 + 1536 + 1536 * 128 * 192
    assert lite.self_attention_params - v3.self_attention_params == 7168 * 128 * 192 - bottleneck


def test_hf_qwen3_moe_dense_layers_follow_its_own_rule(tmp_path):
    cfg = json.loads((FIXTURES / "hf_qwen3_moe_config.json").read_text())
    cfg.update(mlp_only_layers=[0, 1], decoder_sparse_step=2)  # sparse: odd i not in [0, 1] -> 23 of 48
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert ModelProfile.from_hf_config(tmp_path).n_dense_layers == 48 - 23


@pytest.mark.parametrize("update, needles", [
    ({"num_experts_per_tok": None}, ["mixture-of-experts config without num_experts_per_tok", "num_local_experts",
                                     "(got 8)"]),
    ({"model_type": "dbrx"}, ["does not import", "num_local_experts"]),
    ({"num_experts_per_tok": 9}, ["experts_per_token", "more experts per token"]),
])
def test_hf_moe_config_problems_are_one_line(tmp_path, update, needles):
    cfg = json.loads((FIXTURES / "hf_mixtral_config.json").read_text())
    cfg.update(update)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        ModelProfile.from_hf_config(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "config.json") in msg
    for n in needles:
        assert n in msg, (n, msg)


# --- speedup and the why line ----------------------------------------------------------------------------------

def _speedup(target: str, batch: int) -> float:
    return run(make_config(hardware="h100-sxm", target=target, draft="llama-3.2-1b", tp=2, alpha=0.8, gamma=4,
                           batch=batch, requests=32, prompt_len=128, output_len=64))["speedup"]


def test_a_moe_targets_speedup_falls_below_the_same_alpha_dense_one_at_batch_1():
    moe, dense = _speedup("mixtral-8x7b", 1), _speedup("mixtral-8x7b-dense-active", 1)
    print(f"batch 1, α 0.8, γ 4, tp 2: mixtral {moe:.3f}×, dense of the same active size {dense:.3f}×")
    assert moe < 0.8 * dense
    assert moe > 0.9  # not a broken model: the draft still pays for itself, barely


def test_explain_names_each_reason():
    dep_t = CostModel(MIXTRAL, H100, prof.stack("pytorch-eager"), tp=2)
    small = CostModel(prof.model("llama-3.2-1b"), H100, prof.stack("pytorch-eager"), tp=2)
    ideal_t, ideal_d = CostModel(MIXTRAL, H100, tp=2), CostModel(prof.model("llama-3.2-1b"), H100, tp=2)
    w = explain(ideal_t, ideal_d, batch=1, gamma=4, alpha=0.8)
    assert w.reason == "experts woken" and "6.1 of 8 experts" in w.line and "\n" not in w.line
    big = CostModel(prof.model("llama-3.1-8b"), H100, tp=2)
    assert "draft cost" in why_speculation_loses(CostModel(prof.model("llama-3.1-70b"), H100, tp=2), big, batch=1,
                                                 gamma=4, alpha=0.3)
    dense8b = CostModel(prof.model("llama-3.1-8b"), H100, tp=2)
    line = why_speculation_loses(dense8b, small, batch=512, gamma=8, alpha=0.6)
    assert line and "compute-bound verification" in line
    assert why_speculation_loses(dep_t, small, batch=32, gamma=3, alpha=0.8) is None  # it wins there


def test_choose_draft_says_why_in_one_line_for_a_moe_target():
    res = choose_draft("h100-sxm", "mixtral-8x7b", ["llama-3.2-1b:0.8"], batches=[1], gamma_max=4, tp=2,
                       requests=16, output_len=64)
    why = res["drafts"][0]["why"]
    print(why)
    assert "\n" not in why and "experts" in why and "of 8 experts" in why
    assert res["recommendation"]["why"] == why
    dense = choose_draft("h100-sxm", "mixtral-8x7b-dense-active", ["llama-3.2-1b:0.8"], batches=[1], gamma_max=4,
                         tp=2, requests=16, output_len=64)
    assert "why" not in dense["drafts"][0]  # a dense target that wins: nothing to explain


def test_vllm_v1_step_pricing_reads_the_experts_its_tokens_wake():
    """The vllm-v1 engine profile prices a step of T scheduled tokens like the roofline's pass over T tokens: a
    uniform batch costs exactly CostModel.pass_cost, and a MoE step's bytes follow the experts T tokens wake."""
    import numpy as np

    from specsim.cost.ragged import RooflinePricer

    for model in (MIXTRAL, DENSE):
        cm = CostModel(model, H100, tp=2)
        pricer = RooflinePricer(cm)
        for batch, positions in ((1, 1), (1, 5), (4, 1), (4, 5)):
            t, b, f = pricer.price(np.full(batch, positions), np.full(batch, 100))
            want = cm.pass_cost(batch, positions, 100)
            assert (t, b, f) == (want.time_s, want.bytes, want.flops)
    t1 = RooflinePricer(CostModel(MIXTRAL, H100, tp=2)).price(np.array([1]), np.array([100]))[1]
    t5 = RooflinePricer(CostModel(MIXTRAL, H100, tp=2)).price(np.array([5]), np.array([100]))[1]
    assert t5 > 2 * t1  # five tokens wake ~6.1 of 8 experts, one token 2


def test_kv_dtype_sets_the_cache_bytes_and_nothing_else():
    """kv_dtype (vLLM's kv_cache_dtype): the KV cache's bytes per element; weights keep their dtype; unset = dtype."""
    base = prof.model("llama-3.1-8b").model_dump()
    w8 = ModelProfile(**dict(base, dtype="int8"))
    w8_kv16 = ModelProfile(**dict(base, dtype="int8", kv_dtype="bf16"))
    assert w8_kv16.kv_bytes_per_token == 2 * w8.kv_bytes_per_token
    assert w8_kv16.weight_bytes == w8.weight_bytes
    assert ModelProfile(**dict(base, kv_dtype="bf16")).kv_bytes_per_token == \
        prof.model("llama-3.1-8b").kv_bytes_per_token


@pytest.mark.parametrize("line", ['kv_dtype = "fp7"', "kv_dtype = 2", "kv_dtype = true"])
def test_a_bad_kv_dtype_is_one_line(tmp_path, capsys, line):
    p = tmp_path / "m.toml"
    text = (Path(prof.MODEL_DIR) / "llama-3.2-1b.toml").read_text()
    assert 'dtype = "bf16"' in text
    p.write_text(text.replace('dtype = "bf16"', f'dtype = "bf16"\n{line}', 1))
    code, out, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", p,
                                "--alpha", "0.7")
    assert code == 2 and out == "" and "kv_dtype" in err and len(err.strip().splitlines()) == 1, err
