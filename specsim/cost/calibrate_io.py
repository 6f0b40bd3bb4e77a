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

    lines = [f"# {comment.replace(chr(10), ' ')}"]
    lines += [f"{k} = {value(v)}" for k, v in d.items() if not isinstance(v, dict)]
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


# --- power: measured serving rows in, a fitted hardware profile out (specsim/cost/power_fit.py) -----------------

POWER_REQUIRED = ("model", "gpu", "tp", "tok_s")
POWER_BATCH = ("batch", "max_num_seqs")  # the mean running batch, or the engine's cap where that is all there is
POWER_WATTS = ("w_per_gpu", "j_per_token")  # either; both: they must agree (W·TP / (tok/s) = J/token)
POWER_OPTIONAL = ("prompt_len", "output_len", "stack", "source")
POWER_MAX_ROWS = 100_000
AGREE_REL = 0.05  # our choice: published W and J/token are rounded to 2-3 figures; 5% catches a unit slip


def _cell(table_, name: str, i: int) -> str:
    return table_.raw(name, i).strip()


def _num_cell(table_, path, name: str, i: int, lo: float, hi: float, integer: bool = False):
    """A cell as a number in [lo, hi] (None when blank), or a one-line refusal naming file, column and row."""
    import math

    text = _cell(table_, name, i)
    if not text:
        return None
    kind = "integers" if integer else "numbers"
    try:
        v = int(text) if integer else float(text)
    except ValueError:
        raise ConfigError(f"not {'an integer' if integer else 'a number'} in data row {i + 1}", file=path,
                          field=name, value=text, allowed=f"{kind} in [{lo:g}, {hi:g}]") from None
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ConfigError(f"value out of range in data row {i + 1}", file=path, field=name, value=text,
                          allowed=f"{kind} in [{lo:g}, {hi:g}]")
    return v


def read_power_rows(path: Path, prompt_len: int, output_len: int, stack: str) -> list:
    """`PowerRow`s from a CSV (columns: POWER_REQUIRED, one of POWER_BATCH, one or both of POWER_WATTS, any of
    POWER_OPTIONAL); every cell checked, one line per refusal. Lengths and stack default to the arguments."""
    from specsim.cost.power_fit import PowerRow
    from specsim.inputs.tables import CsvTable, check_rows, require_columns

    t = CsvTable(path, comment="#")
    cols = set(t.frame.columns)
    require_columns(t.frame, POWER_REQUIRED, path)
    for group in (POWER_BATCH, POWER_WATTS):
        if not cols & set(group):
            raise ConfigError(f"missing column {' or '.join(group)}", file=path, field=group[0],
                              allowed="columns " + ", ".join(POWER_REQUIRED + POWER_BATCH[:1] + POWER_WATTS[:1]))
    check_rows(len(t.frame), path, POWER_MAX_ROWS)
    rows = []
    for i in range(len(t.frame)):
        rows.append(_power_row(t, path, i, cols, PowerRow, prompt_len, output_len, stack))
    return rows


def _power_row(t, path, i: int, cols: set, PowerRow, prompt_len: int, output_len: int, stack: str):
    def num(name, lo, hi, integer=False):
        return _num_cell(t, path, name, i, lo, hi, integer) if name in cols else None

    def text(name, default=""):
        v = _cell(t, name, i) if name in cols else ""
        return v or default

    for name in ("model", "gpu"):
        if not text(name):
            raise ConfigError(f"missing value in data row {i + 1}", file=path, field=name,
                              allowed="a model / hardware profile name or TOML path")
    tp = num("tp", 1, 1024, integer=True)
    tok_s = num("tok_s", 1e-6, 1e9)
    batch, cap = num("batch", 1, 1e6), num("max_num_seqs", 1, 1e6, integer=True)  # every cell checked
    if batch is not None and cap is not None and batch > cap * (1 + AGREE_REL):
        raise ConfigError(f"a mean running batch above max_num_seqs in data row {i + 1}", file=path, field="batch",
                          value=batch, allowed=f"<= max_num_seqs = {cap}")
    batch = batch if batch is not None else cap
    w, j = num("w_per_gpu", 1e-3, 1e5), num("j_per_token", 1e-9, 1e6)
    for name, v in (("tp", tp), ("tok_s", tok_s), ("batch or max_num_seqs", batch), ("w_per_gpu or j_per_token",
                                                                                     w if w is not None else j)):
        if v is None:
            raise ConfigError(f"missing value in data row {i + 1}", file=path, field=name,
                              allowed="a number in every row")
    w_from_j = None if j is None else j * tok_s / tp
    if w is not None and w_from_j is not None and abs(w_from_j / w - 1.0) > AGREE_REL:
        raise ConfigError(f"W per GPU and J/token disagree in data row {i + 1}: j_per_token × tok_s / tp = "
                          f"{w_from_j:.4g} W, w_per_gpu = {w:g} W", file=path, field="j_per_token", value=j,
                          allowed=f"within {AGREE_REL:.0%} of w_per_gpu × tp / tok_s = {w * tp / tok_s:.4g}")
    pl = num("prompt_len", 1, 10_000_000, integer=True) or prompt_len
    ol = num("output_len", 1, 10_000_000, integer=True) or output_len
    return PowerRow(text("model"), text("gpu"), int(tp), float(batch), float(tok_s),
                    float(w if w is not None else w_from_j), j, int(pl), int(ol), text("stack", stack),
                    text("source"))


TDP_SLACK = 1.1  # our choice: boards briefly exceed TDP under power-limit control; a 10% slack covers rounding too
IDLE_SLACK = 0.5  # our choice: a running GPU below half its measured idle is a unit or pairing mistake


def check_power_physics(rows: list, path) -> None:
    """Refuse a row whose W per GPU no chip of that kind can draw: above its TDP (with TDP_SLACK) or below half its
    idle (one line naming the row, the value and the profile's figures)."""
    from specsim.profiles import loader

    for i, r in enumerate(rows):
        hw = in_row(path, i + 1, lambda r=r: loader.hardware(r.gpu))
        if hw.tdp_w is None or hw.idle_w is None:
            continue  # row_parts refuses it, naming the profile
        lo, hi = IDLE_SLACK * hw.idle_w, TDP_SLACK * hw.tdp_w
        if not lo <= r.w_per_gpu <= hi:
            name = "w_per_gpu" if r.j_per_token is None else "w_per_gpu (or j_per_token × tok_s / tp)"
            raise ConfigError(f"W per GPU outside what a {hw.name} can draw in data row {i + 1}", file=path,
                              field=name, value=round(r.w_per_gpu, 6),
                              allowed=f"{lo:g} .. {hi:g} W (half its idle_w {hw.idle_w:g} .. its tdp_w {hw.tdp_w:g} "
                                      f"+ {TDP_SLACK - 1:.0%})")


def write_power_profile(path: str | Path, hw: HardwareProfile, figures: dict, comment: str) -> Path:
    """The hardware profile with a fitted power curve, written only if the loader will take it back: each figure is
    checked against the schema first (a fit outside its range is refused, naming the field, before any write)."""
    from pydantic import ValidationError

    from specsim.profiles.loader import _translate

    d = dict(hw.model_dump(exclude_none=True), name=f"{hw.name}-power-fit", **figures)
    try:
        HardwareProfile.model_validate(d)
    except ValidationError as e:
        err = _translate(e, path, HardwareProfile)
        raise ConfigError(f"the fit gives a figure the hardware profile cannot hold ({err.message}); not written",
                          file=path, field=err.field, value=err.value, allowed=err.allowed) from None
    return write_hardware_toml(path, hw, comment=comment, **figures)


# a row's deployment is refused under the run's field names; the CSV says them as its columns
_COLUMN = {"target": "model", "--target": "model", "hardware": "gpu", "--hardware": "gpu", "--tp": "tp",
           "--stack": "stack"}



def in_row(path, i: int, build):
    """`build()` for data row i of the CSV; a refusal names the file, the row and the column (one line)."""
    try:
        return build()
    except ConfigError as e:
        if e.file is not None and str(e.file) != str(path):  # about another file (a profile TOML): as it is
            raise
        col = _COLUMN.get(e.field or "", e.field)
        raise ConfigError(f"data row {i}: {e.message}", file=path, field=col, value=e.value,
                          allowed=e.allowed) from None
