"""The final results table of a sweep, rebuilt from the stored parts in point order.

Columns: `point`, `point_id`, every SimConfig field (typed from its annotation), then the point function's
outputs in first-seen key order (lists and dicts as JSON strings; a key named like a config field gets the
prefix `out_`), then `error`. Built only from the spec and the stored JSON, so it does not depend on how the
work was split into tasks or how often the sweep was interrupted.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from specsim.config import SimConfig
from specsim.errors import SpecsimError
from specsim.sweep_spec import SweepSpec


def assemble(parts: Path, spec: SweepSpec, sid: str):
    """results.parquet's table, rebuilt from the parts in point order (independent of how work was split)."""
    import pyarrow.parquet as pq

    stored: dict[int, tuple] = {}
    for part in sorted(parts.glob("part-*.parquet")):
        t = pq.read_table(part).to_pydict()
        for i, r, e in zip(t["point"], t["result"], t["error"]):
            stored[i] = (r, e)
    missing = [i for i in range(len(spec)) if i not in stored]
    if missing:
        raise SpecsimError(f"{parts}: {len(missing)} points have no result (first: point {missing[0]})")
    return build_table(spec, [stored[i] for i in range(len(spec))], sid)


def build_table(spec: SweepSpec, stored: list[tuple], sid: str):
    import pyarrow as pa

    fields = SimConfig.model_fields
    cols: dict[str, Any] = {"point": pa.array(range(len(spec)), pa.int64()), "point_id": pa.array(spec.ids)}
    for name, info in fields.items():
        cols[name] = pa.array([getattr(p, name) for p in spec.points], _arrow_type(info.annotation))
    outs = [json.loads(r) if r is not None else None for r, _ in stored]
    for k, col in _output_columns(outs).items():
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
