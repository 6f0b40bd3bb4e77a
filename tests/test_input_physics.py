"""Inputs held to physics and to each other: what a measured file, a reference run or a combination of profiles
cannot be is refused in one line (file, field, value, allowed), never priced.

Surfaces: vLLM step tables (`StepTable`), measured pass-time grids (`MeasuredCosts.read_csv`), vLLM bench JSON
(`read_bench`), Prometheus `/metrics` (`spec_counters`, `counter_delta`), heads against their target, token trees
against their inputs, and prompt + output against the model's context (`max_position_embeddings`). Each has
hand-picked rejects (so its test can fail) and a hypothesis property: refused exactly when the rule is broken, and
whatever is accepted prices physically (times that never fall as the work grows, never negative)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import cli_capsys as _cli
from specsim import profiles as prof
from specsim.cost.measured import MeasuredCosts
from specsim.cost.ragged import StepTable
from specsim.errors import ConfigError
from specsim.inputs.tables import RISE_TOLERANCE
from specsim.methods.tree import parse_tree
from specsim.methods.tree_config import tree_setup
from specsim.setup.deployment import Deployment
from specsim.profiles.schema import ModelProfile
from specsim.validation import vllm_outputs as vr

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures"
GOLD = Path(__file__).resolve().parent / "golden" / "inputs"
PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_N = itertools.count()


def _one_line(code: int, out: str, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    assert lines[0].startswith("specsim: error:"), lines[0]
    return lines[0]


def _fresh(tmp: Path, suffix: str) -> Path:
    return tmp / f"f{next(_N)}{suffix}"  # a new name each time: profiles and tables are cached per path


def _falls_too_far(times) -> bool:
    """The rule, written independently: some time sits more than RISE_TOLERANCE below an earlier one."""
    peak = -np.inf
    for t in times:
        if peak > 0 and (peak - t) / peak > RISE_TOLERANCE:
            return True
        peak = max(peak, t)
    return False


# --- step tables (vllm-v1 engine profile) -------------------------------------------------------------------------

def test_committed_step_tables_never_price_a_negative_or_falling_step():
    """The golden tables fall at their last knot (2.67 s at 256 tokens, 2.49 s at 298): extrapolated on that slope
    a 1,000-token prefill step cost less than nothing. The envelope holds the plateau instead."""
    tt = StepTable.read_csv(GOLD / "step_table_target.csv")
    grid = np.arange(1, 20_000, 7.0)
    t = np.array([tt.time_at(x) for x in grid])
    assert (t > 0).all() and (np.diff(t) >= 0).all()
    assert tt.time_at(1000) == pytest.approx(2.67034)
    assert tt.time_at(2) == pytest.approx(0.648852)  # below the dip nothing changes


@pytest.mark.parametrize("body, needles", [
    ("tokens,time_s\n1,0.2\n2,0.3\n4,0.1\n", ["time_s", "falls along tokens", "tokens 4", "66.7% below", "15%"]),
    ("tokens,time_s\n1,0.2\n2,0.19\n4,0.17\n8,0.16\n", ["falls along tokens", "tokens 8"]),  # creeping down
    ("tokens,time_s\n1,0.2\n2.5,0.3\n", ["tokens", "not an integer", "'2.5'"]),
    ("tokens,time_s\n1,0.2\ntrue,0.3\n", ["tokens", "not an integer"]),
    ("tokens,time_s\n1,0.2\n1e3,0.3\n", ["tokens", "not an integer", "'1e3'"]),
    ("tokens,time_s\n0,0.2\n4,0.3\n", ["tokens", "out of range"]),
    ("tokens,time_s\n1,0.2\n4,-0.3\n", ["time_s", "out of range"]),
    ("tokens,time_s\n1,0.2\n4,\n", ["time_s", "missing value"]),
    ("tokens,time_s\n1,0.2\n4,inf\n", ["time_s"]),
    ("tokens,time_s\n4,0.2\n2,0.3\n", ["strictly increasing"]),
])
def test_bad_step_tables_are_one_line_through_the_cli(tmp_path, capsys, body, needles):
    f = _fresh(tmp_path, ".csv")
    f.write_text(body)
    argv = ["simulate", "--json", "--hardware", "cpu-2core", "--target", "qwen2.5-coder-1.5b", "--draft",
            "qwen2.5-coder-0.5b", "--alpha", "0.8", "--gamma", "3", "--batch", "2", "--requests", "4",
            "--prompt-len", "32", "--output-len", "8", "--engine-profile", "vllm-v1", "--step-table-target", f]
    line = _one_line(*_cli(capsys, *argv))
    for n in needles:
        assert n in line, (n, line)


def test_a_dip_within_the_tolerance_is_kept_as_noise_and_priced_flat():
    st_ = StepTable([1, 2, 4, 8], [0.2, 0.25, 0.24, 0.3])  # 4% below: noise
    assert st_.time_at(3) == pytest.approx(0.25) and st_.time_at(4) == pytest.approx(0.25)
    assert st_.time_at(8) == pytest.approx(0.3)


@PROPS
@given(st.lists(st.floats(1e-4, 10.0), min_size=2, max_size=8), st.floats(0.0, 1e6))
def test_step_table_property(times, far):
    tokens = [2 ** i for i in range(len(times))]
    try:
        table = StepTable(tokens, times)
    except ConfigError as e:
        assert _falls_too_far(times), e
        assert e.field == "time_s" and "\n" not in str(e)
        return
    assert not _falls_too_far(times)
    xs = sorted([1.0, float(tokens[-1]), tokens[-1] + far] + [t * 1.5 for t in tokens])
    ys = [table.time_at(x) for x in xs]
    assert all(y > 0 for y in ys) and all(b >= a for a, b in zip(ys, ys[1:]))
    assert all(table.time_at(t) >= s for t, s in zip(tokens, times))  # the envelope is never below a measurement


# --- measured pass-time grids (--measured-target) -----------------------------------------------------------------

def _grid_csv(path: Path, times: np.ndarray, batches=(1, 4), positions=(1, 4), contexts=(0, 512)) -> Path:
    rows = ["kind,batch,positions,context,time_s"]
    for (i, b), (j, p), (k, c) in itertools.product(enumerate(batches), enumerate(positions), enumerate(contexts)):
        rows.append(f"decode,{b},{p},{c},{float(times[i, j, k])!r}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("axis, name", [(0, "batch"), (1, "positions"), (2, "context")])
def test_a_grid_that_gets_faster_with_more_work_is_refused(tmp_path, capsys, axis, name):
    t = np.full((2, 2, 2), 0.01)
    idx = [0, 0, 0]
    idx[axis] = 1
    t[tuple(idx)] = 0.005  # half the time for twice the work along one axis
    f = _grid_csv(_fresh(tmp_path, ".csv"), t)
    line = _one_line(*_cli(capsys, "simulate", "--json", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                           "--draft", "llama-3.2-1b", "--alpha", "0.7", "--requests", "4",
                           "--measured-target", f))
    assert f"falls along {name}" in line and "time_s" in line and "50.0% below" in line, line


@PROPS
@given(st.lists(st.floats(1e-4, 1.0), min_size=8, max_size=8), st.integers(1, 64), st.integers(1, 64),
       st.integers(0, 100_000))
def test_measured_grid_property(tmp_path_factory, flat, b, p, c):
    t = np.array(flat).reshape(2, 2, 2)
    f = _grid_csv(_fresh(tmp_path_factory.mktemp("g"), ".csv"), t)
    lines = [t[:, j, k] for j in range(2) for k in range(2)] + [t[i, :, k] for i in range(2) for k in range(2)] + \
        [t[i, j, :] for i in range(2) for j in range(2)]
    try:
        mc = MeasuredCosts.read_csv(f)
    except ConfigError as e:
        assert any(_falls_too_far(x) for x in lines), e
        return
    assert not any(_falls_too_far(x) for x in lines)
    base = mc.pass_time_s(b, p, c)
    assert base > 0
    for more in ((b + 7, p, c), (b, p + 7, c), (b, p, c + 5000)):  # more work, also past the measured edge
        assert mc.pass_time_s(*more) >= base - 1e-15


def test_a_measured_grid_never_falls_past_two_edges_at_once(tmp_path):
    """The case hypothesis found: rising along every axis inside, but multilinear extrapolation past the context
    edge turned the batch axis downhill (its cross term changes sign): 8 rows at context 513 came out cheaper than
    1 row there. A file's grid now extrapolates each axis by one rising slope."""
    t = np.ones((2, 2, 2))
    t[0, 0, 0] = 0.5
    mc = MeasuredCosts.read_csv(_grid_csv(_fresh(tmp_path, ".csv"), t))
    base = mc.pass_time_s(1, 1, 513)
    assert base == pytest.approx(1.0 + 0.5 / 512)  # past the context edge by one token, at the steepest slope
    assert mc.pass_time_s(8, 1, 513) >= base and mc.pass_time_s(8, 8, 5513) >= mc.pass_time_s(8, 1, 513)
    assert mc.pass_time_s(2, 2, 256) == pytest.approx(1.0 - 0.5 * (2 / 3) * (2 / 3) * 0.5)  # inside: multilinear


# --- vLLM bench JSON ------------------------------------------------------------------------------------------------

GOOD_BENCH = json.loads((FIX / "vllm" / "bench_detailed.json").read_text())


def _bench(tmp: Path, **changes) -> Path:
    d = json.loads(json.dumps(GOOD_BENCH))
    for k, v in changes.items():
        if "." in k:
            key, i = k.split(".")
            d[key][int(i)] = v
        else:
            d[k] = v
    f = _fresh(tmp, ".json")
    f.write_text(json.dumps(d))
    return f


@pytest.mark.parametrize("changes, needles", [
    ({"ttfts.1": -0.5}, ["ttfts[1]", "request 1", "negative", "(got -0.5)"]),
    ({"latencies.0": 0.5}, ["latencies[0]", "below the time to its first token", ">= its TTFT"]),
    ({"latencies.2": 1e4}, ["latencies[2]", "longer than the whole run", "<= duration"]),
    ({"ttfts.0": "0.9"}, ["ttfts[0]", "not a number"]),
    ({"ttfts.0": True}, ["ttfts[0]", "not a number"]),
    ({"ttfts.0": None}, ["ttfts[0]", "not a number"]),
    ({"output_lens.0": 32.5}, ["output_lens[0]", "not an integer"]),
    ({"input_lens.1": -3}, ["input_lens[1]", "negative length"]),
    ({"itls.0": [0.1, -0.2]}, ["itls[0][1]", "inter-token latency", "negative"]),
    ({"errors": ["", ""]}, ["errors", "one string per request"]),
    ({"errors": [0, 0, 0, 0]}, ["errors", "one string per request"]),
    ({"ttfts": 3}, ["ttfts", "not a list"]),
    ({"duration": -1}, ["duration", "positive"]),
])
def test_impossible_bench_results_are_refused(tmp_path, changes, needles):
    with pytest.raises(ConfigError) as e:
        vr.read_bench(_bench(tmp_path, **changes))
    line = str(e.value)
    assert "\n" not in line
    for n in needles:
        assert n in line, (n, line)


def test_nested_json_and_failed_requests(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 20_000 + "]" * 20_000)
    with pytest.raises(ConfigError, match="nested too deeply|not a bench result"):
        vr.read_bench(deep)
    # a failed request carries vLLM's zeros (and an error text): typed, not held to physics, not scored
    n = len(GOOD_BENCH["ttfts"])
    errors = [""] * n
    errors[1] = "timeout"
    ok = vr.read_bench(_bench(tmp_path, **{"errors": errors, "ttfts.1": 0.0, "latencies.1": 0.0}))
    assert ok["completed"] == n - 1


@PROPS
@given(st.integers(0, 2), st.floats(-5.0, 40.0), st.floats(-5.0, 100.0))
def test_bench_property(tmp_path_factory, i, ttft, latency):
    f = _bench(tmp_path_factory.mktemp("b"), **{f"ttfts.{i}": ttft, f"latencies.{i}": latency})
    gaps = math.fsum(GOOD_BENCH["itls"][i])  # a streamed latency is its TTFT plus its gaps (vllm/benchmarks)
    physical = (0 <= ttft <= latency <= GOOD_BENCH["duration"] + vr.DURATION_SLACK_S
                and (not gaps or abs(latency - ttft - gaps) <= vr.LATENCY_SLACK_S + 0.02 * latency))
    try:
        d = vr.read_bench(f)
    except ConfigError as e:
        assert not physical, e
        return
    assert physical
    assert (d["ttft_s"] >= 0).all() and (d["e2e_s"] >= d["ttft_s"]).all() and (d["tpot_s"] >= 0).all()


# --- /metrics ---------------------------------------------------------------------------------------------------

def _metrics(drafts, draft_tokens, accepted, per_pos) -> str:
    lines = [f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}',
             f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {draft_tokens}',
             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {accepted}']
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{k}"}} {v}'
              for k, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("args, needles", [
    ((100, 300, 301, [100, 100, 101]), ["accepted_tokens", "more tokens accepted than drafted", "<= draft_tokens"]),
    ((100, 300, 250, [101, 80, 69]), ["accepted_per_pos[0]", "than drafts", "<= drafts = 100"]),
    ((100, 300, 200, [60, 70, 70]), ["accepted_per_pos[1]", "than at position 0"]),
    ((100, -300, 0, []), ["draft_tokens", "negative"]),
    ((100, 300, "NaN", []), ["accepted_tokens", "not finite"]),
])
def test_impossible_counters_are_refused(args, needles):
    with pytest.raises(ConfigError) as e:
        vr.spec_counters(vr.parse_metrics(_metrics(*args)), where="m.txt")
    line = str(e.value)
    assert line.startswith("m.txt:") and "\n" not in line
    for n in needles:
        assert n in line, (n, line)


def test_bad_position_label_and_a_restarted_server():
    text = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="first"} 3\n'
    with pytest.raises(ConfigError, match="position label"):
        vr.spec_counters(vr.parse_metrics(text))
    before = vr.spec_counters(vr.parse_metrics(_metrics(100, 300, 200, [80, 65, 55])))
    after = vr.spec_counters(vr.parse_metrics(_metrics(10, 30, 20, [8, 7, 5])))  # counters reset to small values
    with pytest.raises(ConfigError, match="between the two scrapes"):
        vr.counter_delta(before, after)
    # the committed fixture passes and its delta from nothing is itself
    c = vr.spec_counters(vr.parse_metrics((FIX / "vllm" / "metrics_spec.txt").read_text()))
    assert vr.counter_delta(vr.spec_counters({}), c) == c


@PROPS
@given(st.integers(0, 1000), st.integers(1, 5), st.lists(st.integers(0, 1200), min_size=1, max_size=5),
       st.integers(-50, 50))
def test_counters_property(drafts, k, per_pos, extra):
    accepted = sum(per_pos) + extra
    text = _metrics(drafts, drafts * k, accepted, per_pos)
    # vLLM counts an accepted token once in the total and once at its position (vllm/v1/spec_decode/metrics.py),
    # so the positions add up to the total: any extra is refused
    physical = (accepted >= 0 and accepted <= drafts * k and all(v <= drafts for v in per_pos)
                and all(b <= a for a, b in zip(per_pos, per_pos[1:])) and extra == 0)
    try:
        c = vr.spec_counters(vr.parse_metrics(text))
    except ConfigError as e:
        assert not physical, e
        return
    assert physical
    s = vr.acceptance_summary(c)
    assert s["draft_acceptance_rate"] is None or 0 <= s["draft_acceptance_rate"] <= 1
    assert all(0 <= a <= 1 for a in s["acceptance_by_position"])


# --- heads against their target -----------------------------------------------------------------------------------

HEAD = (ROOT / "model_profiles" / "heads" / "eagle3-llama-3.1-8b.toml").read_text()


def _head(tmp: Path, key: str, value: str, text: str = HEAD) -> Path:
    lines = [ln for ln in text.splitlines() if not ln.startswith(f"{key} ")]
    f = _fresh(tmp, ".toml")
    f.write_text("\n".join(lines + [f"{key} = {value}"]) + "\n")
    return f


@pytest.mark.parametrize("key, value, needles", [
    ("d_model", "2048", ["field 'd_model'", "hidden size must be the target's", "(got 2048)", "allowed: 4096"]),
    ("lm_head_vocab", "200000", ["field 'lm_head_vocab'", "larger than llama-3.1-8b's", "<= 128256"]),
    ("n_kv_heads", "7", ["field 'n_kv_heads'", "multiple of n_kv_heads", "(got 7)"]),  # was a pydantic dump
    ("head_dim", "4000", ["field 'head_dim'", "d_model"]),
    ("d_model", "-3", ["field 'd_model'", "value out of range", "(got -3)", ">= 1"]),
    ("n_layers", "99", ["field 'n_layers'", "value out of range", "<= 16"]),
    ("d_ff", '"x"', ["field 'd_ff'", "not an integer", ">= 1 and <= 10000000"]),
])
def test_bad_heads_are_one_line_naming_file_field_value_allowed(tmp_path, capsys, key, value, needles):
    f = _head(tmp_path, key, value)
    line = _one_line(*_cli(capsys, "simulate", "--json", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                           "--method", "eagle3", "--draft", f, "--alpha", "0.7", "--requests", "4"))
    assert str(f) in line, line
    for n in needles:
        assert n in line, (n, line)


def test_a_shared_lm_head_is_the_targets_vocabulary(tmp_path):
    mtp = (ROOT / "model_profiles" / "heads" / "mtp-llama-3.1-8b.toml").read_text()
    f = _head(tmp_path, "lm_head_vocab", "32000", mtp)
    with pytest.raises(ConfigError, match="lm_head_vocab.*LM head is llama-3.1-8b's vocabulary.*128256"):
        Deployment.resolve("h100-sxm", "llama-3.1-8b", str(f), method="mtp")


@PROPS
@given(st.sampled_from([1024, 2048, 3072, 4096, 5120, 8192]))
def test_head_hidden_size_property(tmp_path_factory, d_model):
    """An EAGLE-3 head serves its target exactly when its hidden size is the target's (all else as shipped)."""
    f = _head(tmp_path_factory.mktemp("h"), "d_model", str(d_model))
    try:
        dep = Deployment.resolve("h100-sxm", "llama-3.1-8b", str(f), method="eagle3")
    except ConfigError as e:
        assert d_model != 4096 and e.field == "d_model", e
        return
    assert d_model == 4096 and dep.cost_models[1].pass_time_s(1, 1, 0) > 0


@PROPS
@given(st.dictionaries(st.sampled_from(["n_heads", "n_kv_heads", "head_dim", "d_ff", "n_layers", "lm_head_vocab",
                                        "fc_input_multiple", "attention_input_multiple"]),
                       st.integers(-2, 70_000), min_size=1, max_size=4))
def test_any_head_layer_is_priced_or_one_line(tmp_path_factory, fields):
    """Whatever the head's layer fields say, the deployment prices a pass or refuses in one ConfigError line (a
    head whose layer broke a model layer's rules was a raw pydantic traceback at pricing)."""
    text = HEAD
    tmp = tmp_path_factory.mktemp("hl")
    for k, v in fields.items():
        text = _head(tmp, k, str(v), text).read_text()
    f = _fresh(tmp, ".toml")
    f.write_text(text)
    try:
        dep = Deployment.resolve("h100-sxm", "llama-3.1-8b", str(f), method="eagle3")
        assert dep.cost_models[1].pass_time_s(2, 1, 64) > 0
    except ConfigError as e:
        assert "\n" not in str(e) and "validation error" not in str(e), e


# --- trees against their inputs -------------------------------------------------------------------------------------

def test_a_dynamic_tree_without_top_k_acceptance_is_refused_not_a_chain(capsys):
    """It used to become a 16-deep chain: with α alone every rank above 0 has probability 0."""
    base = ["simulate", "--json", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--method", "eagle3",
            "--alpha", "0.7", "--requests", "4", "--speculative-token-tree", '{"dynamic": 16, "top_k": 4}']
    line = _one_line(*_cli(capsys, *base))
    assert "speculative-token-tree" in line and "top-k acceptance" in line and "tree_topk_acceptance" in line
    line = _one_line(*_cli(capsys, *base, "--tree-topk-acceptance", "[0.7, 0.85]"))
    assert "top_k 4" in line and "1..2" in line, line


@PROPS
@given(st.lists(st.floats(0.0, 0.3), min_size=1, max_size=5), st.integers(1, 40), st.integers(1, 6),
       st.integers(1, 8))
def test_dynamic_tree_property(steps, budget, top_k, depth):
    """A dynamic tree is built only from a top-k acceptance that covers its top_k, and never branches past it."""
    topk = tuple(np.minimum(0.05 + np.cumsum(steps), 1.0).tolist())
    text = json.dumps({"dynamic": budget, "top_k": top_k, "depth": depth})
    with pytest.raises(ConfigError):
        parse_tree(text, None)  # no rank model, no dynamic tree
    try:
        setup = tree_setup(text, topk, topk[0])
    except ConfigError as e:
        assert top_k > len(topk) or "node" in e.message, e
        return
    assert top_k <= len(topk)
    assert setup.tree.max_rank < min(top_k, len(topk)) and setup.tree.depth <= depth and setup.tree.nodes <= budget


# --- prompt + output against the model's context ------------------------------------------------------------------

def test_shipped_contexts_come_from_the_configs():
    want = {"llama-3.1-8b": 131072, "llama-3.1-70b": 131072, "llama-3.2-1b": 131072, "llama-3.2-3b": 131072,
            "qwen2.5-coder-0.5b": 32768, "qwen2.5-coder-1.5b": 32768, "smollm2-135m": 8192, "llama-68m": 2048,
            "llama-7b": 2048, "mixtral-8x7b": 32768, "qwen3-30b-a3b": 40960, "gpt-like-97m": 512,
            "t5-v1_1-xxl": None, "chinchilla-70b": None}  # relative positions: no table, no limit
    assert {n: prof.model(n).max_position_embeddings for n in want} == want
    for fixture, name in (("hf_llama_config.json", "llama-3.2-1b"), ("hf_qwen2_config.json", "qwen2.5-coder-0.5b"),
                          ("hf_mixtral_config.json", "mixtral-8x7b"), ("hf_qwen3_moe_config.json", "qwen3-30b-a3b"),
                          ("hf_t5_config.json", "t5-v1_1-small")):
        assert ModelProfile.from_hf_config(FIX / fixture).max_position_embeddings == \
            prof.model(name).max_position_embeddings, fixture
    assert ModelProfile.from_hf_config(FIX / "hf_deepseek_v3_config.json").max_position_embeddings == 163840


def test_a_learned_table_bounds_the_context(tmp_path):
    text = (ROOT / "model_profiles" / "gpt-like-97m.toml").read_text()
    f = _fresh(tmp_path, ".toml")
    f.write_text(text.replace("max_position_embeddings = 512", "max_position_embeddings = 513"))
    with pytest.raises(ConfigError) as e:
        prof.load_model(f)
    assert e.value.field == "max_position_embeddings" and "<= learned_positions = 512" in str(e.value)


SMALL = ["simulate", "--json", "--hardware", "a100-80gb", "--target", "gpt-like-97m", "--draft", "gpt-like-6m",
         "--alpha", "0.8", "--gamma", "3", "--requests", "2"]


@pytest.mark.parametrize("prompt, output, ok", [(400, 112, True), (400, 113, False), (600, 1, False)])
def test_prompt_plus_output_against_the_context(capsys, prompt, output, ok):
    code, out, err = _cli(capsys, *SMALL, "--prompt-len", prompt, "--output-len", output)
    if ok:
        assert code == 0 and json.loads(out)["speedup"] > 0, err
        return
    line = _one_line(code, out, err)
    for n in ("--prompt-len + --output-len", f"(got {prompt + output})", "<= 512", "max_position_embeddings",
              "gpt-like-97m"):
        assert n in line, (n, line)


def test_the_longest_drawn_request_is_checked_and_t5_has_no_limit(capsys):
    line = _one_line(*_cli(capsys, *SMALL, "--prompt-len", "100", "--output-len", "20", "--length-dist",
                           "lognormal", "--requests", "64"))  # lognormal reaches 8x the mean
    assert "--prompt-len + --output-len" in line and "<= 512" in line, line
    code, out, err = _cli(capsys, "simulate", "--json", "--hardware", "tpu-v4", "--target", "t5-v1_1-xxl", "--draft",
                          "t5-v1_1-small", "--alpha", "0.7", "--gamma", "3", "--requests", "2", "--prompt-len",
                          "2000", "--output-len", "16")
    assert code == 0, err


@PROPS
@given(st.integers(1, 700), st.integers(1, 700))
def test_context_property(prompt, output):
    target = prof.model("gpt-like-97m")
    try:
        target.check_context(prompt, output)
    except ConfigError as e:
        assert prompt + output > 512 and "\n" not in str(e)
        return
    assert prompt + output <= 512


def test_a_sweep_refuses_the_combinations_before_any_point_runs(tmp_path, capsys):
    """The same two rules up front in a sweep (and a plan, through the same checks): one line naming the spec's
    field, before the grid runs, instead of an error column per point."""
    narrow = _head(tmp_path, "d_model", "2048")
    cases = [(f'[fixed]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\nalpha = 0.7\nrequests = 4\n'
              f'method = "eagle3"\n[grid]\ndraft = ["eagle3-llama-3.1-8b", "{narrow}"]\ngamma = [2]\n',
              ["field 'grid.draft'", "d_model", "allowed: 4096"]),
             ('[fixed]\nhardware = "a100-80gb"\ntarget = "gpt-like-97m"\ndraft = "gpt-like-6m"\nalpha = 0.8\n'
              'requests = 2\noutput_len = 100\n[grid]\nprompt_len = [100, 500]\n',
              ["field 'grid.prompt_len'", "600 tokens", "<= 512"])]
    for text, needles in cases:
        spec = _fresh(tmp_path, ".toml")
        spec.write_text(text)
        out_dir = _fresh(tmp_path, "")
        line = _one_line(*_cli(capsys, "sweep", spec, "--out", out_dir))
        assert str(spec) in line and not list(Path(out_dir).rglob("*.parquet")), line  # nothing ran
        for n in needles:
            assert n in line, (n, line)
