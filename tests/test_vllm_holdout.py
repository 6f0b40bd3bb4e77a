"""experiments/vllm_holdout.py: a fit scored on calibration decodes measured at another moment of the same block."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
vh = pytest.importorskip("vllm_holdout")
FIX = Path(__file__).parent / "fixtures" / "vllm"
TOKEN = {"token, as measured": ("token", False, "block", "context")}


def _dec(n: int, rnd: int, scale: float = 1.0, block: str = "r0-draft-k3", mode: str = "cal-target") -> dict:
    r = copy.deepcopy(json.loads((FIX / "offline_cal_run.json").read_text()))
    r.update(mode=mode, block=block, point=f"cal-dec{n}" + (f"-{rnd}" if rnd > 1 else ""))
    r["steps"] = [{"index": i, "ctx_requests": 0, "ctx_tokens": 0, "gen_requests": n, "gen_tokens": n,
                   "time_s": scale * (0.1 + 0.01 * n), "kv_ctx_tokens": 0} for i in range(6)]
    return r


def test_a_round_is_predicted_from_the_others_and_only_counts_measured_twice_are_held_out():
    """Count 2 ran 1.2x slower in round 2: predicted from round 1 it is 1/1.2 - 1, round 1 from round 2 +20%;
    counts 1 and 4 (no slower run) predict exactly; count 8, measured once, is never held out (it would leave
    the table); a speculative run among the runs is never read."""
    runs = [_dec(n, j) for n in (1, 2, 4) for j in (1, 2) if (n, j) != (2, 2)] + [_dec(2, 2, 1.2), _dec(8, 1)]
    runs.append(dict(_dec(4, 1), mode="draft-k3", steps=[{"time_s": "garbage"}]))
    held = vh.held_out_sets(runs)
    assert sorted(held) == [("r0-draft-k3", 1), ("r0-draft-k3", 2)]
    assert sorted(r["point"] for r in held[("r0-draft-k3", 1)]) == ["cal-dec1", "cal-dec2", "cal-dec4"]
    errs = {(j, n): e for _, j, n, e in vh.errors(runs, TOKEN["token, as measured"])}
    assert errs[(2, 2)] == pytest.approx(1 / 1.2 - 1) and errs[(1, 2)] == pytest.approx(0.2)
    assert errs[(1, 1)] == pytest.approx(0.0, abs=1e-12) and errs[(2, 4)] == pytest.approx(0.0, abs=1e-12)
    s = vh.summarize(list((b, j, n, e) for (j, n), e in errs.items() for b in ["r0-draft-k3"]))
    assert s["held_out_runs"] == 6 and s["median_abs_err_10_to_16"] is None


def test_a_folder_without_repeated_rounds_is_one_line(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match="no block whose target decodes were measured in more than one round"):
        vh.holdout(tmp_path)
