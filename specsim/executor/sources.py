"""Model sources behind one small interface: forward new positions through a cache, crop the cache.

- `HFSource`: a `transformers` causal LM from a local directory, a GGUF file, or built with random weights from a
  specsim ModelProfile (timing does not depend on weight values, so 8B-class timings need no download).
- `BigramDraft`, `PromptLookupDraft`: n-gram drafts over the target's vocabulary that cost ~nothing.

Every source returns logits (n-gram drafts: log-probabilities) for the last `keep` of the positions it was fed;
the state is the KV cache (or the token context) holding exactly the positions fed so far.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from specsim.errors import ConfigError
from specsim.executor.inputs import check_gguf, check_model_dir, check_source
from specsim.executor.kernels import check_kernels, install, kernel_scope, resolve_kernels

_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
           "fp16": torch.float16, "float16": torch.float16}
SOURCE_FORMS = ("a local Hugging Face directory", "a .gguf file", "profile:<model-profile>[:layers=N]",
                "bigram[:k=K]", "prompt-lookup[:n=N][:eps=E]")


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device, default: str = "bf16") -> torch.dtype:
    """'auto' = fp32 on CPU (fast, exact), the model's own dtype (`default`) on an accelerator."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32 if torch.device(device).type == "cpu" else _DTYPES.get(default, torch.bfloat16)
    if dtype not in _DTYPES:
        raise ConfigError("unknown dtype", field="dtype", value=dtype, allowed="auto, fp32, bf16, fp16")
    return _DTYPES[dtype]


class Source:
    """What the decoders need from a model. Subclasses keep `vocab_size`, `device`, `name`, `kind`."""

    name: str = "source"
    kind: str = "abstract"
    vocab_size: int = 0
    device: torch.device = torch.device("cpu")
    tokenizer = None
    free = False  # True for n-gram drafts: no accelerator work, cost ~0

    def new_state(self):
        raise NotImplementedError

    def forward(self, ids: torch.Tensor, state, keep: int = 1) -> torch.Tensor:
        """Feed ids [P] (appended to the state); return logits [keep, V] for the last `keep` positions."""
        raise NotImplementedError

    def length(self, state) -> int:
        raise NotImplementedError

    def crop(self, state, length: int) -> None:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "vocab_size": self.vocab_size}


class HFSource(Source):
    """A causal LM with a `DynamicCache`; cropping drops the rejected drafts' KV entries."""

    kind = "hf"

    def __init__(self, model, name: str, tokenizer=None, kind: str = "hf", kernels: str = "stock"):
        self.model = model.eval()
        self.name, self.kind, self.tokenizer = name, kind, tokenizer
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"   # transformers 5.x renamed it
        self._keep_kw = "logits_to_keep" in params
        self.kernels = resolve_kernels(kernels, self.model)   # "auto" becomes what it chose
        if self.kernels != "stock":
            install(self.model, self.kernels, scoped=True)

    def new_state(self):
        from transformers import DynamicCache
        try:
            return DynamicCache(config=self.model.config)
        except TypeError:  # older transformers
            return DynamicCache()

    def forward(self, ids: torch.Tensor, state, keep: int = 1) -> torch.Tensor:
        return self.forward_batch(ids.view(1, -1), state, keep)[0]

    def forward_batch(self, ids: torch.Tensor, state, keep: int = 1) -> torch.Tensor:
        """ids [B, P] (equal lengths, no padding): logits [B, keep, V]. Used to time batched passes."""
        kwargs = {self._cache_kw: state, "use_cache": True}
        if self._keep_kw:
            kwargs["logits_to_keep"] = keep
        with kernel_scope(self.kernels) if self.kernels != "stock" else contextlib.nullcontext():
            return self.model(input_ids=ids.to(self.device), **kwargs).logits[:, -keep:]

    def length(self, state) -> int:
        return int(state.get_seq_length())

    def crop(self, state, length: int) -> None:
        extra = self.length(state) - length
        if extra > 0:
            state.crop(-extra)  # negative = tokens to remove (transformers 5.x; also valid in 4.x)

    def describe(self) -> dict:
        cfg = self.model.config
        n_params = sum(p.numel() for p in self.model.parameters())
        return {"name": self.name, "kind": self.kind, "vocab_size": self.vocab_size, "params": n_params,
                "layers": getattr(cfg, "num_hidden_layers", None), "dtype": str(self.dtype).replace("torch.", ""),
                "device": str(self.device), "kernels": self.kernels}


# --- n-gram drafts -------------------------------------------------------------------------------

class _Context:
    """Token context of an n-gram draft: a growable int64 buffer."""

    def __init__(self):
        self.buf = np.zeros(256, dtype=np.int64)  # our choice: a short prompt fits; grows by doubling
        self.n = 0

    def extend(self, ids: Sequence[int]) -> None:
        need = self.n + len(ids)
        if need > len(self.buf):
            self.buf = np.concatenate([self.buf, np.zeros(max(need, 2 * len(self.buf)), dtype=np.int64)])
        self.buf[self.n:need] = ids
        self.n = need

    @property
    def tokens(self) -> np.ndarray:
        return self.buf[: self.n]


class _NgramSource(Source):
    free = True

    def new_state(self):
        return _Context()

    def length(self, state) -> int:
        return state.n

    def crop(self, state, length: int) -> None:
        state.n = min(state.n, length)

    def forward(self, ids: torch.Tensor, state, keep: int = 1) -> torch.Tensor:
        state.extend(ids.tolist() if isinstance(ids, torch.Tensor) else list(ids))
        keep = min(keep, state.n)
        return torch.stack([self._next_logits(state.tokens[: state.n - keep + i + 1]) for i in range(keep)])

    def _next_logits(self, ctx: np.ndarray) -> torch.Tensor:
        raise NotImplementedError


class BigramDraft(_NgramSource):
    """q(x | a) = (count(a, x) + k) / (count(a) + k·V), counted over a token corpus (e.g. the prompts).

    k = 0.01 by default (our choice: additive smoothing small enough that seen bigrams dominate, yet every token
    keeps q > 0 so p/q in the acceptance test stays finite)."""

    kind = "bigram"

    def __init__(self, corpus: Iterable[Sequence[int]], vocab_size: int, k: float = 0.01):
        if not k > 0:
            raise ConfigError("bigram smoothing must be positive", field="k", value=k, allowed="> 0")
        self.vocab_size, self.k, self.name = int(vocab_size), float(k), f"bigram(k={k:g})"
        pairs = [np.stack([np.asarray(s[:-1]), np.asarray(s[1:])], 1) for s in corpus if len(s) >= 2]
        self._rows: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.n_pairs = 0
        if pairs:
            allp = np.concatenate(pairs).astype(np.int64)
            allp = allp[(allp >= 0).all(1) & (allp < vocab_size).all(1)]
            self.n_pairs = len(allp)
            keys, counts = np.unique(allp[:, 0] * vocab_size + allp[:, 1], return_counts=True)
            prev, nxt = keys // vocab_size, keys % vocab_size
            starts = np.concatenate([[0], np.flatnonzero(np.diff(prev)) + 1, [len(keys)]])
            for s, e in itertools.pairwise(starts):
                self._rows[int(prev[s])] = (torch.from_numpy(nxt[s:e].copy()),
                                            torch.from_numpy(counts[s:e].astype(np.float64)))
        self._uniform = torch.full((self.vocab_size,), -math.log(self.vocab_size))

    def _next_logits(self, ctx: np.ndarray) -> torch.Tensor:
        row = self._rows.get(int(ctx[-1])) if len(ctx) else None
        if row is None:
            return self._uniform.clone()
        toks, cnts = row
        dist = torch.full((self.vocab_size,), self.k, dtype=torch.float64)
        dist[toks] += cnts
        return (dist / dist.sum()).log().float()


class PromptLookupDraft(_NgramSource):
    """Find the longest suffix n-gram (n ≤ max_n) that occurred earlier in the context; propose what followed it.

    As a distribution: (1 − eps)·one-hot(proposal) + eps·uniform; with no match, uniform (the draft knows nothing).
    """

    kind = "prompt-lookup"

    def __init__(self, vocab_size: int, max_n: int = 3, eps: float = 0.0):
        if max_n < 1:
            raise ConfigError("prompt-lookup n must be >= 1", field="n", value=max_n, allowed=">= 1")
        if not 0 <= eps <= 1:
            raise ConfigError("prompt-lookup eps out of range", field="eps", value=eps, allowed="[0, 1]")
        self.vocab_size, self.max_n, self.eps = int(vocab_size), int(max_n), float(eps)
        self.name = f"prompt-lookup(n={max_n},eps={eps:g})"

    def propose(self, ctx: np.ndarray) -> int:
        t = len(ctx)
        for n in range(min(self.max_n, t - 1), 0, -1):
            windows = np.lib.stride_tricks.sliding_window_view(ctx[: t - 1], n)
            hits = np.flatnonzero((windows == ctx[t - n:]).all(1))
            if hits.size:
                return int(ctx[hits[-1] + n])
        return -1

    def _next_logits(self, ctx: np.ndarray) -> torch.Tensor:
        tok = self.propose(ctx)
        if tok < 0 or tok >= self.vocab_size or self.eps == 1:
            return torch.zeros(self.vocab_size)
        if self.eps == 0:
            out = torch.full((self.vocab_size,), float("-inf"))
            out[tok] = 0.0
            return out
        out = torch.full((self.vocab_size,), math.log(self.eps / self.vocab_size))
        out[tok] = math.log(1 - self.eps + self.eps / self.vocab_size)
        return out


# --- construction ---------------------------------------------------------------------------------

def config_from_profile(profile, layers: int | None = None, max_positions: int = 32768):
    """A transformers config with the profile's shapes: Qwen2 when q/k/v carry biases, else Llama.

    max_positions = 32768 (Qwen2.5's max_position_embeddings): RoPE tables only, no weights depend on it."""
    from transformers import LlamaConfig, Qwen2Config
    if profile.architecture != "decoder" or profile.ffn != "gated" or profile.learned_positions:
        raise ConfigError("random-weight models are built for gated decoder-only profiles (Llama/Qwen/Mistral)",
                          field="profile", value=profile.name, allowed="a decoder profile with ffn = 'gated'")
    if getattr(profile, "is_moe", False) or getattr(profile, "kv_lora_rank", None) is not None:
        raise ConfigError("random-weight models are built for dense attention and FFNs: this profile has experts or "
                          "latent attention, which a Llama/Qwen2 config would silently drop", field="profile",
                          value=profile.name, allowed="a dense decoder profile (no n_experts, no kv_lora_rank)")
    common = {"vocab_size": profile.vocab_size, "hidden_size": profile.d_model, "intermediate_size": profile.d_ff,
              "num_hidden_layers": int(layers or profile.n_layers), "num_attention_heads": profile.n_heads,
              "num_key_value_heads": profile.n_kv_heads, "head_dim": profile.head_dim,
              "tie_word_embeddings": profile.tied_embeddings, "max_position_embeddings": max_positions}
    if profile.attention_bias:
        return Qwen2Config(**common)
    return LlamaConfig(attention_bias=False, **common)


def random_source(profile, *, layers: int | None = None, dtype: str | torch.dtype = "auto",
                  device: str = "cpu", seed: int = 0, name: str | None = None, kernels: str = "stock") -> HFSource:
    """Random weights (torch.manual_seed(seed)) in the profile's shapes, allocated directly on `device`."""
    from transformers import AutoModelForCausalLM
    if layers is not None and layers < 1:
        raise ConfigError("layers must be >= 1", field="layers", value=layers)
    cfg = config_from_profile(profile, layers)
    cfg._attn_implementation = "sdpa"
    torch_dtype = resolve_dtype(dtype, device, profile.dtype)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype)
    label = name or f"profile:{profile.name}" + (f":layers={layers}" if layers else "")
    return HFSource(model, label, kind="random", kernels=kernels)


def hf_source(path: str | Path, *, dtype: str | torch.dtype = "auto", device: str = "cpu",
              kernels: str = "stock") -> HFSource:
    """A local Hugging Face directory, or a .gguf file (transformers dequantizes it on load)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = Path(path)
    kw: dict = {}
    if path.suffix.lower() == ".gguf":
        check_gguf(path)
        where, kw["gguf_file"] = str(path.parent), path.name
    else:
        check_model_dir(path)  # config.json valid, weights present: one line, not transformers' traceback
        where = str(path)
    torch_dtype = resolve_dtype(dtype, device)
    try:
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype, **kw).to(device)
    except (KeyboardInterrupt, MemoryError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as e:  # a damaged checkpoint or config fails deep inside transformers / safetensors
        raise ConfigError(f"cannot load the model ({type(e).__name__}: {_first_line(e)})", file=path) from None
    try:
        tok = AutoTokenizer.from_pretrained(where, **kw)
    # a weights-only directory still times fine; prompts must then be token ids
    except (OSError, ValueError, KeyError, TypeError):
        tok = None
    return HFSource(model, path.name, tokenizer=tok, kernels=kernels)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else "no message"  # our choice: one readable line


def _options(parts: list[str], spec: str, allowed: dict[str, type]) -> dict:
    out = {}
    for part in parts:
        key, sep, val = part.partition("=")
        if not sep or key not in allowed:
            raise ConfigError("bad source option", field="source", value=spec,
                              allowed=", ".join(f"{k}=<{t.__name__}>" for k, t in allowed.items()))
        try:
            out[key] = allowed[key](val)
        except ValueError:
            raise ConfigError("bad source option value", field="source", value=spec) from None
    return out


def load_source(spec: str, *, device: str = "cpu", dtype: str = "auto", seed: int = 0,
                vocab_size: int | None = None, corpus: Iterable[Sequence[int]] | None = None,
                kernels: str = "stock") -> Source:
    """Parse a SRC string (see SOURCE_FORMS). n-gram drafts need the target's `vocab_size` (and bigram a corpus)."""
    check_kernels(kernels)   # before any weights load
    head, *rest = spec.split(":")
    if head in ("bigram", "prompt-lookup"):
        if vocab_size is None:
            raise ConfigError("an n-gram draft needs the target's vocabulary; use it as --draft", field="source",
                              value=spec)
        if head == "bigram":
            return BigramDraft(corpus or [], vocab_size, **_options(rest, spec, {"k": float}))
        opts = _options(rest, spec, {"n": int, "eps": float})
        return PromptLookupDraft(vocab_size, max_n=opts.get("n", 3), eps=opts.get("eps", 0.0))
    if head == "profile":
        if not rest or not rest[0]:
            raise ConfigError("missing profile name", field="source", value=spec, allowed="profile:<name>[:layers=N]")
        from specsim import profiles
        opts = _options(rest[1:], spec, {"layers": int})
        return random_source(profiles.model(rest[0]), layers=opts.get("layers"), dtype=dtype, device=device,
                             seed=seed, name=spec, kernels=kernels)
    check_source(spec)  # a missing path, a file that is not GGUF, a folder without config.json or weights
    return hf_source(Path(spec), dtype=dtype, device=device, kernels=kernels)
