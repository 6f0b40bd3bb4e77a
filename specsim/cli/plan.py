"""`specsim plan PLAN.toml --out DIR`: replicas, $/Mtok and J/token per hardware option and rate, ±speculation."""

from __future__ import annotations

from pathlib import Path

import typer

from specsim.cli.output import emit_json, table

COLUMNS = ("option", "tp", "rate", "replicas_baseline", "replicas_spec", "spec_candidate", "best",
           "usd_per_mtok_baseline", "usd_per_mtok_spec", "energy_j_per_token_baseline", "energy_j_per_token_spec",
           "power_w_per_chip_baseline", "power_w_per_chip_spec",
           "speedup_latency", "speedup_eq5")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


def plan(
    spec: Path = typer.Argument(..., help="plan (TOML: [fixed], [[option]], [search], [slo]; see "
                                          "specsim/studies/plan_spec.py)"),
    out: Path = typer.Option(..., "--out", help="output directory (created; rerun the same plan to resume)"),
    scheduler: str | None = typer.Option(None, "--scheduler",
                                            help="Dask scheduler address (tcp://host:8786); default: local processes"),
    workers: int | None = typer.Option(None, "--workers", help="local worker processes (default: CPU count)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Find, per hardware option and request rate, the fewest replicas that keep up with the load and meet the
    SLOs, with and without speculation (bisection on the simulator, run as resumable sweeps); writes DIR/plan.csv
    and DIR/plan.png."""
    import pandas as pd

    from specsim.studies.plan import run_plan
    from specsim.studies.plan_plot import plot_plan

    report = run_plan(spec, out, scheduler=scheduler, workers=workers, progress=not json_out)
    csv = out / "plan.csv"
    pd.DataFrame([{k: v for k, v in r.items() if k != "candidates"} for r in report.rows]).to_csv(csv, index=False)
    png = plot_plan(report.rows, out / "plan.png", title=f"plan {spec.stem}", slo=report.slo)
    if json_out:
        emit_json({"rows": report.rows, "rounds": report.rounds, "points": report.points, "csv": str(csv),
                   "plot": None if png is None else str(png), "notes": report.notes})
        return
    table(f"plan {spec.name}: {report.points} points in {report.rounds} rounds", list(COLUMNS),
          [[r.get(c) for c in COLUMNS] for r in report.rows],
          caption=f"{csv}" + (f", {png}" if png else "") + "; replicas = the fewest that keep up with the load "
                  "and meet every SLO (one fewer fails: plan.csv's *_missed_at says why); best = fewest replicas, "
                  "then $/Mtok, ties to plain decoding (plan.csv's best_why); $/Mtok and J/token per token served, "
                  "power_w_per_chip the hour's mean draw per chip (vs nvidia-smi); "
                  "speedup_latency = plain / speculative mean latency at replicas_spec (plan.csv also has "
                  "speedup_walltime, the makespan ratio); speedup_eq5 = closed form at the run's α and c")
    for r in report.rows:
        if r.get("best_why"):
            at = "" if r.get("rate") is None else f" at {r['rate']:g} req/s"
            print(f"{r['option']} tp {r['tp']}{at}: {r['best_why']}")
