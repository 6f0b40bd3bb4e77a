"""Figure 1 of the seed: time of one forward pass against the number of new positions it scores.

The picture behind speculative decoding: at batch 1 a pass is bound by reading the weights, so scoring
γ+1 positions costs about as much as scoring one, until the arithmetic catches up at the ridge point.
Drawn for T5-XXL on one TPU v4 (the paper's setting), Llama-3.1-8B on an H100 SXM, and two small models
on a 2-core CPU, in idealized mode (datasheet roofline, no overheads) and calibrated mode (the hardware
profile's `default_stack`) side by side.

Usage: .venv/bin/python experiments/figure1.py [--context 0] [--cross-context 0]
Writes experiments/results/figure1.csv and figure1.png.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from specsim import profiles
from specsim.cost.roofline import CostModel, check_fits
from specsim.errors import SpecsimError
from specsim.profiles import IDEAL_STACK

RESULTS = Path(__file__).resolve().parent / "results"
# hardware -> models drawn on it (one row of panels each)
SETUPS: list[tuple[str, list[str]]] = [
    ("tpu-v4", ["t5-v1_1-xxl"]),
    ("h100-sxm", ["llama-3.1-8b"]),
    ("cpu-2core", ["qwen2.5-coder-0.5b", "smollm2-135m"]),
]
POSITIONS = list(range(1, 513))
MARK_AT = (1, 8, 64, 512)  # positions summarised on stdout (8 = γ+1 at γ = 7, the paper's T5-small setting)
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red"]


def _modes(hw) -> list[tuple[str, object]]:
    calibrated = profiles.stack(hw.default_stack)
    return [("ideal", IDEAL_STACK), ("calibrated", calibrated)]


def compute(context: int, cross_context: int) -> tuple[list[dict], list[dict]]:
    """All pass costs (one row per hardware, model, mode, positions) and one summary per curve."""
    rows, curves = [], []
    for hw_name, model_names in SETUPS:
        hw = profiles.hardware(hw_name)
        for mode, stack in _modes(hw):
            for model_name in model_names:
                m = profiles.model(model_name)
                cm = CostModel(m, hw, stack, cross_context=cross_context)
                used = check_fits([cm], batch=1, context=context + POSITIONS[-1])
                ridge = cm.ridge_positions(batch=1, context=context)
                t1 = cm.pass_time_s(1, 1, context)
                costs = [cm.pass_cost(1, p, context) for p in POSITIONS]
                for pc in costs:
                    rows.append({"hardware": hw_name, "model": model_name, "mode": mode, "stack": stack.name,
                                 "positions": pc.positions, "time_s": pc.time_s,
                                 "memory_time_s": pc.memory_time_s, "compute_time_s": pc.compute_time_s,
                                 "overhead_time_s": pc.overhead_time_s, "bound": pc.bound,
                                 "time_rel_1": pc.time_s / t1, "ridge_positions": ridge,
                                 "step_bytes": pc.bytes, "flops": pc.flops})
                curves.append({"hardware": hw_name, "model": model_name, "mode": mode, "stack": stack.name,
                               "ridge": ridge, "memory_gb": used / 1e9, "costs": costs, "t1": t1})
    return rows, curves


def plot(curves: list[dict], path: Path, context: int) -> None:
    fig, axes = plt.subplots(len(SETUPS), 2, figsize=(12, 4.2 * len(SETUPS)), squeeze=False)
    for i, (hw_name, model_names) in enumerate(SETUPS):
        for j, mode in enumerate(("ideal", "calibrated")):
            ax = axes[i][j]
            for k, model_name in enumerate(model_names):
                cv = next(c for c in curves if (c["hardware"], c["model"], c["mode"]) == (hw_name, model_name, mode))
                col = COLORS[k % len(COLORS)]
                xs = [pc.positions for pc in cv["costs"]]
                ax.plot(xs, [pc.time_s * 1e3 for pc in cv["costs"]], color=col, lw=2, label=f"{model_name} pass time")
                ax.plot(xs, [(pc.memory_time_s + pc.overhead_time_s) * 1e3 for pc in cv["costs"]], color=col,
                        ls="--", lw=1, alpha=0.7, label="memory side (+ overhead)")
                ax.plot(xs, [(pc.compute_time_s + pc.overhead_time_s) * 1e3 for pc in cv["costs"]], color=col,
                        ls=":", lw=1, alpha=0.7, label="compute side (+ overhead)")
                r = cv["ridge"]
                if r <= xs[-1]:
                    t_r = cv["costs"][r - 1].time_s * 1e3
                    ax.axvline(r, color=col, lw=0.8, alpha=0.5)
                    ax.plot([r], [t_r], "o", color=col, ms=7)
                    ax.annotate(f"ridge {r}", (r, t_r), textcoords="offset points", xytext=(-10, 10 + 14 * k),
                                ha="right", color=col, fontsize=9)
                else:
                    ax.annotate(f"{model_name}: ridge at {r} (> {xs[-1]})", (0.02, 0.92 - 0.08 * k),
                                xycoords="axes fraction", color=col, fontsize=9)
            stack_name = next(c["stack"] for c in curves if c["hardware"] == hw_name and c["mode"] == mode)
            title = f"{hw_name} — {mode}"
            if mode == "calibrated":
                title += f" (stack {stack_name})" if stack_name != "ideal" else " (no default_stack: = ideal)"
            ax.set_title(title, fontsize=10)
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
            ax.set_xlim(1, POSITIONS[-1])
            ax.set_xlabel("new positions scored in one pass (batch 1)")
            ax.set_ylabel("pass time (ms)")
            ax.grid(True, which="both", alpha=0.25)
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Figure 1: one forward pass vs positions (roofline; context {context}). "
                 "Flat = memory-bound: extra drafts are free to verify.", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=0, help="cached tokens per sequence (0 = the seed's picture)")
    ap.add_argument("--cross-context", type=int, default=0, help="encoder tokens a T5 decoder attends to")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    try:
        rows, curves = compute(args.context, args.cross_context)
    except SpecsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "figure1.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(curves, args.out / "figure1.png", args.context)

    print(f"{'hardware':<10} {'model':<20} {'mode':<10} {'stack':<16} {'ridge':>6} "
          + " ".join(f"{'t@' + str(p) + ' ms':>10}" for p in MARK_AT) + f" {'t8/t1':>6}")
    for cv in curves:
        ts = [cv["costs"][p - 1].time_s * 1e3 for p in MARK_AT]
        print(f"{cv['hardware']:<10} {cv['model']:<20} {cv['mode']:<10} {cv['stack']:<16} {cv['ridge']:>6} "
              + " ".join(f"{t:>10.4g}" for t in ts) + f" {cv['costs'][7].time_s / cv['t1']:>6.3f}")
    print(f"wrote {args.out / 'figure1.csv'} and {args.out / 'figure1.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
