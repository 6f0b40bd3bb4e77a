"""Profile files as an input surface: whatever a hardware, model or stack TOML (or a config.json) says, the real
CLI either succeeds with one JSON object — and then read every field exactly as written, no coercion — or exits 2
with one line naming the file, the field, the value and the allowed range. Never a traceback.

The property test mutates the shipped profiles (wrong types, bools, strings for numbers, inf, nan, negatives,
huge values, missing and unknown fields); the hand-picked cases below it must be refused, so it can fail."""

from __future__ import annotations

import itertools
import json
import math
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim import profiles as prof
from specsim.errors import ConfigError, _short

FIXTURES = Path(__file__).resolve().parent / "fixtures"
KINDS = {
    "hardware": (prof.HARDWARE_DIR / "h100-sxm.toml", prof.HardwareProfile, prof.load_hardware),
    "model": (prof.MODEL_DIR / "llama-3.2-1b.toml", prof.ModelProfile, prof.load_model),
    "stack": (prof.STACK_DIR / "pytorch-eager.toml", prof.StackProfile, prof.load_stack),
}


def _argv(kind: str, path: Path) -> list[str]:
    """A roofline that reads every field of the profile: tp 2 (interconnect, chips), the default stack."""
    hw = str(path) if kind == "hardware" else "h100-sxm"
    model = str(path) if kind == "model" else "llama-3.2-1b"
    stack = str(path) if kind == "stack" else "default"
    return ["roofline", "--json", "--hardware", hw, "--model", model, "--stack", stack, "--tp", "2",
            "--positions", "1,64", "--context", "128"]


from conftest import cli_capsys as _cli  # noqa: E402  (the shared CLI runner)


# --- writing mutated TOML ----------------------------------------------------------------------------------------

def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    if isinstance(v, str):
        return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F or c in '"\\' else c
                             for c in v) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml(k)} = {_toml(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def _dump(data: dict) -> str:
    return "".join(f"{_toml(k)} = {_toml(v)}\n" for k, v in data.items())


_COUNTER = itertools.count()


def _write(directory: Path, data: dict) -> Path:
    path = directory / f"p{next(_COUNTER)}.toml"  # a fresh name each time: profiles are cached per path
    path.write_text(_dump(data))
    return path


# --- the oracle ----------------------------------------------------------------------------------------------------

def _named_value(data: dict, field: str):
    head, _, key = field.partition(".")
    v = data.get(head, KeyError)
    if key and isinstance(v, dict):
        return v.get(key, KeyError)
    return KeyError if key else v


def check_outcome(kind: str, path: Path, data: dict, code: int, out: str, err: str) -> None:
    """Success with one JSON object and an exact read-back, or one line naming file, field, value and range."""
    _, cls, load = KINDS[kind]
    try:
        loaded, load_err = load(path), None
    except ConfigError as e:
        loaded, load_err = None, e
    assert "Traceback" not in err
    if code == 0:
        assert load_err is None and err == "", err
        assert out.endswith("\n") and out.count("\n") == 1, out
        obj = json.loads(out)
        assert isinstance(obj, dict)
        for p in obj["passes"]:  # a number that reached the user is a real, finite, positive time
            assert isinstance(p["time_s"], float) and 0 < p["time_s"] < math.inf, p
        for f, v in data.items():  # no coercion: what loaded is what the file says, of the type it says
            got = getattr(loaded, f)
            assert got == v and (type(got) is type(v) or (type(v) is int and type(got) is float)), (f, v, got)
        return
    assert code == 2, (code, out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    if load_err is None:
        return  # a valid file the setup refuses (does not fit, no peak for the model's dtype, ...): one line
    msg = str(load_err)
    assert lines[0] == f"specsim: error: {msg}"
    assert msg.startswith(f"{path}: field '"), msg
    field = re.match(rf"{re.escape(str(path))}: field '([^']+)'", msg).group(1)
    assert field.split(".")[0] in cls.model_fields or field in data, (field, msg)
    if "required field is missing" in msg:
        return
    assert "; allowed: " in msg, msg
    v = _named_value(data, field)
    if "unknown key" in msg:  # a key of a table (a dtype in peak_tflops) is itself the value
        assert f"(got {_short(field.rpartition('.')[2])})" in msg, msg
    elif v is not KeyError and "unknown field" not in msg:  # an int read into a float field shows as that float
        shown = {_short(v)} | ({_short(float(v))} if type(v) is int and abs(v) < 1e300 else set())
        assert any(f"(got {x})" in msg for x in shown), (v, msg)


# --- the property test -----------------------------------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)
VALUES = st.one_of(
    st.sampled_from([True, False, "3350", "abc", "", [1, 2], [True, 2], {"bf16": 1.0}, {}, math.inf, -math.inf,
                     math.nan, -1, -0.5, 0, 0.0, 1, 2, 3, 7, 64, 1e-300, 5e-324, 1e300, 10**30, 2**63 - 1,
                     "bf16", "fp8", "int4", "decoder", "encoder-decoder", "gated", "plain", "sum", "cpu", "ideal"]),
    st.integers(-10**6, 10**12), st.floats(allow_nan=True, allow_infinity=True), _TEXT, st.booleans())


def _fields(kind: str) -> list[str]:
    names = [f for f in KINDS[kind][1].model_fields if f != "name"]
    extra = ["warp_drive", "peak_tflops.bf16", "peak_tflops.fp8", "peak_tflops.int3"] if kind == "hardware" else \
        ["warp_drive"]
    return names + extra


@st.composite
def mutations(draw, kind: str):
    base = tomllib.loads(KINDS[kind][0].read_text())
    n = draw(st.integers(1, 3))
    for _ in range(n):
        field = draw(st.sampled_from(_fields(kind)))
        op = draw(st.sampled_from(["set", "set", "set", "delete"]))
        head, _, key = field.partition(".")
        if key:
            table = dict(base.get(head) or {}) if isinstance(base.get(head), dict) else {}
            if op == "delete":
                table.pop(key, None)
            else:
                table[key] = draw(VALUES)
            base[head] = table
        elif op == "delete":
            base.pop(head, None)
        else:
            base[head] = draw(VALUES)
    return base


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("profiles")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_mutated_profile_is_one_json_object_or_one_line(kind, scratch, capsys):
    @settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=mutations(kind))
    def run(data):
        path = _write(scratch, data)
        code, out, err = _cli(capsys, *_argv(kind, path))
        check_outcome(kind, path, data, code, out, err)

    run()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_shipped_profile_itself_succeeds(kind, scratch, capsys):
    data = tomllib.loads(KINDS[kind][0].read_text())
    path = _write(scratch, data)
    code, out, err = _cli(capsys, *_argv(kind, path))
    assert code == 0, err
    check_outcome(kind, path, data, code, out, err)


# --- hand-picked cases that must be refused ----------------------------------------------------------------------

def _one_line(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _edited(scratch, kind: str, old: str, new: str) -> Path:
    text = KINDS[kind][0].read_text() if kind != "model8b" else (prof.MODEL_DIR / "llama-3.1-8b.toml").read_text()
    assert old in text
    path = scratch / f"e{next(_COUNTER)}.toml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("kind, old, new, needles", [
    ("model8b", "n_layers = 32 ", "n_layers = true ", ["n_layers", "not an integer", "True", ">= 1"]),
    ("hardware", "memory_bandwidth_gb_s = 3350.0", 'memory_bandwidth_gb_s = "3350"',
     ["memory_bandwidth_gb_s", "not a number", "'3350'", "> 0"]),
    ("hardware", "memory_bandwidth_gb_s = 3350.0", "memory_bandwidth_gb_s = inf",
     ["memory_bandwidth_gb_s", "not a finite number", "inf", "<= 100000"]),
    ("hardware", "bf16 = 989.0", "bf16 = nan", ["peak_tflops.bf16", "not a number", "nan"]),
    ("hardware", "bf16 = 989.0", "bf16 = 1e-30", ["peak_tflops.bf16", "1e-30", ">= 1e-06"]),
    ("hardware", "chips_per_node = 8", "chips_per_node = 8.0", ["chips_per_node", "not an integer", "8.0"]),
    ("model8b", "head_dim = 128 ", "head_dim = 1280 ", ["head_dim", "1280", "d_model"]),
    ("model8b", "n_heads = 32 ", "n_heads = 320 ", ["head_dim", "d_model"]),
    ("model8b", "published_params = 8.03e9", "published_params = 16.06e9", ["published_params", "16060000000.0",
                                                                             "±15%"]),
    ("model8b", "n_kv_heads = 8 ", "n_kv_heads = 7 ", ["n_kv_heads", "(got 7)", "divisor of n_heads"]),
    ("stack", "bandwidth_fraction = 0.8", "bandwidth_fraction = -inf", ["bandwidth_fraction", "not a finite"]),
    ("stack", "per_call_overhead_s = 150e-6", "per_call_overhead_s = nan", ["per_call_overhead_s", "not a number"]),
])
def test_bad_profile_fields_are_refused_by_name(scratch, capsys, kind, old, new, needles):
    path = _edited(scratch, kind, old, new)
    code, out, err = _cli(capsys, *_argv("model" if kind == "model8b" else kind, path))
    line = _one_line(code, out, err)
    assert str(path) in line, line
    for n in needles:
        assert n in line, (n, line)


@pytest.mark.parametrize("argv, needles", [
    (["--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--tp", "3"], ["'tp'", "(got 3)", "n_heads = 32",
                                                                          "1, 2, 4, 8", "n_kv_heads"]),
    (["--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--tp", "16"], ["'tp'", "(got 16)", "chips_per_node = 8",
                                                                           "1..8"]),
    (["--hardware", "a100-80gb", "--model", "chinchilla-70b", "--tp", "16"], ["chips_per_node = 8", "tp_domain_chips"]),
    (["--hardware", "h100-sxm", "--model", "smollm2-135m", "--tp", "2"], ["n_heads = 9", "1, 3"]),
    (["--hardware", "cpu-2core", "--model", "smollm2-135m", "--tp", "3"], ["interconnect"]),
])
def test_impossible_tensor_parallelism_is_refused_with_the_rule(capsys, argv, needles):
    line = _one_line(*_cli(capsys, *["roofline", "--json", *argv]))
    for n in needles:
        assert n in line, (n, line)


def test_kv_heads_replicate_when_tp_exceeds_them():
    """llama-3.2-1b: 32 heads, 8 KV heads. Up to tp 8 the KV heads split; at tp 16 vLLM gives every chip a
    replica of one KV head, so the KV bytes per chip stop shrinking at 1/8 while the weights keep splitting."""
    from specsim.cost.roofline import CostModel, check_tp

    m = prof.model("llama-3.2-1b")
    hw = prof.hardware("h100-sxm").model_copy(update={"chips_per_node": 16})
    two, eight, sixteen = (CostModel(m, hw, tp=t) for t in (2, 8, 16))
    assert two.kv_bytes_per_token_per_chip == pytest.approx(m.kv_bytes_per_token / 2)
    assert eight.kv_bytes_per_token_per_chip == pytest.approx(m.kv_bytes_per_token / 8)
    assert sixteen.kv_bytes_per_token_per_chip == pytest.approx(m.kv_bytes_per_token / 8)
    kv = 1000 * m.kv_bytes_per_token
    assert sixteen.memory_bytes(1, 1000) == pytest.approx(m.weight_bytes / 16 + kv / 8)
    assert sixteen.pass_bytes(1, 1, 999) == pytest.approx(m.step_params * m.bytes_per_param / 16 + kv / 8)
    for tp in (3, 12):
        with pytest.raises(ConfigError, match="n_heads = 32"):
            check_tp(m, hw, tp)
    # 24 heads and 8 KV heads (llama-3.2-3b, with a d_ff that 12 divides): tp 12 splits the query heads, but 12
    # neither divides 8 KV heads nor is a multiple of 8, so no engine can place them
    m24 = prof.model("llama-3.2-3b").model_copy(update={"d_ff": 8196})
    with pytest.raises(ConfigError, match="n_kv_heads = 8"):
        check_tp(m24, hw.model_copy(update={"chips_per_node": 12}), 12)


@pytest.mark.parametrize("body, needles", [
    ({"model_type": "mixtral", "num_local_experts": 8}, ["mixture-of-experts", "num_local_experts", "(got 8)"]),
    ({"model_type": "qwen3_moe", "num_experts": 128}, ["mixture-of-experts", "num_experts"]),
    ({"model_type": "deepseek_v3", "n_routed_experts": 256}, ["mixture-of-experts", "n_routed_experts"]),
    ({"model_type": "llama", "hidden_size": "4096"}, ["hidden_size", "not an integer", "'4096'"]),
    ({"model_type": "llama", "num_attention_heads": True}, ["num_attention_heads", "not an integer"]),
    ({"model_type": "llama", "tie_word_embeddings": "yes"}, ["tie_word_embeddings", "not a boolean"]),
    ({"model_type": "llama", "quantization_config": {"quant_method": "gptq", "bits": 4}}, ["quantized", "gptq"]),
])
def test_hf_configs_the_cost_model_cannot_represent_are_refused(scratch, capsys, body, needles):
    cfg = json.loads((FIXTURES / "hf_llama_config.json").read_text())
    cfg.update(body)
    folder = scratch / f"hf{next(_COUNTER)}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    for argv in (["roofline", "--json", "--hardware", "h100-sxm", "--model", str(folder)],
                 ["simulate", "--json", "--hardware", "h100-sxm", "--target", str(folder), "--draft",
                  "llama-3.2-1b", "--alpha", "0.7", "--requests", "4"]):
        line = _one_line(*_cli(capsys, *argv))
        assert str(folder / "config.json") in line, line
        for n in needles:
            assert n in line, (n, line)


def test_a_dense_hf_config_folder_imports_as_target(scratch, capsys):
    folder = scratch / "llama-folder"
    folder.mkdir()
    (folder / "config.json").write_text((FIXTURES / "hf_llama_config.json").read_text())
    code, out, err = _cli(capsys, *["roofline", "--json", "--hardware", "h100-sxm", "--model", str(folder)])
    assert code == 0, err
    assert json.loads(out)["passes"][0]["bytes"] == pytest.approx(
        json.loads(_cli(capsys, *["roofline", "--json", "--hardware", "h100-sxm", "--model", "llama-3.2-1b"])[1])
        ["passes"][0]["bytes"])


@pytest.mark.parametrize("text, needles", [
    ("{ not json", ["not valid JSON"]),
    ("[1, 2]", ["not an object"]),
    (b"\xff\xfe\x00binary", ["not a UTF-8"]),
    ('{"model_type": "llama"}', ["missing field", "hidden_size"]),
])
def test_an_invalid_config_json_is_one_line(scratch, capsys, text, needles):
    folder = scratch / f"bad{next(_COUNTER)}"
    folder.mkdir()
    f = folder / "config.json"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    line = _one_line(*_cli(capsys, *["roofline", "--json", "--hardware", "h100-sxm", "--model", str(folder)]))
    assert str(f) in line
    for n in needles:
        assert n in line, (n, line)


# --- names and paths ----------------------------------------------------------------------------------------------

def test_an_entry_in_the_working_directory_does_not_hijack_a_profile_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama-3.1-8b").mkdir()
    (tmp_path / "llama-3.1-8b" / "config.json").write_text((FIXTURES / "hf_llama_config.json").read_text())
    (tmp_path / "h100-sxm.toml").write_text("not = [toml")
    argv = ["roofline", "--json", "--hardware", "h100-sxm", "--model", "llama-3.1-8b"]
    code, out, err = _cli(capsys, *argv)
    assert code == 0, err
    assert json.loads(out)["model"] == "llama-3.1-8b"  # the built-in profile, not the folder's 1B config
    # the same entry given as a path is used
    code, out, err = _cli(capsys, *["roofline", "--json", "--hardware", "h100-sxm", "--model", "./llama-3.1-8b"])
    assert code == 0 and json.loads(out)["model"] == "llama-3.1-8b" and json.loads(out)["passes"][0]["bytes"] < 3e9
    line = _one_line(*_cli(capsys, *["roofline", "--json", "--hardware", "./h100-sxm.toml", "--model", "llama-3.2-1b"]))
    assert "h100-sxm.toml" in line and "malformed TOML" in line


def test_an_unknown_name_says_the_working_directory_is_not_searched(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mygpu.toml").write_text((prof.HARDWARE_DIR / "h100-sxm.toml").read_text())
    line = _one_line(*_cli(capsys, *["roofline", "--json", "--hardware", "mygpu", "--model", "llama-3.2-1b"]))
    assert "unknown hardware profile" in line and "./mygpu.toml" in line and "h100-sxm" in line
    monkeypatch.setenv("SPECSIM_PROFILE_PATH", str(tmp_path))  # the search path is where bare names are found
    code, out, err = _cli(capsys, *["roofline", "--json", "--hardware", "mygpu", "--model", "llama-3.2-1b"])
    assert code == 0 and json.loads(out)["hardware"] == "h100-sxm", err


@pytest.mark.parametrize("make, needles", [
    (lambda d: d, ["is a directory"]),
    (lambda d: d / "missing.toml", ["file not found"]),
    (lambda d: (d / "bin.toml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff") and d / "bin.toml", ["not a UTF-8"]),
    (lambda d: (d / "hw.json").write_text("{}") and d / "hw.json", ["TOML file"]),
])
def test_a_bad_hardware_path_is_one_line_naming_it(tmp_path, capsys, make, needles):
    path = make(tmp_path)
    line = _one_line(*_cli(capsys, *["roofline", "--json", "--hardware", str(path), "--model", "llama-3.2-1b"]))
    assert str(path) in line, line
    for n in needles:
        assert n in line, (n, line)


def test_a_model_folder_without_config_json_is_one_line(tmp_path, capsys):
    line = _one_line(*_cli(capsys, *["roofline", "--json", "--hardware", "h100-sxm", "--model", str(tmp_path)]))
    assert str(tmp_path) in line and "config.json" in line


def test_a_profile_edited_in_place_is_read_again(tmp_path):
    f = tmp_path / "hw.toml"
    f.write_text((prof.HARDWARE_DIR / "h100-sxm.toml").read_text())
    assert prof.hardware(f).memory_bandwidth_gb_s == 3350.0
    f.write_text(f.read_text().replace("memory_bandwidth_gb_s = 3350.0", "memory_bandwidth_gb_s = 1000.0 "))
    assert prof.hardware(f).memory_bandwidth_gb_s == 1000.0
