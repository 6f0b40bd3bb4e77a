"""experiments/vllm_moments.py: each grid pair priced at its own moment, the plain run's host factor carried to larger
steps by the host's shape measured without speculation."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from specsim.validation.step_fit import StepSamples, fit_step_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
vm = pytest.importorskip("vllm_moments")
va = pytest.importorskip("vllm_analyze")
from test_vllm_analysis import _two_blocks  # noqa: E402  (a two-block results folder, the second host 2x slower)


def _decode(tokens: int, time_s: float, n: int = 5) -> list[dict]:
    return [{"ctx_requests": 0, "gen_requests": tokens, "ctx_tokens": 0, "gen_tokens": tokens, "time_s": time_s,
             "kv_ctx_tokens": 0} for _ in range(n)]


def _probe(tmp: Path, small=(0.17, 0.18, 0.19, 0.20, 0.21), el: float = 0.5) -> Path:
    """A shape probe whose 32-token step moves as the 8-token one to the power `el`."""
    (tmp / "runs").mkdir(parents=True)
    for i, s in enumerate(small):
        (tmp / "runs" / f"A__r{i}.json").write_text(json.dumps({"steps": _decode(32, 0.4 * (s / 0.19) ** el)}))
        (tmp / "runs" / f"B__r{i}.json").write_text(json.dumps({"steps": _decode(8, s)}))
    return tmp


def test_beta_is_the_probes_elasticity_as_a_power_of_tokens(tmp_path):
    el, beta, reps = vm.probe_beta(_probe(tmp_path))
    assert el == pytest.approx(0.5, rel=1e-9) and beta == pytest.approx(0.5, rel=1e-9) and reps == 5
    with pytest.raises(SystemExit, match="shape-probe repeats"):
        vm.probe_beta(_probe(tmp_path / "few", small=(0.18, 0.2)))
    with pytest.raises(SystemExit, match="elasticity"):
        vm.probe_beta(_probe(tmp_path / "inverted", el=-0.3))


def test_a_pair_is_priced_at_the_moment_its_plain_run_measured():
    """The plain run ran 1.5x its block's flat 0.1 s table at 2 tokens: at beta 0.5 its 2-token steps cost 0.15 s,
    an 8-token verification 0.1 x 1.5 ** 0.5, the draft's 2-token passes 0.15 s; only the plain run sets the moment
    (the speculative run's steps are never read); a run without a plain partner keeps its block's tables."""
    flat = [s for T in (1, 2, 4, 8, 16) for s in _decode(T, 0.1)]
    t, d = (fit_step_table(StepSamples.from_steps(flat), monotone=False) for _ in range(2))
    tabs = {None: (t, d), "b0": (t, d)}
    plain = {"_file": "p", "mode": "plain", "point": "c2", "block": "b0", "steps": _decode(2, 0.15, 9)}
    spec = {"_file": "s", "mode": "draft-k3", "point": "c2", "block": "b0", "steps": [{"time_s": "garbage"}]}
    alone = {"_file": "x", "mode": "draft-k3", "point": "c4", "block": "b0", "steps": []}
    moments: dict = {}
    pick = vm.moment_pick([plain, spec, alone], tabs, 0.5, moments)
    ts, ds = pick(spec)
    assert moments == {"p": (pytest.approx(1.5), 2.0)}
    assert ts.time_at(2, count=False) == pytest.approx(0.15)
    assert ts.time_at(8, count=False) == pytest.approx(0.1 * math.sqrt(1.5))
    assert ds.time_at(2, count=False) == pytest.approx(0.15)
    assert pick(plain) == (ts, ds) and pick(alone) == (t, d)


def test_pairs_that_ran_as_their_tables_say_are_priced_alike_and_a_slow_plain_run_moves_its_pair(tmp_path):
    """End to end on a two-block folder (the second host 2x slower everywhere, its tables too): both pairs sit at
    the same moment against their own block's tables (one f_ref), so the speedups predicted at the moment are the
    same for both repeats; report, plot and JSON written. Then the second block's plain run alone runs 1.5x
    slower: its pair's f_ref is 1.5x the first's and its predicted speculative run slows, while the speculative run
    itself is untouched."""
    _two_blocks(tmp_path)
    va.analyze(tmp_path)  # writes the table_selection.json the moments read
    probe = _probe(tmp_path / "probe")
    res = vm.analyze(tmp_path, tmp_path / "m", probe=probe)
    for name in ("moments.json", "moments.md", "moments.png"):
        assert (tmp_path / "m" / name).exists()
    assert res["f_ref"]["min"] == pytest.approx(res["f_ref"]["max"], rel=1e-9)
    rows = json.loads((tmp_path / "m" / "moments.json").read_text())["moment"]["points"]
    assert all(p["paired_err_speedup_throughput"] == pytest.approx(p["err_speedup_throughput"], rel=1e-9)
               for p in rows)
    f = next((tmp_path / "runs").glob("plain__*__r1-draft-k3.json"))
    r = json.loads(f.read_text())
    for s in r["steps"]:
        s["time_s"] *= 1.5
    f.write_text(json.dumps(r))
    res2 = vm.analyze(tmp_path, tmp_path / "m2", probe=probe)
    assert res2["f_ref"]["max"] == pytest.approx(1.5 * res["f_ref"]["max"], rel=1e-9)
    assert res2["f_ref"]["min"] == pytest.approx(res["f_ref"]["min"], rel=1e-9)
    assert res2["moment"]["points"][0]["pred_spec_tpot_p50_s"] > res["moment"]["points"][0]["pred_spec_tpot_p50_s"]
    assert res2["tables"]["points"][0]["pred_spec_tpot_p50_s"] == res["tables"]["points"][0]["pred_spec_tpot_p50_s"]
