"""Published GPU results of speculative decoding, predicted on the measured stack and on today's stacks.

Every row of ../shared/reference/published-gpu.md (series A: EAGLE-1 and EAGLE-3 on Llama-3.1-8B-Instruct, H100,
vLLM, batch 1, K = 2..7; series B: throughput at batch 1, same setup) is predicted from the row's plain figure
and its AL only:
- the plain figure calibrates what a cost basis cannot know, the engine's time per step: every target pass of the
  stack gets Δ = published plain step − the stack's own plain step (series A: 7.07 ms; series B: 1 / 133 tok/s).
  On the measured stack Δ is 0 for series A by construction (its plain term came from that figure);
- the acceptance is the row's AL (series B gives none: series A's AL at the same K, same model, heads, prompts);
- a speculative step = K draft passes + the head's once-per-step work + one verification of K + 1 tokens, at
  batch 1 and the calibration context (measured_stack.CAL_CONTEXT); TPOT = step / AL; speedup = plain / TPOT.
The measured stack's per-draft-pass terms come from the two K = 4 rows of series A (measured_stack.SPECULATIVE):
those rows are listed but never scored. Sensitivity: the same with the K = 2 rows as calibration instead.

Run: .venv/bin/python experiments/published_gpu.py  (writes experiments/results/published_gpu.{csv,md,png})
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsim.cost import measured_stack as ms  # noqa: E402
from specsim.methods import measured_heads as mh  # noqa: E402
from specsim.methods import heads  # noqa: E402
from specsim.profiles import loader  # noqa: E402
from specsim.setup.deployment import Deployment  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
HW, TARGET = "h100-sxm", "llama-3.1-8b"
HEADS = {"eagle": "eagle-llama-3.1-8b", "eagle3": "eagle3-llama-3.1-8b"}
PLAIN_A_S = 7.07e-3  # series A plain TPOT (vLLM issue 20780)
PLAIN_B_S = 1 / 133.0  # series B plain throughput 133 tok/s at batch 1 (vLLM PR 16937)
# series A (vLLM issue 20780): K -> (EAGLE-1 AL, TPOT ms, EAGLE-3 AL, TPOT ms)
SERIES_A = {2: (2.10, 4.37, 2.36, 4.32), 3: (2.29, 4.29, 2.79, 4.09), 4: (2.39, 4.48, 3.08, 4.05),
            5: (2.43, 4.71, 3.32, 4.13), 6: (2.45, 4.94, 3.46, 4.20), 7: (2.47, 5.20, 3.54, 4.29)}
# series B (vLLM PR 16937): (method, K) -> tok/s at batch 1
SERIES_B = {("eagle", 2): 201.69, ("eagle", 4): 198.0, ("eagle", 7): 169.92, ("eagle3", 2): 220.21}
PUBLISHED_BEST_K = {"eagle": 3, "eagle3": 4}
STACKS = ("vllm", "default", "cuda-graphs", "ideal")  # the measured stack, then today's


def rows() -> list[dict]:
    out = []
    for k, (al1, t1, al3, t3) in SERIES_A.items():
        for method, al, tpot in (("eagle", al1, t1), ("eagle3", al3, t3)):
            out.append({"series": "A", "method": method, "k": k, "al": al, "plain_s": PLAIN_A_S,
                        "published_tpot_s": tpot * 1e-3, "published_speedup": PLAIN_A_S / (tpot * 1e-3)})
    for (method, k), tok_s in SERIES_B.items():
        al = SERIES_A[k][0 if method == "eagle" else 2]
        out.append({"series": "B", "method": method, "k": k, "al": al, "plain_s": PLAIN_B_S,
                    "published_tpot_s": 1 / tok_s, "published_speedup": tok_s * PLAIN_B_S})
    return out


def models(stack: str, method: str, terms: ms.EngineTerms | None = None):
    d = Deployment.resolve(HW, TARGET, HEADS[method], stack=None if stack == "default" else stack, method=method)
    target, head = d.cost_models
    if terms is not None:  # the sensitivity run: other calibration rows, same formula
        hw = loader.hardware(HW)
        target = ms.model_cost(d.target, hw, d.stack.engine, d.stack.version, 1, terms)
        head = mh.head_cost(d.draft, hw, d.stack.engine, d.stack.version, 1, terms)
    return target, head


def predict(row: dict, target, head, context: int = ms.CAL_CONTEXT) -> dict:
    k = row["k"]
    delta = row["plain_s"] - target.pass_time_s(1, 1, context)  # the row's plain figure calibrates the step
    once = head.step_once_cost(1)[0] if hasattr(head, "step_once_cost") else 0.0
    step = target.pass_time_s(1, k + 1, context) + delta + k * head.pass_time_s(1, 1, context) + once
    tpot = step / row["al"]
    return {"tpot_s": tpot, "speedup": row["plain_s"] / tpot, "delta_s": delta}


def terms_from(k_cal: int) -> ms.EngineTerms:
    """The vLLM terms with the per-draft-pass ones taken from the series-A rows at K = k_cal instead."""
    base = mh.engine_terms("vllm", "0.24.0")
    hw = loader.hardware(HW)
    target = ms.model_cost(loader.model(TARGET), hw, "vllm", "0.24.0", 1, base)
    draft, src = {}, dict(base.sources)
    for method, row in (("eagle", ms.SPECULATIVE[("vllm", "eagle")]), ("eagle3", ms.SPECULATIVE[("vllm", "eagle3")])):
        al, tpot = SERIES_A[k_cal][0:2] if method == "eagle" else SERIES_A[k_cal][2:4]
        r = replace(row, k=k_cal, al=al, tpot_s=tpot * 1e-3)
        draft[method] = ms.per_pass_from_row(target, mh.head_cost(heads.head(HEADS[method]), hw, "vllm", "0.24.0", 1,
                                                                  base), base.step_s, r)
        src[f"draft_pass_s.{method}"] = f"series A K = {k_cal} row"
    return replace(base, draft_pass_s=draft, sources=src)


def run() -> tuple[list[dict], dict]:
    table, summary = [], {}
    variants = [(s, None, s) for s in STACKS] + [("vllm", 2, "vllm (K=2 rows calibrate)")]
    for stack, k_cal, label in variants:
        terms = terms_from(k_cal) if k_cal else None
        cal_k = k_cal or ms.SPECULATIVE[("vllm", "eagle")].k
        errs, by_method = [], {}
        for row in rows():
            target, head = models(stack, row["method"], terms)
            p = predict(row, target, head)
            calibration = stack == "vllm" and row["series"] == "A" and row["k"] == cal_k
            err = p["speedup"] / row["published_speedup"] - 1
            table.append({**row, "stack": label, "predicted_tpot_s": p["tpot_s"], "predicted_speedup": p["speedup"],
                          "speedup_error": err, "calibration_row": calibration, "plain_delta_s": p["delta_s"]})
            if not calibration:
                errs.append(abs(err))
                by_method.setdefault(row["method"], []).append(abs(err))
            if row["series"] == "A":
                by_method.setdefault(("tpot", row["method"]), []).append((p["tpot_s"], row["k"]))
        best = {m: min(by_method[("tpot", m)])[1] for m in HEADS}
        summary[label] = {"median_abs_speedup_error": statistics.median(errs), "max_abs_speedup_error": max(errs),
                          "scored_rows": len(errs), "best_k": best,
                          **{f"median_{m}": statistics.median(by_method[m]) for m in HEADS}}
    return table, summary


def write(table: list[dict], summary: dict) -> None:
    import csv

    OUT.mkdir(parents=True, exist_ok=True)
    cols = ["stack", "series", "method", "k", "al", "plain_s", "published_tpot_s", "predicted_tpot_s",
            "published_speedup", "predicted_speedup", "speedup_error", "calibration_row", "plain_delta_s"]
    with open(OUT / "published_gpu.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in table:
            w.writerow({c: (f"{r[c]:.6g}" if isinstance(r[c], float) else r[c]) for c in cols})
    terms = mh.engine_terms("vllm", "0.24.0")
    lines = ["# Published GPU results predicted (experiments/published_gpu.py)", "",
             "Rows: ../shared/reference/published-gpu.md series A (vLLM issue 20780) and B (vLLM PR 16937), "
             "Llama-3.1-8B-Instruct on H100, batch 1. Predicted from each row's plain figure and AL only "
             "(module doc). Calibration rows (measured stack only, never scored): series A K = 4 of EAGLE-1 and "
             "EAGLE-3.", "",
             f"vLLM engine terms: plain step {terms.step_s * 1e3:.3f} ms; per draft pass EAGLE-1 "
             f"{terms.draft_pass_s['eagle'] * 1e3:.3f} ms, EAGLE-3 {terms.draft_pass_s['eagle3'] * 1e3:.3f} ms.", "",
             "| stack | median abs speedup error | max | EAGLE-1 median | EAGLE-3 median | best K E1 / E3 "
             "(published 3 / 4) | rows |", "|---|---|---|---|---|---|---|"]
    for label, s in summary.items():
        lines.append(f"| {label} | {s['median_abs_speedup_error']:.1%} | {s['max_abs_speedup_error']:.1%} | "
                     f"{s['median_eagle']:.1%} | {s['median_eagle3']:.1%} | {s['best_k']['eagle']} / "
                     f"{s['best_k']['eagle3']} | {s['scored_rows']} |")
    lines += ["", "Per row (measured stack `vllm`):", "",
              "| series | method | K | AL | published TPOT ms | predicted TPOT ms | published speedup | "
              "predicted | error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        if r["stack"] == "vllm":
            tag = " (calibration)" if r["calibration_row"] else ""
            lines.append(f"| {r['series']} | {r['method']} | {r['k']}{tag} | {r['al']} | "
                         f"{r['published_tpot_s'] * 1e3:.2f} | {r['predicted_tpot_s'] * 1e3:.2f} | "
                         f"{r['published_speedup']:.3f} | {r['predicted_speedup']:.3f} | {r['speedup_error']:+.1%} |")
    (OUT / "published_gpu.md").write_text("\n".join(lines) + "\n")
    plot(table)


def plot(table: list[dict]) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5))
    marks = {"vllm": "o", "default": "s", "cuda-graphs": "^", "ideal": "x"}
    for stack, m in marks.items():
        rs = [r for r in table if r["stack"] == stack and not r["calibration_row"]]
        a.scatter([r["published_speedup"] for r in rs], [r["predicted_speedup"] for r in rs], marker=m, label=stack)
    lim = [1.0, 3.2]
    a.plot(lim, lim, "k--", lw=0.8)
    a.set_xlabel("published speedup")
    a.set_ylabel("predicted speedup")
    a.set_title("Speedup, every scored row")
    a.legend()
    for method, color in (("eagle", "C0"), ("eagle3", "C1")):
        rs = [r for r in table if r["stack"] == "vllm" and r["series"] == "A" and r["method"] == method]
        b.plot([r["k"] for r in rs], [r["published_tpot_s"] * 1e3 for r in rs], "-o", color=color,
               label=f"{method} published")
        b.plot([r["k"] for r in rs], [r["predicted_tpot_s"] * 1e3 for r in rs], "--s", color=color,
               label=f"{method} measured stack")
    b.set_xlabel("K (num_speculative_tokens)")
    b.set_ylabel("TPOT, ms")
    b.set_title("Series A: TPOT vs K (H100, batch 1)")
    b.legend()
    fig.tight_layout()
    fig.savefig(OUT / "published_gpu.png", dpi=120)


if __name__ == "__main__":
    t, s = run()
    write(t, s)
    for label, v in s.items():
        print(label, {k: (round(x, 4) if isinstance(x, float) else x) for k, x in v.items()})
