"""β traces: the per-position acceptance probability along sequences the target generated.

Format — one row per generated position:
  `sequence_id` (int), `position` (int, 0-based, contiguous within each sequence), `beta` (float in [0, 1]),
  β = Σ_x min(p(x), q(x)) for the target's and draft's adjusted next-token distributions at that position.
  Extra columns (e.g. what the executor records beside β) are kept as they are. Rows are held sorted by
  (sequence_id, position).
  Optional `rank` (int ≥ 0, or RANK_NONE = −1): at temperature 0, the rank of the target's token among the draft's
  candidates at that position (0 = the draft's top-1; ties broken by token id, as argmax breaks them; −1 = not
  among the candidates recorded). A token tree (`specsim.methods.tree`) is judged on it, so one trace serves
  chains (β) and trees of every width (ranks). At temperature 0 both distributions are one-hot, so β = Σ min(p, q)
  is 1 exactly when the draft's argmax is the target's token, i.e. rank 0: a trace whose metadata says
  temperature 0 is refused where the two disagree (a trace without that key is not checked: above temperature 0
  β and the rank are independent figures).

Metadata — a JSON object that travels inside the file:
  parquet: the schema's key-value metadata, key b"specsim", value the JSON text;
  CSV: leading comment lines `# key: <JSON value>`, one per top-level key, sorted. A value that is not valid JSON
  is read as a plain string, so people may write `# task: EnDe` by hand; comment lines without a colon are ignored.
  Conventional keys (none required): target, draft, temperature, top_k, top_p, lenience, task,
  source ("synthetic" | "executor" | "published"), how_recorded, generator ({kind, parameters...}), seed,
  slot_decay. Keys are restricted to [A-Za-z0-9_.-] so the CSV comment form stays unambiguous.

Per-slot decay along the draft — metadata["slot_decay"] = r ∈ [0, 1] means: the draft token in slot k (0-based
  within one draft) that lands on output position t is accepted with probability β_t · r^k. It cannot be a
  per-position column because the same position is drafted at different slots depending on where the step
  started. `trace.slot_factor(k)` returns r**k (1.0 when the key is absent); the engine multiplies β_t by it.
  `trace.alpha` stays the mean of β_t, i.e. the slot-0 acceptance.

Floats round-trip bit-exactly: CSV is written with repr (shortest round-trip form) and parsed exactly by pandas;
parquet stores float64. Every input problem is a one-line ConfigError naming the file and the column or field.
Types are strict (`specsim.inputs.tables`): sequence_id and position integers (not 1.0, true or "3" in parquet),
beta a number (not true/false, blank, NaN or inf), rank an integer >= −1; a CSV cell is read as its literal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim.errors import ConfigError
from specsim.inputs.files import check_nesting, input_file, loads_json, output_file
from specsim.inputs.tables import CsvTable, first_line, float_column, int_column, require_columns

COLUMNS = ("sequence_id", "position", "beta")
RANK = "rank"  # the optional column (see the module doc)
RANK_NONE = -1  # rank sentinel: the target's token is not among the draft candidates recorded
PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv",)
METADATA_KEY = b"specsim"
_KEY_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_IN_MEMORY = "<in-memory trace>"


@dataclass(eq=False)
class Trace:
    """A validated β trace: `frame` (sequence_id, position, beta, extra columns) plus `metadata`.

    Treat it as immutable: per-sequence views are computed once at construction.
    """

    frame: pd.DataFrame
    metadata: dict = field(default_factory=dict)
    path: str | None = None  # where it was read from; used in error messages

    def __post_init__(self) -> None:
        where = self.path or _IN_MEMORY
        self.frame = _validated(self.frame, where)
        self.metadata = _checked_metadata(self.metadata, where)
        sid = self.frame["sequence_id"].to_numpy()
        starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
        self._bounds = np.r_[starts, len(sid)]
        self._beta = self.frame["beta"].to_numpy(dtype=np.float64, copy=True)
        self._beta.flags.writeable = False
        self._rank = None
        if RANK in self.frame.columns:
            self._rank = self.frame[RANK].to_numpy(dtype=np.int64, copy=True)
            self._rank.flags.writeable = False
            _check_greedy(self, where)

    # ---- construction -------------------------------------------------------------------------------------
    @classmethod
    def from_sequences(cls, betas: Sequence[Sequence[float]], metadata: dict | None = None,
                       sequence_ids: Sequence[int] | None = None, ranks: Sequence[Sequence[int]] | None = None
                       ) -> Trace:
        """Build a trace from one β array per sequence (ids 0, 1, … unless given), and one rank array each."""
        arrays = [np.asarray(b, dtype=np.float64).ravel() for b in betas]
        ids = list(range(len(arrays))) if sequence_ids is None else [int(i) for i in sequence_ids]
        if len(ids) != len(arrays):
            raise ConfigError("sequence_ids and betas differ in length", file=_IN_MEMORY, field="sequence_id",
                              value=len(ids), allowed=f"{len(arrays)} ids")
        lengths = [len(a) for a in arrays]
        frame = pd.DataFrame({
            "sequence_id": np.repeat(np.asarray(ids, dtype=np.int64), lengths),
            "position": np.concatenate([np.arange(n, dtype=np.int64) for n in lengths]) if arrays
            else np.zeros(0, np.int64),
            "beta": np.concatenate(arrays) if arrays else np.zeros(0),
        })
        if ranks is not None:
            r = [np.asarray(x).ravel() for x in ranks]
            if [len(x) for x in r] != lengths:
                raise ConfigError("ranks and betas differ in shape", file=_IN_MEMORY, field=RANK,
                                  allowed="one rank per β, sequence by sequence")
            frame[RANK] = np.concatenate(r) if r else np.zeros(0, np.int64)
        return cls(frame, dict(metadata or {}))

    @classmethod
    def read(cls, path: str | Path) -> Trace:
        """Read a .parquet/.pq or .csv trace; any problem is a ConfigError naming the file."""
        p = Path(path)
        fmt = _format(p)
        input_file(p, "trace file")  # a directory, a missing, unreadable or zero-byte file
        frame, metadata = _read_parquet(p) if fmt == "parquet" else _read_csv(p)
        return cls(frame, metadata, path=str(p))

    def write(self, path: str | Path) -> Path:
        """Write by suffix (.parquet/.pq or .csv), metadata included; returns the path."""
        p = Path(path)
        fmt = check_trace_out(p)
        try:
            if fmt == "parquet":
                _write_parquet(self, p)
            else:
                _write_csv(self, p)
        except OSError as e:
            raise ConfigError(f"cannot write trace: {e.strerror or e}", file=p) from None
        return p

    # ---- accessors the engine uses ------------------------------------------------------------------------
    @property
    def beta(self) -> np.ndarray:
        """All β values (read-only), sequences in sequence_id order, positions in order."""
        return self._beta

    @property
    def rank(self) -> np.ndarray | None:
        """All ranks (read-only, in the order of `beta`; RANK_NONE = not among the candidates), or None."""
        return self._rank

    def rank_probabilities(self, n: int) -> np.ndarray:
        """P(rank = r) over every position, r = 0 … n − 1 (the rest of the mass: higher ranks or RANK_NONE)."""
        r = self._rank
        return np.bincount(r[(r >= 0) & (r < n)], minlength=n)[:n] / float(len(r))

    @property
    def alpha(self) -> float:
        """α = mean β over every position of every sequence."""
        return float(self._beta.mean())

    @property
    def n_tokens(self) -> int:
        return len(self._beta)

    @property
    def n_sequences(self) -> int:
        return int(len(self._bounds) - 1)

    @property
    def sequence_ids(self) -> list[int]:
        return [int(x) for x in self.frame["sequence_id"].to_numpy()[self._bounds[:-1]]]

    def sequences(self) -> list[np.ndarray]:
        """β per position for each sequence (read-only views), ordered by sequence_id."""
        b = self._bounds
        return [self._beta[b[i]:b[i + 1]] for i in range(len(b) - 1)]

    def slot_factor(self, k: int) -> float:
        """Multiplier on β_t for draft slot k (0-based): slot_decay**k, or 1.0 without decay."""
        r = self.metadata.get("slot_decay")
        return 1.0 if r is None else float(r) ** int(k)


def check_trace_out(path: str | Path, field: str | None = None) -> str:
    """Before any work: `path` has a trace suffix and can be written (see `specsim.inputs.files.output_file`);
    returns the format."""
    p = Path(path)
    fmt = _format(p)
    output_file(p, "trace file", field=field)
    return fmt


# ---- validation -----------------------------------------------------------------------------------------------
def _format(p: Path) -> str:
    suffix = p.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in CSV_SUFFIXES:
        return "csv"
    raise ConfigError("unknown trace file suffix", file=p, field="suffix", value=suffix or "(none)",
                      allowed=", ".join(PARQUET_SUFFIXES + CSV_SUFFIXES))


def _typed(frame: pd.DataFrame, where: str, raw=None) -> pd.DataFrame:
    """sequence_id and position as int64, beta as float64, under `specsim.inputs.tables`' strict rules (`raw`: the
    CSV's cells as written, for messages). NaN and out-of-range β are left to `_validated`, which names the
    sequence and position."""
    frame = frame.copy()
    frame["sequence_id"] = int_column(frame["sequence_id"], "sequence_id", where, raw=raw)
    frame["position"] = int_column(frame["position"], "position", where, raw=raw)
    frame["beta"] = float_column(frame["beta"], "beta", where, lo=0.0, hi=1.0, raw=raw, finite=False)
    if RANK in frame.columns:
        frame[RANK] = int_column(frame[RANK], RANK, where, lo=RANK_NONE, raw=raw)
    return frame


def _check_greedy(trace: Trace, where: str) -> None:
    """At temperature 0 (metadata) β is 1 exactly where the rank is 0 (the module doc); refuse a disagreement."""
    t = trace.metadata.get("temperature")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t != 0:
        return
    off = (trace._beta == 1.0) != (trace._rank == 0)
    if off.any():
        i = int(np.argmax(off))
        sid, pos = (int(trace.frame[c].iat[i]) for c in ("sequence_id", "position"))
        raise ConfigError(f"at temperature 0 rank 0 means beta 1 and back; sequence_id {sid}, position {pos} has "
                          f"beta {float(trace._beta[i]):g} and rank {int(trace._rank[i])}", file=where, field=RANK,
                          allowed="rank 0 exactly where beta is 1")


def _validated(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    if not isinstance(frame, pd.DataFrame):
        raise ConfigError("trace data must be a pandas DataFrame", file=where, value=type(frame).__name__)
    require_columns(frame, COLUMNS, where)
    if len(frame) == 0:
        raise ConfigError("trace has no rows", file=where, allowed="at least one row (sequence_id, position, beta)")
    frame = _typed(frame, where).sort_values(["sequence_id", "position"], kind="mergesort").reset_index(drop=True)
    sid, pos, beta = (frame[c].to_numpy() for c in COLUMNS)

    bad = np.isnan(beta) | (beta < 0.0) | (beta > 1.0)
    if bad.any():
        i = int(np.argmax(bad))
        what = "not a number (NaN, or a blank cell)" if np.isnan(beta[i]) else "out of range"
        raise ConfigError(f"beta is {what} at sequence_id {sid[i]}, position {pos[i]}", file=where, field="beta",
                          value=None if np.isnan(beta[i]) else float(beta[i]), allowed="[0, 1]")

    new = np.r_[True, sid[1:] != sid[:-1]]
    group_start = np.flatnonzero(new)[np.cumsum(new) - 1]
    expected = np.arange(len(sid)) - group_start
    off = pos != expected
    if off.any():
        i = int(np.argmax(off))
        s, e, got = int(sid[i]), int(expected[i]), int(pos[i])
        if got < 0:
            msg = f"sequence_id {s}: negative position {got}"
        elif got < e:
            msg = f"sequence_id {s}: position {got} appears more than once"
        elif e == 0:
            msg = f"sequence_id {s}: positions must start at 0 (first is {got})"
        else:
            msg = f"sequence_id {s}: gap in positions: {e} is missing ({e - 1} is followed by {got})"
        raise ConfigError(msg, file=where, field="position",
                          allowed="0, 1, 2, ... contiguous within each sequence")
    return frame


def _checked_metadata(metadata: Any, where: str) -> dict:
    if not isinstance(metadata, dict):
        raise ConfigError("trace metadata must be a JSON object", file=where, field="metadata",
                          value=type(metadata).__name__)
    for key in metadata:
        if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise ConfigError("bad metadata key", file=where, field="metadata", value=key,
                              allowed="letters, digits, '_', '.', '-'")
    try:
        clean = json.loads(json.dumps(metadata, sort_keys=True))  # tuples -> lists: what a reader gets back
    except (TypeError, ValueError) as e:
        raise ConfigError(f"metadata is not JSON-serializable: {e}", file=where, field="metadata") from None
    r = clean.get("slot_decay")
    if r is not None:
        if isinstance(r, bool) or not isinstance(r, (int, float)):
            raise ConfigError("slot_decay must be a number", file=where, field="slot_decay", value=r,
                              allowed="[0, 1]")
        if r != r:
            raise ConfigError("slot_decay is not a number (NaN)", file=where, field="slot_decay", allowed="[0, 1]")
        if not 0.0 <= r <= 1.0:
            raise ConfigError("slot_decay out of range", file=where, field="slot_decay", value=r, allowed="[0, 1]")
    return clean


# ---- file formats ---------------------------------------------------------------------------------------------
def _read_parquet(p: Path) -> tuple[pd.DataFrame, dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(p)
        frame = table.to_pandas()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ConfigError(f"not a readable parquet file, truncated or corrupt ({first_line(e)})", file=p) from None
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return frame, {}
    try:
        metadata = loads_json(raw.decode("utf-8"), file=p, field="specsim")  # depth-bounded
    except (UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"metadata is not valid JSON ({first_line(e)})", file=p, field="specsim") from None
    return frame, metadata


def _parse_value(text: str, file: Path | None = None, field: str | None = None) -> Any:
    check_nesting(text, file=file, field=field)  # bounded depth, before json recurses
    try:
        return json.loads(text)
    except ValueError:
        return text


def _read_csv(p: Path) -> tuple[pd.DataFrame, dict]:
    metadata: dict = {}
    n_comment = 0
    try:
        with open(p, encoding="utf-8-sig", newline="") as f:
            for line in f:
                if not line.startswith("#"):
                    break
                n_comment += 1
                key, sep, value = line[1:].strip().partition(":")
                if sep and key.strip():
                    metadata[key.strip()] = _parse_value(value.strip(), p, key.strip())
    except UnicodeDecodeError:
        raise ConfigError("not a UTF-8 text CSV file", file=p) from None
    table = CsvTable(p, skiprows=n_comment)
    frame = table.frame
    require_columns(frame, COLUMNS, p)
    if len(frame):
        frame = _typed(frame, str(p), raw=table.raw)
    return frame, metadata


def _write_csv(trace: Trace, p: Path) -> None:
    md = trace.metadata
    with open(p, "w", encoding="utf-8", newline="") as f:
        f.writelines(f"# {key}: {json.dumps(md[key], sort_keys=True, ensure_ascii=False)}\n" for key in sorted(md))
        trace.frame.to_csv(f, index=False, lineterminator="\n")


def _write_parquet(trace: Trace, p: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(trace.frame, preserve_index=False)
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(trace.metadata, sort_keys=True).encode()})
    pq.write_table(table, p)
