"""SimConfig's groups, its one flat <-> nested mapping, the `simulate` options generated from it, and the flags its
error messages name: every flag a message names is a real `simulate` option."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command

from specsim.cli import app, main
from specsim.config import CLI_ALIASES, FLAT, FLAT_FIELDS, GROUPS, SimConfig, flag
from specsim.errors import ConfigError
from specsim.simulate import make_config

REPO = Path(__file__).resolve().parents[1]
PAIR = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _simulate_options() -> set[str]:
    cmd = get_command(app).commands["simulate"]
    return {o for p in cmd.params for o in list(p.opts) + list(p.secondary_opts)}


def test_simulate_options_are_the_fields_flags():
    from specsim.cli.sim import RENAMED

    assert _simulate_options() == {flag(f) for f in FLAT} | {"--json"} | set(RENAMED)  # the renamed: refused
    assert all(f in FLAT for f in CLI_ALIASES) and flag("arrivals_csv") == "--arrivals"
    assert flag("max_num_seqs") == "--max-num-seqs"  # vLLM's own name
    assert (flag("slo_ttft_s"), flag("slo_tpot_s"), flag("slo_warmup_s")) == \
        ("--slo-ttft-s", "--slo-tpot-s", "--slo-warmup-s")  # the unit in the flag's name, as in the field's


def test_flat_map_is_derived_from_the_groups():
    """FLAT is not a second list of groups: each field's group is the class that declares it; the column order is
    frozen for today's fields (the results table, sweep ids and users' CSVs keep it) and a field added later
    follows in its group's declaration order — adding a field is one line in its group."""
    from pydantic import BaseModel

    from specsim import config

    assert FLAT == config.flat_map(GROUPS)
    assert all(f in GROUPS[g].model_fields for f, g in FLAT.items())
    assert list(FLAT)[:5] == ["hardware", "target", "draft", "stack", "tp"] and list(FLAT)[5] == "alpha"
    assert list(FLAT) == [f for f in config._FROZEN_COLUMNS if f in FLAT] + [f for f in FLAT if f not in
                                                                           config._FROZEN_COLUMNS]

    class Workload(config.WorkloadConfig):  # a group gains a field: it lands last, in its group, nowhere else
        new_knob_s: float = 1.0

    class Extra(BaseModel):
        other: int = 0

    grown = config.flat_map({**GROUPS, "workload": Workload, "extra": Extra})
    assert list(grown)[-2:] == ["new_knob_s", "other"] and grown["new_knob_s"] == "workload"
    assert list(grown)[:-2] == list(FLAT)
    # and the sweep's point ids need no list either: a field outside the frozen set enters an id only away from its
    # default (the 15 fields added before issue 25 keep exactly the defaults they were listed with)
    from specsim.sweep import grid

    later = set(grid._LATER_FIELDS)
    assert grid._ALWAYS_IN_ID | later == set(FLAT) and not grid._ALWAYS_IN_ID & later
    assert grid._LATER_FIELDS == {
        "draft_catchup": False, "engine_profile": "specsim", "max_num_seqs": None, "max_num_batched_tokens": None,
        "block_size": None, "num_gpu_blocks": None, "long_prefill_token_threshold": 0, "step_table_target": None,
        "step_table_draft": None, "method": "draft_model", "draft_tp": None, "speculative_config": None,
        "speculative_token_tree": None, "tree_topk_acceptance": None, "slo_warmup_s": 0.0}
    cfg = SimConfig(**PAIR, alpha=0.6)
    assert "slo_warmup_s" not in grid.canonical_json(cfg) and "slo_warmup_s" in grid.canonical_json(
        cfg.replace(slo_warmup_s=2.0))


def test_flat_mapping_round_trips_in_the_sweep_column_order():
    cfg = SimConfig(**PAIR, alpha=0.6, gamma=3, batch=8, engine="fast", slo_ttft_s=0.5)
    assert list(cfg.flat()) == list(FLAT) == list(FLAT_FIELDS)
    assert SimConfig.from_flat(cfg.flat()) == cfg == SimConfig.model_validate(cfg.model_dump())
    assert (cfg.deployment.hardware, cfg.speculation.gamma, cfg.workload.batch, cfg.engine.engine) == \
        ("h100-sxm", 3, 8, "fast")
    assert cfg.get("slo_ttft_s") == cfg.slo.slo_ttft_s == 0.5
    assert set(GROUPS) == {"deployment", "acceptance", "speculation", "workload", "slo", "engine"}
    r = cfg.replace(gamma=5)
    assert r.speculation.gamma == 5 and r.workload.model_fields_set == {"batch"}  # unset fields stay unset
    with pytest.raises(ValueError, match="gamma given twice"):
        SimConfig(**PAIR, alpha=0.6, gamma=3, speculation={"gamma": 4})


# every cross-field rule and a bad value of every bounded field, through the path the CLI takes
RULES = [dict(), dict(alpha=0.5, trace="t.csv"), dict(alpha=0.5, rate=1.0, arrivals_csv="a.csv"),
         dict(alpha=0.5, fixed_c=0.1, measured_target="m.csv"),
         dict(alpha=0.5, num_speculative_tokens_per_batch_size=[[1, 4, 2]]),
         dict(alpha=0.5, policy="bands", num_speculative_tokens_per_batch_size=[[4, 1, 2]]),
         dict(alpha=0.5, long_prefill_token_threshold=8)] + \
        [dict(alpha=0.5, **{f: 1}) for f in ("max_num_seqs", "max_num_batched_tokens", "block_size",
                                             "num_gpu_blocks", "step_table_target", "step_table_draft")]


def _bad_values():
    for name, info in FLAT_FIELDS.items():
        for m in info.metadata:
            lo = getattr(m, "ge", None) if getattr(m, "ge", None) is not None else getattr(m, "gt", None)
            if lo is not None:
                yield dict(alpha=0.5, **{name: lo - 1}) if name != "alpha" else dict(alpha=-1.0)


@pytest.mark.parametrize("kw", RULES + list(_bad_values()), ids=lambda kw: ",".join(kw))
def test_every_flag_a_config_error_names_is_a_simulate_option(kw):
    with pytest.raises(ConfigError) as e:
        make_config(**PAIR, **kw)
    named = set(FLAG.findall(str(e.value)))
    assert named and named <= _simulate_options(), str(e.value)  # a rule names its fields by their flags


def test_engine_messages_name_real_flags():
    """The flags written into the engine's and the cost path's messages exist (scanned from the source)."""
    files = [*REPO.glob("specsim/engine/**/*.py"), REPO / "specsim/simulate.py", REPO / "specsim/config.py",
             REPO / "specsim/setup/deployment.py"]
    found = {f for p in files for f in FLAG.findall(p.read_text())} - {"--field-name",  # a docstring's pattern
                                                                      "--routing-logic"}  # vLLM router's, cited
    assert found and found <= _simulate_options(), found - _simulate_options()


def test_cli_rule_errors_say_the_real_flag(capsys):
    argv = ["simulate", *sum((["--" + k, v] for k, v in PAIR.items()), []), "--alpha", "0.5"]
    assert main(argv + ["--rate", "2", "--arrivals", "x.csv"]) == 2
    assert "give at most one of --rate and --arrivals" in capsys.readouterr().err
    assert main(argv + ["--slo-ttft-s", "0"]) == 2
    assert "field '--slo-ttft-s'" in capsys.readouterr().err
