"""Checks on the paths a user gives us, done before any work, each failure one ConfigError line.

Why a module of its own: every command that reads a table or writes a result needs the same few answers (does it
exist, is it a directory, can it be written), and a command that records for minutes must ask them before it
starts, not when it writes (issue 13: `record` used to check `--out` only after 45 s of recording).

JSON and TOML from a user (a flag's value, a spec, a bench result, a profile) are parsed here too, by `loads_json` /
`read_json` / `loads_toml` / `read_toml`, with a bounded nesting depth: Python's parsers recurse, so 20,000 nested
`[` used to end in a RecursionError traceback (issue 21). The depth is counted before parsing, outside strings and
comments, and anything deeper than `MAX_NESTING` is one line; no input specsim reads nests deeper than 5.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsim.errors import ConfigError


def input_file(path: str | Path, what: str = "file", field: str | None = None, allow_empty: bool = False,
               missing: str | None = None) -> Path:
    """`path` as a readable, non-empty regular file; otherwise a one-line error saying what is wrong
    (`missing`: the words for a path that does not exist, default "no such <what>")."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} is a directory, not a file", file=p, field=field)
    if not p.exists():
        raise ConfigError(missing or f"no such {what}", file=p, field=field)
    if not p.is_file():
        raise ConfigError(f"{what} is not a regular file", file=p, field=field)
    if not os.access(p, os.R_OK):
        raise ConfigError(f"cannot read {what}: permission denied", file=p, field=field)
    if not allow_empty and p.stat().st_size == 0:
        raise ConfigError(f"{what} is an empty file", file=p, field=field)
    return p


def _nearest_existing(p: Path) -> Path:
    q = p.absolute().parent
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def _probe_writable(d: Path) -> str | None:
    """None when a file can be created in directory `d` (tried for real: root ignores permission bits, a
    read-only mount does not), else the reason."""
    try:
        with tempfile.NamedTemporaryFile(dir=d, prefix=".specsim-probe-"):
            pass
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def output_file(path: str | Path, what: str = "output file", field: str | None = None,
                suffixes: Sequence[str] | None = None, make_parents: bool = False) -> Path:
    """Check, before any work, that `path` can be written as a file: the right suffix, not a directory, no file
    where a parent directory should be, the parent existing (or creatable with `make_parents`) and writable.
    An existing file is overwritten later, as before; nothing is created here except a probe file, removed."""
    p = Path(path)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise ConfigError(f"unknown suffix for the {what}", file=p, field=field, value=p.suffix or "(none)",
                          allowed=", ".join(suffixes))
    if p.is_dir():
        raise ConfigError(f"is a directory; the {what} must be a file path", file=p, field=field)
    parent = p.absolute().parent
    if not parent.is_dir():
        anc = _nearest_existing(p)
        if not anc.is_dir():
            raise ConfigError(f"cannot write the {what}: {anc} is a file, not a directory", file=p, field=field)
        if not make_parents:
            raise ConfigError(f"cannot write the {what}: directory {parent} does not exist", file=p, field=field,
                              allowed="a path in an existing directory")
        parent = anc
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"cannot write the {what}: permission denied", file=p, field=field)
    reason = _probe_writable(parent)
    if reason is not None:
        raise ConfigError(f"cannot write the {what} in {parent}: {reason}", file=p, field=field)
    return p


def output_dir(path: str | Path, what: str = "output folder", field: str | None = None) -> Path:
    """Check, before any work, that folder `path` exists or can be created, and that files can be written in it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"the {what} is a file, not a folder", file=p, field=field)
    target = p if p.is_dir() else _nearest_existing(p / "x")
    if not target.is_dir():
        raise ConfigError(f"cannot create the {what}: {target} is a file, not a folder", file=p, field=field)
    reason = _probe_writable(target)
    if reason is not None:
        raise ConfigError(f"cannot write in the {what} ({target}): {reason}", file=p, field=field)
    return p


# --- JSON and TOML with a bounded depth ---------------------------------------------------------------------------

MAX_NESTING = 64  # lists/objects inside each other; far beyond any real input, far below Python's recursion limit
# A string is skipped whole; one left open runs to the end of the text (TOML: of its line), so every token matches
# where it starts and the scan stays linear whatever the input (a failed string match re-scanned: quadratic).
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\[\s\S]?[^"\\]*)*(?:"|\Z)|[\[\]{}]')
_TOML_TOKENS = re.compile(r'#[^\n]*|"""(?:[^\\]|\\[\s\S]?)*?(?:"""|\Z)|' r"'''[\s\S]*?(?:'''|\Z)|"
                          r'"[^"\\\n]*(?:\\[\s\S]?[^"\\\n]*)*(?:"|$)|' r"'[^'\n]*(?:'|$)|[\[\]{}]", re.M)


def nesting_depth(text: str, toml: bool = False) -> int:
    """The deepest nesting of [ and { in `text`, strings (and TOML comments) skipped; an unbalanced closer counts
    as nothing (the parser refuses it)."""
    depth = deepest = 0
    for m in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        c = m.group()
        if c == "[" or c == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif c == "]" or c == "}":
            depth = max(depth - 1, 0)
    return deepest


def check_nesting(text: str, *, file=None, field: str | None = None, toml: bool = False) -> None:
    """One line if `text` nests deeper than MAX_NESTING (before any recursive parser sees it)."""
    if nesting_depth(text, toml) > MAX_NESTING:
        what = "malformed TOML" if toml else "not valid JSON"
        raise ConfigError(f"{what}: nested too deeply", file=file, field=field,
                          value=text[:40] if file is None else None,
                          allowed=f"at most {MAX_NESTING} levels of [ and {{")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def loads_json(text: str, *, file=None, field: str | None = None, allowed: str | None = None) -> Any:
    """JSON text a user gave (a flag's value when `file` is None, else a file's contents) as Python values; a
    malformed, duplicate-keyed or too deeply nested text is one ConfigError naming the file or flag."""
    check_nesting(text, file=file, field=field)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise ConfigError("a key is given twice", file=file, field=field, value=e.key,
                          allowed="each key once") from None
    except json.JSONDecodeError as e:
        where = f" at line {e.lineno} column {e.colno}" if file is not None else f" at character {e.pos}"
        raise ConfigError(f"not valid JSON ({e.msg}{where})", file=file, field=field,
                          value=text if file is None else None, allowed=allowed) from None
    except RecursionError:  # not reached below MAX_NESTING; kept so no parser's limit can ever surface
        raise ConfigError("not valid JSON: nested too deeply", file=file, field=field,
                          allowed=f"at most {MAX_NESTING} levels") from None


def read_text(path: str | Path, what: str = "file", field: str | None = None) -> str:
    """A user's text file: checked (`input_file`) and decoded as UTF-8, else one line."""
    p = input_file(path, what, field)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the {what} ({e.strerror or type(e).__name__})", file=p, field=field) \
            from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})", file=p,
                          field=field) from None


def read_json(path: str | Path, what: str = "JSON file", field: str | None = None) -> Any:
    """A user's JSON file, parsed by `loads_json`."""
    return loads_json(read_text(path, what, field), file=Path(path), field=field)


def loads_toml(text: str, *, file=None) -> dict:
    """TOML text as a dict; malformed or too deeply nested text is one ConfigError naming the file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    check_nesting(text, file=file, toml=True)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"malformed TOML: {e}", file=file) from None
    except RecursionError:
        raise ConfigError("malformed TOML: nested too deeply", file=file,
                          allowed=f"at most {MAX_NESTING} levels") from None


def read_toml(path: str | Path, what: str = "TOML file") -> dict:
    """A user's TOML file, parsed by `loads_toml`."""
    return loads_toml(read_text(path, what), file=Path(path))
