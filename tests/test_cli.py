"""The CLI contract: JSON keys, readable tables, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from specsim.cli import main

GOOD_HW = """name = "toy"
kind = "gpu"
peak_tflops = { bf16 = 100.0 }  # test
memory_bandwidth_gb_s = 1000.0  # test
memory_capacity_gb = 80.0  # test
"""


from conftest import cli_capsys as run  # noqa: E402  (the shared CLI runner)


def run_json(capsys, *args):
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_theory_json_keys(capsys):
    d = run_json(capsys, "theory", "--alpha", "0.8", "--gamma", "5", "--c", "0.05")
    for k in ("expected_tokens", "speedup", "ops_factor", "optimal_gamma"):
        assert k in d
    assert d["expected_tokens"] == pytest.approx((1 - 0.8 ** 6) / 0.2)


def test_theory_table1(capsys):
    d = run_json(capsys, "theory", "--table1")
    assert [round(r["speed"], 2) for r in d["table1"]] == [1.96, 2.53, 2.44, 3.69, 2.71, 6.86]
    code, out, _ = run(capsys, "theory", "--table1")
    assert code == 0 and "6.86X" in out


def test_roofline_json(capsys):
    d = run_json(capsys, "roofline", "--hardware", "tpu-v4", "--model", "t5-v1_1-xxl", "--positions", "1,8,256")
    assert [p["positions"] for p in d["passes"]] == [1, 8, 256]
    for p in d["passes"]:
        assert set(p) >= {"positions", "time_s", "bytes", "flops", "bound"}
    assert d["passes"][0]["bound"] == "memory" and d["passes"][2]["bound"] == "compute"


def test_profiles_lists_everything(capsys):
    d = run_json(capsys, "profiles")
    names = {h["name"] for h in d["hardware"]}
    assert {"tpu-v4", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l4", "mi300x", "cpu-2core"} <= names
    assert {"t5-v1_1-xxl", "llama-3.1-70b", "smollm2-135m"} <= {m["name"] for m in d["models"]}
    code, out, _ = run(capsys, "profiles")
    assert code == 0 and "h100-sxm" in out


def _one_line_error(code, out, err, *needles):
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.mark.parametrize("body, needles", [
    ("name = \"toy\"\npeak_tflops = { bf16 = 1.0 \n", ["bad.toml", "malformed TOML"]),
    (GOOD_HW + "warp_drive = 3\n", ["bad.toml", "warp_drive", "unknown field"]),
    (GOOD_HW.replace("memory_capacity_gb = 80.0  # test\n", ""), ["bad.toml", "memory_capacity_gb", "missing"]),
    (GOOD_HW.replace("1000.0", "-5.0"), ["bad.toml", "memory_bandwidth_gb_s", "-5", "> 0"]),
    (GOOD_HW.replace("1000.0", "0.0"), ["bad.toml", "memory_bandwidth_gb_s", "> 0"]),
])
def test_bad_hardware_file(capsys, tmp_path, body, needles):
    f = tmp_path / "bad.toml"
    f.write_text(body)
    _one_line_error(*run(capsys, "roofline", "--hardware", str(f), "--model", "llama-3.2-1b"), *needles)


def test_unknown_profile_name(capsys):
    _one_line_error(*run(capsys, "roofline", "--hardware", "h900", "--model", "llama-3.2-1b"),
                    "h900", "hardware", "h100-sxm")
    _one_line_error(*run(capsys, "roofline", "--hardware", "h100-sxm", "--model", "llama-9000"),
                    "llama-9000", "llama-3.2-1b")


@pytest.mark.parametrize("alpha", ["1.0", "-0.1", "1.5", "nan"])
def test_alpha_out_of_range(capsys, alpha):
    _one_line_error(*run(capsys, "theory", "--alpha", alpha, "--gamma", "3"), "--alpha", "[0, 1)")


@pytest.mark.parametrize("gamma", ["0", "-2"])
def test_gamma_below_one(capsys, gamma):
    _one_line_error(*run(capsys, "theory", "--alpha", "0.5", "--gamma", gamma), "gamma", ">= 1")


def test_model_that_does_not_fit(capsys):
    _one_line_error(*run(capsys, "roofline", "--hardware", "l4", "--model", "llama-3.1-70b"),
                    "does not fit", "GB")


def test_console_script_exit_code(tmp_path):
    """The installed entry point itself exits 2 with one line (no traceback) on bad input."""
    r = subprocess.run([sys.executable, "-m", "specsim", "theory", "--alpha", "2", "--gamma", "3"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--alpha" in r.stderr


def test_one_integer_list_parser_for_every_command(capsys):
    """roofline, measure, calibrate and validate parse '1,2,4' / '1-6' the same way and name the option on error."""
    from specsim.cli.parse import int_list
    from specsim.errors import ConfigError
    assert int_list("8,1,2-4,2", "--positions") == [1, 2, 3, 4, 8]
    assert int_list("0,128", "--contexts", lo=0) == [0, 128]
    for bad, why in (("1,x", "comma-separated"), ("0,2", "out of range"), ("", "out of range"), ("3-70", "[1, 64]")):
        with pytest.raises(ConfigError, match="--positions") as e:
            int_list(bad, "--positions", 1, 64 if bad == "3-70" else None)
        assert why in str(e.value)
    assert main(["roofline", "--hardware", "cpu-2core", "--model", "llama-68m", "--positions", "1-3", "--json"]) == 0
    assert [p["positions"] for p in json.loads(capsys.readouterr().out)["passes"]] == [1, 2, 3]
    assert main(["roofline", "--hardware", "cpu-2core", "--model", "llama-68m", "--positions", "1,x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--positions" in err[0]
