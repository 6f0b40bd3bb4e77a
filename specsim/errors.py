"""One error type for everything a user gave us wrong.

The CLI turns a `SpecsimError` into a single line on stderr and exit code 2, so every message must
name the file, the field, the value and the allowed range on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class SpecsimError(Exception):
    """A problem with user input: profile files, traces, sweep specs, command-line values."""


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
            text += f" (got {value!r})"
        if allowed is not None:
            text += f"; allowed: {allowed}"
        super().__init__(text)
        self.file, self.field, self.value, self.allowed = file, field, value, allowed


class DoesNotFitError(SpecsimError):
    """A model (weights + KV) that exceeds the device memory; the message carries the figures."""


def check_range(name: str, value: float, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False, file: str | None = None) -> float:
    """Validate a scalar the user passed; raise ConfigError naming the allowed interval."""
    ok = True
    if value != value:  # NaN
        ok = False
    if lo is not None and (value < lo or (lo_open and value == lo)):
        ok = False
    if hi is not None and (value > hi or (hi_open and value == hi)):
        ok = False
    if not ok:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        lo_s = "-inf" if lo is None else f"{lo:g}"
        hi_s = "inf" if hi is None else f"{hi:g}"
        raise ConfigError("value out of range", file=file, field=name, value=value,
                          allowed=f"{left}{lo_s}, {hi_s}{right}")
    return value
