"""One measurement session, run by experiments/vllm_cpu.py inside vLLM's own venv: one offline engine in this one
process (VLLM_ENABLE_V1_MULTIPROCESSING=0: no API server, no engine-core process competing for the 2 cores).

    VLLM_PY experiments/vllm_session.py SESSION.json     # written by `vllm_cpu.py measure`; not run by hand

The harness drives `LLMEngine.step()` itself (the loop `LLM.generate()` runs): it adds requests between steps —
a closed loop submits the next prompt when one finishes, a Poisson point adds every request whose arrival time has
passed — and times every step (wall clock around `step()`, what a request waits for). A wrapper around the
scheduler's `schedule()` (vllm/v1/core/sched/scheduler.py) records per step the tokens scheduled per request,
the drafts each request verifies (`scheduled_spec_decode_tokens`) and each request's cached tokens before the step
(`num_computed_tokens`): the step's prefill and decode tokens, its KV context (and the query x key pairs its
attention reads), and per request the drafted and accepted count of every decode step (accepted = new tokens − 1),
steps without drafts included. Where the
scheduler cannot be reached the per-step log lines (`enable_logging_iteration_details`) are used instead.
Before and after the points: a fixed host probe (a numpy loop, independent of vLLM) and an engine probe (one fixed
request); both are recorded and reported, never used to correct a figure. Each point is written atomically as one
JSON file (bench serve's keys + config, steps, request_spec, probe), so a killed session resumes.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from specsim.validation import vllm_outputs as vr  # noqa: E402  (numpy only: runs in vLLM's venv)


def host_probe_s() -> float:
    """Median of 7 timings of a fixed elementwise numpy loop: the host's speed, whatever vLLM does."""
    x = np.linspace(0.0, 1.0, 1 << 20)
    ts = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(20):
            x = np.sqrt(x * 1.0001 + 0.5)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


class StepLog(logging.Handler):
    """Captures vLLM's per-step log lines in this process."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        msg = record.getMessage()
        if "Iteration(" in msg:
            self.lines.append(msg)


def find_scheduler(engine):
    for path in ("engine_core.engine_core.scheduler", "engine_core.scheduler", "scheduler"):
        obj = engine
        for a in path.split("."):
            obj = getattr(obj, a, None)
        if obj is not None and hasattr(obj, "schedule"):
            return obj
    return None


class Recorder:
    """Wraps scheduler.schedule(): per step the scheduled tokens, drafts and cached tokens of every request."""

    def __init__(self, sched):
        self.sched, self.last = sched, None
        if sched is None:
            return
        orig = sched.schedule

        def schedule(*a, **kw):
            before = {rid: (int(r.num_computed_tokens), int(r.num_prompt_tokens)) for rid, r in sched.requests.items()}
            out = orig(*a, **kw)
            spec = getattr(out, "scheduled_spec_decode_tokens", None) or {}
            self.last = (before, dict(out.num_scheduled_tokens), {k: len(v) for k, v in spec.items()})
            return out

        sched.schedule = schedule

    def take(self):
        last, self.last = self.last, None
        return last


def _rid(s: str) -> int | None:
    """The harness's request index from an engine request id ("7", or "7-<suffix>" where the engine adds one)."""
    head = str(s).split("-")[0]
    return int(head) if head.isdigit() else None


def _step_record(i: int, took: tuple, wall_s: float) -> tuple[dict, dict]:
    """(the step as the per-step log would give it, plus its KV context and drafts; drafts per request index)."""
    before, sched, spec = took
    s = {"index": i, "ctx_requests": 0, "ctx_tokens": 0, "gen_requests": 0, "gen_tokens": 0, "time_s": wall_s,
         "kv_ctx_tokens": 0, "kv_attended_tokens": 0, "drafts": 0, "kv_usage": None}
    for rid, n in sched.items():
        computed, prompt = before.get(rid, (0, 1 << 30))
        gen = computed >= prompt
        s["gen_requests" if gen else "ctx_requests"] += 1
        s["gen_tokens" if gen else "ctx_tokens"] += int(n)
        s["kv_ctx_tokens"] += computed
        s["kv_attended_tokens"] += int(n) * computed + int(n) * (int(n) + 1) // 2  # query x key pairs (causal)
        s["drafts"] += spec.get(rid, 0)
    by_req = {_rid(rid): spec.get(rid, 0) for rid in sched if _rid(rid) is not None}
    return s, by_req


class Session:
    def __init__(self, spec: dict):
        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs

        self.spec = spec
        allowed = set(getattr(EngineArgs, "__dataclass_fields__", {})) or \
            set(inspect.signature(EngineArgs).parameters)
        kw = {k: v for k, v in spec["engine"].items() if k in allowed}
        self.dropped = sorted(set(spec["engine"]) - set(kw))
        self.log = StepLog()
        logging.getLogger("vllm").addHandler(self.log)
        self.llm = LLM(**kw)
        self.engine = self.llm.llm_engine
        self.rec = Recorder(find_scheduler(self.engine))
        self.nstep = self.points = 0
        cc = getattr(getattr(self.engine, "vllm_config", None), "cache_config", None)
        self.num_gpu_blocks = getattr(cc, "num_gpu_blocks", None)

    def params(self, out_len: int):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True,
                              output_kind=RequestOutputKind.CUMULATIVE)

    def step(self) -> tuple[list, dict | None, dict | None]:
        n_log = len(self.log.lines)
        t = time.perf_counter()
        outs = self.engine.step()
        wall = time.perf_counter() - t
        took = self.rec.take()
        self.nstep += 1
        if took is not None:
            return (outs, *_step_record(self.nstep, took, wall))
        parsed = vr.parse_steps("\n".join(self.log.lines[n_log:]))  # no scheduler hook: the log line
        if parsed:
            return outs, dict(parsed[-1].__dict__, time_s=wall, log_time_s=parsed[-1].time_s), None
        return outs, None, None


class WallClock:
    """The run's clock: wall time since it started; an idle engine sleeps until the next arrival (the lockstep
    protocol's busy clock is experiments/vllm_serve.py's BusyClock)."""

    def __init__(self):
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def wait_until(self, t: float) -> None:
        time.sleep(max(0.0, t - self.now()))


def run_point(ses: Session, prompts: list[str], pt: dict, seed: int) -> dict:
    """One grid or calibration point, on the wall clock."""
    it = iter_point(ses, prompts, pt, seed, WallClock())
    while True:
        try:
            next(it)
        except StopIteration as stop:
            return stop.value


def iter_point(ses: Session, prompts: list[str], pt: dict, seed: int, clock):
    """One grid or calibration point, closed loop at pt['concurrency'] or Poisson at pt['rate'], yielding after
    every engine step; returns the run's record."""
    n, out_len, x = pt["requests"], pt["output_len"], pt.get("concat", 1)
    texts = [" ".join(prompts[(i * x + j) % len(prompts)] for j in range(x)) for i in range(n)]
    arr = None
    if "rate" in pt:
        gaps = np.random.default_rng(seed).exponential(1.0 / pt["rate"], size=n)
        arr = np.cumsum(gaps) - gaps[0]
    budget_set = None
    if pt.get("budget") and ses.rec.sched is not None:  # a prefill-chunk sweep: the budget lowered at run time
        budget_set = ses.rec.sched.max_num_scheduled_tokens
        ses.rec.sched.max_num_scheduled_tokens = pt["budget"]
    thr_set = None
    if pt.get("threshold") and ses.rec.sched is not None:  # verification-shaped steps: each request's prefill
        cfg = ses.rec.sched.scheduler_config  # capped at `threshold` tokens a step (read by every schedule())
        thr_set, cfg.long_prefill_token_threshold = cfg.long_prefill_token_threshold, pt["threshold"]
    p = ses.params(out_len)
    R = {"t_add": {}, "added_step": {}, "times": {}, "seen": {}, "prompt": {}, "first_step": {}, "spec": {},
         "busy": {}, "finished": set()}
    steps, nxt, done = [], 0, 0

    ses.points += 1

    def add(i):
        ses.engine.add_request(f"{i}-p{ses.points}", texts[i], p)  # unique per point; _rid reads i back
        R["t_add"][i], R["added_step"][i], R["times"][i], R["seen"][i] = clock.now(), ses.nstep, [], 0
        R["busy"][i] = len(R["t_add"]) - 1 - len(R["finished"])  # requests in flight when it was added
        R["spec"][i] = ([], [])

    if arr is None:
        for _ in range(min(pt["concurrency"], n)):
            add(nxt)
            nxt += 1
    try:
        while done < n:
            now = clock.now()
            while arr is not None and nxt < n and arr[nxt] <= now:
                add(nxt)
                nxt += 1
            if not ses.engine.has_unfinished_requests():
                if arr is None or nxt >= n:
                    raise RuntimeError(f"vllm_session: the engine idles with {n - done} requests not done")
                clock.wait_until(float(arr[nxt]))
                continue
            outs, srec, drafts = ses.step()
            t_end = clock.now()
            if srec is not None:
                steps.append(srec)
            for i in drafts or {}:  # every request this step scheduled: when it first joined a step
                R["first_step"].setdefault(i, ses.nstep)
            for o in outs:
                done += _collect(R, o, t_end, drafts, ses.spec["k"])
                if o.finished and arr is None and nxt < n:
                    add(nxt)
                    nxt += 1
            yield
    finally:
        if budget_set is not None:
            ses.rec.sched.max_num_scheduled_tokens = budget_set
        if thr_set is not None:
            ses.rec.sched.scheduler_config.long_prefill_token_threshold = thr_set
    return _bench(R, n, steps, clock.now(), arr)


def _collect(R: dict, o, t_end: float, drafts: dict | None, k: int) -> int:
    """A request's new tokens at the end of this step; for a decode step of a speculative session its drafted and
    accepted count (accepted = new tokens − 1; drafted from the scheduler, else assumed k and marked so)."""
    i = _rid(o.request_id)
    ntok = len(o.outputs[0].token_ids)
    new = ntok - R["seen"][i]
    R["prompt"][i] = len(o.prompt_token_ids or [])
    if new > 0:
        R["times"][i] += [t_end] * new
        if R["seen"][i] > 0 and k:
            d = (drafts or {}).get(i)
            if d is None:
                d, R["assumed"] = k, R.get("assumed", 0) + 1
            R["spec"][i][0].append(int(d))
            R["spec"][i][1].append(max(0, min(int(d), new - 1)))
        R["seen"][i] = ntok
    if o.finished:
        R["finished"].add(i)
    return int(bool(o.finished))


def _bench(R: dict, n: int, steps: list, dur: float, arr) -> dict:
    # a request's clock starts at its arrival: the Poisson draw (it may wait for a step to end before the harness
    # can add it, as it would in the engine), or the moment a closed loop submits it
    t_add = np.asarray(arr, float) if arr is not None else np.array([R["t_add"][i] for i in range(n)])
    first = [R["times"][i][0] if R["times"][i] else float("nan") for i in range(n)]
    last = [R["times"][i][-1] if R["times"][i] else float("nan") for i in range(n)]
    d = {"duration": dur, "completed": n, "input_lens": [R["prompt"].get(i, 0) for i in range(n)],
         "output_lens": [len(R["times"][i]) for i in range(n)],
         "ttfts": [f - a for f, a in zip(first, t_add)], "latencies": [e - a for e, a in zip(last, t_add)],
         "itls": [list(np.diff(R["times"][i])) for i in range(n)],
         "start_times": (list(arr) if arr is not None else t_add.tolist()), "errors": [""] * n,
         "added_step": [R["added_step"][i] for i in range(n)], "inflight_at_add": [R["busy"][i] for i in range(n)],
         "first_scheduled_step": [R["first_step"].get(i) for i in range(n)], "steps": steps}
    spec = [{"per_step_drafted": R["spec"][i][0], "per_step_accepted": R["spec"][i][1]} for i in range(n)]
    if any(sum(s["per_step_drafted"]) for s in spec):
        d["request_spec"] = spec
        d["drafted_assumed_k_steps"] = R.get("assumed", 0)  # decode steps whose drafts the scheduler did not show
    return d


def counters(d: dict, k: int) -> dict:
    """The speculative counters /metrics would give, from the per-request steps (checked like /metrics)."""
    steps = [(x, a) for r in d.get("request_spec") or [] for x, a in zip(r["per_step_drafted"], r["per_step_accepted"])]
    c = {"drafts": float(sum(1 for x, _ in steps if x)), "draft_tokens": float(sum(x for x, _ in steps)),
         "accepted_tokens": float(sum(a for _, a in steps)),
         "accepted_per_pos": [float(sum(1 for _, a in steps if a > j)) for j in range(k)]}
    return vr.check_counters(c, "session", " (from the scheduler's per-request steps)")


def engine_probe(ses: Session, prompts: list[str]) -> float:
    """Median step of one fixed request (prompt 0, 24 tokens) at concurrency 1."""
    d = run_point(ses, prompts, {"point": "probe", "concurrency": 1, "requests": 1, "output_len": 24}, 0)
    ts = [s["time_s"] for s in d["steps"]]
    return float(np.median(ts[1:] or ts))


def _write(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, default=float))
    os.replace(tmp, path)


def main(path: str) -> None:
    spec = json.loads(Path(path).read_text())
    out = Path(spec["out"])
    runs = out / "runs"
    todo = [(r, pt) for r in spec["repeats"] for pt in spec["points"]
            if not (runs / f"{spec['mode']}__{pt['point']}__r{r}.json").exists()]
    if not todo:
        return
    prompts = [p for p in Path(spec["prompts"]).read_text().splitlines() if p.strip()]
    ses = Session(spec)
    run_point(ses, prompts, {"point": "warm", "concurrency": 2, "requests": 2, "output_len": 8}, 0)
    probe = _probe(ses, prompts, spec["session"])
    print(f"[{spec['session']}] {spec['mode']}: probe host {probe['host_probe_s']:.3f} s, engine step "
          f"{probe['median_step_s']:.3f} s; scheduler hooked {ses.rec.sched is not None}; dropped {ses.dropped}",
          flush=True)
    for r, pt in todo:
        d = _record(ses, spec, run_point(ses, prompts, pt, seed=1000 + r), pt, spec["mode"], r, probe, None)
        _write(runs / f"{spec['mode']}__{pt['point']}__r{r}.json", d)
        s = vr.summarize_requests(d)
        print(f"[{spec['session']}] {spec['mode']} {pt['point']} r{r}: {s['output_throughput']:.2f} tok/s, "
              f"TTFT p50 {np.median(s['ttft_s']):.2f} s, {len(d['steps'])} steps", flush=True)
    probe["after_host_probe_s"], probe["after_median_step_s"] = host_probe_s(), engine_probe(ses, prompts)
    (out / "probes").mkdir(exist_ok=True)
    _write(out / "probes" / f"{spec['session']}.json", dict(probe, mode=spec["mode"]))


def _probe(ses: Session, prompts: list[str], name: str) -> dict:
    return {"session": name, "host_probe_s": host_probe_s(), "median_step_s": engine_probe(ses, prompts)}


def _record(ses: Session, spec: dict, d: dict, pt: dict, mode: str, r: int, probe: dict, block: str | None) -> dict:
    """The run's recorded config (the engine's knobs, the load, the point's own budget) and bookkeeping."""
    c = dict(spec["configs"][mode] if "configs" in spec else spec["config"], num_gpu_blocks=ses.num_gpu_blocks,
             engine_kwargs_dropped=ses.dropped, scheduler_hooked=ses.rec.sched is not None,
             output_len=pt["output_len"], loop="closed" if "concurrency" in pt else "poisson",
             prompt_set=Path(spec["prompts"]).name, concat=pt.get("concat", 1))
    c.update({k: pt[k] for k in ("concurrency", "rate") if k in pt})
    if pt.get("budget"):  # a chunk sweep ran at this budget (if the scheduler could be reached)
        c.update(max_num_batched_tokens=pt["budget"], budget_applied=ses.rec.sched is not None)
    if pt.get("threshold"):  # a verification-shaped run: each request's prefill at most this many tokens a step
        c.update(long_prefill_token_threshold=pt["threshold"], threshold_applied=ses.rec.sched is not None)
    d.update(mode=mode, point=pt["point"], repeat=r, config=c, probe=probe, cpu_model=spec["cpu_model"],
             wall_clock=time.time(), loadavg_1min_after=os.getloadavg()[0], spec=counters(d, spec["k"]))
    if block is not None:
        d["block"] = block
    return d


if __name__ == "__main__":  # vLLM starts workers with spawn: the entry point must be guarded
    main(sys.argv[1])
