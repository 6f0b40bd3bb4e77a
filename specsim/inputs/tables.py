"""Strict typed columns for the tables users give us: β traces, arrivals CSVs, measured pass-time tables.

Why strict: a lax reader turns `true` into 1, the text "3350" into a number and a blank cell into NaN, and the
simulation then prints a wrong figure without a word. The rules, the same for every table:
- An integer column holds integers. CSV: integer literals (`3`, `-2`; not `3.0`, `1e3`, `true`). Parquet or an
  in-memory DataFrame: an integer type (not bool, float or string). Values within the column's range (int64).
- A number column holds numbers. CSV: decimal literals (`0.5`, `.5`, `1e-3`, `7`). Parquet or a DataFrame: an
  integer or float type. `nan`, `inf`, blank cells and true/false are refused, as is anything out of range.
- CSV quoting does not change a cell's type: `"0.5"` is the number 0.5 (CSV has no other way to write text).
- A CSV data row with more fields than the header, a repeated column name, a file that is not UTF-8 text, is
  refused. A UTF-8 byte-order mark is allowed (spreadsheets write one).
Every refusal is one ConfigError naming the file, the column, the data row (1-based, not counting the header,
comments or blank lines), the cell as written and the allowed range.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from specsim.errors import ConfigError

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1  # numpy int64's range: integer columns must fit it exactly
_INT_RE = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)
_NUM_RE = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*", re.ASCII)
Raw = Callable[[str, int], str]  # (column, row index) -> the cell's text as written in the file


class CsvTable:
    """A CSV read with pandas' typed inference, plus the cells as written, read again only for a message."""

    def __init__(self, path: Path, skiprows: int = 0, comment: str | None = None):
        self.path, self._kw = path, {"skiprows": skiprows, "comment": comment, "encoding": "utf-8-sig",
                                     "index_col": False}
        self._raw: pd.DataFrame | None = None
        self.frame = self._read()
        self._check_header()

    def _read(self, **kw) -> pd.DataFrame:
        p = self.path
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                return pd.read_csv(p, **self._kw, **kw)
        except UnicodeDecodeError:
            raise ConfigError("not a UTF-8 text CSV file", file=p) from None
        except pd.errors.EmptyDataError:
            raise ConfigError("no header and no rows", file=p, allowed="a header line and at least one row") from None
        except pd.errors.ParserWarning:
            raise ConfigError("the first data row has more fields than the header", file=p,
                              allowed="one field per header column") from None
        except (pd.errors.ParserError, ValueError) as e:
            raise ConfigError(f"malformed CSV ({first_line(e)})", file=p) from None
        except OSError as e:
            raise ConfigError(f"cannot read: {e.strerror or type(e).__name__}", file=p) from None

    def _check_header(self) -> None:
        head = self._read(header=None, nrows=1, dtype=str, keep_default_na=False)
        names = [str(x).strip() for x in head.iloc[0].tolist()] if len(head) else []
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError("column named more than once", file=self.path, field=dup[0],
                              allowed="each column once")

    def raw(self, column: str, i: int) -> str:
        if self._raw is None:
            self._raw = self._read(dtype=str, keep_default_na=False, na_filter=False)
        return str(self._raw[column].iloc[i])


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def require_columns(frame: pd.DataFrame, columns: Sequence[str], where) -> None:
    """A one-line error for the first missing column, listing what the file has."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        have = [str(c) for c in frame.columns][:6]  # our choice: enough to recognise the file, one line
        raise ConfigError(f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} (the file has "
                          f"{', '.join(have) or 'none'})", file=where, field=missing[0],
                          allowed="columns " + ", ".join(columns))


def _num(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range_text(lo, hi, lo_open: bool = False, hi_open: bool = False, kind: str = "numbers") -> str:
    if lo is not None and hi is not None:
        return f"{kind} in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{kind} {'>' if lo_open else '>='} {_num(lo)}"
    return f"{kind} {'<' if hi_open else '<='} {_num(hi)}" if hi is not None else kind


def _shown(col: pd.Series, i: int, raw: Raw | None, name: str):
    if raw is not None:
        return raw(name, i)
    v = col.iloc[i]
    return v.item() if hasattr(v, "item") else v


def _bad(where, name: str, i: int, what: str, value, allowed: str):
    return ConfigError(f"{what} in data row {i + 1}", file=where, field=name, value=value, allowed=allowed)


def int_column(col: pd.Series, name: str, where, lo: int | None = None, hi: int | None = None,
               raw: Raw | None = None) -> np.ndarray:
    """The column as int64 under the module's rules, every value in [lo, hi]."""
    lo_, hi_ = INT64_MIN if lo is None else lo, INT64_MAX if hi is None else hi
    allowed = _range_text(lo, hi, kind="integers") if lo is not None or hi is not None else \
        "integers in [-2^63, 2^63 - 1]"
    if pd.api.types.is_integer_dtype(col) and not pd.api.types.is_bool_dtype(col):
        vals = col.to_numpy()
        if vals.dtype.kind == "i":
            out = (vals < lo_) | (vals > hi_)
        else:  # unsigned (parquet uint64, or a CSV integer above int64)
            out = (vals < np.uint64(max(lo_, 0))) | (vals > np.uint64(hi_))
        if out.any():
            i = int(np.argmax(out))
            raise _bad(where, name, i, "value out of range", _shown(col, i, raw, name), allowed)
        return vals.astype(np.int64)
    if raw is None:  # parquet / DataFrame: the type itself is wrong
        missing = col.isna().to_numpy()
        if missing.any():  # a null in an integer column makes pandas read it as float
            raise _bad(where, name, int(np.argmax(missing)), "missing value (null)", None, allowed)
        what = "true/false is not an integer" if pd.api.types.is_bool_dtype(col) else \
            f"column of type {col.dtype} where integers belong"
        raise _bad(where, name, 0, what, _shown(col, 0, None, name), allowed)
    out = np.empty(len(col), dtype=np.int64)
    for i in range(len(col)):  # a CSV column pandas did not read as integers: find the first bad cell
        text = raw(name, i)
        if not _INT_RE.fullmatch(text):
            what = "missing value" if not text.strip() else "not an integer"
            raise _bad(where, name, i, what, text, allowed)
        if not lo_ <= int(text) <= hi_:
            raise _bad(where, name, i, "value out of range", text, allowed)
        out[i] = int(text)
    return out


def float_column(col: pd.Series, name: str, where, lo: float | None = None, hi: float | None = None,
                 lo_open: bool = False, hi_open: bool = False, raw: Raw | None = None,
                 finite: bool = True) -> np.ndarray:
    """The column as float64 under the module's rules, every value finite and within the bounds (finite=False:
    the types only; NaN and inf pass through for a caller that words its own message)."""
    allowed = _range_text(lo, hi, lo_open, hi_open)
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    if not numeric:
        if raw is None or pd.api.types.is_bool_dtype(col):
            what = "true/false is not a number" if pd.api.types.is_bool_dtype(col) else \
                f"column of type {col.dtype} where numbers belong"
            raise _bad(where, name, 0, what, _shown(col, 0, raw, name), allowed)
        for i in range(len(col)):
            text = raw(name, i)
            if not _NUM_RE.fullmatch(text):
                what = "missing value" if not text.strip() else "not a number"
                raise _bad(where, name, i, what, text, allowed)
    vals = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    if not finite:
        return vals
    bad = ~np.isfinite(vals)
    if lo is not None:
        bad |= (vals <= lo) if lo_open else (vals < lo)
    if hi is not None:
        bad |= (vals >= hi) if hi_open else (vals > hi)
    if bad.any():
        i = int(np.argmax(bad))
        v = vals[i]
        shown = _shown(col, i, raw, name)
        if math.isnan(v):
            what = "missing value (blank or NaN)" if raw is not None and not str(shown).strip() else \
                "not a number (NaN)"
        elif math.isinf(v):
            what = "not a finite number"
        else:
            what = "value out of range"
        raise _bad(where, name, i, what, shown, allowed)
    return vals


def check_rows(n: int, where, max_rows: int) -> None:
    if n == 0:
        raise ConfigError("no data rows (a header only)", file=where, allowed="at least one data row")
    if n > max_rows:
        raise ConfigError("too many data rows", file=where, value=n, allowed=f"at most {max_rows}")


# --- physics: measured times that must not fall as the work grows ------------------------------------------------

# A measured time may sit below an earlier one by measurement noise: a pass (or an engine step) with more tokens,
# rows or context does no less work, so beyond this fraction below the largest time at less work the table is
# refused as impossible. Why 15%: the first harness's vLLM CPU step tables (experiments/results/vllm_cpu/ before
# 2026-12-02, knots fitted to noisy per-step logs; in git history) dipped by up to 10.0% between neighbouring knots;
# a dip larger than that is not noise (today's tables there are fitted monotone and do not dip).
RISE_TOLERANCE = 0.15


def rising(time_s: np.ndarray, axes: Sequence[tuple[str, np.ndarray]], where, field: str = "time_s",
           unit: str = "s") -> np.ndarray:
    """`time_s` (one dimension per entry of `axes`: name, sorted values) checked to rise along every axis within
    RISE_TOLERANCE, returned as its monotone envelope (the running maximum along each axis in turn), so what is
    interpolated never gets cheaper as the work grows and extrapolation past the last knot never falls."""
    t = np.asarray(time_s, dtype=np.float64)
    for k, (name, values) in enumerate(axes):
        peak = np.maximum.accumulate(t, axis=k)
        short = (peak - t) / peak  # fraction below the largest earlier time along this axis
        if short.size and float(short.max()) > RISE_TOLERANCE:
            at = np.unravel_index(int(np.argmax(short)), t.shape)
            before = np.moveaxis(t, k, 0)[(slice(None),) + tuple(at[:k] + at[k + 1:])][:at[k] + 1]
            j = int(np.argmax(before))
            where_at = ", ".join(f"{n} {v[i]:g}" for (n, v), i in zip(axes, at))
            raise ConfigError(f"time falls along {name}: {t[at]:.6g} {unit} at {where_at} is "
                              f"{100 * short[at]:.1f}% below {before[j]:.6g} {unit} at {name} {values[j]:g}",
                              file=where, field=field, value=float(t[at]),
                              allowed=f"times that do not fall along {', '.join(n for n, _ in axes)} (within "
                                      f"{RISE_TOLERANCE:.0%} measurement noise): more work never takes less time")
    for k in range(t.ndim):
        t = np.maximum.accumulate(t, axis=k)
    return t
