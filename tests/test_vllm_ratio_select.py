"""experiments/vllm_ratio_select.py: a fit criterion on the ratios a speedup rests on, measured at one moment by the
moment runs, without speculation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
vrs = pytest.importorskip("vllm_ratio_select")
from test_vllm_moment_cal import _moment_runs, _steps  # noqa: E402  (moment runs of pair c4 in block b0)

TOKEN = {"token, as measured": vrs.CANDIDATES["token, as measured"]}


def _calibration() -> list[dict]:
    """Block b0's calibration: every count 1-32 at 0.1 s, target and draft (a flat table)."""
    return [{"mode": m, "point": f"cal-dec{T}", "block": "b0", "config": {}, "steps": _steps(1, T, 0.1)}
            for m in ("cal-target", "cal-draft") for T in (1, 2, 4, 8, 16, 32)]


def test_a_fit_is_scored_on_the_ratios_its_moment_runs_measured():
    """The moment's decode ran 1.1x the flat table, its verification-shaped steps 1.32x, the draft 0.99x: the
    flat fit's ratio errors are +20% (verification over decode) and -10% (draft over decode), score 15%; a
    speculative run's garbage in the folder is never read."""
    spec = {"mode": "draft-k3", "point": "c4", "block": "b0", "steps": [{"time_s": "garbage"}]}
    errs = vrs.ratio_errors(_calibration() + _moment_runs(1.1, 1.32, 0.99) + [spec], TOKEN["token, as measured"])
    assert [e["pair"] for e in errs] == ["b0 c4"]
    assert errs[0]["ver_over_dec"] == pytest.approx(0.2) and errs[0]["draft_over_dec"] == pytest.approx(-0.1)
    assert vrs.summarize(errs)["score"] == pytest.approx(0.15)


def test_a_folder_without_moment_runs_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(vrs.va, "load_runs", lambda out: _calibration())
    with pytest.raises(SystemExit, match="no moment runs"):
        vrs.ratio_select(tmp_path, candidates=TOKEN)


def test_the_lowest_is_written_as_a_selection_analyze_can_use(tmp_path, monkeypatch):
    """Of two candidates the one whose tables price the moment's ratios better is lowest, and its selection file
    is what vllm_select.fixed reads."""
    runs = _calibration() + _moment_runs(1.1, 1.32, 0.99)
    monkeypatch.setattr(vrs.va, "load_runs", lambda out: runs)
    two = {n: vrs.CANDIDATES[n] for n in ("token, as measured", "token, monotone")}
    sel = vrs.ratio_select(tmp_path, candidates=two)
    assert set(sel["candidates"]) == set(two) and sel["lowest"] in two
    chosen = pytest.importorskip("vllm_select").fixed(tmp_path / "table_selection_ratio_lowest.json")
    assert chosen["chosen"] == sel["lowest"]
