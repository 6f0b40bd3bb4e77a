"""Sweeps: spec grids and their validation, durable/resumable results (SIGKILL), Dask, and the sweep plots.

Point functions here are module-level so worker processes can import them; `theory_point` is eq. (5) with a
made-up batch penalty, deterministic, so results can be compared bit for bit.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from specsim.cli import main
from specsim.config import SimConfig
from specsim.errors import ConfigError, DoesNotFitError
from specsim.sweep.plots import break_even_table, plot_all
from specsim.sweep import load_spec, point_id, run_sweep
from specsim.sweep.run import _adaptive_size

REPO = Path(__file__).resolve().parent.parent
C_OF_DRAFT = {"sweeptest-draft-a": 0.05, "sweeptest-draft-b": 0.15}


# --- point functions (imported by worker processes) ----------------------------------------------------

def theory_point(cfg: SimConfig) -> dict:
    a, g = cfg.acceptance.alpha, cfg.speculation.gamma
    c = C_OF_DRAFT[cfg.deployment.draft]
    tokens = (1 - a ** (g + 1)) / (1 - a)
    eq5 = tokens / (g * c + 1)
    speedup = eq5 / (1 + 0.004 * cfg.workload.batch * g)  # verification gets dearer as the batch grows
    return {"speedup": speedup, "speedup_eq5": eq5, "c": c, "alpha": a, "gamma": g,
            "tokens_per_target_run": np.float64(tokens), "accepted_hist": [1, g, cfg.workload.seed], "note": None}


def slow_point(cfg: SimConfig) -> dict:
    time.sleep(0.1)
    log = os.environ.get("SWEEP_TEST_LOG")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, (point_id(cfg) + "\n").encode())
        os.close(fd)
    return theory_point(cfg)


def failing_point(cfg: SimConfig) -> dict:
    if cfg.workload.batch >= 64:
        raise DoesNotFitError(f"does not fit at batch {cfg.workload.batch}")
    return theory_point(cfg)


def rate_point(cfg: SimConfig) -> dict:
    load = cfg.workload.rate / 10.0
    thr = 100 * cfg.workload.rate
    return {"speedup": 1.5 - load, "throughput_tok_s": thr, "baseline_throughput_tok_s": thr,
            "tpot_p50_s": 0.01 * (1 + load) / cfg.speculation.gamma ** 0.5, "e2e_p50_s": 1.0 + load,
            "baseline_tpot_p50_s": 0.02 * (1 + load), "baseline_e2e_p50_s": 2.0 * (1 + load)}


# --- fixtures ------------------------------------------------------------------------------------------

HW = """name = "{name}"
kind = "gpu"
peak_tflops = {{ bf16 = 1000.0 }}  # test figures
memory_bandwidth_gb_s = 3000.0
memory_capacity_gb = 80.0
"""
MODEL = """name = "{name}"
n_layers = {layers}
d_model = {d}
d_ff = {ff}
n_heads = 8
n_kv_heads = 8
head_dim = {hd}
vocab_size = 32000
"""


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiles")
    (d / "sweeptest-gpu.toml").write_text(HW.format(name="sweeptest-gpu"))
    (d / "sweeptest-target.toml").write_text(MODEL.format(name="sweeptest-target", layers=8, d=1024, ff=4096, hd=128))
    for name in C_OF_DRAFT:
        (d / f"{name}.toml").write_text(MODEL.format(name=name, layers=2, d=256, ff=1024, hd=32))
    return d


@pytest.fixture(autouse=True)
def env(profile_dir, monkeypatch):
    monkeypatch.setenv("SPECSIM_PROFILE_PATH", str(profile_dir))
    monkeypatch.syspath_prepend(str(REPO))  # so "tests.test_sweep:..." resolves in this process too


GRID = """
[fixed]
hardware = "sweeptest-gpu"
target = "sweeptest-target"
stack = "ideal"
requests = 8
[grid]
draft = ["sweeptest-draft-a:0.6", "sweeptest-draft-b:0.8"]
gamma = [1, 2, 4]
batch = [1, 8, 32, 128]
seed = [0, 1]
"""


def write(tmp_path, text, name="spec.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def read(d: Path):
    return pq.read_table(d / "results.parquet")


# --- grid expansion --------------------------------------------------------------------------------------

def test_grid_is_the_product_in_written_order_last_axis_fastest(tmp_path):
    spec = load_spec(write(tmp_path, GRID), check_point_fn=False)
    assert len(spec) == 2 * 3 * 4 * 2
    combos = [tuple(p.get(f) for f in ("draft", "alpha", "gamma", "batch", "seed")) for p in spec.points]
    assert combos[:3] == [("sweeptest-draft-a", 0.6, 1, 1, 0), ("sweeptest-draft-a", 0.6, 1, 1, 1),
                          ("sweeptest-draft-a", 0.6, 1, 8, 0)]
    assert combos[-1] == ("sweeptest-draft-b", 0.8, 4, 128, 1)
    assert {p.workload.requests for p in spec.points} == {8} and {p.deployment.stack for p in spec.points} == {"ideal"}
    # the id is a hash of the point's config alone: same config, same id, whatever the spec around it
    p0 = spec.points[0]
    assert spec.ids[0] == point_id(SimConfig(hardware="sweeptest-gpu", target="sweeptest-target", stack="ideal",
                                             draft="sweeptest-draft-a", alpha=0.6, gamma=1, batch=1, requests=8))
    assert p0.acceptance.trace is None and len(set(spec.ids)) == len(spec) and all(len(i) == 16 for i in spec.ids)
    swapped = GRID.replace("gamma = [1, 2, 4]\nbatch = [1, 8, 32, 128]", "batch = [1, 8, 32, 128]\ngamma = [1, 2, 4]")
    other = load_spec(write(tmp_path, swapped, "swapped.toml"), check_point_fn=False)
    assert set(other.ids) == set(spec.ids) and other.ids != spec.ids


def test_alpha_axis_and_trace_paths_relative_to_the_spec(tmp_path, monkeypatch):
    (tmp_path / "beta.csv").write_text("sequence_id,position,beta\n0,0,1.0\n")
    text = GRID.replace('draft = ["sweeptest-draft-a:0.6", "sweeptest-draft-b:0.8"]',
                        'draft = ["sweeptest-draft-a"]\ntrace = ["beta.csv"]')
    monkeypatch.chdir(REPO)
    spec = load_spec(write(tmp_path, text), check_point_fn=False)
    assert {p.acceptance.trace for p in spec.points} == {str(tmp_path / "beta.csv")}
    text = GRID.replace('draft = ["sweeptest-draft-a:0.6", "sweeptest-draft-b:0.8"]',
                        'draft = ["sweeptest-draft-a", "sweeptest-draft-b"]\nalpha = [0.5, 0.7]')
    spec = load_spec(write(tmp_path, text, "alpha.toml"), check_point_fn=False)
    assert len(spec) == 2 * 2 * 3 * 4 * 2 and {p.acceptance.alpha for p in spec.points} == {0.5, 0.7}


def test_the_example_spec_is_valid(monkeypatch):
    monkeypatch.delenv("SPECSIM_PROFILE_PATH")
    spec = load_spec(REPO / "experiments" / "sweeps" / "example.toml")
    assert len(spec) == 40 and spec.point_fn == "specsim.simulate:run"


BAD = [  # (change to GRID, field named, words in the message)
    (("[grid]", "[grids]"), "grids", "unknown top-level key"),
    (("gamma = [1, 2, 4]", "gama = [1, 2, 4]"), "grid.gama", "unknown field"),
    (("requests = 8", "reqests = 8"), "fixed.reqests", "unknown field"),
    (("gamma = [1, 2, 4]", "gamma = []"), "grid.gamma", "empty grid axis"),
    (("gamma = [1, 2, 4]", "gamma = 4"), "grid.gamma", "must be a list"),
    (("requests = 8", "requests = [8]"), "fixed.requests", "put lists in [grid]"),
    (("requests = 8", "requests = 8\ngamma = 2"), "grid.gamma", "both fixed and a grid axis"),
    (("gamma = [1, 2, 4]", "gamma = [1, 0]"), "grid.gamma", "(got 0)"),
    (("requests = 8", "requests = 0"), "fixed.requests", "(got 0)"),
    (("seed = [0, 1]", 'seed = [0]\npolicy = ["fixed", "greedy"]'), "grid.policy", "'greedy'"),
    (("batch = [1, 8, 32, 128]", "batch = [1, 8, 8]"), "grid.batch", "duplicate"),
    (('hardware = "sweeptest-gpu"', 'hardware = "no-such-gpu"'), "fixed.hardware", "unknown hardware profile"),
    (('target = "sweeptest-target"', 'target = "no-such-model"'), "fixed.target", "unknown target profile"),
    (('"sweeptest-draft-b:0.8"', '"no-such-draft:0.8"'), "grid.draft", "unknown draft profile"),
    (('"sweeptest-draft-b:0.8"', '"sweeptest-draft-b:1.5"'), "grid.draft", "(got 1.5)"),
    (('"sweeptest-draft-b:0.8"', '"sweeptest-draft-b:missing.parquet"'), "grid.draft", "file not found"),
    (('"sweeptest-draft-b:0.8"', '"sweeptest-draft-b"'), "grid.draft", "pair every draft"),
    (("seed = [0, 1]", "seed = [0]\nalpha = [0.5]"), "grid.alpha", "already fix the acceptance"),
    (('draft = ["sweeptest-draft-a:0.6", "sweeptest-draft-b:0.8"]', 'draft = ["sweeptest-draft-a"]'), "grid.alpha",
     "exactly one of alpha and trace"),
    (('hardware = "sweeptest-gpu"\n', ""), "grid.hardware", "required field is missing"),
    (("requests = 8", "requests = 8\ntp = 2"), "fixed.tp", "interconnect"),
    (("seed = [0, 1]", "seed = [0]\n[run]\npoint_fn = 'no_such_module:run'"), "run.point_fn", "cannot import"),
    (("seed = [0, 1]", "seed = [0]\n[run]\npoint_fn = 'tests.test_sweep:nope'"), "run.point_fn", "no attribute"),
    (("seed = [0, 1]", "seed = [0]\n[run]\nworkers = 4"), "run.workers", "unknown field"),
]


@pytest.mark.parametrize("change,field,words", BAD, ids=[b[1] + ":" + b[2][:20] for b in BAD])
def test_invalid_spec_is_one_error_naming_file_and_field_before_any_work(tmp_path, change, field, words):
    old, new = change
    assert old in GRID
    spec = write(tmp_path, GRID.replace(old, new), "bad-spec.toml")
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as e:
        run_sweep(spec, out, point_fn=theory_point if "point_fn" not in new else None, progress=False)
    msg = str(e.value)
    assert "bad-spec.toml" in msg and f"field '{field}'" in msg and words in msg, msg
    assert "\n" not in msg
    assert not out.exists()  # refused before any work: not even the output directory


def test_unreadable_specs(tmp_path):
    with pytest.raises(ConfigError, match="missing.toml: file not found"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="broken.toml: malformed TOML"):
        load_spec(write(tmp_path, "[grid\n", "broken.toml"))
    with pytest.raises(ConfigError, match="empty.toml: field 'grid': empty spec"):
        load_spec(write(tmp_path, "name = 'x'\n", "empty.toml"))


def test_cli_reports_a_bad_spec_as_one_line_and_exit_2(tmp_path, capsys):
    spec = write(tmp_path, GRID.replace("gamma = [1, 2, 4]", "gamma = [1, 65]"), "cli-spec.toml")
    code = main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "cli-spec.toml" in err and "field 'grid.gamma'" in err and "65" in err


# --- running ---------------------------------------------------------------------------------------------

def test_results_one_row_per_point_in_order_and_reruns_reuse_them(tmp_path):
    spec = load_spec(write(tmp_path, GRID), check_point_fn=False)
    r = run_sweep(spec, tmp_path / "a", point_fn=theory_point, workers=2, progress=False, plots=False)
    assert (r.points, r.computed, r.reused, r.errors, r.backend) == (48, 48, 0, 0, "processes")
    df = read(tmp_path / "a").to_pandas()
    assert list(df["point"]) == list(range(48)) and list(df["point_id"]) == list(spec.ids)
    for i in (0, 17, 47):  # config fields, then the outputs; outputs named like a config field get out_
        p, row = spec.points[i], df.iloc[i]
        want = theory_point(p)
        assert all(row[f] == p.get(f) for f in ("draft", "alpha", "gamma", "batch"))
        assert row["speedup"] == want["speedup"] and row["out_gamma"] == p.speculation.gamma and row["c"] == want["c"]
        assert json.loads(row["accepted_hist"]) == want["accepted_hist"]
    assert df["error"].isna().all() and df["note"].isna().all()
    assert (tmp_path / "a" / "spec.toml").read_text() == GRID

    again = run_sweep(spec, tmp_path / "a", point_fn=theory_point, workers=2, progress=False, plots=False)
    assert (again.computed, again.reused) == (0, 48)
    inline = run_sweep(spec, tmp_path / "b", point_fn=theory_point, workers=1, chunk_size=5, progress=False,
                       plots=False)
    assert inline.backend == "inline"
    assert read(tmp_path / "a").equals(read(tmp_path / "b"), check_metadata=True)


def test_a_different_spec_a_running_sweep_or_a_foreign_directory_is_refused(tmp_path):
    spec = write(tmp_path, GRID)
    run_sweep(spec, tmp_path / "out", point_fn=theory_point, workers=1, progress=False, plots=False)
    changed = write(tmp_path, GRID.replace("gamma = [1, 2, 4]", "gamma = [1, 2]"), "changed.toml")
    with pytest.raises(ConfigError, match="holds a different sweep"):
        run_sweep(changed, tmp_path / "out", point_fn=theory_point, workers=1, progress=False, plots=False)
    import fcntl

    with open(tmp_path / "out" / ".lock") as held:  # another `specsim sweep` working in the same directory
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="another sweep is running"):
            run_sweep(spec, tmp_path / "out", point_fn=theory_point, workers=1, progress=False, plots=False)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a sweep directory"):
        run_sweep(spec, tmp_path / "foreign", point_fn=theory_point, workers=1, progress=False, plots=False)


def test_a_point_that_raises_a_specsim_error_becomes_an_error_row(tmp_path):
    spec = write(tmp_path, GRID)
    r = run_sweep(spec, tmp_path / "out", point_fn=failing_point, workers=2, progress=False, plots=False)
    df = read(tmp_path / "out").to_pandas()
    bad = df["batch"] >= 64
    assert r.errors == bad.sum() == 12
    assert df.loc[bad, "error"].str.contains("does not fit at batch 128").all() and df.loc[bad, "speedup"].isna().all()
    assert df.loc[~bad, "error"].isna().all() and df.loc[~bad, "speedup"].notna().all()


def test_adaptive_chunks_start_at_one_point_then_aim_at_seconds_of_work():
    assert _adaptive_size(0.0, 0, 10_000, 2) == 1
    assert _adaptive_size(1.0, 10_000, 10_000, 2) == 2500  # fast points: limited by keeping 2 chunks per worker
    assert _adaptive_size(10.0, 10, 10_000, 2) == 2  # 1 s per point: ~2 s per task
    assert _adaptive_size(100.0, 10, 10_000, 2) == 1


def _parts_ids(out: Path) -> list[str]:
    ids = []
    for p in sorted((out / "parts").glob("part-*.parquet")):
        ids += pq.read_table(p, columns=["point_id"]).column("point_id").to_pylist()
    return ids


def test_sigkill_midway_then_rerun_loses_and_recomputes_no_finished_point(tmp_path):
    text = GRID + '\n[run]\npoint_fn = "tests.test_sweep:slow_point"\nchunk_size = 1\nplots = false\n'
    spec = write(tmp_path, text)
    n = len(load_spec(spec))  # 48 points x 0.1 s on 2 workers: ~2.4 s of work, killed after ~0.3 s
    log = tmp_path / "computed.log"
    env = {**os.environ, "SWEEP_TEST_LOG": str(log), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "specsim", "sweep", str(spec), "--out", str(tmp_path / "a"), "--workers", "2"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "a" / "parts").glob("part-*.parquet"))) < 5:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no parts appeared"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its worker processes, mid-sweep
    proc.wait()
    finished = _parts_ids(tmp_path / "a")
    assert 5 <= len(finished) < n and not (tmp_path / "a" / "results.parquet").exists()
    (tmp_path / "a" / "parts" / ".part-999999.parquet.tmp").write_bytes(b"half a write")
    before = log.read_text().split()

    done = subprocess.run(cmd + ["--json"], check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rerun = log.read_text().split()[len(before):]
    assert not set(rerun) & set(finished), "a finished point was recomputed"
    assert report["reused"] == len(finished) and report["computed"] == n - len(finished) == len(rerun)
    assert all(before.count(i) == 1 for i in finished)
    assert sorted(_parts_ids(tmp_path / "a")) == sorted(load_spec(spec).ids)

    uninterrupted = run_sweep(spec, tmp_path / "b", workers=2, progress=False)  # SWEEP_TEST_LOG unset here
    assert uninterrupted.computed == n
    assert read(tmp_path / "a").equals(read(tmp_path / "b"), check_metadata=True)
    assert (tmp_path / "a" / "results.parquet").read_bytes() == (tmp_path / "b" / "results.parquet").read_bytes()


def test_dask_local_cluster_gives_the_local_result(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec = write(tmp_path, GRID)
    local = run_sweep(spec, tmp_path / "local", point_fn=theory_point, workers=2, progress=False, plots=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
        r = run_sweep(spec, tmp_path / "dask", point_fn=theory_point, scheduler=cluster.scheduler_address,
                      progress=False, plots=False)
        assert (r.backend, r.workers, r.computed) == ("dask", 2, local.points)
    assert read(tmp_path / "dask").equals(read(tmp_path / "local"), check_metadata=True)
    resumed = run_sweep(spec, tmp_path / "dask", point_fn=theory_point, workers=2, progress=False, plots=False)
    assert (resumed.computed, resumed.reused) == (0, local.points)  # same sweep, whichever backend ran it


# --- plots -------------------------------------------------------------------------------------------------

def test_heatmap_and_break_even_from_a_batch_sweep(tmp_path, capsys):
    spec = write(tmp_path, GRID)
    run_sweep(spec, tmp_path / "out", point_fn=theory_point, workers=1, progress=False, plots=False)
    df = read(tmp_path / "out").to_pandas()
    be = break_even_table(df)
    for _, row in be.iterrows():  # the smallest batch whose (seed-averaged) speedup falls below 1
        sub = df[(df["draft"] == row["draft"]) & (df["gamma"] == row["gamma"])]
        want = sorted(b for b, s in sub.groupby("batch")["speedup"].mean().items() if s < 1)
        if want:
            assert row["break_even_batch"] == want[0]
        else:
            assert pd.isna(row["break_even_batch"])
        assert row["c"] == C_OF_DRAFT[row["draft"]]
    assert be["break_even_batch"].notna().any() and be["break_even_batch"].isna().any()

    code = main(["plot", str(tmp_path / "out"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    assert sorted(Path(p).name for p in d["plots"]) == ["break_even.png", "heatmap.png"]
    assert all(Path(p).stat().st_size > 10_000 for p in d["plots"])
    assert "rate" in d["skipped"]["latency_throughput"]
    cells = pd.read_csv(tmp_path / "out" / "plots" / "heatmap.csv")
    assert len(cells) == 2 * 4  # two panels (draft/α) x four batch sizes, one column per γ


def test_latency_throughput_from_a_rate_sweep_and_graceful_skips(tmp_path, capsys):
    text = GRID.replace("batch = [1, 8, 32, 128]", "rate = [1.0, 2.0, 4.0, 8.0]")
    made, skipped = plot_all(run_and_read(tmp_path, text, rate_point), tmp_path / "plots")
    assert [p.name for p in made] == ["latency_throughput.png"]
    assert "batch" in skipped["heatmap"] and "batch" in skipped["break_even"]
    curves = pd.read_csv(tmp_path / "plots" / "latency_throughput.csv")
    assert set(curves["line"]) == {"γ=1", "γ=2", "γ=4", "no speculation"}
    assert main(["plot", str(tmp_path / "nothing-here")]) == 2
    assert "results.parquet" in capsys.readouterr().err


def run_and_read(tmp_path, text, fn) -> pd.DataFrame:
    run_sweep(write(tmp_path, text), tmp_path / "out", point_fn=fn, workers=1, progress=False, plots=False)
    return read(tmp_path / "out").to_pandas()
