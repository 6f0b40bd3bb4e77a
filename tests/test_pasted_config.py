"""A vLLM `--speculative-config` pasted from a deployment: Hugging Face repo ids for shipped models, timing-free keys
accepted and listed as ignored, `disable_by_batch_size` modelled — through simulate, sweep, plan and choose-draft;
what cannot be read is one line naming the field, the value and the choices."""

import json
import textwrap

import numpy as np
import pandas as pd
import pytest

from conftest import cli_capsys as run
from specsim.engine.policies.base import averaged_baseline
from specsim.engine.policies.disable_by_batch import DisableByBatchSize
from specsim.engine.policies.fixed import FixedPolicy
from specsim.methods import heads
from specsim.methods.spec_config import parse
from specsim.profiles import loader, repo_ids

SIM = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--alpha", "0.7", "--requests", "8"]
LLAMA_1B = '{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}'
EAGLE3 = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'


def _sim(capsys, *args, base=SIM):
    code, out, err = run(capsys, *base, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def _refused(capsys, *args, base=SIM) -> str:
    code, out, err = run(capsys, *base, *args, "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# --- the repo-id table ------------------------------------------------------------------------------------------

def test_every_mapped_repo_id_names_a_shipped_profile_of_its_kind():
    for repo, name in repo_ids.MODEL_REPOS.items():
        assert loader.model(name).name == name, repo
        assert repo_ids.lookup(repo) == ("model", name) and repo_ids.lookup(repo.lower()) == ("model", name)
    for repo, name in repo_ids.HEAD_REPOS.items():
        assert heads.head(name).method in ("eagle", "eagle3", "mtp", "medusa"), repo
        assert repo_ids.lookup(repo) == ("head", name)
    assert repo_ids.lookup("meta-llama/Llama-3.2-1B-Instruct") == ("model", "llama-3.2-1b")
    assert repo_ids.lookup("someone/unknown-model") is None
    assert repo_ids.looks_like_repo_id("meta-llama/Llama-3.2-1B") and not repo_ids.looks_like_repo_id("./a/b.toml")


def test_repo_ids_read_into_fields():
    assert parse(LLAMA_1B) == {"method": "draft_model", "draft": "llama-3.2-1b", "gamma": 3}
    assert parse(EAGLE3) == {"method": "eagle3", "draft": "eagle3-llama-3.1-8b", "gamma": 3}
    # without a method, a head's repo says its method (vLLM infers the method from the model too)
    assert parse('{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}')["method"] == "eagle3"
    assert parse('{"model": "eagle3-llama-3.1-8b"}') == {"method": "eagle3", "draft": "eagle3-llama-3.1-8b"}
    assert parse('{"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"}') == {"method": "eagle",
                                                                          "draft": "eagle-llama-3.1-8b"}
    # mtp drafts with the target's own checkpoint: its repo id leaves the target's shipped head to be picked
    assert parse('{"method": "mtp", "model": "meta-llama/Llama-3.1-8B-Instruct"}', target="llama-3.1-8b") == \
        {"method": "mtp"}
    assert parse('{"method": "deepseek_mtp"}') == {"method": "mtp"}  # vLLM's per-model MTP name


# --- simulate ---------------------------------------------------------------------------------------------------

def test_a_pasted_repo_id_is_the_same_run_as_the_profile(capsys):
    assert _sim(capsys, "--speculative-config", LLAMA_1B) == _sim(capsys, "--draft", "llama-3.2-1b", "--gamma", "3")
    assert _sim(capsys, "--speculative-config", EAGLE3) == _sim(capsys, "--method", "eagle3", "--gamma", "3")
    mtp = _sim(capsys, "--speculative-config", '{"method": "mtp", "model": "meta-llama/Llama-3.1-8B-Instruct", '
                                                '"num_speculative_tokens": 2}')
    assert mtp == _sim(capsys, "--method", "mtp", "--gamma", "2") and mtp["method"] == "mtp"


def test_timing_free_keys_are_accepted_and_listed_as_ignored(capsys):
    cfg = json.loads(LLAMA_1B) | {"max_model_len": 4096, "revision": "main", "code_revision": "main",
                                  "disable_logprobs": True, "disable_padded_drafter_batch": False,
                                  "quantization": None}
    got = _sim(capsys, "--speculative-config", json.dumps(cfg))
    plain = _sim(capsys, "--speculative-config", LLAMA_1B)
    assert got["speculative_config_ignored"] == ["max_model_len", "revision", "code_revision", "disable_logprobs",
                                                 "disable_padded_drafter_batch"]
    assert "speculative_config_ignored" not in plain  # nothing ignored: no key (rows without a config unchanged)
    assert {k: v for k, v in got.items() if k != "speculative_config_ignored"} == plain
    ngram = _sim(capsys, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, '
                                                 '"prompt_lookup_min": 2, "prompt_lookup_max": 5}')
    assert ngram["speculative_config_ignored"] == ["prompt_lookup_min", "prompt_lookup_max"]


@pytest.mark.parametrize("cfg, named, says", [
    ({"model": "meta-llama/Llama-3.3-8B-Typo"}, "--speculative-config.model", "llama-3.2-1b"),
    ({"method": "eagle3", "model": "someone/EAGLE3-unknown"}, "--speculative-config.model", "eagle3-llama-3.1-8b"),
    ({"method": "eagle3", "model": "meta-llama/Llama-3.2-1B"}, "--speculative-config.model", "does not take"),
    ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "method": "draft_model"}, "--speculative-config.model",
     "does not take"),
    ({"method": "mtp", "model": "meta-llama/Llama-3.2-1B"}, "--speculative-config.model", "target's own"),
    ({"model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}, "--speculative-config.model", "trained for llama-3.1-70b"),
    ({"model": "./no/such/draft"}, "--speculative-config.model", "file not found"),
    ({"model": "llama-3.2-1b", "quantization": "fp8"}, "--speculative-config.quantization", "dtype"),
    ({"model": "llama-3.2-1b", "max_model_len": "4k"}, "--speculative-config.max_model_len", "4k"),
    ({"model": "llama-3.2-1b", "max_model_len": 0}, "--speculative-config.max_model_len", "1.."),
    ({"model": "llama-3.2-1b", "revision": 3}, "--speculative-config.revision", "string"),
    ({"model": "llama-3.2-1b", "disable_logprobs": 1}, "--speculative-config.disable_logprobs", "true or false"),
    ({"model": "llama-3.2-1b", "disable_by_batch_size": 1}, "--speculative-config.disable_by_batch_size", "2.."),
    ({"model": "llama-3.2-1b", "disable_by_batch_size": "8"}, "--speculative-config.disable_by_batch_size", "2.."),
    ({"model": "llama-3.2-1b", "enforce_eager": True}, "--speculative-config.enforce_eager", "unknown key"),
    ({"model": "llama-3.2-1b", "method": ["draft_model"]}, "--speculative-config.method", "unknown method"),
])
def test_what_cannot_be_read_is_one_line(capsys, cfg, named, says):
    err = _refused(capsys, "--speculative-config", json.dumps(cfg))
    assert named in err and says in err


def test_an_unmapped_repo_id_names_the_field_value_and_choices(capsys):
    err = _refused(capsys, "--speculative-config", '{"model": "meta-llama/Llama-3.3-8B-Typo"}')
    assert "meta-llama/Llama-3.3-8B-Typo" in err and "config.json" in err and "llama-3.2-1b" in err
    assert "file not found" not in err and "--draft" not in err


def test_disable_by_batch_size_is_refused_where_it_is_not_modelled(capsys):
    err = _refused(capsys, "--speculative-config", '{"model": "llama-3.2-1b", "disable_by_batch_size": 4}',
                   "--engine-profile", "vllm-v1")
    assert "disable_by_batch_size" in err and "vllm-v1" in err


# --- disable_by_batch_size --------------------------------------------------------------------------------------

def _dbs(capsys, batch: int, threshold: int | None):
    cfg = {"model": "llama-3.2-1b", "num_speculative_tokens": 3}
    if threshold is not None:
        cfg["disable_by_batch_size"] = threshold
    return _sim(capsys, "--speculative-config", json.dumps(cfg), "--batch", str(batch), "--requests", "32")


def test_speculation_is_off_from_the_threshold_on_and_on_below_it(capsys):
    """vLLM V0's rule: off when the running batch >= disable_by_batch_size. Closed loop at batch 8, equal
    lengths (every iteration holds 8): threshold 8 -> every iteration plain decoding; 9 -> the run without the key."""
    plain = _dbs(capsys, 8, None)
    off, on = _dbs(capsys, 8, 8), _dbs(capsys, 8, 9)
    assert off["speculation_off_iteration_share"] == 1.0 and off["gamma_mean"] == 0.0
    assert off["tokens_per_target_run"] == 1.0 and off["speedup_eq5"] == 1.0 and off["speedup"] < 1.0
    assert off["disable_by_batch_size"] == 8
    assert on["speculation_off_iteration_share"] == 0.0 and on["gamma_mean"] == 3.0
    strip = ("disable_by_batch_size", "speculation_off_iteration_share")
    assert {k: v for k, v in on.items() if k not in strip} == plain  # bit for bit: the rule never acts
    assert plain["speedup"] > 1.1


def test_under_load_the_rule_acts_only_on_large_batches(capsys):
    """Open loop: a light load keeps the batch small (speculating), a heavy one fills it (plain)."""
    base = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--alpha", "0.7", "--max-batch", "16",
            "--requests", "200", "--speculative-config",
            '{"model": "llama-3.2-1b", "num_speculative_tokens": 3, "disable_by_batch_size": 6}']
    light = _sim(capsys, "--rate", "2", base=base)
    heavy = _sim(capsys, "--rate", "40", base=base)
    assert light["speculation_off_iteration_share"] < 0.05 < 0.9 < heavy["speculation_off_iteration_share"]
    assert light["gamma_mean"] > 2.9 and heavy["gamma_mean"] < 0.1


class _Counted:
    """A draw that records the γ each iteration asked for."""

    def __init__(self):
        self.asked = []

    def __call__(self, G, gamma=None):
        self.asked.append(G)
        return np.zeros(4, np.int64)


def test_the_wrapper_steps_and_closed_forms():
    pol = DisableByBatchSize(FixedPolicy(3), 4)
    draw = _Counted()
    assert pol.step(draw, None, 3)[1:4] == (3, 3, 3) and pol.step(draw, None, 4)[1:4] == (0, 0, 0)
    assert pol.step(draw, None, 9)[1] == 0 and draw.asked == [3, 0, 0]
    assert pol.fixed_gamma is None and not pol.batch_free and pol.max_gamma == 3 and pol.gamma == 3
    assert pol.summary()["speculation_off_iteration_share"] == pytest.approx(2 / 3)
    # the closed form mixes the speculating request-steps with the plain ones (one token at one target pass)
    used = np.array([3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])  # 13 + 9 request-steps
    pol.request_steps_off = 20
    got = pol.baseline(0.7, 0.1, used)
    want = averaged_baseline(0.7, 0.1, used)
    assert got.eq1 == pytest.approx(want.eq1) and got.eq5 == pytest.approx(want.eq5)
    idle = DisableByBatchSize(FixedPolicy(3), 9, live=False)  # a batch cap below the threshold: never acts
    assert idle.fixed_gamma == 3 and idle.batch_free and idle.step(draw, None, 64)[1] == 3


# --- sweep, plan, choose-draft ----------------------------------------------------------------------------------

def test_a_sweep_spec_holding_the_pasted_json(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(textwrap.dedent(f"""
        [fixed]
        hardware = "h100-sxm"
        target = "llama-3.1-8b"
        alpha = 0.7
        requests = 8
        [grid]
        speculative_config = ['{LLAMA_1B}', '{EAGLE3}',
            '{{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3, "max_model_len": 8192}}']
        [run]
        plots = false
    """))
    code, _, err = run(capsys, "sweep", spec, "--out", tmp_path / "out", "--workers", "1", "--json")
    assert code == 0, err
    df = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert list(df["draft"]) == ["llama-3.2-1b", "eagle3-llama-3.1-8b", "llama-3.2-1b"]
    assert list(df["method"]) == ["draft_model", "eagle3", "draft_model"]
    assert df["speedup"].iloc[0] == df["speedup"].iloc[2] and (df["speedup"] > 1).all()
    assert json.loads(df["speculative_config_ignored"].iloc[2]) == ["max_model_len"]  # lists are JSON in a row


PLAN = """
name = "pasted"
[fixed]
target = "llama-3.1-8b"
speculative_config = '{"model": "MODEL", "max_model_len": 4096}'
alpha = 0.7
[[option]]
name = "1xH100"
hardware = "h100-sxm"
[search]
rates = [2]
gammas = [3]
max_replicas = 4
duration_s = 5
min_requests = 10
[slo]
tpot_p90_s = 0.05
"""


def test_a_plan_with_the_pasted_json(tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.replace("MODEL", "meta-llama/Llama-3.2-1B-Instruct"))
    code, out, err = run(capsys, "plan", plan, "--out", tmp_path / "out", "--workers", "1", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert len(rows) == 1 and rows[0]["rate"] == 2
    bad = tmp_path / "bad.toml"
    bad.write_text(PLAN.replace("MODEL", "meta-llama/Llama-3.2-1B-Typo"))
    code, out, err = run(capsys, "plan", bad, "--out", tmp_path / "out2", "--workers", "1", "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "speculative" in err and "model" in err and "Llama-3.2-1B-Typo" in err


def test_choose_draft_takes_the_pasted_config_with_its_gamma(capsys):
    code, out, err = run(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                         "--speculative-config", json.dumps(json.loads(EAGLE3) | {"alpha": 0.7, "max_model_len": 2048,
                                                                                  "disable_by_batch_size": 32}),
                         "--speculative-config", json.dumps(json.loads(LLAMA_1B) | {"alpha": 0.7}),
                         "--batch", "1,8", "--gamma-max", "4", "--requests", "8", "--json")
    assert code == 0, err
    rows = {d["draft"]: d for d in json.loads(out)["drafts"]}
    e3, d1 = rows["eagle3-llama-3.1-8b"], rows["llama-3.2-1b"]
    assert e3["method"] == "eagle3" and d1["method"] == "draft_model" and e3["configured_gamma"] == 3
    for row in (e3, d1):
        for p in row["points"]:  # the configured γ's own speedup, from the same search
            assert p["speedup_at_configured_gamma"] == p["speedup_by_gamma"][2]
        assert row["mean_speedup_at_configured_gamma"] == pytest.approx(
            np.mean([p["speedup_by_gamma"][2] for p in row["points"]]))
    assert e3["speculative_config_ignored"] == ["max_model_len", "disable_by_batch_size"]
    assert "speculative_config_ignored" not in d1


def test_choose_draft_refuses_a_configured_gamma_beyond_its_search(capsys):
    code, out, err = run(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                         "--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 6, '
                                                 '"alpha": 0.7}', "--gamma-max", "4", "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "num_speculative_tokens" in err and "--gamma-max" in err


# --- property: any JSON object reads or is refused in one ConfigError -------------------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from specsim.errors import ConfigError  # noqa: E402
from specsim.methods.spec_config import KEYS, read  # noqa: E402

_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True),
                    st.sampled_from(["meta-llama/Llama-3.2-1B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                     "someone/x", "llama-3.2-1b", "eagle3-llama-3.1-8b", "mtp", "eagle3", "ngram",
                                     "deepseek_mtp", "./x.toml", "a\x00b", "", " "]),
                    st.text(max_size=12), st.lists(st.integers(0, 3), max_size=3))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS + ("alpha", "enforce_eager")), _VALUES, max_size=6),
       st.sampled_from([None, "llama-3.1-8b", "llama-3.1-70b"]))
def test_any_json_object_reads_or_is_one_config_error(data, target):
    try:
        p = read(data, target=target)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert p.fields["method"] in ("draft_model", "eagle", "eagle3", "mtp", "medusa", "ngram", "suffix")
    assert set(p.ignored) <= set(KEYS) and "quantization" not in p.ignored
    assert p.disable_by_batch_size is None or p.disable_by_batch_size >= 2
    assert "enforce_eager" not in data and "alpha" not in data  # keys outside vLLM's are never taken
