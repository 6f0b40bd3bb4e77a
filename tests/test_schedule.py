"""choose-draft's batch-size → γ schedule (`specsim.studies.schedule`) as a specification: never rising with load,
a band boundary moved only where the speedup difference exceeds the noise, the same schedule (or one within
the noise) under two seeds, and printed as the configs vLLM, specsim's bands policy and TensorRT-LLM take."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from conftest import cli_capsys

from specsim.engine.policies.bands import BandsPolicy
from specsim.methods.spec_config import parse as parse_spec_config
from specsim.simulate import make_config
from specsim.studies.choose import bands, choose_draft
from specsim.setup.gamma_schedule import monotone, scheduled_speedup, speedup_noise, tolerance
from specsim.studies.schedule import engine_configs


def _pt(s, sd=None, fits=True):
    """A choose-draft point: speedup per γ = 1..len(s), its noise, the smallest γ as best (as choose does)."""
    return {"fits": fits, "speedup_by_gamma": list(s), "speedup_noise_by_gamma": sd or [0.0] * len(s),
            "best_gamma": 1}


def _trt_len(schedule: dict, batch: int) -> int:
    """TensorRT-LLM's rule for draft_len_schedule: the value of the largest threshold <= batch."""
    return schedule[str(max(int(k) for k in schedule if int(k) <= batch))]


# --- the rule ------------------------------------------------------------------------------------------------------

def test_gamma_never_rises_with_load():
    # batch 16 alone would pick γ 4 (1.50 beats 1.40 by 7%): capped at the previous band's 3
    pts = [_pt([1.2, 1.5, 1.6, 1.4]), _pt([1.2, 1.4, 1.45, 1.3]), _pt([1.1, 1.3, 1.4, 1.5])]
    assert monotone(pts) == [3, 3, 3]
    pts = [_pt([1.2, 1.3, 1.1]), _pt([1.3, 1.2, 1.0]), _pt([1.1, 1.3, 1.4])]
    assert monotone(pts) == [2, 1, 1]


def test_a_band_moves_only_beyond_the_noise():
    # γ 2 at batch 1; at the next load γ 1 is 1.5% better: within 2%, the band holds
    assert monotone([_pt([1.30, 1.40]), _pt([1.20, 1.182])]) == [2, 2]
    # 4% better: beyond 2% and beyond the noise, it moves
    assert monotone([_pt([1.30, 1.40]), _pt([1.20, 1.152])]) == [2, 1]
    # 4% better but the runs are noisy (σ 0.02 each: 2σ of the difference is 0.057): it holds
    assert monotone([_pt([1.30, 1.40]), _pt([1.20, 1.152], sd=[0.02, 0.02])]) == [2, 2]
    assert tolerance(1.2, 0.02, 0.02) == pytest.approx(2 * (2 * 0.02 ** 2) ** 0.5)
    assert tolerance(1.2, 0.0, 0.0) == pytest.approx(0.024)


def test_two_noisy_seeds_give_one_schedule_where_the_per_point_best_flips():
    # the per-point best γ flips between the seeds at batch 16 (1.31 vs 1.30): the schedule does not
    a = [_pt([1.25, 1.40, 1.38]), _pt([1.30, 1.31, 1.2])]
    b = [_pt([1.26, 1.41, 1.37]), _pt([1.31, 1.30, 1.2])]
    assert monotone(a) == monotone(b) == [2, 2]


def test_off_where_no_gamma_pays_and_from_there_on():
    pts = [_pt([1.2, 1.1]), _pt([0.99, 0.9]), _pt([1.01, 0.9]), _pt([1.3], fits=False)]
    assert monotone(pts) == [1, 0, 0, 0]
    assert [scheduled_speedup(p, g) for p, g in zip(pts, monotone(pts))] == [1.2, 1.0, 1.0, 1.0]
    # a slowdown is never scheduled even within the tolerance of the best
    assert monotone([_pt([1.005, 0.995])]) == [1]


def test_noise_from_the_runs_histogram():
    # 100 request-steps, half emit 1 token, half 3: τ = 2, sd 1, SE 0.1, relative 5%
    assert speedup_noise({"speedup": 1.5, "tokens_per_run_hist": [50, 0, 50]}) == pytest.approx(1.5 * 0.1 / 2)
    assert speedup_noise({"speedup": 1.5, "tokens_per_run_hist": [0, 80, 0]}) == 0.0
    assert speedup_noise({"speedup": 1.5}) == 0.0


# --- the configs ---------------------------------------------------------------------------------------------------

def _row(gammas, loads=(1, 8, 64, 256), method="draft_model", draft="llama-3.2-1b"):
    return {"draft": draft, "method": method, "bands": bands(list(loads), list(gammas), "batch")}


def test_configs_reproduce_the_schedule_at_every_batch():
    row = _row([3, 2, 2, 0])
    cfg = engine_configs(row, "llama-3.1-8b", "batch")
    v, t = cfg["vllm"], cfg["trtllm"]
    assert v["num_speculative_tokens_per_batch_size"] == [[1, 7, 3], [8, 255, 2], [256, 256, 0]]
    assert t == {"max_draft_len": 3, "draft_len_schedule": {"1": 3, "8": 2, "256": 0}}
    # specsim's bands policy takes the vLLM form as it is (0 = off) ...
    given = v["num_speculative_tokens_per_batch_size"]
    make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, policy="bands",
                num_speculative_tokens_per_batch_size=given)
    policy = BandsPolicy(given)
    want = {b: 3 if b < 8 else 2 if b < 256 else 0 for b in range(1, 600)}  # beyond 256: the last band holds
    assert all(policy.gamma_at(b) == g for b, g in want.items())
    # ... and TensorRT-LLM's thresholds give the same γ at every batch size
    assert all(_trt_len(t["draft_len_schedule"], b) == g for b, g in want.items())
    keys = [int(k) for k in t["draft_len_schedule"]]
    assert keys == sorted(keys) and keys[0] == 1
    assert all(a >= b for a, b in pairwise(t["draft_len_schedule"].values()))
    # one vLLM server per band: its --speculative-config, none where speculation is off
    per = v["per_band"]
    assert [p["speculative_config"] for p in per] == [
        {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 3},
        {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 2}, None]


def test_the_first_band_starts_at_one_for_tensorrt_llm_and_heads_name_their_repo():
    cfg = engine_configs(_row([4, 2], loads=(4, 32), method="eagle3", draft="eagle3-llama-3.1-8b"), "llama-3.1-8b",
                         "batch")
    assert cfg["trtllm"]["draft_len_schedule"] == {"1": 4, "32": 2}
    assert cfg["vllm"]["per_band"][0]["speculative_config"]["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    mtp = engine_configs(_row([2], loads=(1,), method="mtp", draft="mtp-head"), "llama-3.1-8b", "batch")
    assert mtp["vllm"]["per_band"][0]["speculative_config"]["model"] == "meta-llama/Llama-3.1-8B"
    ngram = engine_configs(_row([3], loads=(1,), method="ngram", draft="ngram"), "llama-3.1-8b", "batch")
    assert "model" not in ngram["vllm"]["per_band"][0]["speculative_config"]
    # off from the first batch: TensorRT-LLM gets no speculation at all; rate bands are no engine config
    assert engine_configs(_row([0, 0]), "llama-3.1-8b", "batch")["trtllm"] is None
    assert engine_configs(_row([3, 1]), "llama-3.1-8b", "rate") is None


# --- choose-draft end to end ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_seeds():
    kw = dict(batches=[1, 16, 64, 128, 256], gamma_max=4, stack="vllm")  # choose-draft's request counts
    return [choose_draft("h100-sxm", "llama-3.1-8b", ["llama-3.2-1b:0.7"], seed=s, **kw)["drafts"][0]
            for s in (0, 1)]


def test_choose_draft_schedule_is_monotone_and_stable_under_two_seeds(two_seeds):
    scheds = [[p["recommended_gamma"] for p in d["points"]] for d in two_seeds]
    for s in scheds:
        assert all(a >= b for a, b in pairwise(s)), s
        assert s[0] >= 1
    for d, other in zip(two_seeds, scheds[::-1]):
        for p, g_mine, g_other in zip(d["points"], [q["recommended_gamma"] for q in d["points"]], other):
            if g_mine != g_other:  # a boundary moved between the seeds: only within this seed's noise
                a, b = scheduled_speedup(p, g_mine), scheduled_speedup(p, g_other)
                top = max(p["speedup_by_gamma"])
                assert abs(a - b) <= tolerance(top, max(p["speedup_noise_by_gamma"]),
                                               max(p["speedup_noise_by_gamma"])), (p["load"], a, b)
    assert scheds[0] == scheds[1]  # here the two seeds agree outright (γ 2 up to 127, 1 to 255, off at 256)
    assert scheds[0][-1] == 0 and scheds[0][0] > scheds[0][-2] > 0
    cfgs = [d["engine_configs"] for d in two_seeds]
    assert all(c["vllm"]["num_speculative_tokens_per_batch_size"][0][0] == 1 for c in cfgs)
    for d in two_seeds:  # the realized speedup is the one at the scheduled γ
        for p in d["points"]:
            assert p["realized_speedup"] == scheduled_speedup(p, p["recommended_gamma"])


def test_the_printed_configs_paste_back(capsys):
    code, out, err = cli_capsys(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                                "--draft", "llama-3.2-1b:0.7", "--batch", "1,64,512", "--gamma-max", "3",
                                "--requests", "32")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if "num_speculative_tokens_per_batch_size = " in ln)
    given = json.loads(line.split(" = ", 1)[1])
    make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, policy="bands",
                num_speculative_tokens_per_batch_size=given)
    pasted = [ln.split("--speculative-config '", 1)[1].rstrip("'") for ln in out.splitlines()
              if "--speculative-config '" in ln]
    assert pasted
    for text, band in zip(pasted, [b for b in given if b[2]]):
        spec = parse_spec_config(text)  # what specsim's own --speculative-config takes
        assert spec["gamma"] == band[2] and spec["draft"] == "llama-3.2-1b"
    trt = next(ln for ln in out.splitlines() if "draft_len_schedule:" in ln)
    assert f"max_draft_len: {given[0][2]}" in trt and "{1: " in trt


def test_a_token_tree_is_printed_in_vllms_own_form():
    from specsim.methods.tree import parse_tree
    from specsim.studies.schedule import vllm_tree

    text = vllm_tree('{"widths": [2, 2, 1]}', None, 0.7)
    assert text.startswith("[(0,), (1,), (0, 0)") and parse_tree(text, None).nodes == 10  # vLLM's tuple literal
    row = dict(_row([3, 0], loads=(1, 256), method="eagle3", draft="eagle3-llama-3.1-8b (10-node tree)"),
               tree='{"widths": [2, 2, 1]}', tree_vllm=text)
    cfg = engine_configs(row, "llama-3.1-8b", "batch")
    assert cfg["vllm"]["per_band"][0]["speculative_config"]["speculative_token_tree"] == text
    assert cfg["vllm"]["per_band"][0]["speculative_config"]["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert cfg["trtllm"] is None  # a tree's depth is its shape: no draft-length schedule
