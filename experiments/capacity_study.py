"""Capacity-planning study: up to which load does speculative decoding pay, and which γ should each load band run?

Two setups, each a resumable sweep (specs in experiments/sweeps/, results.parquet in the scratch directory):
1. Llama-3.1-70B on 4×H100 SXM (tp 4, CUDA-graph stack) with Llama-3.2-1B and Llama-3.1-8B drafts, α ASSUMED
   (0.65 / 0.78: no published α for these pairs). Step 1, closed loop over batch sizes, finds the baseline's
   saturation throughput (and the break-even batch); step 2, Poisson arrivals from low load to past that
   saturation: speedup against rate, TPOT / end-to-end latency against throughput with and without speculation.
2. T5-XXL on one TPU v4 (T5X stack) with T5-small / base / large drafts, α from the paper (EnDe, T = 0:
   0.75 / 0.80 / 0.82), γ 1..8, closed loop over batch sizes 1..256 (the chip's memory stops the batch first).
Per load point the recommended γ is choose-draft's schedule (`specsim.setup.gamma_schedule.monotone`: never rising with
load, a band boundary moved only where the speedup difference exceeds max(2%, 2σ), 0 = off from the first load
where no γ pays; σ from each run's tokens-per-step histogram over the seeds) and the bands have the shape of vLLM's
`num_speculative_tokens_per_batch_size`; the best γ is the smallest within 2% of the best at that load alone. The
Llama setup runs on two stacks: `cuda-graphs` (roofline) and `vllm` (measured kernels, issue 22; files *_vllm.*);
T5 on TPU v4 has no measured kernels and stays on its roofline stack. Every
simulated speedup is printed beside eq. (5) at the same γ (c at batch 1), and beside eq. (5)'s own optimum.

Usage: .venv/bin/python experiments/capacity_study.py [--scratch DIR] [--workers N] [--no-progress]
Writes experiments/results/capacity_*.csv and capacity_*.png; sweep outputs go to the scratch directory
(default experiments/results/capacity/, which holds a .gitignore so the parquet files are never committed).
A rerun reuses every finished point. Takes ~7 minutes on 2 shared cores from scratch, ~40 s to rerun.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specsim import theory
from specsim.setup import gamma_schedule as schedule
from specsim.studies.choose import GAMMA_TOLERANCE, bands, bands_text
from specsim.cli.output import table
from specsim.sweep import load_spec, run_sweep

RESULTS = REPO / "experiments" / "results"
SWEEPS = REPO / "experiments" / "sweeps"
SPECS = {"llama70b_batch": "capacity_llama70b_batch.toml", "llama70b_rate": "capacity_llama70b_rate.toml",
         "llama70b_batch_vllm": "capacity_llama70b_batch_vllm.toml",
         "llama70b_rate_vllm": "capacity_llama70b_rate_vllm.toml", "t5xxl_batch": "capacity_t5xxl_batch.toml"}
# the Llama setup on each stack: file suffix and label (T5 on TPU v4 has no measured kernels: roofline stack only)
STACKS = {"cuda-graphs": ("", "CUDA graphs"), "vllm": ("_vllm", "measured vLLM kernels")}
SOURCE = {"llama-3.2-1b": "assumed", "llama-3.1-8b": "assumed", "t5-v1_1-small": "paper EnDe T=0",
          "t5-v1_1-base": "paper EnDe T=0", "t5-v1_1-large": "paper EnDe T=0"}
SHORT = {"llama-3.2-1b": "Llama-3.2-1B", "llama-3.1-8b": "Llama-3.1-8B", "t5-v1_1-small": "T5-small",
         "t5-v1_1-base": "T5-base", "t5-v1_1-large": "T5-large"}
LLAMA = "Llama-3.1-70B on 4×H100 SXM (tp 4, {})"
T5 = "T5-XXL on 1×TPU v4 (T5X)"
METRICS = ["speedup", "speedup_eq5", "c", "c_at_batch", "tokens_per_target_run", "tokens_per_target_run_eq1",
           "throughput_tok_s", "ttft_p50_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s", "e2e_p99_s",
           "goodput_req_s", "batch_mean", "batch_max"]
BASE = [f"baseline_{m}" for m in METRICS[6:]]
COST = ["energy_ratio", "usd_ratio", "energy_j_per_token", "baseline_energy_j_per_token"]  # measured power model


# --- sweeps and tables ---------------------------------------------------------------------------------

def sweep(key: str, scratch: Path, workers: int | None, progress: bool) -> pd.DataFrame:
    rep = run_sweep(SWEEPS / SPECS[key], scratch / key, workers=workers, progress=progress, plots=False)
    print(f"  {key}: {rep.points} points ({rep.computed} computed, {rep.reused} reused) in {rep.wall_s:.1f} s")
    df = pd.read_parquet(rep.results)
    bad = df[df["error"].notna()]
    if len(bad):
        raise SystemExit(f"{len(bad)} points of {key} failed, e.g.: {bad['error'].iloc[0]}")
    return df


def aggregate(df: pd.DataFrame, load: str) -> pd.DataFrame:
    """Mean over seeds per (draft, γ, load), with the mean's noise (`schedule.speedup_noise` over √seeds); α
    labelled with where it comes from."""
    hist = [json.loads(h) if isinstance(h, str) else h for h in df["tokens_per_run_hist"]]  # a sweep's cell is JSON
    df = df.assign(noise_sq=[schedule.speedup_noise({"speedup": s, "tokens_per_run_hist": h}) ** 2
                             for s, h in zip(df["speedup"], hist)], seeds=1)
    keys = ["draft", "alpha", "gamma", load]
    agg = df.groupby(keys, as_index=False)[METRICS + BASE + COST + ["noise_sq"]].mean()
    agg["speedup_noise"] = np.sqrt(agg.pop("noise_sq") / df.groupby(keys)["seeds"].sum().to_numpy())
    agg = agg.sort_values(["draft", "gamma", load], key=lambda c: c.map(list(SHORT).index) if c.name == "draft"
                          else c, kind="stable", ignore_index=True)  # drafts small to large, as in SHORT
    agg.insert(2, "alpha_source", agg["draft"].map(SOURCE))
    agg["speedup_eq5_c_at_batch"] = [float(theory.speedup(a, g, c)) for a, g, c in
                                     zip(agg["alpha"], agg["gamma"], agg["c_at_batch"])]
    return agg


def decide(agg: pd.DataFrame, load: str) -> pd.DataFrame:
    """Per (draft, load): best γ (the smallest within 2% of the best simulated speedup, at this load alone) and
    recommended γ by `specsim.setup.gamma_schedule.monotone` (choose-draft's schedule: never rising with load, a band
    boundary moved only beyond the noise, off from the first load where no allowed γ pays), beside eq. (5)."""
    rows = []
    for draft, gd in agg.groupby("draft", sort=False):
        groups = [(x, g.sort_values("gamma")) for x, g in gd.groupby(load, sort=True)]
        pts = [{"speedup_by_gamma": g["speedup"].tolist(), "speedup_noise_by_gamma": g["speedup_noise"].tolist(),
                "best_gamma": int(g["gamma"].iloc[0])} for _, g in groups]
        for (x, g), rec in zip(groups, schedule.monotone(pts)):
            s = g["speedup"].to_numpy()
            ok = s >= s.max() * (1.0 - GAMMA_TOLERANCE)
            if s.max() > 1.0:
                ok &= s > 1.0
            b = g.iloc[int(np.flatnonzero(ok)[0])]
            a, c = float(b["alpha"]), float(b["c"])
            g_opt = int(theory.optimal_gamma(a, c, gamma_max=int(agg["gamma"].max())))
            r = g[g["gamma"] == rec].iloc[0] if rec else b
            rows.append({"draft": draft, "alpha": a, "alpha_source": SOURCE[draft], load: x, "c": c,
                         "best_gamma": int(b["gamma"]), "recommended_gamma": int(rec),
                         "speedup_sim": float(b["speedup"]), "speedup_rec": float(r["speedup"]) if rec else 1.0,
                         "speedup_eq5": float(b["speedup_eq5"]), "gamma_eq5_opt": g_opt,
                         "speedup_eq5_opt": float(theory.speedup(a, g_opt, c)), "tpot_p50_s": float(r["tpot_p50_s"]),
                         "baseline_tpot_p50_s": float(b["baseline_tpot_p50_s"]), "batch_max": float(b["batch_max"]),
                         "baseline_batch_max": float(b["baseline_batch_max"])})
    return pd.DataFrame(rows)


def crossing(x: np.ndarray, s: np.ndarray) -> tuple[float | None, float | None]:
    """First measured load with speedup < 1, and the load where the line between it and its predecessor hits 1."""
    below = np.flatnonzero(s < 1.0)
    if not len(below):
        return None, None
    i = int(below[0])
    if i == 0:
        return float(x[0]), float(x[0])
    return float(x[i]), float(x[i - 1] + (s[i - 1] - 1.0) * (x[i] - x[i - 1]) / (s[i - 1] - s[i]))


def break_even(agg: pd.DataFrame, dec: pd.DataFrame, load: str, setup: str) -> pd.DataFrame:
    """Per draft: where the best γ stops paying, and where each fixed γ does (eq. 5 never predicts one)."""
    rows = []
    for draft, g in agg.groupby("draft", sort=False):
        d = dec[dec["draft"] == draft].sort_values(load)
        lines = [("best", d[load].to_numpy(), d["speedup_sim"].to_numpy(), d)]
        lines += [(str(k), h[load].to_numpy(), h["speedup"].to_numpy(), h)
                  for k, h in ((k, h.sort_values(load)) for k, h in g.groupby("gamma"))]
        for gamma, x, s, _h in lines:
            meas, interp = crossing(x, s)
            rows.append({"setup": setup, "draft": draft, "alpha": float(g["alpha"].iloc[0]),
                         "alpha_source": SOURCE[draft], "gamma": gamma, "load_kind": load,
                         "break_even_measured": meas, "break_even_interpolated": interp,
                         "largest_load": float(x[-1]), "speedup_at_largest_load": float(s[-1])})
    return pd.DataFrame(rows)


def save_csv(df: pd.DataFrame, name: str) -> Path:
    path = RESULTS / name
    df.to_csv(path, index=False, float_format="%.6g")
    return path


# --- figures --------------------------------------------------------------------------------------------

def _save(fig, name: str) -> Path:
    path = RESULTS / name
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _gamma_colors(gammas) -> dict:
    cmap = plt.get_cmap("viridis")
    gs = sorted(gammas)
    return {g: cmap(0.05 + 0.85 * i / max(1, len(gs) - 1)) for i, g in enumerate(gs)}


def plot_speedup_vs_rate(agg, dec, sat_rate: float, rate_max: float, lengths: str, label: str, sfx: str) -> Path:
    drafts = list(dict.fromkeys(agg["draft"]))
    colors = _gamma_colors(agg["gamma"].unique())
    fig, axes = plt.subplots(1, len(drafts), figsize=(6.4 * len(drafts), 4.8), sharey=True, layout="constrained")
    for ax, draft in zip(np.atleast_1d(axes), drafts):
        d = dec[dec["draft"] == draft].sort_values("rate")
        for k, b in enumerate(bands(d["rate"].tolist(), d["recommended_gamma"].tolist(), "rate")):
            lo = 0 if k == 0 else b["min"]
            hi = b["max"] if not b["max_inclusive"] else rate_max * 1.04
            shade = "#f6d5d5" if b["gamma"] == 0 else ("#ececec" if k % 2 == 0 else "#ffffff")
            ax.axvspan(lo, hi, color=shade, lw=0, zorder=0)
            ax.text((lo + hi) / 2, 0.985, "off" if b["gamma"] == 0 else f"γ={b['gamma']}", ha="center",
                    va="top", fontsize=8, transform=ax.get_xaxis_transform(), weight="bold")
        for gamma, g in agg[agg["draft"] == draft].groupby("gamma"):
            g = g.sort_values("rate")
            ax.plot(g["rate"], g["speedup"], marker="o", ms=3, lw=1.4, color=colors[gamma], label=f"γ={gamma}")
            ax.plot([0, rate_max * 0.06], [g["speedup_eq5"].iloc[0]] * 2, color=colors[gamma], lw=3,
                    solid_capstyle="butt")
        ax.axhline(1.0, color="black", lw=1)
        ax.axvline(sat_rate, color="0.3", ls="--", lw=1)
        ax.text(sat_rate, 0.9, "baseline saturation", fontsize=7, color="0.3", ha="center", va="center",
                transform=ax.get_xaxis_transform(), bbox={"fc": "white", "ec": "none", "pad": 1})
        ax.set_xlim(0, rate_max * 1.04)
        ax.set_ylim(0.4, 2.35)
        ax.set_xlabel("Poisson request rate (requests/s)")
        top = ax.secondary_xaxis("top", functions=(lambda r: 100 * r / sat_rate, lambda p: p * sat_rate / 100))
        top.set_xlabel("% of no-speculation saturation rate", fontsize=8)
        a = float(d["alpha"].iloc[0])
        ax.set_title(f"draft {SHORT[draft]}, α = {a:g} (assumed), c = {d['c'].iloc[0]:.3f}", fontsize=9)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("speedup (mean e2e latency, baseline / speculative)")
    np.atleast_1d(axes)[-1].legend(fontsize=7, loc="lower left", title="simulated; bars at left: eq. (5)",
                                   title_fontsize=7)
    fig.suptitle(f"{label}: speedup against load; bands = recommended γ per load "
                 f"({lengths})", fontsize=10)
    return _save(fig, f"capacity_llama70b_speedup_vs_rate{sfx}.png")


def plot_latency_throughput(agg, lengths: str, label: str, sfx: str) -> Path:
    drafts = list(dict.fromkeys(agg["draft"]))
    colors = _gamma_colors(agg["gamma"].unique())
    metrics = [("tpot_p50_s", "TPOT p50 (ms)", 1e3), ("e2e_p50_s", "end-to-end latency p50 (s)", 1.0)]
    fig, axes = plt.subplots(len(drafts), 2, figsize=(11, 3.9 * len(drafts)), squeeze=False, layout="constrained")
    for row, draft in zip(axes, drafts):
        sub = agg[agg["draft"] == draft]
        base = sub[sub["gamma"] == sub["gamma"].min()].sort_values("rate")
        for ax, (m, label, scale) in zip(row, metrics):
            for gamma, g in sub.groupby("gamma"):
                g = g.sort_values("rate")
                ax.plot(g["throughput_tok_s"], g[m] * scale, marker="o", ms=3, color=colors[gamma], lw=1.3,
                        label=f"speculative γ={gamma}")
            ax.plot(base["baseline_throughput_tok_s"], base[f"baseline_{m}"] * scale, "k--", marker="s", ms=3,
                    lw=1.6, label="no speculation")
            ymax = 1.6 * float((base[f"baseline_{m}"] * scale).max())
            ax.set_ylim(0, ymax)
            ax.set_xlabel("output throughput (tokens/s)")
            ax.set_ylabel(label)
            a = float(sub["alpha"].iloc[0])
            ax.set_title(f"draft {SHORT[draft]}, α = {a:g} (assumed)", fontsize=9)
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{label}: latency against throughput over Poisson rates {agg['rate'].min():g}–"
                 f"{agg['rate'].max():g} req/s, {lengths}\n"
                 "(each point one rate; curves turn up at saturation)", fontsize=10)
    return _save(fig, f"capacity_llama70b_latency_throughput{sfx}.png")


def plot_heatmaps(agg, dec, title: str, name: str, max_rows: int | None = None) -> Path:
    """Speedup over batch × γ per draft; boxed = recommended γ; black line = 1.0; † = fewer requests fit."""
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    drafts = list(dict.fromkeys(agg["draft"]))
    if max_rows is not None:
        agg = agg[agg["batch"] <= max_rows]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(0.7, agg["speedup"].min()), vmax=max(1.5, agg["speedup"].max()))
    fig, axes = plt.subplots(1, len(drafts), figsize=(4.4 * len(drafts) + 1, 5.0), squeeze=False,
                             layout="constrained")
    for ax, draft in zip(axes[0], drafts):
        sub = agg[agg["draft"] == draft]
        p = sub.pivot_table(index="batch", columns="gamma", values="speedup")
        capped = sub.pivot_table(index="batch", columns="gamma", values="batch_max") < p.index.to_numpy()[:, None]
        z = p.to_numpy(dtype=float)
        im = ax.imshow(z, origin="lower", aspect="auto", cmap="RdYlGn", norm=norm)
        for (r, c), v in np.ndenumerate(z):
            ax.text(c, r, f"{v:.2f}" + ("†" if capped.iloc[r, c] else ""), ha="center", va="center", fontsize=6.5)
        if z.min() < 1.0 < z.max():
            ax.contour(np.arange(z.shape[1]), np.arange(z.shape[0]), z, levels=[1.0], colors="black",
                       linewidths=1.6)
        d = dec[dec["draft"] == draft].set_index("batch")
        for r, b in enumerate(p.index):
            rec = int(d.loc[b, "recommended_gamma"])
            if rec:
                ax.add_patch(Rectangle((list(p.columns).index(rec) - 0.5, r - 0.5), 1, 1, fill=False, lw=1.8,
                                       ec="navy"))
        ax.set_xticks(range(len(p.columns)), [str(g) for g in p.columns])
        ax.set_yticks(range(len(p.index)), [str(b) for b in p.index])
        ax.set_xlabel("γ (draft tokens per step)")
        ax.set_ylabel("batch (concurrent requests, closed loop)")
        a = float(sub["alpha"].iloc[0])
        ax.set_title(f"{SHORT[draft]}, α = {a:g} ({SOURCE[draft]}), c = {sub['c'].iloc[0]:.3f}", fontsize=8.5)
    fig.colorbar(im, ax=axes.ravel().tolist(), label="speedup (black line: 1.0)", shrink=0.9)
    fig.suptitle(title, fontsize=9.5)
    return _save(fig, name)


# --- the printed summary ---------------------------------------------------------------------------------

def _fmt_load(x, kind: str) -> str:
    return "none" if x is None or pd.isna(x) else (f"{x:g} req/s" if kind == "rate" else f"batch {x:g}")


def print_summary(setup: str, kind: str, dec: pd.DataFrame, be: pd.DataFrame, sat_rate: float | None) -> None:
    for draft, d in dec.groupby("draft", sort=False):
        d = d.sort_values(kind)
        b = be[(be["draft"] == draft) & (be["gamma"] == "best")].iloc[0]
        loads = d[kind].tolist()
        bs = bands(loads, d["recommended_gamma"].tolist(), kind)
        meas = b["break_even_measured"]
        be_txt = (f"break-even {_fmt_load(meas, kind)} (interpolated {b['break_even_interpolated']:.3g})"
                  if meas is not None and not pd.isna(meas) else
                  f"break-even: none ≤ {loads[-1]:g} (still {b['speedup_at_largest_load']:.2f}× there)")
        rows = []
        for _, r in d.iterrows():
            x = r[kind]
            head = [f"{x:g}", f"{100 * x / sat_rate:.0f}%"] if sat_rate else [f"{x:g}"]
            rows.append(head + [r["recommended_gamma"] or "off", r["best_gamma"], r["speedup_rec"], r["speedup_sim"],
                                r["speedup_eq5"], r["gamma_eq5_opt"], r["speedup_eq5_opt"], r["tpot_p50_s"] * 1e3,
                                r["baseline_tpot_p50_s"] * 1e3])
        cols = ([kind, "% sat"] if sat_rate else [kind]) + [
            "rec. γ", "best γ", "speedup at rec.", "at best", "eq5 best γ", "eq5 γ*", "eq5 at γ*", "TPOT p50 ms",
            "base TPOT ms"]
        table(f"{setup} — draft {SHORT[draft]}, α={d['alpha'].iloc[0]:g} ({SOURCE[draft]}), "
              f"c={d['c'].iloc[0]:.3f}", cols, rows, caption=f"{be_txt}; {bands_text(bs, kind)}")


def lengths(spec) -> str:
    f = spec.fixed
    mean = "~" if f.get("length_dist") == "uniform" else ""
    return f"prompt {mean}{f.get('prompt_len', 128)}, output {mean}{f.get('output_len', 128)} tokens"


def check_rate_grid(rates, sat_rate: float, spec_name: str) -> None:
    lo, hi = min(rates), max(rates)
    if lo > 0.1 * sat_rate or hi < 1.15 * sat_rate:
        warnings.warn(f"the rate grid {lo:g}..{hi:g} req/s does not span 10%..115% of the measured saturation "
                      f"{sat_rate:.3g} req/s; edit {spec_name}", stacklevel=2)


def llama_setup(stack: str, scratch: Path, workers, prog: bool, files: list) -> dict:
    """Steps 1-2 for the Llama setup on one stack: closed loop (saturation, break-even batch), then Poisson."""
    sfx, name = STACKS[stack]
    label = LLAMA.format(name)
    print(f"Step 1 ({stack}): Llama-3.1-70B closed loop over batch sizes (saturation throughput, break-even batch)")
    lb = aggregate(sweep("llama70b_batch" + sfx, scratch, workers, prog), "batch")
    cap = int(lb["batch"].max())
    sat_tok_s = float(lb.loc[lb["batch"] == cap, "baseline_throughput_tok_s"].mean())
    spec_r = load_spec(SWEEPS / SPECS["llama70b_rate" + sfx])
    out_mean = float(spec_r.fixed.get("output_len", 128))
    sat_rate = sat_tok_s / out_mean
    print(f"  no-speculation saturation: {sat_tok_s:,.0f} output tokens/s at batch {cap} = {sat_rate:.2f} "
          f"requests/s of {out_mean:g} output tokens on average")
    check_rate_grid(spec_r.axes["rate"], sat_rate, SPECS["llama70b_rate" + sfx])
    print(f"Step 2 ({stack}): Llama-3.1-70B under Poisson arrivals")
    lr = aggregate(sweep("llama70b_rate" + sfx, scratch, workers, prog), "rate")
    lr.insert(4, "rate_pct_of_saturation", 100 * lr["rate"] / sat_rate)
    d_lr, d_lb = decide(lr, "rate"), decide(lb, "batch")
    be = [break_even(lr, d_lr, "rate", label + ", Poisson"), break_even(lb, d_lb, "batch", label + ", closed loop")]
    files += [save_csv(lr, f"capacity_llama70b_rate{sfx}.csv"), save_csv(lb, f"capacity_llama70b_batch{sfx}.csv")]
    files.append(plot_speedup_vs_rate(lr, d_lr, sat_rate, float(lr["rate"].max()), lengths(spec_r), label, sfx))
    files.append(plot_latency_throughput(lr, lengths(spec_r), label, sfx))
    files.append(plot_heatmaps(lb, d_lb, f"{label}, closed loop: speedup over batch × γ (α assumed; boxed = "
                               "recommended γ)", f"capacity_llama70b_batch_heatmap{sfx}.png"))
    return {"label": label, "sat_rate": sat_rate, "d_lr": d_lr, "d_lb": d_lb, "be": be,
            "parts": [(d_lr, label + ", Poisson", "rate"), (d_lb, label + ", closed loop", "batch")]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scratch", type=Path, default=RESULTS / "capacity", help="sweep output directories")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: all CPUs)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    args.scratch.mkdir(parents=True, exist_ok=True)
    (args.scratch / ".gitignore").write_text("# sweep outputs of experiments/capacity_study.py: never commit\n*\n")
    prog = not args.no_progress
    files: list[Path] = []

    be_parts, sum_parts, llama = [], [], []
    for stack in STACKS:
        got = llama_setup(stack, args.scratch, args.workers, prog, files)
        llama.append(got)
        be_parts += got["be"]
        sum_parts += got["parts"]
    print("Step 3: T5-XXL on TPU v4, closed loop over batch sizes")
    tb = aggregate(sweep("t5xxl_batch", args.scratch, args.workers, prog), "batch")
    tb["memory_capped"] = tb["batch_max"] < tb["batch"]
    tb["baseline_memory_capped"] = tb["baseline_batch_max"] < tb["batch"]
    t5_fit = int(tb["baseline_batch_max"].max())  # batches above this run at what fits: same rows

    d_tb = decide(tb[tb["batch"] <= t5_fit], "batch")
    be = pd.concat(be_parts + [break_even(tb[tb["batch"] <= t5_fit], d_tb, "batch", T5 + ", closed loop")],
                   ignore_index=True)
    parts = sum_parts + [(d_tb, T5 + ", closed loop", "batch")]
    summary = pd.concat([d.assign(setup=name, load_kind=k).rename(columns={k: "load"}) for d, name, k in parts],
                        ignore_index=True)
    summary = summary[["setup", "load_kind", "load"] + [c for c in summary.columns
                                                        if c not in ("setup", "load_kind", "load")]]
    files += [save_csv(tb, "capacity_t5xxl_batch.csv"), save_csv(summary, "capacity_summary.csv"),
              save_csv(be, "capacity_break_even.csv")]
    over = " and ".join(str(b) for b in sorted(tb.loc[tb["batch"] > t5_fit, "batch"].unique())) or "above it"
    t5_len = lengths(load_spec(SWEEPS / SPECS["t5xxl_batch"]))
    files.append(plot_heatmaps(tb, d_tb, f"{T5}, closed loop, {t5_len}: speedup over "
                               f"batch × γ (boxed = recommended γ)\n† = fewer requests fit with the draft than "
                               f"asked (it runs at what fits); the 32 GB chip holds at most {t5_fit} requests even "
                               f"without a draft, so batches {over} equal the top row",
                               "capacity_t5xxl_heatmap.png", max_rows=t5_fit))

    print()
    for got in llama:
        lab = got["label"]
        print_summary(lab + ", Poisson", "rate", got["d_lr"], be[be["setup"] == lab + ", Poisson"], got["sat_rate"])
        print_summary(lab + ", closed loop", "batch", got["d_lb"], be[be["setup"] == lab + ", closed loop"], None)
    print_summary(T5 + ", closed loop", "batch", d_tb, be[be["setup"] == T5 + ", closed loop"], None)
    fits = tb[tb["batch"] == tb["batch"].max()].groupby("draft", sort=False)["batch_max"].agg(["min", "max"])
    print(f"T5-XXL memory (32 GB): baseline fits {t5_fit} requests; with the draft: "
          + ", ".join(f"{SHORT[d]} {int(r['min'])}–{int(r['max'])}" for d, r in fits.iterrows()) + " (by γ)")
    print("Break-even per fixed γ (interpolated; none = pays over the whole range):")
    for (setup, draft), g in be[be["gamma"] != "best"].groupby(["setup", "draft"], sort=False):
        stack = f" ({setup.split('tp 4, ')[1].split(')')[0]})" if "tp 4, " in setup else ""
        where = f"{setup.split(' ')[0]}{stack}, {setup.rsplit(', ', 1)[1]}"
        cells = [f"γ{r['gamma']}:" + ("none" if pd.isna(x := r["break_even_interpolated"]) else f"{x:.3g}")
                 for _, r in g.iterrows()]
        print(f"  {where:52s} {SHORT[draft]:13s} " + "  ".join(cells))
    print(f"\nwrote {len(files)} files:")
    for f in files:
        print(f"  {f.relative_to(REPO)}  ({f.stat().st_size / 1024:.0f} KB)")
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
