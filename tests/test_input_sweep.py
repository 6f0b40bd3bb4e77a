"""Sweep spec fields as an input surface: every spec either runs (one JSON object on stdout) or is one line, exit 2.

A property test mutates a small valid spec (wrong types, booleans, numeric strings, inf, nan, negatives, huge
lists, unknown keys, odd paths) and runs it through the real CLI entry; hand-picked cases pin what must be refused
and how the line reads (file, field, value, allowed range); the all-failed and partly-failed sweeps pin the exit
codes and the counted reasons; a 4M-point grid pins streaming (checked in seconds, bounded memory, work starts).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specsim.cli import main
from specsim.config import SimConfig

REPO = Path(__file__).resolve().parent.parent
SPEC_NAME = "prop-spec.toml"


BASE = {
    "name": "prop",
    "fixed": {"hardware": "proptest-gpu", "target": "proptest-target", "stack": "ideal", "requests": 4,
              "prompt_len": 16, "output_len": 16},
    "grid": {"draft": ["proptest-draft:0.6"], "gamma": [1, 2], "batch": [1]},
    "run": {"point_fn": "tests.sweep_points:cheap_point", "plots": False},
}
HW = 'name = "proptest-gpu"\nkind = "gpu"\npeak_tflops = { bf16 = 1000.0 }\nmemory_bandwidth_gb_s = 3000.0\n' \
     'memory_capacity_gb = 80.0\n'
MODEL = 'name = "{name}"\nn_layers = {layers}\nd_model = {d}\nd_ff = {ff}\nn_heads = 8\nn_kv_heads = 8\n' \
        'head_dim = {hd}\nvocab_size = 32000\n'


@pytest.fixture(scope="module", autouse=True)
def profile_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiles")
    (d / "proptest-gpu.toml").write_text(HW)
    (d / "proptest-target.toml").write_text(MODEL.format(name="proptest-target", layers=4, d=512, ff=2048, hd=64))
    (d / "proptest-draft.toml").write_text(MODEL.format(name="proptest-draft", layers=2, d=256, ff=1024, hd=32))
    old = os.environ.get("SPECSIM_PROFILE_PATH")
    os.environ["SPECSIM_PROFILE_PATH"] = str(d)
    sys.path.insert(0, str(REPO))
    yield d
    sys.path.remove(str(REPO))
    if old is None:
        del os.environ["SPECSIM_PROFILE_PATH"]
    else:
        os.environ["SPECSIM_PROFILE_PATH"] = old


# --- a TOML writer for any mutated spec (TOML allows mixed arrays and inf/nan) -----------------------------------

def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return '"' + "".join(c if c not in '"\\' and 0x20 <= ord(c) != 0x7f else f"\\u{ord(c):04x}" for c in v) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_value(k)


def to_toml(spec: dict) -> str:
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in spec.items() if not isinstance(v, dict)]
    for k, v in spec.items():
        if isinstance(v, dict):
            lines.append(f"[{toml_key(k)}]")
            lines += [f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def run_cli(spec: dict | str, tmp: Path, *extra: str) -> tuple[int, str, str]:
    """The real entry point, in this process: (exit code, stdout, stderr)."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    path = d / SPEC_NAME
    path.write_text(spec if isinstance(spec, str) else to_toml(spec))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["sweep", str(path), "--out", str(d / "out"), "--json", "--workers", "1", *extra])
    return code, out.getvalue(), err.getvalue()


def assert_one_json_or_one_line(code: int, out: str, err: str) -> dict | str:
    if code == 0:
        lines = out.splitlines()
        assert len(lines) == 1, out
        obj = json.loads(lines[0])
        assert isinstance(obj, dict) and obj["points"] >= 1
        return obj
    assert code == 2, (code, out, err)
    assert out == "", out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("specsim: error: ") and SPEC_NAME in lines[0], lines[0]
    assert "Traceback" not in err
    return lines[0]


# --- the property ---------------------------------------------------------------------------------------------

FIELDS = list(SimConfig.model_fields)
odd_strings = st.sampled_from(["3350", "1e3", "", "true", "nan", "-1", ".", "/", "..", "/dev/null", "/etc",
                               "missing.toml", "x" * 300, "a\x00b", "proptest-draft", "h100-sxm", "fixed", "simpy",
                               "proptest-draft:0.6", "proptest-draft:nan", "proptest-draft:1e400", ":", "x:"])
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
    st.sampled_from([0, 1, 2, -1, 64, 65, 4096, 4097, 10 ** 7, 10 ** 7 + 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 1e-300, 1e300, math.inf, -math.inf, math.nan]),
    odd_strings,
    st.text(max_size=12),
)
lists = st.one_of(
    st.lists(scalars, max_size=4),
    st.builds(lambda v, n: [v] * n, scalars, st.integers(2, 3000)),  # huge, and duplicates
    st.builds(lambda n: list(range(n)), st.integers(50, 3000)),  # huge and distinct
)
# values a field takes in a working sweep, so that mutations also make specs that run
GOOD = {"gamma": [3, 8], "batch": [2, 16, 2000], "seed": [0, 5], "requests": [8, 1], "prompt_len": [32],
        "output_len": [8], "rate": [2.0, 1], "policy": ["optimal", "heuristic"], "lenience": [0.5, 1],
        "max_batch": [4], "slo_ttft_s": [0.5], "slo_tpot_s": [0.1], "length_dist": ["uniform"], "replicas": [2],
        "engine": ["fast", "auto"], "tp": [1], "draft_catchup": [True, False], "fixed_c": [0.2],
        "engine_profile": ["vllm-v1", "hf-assisted"], "max_num_seqs": [4], "block_size": [16],
        "long_prefill_token_threshold": [0, 8], "stack": ["ideal"], "draft": ["proptest-draft:0.7"]}


def values_for(section: str, key: str):
    good = st.sampled_from(GOOD.get(key, [1]))
    good_list = st.lists(good, min_size=1, max_size=3, unique_by=lambda v: (type(v), v))
    any_value = st.one_of(scalars, lists, st.dictionaries(st.text(max_size=4), scalars, max_size=2))
    return st.one_of(good_list if section == "grid" else good, any_value)


keys = st.one_of(st.sampled_from(FIELDS), st.sampled_from(FIELDS), st.sampled_from(FIELDS),
                 st.sampled_from(["gama", "workers", "point_fn", "chunk_size", "plots"]), st.text(max_size=8))
sections = st.sampled_from(["fixed", "grid", "fixed", "grid", "run", "top", "delete"])
wild = st.tuples(sections, keys).flatmap(lambda sk: st.tuples(st.just(sk[0]), st.just(sk[1]), values_for(*sk)))
plausible = st.tuples(st.sampled_from(["fixed", "grid"]), st.sampled_from(sorted(GOOD))).flatmap(
    lambda sk: st.tuples(st.just(sk[0]), st.just(sk[1]), st.sampled_from(GOOD[sk[1]]) if sk[0] == "fixed" else
                         st.lists(st.sampled_from(GOOD[sk[1]]), min_size=1, max_size=3,
                                  unique_by=lambda v: (type(v), v))))
mutation = st.one_of(plausible, wild)


def mutate(spec: dict, section: str, key: str, value) -> dict:
    """One change to a copy of `spec`. The point function is never removed: the default one (the engine) would
    make a mutated `requests = 10000000` a minutes-long run, which is not what is under test here."""
    spec = {k: dict(v) if isinstance(v, dict) else v for k, v in spec.items()}
    if section == "delete":
        for table in ("fixed", "grid", "run"):
            if key != "point_fn":
                spec[table].pop(key, None)
        if key != "run":
            spec.pop(key, None)
    elif section == "top":
        spec[key] = value
        if key == "run":
            spec[key] = {**value, "point_fn": BASE["run"]["point_fn"]} if isinstance(value, dict) else value
    else:
        for table in ("fixed", "grid"):  # a field in one place only, so the mutation is the only fault
            if table != section:
                spec[table].pop(key, None)
        spec[section][key] = value
    return spec


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=2))
def test_any_mutated_spec_runs_or_is_one_line(tmp_path_factory, mutations):
    spec = BASE
    for section, key, value in mutations:
        spec = mutate(spec, section, key, value)
    tmp = tmp_path_factory.getbasetemp()
    result = assert_one_json_or_one_line(*run_cli(spec, tmp))
    event("ran" if isinstance(result, dict) else result.split(SPEC_NAME + ": ", 1)[-1][:60])


def test_the_base_spec_runs(tmp_path):
    obj = assert_one_json_or_one_line(*run_cli(BASE, tmp_path))
    assert (obj["points"], obj["computed"], obj["errors"], obj["failures"]) == (2, 2, 0, {})


# --- hand-picked: each must be refused, and the line must say where and why ------------------------------------

def with_(section: str, key: str, value) -> dict:
    return mutate(BASE, section, key, value)


REFUSED = [  # (spec, field named, words the line must hold)
    (with_("grid", "gamma", [True, 2]), "grid.gamma", ["not true/false", "(got True)", "an integer in [1, 64]"]),
    (with_("fixed", "prompt_len", "3350"), "fixed.prompt_len", ["not a string", "(got '3350')", "[1, 10000000]"]),
    (with_("fixed", "requests", True), "fixed.requests", ["not true/false", "(got True)"]),
    (with_("fixed", "gamma", 2.0), "fixed.gamma", ["must be an integer", "(got 2.0)"]),
    (with_("fixed", "lenience", math.nan), "fixed.lenience", ["not a number", "(got nan)", "(0, 1]"]),
    (with_("grid", "rate", [1.0, math.inf]), "grid.rate", ["must be finite", "(got inf)", "(0, 1000000]"]),
    (with_("fixed", "slo_tpot_s", -1), "fixed.slo_tpot_s", ["out of range", "(got -1)", "(0, 1000000]"]),
    (with_("fixed", "seed", -1), "fixed.seed", ["out of range", "(got -1)", "an integer in [0, inf)"]),
    (with_("fixed", "draft_catchup", 1), "fixed.draft_catchup", ["true or false", "(got 1)"]),
    (with_("fixed", "policy", "fast"), "fixed.policy", ["unknown value", "(got 'fast')", "fixed, optimal"]),
    (with_("grid", "draft", ["proptest-draft:nan"]), "grid.draft", ["not a number", "[0, 1)"]),
    (with_("grid", "draft", ["proptest-draft:inf"]), "grid.draft", ["must be finite"]),
    (with_("grid", "draft", ["proptest-draft:0.6", "proptest-draft:0.60"]), "grid.draft", ["same as"]),
    (with_("fixed", "hardware", "a\x00b"), "fixed.hardware", ["NUL"]),
    (with_("fixed", "hardware", "/etc"), "fixed.hardware", ["/etc"]),
    (with_("fixed", "arrivals_csv", "/dev/null"), "fixed.arrivals_csv", ["not a regular file"]),
    (with_("fixed", "measured_target", "/etc"), "fixed.measured_target", ["is a directory"]),
    (with_("grid", "seed", [1] * 3000), "grid.seed", ["duplicate", "(got 1)"]),
    (with_("fixed", "gama", 2), "fixed.gama", ["unknown field"]),
    (with_("run", "chunk_size", True), "run.chunk_size", ["must be an integer", "(got True)"]),
    (with_("run", "point_fn", "no_such_module_x:f"), "run.point_fn", ["cannot import"]),
    (with_("top", "name", 5), "name", ["must be a string"]),
    (mutate(with_("grid", "seed", list(range(3000))), "grid", "batch", list(range(1, 2001))), "grid",
     ["grid has 12000000 points", "at most 5000000"]),
]


@pytest.mark.parametrize("spec,field,words", REFUSED, ids=[f"{r[1]}:{r[2][0][:16]}" for r in REFUSED])
def test_hand_picked_bad_specs_are_refused_in_one_line(tmp_path, spec, field, words):
    code, out, err = run_cli(spec, tmp_path)
    line = assert_one_json_or_one_line(code, out, err)
    assert code == 2
    assert f"field '{field}'" in line and all(w in line for w in words), line


def test_a_spec_that_is_not_utf8_or_not_toml_is_one_line(tmp_path):
    for text in ("[grid\n", "gamma = [1, 2\n", "a = " + "[" * 5000 + "]" * 5000 + "\n"):
        line = assert_one_json_or_one_line(*run_cli(text, tmp_path))
        assert "malformed TOML" in line, line
    d = tmp_path / "bin"
    d.mkdir()
    (d / SPEC_NAME).write_bytes(b"name = '\xff\xfe'\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["sweep", str(d / SPEC_NAME), "--out", str(d / "out"), "--json"]) == 2
    assert "not UTF-8 text (byte 0xff at offset 8)" in err.getvalue() and err.getvalue().count("\n") == 1


# --- exit codes when points fail ------------------------------------------------------------------------------

def test_a_sweep_whose_every_point_fails_exits_2_with_the_reasons_counted(tmp_path):
    spec = with_("grid", "batch", [2000, 3000])  # 2 gammas x 2 batches, none fits
    code, out, err = run_cli(spec, tmp_path)
    line = assert_one_json_or_one_line(code, out, err)
    assert code == 2 and "all 4 points failed: 4× does not fit at batch 2000" in line, line
    assert "error column of" in line and "results.parquet" in line


def test_a_partly_failed_sweep_exits_0_and_lists_the_reasons(tmp_path):
    code, out, err = run_cli(with_("grid", "batch", [1, 2000]), tmp_path)
    obj = assert_one_json_or_one_line(code, out, err)
    assert code == 0 and obj["errors"] == 2 and obj["points"] == 4
    assert obj["failures"] == {"does not fit at batch 2000": 2}


def test_the_l4_cannot_hold_llama_70b_and_the_cli_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECSIM_PROFILE_PATH")
    spec = {"fixed": {"hardware": "l4", "target": "llama-3.1-70b", "draft": "llama-3.2-1b", "alpha": 0.7,
                      "requests": 4}, "grid": {"gamma": [1, 2]}, "run": {"plots": False}}
    line = assert_one_json_or_one_line(*run_cli(spec, tmp_path))
    assert "all 2 points failed: 2× does not fit" in line and "l4" in line, line


# --- runaways -------------------------------------------------------------------------------------------------

def test_workers_are_capped_with_a_clear_line(tmp_path):
    from specsim.sweep import max_workers

    for n in ("10000", "0", str(max_workers() + 1)):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(["sweep", str(tmp_path / "x.toml"), "--out", str(tmp_path / "o"), "--workers", n]) == 2
        line = err.getvalue()
        assert line.count("\n") == 1 and "field '--workers'" in line and f"1 to {max_workers()}" in line, line
    assert not (tmp_path / "o").exists()


BIG = """[fixed]
hardware = "proptest-gpu"
target = "proptest-target"
draft = "proptest-draft"
stack = "ideal"
alpha = 0.6
requests = 4
[grid]
seed = [{seeds}]
gamma = [{gammas}]
batch = [{batches}]
[run]
point_fn = "tests.sweep_points:cheap_point"
plots = false
"""


def test_a_4m_point_grid_streams_bounded_memory_and_starts_at_once(tmp_path):
    """4,096,000 points: checked in seconds, the first parts written soon after, the process small (the old code
    built every SimConfig first: 6.7 GB and 150 s before any output)."""
    spec = tmp_path / "big.toml"
    spec.write_text(BIG.format(seeds=", ".join(map(str, range(4000))), gammas=", ".join(map(str, range(1, 65))),
                               batches=", ".join(map(str, range(1, 17)))))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "specsim", "sweep", str(spec), "--out", str(tmp_path / "out"),
                             "--workers", "1"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t0, rss_kb = time.monotonic(), 0
    try:
        while len(list((tmp_path / "out" / "parts").glob("part-*.parquet"))) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 45, "no part within 45 s"
            rss_kb = max(rss_kb, _rss_kb(proc.pid))
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["points"] == 4_096_000
    assert rss_kb < 600_000, f"{rss_kb} kB resident"


def test_results_written_block_by_block_equal_the_one_block_table(tmp_path, monkeypatch):
    """A sweep larger than sweep_table.BLOCK is written in row groups; its column types are settled over every
    block first, so the file holds the same table as one written at once."""
    import pyarrow.parquet as pq

    from specsim.sweep import table as sweep_table
    from specsim.sweep import run_sweep

    spec = tmp_path / "mixed.toml"
    spec.write_text(BIG.format(seeds=", ".join(map(str, range(40))), gammas="1", batches="1")
                    .replace("cheap_point", "mixed_point"))
    whole = run_sweep(spec, tmp_path / "whole", workers=1, progress=False)
    monkeypatch.setattr(sweep_table, "BLOCK", 7)
    blocks = run_sweep(spec, tmp_path / "blocks", workers=1, progress=False)
    a, b = pq.read_table(whole.results), pq.read_table(blocks.results)
    assert a.equals(b, check_metadata=True), (a.schema, b.schema)
    assert pq.ParquetFile(blocks.results).num_row_groups == 6 and pq.ParquetFile(whole.results).num_row_groups == 1
    assert str(a.schema.field("count").type) == "double" and str(a.schema.field("late").type) == "int64"
    assert a.column("label").to_pylist()[29:31] == ["29", '"s30"']  # numbers then text: JSON text throughout
    assert whole.failures == blocks.failures == {"does not fit at seed 33": 1}


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@pytest.mark.parametrize("config, field, words", [
    ('{"model": "proptest-draft", "num_speculative_tokens": "x"}',
     "grid.speculative_config.num_speculative_tokens", ["(got 'x')", "1..64"]),
    ('{"model": "proptest-draft", "model": "proptest-draft"}', "grid.speculative_config", ["given twice"]),
])
def test_a_bad_speculative_config_in_a_sweep_names_the_spec_field(tmp_path, config, field, words):
    """Read inside the point's config, it used to name the simulate flag (--speculative-config...) and no file."""
    spec = dict(BASE, grid={"speculative_config": [config], "batch": [1]},
                fixed=dict(BASE["fixed"], alpha=0.6))
    code, out, err = run_cli(spec, tmp_path)
    line = assert_one_json_or_one_line(code, out, err)
    assert code == 2 and SPEC_NAME in line and f"field '{field}'" in line and all(w in line for w in words), line
