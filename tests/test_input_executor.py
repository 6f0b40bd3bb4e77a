"""Executor inputs and the calibration fit's edge: one line, exit 2, and before any model loads or any timing.

Model folders are written here by hand (a broken config.json, no weights, a missing shard, damaged weights), so
nothing is downloaded; the commands must refuse them before `load_source` runs, which the tests enforce by
making `load_source` fail loudly. The calibration tests pin the clamp of the solver's rounding (an overhead of
-1.7e-18 s made the default run fail under CPU load) and the one-line refusal of a genuinely negative fit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from specsim.cost import calibrate
from specsim import profiles as prof
from specsim.cost.calibrate import PassPoint, fit_stack
from specsim.cli import main
from specsim.errors import ConfigError


def one_line_error(capsys, rc: int, *needles: str) -> str:
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("specsim: error:") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ---- calibration: the solver's rounding is clamped, a negative fit is one line ------------------------------
def _points():
    hw = prof.hardware("cpu-2core")
    models = [prof.model("llama-68m"), prof.model("llama-3.2-1b")]
    assert models[0].n_layers != models[1].n_layers  # two layer counts: o_call and o_layer both fitted
    return [PassPoint(m, 1, p, c, 0.01 * (1 + p / 8)) for m in models for p in (1, 4, 16) for c in (0, 64)], hw


@pytest.mark.parametrize("o_call,o_layer", [(-1.7e-18, 0.0), (0.0, -3e-19), (-1e-10, -1e-10)])
def test_fit_clamps_rounding_below_zero(monkeypatch, o_call, o_layer):
    pts, hw = _points()
    monkeypatch.setattr(calibrate, "_fit_params", lambda *a, **k: np.array([1.5, 2.0, o_call, o_layer]))
    s = fit_stack(pts, hw).stack
    assert s.per_call_overhead_s == 0.0 and s.per_layer_overhead_s == 0.0
    assert s.bandwidth_fraction == pytest.approx(1 / 1.5)


@pytest.mark.parametrize("bad", [-1e-6, -0.5, float("nan"), float("-inf")])
def test_a_negative_or_non_finite_fit_is_one_line(monkeypatch, bad):
    pts, hw = _points()
    monkeypatch.setattr(calibrate, "_fit_params", lambda *a, **k: np.array([1.5, 2.0, 1e-4, bad]))
    with pytest.raises(ConfigError) as e:
        fit_stack(pts, hw)
    msg = str(e.value)
    assert "\n" not in msg and "per_layer_overhead_s" in msg and ">= 0" in msg


def test_clamp_tolerance_is_documented_and_tiny():
    assert 0 < calibrate.OVERHEAD_TOLERANCE_S <= 1e-9
    assert calibrate._overhead("x", -calibrate.OVERHEAD_TOLERANCE_S) == 0.0
    with pytest.raises(ConfigError):
        calibrate._overhead("x", -2 * calibrate.OVERHEAD_TOLERANCE_S)


# ---- model folders ---------------------------------------------------------------------------------------------
@pytest.fixture
def no_loading(monkeypatch):
    """Any model load fails the test: every refusal here must come before one."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import specsim.executor.sources as sources

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the inputs were checked")
    monkeypatch.setattr(sources, "load_source", boom)
    monkeypatch.setattr(sources, "hf_source", boom)


def _folder(tmp_path, name, config, files=()):
    d = tmp_path / name
    d.mkdir()
    if config is not None:
        (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    for f, data in files:
        (d / f).write_bytes(data)
    return d


LLAMA = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32}
INDEX = json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
FOLDERS = [  # (name, config.json, files, words the line must hold)
    ("broken_json", '{"model_type": "llama",', [], ["config.json", "not valid JSON"]),
    ("list_json", "[1, 2]", [], ["config.json", "JSON object"]),
    ("binary_json", None, [("config.json", b"\xff\xfe\x00")], ["config.json", "UTF-8"]),
    ("no_type", {"hidden_size": 8}, [("model.safetensors", b"x")], ["config.json", "model_type"]),
    ("odd_type", {"model_type": "not-a-model"}, [("model.safetensors", b"x")], ["model_type", "not-a-model"]),
    ("no_config", None, [("model.safetensors", b"x")], ["no config.json"]),
    ("no_weights", LLAMA, [], ["no weights", "model.safetensors"]),
    ("empty_weights", LLAMA, [("model.safetensors", b"")], ["no weights"]),
    ("missing_shard", LLAMA, [("model.safetensors.index.json", INDEX.encode()),
                              ("model-00001-of-00002.safetensors", b"x")], ["shard missing", "00002"]),
]


@pytest.mark.parametrize("name,config,files,needles", FOLDERS, ids=[f[0] for f in FOLDERS])
def test_bad_model_folders_are_one_line_before_loading(tmp_path, capsys, no_loading, name, config, files, needles):
    d = _folder(tmp_path, name, config, files)
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    good = "profile:llama-68m:layers=1"
    runs = [
        ["record", "--target", d, "--draft", "bigram", "--prompts", prompts, "--out", tmp_path / "t.parquet"],
        ["record", "--target", good, "--draft", d, "--prompts", prompts, "--out", tmp_path / "t.parquet"],
        ["measure", "--target", good, "--draft", d, "--device", "cpu"],
        ["validate", "--target", good, "--draft", d, "--prompts", prompts],
        ["calibrate", "--hardware", "cpu-2core", "--model", good, "--model", d, "--out", tmp_path / "c.toml"],
    ]
    for args in runs:
        line = one_line_error(capsys, main([str(a) for a in args] + ["--json"]), *needles)
        assert name in line
    assert not (tmp_path / "t.parquet").exists() and not (tmp_path / "c.toml").exists()


def test_damaged_weights_are_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    d = _folder(tmp_path, "damaged", LLAMA, [("model.safetensors", b"\x08\x00\x00\x00\x00\x00\x00\x00{bad json")])
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    rc = main(["record", "--target", str(d), "--draft", "bigram", "--prompts", str(prompts), "--out",
               str(tmp_path / "t.csv"), "--device", "cpu", "--json"])
    one_line_error(capsys, rc, "damaged", "cannot load the model")
    (tmp_path / "fake.gguf").write_bytes(b"PK\x03\x04 not gguf")
    rc = main(["record", "--target", str(tmp_path / "fake.gguf"), "--draft", "bigram", "--prompts", str(prompts),
               "--out", str(tmp_path / "t.csv"), "--json"])
    one_line_error(capsys, rc, "fake.gguf", "not a GGUF file")


# ---- output paths, checked before recording or timing ----------------------------------------------------------
def test_out_paths_are_checked_before_any_model_loads(tmp_path, capsys, no_loading):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    (tmp_path / "a_dir.parquet").mkdir()
    src = ["--target", "profile:llama-68m:layers=1", "--draft", "bigram", "--prompts", str(prompts)]
    for out, needle in ((a_file / "t.parquet", "is a file, not a directory"), (tmp_path / "a_dir.parquet",
                        "is a directory"), (tmp_path / "no" / "such" / "t.csv", "does not exist"),
                        (tmp_path / "t.json", "suffix")):
        one_line_error(capsys, main(["record", *src, "--out", str(out), "--json"]), "--out", needle)
    one_line_error(capsys, main(["calibrate", "--hardware", "cpu-2core", "--model", "profile:llama-68m:layers=1",
                                 "--out", str(a_file / "c.toml"), "--json"]), "--out", "is a file")
    one_line_error(capsys, main(["calibrate", "--hardware", "cpu-2core", "--model", "profile:llama-68m:layers=1",
                                 "--out", str(tmp_path / "c.txt"), "--json"]), "--out", ".toml")
    one_line_error(capsys, main(["validate", *src, "--trace-out", str(a_file / "t.csv"), "--json"]),
                   "--trace-out", "is a file")
    one_line_error(capsys, main(["calibrate", "--hardware", "cpu-2core", "--model", "bigram", "--out",
                                 str(tmp_path / "c.toml"), "--json"]), "--model", "n-gram")


PROMPTS = [  # (file name, bytes, words)
    ("bin.txt", b"\xff\xfe\x00\x81", ["UTF-8"]),
    ("bad.jsonl", b'{"input_ids": [1, 2]}\n{oops\n', ["line 2", "not valid JSON"]),
    ("bad.json", b"[1, 2", ["not valid JSON"]),
    ("dict.json", b'{"a": 1}', ["must hold a list"]),
    ("blank.txt", b"\n\n  \n", ["no prompts"]),
    ("empty.txt", b"", ["empty file"]),
]


@pytest.mark.parametrize("name,data,needles", PROMPTS, ids=[p[0] for p in PROMPTS])
def test_bad_prompts_files_are_one_line_before_loading(tmp_path, capsys, no_loading, name, data, needles):
    p = tmp_path / name
    p.write_bytes(data)
    rc = main(["record", "--target", "profile:llama-68m:layers=1", "--draft", "bigram", "--prompts", str(p),
               "--out", str(tmp_path / "t.csv"), "--json"])
    one_line_error(capsys, rc, name, *needles)


def test_prompt_token_ids_are_integers_not_bools(tmp_path):
    pytest.importorskip("torch")
    from specsim.executor.record import load_prompts
    p = tmp_path / "ids.json"
    p.write_text("[[true, 2]]")
    with pytest.raises(ConfigError, match="not true/false"):
        load_prompts(p, None, 32)
    p.write_text("[[1.0, 2]]")
    with pytest.raises(ConfigError, match="token ids"):
        load_prompts(p, None, 32)
    (tmp_path / "d.txt").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        load_prompts(tmp_path / "d.txt", None, 32)


def test_model_cache_under_a_file_is_one_line(tmp_path, capsys):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    one_line_error(capsys, main(["models", "list", "--cache", str(a_file), "--json"]), "--cache", "is a file")
    one_line_error(capsys, main(["models", "fetch", "smollm2-135m-instruct", "--cache", str(a_file / "c"),
                                 "--json"]), "--cache", "is a file")
