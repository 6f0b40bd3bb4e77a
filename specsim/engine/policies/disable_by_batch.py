"""disable_by_batch_size: vLLM's `SpeculativeConfig.disable_by_batch_size`, a rule over any γ policy.

vLLM's rule (V0's `SpecDecodeWorker._should_disable_all_speculation`, vllm/spec_decode/spec_decode_worker.py):
speculation is off for the whole iteration when `running_queue_size >= disable_by_batch_size` — the running batch
has reached the threshold ("to stop trading off throughput for latency"); the config's help text says "larger
than", the code compares with >=, which is what runs and what is modelled here. `SpeculativeConfig.__post_init__`
refuses a threshold below 2 (checked in `specsim.methods.spec_config`). An iteration with speculation off drafts
nothing and verifies one position per request (priced as a plain decode step, as a γ = 0 band of `bands` is);
every request's policy state stands still through it. Not modelled: V0 also skips the proposer's prefill of a
request admitted into such an iteration (`_run_no_spec(skip_proposer=True)`); the engine still prices the draft's
prefill at admission, so an all-off run reads slightly below 1× (−0.5% at batch 8, 128-token prompts, 1B draft).

The rule wraps the configured policy (`wrap`, called by `make_policy`), so the engines stay ignorant of it: they
see a policy whose γ depends on the live batch (not `batch_free`, no `fixed_gamma`). Where the largest live batch
a replica can hold (closed loop: `batch`; open loop: `max_batch`, default 256) is below the threshold, the rule can
never act: the inner policy's step runs unchanged (results bit for bit those without the key). The threshold is
read from the config's `speculative_config` JSON (already checked when the SimConfig was built).
"""

from __future__ import annotations

import json

import numpy as np

from specsim.engine.policies.base import Baseline, Policy

KEY = "disable_by_batch_size"


def threshold(cfg) -> int | None:
    """The config's disable_by_batch_size (None: not given)."""
    text = None if cfg is None else cfg.speculation.speculative_config
    if text is None:
        return None
    v = json.loads(text).get(KEY)
    return None if v is None else int(v)


def largest_live_batch(cfg) -> int:
    """The most requests one replica's iteration can hold (SimConfig's batch cap; the KV pool may hold fewer)."""
    from specsim.engine.workload import DEFAULT_MAX_BATCH

    w = cfg.workload
    if w.rate is None and w.arrivals_csv is None:
        return int(w.batch)
    return int(w.max_batch or DEFAULT_MAX_BATCH)


def wrap(policy: Policy, cfg) -> Policy:
    """`policy` under the config's disable_by_batch_size, or `policy` itself when the key is not given."""
    t = threshold(cfg)
    return policy if t is None else DisableByBatchSize(policy, t, live=largest_live_batch(cfg) >= t)


class DisableByBatchSize(Policy):
    """The inner policy's γ, except 0 (speculation off) in an iteration whose live batch is >= the threshold."""

    def __init__(self, inner: Policy, threshold: int, live: bool = True):
        self.inner, self.threshold, self.live = inner, int(threshold), bool(live)
        self.name = inner.name
        self.max_gamma, self.draws, self.step_draws = inner.max_gamma, inner.draws, inner.step_draws
        self.reported_gamma = inner.reported_gamma
        # the rule makes γ depend on the batch: only where it can never act does the inner policy's nature hold
        self.fixed_gamma = inner.fixed_gamma if not live else None
        self.batch_free = inner.batch_free if not live else False
        self.iterations = self.iterations_off = self.request_steps_off = 0
        if not live:
            self.step = inner.step

    def __getattr__(self, name):  # what an engine profile reads beyond the protocol (hf-assisted: `gamma`)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def start(self, k: int):
        return self.inner.start(k)

    def step(self, draw, state, batch: int) -> tuple:  # a Step's fields
        self.iterations += 1
        if batch >= self.threshold:
            self.iterations_off += 1
            self.request_steps_off += int(batch)
            return draw(0), 0, 0, 0, state
        return self.inner.step(draw, state, batch)

    def baseline(self, alpha: float, c: float, gamma_used: np.ndarray) -> Baseline:
        """The inner policy's eq. (1)/(5) over the request-steps that speculated, mixed with the ones that did not
        (one token at the cost of one target pass each): Σ tokens / steps and Σ tokens / Σ cost."""
        off = min(self.request_steps_off, int((gamma_used == 0).sum()))
        if off == 0:
            return self.inner.baseline(alpha, c, gamma_used)
        on = np.delete(gamma_used, np.flatnonzero(gamma_used == 0)[:off])
        if on.size == 0:
            return Baseline(1.0, 1.0, None, None)
        b = self.inner.baseline(alpha, c, on)
        tokens = b.eq1 * on.size + off
        return Baseline(tokens / (on.size + off), tokens / (b.eq1 / b.eq5 * on.size + off), None, None)

    def summary(self) -> dict:
        share = self.iterations_off / self.iterations if self.iterations else 0.0
        return {**self.inner.summary(), KEY: self.threshold, "speculation_off_iteration_share": share}
