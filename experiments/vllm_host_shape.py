"""Diagnosis, never a fit: does the host's speed move every step alike, or small steps more than large ones?

    .venv/bin/python experiments/vllm_host_shape.py --out experiments/results/vllm_cpu_lockstep2

Why (issue 24, session 17, docs/validation.md): k = 3 c8 was measured lower in blocks r5-r8 than r0-r4 and each
block's own tables predict it anywhere in 0.770-0.956. Every calibration and every pricing here treats the host's
drift as one factor for all steps (`specsim/validation/host_scale.py`; a ratio of two steps cancels it). In a grid
pair the plain and the speculative runs step in lockstep, so they see the host at the same moments: per closed point
and block this prints the plain run's median full decode step (c tokens: the host's speed at that time) and the
speculative run's median full verification (c x (k + 1) tokens), then across the blocks their rank correlation
and the elasticity d log(speculative) / d log(plain) (least squares over the blocks). Alike: elasticity 1, no
correlation between the plain step and the ratio. Reads the committed runs; prints, and writes host_shape.txt.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr


def full_steps(run: dict, tokens: int) -> float | None:
    """Median time of the run's decode steps (no prefill) that scheduled exactly `tokens` tokens."""
    t = [s["time_s"] for s in run["steps"] if not s["ctx_requests"] and s["gen_tokens"] == tokens]
    return float(np.median(t)) if t else None


def point(out: Path, k: int, c: int) -> list[tuple[str, float, float]]:
    """(block, plain step, speculative step) for closed point c of variant draft-k over every block measured."""
    rows = []
    for sp in sorted((out / "runs").glob(f"draft-k{k}__c{c}__*.json")):
        block = sp.stem.split("__")[-1]
        pl = out / "runs" / f"plain__c{c}__{block}.json"
        if not pl.exists():
            continue
        p, s = full_steps(json.loads(pl.read_text()), c), full_steps(json.loads(sp.read_text()), c * (k + 1))
        if p and s:
            rows.append((block, p, s))
    return rows


def shape_stats(small: np.ndarray, large: np.ndarray) -> tuple[float, float, float]:
    """(Spearman of the small step against large / small, its p, the elasticity d log large / d log small by least
    squares) over paired medians: one factor for every step gives no correlation and elasticity 1."""
    rho, p = spearmanr(small, large / small)
    return float(rho), float(p), float(np.polyfit(np.log(small), np.log(large), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    lines = ["k, point (verification tokens): blocks; plain step min-max; speculative / plain min-max; Spearman "
             "(plain step, ratio) and p; elasticity d log spec / d log plain"]
    for k in (2, 3, 5):
        for c in (1, 2, 4, 8):
            rows = point(a.out, k, c)
            if len(rows) < 3:
                continue
            p = np.array([r[1] for r in rows])
            s = np.array([r[2] for r in rows])
            rho, pv, el = shape_stats(p, s)
            lines.append(f"k = {k} c{c} ({c * (k + 1)} tokens): {len(rows)} blocks; plain {p.min():.3f}-{p.max():.3f}"
                         f" s; ratio {(s / p).min():.2f}-{(s / p).max():.2f}; Spearman {rho:+.2f} (p {pv:.2f}); "
                         f"elasticity {el:.2f}")
    text = "\n".join(lines) + "\n"
    (a.out / "host_shape.txt").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
