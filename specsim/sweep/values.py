"""Strict types for sweep spec values: numbers are numbers, flags are flags, strings are sane.

SimConfig itself is lenient (pydantic's lax mode reads `true` as 1 and `"3350"` as 3350), so every value a spec
gives is checked here first, against the field's annotation and bounds: a bool is never an integer, a string is
never a number, nan and inf are refused, a float is never an integer. The error names the spec file, the field
(`grid.gamma`), the value and the allowed range.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from specsim.config import FLAT_FIELDS
from specsim.errors import ConfigError

MAX_STRING = 4096  # longer than any path or profile name


@dataclass(frozen=True)
class Rule:
    kind: str  # bool | int | float | str | choice | any (not checked here: left to SimConfig)
    choices: tuple = ()  # choice: the values; seq: the shape; int: the only values allowed (vLLM's block sizes)
    lo: float | None = None
    lo_open: bool = False
    hi: float | None = None
    hi_open: bool = False

    def allowed(self) -> str | None:
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return ", ".join(map(str, self.choices))
        if self.kind == "str":
            return f"a string of at most {MAX_STRING} characters, no NUL"
        if self.kind == "seq":
            return _describe(self.choices[0])
        if self.kind not in ("int", "float"):
            return None
        if self.choices:  # an integer from a fixed set (vLLM's block sizes)
            return "one of " + ", ".join(map(str, self.choices))
        noun = "an integer" if self.kind == "int" else "a number"
        if self.lo is None and self.hi is None:
            return noun
        lo = "-inf" if self.lo is None else _num(self.lo)
        hi = "inf" if self.hi is None else _num(self.hi)
        return f"{noun} in {'(' if self.lo_open or self.lo is None else '['}{lo}, " \
               f"{hi}{')' if self.hi_open or self.hi is None else ']'}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


@lru_cache(maxsize=None)
def rule(field: str) -> Rule:
    """The check for one SimConfig field, read from its annotation and Field(ge=..., lt=...) bounds."""
    info = FLAT_FIELDS[field]
    ann = info.annotation
    union = typing.get_origin(ann) in (typing.Union, types.UnionType)
    args = [a for a in (typing.get_args(ann) if union else (ann,)) if a is not type(None)]
    if len(args) != 1:
        return Rule("any")
    a = args[0]
    if typing.get_origin(a) is tuple:
        return Rule("seq", choices=(_shape(a),))
    if typing.get_origin(a) is typing.Literal:
        return Rule("choice", choices=typing.get_args(a))
    if a not in (bool, int, float, str):
        return Rule("any")
    lo = hi = None
    lo_open = hi_open = False
    for m in info.metadata:
        for attr, is_lo, is_open in (("ge", True, False), ("gt", True, True), ("le", False, False),
                                     ("lt", False, True)):
            v = getattr(m, attr, None)
            if v is not None:
                if is_lo:
                    lo, lo_open = v, is_open
                else:
                    hi, hi_open = v, is_open
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return Rule(a.__name__, choices=tuple(extra.get("one_of", ())), lo=lo, lo_open=lo_open, hi=hi, hi_open=hi_open)


def _shape(ann) -> Any:
    """A tuple annotation as nested element types: tuple[float, ...] -> (float, ...); tuple[tuple[int, int,
    int], ...] -> ((int, int, int), ...)."""
    if typing.get_origin(ann) is not tuple:
        return ann
    args = typing.get_args(ann)
    if len(args) == 2 and args[1] is Ellipsis:
        return (_shape(args[0]), ...)
    return tuple(_shape(x) for x in args)


def _describe(shape) -> str:
    """A list shape in words: (float, ...) -> 'a non-empty list of numbers'; ((int, int, int), ...) -> 'a non-empty
    list of lists of 3 integers'."""
    return "a non-empty list of " + _plural(shape[0]) if len(shape) == 2 and shape[1] is Ellipsis else \
        f"a list of {len(shape)} {_plural(shape[0])}"


def _plural(shape) -> str:
    if not isinstance(shape, tuple):
        return "integers" if shape is int else "numbers"
    if len(shape) == 2 and shape[1] is Ellipsis:
        return "non-empty lists of " + _plural(shape[0])
    return f"lists of {len(shape)} {_plural(shape[0])}"


def _seq_problem(shape, v: Any) -> str | None:
    """Strictly a nested list of the shape's numbers (no bools, strings, nan or inf)."""
    if not isinstance(shape, tuple):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (shape is int and type(v) is not int):
            return f"must hold {'integers' if shape is int else 'numbers'}"
        return "must be finite" if isinstance(v, float) and not math.isfinite(v) else None
    if not isinstance(v, list) or not v:
        return "must be a non-empty list"
    elems = [shape[0]] * len(v) if len(shape) == 2 and shape[1] is Ellipsis else list(shape)
    if len(elems) != len(v):
        return f"must be a list of {len(elems)}"
    return next((p for e, x in zip(elems, v) if (p := _seq_problem(e, x))), None)


def is_sequence(field: str) -> bool:
    """A field whose value is a list (tree_topk_acceptance, num_speculative_tokens_per_batch_size)."""
    return rule(field).kind == "seq"


def check_value(field: str, value: Any, *, file, where: str) -> None:
    """Raise a ConfigError unless `value` is exactly of the field's type and inside its bounds."""
    r = rule(field)
    problem = _problem(r, value)
    if problem is not None:
        raise ConfigError(problem, file=file, field=where, value=shown(value), allowed=r.allowed())


def check_string(value: Any, *, file, where: str) -> None:
    """Names and labels: a string, not absurdly long, no NUL (which no path may hold)."""
    problem = _string_problem(value)
    if problem is not None:
        raise ConfigError(problem, file=file, field=where, value=shown(value), allowed=Rule("str").allowed())


def shown(value: Any) -> Any:
    """The value as an error message shows it: long strings cut (the line must stay one readable line)."""
    if isinstance(value, str) and len(value) > 120:
        return value[:100] + f"... ({len(value)} characters)"
    return value


def _problem(r: Rule, v: Any) -> str | None:
    if r.kind == "any":
        return None
    if r.kind == "seq":
        return _seq_problem(r.choices[0], v)
    if r.kind == "bool":
        return None if type(v) is bool else "must be true or false"
    if r.kind in ("str", "choice"):
        problem = _string_problem(v)
        if problem is None and r.kind == "choice" and v not in r.choices:
            return "unknown value"
        return problem
    if isinstance(v, bool):
        return f"must be {'an integer' if r.kind == 'int' else 'a number'}, not true/false"
    if isinstance(v, str):
        return "must be a number, not a string"
    if r.kind == "int" and type(v) is not int:
        return "must be an integer"
    if not isinstance(v, (int, float)):
        return "must be a number"
    if isinstance(v, float) and math.isnan(v):
        return "not a number (nan)"
    if isinstance(v, float) and math.isinf(v):
        return "must be finite"
    too_low = r.lo is not None and (v < r.lo or (r.lo_open and v == r.lo))
    too_high = r.hi is not None and (v > r.hi or (r.hi_open and v == r.hi))
    if too_low or too_high:
        return "out of range"
    return "not one of the allowed values" if r.choices and v not in r.choices else None


def _string_problem(v: Any) -> str | None:
    if not isinstance(v, str):
        return "must be a string"
    if "\x00" in v:
        return "contains a NUL character"
    if len(v) > MAX_STRING:
        return f"longer than {MAX_STRING} characters"
    return None
