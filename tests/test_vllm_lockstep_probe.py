"""experiments/vllm_lockstep_probe.py's summary (a diagnosis, never a calibration): at a point of c requests it
reads only full-size decode steps — c requests each verifying k drafts for the speculative engine, c plain decodes,
c (k + 1) for the verify-sized plain decode — so a ramp-up step or a short verification never enters a median."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
lp = pytest.importorskip("vllm_lockstep_probe")


def _step(time_s, gen, drafts=0, ctx_requests=0, fwd=0.0):
    return {"time_s": time_s, "ctx_requests": ctx_requests, "gen_requests": gen, "drafts": drafts,
            "parts": {"target_forward": [fwd]}}


def _run(mode, how, steps):
    return {"_mode": mode, "_how": how, "steps": steps}


def test_summary_keeps_full_size_steps_only():
    k, c = 5, 4
    runs = [
        _run("draft-k5", "alone", [_step(0.48, 4, 20, fwd=0.2), _step(9.0, 3, 15), _step(9.0, 4, 19),
                                   _step(9.0, 4, 20, ctx_requests=1)]),
        _run("plain", "alone", [_step(0.10, 4), _step(9.0, 2)]),
        _run("plain-verify", "alone", [_step(0.25, 24), _step(9.0, 4)]),
    ]
    lines = lp.summarize(runs, k, c)
    assert lines[0].startswith("draft-k5 alone: 1 steps, step 0.4800 s; target_forward 0.2000")
    assert lines[1].startswith("plain alone: 1 steps, step 0.1000 s")
    assert lines[2].startswith("plain-verify alone: 1 steps, step 0.2500 s")


def test_summary_says_when_no_step_is_full_size():
    lines = lp.summarize([_run("plain", "lockstep", [_step(0.1, 1)])], 5, 4)
    assert lines == ["plain lockstep: no full-size steps"]


@pytest.mark.parametrize("args, said", [(["--point", "r0.1"], "is not a closed grid point"),
                                        (["--k", "4"], "is not a measured k"),
                                        ([], "no runs in")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, said):
    monkeypatch.setattr(sys, "argv", ["vllm_lockstep_probe.py", "--out", str(tmp_path), "--summarize", *args])
    with pytest.raises(SystemExit) as e:
        lp.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]
