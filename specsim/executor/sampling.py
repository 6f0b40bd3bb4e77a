"""Sampling adjustments and the speculative accept/reject rule (Algorithm 1, steps 3-4).

The paper treats every sampling method as a plain distribution: temperature rescales logits, top-k and top-p
zero the tail and renormalise, temperature 0 is a one-hot at the argmax. Both models' logits go through the same
`adjust` and the rule below then works on the adjusted p and q, which keeps the output exactly distributed as p.

Lenience l (App. A.5, lossy): a draft token x is accepted with probability min(1, p(x) / (l·q(x))) and a rejection
samples from norm(max(0, p − l·q)). l = 1 is the exact rule; l < 1 accepts more. Every function is batched over
leading dimensions so unit tests can push many independent trials through one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specsim.errors import ConfigError, check_range

BROKEN_RULES = ("no_residual", "resample_p")  # deliberately wrong rules, so the exactness tests can fail


@dataclass(frozen=True)
class SamplingConfig:
    """How next-token logits become a distribution. temperature 0 = argmax (greedy)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        check_range("temperature", self.temperature, lo=0, hi=100)
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError("top-k must be a positive integer", field="top_k", value=self.top_k, allowed=">= 1")
        if self.top_p is not None:
            check_range("top_p", self.top_p, lo=0, hi=1, lo_open=True)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def as_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}


PLAIN = SamplingConfig()  # temperature 1, no truncation: the default everywhere


def adjust(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Logits [..., V] -> probabilities [..., V] (float32) after temperature, top-k, then top-p (HF's order)."""
    logits = logits.float()
    if cfg.greedy:
        idx = logits.argmax(-1, keepdim=True)
        return torch.zeros_like(logits).scatter_(-1, idx, 1.0)
    if cfg.temperature != 1.0:
        logits = logits / cfg.temperature
    vocab = logits.shape[-1]
    if cfg.top_k is not None and cfg.top_k < vocab:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p is not None and cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(-1)
        # drop a token when the mass strictly before it already reaches top_p (the top token always stays)
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= cfg.top_p
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None, greedy: bool = False) -> torch.Tensor:
    """One draw per row of probs [..., V] -> long [...]. Zero-probability tokens are never drawn.

    greedy: the rows are one-hot (temperature 0), so the draw is the argmax — taken without a multinomial over the
    vocabulary (3.7 ms at V = 152k on the 2-core CPU, where HF's greedy decoding takes an argmax) and without
    spending the generator (at temperature 0 nothing depends on it)."""
    if greedy:
        return probs.argmax(-1)
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def overlap(p: torch.Tensor, q: torch.Tensor, lenience: float = 1.0) -> torch.Tensor:
    """β = Σ_x min(p(x), q(x)), the acceptance probability of one draft token (eq. 3).

    With lenience l a token is kept with probability min(1, p/(l·q)), so the acceptance probability is
    Σ_x min(q(x), p(x)/l); at l = 1 this is Σ min(p, q).
    """
    if lenience == 1.0:
        return torch.minimum(p, q).sum(-1)
    return torch.minimum(q, p / lenience).sum(-1).clamp(max=1.0)


def residual(p: torch.Tensor, q: torch.Tensor, lenience: float = 1.0) -> torch.Tensor:
    """norm(max(0, p − l·q)); where that is empty (p ≤ l·q everywhere, only by rounding) fall back to p."""
    r = (p - lenience * q).clamp_(min=0)
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp(min=torch.finfo(r.dtype).tiny), p)


def speculative_accept(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator | None,
                       lenience: float = 1.0, broken: str | None = None,
                       greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 3-4 of Algorithm 1 on adjusted distributions.

    p: [..., γ+1, V] target distributions (the last row is for the bonus token), q: [..., γ, V] draft
    distributions, drafts: [..., γ] the draft's sampled tokens. Returns (n accepted [...], next token [...]):
    the step emits drafts[:n] then the next token (from the residual after a rejection, from p[γ] after a clean
    sweep). Uses γ uniforms then one categorical draw from `generator`, whatever n is (greedy: one-hot p and q,
    temperature 0; the next token is then the argmax of its one-hot distribution, see `sample`).
    """
    if broken is not None and broken not in BROKEN_RULES:
        raise ConfigError("unknown broken rule", field="broken", value=broken, allowed=", ".join(BROKEN_RULES))
    check_range("lenience", lenience, lo=0, hi=1, lo_open=True)
    gamma = q.shape[-2]
    idx = drafts.unsqueeze(-1)
    px = p[..., :gamma, :].gather(-1, idx).squeeze(-1)
    qx = q.gather(-1, idx).squeeze(-1)
    u = torch.rand(px.shape, generator=generator, device=p.device, dtype=p.dtype)
    accept = u * (lenience * qx) < px  # u < p/(l·q); u ∈ [0, 1) so p ≥ l·q always accepts and p = 0 never does
    n = accept.long().cumprod(-1).sum(-1)                                       # leading accepts
    row = n.clamp(max=gamma - 1)[..., None, None].expand(*n.shape, 1, p.shape[-1])
    p_n = p.gather(-2, n[..., None, None].expand(*n.shape, 1, p.shape[-1])).squeeze(-2)
    q_n = q.gather(-2, row).squeeze(-2)
    rejected = (n < gamma).unsqueeze(-1)
    if broken == "resample_p":
        dist = p_n                                                             # wrong: ignores what q covered
    else:
        dist = torch.where(rejected, residual(p_n, q_n, lenience), p_n)
    nxt = sample(dist, generator, greedy)
    if broken == "no_residual":                                                # wrong: keep the draft's token
        rejected_draft = drafts.gather(-1, n.clamp(max=gamma - 1).unsqueeze(-1)).squeeze(-1)
        nxt = torch.where(n < gamma, rejected_draft, nxt)
    return n, nxt
