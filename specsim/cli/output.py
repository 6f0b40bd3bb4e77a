"""Shared output helpers: one JSON object on stdout with --json, a rich table otherwise."""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _clean(x.item())
    return x


def emit_json(obj: dict) -> None:
    print(json.dumps(_clean(obj), sort_keys=True))


def table(title: str, columns: list[str], rows: Iterable[Iterable[Any]], caption: str | None = None) -> None:
    """A rich table of plain text: a cell, title or caption such as "[fixed]" or a user's file name is shown as
    written, never read as rich markup."""
    t = Table(title=Text(title), caption=None if caption is None else Text(caption))
    for c in columns:
        t.add_column(Text(c), justify="right" if c not in ("name", "model", "hardware", "draft", "kind") else "left")
    for r in rows:
        t.add_row(*[Text(fmt(v)) for v in r])
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # piped or captured: do not wrap tables at 80 columns
    console.print(t)


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e4 or abs(v) < 1e-3:
            return f"{v:.3g}"
        return f"{v:.4g}"
    return "" if v is None else str(v)
