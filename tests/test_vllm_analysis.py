"""The vLLM comparison predicts each run from what it recorded (experiments/vllm_analyze.py, vllm_predict.py): its k,
knobs, requests, loop and arrival pattern, and vLLM's own per-request acceptance replayed step by step."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from specsim.cost.ragged import StepTable
from specsim.validation import vllm_runs as vrun

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
vp = pytest.importorskip("vllm_predict")
va = pytest.importorskip("vllm_analyze")
vs = pytest.importorskip("vllm_scores")
vh = pytest.importorskip("vllm_host")
FIX = Path(__file__).parent / "fixtures" / "vllm"
FLAT = StepTable([1, 10_000], [0.1, 0.1])  # every step 0.1 s: step counts read straight off the times


def _spec() -> dict:
    return json.loads((FIX / "offline_spec_run.json").read_text())


def _plain(run: dict) -> dict:
    p = copy.deepcopy(run)
    p["config"].update(method=None, k=0)
    p.pop("request_spec")
    p["mode"], p["spec"] = "plain", {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_pos": []}
    return p


def test_replay_verifies_exactly_what_vllm_verified():
    run = _spec()
    run["config"].update(concurrency=1, max_num_batched_tokens=64)
    cfg = vrun.run_config(run)
    spec = vrun.request_spec(run)
    res = vp.predict(run, cfg, FLAT, FLAT, blocks=64)
    verify = sum(len(vrun.step_schedule(d, a, 8)) for d, a in spec)
    assert res["steps"] == 3 + verify  # one prefill step and the recorded verification steps per request
    plain = vp.predict(_plain(run), vrun.run_config(_plain(run)), FLAT, None, blocks=64)
    assert plain["steps"] == 3 * 8  # plain decoding: one token a step


def test_k_and_the_token_budget_come_from_the_run():
    run = _spec()
    run["config"].update(concurrency=1, max_num_batched_tokens=4, k=5)
    run["request_spec"] = [{"per_step_drafted": [5], "per_step_accepted": [5]},
                           {"per_step_drafted": [5, 5], "per_step_accepted": [5, 0]},
                           {"per_step_drafted": [5], "per_step_accepted": [5]}]
    for i in (0, 2):
        run["request_spec"][i] = {"per_step_drafted": [5, 5], "per_step_accepted": [5, 0]}
    cfg = vrun.run_config(run)
    assert (cfg["k"], cfg["max_num_batched_tokens"]) == (5, 4)
    res = vp.predict(run, cfg, FLAT, FLAT, blocks=64)
    chunks = sum(-(-p // 4) for p in run["input_lens"])  # prompts 12, 9, 15 in chunks of <= 4 tokens
    # each 6-token verification (1 + k = 5) is cut by the 4-token budget into two steps
    assert res["steps"] == chunks + 3 * 2 * 2


def test_offline_arrivals_join_one_step_late():
    """Closed loop at 2, three requests: the third is added when the first finishes; the in-process engine takes it
    one step later than the API server."""
    run = _plain(_spec())
    run["config"]["max_num_batched_tokens"] = 64
    run["output_lens"] = [2, 6, 2]
    off = vrun.run_config(run)
    run2 = copy.deepcopy(run)
    run2["config"]["arrival"] = "server"
    srv = vrun.run_config(run2)
    assert (off["join_lag_steps"], srv["join_lag_steps"]) == (1, 0)
    wl, _ = vp.workload(run, off)
    e_off = vp.ReplayEngine(wl, _vc(off), FLAT, None, None, k=0, blocks=64, lag=1)
    e_srv = vp.ReplayEngine(vp.workload(run2, srv)[0], _vc(srv), FLAT, None, None, k=0, blocks=64, lag=0)
    r_off, r_srv = e_off.run(), e_srv.run()
    assert r_off.admit_s[2] - r_srv.admit_s[2] == pytest.approx(0.1)  # one 0.1 s step later
    assert r_off.admit_s[:2].tolist() == r_srv.admit_s[:2].tolist() == [0.0, 0.0]  # an idle engine: no lag


def _vc(cfg):
    from specsim.engine.engine_profiles.vllm_scheduler import VllmV1Config
    return VllmV1Config(max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"],
                        block_size=cfg["block_size"])


def test_ngram_steps_without_a_match_verify_nothing():
    s = vrun.step_schedule([3, 3], [3, 0], 20)
    assert sum(a + 1 for _, a in s) == 19 and s.count((0, 0)) == 14
    assert s.index((3, 3)) == 5 and s.index((3, 0)) == 10  # spread evenly, not bunched at one end
    run = _spec()
    run["config"].update(method="ngram", concurrency=1, max_num_batched_tokens=64)
    run["request_spec"] = [{"per_step_drafted": [], "per_step_accepted": []}] * 2 + \
        [{"per_step_drafted": [3], "per_step_accepted": [0]}]
    cfg = vrun.run_config(run)
    spec = vp.predict(run, cfg, FLAT, None, blocks=64)
    plain = vp.predict(_plain(run), vrun.run_config(_plain(run)), FLAT, None, blocks=64)
    assert spec["steps"] == plain["steps"]  # no match but one rejected draft: one token a step, as plain
    assert spec["throughput"] < plain["throughput"]  # the host lookup is paid
    assert spec["throughput"] == pytest.approx(plain["throughput"], rel=1e-3)


def test_the_share_of_request_steps_that_proposed_drafts_is_counted_per_variant():
    run = _spec()
    run["config"].update(method="ngram", concurrency=1)
    run["cfg"] = vrun.run_config(run)
    run["request_spec"] = [{"per_step_drafted": [0, 3, 0, 0], "per_step_accepted": [0, 2, 0, 0]},
                           {"per_step_drafted": [3, 3], "per_step_accepted": [3, 0]}]
    plain = _plain(run)
    plain["cfg"] = vrun.run_config(plain)
    v = vrun.variant(run["cfg"])
    assert vs.proposed_share([run, plain], v) == pytest.approx(3 / 6)  # 3 of 6 request-steps drafted; plain not counted
    assert np.isnan(vs.proposed_share([plain], v))


def test_the_every_step_alike_baseline_is_scored_on_closed_loops_only():
    pts = [{"variant": "v", "loop": "closed", "x": x, "steps_ratio": f, "meas_speedup_throughput": m}
           for x, f, m in ((1, 1.2, 1.2), (2, 1.05, 1.1), (4, 1.03, 0.97), (8, 1.02, 0.96))]
    pts.append({"variant": "v", "loop": "poisson", "x": 0.1, "steps_ratio": 3.0, "meas_speedup_throughput": 1.0})
    b = vs.flat_baseline(pts)
    errs = sorted(abs(f / m - 1) for f, m in ((1.2, 1.2), (1.05, 1.1), (1.03, 0.97), (1.02, 0.96)))
    assert b["flat_max_abs_err_speedup_throughput"] == pytest.approx(errs[-1])  # the Poisson point is not scored
    assert b["flat_median_abs_err_speedup_throughput"] == pytest.approx((errs[1] + errs[2]) / 2)
    assert b["flat_break_even_closed"] == "none up to c8"  # equal step costs: fewer steps always pay
    assert vs.flat_baseline([p for p in pts if p["loop"] == "poisson"]) == {}


def test_break_even_by_concurrency_and_rate():
    pts = [{"variant": "v", "loop": "closed", "x": x, "s": s} for x, s in ((1, 1.5), (2, 1.1), (4, 0.9), (8, 0.8))]
    pts += [{"variant": "v", "loop": "poisson", "x": r, "s": 1.2} for r in (0.1, 0.3)]
    assert vs.break_even(pts, "v", "closed", "s") == "c4"
    assert vs.break_even(pts, "v", "poisson", "s") == "none up to r0.3"


def test_a_point_is_scored_both_unpaired_and_paired_by_repeat():
    """err_: the median prediction over the median measurement; paired_err_: the median over repeats of each
    repeat's prediction over its own measurement (each repeat is priced by its own block's tables)."""
    meas, pred = (1.0, 1.1, 1.5), (1.05, 1.6, 1.1)  # repeat by repeat: +5%, +45.5%, -26.7%
    rows = [{"variant": "v", "point": "c2", "loop": "closed", "x": 2.0, "k": 3, "repeat": i, "unmeasured_steps": 0,
             "priced_steps": 10} | {f"meas_{m}": a for m in vs.METRICS} | {f"pred_{m}": b for m in vs.METRICS}
            for i, (a, b) in enumerate(zip(meas, pred))]
    (p,) = vs.score_points(rows)
    for m in vs.METRICS:
        assert p[f"err_{m}"] == pytest.approx(1.1 / 1.1 - 1.0)  # medians 1.1 and 1.1: no error, unpaired
        assert p[f"paired_err_{m}"] == pytest.approx(0.05)  # the median of the three own errors (repeat 0's)
    rows[0]["pred_speedup_tpot"] = 1.3  # repeat 0 now +30%: errors +30%, +45.5%, -26.7%
    (p,) = vs.score_points(rows)
    assert p["paired_err_speedup_tpot"] == pytest.approx(0.30)
    assert p["err_speedup_tpot"] == pytest.approx(1.3 / 1.1 - 1.0)
    assert p["paired_err_speedup_throughput"] == pytest.approx(0.05)  # the other metrics untouched


def _chunks(cal: dict, sizes=(2, 3, 4, 5, 6, 8), scale: float = 1.0) -> list[tuple[str, dict]]:
    """One-request prefill-chunk runs beside a decode calibration run (as the block protocol measures: cal-chunkN),
    on the fixture's one-request line (0.20 s + 0.01 s per token): the request table's one-request family."""
    out = []
    for b in sizes:
        r = copy.deepcopy(cal)
        r["point"] = f"cal-chunk{b}"
        r["steps"] = [{"index": i, "ctx_requests": 1, "ctx_tokens": b, "gen_requests": 0, "gen_tokens": 0,
                       "time_s": scale * (0.2 + 0.01 * b), "kv_usage": 0.01, "kv_ctx_tokens": b * i} for i in range(3)]
        out.append((r["mode"], r))
    return out


def test_analyze_end_to_end_on_fixture_runs(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    cal = json.loads((FIX / "offline_cal_run.json").read_text())
    draft = copy.deepcopy(cal)
    draft["mode"] = "cal-draft"
    for s in draft["steps"]:
        s["time_s"] *= 0.4
    spec = _spec()
    for name, r in (("cal-target", cal), ("cal-draft", draft), ("plain", _plain(spec)), ("draft-k3", spec),
                    *_chunks(cal), *_chunks(draft)):
        (runs / f"{name}__{r['point']}__r0.json").write_text(json.dumps(r))
    res = va.analyze(tmp_path)
    assert set(res["variants"]) == {"draft_model-k3"}
    p = res["points"][0]
    assert (p["point"], p["loop"], p["x"], p["k"], p["repeats"]) == ("c2", "closed", 2.0, 3, 1)
    assert p["unmeasured_steps"] == 0 < p["priced_steps"] and p["extrapolated"] is False
    t = res["tables"]["target"]
    assert (t["one_request"] if "decode" in t else t)["range"] == [1, 24]
    sel = res["table_selection"]
    assert sel["chosen"] == min(sel["candidates"], key=lambda n: sel["candidates"][n]["score"])
    assert all(c["runs"] == 1 for c in sel["candidates"].values())  # the one plain run, never the speculative one
    assert "token_monotone" not in res and "pooled" in res  # no blocks: nothing block-matched to set beside
    for f in ("vllm_cpu.csv", "vllm_cpu.md", "vllm_cpu.png", "vllm_cpu_analysis.json", "step_table_target.csv",
              "table_selection.json"):
        assert (tmp_path / f).exists()
    assert "draft_model-k3" in (tmp_path / "vllm_cpu.md").read_text()
    shutil.rmtree(runs)


# --- the measurement harness (experiments/vllm_session.py) against a fake engine: CI never installs vLLM ---------

class _FakeScheduler:
    """vLLM V1's scheduler as the harness sees it: requests with num_computed_tokens / num_prompt_tokens, and
    schedule() -> num_scheduled_tokens, scheduled_spec_decode_tokens (chunked prefill under a token budget)."""

    def __init__(self, k):
        self.k, self.requests, self.max_num_scheduled_tokens = k, {}, 2048

    def schedule(self):
        from types import SimpleNamespace
        budget, sched, spec = self.max_num_scheduled_tokens, {}, {}
        for rid, r in self.requests.items():
            if budget <= 0:
                break
            if r.num_computed_tokens < r.num_prompt_tokens:
                n = min(r.num_prompt_tokens - r.num_computed_tokens, budget)
            else:
                n = 1 + self.k
                spec[rid] = [0] * self.k
            sched[rid] = n
            budget -= n
        return SimpleNamespace(num_scheduled_tokens=sched, scheduled_spec_decode_tokens=spec)


class _FakeEngine:
    ACCEPT = (3, 0, 2, 1)  # accepted drafts per decode step, cycled

    def __init__(self, k):
        self.scheduler = _FakeScheduler(k)
        self.k = k

    def add_request(self, rid, text, params):
        from types import SimpleNamespace
        self.scheduler.requests[rid] = SimpleNamespace(num_computed_tokens=0, num_prompt_tokens=len(text.split()),
                                                       tokens=[], max_tokens=params.max_tokens, steps=0)

    def has_unfinished_requests(self):
        return bool(self.scheduler.requests)

    def step(self):
        from types import SimpleNamespace
        out = self.scheduler.schedule()
        res = []
        for rid, n in out.num_scheduled_tokens.items():
            r = self.scheduler.requests[rid]
            if r.num_computed_tokens < r.num_prompt_tokens:
                r.num_computed_tokens += n
                new = 1 if r.num_computed_tokens == r.num_prompt_tokens else 0
            else:
                a = self.ACCEPT[r.steps % len(self.ACCEPT)] if self.k else 0
                r.steps += 1
                new = a + 1
                r.num_computed_tokens += new
            new = min(new, r.max_tokens - len(r.tokens))
            r.tokens += [7] * new
            if new:
                done = len(r.tokens) >= r.max_tokens
                res.append(SimpleNamespace(request_id=rid, outputs=[SimpleNamespace(token_ids=list(r.tokens))],
                                           prompt_token_ids=[0] * r.num_prompt_tokens, finished=done))
                if done:
                    del self.scheduler.requests[rid]
        return res


def _session(k):
    from types import SimpleNamespace
    vs = pytest.importorskip("vllm_session")

    class S(vs.Session):
        def __init__(self):  # no vLLM: the fake engine behind the harness's own hook
            self.spec, self.log, self.engine = {"k": k}, vs.StepLog(), _FakeEngine(k)
            self.rec = vs.Recorder(vs.find_scheduler(self.engine))
            self.nstep = self.points = 0

        def params(self, out_len):
            return SimpleNamespace(max_tokens=out_len)

    return vs, S()


PROMPTS = ["a b c d e f g h i j", "k l m n o p q", "r s t u v w x y z a b c"]


def test_harness_records_steps_and_acceptance_the_analysis_reads():
    vs, ses = _session(3)
    d = vs.run_point(ses, PROMPTS, {"point": "c2", "concurrency": 2, "requests": 3, "output_len": 12}, 0)
    assert d["output_lens"] == [12, 12, 12] and d["input_lens"] == [10, 7, 12]
    from specsim.validation import vllm_outputs as vr
    vr.summarize_requests(d)  # bench keys, physical
    spec = vrun.request_spec(d)
    assert spec[0][0][:3] == [3, 3, 3] and spec[0][1][:3] == [3, 0, 2]  # vLLM's accepted counts, step by step
    vr.check_counters(vs.counters(d, 3))
    st = d["steps"]
    assert st[0]["ctx_tokens"] == 17 and st[0]["gen_tokens"] == 0  # both prompts prefilled in the first step
    assert st[1]["gen_requests"] == 2 and st[1]["gen_tokens"] == 8 and st[1]["kv_ctx_tokens"] == 17
    assert st[1]["kv_attended_tokens"] == (4 * 10 + 10) + (4 * 7 + 10)  # 4 queries each over 10 / 7 cached + causal
    assert d["added_step"] == [0, 0, d["added_step"][2]] and d["added_step"][2] > 0
    assert d["first_scheduled_step"][2] == d["added_step"][2] + 1  # this fake engine takes it in the next step
    assert d["inflight_at_add"] == [0, 1, 1]  # the third joins while the second still runs
    assert vh.join_lag([d]) == {"busy_median": 0.0, "busy_n": 1, "at_start_median": 0.0, "at_start_n": 2}
    d["config"] = {"arrival": "offline", "concurrency": 2}
    assert (vrun.run_config(d)["join_lag_steps"], vrun.run_config(d)["join_lag_source"]) == (0, "measured")
    d["first_scheduled_step"][2] += 1  # an engine that takes it one step late: the run says so, the model follows
    assert vrun.run_config(d)["join_lag_steps"] == 1


def test_harness_chunk_sweep_lowers_the_budget_and_records_a_plain_run():
    vs, ses = _session(0)
    pt = {"point": "cal-chunk4", "concurrency": 1, "requests": 1, "output_len": 2, "budget": 4, "concat": 2}
    d = vs.run_point(ses, PROMPTS, pt, 0)
    toks = [s["ctx_tokens"] + s["gen_tokens"] for s in d["steps"]]
    assert toks == [4, 4, 4, 4, 1, 1]  # a 17-token prompt in chunks of 4 (the last chunk emits), then a decode
    assert ses.engine.scheduler.max_num_scheduled_tokens == 2048  # restored after the sweep
    assert "request_spec" not in d
    from specsim.validation import step_fit as sf
    sf.check_no_speculation(dict(d, config={"k": 0}))


def test_harness_poisson_point_waits_for_arrivals():
    vs, ses = _session(0)
    d = vs.run_point(ses, PROMPTS, {"point": "r50", "rate": 50.0, "requests": 3, "output_len": 3}, 1)
    assert d["start_times"][0] == 0.0 and d["start_times"] == sorted(d["start_times"])
    assert all(t >= 0 for t in d["ttfts"]) and d["output_lens"] == [3, 3, 3]
    from specsim.validation import vllm_outputs as vr
    s = vr.summarize_requests(d)  # TTFT and latency from the Poisson arrival, not from when the harness added it
    assert (s["e2e_s"] >= s["ttft_s"]).all()


def test_analyze_flags_a_point_predicted_outside_the_calibration(tmp_path):
    """Calibration of decodes of 1-3 tokens only (as the first EPYC data): the k = 3 verifications (4-8 tokens) and
    the prefills leave the measured range, and the point says so."""
    runs = tmp_path / "runs"
    runs.mkdir()
    cal = json.loads((FIX / "offline_cal_run.json").read_text())
    cal["steps"] = [s for s in cal["steps"] if s["ctx_tokens"] + s["gen_tokens"] <= 3]
    draft = dict(copy.deepcopy(cal), mode="cal-draft")
    spec = _spec()
    for name, r in (("cal-target", cal), ("cal-draft", draft), ("plain", _plain(spec)), ("draft-k3", spec),
                    *_chunks(cal, (2, 3)), *_chunks(draft, (2, 3))):
        (runs / f"{name}__{r['point']}__r0.json").write_text(json.dumps(r))
    res = va.analyze(tmp_path)
    p = res["points"][0]
    assert p["extrapolated"] and p["unmeasured_steps"] > 0
    assert res["tables"]["target"]["unmeasured"]["unmeasured_above"]
    assert "outside the measured range" in (tmp_path / "vllm_cpu.md").read_text()


def _two_blocks(tmp_path):
    """Two blocks of the same runs; the second block's calibration ran on a host twice as slow."""
    runs = tmp_path / "runs"
    runs.mkdir()
    cal = json.loads((FIX / "offline_cal_run.json").read_text())
    spec = _spec()
    for i, slow in enumerate((1.0, 2.0)):
        b = f"r{i}-draft-k3"
        extra = [(m, r, s) for m, s in (("cal-target", slow), ("cal-draft", 0.4 * slow)) for _, r in _chunks(cal)]
        for name, r0, scale in (("cal-target", cal, slow), ("cal-draft", cal, 0.4 * slow), ("plain", _plain(spec), 1),
                                ("draft-k3", spec, 1), *extra):
            r = copy.deepcopy(r0)
            r.update(mode=name, block=b, repeat=i)
            for st in r["steps"]:
                st["time_s"] *= scale
            (runs / f"{name}__{r['point']}__{b}.json").write_text(json.dumps(r))


@pytest.mark.parametrize("pool, slower", [("block", 2.0), ("pooled", 1.0), ("scaled", 2.0)])
def test_each_pool_prices_a_block_as_it_says(tmp_path, pool, slower):
    """A block's own tables follow its host (2x); the pooled ones are one table for every block; the pooled tables
    times the block's host factor follow the host by one factor per model, their shape pooled."""
    _two_blocks(tmp_path)
    runs = va.load_runs(tmp_path)
    tabs = va.tables_by_block(runs, ("token", False, pool))
    assert set(tabs) == {None, "r0-draft-k3", "r1-draft-k3"}
    for m in (0, 1):
        a, b = tabs["r0-draft-k3"][m], tabs["r1-draft-k3"][m]
        for T in (1, 3, 8):
            assert b.time_at(T, count=False) == pytest.approx(slower * a.time_at(T, count=False), rel=1e-12)
    if pool == "scaled":
        assert tabs["r1-draft-k3"][0].base is tabs[None][0]  # one shape, one counter of unmeasured steps
    with pytest.raises(ValueError, match="pool"):
        va.tables_by_block(runs, ("token", False, "per-run"))


def test_block_runs_are_priced_by_their_blocks_tables(tmp_path):
    """The block protocol: a run is paired with the plain run of its block and priced by the tables the chosen fit
    gives that block; a host twice as slow in the second block's calibration doubles its predicted times (unless
    the fit pools every block's calibration without a host factor), never the speedup."""
    _two_blocks(tmp_path)
    res = va.analyze(tmp_path)
    rows = sorted(res["rows"], key=lambda r: r["repeat"])
    assert [r["repeat"] for r in rows] == [0, 1]
    slower = 1.0 if res["table_selection"]["pool"] == "pooled" else 2.0
    assert rows[1]["pred_plain_tpot_p50_s"] == pytest.approx(slower * rows[0]["pred_plain_tpot_p50_s"], rel=1e-9)
    assert rows[1]["pred_speedup_throughput"] == pytest.approx(rows[0]["pred_speedup_throughput"], rel=1e-9)
    assert set(res["block_tables"]) == {"r0-draft-k3", "r1-draft-k3"} and "pooled" in res
    assert ("token_monotone" in res) == (res["table_selection"]["chosen"] != "token, monotone")
    assert (tmp_path / "step_tables" / "r1-draft-k3_target.csv").exists()
    assert rows[0]["unmeasured_steps"] == 0
    # blocks measured after a fit was chosen, scored alone with that fit: nothing re-chosen, nothing overwritten
    before = (tmp_path / "vllm_cpu.md").read_text()
    only = va.analyze(tmp_path, tmp_path / "r1_only", ["r1-*"], tmp_path / "table_selection.json")
    assert [r["repeat"] for r in only["rows"]] == [1] and set(only["block_tables"]) == {"r1-draft-k3"}
    assert only["table_selection"]["fixed_from"].endswith("table_selection.json")
    assert only["table_selection"]["chosen"] == res["table_selection"]["chosen"]
    assert (tmp_path / "r1_only" / "vllm_cpu.md").exists() and (tmp_path / "vllm_cpu.md").read_text() == before
    assert not (tmp_path / "r1_only" / "table_selection.json").exists()


def test_the_protocol_calibrates_the_range_its_grid_needs():
    vc = pytest.importorskip("vllm_cpu")
    from specsim.validation import step_fit as sf
    vb = pytest.importorskip("vllm_blocks")
    counts = np.array(sorted(set(vc.CAL_CONCURRENCY) | set(vb.CAL_CHUNKS)), float)
    assert sf.covered(counts).all()  # no gap the fit would flag between the calibration's own step sizes
    assert max(vc.CAL_CONCURRENCY) >= max(vc.CLOSED) * (max(vc.KS) + 1)  # a batch-8 verification at k = 5
    assert min(vb.CAL_CHUNKS) <= 2 and max(vb.CAL_CHUNKS) >= 32
    assert vc.OUTPUT_LEN >= 96 and len(vc.RATES) == 3 and set(vc.KS) == {2, 3, 5}
    grid = vc.grid_points(vc.OUTPUT_LEN)
    assert [p["concurrency"] for p in grid if "concurrency" in p] == [1, 2, 4, 8]
    names = ["draft-k2", "draft-k3", "draft-k5"]
    plan = vb.block_plan(3, names)
    for r in range(3):  # ABBA over repeats
        assert [m for rr, m in plan if rr == r] == (names if r % 2 == 0 else names[::-1])
    for r, mode in plan[:2]:
        k = vc.modes()[mode]["k"]
        seq = vb.block_sequence(r, mode, k, grid)
        pairs = [(a, b) for a, b in zip(seq, seq[1:]) if {a[1], b[1]} == {"plain", mode} and a[2] is b[2]]
        assert [a[2]["point"] for a, _ in pairs] == [p["point"] for p in grid]  # each point back to back
        assert [a[1] for a, _ in pairs][:2] == (["plain", mode] if r % 2 == 0 else [mode, "plain"])
        for model in ("cal-target", "cal-draft"):  # the block's own calibration: no speculation, the range it needs
            cal = [p for _, m, p in seq if m == model]
            dec = [p["concurrency"] for p in cal if "budget" not in p]
            assert max(dec) >= max(vc.CLOSED) * (k + 1) and min(dec) == 1
            assert sf.covered(np.array(sorted(set(dec) | {p["budget"] for p in cal if "budget" in p}), float)).all()
            assert all(vc.modes()[model]["spec"] is None for _ in cal)
            assert len({p["point"] for p in cal}) == len(cal)  # one file per run
            for c in (1, 2, 8, 16, 48):  # small counts several times, spread over the block (grid points apart)
                at = [i for i, (_, m, p) in enumerate(seq) if m == model and p.get("concurrency") == c and
                      "budget" not in p]
                assert len(at) == (vb.dec_runs(c) if c <= max(vc.CLOSED) * (k + 1) else 0)
                grid_between = [sum(1 for _, m, _ in seq[a:b] if m == "plain") for a, b in zip(at, at[1:])]
                assert all(g >= 2 for g in grid_between), (c, grid_between)
    for name in ("plain", "draft-k2", "cal-draft"):
        m = vc.modes()[name]
        cfg = vc.run_config(name, m)
        assert (cfg["k"] > 0) == name.startswith("draft") and cfg["arrival"] == "offline"
        assert vc.engine_kwargs(m)["enable_prefix_caching"] is False


def _select_folder(tmp_path, with_spec: bool = False, block: str | None = None) -> list[dict]:
    """A results folder with each model's calibration, the chunk sweep, one plain run (and, with_spec, the
    speculative run it was derived from), every run in `block` if given; loaded as the analysis loads it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    cal = json.loads((FIX / "offline_cal_run.json").read_text())
    spec = _spec()
    for name, r in (("cal-target", cal), ("cal-draft", dict(copy.deepcopy(cal), mode="cal-draft")),
                    ("plain", _plain(spec)), *((("draft-k3", spec),) if with_spec else ()), *_chunks(cal)):
        (runs / f"{name}__{r['point']}__r0.json").write_text(json.dumps(dict(r, block=block) if block else r))
    return va.load_runs(tmp_path)


def test_the_fit_is_chosen_on_plain_runs_without_reading_a_speculative_one(tmp_path):
    """experiments/vllm_select.py: a speculative run whose steps are garbage changes nothing (it is never read);
    the chosen fit is the lowest score, and it is what the analysis then prices with."""
    vs = pytest.importorskip("vllm_select")
    loaded = _select_folder(tmp_path, with_spec=True)
    first = vs.select(tmp_path, loaded)
    for r in loaded:
        if r["mode"] == "draft-k3":
            r["steps"] = [{"time_s": "garbage"}]
    again = vs.select(tmp_path, loaded)
    assert again == first and set(first["candidates"]) == set(vs.CANDIDATES)
    assert first["chosen"] == min(first["candidates"], key=lambda n: first["candidates"][n]["score"])


@pytest.mark.parametrize("text", [None, "{not json", "[1, 2]", '{"chosen": "token, monotone", "kind": "token", '
                                  '"monotone": false}', '{"chosen": "bogus"}',
                                  '{"chosen": "token, as measured, pooled", "kind": "token", "monotone": false, '
                                  '"pool": "block"}'])
def test_a_bad_fit_file_is_one_line_not_a_traceback(tmp_path, text):
    vs = pytest.importorskip("vllm_select")
    f = tmp_path / "table_selection.json"
    if text is not None:
        f.write_text(text)
    with pytest.raises(SystemExit, match="vllm_select: .*table_selection.json"):
        vs.fixed(f)


def test_a_session_13_fit_file_names_a_per_block_fit(tmp_path):
    """A table_selection.json written before the pool was a candidate (no "pool") is read as per-block tables, as
    it was chosen; a pooled choice is read as pooled."""
    vs = pytest.importorskip("vllm_select")
    f = tmp_path / "table_selection.json"
    f.write_text('{"chosen": "token, as measured", "kind": "token", "monotone": false}')
    assert vs.fixed(f)["pool"] == "block"
    f.write_text('{"chosen": "token, as measured, pooled", "kind": "token", "monotone": false, "pool": "pooled"}')
    assert vs.fixed(f)["pool"] == "pooled"


def test_a_challenger_replaces_the_choice_in_force_only_beyond_the_criterions_noise():
    """experiments/vllm_select.py wins_share: paired block resamples. A challenger better in every block wins
    every draw; one better on the whole set by a hair, worse in half the blocks, wins far fewer than 95%; the
    stream is seeded, so the share repeats bit for bit."""
    vsel = pytest.importorskip("vllm_select")
    blocks = [f"r{b}" for b in range(8) for _ in range(7)]
    rng = np.random.default_rng(0)
    base = rng.normal(0.0, 0.08, (2, len(blocks)))
    clear = {"inc": (base[0], base[1]), "ch": (base[0] * 0.5, base[1] * 0.5)}
    assert vsel.wins_share(blocks, clear, "ch", "inc", draws=200) == 1.0
    shift = np.array([0.9 if int(b[1]) % 2 else 1.1 for b in blocks])  # better in odd blocks, worse in even ones
    hair = {"inc": (base[0], base[1]), "ch": (base[0] * shift * 0.98, base[1] * shift * 0.98)}
    share = vsel.wins_share(blocks, hair, "ch", "inc", draws=200)
    assert 0.05 < share < vsel.WIN_SHARE
    assert vsel.wins_share(blocks, hair, "ch", "inc", draws=200) == share


def test_the_choice_in_force_stays_unless_the_rule_lets_the_challenger_in(tmp_path, monkeypatch):
    """select(incumbent=...): one block, so every draw is that block and a strictly lower score always wins it;
    with the bar above 100% the incumbent stays; the rule's figures are written; a name that is no candidate is
    one line."""
    vsel = pytest.importorskip("vllm_select")
    loaded = _select_folder(tmp_path, block="r0-draft-k3")
    free = vsel.select(tmp_path, loaded)
    worst = max(free["candidates"], key=lambda n: free["candidates"][n]["score"])
    assert free["candidates"][worst]["score"] > free["candidates"][free["chosen"]]["score"]
    assert vsel.previous(tmp_path) == free["chosen"]
    swap = vsel.select(tmp_path, loaded, incumbent=worst)
    assert swap["chosen"] == free["chosen"] and swap["rule"]["challenger_wins_share"] == 1.0
    monkeypatch.setattr(vsel, "WIN_SHARE", 1.01)
    kept = vsel.select(tmp_path, loaded, incumbent=worst)
    assert kept["chosen"] == worst and kept["rule"]["incumbent"] == worst
    assert kept["candidates"] == free["candidates"]
    with pytest.raises(SystemExit, match="incumbent 'bogus' is not one of"):
        vsel.select(tmp_path, loaded, incumbent="bogus")


def test_the_draft_pass_rule_adds_one_slot_per_request_for_a_draft_model_only():
    """draft_pass "vllm": the draft's first pass covers the scheduled tokens plus one new slot per request (vLLM
    0.32's draft model, llm_base_proposer.py set_inputs_first_pass); at concurrency 1 every step's draft pass is
    then one token dearer. An n-gram lookup runs no model pass and is priced alike either way."""
    run = _spec()
    run["config"].update(concurrency=1, max_num_batched_tokens=64)
    cfg = vrun.run_config(run)
    linear = StepTable([1, 10_001], [0.1, 10.1])  # 0.1 s + 1 ms per token
    a = vp.predict(run, cfg, FLAT, linear, blocks=64)
    b = vp.predict(run, cfg, FLAT, linear, blocks=64, draft_pass="vllm")
    assert a["steps"] == b["steps"]
    n = len(run["input_lens"])
    assert (b["e2e_mean"] - a["e2e_mean"]) * n == pytest.approx(1e-3 * b["steps"], rel=1e-9)
    ngram = dict(cfg, method="ngram")
    assert vp.predict(run, ngram, FLAT, None, blocks=64) == vp.predict(run, ngram, FLAT, None, blocks=64,
                                                                       draft_pass="vllm")
    with pytest.raises(ValueError, match="draft_pass"):
        vp.predict(run, cfg, FLAT, linear, blocks=64, draft_pass="extra")
