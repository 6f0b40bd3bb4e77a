"""Sweep specs: a TOML grid of simulation points, checked before any point runs, its points built lazily.

A spec has up to four parts; only `[grid]` (or `[fixed]`, for a one-point sweep) is needed:

    name = "llama-8b-batch"            # optional label
    [fixed]                            # SimConfig fields shared by every point (scalars)
    requests = 64
    [grid]                             # SimConfig fields -> non-empty lists; the points are their
    hardware = ["h100-sxm"]            #   Cartesian product in the order written, last axis fastest
    target = ["llama-3.1-8b"]
    draft = ["llama-3.2-1b:0.7"]       # "NAME:ALPHA" or "NAME:TRACE" pairs a draft with its acceptance
    gamma = [1, 2, 4]
    batch = [1, 8, 32]
    [run]
    point_fn = "specsim.simulate:run"  # "module:function" computing one point: f(SimConfig) -> dict
    chunk_size = 0                     # points per task; 0 = adaptive (about 2 s of work per task)
    plots = true                       # write DIR/plots/*.png when the sweep finishes

Relative paths (`trace`, `arrivals_csv`, measured tables, profile values ending in `.toml`) are taken relative to
the spec's directory. Types are strict (`specsim.sweep.values`): `true` is not 1, `"3350"` is not a number, nan
and inf are refused. Every point becomes a `SimConfig`, built when it is needed (`spec.points[i]`), so a grid of
millions of points starts at once; the checks that run first are in `specsim.sweep.checks`. A bad key or value,
an unknown profile or a missing file is a one-line `ConfigError` naming the spec file, the field (`grid.gamma`,
`fixed.requests`, `run.point_fn`), the value and the allowed range.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specsim.config import FLAT_FIELDS, SimConfig
from specsim.errors import ConfigError
from specsim.inputs.files import loads_toml
from specsim.sweep.checks import PATH_FIELDS, check_files_and_profiles, check_points, digests_of, grid_key
from specsim.sweep.grid import Grid, canonical_json, ids_of, point_id, points_of, source_label  # noqa: F401
from specsim.sweep.values import check_string, check_value, is_sequence, shown

DEFAULT_POINT_FN = "specsim.simulate:run"
MAX_POINTS = 5_000_000
_TOP_KEYS = {"name", "description", "fixed", "grid", "run"}
_RUN_KEYS = {"point_fn", "chunk_size", "plots"}
_PROFILE_FIELDS = ("hardware", "target", "draft", "stack")
_FIELDS = list(FLAT_FIELDS)  # spec keys are the flat field names


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, validated sweep: its points (built on access, never all at once), their ids, how to run them."""

    path: Path
    name: str
    fixed: dict
    axes: dict  # field -> list of values, as written (draft pairs unsplit)
    point_fn: str
    chunk_size: int  # 0 = adaptive
    plots: bool
    points: Sequence[SimConfig]
    ids: Sequence[str]
    grid_key: str = ""  # normalized fixed values and axes: equal keys, equal points
    digests: dict | None = None  # (kind, name) -> content hash of every profile and file the points read

    @property
    def grid_id(self) -> str:
        return hashlib.sha256(f"{self.grid_key}|{len(self)}".encode()).hexdigest()[:16]

    @property
    def sources(self) -> dict[str, str]:
        """label -> content hash of every profile and data file the sweep reads (for the manifest)."""
        return {source_label(k): v for k, v in sorted((self.digests or {}).items())}

    @property
    def sweep_id(self) -> str:
        return sweep_id(self.point_fn, self.grid_id, self.sources)

    def __len__(self) -> int:
        return len(self.points)


def sweep_id(fn_name: str, grid_id: str, sources: dict[str, str]) -> str:
    """Identity of a sweep's results: the point function, the grid, and the content of what the points read."""
    text = json.dumps([fn_name, grid_id, sources], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve_point_fn(ref: str, file: str | Path | None = None) -> Callable[[SimConfig], dict]:
    """Import "module:function"; a failure is a ConfigError on field run.point_fn."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ConfigError("point function must be 'module:function'", file=file, field="run.point_fn",
                          value=shown(ref))
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - ImportError, or a relative/NUL name (ValueError, TypeError)
        raise ConfigError(f"cannot import module {shown(module)!r} ({type(e).__name__}: {e})", file=file,
                          field="run.point_fn", value=shown(ref)) from None
    try:
        fn = getattr(mod, attr)
    except (AttributeError, ValueError, TypeError):
        raise ConfigError(f"module {shown(module)!r} has no attribute {shown(attr)!r}", file=file,
                          field="run.point_fn", value=shown(ref)) from None
    if not callable(fn):
        raise ConfigError("point function is not callable", file=file, field="run.point_fn", value=ref)
    return fn


# --- parsing ------------------------------------------------------------------------------------

def load_spec(path: str | Path, *, check_point_fn: bool = True) -> SweepSpec:
    """Read and validate a spec file; points, profiles and files are checked here, before any work."""
    path = Path(path)
    return parse_spec(read_spec_file(path), path, check_point_fn=check_point_fn)


def read_spec_file(path: Path) -> dict:
    """The spec's TOML; a folder, an unreadable or a non-UTF-8 file is one line, never a traceback."""
    try:
        if path.is_dir():
            raise ConfigError("is a directory, not a sweep spec", file=path, allowed="a TOML file")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", file=path) from None
    except OSError as e:
        raise ConfigError(f"cannot read the spec ({e.strerror or type(e).__name__})", file=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})", file=path,
                          allowed="a UTF-8 TOML file") from None
    return loads_toml(text, file=path)  # depth-bounded: 20,000 nested [ are one line


def parse_spec(data: dict, path: Path, *, check_point_fn: bool = True) -> SweepSpec:
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError("unknown top-level key", file=path, field=shown(key),
                              allowed=", ".join(sorted(_TOP_KEYS)))
    name = data.get("name", path.stem)
    check_string(name, file=path, where="name")
    if "description" in data:
        check_string(data["description"], file=path, where="description")
    fixed, grid, run = (_table(data, key, path) for key in ("fixed", "grid", "run"))
    _check_shapes(fixed, grid, path)
    point_fn, chunk_size, plots = _run_options(run, path)
    if check_point_fn:
        resolve_point_fn(point_fn, path)

    base = path.parent
    fixed = {k: _resolve_path(k, v, base) for k, v in fixed.items()}
    axes = {k: [_resolve_path(k, v, base) for v in vs] for k, vs in grid.items()}
    for key, vs in axes.items():
        dup = _first_duplicate(vs)
        if dup is not None:
            raise ConfigError("duplicate value on a grid axis", file=path, field=f"grid.{key}", value=shown(dup))
    drafts = _draft_pairs(axes, fixed, base, path)
    n = math.prod(len(v) for v in axes.values())
    if n > MAX_POINTS:
        raise ConfigError(f"grid has {n} points", file=path, field="grid", allowed=f"at most {MAX_POINTS}")

    def where(f: str) -> str:
        if f in ("alpha", "trace") and drafts is not None and f not in axes and f not in fixed:
            return "grid.draft" if "draft" in axes else "fixed.draft"
        return f"grid.{f}" if f in axes else f"fixed.{f}" if f in fixed else f"grid.{f}"

    g = Grid(fixed=fixed, axes=tuple((k, tuple(v)) for k, v in axes.items()), drafts=drafts)
    reps = check_points(g, path, where)
    configs = [c for cs in reps.values() for c in cs]
    check_files_and_profiles(configs, path, where)
    g = replace(g, digests=digests_of(configs, path, where))
    return SweepSpec(path=path, name=name, fixed=fixed, axes=axes, point_fn=point_fn, chunk_size=chunk_size,
                     plots=plots, points=points_of(g), ids=ids_of(g), grid_key=grid_key(reps, drafts is not None),
                     digests=g.digests)


def _table(data: dict, key: str, path: Path) -> dict:
    t = data.get(key, {})
    if not isinstance(t, dict):
        raise ConfigError("must be a table", file=path, field=key, value=shown(t))
    return t


def _check_shapes(fixed: dict, grid: dict, path: Path) -> None:
    """Known fields, lists only in [grid], and every value of the field's exact type and range."""
    for section, table in (("fixed", fixed), ("grid", grid)):
        for key, v in table.items():
            where = f"{section}.{key}"
            if key not in FLAT_FIELDS:
                raise ConfigError("unknown field", file=path, field=shown(where), allowed=", ".join(_FIELDS))
            if section == "fixed":
                if isinstance(v, dict) or (isinstance(v, list) and not is_sequence(key)):
                    raise ConfigError("fixed values must be scalars (put lists in [grid])", file=path,
                                      field=where, value=shown(v))
                check_value(key, v, file=path, where=where)
                continue
            if not isinstance(v, list):
                raise ConfigError("a grid axis must be a list of values (put single values in [fixed])",
                                  file=path, field=where, value=shown(v))
            if not v:
                raise ConfigError("empty grid axis: the sweep would have no points", file=path, field=where)
            if any(isinstance(x, dict) or (isinstance(x, list) and not is_sequence(key)) for x in v):
                raise ConfigError("grid values must be scalars", file=path, field=where, value=shown(v))
            for x in v:
                check_value(key, x, file=path, where=where)
    both = sorted(set(fixed) & set(grid))
    if both:
        raise ConfigError("field is both fixed and a grid axis", file=path, field=f"grid.{both[0]}")
    if not grid and not fixed:
        raise ConfigError("empty spec: no [grid] axes and no [fixed] fields", file=path, field="grid")


def _first_duplicate(values: list) -> Any:
    seen = set()
    for v in values:
        k = (type(v) is bool, json.dumps(v) if isinstance(v, list) else v)
        if k in seen:
            return v
        seen.add(k)
    return None


def _run_options(run: dict, path: Path) -> tuple[str, int, bool]:
    for key in run:
        if key not in _RUN_KEYS:
            raise ConfigError("unknown field", file=path, field=shown(f"run.{key}"),
                              allowed=", ".join(sorted(_RUN_KEYS)))
    point_fn = run.get("point_fn", DEFAULT_POINT_FN)
    if not isinstance(point_fn, str):
        raise ConfigError("must be a string 'module:function'", file=path, field="run.point_fn",
                          value=shown(point_fn))
    check_string(point_fn, file=path, where="run.point_fn")
    chunk = run.get("chunk_size", 0)
    if not isinstance(chunk, int) or isinstance(chunk, bool) or not 0 <= chunk <= 1_000_000:
        raise ConfigError("must be an integer", file=path, field="run.chunk_size", value=shown(chunk),
                          allowed="0 (adaptive) to 1000000")
    plots = run.get("plots", True)
    if not isinstance(plots, bool):
        raise ConfigError("must be true or false", file=path, field="run.plots", value=shown(plots))
    return point_fn, chunk, plots


def _resolve_path(field: str, value: Any, base: Path) -> Any:
    """Relative file paths in a spec are relative to the spec itself, not to the caller's directory."""
    if not isinstance(value, str):
        return value
    if field in PATH_FIELDS or (field in _PROFILE_FIELDS and value.endswith(".toml")):
        p = Path(value)
        try:
            return value if p.is_absolute() else str((base / p).resolve())
        except (OSError, RuntimeError):  # a symlink loop: left as written, reported when the file is read
            return value
    return value


def _draft_pairs(axes: dict, fixed: dict, base: Path, path: Path) -> dict | None:
    """Split "name:ALPHA" / "name:TRACE" draft entries; None when no draft carries its acceptance."""
    entries = axes.get("draft", [fixed["draft"]] if "draft" in fixed else [])
    if not any(isinstance(d, str) and ":" in d for d in entries):
        return None
    where = "grid.draft" if "draft" in axes else "fixed.draft"
    for f in ("alpha", "trace"):
        if f in axes or f in fixed:
            sect = "grid" if f in axes else "fixed"
            raise ConfigError(f"drafts given as 'name:acceptance' already fix the acceptance; drop {sect}.{f}",
                              file=path, field=f"{sect}.{f}")
    pairs, seen = {}, {}
    for d in entries:
        if not isinstance(d, str) or ":" not in d:
            raise ConfigError("pair every draft with its acceptance or none of them", file=path, field=where,
                              value=shown(d), allowed="'name:ALPHA' or 'name:TRACE'")
        name, _, acc = d.rpartition(":")
        if not name or not acc:
            raise ConfigError("malformed draft pair", file=path, field=where, value=shown(d),
                              allowed="'name:ALPHA' or 'name:TRACE'")
        try:
            alpha = float(acc)
        except ValueError:
            pairs[d] = {"draft": _resolve_path("draft", name, base), "trace": _resolve_path("trace", acc, base)}
        else:
            check_value("alpha", alpha, file=path, where=where)
            pairs[d] = {"draft": _resolve_path("draft", name, base), "alpha": alpha}
        key = tuple(sorted(pairs[d].items()))
        if key in seen:
            raise ConfigError(f"draft pair is the same as {seen[key]!r}", file=path, field=where, value=shown(d))
        seen[key] = d
    return pairs
