"""Durations (and bytes, FLOPs) of one engine iteration, from the cost model, cached for speed.

- Target and draft run on the same hardware and stack (stack None → the hardware's default_stack, 'ideal' → the
  idealized roofline); the draft's TP degree may differ (`Memory` divides each model's weights by its own).
- The speculation method (`specsim.methods`, `method=`) says how many draft passes a step of γ proposals runs:
  γ for chain proposers (a draft model, an EAGLE / MTP head), 1 for Medusa and the n-gram / suffix lookups
  (`Method.passes`); the draft's cost model is the method's (`specsim.methods.pricing`). None = draft_model.
- Every pass is priced at the live context: for a batch, the context argument is the mean live KV length over the
  batch and the batch argument is B, which is exact for the roofline (KV bytes and attention FLOPs are linear in
  the per-sequence context, so B·mean = Σ).
- A speculative iteration: γ draft passes (B sequences × 1 position, context L̄ + k for pass k) and one
  verification pass (B × (γ + 1) positions at L̄). The γ draft passes are priced as γ·T(B, 1, L̄ + (γ − 1)/2),
  exact while the pass time is linear in context (it is, within one roofline regime).
- Cache: pass costs are evaluated at context buckets of CONTEXT_BUCKET tokens and linearly interpolated between
  them (exact within one regime; error only where a pass crosses memory→compute inside a bucket).
- Encoder-decoder models: the decoder's self-attention context is the output so far; the encoder output
  (cross-attention context) is the prompt. Prefill = the encoder pass (+ one decoder pass for the target, which
  produces output token 0); decoder-only prefill = one pass over the prompt, which produces token 0.
- A token tree (`specsim.methods.tree`): the verification carries its N nodes + the root, and its D draft passes
  carry its frontiers (n_{d−1} positions for pass d; one pass for a one-pass method), all at the chain's contexts.
- fixed_c mode (to check eq. 5): a target pass costs 1 unit whatever its positions (free verification), a draft
  pass costs c units, prefill is free; bytes and FLOPs are then unknown (MBU/MFU reported as None).
- Draft catch-up (`draft_catchup=True`, what HF-style executors such as specsim's own do): after a clean sweep the
  draft never consumed its last draft, so the next step's first draft pass feeds 2 positions (that draft and the
  bonus token) for that sequence. With K of the B sequences catching up, the first draft pass costs
  T(B, 1, L̄) + (K / B)·(T(B, 2, L̄) − T(B, 1, L̄)) — exact at batch 1, linear in the rows in between. Off by
  default: on accelerators a 2-position pass costs what a 1-position one does; on a CPU it can cost ~2x.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from specsim.cost.roofline import CostModel, check_fits, cost_ratio_c, first_step_context, kv_bytes_per_token_per_chip
from specsim.errors import DoesNotFitError

# our choice: one cached segment per 16 tokens of context keeps the tables small, and the interpolation is exact
# within a roofline regime (module doc); the golden outputs depend on it, so changing it changes results
CONTEXT_BUCKET = 16


_SHARED: dict = {}  # roofline CostModel setup → (its profile objects, the segment cache); see PassTable


class Segment(NamedTuple):
    """One pass's cost over one context bucket: its value at the bucket's start and its slope per context token
    (a pass at context L in the bucket costs start + (L − bucket start) · slope)."""

    time_s: float
    time_s_per_token: float
    bytes: float
    bytes_per_token: float
    flops: float
    flops_per_token: float


class PassTable:
    """T(B, P, L, X) of one model, interpolated over L from cached bucket endpoints.

    A plain roofline `CostModel` is a pure function of its (immutable, per-process cached) profiles, TP degree and
    cross context, so tables of the same setup share one segment cache across runs (a sweep prices the same passes
    point after point); any other cost model gets its own."""

    def __init__(self, cm: CostModel):
        self.cm = cm
        if type(cm) is not CostModel:
            self._seg = lru_cache(maxsize=1 << 16)(self._segment)
            return
        refs = (cm.model, cm.hardware, cm.stack, cm.tp, cm.cross_context, cm.kv_budget_tokens)
        key = tuple(id(r) for r in refs[:3]) + refs[3:]
        hit = _SHARED.get(key)
        if hit is not None and all(x is y for x, y in zip(hit[0][:3], refs[:3])):
            self._seg = hit[1]
            return
        if len(_SHARED) >= 32:  # our choice: a sweep uses a handful of setups; bounded so profiles can be freed
            _SHARED.pop(next(iter(_SHARED)))
        self._seg = lru_cache(maxsize=1 << 16)(self._segment)
        _SHARED[key] = (refs, self._seg)  # holds the profiles, so their ids stay theirs

    # cache sizes (1 << 16 segments here and in StepCosts, 1 << 14 prefills) are our choice: a batch-64 sweep point
    # touches ~10³ of each; the bound only keeps a long-lived process from growing without limit
    def _segment(self, B: int, P: int, i: int, X: int) -> Segment:
        W = CONTEXT_BUCKET
        lo = self.cm.pass_cost(B, P, i * W, X)
        hi = self.cm.pass_cost(B, P, (i + 1) * W, X)
        return Segment(lo.time_s, (hi.time_s - lo.time_s) / W, lo.bytes, (hi.bytes - lo.bytes) / W,
                       lo.flops, (hi.flops - lo.flops) / W)

    def vec(self, P: int, L: np.ndarray, X: int = 0):
        """Batch-1 passes at many contexts: segment start + offset·slope, the arithmetic `StepCosts.spec_step`
        does per step, so results are bit-identical."""
        idx = (L // CONTEXT_BUCKET).astype(np.int64)
        segs = np.array([self._seg(1, P, int(i), X) for i in range(int(idx.max()) + 1)]) if len(L) else \
            np.zeros((1, 6))
        # one array per Segment field, in its order (= segs[idx][:, k], cheaper)
        t0, st, b0, sb, f0, sf = (np.ascontiguousarray(segs[:, k]).take(idx) for k in range(len(Segment._fields)))
        d = L - idx * CONTEXT_BUCKET
        return t0 + d * st, b0 + d * sb, f0 + d * sf


class StepCosts:
    """Iteration durations for the speculative engine and its baseline."""

    def __init__(self, target: CostModel | None, draft: CostModel | None, fixed_c: float | None = None,
                 draft_catchup: bool = False, method=None, gamma: int = 1, tree=None):
        self.fixed_c = fixed_c
        self.tree = tree  # a specsim.methods.tree.Tree: verify its nodes + 1, draft its frontiers (module doc)
        self.method = method  # a specsim.methods.Method; None = draft_model (γ passes per step)
        self.one_pass = bool(getattr(method, "one_pass", False))
        self.c_divisor = method.c_divisor(gamma) if method is not None else 1
        self._gamma = int(gamma)
        self.catchup = bool(draft_catchup) and fixed_c is None  # under fixed_c a draft pass is c whatever its rows
        self.target, self.draft = target, draft
        # a per-step cost beside the passes (EAGLE-3's projection: `methods.pricing.LayerHeadCost.step_once_cost`)
        self._once_cost = lru_cache(maxsize=4096)(draft.step_once_cost) if getattr(draft, "step_once_params", 0) \
            else None  # per batch size: a step prices it once, not once per call
        if fixed_c is None:
            self.enc_dec = target.model.architecture == "encoder-decoder"
            self.t, self.d = PassTable(target), PassTable(draft)
            self._prefill = lru_cache(maxsize=1 << 14)(self._prefill_uncached)
            self._steps: dict = {}  # (B, G, bucket, draft bucket, X) → the two pass segments (spec_step)
        else:
            self.enc_dec = False

    # --- live context of a request that has emitted e tokens (e >= 1) -----------------------------
    def context(self, prompt_len, emitted):
        """KV entries already cached: prompt + emitted − 1 (decoder-only) or emitted − 1 (enc-dec decoder)."""
        return prompt_len * 0 + emitted - 1 if self.enc_dec else prompt_len + emitted - 1

    def cross(self, prompt_len):
        return prompt_len if self.enc_dec else 0

    # --- prefill ------------------------------------------------------------------------------------
    def _prefill_uncached(self, k: int, prompt: int, spec: bool):
        t = self.target.prefill_cost(k, prompt)
        time, b, f = t.time_s, t.bytes, t.flops
        if self.enc_dec:  # the target decoder's first step produces output token 0
            p = self.target.pass_cost(k, 1, 0, prompt)
            time, b, f = time + p.time_s, b + p.bytes, f + p.flops
        if spec:
            d = self.draft.prefill_cost(k, prompt)
            time, b, f = time + d.time_s, b + d.bytes, f + d.flops
        return time, b, f

    def prefill(self, k: int, prompt_mean: float, spec: bool):
        if self.fixed_c is not None:
            return 0.0, 0.0, 0.0
        return self._prefill(k, int(round(prompt_mean)), spec)

    # --- decode iterations -----------------------------------------------------------------------------
    def spec_step(self, B: int, G: int, L: float, X: float = 0.0, K: int = 0):
        """One iteration; K = sequences whose first draft pass catches up 2 positions (see the module doc)."""
        if self.fixed_c is not None:
            return G * self.fixed_c + 1.0, 0.0, 0.0
        if self.tree is not None and G:
            return self._tree_step(B, G, L, int(round(X)))
        # = T_t(B, G + 1, L) + G·T_d(B, 1, L + (G − 1)/2), term by term; both segments from one dict lookup
        Xi = int(round(X))
        i = int(L // CONTEXT_BUCKET)
        Ld = L + (G - 1) / 2
        i2 = int(Ld // CONTEXT_BUCKET)
        key = (B, G, i, i2, Xi)
        seg = self._steps.get(key)
        if seg is None:
            if len(self._steps) >= 1 << 16:
                self._steps.clear()
            seg = self._steps[key] = (self.t._seg(B, G + 1, i, Xi), self.d._seg(B, 1, i2, Xi) if G else None)
        (t0, st, b0, sb, f0, sf), ds = seg
        d = L - i * CONTEXT_BUCKET
        t, b, f = t0 + d * st, b0 + d * sb, f0 + d * sf
        if G:
            d2 = Ld - i2 * CONTEXT_BUCKET
            dt0, dst, db0, dsb, df0, dsf = ds
            n = 1 if self.one_pass else G  # draft passes this step (Method.passes)
            t, b, f = t + n * (dt0 + d2 * dst), b + n * (db0 + d2 * dsb), f + n * (df0 + d2 * dsf)
            if K:
                ct, cb, cf = self.catchup_extra(B, L, Xi)
                w = K / B
                t, b, f = t + w * ct, b + w * cb, f + w * cf
            if self._once_cost is not None:
                ot, ob, of = self._once_cost(B)
                t, b, f = t + ot, b + ob, f + of
        return t, b, f

    def _tree_passes(self) -> tuple[int, ...]:
        """Positions of each draft pass of a tree step: its frontiers (one pass of 1 for a one-pass method)."""
        return (1,) if self.one_pass else self.tree.frontiers

    def _tree_step(self, B: int, G: int, L: float, Xi: int):
        """A token-tree step: T_t(B, N + 1, L) + Σ_d T_d(B, n_{d−1}, L + (D − 1)/2) (the tree's N nodes and the
        root verified in one pass; pass d drafts from the n_{d−1} nodes of depth d − 1; mean context as a chain's)."""
        i = int(L // CONTEXT_BUCKET)
        Ld = L + (G - 1) / 2
        i2 = int(Ld // CONTEXT_BUCKET)
        key = ("tree", B, i, i2, Xi)
        seg = self._steps.get(key)
        if seg is None:
            drafts = [self.d._seg(B, f, i2, Xi) for f in self._tree_passes()]
            seg = self._steps[key] = (self.t._seg(B, self.tree.nodes + 1, i, Xi),
                                      tuple(sum(x[k] for x in drafts) for k in range(len(Segment._fields))))
        (t0, st, b0, sb, f0, sf), (dt0, dst, db0, dsb, df0, dsf) = seg
        d, d2 = L - i * CONTEXT_BUCKET, Ld - i2 * CONTEXT_BUCKET
        ot, ob, of = self._once_cost(B) if self._once_cost is not None else (0.0, 0.0, 0.0)
        return (t0 + d * st + dt0 + d2 * dst + ot, b0 + d * sb + db0 + d2 * dsb + ob,
                f0 + d * sf + df0 + d2 * dsf + of)

    def _tree_vec(self, G: int, L: np.ndarray, x: int):
        """`_tree_step` at batch 1 over many contexts (element by element the same sums)."""
        tt, bb, ff = self.t.vec(self.tree.nodes + 1, L, x)
        for f in self._tree_passes():
            dt, db, df = self.d.vec(f, L + (G - 1) / 2, x)
            tt, bb, ff = tt + dt, bb + db, ff + df
        if self._once_cost is not None:
            ot, ob, of = self._once_cost(1)
            tt, bb, ff = tt + ot, bb + ob, ff + of
        return tt, bb, ff

    def catchup_extra(self, B: int, L: float, Xi: int):
        """T(B, 2, L) − T(B, 1, L) of the draft (and bytes, FLOPs): what catching up costs when all B do."""
        i = int(L // CONTEXT_BUCKET)
        d = L - i * CONTEXT_BUCKET
        one, two = self.d._seg(B, 1, i, Xi), self.d._seg(B, 2, i, Xi)
        return ((two.time_s + d * two.time_s_per_token) - (one.time_s + d * one.time_s_per_token),
                (two.bytes + d * two.bytes_per_token) - (one.bytes + d * one.bytes_per_token),
                (two.flops + d * two.flops_per_token) - (one.flops + d * one.flops_per_token))

    def plain_step(self, B: int, L: float, X: float = 0.0):
        if self.fixed_c is not None:
            return 1.0, 0.0, 0.0
        Xi = int(round(X))
        i = int(L // CONTEXT_BUCKET)
        t0, st, b0, sb, f0, sf = self.t._seg(B, 1, i, Xi)
        d = L - i * CONTEXT_BUCKET
        return t0 + d * st, b0 + d * sb, f0 + d * sf

    def spec_step_vec(self, G: np.ndarray, L: np.ndarray, X: np.ndarray, K: np.ndarray | None = None):
        """Batch-1 iterations, vectorized (bit-identical to `spec_step` element by element); K ∈ {0, 1} per step
        (catch-up, used when `catchup`)."""
        n = len(G)
        if self.fixed_c is not None:
            return G * self.fixed_c + 1.0, np.zeros(n), np.zeros(n)
        t, b, f = np.zeros(n), np.zeros(n), np.zeros(n)
        Xi = np.rint(X).astype(np.int64)
        gs = G[:1] if n and (G == G[0]).all() else np.unique(G)
        xs = Xi[:1] if n and (Xi == Xi[0]).all() else np.unique(Xi)
        for g in gs:
            for x in xs:
                m = slice(None) if len(gs) == 1 and len(xs) == 1 else np.flatnonzero((G == g) & (Xi == x))
                if g and self.tree is not None:
                    t[m], b[m], f[m] = self._tree_vec(int(g), L[m], int(x))
                    continue
                tt, bb, ff = self.t.vec(int(g) + 1, L[m], int(x))
                if g:
                    dt, db, df = self.d.vec(1, L[m] + (int(g) - 1) / 2, int(x))
                    n = 1 if self.one_pass else int(g)  # draft passes this step (Method.passes)
                    tt, bb, ff = tt + n * dt, bb + n * db, ff + n * df
                    if self._once_cost is not None:
                        ot, ob, of = self._once_cost(1)
                        tt, bb, ff = tt + ot, bb + ob, ff + of
                t[m], b[m], f[m] = tt, bb, ff
        if self.catchup and K is not None and n and K.any():
            wide = (K > 0) & (G > 0)  # a step without draft passes (oracle γ = 0) has no pass to widen
            for x in np.unique(Xi[wide]):
                m = np.flatnonzero(wide & (Xi == x))
                one, two = self.d.vec(1, L[m], int(x)), self.d.vec(2, L[m], int(x))
                t[m], b[m], f[m] = (t[m] + (two[0] - one[0]), b[m] + (two[1] - one[1]), f[m] + (two[2] - one[2]))
        return t, b, f

    def plain_step_vec(self, L: np.ndarray, X: np.ndarray):
        n = len(L)
        if self.fixed_c is not None:
            return np.ones(n), np.zeros(n), np.zeros(n)
        return self.spec_step_vec(np.zeros(n, dtype=np.int64), L, X)

    # --- c and memory ----------------------------------------------------------------------------------
    def derived_c(self, prompt_len: int, batch: int = 1) -> float:
        """c of these costs: fixed_c when set, else `roofline.cost_ratio_c` (the one definition) — per proposal:
        a one-pass method's step pass serves γ tokens, so its c_eff is the pass's ratio / γ (`Method.c_divisor`);
        a per-step cost (EAGLE-3's fc) adds its share, once-cost / γ, to each proposal's."""
        if self.fixed_c is not None:
            return float(self.fixed_c)
        c = cost_ratio_c(self.target, self.draft, prompt_len, batch)
        if self._once_cost is not None:  # a per-step cost shared by the step's γ proposals (EAGLE-3's fc)
            L, X = first_step_context(self.target, prompt_len)
            c += self._once_cost(batch)[0] / max(1, self._gamma) / self.target.pass_time_s(batch, 1, L, X)
        return c / self.c_divisor if self.c_divisor != 1 else c


class Memory:
    """KV admission control for one replica: weights + reserved KV must fit in the device memory (per chip).

    Admission reserves a request's worst case up front — prompt + output + the transient draft positions
    (γ_max + 1) of the verification pass, for the target's and (speculating) the draft's KV — and frees it when the
    request finishes. Rejected drafts roll back, so the reservation never grows; no preemption is modelled."""

    def __init__(self, models: list[CostModel], spec_extra: int):
        self.models = models
        self.extra = int(spec_extra)
        cm0 = models[0]
        self.tp = cm0.tp
        self.capacity = cm0.hardware.memory_capacity_gb * 1e9
        if all(cm.tp == self.tp for cm in models):  # one TP degree: summed, then split (as always)
            self.weights = sum(_weight_bytes(cm) for cm in models) / self.tp
        else:  # a draft on its own TP degree (draft_tp): each model's weights split its own way
            self.weights = sum(_weight_bytes(cm) / cm.tp for cm in models)
        self.kv_per_token = sum(_kv_per_token(cm) for cm in models)  # KV heads replicate
        # a model with a KV budget (the draft's draft_kv_budget_tokens) keeps at most that many tokens per request
        self.capped = [(_kv_per_token(cm), cm.kv_budget_tokens) for cm in models
                       if getattr(cm, "kv_budget_tokens", None) is not None]
        cross = [cm.model.cross_kv_bytes_per_token for cm in models]
        self.cross_per_token = sum(cross) / self.tp if all(cm.tp == self.tp for cm in models) else \
            sum(x / cm.tp for x, cm in zip(cross, models))
        self.enc_dec = cm0.model.architecture == "encoder-decoder"

    def request_bytes(self, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
        if self.enc_dec:
            return (output + self.extra) * self.kv_per_token + prompt * self.cross_per_token
        tokens = prompt + output + self.extra
        out = tokens * self.kv_per_token
        for per_token, budget in self.capped:  # that model's share counted up to its budget only
            out = out - (tokens - np.minimum(tokens, budget)) * per_token
        return out

    @property
    def kv_budget(self) -> float:
        return self.capacity - self.weights

    def check_one(self, prompt: int, output: int) -> None:
        """Refuse a setup where even the largest single request cannot fit (DoesNotFitError with the figures)."""
        ctx = (output if self.enc_dec else prompt + output) + self.extra
        check_fits(self.models, 1, ctx)
        need = float(self.request_bytes(np.array([prompt]), np.array([output]))[0])
        if need > self.kv_budget:
            raise DoesNotFitError(
                f"does not fit: one request (prompt {prompt}, output {output}) needs {need / 1e9:.2f} GB of KV "
                f"(incl. cross-attention) per chip beside {self.weights / 1e9:.2f} GB of weights, but "
                f"{self.models[0].hardware.name} has {self.capacity / 1e9:g} GB; allowed: a larger --tp, shorter "
                f"requests or a larger device")


def _weight_bytes(cm) -> float:
    """All chips' weights of one model: a head's own (`own_weight_bytes`: a shared LM head not counted twice)."""
    own = getattr(cm, "own_weight_bytes", None)
    return cm.model.weight_bytes if own is None else own


def _kv_per_token(cm) -> float:
    """KV bytes per token per chip: a method's head says its own (Medusa: none), a model follows its profile."""
    if getattr(cm, "own_weight_bytes", None) is not None:
        return cm.kv_bytes_per_token_per_chip
    return kv_bytes_per_token_per_chip(cm.model, cm.tp)
