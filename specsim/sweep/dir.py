"""A sweep's output directory: checked before any work, locked, its manifest and parts verified on every rerun.

Layout of DIR (see `specsim.sweep.run`): `manifest.json`, `spec.toml`, `parts/part-NNNNNN.parquet`,
`results.parquet`, `.lock`. On a rerun:
- a part that cannot be read (zero bytes, truncated, not parquet, wrong columns, points outside the grid) is
  renamed `part-NNNNNN.parquet.damaged` and its points are recomputed;
- a damaged or missing `manifest.json` is rebuilt, after every stored point is checked against this spec's ids
  (a point id hashes the config and the content of every profile and file it reads); when none matches, the
  directory holds another sweep and is refused;
- when a profile or data file changed since the sweep began (the manifest keeps their content hashes), the points
  that read it no longer match their stored ids: those results are dropped from the parts and recomputed.
Each of these is said in one note line; a refusal is one ConfigError line saying what to do.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim.errors import ConfigError
from specsim.sweep.spec import SweepSpec

MANIFEST, SPEC_COPY, PARTS, RESULTS, LOCK = "manifest.json", "spec.toml", "parts", "results.parquet", ".lock"
FORMAT = 2  # 1: point ids without the content of profiles and files (refused: they cannot be checked)
_PART_COLUMNS = {"point": "int64", "point_id": "string", "result": "string", "error": "string"}


@dataclass
class Opened:
    """An output directory ready for work: held under its lock, with what it already holds."""

    lock: Any
    done: np.ndarray  # bool per point: a verified result is stored
    next_part: int
    notes: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.lock.close()


# --- before any work -----------------------------------------------------------------------------------

def check_out_dir(out: Path, flag: str = "--out") -> None:
    """DIR is a directory, or can be created as one, and a file can be written there (tried: root ignores
    permission bits, a read-only mount does not). Nothing is left behind."""
    out = Path(out)
    try:
        if out.exists() and not out.is_dir():
            raise ConfigError("is a file, not a directory", file=out, field=flag, allowed="a directory path")
        anc = out.absolute()
        while not anc.exists() and anc != anc.parent:
            anc = anc.parent
        if not anc.is_dir():
            raise ConfigError(f"cannot create the directory: {anc} is a file", file=out, field=flag)
        with tempfile.NamedTemporaryFile(dir=anc, prefix=".specsim-probe-"):
            pass
    except PermissionError:
        raise ConfigError(f"cannot write in {anc}: permission denied", file=out, field=flag) from None
    except OSError as e:
        raise ConfigError(f"cannot write there ({e.strerror or type(e).__name__})", file=out, field=flag) from None


def open_dir(out: Path, spec: SweepSpec, fn_name: str) -> Opened:
    """Create or reopen DIR under its lock; verify what it holds; refuse another sweep's directory."""
    check_out_dir(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = open(out / LOCK, "a")
    except OSError as e:
        raise ConfigError(f"cannot create the output directory ({e.strerror})", file=out, field="--out") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise ConfigError("another sweep is running in this directory", file=out) from None
    try:
        return _open_locked(out, spec, fn_name, lock)
    except BaseException:
        lock.close()
        raise


def _open_locked(out: Path, spec: SweepSpec, fn_name: str, lock) -> Opened:
    want = {"format": FORMAT, "sweep_id": spec_sweep_id(spec, fn_name), "grid_id": spec.grid_id,
            "name": spec.name, "spec": str(spec.path), "point_fn": fn_name, "points": len(spec),
            "sources": spec.sources}
    notes: list[str] = []
    manifest = out / MANIFEST
    trusted, write, unknown = True, True, False  # unknown: no manifest to say whose parts these are
    if manifest.exists():
        m, problem = _read_manifest(manifest)
        if problem is not None:
            notes.append(f"{manifest} was damaged ({problem}): rebuilt after checking every stored point")
            trusted, unknown = False, True
        else:
            _refuse_other_sweep(m, want, spec, out)
            changed = sorted(set(m["sources"].items()) ^ set(want["sources"].items()))
            if changed:
                labels = sorted({k for k, _ in changed})
                notes.append(f"changed since this sweep began: {', '.join(labels)}; the points that read "
                             f"{'it' if len(labels) == 1 else 'them'} are recomputed")
                trusted = False
            write = m != want
    else:
        ours = {LOCK, SPEC_COPY, PARTS} | ({RESULTS, "plots"} if (out / PARTS).is_dir() else set())
        others = sorted(p.name for p in out.iterdir() if p.name not in ours)
        if others:
            raise ConfigError(f"not empty and not a sweep directory (holds {others[0]!r}, no {MANIFEST})", file=out)
        if any((out / PARTS).glob("part-*.parquet")):
            notes.append(f"{manifest} was missing: rebuilt after checking every stored point")
            trusted, unknown = False, True
    (out / PARTS).mkdir(exist_ok=True)
    scan = scan_parts(out / PARTS, spec, full=not trusted)
    seen = len(scan.damaged) + scan.files
    if unknown and seen and not scan.done.any():
        raise ConfigError(f"{MANIFEST} is damaged or missing and none of the points in its {seen} part files "
                          f"belongs to this sweep; use another --out directory, or delete this one", file=out)
    scan.apply()
    notes += scan.notes
    if write:
        write_atomic(manifest, lambda f: f.write(json.dumps(want, indent=1, sort_keys=True).encode()))
    if not (out / SPEC_COPY).exists() and spec.path.is_file():
        write_atomic(out / SPEC_COPY, lambda f: f.write(spec.path.read_bytes()))
    return Opened(lock=lock, done=scan.done, next_part=scan.next_part, notes=notes)


def spec_sweep_id(spec: SweepSpec, fn_name: str) -> str:
    from specsim.sweep.spec import sweep_id

    return sweep_id(fn_name, spec.grid_id, spec.sources)


def _read_manifest(path: Path) -> tuple[dict, str | None]:
    try:
        m = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:  # ValueError: truncated, garbage, not UTF-8
        return {}, f"{type(e).__name__}: {str(e)[:80]}"
    if not isinstance(m, dict):
        return {}, "not a JSON object"
    if m.get("format") == FORMAT:
        for key, kind in (("grid_id", str), ("point_fn", str), ("points", int), ("sources", dict)):
            if not isinstance(m.get(key), kind):
                return {}, f"no valid {key!r}"
        if not all(isinstance(v, str) for v in m["sources"].values()):
            return {}, "no valid 'sources'"
    return m, None


def _refuse_other_sweep(m: dict, want: dict, spec: SweepSpec, out: Path) -> None:
    if m.get("format") != FORMAT:
        raise ConfigError(f"holds a sweep written by another specsim version (manifest format {m.get('format')!r}, "
                          f"this one writes {FORMAT}); use another --out directory or delete this one", file=out)
    if m["grid_id"] != want["grid_id"] or m["point_fn"] != want["point_fn"]:
        raise ConfigError(
            f"holds a different sweep ({m.get('points')} points of spec {m.get('spec')!r} with point function "
            f"{m.get('point_fn')!r}; this one has {len(spec)} points of {str(spec.path)!r} with "
            f"{want['point_fn']!r}); use another --out directory or delete this one", file=out)


# --- the stored parts --------------------------------------------------------------------------------------

@dataclass
class Scan:
    parts: Path
    done: np.ndarray
    next_part: int = 0
    files: int = 0  # readable parts
    damaged: list[tuple[Path, str]] = field(default_factory=list)
    stale: list[tuple[Path, Any]] = field(default_factory=list)  # (part, table of the rows to keep)
    stale_rows: int = 0
    notes: list[str] = field(default_factory=list)

    def apply(self) -> None:
        """Set damaged parts aside and drop stale rows (decided first, so a refusal changes nothing)."""
        for part, _ in self.damaged:
            os.replace(part, part.with_name(part.name + ".damaged"))
        for part, keep in self.stale:
            if keep.num_rows:
                write_atomic(part, lambda f, t=keep: write_parquet(t, f))
            else:
                part.unlink()
        if self.damaged:
            part, why = self.damaged[0]
            self.notes.append(f"{len(self.damaged)} damaged part file(s) set aside as *.damaged ({part.name}: "
                              f"{why}); their points are recomputed")
        if self.stale_rows:
            self.notes.append(f"{self.stale_rows} stored results no longer match their point (edited profile or "
                              f"file, or another sweep's part); dropped and recomputed")


def scan_parts(parts: Path, spec: SweepSpec, *, full: bool) -> Scan:
    """Which points DIR/parts holds, each part checked for damage and its ids against the spec (`full`: every
    row; else the first row of each part, falling back to every row at the first mismatch)."""
    for tmp in parts.glob(".*.tmp"):  # a write a kill interrupted; its points were never counted
        tmp.unlink()
    n = len(spec)
    scan = Scan(parts=parts, done=np.zeros(n, dtype=bool))
    last = -1
    for number, part in sorted(_numbered(parts)):
        last = max(last, number)
        if part.name != f"part-{number:06d}.parquet":  # set aside as damaged, or not ours
            continue
        table, why = _read_part(part, n)
        if table is None:
            scan.damaged.append((part, why))
            continue
        points, pids = table.column("point").to_numpy(), table.column("point_id").to_pylist()
        scan.files += 1
        ok = np.ones(len(points), dtype=bool)
        if len(points) and not full and spec.ids[int(points[0])] != pids[0]:
            return scan_parts(parts, spec, full=True)
        if full:
            ok = np.fromiter((spec.ids[int(i)] == pid for i, pid in zip(points, pids)), bool, len(points))
        if not ok.all():
            scan.stale.append((part, table.filter(ok)))
            scan.stale_rows += int((~ok).sum())
        scan.done[points[ok]] = True
    scan.next_part = last + 1
    return scan


def _numbered(parts: Path):
    for part in parts.glob("part-*"):
        number = part.name[5:].split(".")[0]
        if number.isdigit():
            yield int(number), part


def part_files(parts: Path) -> list[Path]:
    """The readable-named parts in part-number order (later parts win where a point is stored twice)."""
    return [p for n, p in sorted(_numbered(parts)) if p.name == f"part-{n:06d}.parquet"]


def _read_part(part: Path, n: int):
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(part)
    except (pa.ArrowException, OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {str(e)[:80]}"
    types = {f.name: str(f.type) for f in table.schema}
    if any(types.get(k) != v for k, v in _PART_COLUMNS.items()):
        return None, f"columns {types} are not a part's"
    points = table.column("point")
    if points.null_count or (len(points) and not 0 <= pc.min(points).as_py() <= pc.max(points).as_py() < n):
        return None, f"points outside the grid of {n}"
    return table, None


def write_part(parts: Path, number: int, rows: list[tuple]) -> None:
    """rows: (point, point_id, result JSON or None, error or None)."""
    import pyarrow as pa

    rows = sorted(rows)
    table = pa.table({
        "point": pa.array([r[0] for r in rows], pa.int64()),
        "point_id": pa.array([r[1] for r in rows], pa.string()),
        "result": pa.array([r[2] for r in rows], pa.string()),
        "error": pa.array([r[3] for r in rows], pa.string()),
    })
    write_atomic(parts / f"part-{number:06d}.parquet", lambda f: write_parquet(table, f))


# --- durable writes ----------------------------------------------------------------------------------------

def write_atomic(path: Path, write: Callable[[Any], Any]) -> None:
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


def write_parquet(table, f) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, f)
