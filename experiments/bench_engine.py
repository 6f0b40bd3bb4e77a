"""Engine throughput in CPU time: simulated tokens per CPU-second at batch 1, engine steps per CPU-second at batch 64.

Issue 3 item 9 / issue 4 item 7 (target: >= 100,000 engine steps per CPU-second at batch 64). Setup: Llama-3.1-8B
with a Llama-3.2-1B draft on one H100 SXM (pytorch-eager stack), α = 0.7 i.i.d., γ = 4, prompt 128, output 128
(batch 1) / 512 (batch 64, the target's setup) and 128 (batch 64, short requests: admission-heavy). CPU time is
`time.process_time()` of this process (the engines are single-threaded Python + numpy; BLAS threads play no part).
Each figure is the best of `--repeat` runs (least disturbed by other load). Every timed engine run gets a fresh
`Acceptance` (as each `simulate` call does), so per-run set-up such as opening the acceptance streams is counted.
Measured pieces:
- the speculative engine alone (`engine.run_engine` / `fastpath.run_fast`, set up as `simulate.simulate` does),
  each step kernel of the SimPy engine the version offers ('ahead' = acceptance drawn before admission, 'live' =
  per-iteration array work, which traces and adaptive policies need);
- the plain-decoding baseline engine at batch 64;
- `simulate.run` end to end (speculative run + paired baseline + metrics), which is what sweeps pay per point;
- a trace-replay run (clustered Markov trace) at batch 64, which must take the 'live' kernel.
Where the time goes: cProfile of the batch-64 speculative engine runs, top entries by own time, with the share of
admission (`engine._join` and below) and of the acceptance draws in it.

Usage: .venv/bin/python experiments/bench_engine.py [--repeat 3] [--before OLD.json]
Writes experiments/results/bench_engine.json and bench_engine.md; with --before (this script's JSON from an earlier
version of the code, run on the same machine just before) the tables get a "before" column.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import io
import json
import os
import platform
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from specsim import profiles as prof# noqa: E402
from specsim.traces import synth as trace_synth  # noqa: E402
from specsim.engine.acceptance import Acceptance  # noqa: E402
from specsim.config import SimConfig  # noqa: E402
from specsim.cost.roofline import CostModel  # noqa: E402
from specsim.engine.simpy_engine import run_engine  # noqa: E402
from specsim.engine.fastpath import run_fast  # noqa: E402
from specsim.engine.policies import make_policy  # noqa: E402
from specsim.simulate import run  # noqa: E402
from specsim.cost.steptime import Memory, StepCosts  # noqa: E402
from specsim.engine.workload import build_workload  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_STEPS_PER_S = 100_000
BASE = {"hardware": "h100-sxm", "target": "llama-3.1-8b", "draft": "llama-3.2-1b", "alpha": 0.7, "gamma": 4,
        "prompt_len": 128}
KERNELS = ("ahead", "live") if "kernel" in inspect.signature(run_engine).parameters else (None,)


def _setup(cfg: SimConfig):
    """What `simulate.simulate` builds before it calls an engine (public pieces only)."""
    hw = prof.hardware(cfg.hardware)
    st = prof.stack(hw.default_stack if cfg.stack is None else cfg.stack)
    t, d = CostModel(prof.model(cfg.target), hw, st, tp=cfg.tp), CostModel(prof.model(cfg.draft), hw, st, tp=cfg.tp)
    costs = StepCosts(t, d)
    acc = Acceptance.from_config(cfg)
    policy = make_policy(cfg.policy, cfg.gamma, acc.alpha, costs.derived_c(cfg.prompt_len))
    return build_workload(cfg), costs, acc, policy, Memory([t, d], policy.max_gamma + 1), Memory([t], 0)


def _best_cpu(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def _engine(cfg, wl, costs, policy, mem, kernel):
    kw = {} if kernel is None else {"kernel": kernel}
    return lambda: run_engine(wl, costs, Acceptance.from_config(cfg), policy, mem, **kw)


def _profile(fn) -> dict:
    pr = cProfile.Profile()
    pr.enable()
    fn()
    pr.disable()
    st = pstats.Stats(pr, stream=io.StringIO())
    total = sum(v[2] for v in st.stats.values())
    top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:14]

    def cum(names, file):
        return sum(v[3] for (fn, _, name), v in st.stats.items() if name in names and fn.endswith(file))

    return {"total_tottime_s": total, "admission_cumtime_share": cum({"_join"}, "engine.py") / total,
            "acceptance_draws_cumtime_share": cum({"fixed_runs", "fixed_run", "assign", "refill"},
                                                  "acceptance.py") / total,
            "top": [{"function": f"{Path(fn).name}:{line}({name})", "calls": v[1], "tottime_s": v[2],
                     "cumtime_s": v[3], "share": v[2] / total} for (fn, line, name), v in top]}


def _batch64(out_len: int, repeat: int, full: bool) -> tuple[dict, dict]:
    b64 = {}
    cfg64 = SimConfig(**BASE, batch=64, requests=64 * 64, output_len=out_len)
    wl, costs, _, pol, mem, mem_b = _setup(cfg64)
    for k in KERNELS:
        _best_cpu(_engine(cfg64, wl, costs, pol, mem, k), 1)
        cpu, rec = _best_cpu(_engine(cfg64, wl, costs, pol, mem, k), repeat)
        steps = int(rec.step_end_s.size)
        b64[f"spec_simpy_{k or 'default'}"] = {"cpu_s": cpu, "steps": steps, "steps_per_cpu_s": steps / cpu,
                                               "request_steps": int(rec.rs_request.size),
                                               "tokens_per_cpu_s": int(wl.output_len.sum()) / cpu}
    cpu, rec = _best_cpu(lambda: run_engine(wl, costs, None, None, mem_b), repeat)
    b64["baseline_simpy"] = {"cpu_s": cpu, "steps": int(rec.step_end_s.size),
                             "steps_per_cpu_s": rec.step_end_s.size / cpu}
    if full:
        with tempfile.TemporaryDirectory() as tmp:
            path = trace_synth.markov(0.7, 20, n_sequences=64, length=1024, seed=0).write(Path(tmp) / "m.parquet")
            cfg_t = cfg64.model_copy(update={"alpha": None, "trace": str(path)})
            wl_t, costs_t, _, pol_t, mem_t, _ = _setup(cfg_t)
            _best_cpu(_engine(cfg_t, wl_t, costs_t, pol_t, mem_t, None), 1)
            cpu, rec = _best_cpu(_engine(cfg_t, wl_t, costs_t, pol_t, mem_t, None), repeat)
        b64["spec_simpy_trace_replay"] = {"cpu_s": cpu, "steps": int(rec.step_end_s.size),
                                          "steps_per_cpu_s": rec.step_end_s.size / cpu}
    cpu, r = _best_cpu(lambda: run(cfg64), repeat)
    b64["run_end_to_end_spec_plus_baseline_steps"] = {
        "cpu_s": cpu, "steps": r["steps"] + r["baseline_steps"],
        "steps_per_cpu_s": (r["steps"] + r["baseline_steps"]) / cpu,
        "note": "simulate.run: speculative + paired baseline steps (cheap) + metrics"}
    prof = {k or "default": _profile(_engine(cfg64, wl, costs, pol, mem, k)) for k in KERNELS}
    return b64, prof


def bench(repeat: int) -> dict:
    out: dict = {"machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                             "processor": platform.processor() or platform.machine(),
                             "load_average_1min_before": round(os.getloadavg()[0], 2)},
                 "setup": BASE, "repeat": repeat, "target_steps_per_cpu_s_batch64": TARGET_STEPS_PER_S}
    # --- batch 1: tokens per CPU-second --------------------------------------------------------------------
    b1 = {}
    cfg = SimConfig(**BASE, batch=1, requests=2000, output_len=128)
    wl, costs, _, pol, mem, _ = _setup(cfg)
    tokens = int(wl.output_len.sum())
    for k in KERNELS:
        _best_cpu(_engine(cfg, wl, costs, pol, mem, k), 1)  # warm the pass-cost caches
        cpu, rec = _best_cpu(_engine(cfg, wl, costs, pol, mem, k), repeat)
        b1[f"simpy_{k or 'default'}"] = {"cpu_s": cpu, "tokens": tokens, "steps": int(rec.step_end_s.size),
                                         "tokens_per_cpu_s": tokens / cpu}
    cfg_f = SimConfig(**BASE, batch=1, requests=20000, output_len=128)
    wl_f, costs_f, _, pol_f, _, _ = _setup(cfg_f)
    _best_cpu(lambda: run_fast(wl_f, costs_f, Acceptance.from_config(cfg_f), pol_f), 1)
    cpu, rec = _best_cpu(lambda: run_fast(wl_f, costs_f, Acceptance.from_config(cfg_f), pol_f), repeat)
    tok_f = int(wl_f.output_len.sum())
    b1["fast_path"] = {"cpu_s": cpu, "tokens": tok_f, "steps": int(rec.step_end_s.size),
                       "tokens_per_cpu_s": tok_f / cpu}
    for eng, c in (("simpy", cfg), ("fast", cfg_f)):
        cc = c.model_copy(update={"engine": eng})
        cpu, r = _best_cpu(lambda cc=cc: run(cc), repeat)
        b1[f"run_end_to_end_{eng}"] = {"cpu_s": cpu, "tokens": int(r["output_tokens"]),
                                       "tokens_per_cpu_s": r["output_tokens"] / cpu,
                                       "note": "speculative + paired baseline + metrics"}
    out["batch1"] = b1
    # --- batch 64: engine steps per CPU-second (512-token requests: the target's setup; 128: admission-heavy) --
    out["batch64"], prof = _batch64(512, repeat, full=True)
    out["batch64_out128"], prof128 = _batch64(128, repeat, full=False)
    b64 = out["batch64"]
    best = max(v["steps_per_cpu_s"] for k, v in b64.items() if k.startswith("spec_simpy_") and "trace" not in k)
    out["batch64_best_spec_steps_per_cpu_s"] = best
    out["batch64_out128_best_spec_steps_per_cpu_s"] = max(
        v["steps_per_cpu_s"] for k, v in out["batch64_out128"].items() if k.startswith("spec_simpy_"))
    out["meets_target"] = best >= TARGET_STEPS_PER_S
    out["profile_batch64"] = prof
    out["profile_batch64_out128"] = prof128
    out["machine"]["load_average_1min_after"] = round(os.getloadavg()[0], 2)
    return out


def _table(rows: dict, before: dict | None, unit: str, key: str) -> list[str]:
    head = f"| what | {unit} | CPU s | {unit} / CPU-s |" + (" before: CPU s | before: / CPU-s | speed-up |"
                                                           if before else "")
    lines = [head, "|---|---:|---:|---:|" + ("---:|---:|---:|" if before else "")]
    for k, v in rows.items():
        line = f"| {k} | {v[unit]:,} | {v['cpu_s']:.3f} | {v[key]:,.0f} |"
        if before:
            b = before.get(k)
            line += (f" {b['cpu_s']:.3f} | {b[key]:,.0f} | {v[key] / b[key]:.2f}× |" if b else " – | – | – |")
        lines.append(line)
    return lines


def markdown(res: dict, before: dict | None = None) -> str:
    m = res["machine"]
    setup = (f"Setup: {res['setup']['target']} + {res['setup']['draft']} on {res['setup']['hardware']}, "
             f"α = {res['setup']['alpha']}, γ = {res['setup']['gamma']}; Python {m['python']}, numpy "
             f"{m['numpy']}, {m['cpus']} CPUs (1-min load average {m.get('load_average_1min_before')} before, "
             f"{m.get('load_average_1min_after')} after: other jobs shared the machine); best of {res['repeat']} "
             "(`time.process_time`). Reproduce: `.venv/bin/python experiments/bench_engine.py`.")
    bf = before or {}
    lines = ["# Engine benchmark (CPU time)", "", setup, ""]
    if before:
        lines += [(f"'before' = the same script on the previous code (commit before the engine speed-up), run on "
                   f"this machine just before (load {bf['machine'].get('load_average_1min_before')}). Results "
                   "are bit-identical between the two versions."), ""]
    lines += ["## Batch 1: simulated tokens per CPU-second", ""]
    lines += _table(res["batch1"], bf.get("batch1"), "tokens", "tokens_per_cpu_s")
    tgt = res["target_steps_per_cpu_s_batch64"]
    for key, title in (("batch64", "512-token requests (the target's setup)"),
                       ("batch64_out128", "128-token requests")):
        lines += ["", f"## Batch 64, {title}: engine steps per CPU-second (target ≥ {tgt:,})", ""]
        lines += _table(res[key], bf.get(key), "steps", "steps_per_cpu_s")
    verdict = (f"Best speculative SimPy kernel at batch 64: {res['batch64_best_spec_steps_per_cpu_s']:,.0f} "
               f"steps/CPU-s with 512-token requests — target {'met' if res['meets_target'] else 'NOT met'}; "
               f"{res['batch64_out128_best_spec_steps_per_cpu_s']:,.0f} with 128-token requests.")
    lines += ["", verdict, ""]
    for pkey, title in (("profile_batch64", "512-token requests"), ("profile_batch64_out128", "128-token requests")):
        lines += [f"## Where the time goes (cProfile, batch 64, {title}, by own time)", ""]
        for k, p in res[pkey].items():
            head = (f"Kernel `{k}` (profiled total {p['total_tottime_s']:.3f} s, profiler overhead included; "
                    f"admitting requests — `engine._join` and below — takes {p['admission_cumtime_share']:.0%}; "
                    f"the acceptance draws (`FixedRuns` / `UniformPool`, wherever called) "
                    f"{p['acceptance_draws_cumtime_share']:.0%}):")
            lines += [head, "", "| function | calls | own s | cumulative s | own share |",
                      "|---|---:|---:|---:|---:|"]
            for e in p["top"]:
                lines.append(f"| `{e['function']}` | {e['calls']:,} | {e['tottime_s']:.4f} | "
                             f"{e['cumtime_s']:.4f} | {e['share']:.1%} |")
            lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", type=Path, default=None, help="JSON of this script run on earlier code")
    args = ap.parse_args()
    res = bench(args.repeat)
    before = json.loads(args.before.read_text()) if args.before else None
    if before:
        res["before"] = {k: before[k] for k in ("batch1", "batch64", "batch64_out128", "machine") if k in before}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_engine.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    md = markdown(res, before)
    (RESULTS / "bench_engine.md").write_text(md + "\n")
    print(md)
    print(f"wrote {RESULTS / 'bench_engine.json'}, {RESULTS / 'bench_engine.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
