"""Figure 5 of the seed: walltime speedup and operations factor against γ for several α at one c.

Lines are the closed forms — eq. (5) for the speedup, Thm 3.11 for the operations factor (ĉ = c) — and the best
integer γ of eq. (5) is circled on each speedup curve. Points are the engine: batch 1, fixed_c mode (a target pass
costs one unit whatever its γ + 1 positions, a draft pass c units: exactly eq. (5)'s assumptions), so any gap
is the simulation itself (finite runs, the last step of each request truncated at its final token). The
simulated operations factor counts what the engine did: Σ over steps of (γ + 1 target positions + γ·ĉ draft
positions) / the decode tokens plain decoding needs (one target position each).

Usage: .venv/bin/python experiments/figure5.py [--c 0.05] [--requests 500] [--seed 0]
Writes experiments/results/figure5.csv and figure5.png.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from specsim import theory# noqa: E402
from specsim.config import SimConfig  # noqa: E402
from specsim.simulate import run  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)
GAMMAS = range(1, 16)
OUTPUT_LEN = 256
COLORS = ["#264653", "#2a9d8f", "#e9c46a", "#f4a261", "#e76f51"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--c", type=float, default=0.05, help="cost coefficient c (and ĉ) [0.05]")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    c = args.c

    rows = []
    for a in ALPHAS:
        for g in GAMMAS:
            r = run(SimConfig(hardware="tpu-v4", target="t5-v1_1-xxl", draft="t5-v1_1-small", alpha=a, gamma=g,
                              fixed_c=c, requests=args.requests, prompt_len=64, output_len=OUTPUT_LEN,
                              seed=args.seed, engine="fast"))
            decode_tokens = r["requests"] * (OUTPUT_LEN - 1)
            ops_sim = r["request_steps"] * (g + 1 + g * c) / decode_tokens
            rows.append({"alpha": a, "gamma": g, "c": c, "c_hat": c,
                         "speedup_sim": round(r["speedup"], 5), "speedup_eq5": round(theory.speedup(a, g, c), 5),
                         "ops_sim": round(ops_sim, 5), "ops_thm311": round(theory.ops_factor(a, g, c), 5),
                         "tokens_per_run_sim": round(r["tokens_per_target_run"], 5),
                         "tokens_per_run_eq1": round(theory.expected_tokens(a, g), 5)})
    for a in ALPHAS:
        mine = [r for r in rows if r["alpha"] == a]
        g_eq = int(theory.optimal_gamma(a, c, gamma_max=max(GAMMAS)))
        g_sim = max(mine, key=lambda r: r["speedup_sim"])["gamma"]
        for r in mine:
            r["best_gamma_eq5"], r["best_gamma_sim"] = g_eq, g_sim

    RESULTS.mkdir(parents=True, exist_ok=True)
    out_csv = RESULTS / "figure5.csv"
    with out_csv.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    fig, (ax_s, ax_o) = plt.subplots(1, 2, figsize=(13, 5))
    gg = np.arange(1, max(GAMMAS) + 1)
    for a, col in zip(ALPHAS, COLORS):
        mine = [r for r in rows if r["alpha"] == a]
        s_eq = np.asarray(theory.speedup(a, gg, c))
        o_eq = np.asarray(theory.ops_factor(a, gg, c))
        g_best = mine[0]["best_gamma_eq5"]
        ax_s.plot(gg, s_eq, "-", color=col, lw=1.6, label=f"α = {a:g}  (best γ = {g_best})")
        ax_s.plot([r["gamma"] for r in mine], [r["speedup_sim"] for r in mine], "o", color=col, ms=4.5,
                  mec="k", mew=0.4)
        ax_s.plot([g_best], [s_eq[g_best - 1]], "o", ms=16, mfc="none", mec=col, mew=2.0)
        ax_o.plot(gg, o_eq, "-", color=col, lw=1.6, label=f"α = {a:g}")
        ax_o.plot([r["gamma"] for r in mine], [r["ops_sim"] for r in mine], "o", color=col, ms=4.5, mec="k",
                  mew=0.4)
        ax_o.plot([g_best], [o_eq[g_best - 1]], "o", ms=16, mfc="none", mec=col, mew=2.0)
    ax_s.axhline(1.0, color="k", lw=0.8, ls="--")
    ax_s.set_xlabel("draft length γ")
    ax_s.set_ylabel("walltime speedup over plain decoding")
    ax_s.set_title(f"Speedup: eq. (5) lines, engine points (c = {c:g}); best γ circled", fontsize=10)
    ax_o.set_xlabel("draft length γ")
    ax_o.set_ylabel("total operations / plain decoding")
    ax_o.set_title(f"Operations factor: Thm 3.11 lines, engine points (ĉ = {c:g}); circled at the speed-best γ",
                   fontsize=10)
    for ax in (ax_s, ax_o):
        ax.set_xticks(gg)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8.5, loc="upper left")
    ax_s.plot([], [], "o", color="grey", mec="k", mew=0.4, ms=4.5, label="engine (batch 1, fixed c)")
    ax_s.legend(fontsize=8.5, loc="upper left")
    fig.tight_layout()
    out_png = RESULTS / "figure5.png"
    fig.savefig(out_png, dpi=120)
    plt.close(fig)

    print(f"c = ĉ = {c:g}; engine: batch 1, fixed_c, {args.requests} requests × {OUTPUT_LEN} tokens")
    print(f"{'α':>5}{'best γ eq5':>11}{'best γ sim':>11}{'eq5 max':>9}{'sim max':>9}{'ops at best (thm)':>18}"
          f"{'max |sim-eq5|/eq5':>19}")
    for a in ALPHAS:
        mine = [r for r in rows if r["alpha"] == a]
        g = mine[0]["best_gamma_eq5"]
        b = mine[g - 1]
        err = max(abs(r["speedup_sim"] - r["speedup_eq5"]) / r["speedup_eq5"] for r in mine)
        print(f"{a:>5.2f}{g:>11}{mine[0]['best_gamma_sim']:>11}{b['speedup_eq5']:>9.3f}"
              f"{max(r['speedup_sim'] for r in mine):>9.3f}{b['ops_thm311']:>18.3f}{err:>19.3%}")
    print(f"wrote {out_csv}, {out_png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
