"""`specsim calibrate-power`: the power model's idle floor and dynamic range fitted to measured (utilisation, watts)
samples, written into a copy of the hardware profile that simulate then prices energy with."""

import json

import numpy as np
import pytest
from conftest import cli_capsys

from specsim.cost.power import run_energy_j
from specsim.profiles import loader


def _samples(path, idle=70.0, dyn=600.0, n=200, noise=5.0, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.uniform(0, 1, n)
    w = idle + dyn * u + rng.normal(0, noise, n)
    path.write_text("utilisation,watts\n" + "".join(f"{float(a)!r},{float(b)!r}\n" for a, b in zip(u, w)))
    return path


def test_the_fit_recovers_the_figures_and_the_profile_prices_with_them(tmp_path, capsys):
    csv = _samples(tmp_path / "p.csv")
    out = tmp_path / "mine.toml"
    code, text, err = cli_capsys(capsys, "calibrate-power", csv, "--hardware", "h100-sxm", "--out", out, "--json")
    assert code == 0, err
    r = json.loads(text)
    assert r["idle_w"] == pytest.approx(70.0, abs=3) and r["tdp_w"] == pytest.approx(670.0, abs=5) and r["r2"] > 0.99
    mine, stock = loader.hardware(str(out)), loader.hardware("h100-sxm")
    assert (mine.idle_w, mine.tdp_w) == (round(r["idle_w"], 3), round(r["tdp_w"], 3))
    assert mine.memory_bandwidth_gb_s == stock.memory_bandwidth_gb_s and mine.price_usd_per_hour == \
        stock.price_usd_per_hour
    dur, b, f = np.array([0.01]), np.array([1e10]), np.array([1e12])
    e = run_energy_j(mine, 1, 1, 0.01, dur, b, f, mine.bandwidth_bytes_s, mine.peak_flops("bf16"))
    u = min(1.0, 1e10 / (0.01 * mine.bandwidth_bytes_s) + 1e12 / (0.01 * mine.peak_flops("bf16")))
    assert e == pytest.approx(mine.idle_w * 0.01 + (mine.tdp_w - mine.idle_w) * u * 0.01, rel=1e-12)


@pytest.mark.parametrize("body, words", [
    ("utilisation,power\n0.1,100\n0.9,600\n", "watts"),
    ("utilisation,watts\n0.1,100\n1.5,600\n", "utilisation"),
    ("utilisation,watts\n0.1,-5\n0.9,600\n", "watts"),
    ("utilisation,watts\n0.5,100\n0.5,600\n", "two or more utilisations"),
    ("utilisation,watts\n0.1,600\n0.9,100\n", "does not rise"),
    ("utilisation,watts\n0.1,abc\n0.9,600\n", "watts"),
])
def test_bad_samples_are_one_line(tmp_path, capsys, body, words):
    csv = tmp_path / "p.csv"
    csv.write_text(body)
    code, out, err = cli_capsys(capsys, "calibrate-power", csv, "--hardware", "h100-sxm")
    assert code == 2 and out == "" and words in err and len(err.strip().splitlines()) == 1, err


def test_out_must_be_a_toml_path(tmp_path, capsys):
    code, _, err = cli_capsys(capsys, "calibrate-power", _samples(tmp_path / "p.csv"), "--hardware", "h100-sxm",
                              "--out", tmp_path / "x.csv")
    assert code == 2 and "--out" in err
