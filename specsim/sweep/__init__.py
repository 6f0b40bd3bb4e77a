"""Sweeps: a TOML grid of simulation points -> one parquet of results, resumable, local or on Dask.

    from specsim.sweep import load_spec, run_sweep
    spec = load_spec("experiments/sweeps/example.toml")   # every point validated here (ConfigError if not)
    report = run_sweep(spec, "out/example")               # local processes; scheduler="tcp://..." for Dask
    df = pandas.read_parquet(report.results)

The spec format is documented in `specsim.sweep.spec` (strict value types: `specsim.sweep.values`), the lazy
grid and point ids in `specsim.sweep.grid`, the output directory and resume rules in `specsim.sweep.run` and
`specsim.sweep.dir`, the backends in `specsim.sweep.backends`, the plots in `specsim.sweep.plots`.
"""

from specsim.sweep.backends import MAX_WORKERS, default_workers, max_workers
from specsim.sweep.grid import canonical_json, point_id
from specsim.sweep.run import RESULTS, SweepInterrupted, SweepReport, failure_summary, run_chunk, run_sweep
from specsim.sweep.spec import DEFAULT_POINT_FN, SweepSpec, load_spec, parse_spec, resolve_point_fn, sweep_id
from specsim.sweep.table import build_table, write_results

__all__ = ["DEFAULT_POINT_FN", "MAX_WORKERS", "RESULTS", "SweepInterrupted", "SweepReport", "SweepSpec",
           "build_table", "canonical_json", "default_workers", "failure_summary", "load_spec", "max_workers",
           "parse_spec", "point_id", "resolve_point_fn", "run_chunk", "run_sweep", "sweep_id", "write_results"]
