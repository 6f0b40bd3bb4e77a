"""Measured timings the simulator is scored against: pass times, sampling overhead, end-to-end walltime.

Every figure is a median over `repeats` runs after `warmup` discarded runs, timed with time.perf_counter under
torch.inference_mode (CUDA is synchronized before each clock read, so a time covers the whole pass).
- `pass_times`: one forward pass of P new positions after L cached ones (P = 1 is a draft/plain step,
  P = γ+1 a verification); the grid over P is what the cost model's T(B=1, P, L) predicts.
- `sampling_overhead`: adjust + sample γ drafts, accept/reject, residual: the executor's per-step bookkeeping.
- `end_to_end`: walltime of speculative vs plain decoding of the same prompts, with the step statistics.
- `hf_assisted`: the same prompts through Hugging Face's assisted generation, so our/HF walltime can be recorded.
- `paired_hf_round`: ours and HF timed per prompt back to back in ABBA order (validate_cpu, hf_compare).
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from specsim.errors import ConfigError
from specsim.executor.sampling import PLAIN, SamplingConfig, adjust, sample, speculative_accept
from specsim.executor.sources import HFSource, Source
from specsim.executor.speculative import PlainDecoder, SpeculativeDecoder, _sync, make_generator

# our choice: every P = γ + 1 of a verification with γ ≤ 5, plus 8 (γ = 7), densely where the CPU kernels switch
# (kernels.py), then doublings up to a prefill-sized pass. The repeats/warmup defaults below are our choice too.
DEFAULT_POSITIONS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64, 128)


def _median_time(fn: Callable[[], object], repeats: int, warmup: int, device: torch.device) -> list[float]:
    if repeats < 1:
        raise ConfigError("repeats must be >= 1", field="repeats", value=repeats)
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times


def _stats(times: list[float]) -> dict:
    return {"time_s": statistics.median(times), "min_time_s": min(times), "times_s": times}


@torch.inference_mode()
def pass_times(source: Source, positions: Sequence[int] = DEFAULT_POSITIONS, context: int = 128,
               repeats: int = 5, warmup: int = 2, seed: int = 0, batch: int = 1) -> list[dict]:
    """Median time of one forward pass with P new positions after `context` cached positions, for each P.

    batch > 1 (transformers sources only) runs B equal-length sequences side by side: T(B, P, L)."""
    if batch < 1:
        raise ConfigError("batch must be >= 1", field="batch", value=batch)
    if batch > 1 and not isinstance(source, HFSource):
        raise ConfigError("batched pass times need a transformers model", field="batch", value=batch,
                          allowed="1 for n-gram drafts")
    gen = torch.Generator().manual_seed(seed)
    state = source.new_state()
    fwd = (lambda ids, keep: source.forward(ids[0], state, keep)) if batch == 1 else \
        (lambda ids, keep: source.forward_batch(ids, state, keep))
    if context > 0:
        fwd(torch.randint(source.vocab_size, (batch, context), generator=gen), 1)
    rows = []
    for p in positions:
        if p < 1:
            raise ConfigError("positions must be >= 1", field="positions", value=p)
        ids = torch.randint(source.vocab_size, (batch, p), generator=gen).to(source.device)

        def one(ids=ids, p=p):
            fwd(ids, p)
            source.crop(state, context)
        times = _median_time(one, repeats, warmup, source.device)
        rows.append({"batch": int(batch), "positions": int(p), "context": int(context), **_stats(times)})
    return rows


@torch.inference_mode()
def sampling_overhead(vocab: int, gamma: int, sampling: SamplingConfig = PLAIN,
                      device: str | torch.device = "cpu", repeats: int = 20, warmup: int = 3,
                      seed: int = 0) -> dict:
    """Per-step cost outside the forward passes: γ draft adjust+sample, target adjust, accept/reject."""
    dev = torch.device(device)
    gen = make_generator(dev, seed)
    q_logits = torch.randn(gamma, vocab, device=dev, generator=gen)
    p_logits = torch.randn(gamma + 1, vocab, device=dev, generator=gen)

    def one():
        qs, xs = [], []
        for i in range(gamma):
            q = adjust(q_logits[i], sampling)
            qs.append(q)
            xs.append(sample(q, gen, sampling.greedy).view(1))
        drafts = torch.cat(xs)
        n, tok = speculative_accept(adjust(p_logits, sampling), torch.stack(qs), drafts, gen, greedy=sampling.greedy)
        torch.cat([drafts, n.view(1), tok.view(1)]).tolist()
    return {"vocab": vocab, "gamma": gamma, **_stats(_median_time(one, repeats, warmup, dev))}


def _run_all(decode: Callable, prompts, max_new_tokens: int, seed: int, eos: int | None) -> tuple[float, list]:
    t0 = time.perf_counter()
    results = [decode(p, max_new_tokens, seed=seed + i, eos_token_id=eos) for i, p in enumerate(prompts)]
    return time.perf_counter() - t0, results


def end_to_end(target: Source, draft: Source, prompts: Sequence[Sequence[int]], gamma: int, max_new_tokens: int,
               sampling: SamplingConfig = PLAIN, seed: int = 0, repeats: int = 3, warmup: int = 1,
               eos_token_id: int | None = None, lenience: float = 1.0) -> dict:
    """Walltime of speculative vs plain decoding of the same prompts (medians over repeats) and step stats."""
    spec = SpeculativeDecoder(target, draft, gamma, sampling, lenience=lenience, timing=False)
    plain = PlainDecoder(target, sampling, timing=False)
    for _ in range(warmup):
        _run_all(spec.generate, prompts[:1], max_new_tokens, seed, eos_token_id)
        _run_all(plain.generate, prompts[:1], max_new_tokens, seed, eos_token_id)
    spec_t, plain_t = [], []
    for _ in range(repeats):  # interleaved so drifting clocks/thermals hit both alike
        t, spec_res = _run_all(spec.generate, prompts, max_new_tokens, seed, eos_token_id)
        spec_t.append(t)
        t, plain_res = _run_all(plain.generate, prompts, max_new_tokens, seed, eos_token_id)
        plain_t.append(t)
    # per-step means from the separate-prefill structure (same steps), so no step's time includes the prompt
    timed = SpeculativeDecoder(target, draft, gamma, sampling, lenience=lenience, timing=True, fuse_prefill=False)
    _, timed_res = _run_all(timed.generate, prompts, max_new_tokens, seed, eos_token_id)
    steps = [s for r in timed_res for s in r.steps]
    n_steps = max(len(steps), 1)
    new_tokens = sum(len(r.tokens) for r in spec_res)
    drafted = sum(s.gamma for s in steps)
    out = {"gamma": gamma, "prompts": len(prompts), "max_new_tokens": max_new_tokens,
           "spec_walltime_s": statistics.median(spec_t), "plain_walltime_s": statistics.median(plain_t),
           "spec_walltimes_s": spec_t, "plain_walltimes_s": plain_t,
           "new_tokens": new_tokens, "plain_new_tokens": sum(len(r.tokens) for r in plain_res),
           "target_runs": sum(len(r.steps) for r in spec_res),
           "acceptance_rate": sum(s.accepted for s in steps) / drafted if drafted else None,
           "mean_draft_time_s": sum(s.draft_time_s for s in steps) / n_steps,
           "mean_verify_time_s": sum(s.verify_time_s for s in steps) / n_steps,
           "mean_overhead_time_s": sum(s.overhead_time_s for s in steps) / n_steps}
    out["per_prompt"] = [{"gammas": r.gammas, "accepted": r.accepted, "new_tokens": len(r.tokens)}
                         for r in timed_res]
    out["tokens_per_target_run"] = new_tokens / max(out["target_runs"], 1)
    out["speedup"] = out["plain_walltime_s"] / out["spec_walltime_s"]
    return out


def _hf_ready(source: Source, role: str):
    if not isinstance(source, HFSource):
        raise ConfigError("Hugging Face assisted generation needs transformers models on both sides", field=role,
                          value=source.name, allowed="a HF directory, a .gguf file or profile:<name>")
    m = copy.copy(source.model)       # shallow: shares weights, own generation_config
    m.generation_config = copy.deepcopy(source.model.generation_config)
    m.generation_config.eos_token_id = None   # run the full length, like our decoders
    if m.generation_config.pad_token_id is None:
        m.generation_config.pad_token_id = 0
    return m


@torch.inference_mode()
def hf_assisted(target: Source, draft: Source | None, prompts: Sequence[Sequence[int]], gamma: int,
                max_new_tokens: int, sampling: SamplingConfig = PLAIN, seed: int = 0,
                repeats: int = 3, warmup: int = 1) -> dict:
    """Walltime of `target.generate(input_ids, assistant_model=draft, ...)` over the prompts (constant γ).

    draft=None times HF's plain generate. Greedy at temperature 0, else do_sample with the same temperature,
    top-k and top-p. Tokens are not compared (HF consumes randomness differently); walltime is.
    """
    from transformers.utils import logging as hf_logging
    tm = _hf_ready(target, "target")
    kwargs = {"max_new_tokens": max_new_tokens, "do_sample": not sampling.greedy}
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
    if draft is not None:
        dm = _hf_ready(draft, "draft")
        dm.generation_config.num_assistant_tokens = gamma
        dm.generation_config.num_assistant_tokens_schedule = "constant"
        dm.generation_config.assistant_confidence_threshold = 0.0  # never stop drafting early
        kwargs["assistant_model"] = dm
    inputs = [torch.as_tensor(p, dtype=torch.long).view(1, -1).to(target.device) for p in prompts]
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        def run_all():
            new = 0
            for i, ids in enumerate(inputs):
                torch.manual_seed(seed + i)
                new += tm.generate(ids, attention_mask=torch.ones_like(ids), **kwargs).shape[1] - ids.shape[1]
            return new
        for _ in range(warmup):
            run_all()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            new_tokens = run_all()
            _sync(target.device)
            times.append(time.perf_counter() - t0)
    finally:
        hf_logging.set_verbosity(verbosity)
    return {"gamma": gamma if draft is not None else 0, "walltime_s": statistics.median(times), "walltimes_s": times,
            "new_tokens": new_tokens, "prompts": len(prompts)}


def compare_with_hf(target: Source, draft: Source, prompts: Sequence[Sequence[int]], gamma: int,
                    max_new_tokens: int, sampling: SamplingConfig = PLAIN, seed: int = 0,
                    repeats: int = 3, warmup: int = 1) -> dict:
    """Our speculative walltime against HF assisted generation on the same prompts: ratio < 1 = we are faster."""
    ours = end_to_end(target, draft, prompts, gamma, max_new_tokens, sampling, seed, repeats, warmup)
    hf = hf_assisted(target, draft, prompts, gamma, max_new_tokens, sampling, seed, repeats, warmup)
    return {"ours": ours, "hf": hf, "ours_over_hf": ours["spec_walltime_s"] / hf["walltime_s"]}


def hf_kinds(kernels: str) -> list[str]:
    """What a paired round times: our executor, HF's assisted generation on its stock kernels, and — when ours are
    not stock — HF with our kernels switched on too (the two loops alone, on the same passes)."""
    return ["ours", "hf"] + (["hf_same_kernels"] if kernels != "stock" else [])


def paired_hf_round(ours: SpeculativeDecoder, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                    round_index: int = 0, after: Callable | None = None) -> dict:
    """One round of ours against HF: per prompt, every kind of `hf_kinds` back to back in alternating (ABBA) order
    over prompts and rounds, so the shared machine's drift hits all alike. Same prompts, seeds, γ and sampling on
    both sides. `after(kind, i, tokens)` runs after each timed run (tokens: ours only, else None).
    Returns {kind: {"walltime_s": summed over the prompts, "new_tokens": ...}}."""
    from specsim.executor.kernels import kernel_scope
    tgt, dft = ours.target, ours.draft
    kinds = hf_kinds(tgt.kernels)
    out = {k: {"walltime_s": 0.0, "new_tokens": 0} for k in kinds}
    for i, prompt in enumerate(prompts):
        for kind in (kinds if (round_index + i) % 2 == 0 else kinds[::-1]):
            toks = None
            if kind == "ours":
                t0 = time.perf_counter()
                toks = ours.generate(prompt, max_new_tokens, seed=i).tokens
                t, n = time.perf_counter() - t0, len(toks)
            else:
                with kernel_scope(tgt.kernels) if kind == "hf_same_kernels" else contextlib.nullcontext():
                    h = hf_assisted(tgt, dft, [prompt], ours.gamma, max_new_tokens, ours.sampling, seed=i,
                                    repeats=1, warmup=0)
                t, n = h["walltime_s"], h["new_tokens"]
            out[kind]["walltime_s"] += t
            out[kind]["new_tokens"] += n
            if after is not None:
                after(kind, i, toks)
    return out
