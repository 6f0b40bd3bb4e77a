"""A corpus of damaged files specsim wrote itself, and of bad paths: each is recomputed (and said so) or refused
in one line saying what to do. Never a traceback, never a hang, never a result mixed from edited profiles.

Damaged parts (zero bytes, truncated, garbage, wrong columns), a damaged, missing or foreign manifest, a damaged
results.parquet given to `plot`, --out under a file / not writable / a file, a spec that is a folder or not UTF-8,
`compare --out` on a file, a profile or trace edited between runs, a --scheduler that is an HTTP server or a
closed port, a worker process that dies and a Dask cluster that goes away mid-sweep.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specsim.config import SimConfig

REPO = Path(__file__).resolve().parent.parent
HW = 'name = "dmg-gpu"\nkind = "gpu"\npeak_tflops = { bf16 = 1000.0 }\nmemory_bandwidth_gb_s = 3000.0\n' \
     'memory_capacity_gb = 80.0\n'
MODEL = 'name = "{name}"\nn_layers = {layers}\nd_model = 256\nd_ff = 1024\nn_heads = 8\nn_kv_heads = 8\n' \
        'head_dim = 32\nvocab_size = 32000\n'
SPEC = """[fixed]
hardware = "dmg-gpu"
target = "dmg-target"
stack = "ideal"
requests = 4
[grid]
draft = ["dmg-draft-a:0.6", "dmg-draft-b:beta.csv"]
gamma = [1, 2, 4]
[run]
point_fn = "tests.sweep_points:cheap_point"
chunk_size = 1
plots = false
"""


def dying_point(cfg: SimConfig) -> dict:
    if cfg.speculation.gamma == 4:
        os._exit(1)  # the OOM killer, as a worker process sees it
    return {"speedup": 1.0}


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """A spec of 6 points (one part each) over profiles of its own; returns (spec path, env for subprocesses)."""
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "dmg-gpu.toml").write_text(HW)
    for name, layers in (("dmg-target", 4), ("dmg-draft-a", 1), ("dmg-draft-b", 2)):
        (prof / f"{name}.toml").write_text(MODEL.format(name=name, layers=layers))
    (tmp_path / "beta.csv").write_text("sequence_id,position,beta\n0,0,0.9\n0,1,0.5\n")
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    monkeypatch.setenv("SPECSIM_PROFILE_PATH", str(prof))
    monkeypatch.syspath_prepend(str(REPO))
    return spec, {**os.environ, "SPECSIM_PROFILE_PATH": str(prof), "PYTHONPATH": str(REPO)}


from conftest import cli_redirect as cli  # noqa: E402  (the shared CLI runner)


def run(spec: Path, out: Path, *extra: str) -> dict:
    code, stdout, err = cli("sweep", str(spec), "--out", str(out), "--json", "--workers", "1", *extra)
    assert code == 0, err
    return json.loads(stdout)


def one_line(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("specsim: error: ") and "Traceback" not in err, err
    return err


def table(out: Path):
    return pq.read_table(out / "results.parquet")


# --- damaged parts -----------------------------------------------------------------------------------------

def _zero(p: Path) -> None:
    p.write_bytes(b"")


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _garbage(p: Path) -> None:
    p.write_bytes(os.urandom(300))


def _wrong_columns(p: Path) -> None:
    pq.write_table(pa.table({"x": [1, 2]}), p)


def _outside(p: Path) -> None:
    t = pq.read_table(p)
    pq.write_table(t.set_column(0, "point", pa.array([99] * t.num_rows, pa.int64())), p)


@pytest.mark.parametrize("damage", [_zero, _truncate, _garbage, _wrong_columns, _outside])
def test_a_damaged_part_is_set_aside_and_its_points_recomputed(sweep, tmp_path, damage):
    spec, _ = sweep
    clean = run(spec, tmp_path / "clean")
    part = tmp_path / "clean" / "parts" / "part-000002.parquet"
    want = table(tmp_path / "clean")
    damage(part)
    (tmp_path / "clean" / "results.parquet").unlink()
    again = run(spec, tmp_path / "clean")
    assert (again["computed"], again["reused"]) == (1, clean["points"] - 1)
    assert len(again["notes"]) == 1 and "1 damaged part file(s) set aside" in again["notes"][0]
    assert "part-000002.parquet" in again["notes"][0] and "recomputed" in again["notes"][0]
    assert part.with_name("part-000002.parquet.damaged").exists()
    assert table(tmp_path / "clean").equals(want, check_metadata=True)
    third = run(spec, tmp_path / "clean")  # the damage is handled once: nothing left to say
    assert (third["computed"], third["notes"]) == (0, [])


def test_parts_that_name_another_point_are_dropped_and_recomputed(sweep, tmp_path):
    spec, _ = sweep
    run(spec, tmp_path / "out")
    want = table(tmp_path / "out")
    parts = tmp_path / "out" / "parts"
    a, b = (pq.read_table(parts / f"part-00000{k}.parquet") for k in (0, 1))
    pq.write_table(a.set_column(1, "point_id", b.column("point_id")), parts / "part-000000.parquet")  # wrong id
    again = run(spec, tmp_path / "out")
    assert again["computed"] == 1 and "1 stored results no longer match" in " ".join(again["notes"])
    assert table(tmp_path / "out").equals(want, check_metadata=True)


# --- the manifest --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", [lambda p: p.write_bytes(p.read_bytes()[:20]), lambda p: p.write_bytes(b"\xff\x00"),
                                    lambda p: p.write_text("[1, 2]"), lambda p: p.write_text('{"format": 2}'),
                                    lambda p: p.unlink()],
                         ids=["truncated", "binary", "not-an-object", "no-keys", "missing"])
def test_a_damaged_or_missing_manifest_is_rebuilt_after_checking_every_point(sweep, tmp_path, damage):
    spec, _ = sweep
    first = run(spec, tmp_path / "out")
    damage(tmp_path / "out" / "manifest.json")
    again = run(spec, tmp_path / "out")
    assert (again["computed"], again["reused"]) == (0, first["points"])
    assert len(again["notes"]) == 1 and "manifest.json was" in again["notes"][0], again["notes"]
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["sweep_id"] == first["sweep_id"] and m["points"] == first["points"]


def test_a_damaged_manifest_over_another_sweeps_parts_is_refused_and_nothing_is_touched(sweep, tmp_path):
    spec, _ = sweep
    run(spec, tmp_path / "out")
    (tmp_path / "out" / "manifest.json").write_text("{trunc")
    other = tmp_path / "other.toml"
    other.write_text(SPEC.replace("gamma = [1, 2, 4]", "gamma = [8, 16]"))
    before = sorted(p.name for p in (tmp_path / "out" / "parts").iterdir())
    line = one_line(*cli("sweep", str(other), "--out", str(tmp_path / "out"), "--json", "--workers", "1"))
    assert "none of the points in its 6 part files belongs to this sweep" in line and "another --out" in line, line
    assert sorted(p.name for p in (tmp_path / "out" / "parts").iterdir()) == before
    assert (tmp_path / "out" / "manifest.json").read_text() == "{trunc"


def test_a_manifest_of_an_older_format_is_refused_in_one_line(sweep, tmp_path):
    spec, _ = sweep
    run(spec, tmp_path / "out")
    m = tmp_path / "out" / "manifest.json"
    m.write_text(json.dumps({"format": 1, "sweep_id": "x", "points": 6}))
    line = one_line(*cli("sweep", str(spec), "--out", str(tmp_path / "out"), "--json", "--workers", "1"))
    assert "manifest format 1" in line and "another --out directory or delete" in line, line


# --- edits between runs: the ids hold the content of every profile and file a point reads ---------------------

def test_an_edited_trace_recomputes_the_points_that_read_it(sweep, tmp_path):
    spec, _ = sweep
    first = run(spec, tmp_path / "out")
    ids_before = table(tmp_path / "out").column("point_id").to_pylist()
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert set(m["sources"]) == {"hardware 'dmg-gpu'", "model 'dmg-target'", "model 'dmg-draft-a'",
                                 "model 'dmg-draft-b'", "stack 'ideal'", f"file '{tmp_path / 'beta.csv'}'"}
    (tmp_path / "beta.csv").write_text("sequence_id,position,beta\n0,0,0.8\n0,1,0.4\n0,2,0.1\n")
    again = run(spec, tmp_path / "out")
    assert (again["computed"], again["reused"]) == (3, 3)  # the 3 points of draft b read the trace
    assert any("changed since this sweep began: file" in n and "beta.csv" in n for n in again["notes"])
    assert any("3 stored results no longer match" in n for n in again["notes"])
    assert again["sweep_id"] != first["sweep_id"]
    ids = table(tmp_path / "out").column("point_id").to_pylist()
    assert ids[:3] == ids_before[:3] and all(a != b for a, b in zip(ids[3:], ids_before[3:]))


def test_an_edited_profile_recomputes_its_points_in_a_fresh_process(sweep, tmp_path):
    """Profiles are cached per process, so the edit is seen by the next `specsim sweep`, as a user runs it."""
    spec, env = sweep
    run(spec, tmp_path / "out")
    ids_before = table(tmp_path / "out").column("point_id").to_pylist()
    prof = Path(env["SPECSIM_PROFILE_PATH"]) / "dmg-draft-a.toml"
    prof.write_text(MODEL.format(name="dmg-draft-a", layers=3))
    cmd = [sys.executable, "-m", "specsim", "sweep", str(spec), "--out", str(tmp_path / "out"), "--json",
           "--workers", "1"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["computed"], report["reused"]) == (3, 3)
    assert "specsim: note: changed since this sweep began: model 'dmg-draft-a'" in done.stderr
    ids_after = table(tmp_path / "out").column("point_id").to_pylist()
    assert ids_after[3:] == ids_before[3:] and all(a != b for a, b in zip(ids_after[:3], ids_before[:3]))
    (prof.parent / "dmg-target.toml").write_text(MODEL.format(name="dmg-target", layers=5))  # read by every point
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["computed"] == 6 and "model 'dmg-target'" in done.stderr


# --- results.parquet given to plot --------------------------------------------------------------------------------

def test_plot_refuses_a_damaged_results_file_in_one_line_and_a_rerun_rebuilds_it(sweep, tmp_path):
    spec, _ = sweep
    run(spec, tmp_path / "out")
    results = tmp_path / "out" / "results.parquet"
    for damage in (_zero, _truncate, _garbage):
        damage(results)
        line = one_line(*cli("plot", str(tmp_path / "out"), "--json"))
        assert "damaged or not a parquet file" in line and f"specsim sweep {spec} --out" in line, line
    pq.write_table(pa.table({"x": [1]}), results)
    line = one_line(*cli("plot", str(tmp_path / "out"), "--json"))
    assert "not a sweep's results" in line, line
    _truncate(results)
    again = run(spec, tmp_path / "out")  # results.parquet is rebuilt from the parts on every run
    assert again["computed"] == 0
    code, out, err = cli("plot", str(tmp_path / "out"), "--json")
    assert code == 0, err
    assert one_line(*cli("plot", str(spec), "--json")).count("is a file") == 1


# --- bad paths -------------------------------------------------------------------------------------------------

def test_out_paths_that_cannot_be_a_directory_are_one_line_before_any_work(sweep, tmp_path):
    spec, _ = sweep
    (tmp_path / "a-file").write_text("x")
    for out, words in ((tmp_path / "a-file", "is a file, not a directory"),
                       (tmp_path / "a-file" / "sub" / "out", "a-file is a file"),
                       (Path("/sys/specsim-test-out"), "cannot write in /sys")):
        line = one_line(*cli("sweep", str(spec), "--out", str(out), "--json"))
        assert f"{out}: field '--out'" in line and words in line, line
    assert not (tmp_path / "spec.toml.out").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_an_unwritable_out_parent_is_one_line(sweep, tmp_path):
    spec, _ = sweep
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    line = one_line(*cli("sweep", str(spec), "--out", str(locked / "out"), "--json"))
    assert "permission denied" in line, line


def test_a_spec_that_is_a_folder_or_not_utf8_is_one_line(tmp_path):
    line = one_line(*cli("sweep", str(tmp_path), "--out", str(tmp_path / "out"), "--json"))
    assert "is a directory, not a sweep spec" in line
    bad = tmp_path / "latin1.toml"
    bad.write_bytes("name = 'caf\xe9'\n".encode("latin-1"))
    line = one_line(*cli("sweep", str(bad), "--out", str(tmp_path / "out"), "--json"))
    assert "latin1.toml: not UTF-8 text (byte 0xe9 at offset 11)" in line, line
    assert not (tmp_path / "out").exists()


def test_compare_out_on_an_existing_file_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("x")
    try:
        result = cli("compare", "--no-simulate", "--out", str(tmp_path / "a-file"), "--json")
    except OSError as e:
        raise AssertionError(f"traceback: {e!r}") from None
    line = one_line(*result)
    assert "a-file" in line and "--out" in line


# --- backends that are not there, or go away ---------------------------------------------------------------------

@pytest.fixture
def http_server():
    """A web server on loopback: an address that accepts connections but is no Dask scheduler."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_a_scheduler_that_is_an_http_server_or_a_closed_port_is_one_line_without_a_hang(sweep, tmp_path,
                                                                                         http_server):
    """In a fresh process, so that what Python prints at exit ("Exception ignored ...") is seen too."""
    spec, env = sweep
    code = ("import sys, specsim.sweep.backends as b; b.CONNECT_TIMEOUT_S = 2.0; from specsim.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    for address, words in ((http_server, "not a Dask scheduler (no handshake within 2 s)"),
                           ("tcp://127.0.0.1:1", "cannot connect"), ("tcp://[::1", "not a scheduler address")):
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-c", code, "sweep", str(spec), "--out", str(tmp_path / "out"),
                               "--scheduler", address, "--json"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=60)
        assert time.monotonic() - t0 < 30
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.count("\n") == 1 and "field '--scheduler'" in done.stderr and words in done.stderr, \
            done.stderr
    assert not (tmp_path / "out").exists()  # refused before the directory was made


def test_a_worker_process_that_dies_keeps_the_parts_and_says_how_to_resume(sweep, tmp_path):
    spec, _ = sweep
    spec.write_text(SPEC.replace("tests.sweep_points:cheap_point", "tests.test_damaged_files:dying_point"))
    line = one_line(*cli("sweep", str(spec), "--out", str(tmp_path / "out"), "--json", "--workers", "2"))
    assert "a local worker process died" in line and f"resume with `specsim sweep {spec} --out" in line, line
    assert not (tmp_path / "out" / "results.parquet").exists()


def test_a_dask_cluster_that_dies_mid_sweep_keeps_the_parts_and_says_how_to_resume(sweep, tmp_path):
    distributed = pytest.importorskip("distributed")
    spec, env = sweep
    spec.write_text(SPEC.replace("tests.sweep_points:cheap_point", "tests.sweep_points:slow_point")
                    .replace("gamma = [1, 2, 4]", "gamma = [1, 2, 3, 4, 5, 6, 7, 8]\nseed = [0, 1, 2, 3]"))
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=40)
    cmd = [sys.executable, "-m", "specsim", "sweep", str(spec), "--out", str(tmp_path / "out"), "--scheduler",
           cluster.scheduler_address, "--json"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while len(list((tmp_path / "out" / "parts").glob("part-*.parquet"))) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
    finally:
        cluster.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and "lost the Dask cluster" in err and "Traceback" not in err, err
    assert f"--scheduler {cluster.scheduler_address}` once it is back" in err
    kept = len(list((tmp_path / "out" / "parts").glob("part-*.parquet")))
    resumed = run(spec, tmp_path / "out")  # finish locally, reusing every kept part
    assert resumed["reused"] == kept and resumed["computed"] == resumed["points"] - kept
