"""Regenerate the golden outputs: `.venv/bin/python tests/golden/regen.py` (from the repository root).

Run it only when a change alters results on purpose, and say why in the commit. It prints what moved in each file
(`compare.describe`); `--check` prints the same and writes nothing (exit 1 if anything moved beyond the tolerance).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from cases import CASES, SWEEP_SPEC  # noqa: E402


def run_case(argv: list[str]) -> str:
    """Run one CLI command in-process from the repository root; its stdout (one JSON object)."""
    from specsim.cli import main
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out):
            code = main(argv)
    finally:
        os.chdir(cwd)
    if code not in (0, None):
        raise RuntimeError(f"{argv} exited {code}")
    return out.getvalue()


def sweep_rows() -> str:
    """The golden sweep's result rows as sorted JSON (point ids carry content hashes of the profiles read)."""
    import pandas as pd
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "golden.toml"
        spec.write_text(SWEEP_SPEC)
        run_case(["sweep", str(spec), "--out", str(Path(tmp) / "out"), "--workers", "1", "--no-plots", "--json"])
        df = pd.read_parquet(Path(tmp) / "out" / "results.parquet")
    # point ids hash the profile files' bytes (a comment edit changes them): identities, not results
    df = df.drop(columns=["point_id"]).sort_values(["gamma", "batch"]).reset_index(drop=True)
    rows = [{k: _plain(v) for k, v in row.items()} for row in df.to_dict("records")]
    return json.dumps(rows, sort_keys=True, indent=1) + "\n"


def _plain(v):
    """numpy scalars and arrays as JSON values; floats keep every bit (json writes repr)."""
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def outputs() -> dict[str, str]:
    got = {name: run_case(argv) for name, argv in CASES.items()}
    got["sweep_rows"] = sweep_rows()
    return got


def main(argv: list[str]) -> int:
    from compare import describe, text_diffs
    check = "--check" in argv
    moved_any = False
    for name, text in outputs().items():
        path = HERE / f"{name}.json"
        old = path.read_text() if path.exists() else None
        moved = text_diffs(old, text) if old is not None else [("<new file>", None, name)]
        moved_any |= bool(moved)
        print(describe(name, moved))
        if not check and text != old:
            path.write_text(text)
            print(f"  wrote tests/golden/{name}.json ({len(text)} bytes)")
    return 1 if check and moved_any else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
