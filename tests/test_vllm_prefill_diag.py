"""experiments/vllm_prefill_probe.py and vllm_prefill_excess.py: the two diagnoses of the grid's prefill steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
probe = pytest.importorskip("vllm_prefill_probe")
excess = pytest.importorskip("vllm_prefill_excess")


def _pre(t: float, n: int = 18, kv: int = 0) -> dict:
    return {"ctx_requests": 1, "gen_requests": 0, "ctx_tokens": n, "gen_tokens": 0, "kv_ctx_tokens": kv, "time_s": t}


def _dec(t: float) -> dict:
    return {"ctx_requests": 0, "gen_requests": 1, "ctx_tokens": 0, "gen_tokens": 1, "kv_ctx_tokens": 18, "time_s": t}


def _run(how: str, pre: list[float], dec: list[float], repeat: int = 0) -> dict:
    steps = [s for p, d in zip(pre, dec) for s in (_pre(p), _dec(d))]
    return {"mode": "plain", "_how": how, "repeat": repeat, "steps": steps}


def test_probe_pairs_each_prefill_with_the_same_requests_on_the_wall_clock():
    runs = [_run("wall", [.2, .4], [.1, .1]), _run("lockstep", [.22, .44], [.12, .12]),
            _run("stepped", [.2, .4], [.1, .1])]
    lines = probe.summarize(runs)
    assert "plain prefill, lockstep / wall (per request): 1.100" in "\n".join(lines)
    assert "plain prefill, stepped / wall (per request): 1.000" in "\n".join(lines)
    assert "plain decode, lockstep / wall (per repeat): 1.200" in "\n".join(lines)


def test_probe_leaves_out_a_run_whose_prefills_do_not_pair():
    runs = [_run("wall", [.2, .4], [.1, .1]), _run("lockstep", [.3], [.1])]  # one request short: not paired
    assert not any("prefill, lockstep / wall" in x for x in probe.summarize(runs))


def test_probe_counts_only_one_request_steps():
    run = {"steps": [_pre(.2), _dec(.1), dict(_pre(.5), gen_requests=1, gen_tokens=1)]}  # a mixed step: neither
    assert probe.steps_of(run, True) == [.2] and probe.steps_of(run, False) == [.1]


def test_last_chunk_is_compared_only_where_the_last_three_chunks_have_one_size():
    cal = {"mode": "cal-target", "point": "cal-chunk12", "block": "b", "_file": "x", "cfg": {"k": 0},
           "steps": [_pre(.30, 12, 0), _pre(.20, 12, 12), _pre(.25, 12, 24), _dec(.1)]}
    odd = dict(cal, steps=[_pre(.30, 12, 0), _pre(.20, 8, 12), _pre(.25, 12, 20)])
    last, before = excess.last_chunks([cal, odd], "target")
    assert last == pytest.approx([1.25]) and before == pytest.approx([0.2 / 0.3])


def test_vs_chunks_compares_prefills_of_one_size_per_repeat():
    runs = [{"point": "pf", "repeat": r, "steps": [_pre(.21, 19), _dec(.1), _pre(.19, 17)]} for r in (0, 1)]
    runs += [{"point": "chunk19", "repeat": r, "steps": [_pre(.20, 19), _pre(.19, 17, 19), _dec(.1)]} for r in (0, 1)]
    out = "\n".join(probe.summarize_chunks(runs))
    assert "19 tokens: grid-like / chunk (nothing cached), per repeat: 1.050" in out
    assert "17 tokens: grid-like / chunk (cached), per repeat: 1.000" in out
    assert "17 tokens: grid-like / chunk (nothing cached)" not in out  # no such chunk: nothing to compare


def test_same_size_meets_grid_prefills_and_calibration_chunks_within_a_block():
    grid = {"mode": "plain", "block": "b", "steps": [_pre(.21, 19), _dec(.1), _pre(.30, 26)]}
    cal = {"mode": "cal-target", "point": "cal-chunk19", "block": "b", "_file": "x",
           "steps": [_pre(.20, 19), _pre(.19, 17, 19)]}
    other = dict(cal, block="c", steps=[_pre(.10, 19)])  # another block's chunk: never compared with b's grid
    out = excess.same_size([grid, cal, other])
    assert list(out) == [19] and out[19] == pytest.approx([1.05])


def test_full_budget_prefill_is_set_against_the_chunks_around_its_size():
    def cal(budget: int, steps: list[dict], block: str = "b") -> dict:
        return {"mode": "cal-target", "point": "cal-x", "block": block, "_file": "x",
                "cfg": {"max_num_batched_tokens": budget}, "steps": steps}
    runs = [cal(64, [_pre(.60, 64)]), cal(80, [_pre(.76, 80)]), cal(2048, [_pre(.75, 75), _dec(.1)]),
            cal(2048, [_pre(.9, 90)]), cal(2048, [_pre(.7, 75)], block="c")]  # 90: no chunk above; c: none at all
    assert excess.full_budget(runs, "target") == pytest.approx([.75 / .71])


def test_after_decodes_pairs_each_request_of_the_long_run_with_the_short_runs_same_prompt():
    short = {"point": "pf", "repeat": 0, "steps": [s for t in (.20, .20, .20, .20, .20) for s in (_pre(t), _dec(.1))]}
    long_ = {"point": "long", "repeat": 0, "steps": [_pre(.20)] + [_dec(.1)] * 96 + [_pre(.22)] + [_dec(.1)] * 96}
    other = dict(long_, repeat=1)  # no short run in repeat 1: nothing to pair with
    out = probe.summarize_after_decodes([short, long_, other])
    assert out == ["long / short prefill, first request (after the touch in both): 1.000 [p10 1.000, p90 1.000, n 1] "
                   "pairs", "long / short prefill, later requests (after 96 decodes / 1): 1.100 [p10 1.100, p90 "
                   "1.100, n 1] pairs"]


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--k", "0"], ["--vs-chunks", "--after-decodes"]])
def test_probe_refuses_bad_arguments_before_starting_an_engine(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["vllm_prefill_probe.py", "--out", str(tmp_path / "o"), *argv])
    with pytest.raises(SystemExit) as e:
        probe.main()
    assert e.value.code == 2 and "error:" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
