"""How a golden output is compared, and what moved when it is regenerated.

Goldens are portable across CPUs: integers, strings, booleans and nulls must match exactly, floats to a relative
tolerance of REL_TOL (1e-12, about 4,500 units in the last place). Why a tolerance at all: the simulator's own
reductions are order-fixed (math.fsum, numpy's pairwise sums, no BLAS dot in a result), so on one machine a run is
bit-identical (tests/test_golden.py checks that too), but numpy and libm may still take another SIMD path on
another vendor's CPU (goldens were first made on an Intel Xeon; CI may run on an AMD EPYC).
"""

from __future__ import annotations

import json
import math

REL_TOL = 1e-12
ABS_TOL = 1e-300  # two floats this close to zero are equal


def diffs(want, got, path: str = "") -> list[tuple[str, object, object]]:
    """Every place where `got` differs from `want` beyond the tolerance: (path, want, got)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(want) | set(got)):
            out += diffs(want.get(k, "<absent>"), got.get(k, "<absent>"), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [(f"{path}[len]", len(want), len(got))]
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in diffs(w, g, f"{path}[{i}]")]
    if isinstance(want, float) and isinstance(got, float) and type(want) is type(got):
        same = (math.isnan(want) and math.isnan(got)) or math.isclose(want, got, rel_tol=REL_TOL, abs_tol=ABS_TOL)
        return [] if same else [(path, want, got)]
    if type(want) is not type(got) or want != got:
        return [(path, want, got)]
    return []


def text_diffs(want_text: str, got_text: str) -> list[tuple[str, object, object]]:
    return diffs(json.loads(want_text), json.loads(got_text))


def describe(name: str, moved: list[tuple[str, object, object]], limit: int = 12) -> str:
    """One line per moved value (at most `limit`), for a person reading a regeneration."""
    if not moved:
        return f"{name}: unchanged (within rel {REL_TOL:g})"
    lines = [f"{name}: {len(moved)} value(s) moved"]
    lines += [f"  {p}: {w!r} -> {g!r}" for p, w, g in moved[:limit]]
    if len(moved) > limit:
        lines.append(f"  … and {len(moved) - limit} more")
    return "\n".join(lines)
