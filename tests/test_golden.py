"""Golden outputs: every engine path's `--json` output for fixed seeds (tests/golden/cases.py).

Portable across CPUs (tests/golden/compare.py): integers, strings and booleans exact, floats within a relative
1e-12. On one machine a run is bit-identical, checked by running a case twice. A change that alters results on
purpose regenerates them with `.venv/bin/python tests/golden/regen.py` (it prints what moved) and says why in its
commit.
"""

import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))

import regen  # noqa: E402
from cases import CASES  # noqa: E402
from compare import REL_TOL, describe, diffs, text_diffs  # noqa: E402


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_output_matches_its_golden(name):
    moved = text_diffs((GOLDEN / f"{name}.json").read_text(), regen.run_case(CASES[name]))
    if moved:
        pytest.fail(describe(name, moved) + "\nregenerate with tests/golden/regen.py only on purpose")


def test_sweep_rows_match_their_golden():
    moved = text_diffs((GOLDEN / "sweep_rows.json").read_text(), regen.sweep_rows())
    assert not moved, describe("sweep_rows", moved)


def test_same_seed_is_bit_identical_on_one_machine():
    argv = CASES["poisson"]
    assert regen.run_case(argv) == regen.run_case(argv)


def test_every_case_has_a_golden_file():
    names = set(CASES) | {"sweep_rows"}
    assert {p.stem for p in GOLDEN.glob("*.json")} == names


def test_the_comparison_is_exact_for_integers_and_strings_and_tolerant_only_for_floats():
    assert diffs({"a": 1, "b": "x"}, {"a": 1, "b": "x"}) == []
    assert diffs({"a": 1}, {"a": 2}) == [("a", 1, 2)]
    assert diffs({"a": 1}, {"a": 1.0}) != []                      # an int that became a float moved
    assert diffs({"b": "x"}, {"b": "y"}) != []
    assert diffs({"f": 0.48220585776402897}, {"f": 0.482205857764029}) == []   # the Intel/AMD last digit
    assert diffs({"f": 1.0}, {"f": 1.0 + 1e-9}) != []               # a real change is seen
    assert diffs({"l": [1.0, 2.0]}, {"l": [1.0]}) == [("l[len]", 2, 1)]
    assert diffs({"a": 1}, {}) == [("a", 1, "<absent>")]
    assert REL_TOL <= 1e-12
