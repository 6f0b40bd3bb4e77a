"""Plots a capacity planner shows from a sweep's results (one row per point, see `specsim.sweep.run`).

- speedup heatmap over batch x γ, one panel per setup (hardware/target/draft/α...), cells annotated, the
  break-even contour (speedup = 1) drawn;
- break-even batch against c: the smallest batch at which speculation stops paying, per draft and γ;
- latency-throughput curves under Poisson load, one line per γ plus the no-speculation baseline.
Each function takes the results DataFrame and writes PNG + CSV into a folder; when the sweep lacks the axes a
plot needs it raises `PlotSkipped` with the reason, and `plot_all` collects those reasons instead of failing.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import transforms
from matplotlib.colors import TwoSlopeNorm

from specsim.config import FLAT_FIELDS

PANELS_PER_FIGURE = 12
_CONFIG = [f for f in FLAT_FIELDS if f not in ("alpha", "trace")]


class PlotSkipped(Exception):
    """The sweep lacks what this plot needs; the message says what."""


def plot_all(df: pd.DataFrame, out_dir: str | Path) -> tuple[list[Path], dict[str, str]]:
    """Every plot that the sweep's axes allow; returns (files written, {plot: why it was skipped})."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    skipped: dict[str, str] = {}
    for name, fn in (("heatmap", speedup_heatmap), ("break_even", break_even),
                     ("latency_throughput", latency_throughput)):
        try:
            made += fn(df, out)
        except PlotSkipped as e:
            skipped[name] = str(e)
    return made, skipped


# --- shared helpers --------------------------------------------------------------------------------

def _prepare(df: pd.DataFrame, needs: list[str]) -> pd.DataFrame:
    missing = [c for c in needs if c not in df.columns]
    if missing:
        raise PlotSkipped(f"results have no column {missing[0]!r}")
    df = df.copy()
    if "acceptance" not in df.columns:
        alpha = df["alpha"] if "alpha" in df.columns else pd.Series(np.nan, index=df.index)
        trace = df["trace"] if "trace" in df.columns else pd.Series(None, index=df.index, dtype=object)
        df["acceptance"] = [f"α={a:g}" if a is not None and not pd.isna(a) else f"trace {Path(str(t)).stem}"
                            for a, t in zip(alpha, trace)]
    return df


def _closed_loop(df: pd.DataFrame) -> pd.DataFrame:
    if "batch" not in df.columns:
        raise PlotSkipped("results have no 'batch' column")
    return df[df["rate"].isna()] if "rate" in df.columns else df


def _varying(df: pd.DataFrame, exclude: tuple[str, ...]) -> list[str]:
    """Config fields (plus the acceptance label) that take more than one value: these define the panels."""
    cols = [c for c in _CONFIG + ["acceptance"] if c in df.columns and c not in exclude]
    return [c for c in cols if df[c].astype(str).nunique() > 1]


def _label(keys: list[str], values) -> str:
    values = values if isinstance(values, tuple) else (values,)
    names = {"gamma": "γ"}
    return ", ".join(f"{v}" if k in ("hardware", "target", "draft", "acceptance") else f"{names.get(k, k)}={v}"
                     for k, v in zip(keys, values)) or "all points"


def _groups(df: pd.DataFrame, keys: list[str]):
    if not keys:
        yield "all points", df
        return
    for values, g in df.groupby([df[k].astype(str) for k in keys], sort=True):
        yield _label(keys, values), g


def _constant_title(df: pd.DataFrame, keys: list[str]) -> str:
    shown = [c for c in ("hardware", "target", "draft", "acceptance") if c in df.columns and c not in keys]
    return ", ".join(str(df[c].iloc[0]) for c in shown)


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _numbered(out: Path, stem: str, k: int, n: int) -> Path:
    return out / (f"{stem}.png" if n == 1 else f"{stem}-{k + 1}.png")


# --- speedup heatmap -----------------------------------------------------------------------------------

def speedup_heatmap(df: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Mean speedup (over seeds) on a batch x γ grid per setup; green pays, red does not."""
    out = Path(out_dir)
    df = _closed_loop(df)
    if "policy" in df.columns:
        df = df[df["policy"] == "fixed"]
    if "gamma" not in df.columns or df["batch"].nunique() < 2 or df["gamma"].nunique() < 2:
        raise PlotSkipped("needs at least 2 batch sizes and 2 γ values (closed loop, policy 'fixed')")
    df = _prepare(df, ["speedup"])
    keys = _varying(df, exclude=("batch", "gamma", "seed"))
    panels = [(label, g.pivot_table(index="batch", columns="gamma", values="speedup", aggfunc="mean"))
              for label, g in _groups(df, keys)]
    pd.concat({label: p for label, p in panels}, names=["setup", "batch"]).to_csv(out / "heatmap.csv")
    values = np.concatenate([p.to_numpy().ravel() for _, p in panels])
    lo, hi = np.nanmin(values), np.nanmax(values)
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.99), vmax=max(hi, 1.01))
    files = []
    n_fig = math.ceil(len(panels) / PANELS_PER_FIGURE)
    for k in range(n_fig):
        chunk = panels[k * PANELS_PER_FIGURE:(k + 1) * PANELS_PER_FIGURE]
        ncols = min(3, len(chunk))
        nrows = math.ceil(len(chunk) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), squeeze=False,
                                 layout="constrained")
        for ax in axes.ravel()[len(chunk):]:
            ax.set_visible(False)
        for ax, (label, p) in zip(axes.ravel(), chunk):
            z = np.ma.masked_invalid(p.to_numpy(dtype=float))
            im = ax.imshow(z, origin="lower", aspect="auto", cmap="RdYlGn", norm=norm)
            for (r, c), v in np.ndenumerate(p.to_numpy(dtype=float)):
                if not np.isnan(v):
                    ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=7)
            if np.nanmin(z.filled(np.nan)) < 1.0 < np.nanmax(z.filled(np.nan)):
                ax.contour(np.arange(z.shape[1]), np.arange(z.shape[0]), z, levels=[1.0], colors="black",
                           linewidths=1.6)
            ax.set_xticks(range(len(p.columns)), [str(g) for g in p.columns])
            ax.set_yticks(range(len(p.index)), [str(b) for b in p.index])
            ax.set_xlabel("γ (draft tokens per step)")
            ax.set_ylabel("batch")
            ax.set_title(label, fontsize=9)
        fig.colorbar(im, ax=axes.ravel().tolist(), label="speedup (black line: 1.0)")
        fig.suptitle(f"Speedup over batch × γ  {_constant_title(df, keys)}", fontsize=10)
        files.append(_save(fig, _numbered(out, "heatmap", k, n_fig)))
    return files


# --- break-even batch against c --------------------------------------------------------------------

def break_even_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per setup (draft, γ, ...): c at the smallest batch, and the smallest batch with speedup < 1."""
    df = _closed_loop(df)
    if df["batch"].nunique() < 2:
        raise PlotSkipped("needs at least 2 batch sizes (closed loop)")
    df = _prepare(df, ["speedup", "c"])
    keys = _varying(df, exclude=("batch", "seed"))
    rows = []
    for _, g in (df.groupby([df[k].astype(str) for k in keys], sort=True) if keys else [(None, df)]):
        m = g.groupby("batch")[["speedup", "c"]].mean().sort_index()
        below = m.index[m["speedup"] < 1.0]
        row = {k: g[k].iloc[0] for k in keys}
        row.update(c=float(m["c"].iloc[0]), smallest_batch=int(m.index[0]), largest_batch=int(m.index[-1]),
                   break_even_batch=int(below[0]) if len(below) else None)
        rows.append(row)
    return pd.DataFrame(rows)


def break_even(df: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Break-even batch (y, log2) against c (x); a setup that pays up to the largest batch is drawn as ▲ there."""
    out = Path(out_dir)
    t = break_even_table(df)
    t.to_csv(out / "break_even.csv", index=False)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    series = "gamma" if "gamma" in t.columns else None
    point_label = [k for k in t.columns if k not in ("gamma", "c", "smallest_batch", "largest_batch",
                                                      "break_even_batch")]
    groups = list(t.groupby(series)) if series else [(None, t)]
    for j, (sval, g) in enumerate(groups):
        g = g.sort_values("c")
        color = f"C{j % 10}"
        # dodge the series sideways by a few points so equal break-even batches stay visible
        shift = transforms.offset_copy(ax.transData, fig=fig, x=(j - (len(groups) - 1) / 2) * 4, y=0,
                                       units="points")
        y = g["break_even_batch"].astype(float)
        never = y.isna()
        name = f"γ={sval}" if series else "break-even"
        shown = y.where(~never, g["largest_batch"])
        ax.plot(g["c"], shown, color=color, marker="o", ms=5, lw=1, label=name, transform=shift)
        ax.update_datalim(np.column_stack([g["c"], shown]))  # offset artists do not autoscale by themselves
        if never.any():
            ax.scatter(g["c"][never], g["largest_batch"][never], color=color, marker="^", s=60, zorder=3,
                       label=f"{name}: still ≥ 1 at the largest batch", transform=shift)
        if j == 0 and point_label:
            for _, r in g.iterrows():
                ax.annotate(" ".join(str(r[k]) for k in point_label), (r["c"], 0.03), fontsize=6, rotation=90,
                            xycoords=("data", "axes fraction"), xytext=(3, 0), textcoords="offset points",
                            va="bottom", color="0.3")
    ax.margins(x=0.15, y=0.25)
    ax.autoscale_view()
    ax.set_yscale("log", base=2)
    ax.set_xlabel("c = draft step time / target step time (at the smallest batch)")
    ax.set_ylabel("break-even batch (smallest batch with speedup < 1)")
    ax.set_title(f"Where speculation stops paying  {_constant_title(_prepare(df, []), point_label)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return [_save(fig, out / "break_even.png")]


# --- latency-throughput ---------------------------------------------------------------------------------

_LATENCIES = (("tpot_p50_s", "TPOT p50 (s)"), ("e2e_p50_s", "end-to-end latency p50 (s)"))


def latency_throughput(df: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """x = output throughput, y = TPOT / e2e p50, along the request rates; one line per γ, plus the baseline."""
    out = Path(out_dir)
    if "rate" not in df.columns or df["rate"].nunique() < 2:
        raise PlotSkipped("needs at least 2 request rates (open loop: a 'rate' grid axis)")
    df = _prepare(df, ["throughput_tok_s"])
    df = df[df["rate"].notna()]
    metrics = [(m, lab) for m, lab in _LATENCIES if m in df.columns]
    if not metrics:
        raise PlotSkipped("results have no column 'tpot_p50_s' or 'e2e_p50_s'")
    line_keys = [k for k in ("policy", "gamma") if k in df.columns and df[k].nunique() > 1]
    keys = _varying(df, exclude=("rate", "seed", "gamma", "policy"))
    panels = list(_groups(df, keys))
    csv_rows = []
    files = []
    per_fig = 6
    n_fig = math.ceil(len(panels) / per_fig)
    for k in range(n_fig):
        chunk = panels[k * per_fig:(k + 1) * per_fig]
        fig, axes = plt.subplots(len(chunk), len(metrics), figsize=(5.2 * len(metrics), 3.6 * len(chunk)),
                                 squeeze=False, layout="constrained")
        for row, (label, g) in zip(axes, chunk):
            lines = list(g.groupby(line_keys, sort=True)) if line_keys else [((), g)]
            for ax, (metric, ylabel) in zip(row, metrics):
                for j, (lval, lg) in enumerate(lines):
                    m = lg.groupby("rate")[["throughput_tok_s", metric]].mean().sort_index()
                    name = _label(line_keys, lval) if line_keys else "speculative"
                    ax.plot(m["throughput_tok_s"], m[metric], marker="o", ms=3, color=f"C{j % 10}", label=name)
                    csv_rows += [{"setup": label, "line": name, "rate": r, "throughput_tok_s": x, metric: y}
                                 for r, x, y in zip(m.index, m["throughput_tok_s"], m[metric])]
                base_metric = f"baseline_{metric}"
                if "baseline_throughput_tok_s" in g.columns and base_metric in g.columns:
                    b = g.groupby("rate")[["baseline_throughput_tok_s", base_metric]].mean().sort_index()
                    ax.plot(b["baseline_throughput_tok_s"], b[base_metric], "k--", marker="s", ms=3,
                            label="no speculation")
                    csv_rows += [{"setup": label, "line": "no speculation", "rate": r, "throughput_tok_s": x,
                                  metric: y} for r, x, y in zip(b.index, b.iloc[:, 0], b.iloc[:, 1])]
                ax.set_xlabel("output throughput (tokens/s)")
                ax.set_ylabel(ylabel)
                ax.set_title(label, fontsize=9)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
        fig.suptitle(f"Latency against throughput over request rates  {_constant_title(df, keys)}", fontsize=10)
        files.append(_save(fig, _numbered(out, "latency_throughput", k, n_fig)))
    pd.DataFrame(csv_rows).to_csv(out / "latency_throughput.csv", index=False)
    return files
