"""Planning study (issue 16): how many replicas, dollars and joules does Llama-3.1-70B need, with and without
speculation, on 4×H100 (tp 4), 8×H100 (tp 8) and 2×H200 (tp 2)?

Two parts:
1. `specsim plan experiments/plans/llama70b.toml`: Poisson arrivals at 1–64 req/s with ShareGPT-like lengths,
   SLOs TTFT p90 ≤ 1 s and TPOT p90 ≤ 50 ms, Llama-3.2-1B as the draft (α = 0.65, ASSUMED), candidates γ 2, γ 4
   and the `bands` policy; the fewest replicas per option and rate, $/Mtok and J/token at them (provisioned for
   the hour: `specsim.studies.plan.provisioned`).
   Twice: with TPOT p90 ≤ 50 ms and with an interactive TPOT p90 ≤ 20 ms.
2. Energy against batch size, closed loop (batch 1–1024, γ 4, lengths fixed at the means), for the three 70B
   options and for Llama-3.1-8B on one H100 / one H200: where speculation stops saving energy and where it stops
   saving time (`energy_ratio` and `speedup` crossing 1).
Both parts run on two stacks: the plan's own `cuda-graphs` (roofline) and the measured-kernel stack `vllm` (issue
22; H100 and H200 are both covered by its tables), and J/token comes from the measured power model
(`specsim/cost/power.py`, issue 23). `planning_energy_before_measured_power.csv` is the energy sweep as committed
before that model (power = 10% idle + utilisation-scaled dynamic power, CUDA-graph stack): the md compares its
crossings with today's.

Usage: .venv/bin/python experiments/planning_study.py [--scratch DIR] [--workers N]
Writes experiments/results/planning_study.csv / .png / .md and planning_energy.csv / .png; the
plan's sweeps go to the scratch directory (default experiments/results/planning/, git-ignored), so a rerun reuses
every finished point. About 10 minutes on 2 shared cores from scratch (both stacks).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm import tqdm

from specsim.simulate import make_config, run
from specsim.studies.plan import plan_id, run_plan
from specsim.studies.plan_answer import PLAIN
from specsim.studies.plan_spec import load_plan

RESULTS = REPO / "experiments" / "results"
PLAN = REPO / "experiments" / "plans" / "llama70b.toml"
BATCHES = [1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256, 384, 512, 768, 1024]
ENERGY_GAMMA = 4
STACKS = {"cuda-graphs": "CUDA-graph stack (roofline)", "vllm": "measured vLLM kernels"}
BEFORE = RESULTS / "planning_energy_before_measured_power.csv"
# beside the plan's 70B options: the same draft for Llama-3.1-8B on one chip, where verification turns
# compute-bound at a smaller batch (the 8B target's FLOPs per byte of weights are the same, its KV share larger)
EXTRA_ENERGY = [("1xH100 (8B target)", {"hardware": "h100-sxm", "target": "llama-3.1-8b"}, 1),
                ("1xH200 (8B target)", {"hardware": "h200", "target": "llama-3.1-8b"}, 1)]


def energy_sweep(plan) -> pd.DataFrame:
    """Closed loop over batch sizes per setup at γ = ENERGY_GAMMA: speedup and energy ratio. Lengths are fixed at
    the plan's means here, so every client's request ends in the same step and the batch is the batch (with the
    heavy-tailed lengths the live batch drains far below the cap between waves)."""
    rows = []
    setups = [(o.name, o.fields, tp) for o in plan.options for tp in o.tps] + EXTRA_ENERGY
    jobs = [(s, b) for s in setups for b in BATCHES]
    for (name, option, tp), b in tqdm(jobs, desc="energy vs batch", file=sys.stderr):
        fields = {**plan.fixed, **option, "tp": tp, "batch": b, "gamma": ENERGY_GAMMA, "requests": 2 * b,
                  "length_dist": "fixed"}
        fields.pop("max_batch", None)
        r = run(make_config(**fields))
        rows.append({"stack": plan.fixed["stack"], "option": name, "tp": tp, "batch": b, "batch_mean": r["batch_mean"],
                     "baseline_batch_mean": r["baseline_batch_mean"], "speedup": r["speedup"],
                     "speedup_eq5": r["speedup_eq5"], "energy_ratio": r["energy_ratio"],
                     "energy_j_per_token": r["energy_j_per_token"],
                     "baseline_energy_j_per_token": r["baseline_energy_j_per_token"], "mbu_mean": r["mbu_mean"],
                     "mfu_mean": r["mfu_mean"], "baseline_mfu_mean": r["baseline_mfu_mean"]})
    return pd.DataFrame(rows)


def crossing(df: pd.DataFrame, col: str) -> tuple[int | None, int | None]:
    """The two simulated batch sizes between which `col` first crosses 1 (speculation stops paying)."""
    b, v = df["batch"].to_numpy(), df[col].to_numpy()
    for i in range(1, len(b)):
        if v[i - 1] < 1 <= v[i] if col == "energy_ratio" else v[i - 1] > 1 >= v[i]:
            return int(b[i - 1]), int(b[i])
    return None, None


def _style(ax, xlabel: str, ylabel: str) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())  # 1, 2, 4 … not 2^0, 2^1
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def figure(plans: dict[str, list[dict]], path: Path) -> None:
    """One row per (stack, SLO): replicas and provisioned $/Mtok against rate, solid = speculative, dashed = plain."""
    fig, axes = plt.subplots(len(plans), 2, figsize=(12, 4.2 * len(plans)), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, (slo, rows) in zip(axes, plans.items()):
        for i, (name, g) in enumerate(pd.DataFrame(rows).groupby("option", sort=False)):
            g, c = g.sort_values("rate"), colours[i % len(colours)]
            for ax, col in ((row[0], "replicas"), (row[1], "usd_per_mtok")):
                ax.plot(g["rate"], g[f"{col}_spec"], "-o", color=c, ms=4, label=f"{name}, speculative")
                ax.plot(g["rate"], g[f"{col}_baseline"], "--s", color=c, ms=4, mfc="none", label=f"{name}, plain")
        _style(row[0], "request rate (req/s, Poisson)", "replicas meeting the SLOs")
        _style(row[1], "request rate (req/s, Poisson)", "$ per million output tokens (provisioned)")
        for ax in row:
            ax.set_title(slo, fontsize=9)
            ax.set_yscale("log", base=2 if ax is row[0] else 10)
            ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Llama-3.1-70B + Llama-3.2-1B draft (α = 0.65 assumed), ShareGPT-like lengths; "
                 "a missing point: the SLOs cannot be met", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def energy_figure(energy: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, len(STACKS), figsize=(7.5 * len(STACKS), 4.4), sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (stack, title) in zip(axes, STACKS.items()):
        for i, (name, g) in enumerate(energy[energy["stack"] == stack].groupby("option", sort=False)):
            c = colours[i % len(colours)]
            ax.plot(g["batch"], g["energy_ratio"], "-o", color=c, ms=4, label=f"{name}: J/token ratio")
            ax.plot(g["batch"], 1 / g["speedup"], ":^", color=c, ms=4, label=f"{name}: time ratio (1/speedup)")
        ax.axhline(1, color="grey", lw=0.8)
        _style(ax, "batch size (closed loop, γ = 4, fixed lengths)", "speculative / plain (below 1: speculation saves)")
        ax.set_title(f"{title}; measured power model", fontsize=9)
        ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plan_table(rows: list[dict]) -> list[str]:
    lines = ["| option | rate | replicas plain | replicas spec | best | $/Mtok plain | $/Mtok spec | J/tok plain | "
             "J/tok spec | speedup (mean latency) | eq. (5) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in pd.DataFrame(rows).itertuples():
        lines.append(f"| {r.option} | {r.rate:g} | {_i(r.replicas_baseline)} | {_i(r.replicas_spec)} | "
                     f"{r.best or '—'} | {_f(r.usd_per_mtok_baseline)} | {_f(r.usd_per_mtok_spec)} | "
                     f"{_f(r.energy_j_per_token_baseline)} | {_f(r.energy_j_per_token_spec)} | "
                     f"{_f(r.speedup_latency)} | "
                     f"{_f(r.speedup_eq5)} |")
    return lines


def findings(plans: dict[str, list[dict]], energy: pd.DataFrame) -> list[str]:
    """The study's answers in sentences, computed from the tables (so a rerun cannot leave stale prose)."""
    out = []
    for slo, rows in plans.items():
        saved = [r for r in rows if _n(r.get("replicas_saved")) > 0]  # a missing figure (NaN) is neither
        lost = [r for r in rows if _n(r.get("replicas_saved")) < 0]
        only = [r for r in rows if r.get("replicas_spec") and r.get("replicas_baseline") is None]
        text = f"- **{slo}**: speculation saves replicas at {len(saved)} of {len(rows)} (option, rate) points"
        if saved:
            top = max(saved, key=lambda r: r["replicas_saved"])
            text += (f"; the most at {top['option']}, {top['rate']:g} req/s: {top['replicas_baseline']} → "
                     f"{top['replicas_spec']} replicas, ${top['usd_per_mtok_baseline']:.2f} → "
                     f"${top['usd_per_mtok_spec']:.2f} per Mtok")
        for opt in dict.fromkeys(r["option"] for r in only):
            at = [f"{r['rate']:g}" for r in only if r["option"] == opt]
            text += (f"; only with speculation can {opt} meet the SLOs at {', '.join(at)} req/s (plain misses them "
                     f"at every replica count up to the search's limit)")
        if lost:
            text += "; it costs replicas at " + ", ".join(f"{r['option']} {r['rate']:g} req/s ({r['replicas_baseline']}"
                                                       f" → {r['replicas_spec']})" for r in lost)
        out.append(text + ".")
    for (stack, name), g in energy.groupby(["stack", "option"], sort=False):
        e, t = crossing(g, "energy_ratio"), crossing(g, "speedup")
        out.append(f"- Energy, {name} ({STACKS[stack]}): speculation saves {1 - g['energy_ratio'].iloc[0]:.0%} of "
                   f"the J/token at batch 1 and stops saving between batch {_pair(e)}; time stops between "
                   f"{_pair(t)}{_order(e, t)}.")
    return out


def _order(e, t) -> str:
    if e[0] is None or t[0] is None:
        return ""
    return (" — energy crosses *before* time: between these batches speculation still saves time but costs energy"
            if e[1] <= t[0] else " — energy crosses after time" if e[0] >= t[1] else " — about together")


def changed(plans: dict, energy: pd.DataFrame) -> list[str]:
    """What the measured stack (and the measured power model) changed: replicas, $/Mtok, J/token per (SLO,
    option, rate), and the energy/time crossings against the energy sweep committed before the power model."""
    cg, me = STACKS
    out = []
    for slo in SLOS:
        a, m = (pd.DataFrame(plans[_key(slo, st)]).set_index(["option", "rate"]) for st in (cg, me))
        moved = [(k, a.loc[k], m.loc[k]) for k in a.index
                 if _i(a.loc[k, "replicas_spec"]) != _i(m.loc[k, "replicas_spec"])
                 or _i(a.loc[k, "replicas_baseline"]) != _i(m.loc[k, "replicas_baseline"])
                 or _s(a.loc[k, "best"]) != _s(m.loc[k, "best"])]
        out += [f"**{slo}** — points whose replicas or best option moved ({len(moved)} of {len(a)}); replicas plain "
                "/ speculative, best, provisioned $/Mtok and J/token of the best:", "",
                "| option | rate | CUDA graphs: replicas plain / spec | best | $/Mtok | J/tok | "
                "measured: replicas plain / "
                "spec | best | $/Mtok | J/tok |", "|---|---|---|---|---|---|---|---|---|---|"]
        for (opt, rate), x, y in moved:
            out.append(f"| {opt} | {rate:g} | " + " | ".join(
                f"{_i(r.replicas_baseline)} / {_i(r.replicas_spec)} | {_s(r.best)} | {_f(_best(r, 'usd_per_mtok'))} | "
                f"{_f(_best(r, 'energy_j_per_token'))}" for r in (x, y)) + " |")
        out.append("")
    out += ["Energy against batch (γ = 4): where J/token and time stop favouring speculation, per stack, and the "
            "crossing under the power model committed before (`planning_energy_before_measured_power.csv`, CUDA "
            "graphs):", "", "| setup | energy, before (old power model) | energy, CUDA graphs | energy, measured | "
            "time, CUDA graphs | time, measured |", "|---|---|---|---|---|---|"]
    before = pd.read_csv(BEFORE) if BEFORE.exists() else None
    for name in dict.fromkeys(energy["option"]):
        g = {st: energy[(energy["stack"] == st) & (energy["option"] == name)] for st in STACKS}
        old = _pair(crossing(before[before["option"] == name], "energy_ratio")) if before is not None else "—"
        out.append(f"| {name} | {old} | {_pair(crossing(g[cg], 'energy_ratio'))} | "
                   f"{_pair(crossing(g[me], 'energy_ratio'))} | {_pair(crossing(g[cg], 'speedup'))} | "
                   f"{_pair(crossing(g[me], 'speedup'))} |")
    return out + [""]


def changed_prose(plans: dict, energy: pd.DataFrame) -> str:
    """The paragraph above the tables, computed from them (a rerun cannot leave stale prose)."""
    cg, me = STACKS
    parts = []
    for slo in SLOS:
        a, m = (pd.DataFrame(plans[_key(slo, st)]) for st in (cg, me))
        saved = [int((d["replicas_saved"].fillna(0) > 0).sum()) for d in (a, m)]
        fewest = [d[["replicas_baseline", "replicas_spec"]].min(axis=1) for d in (a, m)]
        up, down = int((fewest[1] > fewest[0]).sum()), int((fewest[1] < fewest[0]).sum())
        usd = [d.apply(lambda r: _best(r, "usd_per_mtok"), axis=1) for d in (a, m)]
        ratio = (usd[1] / usd[0]).replace([np.inf, -np.inf], np.nan).dropna()
        parts.append(f"under {slo} the measured-kernel stack needs more replicas at {up} and fewer at {down} "
                     f"of {len(a)} "
                     f"(option, rate) points (the fewest of plain and speculative), speculation saves replicas at "
                     f"{saved[1]} of them (CUDA graphs: {saved[0]}), and the best answer's provisioned $/Mtok moves by "
                     f"{ratio.min():.2f}–{ratio.max():.2f}× (median {ratio.median():.2f}×)")
    before = pd.read_csv(BEFORE) if BEFORE.exists() else None
    cross = []
    for name in dict.fromkeys(energy["option"]):
        g = energy[(energy["stack"] == me) & (energy["option"] == name)]
        e, t = crossing(g, "energy_ratio"), crossing(g, "speedup")
        old = crossing(before[before["option"] == name], "energy_ratio") if before is not None else (None, None)
        cross.append(f"{name} energy {_pair(e)} (before: {_pair(old)}), time {_pair(t)}")
    return ("Against the plan on the CUDA-graph stack: " + "; ".join(parts)
            + ". Where speculation stops saving (γ = 4, "
            "measured stack, measured power model; the energy crossing under the old power model in brackets): "
            + "; ".join(cross) + ".")


def _best(r, col: str):
    """The provisioned figure of the row's best answer (plain when plain is best or nothing speculative is)."""
    spec = isinstance(r.best, str) and r.best != PLAIN
    return r[f"{col}_spec"] if spec else r[f"{col}_baseline"]


def markdown(plans: dict[str, list[dict]], energy: pd.DataFrame, counts: dict) -> str:
    lines = ["# Planning study: Llama-3.1-70B with and without a 1B draft", "",
             "Generated by `experiments/planning_study.py` (plan: `experiments/plans/llama70b.toml`, run on its own "
             "stack `cuda-graphs` and on the measured-kernel stack `vllm`; the second SLO is the same plan with TPOT "
             "p90 ≤ 20 ms). α = 0.65 is ASSUMED (no published α for Llama-3.2-1B drafting for Llama-3.1-70B); "
             "prices are on-demand list prices from the hardware profiles (marked there: verify before quoting); "
             "power per chip = the measured power model (`specsim/cost/power.py`: running floor + (TDP − floor)·"
             "s/(1+s) of each pass's utilisation, fitted to ML.ENERGY serving rows; see power_fit.md). $/Mtok and "
             "J/token are provisioned: every chip of every replica billed and idling for the hour, per token served "
             "(`specsim.studies.plan.provisioned`). Each point: max(200, 60 s × rate) Poisson requests; the SLO "
             "percentiles cover the requests arriving after the first 10 s (warm-up: the run starts from an empty "
             "engine).", "",
             "## What the measured stack and the measured power model changed", "", changed_prose(plans, energy),
             ""] + changed(plans, energy)
    lines += ["## Findings", ""] + findings(plans, energy) + [""]
    for slo, rows in plans.items():
        lines += [f"## Replicas and $/Mtok per rate — {slo} ({counts[slo]})", ""] + plan_table(rows) + [""]
        missing = sorted({f"{r['option']} {side}: {r[key]}" for r in rows for side, key in
                          (("plain", "why_not_baseline"), ("speculative", "why_not")) if r.get(key)})
        lines += [f"— = {m}" for m in missing] + ([""] if missing else [])
    lines += ["## Energy and time against batch size (closed loop, γ = 4, lengths fixed at the means)", "",
              "| stack | setup | energy stops saving (J/token ratio crosses 1) between batch | time stops saving "
              "(speedup crosses 1) between batch | energy ratio at batch 1 | at the largest batch |",
              "|---|---|---|---|---|---|"]
    for (stack, name), g in energy.groupby(["stack", "option"], sort=False):
        e, t = crossing(g, "energy_ratio"), crossing(g, "speedup")
        lines.append(f"| {stack} | {name} | {_pair(e)} | {_pair(t)} | {g['energy_ratio'].iloc[0]:.3f} | "
                     f"{g['energy_ratio'].iloc[-1]:.3f} |")
    return "\n".join(lines) + "\n"


def _n(x) -> float:
    return 0.0 if x is None or x != x else float(x)


def _s(x) -> str:
    return "—" if x is None or x != x else str(x)


def _i(x) -> str:
    return "—" if x is None or x != x else str(int(x))


def _f(x) -> str:
    return "—" if x is None or x != x else f"{x:.3g}"


def _pair(p) -> str:
    return f"not within 1–{BATCHES[-1]}" if p[0] is None else f"{p[0]} and {p[1]}"


SLOS = {"TTFT p90 ≤ 1 s, TPOT p90 ≤ 50 ms": {"ttft_p90_s": 1.0, "tpot_p90_s": 0.05},
        "TTFT p90 ≤ 1 s, TPOT p90 ≤ 20 ms": {"ttft_p90_s": 1.0, "tpot_p90_s": 0.02}}


def _key(slo: str, stack: str) -> str:
    return f"{slo}, {STACKS[stack]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scratch", type=Path, default=RESULTS / "planning")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    (args.scratch / ".gitignore").write_text("*\n")
    base = load_plan(PLAN)
    plans, counts, table_rows, energy = {}, {}, [], []
    for stack in STACKS:
        plan = replace(base, fixed={**base.fixed, "stack": stack})
        for label, slo in SLOS.items():
            p = replace(plan, slo=slo)
            report = run_plan(p, args.scratch / f"plan-{plan_id(p)}", workers=args.workers)  # an edited plan: new dir
            key = _key(label, stack)
            plans[key] = report.rows
            counts[key] = f"{report.points} points in {report.rounds} rounds"
            table_rows += [{"stack": stack, "slo": label} | {k: v for k, v in r.items() if k != "candidates"}
                           | {f"replicas_{c}": v for c, v in r["candidates"].items()} for r in report.rows]
        energy.append(energy_sweep(plan))
    energy = pd.concat(energy, ignore_index=True)
    pd.DataFrame(table_rows).to_csv(RESULTS / "planning_study.csv", index=False)
    figure(plans, RESULTS / "planning_study.png")
    energy.to_csv(RESULTS / "planning_energy.csv", index=False)
    energy_figure(energy, RESULTS / "planning_energy.png")
    md = markdown(plans, energy, counts)
    (RESULTS / "planning_study.md").write_text(md)
    print(md)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
