"""Speculative decoding (Algorithm 1) and plain decoding, batch 1, with KV caches and per-step timings.

One speculative step: γ draft passes (one position each, through the draft's KV cache), one target pass over
γ+1 positions (the pending last token + the γ drafts), accept/reject with min(1, p/q), the residual on a
rejection or the bonus token on a clean sweep, then both caches are cropped to the emitted prefix.

Fused prefill (`fuse_prefill=True`, the default, what HF assisted generation does): there is no separate
prefill; the first step feeds the whole prompt to the draft (its first draft pass) and the whole prompt plus the
γ drafts to the target in ONE pass whose last γ+1 logits verify them. Same passes per token, same randomness
draws, same accepted counts step for step; only the first StepRecord's draft/verify times now include the
prompt (prefill_time_s is ~0). `fuse_prefill=False` keeps a separate prefill over prompt[:-1] on both models,
the structure the simulator's engine models (specsim.executor.validate uses it).

Cache invariant between steps: the target's cache holds every token but the last (the "pending" token, fed
first in the next verification pass); the draft's cache holds every token but `draft_pending` (the pending token,
plus the last draft after a clean sweep, which the draft never consumed). No prefix is ever recomputed.
All randomness comes from one seeded torch.Generator on the target's device, so a seed fixes the output.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from specsim.errors import ConfigError
from specsim.executor.sampling import PLAIN, SamplingConfig, adjust, sample, speculative_accept
from specsim.executor.sources import Source


@dataclass
class StepRecord:
    """One target run: the draft length used, drafts accepted, tokens emitted, and where the time went.

    With a fused prefill (SpeculativeDecoder's default) the first record's draft and verify times include the
    prompt's passes on both models; exclude steps[0] when per-step pass times are wanted."""

    gamma: int
    accepted: int
    emitted: int
    draft_time_s: float
    verify_time_s: float
    overhead_time_s: float  # sampling, accept/reject, cache cropping, bookkeeping


@dataclass
class DecodeResult:
    prompt_len: int
    tokens: list[int]
    steps: list[StepRecord] = field(default_factory=list)
    prefill_time_s: float = 0.0  # ~0 for a fused prefill (the prompt is then inside steps[0])
    walltime_s: float = 0.0
    probs: torch.Tensor | None = None  # plain decoding with keep_probs: [len(tokens), V] adjusted distributions

    @property
    def accepted(self) -> list[int]:
        return [s.accepted for s in self.steps]

    @property
    def gammas(self) -> list[int]:
        return [s.gamma for s in self.steps]

    @property
    def tokens_per_step(self) -> float:
        return len(self.tokens) / max(len(self.steps), 1)

    def summary(self) -> dict:
        n_draft = sum(s.gamma for s in self.steps)
        return {"new_tokens": len(self.tokens), "target_runs": len(self.steps),
                "tokens_per_target_run": self.tokens_per_step,
                "acceptance_rate": (sum(self.accepted) / n_draft) if n_draft else None,
                "walltime_s": self.walltime_s, "prefill_time_s": self.prefill_time_s,
                "draft_time_s": sum(s.draft_time_s for s in self.steps),
                "verify_time_s": sum(s.verify_time_s for s in self.steps),
                "overhead_time_s": sum(s.overhead_time_s for s in self.steps)}


def make_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fit_vocab(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """A draft whose head is wider/narrower than the target's: drop the extra ids / give missing ones −inf."""
    v = logits.shape[-1]
    if v == vocab:
        return logits
    if v > vocab:
        return logits[..., :vocab]
    pad = logits.new_full((*logits.shape[:-1], vocab - v), float("-inf"))
    return torch.cat([logits, pad], -1)


def _prompt_tensor(prompt: Sequence[int] | torch.Tensor, vocab: int) -> torch.Tensor:
    ids = torch.as_tensor(prompt, dtype=torch.long).view(-1)
    if ids.numel() == 0:
        raise ConfigError("empty prompt", field="prompt", allowed="at least one token")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ConfigError("prompt token id outside the target's vocabulary", field="prompt",
                          value=int(ids.max()), allowed=f"[0, {vocab - 1}]")
    return ids


def _cut(tokens: list[int], max_new: int, eos: int | None) -> tuple[list[int], bool]:
    if eos is not None and eos in tokens:
        return tokens[: tokens.index(eos) + 1], True
    return tokens[:max_new], len(tokens) >= max_new


class PlainDecoder:
    """The baseline: one target pass per token through the KV cache."""

    def __init__(self, target: Source, sampling: SamplingConfig = PLAIN, timing: bool = True):
        self.target, self.sampling, self.timing = target, sampling, timing

    @torch.inference_mode()
    def generate(self, prompt, max_new_tokens: int, seed: int = 0, eos_token_id: int | None = None,
                 keep_probs: bool = False, generator: torch.Generator | None = None) -> DecodeResult:
        tgt, dev = self.target, self.target.device
        ids = _prompt_tensor(prompt, tgt.vocab_size)
        gen = generator or make_generator(dev, seed)
        clock = time.perf_counter
        t_start = clock()
        state = tgt.new_state()
        if len(ids) > 1:
            tgt.forward(ids[:-1], state, keep=1)
        _sync(dev)
        res = DecodeResult(prompt_len=len(ids), tokens=[], prefill_time_s=clock() - t_start)
        pending = ids[-1:].to(dev)
        probs = []
        for _ in range(max_new_tokens):
            t0 = clock()
            logits = tgt.forward(pending, state, keep=1)[-1]
            if self.timing:
                _sync(dev)
            t1 = clock()
            p = adjust(logits, self.sampling)
            pending = sample(p, gen, self.sampling.greedy).view(1)
            tok = int(pending)
            res.tokens.append(tok)
            if keep_probs:
                probs.append(p)
            res.steps.append(StepRecord(0, 0, 1, 0.0, t1 - t0, clock() - t1))
            if eos_token_id is not None and tok == eos_token_id:
                break
        _sync(dev)
        res.walltime_s = clock() - t_start
        if keep_probs:
            res.probs = torch.stack(probs) if probs else torch.empty(0, tgt.vocab_size)
        return res


class SpeculativeDecoder:
    """Algorithm 1 with draft length γ. `clip_gamma` shortens the last step so it never drafts past
    max_new_tokens (what HF does); without it the last step runs full γ and the output is truncated."""

    def __init__(self, target: Source, draft: Source, gamma: int, sampling: SamplingConfig = PLAIN,
                 lenience: float = 1.0, broken: str | None = None, clip_gamma: bool = True, timing: bool = True,
                 fuse_prefill: bool = True):
        if not 1 <= gamma <= 256:  # our choice: far above any useful γ; bounds the per-step draft loop
            raise ConfigError("gamma out of range", field="gamma", value=gamma, allowed="[1, 256]")
        self.target, self.draft, self.gamma, self.sampling = target, draft, int(gamma), sampling
        self.lenience, self.broken, self.clip_gamma, self.timing = lenience, broken, clip_gamma, timing
        self.fuse_prefill = fuse_prefill

    @torch.inference_mode()
    def generate(self, prompt, max_new_tokens: int, seed: int = 0, eos_token_id: int | None = None,
                 generator: torch.Generator | None = None) -> DecodeResult:
        tgt, dft = self.target, self.draft
        dev, vocab = tgt.device, tgt.vocab_size
        ids = _prompt_tensor(prompt, vocab)
        gen = generator or make_generator(dev, seed)
        clock = time.perf_counter
        sync = (lambda: _sync(dev)) if self.timing else (lambda: None)

        t_start = clock()
        tstate, dstate = tgt.new_state(), dft.new_state()
        split = len(ids) - 1 if self.fuse_prefill else 0   # fused: the first step feeds the whole prompt
        if len(ids) > 1 and not self.fuse_prefill:
            tgt.forward(ids[:-1], tstate, keep=1)
            dft.forward(ids[:-1], dstate, keep=1)
            _sync(dev)
        res = DecodeResult(prompt_len=len(ids), tokens=[], prefill_time_s=clock() - t_start)
        seq = ids.tolist()
        d_pending = ids[len(ids) - 1 - split:]      # the draft's cache lacks these (one token, or the prompt)
        t_pending = d_pending.to(dev)               # ... and the target's cache exactly these
        new: list[int] = []
        while len(new) < max_new_tokens:
            g = min(self.gamma, max_new_tokens - len(new) - 1) if self.clip_gamma else self.gamma
            emitted, n, t_draft, t_verify, t1 = self._passes(g, t_pending, d_pending, tstate, dstate, gen, sync)
            ctx = len(seq)
            seq.extend(emitted)
            new.extend(emitted)
            # crop both caches to the emitted prefix (all but the new pending token)
            tgt.crop(tstate, ctx + n)
            keep_d = min(ctx + n, dft.length(dstate))
            dft.crop(dstate, keep_d)
            d_pending = torch.tensor(seq[keep_d:], dtype=torch.long)
            t_pending = d_pending[-1:].to(dev)
            res.steps.append(StepRecord(g, n, len(emitted), t_draft, t_verify, clock() - t1))
            if eos_token_id is not None and eos_token_id in emitted:
                break
        res.tokens, _ = _cut(new, max_new_tokens, eos_token_id)
        _sync(dev)
        res.walltime_s = clock() - t_start
        return res

    def _passes(self, g: int, t_pending, d_pending, tstate, dstate, gen, sync):
        """One step's passes and accept/reject (g = 0: one plain target step, when one token is left).

        Returns (emitted tokens, drafts accepted, draft time, verify time, the clock at the end of the passes)."""
        tgt, dft, cfg = self.target, self.draft, self.sampling
        dev, vocab, clock = tgt.device, tgt.vocab_size, time.perf_counter
        t0 = clock()
        if g == 0:
            logits = tgt.forward(t_pending, tstate, keep=1)
            sync()
            t1 = clock()
            tok = sample(adjust(logits[-1], cfg), gen, cfg.greedy)
            return [int(tok)], 0, 0.0, t1 - t0, t1
        qs, xs = [], []
        inp = d_pending
        for _ in range(g):
            q = adjust(fit_vocab(dft.forward(inp, dstate, keep=1)[-1], vocab).to(dev), cfg)
            x = sample(q, gen, cfg.greedy).view(1)
            qs.append(q)
            xs.append(x)
            inp = x
        drafts = torch.cat(xs)
        sync()
        t1 = clock()
        p = adjust(tgt.forward(torch.cat([t_pending, drafts]), tstate, keep=g + 1), cfg)
        sync()
        t2 = clock()
        n_t, tok = speculative_accept(p, torch.stack(qs), drafts, gen, self.lenience, self.broken, cfg.greedy)
        vals = torch.cat([drafts, n_t.view(1), tok.view(1)]).tolist()   # the step's one host sync
        n = vals[g]
        return vals[:n] + [vals[g + 1]], n, t1 - t0, t2 - t1, t2
