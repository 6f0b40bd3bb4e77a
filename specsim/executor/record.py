"""Record β traces the way the paper measured α: the target generates, the draft scores the same sequence.

For each prompt the target samples `max_new_tokens` tokens (through its KV cache, at the given temperature /
top-k / top-p, keeping each adjusted distribution p_t); the draft then reads prompt + generated tokens
teacher-forced in ONE forward pass, giving q_t at every generated position. β_t = Σ_x min(p_t(x), q_t(x)) on the
adjusted distributions (with lenience l: Σ_x min(q_t(x), p_t(x)/l), the probability a draft token is kept).
At temperature 0 both are one-hot, so β_t ∈ {0, 1}: 1 exactly when the draft's argmax is the target's token.

At temperature 0 the trace also gets the column `rank` (`specsim.traces.format`): the rank of the target's token
among the draft's candidates, from the same teacher-forced pass — the number of vocabulary entries whose draft
logit is strictly higher, plus those tied with it at a lower token id (argmax's tie rule, so rank 0 is exactly
β = 1). A token tree is judged on it (`specsim.engine.rank_walk`). Above temperature 0 the column is left out: a
sampled tree's acceptance (multi-draft speculative sampling) is not a function of the target token's rank.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from specsim.errors import ConfigError
from specsim.inputs.files import check_nesting, input_file
from specsim.executor.sampling import PLAIN, SamplingConfig, adjust, overlap
from specsim.executor.sources import Source
from specsim.executor.speculative import PlainDecoder, fit_vocab

HOW = "target-generated, draft teacher-forced"
_CHUNK_ROWS = 256  # positions per β chunk, bounds the [rows, V] temporaries for 150k-token vocabularies


def sequence_seed(seed: int, index: int) -> int:
    """Generator seed for prompt `index`: independent of how many prompts come before or after."""
    return int(np.random.SeedSequence((int(seed), int(index))).generate_state(1, dtype=np.uint64)[0] >> 1)


@torch.inference_mode()
def draft_distributions(draft: Source, tokens: Sequence[int], n_last: int, vocab: int,
                        sampling: SamplingConfig, device: torch.device) -> torch.Tensor:
    """q for the last `n_last` tokens of `tokens`, teacher-forced in one pass: [n_last, vocab] on `device`."""
    return _draft_pass(draft, tokens, n_last, vocab, sampling, device)[0]


def _draft_pass(draft: Source, tokens: Sequence[int], n_last: int, vocab: int, sampling: SamplingConfig,
                device: torch.device, ranks: bool = False) -> tuple[torch.Tensor, np.ndarray | None]:
    """(q as `draft_distributions`, and with `ranks` the draft's rank of each of the last n_last tokens)."""
    state = draft.new_state()
    logits = draft.forward(torch.as_tensor(tokens[:-1], dtype=torch.long), state, keep=n_last)
    chosen = torch.as_tensor(tokens[len(tokens) - n_last:], dtype=torch.long, device=device)
    qs, rs = [], []
    for j, c in enumerate(logits.split(_CHUNK_ROWS)):
        c = fit_vocab(c, vocab).to(device)
        qs.append(adjust(c, sampling))
        if ranks:
            rs.append(token_ranks(c, chosen[j * _CHUNK_ROWS:j * _CHUNK_ROWS + c.shape[0]]))
    return torch.cat(qs), (np.concatenate(rs) if ranks else None)


def token_ranks(logits: torch.Tensor, tokens: torch.Tensor) -> np.ndarray:
    """Rank of tokens[i] in logits[i]: entries strictly higher, plus entries equal at a lower id (argmax's order).
    Compared as float32, the precision `adjust` takes its argmax in."""
    x = logits.float()
    own = x.gather(-1, tokens[:, None])
    ids = torch.arange(x.shape[-1], device=x.device)
    ahead = (x > own) | ((x == own) & (ids[None, :] < tokens[:, None]))
    return ahead.sum(-1).cpu().numpy().astype(np.int64)


@torch.inference_mode()
def record_sequence(target: Source, draft: Source, prompt: Sequence[int], max_new_tokens: int,
                    sampling: SamplingConfig, lenience: float = 1.0, seed: int = 0,
                    eos_token_id: int | None = None, ranks: bool = False):
    """(generated tokens, β per generated position) for one prompt; with `ranks` (temperature 0 only, see the
    module doc) also the draft's rank of each generated token: (tokens, β, rank)."""
    if ranks and not sampling.greedy:
        raise ConfigError("ranks are recorded at temperature 0 only", field="temperature",
                          value=sampling.temperature, allowed="0")
    res = PlainDecoder(target, sampling, timing=False).generate(prompt, max_new_tokens, seed=seed,
                                                                 eos_token_id=eos_token_id, keep_probs=True)
    n = len(res.tokens)
    if n == 0:
        return ([], np.zeros(0), np.zeros(0, np.int64)) if ranks else ([], np.zeros(0))
    full = list(prompt) + res.tokens
    q, rank = _draft_pass(draft, full, n, target.vocab_size, sampling, res.probs.device, ranks)
    beta = torch.cat([overlap(pc, qc, lenience) for pc, qc in zip(res.probs.split(_CHUNK_ROWS),
                                                                   q.split(_CHUNK_ROWS))])
    beta = beta.clamp(0.0, 1.0).double().cpu().numpy()
    return (res.tokens, beta, rank) if ranks else (res.tokens, beta)


def record_trace(target: Source, draft: Source, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 sampling: SamplingConfig = PLAIN, lenience: float = 1.0, seed: int = 0,
                 eos_token_id: int | None = None, task: str | None = None, prompts_file: str | None = None,
                 progress: bool = False):
    """A `specsim.traces.format.Trace` with one sequence per prompt (column `token` = the generated token id; at
    temperature 0 also `rank`, the draft's rank of it)."""
    from specsim.traces.format import Trace
    frames = []
    it = enumerate(prompts)
    if progress:
        from tqdm import tqdm
        it = tqdm(it, total=len(prompts), desc="record", unit="prompt")
    for i, prompt in it:
        tokens, beta, *rank = record_sequence(target, draft, prompt, max_new_tokens, sampling, lenience,
                                              sequence_seed(seed, i), eos_token_id, ranks=sampling.greedy)
        cols = {"sequence_id": np.full(len(beta), i, dtype=np.int64),
                "position": np.arange(len(beta), dtype=np.int64), "beta": beta,
                "token": np.asarray(tokens, dtype=np.int64)}
        if rank:
            cols["rank"] = rank[0]
        frames.append(pd.DataFrame(cols))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        {"sequence_id": np.zeros(0, np.int64), "position": np.zeros(0, np.int64), "beta": np.zeros(0)})
    meta = {"target": target.name, "draft": draft.name, **sampling.as_dict(), "lenience": float(lenience),
            "task": task, "source": "specsim record", "how": HOW, "how_recorded": HOW, "prompts_file": prompts_file,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "seed": int(seed),
            "max_new_tokens": int(max_new_tokens), "n_prompts": len(prompts)}
    return Trace(frame, meta)


def replay_accepts(betas: Sequence[float], gammas: Sequence[int]) -> list[int]:
    """Accepted drafts per step when a temperature-0 trace is replayed with the given draft lengths.

    The simulator's convention: a step starting at output position t accepts the leading run of positions with
    β = 1, capped at γ (and at the end of the trace); it then emits that many tokens plus one from the target.
    """
    b = np.asarray(betas, dtype=np.float64)
    out, t = [], 0
    for g in gammas:
        n = 0
        while n < g and t + n < len(b) and b[t + n] >= 1.0:
            n += 1
        out.append(n)
        t += n + 1
    return out


def _encode(text: str, tokenizer, vocab: int, chat: bool) -> list[int]:
    if tokenizer is None:  # random-weight models: timing does not depend on the ids, so bytes will do
        return [b % vocab for b in text.encode("utf-8")]
    if chat and getattr(tokenizer, "chat_template", None):
        return _chat(tokenizer, [{"role": "user", "content": text}])
    return list(tokenizer(text)["input_ids"])


def _chat(tokenizer, messages) -> list[int]:
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(t) for t in out]


def read_prompt_items(path: str | Path) -> list:
    """The prompts file's items, before tokenizing: checked first, so a bad file fails before any model loads.
    .jsonl: one JSON value a line; .json: a JSON list; any other suffix: one prompt per non-blank text line."""
    path = input_file(path, "prompts file", missing="prompts file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError("prompts file is not UTF-8 text", file=path) from None
    if path.suffix == ".jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                check_nesting(line, file=path, field=f"line {n}")  # bounded depth, before json recurses
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ConfigError(f"line {n} is not valid JSON ({e.msg})", file=path) from None
    elif path.suffix == ".json":
        check_nesting(text, file=path)
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"not valid JSON ({e.msg} at line {e.lineno})", file=path) from None
        if not isinstance(items, list):
            raise ConfigError("a .json prompts file must hold a list", file=path, value=type(items).__name__)
    else:
        items = [line for line in text.splitlines() if line.strip()]
    if not items:
        raise ConfigError("no prompts in file", file=path)
    return items


def _is_id(t) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0


def load_prompts(path: str | Path, tokenizer=None, vocab_size: int | None = None, chat: bool = False,
                 limit: int | None = None) -> list[list[int]]:
    """Prompts as token ids. FILE is .jsonl / .json (items: {"input_ids": [...]}, {"prompt"|"text": str},
    {"messages": [...]} for a chat template, a bare string or a bare id list) or any other text file
    (one prompt per non-blank line). Without a tokenizer, text becomes UTF-8 bytes mod the vocabulary."""
    items = read_prompt_items(path)
    path = Path(path)
    vocab = vocab_size or (len(tokenizer) if tokenizer is not None else None)
    prompts = []
    for i, item in enumerate(items[:limit] if limit else items):
        if isinstance(item, dict):
            if "input_ids" in item:
                ids = item["input_ids"]
            elif "messages" in item and tokenizer is not None:
                ids = _chat(tokenizer, item["messages"])
            elif "prompt" in item or "text" in item:
                ids = _encode(str(item.get("prompt", item.get("text"))), tokenizer, vocab, chat)
            else:
                raise ConfigError("prompt item needs input_ids, prompt, text or messages", file=path,
                                  field=f"item {i}", value=sorted(item))
        elif isinstance(item, str):
            ids = _encode(item, tokenizer, vocab, chat)
        else:
            ids = item
        if not isinstance(ids, list) or not ids or not all(_is_id(t) for t in ids):
            raise ConfigError("prompt must be a non-empty list of token ids (integers >= 0, not true/false)",
                              file=path, field=f"item {i}")
        if vocab is not None and max(ids) >= vocab:
            raise ConfigError("token id outside the vocabulary", file=path, field=f"item {i}", value=max(ids),
                              allowed=f"[0, {vocab - 1}]")
        prompts.append(ids)
    if not prompts:
        raise ConfigError("no prompts in file", file=path)
    return prompts
