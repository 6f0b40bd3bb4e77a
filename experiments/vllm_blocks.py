"""The block protocol (issue 24, take three): resident engines, plain / speculative / calibration points minutes apart.

    .venv/bin/python experiments/vllm_cpu.py measure     # runs this (resumable: a point is one file)

Why: on this 2-vCPU virtual machine the same one-request decode step took 0.070 s in one session and 0.120 s in
another (experiments/results/vllm_cpu of 2026-12-02 11:41-13:48, docs/validation.md), so sessions of one mode
tens of minutes apart measured the host as much as the engine. Here three engines stay loaded, each in its own
process (experiments/vllm_serve.py, the offline engine, one at a time busy): the target alone (P: the
plain points and the target's calibration), the draft alone (D: the draft's calibration) and one speculative
engine (S, reloaded per block). A block is one speculative variant in one repeat:
- probes of all three engines first and last (host loop + one fixed request; reported, never used to correct);
- every grid point measured plain and speculative back to back, the order alternating point by point (ABBA);
- the block's own calibration of both models spread between those pairs, in rounds (`calibration`): decodes at
  concurrency 1 .. 8 x (k + 1) (the verification steps' token counts; counts <= 16 measured two or three times,
  once per round), prefill chunks of 2 .. 192 tokens (the scheduler's budget lowered at run time), each model
  served alone without speculation.
With --lockstep a grid point's plain and speculative runs go in turns, one engine step at a time to the run whose
clock is behind (`lockstep`), each on its own busy clock (vllm_serve.BusyClock: time passes only while its engine
works; an idle engine jumps to the next arrival), so both runs see the host at the same moments, steps apart
rather than a minute.
The analysis pairs each speculative run with the plain run of its block and prices both with the tables fitted on
that block's calibration (and, beside it, with one table pooled over every block).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import vllm_cpu as vc  # experiments/vllm_cpu.py: the constants, modes and engine arguments

# per block: decode calibration as short as keeps its KV context over the grid's (4 prompts joined: ~72 tokens,
# then 32 outputs: contexts ~72-104 per request against the grid's 18-114), so a block's calibration takes minutes
CAL_DEC_OUTPUT, CAL_DEC_CONCAT = 32, 4
# how many times a decode count is measured in one block, spread over it (count <= key: runs). A 32-step run of a
# small count lasts 2-4 s, one moment of a host whose speed moves within seconds: in the first lockstep campaign
# 3 of 4 k = 2 blocks priced 2 tokens 26-55% above 1 token from one such run each (docs/validation.md). Counts
# above 16 run 7-25 s per run, long enough to average the host themselves.
CAL_DEC_RUNS = ((8, 3), (16, 2))
CAL_CHUNKS = (2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192)


# the pair's moment (session 19): right after a grid pair, the target's decode at the pair's request count, the
# target's steps of that many requests x (k + 1) tokens (a verification's shape, as prefill chunks: the scheduler's
# long_prefill_token_threshold set to k + 1 at run time), the draft's decode; each served alone, no speculation
MOMENT, MOM_DEC_OUTPUT, MOM_DEC_CONCAT, MOM_VER_CONCAT = "cal-mom", 24, 2, 6  # prompts ~19 tokens


def moment_requests(pt: dict) -> int:
    """Requests per step of a pair's moment runs: a closed point's concurrency; for a Poisson rate the line through
    the median requests per step of the plain runs of blocks r1-* (vllm_cpu_lockstep2: 2, 3, 4 at 0.1, 0.2, 0.4
    requests/s), within 1 .. the largest closed concurrency."""
    if "concurrency" in pt:
        return int(pt["concurrency"])
    return max(1, min(max(vc.CLOSED), round((4 + 20 * float(pt["rate"])) / 3)))


def moment_points(pt: dict, k: int) -> list[tuple[str, str, dict]]:
    """(engine role, mode, point) of one grid pair's moment runs (MOMENT)."""
    c, m = moment_requests(pt), k + 1
    dec = {"point": f"{MOMENT}-dec-{pt['point']}", "concurrency": c, "requests": c, "output_len": MOM_DEC_OUTPUT,
           "concat": MOM_DEC_CONCAT}
    ver = {"point": f"{MOMENT}-ver-{pt['point']}", "concurrency": c, "requests": c, "output_len": 1,
           "budget": c * m, "threshold": m, "concat": MOM_VER_CONCAT}
    return [("P", "cal-target", dec), ("P", "cal-target", ver), ("D", "cal-draft", dec)]


def block_plan(repeats: int, variants: list[str]) -> list[tuple[int, str]]:
    """(repeat, speculative mode) in ABBA order over repeats."""
    return [(r, m) for r in range(repeats) for m in (variants if r % 2 == 0 else variants[::-1])]


def block_name(r: int, mode: str) -> str:
    return f"r{r}-{mode}"


def dec_runs(c: int) -> int:
    """How many runs of a block's calibration measure decode count c (CAL_DEC_RUNS)."""
    return next((n for top, n in CAL_DEC_RUNS if c <= top), 1)


def calibration(k: int) -> list[list[dict]]:
    """One block's calibration points for one model, in rounds: round j holds the j-th run of every decode count
    measured at least j + 1 times (up to the block's largest verification: 8 x (k + 1) tokens), sizes mixed, and
    an equal share of the prefill chunks; the block runs the rounds one after the other, so a count's runs fall in
    different parts of the block."""
    need = max(vc.CLOSED) * (k + 1)
    counts = [c for c in vc.CAL_CONCURRENCY if c <= need]
    counts = [counts[j] for j in sorted(range(len(counts)), key=lambda j: (j * 7) % len(counts))]  # sizes mixed
    rounds = [[{"point": f"cal-dec{c}" + (f"-{j + 1}" if j else ""), "concurrency": c, "requests": c,
                "output_len": CAL_DEC_OUTPUT, "concat": CAL_DEC_CONCAT} for c in counts if dec_runs(c) > j]
              for j in range(max(n for _, n in CAL_DEC_RUNS))]
    chunk = [{"point": f"cal-chunk{b}", "concurrency": 1, "requests": 1, "output_len": 2, "budget": b,
              "concat": max(1, min(vc.MAX_CONCAT, -(-2 * b // vc.MEAN_PROMPT_TOKENS)))} for b in CAL_CHUNKS]
    chunk = [chunk[j] for j in sorted(range(len(chunk)), key=lambda j: (j * 5) % len(chunk))]  # sizes mixed
    return [rnd + chunk[j::len(rounds)] for j, rnd in enumerate(rounds)]


def _cut(items: list, slots: int) -> list[list]:
    """`items` in order, cut into `slots` nearly equal consecutive parts."""
    return [items[i * len(items) // slots:(i + 1) * len(items) // slots] for i in range(slots)]


def block_sequence(r: int, mode: str, k: int, grid: list[dict], moment: bool = False) -> list[tuple[str, str, dict]]:
    """(engine role, mode, point) in the order a block runs them: each grid point's plain and speculative runs
    back to back (order alternating), with `moment` its moment runs right after (`moment_points`), the calibration
    of both models (target, draft, target, ...) between pairs."""
    cal = []
    for rnd in calibration(k):
        cal += [x for p in rnd for x in (("P", "cal-target", p), ("D", "cal-draft", p))]
    seq = []
    for i, (pt, extra) in enumerate(zip(grid, _cut(cal, len(grid)))):
        pair = [("P", "plain", pt), ("S", mode, pt)]
        seq += (pair if (i + r) % 2 == 0 else pair[::-1]) + (moment_points(pt, k) if moment else []) + extra
    return seq


class Engine:
    """One resident vllm_serve.py process."""

    def __init__(self, a, out: Path, role: str, mode_names: list[str], served: str):
        modes = vc.modes()
        m = modes[served]
        spec = {"session": role, "mode": served, "k": m["k"], "engine": vc.engine_kwargs(m),
                "configs": {n: vc.run_config(n, modes[n]) for n in mode_names}, "out": str(out),
                "prompts": str(vc.PROMPTS), "cpu_model": vc.cpu_model()}
        sp, lp = vc.session_files(out, f"{role}_{served}", spec)
        self.log = open(lp, "ab")
        self.name = f"{role}:{served}"
        self.p = subprocess.Popen([a.vllm_python, str(vc.ROOT / "experiments" / "vllm_serve.py"), str(sp)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                  env=vc._env(kv_gb=1), cwd=vc.ROOT, text=True, bufsize=1)
        self.ready = self._answer()

    def _answer(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"vllm_blocks: engine {self.name} exited ({self.p.wait()}); see {self.log.name}")
        return json.loads(line)

    def ask(self, cmd: dict) -> dict:
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return self._answer()

    def close(self) -> None:
        try:
            self.ask({"op": "quit"})
        except (SystemExit, BrokenPipeError, json.JSONDecodeError):
            pass
        self.p.wait(timeout=120)
        self.log.close()


def lockstep(pairs: list[tuple[Engine, dict]]) -> list[dict]:
    """Run points on several engines in turns, one engine step at a time, each run on its own busy clock
    (vllm_serve.BusyClock): the next step goes to the engine whose clock is furthest behind, so the runs move
    through their own time together and see the host at the same moments, start to end."""
    for e, cmd in pairs:
        e.ask(dict(cmd, op="begin"))
    done: dict[int, dict] = {}
    t = [0.0] * len(pairs)
    while len(done) < len(pairs):
        j = min((j for j in range(len(pairs)) if j not in done), key=lambda j: (t[j], j))
        ans = pairs[j][0].ask({"op": "step"})
        if ans.get("done"):
            done[j] = ans
        else:
            t[j] = float(ans.get("t", t[j]))
    return [done[j] for j in range(len(pairs))]


def run_file(out: Path, mode: str, point: str, block: str) -> Path:
    return out / "runs" / f"{mode}__{point}__{block}.json"


def measure(a, out: Path, variants: list[str]) -> None:
    grid = vc.grid_points(a.output_len, a.rates)
    resident: dict[str, Engine] = {}
    plan = block_plan(a.repeats, variants)
    try:
        for i, (r, mode) in enumerate(plan):
            k, b = vc.modes()[mode]["k"], block_name(r, mode)
            begun = sorted((out / "runs").glob(f"*__{b}.json"))  # a block begun without moment runs stays so
            moment = getattr(a, "moment_cal", False) and (not begun or any(f"__{MOMENT}-" in f.name for f in begun))
            seq = [(role, m, pt) for role, m, pt in block_sequence(r, mode, k, grid, moment)
                   if not run_file(out, m, pt["point"], b).exists()]
            if not seq:
                continue
            print(f"[{i + 1}/{len(plan)}] block {b}: {len(seq)} points", flush=True)
            if "P" not in resident:
                resident["P"] = Engine(a, out, "P", ["plain", "cal-target"], "plain")
            if "D" not in resident:
                resident["D"] = Engine(a, out, "D", ["cal-draft"], "cal-draft")
            resident["S"] = Engine(a, out, "S", [mode], mode)
            roles = ("P", "D", "S")
            for role in roles:
                resident[role].ask({"op": "probe", "name": f"{b}_{role}_before"})
            i = 0
            while i < len(seq):
                role, m, pt = seq[i]
                cmd = {"mode": m, "point": pt, "repeat": r, "block": b, "file": str(run_file(out, m, pt["point"], b))}
                if a.lockstep and i + 1 < len(seq) and seq[i + 1][2] is pt and {m, seq[i + 1][1]} == {"plain", mode}:
                    r2, m2, _ = seq[i + 1]
                    cmd2 = dict(cmd, mode=m2, file=str(run_file(out, m2, pt["point"], b)))
                    ans = lockstep([(resident[role], cmd), (resident[r2], cmd2)])
                    i += 2
                else:
                    ans = [resident[role].ask(dict(cmd, op="run"))]
                    i += 1
                for x in ans:
                    print(f"  {x['ok'].split('/')[-1]}: {x.get('tok_s', 0):.1f} tok/s, {x.get('steps')} steps",
                          flush=True)
            for role in roles:
                resident[role].ask({"op": "probe", "name": f"{b}_{role}_after"})
            resident.pop("S").close()
    finally:
        for e in resident.values():
            e.p.kill()
