"""`--speculative-config '{...}'` in vLLM's shape, on simulate, sweep (the `method` field) and choose-draft
(pasted configs — repo ids, ignored keys, disable_by_batch_size — in test_pasted_config.py)."""

import json

import pytest

from conftest import cli_capsys as run
from specsim.errors import ConfigError
from specsim.methods.spec_config import parse

SIM = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--alpha", "0.7", "--requests", "8"]


def _sim(capsys, *args, base=SIM):
    code, out, err = run(capsys, *base, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_vllm_keys_map_to_the_fields():
    got = parse('{"method": "eagle3", "model": "eagle3-llama-3.1-8b", "num_speculative_tokens": 3, '
                '"draft_tensor_parallel_size": 2}')
    assert got == {"method": "eagle3", "draft": "eagle3-llama-3.1-8b", "gamma": 3, "draft_tp": 2}
    assert parse('{"model": "llama-3.2-1b"}') == {"method": "draft_model", "draft": "llama-3.2-1b"}
    assert parse('{"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}') == {"method": "ngram"}


@pytest.mark.parametrize("text, named", [
    ('{"method": "eagle3", "acceptance_method": "typical_acceptance_sampler"}', "acceptance_method"),
    ('{"method": "eagle3", "speculative_token_tree": 3}', "speculative_token_tree"),
    ('{"method": "lookahead"}', "lookahead"),
    ('{"method": "eagle3", "num_speculative_tokens": 0}', "num_speculative_tokens"),
    ('{"method": "eagle3", "num_speculative_tokens": true}', "num_speculative_tokens"),
    ('{"method": "eagle3", "draft_tensor_parallel_size": 2.5}', "draft_tensor_parallel_size"),
    ('{"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2}', "prompt_lookup_min"),
    ('{"method": "eagle3", "prompt_lookup_max": 4}', "prompt_lookup_max"),
    ('{"method": "draft_model"}', "model"),
    ('{"method": "ngram", "model": 3}', "model"),
    ('[1, 2]', "JSON object"),
    ('{"method": ', "not valid JSON"),
])
def test_bad_key_method_or_value_is_one_line_exit_2(capsys, text, named):
    code, out, err = run(capsys, *SIM, "--speculative-config", text, "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert named in err and "--speculative-config" in err and "Traceback" not in err


def test_a_field_given_both_ways_is_refused(capsys):
    code, _, err = run(capsys, *SIM, "--gamma", "2", "--speculative-config",
                       '{"method": "eagle3", "num_speculative_tokens": 3}', "--json")
    assert code == 2 and "--gamma" in err and "num_speculative_tokens" in err


def test_the_config_is_the_same_run_as_the_fields(capsys):
    a = _sim(capsys, "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}')
    b = _sim(capsys, "--method", "eagle3", "--gamma", "3")
    assert a == b and a["method"] == "eagle3" and a["gamma"] == 3
    c = _sim(capsys, "--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}')
    d = _sim(capsys, "--draft", "llama-3.2-1b", "--gamma", "3")
    assert c == d and c["method"] == "draft_model"


def test_methods_rank_as_their_costs_say(capsys):
    """At α 0.7, γ 3, batch 1: a head is cheaper than a 1B draft model; the n-gram lookup is nearly free."""
    base = SIM[:-1] + ["256"]  # enough requests for the simulated speedup to sit near eq. (5)
    s = {m: _sim(capsys, "--speculative-config", json.dumps({"method": m, "num_speculative_tokens": 3}), base=base)
         for m in ("eagle3", "mtp", "ngram")}
    s["draft_model"] = _sim(capsys, "--draft", "llama-3.2-1b", "--gamma", "3", base=base)
    assert s["ngram"]["c"] < s["eagle3"]["c"] < s["mtp"]["c"] < s["draft_model"]["c"]
    for r in s.values():
        assert r["speedup_eq5"] == pytest.approx((1 - 0.7 ** 4) / 0.3 / (3 * r["c"] + 1))  # eq. (5) at its own c
        assert r["speedup"] == pytest.approx(r["speedup_eq5"], rel=0.02)


def test_draft_tensor_parallel_size_reaches_the_draft(capsys):
    base = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-70b", "--tp", "4", "--alpha", "0.7",
            "--requests", "8", "--json", "--speculative-config"]
    cfg = {"model": "llama-3.2-1b", "num_speculative_tokens": 3}
    outs = []
    for dtp in (1, 4):
        code, out, err = run(capsys, *base, json.dumps(dict(cfg, draft_tensor_parallel_size=dtp)))
        assert code == 0, err
        outs.append(json.loads(out))
    assert outs[0]["c"] != outs[1]["c"] and outs[0]["memory_weights_gb"] > outs[1]["memory_weights_gb"]


def test_sweep_with_a_method_axis(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text('[fixed]\nhardware = "h100-sxm"\ntarget = "llama-3.1-8b"\nalpha = 0.7\ngamma = 3\n'
                    'requests = 8\n[grid]\nmethod = ["eagle3", "mtp", "ngram"]\n[run]\nplots = false\n')
    code, out, err = run(capsys, "sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "1", "--json")
    assert code == 0, err
    import pandas as pd

    df = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert list(df["method"]) == ["eagle3", "mtp", "ngram"]
    assert list(df["draft"]) == ["eagle3-llama-3.1-8b", "mtp-llama-3.1-8b", "ngram"]
    assert (df["speedup"] > 1).all() and len(set(df["c"])) == 3


def test_choose_draft_takes_a_speculative_config(capsys):
    code, out, err = run(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "llama-3.2-1b:0.7", "--speculative-config", '{"method": "eagle3", "alpha": 0.7}',
                         "--batch", "1", "--gamma-max", "3", "--requests", "8", "--json")
    assert code == 0, err
    rows = {d["method"]: d for d in json.loads(out)["drafts"]}
    assert rows["eagle3"]["draft"] == "eagle3-llama-3.1-8b" and rows["eagle3"]["rank"] == 1
    assert rows["draft_model"]["rank"] == 2
    # a pasted config's num_speculative_tokens is its configured γ: still searched, its speedup reported beside
    code, out, err = run(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                         "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3, "alpha": 0.7}',
                         "--batch", "1", "--gamma-max", "3", "--requests", "8", "--json")
    assert code == 0, err
    row = json.loads(out)["drafts"][0]
    assert row["configured_gamma"] == 3 and row["points"][0]["speedup_at_configured_gamma"] == \
        row["points"][0]["speedup_by_gamma"][2]


def test_parse_refuses_without_a_method_or_model():
    with pytest.raises(ConfigError, match="say which method"):
        parse("{}")


def test_a_bad_tree_in_the_config_names_the_tree(capsys):
    code, out, err = run(capsys, *SIM, "--speculative-config", '{"method": "eagle3", "speculative_token_tree": "x"}')
    assert code == 2 and out == "" and "--speculative-token-tree" in err and "not a tree" in err
