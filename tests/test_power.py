"""Energy and dollars beside every result (specsim/cost/power.py): the power curve per pass and per chip, J/token and
mean W per chip by hand, a draft on fewer chips billed on its own chips, nulls where a profile lacks the figures,
one-line errors for bad figures, the floor and the TDP cap, and where speculation stops saving energy."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import cli_capsys as run
from specsim.cost.power import DEFAULT_CURVE, PowerCurve, draft_shares, pass_power_w, run_energy, run_energy_j
from specsim.cost.roofline import CostModel
from specsim.profiles import loader
from specsim.simulate import _costs, make_config, run as run_point, simulate

H100 = Path(loader.HARDWARE_DIR) / "h100-sxm.toml"
LLAMA = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, gamma=4)
# h100-sxm.toml's figures, restated so the hand computation does not read them through the code under test
IDLE_W, FLOOR_W, TDP_W, W_MBU, W_MFU, PRICE = 75.0, 75.0, 700.0, 2.002, 14.23, 6.155
BW_BYTES_S, PEAK_BF16_FLOPS = 3350e9, 989e12


def _p(mbu, mfu, floor=FLOOR_W, tdp=TDP_W, wm=W_MBU, wf=W_MFU):
    s = wm * mbu + wf * mfu
    return floor + (tdp - floor) * s / (1 + s)


def _toy(tdp=500.0, idle=50.0, floor=100.0, wm=1.0, wf=4.0, name="toy"):
    return SimpleNamespace(tdp_w=tdp, idle_w=idle, running_floor_w=floor, power_mbu_weight=wm, power_mfu_weight=wf,
                           name=name)


def test_baseline_joules_per_token_and_mean_power_by_hand():
    res = simulate(make_config(**LLAMA, batch=1, requests=4, seed=1))
    b = res.baseline
    # closed loop, batch 1, one replica: the steps (prefill folded into the first) tile the makespan
    assert math.isclose(b.step_dur_s.sum(), res.summary["baseline_walltime_s"], rel_tol=1e-12)
    joules = math.fsum(_p(nb / (d * BW_BYTES_S), fl / (d * PEAK_BF16_FLOPS)) * d
                       for d, nb, fl in zip(b.step_dur_s, b.step_bytes, b.step_flops))
    tokens = int(b.output_len.sum())
    assert res.summary["baseline_energy_j_per_token"] == pytest.approx(joules / tokens, rel=1e-12)
    assert res.summary["baseline_power_w_per_chip_mean"] == pytest.approx(
        joules / res.summary["baseline_walltime_s"], rel=1e-12)
    assert FLOOR_W < res.summary["baseline_power_w_per_chip_mean"] < TDP_W
    assert 0 < res.summary["energy_ratio"] < 1  # batch 1: speculation saves energy


def test_usd_per_mtok_by_hand_and_chip_count():
    one = run_point(make_config(**LLAMA, batch=1, requests=4))
    for prefix in ("", "baseline_"):
        tokens = one["output_tokens"]
        want = PRICE * one[f"{prefix}walltime_s"] / 3600 / tokens * 1e6
        assert one[f"{prefix}usd_per_mtok"] == pytest.approx(want, rel=1e-12)
    assert one["usd_ratio"] == pytest.approx(one["usd_per_mtok"] / one["baseline_usd_per_mtok"], rel=1e-12)
    four = run_point(make_config(**LLAMA, batch=1, requests=4, tp=4))
    want = 4 * PRICE * four["walltime_s"] / 3600 / four["output_tokens"] * 1e6
    assert four["usd_per_mtok"] == pytest.approx(want, rel=1e-12)
    assert four["usd_per_mtok"] > one["usd_per_mtok"]


def test_energy_per_part_per_chip_and_the_idle_time_by_hand():
    hw = _toy()
    dur, nbytes, flops = np.array([1.0, 2.0]), np.array([1e9, 1e9]), np.array([0.0, 2e12])
    # no draft part: every step on tp chips at its own P(u); the 10 s walltime on 2 × 3 chips, 3 s of steps per
    # replica-chip group (tp = 2), the rest idle
    e, w = run_energy(hw, 2, 3, 10.0, dur, nbytes, flops, 1e9, 1e12)
    steps = 2 * (_p(1.0, 0.0, 100, 500, 1, 4) * 1.0 + _p(0.5, 1.0, 100, 500, 1, 4) * 2.0)
    assert e == pytest.approx(steps + 50.0 * (2 * 3 * 10.0 - 2 * 3.0), rel=1e-12)
    assert w == pytest.approx(e / (2 * 3 * 10.0), rel=1e-12)
    # a draft part on 1 of 8 chips: it draws its own P on one chip, the other 7 wait at the floor
    draft = (np.array([0.25, 0.5]), np.array([0.5e9, 0.2e9]), np.array([0.0, 0.0]))
    e8, _ = run_energy(hw, 8, 1, 3.0, dur, nbytes, flops, 1e9, 1e12, draft, draft_tp=1)
    verify = 8 * (_p(0.5e9 / 0.75e9, 0, 100, 500, 1, 4) * 0.75 + _p(0.8e9 / 1.5e9, 2e12 / 1.5e12, 100, 500, 1, 4) * 1.5)
    drafting = _p(2.0, 0, 100, 500, 1, 4) * 0.25 + _p(0.4, 0, 100, 500, 1, 4) * 0.5 + 7 * 100.0 * 0.75
    assert e8 == pytest.approx(verify + drafting, rel=1e-12)
    # the same draft on all 8 chips is billed 8 times
    e88, _ = run_energy(hw, 8, 1, 3.0, dur, nbytes, flops, 1e9, 1e12, draft, draft_tp=8)
    assert e88 == pytest.approx(verify + 8 * (drafting - 7 * 100.0 * 0.75), rel=1e-12)
    # step tables give times only: no bytes or FLOPs -> utilisation unknown -> no energy figure
    assert run_energy_j(hw, 1, 1, 3.0, dur, np.zeros(2), np.zeros(2), 1e9, 1e12) is None


def test_sums_are_order_fixed_so_any_cpu_gives_the_same_joules():
    """Every sum runs strictly left to right (no pairwise or SIMD-reassociated summation, whose rounding follows
    the CPU and the array's alignment): the joules equal a plain Python loop over the steps, bit for bit."""
    rng = np.random.default_rng(3)
    n = 5000
    dur, nb, fl = rng.uniform(1e-3, 3e-2, n), rng.uniform(1e8, 5e10, n), rng.uniform(1e9, 1e13, n)
    hw = loader.hardware("h100-sxm")
    c = PowerCurve.of(hw)
    p = c.pass_power_w(nb / (dur * BW_BYTES_S), fl / (dur * PEAK_BF16_FLOPS)) * dur  # element-wise: exact per element
    steps = busy = 0.0
    for x, d in zip(p.tolist(), dur.tolist()):
        steps += x
        busy += d
    want = 2 * steps + IDLE_W * (2 * 500.0 - 2 * busy)
    assert run_energy_j(hw, 2, 1, 500.0, dur, nb, fl, BW_BYTES_S, PEAK_BF16_FLOPS) == want
    for off in (1, 3):  # a misaligned view of the same values: the same bits
        pad = [np.r_[np.zeros(off), a][off:] for a in (dur, nb, fl)]
        assert run_energy_j(hw, 2, 1, 500.0, *pad, BW_BYTES_S, PEAK_BF16_FLOPS) == want


def test_a_one_chip_draft_is_not_billed_on_eight_chips():
    """Issue 21: --tp 8 --draft-tp 1 nearly doubled J/token against --draft-tp 8. With the draft billed on its own
    chip (the other seven waiting at the floor), a one-chip draft costs no more energy than one split over eight
    (it runs slower per pass but moves the same bytes on one chip)."""
    cfg = dict(hardware="h100-sxm", target="llama-3.1-70b", draft="llama-3.2-1b", alpha=0.8, gamma=4, batch=8,
               requests=16, tp=8)
    split = run_point(make_config(**cfg))
    one = run_point(make_config(**cfg, draft_tp=1))
    assert one["baseline_energy_j_per_token"] == split["baseline_energy_j_per_token"]
    assert one["energy_j_per_token"] < 1.1 * split["energy_j_per_token"]
    assert FLOOR_W < one["power_w_per_chip_mean"] < TDP_W


def test_the_draft_share_of_a_step_is_its_draft_passes():
    cfg = make_config(**LLAMA, batch=4, requests=8)
    costs, _ = _costs(cfg)
    B, G, L = 4, 4, 300.0
    t, b, f = costs.spec_step(B, G, L)
    share = draft_shares(costs, [B, B], [G, 0], np.array([t, 1.0]), np.array([b, 1.0]), np.array([f, 1.0]), L)
    d = CostModel(loader.model("llama-3.2-1b"), loader.hardware("h100-sxm"), loader.stack("pytorch-eager"))
    want = G * d.pass_cost(B, 1, int(L + (G - 1) / 2)).time_s
    assert share[0][0] == pytest.approx(want, rel=2e-3)
    assert share[0][1] == share[1][1] == share[2][1] == 0.0  # γ = 0: no draft part
    assert 0 < share[1][0] < b and 0 < share[2][0] < f


def test_profiles_without_the_figures_give_null(tmp_path):
    cpu = run_point(make_config(hardware="cpu-2core", target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b",
                                alpha=0.8, gamma=3, requests=2, prompt_len=16, output_len=8))
    for k in ("energy_j_per_token", "baseline_energy_j_per_token", "usd_per_mtok", "baseline_usd_per_mtok",
              "energy_ratio", "usd_ratio", "power_w_per_chip_mean", "baseline_power_w_per_chip_mean"):
        assert cpu[k] is None, k
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
    assert fixed["energy_j_per_token"] is None and fixed["power_w_per_chip_mean"] is None


def test_a_profile_without_a_fitted_curve_uses_the_default_in_fractions_of_its_tdp():
    h200 = loader.hardware("h200")
    assert h200.running_floor_w is None
    c = PowerCurve.of(h200)
    assert c.floor_w == max(h200.idle_w, DEFAULT_CURVE["floor_fraction"] * h200.tdp_w)
    assert (c.mbu_weight, c.mfu_weight) == (DEFAULT_CURVE["mbu_weight"], DEFAULT_CURVE["mfu_weight"])
    h100 = PowerCurve.of(loader.hardware("h100-sxm"))
    assert (h100.floor_w, h100.mbu_weight, h100.mfu_weight) == (FLOOR_W, W_MBU, W_MFU)  # its own fit
    b200 = loader.hardware("b200")
    assert (b200.tdp_w, b200.memory_bandwidth_gb_s, b200.peak_tflops["bf16"]) == (1000.0, 8000.0, 2250.0)


BASE_HW = """name = "toy"
peak_tflops = { bf16 = 100.0 }  # test
memory_bandwidth_gb_s = 1000.0  # test
memory_capacity_gb = 80.0  # test
"""
CURVE = "power_mbu_weight = 2.0\npower_mfu_weight = 10.0\n"


@pytest.mark.parametrize("extra, needles", [
    ("tdp_w = -300.0\nidle_w = 10.0\n", ["bad.toml", "tdp_w", "-300", "> 0"]),
    ("tdp_w = 300.0\nidle_w = -1.0\n", ["bad.toml", "idle_w", ">= 0"]),
    ("tdp_w = 300.0\nidle_w = 400.0\n", ["bad.toml", "idle_w", "400", "<= tdp_w = 300"]),
    ("tdp_w = 300.0\n", ["bad.toml", "idle_w", "tdp_w needs idle_w"]),
    ("price_usd_per_hour = nan\n", ["bad.toml", "price_usd_per_hour"]),
    ('price_usd_per_hour = "3.5"\n', ["bad.toml", "price_usd_per_hour"]),
    ("price_usd_per_hour = 0.0\n", ["bad.toml", "price_usd_per_hour", "> 0"]),
    ("tdp_w = 300.0\nidle_w = 30.0\nrunning_floor_w = 20.0\n" + CURVE, ["running_floor_w", "20", "idle_w = 30"]),
    ("tdp_w = 300.0\nidle_w = 30.0\nrunning_floor_w = 1e9\n" + CURVE, ["running_floor_w", "1000000000"]),
    ("tdp_w = 300.0\nidle_w = 30.0\nrunning_floor_w = 100.0\n", ["power_mbu_weight", "all of its figures"]),
    ("tdp_w = 300.0\nidle_w = 30.0\nrunning_floor_w = 100.0\npower_mbu_weight = -1.0\npower_mfu_weight = 1.0\n",
     ["power_mbu_weight", ">= 0"]),
    ("running_floor_w = 100.0\n" + CURVE, ["tdp_w"]),
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
    f.write_text("price_usd_per_hour = 1.5\ntdp_w = 300.0\nidle_w = 0.0\nrunning_floor_w = 40.0\n" + CURVE + BASE_HW)
    hw = loader.load_hardware(f)
    assert (hw.price_usd_per_hour, hw.tdp_w, hw.idle_w, hw.running_floor_w) == (1.5, 300.0, 0.0, 40.0)


# b200.toml's figures, restated likewise: (floor, TDP, bandwidth B/s, bf16 peak FLOP/s); the curve's weights as H100's
B200 = (107.1, 1000.0, 8000e9, 2250e12)


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
@pytest.mark.parametrize("stack", ["ideal", "pytorch-eager", "cuda-graphs"])
def test_a_draft_sized_pass_at_batch_1_draws_at_least_the_running_floor(stack, gpu):
    """A GPU inside a serving loop does not fall back to idle between small passes: a 1B draft's pass at batch 1
    draws the running floor or more, and less than TDP, by the curve's own formula, on both fitted chips."""
    hw = loader.hardware(gpu)
    floor, tdp, bw, peak = (FLOOR_W, TDP_W, BW_BYTES_S, PEAK_BF16_FLOPS) if gpu == "h100-sxm" else B200
    p = CostModel(loader.model("llama-3.2-1b"), hw, loader.stack(stack)).pass_cost(1, 1, 512)
    w = pass_power_w(hw, p.bytes, p.flops, p.time_s, "bf16")
    assert hw.running_floor_w <= w < hw.tdp_w and w > hw.idle_w
    assert w == pytest.approx(_p(p.bytes / (p.time_s * bw), p.flops / (p.time_s * peak), floor, tdp))


@settings(max_examples=300, deadline=None)
@given(mbu=st.floats(0, 1e6), mfu=st.floats(0, 1e6), tdp=st.floats(1.0, 1e5), idle_frac=st.floats(0, 1),
       floor_frac=st.floats(0, 1), wm=st.floats(0, 1e3), wf=st.floats(0, 1e3))
def test_power_never_exceeds_tdp_nor_falls_below_the_floor(mbu, mfu, tdp, idle_frac, floor_frac, wm, wf):
    idle = idle_frac * tdp
    floor = idle + floor_frac * (tdp - idle)
    c = PowerCurve(idle, floor, tdp, wm, wf, "test")
    w = float(c.pass_power_w(mbu, mfu))
    assert floor - 1e-9 * tdp <= w <= tdp


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2 ** 32 - 1), tp=st.integers(1, 8), dtp=st.integers(1, 8),
       scale=st.floats(1e-3, 1e3))
def test_a_runs_mean_power_per_chip_stays_within_idle_and_tdp(n, seed, tp, dtp, scale):
    rng = np.random.default_rng(seed)
    dur = rng.uniform(1e-4, 1e-1, n)
    nb, fl = rng.uniform(0, 1e12, n) * scale, rng.uniform(0, 1e16, n) * scale  # utilisation far above 1 included
    draft = tuple(x * rng.uniform(0, 1, n) for x in (dur, nb, fl))
    hw = loader.hardware("h100-sxm")
    wall = float(dur.sum()) * rng.uniform(1.0, 3.0)
    e, w = run_energy(hw, tp, 1, wall, dur, nb, fl, BW_BYTES_S, PEAK_BF16_FLOPS, draft, min(dtp, tp))
    assert hw.idle_w - 1e-9 <= w <= hw.tdp_w + 1e-9


def test_hand_picked_extremes_stay_under_tdp():
    """The property's edges, by hand: a pass far beyond any datasheet peak still draws under TDP."""
    c = PowerCurve.of(loader.hardware("h100-sxm"))
    assert float(c.pass_power_w(1e9, 1e9)) <= TDP_W and float(c.pass_power_w(0.0, 0.0)) == FLOOR_W
    assert float(c.pass_power_w(-5.0, -5.0)) == FLOOR_W


def test_speculation_saves_energy_at_batch_1_and_costs_energy_at_large_batch():
    """h100-sxm, llama-3.1-8b + llama-3.2-1b, α 0.7, γ 4 (default stack): J/token spec / baseline is 0.71 at batch 1
    and crosses 1 near batch 64 (1.00; walltime speedup 0.97 there: the two cross together), 1.39 at batch 256."""
    small = run_point(make_config(**LLAMA, batch=1, requests=16))
    large = run_point(make_config(**LLAMA, batch=256, requests=512))
    assert small["energy_ratio"] < 0.8
    assert large["energy_ratio"] > 1.2
    assert large["power_w_per_chip_mean"] > small["power_w_per_chip_mean"]  # busier chips draw more


def test_human_output_shows_energy_power_and_dollars(capsys):
    code, out, err = run(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "llama-3.2-1b", "--alpha", "0.7", "--requests", "4")
    assert code == 0, err
    assert "J / output token" in out and "$ / M output tokens" in out and "mean W per chip" in out
    code, out, _ = run(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                       "llama-3.2-1b", "--alpha", "0.7", "--requests", "4", "--json")
    d = json.loads(out)
    assert d["energy_j_per_token"] > 0 and d["baseline_usd_per_mtok"] > 0 and d["power_w_per_chip_mean"] > IDLE_W


def test_roofline_prints_each_passs_power(capsys):
    code, out, err = run(capsys, "roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--positions",
                         "1,512", "--json")
    assert code == 0, err
    p = json.loads(out)["passes"]
    assert FLOOR_W < p[0]["power_w_per_chip"] < p[1]["power_w_per_chip"] < TDP_W
    code, out, _ = run(capsys, "roofline", "--hardware", "h100-sxm", "--model", "llama-3.1-8b")
    assert "W per chip" in out


def test_plan_prints_the_hours_mean_power_per_chip_beside_j_per_token():
    """plan's provisioned figures: every chip for the hour; its mean draw = the hour's joules / (chips · 3600 s)."""
    from specsim.studies.plan_answer import provisioned

    row = {"output_tokens": 1000, "requests": 10, "energy_j_per_token": 0.5, "walltime_s": 20.0,
           "served_tok_s": 1e9, "usd_per_mtok": 1.0, "power_w_per_chip_mean": 300.0}
    p = provisioned(row, "", "h100-sxm", 2, 3, 4.0)  # 4 req/s × 100 tokens = 400 tok/s on 6 chips
    assert p["energy_j_per_token"] == pytest.approx(0.5 - IDLE_W * 6 * 20.0 / 1000 + IDLE_W * 6 / 400.0)
    assert p["power_w_per_chip"] == pytest.approx(p["energy_j_per_token"] * 400.0 / 6)
    assert provisioned(row, "", "h100-sxm", 2, 3, None)["power_w_per_chip"] == 300.0  # a replayed run: its own
