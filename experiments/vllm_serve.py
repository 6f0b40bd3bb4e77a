"""A resident vLLM engine for experiments/vllm_blocks.py, run inside vLLM's own venv: one offline engine in this one
process (experiments/vllm_session.py's Session, VLLM_ENABLE_V1_MULTIPROCESSING=0), driven over a pipe.

    VLLM_PY experiments/vllm_serve.py SESSION.json     # started by `vllm_cpu.py measure`; not run by hand

Commands, one JSON line each on stdin, answered with one JSON line on the original stdout (vLLM's own output goes to
stderr, the engine's log): probe, run (a point on the wall clock), begin + step (a point on a busy clock, one engine
step per command, for lockstep), quit.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_session import (Session, _probe, _record, _write, iter_point, run_point,  # noqa: E402
                          vr)


class BusyClock:
    """The lockstep protocol's clock: it runs only while this engine works on a command (`resume` .. `pause`), so
    the time another engine's step took in between is not this run's; an idle engine jumps to the next arrival."""

    def __init__(self):
        self.busy, self.since = 0.0, None

    def resume(self) -> None:
        self.since = time.perf_counter()

    def pause(self) -> None:
        self.busy, self.since = self.now(), None

    def now(self) -> float:
        return self.busy + (time.perf_counter() - self.since if self.since is not None else 0.0)

    def wait_until(self, t: float) -> None:
        self.busy += max(0.0, t - self.now())


class Server:
    """A resident engine that runs the points the harness sends, one JSON line each on stdin, and answers each with
    one JSON line on the original stdout (vLLM's own output goes to stderr, the session's log). Resident engines let
    the harness interleave plain, speculative and calibration points minutes apart (experiments/vllm_blocks.py), or
    step two engines in turns (lockstep: each run on its own busy clock, so both see the host at the same moments).
    Commands: {"op": "probe", "name": N} | {"op": "run", "mode": M, "point": {...}, "repeat": R, "block": B,
    "file": F} | {"op": "begin", ...as run} then {"op": "step"} until it answers done | {"op": "quit"}."""

    def __init__(self, path: str):
        self.spec = json.loads(Path(path).read_text())
        self.reply = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)  # print() and vLLM's handlers now write to the log
        sys.stdout = sys.stderr
        self.prompts = [p for p in Path(self.spec["prompts"]).read_text().splitlines() if p.strip()]
        self.ses = Session(self.spec)
        if os.environ.get("SPECSIM_PROBE_PARTS"):  # diagnosis only (experiments/vllm_lockstep_probe.py)
            from vllm_spec_probe import time_parts

            time_parts(self.ses)
        run_point(self.ses, self.prompts, {"point": "warm", "concurrency": 2, "requests": 2, "output_len": 8}, 0)
        self.probe: dict = {}
        self.cur = None
        self.touch_s: float | None = None
        self.answer({"ready": True, "num_gpu_blocks": self.ses.num_gpu_blocks,
                     "hooked": self.ses.rec.sched is not None})

    def touch(self) -> None:
        """One unrecorded one-request step pair (prefill, decode) right before a measured run: an engine that sat
        idle while the others worked ran its next first step 2-3x slow (experiments/results/vllm_cpu_lockstep2: the
        speculative engine's first c2 prefill 1.4-2.3 s, its second 0.7 s, the same shapes warmed at start), so a
        run starts from an engine that has just worked, as a serving engine has. Its time is recorded with the run
        (config.touch_before_s), never in it."""
        t0 = time.perf_counter()
        run_point(self.ses, self.prompts, {"point": "touch", "concurrency": 1, "requests": 1, "output_len": 2}, 0)
        self.touch_s = time.perf_counter() - t0

    def answer(self, obj: dict) -> None:
        self.reply.write(json.dumps(obj) + "\n")

    def finish(self, cmd: dict, d: dict, clock: str) -> None:
        pt, r = cmd["point"], cmd["repeat"]
        d = _record(self.ses, self.spec, d, pt, cmd["mode"], r, self.probe, cmd.get("block"))
        d["config"]["clock"] = clock
        d["config"]["touch_before_s"] = self.touch_s
        _write(Path(cmd["file"]), d)
        s = vr.summarize_requests(d)
        print(f"[{cmd.get('block')}] {cmd['mode']} {pt['point']} r{r} ({clock}): {s['output_throughput']:.2f} tok/s, "
              f"{len(d['steps'])} steps", flush=True)
        self.answer({"ok": cmd["file"], "done": True, "tok_s": s["output_throughput"], "steps": len(d["steps"])})

    def step(self) -> None:
        cmd, it, clock = self.cur
        clock.resume()
        try:
            next(it)
        except StopIteration as stop:
            clock.pause()
            self.cur = None
            self.finish(cmd, stop.value, "busy (lockstep)")
            return
        clock.pause()
        self.answer({"done": False, "t": clock.busy})

    def loop(self) -> None:
        for line in sys.stdin:
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "quit":
                break
            if op == "probe":
                self.probe = _probe(self.ses, self.prompts, cmd["name"])
                (Path(self.spec["out"]) / "probes").mkdir(exist_ok=True)
                _write(Path(self.spec["out"]) / "probes" / f"{cmd['name']}.json",
                       dict(self.probe, mode=self.spec["mode"]))
                self.answer(self.probe)
            elif op == "run":
                self.touch()
                self.finish(cmd, run_point(self.ses, self.prompts, cmd["point"], 1000 + cmd["repeat"]), "wall")
            elif op == "begin":
                self.touch()
                clock = BusyClock()
                self.cur = (cmd, iter_point(self.ses, self.prompts, cmd["point"], 1000 + cmd["repeat"], clock), clock)
                self.answer({"begun": True})
            elif op == "step":
                self.step()


if __name__ == "__main__":  # vLLM starts workers with spawn: the entry point must be guarded
    Server(sys.argv[1]).loop()
