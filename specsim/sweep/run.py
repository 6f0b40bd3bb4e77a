"""Run a sweep: points in chunks on local processes or a Dask cluster, results durable and resumable.

Layout of the output directory DIR:
- `manifest.json`   — the sweep's identity (point function, grid, and the content hash of every profile and
  data file the points read); a rerun with another spec is refused;
- `spec.toml`       — a copy of the spec as first run;
- `parts/part-NNNNNN.parquet` — one file per finished task (columns point, point_id, result JSON, error),
  each written to a temp file and renamed into place, so a SIGKILL loses only the tasks in flight;
- `results.parquet` — written when every point is done: one row per point in point order, the SimConfig
  fields, then the point function's outputs (lists/dicts as JSON strings; an output named like a config field
  gets the prefix `out_`), then `error` (the message of a SpecsimError the point raised, else null).
A rerun reads the parts, skips every finished point and computes only the rest; since results are rebuilt from
the stored JSON in point order, the final file is the same as an uninterrupted run's, bit for bit. Damaged
parts, a damaged manifest and edited profiles are handled as `specsim.sweep.dir` says, each with a note.

The grid is streamed: points are built as their chunk is sent, so a sweep of millions of points starts at once
and the coordinating process holds one bool per point. A lost cluster (or a killed worker process) stops the
sweep with one line saying how to resume; the parts written so far are kept.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from specsim.config import SimConfig
from specsim.errors import ConfigError, SpecsimError
from specsim.sweep.backends import BackendLost, check_workers, default_workers, make_backend, probe_scheduler
from specsim.sweep.dir import PARTS, RESULTS, check_out_dir, open_dir, part_files, spec_sweep_id, write_atomic, \
    write_part
from specsim.sweep.spec import SweepSpec, load_spec, resolve_point_fn
from specsim.sweep.table import write_results

TARGET_TASK_S = 2.0  # adaptive chunks aim at this much work per task: the most a kill can lose per worker
MAX_CHUNK = 10_000
SHOWN_REASONS = 10

__all__ = ["RESULTS", "SweepInterrupted", "SweepReport", "default_workers", "failure_summary", "run_chunk",
           "run_sweep"]


@dataclass
class SweepReport:
    out_dir: str
    results: str
    sweep_id: str
    points: int
    computed: int  # points computed by this run
    reused: int  # points found finished in DIR/parts and not recomputed
    errors: int  # points whose point function raised a SpecsimError (see the `error` column)
    wall_s: float
    workers: int
    backend: str
    failures: dict[str, int] = field(default_factory=dict)  # reason -> points, most common first
    notes: list[str] = field(default_factory=list)  # what a rerun found damaged or changed, and recomputed
    plots: list[str] = field(default_factory=list)
    plots_skipped: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


class SweepInterrupted(SpecsimError):
    """The backend went away mid-sweep; the message says what is kept and the command that resumes."""


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, *, scheduler: str | None = None,
              workers: int | None = None, point_fn: Callable[[SimConfig], dict] | str | None = None,
              chunk_size: int | None = None, progress: bool = True, plots: bool | None = None) -> SweepReport:
    """Compute every unfinished point of `spec` into `out_dir`; see the module docstring for the layout.

    point_fn overrides the spec's `[run] point_fn` (a callable must be picklable: a module-level function).
    workers=1 without a scheduler runs in this process. chunk_size overrides the spec's (0 = adaptive).
    With progress, a bar and the notes of a rerun go to stderr.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    check_out_dir(out)  # before anything else: a bad --out costs nothing
    n_workers = check_workers(workers)
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec, check_point_fn=point_fn is None)
    fn_ref: Callable | str = point_fn if point_fn is not None else spec.point_fn
    if isinstance(fn_ref, str):
        resolve_point_fn(fn_ref, spec.path)  # fail before any work, not inside a worker
        fn_name = fn_ref
    else:
        fn_name = f"{fn_ref.__module__}:{fn_ref.__qualname__}"
    chunk = spec.chunk_size if chunk_size is None else chunk_size
    if scheduler:
        probe_scheduler(scheduler)  # a wrong address is one line before DIR is touched
    sid = spec_sweep_id(spec, fn_name)
    opened = open_dir(out, spec, fn_name)
    backend_name, slots = "none", 0
    try:
        for note in opened.notes if progress else ():
            print(f"specsim: note: {note}", file=sys.stderr)
        pending = np.flatnonzero(~opened.done)
        if len(pending):
            backend = make_backend(scheduler, n_workers)
            backend_name, slots = backend.name, backend.slots
            try:
                _compute(spec, pending, fn_ref, backend, out / PARTS, opened.next_part, chunk, progress)
            except BackendLost as e:
                raise SweepInterrupted(_lost_message(spec, out, scheduler, backend_name, e)) from None
            except OSError as e:  # writing a part: a full disk, a directory gone
                raise SweepInterrupted(f"cannot write in {out / PARTS} ({e.strerror or e}); the parts written "
                                       f"so far are kept; resume with `{_resume(spec, out)}` once it is "
                                       f"fixed") from None
            finally:
                backend.close()
        damaged = _damaged_results(out / RESULTS)
        if damaged:
            opened.notes.append(damaged)
            if progress:
                print(f"specsim: note: {damaged}", file=sys.stderr)
        errors = write_results(part_files(out / PARTS), spec, sid, out / RESULTS, write_atomic)
    finally:
        opened.close()
    report = SweepReport(out_dir=str(out), results=str(out / RESULTS), sweep_id=sid, points=len(spec),
                         computed=len(pending), reused=len(spec) - len(pending), errors=sum(errors.values()),
                         wall_s=0.0, workers=slots, backend=backend_name, failures=_top(errors),
                         notes=opened.notes)
    if spec.plots if plots is None else plots:
        _plot(report)
    report.wall_s = time.perf_counter() - t0
    return report


def _plot(report: SweepReport) -> None:
    if report.errors == report.points:
        report.plots_skipped = {"all": "no point succeeded"}
        return
    import pandas as pd

    from specsim.sweep.plots import plot_all

    made, skipped = plot_all(pd.read_parquet(report.results), Path(report.out_dir) / "plots")
    report.plots, report.plots_skipped = [str(p) for p in made], skipped


def _top(errors) -> dict[str, int]:
    top = dict(errors.most_common(SHOWN_REASONS))
    rest = sum(errors.values()) - sum(top.values())
    if rest:
        top[f"({len(errors) - len(top)} other reasons)"] = rest
    return top


def failure_summary(report: SweepReport, shown: int = 3) -> str:
    """The failures in one line: the most common reasons with their counts."""
    items = list(report.failures.items())
    text = "; ".join(f"{count}× {_cut(' '.join(reason.split()))}" for reason, count in items[:shown])
    rest = sum(c for _, c in items[shown:])
    return text + (f"; {rest} more with other reasons" if rest else "")


def _cut(text: str, n: int = 240) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _resume(spec: SweepSpec, out: Path) -> str:
    return f"specsim sweep {shlex.quote(str(spec.path))} --out {shlex.quote(str(out))}"


def _lost_message(spec: SweepSpec, out: Path, scheduler: str | None, backend: str, e: BackendLost) -> str:
    why, done = str(e), getattr(e, "done", "?")
    cmd = _resume(spec, out)
    what = f"lost the Dask cluster at {scheduler}" if backend == "dask" else "a local worker process died"
    hint = f"`{cmd} --scheduler {shlex.quote(scheduler)}` once it is back, or `{cmd}` to finish locally" \
        if scheduler else f"`{cmd}`"
    return f"{what} ({' '.join(why.split())[:200]}); {done} of {len(spec)} points are done and kept in " \
           f"{out / PARTS}; resume with {hint}"


# --- execution -------------------------------------------------------------------------------------

def _compute(spec: SweepSpec, pending: np.ndarray, fn_ref, backend, parts: Path, part_no: int, chunk: int,
             progress: bool) -> None:
    from tqdm import tqdm

    class _Bar(tqdm):
        monitor_interval = 0  # no monitor thread: the process pool forks its workers after the bar exists

    n = len(spec)
    # the bar shows at once (the grid is streamed), on a terminal only: piped stderr stays one line per error
    bar = _Bar(total=n, initial=n - len(pending), disable=None if progress else True, file=sys.stderr, unit="pt",
               desc=f"sweep {spec.name}", dynamic_ncols=True, mininterval=0.5)
    in_flight: dict = {}
    pos, spent_s, measured = 0, 0.0, 0
    try:
        while pos < len(pending) or in_flight:
            while pos < len(pending) and len(in_flight) < backend.max_in_flight:
                size = chunk or _adaptive_size(spent_s, measured, len(pending) - pos, backend.slots)
                items, ids = _chunk(spec, pending[pos:pos + size])
                pos += size
                in_flight[backend.submit(run_chunk, fn_ref, items)] = ids
            for fut in backend.wait_any(list(in_flight)):
                ids = in_flight.pop(fut)
                rows, compute_s = backend.result(fut)
                write_part(parts, part_no, [(i, ids[i], r, e) for i, r, e in rows])
                part_no += 1
                spent_s += compute_s
                measured += len(rows)
                bar.update(len(rows))
    except BackendLost as e:
        e.done = bar.n  # type: ignore[attr-defined]
        raise
    finally:
        bar.close()


def _chunk(spec: SweepSpec, indices: np.ndarray) -> tuple[list[tuple[int, SimConfig]], dict[int, str]]:
    """The points of one task, built now (the grid is never built whole) with their ids."""
    items, ids = [], {}
    for i in map(int, indices):
        try:
            items.append((i, spec.points[i]))
        except ValidationError as e:  # a rule relating 3+ axes that the pairwise check up front cannot see
            err = e.errors()[0]
            raise ConfigError(f"point {i} is invalid ({err.get('msg')}); the points before it are kept",
                              file=spec.path, field="grid") from None
        ids[i] = spec.ids[i]
    return items, ids


def _adaptive_size(spent_s: float, measured: int, remaining: int, slots: int) -> int:
    """One point until a time per point is known; then ~TARGET_TASK_S of work, keeping every worker busy."""
    if not measured:
        return 1
    per_point = max(spent_s / measured, 1e-7)
    balance = math.ceil(remaining / (2 * slots))
    return max(1, min(int(TARGET_TASK_S / per_point), balance, MAX_CHUNK))


_FN_CACHE: dict[str, Callable] = {}


def run_chunk(fn_ref: Callable | str, items: list[tuple[int, SimConfig]]) -> tuple[list[tuple], float]:
    """Worker side: compute a chunk; rows are (point, result JSON or None, SpecsimError message or None)."""
    if isinstance(fn_ref, str):
        if fn_ref not in _FN_CACHE:
            _FN_CACHE[fn_ref] = resolve_point_fn(fn_ref)
        fn = _FN_CACHE[fn_ref]
    else:
        fn = fn_ref
    t0 = time.perf_counter()
    rows = []
    for i, cfg in items:
        try:
            out = fn(cfg)
        except SpecsimError as e:
            rows.append((i, None, " ".join(str(e).split()) or type(e).__name__))
            continue
        except Exception as e:  # a bug in the point function: one line with where it happened, parts are kept
            where = traceback.extract_tb(e.__traceback__)[-1]
            raise SpecsimError(f"point function {_name(fn_ref)} raised {type(e).__name__}: "
                               f"{' '.join(str(e).split())[:300]} (point {i}, {where.filename}:{where.lineno}); "
                               f"finished points are kept — fix the function and rerun the same command") from None
        if not isinstance(out, dict):
            raise SpecsimError(f"point function {_name(fn_ref)} returned {type(out).__name__}, not a dict "
                               f"(point {i}); allowed: a function SimConfig -> dict, like specsim.simulate:run")
        rows.append((i, json.dumps(out, default=_jsonable), None))
    return rows, time.perf_counter() - t0


def _damaged_results(path: Path) -> str | None:
    """A note when an existing results.parquet cannot be read (it is rebuilt from the parts right after)."""
    if not path.exists():
        return None
    try:
        import pyarrow.parquet as pq

        pq.read_metadata(path)
        return None
    except Exception as e:  # truncated, zero bytes, not parquet: all rebuilt the same way
        return f"{path} could not be read ({type(e).__name__}); rebuilt it from the parts"


def _name(fn_ref: Callable | str) -> str:
    return fn_ref if isinstance(fn_ref, str) else getattr(fn_ref, "__qualname__", repr(fn_ref))


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):  # numpy arrays and scalars
        return x.tolist()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"point function output of type {type(x).__name__} is not JSON-able")
