"""What a step's logit positions cost on this CPU, read from the campaign's calibration without speculation
(issue 24, session 19; a diagnosis, never fitted).

    .venv/bin/python experiments/vllm_logit_positions.py --out experiments/results/vllm_cpu_lockstep2

Why (docs/validation.md, session 19): a verification computes the target's logits at every one of its c (k + 1)
positions; the calibration's decodes of N requests compute N, its prefill chunks of N tokens none but a prompt's
last. Per token count N: the median step of the target's decodes of N requests (cal-decN runs) against one
request's prefill chunks of exactly N tokens (cal-chunk runs), pooled over every block (moment runs left out).
The difference bounds what N logit positions add (it also holds N sequences' per-request work). Writes
logit_positions.txt beside the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from specsim.validation import request_table as rt  # noqa: E402
from vllm_blocks import MOMENT  # noqa: E402  (imports no vLLM)

COUNTS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 28, 32, 40, 48)


def split(steps: list[dict], dec: dict, chunk: dict) -> None:
    """Add each step's time to `dec` (N requests x 1 token) or `chunk` (1 request, N prefill tokens) by N: the
    request table's two families (specsim.validation.request_table.Families), its one-request decodes left out."""
    fam = rt.Families.split(steps)
    for s in fam.decode:
        dec.setdefault(s["gen_tokens"], []).append(s["time_s"])
    for s in fam.single:
        if s["ctx_requests"] == 1 and s["gen_requests"] == 0:
            chunk.setdefault(s["ctx_tokens"], []).append(s["time_s"])


def lines(dec: dict, chunk: dict) -> list[str]:
    out = ["tokens N: decode of N requests (steps) | one request's N-token chunk (steps) | difference"]
    for n in COUNTS:
        if dec.get(n) and chunk.get(n):
            d, c = float(np.median(dec[n])), float(np.median(chunk[n]))
            out.append(f"{n:3d}: {d:.3f} s ({len(dec[n])}) | {c:.3f} s ({len(chunk[n])}) | {d - c:+.3f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a results folder of experiments/vllm_cpu.py measure")
    a = ap.parse_args()
    files = sorted(f for f in (a.out / "runs").glob("cal-target__cal-*.json") if f"__{MOMENT}-" not in f.name)
    if not files:
        raise SystemExit(f"vllm_logit_positions: no target calibration runs in {a.out / 'runs'}")
    dec: dict = {}
    chunk: dict = {}
    for f in files:
        split(json.loads(f.read_text())["steps"], dec, chunk)
    text = "\n".join([f"{len(files)} target calibration runs of {a.out}"] + lines(dec, chunk)) + "\n"
    (a.out / "logit_positions.txt").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
