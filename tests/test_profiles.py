"""Profiles as a specification: derived sizes match the published ones, Hugging Face configs give the same
architecture as our TOML files, every figure carries its source, and a bad file fails with one clear message."""

from __future__ import annotations

import json

import re
from pathlib import Path

import pytest

from specsim import profiles as prof
from specsim.cost.roofline import CostModel, cost_ratio_c
from specsim.errors import ConfigError
from specsim.profiles import ModelProfile

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODELS = prof.list_names(prof.MODEL_DIR)
HARDWARE = prof.list_names(prof.HARDWARE_DIR)
STACKS = prof.list_names(prof.STACK_DIR)

# Published totals are rounded; 3% is the check. "4B" (Chen et al. 2023) has one significant figure and the
# Gopher-family arithmetic (13 L d^2 + V d) gives 4.12B, so that one entry gets 3.5%.
PARAM_TOLERANCE = {"chinchilla-4b-draft": 0.035}

# PAPER-FACTS.md "Hardware": dense bf16 TFLOP/s, memory GB/s, memory GB.
PAPER_FACTS_HARDWARE = {
    "tpu-v4": (275, 1200, 32), "a100-40gb": (312, 1555, 40), "a100-80gb": (312, 2039, 80),
    "h100-sxm": (989, 3350, 80), "h100-pcie": (756, 2000, 80), "h200": (989, 4800, 141), "l4": (121, 300, 24),
    "mi300x": (1307, 5300, 192),
}

ARCH_FIELDS = ("architecture", "n_layers", "n_encoder_layers", "d_model", "d_ff", "n_heads", "n_kv_heads", "head_dim",
               "vocab_size", "ffn", "tied_embeddings", "learned_positions", "attention_bias",
               "relative_position_projection", "dtype")

GOOD_HW = """\
name = "toy"
memory_bandwidth_gb_s = 1000.0  # test
memory_capacity_gb = 80.0  # test

[peak_tflops]
bf16 = 100.0  # test
"""


# --- the expected files are there --------------------------------------------------------------

def test_every_expected_profile_exists():
    assert {"tpu-v4", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l4", "mi300x",
            "cpu-2core"} <= set(HARDWARE)
    assert {"t5x-tpu", "pytorch-eager", "cuda-graphs", "cpu-eager"} <= set(STACKS)
    assert {"t5-v1_1-small", "t5-v1_1-base", "t5-v1_1-large", "t5-v1_1-xxl", "gpt-like-6m", "gpt-like-97m",
            "chinchilla-70b", "chinchilla-4b-draft", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-3.1-70b",
            "llama-7b", "llama-13b", "llama-33b", "llama-68m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b",
            "smollm2-135m"} <= set(MODELS)


# --- (a) derived parameter counts ------------------------------------------------------------------

@pytest.mark.parametrize("name", MODELS)
def test_derived_params_match_published(name):
    m = prof.load_model(name)
    assert m.name == name
    assert m.published_params, f"{name}: published_params is needed for this check"
    err = m.total_params / m.published_params - 1
    print(f"{name:22} derived {m.total_params / 1e6:12.2f}M  published {m.published_params / 1e6:10.1f}M  "
          f"{100 * err:+6.2f}%")
    assert abs(err) <= PARAM_TOLERANCE.get(name, 0.03)


def test_encoder_decoder_and_decoder_only_are_declared_consistently():
    for name in MODELS:
        m = prof.load_model(name)
        assert (m.architecture == "encoder-decoder") == name.startswith("t5-"), name
        assert (m.n_encoder_layers == m.n_layers) if name.startswith("t5-") else m.n_encoder_layers == 0


def test_relative_position_projection_is_counted():
    m = prof.load_model("chinchilla-70b")
    plain = m.model_copy(update={"relative_position_projection": False})
    assert m.total_params - plain.total_params == m.n_layers * m.d_model * m.n_heads * m.head_dim
    assert m.step_params > plain.step_params  # the projection is read on every step, like any layer weight


# --- (b) Hugging Face configs agree with the TOML profiles ----------------------------------------

@pytest.mark.parametrize("fixture, name", [
    ("hf_llama_config.json", "llama-3.2-1b"),
    ("hf_qwen2_config.json", "qwen2.5-coder-0.5b"),
    ("hf_t5_config.json", "t5-v1_1-small"),
])
def test_hf_config_gives_the_toml_profile(fixture, name):
    from_hf = ModelProfile.from_hf_config(FIXTURES / fixture)
    toml = prof.load_model(name)
    for f in ARCH_FIELDS:
        assert getattr(from_hf, f) == getattr(toml, f), f
    assert from_hf.total_params == toml.total_params
    assert from_hf.step_params == toml.step_params
    assert from_hf.kv_bytes_per_token == toml.kv_bytes_per_token


def test_hf_t5_config_without_tie_key_ties_like_transformers(tmp_path):
    """T5Config defaults tie_word_embeddings to True (the original T5 shares its embedding and LM head; v1.1 configs
    say false): a config that omits the key has one vocabulary table fewer."""
    cfg = json.loads((FIXTURES / "hf_t5_config.json").read_text())
    untied = ModelProfile.from_hf_config(FIXTURES / "hf_t5_config.json")
    del cfg["tie_word_embeddings"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tied = ModelProfile.from_hf_config(tmp_path)
    assert tied.tied_embeddings and not untied.tied_embeddings
    assert untied.total_params - tied.total_params == cfg["vocab_size"] * cfg["d_model"]


def test_hf_config_errors_name_the_file_and_field(tmp_path):
    f = tmp_path / "config.json"
    f.write_text((FIXTURES / "hf_llama_config.json").read_text().replace('"hidden_size"', '"hidden_sz"'))
    with pytest.raises(ConfigError) as e:
        ModelProfile.from_hf_config(tmp_path)
    assert str(f) in str(e.value) and "hidden_size" in str(e.value)
    f.write_text("{ not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelProfile.from_hf_config(f)


# --- (c) hardware and stacks load, and every figure has a source ------------------------------------

@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_profile_loads(name):
    hw = prof.load_hardware(name)
    assert hw.name == name
    assert hw.peak_tflops and hw.memory_bandwidth_gb_s > 0 and hw.memory_capacity_gb > 0
    assert hw.default_stack in STACKS  # the calibrated mode must find its stack
    assert "sparse" not in hw.description.lower()


@pytest.mark.parametrize("name", sorted(PAPER_FACTS_HARDWARE))
def test_hardware_matches_paper_facts(name):
    hw = prof.load_hardware(name)
    peak, bw, cap = PAPER_FACTS_HARDWARE[name]
    assert hw.peak_tflops["bf16"] == pytest.approx(peak, rel=1e-3)
    assert hw.memory_bandwidth_gb_s == bw and hw.memory_capacity_gb == cap
    assert hw.default_stack == ("t5x-tpu" if name == "tpu-v4" else "pytorch-eager")
    if hw.kind == "gpu":
        assert hw.interconnect_bandwidth_gb_s and hw.chips_per_node == 8
        # dense, not sparse: fp8 doubles bf16 exactly where the chip has it
        if "fp8" in hw.peak_tflops:
            assert hw.peak_tflops["fp8"] == pytest.approx(2 * hw.peak_tflops["bf16"], rel=0.01)


def test_cpu_profile_is_a_measurement():
    hw = prof.load_hardware("cpu-2core")
    assert hw.kind == "cpu" and hw.default_stack == "cpu-eager" and hw.interconnect_bandwidth_gb_s is None
    assert 20 <= hw.memory_capacity_gb <= 30  # the 24 GiB machine, from /proc/meminfo
    assert hw.peak_tflops["fp32"] < 5 and hw.memory_bandwidth_gb_s < 500
    text = (prof.HARDWARE_DIR / "cpu-2core.toml").read_text()
    assert "experiments/measure_cpu.py" in text


@pytest.mark.parametrize("name", STACKS)
def test_stack_profile_loads(name):
    st = prof.load_stack(name)
    assert st.name == name and st.provenance
    assert 0 < st.bandwidth_fraction <= 1 and 0 < st.compute_fraction <= 1


def test_cuda_graphs_remove_launch_cost():
    eager, graphs = prof.load_stack("pytorch-eager"), prof.load_stack("cuda-graphs")
    assert graphs.per_layer_overhead_s < eager.per_layer_overhead_s
    assert graphs.per_call_overhead_s <= eager.per_call_overhead_s


@pytest.mark.parametrize("draft, paper_c", [("t5-v1_1-small", 0.02), ("t5-v1_1-base", 0.04), ("t5-v1_1-large", 0.11)])
def test_t5x_stack_reproduces_the_papers_c(draft, paper_c):
    hw, st = prof.load_hardware("tpu-v4"), prof.load_stack("t5x-tpu")
    c = cost_ratio_c(CostModel(prof.load_model("t5-v1_1-xxl"), hw, st), CostModel(prof.load_model(draft), hw, st))
    print(f"{draft}: c = {c:.4f} (paper {paper_c})")
    assert c == pytest.approx(paper_c, rel=0.15)


_NUMERIC = re.compile(r"^\s*[A-Za-z0-9_.\-\"]+\s*=\s*[-+]?(\d|\.\d|inf|nan)")


def _profile_files() -> list[Path]:
    return sorted(prof.HARDWARE_DIR.rglob("*.toml")) + sorted(prof.MODEL_DIR.glob("*.toml"))


def _bare_numbers(lines: list[str]) -> list[str]:
    """Numeric assignments with no `#` on their line or on the line directly above."""
    return [f"{i + 1}: {ln}" for i, ln in enumerate(lines)
            if _NUMERIC.match(ln) and "#" not in ln and not (i and lines[i - 1].lstrip().startswith("#"))]


@pytest.mark.parametrize("path", _profile_files(), ids=lambda p: str(p.relative_to(prof.REPO_ROOT)))
def test_every_number_has_a_source_comment(path):
    bare = _bare_numbers(path.read_text().splitlines())
    assert not bare, f"numbers without a source comment in {path}:\n" + "\n".join(bare)


def test_the_comment_check_catches_a_bare_number():
    assert _bare_numbers(['name = "x"', "memory_bandwidth_gb_s = 5.0", "", "bf16 = 1e2"]) == \
        ["2: memory_bandwidth_gb_s = 5.0", "4: bf16 = 1e2"]
    assert _bare_numbers(["# source", "memory_bandwidth_gb_s = 5.0", "d = -1  # source", 'kind = "cpu"']) == []


# --- (d) loading errors name the file and the field ------------------------------------------------

def _load_error(tmp_path, body: str, loader=prof.load_hardware) -> ConfigError:
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(ConfigError) as e:
        loader(f)
    assert str(f) in str(e.value) and e.value.file == f
    return e.value


def test_good_file_loads(tmp_path):
    f = tmp_path / "toy.toml"
    f.write_text(GOOD_HW)
    assert prof.load_hardware(f).memory_bandwidth_gb_s == 1000.0


def test_malformed_toml(tmp_path):
    e = _load_error(tmp_path, 'name = "toy"\npeak_tflops = { bf16 = 1.0 \n')
    assert "malformed TOML" in str(e)


def test_unknown_field(tmp_path):
    e = _load_error(tmp_path, GOOD_HW.replace("[peak_tflops]", "warp_drive = 3  # test\n\n[peak_tflops]"))
    assert e.field == "warp_drive" and "unknown field" in str(e)


def test_missing_required_field(tmp_path):
    e = _load_error(tmp_path, GOOD_HW.replace("memory_capacity_gb = 80.0  # test\n", ""))
    assert e.field == "memory_capacity_gb" and "missing" in str(e)


@pytest.mark.parametrize("bad", ["-5.0", "0.0"])
def test_nonpositive_bandwidth(tmp_path, bad):
    e = _load_error(tmp_path, GOOD_HW.replace("1000.0", bad))
    assert e.field == "memory_bandwidth_gb_s" and "> 0" in str(e) and bad.rstrip("0").rstrip(".") in str(e)


def test_nonpositive_peak(tmp_path):
    e = _load_error(tmp_path, GOOD_HW.replace("bf16 = 100.0", "bf16 = 0.0"))
    assert "peak_tflops.bf16" in str(e)


def test_bad_stack_and_model_files(tmp_path):
    e = _load_error(tmp_path, 'name = "s"\nbandwidth_fraction = 1.5  # test\n', prof.load_stack)
    assert e.field == "bandwidth_fraction" and "<= 1" in str(e)
    model = (prof.MODEL_DIR / "llama-3.2-1b.toml").read_text()
    e = _load_error(tmp_path, model.replace("n_kv_heads = 8 ", "n_kv_heads = 7 "), prof.load_model)
    assert "n_kv_heads" in str(e)
    e = _load_error(tmp_path, model.replace("d_model = 2048", "d_model = -2048"), prof.load_model)
    assert e.field == "d_model"


@pytest.mark.parametrize("loader, kind, known", [
    (prof.load_hardware, "hardware", HARDWARE),
    (prof.load_stack, "stack", STACKS),
    (prof.load_model, "model", MODELS),
])
def test_unknown_profile_name_lists_the_allowed_ones(loader, kind, known):
    with pytest.raises(ConfigError) as e:
        loader("no-such-profile")
    msg = str(e.value)
    assert e.value.field == kind and "no-such-profile" in msg
    assert all(n in msg for n in known), msg
