"""Measured cost mode through the public API and the CLI (SimConfig.measured_target / measured_draft).

- c is derived from the measured tables (draft / target pass time at the first step's context), not the roofline.
- With verification flat in positions and c constant in context, the simulated speedup is eq. (5) at that c.
- A missing or malformed table is a one-line error naming the file (exit 2 in the CLI).
"""

import pytest

from specsim import theory
from specsim.cli import main
from specsim.config import SimConfig
from specsim.errors import ConfigError
from specsim.cost.measured import write_csv
from specsim.simulate import run

BASE = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", stack="ideal")


def _table(path, time_at, positions=(1, 8), contexts=(0, 2000), prompt_len=None):
    """A measured table: a full grid over positions × contexts (batch 1); tiny prefill at the prompt length."""
    rows = [{"positions": p, "context": L, "time_s": time_at(p, L)} for p in positions for L in contexts]
    pre = [{"positions": prompt_len, "time_s": 1e-7}] if prompt_len else []
    return str(write_csv(path, rows, pre))


def test_c_is_derived_from_the_measured_tables(tmp_path):
    prompt = 100
    t = _table(tmp_path / "t.csv", lambda p, L: 0.010 + 1e-6 * L + 1e-4 * p)
    d = _table(tmp_path / "d.csv", lambda p, L: 0.002 + 3e-6 * L, positions=(1,))
    cfg = SimConfig(**BASE, alpha=0.7, gamma=3, requests=2, prompt_len=prompt, output_len=16,
                    measured_target=t, measured_draft=d)
    r = run(cfg)
    # first decode step: batch 1, one position, context = prompt (linear in L, so interpolation is exact)
    want = (0.002 + 3e-6 * prompt) / (0.010 + 1e-6 * prompt + 1e-4 * 1)
    assert r["c"] == pytest.approx(want, rel=1e-12)
    roof = run(cfg.replace(**{"measured_target": None, "measured_draft": None}))
    assert abs(roof["c"] - want) > 1e-3  # the roofline gives another c: the tables were really used
    # only one side measured: c mixes the table and the roofline
    half = run(cfg.replace(**{"measured_target": None}))
    assert half["c"] != pytest.approx(want) and half["c"] != pytest.approx(roof["c"])


@pytest.mark.parametrize("alpha,gamma", [(0.8, 4), (0.6, 2)])
def test_speedup_matches_eq5_when_verification_is_flat(tmp_path, alpha, gamma):
    prompt, c = 64, 0.15
    t = _table(tmp_path / "t.csv", lambda p, L: 0.010 * (1 + L / 2000), prompt_len=prompt)  # flat in positions
    d = _table(tmp_path / "d.csv", lambda p, L: c * 0.010 * (1 + L / 2000), positions=(1,), prompt_len=prompt)
    r = run(SimConfig(**BASE, alpha=alpha, gamma=gamma, policy="fixed", requests=64, prompt_len=prompt,
                      output_len=256, measured_target=t, measured_draft=d))
    assert r["c"] == pytest.approx(c, rel=1e-12)
    eq5 = float(theory.speedup(alpha, gamma, c))
    assert r["speedup_eq5"] == pytest.approx(eq5, rel=1e-9)
    assert r["speedup"] == pytest.approx(eq5, rel=0.03)


def test_measured_and_fixed_c_are_exclusive(tmp_path):
    with pytest.raises(ValueError, match="fixed_c"):
        SimConfig(**BASE, alpha=0.5, fixed_c=0.1, measured_target=str(tmp_path / "t.csv"))


def test_malformed_table_is_a_config_error_naming_the_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("batch,positions,context,time_s\n1,1,0,oops\n")
    with pytest.raises(ConfigError, match="bad.csv"):
        run(SimConfig(**BASE, alpha=0.5, requests=1, output_len=4, measured_draft=str(bad)))
    with pytest.raises(ConfigError, match="--measured-target"):  # a directory, not a file
        run(SimConfig(**BASE, alpha=0.5, requests=1, output_len=4, measured_target=str(tmp_path)))


def test_cli_missing_table_exits_2_with_one_line(tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    code = main(["simulate", *sum((["--" + k, v] for k, v in BASE.items()), []), "--alpha", "0.5",
                 "--requests", "1", "--output-len", "4", "--measured-target", str(missing), "--json"])
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and "nope.csv" in err and "Traceback" not in err


def test_cli_runs_with_measured_tables(tmp_path, capsys):
    import json

    t = _table(tmp_path / "t.csv", lambda p, L: 0.010)
    d = _table(tmp_path / "d.csv", lambda p, L: 0.001, positions=(1,))
    code = main(["simulate", *sum((["--" + k, v] for k, v in BASE.items()), []), "--alpha", "0.5",
                 "--requests", "2", "--output-len", "8", "--measured-target", t, "--measured-draft", d, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["c"] == pytest.approx(0.1, rel=1e-12)
