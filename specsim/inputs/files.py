"""Checks on the paths a user gives us, done before any work, each failure one ConfigError line.

Why a module of its own: every command that reads a table or writes a result needs the same few answers (does it
exist, is it a directory, can it be written), and a command that records for minutes must ask them before it
starts, not when it writes (issue 13: `record` used to check `--out` only after 45 s of recording).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

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
