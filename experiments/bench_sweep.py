"""Benchmark: wall time of a 10,000-point sweep on this machine, and where the time goes.

    .venv/bin/python experiments/bench_sweep.py [--points 10000] [--workers N] [--theory] [--before OLD.json]
        [--stack vllm --out experiments/results/bench_sweep_vllm.json]

The points are real engine configs (specsim.simulate:run) with small requests: Llama-3.1-8B on an H100 with
two drafts, a grid of α, γ, batch sizes and seeds. `--theory` (or a missing engine) uses eq. (5) as the point
function instead, which measures the sweep machinery alone. Writes experiments/results/bench_sweep.json with
the wall time split into phases, a cProfile of the coordinating process, and a cProfile of the point function
run serially on a sample of points (what the workers spend their time on), by cumulative and by own time.
`--before` copies the headline figures of an earlier run (this script on older code, same machine) into the JSON
under "before". Goal (issue 4): <= 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import os
import platform
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from specsim import profiles
from specsim.sweep import default_workers, load_spec, run_sweep

OUT = REPO / "experiments" / "results" / "bench_sweep.json"
DRAFTS = ["llama-3.2-1b", "llama-3.2-3b"]
ALPHAS = [0.5, 0.6, 0.7, 0.8, 0.9]
GAMMAS = [1, 2, 3, 4, 5, 6, 7, 8]
BATCHES = [1, 4, 16, 64, 256]


def theory_point(cfg) -> dict:
    """eq. (5) with c fixed per draft: the cheapest meaningful point function (machinery-only benchmark)."""
    from specsim import theory

    c = {"llama-3.2-1b": 0.17, "llama-3.2-3b": 0.43}[cfg.deployment.draft]
    return {"speedup": theory.speedup(cfg.acceptance.alpha, cfg.speculation.gamma, c), "c": c,
            "tokens_per_target_run": theory.expected_tokens(cfg.acceptance.alpha, cfg.speculation.gamma)}


def stack_setting() -> str | None:
    """The hardware's calibrated stack when its profile exists, else the idealized roofline."""
    try:
        profiles.stack(profiles.hardware("h100-sxm").default_stack)
        return None
    except Exception:  # noqa: BLE001 - the stack profile is not written yet
        return "ideal"


def spec_text(points: int, point_fn: str, stack: str | None) -> str:
    seeds = max(1, -(-points // (len(DRAFTS) * len(ALPHAS) * len(GAMMAS) * len(BATCHES))))
    drafts = ", ".join(f'"{d}"' for d in DRAFTS)
    return f"""name = "bench"
[fixed]
hardware = "h100-sxm"
target = "llama-3.1-8b"
{f'stack = "{stack}"' if stack else ''}
requests = 8
prompt_len = 64
output_len = 32
engine = "auto"
[grid]
draft = [{drafts}]
alpha = {ALPHAS}
gamma = {GAMMAS}
batch = {BATCHES}
seed = {list(range(seeds))}
[run]
point_fn = "{point_fn}"
plots = false
"""


def top(profile: cProfile.Profile, n: int = 15, key: str = "cumtime_s") -> list[dict]:
    st = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _) in st.stats.items():
        rows.append({"function": f"{Path(file).name}:{line}({fn})", "calls": nc, "tottime_s": round(tt, 4),
                     "cumtime_s": round(ct, 4)})
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:n]


def _busy(seconds: float, q) -> None:
    t, c = time.perf_counter(), time.process_time()
    while time.perf_counter() - t < seconds:
        pass
    q.put((time.process_time() - c) / seconds)


def cpu_share(workers: int, seconds: float = 2.0) -> float:
    """Share of a core a busy process gets right now (1.0 on an idle machine; less when others run)."""
    import multiprocessing as mp

    q = mp.Queue()
    procs = [mp.Process(target=_busy, args=(seconds, q)) for _ in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return round(sum(q.get() for _ in procs) / workers, 3)


def cumtime(profile: cProfile.Profile, name: str) -> float:
    st = pstats.Stats(profile, stream=io.StringIO())
    return max((v[3] for (f, _, fn), v in st.stats.items() if fn == name), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--theory", action="store_true", help="eq. (5) point function instead of the engine")
    ap.add_argument("--before", type=Path, default=None, help="JSON of this script run on earlier code")
    ap.add_argument("--stack", default=None, help="price the points on this stack (e.g. vllm: the measured-kernel "
                    "stack; issue 22 asks >= 1,000 points a minute there); default the hardware's own")
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the JSON")
    args = ap.parse_args()
    engine = not args.theory and importlib.util.find_spec("specsim.simulate") is not None
    point_fn = "specsim.simulate:run" if engine else "__main__:theory_point"
    stack = args.stack or stack_setting()
    workers = args.workers or default_workers()
    share = cpu_share(workers)

    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "bench.toml"
        spec_path.write_text(spec_text(args.points, point_fn, stack))
        t0 = time.perf_counter()
        spec = load_spec(spec_path, check_point_fn=engine)
        load_s = time.perf_counter() - t0
        spec = type(spec)(**{**spec.__dict__, "points": spec.points[:args.points], "ids": spec.ids[:args.points]})
        fn = None if engine else theory_point

        parent = cProfile.Profile()
        load_before = os.getloadavg()[0]
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
        t1 = time.perf_counter()
        parent.enable()
        report = run_sweep(spec, Path(tmp) / "out", workers=workers, point_fn=fn, progress=False, plots=False)
        parent.disable()
        run_s = time.perf_counter() - t1
        workers_cpu_s = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - children_before
        load_after = os.getloadavg()[0]

        import pandas as pd

        df = pd.read_parquet(report.results)
        t2 = time.perf_counter()
        from specsim.sweep.plots import plot_all

        made, _ = plot_all(df, Path(tmp) / "plots")
        plots_s = time.perf_counter() - t2
        t3 = time.perf_counter()
        again = run_sweep(spec, Path(tmp) / "out", workers=workers, point_fn=fn, progress=False, plots=False)
        resume_s = time.perf_counter() - t3

    # what a worker spends its time on: the point function, serially, on an even sample of points
    from specsim.sweep import resolve_point_fn

    call = resolve_point_fn("specsim.simulate:run") if engine else theory_point
    sample = spec.points[:: max(1, len(spec.points) // 300)]
    import gc

    gc.collect()  # else a full collection of the sweep's garbage lands in some function of the profiled sample
    worker = cProfile.Profile()
    t4 = time.perf_counter()
    worker.enable()
    for cfg in sample:
        call(cfg)
    worker.disable()
    per_point_ms = (time.perf_counter() - t4) / len(sample) * 1e3  # includes profiler overhead

    result = {
        "points": report.points, "workers": workers, "backend": report.backend,
        "point_fn": "specsim.simulate:run" if engine else "eq. (5) theory (engine missing or --theory)",
        "stack": stack or "hardware default", "errors": report.errors,
        "wall_s": round(load_s + run_s, 3), "spec_load_and_validate_s": round(load_s, 3),
        "run_sweep_s": round(run_s, 3), "points_per_s": round(report.points / (load_s + run_s), 1),
        "plots_s": round(plots_s, 3), "plots": [p.name for p in made],
        "rerun_all_finished_s": round(resume_s, 3), "rerun_computed": again.computed,
        "workers_cpu_s": round(workers_cpu_s, 2),
        "worker_cpu_utilization": round(workers_cpu_s / (run_s * workers), 3),
        "load_average_1min_before_after": [round(load_before, 2), round(load_after, 2)],
        "cpu_share_probe": share,
        # what the same run costs on an idle machine: validation + worker CPU spread over the workers + the
        # final assembly, which runs after the last point
        "projected_idle_wall_s": round(load_s + workers_cpu_s / workers + cumtime(parent, "assemble"), 1),
        "goal_wall_s": 60, "meets_goal": load_s + run_s <= 60,
        "serial_point_ms_profiled": round(per_point_ms, 3), "serial_sample_points": len(sample),
        "python": platform.python_version(), "machine": platform.machine(),
        "parent_profile_top": top(parent), "worker_profile_top": top(worker),
        "worker_profile_top_own_time": top(worker, 20, "tottime_s"),
    }
    if args.before:
        old = json.loads(args.before.read_text())
        result["before"] = {k: v for k, v in old.items() if not k.endswith("_top") and not k.endswith("_time")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    brief = {k: v for k, v in result.items() if not k.endswith("_top") and not k.endswith("_time")}
    print(json.dumps(brief, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
