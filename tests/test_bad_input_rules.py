"""The last silent bad inputs of experiments/bad_inputs.md, each refused at its root (issue 21 item 6)."""

import json
from pathlib import Path

import pytest

from conftest import cli_redirect
from specsim.errors import ConfigError
from specsim.validation import vllm_outputs as vr

FIX = Path(__file__).resolve().parent / "fixtures"
GOOD = json.loads((FIX / "vllm" / "bench_detailed.json").read_text())
SIM = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.7",
       "--requests", "2", "--output-len", "8", "--json"]


@pytest.mark.parametrize("flag, value, ok", [("--gamma", "3.0", False), ("--gamma", "1e3", False),
                                             ("--tp", "1.0", False), ("--gamma", "3", True), ("--tp", "+1", True)])
def test_an_integer_flag_takes_only_an_integer_as_a_file_does(flag, value, ok):
    code, out, err = cli_redirect(*SIM, flag, value)
    if ok:
        assert code == 0 and json.loads(out)["speedup"] > 0
    else:
        assert code == 2 and err.count("\n") == 1 and f"'{flag}'" in err and "not an integer" in err


def _bench(tmp_path, edit) -> Path:
    d = json.loads(json.dumps(GOOD))
    edit(d)
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["output_lens"].__setitem__(0, 0), "completed with no output token"),
    (lambda d: d["itls"].__setitem__(0, d["itls"][0] * 2), "more inter-token gaps than tokens"),
    (lambda d: d["latencies"].__setitem__(0, d["latencies"][0] + 10.0), "not its TTFT plus its inter-token gaps"),
])
def test_bench_results_that_cannot_have_been_measured(tmp_path, edit, needle):
    vr.read_bench(_bench(tmp_path, lambda d: None))  # the fixture itself reads
    with pytest.raises(ConfigError, match=needle):
        vr.read_bench(_bench(tmp_path, edit))


def test_metrics_that_are_not_vllm_or_do_not_add_up():
    text = (FIX / "vllm" / "metrics_spec.txt").read_text()
    vr.spec_counters(vr.parse_metrics(text, "m.txt"), "m.txt")
    for bad in ("", "hello world\n%%% not prometheus\n{}\n", "process_cpu_seconds_total 3.0\n"):
        with pytest.raises(ConfigError, match="not a vLLM /metrics page"):
            vr.parse_metrics(bad, "m.txt")
    acc = 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 751.0'
    assert acc in text
    with pytest.raises(ConfigError, match="do not add up"):
        vr.spec_counters(vr.parse_metrics(text.replace(acc, acc.replace("751.0", "700.0")), "m.txt"), "m.txt")


def test_a_plan_option_needs_a_name_that_says_something(tmp_path):
    from specsim.studies.plan_spec import load_plan
    good = (Path(__file__).resolve().parent.parent / "experiments" / "plans" / "llama70b.toml").read_text()
    assert 'name = "4xH100"' in good
    load_plan(_write(tmp_path, "ok.toml", good))
    with pytest.raises(ConfigError, match="name is empty"):
        load_plan(_write(tmp_path, "bad.toml", good.replace('name = "4xH100"', 'name = "  "')))


def _write(tmp_path, name, text) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_target_and_draft_take_a_listed_repo_id_as_vllm_names_models():
    by_name = json.loads(cli_redirect(*SIM)[1])
    code, out, err = cli_redirect("simulate", "--hardware", "h100-sxm", "--target", "meta-llama/Llama-3.1-8B-Instruct",
                                  "--draft", "meta-llama/Llama-3.2-1B-Instruct", "--alpha", "0.7", "--requests", "2",
                                  "--output-len", "8", "--json")
    assert code == 0 and json.loads(out)["speedup"] == by_name["speedup"]
    code, _, err = cli_redirect(*[a if a != "llama-3.2-1b" else "someone/unlisted-1b" for a in SIM])
    assert code == 2 and "field 'draft'" in err and "repo id" in err and err.count("\n") == 1


@pytest.mark.parametrize("text, needle", [
    (None, "no such eagle3 head profile file"),  # an absent path
    ("garbage = [\n", "malformed TOML"),  # a damaged file: its own parse error, not "takes a head profile"
    ('name = "x"\nhidden_size = 4096\n', "field 'method': required field is missing"),  # an incomplete one
])
def test_a_head_path_that_is_absent_damaged_or_incomplete_says_which(tmp_path, text, needle):
    p = tmp_path / "head.toml"
    if text is not None:
        p.write_text(text)
    code, out, err = cli_redirect("simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", str(p),
                                  "--method", "eagle3", "--alpha", "0.7", "--requests", "2", "--json")
    assert code == 2 and err.count("\n") == 1 and needle in err and str(p) in err, err


@pytest.mark.parametrize("old, new, column", [
    (",llama-3.1-8b,", ",nosuchmodel,", "model"),
    (",h100-sxm,", ",nogpu,", "gpu"),
    (",1,16,16.0,513,0.263,1954,", ",3,16,16.0,513,0.789,1950,", "tp"),  # 3 does not divide the heads
])
def test_a_power_row_refused_by_its_deployment_names_the_file_row_and_column(tmp_path, old, new, column):
    rows = [ln for ln in (FIX / "power" / "mlenergy_v3_lm_arena_chat.csv").read_text().splitlines()
            if not ln.startswith("#")][:4]
    rows[2] = rows[2].replace(old.lstrip(","), new.lstrip(","), 1) if old.startswith(",llama") else \
        rows[2].replace(old, new, 1)
    p = tmp_path / "rows.csv"
    p.write_text("\n".join(rows) + "\n")
    code, out, err = cli_redirect("calibrate-power", str(p), "--hardware", "h100-sxm")
    assert code == 2 and err.count("\n") == 1 and str(p) in err and f"field '{column}'" in err, err
    assert "data row 2" in err


def test_a_step_table_path_that_is_a_folder_says_so(tmp_path):
    code, out, err = cli_redirect("simulate", "--hardware", "cpu-2core", "--target", "qwen2.5-coder-1.5b", "--draft",
                                  "qwen2.5-coder-0.5b", "--alpha", "0.7", "--engine-profile", "vllm-v1",
                                  "--step-table-target", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "is a directory, not a file" in err and str(tmp_path) in err, err
