"""The executor's parts: sampling adjustments, model sources, decoders' bookkeeping, trace recording, timing, CLI.

Everything runs on tiny random-init Llama pairs built here (vocab 32, hidden 32, 2 layers), so no weights are
needed. Exactness of the output distribution is in test_exactness.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specsim.errors import ConfigError
from specsim.executor.measure import compare_with_hf, end_to_end, hf_assisted, pass_times, sampling_overhead
from specsim.executor.record import load_prompts, record_sequence, record_trace, replay_accepts
from specsim.executor.sampling import SamplingConfig, adjust, overlap, residual
from specsim.executor.sources import (
    BigramDraft,
    HFSource,
    PromptLookupDraft,
    config_from_profile,
    load_source,
    random_source,
)
from specsim.executor.speculative import PlainDecoder, SpeculativeDecoder
from specsim.profiles import ModelProfile
from specsim.traces.format import Trace

from tiny_models import tiny_pair as _tiny_pair  # noqa: E402  (tests/ is on sys.path)

GREEDY = SamplingConfig(temperature=0.0)
V = 32


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):  # conftest's fixture, applied to every test here
    yield


def tiny_pair(seed: int = 0, noise: float = 0.2, scale: float = 16.0):
    return _tiny_pair(seed, noise, scale, vocab=V)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


# --- sampling -----------------------------------------------------------------------------------------------

def test_adjust_temperature_topk_topp():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 3.0]])
    g = adjust(logits, GREEDY)
    assert g.tolist() == [[0, 0, 0, 0, 1]]
    p1 = adjust(logits, SamplingConfig(1.0))
    assert torch.allclose(p1, logits.softmax(-1))
    p_hot = adjust(logits, SamplingConfig(0.5))
    assert torch.allclose(p_hot, (logits / 0.5).softmax(-1))
    k2 = adjust(logits, SamplingConfig(1.0, top_k=2))
    assert (k2 > 0).tolist() == [[True, False, False, False, True]]
    assert k2.sum().item() == pytest.approx(1.0)
    # top-p: sorted probs ≈ .64 .24 .09 ...; p=0.7 keeps the two tokens whose mass reaches 0.7
    tp = adjust(logits, SamplingConfig(1.0, top_p=0.7))
    assert (tp > 0).tolist() == [[True, False, False, False, True]]
    assert adjust(logits, SamplingConfig(1.0, top_p=0.5)).tolist()[0][4] == pytest.approx(1.0)


def test_sampling_config_rejects_bad_values():
    with pytest.raises(ConfigError):
        SamplingConfig(temperature=-1)
    with pytest.raises(ConfigError):
        SamplingConfig(top_k=0)
    with pytest.raises(ConfigError):
        SamplingConfig(top_p=1.5)


def test_overlap_and_residual_match_the_papers_example():
    p = torch.tensor([0.50, 0.30, 0.15, 0.05])
    q = torch.tensor([0.30, 0.50, 0.10, 0.10])
    assert overlap(p, q).item() == pytest.approx(0.75)
    assert residual(p, q).tolist() == pytest.approx([0.8, 0.0, 0.2, 0.0])
    # lenience l: a token is kept with prob min(1, p/(l q)); the acceptance mass is Σ min(q, p/l)
    assert overlap(p, q, 0.5).item() == pytest.approx(0.3 + 0.5 + 0.1 + 0.1)
    assert residual(p, q, 0.5).tolist() == pytest.approx(
        (np.maximum(0, p.numpy() - 0.5 * q.numpy()) / np.maximum(0, p.numpy() - 0.5 * q.numpy()).sum()).tolist())


# --- sources --------------------------------------------------------------------------------------------------

def test_hf_source_cache_crop_reproduces_full_pass(pair):
    target, _ = pair
    seq = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    with torch.inference_mode():
        full = target.forward(seq, target.new_state(), keep=len(seq))
        st = target.new_state()
        target.forward(seq[:3], st, keep=1)
        target.forward(torch.tensor([7, 7, 7]), st, keep=3)   # a rejected draft
        target.crop(st, 3)
        assert target.length(st) == 3
        inc = target.forward(seq[3:], st, keep=5)
    assert torch.allclose(inc, full[3:], atol=1e-5)


def test_random_source_from_profile_has_the_profiles_shapes():
    prof = ModelProfile(name="tiny-llama", n_layers=3, d_model=48, d_ff=96, n_heads=4, n_kv_heads=2, head_dim=12,
                        vocab_size=40)
    src = random_source(prof, layers=2, dtype="fp32", seed=1)
    assert src.vocab_size == 40 and src.model.config.num_hidden_layers == 2
    assert src.describe()["params"] == sum(p.numel() for p in src.model.parameters())
    # bit-identical for the same seed, different for another
    again = random_source(prof, layers=2, dtype="fp32", seed=1)
    other = random_source(prof, layers=2, dtype="fp32", seed=2)
    def w(s):
        return s.model.model.layers[0].mlp.up_proj.weight

    assert torch.equal(w(src), w(again)) and not torch.equal(w(src), w(other))
    def n_params(s):
        return sum(p.numel() for p in s.model.parameters())

    # the profile's count leaves out the final norm (d_model weights)
    assert n_params(random_source(prof, dtype="fp32")) == prof.total_params + prof.d_model
    qwen = ModelProfile(name="tiny-qwen", n_layers=1, d_model=32, d_ff=64, n_heads=4, n_kv_heads=2, head_dim=8,
                        vocab_size=40, attention_bias=True, tied_embeddings=True)
    assert config_from_profile(qwen).model_type == "qwen2"
    assert n_params(random_source(qwen, dtype="fp32")) == qwen.total_params + qwen.d_model
    with pytest.raises(ConfigError):
        config_from_profile(ModelProfile(name="t5ish", architecture="encoder-decoder", n_layers=1,
                                         n_encoder_layers=1, d_model=8, d_ff=8, n_heads=1, n_kv_heads=1,
                                         head_dim=8, vocab_size=8))
    from specsim import profiles as prof_lib

    with pytest.raises(ConfigError, match="experts"):  # a MoE profile is refused, never built dense
        config_from_profile(prof_lib.model("mixtral-8x7b"))


def test_bigram_draft_counts_and_smoothing():
    d = BigramDraft([[1, 2, 1, 2, 1, 3]], vocab_size=5, k=0.5)
    st = d.new_state()
    q = d.forward(torch.tensor([4, 1]), st, keep=2).exp()
    # after 4: never seen -> uniform; after 1: counts 2→2, 3→1 plus k = 0.5 each over 5 tokens
    assert q[0].tolist() == pytest.approx([0.2] * 5)
    assert q[1].tolist() == pytest.approx([0.5 / 5.5, 0.5 / 5.5, 2.5 / 5.5, 1.5 / 5.5, 0.5 / 5.5])
    d.crop(st, 1)
    assert d.length(st) == 1


def test_prompt_lookup_proposes_the_continuation():
    d = PromptLookupDraft(vocab_size=10, max_n=3)
    ctx = np.array([5, 6, 7, 8, 1, 5, 6, 7])
    assert d.propose(ctx) == 8              # "5 6 7" occurred before, followed by 8
    assert d.propose(np.array([1, 2, 3])) == -1
    st = d.new_state()
    q = d.forward(torch.tensor(ctx), st, keep=1)[0].softmax(-1)
    assert q[8].item() == 1.0
    smooth = PromptLookupDraft(vocab_size=10, eps=0.1)
    q2 = smooth.forward(torch.tensor(ctx), smooth.new_state(), keep=1)[0].exp()
    assert q2[8].item() == pytest.approx(0.91) and q2.sum().item() == pytest.approx(1.0)


def test_load_source_forms(tmp_path, pair):
    target, _ = pair
    target.model.save_pretrained(tmp_path / "tiny")
    src = load_source(str(tmp_path / "tiny"))
    assert isinstance(src, HFSource) and src.vocab_size == V
    assert isinstance(load_source("bigram:k=0.1", vocab_size=V, corpus=[[1, 2, 3]]), BigramDraft)
    pl = load_source("prompt-lookup:n=2:eps=0.05", vocab_size=V)
    assert pl.max_n == 2 and pl.eps == 0.05
    for bad in ("nonexistent-dir", "bigram:k=x", "bigram:q=1", "profile:"):
        with pytest.raises(ConfigError):
            load_source(bad, vocab_size=V)
    with pytest.raises(ConfigError):
        load_source("bigram")  # no target vocabulary to score over


# --- decoders -------------------------------------------------------------------------------------------------

def test_step_records_are_consistent(pair):
    target, draft = pair
    res = SpeculativeDecoder(target, draft, gamma=4, sampling=SamplingConfig(1.0)).generate([1, 2, 3], 25, seed=3)
    assert len(res.tokens) == 25
    for s in res.steps:
        assert 0 <= s.accepted <= s.gamma <= 4 and s.emitted == s.accepted + 1
        assert min(s.draft_time_s, s.verify_time_s, s.overhead_time_s) >= 0
    assert sum(s.emitted for s in res.steps) == 25      # clip_gamma: the last step never overshoots
    assert res.steps[-1].gamma <= 4
    assert 1 <= res.tokens_per_step <= 5 and res.summary()["new_tokens"] == 25


def test_same_seed_same_output_and_seeds_differ(pair):
    target, draft = pair
    dec = SpeculativeDecoder(target, draft, gamma=3, sampling=SamplingConfig(1.0))
    a = dec.generate([4, 5], 20, seed=11)
    b = dec.generate([4, 5], 20, seed=11)
    assert a.tokens == b.tokens and a.accepted == b.accepted
    assert any(dec.generate([4, 5], 20, seed=s).tokens != a.tokens for s in range(12, 16))


def test_fused_prefill_keeps_the_steps_and_the_output(pair):
    """Fusing the prefill into the first verification (the default) changes no step, token or random draw."""
    target, draft = pair
    prompt = [3, 7, 1, 9, 4, 2, 8]
    for cfg, seed in ((GREEDY, 0), (SamplingConfig(1.0), 5)):
        for clip in (True, False):
            fused = SpeculativeDecoder(target, draft, 3, cfg, clip_gamma=clip).generate(prompt, 17, seed=seed)
            split = SpeculativeDecoder(target, draft, 3, cfg, clip_gamma=clip, fuse_prefill=False).generate(
                prompt, 17, seed=seed)
            assert fused.tokens == split.tokens and fused.accepted == split.accepted
            assert fused.gammas == split.gammas and fused.prefill_time_s <= split.prefill_time_s
    one = SpeculativeDecoder(target, draft, 3, GREEDY).generate(prompt, 1)       # g = 0 on the fused first step
    assert one.tokens == PlainDecoder(target, GREEDY).generate(prompt, 1).tokens and one.gammas == [0]


def test_row_gemm_keeps_the_logits():
    """The opt-in CPU kernel fix computes the same Linear outputs for 1..6 rows (it only reorders the sum)."""
    from specsim.executor.kernels import use_row_gemm
    lin = torch.nn.Linear(16, 24)
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(0))
    ref = [lin(x[:, :r]) for r in range(1, 7)]
    assert use_row_gemm(lin) == 1
    for r in range(1, 7):
        assert torch.allclose(lin(x[:, :r]), ref[r - 1], atol=1e-5) and lin(x[:, :r]).shape == ref[r - 1].shape


def test_row_gemm_kernels_are_scoped_to_the_source_that_asked(monkeypatch):
    """HFSource(kernels='row-gemm') uses the row-gemm path for its own 2..4-row passes only; a direct call of the same
    model (how HF's generate runs it) keeps the stock F.linear; use_row_gemm(model) switches it on for every caller."""
    from specsim.executor.kernels import row_gemm_scope, use_row_gemm
    from specsim.executor.sources import HFSource
    target, _ = _tiny_pair(seed=3)
    model = target.model
    calls = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a, **k: calls.append(1) or real(*a, **k))
    ids = torch.tensor([[1, 2, 3]])

    def stock_calls(fn):
        calls.clear()
        fn()
        return len(calls)
    with torch.inference_mode():
        n_stock = stock_calls(lambda: model(input_ids=ids))
        row = HFSource(model, "tiny", kernels="row-gemm")
        assert row.kernels == "row-gemm" and row.describe()["kernels"] == "row-gemm"
        assert n_stock > 0
        assert stock_calls(lambda: model(input_ids=ids)) == n_stock           # outside: stock
        assert stock_calls(lambda: row.forward(ids[0], row.new_state(), keep=3)) == 0
        assert stock_calls(lambda: row.forward(ids[0, :1], row.new_state())) == n_stock  # one row: stock
        with row_gemm_scope():
            assert stock_calls(lambda: model(input_ids=ids)) == 0
        assert stock_calls(lambda: HFSource(model, "tiny").forward(ids[0], row.new_state(), keep=3)) == n_stock
        use_row_gemm(model)
        assert stock_calls(lambda: model(input_ids=ids)) == 0
    with pytest.raises(ConfigError, match="kernels"):
        HFSource(model, "tiny", kernels="fast")


def test_eos_stops_both_decoders(pair):
    target, draft = pair
    ref = PlainDecoder(target, GREEDY).generate([1, 2], 20).tokens
    eos = ref[5]
    cut = ref[: ref.index(eos) + 1]
    assert PlainDecoder(target, GREEDY).generate([1, 2], 20, eos_token_id=eos).tokens == cut
    assert SpeculativeDecoder(target, draft, 3, GREEDY).generate([1, 2], 20, eos_token_id=eos).tokens == cut


def test_bad_inputs_are_config_errors(pair):
    target, draft = pair
    with pytest.raises(ConfigError):
        SpeculativeDecoder(target, draft, gamma=0)
    with pytest.raises(ConfigError):
        PlainDecoder(target).generate([], 3)
    with pytest.raises(ConfigError):
        PlainDecoder(target).generate([V + 5], 3)


# --- trace recording ------------------------------------------------------------------------------------------

def test_record_trace_betas_and_metadata(pair, tmp_path):
    target, draft = pair
    prompts = [[1, 2, 3], [7, 8], [30]]
    trace = record_trace(target, draft, prompts, 12, SamplingConfig(1.0), seed=5, task="unit",
                         prompts_file="prompts.jsonl")
    assert trace.n_sequences == 3 and trace.n_tokens == 36
    assert ((trace.beta >= 0) & (trace.beta <= 1)).all()
    assert 0 < trace.alpha < 1                                 # different models: β < 1 somewhere
    md = trace.metadata
    assert md["target"] == "tiny-target" and md["draft"] == "tiny-draft" and md["temperature"] == 1.0
    assert md["source"] == "specsim record" and md["how"] == "target-generated, draft teacher-forced"
    assert md["lenience"] == 1.0 and md["task"] == "unit" and md["prompts_file"] == "prompts.jsonl" and md["date"]
    back = Trace.read(trace.write(tmp_path / "t.parquet"))
    assert np.array_equal(back.beta, trace.beta) and back.metadata == trace.metadata
    # the generated tokens are the target's own samples: same seed, same tokens as plain decoding
    assert record_trace(target, draft, prompts, 12, SamplingConfig(1.0), seed=5).beta.tolist() == trace.beta.tolist()


def test_record_beta_matches_direct_computation(pair):
    """β_t from the one teacher-forced draft pass equals Σ min(p, q) computed position by position."""
    target, draft = pair
    cfg = SamplingConfig(0.8, top_k=10)
    tokens, beta = record_sequence(target, draft, [5, 6, 7], 6, cfg, seed=2)
    with torch.inference_mode():
        for t in range(6):
            ctx = torch.tensor([5, 6, 7] + tokens[:t])
            p = adjust(target.model(ctx[None]).logits[0, -1], cfg)
            q = adjust(draft.model(ctx[None]).logits[0, -1], cfg)
            assert beta[t] == pytest.approx(torch.minimum(p, q).sum().item(), abs=1e-5)


def test_greedy_trace_is_binary_and_replays_the_executors_accepts(pair):
    target, draft = pair
    prompts = [[1, 2, 3], [9, 4], [17, 17, 3, 8]]
    trace = record_trace(target, draft, prompts, 30, GREEDY)
    assert set(np.unique(trace.beta)) <= {0.0, 1.0}
    assert 0 < trace.alpha < 1
    for i, prompt in enumerate(prompts):
        betas = trace.sequences()[i]
        tokens = trace.frame.loc[trace.frame.sequence_id == i, "token"].tolist()
        for gamma in (1, 3, 5):
            res = SpeculativeDecoder(target, draft, gamma, GREEDY).generate(prompt, 30)
            assert res.tokens == tokens
            assert res.accepted == replay_accepts(betas, res.gammas)


def test_replay_accepts_convention():
    b = [1, 1, 0, 1, 1, 1, 1, 0, 1]
    # step 1 from t=0: two leading 1s then a 0 -> n=2, next t=3; step 2 from t=3: capped at γ=3 -> t=7;
    # step 3 from t=7: β=0 -> n=0, t=8; step 4: one β=1 left, then the trace ends
    assert replay_accepts(b, [4, 3, 4, 4]) == [2, 3, 0, 1]
    assert replay_accepts([0.9, 1.0], [2]) == [0]       # only β = 1 counts as a sure accept


def test_lenience_raises_recorded_beta(pair):
    target, draft = pair
    cfg = SamplingConfig(1.0)
    _, exact = record_sequence(target, draft, [2, 3], 10, cfg, seed=1)
    _, lenient = record_sequence(target, draft, [2, 3], 10, cfg, lenience=0.5, seed=1)
    assert (lenient >= exact - 1e-7).all() and lenient.mean() > exact.mean()


def test_load_prompts_formats(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"input_ids": [1, 2]}\n{"prompt": "hi"}\n')
    assert load_prompts(tmp_path / "p.jsonl", None, 256) == [[1, 2], [104, 105]]
    (tmp_path / "p.txt").write_text("ab\n\nc\n")
    assert load_prompts(tmp_path / "p.txt", None, 98) == [[97, 0], [1]]
    (tmp_path / "p.json").write_text("[[3, 4], \"a\"]")
    assert load_prompts(tmp_path / "p.json", None, 256, limit=1) == [[3, 4]]
    (tmp_path / "bad.jsonl").write_text('{"input_ids": [1, 999]}\n')
    with pytest.raises(ConfigError):
        load_prompts(tmp_path / "bad.jsonl", None, 256)
    with pytest.raises(ConfigError):
        load_prompts(tmp_path / "missing.txt", None, 256)


# --- measurement ----------------------------------------------------------------------------------------------

def test_pass_times_and_overhead(pair):
    target, _ = pair
    rows = pass_times(target, [1, 4], context=16, repeats=3, warmup=1)
    assert [r["positions"] for r in rows] == [1, 4]
    assert all(r["time_s"] > 0 and len(r["times_s"]) == 3 and r["context"] == 16 for r in rows)
    batched = pass_times(target, [2], context=8, repeats=2, warmup=0, batch=3)
    assert batched[0]["batch"] == 3 and batched[0]["time_s"] > 0
    with pytest.raises(ConfigError):
        pass_times(PromptLookupDraft(V), [1], context=4, batch=2)
    ov = sampling_overhead(V, 3, SamplingConfig(1.0), repeats=3)
    assert ov["time_s"] > 0 and ov["gamma"] == 3


def test_end_to_end_and_hf_comparison(pair):
    target, draft = pair
    prompts = [[1, 2, 3], [4, 5]]
    e2e = end_to_end(target, draft, prompts, 3, 16, GREEDY, repeats=1, warmup=0)
    assert e2e["new_tokens"] == e2e["plain_new_tokens"] == 32
    assert e2e["spec_walltime_s"] > 0 and e2e["plain_walltime_s"] > 0 and e2e["speedup"] > 0
    assert 1 <= e2e["tokens_per_target_run"] <= 4 and 0 <= e2e["acceptance_rate"] <= 1
    assert [pp["new_tokens"] for pp in e2e["per_prompt"]] == [16, 16]
    assert sum(len(pp["accepted"]) for pp in e2e["per_prompt"]) == e2e["target_runs"]
    hf = hf_assisted(target, draft, prompts, 3, 16, GREEDY, repeats=1, warmup=0)
    assert hf["new_tokens"] == 32 and hf["walltime_s"] > 0
    assert hf_assisted(target, None, prompts, 3, 16, SamplingConfig(1.0), repeats=1, warmup=0)["gamma"] == 0
    cmp = compare_with_hf(target, draft, prompts, 3, 16, GREEDY, repeats=1, warmup=0)
    assert cmp["ours_over_hf"] == pytest.approx(cmp["ours"]["spec_walltime_s"] / cmp["hf"]["walltime_s"])
    with pytest.raises(ConfigError):
        hf_assisted(target, PromptLookupDraft(V), prompts, 3, 4)


# --- CLI ------------------------------------------------------------------------------------------------------

def _tiny_profile(tmp_path, monkeypatch) -> str:
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "exec-test-tiny.toml").write_text(
        'n_layers = 2\nd_model = 32\nd_ff = 64\nn_heads = 4\nn_kv_heads = 2\nhead_dim = 8\nvocab_size = 64\n'
        'dtype = "fp32"\n')
    monkeypatch.setenv("SPECSIM_PROFILE_PATH", str(d))
    return "profile:exec-test-tiny"


def test_cli_record_and_measure(tmp_path, monkeypatch, capsys):
    from specsim.cli import main
    src = _tiny_profile(tmp_path, monkeypatch)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat sat\nthe cat sat on the mat\n")
    out = tmp_path / "trace.parquet"
    rc = main(["record", "--target", src, "--draft", "bigram", "--prompts", str(prompts), "--out", str(out),
               "--max-new-tokens", "8", "--temperature", "0", "--device", "cpu", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["n_sequences"] == 2 and res["n_tokens"] == 16
    assert res["metadata"]["draft"].startswith("bigram") and res["metadata"]["task"] == "prompts"
    assert Trace.read(out).n_tokens == 16
    rc = main(["measure", "--target", src, "--draft", f"{src}:layers=1", "--prompts", str(prompts),
               "--positions", "1,3", "--batch", "1,2", "--context", "8", "--repeats", "2", "--warmup", "0",
               "--max-new-tokens", "6",
               "--gamma", "2", "--hf-compare", "--device", "cpu", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and [(r["batch"], r["positions"]) for r in res["target_passes"]] == [(1, 1), (1, 3), (2, 1), (2, 3)]
    assert res["c"] > 0 and res["end_to_end"]["new_tokens"] == 12 and res["ours_over_hf"] > 0
    assert res["draft"]["layers"] == 1 and res["target"]["layers"] == 2


def test_cli_bad_source_is_one_line_error(tmp_path, capsys):
    from specsim.cli import main
    prompts = tmp_path / "p.txt"
    prompts.write_text("x\n")
    rc = main(["record", "--target", "no/such/model", "--draft", "bigram", "--prompts", str(prompts),
               "--out", str(tmp_path / "t.parquet"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("specsim: error:") and len(err.strip().splitlines()) == 1


def test_paired_hf_round_times_every_kind_per_prompt_in_abba_order(pair):
    """ours and HF's assisted generation (and HF on our kernels when ours are not stock) run per prompt back to
    back, the order flipping from prompt to prompt and round to round; our tokens are what the decoder emits."""
    from specsim.executor.measure import hf_kinds, paired_hf_round
    target, draft = pair
    assert hf_kinds("stock") == ["ours", "hf"] and hf_kinds("packed") == ["ours", "hf", "hf_same_kernels"]
    ours = SpeculativeDecoder(target, draft, 2, GREEDY, timing=False)
    prompts = [[1, 2, 3], [4, 5, 6, 7]]
    order = []
    res = paired_hf_round(ours, prompts, 6, round_index=1, after=lambda k, i, toks: order.append((k, i, toks)))
    assert [(k, i) for k, i, _ in order] == [("hf", 0), ("ours", 0), ("ours", 1), ("hf", 1)]
    for k, i, toks in order:
        assert (toks == ours.generate(prompts[i], 6, seed=i).tokens) if k == "ours" else toks is None
    assert set(res) == {"ours", "hf"} and res["ours"]["new_tokens"] == 12 == res["hf"]["new_tokens"]
    assert all(v["walltime_s"] > 0 for v in res.values())
