"""Validation (issue 5, item 6) and the measured cost mode.

- At temperature 0 a trace the executor recorded, replayed through the SimPy engine, reproduces the executor's
  accepted counts step for step (tiny random-init pair built here; β ∈ {0, 1}, so the replay is deterministic).
- `MeasuredCosts` is a drop-in for `CostModel` in the engine: a table sampled from a cost model gives the same
  simulated walltimes; interpolation and extrapolation behave; bad tables are one-line ConfigErrors.
- `validate_pair` end to end on the tiny pair (shape of its report), and the real-weights run (marked `weights`).
"""

from __future__ import annotations


import numpy as np
import pytest

from specsim import profiles as prof
from specsim.cost.roofline import CostModel
from specsim.errors import ConfigError
from specsim.cost.measured import MeasuredCosts, PassGrid, write_csv

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specsim.executor.record import record_trace
from specsim.executor.sampling import SamplingConfig
from specsim.executor.speculative import PlainDecoder, SpeculativeDecoder
from specsim.executor.validate import (MODES, grid_pass_times, predict_gammas, predict_replay, replay_matches,
                                      shifted_trace, validate_pair)

from tiny_models import tiny_pair as _tiny_pair  # noqa: E402  (tests/ is on sys.path)

GREEDY = SamplingConfig(temperature=0.0)
V = 48


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):  # conftest's fixture, applied to every test here
    yield


def tiny_pair(seed: int = 0, noise: float = 0.35, scale: float = 16.0):
    return _tiny_pair(seed, noise, scale, vocab=V)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


def _prompts(n: int, seed: int = 1):
    g = np.random.default_rng(seed)
    return [g.integers(0, V, size=int(g.integers(3, 12))).tolist() for _ in range(n)]


def _flat_costs(t_s: float = 1.0):
    rows = [{"positions": p, "context": c, "time_s": t_s * (1 + 0.1 * (p - 1))} for p in (1, 8) for c in (0, 64)]
    return MeasuredCosts(rows)


# --- item 6: replay reproduces the executor's accepted counts step for step ---------------------------------
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_replay_reproduces_executor_accepts_step_for_step(pair, gamma):
    target, draft = pair
    prompts, n_new = _prompts(6), 20
    dec = SpeculativeDecoder(target, draft, gamma, GREEDY, clip_gamma=False, timing=False)
    runs = [dec.generate(p, n_new) for p in prompts]
    executor_accepts = [r.accepted for r in runs]
    trace = record_trace(target, draft, prompts, n_new + gamma, GREEDY)
    assert set(np.unique(trace.beta)) <= {0.0, 1.0}
    assert 0.1 < trace.alpha < 0.95, "the pair must accept some drafts and reject others, or the test is vacuous"
    pred = predict_replay(trace, [len(p) for p in prompts], n_new, gamma, _flat_costs(), _flat_costs(0.1))
    assert pred["accepted"] == executor_accepts
    m = replay_matches(executor_accepts, pred["accepted"])
    assert m["all_identical"] and m["steps_agreeing"] == m["steps"] == pred["target_runs"]
    # the counts vary step to step (not all 0 / all γ), so equality is informative
    flat = [a for acc in executor_accepts for a in acc]
    assert min(flat) == 0 and max(flat) >= 1


def test_replay_detects_a_wrong_trace(pair):
    """The comparison can fail: flipping one β that a step reads changes that step's accepted count."""
    target, draft = pair
    prompts, n_new, gamma = _prompts(3), 16, 3
    dec = SpeculativeDecoder(target, draft, gamma, GREEDY, clip_gamma=False, timing=False)
    executor_accepts = [dec.generate(p, n_new).accepted for p in prompts]
    trace = record_trace(target, draft, prompts, n_new + gamma, GREEDY)
    beta = [s.copy() for s in trace.sequences()]
    beta[0][0] = 1.0 - beta[0][0]  # position 0 is drafted by the first step of prompt 0
    from specsim.traces.format import Trace
    bad = Trace.from_sequences(beta, trace.metadata)
    pred = predict_replay(bad, [len(p) for p in prompts], n_new, gamma, _flat_costs(), _flat_costs(0.1))
    assert not replay_matches(executor_accepts, pred["accepted"])["all_identical"]


def test_shifted_trace_puts_a_dummy_in_front(pair):
    target, draft = pair
    trace = record_trace(target, draft, _prompts(2), 5, GREEDY)
    sh = shifted_trace(trace)
    for a, b in zip(trace.sequences(), sh.sequences()):
        assert len(b) == len(a) + 1 and b[0] == 0.0 and np.array_equal(b[1:], a)


def test_plain_replay_walltime_is_prefill_plus_steps():
    """Baseline: request i costs prefill(len-1) + N steps at contexts len-1 ... len-2+N (the executor's passes)."""
    rows = [{"positions": p, "context": c, "time_s": 0.01 + 0.001 * p + 1e-5 * c} for p in (1, 4) for c in (0, 128)]
    pre = [{"positions": n, "time_s": 0.5 + n * 0.01} for n in (4, 9)]
    mc = MeasuredCosts(rows, prefill_rows=pre)
    from specsim.traces.format import Trace
    lens, n_new = [5, 10], 6
    trace = Trace.from_sequences([np.zeros(n_new + 4), np.zeros(n_new + 4)])
    pred = predict_replay(trace, lens, n_new, 3, mc, _flat_costs(0.001))
    want = sum(0.5 + (n - 1) * 0.01 + sum(0.011 + 1e-5 * (n - 1 + e) for e in range(n_new)) for n in lens)
    assert pred["plain_walltime_s"] == pytest.approx(want, rel=1e-9)


# --- measured mode ---------------------------------------------------------------------------------------------
def test_measured_table_sampled_from_a_cost_model_reproduces_its_simulation():
    hw = prof.hardware("h200")
    tm, dm = prof.model("llama-3.1-8b"), prof.model("llama-3.2-1b")
    st = prof.stack("pytorch-eager")
    ct, cd = CostModel(tm, hw, st), CostModel(dm, hw, st)
    gamma, lens, n_new = 4, [33, 65], 40
    ctx = list(range(0, 160, 16))  # the engine interpolates the cost model on 16-token buckets too

    def table(cm, pos):
        return [{"positions": p, "context": c, "time_s": cm.pass_time_s(1, p, c)} for p in pos for c in ctx]
    mt = MeasuredCosts(table(ct, (1, gamma + 1)), tm, hw, [{"positions": n - 1, "time_s": ct.prefill_cost(1, n - 1)
                                                             .time_s} for n in lens])
    # the draft's table has P = 2 too: the replay prices the draft's catch-up pass after a clean sweep
    md = MeasuredCosts(table(cd, (1, 2)), dm, hw, [{"positions": n - 1, "time_s": cd.prefill_cost(1, n - 1).time_s}
                                                 for n in lens])
    from specsim.traces.format import Trace
    g = np.random.default_rng(0)
    trace = Trace.from_sequences([(g.random(n_new + gamma) < 0.7).astype(float) for _ in lens])
    a = predict_replay(trace, lens, n_new, gamma, ct, cd)
    b = predict_replay(trace, lens, n_new, gamma, mt, md)
    for k in ("spec_walltime_s", "plain_walltime_s", "speedup", "verify_pass_s", "draft_step_s"):
        assert b[k] == pytest.approx(a[k], rel=1e-9), k
    assert a["accepted"] == b["accepted"]
    assert mt.pass_cost(1, 1, 40).bytes == ct.pass_cost(1, 1, 40).bytes  # MBU inputs from the profile's roofline


def test_gamma_sweep_is_the_replay_at_each_gamma_with_the_closed_form_beside_it():
    """predict_gammas(γ) is predict_replay at that γ; the closed form is eq. (5) at the trace's α and c = draft /
    target one-token step; verify_over_plain reads the target table at γ + 1 positions."""
    from specsim import theory
    from specsim.traces.format import Trace
    rows = [{"positions": p, "context": c, "time_s": 0.1 * (1 + (p >= 4))} for p in (1, 2, 3, 4, 8) for c in (0, 64)]
    tc, dc = MeasuredCosts(rows), _flat_costs(0.01)
    g = np.random.default_rng(3)
    lens, n_new = [6, 9, 4], 30
    trace = Trace.from_sequences([(g.random(n_new + 6) < 0.8).astype(float) for _ in lens])
    sweep = predict_gammas(trace, lens, n_new, (1, 2, 3, 4), tc, dc)
    assert [r["gamma"] for r in sweep] == [1, 2, 3, 4]
    for r in sweep:
        one = predict_replay(trace, lens, n_new, r["gamma"], tc, dc)
        assert r["speedup"] == one["speedup"] and r["tokens_per_target_run"] == one["tokens_per_target_run"]
        assert r["c"] == pytest.approx(0.1)  # 0.01 / 0.1
        assert r["closed_form_speedup"] == pytest.approx(float(theory.speedup(trace.alpha, r["gamma"], 0.1)))
        assert r["verify_over_plain"] == pytest.approx(2.0 if r["gamma"] >= 3 else 1.0)
    # the table's jump at 4 positions: γ = 2 beats γ = 3 in the replay, while the closed form (verification = one
    # step) keeps rising
    by = {r["gamma"]: r for r in sweep}
    assert by[2]["speedup"] > by[3]["speedup"] and by[3]["closed_form_speedup"] > by[2]["closed_form_speedup"]


def test_grid_interpolates_and_extrapolates_linearly():
    rows = [{"batch": b, "positions": p, "context": c, "time_s": 1 + 2 * b + 3 * p + 0.01 * c}
            for b in (1, 4) for p in (1, 2, 8) for c in (0, 100)]
    g = PassGrid.from_rows(rows)
    for b, p, c in [(2, 5, 50), (1, 1, 0), (8, 16, 300), (3, 1.5, 10)]:
        assert g.at(b, p, c) == pytest.approx(1 + 2 * b + 3 * p + 0.01 * c)
    one = PassGrid.from_rows([{"positions": 1, "time_s": 0.2}])
    assert one.at(7, 9, 1000) == 0.2  # one value per axis: constant


def test_measured_costs_refuses_bad_tables(tmp_path):
    with pytest.raises(ConfigError, match="full grid"):
        MeasuredCosts([{"positions": 1, "context": 0, "time_s": 1}, {"positions": 2, "context": 5, "time_s": 1}])
    with pytest.raises(ConfigError, match="bad row"):
        MeasuredCosts([{"positions": 1, "time_s": -1}])
    with pytest.raises(ConfigError, match="no rows"):
        MeasuredCosts([])
    with pytest.raises(ConfigError, match="file not found"):
        MeasuredCosts.read_csv(tmp_path / "nope.csv")


def test_measured_csv_round_trip(tmp_path):
    rows = [{"positions": p, "context": c, "time_s": 0.1 * p + 0.001 * c} for p in (1, 4) for c in (0, 64)]
    path = write_csv(tmp_path / "t.csv", rows, [{"positions": 30, "time_s": 2.5}])
    mc = MeasuredCosts.read_csv(path)
    assert mc.pass_time_s(1, 4, 32) == pytest.approx(0.432)
    assert mc.prefill_cost(1, 30).time_s == 2.5
    assert mc.model.architecture == "decoder" and mc.memory_bytes(1, 100) == 0.0


# --- the whole pipeline on the tiny pair ---------------------------------------------------------------------
def test_grid_pass_times_batches(pair):
    target, _ = pair
    rows = grid_pass_times(target, [1, 3], [0, 8], [1, 2], repeats=1, warmup=0)
    assert {(r["batch"], r["positions"], r["context"]) for r in rows} == {
        (b, p, c) for b in (1, 2) for p in (1, 3) for c in (0, 8)}
    assert all(r["time_s"] > 0 for r in rows)
    assert target.length(target.new_state()) == 0


def test_validate_pair_report(pair):
    target, draft = pair
    tiny = prof.ModelProfile(name="tiny", n_layers=2, d_model=32, d_ff=64, n_heads=4, n_kv_heads=2, head_dim=8,
                             vocab_size=V, dtype="fp32")
    res = validate_pair(target, draft, _prompts(3), hardware=prof.hardware("cpu-2core"), target_profile=tiny,
                        draft_profile=tiny, gamma=3, max_new_tokens=12, repeats=1, warmup=1, positions=(1, 4, 8),
                        grid_repeats=1, gammas=(1, 5), log=lambda *a: None)
    # the trace covers the longest γ predicted, not only the run's
    assert all(len(seq) >= 12 + 5 for seq in res["trace"].sequences())
    assert MODES == ("calibrated", "calibrated_multi_row", "calibrated_serial", "measured")
    assert res["calibration_serial"]["stack"]["overlap"] == "sum"
    assert res["calibration_multi_row"]["stack"]["overlap"] == "max"
    assert set(res["fits"]) == set(MODES[:-1])
    for mode in MODES:
        assert [r["gamma"] for r in res[mode]["gamma_sweep"]] == [1, 5]
        assert res[mode]["replay"]["all_identical"]
        cmp_ = res[mode]["compare"]
        assert cmp_["tokens_per_target_run"]["error_pct"] == pytest.approx(0.0, abs=1e-9)
        assert cmp_["speedup"]["predicted"] > 0 and cmp_["speedup"]["measured"] > 0
    assert res["calibration"]["holdout_error"]["n"] >= 1
    assert res["executor"]["accepted"] == res["measured"]["predicted_accepted"]
    assert res["executor"]["speedup"] == res["measured"]["compare"]["speedup"]["measured"]
    # the analysis half re-run on the saved (JSON) measurements and the trace gives the same predictions
    import json

    from specsim.executor.validate import analyze_pair
    saved = json.loads(json.dumps({k: res[k] for k in ("grid", "executor", "prompt_lens")}))
    again = analyze_pair(saved["grid"], saved["executor"], res["trace"], saved["prompt_lens"],
                         hardware=prof.hardware("cpu-2core"), target_profile=tiny, draft_profile=tiny, gamma=3,
                         max_new_tokens=12)
    for mode in MODES:
        assert again[mode]["predicted"] == res[mode]["predicted"], mode


@pytest.mark.weights
def test_real_pair_replay_matches_at_temperature_zero():
    """SmolLM2-135M + bigram draft: the replay of its own T=0 trace reproduces its accepted counts."""
    from specsim.executor.fetch import cached_model_dir
    from specsim.executor.record import load_prompts
    from specsim.executor.sources import BigramDraft, hf_source
    d = cached_model_dir("smollm2-135m-instruct")
    if d is None:
        pytest.skip("SmolLM2-135M not fetched (specsim models fetch smollm2-135m-instruct)")
    from pathlib import Path
    target = hf_source(d, dtype="fp32")
    prompts = load_prompts(Path(__file__).resolve().parent.parent / "experiments/prompts/code_prompts.txt",
                           target.tokenizer, target.vocab_size, chat=True, limit=2)
    draft = BigramDraft(prompts, target.vocab_size)
    gamma, n_new = 3, 16
    dec = SpeculativeDecoder(target, draft, gamma, GREEDY, clip_gamma=False, timing=False)
    acc = [dec.generate(p, n_new).accepted for p in prompts]
    trace = record_trace(target, draft, prompts, n_new + gamma, GREEDY)
    pred = predict_replay(trace, [len(p) for p in prompts], n_new, gamma, _flat_costs(), _flat_costs(0.1))
    assert replay_matches(acc, pred["accepted"])["all_identical"]
    assert PlainDecoder(target, GREEDY).generate(prompts[0], 4).tokens  # the plain path runs on real weights


def test_cli_validate_json(tmp_path, capsys):
    """`specsim validate` on a random-weight 1-layer target with a bigram draft prints one JSON object."""
    import json

    from specsim.cli import main
    prompts = tmp_path / "p.txt"
    prompts.write_text("def add(a, b):\nclass Stack:\n")
    trace = tmp_path / "t.csv"
    rc = main(["validate", "--target", "profile:llama-68m:layers=1", "--draft", "bigram", "--prompts", str(prompts),
               "--gamma", "2", "--max-new-tokens", "5", "--repeats", "1", "--trace-out", str(trace),
               "--predict-gammas", "1-3", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert res["measured"]["replay"]["all_identical"] and res["calibrated"]["replay"]["all_identical"]
    assert set(res["calibrated"]["compare"]) >= {"tokens_per_target_run", "draft_step_s", "verify_pass_s",
                                                 "speedup"}
    assert res["trace_out"] == str(trace) and trace.is_file()
    assert res["calibration"]["holdout_error"]["n"] >= 1
    assert [r["gamma"] for r in res["measured"]["gamma_sweep"]] == [1, 2, 3]
    at_run = res["measured"]["gamma_sweep"][1]
    assert at_run["speedup"] == res["measured"]["compare"]["speedup"]["predicted"]


def test_cli_predict_gammas_parsing():
    from specsim.cli.validate import _gamma_list
    assert _gamma_list("") == [] and _gamma_list("1-3") == [1, 2, 3] and _gamma_list("4, 1,2-3,2") == [1, 2, 3, 4]
    for bad in ("0-2", "a", "1-65", "2-x"):
        with pytest.raises(ConfigError, match="--predict-gammas"):
            _gamma_list(bad)


def test_cli_validate_bad_input_is_one_line(tmp_path, capsys):
    from specsim.cli import main
    rc = main(["validate", "--target", "profile:llama-68m:layers=1", "--draft", "bigram", "--prompts",
               str(tmp_path / "missing.txt")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "prompts file not found" in err[0]


# --- experiments/gpu_validate.py: the parts that run without a GPU --------------------------------------------
def _gpu_script():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "experiments" / "gpu_validate.py"
    spec = importlib.util.spec_from_file_location("gpu_validate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_validate_fails_fast_without_cuda(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(SystemExit) as e:
        _gpu_script().main(["--out", "/nonexistent/never-written"])
    assert e.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_gpu_validate_dry_run_on_cpu(tmp_path):
    import csv
    mod = _gpu_script()
    assert mod.main(["--device", "cpu", "--layers", "1", "--dry-run", "--target", "llama-68m", "--draft",
                     "llama-68m", "--out", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {"gpu_pass_times.csv", "gpu_e2e.csv", "gpu_validate.md", "gpu_validate.json",
                     "h200-fitted-stack.toml", "h200-fitted-multi-row-stack.toml"}
    passes = list(csv.DictReader((tmp_path / "gpu_pass_times.csv").open()))
    assert {(r["role"], r["batch"]) for r in passes} == {(r, b) for r in ("target", "draft") for b in ("1", "2")}
    e2e = list(csv.DictReader((tmp_path / "gpu_e2e.csv").open()))
    assert {r["mode"] for r in e2e} == {"ideal", "calibrated", "fitted", "fitted_multi_row", "measured"}
    assert all(r["replay_identical"] == "True" for r in e2e)  # the replayed loop accepts what the engine does
    assert mod.leading_accepts([1, 1, 0, 1], 0, 4) == 2 and mod.leading_accepts([1, 1, 1], 1, 4) == 2


def test_committed_validation_report_is_what_its_json_renders():
    """experiments/results/validate_cpu.md is rendered from validate_cpu.json (the figures the README quotes): the
    report, its four cost modes and their summary lines come from the saved run, not from hand edits."""
    import importlib.util
    import json
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("validate_cpu", root / "experiments" / "validate_cpu.py")
    vc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vc)
    saved = json.loads((root / "experiments/results/validate_cpu.json").read_text())
    rows = [r for key, res in saved["results"].items() for r in vc.rows_of(key, res)]
    md = vc.markdown(saved["results"], rows, saved["started"]) + "\n![predicted speedup by γ](validate_cpu_gamma.png)\n"
    assert md == (root / "experiments/results/validate_cpu.md").read_text()
    summary = md.split("## Summary")[1]
    assert all(f"- {m}: median |error|" in summary for m in MODES)
    for res in saved["results"].values():
        assert res["measured"]["replay"]["all_identical"] and res["machine"]
