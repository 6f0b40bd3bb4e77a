"""Reading vLLM's outputs (CI never installs vLLM): per-step log, /metrics, bench JSON — on committed fixtures cut
from this project's own vLLM 0.32 runs (tests/fixtures/vllm/)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specsim.errors import ConfigError
from specsim.validation import vllm_outputs as vr

FIX = Path(__file__).parent / "fixtures" / "vllm"


def test_step_log_lines():
    steps = vr.parse_steps((FIX / "server_steps.log").read_text())
    assert len(steps) == 9  # the dummy step and the non-step lines are skipped
    s = steps[0]
    assert (s.index, s.ctx_requests, s.ctx_tokens, s.gen_requests, s.gen_tokens) == (44, 1, 83, 0, 0)
    assert s.time_s == pytest.approx(1.02785)
    assert s.kv_usage == pytest.approx(0.001)
    d = steps[4]
    assert (d.requests, d.tokens, d.time_s) == (4, 4, pytest.approx(0.51057))


def test_metrics_spec_counters():
    m = vr.parse_metrics((FIX / "metrics_spec.txt").read_text())
    c = vr.spec_counters(m)
    assert c["drafts"] > 0 and c["draft_tokens"] == pytest.approx(3 * c["drafts"])  # k = 3 drafts per step
    assert len(c["accepted_per_pos"]) == 3
    assert sum(c["accepted_per_pos"]) == pytest.approx(c["accepted_tokens"])
    assert c["accepted_per_pos"] == sorted(c["accepted_per_pos"], reverse=True)  # a chain: later slots need earlier
    s = vr.acceptance_summary(vr.counter_delta(vr.spec_counters({}), c))
    assert s["mean_acceptance_length"] == pytest.approx(1 + c["accepted_tokens"] / c["drafts"])
    assert 0 < s["draft_acceptance_rate"] <= 1


def test_metrics_without_speculation():
    c = vr.spec_counters(vr.parse_metrics((FIX / "metrics_plain.txt").read_text()))
    assert c["drafts"] == 0 and c["accepted_per_pos"] == []
    assert vr.acceptance_summary(c)["mean_acceptance_length"] is None


def test_metrics_parser_labels_and_junk():
    text = 'a_total{x="1",position="2"} 5\n# HELP junk\nnot a sample\nb 1e3\nc{q="a\\"b"} NaN\n'
    m = vr.parse_metrics(text)
    assert m[("a_total", (("position", "2"), ("x", "1")))] == 5
    assert m[("b", ())] == 1000
    assert ("c", (("q", 'a\\"b'),)) in m


def test_bench_json_roundtrip(tmp_path):
    d = vr.read_bench(FIX / "bench_detailed.json")
    assert d["completed"] == len(d["ttft_s"])
    n = np.asarray(d["output_lens"], float)
    assert d["output_throughput"] == pytest.approx(n.sum() / d["duration"])
    lat, ttft = np.asarray(d["latencies"]), np.asarray(d["ttfts"])
    assert d["tpot_s"] == pytest.approx((lat - ttft) / (n - 1))


def test_bench_json_refuses_what_it_cannot_score(tmp_path):
    good = json.loads((FIX / "bench_detailed.json").read_text())
    bad = dict(good)
    del bad["itls"]
    (tmp_path / "a.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="itls"):
        vr.read_bench(tmp_path / "a.json")
    (tmp_path / "b.json").write_text("{truncated")
    with pytest.raises(ConfigError, match="cannot read"):
        vr.read_bench(tmp_path / "b.json")
    bad = dict(good, ttfts=good["ttfts"][:-1])
    (tmp_path / "c.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="differ in length"):
        vr.read_bench(tmp_path / "c.json")
