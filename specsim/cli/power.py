"""`specsim calibrate-power ROWS.csv --hardware NAME [--pool] [--out MINE.toml]`: the power curve's figures
(specsim/cost/power.py) fitted to measured serving rows (specsim/cost/power_fit.py), a leave-one-model-out check
of the fit, and (with --out) a copy of the hardware profile carrying them — written only when the loader will take
it back."""

from __future__ import annotations

from pathlib import Path

import typer

from specsim.cli.output import emit_json, table

ROWS_HELP = ("CSV, one measured serving configuration per row: model, gpu (profile names), tp, batch (mean running "
             "batch) or max_num_seqs, w_per_gpu and/or j_per_token, tok_s (output tokens/s); optional prompt_len, "
             "output_len, stack, source. Example: tests/fixtures/power/mlenergy_v3_lm_arena_chat.csv")


def register(app: typer.Typer) -> None:
    app.command("calibrate-power")(calibrate_power)


def calibrate_power(
    rows: Path = typer.Argument(..., help=ROWS_HELP),
    hardware: str = typer.Option(..., "--hardware", help="hardware profile name or TOML path to fit and copy"),
    pool: bool = typer.Option(False, "--pool", help="fit every row, each in fractions of its own GPU's TDP (default: "
                                                    "only the rows of --hardware)"),
    prompt_len: int = typer.Option(70, "--prompt-len", help="tokens per prompt where a row gives none (default: "
                                                            "LMSYS-Chat-1M's per-turn mean, arXiv 2309.11998)"),
    output_len: int = typer.Option(215, "--output-len", help="tokens per response where a row gives none (default: "
                                                             "LMSYS-Chat-1M's per-turn mean)"),
    stack: str = typer.Option("cuda-graphs", "--stack", help="stack the rows ran where a row gives none (vLLM: "
                                                             "cuda-graphs)"),
    out: Path | None = typer.Option(None, "--out", help="write the profile with the fitted curve here"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Fit running_floor_w, power_mbu_weight, power_mfu_weight to measured W per GPU; check them on held-out
    models."""
    from specsim.cost.calibrate_io import check_power_physics, in_row, read_power_rows, write_power_profile
    from specsim.cost.power_fit import fit_curve, leave_one_model_out, mean_abs
    from specsim.setup.power_rows import row_parts
    from specsim.errors import ConfigError, check_range
    from specsim.inputs.files import input_file, output_file
    from specsim.profiles import loader
    from specsim.setup.deployment import load_profile

    check_range("--prompt-len", prompt_len, lo=1, hi=10_000_000)
    check_range("--output-len", output_len, lo=1, hi=10_000_000)
    hw = load_profile("hardware", hardware)
    if hw.tdp_w is None or hw.idle_w is None:
        raise ConfigError("the hardware profile has no tdp_w / idle_w: the curve lies between them", field="--hardware",
                          value=hw.name, allowed="a profile with tdp_w and idle_w")
    if out is not None:
        output_file(out, "hardware profile", field="--out", suffixes=(".toml",))
    path = input_file(rows, "power rows CSV", field="ROWS")
    measured = read_power_rows(path, prompt_len, output_len, stack)
    check_power_physics(measured, path)
    # every row's GPU is a known profile here: check_power_physics refused an unknown one, naming its row
    mine = [(i, r) for i, r in enumerate(measured, 1) if pool or loader.hardware(r.gpu).name == hw.name]
    if not mine:
        raise ConfigError(f"no row of {hw.name} (gpu column: {sorted({r.gpu for r in measured})})", file=path,
                          field="gpu", allowed=f"rows of {hw.name}, or --pool to fit every row")
    parts = [in_row(path, i, lambda r=r: row_parts(r)) for i, r in mine]
    mine = [r for _, r in mine]  # the rows alone from here on
    fit = fit_curve(parts)
    figures = fit.figures(hw.tdp_w, hw.idle_w)
    in_err = fit.errors_pct()
    models = sorted({r.model for r in mine})
    lomo = leave_one_model_out(parts) if len(models) > 1 and all(
        len({(p.row.model, p.row.gpu, p.row.batch) for p in parts if p.row.model != m}) >= 3 for m in models) else []
    result = {"hardware": hw.name, "rows": len(mine), "pooled": pool, "models": models, **figures,
              "tdp_w": hw.tdp_w, "idle_w": hw.idle_w, "floor_fraction": fit.floor_fraction,
              "not_identified": fit.at_bound, "fit_mean_abs_err_pct": mean_abs(in_err),
              "fit_max_abs_err_pct": max(abs(e) for e in in_err),
              "lomo_mean_abs_err_pct": mean_abs([r["w_err_pct"] for r in lomo]) if lomo else None,
              "lomo_max_abs_err_pct": max(abs(r["w_err_pct"]) for r in lomo) if lomo else None,
              "lomo": lomo, "out": None if out is None else str(out)}
    if out is not None:
        write_power_profile(out, hw, figures, comment=(
            f"{hw.name} with the power curve (running_floor_w, power_mbu_weight, power_mfu_weight) fitted by "
            f"`specsim calibrate-power` to {len(mine)} rows of {path.name}{' (pooled over GPUs)' if pool else ''}: "
            f"W/GPU error mean {result['fit_mean_abs_err_pct']:.1f}%, max {result['fit_max_abs_err_pct']:.1f}% in "
            f"sample; leave-one-model-out max {result['lomo_max_abs_err_pct'] or float('nan'):.1f}%; not identified: "
            f"{', '.join(fit.at_bound) or 'none'}; every other figure as in the {hw.name} profile."))
    if json_out:
        emit_json(result)
        return
    table(f"power curve for {hw.name} ({len(mine)} rows{', pooled' if pool else ''})", ["figure", "value"],
          [(k, figures[k]) for k in figures] + [
              ("not identified (at a bound)", ", ".join(fit.at_bound) or "none"),
              ("W/GPU error in sample: mean / max %", f"{result['fit_mean_abs_err_pct']:.1f} / "
                                                      f"{result['fit_max_abs_err_pct']:.1f}"),
              ("leave-one-model-out: mean / max %", "n/a (one model, or too few rows)" if not lomo else
               f"{result['lomo_mean_abs_err_pct']:.1f} / {result['lomo_max_abs_err_pct']:.1f}"),
              ("written", result["out"])])
    if lomo:
        table("leave-one-model-out (the model's rows never in its fit)",
              ["model", "GPU", "TP", "batch", "W/GPU measured", "predicted", "err %", "J/token measured", "predicted"],
              [(r["model"], r["gpu"], r["tp"], r["batch"], r["w_per_gpu_measured"], r["w_per_gpu_predicted"],
                r["w_err_pct"], r["j_per_token_measured"], r["j_per_token_predicted"]) for r in lomo],
              caption="J/token predicted = predicted W/GPU × TP / the row's measured tokens/s")
