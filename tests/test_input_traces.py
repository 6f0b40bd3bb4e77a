"""Input tables through the real CLI: β traces (CSV, parquet), arrivals CSVs, measured pass-time tables.

The contract (issue 13): a run on any file either succeeds with exactly one JSON object on stdout, or exits 2 with
exactly one stderr line naming the file (and the column and allowed range where there is one) — never a traceback,
never a silent wrong number. Each surface gets a property test that writes mutated files and checks the CLI's
verdict against a small reference reader written here (so an accepted bad cell fails the test), and hand-picked
files it must refuse. Cells come from a labelled pool: each text with the integer and the number it denotes
(None where it denotes none), decided here by hand rather than by the code under test.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PAIR = ["--hardware", "a100-80gb", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b"]

# (text as written in the CSV, the integer it denotes, the number it denotes)
CELLS = [
    ("0", 0, 0.0), ("1", 1, 1.0), ("2", 2, 2.0), ("7", 7, 7.0), ("-1", -1, -1.0), ("+2", 2, 2.0),
    ('"3"', 3, 3.0), ("3.0", None, 3.0), (".5", None, 0.5), ("0.25", None, 0.25), ("1e-3", None, 1e-3),
    ("2.5e1", None, 25.0), ("-0.0", None, -0.0), ('"0.5"', None, 0.5), ("1.", None, 1.0),
    ("9223372036854775807", 2 ** 63 - 1, 9.223372036854775807e18), ("99999999999999999999", None, 1e20),
    ("10000001", 10000001, 10000001.0), ("3601", 3601, 3601.0),
    ("1e400", None, None), ("nan", None, None), ("NaN", None, None), ("inf", None, None), ("-inf", None, None),
    ("", None, None), ("NA", None, None), ("null", None, None), ("true", None, None), ("False", None, None),
    ("abc", None, None), ("1_0", None, None), ("0x1", None, None), ("\u0663", None, None), ("1.5.2", None, None),
]
TRAPS = ("true", "False", "", "nan", "3.0", '"3"', "1e400", "-1")  # drawn more often: the lax readers' mistakes
cell = st.one_of(st.sampled_from(CELLS), st.sampled_from([c for c in CELLS if c[0] in TRAPS]))


from conftest import cli_redirect  # noqa: E402  (the shared CLI runner)


def check_outcome(rc: int, out: str, err: str, path: Path, valid: bool, needles=()) -> dict | None:
    """The contract, plus: the CLI's verdict is the reference reader's."""
    if rc == 0:
        assert valid, f"bad input accepted silently: {path}\n{path.read_bytes()[:400]!r}"
        lines = out.strip().splitlines()
        assert len(lines) == 1, out
        obj = json.loads(lines[0])
        assert isinstance(obj, dict)
        return obj
    assert rc == 2, (rc, out, err)
    assert out == "" and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specsim: error:"), err
    assert str(path) in lines[0], lines[0]
    assert not valid, f"good input refused: {lines[0]}\n{path.read_bytes()[:400]!r}"
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return None


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    path.write_text(",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


COLUMN_TRAPS = [c for c in CELLS if c[0] in ("true", "False", "3.0", '"3"', "", "nan")]  # change a column's type


def mutate(rows: list[list[tuple]], data) -> list[list[tuple]]:
    """One to two cells replaced by labelled pool cells, or a whole column by one that changes its type."""
    rows = [list(r) for r in rows]
    for _ in range(data.draw(st.integers(1, 2))):
        j = data.draw(st.integers(0, len(rows[0]) - 1))
        if data.draw(st.booleans()):
            new = data.draw(st.sampled_from(COLUMN_TRAPS))
            for r in rows:
                r[j] = new
        else:
            rows[data.draw(st.integers(0, len(rows) - 1))][j] = data.draw(cell)
    return rows


def texts(rows: list[list[tuple]]) -> list[list[str]]:
    return [[c[0] for c in r] for r in rows]


# ---- β traces -------------------------------------------------------------------------------------------------
def ref_trace(rows: list[list[tuple]]) -> float | None:
    """Reference reader: α if the rows are a valid trace, else None."""
    seqs: dict[int, list[tuple[int, float]]] = {}
    for (_, sid, _), (_, pos, _), (_, _, beta) in rows:
        if sid is None or pos is None or beta is None or not 0.0 <= beta <= 1.0:
            return None
        if not (-2 ** 63 <= sid < 2 ** 63 and -2 ** 63 <= pos < 2 ** 63):
            return None
        seqs.setdefault(sid, []).append((pos, beta))
    if any(sorted(p for p, _ in v) != list(range(len(v))) for v in seqs.values()):
        return None
    return float(np.mean([b for v in seqs.values() for _, b in v]))


def trace_rows(data) -> list[list[tuple]]:
    betas = [c for c in CELLS if c[2] is not None and 0 <= c[2] <= 1]
    rows = []
    for s in range(data.draw(st.integers(1, 3))):
        for p in range(data.draw(st.integers(1, 4))):
            rows.append([(str(s), s, float(s)), (str(p), p, float(p)), data.draw(st.sampled_from(betas))])
    return rows


def trace_cmd(path: Path, use_simulate: bool) -> list:
    if use_simulate:
        return ["simulate", *PAIR, "--trace", path, "--requests", "2", "--output-len", "6", "--json"]
    return ["trace", "stats", path, "--json"]


@SETTINGS
@given(data=st.data())
def test_mutated_trace_csv_is_read_right_or_refused_in_one_line(data):
    rows = trace_rows(data)
    if data.draw(st.integers(0, 3)):  # 3 in 4 examples mutated
        rows = mutate(rows, data)
    alpha = ref_trace(rows)
    sim = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as d:
        p = write_csv(Path(d) / "t.csv", ["sequence_id", "position", "beta"], texts(rows))
        res = check_outcome(*cli_redirect(*trace_cmd(p, sim)), p, alpha is not None)
    if res is not None:
        assert res["alpha_trace_raw" if sim else "alpha"] == pytest.approx(alpha, abs=1e-12)


PQ_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "uint8": pa.uint8(), "float64": pa.float64(),
            "bool": pa.bool_(), "string": pa.string()}


@SETTINGS
@given(data=st.data())
def test_parquet_column_types_are_strict(data):
    n = data.draw(st.integers(1, 4))
    types = {c: data.draw(st.sampled_from(sorted(PQ_TYPES))) for c in ("sequence_id", "position", "beta")}
    null_at = data.draw(st.sampled_from([None, "sequence_id", "position", "beta"]))
    values = {"sequence_id": [0] * n, "position": list(range(n)), "beta": [1] * n}
    cols = {}
    for c, t in types.items():
        v = values[c]
        v = [str(x) for x in v] if t == "string" else [bool(x) for x in v] if t == "bool" else v
        if c == null_at:
            v = [None] + v[1:]
        cols[c] = pa.array(v, PQ_TYPES[t])
    ints = ("int64", "int32", "uint8")
    valid = (types["sequence_id"] in ints and types["position"] in ints and types["beta"] in ints + ("float64",)
             and null_at is None)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.parquet"
        pq.write_table(pa.table(cols), p)
        res = check_outcome(*cli_redirect(*trace_cmd(p, data.draw(st.booleans()))), p, valid)
    if res is not None:
        assert res.get("alpha", res.get("alpha_trace_raw")) == 1.0


HEAD = "sequence_id,position,beta\n"
BAD_TRACES = [  # (file name, bytes, words the one line must hold)
    ("bool.csv", HEAD + "0,0,true\n0,1,false\n", ["'beta'", "true/false", "[0, 1]"]),
    ("bool_mixed.csv", HEAD + "0,0,0.5\n0,1,True\n", ["'beta'", "not a number", "'True'"]),
    ("nan.csv", HEAD + "0,0,nan\n", ["'beta'", "not a number"]),
    ("blank.csv", HEAD + "0,0,\n", ["'beta'", "not a number"]),
    ("inf.csv", HEAD + "0,0,inf\n", ["'beta'", "[0, 1]"]),
    ("huge.csv", HEAD + "0,0,1e400\n", ["'beta'", "[0, 1]"]),
    ("neg.csv", HEAD + "0,0,-0.5\n", ["'beta'", "-0.5", "[0, 1]"]),
    ("above.csv", HEAD + "0,0,1.0000001\n", ["'beta'", "[0, 1]"]),
    ("float_pos.csv", HEAD + "0,0.0,0.5\n", ["'position'", "not an integer", "'0.0'"]),
    ("bool_id.csv", HEAD + "True,0,0.5\n", ["'sequence_id'", "not an integer", "'True'"]),
    ("big_id.csv", HEAD + "99999999999999999999,0,0.5\n", ["'sequence_id'", "out of range", "2^63"]),
    ("hex.csv", HEAD + "0x1,0,0.5\n", ["'sequence_id'", "not an integer", "'0x1'"]),
    ("extra_field.csv", HEAD + "0,0,0.5,9\n", ["more fields than the header"]),
    ("extra_later.csv", HEAD + "0,0,0.5\n0,1,0.5,9\n", ["malformed CSV"]),
    ("dup.csv", "sequence_id,position,beta,beta\n0,0,0.5,0.7\n", ["'beta'", "more than once"]),
    ("missing.csv", "sequence_id,beta\n0,0.5\n", ["'position'", "missing column", "sequence_id, position, beta"]),
    ("tabs.csv", "sequence_id\tposition\tbeta\n0\t0\t0.5\n", ["missing column"]),
    ("header.csv", HEAD, ["no rows"]),
    ("empty.csv", "", ["empty file"]),
    ("gap.csv", HEAD + "0,0,0.5\n0,2,0.5\n", ["'position'", "1 is missing"]),
    ("slot.csv", "# slot_decay: 1.5\n" + HEAD + "0,0,0.5\n", ["'slot_decay'", "[0, 1]"]),
    ("slot_nan.csv", "# slot_decay: NaN\n" + HEAD + "0,0,0.5\n", ["'slot_decay'", "not a number"]),
    ("slot_str.csv", '# slot_decay: "0.5"\n' + HEAD + "0,0,0.5\n", ["'slot_decay'", "must be a number"]),
]


def _bad_parquet(d: Path) -> list[tuple[Path, list[str]]]:
    out = []
    good = d / "good.parquet"
    pq.write_table(pa.table({"sequence_id": [0] * 500, "position": list(range(500)), "beta": [0.5] * 500}), good)
    for name, cut in (("cut.parquet", 0.5), ("cut_head.parquet", 0.02)):
        (d / name).write_bytes(good.read_bytes()[: int(len(good.read_bytes()) * cut)])
        out.append((d / name, ["truncated or corrupt"]))
    (d / "text.parquet").write_text(HEAD + "0,0,0.5\n")
    out.append((d / "text.parquet", ["truncated or corrupt"]))
    for name, cols, needles in (
        ("str_beta.parquet", {"beta": pa.array(["0.5"])}, ["'beta'", "where numbers belong"]),
        ("bool_beta.parquet", {"beta": pa.array([True])}, ["'beta'", "true/false"]),
        ("float_pos.parquet", {"position": pa.array([0.0])}, ["'position'", "where integers belong"]),
        ("null_id.parquet", {"sequence_id": pa.array([None], pa.int64())}, ["'sequence_id'", "missing value"]),
    ):
        base = {"sequence_id": pa.array([0]), "position": pa.array([0]), "beta": pa.array([0.5])}
        pq.write_table(pa.table({**base, **cols}), d / name)
        out.append((d / name, needles))
    return out


def test_hand_picked_bad_traces_are_refused(tmp_path):
    cases = [(tmp_path / n, needles) for n, text, needles in BAD_TRACES]
    for (p, _), (_, text, _) in zip(cases, BAD_TRACES):
        p.write_text(text, encoding="utf-8")
    cases += _bad_parquet(tmp_path)
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x01garbage\x80\n")
    (tmp_path / "folder.csv").mkdir()
    cases += [(tmp_path / "binary.csv", ["UTF-8"]), (tmp_path / "folder.csv", ["directory"]),
              (tmp_path / "absent.parquet", ["no such trace file"])]
    for p, needles in cases:
        for sim in (False, True):
            check_outcome(*cli_redirect(*trace_cmd(p, sim)), p, False, needles)


def test_a_csv_with_a_byte_order_mark_and_quoted_numbers_reads(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbf" + (HEAD + '0,0,"0.25"\n0,1,0.75\n').encode())
    assert check_outcome(*cli_redirect(*trace_cmd(p, False)), p, True)["alpha"] == 0.5


# ---- arrivals CSVs --------------------------------------------------------------------------------------------
def ref_arrivals(rows: list[list[tuple]]) -> tuple[int, int] | None:
    """(requests, output tokens) if valid, else None. arrival_s: a number in [0, 1e9]; lengths: integers in
    [1, 1e7]; the rows may come in any order."""
    total = 0
    for (_, _, a), (_, p, _), (_, o, _) in rows:
        if a is None or not 0 <= a <= 1e9 or p is None or o is None or not (1 <= p <= 10 ** 7 and 1 <= o <= 10 ** 7):
            return None
        total += o
    return len(rows), total


def arrivals_cmd(path: Path) -> list:
    return ["simulate", *PAIR, "--alpha", "0.6", "--arrivals", path, "--max-batch", "4", "--json"]


SMALL_LEN = [c for c in CELLS if c[1] is not None and 1 <= c[1] <= 7]


@SETTINGS
@given(data=st.data())
def test_mutated_arrivals_csv_is_read_right_or_refused_in_one_line(data):
    times = [c for c in CELLS if c[2] is not None and 0 <= c[2] <= 30]
    rows = [[data.draw(st.sampled_from(times)), data.draw(st.sampled_from(SMALL_LEN)),
             data.draw(st.sampled_from(SMALL_LEN))] for _ in range(data.draw(st.integers(1, 4)))]
    if data.draw(st.booleans()):
        rows = mutate(rows, data)
        # a valid but huge length would make a long run; the pool's valid integers above 7 stay out of lengths
        rows = [[r[0]] + [c if c[1] is None or c[1] <= 7 or c[1] > 10 ** 7 else ("0", 0, 0.0) for c in r[1:]]
                for r in rows]
    ref = ref_arrivals(rows)
    with tempfile.TemporaryDirectory() as d:
        p = write_csv(Path(d) / "a.csv", ["arrival_s", "prompt_len", "output_len"], texts(rows))
        res = check_outcome(*cli_redirect(*arrivals_cmd(p)), p, ref is not None)
    if res is not None:
        assert (res["requests"], res["output_tokens"]) == ref


AHEAD = "arrival_s,prompt_len,output_len\n"
BAD_ARRIVALS = [
    ("bool.csv", AHEAD + "true,4,4\n", ["'arrival_s'", "true/false", "[0, 1e+09]"]),
    ("neg.csv", AHEAD + "-0.5,4,4\n", ["'arrival_s'", "-0.5", "[0, 1e+09]"]),
    ("nan.csv", AHEAD + "nan,4,4\n", ["'arrival_s'", "not a number"]),
    ("inf.csv", AHEAD + "inf,4,4\n", ["'arrival_s'", "not a finite number"]),
    ("late.csv", AHEAD + "2e9,4,4\n", ["'arrival_s'", "out of range"]),
    ("float_len.csv", AHEAD + "0,4.0,4\n", ["'prompt_len'", "not an integer", "[1, 10000000]"]),
    ("zero_len.csv", AHEAD + "0,4,0\n", ["'output_len'", "out of range", "[1, 10000000]"]),
    ("long.csv", AHEAD + "0,4,10000001\n", ["'output_len'", "out of range"]),
    ("text_len.csv", AHEAD + "0,four,4\n", ["'prompt_len'", "'four'"]),
    ("blank.csv", AHEAD + "0,,4\n", ["'prompt_len'", "missing value"]),
    ("missing.csv", "arrival_s,prompt_len\n0,4\n", ["'output_len'", "missing column"]),
    ("header.csv", AHEAD, ["no data rows"]),
    ("empty.csv", "", ["empty file"]),
    ("extra.csv", AHEAD + "0,4,4,4\n", ["more fields"]),
]


def test_hand_picked_bad_arrivals_are_refused(tmp_path):
    for name, text, needles in BAD_ARRIVALS:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        check_outcome(*cli_redirect(*arrivals_cmd(p)), p, False, needles)
    (tmp_path / "bin.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    (tmp_path / "dir.csv").mkdir()
    for p, needle in ((tmp_path / "bin.csv", "UTF-8"), (tmp_path / "dir.csv", "directory"),
                      (tmp_path / "absent.csv", "no such")):
        check_outcome(*cli_redirect(*arrivals_cmd(p)), p, False, [needle])


def test_unsorted_arrivals_are_replayed_in_arrival_order(tmp_path):
    p = tmp_path / "u.csv"
    p.write_text(AHEAD + "# a comment line\n0.5,4,3\n0.0,4,2\n0.0,4,1\n", encoding="utf-8")
    res = check_outcome(*cli_redirect(*arrivals_cmd(p)), p, True)
    assert res["requests"] == 3 and res["output_tokens"] == 6


# ---- measured pass-time tables --------------------------------------------------------------------------------
MHEAD = ["kind", "batch", "positions", "context", "time_s"]
AXES = {"batch": (1, 10 ** 6), "positions": (1, 10 ** 7), "context": (0, 10 ** 7)}


def ref_measured(rows: list[list[tuple]]) -> bool:
    """Valid iff every cell is in range, the decode rows (and the prefill rows, over batch × positions) are
    full grids with at least one decode row, and no time falls along an axis by more than the measurement noise
    `RISE_TOLERANCE` allows (the median of repeated rows counts, as in `PassGrid`)."""
    grids: dict[str, dict] = {"decode": {}, "prefill": {}}
    for kind, *axes, (_, _, t) in rows:
        kind = kind[0].strip().strip('"') or "decode"
        if kind not in grids or t is None or not 0 < t <= 3600:
            return False
        vals = [c[1] for c in axes]
        if any(v is None or not lo <= v <= hi for v, (lo, hi) in zip(vals, AXES.values())):
            return False
        grids[kind].setdefault(tuple(vals) if kind == "decode" else (vals[0], vals[1], 0), []).append(t)
    for keys in grids.values():
        if keys and len(keys) != math.prod(len({k[j] for k in keys}) for j in range(3)):
            return False
        if keys and not _rises({k: float(np.median(v)) for k, v in keys.items()}):
            return False
    return bool(grids["decode"])


def _rises(cells: dict) -> bool:
    from specsim.inputs.tables import RISE_TOLERANCE

    values = [sorted({k[j] for k in cells}) for j in range(3)]
    for j in range(3):
        for rest in {k[:j] + k[j + 1:] for k in cells}:
            peak = 0.0
            for v in values[j]:
                t = cells[rest[:j] + (v,) + rest[j:]]
                if peak and (peak - t) / peak > RISE_TOLERANCE:
                    return False
                peak = max(peak, t)
    return True


def measured_rows(data) -> list[list[tuple]]:
    """A 2 x 2 x 2 grid whose times rise with the work (drawn cells sorted, given out in (batch, positions,
    context) order, one linear extension of the grid's order); mutations may then break it."""
    times = [c for c in CELLS if c[2] is not None and 0 < c[2] <= 1]
    drawn = sorted((data.draw(st.sampled_from(times)) for _ in range(8)), key=lambda c: c[2])
    return [[("decode", None, None), (str(b), b, float(b)), (str(p), p, float(p)), (str(c), c, float(c)),
             drawn[i]] for i, (b, p, c) in enumerate((b, p, c) for b in (1, 2) for p in (1, 4) for c in (0, 64))]


def measured_cmd(path: Path) -> list:
    return ["simulate", *PAIR, "--alpha", "0.6", "--requests", "2", "--output-len", "6", "--measured-target", path,
            "--json"]


KIND_CELLS = [("prefill", None, None), ("", None, None), ("verify", None, None), ("Decode", None, None)]


@SETTINGS
@given(data=st.data())
def test_mutated_measured_table_is_read_right_or_refused_in_one_line(data):
    rows = measured_rows(data)
    if data.draw(st.booleans()):
        rows = mutate(rows, data)
    if data.draw(st.booleans()):
        rows[data.draw(st.integers(0, len(rows) - 1))][0] = data.draw(st.sampled_from(KIND_CELLS))
    valid = ref_measured(rows)
    with tempfile.TemporaryDirectory() as d:
        p = write_csv(Path(d) / "m.csv", MHEAD, texts(rows))
        check_outcome(*cli_redirect(*measured_cmd(p)), p, valid)


MH = ",".join(MHEAD) + "\n"
BAD_MEASURED = [
    ("bool.csv", MH + "decode,1,1,0,true\n", ["'time_s'", "true/false", "(0, 3600]"]),
    ("zero.csv", MH + "decode,1,1,0,0\n", ["'time_s'", "out of range", "(0, 3600]"]),
    ("nan.csv", MH + "decode,1,1,0,nan\n", ["'time_s'", "not a number"]),
    ("hour.csv", MH + "decode,1,1,0,3601\n", ["'time_s'", "out of range"]),
    ("batch0.csv", MH + "decode,0,1,0,0.01\n", ["'batch'", "[1, 1000000]"]),
    ("float_pos.csv", MH + "decode,1,1.0,0,0.01\n", ["'positions'", "not an integer", "'1.0'"]),
    ("neg_ctx.csv", MH + "decode,1,1,-1,0.01\n", ["'context'", "[0, 10000000]"]),
    ("kind.csv", MH + "verify,1,1,0,0.01\n", ["'kind'", "'verify'", "decode | prefill"]),
    ("prefill_only.csv", MH + "prefill,1,1,0,0.01\n", ["'kind'", "no decode rows"]),
    ("grid.csv", MH + "decode,1,1,0,0.01\ndecode,1,2,64,0.02\n", ["not a full grid"]),
    ("no_time.csv", "batch,positions,context\n1,1,0\n", ["'time_s'", "missing column"]),
    ("header.csv", MH, ["no data rows"]),
    ("empty.csv", "", ["empty file"]),
]


def test_hand_picked_bad_measured_tables_are_refused(tmp_path):
    for name, text, needles in BAD_MEASURED:
        p = tmp_path / name
        p.write_text(text, encoding="utf-8")
        check_outcome(*cli_redirect(*measured_cmd(p)), p, False, needles)
    (tmp_path / "bin.csv").write_bytes(b"\x00\xff\xfe binary")
    (tmp_path / "dir.csv").mkdir()
    for p, needle in ((tmp_path / "bin.csv", "UTF-8"), (tmp_path / "dir.csv", "--measured-target"),
                      (tmp_path / "absent.csv", "not found")):
        check_outcome(*cli_redirect(*measured_cmd(p)), p, False, [needle])
