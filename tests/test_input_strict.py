"""Every input surface typed once (issue 21, item 3): a value has one type wherever it enters.

- The JSON in a `simulate` flag is typed as the same value in a sweep file: `[0.7, "0.85"]`, `[0.7, true]`, bands
  `[[1, 8, "4"]]` are refused, not read as numbers; so is `{"alpha": "0.8"}` in a choose-draft candidate.
- JSON and TOML from a user are parsed with a bounded depth: 20,000 nested `[` are one line, never a traceback.
- vLLM's own rules for the engine arguments it validates: block sizes, token budget >= max_num_seqs, draft TP 1 or
  the target's.
- A message carrying a user's braces is shown verbatim (it went through `str.format` and raised KeyError).
- The SLO flags carry their unit: `--slo-tpot 50` (was 50 seconds, silently) is refused, naming `--slo-tpot-s`.

Each property test has an oracle written here from the rule, not from the code, and hand-picked rejects, so it can
fail.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import cli_redirect
from specsim.cli.sim import RENAMED, _value
from specsim.config import RuleViolation, flag
from specsim.errors import ConfigError
from specsim.inputs.files import MAX_NESTING, loads_json, loads_toml, nesting_depth
from specsim.simulate import make_config

PAIR = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7)
SIM = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha",
       "0.7", "--requests", "4", "--output-len", "8", "--json"]
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _one_line(argv: list[str], *needles: str) -> str:
    code, out, err = cli_redirect(*argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (code, err[-600:])
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# --- JSON values in simulate's flags: the sweep file's types ---------------------------------------------------------

_SCALARS = st.one_of(st.integers(-3, 300), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                     st.sampled_from(["0.85", "4", "", "x"]))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4), max_leaves=12)


def _real(x) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def _topk_ok(v) -> bool:
    """The rule: a non-empty list of finite numbers; a bool, a string, null or a list inside is not a number."""
    return isinstance(v, list) and len(v) > 0 and all(_real(x) for x in v)


def _bands_ok(v) -> bool:
    """The rule: a non-empty list of [start, end, γ] triples of integers (not bools, not 4.0, not "4")."""
    return isinstance(v, list) and len(v) > 0 and all(
        isinstance(b, list) and len(b) == 3 and all(type(x) is int for x in b) for b in v)


@FAST
@given(v=_JSON)
def test_json_flag_values_are_typed_strictly(v):
    text = json.dumps(v)  # NaN / Infinity written as Python's json writes them
    for field, ok in (("tree_topk_acceptance", _topk_ok), ("num_speculative_tokens_per_batch_size", _bands_ok)):
        try:
            got = _value(field, text)
        except ConfigError as e:
            assert not ok(v), (field, v, str(e))
            assert f"field '{flag(field)}'" in str(e) and "\n" not in str(e)
        else:
            assert ok(v) and got == v, (field, v)


@pytest.mark.parametrize("argv, needles", [
    (["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", '[0.7,"0.85"]'],
     ["--tree-topk-acceptance", "must hold numbers", "'0.85'"]),
    (["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", "[0.7,true]"],
     ["--tree-topk-acceptance", "must hold numbers", "True"]),
    (["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", "[0.7,NaN]"], ["must be finite"]),
    (["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", "[]"], ["non-empty"]),
    (["--policy", "bands", "--num-speculative-tokens-per-batch-size", '[[1,8,"4"]]'],
     ["--num-speculative-tokens-per-batch-size", "must hold integers", "lists of 3 integers"]),
    (["--policy", "bands", "--num-speculative-tokens-per-batch-size", "[[1,8,4.0]]"], ["must hold integers"]),
    (["--policy", "bands", "--num-speculative-tokens-per-batch-size", "[[1,8,true]]"], ["must hold integers"]),
    (["--policy", "bands", "--num-speculative-tokens-per-batch-size", "[[1,8]]"], ["must be a list of 3"]),
])
def test_hand_picked_json_flag_values_are_refused(argv, needles):
    _one_line(SIM + argv, *needles)


def test_the_same_value_in_a_sweep_file_is_refused_the_same_way(tmp_path):
    """One rule, two surfaces: what the flag refuses, the sweep spec refuses, with the same words."""
    from specsim.sweep import load_spec

    for value, words in (('[0.7, "0.85"]', "must hold numbers"), ("[0.7, true]", "must hold numbers")):
        p = tmp_path / "s.toml"
        p.write_text(f'[fixed]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\ndraft = "llama-3.2-1b"\n'
                     f"alpha = 0.7\nspeculative_token_tree = '[[0], [1]]'\ntree_topk_acceptance = {value}\n"
                     "[grid]\nbatch = [1]\n")
        with pytest.raises(ConfigError, match=words):
            load_spec(p)
        with pytest.raises(ConfigError, match=words):
            _value("tree_topk_acceptance", json.dumps(json.loads(value)))


# --- choose-draft's candidate JSON ---------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(alpha=st.one_of(st.floats(-0.5, 1.5), st.integers(-1, 2), st.booleans(), st.none(),
                       st.sampled_from(["0.8", "0.5", "", "nan"]), st.floats(allow_nan=True)))
def test_a_candidates_alpha_is_a_number_in_0_1(alpha):
    from specsim.cli.choose import _method_candidate

    text = json.dumps({"method": "eagle3", "alpha": alpha})
    ok = type(alpha) in (int, float) and 0 <= alpha < 1  # nan fails the comparison
    try:
        d = _method_candidate(text, "llama-3.1-8b", "h100-sxm")
    except ConfigError as e:
        assert not ok, (alpha, str(e))
        assert "alpha" in str(e)
    else:
        assert ok and d.alpha == alpha


CHOOSE = ["choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--batch", "1", "--output-len", "8",
          "--requests", "4", "--json", "--speculative-config"]


@pytest.mark.parametrize("candidate, needles", [
    ({"method": "eagle3", "alpha": "0.8"}, ["--speculative-config.alpha", "not a string", "'0.8'"]),
    ({"method": "eagle3", "alpha": True}, ["--speculative-config.alpha", "true/false"]),
    ({"method": "eagle3", "trace": 5}, ["--speculative-config.trace", "must be a string"]),
    ({"method": "eagle3", "alpha": 0.8, "speculative_token_tree": "[[0], [1]]", "tree_topk_acceptance": [0.8, "0.9"]},
     ["--speculative-config.tree_topk_acceptance", "must hold numbers"]),
])
def test_hand_picked_candidates_are_refused(candidate, needles):
    _one_line(CHOOSE + [json.dumps(candidate)], *needles)


# --- bounded parsing depth -----------------------------------------------------------------------------------------

def _depth(v) -> int:
    """The nesting of a Python value, computed on the value (the oracle for the text scan)."""
    if isinstance(v, list):
        return 1 + max(map(_depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(_depth, v.values()), default=0)
    return 0


_TRICKY = st.text(alphabet='[]{}"\\ ab#\'\n', max_size=8)  # brackets, quotes and escapes inside strings
_NESTED = st.recursive(st.one_of(st.integers(), _TRICKY, st.none()),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(_TRICKY, inner, max_size=3)), max_leaves=20)


@FAST
@given(v=_NESTED, indent=st.sampled_from([None, 1]))
def test_the_depth_scan_skips_strings(v, indent):
    text = json.dumps(v, indent=indent)
    assert nesting_depth(text) == _depth(v)
    assert loads_json(text, field="--x") == v


@FAST
@given(depth=st.integers(1, 3 * MAX_NESTING), kinds=st.lists(st.sampled_from(["[", '{"a":']), min_size=1,
                                                             max_size=4), pad=_TRICKY)
def test_deep_json_and_toml_are_one_line_past_the_bound(depth, kinds, pad):
    opens = [kinds[i % len(kinds)] for i in range(depth)]
    text = "".join(opens) + json.dumps(pad) + "".join("]" if o == "[" else "}" for o in reversed(opens))
    toml = "a = " + "[" * depth + json.dumps(pad) + "]" * depth + "\n"
    if depth <= MAX_NESTING:
        assert _depth(loads_json(text, field="--x")) == depth
        assert _depth(loads_toml(toml, file="s.toml")["a"]) == depth
    else:
        with pytest.raises(ConfigError, match="not valid JSON: nested too deeply"):
            loads_json(text, field="--x")
        with pytest.raises(ConfigError, match="malformed TOML: nested too deeply"):
            loads_toml(toml, file="s.toml")


@FAST
@given(text=st.text(alphabet='"\'\\[]{}#\n a', max_size=60))
def test_any_text_is_a_value_or_one_line(text):
    """Quotes, backslashes, brackets and comments in any order: parsed, or one ConfigError; never another error."""
    assert 0 <= nesting_depth(text) <= text.count("[") + text.count("{")
    for parse in (lambda t: loads_json(t, field="--x"), lambda t: loads_toml(t, file="s.toml")):
        try:
            parse(text)
        except ConfigError as e:
            assert "\n" not in str(e)


@pytest.mark.parametrize("text", ['\\"' * 100_000, '"\\"\\"\\' * 30_000, '"""\\' * 50_000, "'a\n" * 70_000])
def test_the_depth_scan_is_linear(text):
    """Open strings full of escapes: each scanned once (a failed string match re-scanned from every quote was
    quadratic: 180 kB took 78 s)."""
    import time

    t0 = time.perf_counter()
    nesting_depth(text)
    nesting_depth(text, toml=True)
    assert time.perf_counter() - t0 < 5


def test_duplicate_keys_and_bad_json_are_one_line():
    with pytest.raises(ConfigError, match="a key is given twice"):
        loads_json('{"alpha": 0.8, "alpha": 0.9}', field="--x")
    with pytest.raises(ConfigError, match=r"not valid JSON \(Expecting"):
        loads_json("[1,", field="--x")


DEEP = "[" * 20_000
DEEP_OBJ = '{"a":' * 20_000


@pytest.mark.parametrize("argv", [
    SIM + ["--policy", "bands", "--num-speculative-tokens-per-batch-size", DEEP],
    SIM + ["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", DEEP_OBJ],
    SIM + ["--speculative-token-tree", DEEP],
    SIM + ["--speculative-config", DEEP_OBJ],
    CHOOSE + [DEEP],
    ["trace", "synth", "--kind", "ranked", "--topk-acceptance", DEEP, "--out", "x.parquet"],
], ids=["bands", "topk", "tree", "speculative-config", "choose-draft", "trace-synth"])
def test_20000_nested_brackets_in_a_flag_are_one_line(argv):
    _one_line(argv, "nested too deeply")


def test_20000_nested_brackets_in_a_file_are_one_line(tmp_path):
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("name = 'x'\nvalue = " + DEEP + "\n")
    deep_json = tmp_path / "deep.json"
    deep_json.write_text(DEEP)
    _one_line(["sweep", str(deep_toml), "--out", str(tmp_path / "o")], "deep.toml", "nested too deeply")
    _one_line(["plan", str(deep_toml), "--out", str(tmp_path / "p")], "deep.toml", "nested too deeply")
    _one_line(SIM[:2] + [str(deep_toml)] + SIM[3:], "deep.toml", "nested too deeply")  # a hardware profile
    from specsim.engine.acceptance import read_trace
    from specsim.profiles.hf_import import profile_from_hf_config

    from specsim.validation.vllm_outputs import read_bench

    with pytest.raises(ConfigError, match="nested too deeply"):
        profile_from_hf_config(deep_json)  # a Hugging Face config.json
    with pytest.raises(ConfigError, match="deep.json: not valid JSON: nested too deeply"):
        read_bench(deep_json)  # a vllm bench serve result
    csv = tmp_path / "t.csv"
    csv.write_text("# generator: " + DEEP + "\nsequence_id,position,beta\n0,0,1\n")  # a trace's metadata line
    with pytest.raises(ConfigError, match="nested too deeply"):
        read_trace(str(csv))


# --- vLLM's own engine-argument rules ------------------------------------------------------------------------------

VLLM_BLOCK_SIZES = {1, 8, 16, 32, 64, 128}  # vllm/config/cache.py: BlockSize = Literal[1, 8, 16, 32, 64, 128]


@FAST
@given(bs=st.integers(1, 300))
def test_block_sizes_are_vllms(bs):
    try:
        make_config(**PAIR, engine_profile="vllm-v1", block_size=bs)
    except ConfigError as e:
        assert bs not in VLLM_BLOCK_SIZES and "--block-size" in str(e) and "64 or 128" in str(e), str(e)
    else:
        assert bs in VLLM_BLOCK_SIZES


@FAST
@given(seqs=st.integers(1, 4096), budget=st.integers(1, 8192))
def test_the_token_budget_is_at_least_max_num_seqs(seqs, budget):
    """vllm/config/scheduler.py: max_num_batched_tokens must be >= max_num_seqs."""
    try:
        make_config(**PAIR, engine_profile="vllm-v1", max_num_seqs=seqs, max_num_batched_tokens=budget)
    except ConfigError as e:
        assert budget < seqs and "--max-num-batched-tokens" in str(e) and "scheduler.py" in str(e), str(e)
    else:
        assert budget >= seqs


@FAST
@given(tp=st.sampled_from([1, 2, 4, 8]), draft_tp=st.integers(1, 16))
def test_draft_tp_is_1_or_the_targets(tp, draft_tp):
    """vllm/config/speculative.py _verify_and_get_draft_tp: draft_tensor_parallel_size in (1, target tp)."""
    try:
        make_config(**PAIR, tp=tp, draft_tp=draft_tp)
    except ConfigError as e:
        assert draft_tp not in (1, tp) and "--draft-tp" in str(e) and "speculative.py" in str(e), str(e)
    else:
        assert draft_tp in (1, tp)


@pytest.mark.parametrize("argv, needles", [
    (["--engine-profile", "vllm-v1", "--block-size", "7"], ["--block-size", "(got 7)"]),
    (["--engine-profile", "vllm-v1", "--block-size", "256"], ["--block-size", "(got 256)"]),
    (["--engine-profile", "vllm-v1", "--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
     ["--max-num-batched-tokens (32)", "--max-num-seqs (64)"]),
    (["--engine-profile", "vllm-v1", "--max-num-batched-tokens", "100"], ["(1024)", "vLLM's default on h100-sxm"]),
    (["--draft-tp", "8"], ["--draft-tp must be 1 or --tp = 1 (got 8)"]),
    (["--tp", "2", "--draft-tp", "4"], ["--draft-tp must be 1 or --tp = 2 (got 4)"]),
])
def test_hand_picked_engine_arguments_vllm_refuses(argv, needles):
    _one_line(SIM + argv, *needles)


def test_the_same_rule_in_a_sweep_names_the_field(tmp_path):
    from specsim.sweep import load_spec

    p = tmp_path / "s.toml"
    p.write_text('[fixed]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\ndraft = "llama-3.2-1b"\nalpha = 0.7\n'
                 'engine_profile = "vllm-v1"\n[grid]\nblock_size = [16, 7]\n')
    with pytest.raises(ConfigError, match=r"grid.block_size.*\(got 7\); allowed: one of 1, 8, 16, 32, 64, 128"):
        load_spec(p)


# --- messages carrying braces --------------------------------------------------------------------------------------

@FAST
@given(text=st.text(alphabet="{}0123abc_%s\\", max_size=12))
def test_a_rule_shows_user_text_verbatim(text):
    r = RuleViolation("{0}: {what}", "speculative_token_tree", what=text)
    assert r.render(flag) == f"--speculative-token-tree: {text}"
    assert str(r) == f"speculative_token_tree: {text}"
    assert str(ConfigError(text, field=text, value=text, allowed=text)).count(text) >= 1


@FAST
@given(text=st.text(alphabet="{}abc_%s\\", max_size=12))
def test_user_text_inside_a_template_never_breaks_it(text):
    """A rule that writes a user's text into its template (an f-string) still renders: only {0}, {1}... and the
    rule's own {names} are placeholders; any other brace is text (str.format raised KeyError / IndexError)."""
    assert RuleViolation("{0}: " + text, "gamma").render(flag) == "--gamma: " + text


@pytest.mark.parametrize("tree", ['{"widths": [2, "{x}"]}', '{"widths": [2, "{0}"]}', '{"widths": ["{"]}',
                                  '[[0], "}{"]'])
def test_a_tree_with_braces_is_one_line_naming_it(tree):
    line = _one_line(SIM + ["--speculative-token-tree", tree], "--speculative-token-tree")
    inner = json.loads(tree)
    shown = inner["widths"] if isinstance(inner, dict) else inner
    assert shown[-1] in line  # the user's own braces, verbatim ({0} not replaced by a flag)


# --- SLO flags carry their unit ------------------------------------------------------------------------------------

@settings(max_examples=20, deadline=None)
@given(old=st.sampled_from(sorted(RENAMED)), v=st.sampled_from(["50", "0.05", "1", "abc", "-1"]))
def test_the_unitless_slo_flags_are_refused_naming_the_new_one(old, v):
    _one_line(SIM + [f"{old}={v}"], f"field '{old}'", f"renamed to {old}-s", "seconds")


def test_the_slo_flags_in_seconds_are_read_as_seconds():
    code, out, err = cli_redirect(*SIM, "--slo-tpot-s", "0.05", "--slo-ttft-s", "1e-9", "--slo-warmup-s", "0")
    assert code == 0, err
    r = json.loads(out)
    assert r["slo_attained"] == 0.0  # no request's first token within 1 ns: the value was taken as seconds
