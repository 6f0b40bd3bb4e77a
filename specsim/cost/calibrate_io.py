"""Writing a fitted stack profile (`specsim.cost.calibrate.fit_stack`) as TOML, with where it came from as comments.

Split from specsim/cost/calibrate.py to keep the fit itself in one module of readable size.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specsim.errors import ConfigError
from specsim.profiles import HardwareProfile

if TYPE_CHECKING:
    from specsim.cost.calibrate import FitResult, PassPoint


def _grid_text(points: Sequence[PassPoint]) -> str:
    def u(xs):
        return sorted(set(xs))
    models = u(f"{p.model.name} ({p.model.n_layers} layers, {p.model.dtype})" for p in points)
    return (f"models {models}; batches {u(p.batch for p in points)}; positions {u(p.positions for p in points)}; "
            f"contexts {u(p.context for p in points)}")


def _pct(e: dict) -> str:
    if not e.get("n"):
        return "none"
    return f"median |err| {e['median_abs_pct']:.2f}%, max {e['max_abs_pct']:.2f}% over {e['n']} points"


def provenance_lines(fit: FitResult, hardware: HardwareProfile, extra: dict | None = None) -> list[str]:
    """Comment lines (without '# ') that say where the profile came from."""
    lines = [f"date: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
             f"hardware profile: {hardware.name}"]
    for k, v in (extra or {}).items():
        lines.append(f"{k}: {v}")
    lines += [f"grid: {_grid_text(fit.points)}",
              f"fit error ({len(fit.fit_index)} fitted points): {_pct(fit.fit_error)}",
              f"hold-out error (every k-th point held out of the fit): {_pct(fit.holdout_error)}",
              "identified by the data: " + ", ".join(f"{k}={v}" for k, v in fit.identified.items())]
    return lines


def write_stack_toml(path: str | Path, fit: FitResult, hardware: HardwareProfile, extra: dict | None = None) -> Path:
    """A stack profile TOML that `specsim.profiles.load_stack` reads, with provenance as comments."""
    path = Path(path)
    s = fit.stack
    run = ("max(bytes/(f_bw*BW), FLOPs/(f_c*peak))" if s.overlap == "max" else
           "bytes/(f_bw*BW) + FLOPs/(f_c*peak)")
    head = [(f"Stack profile fitted by `specsim calibrate` (specsim/cost/calibrate.py): time = {run} + o_call + "
             "layers*o_layer" + (" + o_multi if P > 1" if s.multi_position_overhead_s else "")
             + (f"; passes of B*P >= {fit.stack.multi_row_min_rows} rows use multi_row_bandwidth_fraction for f_bw"
                if fit.multi_row_bandwidth_fraction is not None else ""))]
    head += provenance_lines(fit, hardware, extra)
    prov = "; ".join([s.provenance, f"fit {_pct(fit.fit_error)}", f"hold-out {_pct(fit.holdout_error)}"]
                     + [f"{k} {v}" for k, v in (extra or {}).items()])
    body = [f"name = {json.dumps(s.name)}",
            f"description = {json.dumps(s.description)}",
            f"bandwidth_fraction = {s.bandwidth_fraction!r}",
            f"compute_fraction = {s.compute_fraction!r}",
            f"per_call_overhead_s = {s.per_call_overhead_s!r}",
            f"per_layer_overhead_s = {s.per_layer_overhead_s!r}",
            f"provenance = {json.dumps(prov)}"]
    if fit.multi_row_bandwidth_fraction is not None:
        body.insert(3, f"multi_row_bandwidth_fraction = {fit.multi_row_bandwidth_fraction!r}")
        body.insert(4, f"multi_row_min_rows = {fit.stack.multi_row_min_rows}")
    if s.overlap != "max":
        body.insert(len(body) - 1, f"overlap = {json.dumps(s.overlap)}")
    if s.multi_position_overhead_s:
        body.insert(len(body) - 1, f"multi_position_overhead_s = {s.multi_position_overhead_s!r}")
    text = "".join(f"# {ln.replace(chr(10), ' ')}\n" for ln in head) + "\n".join(body) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write stack profile: {e.strerror or e}", file=path) from None
    return path


def write_hardware_toml(path: str | Path, hw: HardwareProfile, *, comment: str, **changes) -> Path:
    """A copy of a hardware profile as TOML with `changes` (e.g. fitted idle_w / tdp_w), named <name>-power-fit, the
    reason in a leading comment; it must read back as a profile."""
    import tomllib

    path = Path(path)
    d = dict(hw.model_dump(exclude_none=True), name=f"{hw.name}-power-fit", **changes)
    def value(v) -> str:  # a TOML scalar: JSON's strings and booleans are TOML's too
        return json.dumps(v) if isinstance(v, (str, bool)) else repr(v)

    lines = [f"# {comment.replace(chr(10), ' ')}"] + [f"{k} = {value(v)}" for k, v in d.items() if not isinstance(v, dict)]
    for k, v in d.items():
        if isinstance(v, dict):
            lines += [f"\n[{k}]"] + [f"{kk} = {value(vv)}" for kk, vv in v.items()]
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # what we write must read back
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write hardware profile: {e.strerror or e}", file=path) from None
    return path
