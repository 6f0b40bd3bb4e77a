"""The built-in draft comparison (the README's main job).

T5-small/base/large as drafts for T5-XXL on one TPU v4 (α from the paper's Table 2 inputs) and Llama
drafts for Llama-3.1-8B on one H100 and Llama-3.1-70B on 4×H100. c is derived by the cost model from
the profiles; the closed form (eq. 5 at the optimal γ) is printed beside the simulated speedup.
"""

from __future__ import annotations

from dataclasses import dataclass

from specsim import theory as th
from specsim.setup.deployment import Deployment


@dataclass(frozen=True)
class Case:
    study: str
    hardware: str
    target: str
    draft: str
    alpha: float
    alpha_source: str
    tp: int = 1
    prompt_len: int = 128
    output_len: int = 128


# α for T5 pairs: PAPER-FACTS.md, Table 2 inputs (EnDe / CNNDM, T = 0 / 1).
_T5_ALPHA = {
    "t5-v1_1-small": {"EnDe T=0": 0.75, "EnDe T=1": 0.62, "CNNDM T=0": 0.65, "CNNDM T=1": 0.53},
    "t5-v1_1-base": {"EnDe T=0": 0.80, "EnDe T=1": 0.68, "CNNDM T=0": 0.73, "CNNDM T=1": 0.55},
    "t5-v1_1-large": {"EnDe T=0": 0.82, "EnDe T=1": 0.71, "CNNDM T=0": 0.74, "CNNDM T=1": 0.56},
}
# α for Llama pairs: no public figure for these exact pairs; illustrative values in the range the paper
# reports for drafts ~1-2 orders of magnitude smaller (0.5-0.9), marked "assumed" in every output.
_LLAMA_ALPHA = {"llama-3.2-1b": 0.65, "llama-3.2-3b": 0.72, "llama-3.1-8b": 0.78}


def default_cases() -> list[Case]:
    cases = [Case(f"T5-XXL / TPU v4 / {task}", "tpu-v4", "t5-v1_1-xxl", d, a, "paper Table 2 input")
             for d, by_task in _T5_ALPHA.items() for task, a in by_task.items()]
    cases += [Case("Llama-3.1-8B / H100 SXM", "h100-sxm", "llama-3.1-8b", d, _LLAMA_ALPHA[d], "assumed")
              for d in ("llama-3.2-1b", "llama-3.2-3b")]
    cases += [Case("Llama-3.1-70B / 4×H100 SXM", "h100-sxm", "llama-3.1-70b", d, _LLAMA_ALPHA[d], "assumed", tp=4)
              for d in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b")]
    return cases


def evaluate(case: Case, simulate: bool = True, requests: int = 16, seed: int = 0) -> dict:
    dep = Deployment.resolve(case.hardware, case.target, case.draft, tp=case.tp)
    c = dep.c(case.prompt_len)
    g = th.optimal_gamma(case.alpha, c)
    row = {"study": case.study, "hardware": case.hardware, "target": case.target, "draft": case.draft,
           "tp": case.tp, "alpha": case.alpha, "alpha_source": case.alpha_source, "stack": dep.stack.name, "c": c,
           "gamma": g, "tokens_per_run_eq1": th.expected_tokens(case.alpha, g),
           "speedup_eq5": th.speedup(case.alpha, g, c)}
    if simulate:
        from specsim.config import SimConfig
        from specsim.simulate import run

        cfg = SimConfig(hardware=case.hardware, target=case.target, draft=case.draft, tp=case.tp,
                        alpha=case.alpha, gamma=g, batch=1, requests=requests, prompt_len=case.prompt_len,
                        output_len=case.output_len, seed=seed)
        r = run(cfg)
        row["speedup_sim"] = r["speedup"]
        row["tokens_per_run_sim"] = r["tokens_per_target_run"]
    return row


def compare(cases: list[Case] | None = None, simulate: bool = True, progress: bool = True):
    import pandas as pd
    from tqdm import tqdm

    cases = cases or default_cases()
    rows = [evaluate(c, simulate) for c in tqdm(cases, desc="simulating", disable=not progress, leave=False)]
    df = pd.DataFrame(rows)
    df["rank_in_study"] = df.groupby("study")["speedup_sim" if simulate else "speedup_eq5"].rank(
        ascending=False, method="first").astype(int)
    return df


def plot(df, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    studies = list(dict.fromkeys(df["study"]))
    fig, axes = plt.subplots(1, len(studies), figsize=(2.6 * len(studies), 3.8), sharey=True, squeeze=False)
    col = "speedup_sim" if "speedup_sim" in df else "speedup_eq5"
    for ax, s in zip(axes[0], studies):
        d = df[df["study"] == s]
        x = np.arange(len(d))
        ax.bar(x - 0.2, d[col], 0.4, label="simulated" if col == "speedup_sim" else "eq. (5)", color="#2a9d8f")
        ax.bar(x + 0.2, d["speedup_eq5"], 0.4, label="eq. (5)", color="#e9c46a")
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(x, [f"{dr.replace('t5-v1_1-', 'T5-').replace('llama-', 'L')}\nα={a:g} γ={g}"
                          for dr, a, g in zip(d["draft"], d["alpha"], d["gamma"])], fontsize=7)
        ax.set_title(s, fontsize=8)
    axes[0][0].set_ylabel("walltime speedup vs plain decoding")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Draft choice: simulated speedup (batch 1, c derived from profiles) beside eq. (5)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
