"""Methods study (issue 15): which proposer, chain or tree, pays at which batch size — and what a
mixture-of-experts target does to the economics.

Part 1: Llama-3.1-8B on one H100 SXM (CUDA-graph stack), the same α = 0.7 per draft token for every proposer
(ASSUMED: the point is what each proposal costs, not which one drafts better): a separate Llama-3.2-1B draft, the
shipped EAGLE-3 head, the MTP-style head, and n-gram lookup, each as a chain of γ = 3 and (except n-gram, which
has no candidates to branch on) as a dynamic tree of 16 nodes, top-4, depth ≤ 4, with the top-k acceptance
[0.7, 0.8, 0.85, 0.88] (ASSUMED, Sequoia-like shape). Closed loop over batch sizes 1–256.
Part 2: Mixtral-8x7B on 2×H100 (tp 2) against a dense model of the same active size (12.9B: the
`mixtral-8x7b-dense-active` profile), both with a 1B-class draft (the Llama-3.2-1B profile as a stand-in: a real
Mixtral draft must share its tokenizer), α = 0.7, γ = 3.
Every row carries the simulated speedup, the method's own closed form (eq. (5) at the method's c, or the tree's),
and the one-line `why` where speculation loses.

Usage: .venv/bin/python experiments/methods_study.py
Writes experiments/results/methods_study.csv / .png / .md. About a minute on 2 cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from tqdm import tqdm

from specsim.simulate import make_config, run

RESULTS = REPO / "experiments" / "results"
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
ALPHA, GAMMA = 0.7, 3
TOPK = [0.7, 0.8, 0.85, 0.88]  # ASSUMED cumulative top-k acceptance (module doc)
TREE = '{"dynamic": 16, "top_k": 4, "depth": 4}'
COMMON = dict(stack="cuda-graphs", prompt_len=512, output_len=256, alpha=ALPHA, seed=0)
PROPOSERS = {"1B draft": dict(draft="llama-3.2-1b"), "EAGLE-3 head": dict(method="eagle3"),
             "MTP head": dict(method="mtp"), "n-gram": dict(method="ngram")}
KEYS = ("speedup", "speedup_eq5", "tokens_per_target_run", "tokens_per_target_run_eq1", "c", "batch_mean",
        "tree_nodes", "why", "draft", "method")


def points() -> list[tuple[str, str, dict]]:
    """(part, label, SimConfig fields) of every point."""
    out = []
    for name, kw in PROPOSERS.items():
        base = dict(COMMON, hardware="h100-sxm", target="llama-3.1-8b", **kw)
        out.append(("8B on 1xH100", f"{name}, chain γ={GAMMA}", dict(base, gamma=GAMMA)))
        if name != "n-gram":
            out.append(("8B on 1xH100", f"{name}, tree 16", dict(base, speculative_token_tree=TREE,
                                                                tree_topk_acceptance=TOPK)))
    for target, label in (("mixtral-8x7b", "Mixtral-8x7B (MoE)"), ("mixtral-8x7b-dense-active", "dense, same active")):
        out.append(("Mixtral on 2xH100", label, dict(COMMON, hardware="h100-sxm", tp=2, target=target,
                                                     draft="llama-3.2-1b", gamma=GAMMA)))
    return out


def sweep() -> pd.DataFrame:
    rows = []
    jobs = [(p, b) for p in points() for b in BATCHES]
    for (part, label, fields), b in tqdm(jobs, desc="methods study", file=sys.stderr):
        r = run(make_config(**fields, batch=b, requests=max(64, 2 * b)))
        rows.append({"part": part, "setup": label, "batch": b} | {k: r.get(k) for k in KEYS})
    return pd.DataFrame(rows)


def figure(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (part, g) in zip(axes, df.groupby("part", sort=False)):
        names = list(dict.fromkeys(s.split(",")[0] for s in g["setup"]))
        for setup, h in g.groupby("setup", sort=False):
            c = colours[names.index(setup.split(",")[0]) % len(colours)]
            style = "--" if "tree" in setup else "-"
            ax.plot(h["batch"], h["speedup"], style + "o", color=c, ms=4, label=setup)
        ax.axhline(1, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (closed loop)")
        ax.set_ylabel("simulated speedup over plain decoding")
        ax.set_title(part, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"α = {ALPHA} per draft token (assumed), prompt 512, output 256, CUDA-graph stack", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def findings(df: pd.DataFrame) -> list[str]:
    out = []
    one = df[(df.part == "8B on 1xH100")]
    for b in (1, 32, 256):
        at = one[one.batch == b].sort_values("speedup", ascending=False)
        best = at.iloc[0]
        out.append(f"- 8B, batch {b}: best {best.setup} at {best.speedup:.2f}× (closed form {best.speedup_eq5:.2f}×); "
                   f"the 1B draft chain {at[at.setup.str.startswith('1B draft, chain')].speedup.iloc[0]:.2f}×.")
    for setup, g in one.groupby("setup", sort=False):
        lose = g[g.speedup < 1]
        if len(lose):
            out.append(f"- {setup}: loses from batch {int(lose.batch.iloc[0])} — {lose.why.iloc[0]}.")
    mix = df[df.part == "Mixtral on 2xH100"]
    m, d = (mix[mix.setup == s].set_index("batch").speedup for s in ("Mixtral-8x7B (MoE)", "dense, same active"))
    flip = [b for b in BATCHES if m[b] > d[b]]
    out.append(f"- Mixtral vs the dense model of its active size, batch 1: {m[1]:.2f}× vs {d[1]:.2f}×"
               + (f"; the MoE target overtakes from batch {flip[0]} (one decode step there already wakes most "
                  f"experts, so verifying γ+1 positions reads little more)" if flip else "") + ".")
    why = mix[(mix.setup == "Mixtral-8x7B (MoE)") & (mix.batch == 1)].why.iloc[0]
    if isinstance(why, str):
        out.append(f"- Mixtral at batch 1: {why}.")
    return out


def markdown(df: pd.DataFrame) -> str:
    lines = ["# Methods study: proposers, trees, and a mixture-of-experts target", "",
             "Generated by `experiments/methods_study.py` (assumptions in its docstring: α = 0.7 per draft token "
             "for every proposer and the trees' top-k acceptance are ASSUMED; the EAGLE-3 head figures are from "
             "memory of the released configs and the MTP head is our own DeepSeek-V3-shaped construction, see "
             "`model_profiles/heads/`). Each point: max(64, 2 × batch) requests, closed loop.", "",
             "## Findings", ""] + findings(df) + ["", "## Speedup by batch", "",
                                                  "| part | setup | " + " | ".join(f"b{b}" for b in BATCHES) + " |",
                                                  "|---|---|" + "---|" * len(BATCHES)]
    for (part, setup), g in df.groupby(["part", "setup"], sort=False):
        s = g.set_index("batch")
        lines.append(f"| {part} | {setup} | " + " | ".join(f"{s.speedup[b]:.2f} ({s.speedup_eq5[b]:.2f})"
                                                            for b in BATCHES) + " |")
    lines += ["", "Cells: simulated speedup (the method's own closed form: eq. (5) at its c, or the tree's)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    df = sweep()
    df.to_csv(RESULTS / "methods_study.csv", index=False)
    figure(df, RESULTS / "methods_study.png")
    md = markdown(df)
    (RESULTS / "methods_study.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
