"""vLLM V1's scheduler and speculative step, simulated step by step (the engine of the `vllm-v1` profile).

Rules, each from vLLM 0.32's code (the CPU build this project measured; paths under `vllm/`):
- One engine step schedules under a token budget `max_num_batched_tokens` and at most `max_num_seqs` running
  requests (`v1/core/sched/scheduler.py Scheduler.schedule`). RUNNING requests first, in order: each asks for
  `num_tokens_with_spec − num_computed_tokens` tokens (its remaining prompt chunk, or 1 + its drafts), cut to the
  budget — chunked prefill, mixed with decodes in one step; then, only if no request was preempted in this step,
  WAITING requests in FCFS order while the budget and `max_num_seqs` allow, their prompt chunked to the budget.
  `long_prefill_token_threshold` caps one request's chunk when more than one request is eligible.
- KV in blocks of `block_size` tokens (`v1/core/kv_cache_manager.py allocate_slots`): a request holds
  ceil((computed + scheduled + lookahead) / block_size) blocks, lookahead = num_speculative_tokens with a draft
  model (`config/vllm.py VllmConfig.num_lookahead_tokens`); target and draft layers share one block pool, whose
  size is what the engine reports (`num_gpu_blocks`; default here: 90% of device memory — vLLM's
  gpu_memory_utilization — less the weights, over block_size × the KV bytes per token of both models).
- Out of blocks: preempt the last running request (FCFS policy: `self.running.pop()`), free its blocks and reset
  its computed tokens to 0 — preemption by recompute (`Scheduler._preempt_request`); it goes back to the head of
  the waiting queue and later re-prefills prompt + the output it already has. A request that cannot fit in an
  empty pool is refused up front.
- A speculative step (`v1/spec_decode/llm_base_proposer.py propose`, `draft_model.py`): the target runs one pass
  over every scheduled token — each decode's 1 + k tokens (its last token and the k drafts proposed in the
  previous step) and the prefill chunks — the rejection sampler keeps the leading accepted drafts plus one token;
  then the draft runs in every step, over every scheduled request: one draft pass over the same scheduled tokens
  (the draft builds its KV of the prompt in the same step) plus the method's new input slots per request — one
  for a draft model, whose inputs do not shift: each request's sampled token takes a slot after its scheduled
  tokens (`set_inputs_first_pass`, `extend_all_queries_by_N`; `specsim.methods` `draft_input_slots`) — and
  k − 1 passes of one token per scheduled request.
  The drafter's batch is padded to all of the step's requests (`v1/worker/gpu_model_runner.py`: the drafter runs
  whenever the input fits, `disable_padded_drafter_batch` defaults to False; `propose` takes batch_size =
  common_attn_metadata.batch_size()): a request whose prefill chunk does not finish the prefill gets drafts that
  the scheduler drops, and a step of such chunks alone still pays the draft's passes. So a request's first token
  (TTFT) comes at the end of the step that finished its prefill, including the draft's passes, and a request's
  last step still pays for drafts it never uses (as vLLM does).
- Logits: the target computes them at each scheduled request's last token (a prefill chunk's too, sampled and
  dropped) and, for a request verifying d drafts, at all its d + 1 positions (`v1/worker/gpu_model_runner.py
  _calc_spec_decode_metadata` logits_indices, which the CPU runner inherits); `logit_positions` passes them to
  the target's pricer (one that has no term for them ignores them).
- Tokens reach the client at the end of the step that produced them; a request finishes when it has
  `output_len` tokens (max_tokens with ignore_eos) and frees its blocks then.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from specsim.engine.acceptance import accepted_in_step
from specsim.cost.roofline import kv_bytes_per_token_per_chip
from specsim.errors import DoesNotFitError
from specsim.engine.metrics import Records, RequestStep, StepRow, request_step_columns, step_columns

GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default (config/cache.py CacheConfig.gpu_memory_utilization)


@dataclass(frozen=True)
class VllmV1Config:
    """The scheduler's knobs, named as vLLM names its flags."""

    max_num_seqs: int = 256                 # engine/arg_utils.py default for the OpenAI server (non-H100 class)
    max_num_batched_tokens: int = 2048      # idem; 8192 on H100/H200, 16384 at >= 160 GB
    block_size: int = 16                    # config/cache.py default on GPUs; the CPU platform uses 128
    num_gpu_blocks: int | None = None       # the pool the engine reports; None = from device memory
    long_prefill_token_threshold: int = 0   # 0 = off (vLLM's default)


class _Req:
    __slots__ = ("i", "prompt", "out", "computed", "emitted", "drafts", "blocks", "pos", "gen", "admitted")

    def __init__(self, i: int, prompt: int, out: int):
        self.i, self.prompt, self.out = i, prompt, out
        self.computed = self.emitted = self.drafts = self.blocks = 0
        self.pos, self.gen, self.admitted = 0, None, False


class VllmV1Engine:
    """Simulate one replica of vLLM serving `wl`; `draft` None (k = 0) is plain decoding."""

    def __init__(self, wl, cfg: VllmV1Config, target, draft=None, acc=None, k: int = 0,
                 blocks: int | None = None, draft_slots: int = 0):
        self.wl, self.cfg, self.target, self.draft, self.acc = wl, cfg, target, draft, acc
        self.k = int(k) if draft is not None else 0
        self.draft_slots = int(draft_slots)  # new input slots per request in the draft's first pass (module doc)
        self.lookahead = self.k
        self.free_blocks = int(blocks if blocks is not None else 1 << 62)
        self.total_blocks = self.free_blocks
        n = wl.n
        self.arrival = wl.arrival_s.astype(float).copy()
        self.admit, self.first, self.finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.steps: list[StepRow] = []
        self.rs: list[RequestStep] = []
        self.scheduled: list[tuple[int, int, int]] = []  # per step: (tokens, requests, prefill-chunk tokens)
        self.preemptions = 0
        self.reqs = [_Req(i, int(wl.prompt_len[i]), int(wl.output_len[i])) for i in range(n)]
        worst = max((self._blocks_for(r.prompt + r.out) for r in self.reqs), default=0)
        if worst > self.total_blocks:
            raise DoesNotFitError(f"does not fit: one request needs {worst} KV blocks of {cfg.block_size} tokens "
                                  f"but the pool has {self.total_blocks}; allowed: shorter requests, a larger "
                                  f"--num-gpu-blocks or device")

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil((tokens + self.lookahead) / self.cfg.block_size)

    # --- scheduling (Scheduler.schedule) -------------------------------------------------------------------
    def _alloc(self, r: _Req, n: int) -> bool:
        need = self._blocks_for(r.computed + n) - r.blocks
        if need <= self.free_blocks:
            self.free_blocks -= max(need, 0)
            r.blocks += max(need, 0)
            return True
        return False

    def _free(self, r: _Req) -> None:
        self.free_blocks += r.blocks
        r.blocks = 0

    def _chunk(self, want: int, budget: int, eligible: int) -> int:
        thr = self.cfg.long_prefill_token_threshold
        if eligible > 1 and 0 < thr < want:
            want = thr
        return min(want, budget)

    def schedule(self, running: list, waiting: deque) -> list[tuple[_Req, int]]:
        budget = self.cfg.max_num_batched_tokens
        eligible = len(running) + len(waiting)
        out, preempted, idx = [], False, 0
        while idx < len(running) and budget > 0:
            r = running[idx]
            n = self._chunk(r.prompt + r.emitted + r.drafts - r.computed, budget, eligible)
            ok = True
            while not self._alloc(r, n):
                victim = running.pop()  # FCFS: the lowest priority is the last one admitted
                self._preempt(victim, waiting, out)
                preempted = True
                if victim is r:
                    ok = False
                    break
            if not ok:
                break
            out.append((r, n))
            budget -= n
            idx += 1
        if preempted:
            return out
        while waiting and budget > 0 and len(running) < self.cfg.max_num_seqs:
            r = waiting[0]
            n = self._chunk(r.prompt + r.emitted - r.computed, budget, eligible)
            if not self._alloc(r, n):
                break
            waiting.popleft()
            running.append(r)
            out.append((r, n))
            budget -= n
        return out

    def _preempt(self, r: _Req, waiting: deque, scheduled: list) -> None:
        self._free(r)
        r.computed, r.drafts = 0, 0
        waiting.appendleft(r)
        self.preemptions += 1
        for j, (s, _) in enumerate(scheduled):
            if s is r:
                del scheduled[j]
                break

    # --- one step ------------------------------------------------------------------------------------------
    def step(self, sched: list, now: float) -> tuple[float, list]:
        new = np.array([n for _, n in sched], dtype=np.int64)
        ctx = np.array([r.computed for r, _ in sched], dtype=np.int64)
        pos = logit_positions(sched)
        t, b, f = self.target.price(new, ctx, pos)
        sampled, finished = [], []
        prefill_tokens = sum(n for r, n in sched if r.emitted == 0 or r.computed < r.prompt + r.emitted - 1)
        for (r, n), p in zip(sched, pos):
            if r.computed + n < r.prompt + r.emitted:  # a prefill chunk that does not finish the prefill
                r.computed += n
                continue
            d = int(p) - 1  # drafts verified (the budget may have cut some): logit positions less the sampled one
            first = r.emitted == 0
            a = accepted_in_step(self.acc, r.gen, d, r.pos) if d > 0 else 0  # r.gen set at its first token
            r.computed += n - (d - a)
            gain = min(a + 1, r.out - r.emitted)
            if not first and self.acc is not None:
                r.pos += gain
            r.emitted += gain
            sampled.append((r, first, a, d))
            if r.emitted >= r.out:
                finished.append(r)
            r.drafts = 0
        if self.k and sched:  # the draft: one pass over the step's tokens (+ its new slots), then k − 1 one-token
            dt, db, df = self.draft.price(new + self.draft_slots, ctx)  # passes (all requests)
            rows = np.array([r.computed for r, _ in sched], dtype=np.int64)
            for j in range(self.k - 1):
                st, sb, sf = self.draft.price(np.ones(len(rows), np.int64), rows + j)
                dt, db, df = dt + st, db + sb, df + sf
            t, b, f = t + dt, b + db, f + df
            for r, *_ in sampled:
                if r.emitted < r.out:
                    r.drafts = self.k
        end = now + t
        si = len(self.steps)
        self.scheduled.append((int(new.sum()), len(sched), prefill_tokens))
        self.steps.append(StepRow(end, t, len(sched), self.k, b, f))
        for r, first, a, d in sampled:
            if first:
                self.first[r.i] = end
                if self.acc is not None and r.gen is None:
                    r.gen = self.acc.generator(r.i)
                    r.pos = int(self.acc.walk_start(r.i)) + 1
            else:
                self.rs.append(RequestStep(si, r.i, a, d))
        return end, finished

    # --- the loop ------------------------------------------------------------------------------------------
    def run(self) -> Records:
        wl, n = self.wl, self.wl.n
        conc = wl.concurrency
        running: list = []
        waiting: deque = deque()
        nxt, done, now = 0, 0, 0.0
        if conc is not None:
            for _ in range(min(conc, n)):
                self.arrival[nxt] = 0.0
                waiting.append(self.reqs[nxt])
                nxt += 1
        while done < n:
            if conc is None:
                while nxt < n and self.arrival[nxt] <= now:
                    waiting.append(self.reqs[nxt])
                    nxt += 1
                if not running and not waiting:
                    now = float(self.arrival[nxt])
                    continue
            sched = self.schedule(running, waiting)
            if not sched:  # pragma: no cover - the up-front fit check makes this unreachable
                raise RuntimeError("vllm-v1 engine: nothing schedulable")
            for r, _ in sched:
                if not r.admitted:
                    r.admitted = True
                    self.admit[r.i] = now
            now, finished = self.step(sched, now)
            for r in finished:
                self.finish[r.i] = now
                self._free(r)
                running.remove(r)
                done += 1
                if conc is not None and nxt < n:
                    self.arrival[nxt] = now
                    waiting.append(self.reqs[nxt])
                    nxt += 1
        return self._records()

    def _records(self) -> Records:
        return Records(arrival_s=self.arrival, admit_s=self.admit, first_token_s=self.first, finish_s=self.finish,
                       output_len=self.wl.output_len, **step_columns(self.steps), **request_step_columns(self.rs))


def logit_positions(sched: list) -> np.ndarray:
    """Per scheduled (request, tokens): the positions whose logits the step computes — 1 + the drafts it verifies
    (those of its tokens past the prompt and output it has: a step's request is 1 + d tokens beyond them)."""
    return np.array([1 + max(0, r.computed + n - (r.prompt + r.emitted)) for r, n in sched], dtype=np.int64)


def pool_blocks(cfg: VllmV1Config, cost_models: list, spec: bool) -> int:
    """KV blocks of the pool: the engine's reported figure, or from memory (vLLM's profile run, simplified)."""
    if cfg.num_gpu_blocks is not None:
        return cfg.num_gpu_blocks
    cms = cost_models if spec else cost_models[:1]
    cm0 = cms[0]
    cap = cm0.hardware.memory_capacity_gb * 1e9 * GPU_MEMORY_UTILIZATION
    weights = sum(cm.model.weight_bytes for cm in cms) / cm0.tp
    per_token = sum(kv_bytes_per_token_per_chip(cm.model, cm.tp) for cm in cms)
    free = cap - weights
    if free <= 0:
        raise DoesNotFitError(f"does not fit: weights {weights / 1e9:.2f} GB per chip exceed "
                              f"{GPU_MEMORY_UTILIZATION:g} of {cm0.hardware.name}'s "
                              f"{cm0.hardware.memory_capacity_gb:g} GB; allowed: a larger --tp or device")
    return int(free // (cfg.block_size * per_token))
