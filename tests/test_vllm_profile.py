"""The vllm-v1 engine profile: vLLM V1's scheduler physics (token budget, chunked prefill, KV blocks, preemption)
and its agreement with the batch-1 engine where the two must agree."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.engine.acceptance import Acceptance
from specsim.cost.ragged import RooflinePricer, StepTable
from specsim.engine.engine_profiles.vllm_scheduler import VllmV1Config, VllmV1Engine
from specsim.errors import ConfigError, DoesNotFitError
from specsim.simulate import make_config, run
from specsim.engine.workload import Workload


class _Linear:
    """A step costs 10 ms + 1 ms per scheduled token (easy to reason about)."""

    def price(self, new, ctx, logits=None):
        return 0.01 + 1e-3 * float(np.sum(new)), 0.0, 0.0


def _wl(prompts, outputs, concurrency=None, arrivals=None):
    n = len(prompts)
    arr = np.full(n, np.nan) if arrivals is None else np.asarray(arrivals, float)
    return Workload("closed" if arrivals is None else "poisson", arr, np.asarray(prompts, np.int64),
                    np.asarray(outputs, np.int64), 256, concurrency if arrivals is None else None)


def _engine(wl, k=0, alpha=0.8, **cfg):
    acc = Acceptance(alpha=alpha, seed=3) if k else None
    return VllmV1Engine(wl, VllmV1Config(**cfg), _Linear(), _Linear() if k else None, acc, k=k,
                        blocks=cfg.get("num_gpu_blocks"))


@pytest.mark.parametrize("k", [0, 3])
def test_token_budget_never_exceeded(k):
    wl = _wl([300, 17, 90, 5, 250, 64, 33, 128], [20, 40, 7, 33, 12, 25, 9, 50], concurrency=5)
    e = _engine(wl, k=k, max_num_batched_tokens=96)
    e.run()
    tokens = np.array([s[0] for s in e.scheduled])
    assert tokens.max() <= 96
    assert (tokens == 96).any()  # the budget binds somewhere, so the check above could fail
    assert np.all(np.isfinite(e.finish))


def test_long_prefill_is_chunked_across_steps():
    wl = _wl([100], [4], concurrency=1)
    e = _engine(wl, max_num_batched_tokens=32)
    e.run()
    assert [s[0] for s in e.scheduled[:4]] == [32, 32, 32, 4]  # 100 prompt tokens under a 32-token budget
    assert e.first[0] == pytest.approx(sum(e.steps[j][1] for j in range(4)))  # first token at the 4th step's end


def test_chunked_prefill_mixes_with_decodes():
    wl = _wl([8, 200], [30, 5], arrivals=[0.0, 0.05])
    e = _engine(wl, max_num_batched_tokens=64)
    e.run()
    mixed = [s for s in e.scheduled if s[1] == 2 and 0 < s[2] < s[0]]
    assert mixed and all(s[0] <= 64 for s in mixed)  # one decode token + a prefill chunk in one step


def test_preemption_exactly_when_the_pool_runs_out():
    # two requests of 16 + 48 tokens: each holds ceil(63 / 16) = 4 blocks at its last step
    wl = _wl([16, 16], [48, 48], concurrency=2)
    enough = _engine(wl, block_size=16, num_gpu_blocks=8)
    enough.run()
    assert enough.preemptions == 0
    short = _engine(wl, block_size=16, num_gpu_blocks=7)
    rec = short.run()
    assert short.preemptions >= 1
    assert np.all(np.isfinite(rec.finish_s))  # the preempted request recomputes and finishes
    with pytest.raises(DoesNotFitError):
        _engine(wl, block_size=16, num_gpu_blocks=3)  # a single request can never fit


def test_preemption_by_recompute_costs_a_second_prefill():
    wl = _wl([16, 16], [48, 48], concurrency=2)
    short = _engine(wl, block_size=16, num_gpu_blocks=7)
    short.run()
    prefill = sum(s[2] for s in short.scheduled)
    assert prefill > 32  # both prompts once, plus the victim's prompt + output again


def _batch1(profile, **kw):
    return run(make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.75,
                           gamma=3, batch=1, requests=6, prompt_len=64, output_len=40, seed=5,
                           engine="simpy" if profile == "specsim" else None, engine_profile=profile, **kw))


def test_concurrency_one_matches_the_batch1_engine():
    """Same acceptance draws, same steps and (decode pricing alike up to the draft's first pass covering k + 1
    tokens, which a memory-bound GPU pays for like one) the same TPOT; TTFT differs by the k − 1 one-token draft
    passes vLLM runs in the prefill step."""
    a, b = _batch1("specsim"), _batch1("vllm-v1")
    assert a["tokens_per_target_run"] == b["tokens_per_target_run"]
    assert a["tokens_per_run_hist"] == b["tokens_per_run_hist"]
    assert b["target_runs"] == a["target_runs"] + 6  # vLLM counts the prefill step of each request too
    assert b["tpot_p50_s"] == pytest.approx(a["tpot_p50_s"], rel=2e-3)
    assert b["baseline_tpot_p50_s"] == pytest.approx(a["baseline_tpot_p50_s"], rel=1e-9)
    assert b["ttft_p50_s"] > a["ttft_p50_s"]


def test_vllm_profile_refuses_what_it_cannot_model():
    with pytest.raises(ConfigError, match="policy"):
        _batch1("vllm-v1", policy="heuristic")
    with pytest.raises(ConfigError, match="replicas"):
        _batch1("vllm-v1", replicas=2)
    with pytest.raises(ConfigError, match="vllm-v1"):
        make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7,
                    max_num_seqs=8)  # a vLLM knob without the vLLM profile


def test_roofline_pricer_equals_the_uniform_pass():
    from specsim import profiles as prof
    from specsim.cost.roofline import CostModel

    cm = CostModel(prof.model("llama-3.1-8b"), prof.hardware("h100-sxm"), prof.stack("pytorch-eager"))
    t, b, f = RooflinePricer(cm).price(np.full(8, 4), np.full(8, 300))
    p = cm.pass_cost(8, 4, 300)
    assert (t, b, f) == pytest.approx((p.time_s, p.bytes, p.flops), rel=1e-12)
    t2, *_ = RooflinePricer(cm).price(np.array([1, 1, 1, 1, 1, 1, 1, 25]), np.full(8, 300))
    assert t2 > cm.pass_cost(8, 1, 300).time_s  # a prefill chunk in the step costs more than the decodes alone


def test_step_table_interpolates_and_checks(tmp_path):
    st = StepTable([1, 4, 16], [0.2, 0.25, 0.5])
    assert st.time_at(2.5) == pytest.approx(0.225)
    assert st.time_at(32) == pytest.approx(0.5 + 16 * 0.25 / 12)  # linear past the last knot
    p = st.write_csv(tmp_path / "t.csv")
    assert StepTable.read_csv(p).time_at(10) == pytest.approx(st.time_at(10))
    (tmp_path / "bad.csv").write_text("tokens,time_s\n4,0.2\n2,0.3\n")
    with pytest.raises(ConfigError, match="strictly increasing"):
        StepTable.read_csv(tmp_path / "bad.csv")
    (tmp_path / "nan.csv").write_text("tokens,time_s\n1,nan\n2,0.3\n")
    with pytest.raises(ConfigError, match="not a number"):
        StepTable.read_csv(tmp_path / "nan.csv")


class _Recording(_Linear):
    """_Linear that keeps what each call was given."""

    def __init__(self):
        self.calls = []

    def price(self, new, ctx, logits=None):
        self.calls.append((np.array(new), None if logits is None else np.array(logits)))
        return super().price(new, ctx)


@pytest.mark.parametrize("k", [0, 3])
def test_the_target_is_told_which_positions_need_logits(k):
    """One per scheduled request, plus every draft a request verifies (vLLM's logits_indices); the draft's passes
    are told nothing (one logit per request)."""
    wl = _wl([40, 9, 70, 5], [12, 20, 6, 15], concurrency=3)
    target, draft = _Recording(), (_Recording() if k else None)
    e = VllmV1Engine(wl, VllmV1Config(max_num_batched_tokens=32), target, draft,
                     Acceptance(alpha=0.7, seed=5) if k else None, k=k)
    e.run()
    verified = np.zeros(len(e.steps), np.int64)
    for rs in e.rs:
        verified[rs.step] += rs.gamma
    assert len(target.calls) == len(e.steps)
    for (new, pos), (tokens, requests, _), d in zip(target.calls, e.scheduled, verified):
        assert new.sum() == tokens and pos.size == requests and pos.sum() == requests + d and (pos <= new).all()
    assert (verified > 0).any() == bool(k)
    assert draft is None or all(pos is None for _, pos in draft.calls)


def test_the_draft_runs_every_step_over_every_scheduled_request():
    """vLLM pads the drafter's batch to all of the step's requests and runs it whenever the input fits
    (gpu_model_runner.py; propose's batch_size = common_attn_metadata.batch_size()): a step of prefill chunks that
    finish no prefill still pays one draft pass over its tokens and k - 1 one-token passes per request."""
    k = 3
    wl = _wl([100, 6], [5, 5], concurrency=2)  # 100 tokens in chunks of 32: three steps finish no prefill
    target, draft = _Recording(), _Recording()
    e = VllmV1Engine(wl, VllmV1Config(max_num_batched_tokens=32), target, draft, Acceptance(alpha=0.7, seed=5), k=k)
    e.run()
    assert len(draft.calls) == k * len(e.steps)  # every step: the first pass and k - 1 one-token passes
    for j, (tokens, requests, _) in enumerate(e.scheduled):
        first, *rest = draft.calls[k * j:k * (j + 1)]
        assert first[0].sum() == tokens
        assert all(new.size == requests and (new == 1).all() for new, _ in rest)
    assert e.scheduled[0] == (32, 1, 32)  # step 0: a chunk of request 0 alone, no token sampled, drafts paid


@pytest.mark.parametrize("slots", [0, 1])
def test_the_draft_models_first_pass_takes_one_new_slot_per_request(slots):
    """vLLM 0.32's draft model does not shift its inputs (llm_base_proposer.py set_inputs_first_pass,
    extend_all_queries_by_N): its first pass covers the scheduled tokens plus one slot per request for the sampled
    token; a proposer on the target's hidden states (EAGLE, MTP) shifts and adds none."""
    k = 3
    wl = _wl([40, 9, 70], [8, 12, 6], concurrency=3)
    target, draft = _Recording(), _Recording()
    e = VllmV1Engine(wl, VllmV1Config(max_num_batched_tokens=32), target, draft, Acceptance(alpha=0.7, seed=5),
                     k=k, draft_slots=slots)
    e.run()
    for j, (tokens, requests, _) in enumerate(e.scheduled):
        first, *rest = draft.calls[k * j:k * (j + 1)]
        assert first[0].sum() == tokens + slots * requests and first[0].size == requests
        assert all((new == 1).all() for new, _ in rest)
    assert [t[0].sum() for t in target.calls] == [s[0] for s in e.scheduled]  # the target sees no new slot


def test_the_profile_takes_the_new_slots_from_the_method():
    from specsim import methods

    assert methods.get("draft_model").draft_input_slots == 1
    assert all(methods.get(m).draft_input_slots == 0 for m in ("eagle", "eagle3", "mtp", "medusa", "ngram"))
