"""The cost model as a specification: the seed's figures, GQA, tied embeddings, TP, memory refusal."""

import pytest

from specsim import profiles as prof
from specsim.cost.roofline import CostModel, check_fits, cost_ratio_c
from specsim.errors import DoesNotFitError
from specsim.profiles import HardwareProfile, ModelProfile, StackProfile

# A decoder-only stand-in with ~11B parameters, so that every weight is read on every step (the seed's picture).
DENSE_11B = ModelProfile(name="dense-11b", n_layers=48, d_model=4096, d_ff=12800, n_heads=32, n_kv_heads=32,
                         head_dim=128, vocab_size=32128, ffn="gated")


def tpu():
    return prof.hardware("tpu-v4")


def test_dense_11b_has_about_11b_params():
    assert DENSE_11B.total_params == pytest.approx(11e9, rel=0.03)


def test_weights_of_11b_take_about_18ms_at_1200_gb_s():
    cm = CostModel(DENSE_11B, tpu())
    t = cm.pass_time_s(1, 1, 0)
    assert tpu().memory_bandwidth_gb_s == 1200
    assert cm.pass_bytes(1, 1, 0) == pytest.approx(22e9, rel=0.03)
    assert t == pytest.approx(18e-3, rel=0.04), t
    # the real T5-XXL: all of its weights (encoder too) are 22 GB, 18 ms at 1200 GB/s
    xxl = prof.model("t5-v1_1-xxl")
    assert xxl.weight_bytes / tpu().bandwidth_bytes_s == pytest.approx(18e-3, rel=0.05)


def test_22_gflop_per_position_for_11b_params():
    cm = CostModel(DENSE_11B, tpu())
    assert cm.pass_flops(1, 1, 0) == pytest.approx(22e9, rel=0.03)
    assert cm.pass_flops(1, 8, 0) == pytest.approx(8 * cm.pass_flops(1, 1, 0), rel=0.01)


def test_eight_positions_cost_the_same_as_one_idealized_tpu_v4():
    cm = CostModel(prof.model("t5-v1_1-xxl"), tpu())
    one, eight = cm.pass_cost(1, 1, 128), cm.pass_cost(1, 8, 128)
    assert one.bound == eight.bound == "memory"
    assert eight.time_s == pytest.approx(one.time_s, rel=1e-3)


def test_crossover_to_compute_bound_near_a_hundred_positions_at_half_peak():
    half = StackProfile(name="half-peak", compute_fraction=0.5)
    for m in (DENSE_11B, prof.model("t5-v1_1-xxl")):
        ridge = CostModel(m, tpu(), half).ridge_positions(1, 0)
        print(m.name, "ridge at", ridge, "positions")
        assert 80 <= ridge <= 140, ridge
    # the crossover is (nearly) the same for every model size: both lines scale with the parameter count
    r_small = CostModel(prof.model("t5-v1_1-small"), tpu(), half).ridge_positions(1, 0)
    assert 80 <= r_small <= 140


def test_t5_small_idealized_cost_is_about_0_7_percent_of_t5_xxl():
    small = CostModel(prof.model("t5-v1_1-small"), tpu())
    xxl = CostModel(prof.model("t5-v1_1-xxl"), tpu())
    c = cost_ratio_c(xxl, small)
    print("idealized c(T5-small / T5-XXL) =", c)
    assert 0.005 <= c <= 0.009


def test_c_is_derived_from_pass_times_and_the_stack_raises_it():
    xxl, small = prof.model("t5-v1_1-xxl"), prof.model("t5-v1_1-small")
    ideal = cost_ratio_c(CostModel(xxl, tpu()), CostModel(small, tpu()))
    st = prof.stack("t5x-tpu")
    calibrated = cost_ratio_c(CostModel(xxl, tpu(), st), CostModel(small, tpu(), st))
    print("c ideal", ideal, "calibrated", calibrated)
    assert calibrated > 2 * ideal  # fixed per-call/per-layer costs hurt the small model most (paper: 0.02)
    assert calibrated == pytest.approx(0.02, abs=0.008)


def test_encoder_decoder_reads_only_the_decoder_and_head_per_step():
    xxl = prof.model("t5-v1_1-xxl")
    assert xxl.step_params < 0.65 * xxl.total_params
    assert xxl.step_params == xxl.n_layers * xxl.decoder_layer_params + xxl.vocab_size * xxl.d_model


def test_cross_attention_kv_has_one_definition():
    """T5's decoder keeps the encoder output's K and V, full heads, in every decoder layer: the pass re-reads
    them and the KV reservation holds them, both from ModelProfile.cross_kv_bytes_per_token; none for decoders."""
    from specsim.cost.steptime import Memory

    xxl, hw = prof.model("t5-v1_1-xxl"), prof.hardware("tpu-v4")
    assert xxl.cross_kv_bytes_per_token == 2 * 24 * 64 * 64 * 2  # K and V, 24 layers, 64 heads of 64, bf16
    assert prof.model("llama-3.1-8b").cross_kv_bytes_per_token == 0.0
    for tp in (1, 2):
        cm = CostModel(xxl, hw, tp=tp)
        extra = cm.pass_bytes(3, 1, 10, cross_context=512) - cm.pass_bytes(3, 1, 10, cross_context=0)
        assert extra == pytest.approx(3 * 512 * xxl.cross_kv_bytes_per_token / tp, rel=1e-12)
        mem = Memory([cm, CostModel(prof.model("t5-v1_1-small"), hw, tp=tp)], 0)
        assert mem.cross_per_token == (xxl.cross_kv_bytes_per_token
                                       + prof.model("t5-v1_1-small").cross_kv_bytes_per_token) / tp


def test_gqa_shrinks_the_kv_cache():
    m = prof.model("llama-3.1-8b")
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
    mha = m.model_copy(update={"n_kv_heads": 32})
    assert mha.kv_bytes_per_token == 4 * m.kv_bytes_per_token
    assert mha.total_params > m.total_params
    cm, cm_mha = CostModel(m, prof.hardware("h100-sxm")), CostModel(mha, prof.hardware("h100-sxm"))
    assert cm_mha.pass_bytes(8, 1, 4096) - cm.pass_bytes(8, 1, 4096) > 3 * 8 * 4096 * m.kv_bytes_per_token * 0.99


def test_tied_embeddings_count_once_but_the_head_is_still_read():
    m = prof.model("llama-3.2-1b")
    assert m.tied_embeddings
    untied = m.model_copy(update={"tied_embeddings": False})
    assert untied.total_params - m.total_params == m.vocab_size * m.d_model
    assert untied.step_params == m.step_params


def test_attention_flops_grow_with_context():
    cm = CostModel(prof.model("llama-3.1-8b"), prof.hardware("h100-sxm"))
    assert cm.pass_flops(1, 1, 8192) > cm.pass_flops(1, 1, 0) * 1.05


def test_tensor_parallelism_splits_weights_and_adds_all_reduce():
    m, hw = prof.model("llama-3.1-70b"), prof.hardware("h100-sxm")
    one, four = CostModel(m, hw, tp=1), CostModel(m, hw, tp=4)
    assert four.pass_bytes(1, 1, 0) == pytest.approx(one.pass_bytes(1, 1, 0) / 4)
    c4 = four.pass_cost(1, 1, 0)
    assert c4.comm_time_s > 0
    assert c4.time_s > one.pass_cost(1, 1, 0).memory_time_s / 4


def test_a_model_that_does_not_fit_is_refused_with_the_figures():
    m, hw = prof.model("llama-3.1-70b"), prof.hardware("h100-sxm")
    with pytest.raises(DoesNotFitError) as e:
        check_fits([CostModel(m, hw, tp=1)], batch=1, context=1024)
    msg = str(e.value)
    assert "GB" in msg and "80" in msg and "llama-3.1-70b" in msg
    check_fits([CostModel(m, hw, tp=4)], batch=1, context=1024)  # fits on four chips
    with pytest.raises(DoesNotFitError):
        check_fits([CostModel(m, hw, tp=4)], batch=512, context=32768)  # the KV cache does not


def test_calibrated_mode_adds_fixed_costs_and_fractions():
    hw = HardwareProfile(name="toy", peak_tflops={"bf16": 100.0}, memory_bandwidth_gb_s=1000, memory_capacity_gb=80)
    m = prof.model("llama-3.2-1b")
    st = StackProfile(name="s", bandwidth_fraction=0.5, per_call_overhead_s=1e-4, per_layer_overhead_s=1e-5)
    ideal, cal = CostModel(m, hw).pass_cost(), CostModel(m, hw, st).pass_cost()
    assert cal.time_s == pytest.approx(2 * ideal.time_s + 1e-4 + 1e-5 * m.n_layers)


def test_overlap_sum_adds_memory_and_compute_times():
    """A stack whose kernels do not overlap memory and compute (eager CPU) pays both; "max" is the roofline."""
    hw = prof.hardware("cpu-2core")
    m = prof.model("qwen2.5-coder-0.5b").model_copy(update={"dtype": "fp32"})
    st = StackProfile(name="s", bandwidth_fraction=0.5, compute_fraction=0.5, per_call_overhead_s=1e-3)
    for p in (1, 8, 128):
        roof = CostModel(m, hw, st).pass_cost(1, p, 64)
        add = CostModel(m, hw, st.model_copy(update={"overlap": "sum"})).pass_cost(1, p, 64)
        assert roof.time_s == pytest.approx(max(roof.memory_time_s, roof.compute_time_s) + 1e-3)
        assert add.time_s == pytest.approx(roof.memory_time_s + roof.compute_time_s + 1e-3)
        assert add.time_s > roof.time_s
    with pytest.raises(ValueError):
        StackProfile(name="s", overlap="both")
