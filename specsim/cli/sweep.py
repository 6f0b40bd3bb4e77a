"""`specsim sweep SPEC.toml --out DIR` and `specsim plot DIR`: grids of simulation points and their plots."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from specsim.cli.output import emit_json, table
from specsim.errors import ConfigError, SpecsimError


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
    app.command("plot")(plot)


def sweep(
    spec: Path = typer.Argument(..., help="sweep spec (TOML: [fixed], [grid], [run]; see specsim/sweep/spec.py)"),
    out: Path = typer.Option(..., "--out", help="output directory (created; rerun the same spec to resume)"),
    scheduler: str | None = typer.Option(None, "--scheduler",
                                            help="Dask scheduler address (tcp://host:8786); default: local processes"),
    workers: int | None = typer.Option(None, "--workers", help="local worker processes (default: CPU count; "
                                                                  "1 = in this process; at most 4 x CPUs and 64)"),
    chunk_size: int | None = typer.Option(None, "--chunk-size", help="points per task (0 = adaptive)"),
    no_plots: bool = typer.Option(False, "--no-plots", help="do not write DIR/plots/*.png at the end"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Run every point of a sweep spec (resumable); results in DIR/results.parquet.

    Exits 2 with one line when no point succeeded (the reasons counted); a partial failure exits 0 and lists
    the reasons. Notes on what a rerun found damaged or changed (and recomputed) go to stderr.
    """
    from specsim.sweep import failure_summary, run_sweep

    if chunk_size is not None and not 0 <= chunk_size <= 1_000_000:
        raise ConfigError("out of range", field="--chunk-size", value=chunk_size, allowed="0 (adaptive) to 1000000")
    report = run_sweep(spec, out, scheduler=scheduler, workers=workers, chunk_size=chunk_size,
                       plots=False if no_plots else None)
    if report.points and report.errors == report.points:
        raise SpecsimError(f"{spec}: all {report.points} points failed: {failure_summary(report)} "
                           f"(each point's reason: the error column of {report.results})")
    if json_out:
        emit_json(report.as_dict())
        return
    d = report.as_dict()
    rows = [(k, d[k]) for k in ("points", "computed", "reused", "errors", "backend", "workers", "wall_s",
                                 "sweep_id", "results")]
    rows += [(f"failed ×{count}", reason) for reason, count in report.failures.items()]
    rows += [("note", note) for note in report.notes]
    rows += [("plot", p) for p in report.plots]
    rows += [(f"skipped {k}", why) for k, why in report.plots_skipped.items()]
    table(f"sweep {spec.name}", ["name", "value"], rows)


def plot(
    out: Path = typer.Argument(..., help="a sweep output directory (holding results.parquet)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object on stdout"),
) -> None:
    """Write the sweep plots (heatmap, break-even, latency-throughput) into DIR/plots/."""
    from specsim.sweep.plots import plot_all
    from specsim.sweep.dir import check_out_dir

    df = read_results(out)
    check_out_dir(out / "plots", "DIR/plots")
    try:
        made, skipped = plot_all(df, out / "plots")
    except OSError as e:
        raise ConfigError(f"cannot write the plots ({e.strerror or e})", file=out / "plots") from None
    if json_out:
        emit_json({"plots": [str(p) for p in made], "skipped": skipped})
        return
    table(f"plots in {out / 'plots'}", ["name", "value"],
          [("plot", str(p)) for p in made] + [(f"skipped {k}", why) for k, why in skipped.items()])


def read_results(out: Path):
    """DIR/results.parquet as a DataFrame; a missing, damaged or foreign file is one line saying what to do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from specsim.sweep.run import RESULTS

    if out.exists() and not out.is_dir():
        raise ConfigError("is a file; give the sweep's output directory", file=out)
    results = out / RESULTS
    rerun = f"`specsim sweep {_spec_of(out)} --out {out}`"
    if not results.is_file():
        raise ConfigError(f"no {RESULTS} here; run {rerun} first", file=out)
    try:
        t = pq.read_table(results)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise ConfigError(f"damaged or not a parquet file ({type(e).__name__}: {str(e)[:80]}); rebuild it from "
                          f"the stored parts with {rerun}", file=results) from None
    if b"specsim.sweep_id" not in (t.schema.metadata or {}):
        raise ConfigError(f"not a sweep's results (no specsim.sweep_id in its metadata); rebuild it with {rerun}",
                          file=results)
    return t.to_pandas()


def _spec_of(out: Path) -> str:
    """The spec a sweep directory was run from, as its manifest says (SPEC.toml if it cannot be read)."""
    try:
        spec = json.loads((out / "manifest.json").read_bytes()).get("spec")
    except (OSError, ValueError, AttributeError):
        spec = None
    return spec if isinstance(spec, str) else "SPEC.toml"
