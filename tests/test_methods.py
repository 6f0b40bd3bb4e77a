"""Speculation methods as strategies (specsim.methods): what one step's proposals cost, per method, by hand."""

import re
import tomllib

import numpy as np
import pytest

from conftest import cli_capsys as run
from specsim import methods
from specsim.config import SimConfig
from specsim.cost.roofline import CostModel
from specsim.cost.steptime import StepCosts
from specsim.methods.heads import HEAD_DIR, head
from specsim.setup.deployment import Deployment
from specsim.simulate import make_config, run as simulate_run

H100 = dict(hardware="h100-sxm", target="llama-3.1-8b")
MEDUSA = """name = "medusa-test"
method = "medusa"  # test
target = "llama-3.1-8b"  # test
d_model = 4096  # test
lm_head_vocab = 128256  # test
medusa_heads = 4  # test
"""


def _dep(method, draft=None, **kw):
    cfg = make_config(**H100, alpha=0.7, method=method, draft=draft, **kw)
    return Deployment.from_config(cfg)


def test_eagle3_head_pass_bytes_by_hand():
    """batch 1, one position, context 0: one pass = one Llama layer (q/k/v on 2·d inputs) + a 32k LM head, bf16,
    plus the one new position's K and V of the head's single layer; the fc 3d -> d over the target's states runs
    once per step (vLLM's combine_hidden_states), so a step of γ passes reads it once."""
    _, cm = _dep("eagle3").cost_models
    d, q, kv, ff = 4096, 4096, 1024, 14336
    layer = 2 * d * q + 2 * d * kv + 3 * d * ff + 2 * d  # attention (q, o, k, v) + gated FFN + two norms
    per_pass = layer + d * (q + 2 * kv) + 32000 * d
    fc = 3 * d * d
    assert cm.pass_cost(1, 1, 0).bytes == 2 * per_pass + 2 * 1 * kv * 2
    assert cm.step_once_cost(1)[1] == 2 * fc
    assert cm.own_weight_bytes == 2 * (per_pass + fc)  # the embedding is the target's
    _, ideal = _dep("eagle3", stack="ideal").cost_models  # the idealized roofline: memory-bound at batch 1
    assert ideal.pass_time_s(1, 1, 0) == pytest.approx((2 * per_pass + 4 * kv) / ideal.hardware.bandwidth_bytes_s)
    costs = StepCosts(*_dep("eagle3", stack="ideal").cost_models, method=methods.get("eagle3"), gamma=3)
    target, head = costs.target, costs.draft
    t, b, _ = costs.spec_step(1, 3, 0.0)
    assert b == pytest.approx(target.pass_cost(1, 4, 0).bytes + 3 * head.pass_cost(1, 1, 1).bytes + 2 * fc)
    vt, vb, _ = costs.spec_step_vec(np.array([3]), np.array([0.0]), np.array([0.0]))
    assert (vt[0], vb[0]) == pytest.approx((t, b), rel=1e-12)
    # eq. (5)'s c carries the step's fc share: (3 passes + the fc) / 3 per proposal
    c = costs.derived_c(0)
    want = (head.pass_time_s(1, 1, 0) + head.step_once_cost(1)[0] / 3) / target.pass_time_s(1, 1, 0)
    assert c == pytest.approx(want, rel=1e-12)


def test_mtp_projects_on_every_pass():
    """MTP's projection reads cat(embedding, state) each pass (DeepSeek-V3 §2.2): nothing is paid once per step."""
    _, cm = _dep("mtp").cost_models
    assert cm.step_once_params == 0 and cm.step_once_cost(4) == (0.0, 0.0, 0.0)


def test_mtp_head_reads_the_shared_lm_head_but_does_not_store_it():
    _, cm = _dep("mtp").cost_models
    d, q, kv, ff, V = 4096, 4096, 1024, 14336, 128256
    layer = 2 * d * q + 2 * d * kv + 3 * d * ff + 2 * d
    assert cm.pass_cost(1, 1, 0).bytes == 2 * (layer + 2 * d * d + V * d) + 2 * kv * 2
    assert cm.own_weight_bytes == 2 * (layer + 2 * d * d)


def test_draft_model_method_is_todays_path_bit_for_bit():
    dep = Deployment.resolve("h100-sxm", "llama-3.1-8b", "llama-3.2-1b")
    old, new = StepCosts(*dep.cost_models), StepCosts(*dep.cost_models, method=methods.get("draft_model"), gamma=3)
    for B, G, L in ((1, 3, 130.0), (8, 4, 517.5), (32, 1, 2000.25)):
        assert old.spec_step(B, G, L) == new.spec_step(B, G, L)
    G, L = np.array([1, 3, 3, 5]), np.array([128.0, 129.0, 400.0, 1000.0])
    for a, b in zip(old.spec_step_vec(G, L, np.zeros(4)), new.spec_step_vec(G, L, np.zeros(4))):
        assert (a == b).all()
    base = dict(**H100, draft="llama-3.2-1b", alpha=0.7, gamma=3, requests=16)
    assert simulate_run(make_config(**base)) == simulate_run(make_config(**base, method="draft_model"))


def test_medusa_costs_one_pass_whatever_gamma(tmp_path):
    p = tmp_path / "medusa-test.toml"
    p.write_text(MEDUSA)
    dep = _dep("medusa", draft=str(p), gamma=4)
    target, cm = dep.cost_models
    costs = StepCosts(target, cm, method=methods.get("medusa"), gamma=4)
    draft_s = [costs.spec_step(1, g, 300.0)[0] - target.pass_time_s(1, g + 1, 300) for g in (1, 2, 3, 4)]
    assert draft_s == pytest.approx([draft_s[0]] * 4, rel=1e-9)
    d, V = 4096, 128256
    assert cm.pass_cost(1, 1, 0).bytes == cm.pass_cost(1, 1, 5000).bytes == 2 * 4 * (d * d + d + d * V)
    assert costs.derived_c(128) == pytest.approx(cm.pass_time_s(1, 1, 128) / target.pass_time_s(1, 1, 128) / 4)
    r = simulate_run(make_config(**H100, alpha=0.7, gamma=4, method="medusa", draft=str(p), requests=8))
    assert r["method"] == "medusa" and r["speedup"] > 1
    with pytest.raises(Exception, match="4 heads"):
        simulate_run(make_config(**H100, alpha=0.7, gamma=5, method="medusa", draft=str(p), requests=8))


def test_ngram_has_no_accelerator_time_and_its_host_cost_shows():
    target, cm = _dep("ngram").cost_models
    one = cm.pass_cost(8, 1, 1000)
    assert (one.bytes, one.flops, one.memory_time_s, one.compute_time_s) == (0.0, 0.0, 0.0, 0.0)
    assert one.time_s == pytest.approx(8 * head("ngram").host_s_per_request)
    costs = StepCosts(target, cm, method=methods.get("ngram"), gamma=3)
    t, b, f = costs.spec_step(8, 3, 500.0)
    verify = target.pass_cost(8, 4, 500)
    assert b == pytest.approx(verify.bytes) and f == pytest.approx(verify.flops)
    assert t == pytest.approx(verify.time_s + 8 * 20e-6, rel=1e-6)
    r = simulate_run(make_config(**H100, alpha=0.6, gamma=3, method="ngram", requests=8))
    assert r["method_host_s_per_request"] == 20e-6
    assert r["memory_weights_gb"] == pytest.approx(target.model.weight_bytes / 1e9)  # no draft weights


def test_a_config_without_a_model_picks_the_targets_shipped_head():
    for target in ("llama-3.1-8b", "llama-3.1-70b"):
        for m in ("eagle3", "mtp"):
            cfg = SimConfig(hardware="h100-sxm", target=target, method=m, alpha=0.7)
            assert cfg.deployment.draft == f"{m}-{target}"
            h = head(cfg.deployment.draft)
            assert (h.method, h.target) == (m, target)


def test_a_target_without_a_shipped_head_is_refused_naming_what_to_pass(capsys):
    code, _, err = run(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.2-1b", "--alpha", "0.7",
                       "--method", "eagle3", "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no eagle3 head ships for llama-3.2-1b" in err and '"model"' in err and "eagle3-llama-3.1-8b" in err


def test_draft_tp_changes_the_drafts_cost_and_memory():
    kw = dict(hardware="h100-sxm", target="llama-3.1-70b", draft="llama-3.2-1b", tp=4, alpha=0.7)
    one = Deployment.from_config(make_config(**kw, draft_tp=1))
    four = Deployment.from_config(make_config(**kw))
    assert one.cost_models[1].tp == 1 and four.cost_models[1].tp == 4
    assert one.cost_models[1].pass_time_s(1, 1, 128) > four.cost_models[1].pass_time_s(1, 1, 128)
    t_w, d_w = one.target.weight_bytes, one.draft.weight_bytes
    assert one.memory(5)[0].weights == pytest.approx(t_w / 4 + d_w)
    assert four.memory(5)[0].weights == (t_w + d_w) / 4  # one TP degree: exactly as before
    kv = CostModel(one.draft, one.hardware, tp=1).kv_bytes_per_token_per_chip
    assert one.memory(5)[0].kv_per_token == pytest.approx(four.cost_models[0].kv_bytes_per_token_per_chip + kv)


def test_a_head_named_as_the_draft_says_its_method():
    cfg = make_config(**H100, draft="eagle3-llama-3.1-8b", alpha=0.7)
    assert cfg.speculation.method == "eagle3"
    with pytest.raises(Exception, match="serves method eagle3"):
        Deployment.from_config(make_config(**H100, draft="eagle3-llama-3.1-8b", method="mtp", alpha=0.7))


def test_every_number_in_a_head_profile_has_a_source_comment():
    files = sorted(HEAD_DIR.glob("*.toml"))
    assert {f.stem for f in files} >= {"eagle3-llama-3.1-8b", "eagle3-llama-3.1-70b", "mtp-llama-3.1-8b",
                                       "mtp-llama-3.1-70b", "ngram", "suffix"}
    for f in files:
        tomllib.loads(f.read_text())
        head(f.stem)  # loads and validates
        for line in f.read_text().splitlines():
            named = re.match(r"^\s*(name|description|method|target)\s*=", line)  # strings, not figures
            if re.match(r"^\s*[a-z_]+\s*=", line) and not named:
                assert "#" in line.split("=", 1)[1], f"{f.name}: {line!r} has no source comment"


def test_methods_beyond_draft_model_stay_with_what_prices_them(capsys):
    for extra in (["--draft-catchup"], ["--engine-profile", "vllm-v1"], ["--fixed-c", "0.1"]):
        code, _, err = run(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--alpha",
                           "0.7", "--method", "eagle3", *extra, "--json")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--method" in err
