"""Diagnosis, not a figure of record: the vLLM analysis with the step tables' monotone fit switched off.

    .venv/bin/python experiments/vllm_rawknots.py --out COPY_OF_A_RESULTS_FOLDER    # writes its report there

Why: on this CPU the target's per-count median decode step is not monotone in the token count (in every block of
experiments/results/vllm_cpu_lockstep2 a 2-token step is the slowest of 1-6 tokens, 4-5 tokens 10-28% below it,
each median over ~100 steps from three runs), and `step_fit.fit_step_table` pools such dips (isotonic regression),
which the analysis of record keeps (chosen before the runs). This prices every knot at its raw median instead and
lifts the step-table check that refuses a table falling more than 15% along tokens — both only in this process —
to show how much of the remaining error the pooling explains. Run it on a copy: it overwrites the report files.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]

import specsim.cost.ragged as ragged  # noqa: E402
from specsim.validation import step_fit as sf  # noqa: E402

sf.isotonic_regression = lambda med, weights=None, increasing=True: types.SimpleNamespace(x=med)
ragged.rising = lambda s, axes, where, *a, **k: s

import vllm_analyze as va  # noqa: E402  (after the two switches: it fits through them)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a copy of a results folder (its report is rewritten)")
    res = va.analyze(ap.parse_args().out)
    print("raw knots: speedup error (throughput ratio) median {:.1%}, max {:.1%}; TPOT ratio median {:.1%}, max "
          "{:.1%}".format(res["median_abs_err_speedup_throughput"], res["max_abs_err_speedup_throughput"],
                          res["median_abs_err_speedup_tpot"], res["max_abs_err_speedup_tpot"]))


if __name__ == "__main__":
    main()
