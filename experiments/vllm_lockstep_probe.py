"""Diagnosis, not a figure of record and never a calibration: does a speculative step cost more in lockstep (its
steps alternating with the plain engine's, as the campaign measures) than with its engine running alone?

    .venv/bin/python experiments/vllm_lockstep_probe.py --out experiments/results/vllm_lockstep_probe \
        [--k 5] [--point c4] [--with-draft] [--with-verify]

Why (issue 24, session 14, docs/validation.md): on the fresh blocks every speculative point came out 0-12% slower
against the tables than the plain point it is paired with; a plain step that follows a speculative one costs
+4-7 ms more than the plain step before it (paired, 2,882 switches), and the speculative engine follows the plain
one on nearly every step. Here two resident engines (P: target alone; S: draft model, k = 5), instrumented
(vllm_serve.py with SPECSIM_PROBE_PARTS=1: the forwards and logits of both models timed inside every step), run the
grid's c1 point in lockstep and each alone on the wall clock, ABBA over repeats. Writes the runs and summary.txt.
Session 26: any closed grid point (`--point c4`: the step excess, vllm_step_excess.py, is largest at k = 5 c4), and
`--with-verify`: the target alone decoding c (k + 1) requests, the token count of the point's verification, so the
speculative step's target forward can be set against a plain step of as many tokens (a decode, not a chunk).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_blocks as vb  # noqa: E402
import vllm_cpu as vc  # noqa: E402


def _refuse(msg: str) -> None:
    """Bad input: one line, exit 2."""
    print(msg, file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vllm-python", default="/work/vllm-env/venv/bin/python")
    ap.add_argument("--point", default="c1", help="a closed grid point (c1, c2, c4, c8)")
    ap.add_argument("--with-verify", action="store_true", help="the target alone (engine P) decoding c (k + 1) "
                    "requests, run alone after each repeat's alone runs")
    ap.add_argument("--summarize", action="store_true", help="no engine: summarize the runs already in --out/runs")
    ap.add_argument("--with-draft", action="store_true", help="a third engine, the draft alone (the campaign's layout),"
                    " whose decode of the point runs alone beside the others'")
    a = ap.parse_args()
    pts = {p["point"]: p for p in vc.grid_points(vc.OUTPUT_LEN) if "concurrency" in p}
    if a.point not in pts:
        _refuse(f"vllm_lockstep_probe: --point {a.point!r} is not a closed grid point ({', '.join(pts)})")
    if a.k not in vc.KS:
        _refuse(f"vllm_lockstep_probe: --k {a.k} is not a measured k ({', '.join(map(str, vc.KS))})")
    pt = pts[a.point]
    if a.summarize:
        files = sorted(str(f) for f in (a.out / "runs").glob("*.json"))
        if not files:
            _refuse(f"vllm_lockstep_probe: no runs in {a.out / 'runs'} to summarize")
        return write_summary(a.out, files, a.k, pt["concurrency"])
    os.environ["SPECSIM_PROBE_PARTS"] = "1"
    (a.out / "runs").mkdir(parents=True, exist_ok=True)
    mode = f"draft-k{a.k}"
    c_ver = pt["concurrency"] * (a.k + 1)
    ver = {"point": f"c{c_ver}", "concurrency": c_ver, "requests": c_ver, "output_len": pt["output_len"]}
    P = vb.Engine(a, a.out, "P", ["plain"], "plain")
    S = vb.Engine(a, a.out, "S", [mode], mode)
    D = vb.Engine(a, a.out, "D", ["cal-draft"], "cal-draft") if a.with_draft else None
    files = []
    try:
        for r in range(a.repeats):
            for how in (("lockstep", "alone") if r % 2 == 0 else ("alone", "lockstep")):
                cmds = [(e, {"mode": m, "point": pt, "repeat": r, "block": how,
                             "file": str(a.out / "runs" / f"{m}__{how}__r{r}.json")})
                        for e, m in ((P, "plain"), (S, mode))]
                if how == "lockstep":
                    vb.lockstep(cmds)
                else:
                    if D is not None:  # the draft served alone in its own process, as the campaign calibrates it
                        cmds.append((D, {"mode": "cal-draft", "point": pt, "repeat": r, "block": how,
                                         "file": str(a.out / "runs" / f"cal-draft__{how}__r{r}.json")}))
                    if a.with_verify:  # a plain decode of as many tokens as the point's verification
                        cmds.append((P, {"mode": "plain", "point": ver, "repeat": r, "block": "verify",
                                         "file": str(a.out / "runs" / f"plain-verify__{how}__r{r}.json")}))
                    for e, c in (cmds if r % 2 == 0 else cmds[::-1]):
                        e.ask(dict(c, op="run"))
                files += [c["file"] for _, c in cmds]
                print(f"repeat {r} {how} done", flush=True)
    finally:
        for e in (P, S, D):
            if e is not None:
                e.close()
    write_summary(a.out, files, a.k, pt["concurrency"])


def run_name(path: Path) -> tuple[str, str]:
    """(mode, how) of a probe's run file, named MODE__HOW__rN.json."""
    mode, how = Path(path).name.split("__")[:2]
    return mode, how


def write_summary(out: Path, files: list[str], k: int, c: int) -> None:
    runs = [json.loads(Path(f).read_text()) | dict(zip(("_mode", "_how"), run_name(f))) for f in files]
    lines = summarize(runs, k, c)
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def summarize(runs: list[dict], k: int, c: int = 1) -> list[str]:
    """Median per (engine, how) over full-size decode steps: c requests (c (k + 1) for the verify-sized plain
    decode), every request verifying k drafts for S; the step and its timed parts."""
    out = []
    for mode in sorted({r["_mode"] for r in runs}):
        for how in ("alone", "lockstep"):
            if not any(r["_mode"] == mode and r["_how"] == how for r in runs):
                continue
            n = c * (k + 1) if mode == "plain-verify" else c
            steps = [s for r in runs if r["_mode"] == mode and r["_how"] == how for s in r["steps"]
                     if s["ctx_requests"] == 0 and s["gen_requests"] == n
                     and s.get("drafts", 0) == (k * c if mode.startswith("draft") else 0)]
            if not steps:
                out.append(f"{mode} {how}: no full-size steps")
                continue
            parts, passes = defaultdict(list), defaultdict(list)
            for s in steps:
                for p, ts in (s.get("parts") or {}).items():
                    parts[p].append(sum(ts))
                    if len(ts) > 1:  # the proposer's passes, one by one
                        passes[p].append(ts)
            desc = ", ".join(f"{p} {np.median(v):.4f}" for p, v in sorted(parts.items()))
            desc += "".join(f"; {p} per pass " + " ".join(f"{x:.4f}" for x in np.median(np.array(v), axis=0))
                            for p, v in sorted(passes.items()) if len({len(t) for t in v}) == 1)
            out.append(f"{mode} {how}: {len(steps)} steps, step {np.median([s['time_s'] for s in steps]):.4f} s; "
                       f"{desc}")
    return out


if __name__ == "__main__":
    main()
