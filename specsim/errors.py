"""One error type for everything a user gave us wrong.

The CLI turns a `SpecsimError` into a single line on stderr and exit code 2, so every message must
name the file, the field, the value and the allowed range on its own.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

_VALUE_CHARS = 80  # a value longer than this is cut in the message (never dump a whole table)


class SpecsimError(Exception):
    """A problem with user input: profile files, traces, sweep specs, command-line values."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS - 3] + "..."


class ConfigError(SpecsimError):
    def __init__(self, message: str, *, file: str | Path | None = None, field: str | None = None,
                 value: Any = None, allowed: str | None = None):
        parts = []
        if file is not None:
            parts.append(str(file))
        if field is not None:
            parts.append(f"field '{field}'")
        head = ": ".join(parts)
        text = f"{head}: {message}" if head else message
        if value is not None:
            text += f" (got {_short(value)})"
        if allowed is not None:
            text += f"; allowed: {allowed}"
        super().__init__(" ".join(text.split()))  # one line, whatever the parts held
        self.message, self.file, self.field, self.value, self.allowed = message, file, field, value, allowed


class DoesNotFitError(SpecsimError):
    """A model (weights + KV) that exceeds the device memory; the message carries the figures."""


def is_number(value: Any) -> bool:
    """A real number as a user means it: int or float, never a bool (True is not 1 layer)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0 and value.dtype.kind in "iuf"  # numpy scalar


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def check_range(name: str, value: float, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False, file: str | None = None,
                finite: bool = True) -> float:
    """Validate a scalar the user passed; raise ConfigError naming the allowed interval.

    NaN (and a bool or a string) is reported as "not a number" — NaN fails every comparison, so a range message
    would mislead; ±inf is refused unless `finite=False` and the interval is unbounded on that side."""
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    allowed = f"{left}{'-inf' if lo is None else _num(lo)}, {'inf' if hi is None else _num(hi)}{right}"
    if not is_number(value) or value != value:
        raise ConfigError("not a number", file=file, field=name, value=value, allowed=allowed)
    if finite and math.isinf(value):
        raise ConfigError("not a finite number", file=file, field=name, value=value, allowed=allowed)
    ok = True
    if lo is not None and (value < lo or (lo_open and value == lo)):
        ok = False
    if hi is not None and (value > hi or (hi_open and value == hi)):
        ok = False
    if not ok:
        raise ConfigError("value out of range", file=file, field=name, value=value, allowed=allowed)
    return value


# --- pydantic's reports as one line ---------------------------------------------------------------------

class FieldError(ValueError):
    """Raised inside a pydantic validator for a rule about one field: carries the field, value and rule, so
    the translation names them instead of the whole model (pydantic keeps the instance in ctx['error'])."""

    def __init__(self, message: str, *, field: str, value: Any = None, allowed: str | None = None):
        super().__init__(message)
        self.message, self.field, self.value, self.allowed = message, field, value, allowed


_TYPE_WORDS = {
    "int_type": ("not an integer", "an integer (not a string, a bool or a fraction)"),
    "int_from_float": ("not an integer", "an integer"),
    "float_type": ("not a number", "a number (not a string or a bool)"),
    "bool_type": ("not a boolean", "true or false"),
    "string_type": ("not a string", "a quoted string"),
    "dict_type": ("not a table", "a TOML table"),
    "model_type": ("not a table", "a TOML table of fields"),
    "list_type": ("not a list", "a list"),
}


def _bounds(ctx: dict) -> str | None:
    lo = f"> {ctx['gt']}" if "gt" in ctx else (f">= {ctx['ge']}" if "ge" in ctx else "")
    hi = f"< {ctx['lt']}" if "lt" in ctx else (f"<= {ctx['le']}" if "le" in ctx else "")
    return " and ".join(x for x in (lo, hi) if x) or None


def field_ranges(cls) -> dict[str, str]:
    """Each numeric field's allowed range of a pydantic model, as text (quoted when a value has the wrong type)."""
    out = {}
    for name, f in cls.model_fields.items():
        ctx = {}
        for m in f.metadata:
            for k in ("gt", "ge", "lt", "le"):
                if getattr(m, k, None) is not None:
                    ctx[k] = getattr(m, k)
        if ctx:
            out[name] = _bounds(ctx)
    return out


def translate_validation_error(err, file: str | Path | None, *, schema: str = "the schema",
                               bounds: dict | None = None) -> ConfigError:
    """Turn pydantic's first error into one line naming file, field (dotted path), value and allowed range.

    `bounds` maps a field name to its allowed range, quoted on a type error so a wrong type says what to give."""
    e = err.errors()[0]
    loc = [str(p) for p in e["loc"] if p != "[key]"]
    field = ".".join(loc) or None
    kind, ctx = e["type"], e.get("ctx") or {}
    value = e.get("input")
    if isinstance(ctx.get("error"), FieldError):
        fe = ctx["error"]
        return ConfigError(fe.message, file=file, field=fe.field, value=fe.value, allowed=fe.allowed)
    if kind == "extra_forbidden":
        return ConfigError("unknown field", file=file, field=field, allowed=f"the fields of {schema}")
    if kind == "missing":
        return ConfigError("required field is missing", file=file, field=field)
    allowed = _bounds(ctx)
    if kind == "finite_number" or (isinstance(value, float) and not math.isfinite(value)):
        msg = "not a number" if value != value else "not a finite number"
        return ConfigError(msg, file=file, field=field, value=value,
                           allowed=allowed or (bounds or {}).get(loc[0] if loc else "", "a finite number"))
    if kind in _TYPE_WORDS:
        msg, want = _TYPE_WORDS[kind]
        rng = (bounds or {}).get(loc[0] if loc else "")
        return ConfigError(msg, file=file, field=field, value=value if loc else None,
                           allowed=f"{want}, {rng}" if rng else want)
    if kind == "too_short":
        return ConfigError("too few entries", file=file, field=field, value=value,
                           allowed=f"at least {ctx.get('min_length')} entry")
    if kind == "literal_error":
        what = "unknown key" if e["loc"] and e["loc"][-1] == "[key]" else "not one of the allowed values"
        return ConfigError(what, file=file, field=field, value=value, allowed=str(ctx.get("expected")))
    if allowed is None and "expected" in ctx:
        allowed = str(ctx["expected"])
    msg = str(e["msg"]).removeprefix("Value error, ")
    return ConfigError(msg, file=file, field=field, value=value if loc else None, allowed=allowed)
