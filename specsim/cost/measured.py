"""Measured cost mode: pass times interpolated from a table a real run recorded.

The third cost mode beside ideal and calibrated (`specsim.cost.roofline.CostModel`): instead of a roofline, T(B, P, L)
comes from measured passes over a full grid of batch sizes B, new positions P and cached contexts L, multilinearly
interpolated (and linearly extrapolated from the edge segments; an axis with one value is constant along it).
`MeasuredCosts` has the interface the engine uses of a CostModel (`pass_cost`, `pass_time_s`, `prefill_cost`,
`model`, `hardware`, `tp`, `memory_bytes`), so `specsim.cost.steptime.StepCosts(target, draft)` accepts it as is.

Why a separate prefill table: prompt processing is one pass over P = prompt length at L = 0, far outside the
decode grid; a few exact prompt lengths measured at L = 0 (`prefill` rows) are cheaper than a full grid up there.
Without them, prefill is read from the decode grid at (B, prompt_len, 0).

A table read from a file is checked for physics: a pass with more rows, positions or context is not faster beyond
measurement noise (`specsim.inputs.tables.RISE_TOLERANCE`), and what is priced is the table's monotone envelope, so
extrapolation past the measured edge never falls (one rising slope per axis past its edge, not a multilinear
extrapolation of every axis at once, whose cross terms can turn an axis downhill). Grids built in memory from this
run's own measurements (`specsim.executor.validate`) are used as measured.

Bytes and FLOPs (for MBU / MFU) come from the model profile's roofline when one is given, else they are 0.
Encoder-decoder models are not supported here (the table has no cross-attention axis).
"""

from __future__ import annotations

import csv
import errno
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from specsim.cost.roofline import CostModel, PassCost
from specsim.errors import ConfigError
from specsim.inputs.files import input_file
from specsim.inputs.tables import CsvTable, check_rows, float_column, int_column, require_columns, rising
from specsim.profiles import IDEAL_STACK, HardwareProfile, ModelProfile

AXES = ("batch", "positions", "context")
# (default, lo, hi) of each axis; a default of None means the column is required
AXIS_RANGES = {"batch": (1, 1, 1_000_000), "positions": (None, 1, 10_000_000), "context": (0, 0, 10_000_000)}
MAX_PASS_TIME_S = 3600.0  # one pass longer than an hour is a unit mistake (ms written as s), not a measurement
KINDS = ("decode", "prefill")
MAX_ROWS = 1_000_000  # our choice: a measured grid has ~10²–10⁴ rows; more is a wrong file, refused before parsing


def _int_field(r: dict, name: str, i: int, where: str) -> int:
    default, lo, hi = AXIS_RANGES[name]
    v = r.get(name, default)
    allowed = f"integers in [{lo}, {hi}]"
    if v is None:
        raise ConfigError(f"bad row {i + 1}: missing {name}", file=where, field=name, allowed=allowed)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ConfigError(f"bad row {i + 1}: {name} is not an integer", file=where, field=name, value=v,
                          allowed=allowed)
    if not lo <= v <= hi:
        raise ConfigError(f"bad row {i + 1}: {name} out of range", file=where, field=name, value=int(v),
                          allowed=allowed)
    return int(v)


def _time_field(r: dict, i: int, where: str) -> float:
    v = r.get("time_s")
    allowed = f"seconds in (0, {MAX_PASS_TIME_S:g}]"
    if v is None:
        raise ConfigError(f"bad row {i + 1}: missing time_s", file=where, field="time_s", allowed=allowed)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ConfigError(f"bad row {i + 1}: time_s is not a number", file=where, field="time_s", value=v,
                          allowed=allowed)
    if v != v:
        raise ConfigError(f"bad row {i + 1}: time_s is not a number (NaN)", file=where, field="time_s", allowed=allowed)
    if not 0 < v <= MAX_PASS_TIME_S:
        raise ConfigError(f"bad row {i + 1}: time_s out of range", file=where, field="time_s", value=float(v),
                          allowed=allowed)
    return float(v)


def free_model(name: str) -> SimpleNamespace:
    """A stand-in profile for a draft with no weights (bigram, prompt lookup): no memory, no layers."""
    return SimpleNamespace(name=name, architecture="decoder", weight_bytes=0.0, kv_bytes_per_token=0.0,
                           cross_kv_bytes_per_token=0.0, n_layers=0, n_heads=1, head_dim=1, bytes_per_param=0.0,
                           dtype="fp32", d_model=0)


def _axis_weights(axis: np.ndarray, x: float) -> list[tuple[int, float]]:
    """(index, weight) pairs that interpolate (or linearly extrapolate) along one sorted axis."""
    if len(axis) == 1:
        return [(0, 1.0)]
    i = int(np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2))
    w = (x - axis[i]) / (axis[i + 1] - axis[i])
    return [(i, 1.0 - w), (i + 1, w)]


@dataclass
class PassGrid:
    """A full grid of measured times over (batch, positions, context)."""

    batch: np.ndarray
    positions: np.ndarray
    context: np.ndarray
    time_s: np.ndarray  # shape (len(batch), len(positions), len(context))
    envelope: bool = False  # a file's monotone envelope (`rising`): extrapolation past the grid never falls

    @classmethod
    def from_rows(cls, rows: Iterable[dict], where: str = "measured table") -> PassGrid:
        rows = list(rows)
        if not rows:
            raise ConfigError("measured table has no rows", file=where,
                              allowed="rows with positions, time_s (and batch, context)")
        vals: dict = {}
        for i, r in enumerate(rows):
            key = tuple(_int_field(r, f, i, where) for f in AXES)
            vals.setdefault(key, []).append(_time_field(r, i, where))
        axes = [np.array(sorted({k[j] for k in vals}), dtype=float) for j in range(3)]
        grid = np.full(tuple(len(a) for a in axes), np.nan)
        for (b, p, c), ts in vals.items():
            grid[np.searchsorted(axes[0], b), np.searchsorted(axes[1], p), np.searchsorted(axes[2], c)] = \
                float(np.median(ts))
        if np.isnan(grid).any():
            miss = np.argwhere(np.isnan(grid))[0]
            raise ConfigError("measured table is not a full grid over (batch, positions, context)", file=where,
                              value=tuple(int(axes[j][miss[j]]) for j in range(3)),
                              allowed="one time for every combination of the measured values")
        return cls(*axes, grid)

    def rising(self, where: str) -> PassGrid:
        """This grid checked for physics (a pass with more rows, positions or context is not faster, within
        `tables.RISE_TOLERANCE`) and made monotone (`tables.rising`): what a measured file is priced with."""
        t = rising(self.time_s, list(zip(AXES, (self.batch, self.positions, self.context))), where)
        return PassGrid(self.batch, self.positions, self.context, t, envelope=True)

    def _multilinear(self, batch: float, positions: float, context: float) -> float:
        t = 0.0
        for i, wi in _axis_weights(self.batch, batch):
            for j, wj in _axis_weights(self.positions, positions):
                for k, wk in _axis_weights(self.context, context):
                    t += wi * wj * wk * self.time_s[i, j, k]
        return t

    def at(self, batch: float, positions: float, context: float) -> float:
        if self.envelope:
            return self._at_envelope(batch, positions, context)
        t = self._multilinear(batch, positions, context)
        return max(t, 0.05 * float(self.time_s.min()))  # extrapolation must never give a non-positive time

    def _at_envelope(self, batch: float, positions: float, context: float) -> float:
        """Multilinear inside the grid; past an edge, the edge's value plus, per axis, the steepest edge-segment
        slope over that face (>= 0) times the distance. Extrapolating every axis at once multilinearly would let
        one axis fall past another's edge (its cross term changes sign), so a monotone grid priced a pass with
        more rows as cheaper; one constant slope per axis keeps every axis rising everywhere."""
        axes = (self.batch, self.positions, self.context)
        x = (batch, positions, context)
        inside = [float(np.clip(v, a[0], a[-1])) for v, a in zip(x, axes)]
        t = self._multilinear(*inside)
        for ax, (a, v, c) in enumerate(zip(axes, x, inside)):
            if v == c or len(a) == 1:
                continue
            end = (-1, -2) if v > c else (1, 0)  # the edge segment on the side v left the grid
            seg = np.take(self.time_s, end[0], axis=ax) - np.take(self.time_s, end[1], axis=ax)
            slope = max(0.0, float(np.max(seg))) / abs(float(a[end[0]] - a[end[1]]))
            t += slope * (v - c)
        return max(t, 0.05 * float(self.time_s.min()))


class MeasuredCosts:
    """Pass times of one model from a measured table; a drop-in for `CostModel` in the engine."""

    mode = "measured"

    def __init__(self, rows: Iterable[dict], model: ModelProfile | None = None,
                 hardware: HardwareProfile | None = None, prefill_rows: Iterable[dict] | None = None,
                 name: str | None = None, where: str = "measured table"):
        self.grid = PassGrid.from_rows(rows, where)
        self.prefill = None
        pre = list(prefill_rows or [])
        if pre:
            self.prefill = PassGrid.from_rows([{**r, "context": 0} for r in pre], where + " (prefill)")
        self.model = model if model is not None else free_model(name or "measured")
        self.hardware, self.tp, self.cross_context = hardware, 1, 0
        self._roof = CostModel(model, hardware, IDEAL_STACK) if model is not None and hardware is not None \
            else None

    # --- the interface StepCosts / PassTable use ------------------------------------------------------
    def _cost(self, grid: PassGrid, batch: int, positions: int, context: int) -> PassCost:
        if batch < 1 or positions < 1 or context < 0:
            raise ConfigError("a pass needs batch >= 1, positions >= 1, context >= 0", field="pass",
                              value=(batch, positions, context))
        t = grid.at(batch, positions, context)
        b = f = 0.0
        bound = "memory"
        if self._roof is not None:
            ideal = self._roof.pass_cost(batch, positions, context)
            b, f, bound = ideal.bytes, ideal.flops, ideal.bound
        return PassCost(positions=positions, batch=batch, context=context, time_s=t, bytes=b, flops=f,
                        bound=bound, memory_time_s=0.0, compute_time_s=0.0, overhead_time_s=0.0, comm_time_s=0.0)

    def pass_cost(self, batch: int = 1, positions: int = 1, context: int = 0,
                  cross_context: int | None = None) -> PassCost:
        return self._cost(self.grid, batch, positions, context)

    def pass_time_s(self, batch: int = 1, positions: int = 1, context: int = 0,
                    cross_context: int | None = None) -> float:
        return self.pass_cost(batch, positions, context).time_s

    def prefill_cost(self, batch: int, prompt_len: int) -> PassCost:
        return self._cost(self.prefill if self.prefill is not None else self.grid, batch, prompt_len, 0)

    def memory_bytes(self, batch: int, context: int) -> float:
        m = self.model
        return m.weight_bytes + batch * context * m.kv_bytes_per_token

    # --- files ------------------------------------------------------------------------------------------
    @classmethod
    def read_csv(cls, path: str | Path, model: ModelProfile | None = None,
                 hardware: HardwareProfile | None = None, name: str | None = None,
                 field: str | None = None) -> MeasuredCosts:
        """CSV with columns batch, positions, context, time_s (and optionally kind = decode | prefill); types are
        strict (`specsim.inputs.tables`), other columns are ignored, `#` starts a comment line.

        `field` is the option that named the file, for messages; without it a directory raises
        IsADirectoryError, which the caller words with its option name."""
        p = Path(path)
        if p.is_dir() and field is None:
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(p))
        input_file(p, "measured table", field=field, missing="measured table file not found")
        dec, pre = _read_rows(p)
        mc = cls(dec, model, hardware, pre, name=name or p.stem, where=str(p))
        mc.grid = mc.grid.rising(str(p))  # a file is checked for physics; in-memory grids (validate) are as measured
        if mc.prefill is not None:
            mc.prefill = mc.prefill.rising(f"{p} (prefill rows)")
        return mc


def _read_rows(p: Path) -> tuple[list[dict], list[dict]]:
    """(decode rows, prefill rows) of a measured table CSV, each value checked."""
    table = CsvTable(p, comment="#")
    df = table.frame
    require_columns(df, ("positions", "time_s"), p)
    check_rows(len(df), p, MAX_ROWS)
    cols = {}
    for c, (default, lo, hi) in AXIS_RANGES.items():
        if c in df.columns:
            cols[c] = int_column(df[c], c, p, lo=lo, hi=hi, raw=table.raw)
        else:
            cols[c] = np.full(len(df), default, dtype=np.int64)
    cols["time_s"] = float_column(df["time_s"], "time_s", p, lo=0.0, hi=MAX_PASS_TIME_S, lo_open=True,
                                  raw=table.raw)
    kinds = ["decode"] * len(df)
    if "kind" in df.columns:
        kinds = [table.raw("kind", i).strip() or "decode" for i in range(len(df))]
        bad = [i for i, k in enumerate(kinds) if k not in KINDS]
        if bad:
            raise ConfigError(f"unknown pass kind in data row {bad[0] + 1}", file=p, field="kind",
                              value=kinds[bad[0]], allowed="decode | prefill (blank = decode)")
    rows = [{"batch": int(cols["batch"][i]), "positions": int(cols["positions"][i]),
             "context": int(cols["context"][i]), "time_s": float(cols["time_s"][i])} for i in range(len(df))]
    dec = [r for r, k in zip(rows, kinds) if k == "decode"]
    pre = [r for r, k in zip(rows, kinds) if k == "prefill"]
    if not dec:
        raise ConfigError("no decode rows (only prefill)", file=p, field="kind",
                          allowed="at least one decode row (kind decode or blank)")
    return dec, pre


def write_csv(path: str | Path, rows: Sequence[dict], prefill_rows: Sequence[dict] = ()) -> Path:
    """Write a measured table that `MeasuredCosts.read_csv` reads back."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["kind", "batch", "positions", "context", "time_s"])
        for kind, rs in (("decode", rows), ("prefill", prefill_rows)):
            for r in rs:
                w.writerow([kind, int(r.get("batch", 1)), int(r["positions"]), int(r.get("context", 0)),
                            repr(float(r["time_s"]))])
    return p
