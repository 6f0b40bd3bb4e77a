"""How much the power model's draft/verification split leans on pricing it at the run's mean live context.

`specsim.cost.power.draft_shares` splits each recorded step into its draft part and its verification part at the
run's mean live context (the step records carry no context). Here each step is split again at its own mean live
context, rebuilt exactly from the request-step rows (prompt + tokens emitted before the step − 1, averaged over the
step's requests — what the engines price a step at), and the run's joules are compared; and against no split at all
(the whole step at its averaged utilisation). Writes experiments/results/power_split_check.md.
Usage: .venv/bin/python experiments/power_split_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from specsim.cost.power import draft_shares, run_energy  # noqa: E402
from specsim.simulate import _costs, make_config, simulate  # noqa: E402

CASES = (dict(batch=1, requests=32), dict(batch=32, requests=128), dict(batch=128, requests=512, prompt_len=2000))


def step_context(rec, wl) -> np.ndarray:
    """Each step's mean live context, from the request-step rows (decoder-only)."""
    order = np.lexsort((rec.rs_step, rec.rs_request))
    req, stp, tok = rec.rs_request[order], rec.rs_step[order], rec.rs_accepted[order] + 1
    cs = np.cumsum(tok)
    first = np.r_[True, req[1:] != req[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(req)), 0))
    before = cs - tok - (cs[start] - tok[start])
    live = wl.prompt_len[req] + np.minimum(before, wl.output_len[req] - 1)  # prompt + (1 + before) − 1
    n = len(rec.step_dur_s)
    return np.bincount(stp, live, minlength=n) / np.maximum(1, np.bincount(stp, minlength=n))


def main() -> None:
    lines = ["# Draft/verification split at the mean context vs each step's own", "",
             "llama-3.1-8b + llama-3.2-1b, α 0.7, γ 4, h100-sxm (default stack), closed loop. Joules of the "
             "speculative run.", "", "| setting | mean-context split vs per-step | no split vs per-step | draft share "
             "of step time |", "|---|---|---|---|"]
    for kw in CASES:
        cfg = make_config(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, gamma=4, **kw)
        res = simulate(cfg)
        rec, s = res.spec, res.summary
        costs, dep = _costs(cfg)
        parts = np.zeros((3, len(rec.step_dur_s)))
        for i, (B, G, ctx) in enumerate(zip(rec.step_batch.tolist(), rec.step_gamma.tolist(),
                                            step_context(rec, res.workload).tolist())):
            one = draft_shares(costs, [B], [G], rec.step_dur_s[i:i + 1], rec.step_bytes[i:i + 1],
                               rec.step_flops[i:i + 1], ctx)
            parts[:, i] = [x[0] for x in one]
        args = (dep.hardware, 1, 1, s["walltime_s"], rec.step_dur_s, rec.step_bytes, rec.step_flops,
                dep.peak_bytes_s, dep.peak_flops)
        exact = run_energy(*args, tuple(parts))[0]
        none = run_energy(*args)[0]
        mean_ctx = s["energy_j_per_token"] * s["output_tokens"]
        lines.append(f"| {kw} | {100 * (mean_ctx / exact - 1):+.4f}% | {100 * (none / exact - 1):+.2f}% | "
                     f"{parts[0].sum() / rec.step_dur_s.sum():.3f} |")
    out = ROOT / "experiments/results/power_split_check.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
