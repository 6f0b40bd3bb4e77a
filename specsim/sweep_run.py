"""Run a sweep: points in chunks on local processes or a Dask cluster, results durable and resumable.

Layout of the output directory DIR:
- `manifest.json`   — the sweep's identity (point function + every point id); a rerun with another spec is refused;
- `spec.toml`       — a copy of the spec as first run;
- `parts/part-NNNNNN.parquet` — one file per finished task (columns point, point_id, result JSON, error),
  each written to a temp file and renamed into place, so a SIGKILL loses only the tasks in flight;
- `results.parquet` — written when every point is done: one row per point in point order, the SimConfig
  fields, then the point function's outputs (lists/dicts as JSON strings; an output named like a config field
  gets the prefix `out_`), then `error` (the message of a SpecsimError the point raised, else null).
A rerun reads the parts, skips every finished point and computes only the rest; since results are rebuilt from
the stored JSON in point order, the final file is the same as an uninterrupted run's, bit for bit.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specsim.config import SimConfig
from specsim.errors import ConfigError, SpecsimError
from specsim.sweep_spec import SweepSpec, load_spec, resolve_point_fn, sweep_id
from specsim.sweep_table import assemble

MANIFEST, SPEC_COPY, PARTS, RESULTS, LOCK = "manifest.json", "spec.toml", "parts", "results.parquet", ".lock"
FORMAT = 1
TARGET_TASK_S = 2.0  # adaptive chunks aim at this much work per task: the most a kill can lose per worker
MAX_CHUNK = 10_000


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
    plots: list[str] = field(default_factory=list)
    plots_skipped: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, *, scheduler: str | None = None,
              workers: int | None = None, point_fn: Callable[[SimConfig], dict] | str | None = None,
              chunk_size: int | None = None, progress: bool = True, plots: bool | None = None) -> SweepReport:
    """Compute every unfinished point of `spec` into `out_dir`; see the module docstring for the layout.

    point_fn overrides the spec's `[run] point_fn` (a callable must be picklable: a module-level function).
    workers=1 without a scheduler runs in this process. chunk_size overrides the spec's (0 = adaptive).
    """
    t0 = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec, check_point_fn=point_fn is None)
    fn_ref: Callable | str = point_fn if point_fn is not None else spec.point_fn
    if isinstance(fn_ref, str):
        resolve_point_fn(fn_ref, spec.path)  # fail before any work, not inside a worker
        fn_name = fn_ref
    else:
        fn_name = f"{fn_ref.__module__}:{fn_ref.__qualname__}"
    if workers is not None and workers < 1:
        raise ConfigError("must be at least 1", field="--workers", value=workers)
    chunk = spec.chunk_size if chunk_size is None else chunk_size
    sid = sweep_id(fn_name, spec.ids)
    out = Path(out_dir)
    lock = _open_dir(out, spec, sid, fn_name)
    try:
        done, next_part = _finished(out / PARTS, spec)
        pending = [i for i in range(len(spec)) if i not in done]
        backend_name, n_workers = "none", 0
        if pending:
            backend = _backend(scheduler, workers or default_workers())
            backend_name, n_workers = backend.name, backend.slots
            try:
                _compute(spec, pending, fn_ref, backend, out / PARTS, next_part, chunk, progress)
            finally:
                backend.close()
        table = assemble(out / PARTS, spec, sid)
        _write_atomic(out / RESULTS, lambda f: _write_parquet(table, f))
    finally:
        lock.close()
    report = SweepReport(out_dir=str(out), results=str(out / RESULTS), sweep_id=sid, points=len(spec),
                         computed=len(pending), reused=len(done),
                         errors=len(spec) - table.column("error").null_count, wall_s=0.0,
                         workers=n_workers, backend=backend_name)
    if spec.plots if plots is None else plots:
        from specsim.plots import plot_all

        made, skipped = plot_all(table.to_pandas(), out / "plots")
        report.plots, report.plots_skipped = [str(p) for p in made], skipped
    report.wall_s = time.perf_counter() - t0
    return report


# --- the output directory ------------------------------------------------------------------------

def _open_dir(out: Path, spec: SweepSpec, sid: str, fn_name: str):
    """Create or reopen DIR; refuse a directory that holds another sweep or is running one now."""
    if out.exists() and not out.is_dir():
        raise ConfigError("--out must be a directory", file=out)
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / LOCK, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise ConfigError("another sweep is running in this directory", file=out) from None
    try:
        manifest = out / MANIFEST
        if manifest.exists():
            m = json.loads(manifest.read_text())
            if m.get("sweep_id") != sid:
                raise ConfigError(
                    f"holds a different sweep ({m.get('points')} points of spec {m.get('spec')!r} with point "
                    f"function {m.get('point_fn')!r}; this one has {len(spec)} points of {str(spec.path)!r} "
                    f"with {fn_name!r}); use another --out directory or delete this one", file=out)
        else:
            others = sorted(p.name for p in out.iterdir() if p.name not in (LOCK, SPEC_COPY, PARTS))
            if others:
                raise ConfigError(f"not empty and not a sweep directory (holds {others[0]!r}, no {MANIFEST})",
                                  file=out)
            m = {"format": FORMAT, "sweep_id": sid, "name": spec.name, "spec": str(spec.path), "point_fn": fn_name,
                 "points": len(spec)}
            _write_atomic(manifest, lambda f: f.write(json.dumps(m, indent=1, sort_keys=True).encode()))
        (out / PARTS).mkdir(exist_ok=True)
        if not (out / SPEC_COPY).exists() and spec.path.is_file():
            _write_atomic(out / SPEC_COPY, lambda f: f.write(spec.path.read_bytes()))
    except BaseException:
        lock.close()
        raise
    return lock


def _write_atomic(path: Path, write: Callable[[Any], Any]) -> None:
    """Temp file in the same directory, fsync, rename: readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_parquet(table, f) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, f)


def _finished(parts: Path, spec: SweepSpec) -> tuple[set[int], int]:
    """Points already stored in DIR/parts (each checked against the spec), and the next part number."""
    import pyarrow.parquet as pq

    for tmp in parts.glob(".*.tmp"):  # a write a kill interrupted; its points were never counted
        tmp.unlink()
    done: set[int] = set()
    last = -1
    for part in sorted(parts.glob("part-*.parquet")):
        last = max(last, int(part.stem.split("-")[1]))
        t = pq.read_table(part, columns=["point", "point_id"]).to_pydict()
        for i, pid in zip(t["point"], t["point_id"]):
            if not (0 <= i < len(spec)) or spec.ids[i] != pid:
                raise ConfigError(f"part file does not match the sweep (point {i}, id {pid})", file=part)
            done.add(i)
    return done, last + 1


# --- execution -------------------------------------------------------------------------------------

class _Inline:
    """workers=1: run chunks in this process (no pickling; easiest to debug)."""

    name, slots, max_in_flight = "inline", 1, 1

    def submit(self, fn, *args) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
            f.set_exception(e)
        return f

    def wait_any(self, futures):
        return futures

    def close(self) -> None:
        pass


class _Processes:
    name = "processes"

    def __init__(self, workers: int):
        self.slots, self.max_in_flight = workers, 2 * workers
        self.pool = ProcessPoolExecutor(max_workers=workers)

    def submit(self, fn, *args) -> Future:
        return self.pool.submit(fn, *args)

    def wait_any(self, futures):
        return wait(futures, return_when=FIRST_COMPLETED).done

    def close(self) -> None:
        # wait: forked workers share the directory lock's open file; they must be gone before it is released
        self.pool.shutdown(wait=True, cancel_futures=True)


class _Dask:
    name = "dask"

    def __init__(self, address: str):
        import distributed

        try:
            self.client = distributed.Client(address, timeout=15, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise ConfigError(f"cannot reach the Dask scheduler ({type(e).__name__}: {e})", field="--scheduler",
                              value=address) from None
        self.slots = max(1, sum(self.client.nthreads().values()))
        self.max_in_flight = 2 * self.slots
        self._completed = distributed.as_completed(loop=self.client.loop)  # not the global default client

    def submit(self, fn, *args):
        f = self.client.submit(fn, *args, pure=False)
        self._completed.add(f)
        return f

    def wait_any(self, futures):
        return self._completed.next_batch(block=True)

    def close(self) -> None:
        self.client.close()


def _backend(scheduler: str | None, workers: int):
    if scheduler:
        return _Dask(scheduler)
    return _Inline() if workers == 1 else _Processes(workers)


def _compute(spec: SweepSpec, pending: list[int], fn_ref, backend, parts: Path, part_no: int, chunk: int,
             progress: bool) -> None:
    from tqdm import tqdm

    class _Bar(tqdm):
        monitor_interval = 0  # no monitor thread: the process pool forks its workers after the bar exists

    n = len(spec)
    bar = _Bar(total=n, initial=n - len(pending), disable=not progress, file=sys.stderr, unit="pt",
               desc=f"sweep {spec.name}", dynamic_ncols=True, mininterval=0.5)
    in_flight: dict = {}
    pos, spent_s, measured = 0, 0.0, 0
    try:
        while pos < len(pending) or in_flight:
            while pos < len(pending) and len(in_flight) < backend.max_in_flight:
                size = chunk or _adaptive_size(spent_s, measured, len(pending) - pos, backend.slots)
                items = [(i, spec.points[i]) for i in pending[pos:pos + size]]
                pos += size
                in_flight[backend.submit(run_chunk, fn_ref, items)] = len(items)
            for fut in backend.wait_any(list(in_flight)):
                in_flight.pop(fut)
                rows, compute_s = fut.result()
                _write_part(parts, part_no, spec, rows)
                part_no += 1
                spent_s += compute_s
                measured += len(rows)
                bar.update(len(rows))
    finally:
        bar.close()


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
            rows.append((i, None, str(e) or type(e).__name__))
            continue
        except Exception as e:
            raise RuntimeError(f"point {i} ({cfg.model_dump(exclude_defaults=True)}) raised "
                               f"{type(e).__name__}: {e}\n{traceback.format_exc()}") from None
        if not isinstance(out, dict):
            raise TypeError(f"point function returned {type(out).__name__}, not dict (point {i})")
        rows.append((i, json.dumps(out, default=_jsonable), None))
    return rows, time.perf_counter() - t0


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):  # numpy arrays and scalars
        return x.tolist()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"point function output of type {type(x).__name__} is not JSON-able")


def _write_part(parts: Path, n: int, spec: SweepSpec, rows: list[tuple]) -> None:
    import pyarrow as pa

    rows = sorted(rows)
    table = pa.table({
        "point": pa.array([r[0] for r in rows], pa.int64()),
        "point_id": pa.array([spec.ids[r[0]] for r in rows], pa.string()),
        "result": pa.array([r[1] for r in rows], pa.string()),
        "error": pa.array([r[2] for r in rows], pa.string()),
    })
    _write_atomic(parts / f"part-{n:06d}.parquet", lambda f: _write_parquet(table, f))
