"""experiments/vllm_step_excess.py --probe (a diagnosis, never a fit): a lockstep probe's steps priced by the
campaign's tables, and each speculative step against its parts scaled by the probe's own same-size plain ratios —
a step that costs exactly its parts at the probe's host speed reads 1.000 however far the tables are off."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
se = pytest.importorskip("vllm_step_excess")


class _Table:
    """t(T) = per_token_s x T, no KV term."""

    def __init__(self, per_token_s):
        self.per_token_s = per_token_s

    def kv_of(self, n, ctx):
        return 0.0

    def time_at(self, tokens, kv, count=True):
        return self.per_token_s * tokens


def _step(time_s, gen, gen_tokens, drafts=0):
    return {"time_s": time_s, "ctx_requests": 0, "gen_requests": gen, "gen_tokens": gen_tokens,
            "kv_ctx_tokens": 100 * gen, "drafts": drafts}


def _write(d: Path, name: str, steps: list[dict]) -> None:
    (d / "runs").mkdir(parents=True, exist_ok=True)
    (d / "runs" / name).write_text(json.dumps({"steps": steps}))


def test_probe_ratios_split_the_host_from_the_step(tmp_path):
    k, c, tt, td = 5, 4, _Table(0.01), _Table(0.002)
    a, d = se.parts(_step(0, c, c * (k + 1), k * c), k, tt, td, 1)
    _write(tmp_path, "plain-verify__alone__r0.json", [_step(2.0 * 0.01 * 24, 24, 24)] * 3)  # target 2x its table
    _write(tmp_path, "cal-draft__alone__r0.json", [_step(0.5 * 0.002 * 4, 4, 4)] * 3)  # draft 0.5x
    _write(tmp_path, "plain__alone__r0.json", [_step(1.5 * 0.01 * 4, 4, 4)] * 3)
    _write(tmp_path, "draft-k5__alone__r0.json", [_step(2.0 * a + 0.5 * d, c, c * (k + 1), k * c)] * 3)
    _write(tmp_path, "draft-k5__lockstep__r0.json", [_step(1.1 * (2.0 * a + 0.5 * d), c, c * (k + 1), k * c)] * 3)
    lines = se.probe_ratios(tmp_path, tt, td, k, 1)
    assert "probe plain alone: median measured / priced 1.500 (3 steps)" in lines
    assert "probe plain-verify alone: median measured / priced 2.000 (3 steps)" in lines
    assert lines[-2] == "probe speculative alone: measured / (target part x 2.000 + draft part x 0.500) 1.000 (3 steps)"
    assert lines[-1].endswith(" 1.100 (3 steps)")
    assert np.isclose(a, 0.01 * 24) and np.isclose(d, 0.002 * (28 + 4 * 4))


def test_a_probe_folder_without_runs_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["vllm_step_excess.py", "--out", str(tmp_path), "--probe", str(tmp_path)])
    with pytest.raises(SystemExit) as e:
        se.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no runs in" in err[0]
