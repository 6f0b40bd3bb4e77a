"""Step tables for the vLLM comparison (specsim.validation.step_fit): fitted only on runs without speculation, knots at
measured token counts, monotone, never priced silently outside what was measured; and `specsim import-vllm`."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.cli import main
from specsim.cost.ragged import StepTable
from specsim.errors import ConfigError
from specsim.traces.format import Trace
from specsim.validation import step_fit as sf
from specsim.validation import vllm_runs as vrun

FIX = Path(__file__).parent / "fixtures" / "vllm"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))


def _cal() -> dict:
    return json.loads((FIX / "offline_cal_run.json").read_text())


def _spec() -> dict:
    return json.loads((FIX / "offline_spec_run.json").read_text())


def _samples(tokens, times, ctx=None):
    t = np.asarray(tokens, float)
    return sf.StepSamples(t, np.asarray(times, float), np.full(t.size, np.nan) if ctx is None else np.asarray(ctx))


# --- the calibration never sees a speculative run --------------------------------------------------------------

def test_a_plain_calibration_run_passes_the_guard():
    run = _cal()
    assert sf.check_no_speculation(run) is run


@pytest.mark.parametrize("taint", ["config", "counters", "request_spec", "final_chunks"])
def test_every_trace_of_speculation_is_refused(taint):
    run = _cal()
    if taint == "config":
        run["config"].update(method="draft_model", k=3, speculative_config={"method": "draft_model"})
    elif taint == "counters":
        run["spec"]["drafts"] = 4
    elif taint == "request_spec":
        run["request_spec"] = _spec()["request_spec"]
    else:
        run["final_chunks"] = [{"metrics": {"speculative_decoding": {"num_draft_tokens": 9,
                                                                      "per_step_drafted": [3, 3, 3]}}}]
    with pytest.raises(ConfigError, match="speculative run cannot calibrate"):
        sf.check_no_speculation(run, "x.json")


def test_the_fixture_spec_run_is_refused_by_the_guard():
    with pytest.raises(ConfigError, match="speculative"):
        sf.check_no_speculation(_spec(), "offline_spec_run.json")


def test_analysis_refuses_a_mislabelled_calibration_run_and_ignores_real_spec_runs():
    va = pytest.importorskip("vllm_analyze")
    cal, spec = _cal(), _spec()
    for r in (cal, spec):
        r["cfg"] = vrun.run_config(r)
    slow = copy.deepcopy(spec)
    for s in slow["steps"]:
        s["time_s"] *= 100  # the speculative run's steps differ wildly: the table must not move
    a = va.step_table(va.calibration_runs([cal, spec], "target"), "a")
    b = va.step_table(va.calibration_runs([cal, slow], "target"), "b")
    assert np.array_equal(a.time_s, b.time_s) and np.array_equal(a.tokens, b.tokens)
    bad = copy.deepcopy(spec)
    bad["mode"] = "cal-target"  # a speculative run labelled as the target served alone
    with pytest.raises(ConfigError):
        va.calibration_runs([cal, bad], "target")
    sneaky = copy.deepcopy(cal)  # no counters, no config: only its steps show it verified drafts
    sneaky["steps"][5]["gen_tokens"] = 4 * sneaky["steps"][5]["gen_requests"]
    with pytest.raises(ConfigError, match="verified drafts"):
        va.calibration_runs([sneaky], "target")


# --- knots at measured counts, monotone ----------------------------------------------------------------------

def test_knots_sit_at_the_measured_counts_and_pass_through_monotone_data():
    tok = [1, 1, 2, 2, 5, 5, 9, 9, 9]
    ts = [0.20, 0.22, 0.25, 0.25, 0.30, 0.32, 0.41, 0.40, 0.42]
    t = sf.fit_step_table(_samples(tok, ts))
    assert t.tokens.tolist() == [1, 2, 5, 9]
    assert t.time_s == pytest.approx([0.21, 0.25, 0.31, 0.41])  # the medians: monotone already, untouched
    assert np.all(np.diff(t.time_s) >= 0)


def test_a_faster_three_request_decode_is_pooled_not_priced_cheap():
    """On the EPYC a 3-request decode ran faster than a 1-request one; the old fixed-knot fit turned that into
    T(4) < T(1). The monotone fit pools the violators: T(4) >= T(1) whenever the 4-token steps are not faster."""
    tok = [1] * 5 + [2] * 5 + [3] * 5 + [4] * 5
    ts = [0.50] * 5 + [0.48] * 5 + [0.40] * 5 + [0.55] * 5
    t = sf.fit_step_table(_samples(tok, ts))
    assert np.all(np.diff(t.time_s) >= 0)
    assert t.time_at(4) >= t.time_at(1)
    assert t.time_at(4) == pytest.approx(0.55)  # measured 4-token steps untouched
    assert t.time_at(1) == pytest.approx(t.time_at(3)) == pytest.approx((0.50 + 0.48 + 0.40) / 3)


def test_the_fixture_calibration_fits_monotone_through_its_points():
    s = sf.StepSamples.from_steps(_cal()["steps"])
    t = sf.fit_step_table(s)
    assert t.tokens.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24]
    assert np.all(np.diff(t.time_s) >= 0)
    far = np.abs(t.time_s / t.raw_median_s - 1)
    assert (far[t.tokens >= 4] < 0.02).all()  # where the data are monotone the fit is the data
    assert t.time_at(4) >= t.time_at(1)


def test_kv_slope_is_recovered_from_within_count_deviations():
    rng = np.random.default_rng(0)
    tok = np.repeat([1.0, 2, 4, 8], 20)
    ctx = rng.uniform(0, 2000, tok.size)
    ts = 0.2 + 0.01 * tok + 2e-5 * ctx
    t = sf.fit_step_table(sf.StepSamples(tok, ts, ctx))
    assert t.kv_slope_s_per_token == pytest.approx(2e-5, rel=1e-6)
    assert t.time_at(4, ctx=1500.0) - t.time_at(4, ctx=500.0) == pytest.approx(0.02, rel=1e-6)


# --- never extrapolate silently ------------------------------------------------------------------------------

def test_a_fit_lacking_a_token_range_flags_predictions_inside_it():
    """The first EPYC data: decodes of 1-3 tokens, prefills of 35-90; verification needs 4-18."""
    tok = [1, 2, 3] * 4 + [35, 40, 48, 52, 60, 70, 80, 90]
    ts = [0.2, 0.21, 0.22] * 4 + [0.6, 0.65, 0.7, 0.72, 0.8, 0.9, 1.0, 1.1]
    t = sf.fit_step_table(_samples(tok, ts))
    assert t.classify(2) == "in" and t.classify(44) == "in"  # 40 -> 48 is within 25% of 40
    assert t.classify(12) == "gap" and t.classify(100) == "above"
    for T in (2, 12, 16, 100):
        t.time_at(T)
    s = t.unmeasured.summary()
    assert (s["unmeasured_steps"], s["unmeasured_in_gaps"], s["unmeasured_above"]) == (3, 2, 1)
    assert s["extrapolated"] and s["unmeasured_token_counts"] == [12, 16, 100]
    t.price(np.array([4, 4, 4]), np.zeros(3))  # a k = 3 verification of 3 requests: 12 tokens
    assert t.unmeasured.gap == 3


def test_a_prediction_through_the_engine_says_how_many_steps_were_unmeasured():
    vp = pytest.importorskip("vllm_predict")
    spec = _spec()
    cfg = vrun.run_config(spec)
    full = sf.fit_step_table(sf.StepSamples.from_steps(_cal()["steps"]))
    narrow = sf.fit_step_table(_samples([1, 2, 3] * 3, [0.2, 0.21, 0.22] * 3))
    ok = vp.predict(spec, cfg, full, full, blocks=64)
    assert ok["unmeasured_steps"] == 0 and ok["priced_steps"] > 0
    flagged = vp.predict(spec, cfg, narrow, narrow, blocks=64)
    assert flagged["unmeasured_steps"] > 0
    assert narrow.unmeasured.above == flagged["unmeasured_steps"]  # verification steps of 4..8 tokens, prefills


def test_the_written_table_reads_back_as_a_step_table(tmp_path):
    t = sf.fit_step_table(sf.StepSamples.from_steps(_cal()["steps"]))
    p = t.write_csv(tmp_path / "t.csv", "fixture")
    back = StepTable.read_csv(p)
    assert back.tokens.tolist() == t.tokens.tolist()
    assert back.time_s == pytest.approx(t.time_s, rel=1e-5)
    assert "uncovered gaps: none" in p.read_text()


# --- specsim import-vllm ---------------------------------------------------------------------------------------

def test_import_vllm_round_trip(tmp_path, capsys):
    out = tmp_path / "imp"
    assert main(["import-vllm", "--bench", str(FIX / "offline_spec_run.json"), "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    spec = _spec()
    arr = pd.read_csv(out / "arrivals.csv")
    order = np.argsort(spec["start_times"], kind="stable")
    assert arr["arrival_s"].tolist() == pytest.approx(np.asarray(spec["start_times"])[order].tolist())
    assert arr["prompt_len"].tolist() == np.asarray(spec["input_lens"])[order].tolist()
    assert arr["output_len"].tolist() == np.asarray(spec["output_lens"])[order].tolist()
    tr = Trace.read(out / "trace.csv")
    assert tr.n_sequences == 3 and all(len(s) == 8 for s in tr.sequences())
    f = tr.frame
    tested = f[f["tested"] == 1]
    acc = sum(sum(r["per_step_accepted"]) for r in spec["request_spec"])
    assert int(tested["beta"].sum()) == acc  # every accepted draft is one β = 1 at a tested position
    assert res["alpha_tested"] == pytest.approx(acc / len(tested))
    assert tr.sequences()[0].tolist() == [1.0, 1, 1, 1, 1.0, 0, 1, 1]  # 3 accepted, bonus, rejected, 2 accepted
    assert "step_table" not in res and "speculated" in res["step_table_skipped"]


def test_import_vllm_writes_the_step_table_of_a_plain_run(tmp_path, capsys):
    out = tmp_path / "imp"
    assert main(["import-vllm", "--bench", str(FIX / "offline_cal_run.json"), "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    t = StepTable.read_csv(out / "step_table.csv")
    assert t.tokens.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24]
    assert res["table"] == {"range": [1, 24], "knots": 14, "gaps": []}
    assert "trace" not in res


def test_import_vllm_reads_a_server_log(tmp_path, capsys):
    out = tmp_path / "imp"
    assert main(["import-vllm", "--steps", str(FIX / "server_steps.log"), "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["steps"] == 9 and res["table"]["range"] == [4, 158]
    assert res["table"]["gaps"] == ["4-36", "36-83", "83-158"]


@pytest.mark.parametrize("args, msg", [
    ([], "nothing to import"),
    (["--bench", "missing.json"], "no such file"),
    (["--bench", str(FIX / "metrics_plain.txt")], "cannot read bench JSON"),
    (["--steps", str(FIX / "bench_detailed.json")], "no step lines"),
])
def test_import_vllm_refuses_bad_input_in_one_line(tmp_path, capsys, args, msg):
    assert main(["import-vllm", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err and "Traceback" not in err


def test_import_vllm_refuses_a_speculative_log_as_a_step_table(tmp_path, capsys):
    log = tmp_path / "spec.log"
    log.write_text("Iteration(3): 0 context requests, 0 context tokens, 2 generation requests, 8 generation "
                   "tokens, iteration elapsed time: 700.0 ms, CPU KV cache usage: 0.1%\n"
                   "Iteration(4): 1 context requests, 30 context tokens, 0 generation requests, 0 generation "
                   "tokens, iteration elapsed time: 500.0 ms, CPU KV cache usage: 0.1%\n")
    assert main(["import-vllm", "--steps", str(log), "--out", str(tmp_path / "o")]) == 2
    assert "verified drafts" in capsys.readouterr().err


def test_imported_files_drive_a_simulation(tmp_path, capsys):
    """import-vllm's outputs are specsim inputs as they stand: arrivals, trace and step table into simulate."""
    spec, cal = tmp_path / "spec", tmp_path / "cal"
    assert main(["import-vllm", "--bench", str(FIX / "offline_spec_run.json"), "--out", str(spec), "--json"]) == 0
    assert main(["import-vllm", "--bench", str(FIX / "offline_cal_run.json"), "--out", str(cal), "--json"]) == 0
    capsys.readouterr()
    table = str(cal / "step_table.csv")
    assert main(["simulate", "--hardware", "cpu-2core", "--target", "qwen2.5-coder-1.5b", "--draft",
                 "qwen2.5-coder-0.5b", "--engine-profile", "vllm-v1", "--arrivals", str(spec / "arrivals.csv"),
                 "--trace", str(spec / "trace.csv"), "--step-table-target", table, "--step-table-draft", table,
                 "--gamma", "3", "--max-num-seqs", "8", "--max-num-batched-tokens", "16", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["alpha_trace_raw"] == pytest.approx(0.875)  # the trace's mean β: what vLLM accepted, untested as 1
    assert row["baseline_steps"] > 0 and row["throughput_tok_s"] > 0


@pytest.mark.parametrize("step", [{"ctx_tokens": 3}, {"ctx_tokens": -1, "gen_tokens": 0, "time_s": 0.1},
                                  {"ctx_tokens": 1, "gen_tokens": 0, "time_s": "fast"},
                                  {"ctx_tokens": 1.5, "gen_tokens": 0, "time_s": 0.1}, "not a step"])
def test_a_malformed_step_is_one_line_naming_it(step):
    with pytest.raises(ConfigError, match=r"steps\[1\]"):
        sf.StepSamples.from_steps([{"ctx_tokens": 0, "gen_tokens": 1, "time_s": 0.2}, step], "run.json")


def test_the_guard_reads_odd_counters_without_a_traceback():
    run = _cal()
    run["config"]["k"], run["spec"]["drafts"] = "3", None  # not counts: the guard does not crash on them
    assert sf.check_no_speculation(run) is run
