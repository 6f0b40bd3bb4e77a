"""`specsim sweep SPEC.toml --out DIR` and `specsim plot DIR`: grids of simulation points and their plots."""

from __future__ import annotations

from pathlib import Path

import typer

from specsim.cli.output import emit_json, table
from specsim.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
    app.command("plot")(plot)


def sweep(
    spec: Path = typer.Argument(..., help="sweep spec (TOML: [fixed], [grid], [run]; see specsim/sweep_spec.py)"),
    out: Path = typer.Option(..., "--out", help="output directory (created; rerun the same spec to resume)"),
    scheduler: str | None = typer.Option(None, "--scheduler",
                                            help="Dask scheduler address (tcp://host:8786); default: local processes"),
    workers: int | None = typer.Option(None, "--workers", help="local worker processes (default: CPU count; "
                                                                  "1 = in this process)"),
    chunk_size: int | None = typer.Option(None, "--chunk-size", help="points per task (0 = adaptive)"),
    no_plots: bool = typer.Option(False, "--no-plots", help="do not write DIR/plots/*.png at the end"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Run every point of a sweep spec (resumable); results in DIR/results.parquet."""
    from specsim.sweep import run_sweep

    if chunk_size is not None and chunk_size < 0:
        raise ConfigError("must be >= 0", field="--chunk-size", value=chunk_size)
    report = run_sweep(spec, out, scheduler=scheduler, workers=workers, chunk_size=chunk_size,
                       plots=False if no_plots else None)
    if json_out:
        emit_json(report.as_dict())
        return
    d = report.as_dict()
    rows = [(k, d[k]) for k in ("points", "computed", "reused", "errors", "backend", "workers", "wall_s",
                                 "sweep_id", "results")]
    rows += [("plot", p) for p in report.plots]
    rows += [(f"skipped {k}", why) for k, why in report.plots_skipped.items()]
    table(f"sweep {spec.name}", ["name", "value"], rows)


def plot(
    out: Path = typer.Argument(..., help="a sweep output directory (holding results.parquet)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Write the sweep plots (heatmap, break-even, latency-throughput) into DIR/plots/."""
    import pandas as pd

    from specsim.plots import plot_all
    from specsim.sweep_run import RESULTS

    results = out / RESULTS
    if not results.is_file():
        raise ConfigError(f"no {RESULTS} here; run `specsim sweep SPEC.toml --out {out}` first", file=out)
    made, skipped = plot_all(pd.read_parquet(results), out / "plots")
    if json_out:
        emit_json({"plots": [str(p) for p in made], "skipped": skipped})
        return
    table(f"plots in {out / 'plots'}", ["name", "value"],
          [("plot", str(p)) for p in made] + [(f"skipped {k}", why) for k, why in skipped.items()])
