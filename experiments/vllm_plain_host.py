"""Diagnosis, never a fit of record: the per-mode TTFT / TPOT p50 cells if each block's host speed were read from
its own plain runs at the block's other grid points instead of from its calibration.

    .venv/bin/python experiments/vllm_plain_host.py --out experiments/results/vllm_cpu_lockstep2

Why (issue 24, session 21): block r14-draft-k2's calibration ran ~20% faster than its grid runs (host factor 0.80,
the lowest of 45 blocks), and 19 of its 28 per-mode cells came out beyond 10%, all too fast, while its speedups
were within 6.7%. Plain runs are runs without speculation, so calibration may read them; leaving out the point
being predicted keeps the plain cells out of sample. Every prediction of a (block, point) is scaled by the median,
over the block's plain runs at the other points, of measured / predicted plain TPOT p50 (a closed loop scales
exactly with its step times; a Poisson point only roughly). Reads the analysis JSON that `analyze --out` wrote.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

CELLS = ("plain_ttft", "plain_tpot", "spec_ttft", "spec_tpot")


def cells(rows: list[dict], scale) -> dict:
    """(variant, point, cell) -> median predicted / median measured - 1 over repeats."""
    blocks = defaultdict(list)
    for r in rows:
        blocks[(r["variant"], r["repeat"])].append(r)
    g = defaultdict(lambda: ([], []))
    for brows in blocks.values():
        for r in brows:
            c = scale(brows, r)
            for m in CELLS:
                g[(r["variant"], r["point"], m)][0].append(r[f"meas_{m}_p50_s"])
                g[(r["variant"], r["point"], m)][1].append(r[f"pred_{m}_p50_s"] * c)
    return {key: float(np.median(p) / np.median(m) - 1) for key, (m, p) in g.items()}


def other_points(brows: list[dict], r: dict) -> float:
    return float(np.median([o["meas_plain_tpot_p50_s"] / o["pred_plain_tpot_p50_s"] for o in brows
                            if o["point"] != r["point"]]))


def summary(name: str, e: dict) -> str:
    a = np.abs(list(e.values()))
    big = ", ".join(f"{v} {p} {m} {x:+.1%}" for (v, p, m), x in sorted(e.items()) if abs(x) > 0.10)
    n = int((a > 0.10).sum())
    return f"{name}: median |err| {np.median(a):.1%}, max {a.max():.1%}; {n} of {a.size} beyond 10%: {big}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    f = ap.parse_args().out / "vllm_cpu_analysis.json"
    if not f.is_file():
        print(f"vllm_plain_host: {f}: no analysis here (run experiments/vllm_cpu.py analyze --out DIR first)")
        raise SystemExit(2)
    rows = json.loads(f.read_text())["rows"]
    print(summary("host factor from calibration (the record)", cells(rows, lambda b, r: 1.0)))
    print(summary("host factor from the block's plain runs at its other points", cells(rows, other_points)))


if __name__ == "__main__":
    main()
