"""Point functions for the sweep input tests, in a module of their own: a sweep imports its point function by
name ("tests.sweep_points:cheap_point"), and a test module holding @given tests cannot be imported again from
inside a running property test (hypothesis refuses nested @given)."""

from __future__ import annotations

import time

from specsim.config import SimConfig
from specsim.errors import DoesNotFitError


def cheap_point(cfg: SimConfig) -> dict:
    """Instant and total: any valid config gives a result, except batches over 1000, which do not fit."""
    if cfg.workload.batch > 1000:
        raise DoesNotFitError(f"does not fit at batch {cfg.workload.batch}")
    return {"speedup": 1.0 + cfg.speculation.gamma / 10, "tokens": [cfg.speculation.gamma, cfg.workload.seed]}


def slow_point(cfg: SimConfig) -> dict:
    time.sleep(0.05)
    return cheap_point(cfg)


def mixed_point(cfg: SimConfig) -> dict:
    """Outputs whose types change along the grid (int then float, null then numbers, numbers then text, nested),
    so a table written block by block must settle each column's type over all blocks."""
    s = cfg.workload.seed
    out = {"speedup": 1.0 * s, "count": s if s < 20 else s + 0.5, "late": None if s < 25 else s,
           "label": s if s < 30 else f"s{s}", "hist": [s, s + 1], "flag": s % 2 == 0}
    if s == 33:
        raise DoesNotFitError(f"does not fit at seed {s}")
    return out
