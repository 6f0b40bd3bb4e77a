"""The committed draft comparison (experiments/results/compare/): the README's main job, written into the tracked
results folder on purpose.

The README's own command writes to results/compare/ (gitignored), so trying specsim never rewrites tracked files;
this script is the one explicit way to regenerate the committed copy (run it when a change moves the figures and
commit the diff with the reason).

Usage: .venv/bin/python experiments/compare.py [--no-simulate]
Writes experiments/results/compare/compare.csv and compare.png (same as
`specsim compare --out experiments/results/compare`).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specsim.cli import main  # noqa: E402

OUT = ROOT / "experiments" / "results" / "compare"

if __name__ == "__main__":
    sys.exit(main(["compare", "--out", str(OUT), *sys.argv[1:]]))
