"""`specsim plan`: the replicas it finds are the minimum (one fewer misses an SLO or does not keep up, in the
simulator), with and without speculation; a rerun resumes; $/Mtok matches price x time per token served by hand;
bad plans are one line, exit 2. (Keeping up: tests/test_plan_keepup.py.)"""

import json
import textwrap

import pytest
from conftest import cli_capsys

from specsim.profiles import loader
from specsim.simulate import run
from specsim.studies.plan import meets, run_plan
from specsim.studies.plan_keepup import run_point
from specsim.studies.plan_spec import BASELINE, Candidate, load_plan

PLAN = """
name = "t8b"
[fixed]
target = "llama-3.1-8b"
draft = "llama-3.2-1b"
alpha = 0.7
prompt_len = 161
output_len = 338
length_dist = "lognormal"
[[option]]
name = "1xH100"
hardware = "h100-sxm"
[search]
rates = [2, 32]
gammas = [3, 5]
max_replicas = 16
duration_s = 20
min_requests = 50
[slo]
ttft_p90_s = 0.5
tpot_p90_s = 0.012
"""


def _write(tmp_path, text=PLAN, name="plan.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan")
    path = _write(tmp)
    return load_plan(path), run_plan(path, tmp / "out", workers=1, progress=False), tmp


def _sim(plan, row, cand, replicas):
    """The plan's own point: the simulation row plus its keep-up figures."""
    o = next(o for o in plan.options if o.name == row["option"])
    return run_point(plan.config(o, row["tp"], row["rate"], cand, replicas))


def test_replicas_found_are_the_minimum(planned):
    plan, report, _ = planned
    by_label = {c.label: c for c in plan.candidates} | {"baseline": BASELINE}
    checked = 0
    for row in report.rows:
        for label, r in row["candidates"].items():
            cand = by_label[label]
            assert r is not None, row
            assert meets(_sim(plan, row, cand, r), plan.slo, cand)
            if r > 1:
                assert not meets(_sim(plan, row, cand, r - 1), plan.slo, cand)
                checked += 1
    assert checked >= 2  # at rate 32 one H100 is not enough, with or without speculation


def test_speculation_saves_a_replica_at_high_rate(planned):
    _, report, _ = planned
    hi = next(r for r in report.rows if r["rate"] == 32)
    assert hi["replicas_spec"] < hi["replicas_baseline"]
    assert hi["replicas_saved"] == hi["replicas_baseline"] - hi["replicas_spec"]
    assert hi["best"] in ("gamma=3", "gamma=5") and hi["best"] == hi["spec_candidate"] and hi["monotone"]
    assert hi["best_why"].startswith(hi["best"]) and f"plain decoding needs {hi['replicas_baseline']}" in hi["best_why"]
    assert "tpot_p90_s" in hi["baseline_missed_at"]
    # the closed form beside the simulated figures, each speedup under its own name (no bare 'speedup')
    assert hi["speedup_eq5"] > 1 and hi["speedup_latency"] > 1 and hi["speedup_walltime"] > 0
    assert "speedup" not in hi


def test_usd_and_energy_per_token_by_hand(planned):
    """The planner's figures bill every chip for the hour per token served — for an answer, whose replicas keep
    up, the offered token rate; the run's own figures bill the makespan; J/token adds the idle floor over the hour
    to the simulated dynamic energy."""
    plan, report, _ = planned
    row = report.rows[-1]
    r = row["replicas_baseline"]
    sim = _sim(plan, row, BASELINE, r)
    hw = loader.hardware("h100-sxm")
    tokens, requests = sim["output_tokens"], sim["requests"]
    token_rate = row["rate"] * tokens / requests
    assert sim["baseline_served_ratio"] > 0.8 and row["served_tok_s_baseline"] == sim["baseline_served_tok_s"]
    assert row["usd_per_mtok_baseline"] == pytest.approx(r * hw.price_usd_per_hour / 3600 / token_rate * 1e6,
                                                         rel=1e-12)
    usd_run = r * hw.price_usd_per_hour * sim["baseline_walltime_s"] / 3600
    assert row["usd_per_mtok_sim_baseline"] == pytest.approx(usd_run / tokens * 1e6, rel=1e-12)
    dynamic = sim["baseline_energy_j_per_token"] * tokens - hw.idle_w * r * sim["baseline_walltime_s"]
    assert dynamic > 0
    assert row["energy_j_per_token_baseline"] == pytest.approx(dynamic / tokens + hw.idle_w * r / token_rate,
                                                               rel=1e-9)


def test_rerun_resumes_without_recomputing(planned):
    plan, report, tmp = planned
    parts = sorted(p.name for p in (tmp / "out" / "rounds").rglob("part-*.parquet"))
    again = run_plan(plan, tmp / "out", workers=1, progress=False)
    assert again.rows == report.rows and again.rounds == report.rounds
    assert sorted(p.name for p in (tmp / "out" / "rounds").rglob("part-*.parquet")) == parts


def test_cli_writes_table_csv_and_plot(planned, capsys):
    _, report, tmp = planned
    code, out, err = cli_capsys(capsys, "plan", tmp / "plan.toml", "--out", tmp / "out", "--workers", "1", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["rows"] == json.loads(json.dumps(report.rows))
    assert (tmp / "out" / "plan.csv").stat().st_size > 0 and (tmp / "out" / "plan.png").stat().st_size > 0


def test_another_plan_in_the_same_directory_is_refused(planned, capsys):
    _, _, tmp = planned
    other = _write(tmp, PLAN.replace("tpot_p90_s = 0.012", "tpot_p90_s = 0.02"), "other.toml")
    code, _, err = cli_capsys(capsys, "plan", other, "--out", tmp / "out")
    assert code == 2 and "holds another plan" in err and len(err.strip().splitlines()) == 1


def test_unreachable_slo_is_reported_not_guessed(tmp_path):
    p = _write(tmp_path, PLAN.replace("tpot_p90_s = 0.012", "tpot_p90_s = 0.001").replace("max_replicas = 16",
                                                                                        "max_replicas = 2"))
    report = run_plan(p, tmp_path / "out", workers=1, progress=False)
    for row in report.rows:
        assert row["replicas_spec"] is None and row["replicas_baseline"] is None
        assert "max_replicas = 2" in row["why_not"]


def test_a_setup_that_does_not_fit_says_so(tmp_path):
    p = _write(tmp_path, PLAN.replace('"llama-3.1-8b"', '"llama-3.1-70b"').replace('"h100-sxm"', '"l4"')
               .replace("rates = [2, 32]", "rates = [2]"))
    report = run_plan(p, tmp_path / "out", workers=1, progress=False)
    assert report.rows[0]["replicas_spec"] is None and "does not fit" in report.rows[0]["why_not"]


@pytest.mark.parametrize("edit, field", [
    (("[search]", "[search]\nbogus = 1"), "search.bogus"),
    (("alpha = 0.7", "alpha = 0.7\nrate = 4"), "fixed.rate"),
    (("ttft_p90_s = 0.5", "ttft_p95_s = 0.5"), "slo.ttft_p95_s"),
    (("ttft_p90_s = 0.5", "ttft_p90_s = -1"), "slo.ttft_p90_s"),
    (("gammas = [3, 5]", "gammas = [3, 0]"), "search.gammas"),
    (("rates = [2, 32]", "rates = [32, 2]"), "search.rates"),
    (("rates = [2, 32]", 'rates = [2, "8"]'), "search.rates"),
    (('hardware = "h100-sxm"', 'hardware = "h100-sxm"\ntp = 3'), "option[0].tp"),
    (('hardware = "h100-sxm"', 'hardware = "h100-sxmm"'), "option[0].hardware"),
    (("alpha = 0.7", "alpha = 1.5"), "fixed.alpha"),
    (("max_replicas = 16", "max_replicas = 0"), "search.max_replicas"),
    (("duration_s = 20", "duration_s = 1e7"), "search.duration_s"),
])
def test_bad_plans_exit_2_naming_the_field(tmp_path, capsys, edit, field):
    p = _write(tmp_path, PLAN.replace(*edit))
    code, out, err = cli_capsys(capsys, "plan", p, "--out", tmp_path / "out")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and field in err and str(p) in err, err
    assert not (tmp_path / "out").exists()


def test_the_baseline_probe_is_the_first_candidates_run(planned):
    """One simulation serves the baseline and the first candidate at the same replica count; a missing or NaN
    percentile (nothing finished) never meets an objective."""
    plan, _, _ = planned
    o = plan.options[0]
    assert plan.config(o, 1, 2.0, BASELINE, 3) == plan.config(o, 1, 2.0, plan.candidates[0], 3)
    assert plan.config(o, 1, 2.0, BASELINE, 3).workload.requests == 50  # max(min_requests, rate x duration)
    assert plan.config(o, 1, 32.0, BASELINE, 3).workload.requests == 640
    assert meets({"baseline_ttft_p90_s": 0.1, "baseline_tpot_p90_s": 0.01}, plan.slo, BASELINE)
    assert not meets({"ttft_p90_s": 0.1, "tpot_p90_s": 0.013}, plan.slo, Candidate("fixed", 3))
    assert not meets({"ttft_p90_s": None, "tpot_p90_s": 0.01}, plan.slo, Candidate("fixed", 3))
    assert not meets({"ttft_p90_s": float("nan"), "tpot_p90_s": 0.01}, plan.slo, Candidate("fixed", 3))


def test_several_drafts_are_candidates(tmp_path):
    """search.drafts tries every draft with every γ; the plan's best is the fewest replicas among them."""
    p = _write(tmp_path, PLAN.replace("gammas = [3, 5]", 'gammas = [3]\ndrafts = ["llama-3.2-1b:0.7", '
                                      '"llama-3.2-3b:0.8"]').replace("rates = [2, 32]", "rates = [32]"))
    plan = load_plan(p)
    assert [c.label for c in plan.candidates] == ["llama-3.2-1b:0.7 gamma=3", "llama-3.2-3b:0.8 gamma=3"]
    cfg = plan.config(plan.options[0], 1, 32.0, plan.candidates[1], 2)
    assert cfg.deployment.draft == "llama-3.2-3b" and cfg.acceptance.alpha == 0.8
    row = run_plan(p, tmp_path / "out", workers=1, progress=False).rows[0]
    assert set(row["candidates"]) == {"baseline", "llama-3.2-1b:0.7 gamma=3", "llama-3.2-3b:0.8 gamma=3"}
    best = min(v for k, v in row["candidates"].items() if k != "baseline")
    assert row["replicas_spec"] == best


@pytest.mark.parametrize("drafts", ['["llama-3.2-1b"]', '["llama-3.2-1b:1.5"]', '[]', '"llama-3.2-1b:0.7"'])
def test_bad_drafts_exit_2(tmp_path, capsys, drafts):
    p = _write(tmp_path, PLAN.replace("gammas = [3, 5]", f"gammas = [3]\ndrafts = {drafts}"))
    code, _, err = cli_capsys(capsys, "plan", p, "--out", tmp_path / "out")
    assert code == 2 and "search.drafts" in err and len(err.strip().splitlines()) == 1, err


def test_a_replayed_arrivals_csv_replaces_the_rates(tmp_path, capsys):
    """With fixed.arrivals_csv the log sets the load: one row per option, its rate the log's requests / span."""
    import numpy as np

    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1 / 24, 300))
    lines = ["arrival_s,prompt_len,output_len"] + [f"{a:.6f},{rng.integers(50, 300)},{rng.integers(50, 500)}"
                                                   for a in arrivals]
    (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
    text = PLAN.replace("rates = [2, 32]\n", "").replace('length_dist = "lognormal"', 'arrivals_csv = "log.csv"')
    text = text.replace("prompt_len = 161\noutput_len = 338\n", "")
    report = run_plan(_write(tmp_path, text), tmp_path / "out", workers=1, progress=False)
    (row,) = report.rows
    assert row["replicas_baseline"] >= row["replicas_spec"] >= 1
    assert 15 < row["rate"] < 30  # 300 requests over the log's span at ~24 req/s
    p = _write(tmp_path, text.replace("[search]", "[search]\nrates = [4]"), "both.toml")
    code, _, err = cli_capsys(capsys, "plan", p, "--out", tmp_path / "out2")
    assert code == 2 and "search.rates" in err


def test_a_plan_runs_on_a_dask_cluster_with_the_local_answer(planned, tmp_path):
    """Every round is a sweep, so --scheduler sends its points to Dask; the answer is the local one."""
    distributed = pytest.importorskip("distributed")
    plan, report, _ = planned
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
        remote = run_plan(plan, tmp_path / "dask", scheduler=cluster.scheduler_address, progress=False)
    assert remote.rows == report.rows and remote.rounds == report.rounds


def test_a_draft_that_does_not_fit_leaves_the_baseline_answer_intact(tmp_path):
    """Plain decoding does not depend on the draft: when the first candidate's run cannot be made (its draft does
    not fit beside the target), the baseline is read from a weightless n-gram run, and only speculation says
    'does not fit'."""
    text = PLAN.replace('"llama-3.1-8b"', '"llama-3.1-70b"').replace('draft = "llama-3.2-1b"',
                                                                     'draft = "llama-3.1-70b"')
    text = text.replace('hardware = "h100-sxm"', 'hardware = "h200"\ntp = 2').replace("rates = [2, 32]", "rates = [2]")
    text = text.replace("tpot_p90_s = 0.012", "tpot_p90_s = 0.1")
    report = run_plan(_write(tmp_path, text), tmp_path / "out", workers=1, progress=False)
    (row,) = report.rows
    assert row["replicas_baseline"] == 1 and row["why_not_baseline"] is None
    assert row["replicas_spec"] is None and "does not fit" in row["why_not"]
    plan = load_plan(tmp_path / "plan.toml")
    direct = run(plan.config(plan.options[0], 2, 2.0, BASELINE, 1, fallback=True))
    assert row["tpot_p90_s_baseline"] == direct["baseline_tpot_p90_s"]


def test_the_fallback_run_has_the_same_baseline(planned):
    """What the fallback rests on: the paired baseline of an n-gram run equals the draft-model run's, key by key."""
    plan, _, _ = planned
    o = plan.options[0]
    a = run(plan.config(o, 1, 32.0, BASELINE, 2))
    b = run(plan.config(o, 1, 32.0, BASELINE, 2, fallback=True))
    keys = [k for k in a if k.startswith("baseline_")]
    assert len(keys) > 20 and {k: a[k] for k in keys} == {k: b[k] for k in keys}


def test_a_warm_up_leaves_the_empty_start_out_of_the_slo(tmp_path, capsys):
    """search.warmup_s sets every point's slo_warmup_s: the percentiles cover requests arriving after it only (a
    run starts from an empty engine, whose first requests see no queue); warm-up >= duration is refused."""
    p = _write(tmp_path, PLAN.replace("min_requests = 50", "min_requests = 50\nwarmup_s = 5"))
    plan = load_plan(p)
    cfg = plan.config(plan.options[0], 1, 32.0, plan.candidates[0], 1)
    assert cfg.slo.slo_warmup_s == 5.0
    full = run(cfg.replace(slo_warmup_s=0.0))
    steady = run(cfg)
    assert steady["walltime_s"] == full["walltime_s"]  # the same run, measured on fewer requests
    assert steady["ttft_p90_s"] >= full["ttft_p90_s"]  # overloaded at one replica: the queue only grows
    bad = _write(tmp_path, PLAN.replace("min_requests = 50", "min_requests = 50\nwarmup_s = 20"), "bad.toml")
    code, _, err = cli_capsys(capsys, "plan", bad, "--out", tmp_path / "o")
    assert code == 2 and "search.warmup_s" in err
    given = _write(tmp_path, PLAN.replace("alpha = 0.7", "alpha = 0.7\nslo_warmup_s = 3"), "given.toml")
    code, _, err = cli_capsys(capsys, "plan", given, "--out", tmp_path / "o2")
    assert code == 2 and "fixed.slo_warmup_s" in err


def test_best_speculative_candidate_at_equal_replicas_is_the_fastest(planned):
    """Answers with the same replicas bill the same chips for the same tokens (a tie on $/Mtok): the speculative
    one reported is the one cutting the mean latency most, and plain decoding is `best` unless it needs more."""
    plan, report, _ = planned
    by_label = {c.label: c for c in plan.candidates}
    ties = 0
    for row in report.rows:
        same = [k for k, v in row["candidates"].items() if k != "baseline" and v == row["replicas_spec"]]
        lat = {k: _sim(plan, row, by_label[k], row["replicas_spec"])["speedup_latency"] for k in same}
        assert lat[row["spec_candidate"]] == max(lat.values())
        ties += len(same) > 1
        if row["replicas_baseline"] == row["replicas_spec"]:
            assert row["best"] == "plain decoding" and row["usd_per_mtok_baseline"] == row["usd_per_mtok_spec"]
    assert ties >= 1
