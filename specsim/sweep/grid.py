"""A sweep's points, built lazily from the axes, and their ids (config + the content of every file they read).

A grid of millions of points is never held in memory: `Grid.point(i)` builds point i from its mixed-radix index
(last axis fastest), so a sweep starts at once and streams. A point id hashes the point's canonical JSON together
with the content of each profile and data file the point reads (hardware, stack, target, draft, trace, measured
tables, arrivals CSV), so a resume after a profile edit sees other ids for the points that read it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from specsim.config import FLAT_FIELDS, SimConfig
from specsim.setup.deployment import file_digest, load_profile, profile_digest, resolve_stack

# SimConfig fields naming data files a point reads (besides the profiles); content-hashed into the point ids
DATA_FIELDS = tuple(f for f in ("trace", "arrivals_csv", "measured_target", "measured_draft", "step_table_target",
                                "step_table_draft") if f in FLAT_FIELDS)
# The fields always in a point's JSON (and id), frozen as of issue 25. Every other field — those added later, and
# any field added from now on, with nothing to list — enters only when set away from its default, so adding a
# field does not change the ids of points that do not use it.
_ALWAYS_IN_ID = frozenset({
    "hardware", "target", "draft", "stack", "tp", "alpha", "trace", "gamma", "policy",
    "num_speculative_tokens_per_batch_size", "lenience", "fixed_c", "measured_target", "measured_draft", "batch",
    "rate", "max_batch", "arrivals_csv", "requests", "prompt_len", "output_len", "seed", "length_dist", "replicas",
    "router", "slo_ttft_s", "slo_tpot_s", "engine", "draft_kv_budget_tokens"})
_LATER_FIELDS = {f: info.default for f, info in FLAT_FIELDS.items() if f not in _ALWAYS_IN_ID}


def canonical_json(cfg: SimConfig) -> str:
    d = cfg.flat(mode="json")
    for k, default in _LATER_FIELDS.items():
        if d.get(k) == default:
            del d[k]
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


# --- what a point reads, and the content hash of each ---------------------------------------------------

def sources(cfg: SimConfig) -> list[tuple[str, str]]:
    """(kind, name) of every profile and file a point reads; kind is hardware / stack / model / file."""
    d = cfg.deployment
    head = cfg.speculation.method != "draft_model"  # the draft is then a head profile (specsim.methods.heads)
    out = [("hardware", d.hardware), ("model", d.target), ("head" if head else "model", d.draft)]
    out.append(("stack", d.stack) if d.stack is not None else ("default-stack", d.hardware))
    for f, v in cfg.flat().items():
        if f in DATA_FIELDS and v is not None:
            out.append(("file", v))
        elif f not in DATA_FIELDS and isinstance(v, str) and f not in ("hardware", "target", "draft", "stack") \
                and os.sep in v and _is_file(v):  # a path-valued field added later (an engine profile, ...)
            out.append(("file", v))
    return out


def source_label(key: tuple[str, str]) -> str:
    kind, name = key
    return f"{'stack of hardware' if kind == 'default-stack' else kind} {name!r}"


def digest(key: tuple[str, str]) -> str:
    """Content hash of one source: a profile as loaded (what the simulation uses), a data file's bytes — the
    hashing of `specsim.setup.deployment` (`profile_digest`, `file_digest`), whose stack rule picks the default."""
    kind, name = key
    if kind == "file":
        return file_digest(name)
    if kind == "stack" and name == "ideal":
        return "ideal"
    if kind == "default-stack":
        obj = resolve_stack(load_profile("hardware", name), None)
    else:
        obj = load_profile({"model": "target"}.get(kind, kind), name)
    return profile_digest(obj)


def _is_file(p: str) -> bool:
    try:
        return os.path.isfile(p)
    except (OSError, ValueError):
        return False


def point_id(cfg: SimConfig, digests: dict | None = None) -> str:
    """Stable id of one point: its canonical JSON plus the content hash of every source it reads."""
    h = hashlib.sha256(canonical_json(cfg).encode())
    for key in sources(cfg):
        h.update(b"|" + (digests[key] if digests is not None else digest(key)).encode())
    return h.hexdigest()[:16]


# --- the lazy grid ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Grid:
    """fixed fields + ordered axes (draft entries expanded through `drafts`); point i by mixed-radix index."""

    fixed: dict
    axes: tuple[tuple[str, tuple], ...]
    drafts: dict | None = None  # "name:ACC" -> {"draft": name, "alpha" | "trace": ...}
    digests: dict = field(default_factory=dict)  # (kind, name) -> content hash, for every source of the grid

    def __len__(self) -> int:
        n = 1
        for _, values in self.axes:
            n *= len(values)
        return n

    def values(self, i: int) -> dict:
        """The raw field values of point i (before SimConfig validation)."""
        d = dict(self.fixed)
        picks = []
        for name, vals in reversed(self.axes):
            i, k = divmod(i, len(vals))
            picks.append((name, vals[k]))
        d.update(reversed(picks))
        if self.drafts is not None:
            d.update(self.drafts[d["draft"]])
        return d

    def point(self, i: int) -> SimConfig:
        return SimConfig.model_validate(self.values(i))

    def point_id(self, i: int) -> str:
        return point_id(self.point(i), self.digests)


class LazySeq(Sequence):
    """A read-only sequence whose items are computed on access (points or ids of a Grid)."""

    def __init__(self, n: int, item):
        self._n, self._item = n, item

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._item(k) for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._item(i)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]


def points_of(grid: Grid) -> LazySeq:
    return LazySeq(len(grid), partial(Grid.point, grid))


def ids_of(grid: Grid) -> LazySeq:
    return LazySeq(len(grid), partial(Grid.point_id, grid))
