"""Energy and dollars beside every result (specsim/cost/power.py): hand-computed J/token and $/Mtok, nulls where a
profile lacks the figure, one-line errors for bad figures, the power fit, and where speculation stops saving energy."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import cli_capsys as run
from specsim.cost.power import fit_power, run_energy_j, step_utilisation
from specsim.errors import ConfigError
from specsim.profiles import loader
from specsim.simulate import make_config, run as run_point, simulate

H100 = Path(loader.HARDWARE_DIR) / "h100-sxm.toml"
LLAMA = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, gamma=4)
# h100-sxm.toml's figures, restated so the hand computation does not read them through the code under test
IDLE_W, TDP_W, PRICE = 70.0, 700.0, 6.155
BW_BYTES_S, PEAK_BF16_FLOPS = 3350e9, 989e12


def test_baseline_joules_per_token_by_hand():
    res = simulate(make_config(**LLAMA, batch=1, requests=4, seed=1))
    b = res.baseline
    # closed loop, batch 1, one replica: the steps (prefill folded into the first) tile the makespan
    assert math.isclose(b.step_dur_s.sum(), res.summary["baseline_walltime_s"], rel_tol=1e-12)
    joules = 0.0
    for dur, nbytes, flops in zip(b.step_dur_s, b.step_bytes, b.step_flops):
        u = min(1.0, nbytes / (dur * BW_BYTES_S) + flops / (dur * PEAK_BF16_FLOPS))
        joules += (IDLE_W + (TDP_W - IDLE_W) * u) * dur
    tokens = int(b.output_len.sum())
    assert res.summary["baseline_energy_j_per_token"] == pytest.approx(joules / tokens, rel=1e-12)
    assert 0 < res.summary["energy_ratio"] < 1  # batch 1: speculation saves energy


def test_usd_per_mtok_by_hand_and_chip_count():
    one = run_point(make_config(**LLAMA, batch=1, requests=4))
    for prefix in ("", "baseline_"):
        tokens = one["output_tokens"]
        want = PRICE * one[f"{prefix}walltime_s"] / 3600 / tokens * 1e6
        assert one[f"{prefix}usd_per_mtok"] == pytest.approx(want, rel=1e-12)
    assert one["usd_ratio"] == pytest.approx(one["usd_per_mtok"] / one["baseline_usd_per_mtok"], rel=1e-12)
    # four chips: each is billed; tp 4 speeds the step up, but never 4x (weights split, all-reduces added)
    four = run_point(make_config(**LLAMA, batch=1, requests=4, tp=4))
    want = 4 * PRICE * four["walltime_s"] / 3600 / four["output_tokens"] * 1e6
    assert four["usd_per_mtok"] == pytest.approx(want, rel=1e-12)
    assert four["usd_per_mtok"] > one["usd_per_mtok"]


def test_energy_counts_every_chip_and_the_idle_floor_over_the_makespan():
    class Hw:
        tdp_w, idle_w = 500.0, 100.0
    dur, nbytes, flops = np.array([1.0, 2.0]), np.array([1e9, 1e9]), np.array([0.0, 2e12])
    # u = 1e9/1e9 = 1 (capped), then 0.5 + 1.0 -> 1 (capped): dynamic 400 W over 3 s on each of tp chips
    e = run_energy_j(Hw, 2, 3, 10.0, dur, nbytes, flops, 1e9, 1e12)
    assert e == pytest.approx(2 * 3 * 100.0 * 10.0 + 2 * 400.0 * 3.0)
    u = step_utilisation(np.array([2.0]), np.array([0.5e9]), np.array([0.25e12]), 1e9, 1e12)
    assert u[0] == pytest.approx(0.25 + 0.125)
    # step tables give times only: no bytes or FLOPs -> utilisation unknown -> no energy figure
    assert run_energy_j(Hw, 1, 1, 3.0, dur, np.zeros(2), np.zeros(2), 1e9, 1e12) is None


def test_profiles_without_the_figures_give_null(tmp_path):
    cpu = run_point(make_config(hardware="cpu-2core", target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b",
                                alpha=0.8, gamma=3, requests=2, prompt_len=16, output_len=8))
    for k in ("energy_j_per_token", "baseline_energy_j_per_token", "usd_per_mtok", "baseline_usd_per_mtok",
              "energy_ratio", "usd_ratio"):
        assert cpu[k] is None, k
    # a user's copy of the H100 profile: no price -> $ null, energy unchanged; own price -> $ scales with it
    text = H100.read_text()
    unpriced = tmp_path / "h100-unpriced.toml"
    unpriced.write_text(text.replace("price_usd_per_hour = 6.155", ""))
    priced = tmp_path / "h100-contract.toml"
    priced.write_text(text.replace("price_usd_per_hour = 6.155", "price_usd_per_hour = 2.0"))
    ref = run_point(make_config(**LLAMA, batch=1, requests=4))
    cfg = {**LLAMA, "batch": 1, "requests": 4}
    no_price = run_point(make_config(**{**cfg, "hardware": str(unpriced)}))
    assert no_price["usd_per_mtok"] is None and no_price["usd_ratio"] is None
    assert no_price["energy_j_per_token"] == ref["energy_j_per_token"]
    own = run_point(make_config(**{**cfg, "hardware": str(priced)}))
    assert own["usd_per_mtok"] == pytest.approx(ref["usd_per_mtok"] * 2.0 / PRICE, rel=1e-12)
    fixed = run_point(make_config(**cfg, fixed_c=0.1))  # target-pass units: no seconds
    assert fixed["energy_j_per_token"] is None and fixed["usd_per_mtok"] is None


BASE_HW = """name = "toy"
peak_tflops = { bf16 = 100.0 }  # test
memory_bandwidth_gb_s = 1000.0  # test
memory_capacity_gb = 80.0  # test
"""


@pytest.mark.parametrize("extra, needles", [
    ("tdp_w = -300.0\nidle_w = 10.0\n", ["bad.toml", "tdp_w", "-300", "> 0"]),
    ("tdp_w = 300.0\nidle_w = -1.0\n", ["bad.toml", "idle_w", ">= 0"]),
    ("tdp_w = 300.0\nidle_w = 400.0\n", ["bad.toml", "idle_w", "400", "<= tdp_w = 300"]),
    ("tdp_w = 300.0\n", ["bad.toml", "idle_w", "tdp_w needs idle_w"]),
    ("price_usd_per_hour = nan\n", ["bad.toml", "price_usd_per_hour"]),
    ('price_usd_per_hour = "3.5"\n', ["bad.toml", "price_usd_per_hour"]),
    ("price_usd_per_hour = 0.0\n", ["bad.toml", "price_usd_per_hour", "> 0"]),
])
def test_bad_cost_and_power_figures_are_one_line_errors(capsys, tmp_path, extra, needles):
    f = tmp_path / "bad.toml"
    f.write_text(extra + BASE_HW)
    code, out, err = run(capsys, "simulate", "--hardware", str(f), "--target", "llama-3.2-1b", "--draft",
                         "llama-68m", "--alpha", "0.7", "--requests", "2", "--json")
    assert code == 2, (code, out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_good_cost_figures_load(tmp_path):
    f = tmp_path / "toy.toml"
    f.write_text("price_usd_per_hour = 1.5\ntdp_w = 300.0\nidle_w = 0.0\n" + BASE_HW)
    hw = loader.load_hardware(f)
    assert (hw.price_usd_per_hour, hw.tdp_w, hw.idle_w) == (1.5, 300.0, 0.0)


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    u = rng.uniform(0.0, 1.0, 200)
    idle, dyn = fit_power(u, 65.0 + 540.0 * u)
    assert idle == pytest.approx(65.0, abs=1e-9) and dyn == pytest.approx(540.0, abs=1e-9)
    noisy = 65.0 + 540.0 * u + rng.normal(0.0, 5.0, u.size)  # 5 W of meter noise
    idle, dyn = fit_power(u, noisy)
    assert abs(idle - 65.0) < 3.0 and abs(dyn - 540.0) < 5.0
    with pytest.raises(ConfigError, match="two or more utilisations"):
        fit_power([0.5, 0.5, 0.5], [300.0, 310.0, 305.0])
    with pytest.raises(ConfigError, match="two or more finite"):
        fit_power([0.1], [100.0])


def test_speculation_saves_energy_at_batch_1_and_costs_energy_at_large_batch():
    """h100-sxm, llama-3.1-8b + llama-3.2-1b, α 0.7, γ 4 (default stack): J/token spec / baseline is 0.65 at batch 1
    and crosses 1 between batch 64 (0.999) and 72 (1.02), near where the walltime speedup crosses 1 (48-64)."""
    small = run_point(make_config(**LLAMA, batch=1, requests=16))
    large = run_point(make_config(**LLAMA, batch=256, requests=512))
    assert small["energy_ratio"] < 0.8
    assert large["energy_ratio"] > 1.1


def test_human_output_shows_energy_and_dollars(capsys):
    code, out, err = run(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "llama-3.2-1b", "--alpha", "0.7", "--requests", "4")
    assert code == 0, err
    assert "J / output token" in out and "$ / M output tokens" in out
    code, out, _ = run(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                       "llama-3.2-1b", "--alpha", "0.7", "--requests", "4", "--json")
    d = json.loads(out)
    assert d["energy_j_per_token"] > 0 and d["baseline_usd_per_mtok"] > 0
