"""Sweep specs: a TOML grid of simulation points, checked whole before any point runs.

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

Relative paths (`trace`, `arrivals_csv`, profile values ending in `.toml`) are taken relative to the spec's
directory. Every point becomes a `SimConfig`; a bad key or value, an unknown profile or a missing file is a
one-line `ConfigError` naming the spec file and the field (`grid.gamma`, `fixed.requests`, `run.point_fn`).
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specsim import profiles
from specsim.config import SimConfig
from specsim.errors import ConfigError, SpecsimError

DEFAULT_POINT_FN = "specsim.simulate:run"
MAX_POINTS = 5_000_000
_TOP_KEYS = {"name", "description", "fixed", "grid", "run"}
_RUN_KEYS = {"point_fn", "chunk_size", "plots"}
_PATH_FIELDS = ("trace", "arrivals_csv", "measured_target", "measured_draft")
_PROFILE_FIELDS = ("hardware", "target", "draft", "stack")
_FIELDS = list(SimConfig.model_fields)


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, fully validated sweep: the points in order, their ids, and how to run them."""

    path: Path
    name: str
    fixed: dict
    axes: dict  # field -> list of values, as written (draft pairs unsplit)
    point_fn: str
    chunk_size: int  # 0 = adaptive
    plots: bool
    points: tuple[SimConfig, ...]
    ids: tuple[str, ...]

    @property
    def sweep_id(self) -> str:
        return sweep_id(self.point_fn, self.ids)

    def __len__(self) -> int:
        return len(self.points)


def sweep_id(fn_name: str, ids) -> str:
    """Identity of a sweep's results: the point function's name plus every point id, in order."""
    h = hashlib.sha256(fn_name.encode())
    for pid in ids:
        h.update(b"\n" + pid.encode())
    return h.hexdigest()[:16]


# fields added to SimConfig after sweeps were first written enter a point's JSON (and id) only when set away from
# their default, so a sweep directory written before keeps its point ids and resumes without recomputing
_LATER_FIELDS = {"draft_catchup": False}


def canonical_json(cfg: SimConfig) -> str:
    d = cfg.model_dump(mode="json")
    for k, default in _LATER_FIELDS.items():
        if d.get(k) == default:
            del d[k]
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def point_id(cfg: SimConfig) -> str:
    """Stable id of one point: a hash of its canonical JSON (same config, same id, any machine)."""
    return hashlib.sha256(canonical_json(cfg).encode()).hexdigest()[:16]


def resolve_point_fn(ref: str, file: str | Path | None = None) -> Callable[[SimConfig], dict]:
    """Import "module:function"; a failure is a ConfigError on field run.point_fn."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ConfigError("point function must be 'module:function'", file=file, field="run.point_fn", value=ref)
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise ConfigError(f"cannot import module {module!r} ({e})", file=file, field="run.point_fn",
                          value=ref) from None
    except AttributeError:
        raise ConfigError(f"module {module!r} has no attribute {attr!r}", file=file, field="run.point_fn",
                          value=ref) from None
    if not callable(fn):
        raise ConfigError("point function is not callable", file=file, field="run.point_fn", value=ref)
    return fn


# --- parsing ------------------------------------------------------------------------------------

def load_spec(path: str | Path, *, check_point_fn: bool = True) -> SweepSpec:
    """Read and validate a spec file; every point is built and checked here, before any work."""
    path = Path(path)
    data = profiles.load_toml(path)
    return parse_spec(data, path, check_point_fn=check_point_fn)


def parse_spec(data: dict, path: Path, *, check_point_fn: bool = True) -> SweepSpec:
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError("unknown top-level key", file=path, field=key, allowed=", ".join(sorted(_TOP_KEYS)))
    name = data.get("name", path.stem)
    if not isinstance(name, str):
        raise ConfigError("must be a string", file=path, field="name", value=name)
    fixed = _table(data, "fixed", path)
    grid = _table(data, "grid", path)
    run = _table(data, "run", path)
    base = path.parent

    for section, table in (("fixed", fixed), ("grid", grid)):
        for key, v in table.items():
            if key not in SimConfig.model_fields:
                raise ConfigError("unknown field", file=path, field=f"{section}.{key}",
                                  allowed=", ".join(_FIELDS))
            if section == "grid":
                if not isinstance(v, list):
                    raise ConfigError("a grid axis must be a list of values (put single values in [fixed])",
                                      file=path, field=f"grid.{key}", value=v)
                if not v:
                    raise ConfigError("empty grid axis: the sweep would have no points", file=path,
                                      field=f"grid.{key}")
                if any(isinstance(x, (list, dict)) for x in v):
                    raise ConfigError("grid values must be scalars", file=path, field=f"grid.{key}", value=v)
                dup = _first_duplicate(v)
                if dup is not None:
                    raise ConfigError("duplicate value on a grid axis", file=path, field=f"grid.{key}", value=dup)
            elif isinstance(v, (list, dict)):
                raise ConfigError("fixed values must be scalars (put lists in [grid])", file=path,
                                  field=f"fixed.{key}", value=v)
    both = sorted(set(fixed) & set(grid))
    if both:
        raise ConfigError("field is both fixed and a grid axis", file=path, field=f"grid.{both[0]}")
    if not grid and not fixed:
        raise ConfigError("empty spec: no [grid] axes and no [fixed] fields", file=path, field="grid")

    point_fn, chunk_size, plots = _run_options(run, path)
    if check_point_fn:
        resolve_point_fn(point_fn, path)

    fixed = {k: _resolve_path(k, v, base) for k, v in fixed.items()}
    axes = {k: [_resolve_path(k, v, base) for v in vs] for k, vs in grid.items()}
    drafts = _draft_pairs(axes, fixed, base, path)
    n = math.prod(len(v) for v in axes.values())
    if n > MAX_POINTS:
        raise ConfigError(f"grid has {n} points", file=path, field="grid", allowed=f"at most {MAX_POINTS}")

    def where(f: str) -> str:
        if f in ("alpha", "trace") and drafts is not None and f not in axes and f not in fixed:
            return "grid.draft" if "draft" in axes else "fixed.draft"
        return f"grid.{f}" if f in axes else f"fixed.{f}" if f in fixed else f"grid.{f}"

    points = _expand(fixed, axes, drafts, path, where)
    _check_files_and_profiles(points, path, where)
    ids = tuple(point_id(p) for p in points)
    if len(set(ids)) != len(ids):
        raise ConfigError("grid yields the same point twice", file=path, field="grid.draft")
    return SweepSpec(path=path, name=name, fixed=fixed, axes=axes, point_fn=point_fn, chunk_size=chunk_size,
                     plots=plots, points=tuple(points), ids=ids)


def _table(data: dict, key: str, path: Path) -> dict:
    t = data.get(key, {})
    if not isinstance(t, dict):
        raise ConfigError("must be a table", file=path, field=key, value=t)
    return t


def _first_duplicate(values: list) -> Any:
    seen = set()
    for v in values:
        k = (type(v) is bool, v)
        if k in seen:
            return v
        seen.add(k)
    return None


def _run_options(run: dict, path: Path) -> tuple[str, int, bool]:
    for key in run:
        if key not in _RUN_KEYS:
            raise ConfigError("unknown field", file=path, field=f"run.{key}", allowed=", ".join(sorted(_RUN_KEYS)))
    point_fn = run.get("point_fn", DEFAULT_POINT_FN)
    if not isinstance(point_fn, str):
        raise ConfigError("must be a string 'module:function'", file=path, field="run.point_fn", value=point_fn)
    chunk = run.get("chunk_size", 0)
    if not isinstance(chunk, int) or isinstance(chunk, bool) or not 0 <= chunk <= 1_000_000:
        raise ConfigError("must be an integer", file=path, field="run.chunk_size", value=chunk,
                          allowed="0 (adaptive) to 1000000")
    plots = run.get("plots", True)
    if not isinstance(plots, bool):
        raise ConfigError("must be true or false", file=path, field="run.plots", value=plots)
    return point_fn, chunk, plots


def _resolve_path(field: str, value: Any, base: Path) -> Any:
    """Relative file paths in a spec are relative to the spec itself, not to the caller's directory."""
    if not isinstance(value, str):
        return value
    if field in _PATH_FIELDS or (field in _PROFILE_FIELDS and value.endswith(".toml")):
        p = Path(value)
        return value if p.is_absolute() else str((base / p).resolve())
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
    pairs = {}
    for d in entries:
        if not isinstance(d, str) or ":" not in d:
            raise ConfigError("pair every draft with its acceptance or none of them", file=path, field=where,
                              value=d, allowed="'name:ALPHA' or 'name:TRACE'")
        name, _, acc = d.rpartition(":")
        if not name or not acc:
            raise ConfigError("malformed draft pair", file=path, field=where, value=d,
                              allowed="'name:ALPHA' or 'name:TRACE'")
        try:
            pairs[d] = {"draft": _resolve_path("draft", name, base), "alpha": float(acc)}
        except ValueError:
            pairs[d] = {"draft": _resolve_path("draft", name, base), "trace": _resolve_path("trace", acc, base)}
    return pairs


def _expand(fixed: dict, axes: dict, drafts: dict | None, path: Path, where) -> list[SimConfig]:
    keys = list(axes)
    points = []
    validate = SimConfig.model_validate
    for combo in itertools.product(*axes.values()):
        d = dict(fixed)
        d.update(zip(keys, combo))
        if drafts is not None:
            d.update(drafts[d["draft"]])
        try:
            points.append(validate(d))
        except ValidationError as e:
            raise _point_error(e, d, path, where) from None
    return points


def _point_error(err: ValidationError, point: dict, path: Path, where) -> ConfigError:
    e = err.errors()[0]
    field = str(e["loc"][0]) if e["loc"] else None
    if e["type"] == "missing":
        return ConfigError("required field is missing (give it in [grid] or [fixed])", file=path,
                           field=where(field))
    if field is None:  # the model-level check: exactly one acceptance source
        return ConfigError("give exactly one of alpha and trace (in [grid], in [fixed], or as draft 'name:ALPHA')",
                           file=path, field=where("alpha"))
    t = profiles._translate(err, path)
    return ConfigError(e["msg"], file=path, field=where(field), value=t.value, allowed=t.allowed)


def _check_files_and_profiles(points: list[SimConfig], path: Path, where) -> None:
    """Unknown profiles, unreadable profile files, missing traces and impossible TP fail now, not mid-sweep."""
    for f in _PATH_FIELDS:
        for value in sorted({getattr(p, f) for p in points} - {None}):
            if not Path(value).is_file():
                raise ConfigError("file not found", file=path, field=where(f), value=value)
    loaders = {"hardware": profiles.hardware, "target": profiles.model, "draft": profiles.model}
    for f, load in loaders.items():
        for name in sorted({getattr(p, f) for p in points}):
            _load_profile(load, name, f, path, where)
    combos = sorted({(p.hardware, p.stack, p.target, p.draft, p.tp) for p in points}, key=repr)
    for hw_name, stack_name, target, draft, tp in combos:
        hw = profiles.hardware(hw_name)
        if stack_name is None:  # the hardware's default stack
            try:
                stack = profiles.stack(hw.default_stack)
            except ConfigError as e:
                raise ConfigError(f"default stack {hw.default_stack!r} of hardware {hw_name!r} cannot be loaded "
                                  f"({e}); set 'stack' in [fixed] or [grid]", file=path,
                                  field=where("hardware")) from None
        else:
            stack = _load_profile(profiles.stack, stack_name, "stack", path, where)
        for f, m in (("target", target), ("draft", draft)):
            _check_cost_model(profiles.model(m), hw, stack, tp, f, path, where)
        t_arch, d_arch = profiles.model(target).architecture, profiles.model(draft).architecture
        if t_arch != d_arch:
            raise ConfigError(f"draft {draft!r} is {d_arch} but target {target!r} is {t_arch}", file=path,
                              field=where("draft"), allowed=f"a {t_arch} draft")


def _load_profile(load, name, field: str, path: Path, where):
    try:
        return load(name)
    except ConfigError as e:
        if e.file is None:  # an unknown name
            raise ConfigError(f"unknown {field} profile", file=path, field=where(field), value=e.value,
                              allowed=e.allowed) from None
        raise ConfigError(f"profile {name!r} is invalid: {e}", file=path, field=where(field)) from None


def _check_cost_model(model, hw, stack, tp: int, field: str, path: Path, where) -> None:
    from specsim.costs import CostModel

    try:
        cm = CostModel(model, hw, stack, tp)
        cm.pass_time_s(1, 1, 0)
    except SpecsimError as e:
        culprit = "tp" if tp > 1 and hw.interconnect_bandwidth_gb_s is None else field
        raise ConfigError(f"{model.name} on {hw.name} (tp {tp}): {e}", file=path, field=where(culprit)) from None
