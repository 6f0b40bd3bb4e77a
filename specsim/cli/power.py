"""`specsim calibrate-power SAMPLES.csv --hardware NAME --out MINE.toml`: the power model's two figures from a
measured power trace (`specsim.cost.power.fit_power`), written into a copy of the hardware profile."""

from __future__ import annotations

from pathlib import Path

import typer

from specsim.cli.output import emit_json, table

COLUMNS = ("utilisation", "watts")
MAX_SAMPLES = 10_000_000


def register(app: typer.Typer) -> None:
    app.command("calibrate-power")(calibrate_power)


def calibrate_power(
    samples: Path = typer.Argument(..., help="CSV with columns utilisation, watts: per-chip power samples (nvidia-smi"
                                             " / DCGM, averaged over a window) beside the simulator's u = min(1, MBU "
                                             "+ MFU) for the same window"),
    hardware: str = typer.Option(..., "--hardware", help="hardware profile name or TOML path to copy"),
    out: Path | None = typer.Option(None, "--out", help="write the profile with the fitted idle_w and tdp_w here"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Fit watts = idle_w + (tdp_w − idle_w)·u and (with --out) write the hardware profile with those figures."""
    import numpy as np

    from specsim.cost.calibrate_io import write_hardware_toml
    from specsim.cost.power import fit_power
    from specsim.errors import ConfigError
    from specsim.inputs.files import input_file, output_file
    from specsim.inputs.tables import CsvTable, check_rows, float_column, require_columns
    from specsim.profiles.deployment import load_profile

    hw = load_profile("hardware", hardware)
    if out is not None:
        output_file(out, "hardware profile", field="--out", suffixes=(".toml",))
    path = input_file(samples, "power samples CSV", field="SAMPLES")
    table_ = CsvTable(path, comment="#")
    require_columns(table_.frame, COLUMNS, path)
    check_rows(len(table_.frame), path, MAX_SAMPLES)
    u = float_column(table_.frame["utilisation"], "utilisation", path, lo=0.0, hi=1.0, raw=table_.raw)
    w = float_column(table_.frame["watts"], "watts", path, lo=0.0, hi=1e5, raw=table_.raw)
    idle, dyn = fit_power(u, w)
    tdp = idle + dyn
    if idle < 0 or dyn <= 0:
        raise ConfigError(f"the fit gives idle_w = {idle:.4g} W and a dynamic range of {dyn:.4g} W: power does not "
                          f"rise with utilisation in these samples", file=path, field="watts",
                          allowed="samples whose power grows with u (check the pairing of power and utilisation)")
    resid = w - (idle + dyn * u)
    r2 = 1.0 - float(resid @ resid) / float(((w - w.mean()) ** 2).sum()) if np.ptp(w) > 0 else 1.0
    result = {"hardware": hw.name, "samples": int(u.size), "idle_w": idle, "tdp_w": tdp, "r2": r2,
              "datasheet_tdp_w": hw.tdp_w, "profile_idle_w": hw.idle_w, "out": None if out is None else str(out)}
    if out is not None:
        write_hardware_toml(out, hw, idle_w=round(idle, 3), tdp_w=round(tdp, 3), comment=(
            f"{hw.name} with idle_w and tdp_w fitted by `specsim calibrate-power` to {u.size} power samples of "
            f"{path.name} (R² = {r2:.3f}); every other figure as in the {hw.name} profile."))
    if json_out:
        emit_json(result)
        return
    table(f"power fit for {hw.name} ({u.size} samples)", ["name", "value"],
          [("idle_w (fitted)", idle), ("tdp_w = idle + dynamic (fitted)", tdp), ("R²", r2),
           ("profile's tdp_w / idle_w", f"{hw.tdp_w} / {hw.idle_w}"), ("written", result["out"])])
