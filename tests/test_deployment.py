"""`specsim.setup.deployment.Deployment`: profiles resolved once, one stack rule for every command, one c."""

from __future__ import annotations

import json

import pytest

from specsim import profiles as prof
from specsim.cli import main
from specsim.errors import ConfigError
from specsim.setup.deployment import Deployment, resolve_stack
from specsim.simulate import make_config, run
from specsim.sweep.grid import digest


def test_one_stack_rule():
    hw = prof.hardware("h100-sxm")
    assert resolve_stack(hw, None) == resolve_stack(hw, "default") == prof.stack("pytorch-eager")
    assert resolve_stack(hw, "ideal") == prof.IDEAL_STACK
    assert resolve_stack(hw.model_copy(update={"default_stack": None}), None) == prof.IDEAL_STACK
    assert resolve_stack(hw, "cuda-graphs").name == "cuda-graphs"


def test_every_command_takes_the_hardwares_default_stack(capsys):
    args = ["--hardware", "tpu-v4"]
    assert main(["roofline", *args, "--model", "t5-v1_1-xxl", "--positions", "1", "--json"]) == 0
    roof = json.loads(capsys.readouterr().out)
    assert main(["choose-draft", *args, "--target", "t5-v1_1-xxl", "--draft", "t5-v1_1-small:0.7", "--batch", "1",
                 "--gamma-max", "2", "--requests", "4", "--output-len", "8", "--json"]) == 0
    choose = json.loads(capsys.readouterr().out)
    assert roof["stack"] == choose["stack"] == "t5x-tpu" and roof["mode"] == "calibrated"
    from specsim.studies.compare import default_cases, evaluate

    assert evaluate(default_cases()[0], simulate=False)["stack"] == "t5x-tpu"


def test_resolved_once_with_cost_models_peaks_memory_and_c():
    dep = Deployment.resolve("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", tp=2)
    t, d = dep.cost_models
    assert (t.tp, d.tp, dep.draft_tp_degree) == (2, 2, 2)  # the draft shares the target's degree by default
    assert dep.peak_bytes_s == dep.hardware.bandwidth_bytes_s and dep.peak_flops == dep.hardware.peak_flops("bf16")
    spec, base = dep.memory(5)
    assert spec.weights > base.weights > 0
    r = run(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", tp=2, alpha=0.7,
                        requests=2, output_len=4, prompt_len=64))
    assert r["c"] == dep.c(64)  # simulate's c is the deployment's, bit for bit
    assert 0 < dep.c(64) < 1 and dep.c(64, batch=64) != dep.c(64)  # c depends on the batch (c_at_batch)


def test_c_of_an_encoder_decoder_is_the_first_decoder_step():
    dep = Deployment.resolve("tpu-v4", "t5-v1_1-xxl", "t5-v1_1-small")
    t, d = dep.cost_models
    assert dep.c(128) == d.pass_time_s(1, 1, 0, 128) / t.pass_time_s(1, 1, 0, 128)


def test_hashes_are_the_sweeps():
    dep = Deployment.resolve("h100-sxm", "llama-3.1-8b", "llama-3.2-1b", stack="cuda-graphs")
    assert dep.hashes["hardware"] == digest(("hardware", "h100-sxm"))
    assert dep.hashes["stack"] == digest(("stack", "cuda-graphs"))
    assert dep.hashes["target"] == digest(("model", "llama-3.1-8b"))
    assert Deployment.resolve("h100-sxm", "llama-3.1-8b").hashes["stack"] == digest(("default-stack", "h100-sxm"))


def test_unknown_names_are_refused_by_role():
    with pytest.raises(ConfigError, match="unknown draft profile") as e:
        Deployment.resolve("h100-sxm", "llama-3.1-8b", "llama-9000")
    assert e.value.field == "draft" and "llama-3.2-1b" in e.value.allowed
    with pytest.raises(ConfigError, match="must both be decoder-only or both encoder-decoder"):
        _ = Deployment.resolve("h100-sxm", "llama-3.1-8b", "t5-v1_1-small").cost_models
