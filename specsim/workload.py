"""Who asks for what, and when: request arrivals and prompt/output lengths.

Arrivals draw from stream ARRIVALS and lengths from stream LENGTHS only, so the speculative run and its
no-speculation baseline (and runs that differ only in γ or policy) see exactly the same requests.

Modes:
- closed loop (default): `batch × replicas` clients each keep one request in flight; a client issues its next
  request the moment its previous one finishes. Arrival times are therefore set by the engine (NaN here).
- poisson: exponential inter-arrival gaps at `rate` requests/s, from t = 0.
- replay: `arrivals_csv` with columns arrival_s, prompt_len, output_len (sorted by arrival; all rows are used
  unless `requests` was given explicitly, then the first `requests`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from specsim.errors import ConfigError
from specsim.rng import ARRIVALS, LENGTHS, stream

DEFAULT_MAX_BATCH = 256  # open-loop batch cap when SimConfig.max_batch is not set


@dataclass(frozen=True)
class Workload:
    mode: Literal["closed", "poisson", "replay"]
    arrival_s: np.ndarray  # float, NaN in closed loop
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    max_batch: int  # per replica
    concurrency: int | None  # closed loop: clients in total; else None

    @property
    def n(self) -> int:
        return len(self.prompt_len)

    def records(self) -> dict:
        """JSON-able copy (used to check that γ never changes the workload)."""
        return {"mode": self.mode, "arrival_s": [None if np.isnan(a) else float(a) for a in self.arrival_s],
                "prompt_len": self.prompt_len.tolist(), "output_len": self.output_len.tolist()}


def _lengths(mean: int, n: int, dist: str, g: np.random.Generator) -> np.ndarray:
    if dist == "fixed":
        return np.full(n, mean, dtype=np.int64)
    lo, hi = max(1, (mean + 1) // 2), max(1, (3 * mean) // 2)
    return g.integers(lo, hi + 1, size=n, dtype=np.int64)


def build_workload(cfg) -> Workload:
    if cfg.arrivals_csv is not None:
        return _replay(cfg)
    n = cfg.requests
    g = stream(cfg.seed, LENGTHS, 0)
    prompt = _lengths(cfg.prompt_len, n, cfg.length_dist, g)
    output = _lengths(cfg.output_len, n, cfg.length_dist, g)
    if cfg.rate is None:
        return Workload("closed", np.full(n, np.nan), prompt, output, cfg.batch, cfg.batch * cfg.replicas)
    gaps = stream(cfg.seed, ARRIVALS, 0).exponential(1.0 / cfg.rate, size=n)
    arrivals = np.cumsum(gaps) - gaps[0]  # the first request arrives at t = 0
    return Workload("poisson", arrivals, prompt, output, cfg.max_batch or DEFAULT_MAX_BATCH, None)


def _replay(cfg) -> Workload:
    import pandas as pd

    path = Path(cfg.arrivals_csv)
    if not path.is_file():
        raise ConfigError("file not found", file=path, field="arrivals_csv")
    try:
        df = pd.read_csv(path, comment="#")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ConfigError(f"not a readable CSV ({str(e).splitlines()[0] if str(e) else type(e).__name__})",
                          file=path) from None
    cols = ("arrival_s", "prompt_len", "output_len")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ConfigError("missing column", file=path, field=missing[0], allowed="columns " + ", ".join(cols))
    if len(df) == 0:
        raise ConfigError("no rows", file=path, allowed="at least one request")
    arr = pd.to_numeric(df["arrival_s"], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(f"bad arrival time in row {i}", file=path, field="arrival_s",
                          value=str(df["arrival_s"].iloc[i]), allowed="finite seconds >= 0")
    lens = {}
    for c in cols[1:]:
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(v) | (v < 1) | (v != np.floor(v))
        if bad.any():
            i = int(np.argmax(bad))
            raise ConfigError(f"bad length in row {i}", file=path, field=c, value=str(df[c].iloc[i]),
                              allowed="integers >= 1")
        lens[c] = v.astype(np.int64)
    order = np.argsort(arr, kind="stable")
    n = min(cfg.requests, len(arr)) if "requests" in cfg.model_fields_set else len(arr)
    order = order[:n]
    return Workload("replay", arr[order], lens["prompt_len"][order], lens["output_len"][order],
                    cfg.max_batch or DEFAULT_MAX_BATCH, None)
