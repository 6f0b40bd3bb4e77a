"""A calibration at each grid pair's own moment (session 19): the harness's moment runs (experiments/vllm_blocks.py
moment_points), the two-point host factor (specsim.validation.host_scale.TwoPointHostTable) and the pricing
(experiments/vllm_moment_cal.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from specsim.errors import ConfigError
from specsim.validation import host_scale as hs
from specsim.validation.step_fit import StepSamples, fit_step_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
vb = pytest.importorskip("vllm_blocks")
vmc = pytest.importorskip("vllm_moment_cal")
va = pytest.importorskip("vllm_analyze")


def _steps(requests: int, tokens: int, time_s: float, n: int = 5) -> list[dict]:
    ctx = tokens - requests if tokens > requests else 0
    return [{"ctx_requests": requests if ctx else 0, "gen_requests": 0 if ctx else requests, "ctx_tokens": ctx and
             tokens, "gen_tokens": 0 if ctx else tokens, "time_s": time_s, "kv_ctx_tokens": 0} for _ in range(n)]


def _flat():
    flat = [s for T in (1, 2, 4, 8, 16, 32) for s in _steps(1, T, 0.1)]
    return fit_step_table(StepSamples.from_steps(flat), monotone=False)


def test_the_two_point_factor_is_each_measured_factor_at_its_size_and_log_linear_between():
    t = hs.TwoPointHostTable(_flat(), (2, 1.2), (8, 1.5))
    assert t.factor(2) == pytest.approx(1.2) and t.factor(8) == pytest.approx(1.5)
    assert t.factor(4) == pytest.approx(math.sqrt(1.2 * 1.5))  # halfway in log tokens: the geometric mean
    assert t.factor(1) == pytest.approx(1.2) and t.factor(32) == pytest.approx(1.5)  # held outside
    assert t.time_at(8, count=False) == pytest.approx(0.15) and hs.innermost(t) is t.base
    for small, large in (((2, 0.0), (8, 1.0)), ((2, 1.0), (2, 1.0)), ((0.5, 1.0), (8, 1.0))):
        with pytest.raises(ConfigError):
            hs.TwoPointHostTable(_flat(), small, large)


def test_each_pair_is_followed_by_its_moment_runs_without_speculation():
    grid = [{"point": "c4", "concurrency": 4}, {"point": "r0.2", "rate": 0.2}]
    seq = vb.block_sequence(0, "draft-k5", 5, grid, moment=True)
    assert [(r, m) for r, m, _ in seq[:5]] == [("P", "plain"), ("S", "draft-k5"), ("P", "cal-target"),
                                               ("P", "cal-target"), ("D", "cal-draft")]
    ver = seq[3][2]
    assert ver["point"] == "cal-mom-ver-c4" and (ver["threshold"], ver["budget"], ver["requests"]) == (6, 24, 4)
    assert [vb.moment_requests({"rate": x}) for x in (0.1, 0.2, 0.4)] == [2, 3, 4]
    plain = vb.block_sequence(0, "draft-k5", 5, grid)
    assert not any(p["point"].startswith(vb.MOMENT) for _, _, p in plain)
    assert [x for x in seq if not x[2]["point"].startswith(vb.MOMENT)] == plain


def test_moment_runs_never_join_the_tables_fit():
    runs = [{"mode": "cal-target", "point": p, "block": "b0", "steps": _steps(1, 1, 0.1)}
            for p in ("cal-dec1", "cal-mom-dec-c1")]
    assert [r["point"] for r in va.calibration_runs(runs, "target", "b0")] == ["cal-dec1"]


def _moment_runs(f_dec: float, f_ver: float, f_draft: float, ver_steps: int = 5) -> list[dict]:
    ver_cfg = {"concurrency": 4, "long_prefill_token_threshold": 4, "threshold_applied": True}
    return [{"mode": "cal-target", "point": "cal-mom-dec-c4", "block": "b0", "config": {},
             "steps": _steps(4, 4, 0.1 * f_dec) + _steps(4, 40, 9.9, 1)},  # its prefill step is not a full decode
            {"mode": "cal-target", "point": "cal-mom-ver-c4", "block": "b0", "config": ver_cfg,
             "steps": _steps(4, 16, 0.1 * f_ver, ver_steps) + _steps(2, 5, 9.9, 1)},
            {"mode": "cal-draft", "point": "cal-mom-dec-c4", "block": "b0", "config": {},
             "steps": _steps(4, 4, 0.1 * f_draft)}]


def test_a_pair_is_priced_by_the_factors_its_moment_runs_measured():
    """The target's decode ran 1.1x the flat table, its 4 x 4 verification-shaped steps 1.3x, the draft 0.9x:
    the pair's target prices 4 tokens at 1.1x and 16 at 1.3x, its draft 0.9x; the grid runs are never read for a
    factor (the speculative run's steps are garbage); a pair without moment runs keeps its block's tables."""
    t, d = _flat(), _flat()
    tabs = {None: (t, d), "b0": (t, d)}
    spec = {"mode": "draft-k3", "point": "c4", "block": "b0", "steps": [{"time_s": "garbage"}]}
    alone = {"mode": "draft-k3", "point": "c8", "block": "b0", "steps": []}
    factors: dict = {}
    pick = vmc.moment_pick(_moment_runs(1.1, 1.3, 0.9) + [spec, alone], tabs, factors)
    ts, ds = pick(spec)
    assert ts.time_at(4, count=False) == pytest.approx(0.11) and ts.time_at(16, count=False) == pytest.approx(0.13)
    assert ds.time_at(4, count=False) == pytest.approx(0.09)
    assert pick(alone) == (t, d) and factors[("b0", "c8")] is None
    assert factors[("b0", "c4")]["steps"] == {"f_dec": 5, "f_ver": 5, "f_draft": 5}


def test_a_moment_run_with_too_few_full_size_steps_gives_no_factor():
    t, d = _flat(), _flat()
    mom = {(r["mode"], r["point"], r["block"]): r for r in _moment_runs(1.1, 1.3, 0.9, ver_steps=2)}
    assert vmc.moment_factors(mom, "b0", "c4", t, d) is None
