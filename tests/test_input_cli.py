"""Command-line values as an input surface: whatever numbers or words reach `theory`, `roofline`, `simulate` and
`choose-draft`, the real entrypoint either prints one JSON object (exit 0) or one line naming the option and the
value (exit 2). Never a traceback, never a hang. Hand-picked values below must be refused, so the test can fail."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


_WORDS = ["nan", "-nan", "inf", "-inf", "-1", "0", "-0", "1", "2", "3", "4", "8", "16", "0.5", "0.999", "1e3",
          "1e308", "99999999999999999999", "abc", "", " ", "1,2", "0x10", "true"]
_PLAUSIBLE = st.one_of(st.integers(1, 8).map(str), st.floats(0, 0.99).map(repr))  # so that many runs succeed
NUMBERS = st.one_of(_PLAUSIBLE, _PLAUSIBLE, st.sampled_from(_WORDS), st.integers(-10**9, 10**12).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr))

# command -> (fixed arguments, {option: strategy for its value}); workload sizes stay small so that a valid run is
# quick, their bad values are fuzzed all the same
_SMALL_OR_BAD = st.one_of(st.sampled_from(["0", "-1", "nan", "inf", "abc", "1e30", "2.5", ""]),
                          st.integers(1, 12).map(str))
SURFACES = {
    "theory": (["theory"], {"--alpha": NUMBERS, "--gamma": NUMBERS, "--c": NUMBERS, "--c-hat": NUMBERS}),
    "roofline": (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b"],
                 {"--batch": NUMBERS, "--context": NUMBERS, "--tp": NUMBERS,
                  "--positions": st.one_of(NUMBERS, st.sampled_from(["1,2,4", "1-8", "8-1", "1-99999999999", ","])),
                  "--stack": st.sampled_from(["ideal", "default", "cuda-graphs", "nope", "", "./nope.toml"])}),
    "simulate": (["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                  "--prompt-len", "32"],
                 {"--alpha": NUMBERS, "--gamma": NUMBERS, "--batch": NUMBERS, "--tp": NUMBERS, "--rate": NUMBERS,
                  "--max-batch": NUMBERS, "--lenience": NUMBERS, "--fixed-c": NUMBERS, "--slo-ttft-s": NUMBERS,
                  "--slo-warmup-s": NUMBERS, "--draft-tp": _SMALL_OR_BAD,
                  "--seed": NUMBERS, "--replicas": _SMALL_OR_BAD, "--requests": _SMALL_OR_BAD,
                  "--output-len": _SMALL_OR_BAD,
                  "--policy": st.sampled_from(["fixed", "optimal", "heuristic", "oracle", "greedy", "", "1"]),
                  "--engine": st.sampled_from(["simpy", "fast", "auto", "gpu", ""]),
                  "--length-dist": st.sampled_from(["fixed", "uniform", "lognormal", "zipf"]),
                  # JSON values, typed as in a sweep file; vLLM's block sizes (the engine profile is not given, so
                  # a valid one is refused as vllm-v1's, naming the flag)
                  "--tree-topk-acceptance": st.sampled_from(['[0.7, "0.85"]', "[0.7, true]", "[0.7, 0.8]", "[]",
                                                             "[0.7, NaN]", "[" * 5000, "{}", "0.7"]),
                  "--num-speculative-tokens-per-batch-size": st.sampled_from(
                      ['[[1, 8, "4"]]', "[[1, 8, 4.0]]", "[[1, 8, 4]]", "[[1, 8]]", "[[1,4,5]", '{"a":' * 5000]),
                  "--block-size": st.sampled_from(["16", "7", "256", "0", "x"])}),
    "choose-draft": (["choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--output-len", "8",
                      "--requests", "4"],
                     {"--batch": st.sampled_from(["1", "1,2", "nan", "inf", "0", "1.5", "abc", "", "-1", "5000"]),
                      "--gamma-max": st.sampled_from(["1", "2", "0", "65", "nan", "abc", "-3"]),
                      "--tp": st.sampled_from(["1", "2", "3", "16", "0", "nan"]),
                      "--prompt-len": _SMALL_OR_BAD, "--seed": NUMBERS,
                      "--draft": st.sampled_from(["llama-3.2-1b:0.7", "llama-3.2-1b:nan", "llama-3.2-1b:1",
                                                  "llama-3.2-1b:-0.1", "llama-3.2-1b", ":0.5", "nope:0.5",
                                                  "llama-3.2-1b:inf"])}),
}


from conftest import cli_capsys as _cli  # noqa: E402  (the shared CLI runner)


def _names(option: str) -> list[str]:
    """How a message may name an option: as given, as its field ('--slo-ttft' -> 'slo_ttft'), or bare ('tp')."""
    bare = option.lstrip("-")
    return [option, bare.replace("-", "_"), f"'{bare}'", bare]


def check_outcome(argv: list[str], given_opts: dict[str, str], code: int, out: str, err: str) -> None:
    assert "Traceback" not in err, err
    if code == 0:
        assert err == "", err
        assert out.endswith("\n") and out.count("\n") == 1, out
        assert isinstance(json.loads(out), dict)
        return
    assert code == 2, (code, argv, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
    line = lines[0]
    if "does not fit" in line:  # valid values whose setup is too large for the device: the figures are given
        assert "GB" in line
        return
    named = [o for o in given_opts if any(n in line for n in _names(o))]
    # a cross-field rule may name its rule instead of one option ("give exactly one of alpha and trace")
    assert named or "give" in line or "exactly one" in line, (given_opts, line)
    for o in named:
        if f"field '{o}'" in line and "missing" not in line:  # one of ours: value and allowed range given
            assert "(got " in line and "allowed: " in line, line


@st.composite
def invocations(draw, surface: str):
    fixed, options = SURFACES[surface]
    chosen = draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=3, unique=True))
    given_opts = {o: draw(options[o]) for o in chosen}
    argv = list(fixed)
    for o, v in given_opts.items():
        argv += [f"{o}={v}"]  # `=`: a value like "-1" is a value, not an option
    if surface == "theory" and "--alpha" not in given_opts:
        argv.append("--table1")
    if surface == "choose-draft" and "--draft" not in given_opts:
        argv += ["--draft", "llama-3.2-1b:0.7"]
    if surface == "simulate" and "--alpha" not in given_opts:
        argv += ["--alpha", "0.7"]
    if surface == "simulate":
        argv += [] if "--requests" in given_opts else ["--requests", "6"]
        argv += [] if "--output-len" in given_opts else ["--output-len", "16"]
    return argv + ["--json"], given_opts


@pytest.mark.parametrize("surface, examples", [("theory", 80), ("roofline", 80), ("simulate", 50),
                                               ("choose-draft", 25)])
def test_cli_values_give_one_json_object_or_one_line(capsys, surface, examples):
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(inv=invocations(surface))
    def run(inv):
        argv, given_opts = inv
        code, out, err = _cli(capsys, *argv)
        check_outcome(argv, given_opts, code, out, err)

    run()


# --- hand-picked values that must be refused ----------------------------------------------------------------------

SIM7 = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7"]
MUST_REFUSE = [
    (["theory", "--alpha", "nan"], ["--alpha", "not a number", "nan", "[0, 1)"]),
    (["theory", "--alpha", "0.5", "--c", "inf"], ["--c", "not a finite number"]),
    (["theory", "--alpha", "0.5", "--gamma", "0"], ["--gamma", "(got 0)", ">= 1"]),
    (["theory", "--alpha", "1"], ["--alpha", "(got 1.0)", "[0, 1)"]),
    (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--tp", "3"], ["tp", "(got 3)", "n_heads"]),
    (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--tp", "16"], ["tp", "chips_per_node = 8"]),
    (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--positions", "1-99999999999"],
     ["--positions", "allowed"]),
    (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--positions", "1-100000"],
     ["--positions", "too many values"]),
    (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "0"], ["--batch", "(got 0)"]),
    (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--context", "-1"], ["--context"]),
    (["roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "nan"], ["--batch", "nan"]),
    (["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7",
      "--tp", "3"], ["tp", "n_heads = 32"]),
    (["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7",
      "--tp", "16"], ["tp", "chips_per_node"]),
    (["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha",
      "nan"], ["--alpha", "nan"]),
    (["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7",
      "--rate", "inf"], ["--rate", "inf"]),
    (["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7",
      "--policy", "greedy"], ["--policy", "'greedy'"]),
    (["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "smollm2-135m", "--alpha", "0.7",
      "--tp", "2"], ["smollm2-135m", "n_heads = 9"]),  # the draft shares the target's tp and must split too
    (SIM7 + ["--slo-warmup-s", "-1"], ["--slo-warmup-s"]),
    (SIM7 + ["--slo-warmup-s", "nan"], ["--slo-warmup-s"]),
    (SIM7 + ["--slo-warmup-s", "inf"], ["--slo-warmup-s"]),
    (SIM7 + ["--slo-warmup-s", "abc"], ["--slo-warmup-s"]),
    (SIM7 + ["--slo-warmup-s", "1e10"], ["--slo-warmup-s"]),
    (SIM7 + ["--slo-tpot", "50"], ["--slo-tpot", "renamed to --slo-tpot-s", "seconds"]),
    (SIM7 + ["--slo-ttft", "1"], ["--slo-ttft", "renamed to --slo-ttft-s"]),
    (SIM7 + ["--slo-warmup", "10"], ["--slo-warmup", "renamed to --slo-warmup-s"]),
    (SIM7 + ["--draft-tp", "3"], ["draft", "3"]),
    (SIM7 + ["--tp", "2", "--draft-tp", "4"], ["--draft-tp", "1 or --tp = 2", "speculative.py"]),
    (SIM7 + ["--engine-profile", "vllm-v1", "--block-size", "7"], ["--block-size", "(got 7)", "64 or 128"]),
    (SIM7 + ["--engine-profile", "vllm-v1", "--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
     ["--max-num-batched-tokens (32)", "--max-num-seqs (64)", "scheduler.py"]),
    (SIM7 + ["--engine-profile", "vllm-v1", "--max-num-batched-tokens", "100"],
     ["--max-num-seqs (1024)", "default on h100-sxm"]),
    (SIM7 + ["--length-dist", "zipf"], ["--length-dist", "lognormal"]),
    (SIM7 + ["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", '[0.7, "x"]'],
     ["--tree-topk-acceptance"]),
    (["choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b:0.7",
      "--batch", "inf"], ["--batch", "'inf'"]),
    (["choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b:0.7",
      "--tp", "3"], ["tp", "n_heads = 32"]),
    (["choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b:0.7",
      "--requests", "99999999999999"], ["--requests", "allowed"]),
]


@pytest.mark.parametrize("argv, needles", MUST_REFUSE, ids=[" ".join(a[-2:]) for a, _ in MUST_REFUSE])
def test_hand_picked_values_are_refused_in_one_line(capsys, argv, needles):
    code, out, err = _cli(capsys, *argv, "--json")
    assert code == 2 and out == "", (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_nan_is_not_a_number_in_pydantic_translation_too():
    from pydantic import ValidationError

    from specsim.config import SimConfig
    from specsim.profiles.loader import _translate

    with pytest.raises(ValidationError) as e:
        SimConfig(hardware="h", target="t", draft="d", alpha=float("nan"))
    err = _translate(e.value, None)
    assert err.message == "not a number" and err.field == "acceptance.alpha" and "nan" in str(err)  # nested loc
