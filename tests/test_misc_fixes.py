"""Issue 21, item 5: the smaller fixes, each held at its root.

- A TPU slice is one tensor-parallel domain (`HardwareProfile.tp_domain_chips`, `max_tp`); a GPU node is still one.
- hf-assisted prices the prompt passes from a measured table's prefill rows.
- Help text is plain text: brackets survive rich's markup in every command's help.
- `specsim --version` prints the installed version.
- `why` never implies a gain when the simulated speedup is below 1.
- The README's main command writes outside the tracked tree.
"""

from __future__ import annotations

import json
import re
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import cli_capsys
from specsim import profiles as prof
from specsim.cost.roofline import CostModel, check_tp, valid_tp
from specsim.errors import ConfigError
from specsim.profiles.schema import HardwareProfile

ROOT = Path(__file__).resolve().parents[1]


# --- TPU slices as a TP domain -----------------------------------------------------------------------------------

def test_tpu_v4_slice_runs_chinchilla_70b_at_tp_16(capsys):
    """Chen et al. 2023 served Chinchilla 70B on 16 TPU v4 chips: 4 hosts, one ICI slice."""
    code, out, err = cli_capsys(capsys, "roofline", "--hardware", "tpu-v4", "--model", "chinchilla-70b", "--tp", "16",
                                "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["tp"] == 16 and r["model"] == "chinchilla-70b"
    one = CostModel(prof.model("chinchilla-70b"), prof.hardware("tpu-v4"), tp=1)
    assert r["passes"][0]["bytes"] == pytest.approx(one.pass_bytes(1, 1, 0) / 16, rel=1e-3)  # weights split 16 ways


@pytest.mark.parametrize("hw", ["h100-sxm", "a100-80gb", "h200", "mi300x"])
def test_an_eight_gpu_node_still_refuses_tp_16(capsys, hw):
    code, out, err = cli_capsys(capsys, "roofline", "--hardware", hw, "--model", "chinchilla-70b", "--tp", "16")
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    for needle in ("'tp'", "(got 16)", "chips_per_node = 8", "1..8", "tp_domain_chips"):
        assert needle in line, (needle, line)


def test_the_tp_domain_defaults_to_the_node_and_a_profile_may_widen_it():
    for name in prof.list_names(prof.HARDWARE_DIR):
        hw = prof.hardware(name)
        assert hw.max_tp == (hw.tp_domain_chips or hw.chips_per_node)
    for name in ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "l4", "mi300x"):
        hw = prof.hardware(name)  # an 8-GPU board: its NVLink / PCIe / Infinity Fabric domain is the node
        assert hw.tp_domain_chips is None and hw.max_tp == hw.chips_per_node == 8
    tpu = prof.hardware("tpu-v4")
    assert (tpu.chips_per_node, tpu.tp_domain_chips, tpu.max_tp) == (4, 4096, 4096)
    chin = prof.model("chinchilla-70b")
    assert valid_tp(chin, tpu) == [1, 2, 4, 8, 16, 32, 64]  # the 64 heads bound the slice, not the host
    assert check_tp(chin, tpu, 16) == 16
    with pytest.raises(ConfigError, match="tp_domain_chips = 4096"):
        check_tp(chin, tpu, 8192)
    narrow = tpu.model_copy(update={"tp_domain_chips": 8})
    with pytest.raises(ConfigError, match=r"tp_domain_chips = 8 .*1\.\.8"):
        check_tp(chin, narrow, 16)


@pytest.mark.parametrize("value, needle", [(0, "greater than or equal"), (8.0, "integer"), ("16", "integer"),
                                           (True, "integer"), (10 ** 6, "less than or equal")])
def test_a_bad_tp_domain_is_refused(value, needle):
    d = prof.hardware("tpu-v4").model_dump(exclude_none=True)
    with pytest.raises(Exception) as e:
        HardwareProfile(**{**d, "tp_domain_chips": value})
    assert "tp_domain_chips" in str(e.value) and needle in str(e.value).lower()


def test_every_tp_domain_line_carries_its_source():
    text = (ROOT / "hardware_profiles" / "tpu-v4.toml").read_text()
    block = text[:text.index("tp_domain_chips = 4096")]
    for needle in ("ICI", "3D torus", "4096 chips", "Jouppi", "Chen et al. 2023"):
        assert needle in block[-900:], needle


# --- hf-assisted reads a measured table's prefill rows -----------------------------------------------------------

def _table(path: Path, decode_s: float, prefill_s_per_token: float | None) -> Path:
    """A measured table: decode rows t = decode_s·(1 + 0.02 P + 0.0005 L); prefill rows (if any) t = k·P."""
    rows = ["kind,batch,positions,context,time_s"]
    rows += [f"decode,1,{p},{c},{decode_s * (1 + 0.02 * p + 0.0005 * c)!r}" for p in (1, 2, 4, 8, 16, 64, 128)
             for c in (0, 256, 1024)]
    if prefill_s_per_token is not None:
        rows += [f"prefill,1,{p},0,{prefill_s_per_token * p!r}" for p in (16, 64, 128)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _hf_run(capsys, tmp_path, with_prefill: bool, profile: str = "hf-assisted") -> dict:
    t = _table(tmp_path / f"t{with_prefill}.csv", 0.05, 0.01 if with_prefill else None)
    d = _table(tmp_path / f"d{with_prefill}.csv", 0.01, 0.002 if with_prefill else None)
    code, out, err = cli_capsys(capsys, "simulate", "--hardware", "cpu-2core", "--target", "qwen2.5-coder-1.5b",
                                "--draft", "qwen2.5-coder-0.5b", "--alpha", "0.7", "--gamma", "3", "--batch", "1",
                                "--requests", "4", "--prompt-len", "64", "--output-len", "16", "--engine-profile",
                                profile, "--measured-target", t, "--measured-draft", d, "--json")
    assert code == 0, err
    return json.loads(out)


def test_hf_assisted_prices_prompt_passes_from_measured_prefill_rows(capsys, tmp_path):
    r = _hf_run(capsys, tmp_path, True)
    # the baseline's prefill: the prefill row at P = 64, 0.01 s per token (the decode grid would say 0.114 s)
    assert r["baseline_ttft_mean_s"] == pytest.approx(0.64, rel=1e-12)
    # round 1: the draft's prompt pass (prefill row, 0.002 × 64) + γ − 1 = 2 decode passes at contexts 64, 65
    # + the target's fused pass over P + γ = 67 positions at context 0 (prefill rows, 0.01 × 67)
    draft_steps = sum(0.01 * (1 + 0.02 + 0.0005 * c) for c in (64, 65))
    assert r["ttft_mean_s"] == pytest.approx(0.002 * 64 + draft_steps + 0.01 * 67, rel=1e-9)
    plain = _hf_run(capsys, tmp_path, False)  # no prefill rows: the decode grid prices the prompt passes
    assert plain["baseline_ttft_mean_s"] == pytest.approx(0.05 * (1 + 0.02 * 64), rel=1e-9)
    assert r["ttft_mean_s"] > 4 * plain["ttft_mean_s"]


def test_hf_assisted_and_specsim_price_the_same_baseline_prefill(capsys, tmp_path):
    """The two profiles read one table the same way for the plain prefill."""
    hf, ours = _hf_run(capsys, tmp_path, True), _hf_run(capsys, tmp_path, True, "specsim")
    assert hf["baseline_ttft_mean_s"] == pytest.approx(ours["baseline_ttft_mean_s"], rel=1e-9)


# --- help text is plain text -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["plan (TOML: [fixed], [[option]], [search], [slo]; see x)", "[[1, 8, 4], [9, 64, 2]]",
                                  "a [b] and \\[c] and [/d] [#e] [@f] [bold red]g[/]", "no brackets", "[", "]x[",
                                  "ends with a backslash \\"])
def test_plain_help_shows_the_text_verbatim_and_is_idempotent(text):
    from rich.markup import escape
    from rich.text import Text

    from specsim.cli import plain_help

    once = plain_help(text)
    assert plain_help(once) == once  # a command that escaped its own help (cli/sim.py) is left alone
    if "\\[" not in text and not text.endswith("\\"):
        assert Text.from_markup(once).plain == text
    assert plain_help(escape("[fixed] [[option]]")) == escape("[fixed] [[option]]")


def _commands():
    """(argv path, click command) of every command and sub-command."""
    import typer

    from specsim.cli import app

    def walk(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, path + [name])

    return list(walk(typer.main.get_command(app), []))


def _squash(s: str) -> str:
    return re.sub(r"[\s│╭╮╰╯─]+", "", s)


def test_every_bracket_in_every_help_text_is_shown(capsys):
    """`plan --help` showed "(TOML: , [], , ; …)": typer read "[fixed]" as a rich style tag. Every help text with a
    markup-looking bracket, in every command, must reach the rendered help whole."""
    checked = 0
    for path, cmd in _commands():
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        tags = [m for t in texts for m in re.findall(r"\[[a-z#/@][^[\]]*\]", t.replace("\\[", "["))]
        if not tags:
            continue
        code, out, err = cli_capsys(capsys, *path, "--help")
        assert code == 0, (path, err)
        shown = _squash(out)
        for tag in tags:
            assert _squash(tag) in shown, (path, tag)
            checked += 1
    assert checked >= 5  # plan's four tables and more: the check reached real bracketed help


def test_plan_help_shows_its_tables(capsys):
    code, out, _ = cli_capsys(capsys, "plan", "--help")
    assert code == 0
    assert "[fixed],[[option]],[search],[slo]" in _squash(out)


# --- --version ---------------------------------------------------------------------------------------------------

def test_version_prints_the_installed_version(capsys):
    code, out, err = cli_capsys(capsys, "--version")
    assert code == 0 and err == ""
    assert out.strip() == f"specsim {version('specsim')}"
    assert re.fullmatch(r"specsim \d+\.\d+\.\d+\S*", out.strip())


def test_version_from_the_installed_entry_point():
    exe = Path(__import__("sys").executable).with_name("specsim")
    if not exe.exists():
        pytest.skip("no console script beside this interpreter")
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"specsim {version('specsim')}"


def test_tables_show_brackets_as_written(capsys):
    from specsim.cli.output import table

    table("plan [fixed]", ["name", "value"], [["[slo]", "[bold]x[/bold]"]], caption="see [search]")
    out = capsys.readouterr().out
    for needle in ("plan [fixed]", "[slo]", "[bold]x[/bold]", "see [search]"):
        assert needle in out, needle


# --- `why` never implies a gain when the speedup is below 1 ------------------------------------------------------

def _per_step(line: str) -> float:
    return float(re.search(r"([\d.]+)× per step", line).group(1))


def test_the_readme_heuristic_example_is_priced_at_the_gamma_its_steps_ran(tmp_path):
    """README's `--policy heuristic --rate 8` example lost 0.59× with a line whose own figures paid (τ = 2.73 tokens
    for 1.24 + 1.00 decode steps): it priced γ = 4 while heuristic's batch steps drafted their largest γ, ~10.5."""
    from conftest import cli_redirect
    from specsim.simulate import make_config, run

    trace = tmp_path / "clustered.parquet"
    code = cli_redirect("trace", "synth", "--kind", "markov", "--alpha", "0.7", "--stretch", "20", "--out", trace)[0]
    assert code == 0
    r = run(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", gamma=4, trace=str(trace),
                        policy="heuristic", rate=8.0, requests=500))
    assert r["speedup"] < 1
    ran = r["draft_passes"] / r["target_runs"]
    assert ran > 8  # the steps drafted far more than γ = 4
    assert f"γ = {ran:.2f} on average" in r["why"]
    assert _per_step(r["why"]) < 1 and "by draft cost" in r["why"]


@pytest.mark.parametrize("drafting, verify, tau, speedup", [(1.24, 1.0, 2.73, 0.59), (0.5, 1.0, 1.2, 0.99),
                                                             (3.27, 1.0, 2.73, 0.59), (0.2, 2.5, 2.0, 0.7),
                                                             (0.3, 1.0, 2.5, 1.4)])
def test_a_line_never_implies_a_gain_below_one(drafting, verify, tau, speedup):
    from specsim.cost.explain import _why

    w = _why(drafting, f"drafting {drafting:.2f} decode steps", verify, ("verification cost", "x"), speedup,
             "at batch 1", tau)
    paid = tau / (drafting + verify)
    if speedup < 1:
        assert w.line.startswith("speculation loses")
        if paid >= 1:  # the step pays, so the loss is named as lying outside it
            assert w.reason == "load, not the step" and "outside the decode step" in w.line
            assert f"{paid:.2f}× per step" in w.line and " by " not in w.line
        else:
            assert _per_step(w.line) < 1 and " by " in w.line
    else:
        assert w.line.startswith("speculation is limited") and _per_step(w.line) == pytest.approx(paid, abs=0.01)


def test_a_fixed_gamma_run_is_priced_at_its_gamma():
    from specsim.simulate import make_config, run

    r = run(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.2, gamma=6,
                        requests=64))
    assert r["speedup"] < 1 and "γ = 6" in r["why"] and "on average" not in r["why"]
    assert _per_step(r["why"]) < 1


def test_the_readme_rate_example_gains_and_says_no_why(tmp_path):
    """The README's `--policy ... --rate 8` line (after `...` = the line above it) must show a gain."""
    from conftest import cli_redirect
    from specsim.simulate import make_config, run

    readme = (ROOT / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("specsim simulate ... --trace"))
    assert "--policy heuristic" not in line and "--rate 8" in line
    policy = re.search(r"--policy (\w+)", line).group(1)
    trace = tmp_path / "clustered.parquet"
    code = cli_redirect("trace", "synth", "--kind", "markov", "--alpha", "0.7", "--stretch", "20", "--out", trace)[0]
    assert code == 0
    r = run(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", gamma=4, trace=str(trace),
                        policy=policy, rate=8.0, requests=500))
    assert r["speedup"] > 1 and "why" not in r
    claimed = float(re.search(r"# ([\d.]+)×", line).group(1))
    assert r["speedup"] == pytest.approx(claimed, abs=0.005)


# --- the README's main command writes outside the tracked tree -----------------------------------------------------

def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


def test_the_readme_main_command_and_compare_default_write_to_ignored_folders():
    import typer

    from specsim.cli import app

    if _git("rev-parse", "--is-inside-work-tree").returncode != 0:
        pytest.skip("not a git checkout")
    readme = (ROOT / "README.md").read_text()
    main_cmd = re.search(r"\.venv/bin/specsim compare --out (\S+)", readme).group(1)
    compare = typer.main.get_command(app).commands["compare"]
    default = next(p.default for p in compare.params if p.name == "out")
    for out in (main_cmd, default):
        assert not out.startswith("experiments/"), out
        for name in ("compare.csv", "compare.png"):
            assert _git("check-ignore", "-q", f"{out}/{name}").returncode == 0, (out, name)
        assert _git("ls-files", out).stdout == ""  # nothing tracked there
    # the committed copy is tracked and has its explicit, documented regenerating command
    assert _git("ls-files", "experiments/results/compare/compare.csv").stdout.strip()
    script = (ROOT / "experiments" / "compare.py").read_text()
    assert '"experiments" / "results" / "compare"' in script and "experiments/compare.py" in readme
