"""Router study (issue 25 item 3): how much does the router move the replica count at the planning study's SLOs?

The planning study's plan (`experiments/plans/llama70b.toml`: Llama-3.1-70B with a Llama-3.2-1B draft, α = 0.65
ASSUMED, on 4×H100 tp 4, 8×H100 tp 8 and 2×H200 tp 2; Poisson arrivals at 1–64 req/s with ShareGPT-like
lengths; TTFT p90 ≤ 1 s, TPOT p90 ≤ 50 ms; candidates γ 2, γ 4, bands) is searched four times, once per router —
`router` is a flat SimConfig field, so each run is the plan with [fixed] router set:
- shared-queue: one FCFS queue every replica admits from (the ideal bound no HTTP load balancer reaches);
- round-robin: the default (vLLM production-stack's routing logic);
- least-outstanding: the replica with the fewest requests routed to it and not finished;
- power-of-two: the fewer-outstanding of two replicas drawn at random (seeded).
Each request is routed on arrival and waits in its replica's own queue (`specsim.engine.routers`). A replica
count is an answer only if it keeps up with the load and meets both SLOs (`specsim.studies.plan`).

Usage: .venv/bin/python experiments/router_study.py [--scratch DIR] [--workers N]
Writes experiments/results/router_study.csv / .md / .png. Each router's plan runs in its own resumable directory
under the scratch folder (default out/router_study/, git-ignored; named by router and plan id), so a rerun reuses
every finished point.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import matplotlib  # noqa: E402
import matplotlib.ticker  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from specsim.engine.routers import DEFAULT_ROUTER, ROUTERS  # noqa: E402
from specsim.studies.plan import plan_id, run_plan  # noqa: E402
from specsim.studies.plan_spec import load_plan  # noqa: E402

RESULTS = REPO / "experiments" / "results"
PLAN = REPO / "experiments" / "plans" / "llama70b.toml"
ORDER = ("shared-queue", "round-robin", "least-outstanding", "power-of-two")
assert set(ORDER) == set(ROUTERS) and DEFAULT_ROUTER in ORDER
KEEP = ("option", "tp", "rate", "replicas_baseline", "replicas_spec", "spec_candidate", "best", "ttft_p90_s_baseline",
        "tpot_p90_s_baseline", "ttft_p90_s_spec", "tpot_p90_s_spec", "baseline_missed_at", "spec_missed_at")


def run_all(scratch: Path, workers: int | None) -> tuple[pd.DataFrame, dict]:
    base = load_plan(PLAN)
    rows, secs = [], {}
    for router in ORDER:
        plan = replace(base, fixed={**base.fixed, "router": router}, name=f"{base.name}-{router}")
        out = scratch / f"{router}-{plan_id(plan)}"
        t0 = time.perf_counter()
        report = run_plan(plan, out, workers=workers, progress=True)
        secs[router] = (time.perf_counter() - t0, report.points, report.rounds)
        print(f"{router}: {report.points} points in {report.rounds} rounds, {secs[router][0]:.0f} s", file=sys.stderr)
        for r in report.rows:
            rows.append({"router": router, **{k: r.get(k) for k in KEEP},
                         **{f"replicas[{lab}]": n for lab, n in r["candidates"].items()}})
    return pd.DataFrame(rows), secs


def moved(df: pd.DataFrame, ref: str) -> list[str]:
    """Every (option, rate, plain/spec) whose replica count under a router differs from `ref`'s."""
    out = []
    key = ["option", "rate"]
    r0 = df[df.router == ref].set_index(key)
    for router in ORDER:
        if router == ref:
            continue
        r1 = df[df.router == router].set_index(key)
        for idx in r0.index:
            for col, what, why in (("replicas_baseline", "plain", "baseline_missed_at"),
                                   ("replicas_spec", "speculative", "spec_missed_at")):
                a, b = r0.at[idx, col], r1.at[idx, col]
                if a != b:
                    more = r1 if b > a else r0  # the router needing more: why one fewer failed under it
                    out.append(f"{idx[0]} at {idx[1]:g} req/s, {what}: {router} {_n(b)} vs {ref} {_n(a)} "
                               f"({router if b > a else ref}: {more.at[idx, why]})")
    return out


def _n(v) -> str:
    return "none" if v is None or v != v else str(int(v))


def table(df: pd.DataFrame) -> list[str]:
    heads = [f"{r} plain / spec" for r in ORDER]
    L = ["| option | rate (req/s) | " + " | ".join(heads) + " |", "|---|---:|" + "---:|" * len(ORDER)]
    for (opt, rate), g in df.groupby(["option", "rate"], sort=False):
        g = g.set_index("router")
        cells = [f"{_n(g.at[r, 'replicas_baseline'])} / {_n(g.at[r, 'replicas_spec'])}" for r in ORDER]
        L.append(f"| {opt} | {rate:g} | " + " | ".join(cells) + " |")
    return L


def markdown(df: pd.DataFrame, secs: dict) -> str:
    base = load_plan(PLAN)
    slo = ", ".join(f"{k} ≤ {v:g} s" for k, v in base.slo.items())
    vs_rr, vs_sq = moved(df, DEFAULT_ROUTER), moved(df, "shared-queue")
    L = ["# Router study: replicas per router at the planning study's SLOs", "",
         f"`experiments/router_study.py`: the plan `experiments/plans/llama70b.toml` ({slo}; a count is an answer "
         "only if its replicas keep up with the load; candidates γ 2, γ 4 and bands beside plain decoding) searched "
         "once per router, `router` set in the plan's [fixed]. Each cell: the fewest replicas, plain decoding / the "
         "best speculative candidate. `shared-queue` is the ideal bound (one queue every replica takes from); "
         f"`{DEFAULT_ROUTER}` is the default.", ""]
    L += table(df)
    L += ["", f"## What moved against {DEFAULT_ROUTER} (the default)", ""]
    L += [f"- {m}" for m in vs_rr] or ["- nothing: every router needs the same replicas as round-robin here"]
    L += ["", "## What moved against shared-queue (the ideal bound)", ""]
    L += [f"- {m}" for m in vs_sq] or ["- nothing: routing costs no replica here"]
    multi = df[(df.replicas_baseline.fillna(1) > 1) | (df.replicas_spec.fillna(1) > 1)]
    L += ["", "Rows where any router needs more than one replica: "
          f"{multi[['option', 'rate']].drop_duplicates().shape[0]} "
          f"of {df[['option', 'rate']].drop_duplicates().shape[0]} (with one replica the router has no choice to "
          "make, so only these can move).", "",
          "Wall time of each router's plan in the invocation that wrote this file "
          "(shared 2-core host; points already in the scratch folder are reused, so a rerun is faster):", ""]
    L += [f"- {r}: {s:.0f} s, {p} points in {k} rounds" for r, (s, p, k) in secs.items()]
    L += ["", "Tail latency at each answer (plain decoding; TTFT p90 / TPOT p90, s) where more than one replica is "
          "needed:", "", "| option | rate | " + " | ".join(ORDER) + " |", "|---|---:|" + "---|" * len(ORDER)]
    for opt, rate in multi[["option", "rate"]].drop_duplicates().itertuples(index=False):
        g = df[(df.option == opt) & (df.rate == rate)].set_index("router")
        L.append(f"| {opt} | {rate:g} | " + " | ".join(
            f"{g.at[r, 'replicas_baseline']:.0f}: {g.at[r, 'ttft_p90_s_baseline']:.3g} / "
            f"{g.at[r, 'tpot_p90_s_baseline']:.3g}" if g.at[r, "replicas_baseline"] == g.at[r, "replicas_baseline"]
            else "none" for r in ORDER) + " |")
    return "\n".join(L) + "\n"


def plot(df: pd.DataFrame, path: Path) -> None:
    opts = list(dict.fromkeys(df.option))
    fig, axes = plt.subplots(1, len(opts), figsize=(5 * len(opts), 4), sharey=True)
    colors = dict(zip(ORDER, ("black", "tab:blue", "tab:orange", "tab:green")))
    for ax, opt in zip(axes, opts):
        for j, router in enumerate(ORDER):
            g = df[(df.option == opt) & (df.router == router)]
            nudge = 1 + 0.03 * (j - 1.5)  # side by side where the counts coincide
            ax.plot(g.rate * nudge, g.replicas_baseline, "-o", color=colors[router], label=f"{router}, plain",
                    ms=4)
            ax.plot(g.rate * nudge, g.replicas_spec, "--s", color=colors[router], label=f"{router}, speculative",
                    ms=4, mfc="none")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(df.rate)))
        ax.set_xticklabels([f"{r:g}" for r in sorted(set(df.rate))])
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_title(opt)
        ax.set_xlabel("request rate (req/s)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fewest replicas meeting the SLOs")
    axes[-1].legend(fontsize=7)
    fig.suptitle("Replicas per router (llama70b plan: TTFT p90 ≤ 1 s, TPOT p90 ≤ 50 ms, keep-up)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scratch", type=Path, default=REPO / "out" / "router_study")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    df, secs = run_all(args.scratch, args.workers)
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / "router_study.csv", index=False)
    (RESULTS / "router_study.md").write_text(markdown(df, secs))
    plot(df, RESULTS / "router_study.png")
    print((RESULTS / "router_study.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
