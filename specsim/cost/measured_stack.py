"""The measured-kernel stacks `vllm`, `sglang`, `trtllm` (`vllm@0.24.0` pins a version): a pass = the kernels the
engine runs, measured (`specsim.cost.kernels_db`), plus the engine's own time, a named term per engine.

What kernels leave out — the scheduler, input preparation, sampling, rejection sampling, the proposer's own launches
and bookkeeping, graph replay — is priced as three terms (`EngineTerms`), each with its source:
- `step_s`, the engine's time per plain step, on every target pass (a plain step, a verification, a prefill
  step): calibrated on a published plain (non-speculative) TPOT only, as TPOT − kernels of that step (`PLAIN`);
- `verify_s`, what a verification adds beyond a plain step: 0 — vLLM's greedy rejection sampler is one small
  kernel (vllm/v1/sample/rejection_sampler.py) and nothing else on its path is per-verification; whatever a
  speculative step adds is left to the per-draft-pass term, so no second row is needed to separate them;
- `draft_pass_s[method]`, the proposer's own time per draft pass: calibrated on one named speculative row per
  engine and method (`SPECULATIVE`, never scored), as (AL·TPOT − verification − K·head kernels) / K. Methods with
  no row of their own borrow EAGLE-1's (vLLM runs MTP and draft models through the same proposer loop,
  vllm/v1/spec_decode/eagle.py); the source says so.
SGLang and TensorRT-LLM have no published plain figure here: their terms are 0 and named "uncalibrated" (kernels
only), which `roofline --stack sglang` prints.

The engine term is host-side time, so the H100 calibration is applied on every GPU of that engine; it is constant
in batch size (a batch-1 figure cannot say how it grows). The published figures are vLLM V1 of mid-2025; the
kernels are the database's version (0.24.0): the term absorbs that gap too.

The head side (a draft head on a measured stack, the calibration of the per-draft-pass term, which prices heads,
and the stack profile built from the terms) is `specsim.methods.measured_heads`: pricing a head needs its method.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specsim.cost import kernels_db as kd
from specsim.cost.ragged import check_logit_positions
from specsim.cost.roofline import CostModel, PassCost
from specsim.profiles.schema import IDEAL_STACK, HardwareProfile, StackProfile

# our choice: the context of the calibration steps — MT-Bench prompts (~100 tokens with Llama 3's chat template)
# plus half of the 256-token outputs vLLM's spec-decode example generates; the 8B's batch-1 kernels on H100 move
# 1% over 64-1024 tokens (6.12 -> 6.18 ms; 6.03 ms at 0), so the choice barely matters
CAL_CONTEXT = 256


@dataclass(frozen=True)
class Published:
    """One published figure the terms are calibrated on (../shared/reference/published-gpu.md)."""

    engine: str
    target: str
    hardware: str
    tpot_s: float
    source: str
    head: str | None = None
    k: int = 0
    al: float = 1.0


# plain TPOT at batch 1 (series A): the only figure the plain term sees
PLAIN = {"vllm": Published("vllm", "llama-3.1-8b", "h100-sxm", 7.07e-3,
                           "vLLM issue 20780 (series A plain TPOT, Llama-3.1-8B-Instruct, H100, batch 1)")}
# one speculative row per engine and method (never scored): K = 4, the middle of the published K = 2..7 sweep
SPECULATIVE = {
    ("vllm", "eagle"): Published("vllm", "llama-3.1-8b", "h100-sxm", 4.48e-3, "vLLM issue 20780 series A, "
                                 "EAGLE-1 K = 4 row (AL 2.39, TPOT 4.48 ms)", "eagle-llama-3.1-8b", 4, 2.39),
    ("vllm", "eagle3"): Published("vllm", "llama-3.1-8b", "h100-sxm", 4.05e-3, "vLLM issue 20780 series A, "
                                  "EAGLE-3 K = 4 row (AL 3.08, TPOT 4.05 ms)", "eagle3-llama-3.1-8b", 4, 3.08)}
BORROW = "eagle"  # methods without a row of their own take this method's per-pass term (module doc)


@dataclass(frozen=True)
class EngineTerms:
    step_s: float = 0.0
    verify_s: float = 0.0
    draft_pass_s: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)

    def draft_term(self, method: str) -> tuple[float, str]:
        if method in self.draft_pass_s:
            return self.draft_pass_s[method], self.sources[f"draft_pass_s.{method}"]
        if BORROW in self.draft_pass_s:
            return self.draft_pass_s[BORROW], f"borrowed from {BORROW}: " + self.sources[f"draft_pass_s.{BORROW}"]
        return 0.0, "uncalibrated: no published speculative row for this engine (kernels only)"


class MeasuredStack(StackProfile):
    """A stack whose passes are measured kernels + engine terms (its roofline fields stay the ideal ones: they
    only serve bytes and FLOPs for MBU / MFU)."""

    engine: str
    version: str
    system: str | None = None  # None: resolved without a hardware (a sweep's content hash)
    package: str = ""
    step_s: float = 0.0
    verify_s: float = 0.0
    draft_pass_s: dict[str, float] = {}
    term_sources: dict[str, str] = {}

    def terms(self) -> EngineTerms:
        return EngineTerms(self.step_s, self.verify_s, dict(self.draft_pass_s), dict(self.term_sources))


def per_pass_from_row(target, head, step_s: float, row: Published, context: int = CAL_CONTEXT) -> float:
    """The proposer's own time per draft pass from one speculative row: (AL·TPOT − verification − K head passes
    − the head's once-per-step GEMMs) / K, the verification = kernels of K + 1 tokens + the plain step term."""
    verify = target.kernel_s(1, row.k + 1, context) + step_s
    kernels = row.k * head.kernel_s(1, 1, context) + head.step_once_cost(1)[0]
    return max(0.0, (row.al * row.tpot_s - verify - kernels) / row.k)


class MeasuredCost:
    """A cost model priced from measured kernels + an engine term per pass; memory, bytes and FLOPs (for MBU /
    MFU) come from the same model's ideal roofline (`roof`), whose other attributes it forwards."""

    mode = "measured-kernels"

    def __init__(self, roof: CostModel, kernels: kd.KernelPricer, pass_s: float, pass_source: str,
                 verify_s: float = 0.0, once_gemms: tuple = ()):
        self.roof, self.kernels = roof, kernels
        self.pass_s, self.pass_source, self.verify_s = float(pass_s), pass_source, float(verify_s)
        self.once_gemms = once_gemms

    def __getattr__(self, name):  # model, hardware, tp, memory_bytes, kv_budget_tokens, own_weight_bytes, ...
        if name in ("roof", "kernels"):
            raise AttributeError(name)
        return getattr(self.roof, name)

    def parts(self, batch: int, positions: int, context: int) -> dict:
        """{part: seconds}: the kernels by part (kernels_db.PARTS) and the engine's own term ('engine')."""
        out = dict(self.kernels.parts(batch, positions, self.roof.kv_context(context)))
        out["engine"] = self.pass_s + (self.verify_s if positions > 1 else 0.0)
        return out

    def kernel_s(self, batch: int, positions: int, context: int) -> float:
        return sum(self.kernels.parts(batch, positions, self.roof.kv_context(context)).values())

    def pass_cost(self, batch: int = 1, positions: int = 1, context: int = 0,
                  cross_context: int | None = None) -> PassCost:
        ideal = self.roof.pass_cost(batch, positions, context, cross_context)  # checks the pass, gives bytes/FLOPs
        parts = self.parts(batch, positions, context)
        return PassCost(positions=positions, batch=batch, context=context, time_s=sum(parts.values()),
                        bytes=ideal.bytes, flops=ideal.flops, bound=ideal.bound, memory_time_s=0.0,
                        compute_time_s=0.0, overhead_time_s=parts["engine"], comm_time_s=parts["allreduce"])

    def pass_time_s(self, batch: int = 1, positions: int = 1, context: int = 0,
                    cross_context: int | None = None) -> float:
        return self.pass_cost(batch, positions, context, cross_context).time_s

    def prefill_cost(self, batch: int, prompt_len: int) -> PassCost:
        ideal = self.roof.prefill_cost(batch, prompt_len)
        parts = self.kernels.prefill_parts(batch, prompt_len)
        t = sum(parts.values()) + self.pass_s
        return PassCost(positions=prompt_len, batch=batch, context=0, time_s=t, bytes=ideal.bytes,
                        flops=ideal.flops, bound=ideal.bound, memory_time_s=0.0, compute_time_s=0.0,
                        overhead_time_s=self.pass_s, comm_time_s=parts["allreduce"])

    def ragged_pricer(self) -> "RaggedPricer":
        """A pricer of ragged steps for the vllm-v1 engine profile (`RaggedPricer`)."""
        return RaggedPricer(self)

    def step_once_cost(self, batch: int) -> tuple[float, float, float]:
        """EAGLE-3's projection once per step, as the measured GEMM over the batch (bytes / FLOPs ideal)."""
        if not self.once_gemms:
            return 0.0, 0.0, 0.0
        _, b, f = self.roof.step_once_cost(batch)
        return self.kernels.gemm_s(self.once_gemms, batch), b, f


def model_cost(model, hardware: HardwareProfile, engine: str, version: str, tp: int, terms: EngineTerms,
               role: str = "target", method: str = "draft_model", kv_budget_tokens: int | None = None):
    """A target (role 'target': the plain step term) or a draft model (the per-draft-pass term) on a measured
    stack."""
    roof = CostModel(model, hardware, IDEAL_STACK, tp=tp, kv_budget_tokens=kv_budget_tokens)
    moe = bool(getattr(model, "n_experts", None))
    k = kd.pricer(kd.model_path(model), hardware.measured_system, engine, version, roof.tp, moe)
    if role == "target":
        return MeasuredCost(roof, k, terms.step_s, terms.sources.get("step_s", ""), terms.verify_s)
    s, src = terms.draft_term(method)
    return MeasuredCost(roof, k, s, src)


def head_gemms(head) -> tuple[tuple, tuple]:
    """(per-pass, once-per-step) GEMMs a one-layer Llama of the head's shape lacks: the feature projection
    (fc_input_multiple·d -> d; EAGLE-3's once per step, as `methods.pricing.LayerHeadCost` says) and EAGLE-3's
    q/k/v widened from d to 2·d inputs (priced as a second GEMM over the extra d inputs). Medusa: its K residual
    blocks (d x d) and K LM heads (V x d), all the pass has."""
    d = head.d_model
    if head.method == "medusa":
        return (("medusa_res_gemm", float(head.medusa_heads), d, d),
                ("medusa_lm_gemm", float(head.medusa_heads), head.lm_head_vocab, d)), ()
    per, once = [], []
    if head.fc_input_multiple:
        (once if head.method == "eagle3" else per).append(("head_fc_gemm", 1.0, d, head.fc_input_multiple * d))
    if head.attention_input_multiple > 1:
        qkv = (head.n_heads + 2 * head.n_kv_heads) * head.head_dim
        per.append(("head_qkv_extra_gemm", float(head.n_layers), qkv, (head.attention_input_multiple - 1) * d))
    return tuple(per), tuple(once)


# our choice: rows of more new tokens than this are prefill chunks (context-attention table); up to it a row is a
# decode or a verification (k + 1 <= 16: vLLM's num_speculative_tokens in practice), its cache read once
CHUNK_MIN_TOKENS = 16
KV_BUCKET = 16  # decode attention priced at the batch's mean KV length rounded to this many tokens (cache hits)


class RaggedPricer:
    """`price(new, ctx, logits)` of one vllm-v1 step on a measured stack: every op but attention at the step's T
    tokens, the LM head at its logit positions (default one per request: vLLM computes no logits for a prefill
    chunk's other tokens);
    attention = the decode kernel over the decode / verification rows at their mean KV length + the
    context-attention table per prefill chunk; plus the engine's own term once per step. Bytes and FLOPs: the
    ideal roofline's ragged pricer (`specsim.cost.ragged.RooflinePricer`), for MBU / MFU."""

    def __init__(self, cm: MeasuredCost):
        from specsim.cost.ragged import RooflinePricer  # lazily: the ideal ragged pricer

        self.cm, self.k, self.model = cm, cm.kernels, cm.model
        self.roof = RooflinePricer(cm.roof)

    def price(self, new, ctx, logits=None) -> tuple[float, float, float]:
        _, b, f = self.roof.price(new, ctx)
        rows = [(int(n), int(self.cm.roof.kv_context(int(c)))) for n, c in zip(new, ctx) if n > 0]
        if not rows:
            return 0.0, 0.0, 0.0
        tokens = sum(n for n, _ in rows)
        P = len(rows) if logits is None else int(sum(int(p) for p, n in zip(logits, new) if n > 0))
        check_logit_positions(tokens, len(rows), P)
        t = self.k.tokens_rest_s(len(rows), tokens, P) + self.cm.pass_s
        short = [c + n for n, c in rows if n <= CHUNK_MIN_TOKENS]
        if short:
            mean = sum(short) / len(short)
            t += self.k.decode_attention_s(len(short), max(1, int(round(mean / KV_BUCKET)) * KV_BUCKET))
        t += sum(self.k.chunk_attention_s(n, c) for n, c in rows if n > CHUNK_MIN_TOKENS)
        return t, b, f
