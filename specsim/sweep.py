"""Sweeps: a TOML grid of simulation points -> one parquet of results, resumable, local or on Dask.

    from specsim.sweep import load_spec, run_sweep
    spec = load_spec("experiments/sweeps/example.toml")   # every point validated here (ConfigError if not)
    report = run_sweep(spec, "out/example")               # local processes; scheduler="tcp://..." for Dask
    df = pandas.read_parquet(report.results)

The spec format is documented in `specsim.sweep_spec`, the output directory and resume rules in
`specsim.sweep_run`, the plots in `specsim.plots`.
"""

from specsim.sweep_run import RESULTS, SweepReport, default_workers, run_chunk, run_sweep
from specsim.sweep_spec import (
    DEFAULT_POINT_FN,
    SweepSpec,
    canonical_json,
    load_spec,
    parse_spec,
    point_id,
    resolve_point_fn,
    sweep_id,
)
from specsim.sweep_table import assemble, build_table

__all__ = ["DEFAULT_POINT_FN", "RESULTS", "SweepReport", "SweepSpec", "assemble", "build_table", "canonical_json",
           "default_workers", "load_spec", "parse_spec", "point_id", "resolve_point_fn", "run_chunk", "run_sweep",
           "sweep_id"]
