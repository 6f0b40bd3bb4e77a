"""Who asks for what, and when: request arrivals and prompt/output lengths.

Arrivals draw from stream ARRIVALS and lengths from stream LENGTHS only, so the speculative run and its
no-speculation baseline (and runs that differ only in γ or policy) see exactly the same requests.

Modes:
- closed loop (default): `batch × replicas` clients each keep one request in flight; a client issues its next
  request the moment its previous one finishes. Arrival times are therefore set by the engine (NaN here).
- poisson: exponential inter-arrival gaps at `rate` requests/s, from t = 0.
- replay: `arrivals_csv` with columns arrival_s, prompt_len, output_len (other columns are ignored; `#` starts a
  comment). The rows may come in any order (a log merged from several front ends need not be sorted): requests are
  replayed in arrival order, ties in the file's order; all rows are used unless `requests` was given explicitly,
  then the first `requests` by arrival. Types are strict (`specsim.inputs.tables`): arrival_s a number of seconds
  in [0, MAX_ARRIVAL_S], prompt_len and output_len integer literals in [1, MAX_LENGTH] (the SimConfig bounds),
  at most MAX_REPLAY_ROWS rows; anything else is a one-line error naming the file, column, row and value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from specsim.config import flag
from specsim.inputs.files import input_file
from specsim.inputs.tables import CsvTable, check_rows, float_column, int_column, require_columns
from specsim.limits import MAX_LENGTH_TOKENS, MAX_REQUESTS
from specsim.rng import ARRIVALS, LENGTHS, stream

DEFAULT_MAX_BATCH = 256  # open-loop batch cap when SimConfig.max_batch is not set
REPLAY_COLUMNS = ("arrival_s", "prompt_len", "output_len")
MAX_ARRIVAL_S = 1e9  # ~32 years: beyond it float64 seconds lose the sub-microsecond steps of a pass
MAX_LENGTH = MAX_LENGTH_TOKENS  # SimConfig's bound on prompt_len / output_len
MAX_REPLAY_ROWS = MAX_REQUESTS  # SimConfig's bound on requests


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


# 'lognormal' lengths: chat traffic is heavy-tailed (ShareGPT: mean prompt 161, mean output 338 tokens, vLLM paper,
# Kwon et al. SOSP 2023, Fig. 11 — figures from memory, verify). The log-σ of 1 (median = 0.61 × mean) and the clip
# at 8 × the mean (vLLM's ShareGPT benchmark drops the longest conversations) are our assumptions, not a fit.
LOGNORMAL_SIGMA = 1.0
LOGNORMAL_CLIP = 8


def _lengths(mean: int, n: int, dist: str, g: np.random.Generator) -> np.ndarray:
    if dist == "fixed":
        return np.full(n, mean, dtype=np.int64)
    if dist == "lognormal":
        mu = np.log(mean) - LOGNORMAL_SIGMA ** 2 / 2  # E[exp(N(mu, s^2))] = exp(mu + s^2 / 2) = mean
        x = np.rint(g.lognormal(mu, LOGNORMAL_SIGMA, size=n))
        return np.clip(x, 1, LOGNORMAL_CLIP * mean).astype(np.int64)
    lo, hi = max(1, (mean + 1) // 2), max(1, (3 * mean) // 2)
    return g.integers(lo, hi + 1, size=n, dtype=np.int64)


def build_workload(cfg) -> Workload:
    if cfg.workload.arrivals_csv is not None:
        return _replay(cfg)
    w = cfg.workload
    n = w.requests
    g = stream(w.seed, LENGTHS, 0)
    prompt = _lengths(w.prompt_len, n, w.length_dist, g)
    output = _lengths(w.output_len, n, w.length_dist, g)
    if w.rate is None:
        return Workload("closed", np.full(n, np.nan), prompt, output, w.batch, w.batch * w.replicas)
    gaps = stream(w.seed, ARRIVALS, 0).exponential(1.0 / w.rate, size=n)
    arrivals = np.cumsum(gaps) - gaps[0]  # the first request arrives at t = 0
    return Workload("poisson", arrivals, prompt, output, w.max_batch or DEFAULT_MAX_BATCH, None)


def _replay(cfg) -> Workload:
    path = input_file(cfg.workload.arrivals_csv, "arrivals CSV", field=flag("arrivals_csv"))
    table = CsvTable(path, comment="#")
    df = table.frame
    require_columns(df, REPLAY_COLUMNS, path)
    check_rows(len(df), path, MAX_REPLAY_ROWS)
    arr = float_column(df["arrival_s"], "arrival_s", path, lo=0.0, hi=MAX_ARRIVAL_S, raw=table.raw)
    lens = {c: int_column(df[c], c, path, lo=1, hi=MAX_LENGTH, raw=table.raw) for c in REPLAY_COLUMNS[1:]}
    order = np.argsort(arr, kind="stable")  # any row order; ties keep the file's order
    n = min(cfg.workload.requests, len(arr)) if "requests" in cfg.workload.model_fields_set else len(arr)
    order = order[:n]
    return Workload("replay", arr[order], lens["prompt_len"][order], lens["output_len"][order],
                    cfg.workload.max_batch or DEFAULT_MAX_BATCH, None)
