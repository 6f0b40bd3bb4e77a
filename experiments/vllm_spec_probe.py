"""Diagnosis, not a figure of record and never a calibration: where does a speculative step's time go at
concurrency 1, against the same models' steps served alone?

    /work/vllm-env/venv/bin/python experiments/vllm_spec_probe.py --out experiments/results/vllm_spec_probe

Why (issue 24, session 14, docs/validation.md): at concurrency 1 the analysis prices a speculative step from the
target's and the draft's tables (each model served alone) and comes out 4-13% too cheap per step as k grows
(measured / priced step time 1.035, 1.131, 1.076 for k = 2, 3, 5), while plain steps are priced within 0-2%. This
probe times, inside one engine step, the target's forward, every forward of the draft (the proposer's passes),
the models' logits and the proposer's whole `propose`, by wrapping those methods of the in-process model runner
(VLLM_ENABLE_V1_MULTIPROCESSING=0); then the same wrappers on the draft served alone and the target served alone,
one request decoding, in ABBA order per engine over repeats. Writes probe.json (every step) and summary.txt.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_cpu as vc  # noqa: E402  (constants, engine arguments; imports no vLLM)


def find_runner(engine):
    """The in-process model runner (the object holding the target `model`), by a short breadth-first search."""
    seen, todo = set(), [engine]
    for _ in range(9):
        nxt = []
        for o in todo:
            if id(o) in seen:
                continue
            seen.add(id(o))
            if hasattr(o, "execute_model") and hasattr(o, "model") and hasattr(o, "input_batch"):
                return o
            for name in ("engine_core", "model_executor", "driver_worker", "worker", "model_runner", "executor"):
                if getattr(o, name, None) is not None:
                    nxt.append(getattr(o, name))
        todo = nxt
    raise SystemExit("vllm_spec_probe: no in-process model runner (is VLLM_ENABLE_V1_MULTIPROCESSING=0 set?)")


class Timers:
    """Wall time per wrapped call, collected per engine step."""

    def __init__(self):
        self.cur = defaultdict(list)

    def wrap(self, obj, attr: str, name: str) -> None:
        orig = getattr(obj, attr)

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                self.cur[name].append(time.perf_counter() - t)

        setattr(obj, attr, timed)

    def take(self) -> dict:
        cur, self.cur = self.cur, defaultdict(list)
        return dict(cur)


def instrument(ses) -> Timers:
    r = find_runner(ses.engine)
    tm = Timers()
    tm.wrap(r.model, "forward", "target_forward")
    tm.wrap(r.model, "compute_logits", "target_logits")
    d = getattr(r, "drafter", None)
    if d is not None:
        tm.wrap(d, "propose", "propose")
        tm.wrap(d.model, "forward", "draft_forward")
        tm.wrap(d.model, "compute_logits", "draft_logits")
    return tm


def time_parts(ses) -> None:
    """Each step record of `ses` gains `parts`: the wall time of every timed call inside that step (`instrument`).
    Used here and by experiments/vllm_serve.py (SPECSIM_PROBE_PARTS=1, experiments/vllm_lockstep_probe.py)."""
    tm, orig = instrument(ses), ses.step

    def step():
        out = orig()
        parts = tm.take()
        if out[1] is not None:
            out[1]["parts"] = parts
        return out

    ses.step = step


def _median(xs) -> float:
    return float(np.median(xs)) if len(xs) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--output-len", type=int, default=48)
    a = ap.parse_args()
    os.environ.update(vc._env(kv_gb=1))
    from vllm_session import Session, run_point

    prompts = [p for p in vc.PROMPTS.read_text().splitlines() if p.strip()]
    modes = vc.modes((a.k,))
    rows = []
    for name in (f"draft-k{a.k}", "cal-draft", "cal-target"):
        m = modes[name]
        ses = Session({"session": "Q", "mode": name, "k": m["k"], "engine": vc.engine_kwargs(m), "configs": {},
                       "out": str(a.out), "prompts": str(vc.PROMPTS), "cpu_model": vc.cpu_model()})
        time_parts(ses)
        run_point(ses, prompts, {"point": "warm", "concurrency": 1, "requests": 1, "output_len": 8}, 0)
        for rep in range(a.repeats):
            d = run_point(ses, prompts, {"point": "c1", "concurrency": 1, "requests": 1,
                                         "output_len": a.output_len}, rep)
            rows += [dict(s, engine=name, point=ses.points) for s in d["steps"]]
        del ses
        gc.collect()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "probe.json").write_text(json.dumps({"cpu_model": vc.cpu_model(), "k": a.k, "steps": rows}, indent=1))
    lines = summarize(rows, a.k)
    (a.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def summarize(rows: list[dict], k: int) -> list[str]:
    """Medians over decode steps (no prefill) of the measured points (the warm-up point is not collected), per
    engine."""
    lines = []
    for eng in sorted({r["engine"] for r in rows}):
        rs = [r for r in rows if r["engine"] == eng and r["ctx_requests"] == 0]
        if not rs:
            continue
        if eng.startswith("draft-k"):
            rs = [r for r in rs if r.get("drafts") == k]  # full verification steps
        parts = defaultdict(list)
        for r in rs:
            for p, ts in r["parts"].items():
                parts[p + "_sum"].append(sum(ts))
                parts[p + "_calls"].append(len(ts))
                if p == "draft_forward" and ts:
                    parts["draft_forward_first"].append(ts[0])
                    if len(ts) > 1:
                        parts["draft_forward_later_each"].append(float(np.mean(ts[1:])))
        desc = ", ".join(f"{p} {_median(v):.4f}" for p, v in sorted(parts.items()))
        lines.append(f"{eng}: {len(rs)} steps, step {_median([r['time_s'] for r in rs]):.4f} s; {desc}")
    return lines


if __name__ == "__main__":  # vLLM may start workers with spawn: the entry point must be guarded
    main()
