"""Run ~670 bad inputs and ~45 good ones through the installed `specsim` CLI and classify what each did.

Issue 13's promise: a bad input ends in exit 2 with one line on stderr that says what is wrong — no traceback, no
silent wrong number, no hang. Every case runs as a new user would run it: the installed console script
(`.venv/bin/specsim`, else `specsim` on PATH) in a subprocess, in a scratch folder, with a timeout (60 s; the
process group is killed past it). A loopback `http.server` stands in for a `--scheduler` that is not Dask. The
vLLM bench-JSON and /metrics readers have no `specsim` command: their cases ("@reader ...") run
experiments/bad_inputs_readers.py, which calls them as experiments/vllm_cpu.py does and reports like the CLI.

Classes: clear (exit 2, one stderr line, no traceback), recovered (exit 0 with one JSON object where that is
allowed: an "either" case, or a "recover" case — a damaged sweep folder — that said on stderr what it recomputed),
traceback ("Traceback" on stderr), silent (exit 0 on a bad input), hang (the timeout), unclear (anything else:
another exit code, several lines). Good inputs
must exit 0 with exactly one JSON object on stdout: ok or failed.

    .venv/bin/python experiments/bad_inputs.py [--jobs 2] [--timeout 60] [--only KIND]
writes experiments/results/bad_inputs.md (counts, then one row per case) and prints the same counts.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bad_inputs_cases import KIND_PART, REPO, cases, prepare  # noqa: E402

RESULTS = REPO / "experiments" / "results" / "bad_inputs.md"
BAD_CLASSES = ("clear", "recovered", "traceback", "silent", "hang", "unclear")


def specsim_exe() -> str:
    exe = REPO / ".venv" / "bin" / "specsim"
    found = str(exe) if exe.is_file() else shutil.which("specsim")
    if not found:
        sys.exit("no installed specsim: run the README's install command first")
    return found


def http_server() -> tuple[http.server.ThreadingHTTPServer, int]:
    """Something that answers on a TCP port but is not a Dask scheduler."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def run_one(exe: str, args: str, d: Path, port: int, timeout: float) -> tuple:
    """(exit code or None on timeout, stdout, stderr, seconds)."""
    cwd = d / "work"
    if args.startswith("@hijack "):
        cwd, args = d / "hijack", args[len("@hijack "):]
    head = [exe]
    if args.startswith("@reader "):  # the vLLM readers' command line (experiments/bad_inputs_readers.py)
        head, args = [str(Path(exe).parent / "python"), str(Path(__file__).with_name("bad_inputs_readers.py"))], \
            args[len("@reader "):]
    argv = [*head, *[a.format(d=d, port=port) for a in shlex.split(args)]]
    env = {k: v for k, v in os.environ.items() if k != "SPECSIM_PROFILE_PATH"}
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = None
    return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.monotonic() - t0


def one_json(out: str) -> bool:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if len(lines) != 1:
        return False
    try:
        return isinstance(json.loads(lines[0]), dict)
    except ValueError:
        return False


def classify(expect: str, rc, out: str, err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if rc is None:
        return "hang"
    if expect == "good":
        return "ok" if rc == 0 and one_json(out) else "failed"
    if "Traceback" in err:
        return "traceback"
    if rc == 0:
        ok = one_json(out) and (expect == "either" or (expect == "recover" and lines))
        return "recovered" if ok else "silent"
    if rc == 2 and len(lines) == 1 and lines[0].startswith("specsim: error:"):
        return "clear"
    return "unclear"


def shown(err: str, out: str, cls: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if cls in ("traceback", "unclear") and lines:
        text = f"[{len(lines)} lines] {lines[-1]}"
    elif lines:
        text = lines[0] if cls != "recovered" else "note: " + lines[-1]
    else:
        text = out.strip()[:100]
    return text.replace("|", "\\|")[:220]


def _newer_line(bad: list[dict]) -> str:
    """The issue 21 kinds (bad_inputs_newer.py, bad_inputs_measured.py) counted on their own."""
    rows = [r for r in bad if KIND_PART[r["kind"]].startswith("21")]
    c = Counter(r["class"] for r in rows)
    return (f"Of these, {len(rows)} are the kinds added for issue 21 (parts 21.x): "
            + ", ".join(f"{c.get(k, 0)} {k}" for k in BAD_CLASSES) + ".")


def report(rows: list[dict], wall_s: float, exe: str) -> str:
    bad = [r for r in rows if r["expect"] != "good"]
    good = [r for r in rows if r["expect"] == "good"]
    cb, cg = Counter(r["class"] for r in bad), Counter(r["class"] for r in good)
    failing = [r for r in bad if r["class"] not in ("clear", "recovered")] + [r for r in good if r["class"] != "ok"]
    by_part = Counter(KIND_PART[r["kind"]] for r in failing)
    lines = [
        "# Bad inputs through the installed CLI (experiments/bad_inputs.py)", "",
        f"{len(bad)} bad inputs, {len(good)} good ones, run with `{exe}` in a scratch folder "
        f"({wall_s:.0f} s wall; SCRATCH below is that folder). Classes are defined in the script's docstring.", "",
        "| bad inputs | " + " | ".join(BAD_CLASSES) + " |", "|---" * (len(BAD_CLASSES) + 1) + "|",
        f"| {len(bad)} | " + " | ".join(str(cb.get(c, 0)) for c in BAD_CLASSES) + " |", "",
        f"Good inputs: {cg.get('ok', 0)} ok, {cg.get('failed', 0)} failed (of {len(good)}).", "",
        _newer_line(bad), "",
        "Cases not yet as promised, by the issue part that owns them (A-C: issue 13; 15, 16; 21.x: issue 21): "
        + (", ".join(f"part {k}: {v}" for k, v in sorted(by_part.items())) or "none") + ".", "",
        "| # | kind | part | case | expect | class | exit | s | stderr (first line; last for tracebacks) |",
        "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        lines.append(f"| {i} | {r['kind']} | {KIND_PART[r['kind']]} | {r['name']} | {r['expect']} | {r['class']} | "
                     f"{'-' if r['rc'] is None else r['rc']} | {r['seconds']:.1f} | {r['shown']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (2 on a 2-core machine)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    ap.add_argument("--only", default=None, help="run only cases of these kinds, comma-separated (e.g. trace,good)")
    ap.add_argument("--out", default=str(RESULTS), help="markdown report to write")
    args = ap.parse_args(argv)
    exe = specsim_exe()
    todo = [c for c in cases() if args.only is None or c[0] in args.only.split(",")]
    srv, port = http_server()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="specsim-bad-inputs-") as tmp:
        d = Path(tmp)
        prepare(d, exe)

        def work(case):
            kind, name, cmd, expect = case
            rc, out, err, sec = run_one(exe, cmd, d, port, args.timeout)
            cls = classify(expect, rc, out, err)
            return {"kind": kind, "name": name, "expect": expect, "class": cls, "rc": rc, "seconds": sec,
                    "shown": shown(err.replace(str(d), "SCRATCH"), out.replace(str(d), "SCRATCH"), cls)}
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = list(pool.map(work, todo))
    srv.shutdown()
    text = report(rows, time.monotonic() - t0, exe)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    print("\n".join(text.splitlines()[4:13]))
    for r in rows:
        if r["class"] not in ("clear", "recovered", "ok"):
            print(f"  {r['class']:9s} [{r['kind']}/{KIND_PART[r['kind']]}] {r['name']}: {r['shown'][:150]}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
