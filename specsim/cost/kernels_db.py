"""Measured kernels: one pass priced from aiconfigurator-core's database of kernel latencies measured on real GPUs.

aiconfigurator-core (NVIDIA, Apache-2.0, `pip install aiconfigurator-core`) ships latencies of the kernels a serving
engine runs — GEMM by (m, n, k), decode and prefill attention by batch, length and heads, NCCL / custom all-reduce,
fused MoE — per GPU system, engine (vLLM, SGLang, TensorRT-LLM) and engine version, and a compiled engine
(`aiconfigurator_core.sdk.engine.EngineHandle`) that walks a model's op list and interpolates each op from them.
We use that engine and its interpolation as they are (nothing re-implemented here); what this module adds is the
mapping of a specsim pass (batch B, new positions per sequence P, cached context L, TP degree) onto its calls:

- P = 1 (a decode step, a draft step): the compiled generation op list at batch B and KV length s = L + 1 —
  exactly aiconfigurator-core's own `decode_step_latency(B, isl=L, osl=1)` (its s = isl + osl // 2 + 1).
- P > 1 (verification of k + 1 tokens, a token tree's nodes, a draft head's catch-up): a shape the database has
  no table for. Every op but attention is evaluated at B·P tokens (`x` = B·P: GEMMs, norms, all-reduces and the
  MoE kernels at the token count the pass carries; MoE tables count the experts those tokens wake), taken as a
  running maximum over P at that batch (the GEMM tables dip by up to 7% between neighbouring token counts where
  another kernel tile wins; a pass of more tokens is never priced below one of fewer — tested); attention is
  the decode kernel over B sequences at KV length L + P, i.e. the KV cache read once for the P query rows, as
  FlashAttention-3 / FlashInfer do for a short multi-token query with packed GQA. Bounds (tested): never below
  the one-token step's attention, never above aiconfigurator-core's own MTP rule (decode attention at batch
  B·(k + 1), the KV read k + 1 times). Its chunked-prefill table (context attention with a prefix) is not used
  for such short queries: for a few query rows over a long cache it falls below the time to read that cache once.
- Prefill (a prompt of S tokens): the compiled context op list at (B, S) = its `predict_prefill_latency`.
- A ragged step (the vllm-v1 engine profile: decodes, verifications and prefill chunks together): the non-attention
  ops at the step's tokens but the LM head (`logits_gemm`) at the positions whose logits the step computes — one
  per request, every position of a verification (vLLM's logits_indices; a prefill chunk's other tokens get none)
  — decode attention over the short rows, the context-attention table per prefill chunk
  (`measured_stack.RaggedPricer`).

Models: a specsim profile whose shape equals a config aiconfigurator-core ships (Llama-3.1-8B/70B, Qwen3-30B-A3B,
Mixtral-8x7B) uses that config; any other Llama-like dense decoder is given by shape (a `config.json` written from
the profile into a cache directory, LlamaForCausalLM). Draft heads are priced as a one-layer Llama of the head's
shape plus their extra GEMMs (`measured_stack.head_gemms`), through the same engine's op evaluation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from specsim.errors import ConfigError

ENGINES = ("vllm", "sglang", "trtllm")  # the stack names; the database's backend names are the same
PARTS = ("gemm", "attention", "allreduce", "moe", "other")  # what `roofline --stack vllm` prints per pass

# specsim profile name -> the HF config aiconfigurator-core ships (used only when the shapes agree, `_shipped`)
SHIPPED = {"llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
           "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B", "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1"}
_SHAPE = {"n_layers": "num_hidden_layers", "d_model": "hidden_size", "n_heads": "num_attention_heads",
          "n_kv_heads": "num_key_value_heads", "vocab_size": "vocab_size"}

logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # its data-loading notes are not ours to print


def _aic():
    """The engine module, or one line saying how to install it."""
    try:
        from aiconfigurator_core.sdk import engine
    except ImportError:
        raise ConfigError("the measured stacks need aiconfigurator-core", field="--stack",
                          allowed="pip install 'aiconfigurator-core>=0.12' (the README's install does)") from None
    return engine


def parse_stack(name: str | None) -> tuple[str, str | None] | None:
    """'vllm' -> ('vllm', None) (the newest version shipped), 'vllm@0.24.0' -> ('vllm', '0.24.0'); any other
    stack name -> None (a stack profile)."""
    if not isinstance(name, str):
        return None
    engine, _, version = name.partition("@")
    if engine not in ENGINES:
        return None
    return engine, (version or None)


def system_for(hardware, stack_name: str) -> str:
    """The database's system name of this hardware, or one line saying it has no measured kernels."""
    system = getattr(hardware, "measured_system", None)
    if not system:
        raise ConfigError(f"hardware {hardware.name} has no measured kernels", file=f"hardware profile {hardware.name}",
                          field="--stack", value=stack_name,
                          allowed="a hardware whose profile names its measured_system (h100-sxm, h200, b200, "
                                  "b300, gb200, l40s, rtx-pro-6000, a100-80gb), or a roofline stack such as "
                                  "ideal")
    return system


def resolve_version(system: str, engine: str, version: str | None, stack_name: str) -> str:
    """The literal version directory: the database's 'current' slot (its newest complete collection) unless one
    is pinned (any shipped slot: current, previous, next)."""
    from aiconfigurator_core.sdk import perf_database

    slots = perf_database.get_version_slots(system, engine)
    if not slots:
        raise ConfigError(f"no {engine} kernels measured on {system}", field="--stack", value=stack_name,
                          allowed=f"another engine of {', '.join(ENGINES)} or another hardware")
    shipped = sorted(set(slots.values()), key=perf_database._version_sort_tuple)
    if version is None:
        return slots.get("current") or shipped[-1]
    if version not in shipped:
        raise ConfigError(f"{engine} {version} is not measured on {system}", field="--stack", value=stack_name,
                          allowed=", ".join(f"{engine}@{v}" for v in shipped))
    return version


# --- models --------------------------------------------------------------------------------------------------------

def _check_priceable(model) -> None:
    if getattr(model, "architecture", "decoder") != "decoder" or getattr(model, "ffn", "gated") != "gated" \
            or getattr(model, "learned_positions", 0) or getattr(model, "kv_lora_rank", None) is not None:
        raise ConfigError(f"the measured stacks price Llama-like decoders, not {model.name}", field="--stack",
                          allowed="a decoder-only model with a gated FFN and rotary positions, or a roofline stack")
    if getattr(model, "dtype", "bf16") not in ("bf16", "fp16"):
        raise ConfigError(f"the measured stacks price bf16 / fp16 weights, not {model.dtype}", field="--stack",
                          value=model.name, allowed="a bf16 or fp16 model profile, or a roofline stack")


def _shipped(model) -> str | None:
    """A model directory holding the config aiconfigurator-core ships for this profile (read from the package's
    model_configs/, never downloaded), when every shape field agrees (a renamed copy stays by-shape)."""
    hf_id = SHIPPED.get(model.name)
    if hf_id is None:
        return None
    import aiconfigurator_core

    cfg_file = Path(aiconfigurator_core.__file__).parent / "model_configs" / f"{hf_id.replace('/', '--')}_config.json"
    if not cfg_file.is_file():
        return None
    raw = json.loads(cfg_file.read_text())
    same = all(raw.get(k) == getattr(model, f) for f, k in _SHAPE.items())
    moe = getattr(model, "n_experts", None)
    if moe:
        same = same and moe in (raw.get("num_experts"), raw.get("num_local_experts")) and \
            raw.get("num_experts_per_tok") == model.experts_per_token
    return config_dir(raw) if same else None


def llama_config(n_layers: int, d_model: int, d_ff: int, n_heads: int, n_kv_heads: int, head_dim: int,
                 vocab_size: int, dtype: str = "bf16") -> dict:
    """A Llama config.json of this shape (what aiconfigurator-core reads from a local model directory)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "num_hidden_layers": int(n_layers), "hidden_size": int(d_model), "intermediate_size": int(d_ff),
            "num_attention_heads": int(n_heads), "num_key_value_heads": int(n_kv_heads), "head_dim": int(head_dim),
            "vocab_size": int(vocab_size), "max_position_embeddings": 131072, "tie_word_embeddings": False,
            "torch_dtype": "float16" if dtype == "fp16" else "bfloat16"}


def config_dir(config: dict) -> str:
    """A model directory holding `config` (content-addressed, written atomically: Dask workers may race)."""
    text = json.dumps(config, sort_keys=True)
    d = Path(tempfile.gettempdir()) / "specsim-aic-models" / hashlib.sha256(text.encode()).hexdigest()[:16]
    f = d / "config.json"
    if not f.exists():
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"config.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, f)
    return str(d)


def model_path(model) -> str:
    """The path aiconfigurator-core compiles for this profile: its shipped config, else a by-shape Llama."""
    _check_priceable(model)
    path = _shipped(model)
    if path is not None:
        return path
    if getattr(model, "n_experts", None):
        raise ConfigError(f"no measured-kernel config for the MoE model {model.name}", field="--stack",
                          allowed=f"a shipped MoE ({', '.join(k for k in SHIPPED if 'b-a' in k or 'x' in k)}), "
                                  "a dense decoder, or a roofline stack")
    return config_dir(llama_config(model.n_layers, model.d_model, model.d_ff, model.n_heads, model.n_kv_heads,
                                   model.head_dim, model.vocab_size, model.dtype))


@lru_cache(maxsize=64)
def handle(path: str, system: str, engine: str, version: str, tp: int, moe: bool):
    """The compiled engine (about a second to build; cached per process)."""
    eng = _aic()
    kw = {"moe_tp_size": tp} if moe else {}  # experts split tp ways like the dense FFN (no expert parallelism)
    try:
        return eng.EngineHandle.compile(path, system, engine, backend_version=version, tp_size=tp, **kw)
    except (ValueError, KeyError, RuntimeError) as e:
        raise ConfigError(f"aiconfigurator-core cannot build this engine ({str(e).splitlines()[0][:160]})",
                          field="--stack", value=f"{engine}@{version} on {system}, tp {tp}") from None


def part_of(op_name: str) -> str:
    """Which printed part an op belongs to (PARTS)."""
    n = op_name.lower()
    if "attention" in n:
        return "attention"
    if "dispatch" in n:  # MoE pre/post dispatch: the TP all-reduce / all-gather around the experts
        return "allreduce"
    if "moe" in n or "router" in n or "expert" in n:
        return "moe"
    if n.endswith("_ar") or "_ar_" in n or "allreduce" in n or "p2p" in n or "all_reduce" in n:
        return "allreduce"
    if "gemm" in n:
        return "gemm"
    return "other"


def gemm_ops_json(gemms: tuple[tuple[str, float, int, int], ...]) -> str:
    """OpSpec JSON of bf16 GEMMs (name, count per pass, n, k) for `evaluate_ops_json`."""
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk import operations as ops
    from aiconfigurator_core.sdk.engine import build_ops_json

    return build_ops_json([ops.GEMM(name, scale, int(n), int(k), common.GEMMQuantMode.bfloat16)
                           for name, scale, n, k in gemms])


class KernelPricer:
    """Kernel time of one model's passes on one system / engine / version / TP degree, by part (module doc)."""

    def __init__(self, path: str, system: str, engine: str, version: str, tp: int, moe: bool,
                 extra: tuple[tuple[str, float, int, int], ...] = (), layers: bool = True):
        self.key = (path, system, engine, version, tp, moe, extra, layers)
        self.layers = layers  # False: only the extra GEMMs (Medusa's heads have no decoder layer)
        self.h = handle(path, system, engine, version, tp, moe)
        names = [o[0] for o in self.h.decode_step_per_op(1, 1, 1)]
        self.gen_names = names
        self.attn_idx = [i for i, n in enumerate(names) if part_of(n) == "attention"]
        self.rest_idx = [i for i, n in enumerate(names) if part_of(n) != "attention"]
        # the LM head over the positions whose logits a ragged step computes, the rest over all its tokens
        self.logits_idx = [i for i in self.rest_idx if "logits" in names[i].lower()]
        self.body_idx = [i for i in self.rest_idx if i not in self.logits_idx]
        self.all_idx = list(range(len(names)))
        ctx_names = [o[0] for o in self.h.run_static_per_op(batch_size=1, isl=2, osl=2)[0]]
        self.n_ctx = len(ctx_names)
        self.ctx_attn_idx = [i for i, n in enumerate(ctx_names) if part_of(n) == "attention"]
        self.extra_json = gemm_ops_json(extra) if extra else None
        self.parts = lru_cache(maxsize=1 << 16)(self._parts)
        self.prefill_parts = lru_cache(maxsize=1 << 12)(self._prefill_parts)

    @staticmethod
    def _fold(entries, out: dict) -> dict:
        for name, ms, *_ in entries:
            part = part_of(name)
            out[part] = out.get(part, 0.0) + ms * 1e-3
        return out

    def _parts(self, batch: int, positions: int, context: int) -> dict:
        """{part: seconds} of a pass of `positions` new tokens per sequence over `context` cached ones: every op
        but attention at B·P tokens (`rest`), attention over B sequences at KV length L + P (module doc)."""
        out = dict(self.rest(batch, positions))
        if self.layers:
            self._fold(self.h.evaluate_generation_ops(self.attn_idx, batch_size=batch, s=context + positions), out)
        return out

    @lru_cache(maxsize=1 << 14)  # noqa: B019 - one pricer per setup lives for the process (`pricer`)
    def rest(self, batch: int, positions: int) -> dict:
        """The non-attention ops of a pass at B·P tokens, as a running maximum over P at this batch: the measured
        GEMM tables dip by a few % between neighbouring token counts (another kernel tile wins there); a pass of
        more tokens per sequence is never priced below one of fewer (`raw_rest` is the table as it is)."""
        raw = self.raw_rest(batch, positions)
        if positions == 1:
            return raw
        prev = self.rest(batch, positions - 1)
        return raw if sum(raw.values()) >= sum(prev.values()) else prev

    def raw_rest(self, batch: int, positions: int) -> dict:
        out = dict.fromkeys(PARTS, 0.0)
        if self.layers:
            self._fold(self.h.evaluate_generation_ops(self.rest_idx, batch_size=batch, s=1 + positions,
                                                      x=batch * positions), out)
        if self.extra_json is not None:
            self._fold(self.h.evaluate_ops_json(self.extra_json, is_context=False, batch_size=batch, s=1 + positions,
                                                x=batch * positions), out)
        return out

    # --- ragged steps (the vllm-v1 engine profile: decodes, verifications and prefill chunks in one step) ------
    @lru_cache(maxsize=1 << 14)  # noqa: B019 - per-process pricer (`pricer`)
    def tokens_rest_s(self, rows: int, tokens: int, logits: int | None = None) -> float:
        """Every op but attention over a step of `tokens` tokens from `rows` requests (the table as it is), the LM
        head over the `logits` positions whose logits the step computes (default: one per request)."""
        return sum(self.raw_rest_tokens(rows, tokens, logits).values())

    def raw_rest_tokens(self, rows: int, tokens: int, logits: int | None = None) -> dict:
        out = dict.fromkeys(PARTS, 0.0)
        if self.layers:
            self._fold(self.h.evaluate_generation_ops(self.body_idx, batch_size=rows, s=2, x=tokens), out)
            self._fold(self._head(rows, rows if logits is None else logits), out)
        if self.extra_json is not None:
            self._fold(self.h.evaluate_ops_json(self.extra_json, is_context=False, batch_size=rows, s=2, x=tokens),
                       out)
        return out

    @lru_cache(maxsize=1 << 14)  # noqa: B019 - per-process pricer (`pricer`); a step's head recurs across steps
    def _head(self, rows: int, logits: int) -> tuple:
        """The LM head's op entries over `logits` positions (none when the op list has no head)."""
        if not self.logits_idx:
            return ()
        return tuple(self.h.evaluate_generation_ops(self.logits_idx, batch_size=rows, s=2, x=logits))

    @lru_cache(maxsize=1 << 16)  # noqa: B019
    def decode_attention_s(self, rows: int, kv_len: int) -> float:
        """The decode attention kernel over `rows` sequences at KV length `kv_len` (one read of each cache)."""
        if not self.layers:
            return 0.0
        return sum(e[1] for e in self.h.evaluate_generation_ops(self.attn_idx, batch_size=rows, s=kv_len)) * 1e-3

    @lru_cache(maxsize=1 << 16)  # noqa: B019
    def chunk_attention_s(self, chunk: int, prefix: int) -> float:
        """A prefill chunk's attention: the context-attention table at `chunk` new tokens over `prefix` cached."""
        if not self.layers:
            return 0.0
        return sum(e[1] for e in self.h.evaluate_context_ops(self.ctx_attn_idx, batch_size=1, s=chunk,
                                                             prefix=prefix)) * 1e-3

    def _prefill_parts(self, batch: int, prompt_len: int) -> dict:
        out = dict.fromkeys(PARTS, 0.0)
        if self.layers:
            self._fold(self.h.evaluate_context_ops(list(range(self.n_ctx)), batch_size=batch, s=prompt_len), out)
        if self.extra_json is not None:
            self._fold(self.h.evaluate_ops_json(self.extra_json, is_context=True, batch_size=batch, s=prompt_len,
                                                x=batch * prompt_len), out)
        return out

    def gemm_s(self, gemms: tuple[tuple[str, float, int, int], ...], tokens: int) -> float:
        """Seconds of extra GEMMs over `tokens` rows (EAGLE-3's once-per-step projection)."""
        r = self.h.evaluate_ops_json(gemm_ops_json(gemms), is_context=False, batch_size=tokens, s=2, x=tokens)
        return sum(e[1] for e in r) * 1e-3


@lru_cache(maxsize=64)
def pricer(path: str, system: str, engine: str, version: str, tp: int, moe: bool,
           extra: tuple[tuple[str, float, int, int], ...] = (), layers: bool = True) -> KernelPricer:
    """One shared pricer per setup: its per-shape memo then serves every sweep point in the process."""
    return KernelPricer(path, system, engine, version, tp, moe, extra, layers)
