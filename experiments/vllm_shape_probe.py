"""Diagnosis, not a figure of record and never a calibration: does the host's drift move a large step as much as a
small one, measured with no speculation at all?

    .venv/bin/python experiments/vllm_shape_probe.py --out experiments/results/vllm_shape_probe

Why (issue 24, session 17, docs/validation.md; experiments/vllm_host_shape.py): across the campaign's blocks, the
speculative / plain step ratio of a lockstep grid pair was highest when the host ran the plain step fast (k = 3 c8
ratio 3.45-4.22), as if a fast moment sped small steps more than large ones. Here two resident target engines
(each one process, the target served alone as the calibration serves it) run decodes in lockstep on busy clocks
(vllm_blocks.lockstep): A at 32 requests (32-token steps, k = 3 c8's verification), B at 8 requests (8-token steps,
its plain step), ABBA over repeats; then per repeat the median of each and, across repeats, whether the ratio
falls as B's step grows (Spearman, elasticity d log A / d log B). Writes the runs and summary.txt.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_blocks as vb  # noqa: E402
from vllm_host_shape import full_steps, shape_stats  # noqa: E402  (experiments/vllm_host_shape.py)

LARGE, SMALL = 32, 8  # requests per decode step of engine A and of engine B
POINTS = {"A": {"point": f"dec{LARGE}", "concurrency": LARGE, "requests": LARGE, "output_len": 40, "concat": 1},
          "B": {"point": f"dec{SMALL}", "concurrency": SMALL, "requests": SMALL, "output_len": 96, "concat": 1}}


def summarize(pairs: list[tuple[dict, dict]]) -> list[str]:
    big = np.array([full_steps(a, LARGE) for a, _ in pairs])
    small = np.array([full_steps(b, SMALL) for _, b in pairs])
    rho, p, el = shape_stats(small, big)
    lines = [f"repeat {i}: {LARGE}-token step {x:.3f} s, {SMALL}-token step {y:.3f} s, ratio {x / y:.2f}"
             for i, (x, y) in enumerate(zip(big, small))]
    return lines + [f"{len(pairs)} repeats: {SMALL}-token step {small.min():.3f}-{small.max():.3f} s, ratio "
                    f"{(big / small).min():.2f}-{(big / small).max():.2f}; Spearman ({SMALL}-token step, ratio) "
                    f"{rho:+.2f} (p {p:.2f}); elasticity d log {LARGE} / d log {SMALL} {el:.2f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--vllm-python", default="/work/vllm-env/venv/bin/python")
    a = ap.parse_args()
    (a.out / "runs").mkdir(parents=True, exist_ok=True)
    eng = {r: vb.Engine(a, a.out, r, ["cal-target"], "cal-target") for r in ("A", "B")}
    pairs = []
    try:
        for i in range(a.repeats):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            cmds = [(eng[r], {"mode": "cal-target", "point": POINTS[r], "repeat": i, "block": f"shape-{r}",
                              "file": str(a.out / "runs" / f"{r}__r{i}.json")}) for r in order]
            vb.lockstep(cmds)
            runs = {r: json.loads((a.out / "runs" / f"{r}__r{i}.json").read_text()) for r in ("A", "B")}
            pairs.append((runs["A"], runs["B"]))
            print(f"repeat {i} done", flush=True)
    finally:
        for e in eng.values():
            e.close()
    lines = summarize(pairs)
    (a.out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
