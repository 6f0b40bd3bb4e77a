"""`specsim choose-draft` / `specsim.studies.choose`: draft ranking, γ bands by load, break-even, memory, bad input."""

import json
from itertools import pairwise

import pytest

from specsim import theory
from specsim.studies.choose import bands, choose_draft, parse_draft
from specsim.errors import ConfigError

T5 = ("t5-v1_1-small", "t5-v1_1-base", "t5-v1_1-large")
# α per (task, temperature) for small / base / large: PAPER-FACTS.md, Table 2/3 inputs.
T5_ALPHA = {"EnDe T=0": (0.75, 0.80, 0.82), "EnDe T=1": (0.62, 0.68, 0.71),
            "CNNDM T=0": (0.65, 0.73, 0.74), "CNNDM T=1": (0.53, 0.55, 0.56)}
T5_LENGTHS = {"EnDe": (64, 64), "CNNDM": (512, 128)}  # prompt, output


def _t5(setting: str) -> dict:
    prompt, output = T5_LENGTHS[setting.split()[0]]
    drafts = [f"{d}:{a}" for d, a in zip(T5, T5_ALPHA[setting])]
    return choose_draft("tpu-v4", "t5-v1_1-xxl", drafts, batches=[1], gamma_max=10, prompt_len=prompt,
                        output_len=output, requests=64)


@pytest.fixture(scope="module")
def t5_results():
    return {s: _t5(s) for s in T5_ALPHA}


@pytest.mark.parametrize("setting", list(T5_ALPHA))
def test_t5_ranking_follows_eq5_at_the_derived_c(t5_results, setting):
    """The simulated ranking at batch 1 is eq. (5)'s ranking at the c the cost model derives (t5x-tpu stack)."""
    res = t5_results[setting]
    by_eq5 = sorted(res["drafts"], key=lambda d: -max(theory.speedup(d["alpha"], g, d["c"]) for g in range(1, 11)))
    print(setting, [(d["draft"], round(d["points"][0]["max_speedup"], 3), round(d["c"], 4)) for d in res["drafts"]])
    assert res["ranking"] == [d["draft"] for d in by_eq5]
    for d in res["drafts"]:
        p = d["points"][0]
        assert 1.0 < p["best_speedup"] <= p["speedup_eq5_at_best"] * 1.02  # prefill + request ends only cost time
        assert p["best_speedup"] > 0.85 * p["speedup_eq5_at_best"]


# The paper's measured conclusion (T5-small best in all four settings, Table 2). With the paper's own c
# (0.02 / 0.04 / 0.11) and α, eq. (5) — and so the simulator, whose t5x-tpu stack reproduces those c — puts
# T5-base ahead of T5-small in three settings (e.g. EnDe T=0: 3.25× vs 3.16× at γ = 8); the paper measured T5-base
# below its eq. (5) value (2.8× vs 3.3×). Strict xfail: if a recalibration makes T5-small win there, this turns red.
_BASE_AHEAD = pytest.mark.xfail(strict=True, reason="eq. (5) at the paper's c and α ranks T5-base first here; "
                                                    "the paper's measured T5-base speedups fall below eq. (5)")


@pytest.mark.parametrize("setting", [pytest.param("EnDe T=0", marks=_BASE_AHEAD),
                                     pytest.param("EnDe T=1", marks=_BASE_AHEAD),
                                     pytest.param("CNNDM T=0", marks=_BASE_AHEAD), "CNNDM T=1"])
def test_paper_conclusion_t5_small_is_the_best_draft(t5_results, setting):
    res = t5_results[setting]
    assert res["ranking"][0] == "t5-v1_1-small"
    assert res["ranking"][-1] == "t5-v1_1-large"


# The paper's measured T5-small speedups (PAPER-FACTS.md, Table 2) beside the most any model of its α allows: a
# step emits at most one token past its first rejection, so at T = 0 (β ∈ {0, 1}) every step absorbs at least one
# rejected position and tokens per target run can never exceed 1 / (1 − α), whatever γ, γ policy, draft cost or
# clustering of acceptance; and a step costs at least one target pass. CNNDM T = 0 measured 3.1× at α = 0.65, above
# that ceiling of 2.86× — so the timed runs did not have the α the paper lists, and no cost calibration can make a
# simulator reproduce Table 2's walltimes (and the ranking they imply) from Table 2's α. This is why the xfails
# above stay: the conclusion rests on measurements that contradict the paper's own inputs.
PAPER_T5_SMALL_SPEEDUP = {"EnDe T=0": 3.4, "EnDe T=1": 2.6, "CNNDM T=0": 3.1, "CNNDM T=1": 2.3}


def test_paper_t5_small_speedups_against_the_oracle_ceiling():
    ceiling = {s: float(theory.oracle_expected_tokens(T5_ALPHA[s][0])) for s in T5_ALPHA}
    print({s: (PAPER_T5_SMALL_SPEEDUP[s], round(ceiling[s], 3)) for s in T5_ALPHA})
    assert PAPER_T5_SMALL_SPEEDUP["CNNDM T=0"] > ceiling["CNNDM T=0"]  # 3.1 > 2.857: unreachable at α = 0.65
    assert PAPER_T5_SMALL_SPEEDUP["EnDe T=0"] < ceiling["EnDe T=0"]  # 3.4 < 4.0: reachable
    # the simulator obeys the ceiling: oracle γ, a free draft and free verification, CNNDM T = 0 α for T5-small
    from specsim.simulate import make_config, run
    row = run(make_config(hardware="tpu-v4", target="t5-v1_1-xxl", draft="t5-v1_1-small", alpha=0.65,
                          policy="oracle", fixed_c=0.0, requests=64, prompt_len=512, output_len=128, seed=0))
    assert row["tokens_per_target_run"] <= ceiling["CNNDM T=0"] * 1.03
    assert row["speedup"] < PAPER_T5_SMALL_SPEEDUP["CNNDM T=0"]


def test_t5_large_is_last_everywhere(t5_results):
    """What the paper's conclusion and the model agree on: the 800M draft (c ≈ 0.11) is the worst of the three."""
    assert all(r["ranking"][-1] == "t5-v1_1-large" for r in t5_results.values())


from conftest import cli_capsys as _cli  # noqa: E402  (the shared CLI runner)


def test_bands_and_break_even_on_h100(capsys):
    code, out, err = _cli(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                          "--draft", "llama-3.2-1b:0.7", "--batch", "1,4,16,64,256,512", "--json")
    assert code == 0, err
    res = json.loads(out)
    (d,) = res["drafts"]
    gammas = [p["recommended_gamma"] for p in d["points"]]
    print(d["bands_text"], [round(p["max_speedup"], 3) for p in d["points"]])
    assert gammas[0] >= 1 and d["points"][0]["best_speedup"] > 1
    assert all(a >= b for a, b in pairwise(gammas)), gammas  # γ shrinks (or turns off) as batch grows
    assert gammas[-1] < gammas[0]
    # break-even: the first batch where no γ reaches 1, and speculation is off from there on
    be = d["break_even"]
    assert be is not None and be in res["loads"]
    for p in d["points"]:
        assert (p["max_speedup"] < 1) == (p["load"] >= be)
        assert (p["recommended_gamma"] == 0) == (p["max_speedup"] <= 1)
    # bands tile [1, 512] without gaps, one γ each, the last one off
    bs = d["bands"]
    assert bs[0]["min"] == 1 and bs[-1]["max"] == 512 and bs[-1]["gamma"] == 0
    assert all(b["max"] + 1 == c["min"] for b, c in pairwise(bs))
    assert res["recommendation"]["draft"] == "llama-3.2-1b"


def test_bands_merge_contiguous_points():
    assert bands([1, 2, 4, 8, 16], [3, 3, 2, 2, 0]) == [
        {"min": 1, "max": 3, "max_inclusive": True, "gamma": 3},
        {"min": 4, "max": 15, "max_inclusive": True, "gamma": 2},
        {"min": 16, "max": 16, "max_inclusive": True, "gamma": 0}]
    r = bands([0.5, 2.0, 8.0], [4, 1, 1], kind="rate")
    assert r == [{"min": 0.5, "max": 2.0, "max_inclusive": False, "gamma": 4},
                 {"min": 2.0, "max": 8.0, "max_inclusive": True, "gamma": 1}]


def test_human_output_has_a_table_per_draft_and_a_recommendation(capsys):
    code, out, err = _cli(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                          "--draft", "llama-3.2-1b:0.7", "--draft", "llama-3.2-3b:0.75", "--batch", "1,64")
    assert code == 0, err
    assert "llama-3.2-1b" in out and "llama-3.2-3b" in out and "rank 1" in out and "rank 2" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("recommendation: use llama-3.2-1b")


@pytest.mark.parametrize("spec", ["llama-3.2-1b:1.5", "nosuch:0.5", "llama-3.2-1b", "llama-3.2-1b:nofile.parquet",
                                  "t5-v1_1-small:0.5"])
def test_bad_draft_spec_is_one_line_exit_2(capsys, spec):
    code, out, err = _cli(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                          "--draft", spec, "--batch", "1")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "--draft" in err and spec in err


def test_parse_draft():
    d = parse_draft("llama-3.2-1b:0.7")
    assert (d.model, d.alpha, d.trace) == ("llama-3.2-1b", 0.7, None)
    with pytest.raises(ConfigError, match="out of range"):
        parse_draft("llama-3.2-1b:1.0")
    with pytest.raises(ConfigError, match="out of range"):
        parse_draft("llama-3.2-1b:nan")


def test_trace_draft_uses_the_trace_alpha_and_clustering(tmp_path):
    from specsim.traces import synth as trace_synth

    path = tmp_path / "clustered.parquet"
    trace = trace_synth.markov(0.7, 20, n_sequences=32, length=256, seed=0)
    trace.write(path)
    res = choose_draft("h100-sxm", "llama-3.1-8b", [f"llama-3.2-1b:{path}", f"llama-3.2-1b:{trace.alpha}"],
                       batches=[1])
    clustered, iid = res["drafts"]
    assert clustered["alpha"] == pytest.approx(trace.alpha) == iid["alpha"]
    assert clustered["trace"] == str(path) and iid["trace"] is None
    assert abs(iid["clustering_delta"]) < 0.05
    # easy/hard stretches: a step starts right after a rejection, i.e. usually inside a hard stretch, so fewer tokens
    # per target run than eq. (1) at the same α, and a lower speedup
    assert clustered["clustering_delta"] < -0.05
    assert clustered["points"][0]["max_speedup"] < iid["points"][0]["max_speedup"]


def test_memory_refusal(capsys):
    # 70B in bf16 (~141 GB) + a draft on one 80 GB H100: nothing fits -> one line, exit 2
    code, out, err = _cli(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-70b",
                          "--draft", "llama-3.2-1b:0.7", "--batch", "1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "does not fit" in err and "GB" in err
    # the same pair on 4 chips fits at batch 1 but not at batch 4096: that point is marked, not simulated
    res = choose_draft("h100-sxm", "llama-3.1-70b", ["llama-3.2-1b:0.7"], batches=[1, 4096], tp=4, gamma_max=3,
                       requests=16)
    (d,) = res["drafts"]
    assert [p["fits"] for p in d["points"]] == [True, False]
    assert d["memory"]["max_batch"] < 4096 and "does not fit" in d["memory"]["message"]
    assert d["points"][1]["recommended_gamma"] == 0


def test_rate_mode_json_is_one_object(capsys):
    code, out, err = _cli(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                          "--draft", "llama-3.2-1b:0.7", "--rate", "1,20", "--gamma-max", "4", "--requests", "60",
                          "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["load_kind"] == "rate" and res["loads"] == [1.0, 20.0]
    assert {"drafts", "ranking", "recommendation", "hardware", "target", "stack"} <= set(res)
    d = res["drafts"][0]
    assert [b["gamma"] for b in d["bands"]] and all(1 <= p["best_gamma"] <= 4 for p in d["points"])


def test_batch_and_rate_together_is_an_error(capsys):
    code, _, err = _cli(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                        "--draft", "llama-3.2-1b:0.7", "--batch", "1", "--rate", "2")
    assert code == 2 and "--rate" in err
