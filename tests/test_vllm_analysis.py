"""The vLLM comparison calibrates only on runs without speculation (experiments/vllm_analyze.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
va = pytest.importorskip("vllm_analyze")


def _run(mode, point, times, tokens, spec=None):
    steps = [{"ctx_tokens": 0, "gen_tokens": int(t), "time_s": float(s)} for t, s in zip(tokens, times)]
    return {"mode": mode, "point": point, "repeat": 0, "steps": steps, "spec": spec or {"drafts": 0}}


def _runs(spec_time):
    tok = np.tile(np.arange(1, 9), 3)
    return [_run("cal-target", "cal-c8-x1", 0.2 + 0.01 * tok, tok),
            _run("cal-draft", "cal-c8-x1", 0.08 + 0.004 * tok, tok),
            _run("plain", "c4", 0.9 + 0 * tok, tok),  # a grid run: not calibration data either
            _run("draft", "c4", spec_time + 0 * tok, tok, spec={"drafts": 10})]


def test_calibration_never_sees_a_speculative_run():
    a, b = _runs(0.5), _runs(50.0)  # the speculative run's step times differ wildly
    for model in ("target", "draft"):
        ta, tb = va.step_table(va.calibration_runs(a, model)), va.step_table(va.calibration_runs(b, model))
        assert np.array_equal(ta.time_s, tb.time_s)
        assert all(r["mode"] == va.CAL[model] for r in va.calibration_runs(a, model))
    assert va.step_table(va.calibration_runs(a, "target")).time_at(4) == pytest.approx(0.24)


def test_calibration_refuses_a_run_that_drafted():
    runs = _runs(0.5)
    runs[0]["spec"] = {"drafts": 3}  # a "target alone" run that speculated is a mislabelled run
    with pytest.raises(AssertionError):
        va.calibration_runs(runs, "target")


def test_overhead_split_recovers_a_shared_step_cost():
    """t_m(T) = o + w_m·g(T): the split gives back the draft's forward time without the shared overhead."""
    from specsim import profiles as prof
    from specsim.engine.engine_profiles.step_costs import StepTable

    wt = prof.model(va.PROFILES["target"]).matmul_params_per_token
    wd = prof.model(va.PROFILES["draft"]).matmul_params_per_token
    T = np.array([1.0, 2, 4, 8, 16])
    g = 1e-10 * (1 + 0.1 * T)
    o = 0.05
    tt, td = StepTable(T, o + wt * g), StepTable(T, o + wd * g)
    fwd, oh = va.split_overhead(tt, td)
    assert oh == pytest.approx(np.full(5, o))
    assert fwd.time_s == pytest.approx(wd * g)
