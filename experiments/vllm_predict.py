"""Predict one measured vLLM run with the vllm-v1 engine: its own knobs, requests, arrivals and acceptance.

Used by experiments/vllm_analyze.py. What a run recorded is what is simulated (`specsim.validation.vllm_runs`):
- the engine's knobs (max_num_seqs, max_num_batched_tokens, block_size, the KV pool, k, method);
- the requests' own prompt and output lengths, in the order the run issued them; a closed loop at its
  concurrency, an open loop at the arrival times the run recorded (Poisson points replay their measured arrivals);
- the offline engine's arrival pattern: a request added while the engine is busy joins one step late
  (`ReplayEngine.schedule`); the API server's requests join the next step;
- acceptance replayed request by request from vLLM's own per-step accepted and drafted counts
  (`ReplayAcceptance`), so a step verifies exactly the drafts vLLM verified — k for a draft model, 0..k for an
  n-gram lookup, whose steps without a match verify none;
- the draft model priced by its own fitted table (one pass over the step's tokens — with draft_pass "vllm" plus
  the one new slot per request vLLM 0.32's draft model takes — and k − 1 one-token passes); an n-gram proposal
  by the host time of the `ngram` head profile (model_profiles/heads/ngram.toml host_s_per_request) per request
  per step.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from specsim import methods
from specsim.engine.engine_profiles.vllm_scheduler import VllmV1Config, VllmV1Engine
from specsim.engine.metrics import latency_metrics
from specsim.engine.workload import Workload
from specsim.profiles.loader import MODEL_DIR, load_toml
from specsim.validation import vllm_runs as vrun

DRAFT_PASS = ("scheduled", "vllm")  # the draft's first pass: the scheduled tokens, or + the method's new slots
_WALK = 1 << 20  # walk offsets per request: request i's output position p is i * _WALK + p


class ReplayAcceptance:
    """Accepts exactly what vLLM accepted: thresholds 2 (always) for the first a drafts, −1 (never) after."""

    constant = False

    def __init__(self, schedules: list[list[tuple[int, int]]]):
        self.at = []  # per request: output position at the step's start -> (drafted, accepted)
        for sched in schedules:
            m, e = {}, 1
            for d, a in sched:
                m[e] = (d, a)
                e += a + 1
            self.at.append(m)

    def generator(self, request: int) -> np.random.Generator:
        return np.random.default_rng(0)  # the uniforms are drawn but never decide (thresholds are 2 or −1)

    def walk_start(self, request):
        return np.asarray(request, dtype=np.int64) * _WALK

    def drafted(self, request: int, emitted: int, k: int) -> int:
        return self.at[request].get(emitted, (k, 0))[0]

    def thresholds(self, g: int, pos) -> np.ndarray:
        p = int(np.asarray(pos).ravel()[0])
        a = min(self.at[p // _WALK].get(p % _WALK, (g, 0))[1], g)
        return np.array([2.0] * a + [-1.0] * (g - a) + [-1.0])


class HostPricer:
    """An n-gram lookup: host time per request per step, spread over the engine's k draft-pricing calls."""

    def __init__(self, host_s_per_request: float, k: int):
        self.host_s, self.k = host_s_per_request, max(k, 1)

    def price(self, new, ctx, logits=None):
        return self.host_s * len(new) / self.k, 0.0, 0.0


def ngram_host_s() -> float:
    return float(load_toml(MODEL_DIR / "heads" / "ngram.toml")["host_s_per_request"])


class ReplayEngine(VllmV1Engine):
    """vllm-v1 with per-request replayed draft counts and the offline engine's one-step join lag."""

    def __init__(self, *a, lag: int = 0, **kw):
        super().__init__(*a, **kw)
        self.lag = int(lag)
        self._added: dict[int, int] = {}

    def step(self, sched, now):
        end, finished = super().step(sched, now)
        if isinstance(self.acc, ReplayAcceptance):
            for r, _ in sched:
                if r.drafts == self.k and self.k:
                    r.drafts = self.acc.drafted(r.i, r.emitted, self.k)
        return end, finished

    def schedule(self, running, waiting):
        step = len(self.steps)
        for r in waiting:
            self._added.setdefault(r.i, step)
        if not self.lag:
            return super().schedule(running, waiting)
        held = [r for r in waiting if not r.admitted and self._added[r.i] + self.lag > step]
        if not held or (not running and len(held) == len(waiting)):  # an idle engine takes it at once
            return super().schedule(running, waiting)
        keep = deque(r for r in waiting if r not in held)
        out = super().schedule(running, keep)
        waiting.clear()
        waiting.extend(list(keep) + held)
        return out


def workload(run: dict, cfg: dict) -> tuple[Workload, np.ndarray]:
    """(the run's workload, the order of its requests in it: Poisson points are sorted by arrival)."""
    p = np.asarray(run["input_lens"], np.int64)
    o = np.asarray(run["output_lens"], np.int64)
    n = len(p)
    if cfg["loop"] == "closed":
        return Workload("closed", np.full(n, np.nan), p, o, cfg["max_num_seqs"], cfg["concurrency"]), np.arange(n)
    arr = vrun.arrivals(run, cfg)
    order = np.argsort(arr, kind="stable")
    return Workload("poisson", arr[order], p[order], o[order], cfg["max_num_seqs"], None), order


def predict(run: dict, cfg: dict, target, draft=None, blocks: int | None = None, draft_pass: str = "scheduled") -> dict:
    """Simulate the run (plain when cfg k is 0): throughput, TPOT p50, TTFT p50, and the steps each table priced
    outside its measured range. `draft_pass`: the draft's first pass over the scheduled tokens ("scheduled", the
    record's rule through session 22) or over them plus the method's new slots per request ("vllm": one for a draft
    model, as vLLM 0.32 runs it; specsim.engine.engine_profiles.vllm_scheduler). The analysis passes "vllm" (its
    default since session 23); the default here stays "scheduled" so the diagnosis scripts of sessions 12-22 that
    call this reproduce what they committed."""
    if draft_pass not in DRAFT_PASS:
        raise ValueError(f"vllm_predict: draft_pass {draft_pass!r}; allowed: {', '.join(DRAFT_PASS)}")
    wl, order = workload(run, cfg)
    vc = VllmV1Config(max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"],
                      block_size=cfg["block_size"])
    k, acc, dp = cfg["k"], None, None
    if k:
        spec = vrun.request_spec(run)
        if spec is None:
            raise SystemExit(f"vllm_predict: run {run.get('_file')} speculated but recorded no per-request counts")
        out_l = np.asarray(run["output_lens"], np.int64)
        acc = ReplayAcceptance([vrun.step_schedule(*spec[i], int(out_l[i])) for i in order])
        dp = HostPricer(ngram_host_s(), k) if cfg["method"] == "ngram" else draft
    tables = list({id(t): t for t in (target, dp) if hasattr(t, "unmeasured")}.values())  # one count per table
    before = [(t.unmeasured.steps, t.unmeasured.queries) for t in tables]
    slots = methods.get(cfg.get("method")).draft_input_slots if k and draft_pass == "vllm" else 0
    e = ReplayEngine(wl, vc, target, dp, acc, k=k, blocks=blocks, lag=cfg["join_lag_steps"], draft_slots=slots)
    rec = e.run()
    m = latency_metrics(rec, 1.0, 0.05)
    res = {"throughput": m["throughput_tok_s"], "tpot_p50": m["tpot_p50_s"], "ttft_p50": m["ttft_p50_s"],
           "e2e_mean": m["e2e_mean_s"], "steps": len(e.steps)}
    res["unmeasured_steps"] = sum(t.unmeasured.steps - b[0] for t, b in zip(tables, before))
    res["priced_steps"] = sum(t.unmeasured.queries - b[1] for t, b in zip(tables, before))
    return res
