"""The final results table of a sweep, rebuilt from the stored parts in point order.

Columns: `point`, `point_id`, every SimConfig field (typed from its annotation), then the point function's
outputs in first-seen key order (lists and dicts as JSON strings; a key named like a config field gets the
prefix `out_`), then `error`. Built only from the spec and the stored JSON, so it does not depend on how the
work was split into tasks or how often the sweep was interrupted.

A sweep of more than BLOCK points is written one row group of BLOCK points at a time (memory stays bounded
whatever the grid): a first pass over the blocks settles each output column's type, the second writes them.
"""

from __future__ import annotations

import json
import re
import typing
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from specsim.config import FLAT_FIELDS
from specsim.errors import SpecsimError
from specsim.sweep.spec import SweepSpec

BLOCK = 65_536
MAX_REASONS = 1000  # distinct error messages counted one by one; the rest as "(other reasons)"
_JSON = "json"


def write_results(parts: list[Path], spec: SweepSpec, sid: str, path: Path, write_atomic: Callable) -> Counter:
    """Write results.parquet from the parts (atomically); return the points' errors counted by reason (messages
    that differ only in their figures are one reason, shown by its first message)."""
    import pyarrow.parquet as pq

    stored = _Stored(parts, len(spec))
    errors = _Reasons()
    blocks = [(a, min(a + BLOCK, len(spec))) for a in range(0, len(spec), BLOCK)] or [(0, 0)]
    if len(blocks) == 1:
        table = build_table(spec, stored.rows(*blocks[0]), sid)
        errors.add(table)
        write_atomic(path, lambda f: pq.write_table(table, f))
        return errors.counted()
    kinds: dict[str, Any] = {}
    for a, b in blocks:  # pass 1: the type of every output column over all blocks
        for k, kind in _output_kinds([_parse(r) for r, _ in stored.rows(a, b)]).items():
            kinds[k] = _unify(kinds[k], kind) if k in kinds else kind

    def write(f) -> None:
        writer = None
        for a, b in blocks:
            table = build_table(spec, stored.rows(a, b), sid, start=a, kinds=kinds)
            errors.add(table)
            writer = writer or pq.ParquetWriter(f, table.schema)
            writer.write_table(table, row_group_size=BLOCK)
        writer.close()

    write_atomic(path, write)
    return errors.counted()


class _Reasons:
    _FIGURES = re.compile(r"\d+(?:\.\d+)?")

    def __init__(self):
        self.count: Counter = Counter()
        self.example: dict[str, str] = {}

    def add(self, table) -> None:
        for e in table.column("error").drop_null().to_pylist():
            key = self._FIGURES.sub("#", e)
            if key not in self.example:
                if len(self.example) >= MAX_REASONS:
                    key = "(other reasons)"
                self.example.setdefault(key, key if key == "(other reasons)" else e)
            self.count[key] += 1

    def counted(self) -> Counter:
        return Counter({self.example[k]: c for k, c in self.count.items()})


class _Stored:
    """(result, error) of points a..b, read from the parts through an index built from their point columns."""

    def __init__(self, parts: list[Path], n: int):
        self.parts, self.n = parts, n
        self.part_of = np.full(n, -1, dtype=np.int64)
        self.row_of = np.zeros(n, dtype=np.int64)
        for k, part in enumerate(parts):
            points = self._read(part, ["point"]).column("point").to_numpy()
            self.part_of[points] = k
            self.row_of[points] = np.arange(len(points))
        missing = np.flatnonzero(self.part_of < 0)
        if len(missing):
            raise SpecsimError(f"{parts[0].parent if parts else 'parts'}: {len(missing)} points have no result "
                               f"(first: point {missing[0]}); rerun the sweep to compute them")
        self._cache: dict[int, Any] = {}

    def _read(self, part: Path, columns: list[str]):
        import pyarrow.parquet as pq

        try:
            return pq.read_table(part, columns=columns)
        except Exception as e:  # noqa: BLE001 - damaged since the rerun checked it
            raise SpecsimError(f"{part}: cannot be read ({type(e).__name__}); rerun the sweep, which sets a "
                               f"damaged part aside and recomputes its points") from None

    def rows(self, a: int, b: int) -> list[tuple]:
        out: list[Any] = [None] * (b - a)
        which, rows = self.part_of[a:b], self.row_of[a:b]
        for k in np.unique(which):
            if k not in self._cache:
                if len(self._cache) >= 4:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[k] = self._read(self.parts[k], ["result", "error"])
            t = self._cache[k]
            at = np.flatnonzero(which == k)
            res = t.column("result").take(rows[at]).to_pylist()
            err = t.column("error").take(rows[at]).to_pylist()
            for j, r, e in zip(at, res, err):
                out[j] = (r, e)
        return out


def _parse(r: str | None):
    return json.loads(r) if r is not None else None


def build_table(spec: SweepSpec, stored: list[tuple], sid: str, start: int = 0, kinds: dict | None = None):
    """Rows start..start+len(stored) of the results; `kinds` fixes the output columns' types (blockwise)."""
    import pyarrow as pa

    points = [p.flat() for p in spec.points[start:start + len(stored)]]
    cols: dict[str, Any] = {"point": pa.array(range(start, start + len(stored)), pa.int64()),
                            "point_id": pa.array(spec.ids[start:start + len(stored)], pa.string())}
    for name, info in FLAT_FIELDS.items():
        cols[name] = pa.array([p[name] for p in points], _arrow_type(info.annotation))
    outs = [_parse(r) for r, _ in stored]
    out_cols = _output_columns(outs) if kinds is None else _typed_columns(outs, kinds)
    for k, col in out_cols.items():
        cols[f"out_{k}" if k in cols or k == "error" else k] = col
    cols["error"] = pa.array([e for _, e in stored], pa.string())
    return pa.table(cols).replace_schema_metadata({"specsim.sweep_id": sid})


def _arrow_type(annotation):
    import pyarrow as pa

    args = [a for a in (typing.get_args(annotation) or (annotation,)) if a is not type(None)]
    if any(typing.get_origin(a) is typing.Literal or a is str for a in args) or \
            typing.get_origin(annotation) is typing.Literal:
        return pa.string()
    for py, arrow in ((bool, pa.bool_()), (int, pa.int64()), (float, pa.float64())):
        if py in args:
            return arrow
    return None


def _output_columns(outs: list[dict | None]) -> dict:
    """One arrow column per output key (first-seen order); lists and dicts become JSON strings."""
    import pyarrow as pa

    try:  # one pass in C++: a struct array over every row, keys unified
        arr = pa.array(outs)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arr = None
    if arr is not None and not pa.types.is_struct(arr.type):
        return {}  # every point failed: no outputs at all
    if arr is None:  # a key whose values mix types arrow cannot unify: column by column
        keys = list(dict.fromkeys(k for sig in dict.fromkeys(tuple(o) for o in outs if o) for k in sig))
        return {k: _column([o.get(k) if o else None for o in outs]) for k in keys}
    cols = {}
    for f, col in zip(arr.type, arr.flatten()):
        nested = pa.types.is_nested(f.type)
        cols[f.name] = _json_column([o.get(f.name) if o else None for o in outs]) if nested else col
    return cols


def _output_kinds(outs: list[dict | None]) -> dict:
    """key -> arrow type of its column, or "json" where the values are nested or mixed (stored as JSON text)."""
    import pyarrow as pa

    kinds = {}
    for k, col in _output_columns(outs).items():
        values = [o.get(k) if o else None for o in outs]
        json_text = pa.types.is_string(col.type) and any(v is not None and not isinstance(v, str) for v in values)
        kinds[k] = _JSON if json_text else col.type
    return kinds


def _unify(a, b):
    """The type of a column whose blocks have types a and b ("json": nested or mixed values)."""
    import pyarrow as pa

    if isinstance(a, str) or isinstance(b, str):
        return _JSON
    if a.equals(b) or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    if {str(a), str(b)} <= {"int64", "double"}:
        return pa.float64()
    return _JSON


def _typed_columns(outs: list[dict | None], kinds: dict) -> dict:
    import pyarrow as pa

    cols = {}
    for k, kind in kinds.items():
        values = [o.get(k) if o else None for o in outs]
        cols[k] = _json_column(values) if isinstance(kind, str) else pa.array(values, kind)
    return cols


def _json_column(values: list):
    import pyarrow as pa

    return pa.array([None if v is None else json.dumps(v) for v in values], pa.string())


def _column(values: list):
    import pyarrow as pa

    try:
        col = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return _json_column(values)
    return _json_column(values) if pa.types.is_nested(col.type) else col
