"""A command line for the vLLM output readers, which `specsim` itself has no command for (experiments/bad_inputs.py
runs the bench-JSON and /metrics cases through it).

The readers live in specsim/validation/vllm_outputs.py and are called by experiments/vllm_cpu.py (`import`,
`measure`) and experiments/vllm_analyze.py on what a vLLM server wrote. This script calls them the same way and
reports like the `specsim` CLI: one JSON object on stdout and exit 0, or a `SpecsimError` as one line
"specsim: error: ..." and exit 2. Any other exception is left to Python (a traceback), so the harness sees it.

    .venv/bin/python experiments/bad_inputs_readers.py bench FILE.json
    .venv/bin/python experiments/bad_inputs_readers.py metrics AFTER.txt [--before BEFORE.txt]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsim.errors import ConfigError, SpecsimError  # noqa: E402
from specsim.validation import vllm_outputs as vr  # noqa: E402


def _finite(x):
    return x if isinstance(x, (int, str)) or x is None or math.isfinite(x) else str(x)


def bench(path: str) -> dict:
    d = vr.read_bench(path)
    med = {k: _finite(float(sorted(d[k])[len(d[k]) // 2])) if len(d[k]) else None for k in ("ttft_s", "tpot_s",
                                                                                           "e2e_s")}
    return {"completed": d["completed"], "output_tokens": d["output_tokens"],
            "output_throughput": _finite(d["output_throughput"]), **{f"{k}_median": v for k, v in med.items()}}


def _text(path: str) -> str:
    """What an HTTP GET of /metrics would have given (vllm_cpu.py decodes the response as UTF-8)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read ({type(e).__name__})", file=path) from None


def metrics(after: str, before: str | None) -> dict:
    a = vr.spec_counters(vr.parse_metrics(_text(after), after), after)
    b = vr.spec_counters(vr.parse_metrics(_text(before), before), before) if before else \
        {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_pos": []}
    delta = vr.counter_delta(b, a)
    return {**{k: v for k, v in delta.items() if k != "accepted_per_pos"}, **vr.acceptance_summary(delta)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("bench").add_argument("file")
    m = sub.add_parser("metrics")
    m.add_argument("after")
    m.add_argument("--before", default=None)
    a = ap.parse_args(argv)
    try:
        out = bench(a.file) if a.cmd == "bench" else metrics(a.after, a.before)
    except SpecsimError as e:
        print(f"specsim: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
