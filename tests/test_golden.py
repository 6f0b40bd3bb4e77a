"""Golden outputs: every engine path's exact `--json` output for fixed seeds (tests/golden/cases.py).

Any drift fails. A change that alters results on purpose regenerates them with
`.venv/bin/python tests/golden/regen.py` and says why in its commit.
"""

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))

import regen  # noqa: E402
from cases import CASES  # noqa: E402


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_output_is_bit_identical(name):
    want = (GOLDEN / f"{name}.json").read_text()
    got = regen.run_case(CASES[name])
    if got != want:
        w, g = json.loads(want), json.loads(got)
        diff = sorted(k for k in set(w) | set(g) if w.get(k) != g.get(k)) if isinstance(w, dict) else "rows"
        pytest.fail(f"{name}: output drifted in {diff}; regenerate with tests/golden/regen.py only on purpose")


def test_sweep_rows_are_bit_identical():
    assert regen.sweep_rows() == (GOLDEN / "sweep_rows.json").read_text()


def test_every_case_has_a_golden_file():
    names = set(CASES) | {"sweep_rows"}
    assert {p.stem for p in GOLDEN.glob("*.json")} == names
