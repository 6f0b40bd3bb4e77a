"""`specsim calibrate` (fit a stack profile to measured pass times) and `specsim validate` (simulator vs a real run).

SRC is a local Hugging Face directory, a .gguf file or `profile:<model-profile>[:layers=N]` (random weights); the
draft of `validate` may also be `bigram[:k=K]` / `prompt-lookup[:n=N]`. torch is imported inside the commands.
"""

from __future__ import annotations

import platform
import sys

import typer

from specsim.cli import options as o
from specsim.cli.output import emit_json, table
from specsim.cli.parse import int_list as _ints
from specsim.engine.acceptance import GAMMA_CAP
from specsim.errors import ConfigError
from specsim.setup.deployment import load_profile, resolve_stack


def _log(json_out: bool):
    return (lambda *a: None) if json_out else (lambda *a: print(*a, file=sys.stderr))


def machine_text(device: str) -> str:
    import torch
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(0)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} torch threads"


def calibrate_cmd(
    hardware: str = typer.Option(..., "--hardware", help="hardware profile the fit is relative to"),
    model: list[str] = typer.Option(..., "--model", help="SRC to time (repeat for several models / layer counts)"),
    out: str = typer.Option(..., "--out", help="stack profile TOML to write"),
    profile_name: str | None = typer.Option(None, "--profile-name", help="name of the stack [hardware-calibrated]"),
    positions: str = typer.Option("1,2,3,4,5,6,8,12,16,32,64", "--positions", help="new positions P per pass"),
    batches: str = typer.Option("1", "--batches", help="batch sizes B (B > 1 needs a transformers model)"),
    contexts: str = typer.Option("0,128", "--contexts", help="cached positions L before each pass"),
    repeats: int = o.repeats(3, "timed repetitions per point (median)"),
    warmup: int = typer.Option(1, "--warmup", min=0),
    holdout_every: int = typer.Option(4, "--holdout-every", min=0, help="hold out every k-th point (0 = none)"),
    multi_row: bool = typer.Option(False, "--multi-row", help="also fit a bandwidth fraction for passes of B·P >= R "
                                   "rows and R, where the BLAS switches kernels (StackProfile."
                                   "multi_row_bandwidth_fraction, multi_row_min_rows)"),
    overlap: str = typer.Option("max", "--overlap", help="max: memory and compute overlap (the roofline); sum: "
                                "their times add, as in eager PyTorch on a CPU (StackProfile.overlap)"),
    base: str | None = typer.Option(None, "--base", help="stack for what the data cannot identify "
                                                            "[the hardware's default stack]"),
    device: str = o.DEVICE,
    dtype: str = o.DTYPE,
    kernels: str = o.KERNELS,
    seed: int = o.SEED,
    json_out: bool = o.JSON,
) -> None:
    """Fit a stack profile (fractions of bandwidth and peak, per-call and per-layer overheads) to measured passes."""
    from specsim import profiles
    from specsim.cli.executor import _device, _need_torch
    from specsim.inputs.files import output_file
    output_file(out, "stack profile", field="--out", suffixes=(".toml",), make_parents=True)  # before timing
    _need_torch()
    import torch
    import transformers

    from specsim.cost.calibrate import fit_stack, write_stack_toml
    from specsim.executor.inputs import check_source
    if overlap not in profiles.OVERLAPS:  # before any timing
        raise ConfigError("unknown overlap", field="--overlap", value=overlap, allowed=" | ".join(profiles.OVERLAPS))
    hw = load_profile("hardware", hardware)
    base_stack = resolve_stack(hw, base)  # the one stack rule: no --base = the hardware's default stack
    dev = _device(device)
    grid = _ints(positions, "positions"), _ints(batches, "batches"), _ints(contexts, "contexts", lo=0)
    for spec in model:  # every model checked before the first is timed
        check_source(spec, "--model", ngram_ok=False)
    points = _time_models(model, grid, dev, dtype, kernels, seed, repeats, warmup, _log(json_out))
    fit = fit_stack(points, hw, name=profile_name or f"{hw.name}-calibrated", holdout_every=holdout_every,
                    base=base_stack, description=f"fitted to measured passes of {', '.join(model)} on {hw.name}",
                    multi_row=multi_row, overlap=overlap)
    extra = {"machine": machine_text(dev), "torch": torch.__version__, "transformers": transformers.__version__,
             "models": ", ".join(model), "repeats": f"median of {repeats} after {warmup} warm-up"}
    path = write_stack_toml(out, fit, hw, extra)
    if json_out:
        emit_json({"out": str(path), **fit.summary(), "points": fit.rows(), "provenance": extra})
        return
    _fit_tables(fit, hw, path)


def _time_models(model: list[str], grid, dev: str, dtype: str, kernels: str, seed: int, repeats: int, warmup: int,
                 log) -> list:
    """Measured passes of every model over the (positions, batches, contexts) grid, one model in memory at once."""
    from specsim.cost.calibrate import points_from_rows
    from specsim.executor.sources import load_source
    from specsim.executor.validate import grid_pass_times, profile_of_source
    P, B, L = grid
    points = []
    for spec in model:
        src = load_source(spec, device=dev, dtype=dtype, seed=seed, kernels=kernels)
        prof = profile_of_source(spec, src)
        if prof is None:
            raise ConfigError("an n-gram draft has no weights to calibrate", field="--model", value=spec,
                              allowed="a HF directory, a .gguf file or profile:<name>[:layers=N]")
        log(f"[calibrate] timing {spec} ({prof.n_layers} layers, {prof.dtype}) over {len(P) * len(B) * len(L)} points")
        rows = grid_pass_times(src, P, L, B, repeats=repeats, warmup=warmup, seed=seed)
        points += points_from_rows(rows, prof)
        del src
    return points


def _fit_tables(fit, hw, path) -> None:
    table(f"calibration on {hw.name}: {path}", ["model", "batch", "positions", "context", "measured_s",
                                                 "predicted_s", "error_pct", "held_out"],
          [[r["model"], r["batch"], r["positions"], r["context"], r["measured_s"], r["predicted_s"], r["error_pct"],
            "yes" if r["held_out"] else ""] for r in fit.rows()])
    s = fit.stack
    table("fitted stack", ["quantity", "value"],
          [["bandwidth_fraction", s.bandwidth_fraction], ["compute_fraction", s.compute_fraction],
           ["per_call_overhead_s", s.per_call_overhead_s], ["per_layer_overhead_s", s.per_layer_overhead_s],
           ["multi_row_bandwidth_fraction", fit.multi_row_bandwidth_fraction],
           ["multi_row_min_rows", fit.stack.multi_row_min_rows if fit.multi_row_bandwidth_fraction else None],
           ["overlap", s.overlap], ["multi_position_overhead_s", s.multi_position_overhead_s],
           ["fit median |err| %", fit.fit_error["median_abs_pct"]],
           ["hold-out median |err| %", fit.holdout_error["median_abs_pct"]],
           ["hold-out max |err| %", fit.holdout_error["max_abs_pct"]]])


def validate_cmd(
    target: str = o.TARGET,
    draft: str = o.DRAFT,
    prompts: str = typer.Option(..., "--prompts", help="prompts file (.txt one per line, .jsonl, .json)"),
    gamma: int = typer.Option(3, "--gamma", min=1, max=GAMMA_CAP, help="draft length γ"),
    temperature: float = o.temperature(0.0, "0 = argmax (the replay is then exact)"),
    max_new_tokens: int = o.max_new_tokens(32),
    hardware: str = typer.Option("cpu-2core", "--hardware", help="hardware profile of this machine"),
    stack: str | None = typer.Option(None, "--stack", help="stack TOML for calibrated mode [fit one here]"),
    repeats: int = o.repeats(2, "end-to-end repetitions (median)"),
    limit: int | None = o.LIMIT,
    chat: bool = typer.Option(True, "--chat/--no-chat", help="wrap text prompts in the chat template"),
    trace_out: str | None = typer.Option(None, "--trace-out", help="also write the recorded β trace"),
    device: str = o.DEVICE,
    dtype: str = o.DTYPE,
    kernels: str = o.KERNELS,
    seed: int = o.SEED,
    predict_gammas: str = typer.Option("", "--predict-gammas", help="also predict these γ from the same trace and "
                                       "costs, e.g. 1-6 or 1,2,4 (the closed form beside each)"),
    json_out: bool = o.JSON,
) -> None:
    """Run speculative and plain decoding for real, replay the recorded trace through the engine, compare."""
    from specsim.cli.executor import _device, _load_pair, _need_torch, _sampling, check_inputs
    from specsim.errors import check_range
    from specsim.inputs.files import output_file
    from specsim.traces.format import CSV_SUFFIXES, PARQUET_SUFFIXES
    if trace_out:  # before the runs
        output_file(trace_out, "trace file", field="--trace-out", suffixes=PARQUET_SUFFIXES + CSV_SUFFIXES)
    check_range("temperature", temperature, lo=0, hi=100)
    _need_torch()
    from specsim.executor.validate import profile_of_source, validate_pair
    gammas = _gamma_list(predict_gammas)
    hw = load_profile("hardware", hardware)
    st = load_profile("stack", stack) if stack else None  # no --stack: fit one here
    check_inputs({"--target": target, "--draft": draft}, prompts)
    tgt, dft, prompt_ids = _load_pair(target, draft, prompts, _device(device), dtype, seed, chat, limit,
                                       kernels)
    res = validate_pair(tgt, dft, prompt_ids, hardware=hw, target_profile=profile_of_source(target, tgt),
                        draft_profile=profile_of_source(draft, dft), gamma=gamma, max_new_tokens=max_new_tokens,
                        sampling=_sampling(temperature, None, None), repeats=repeats, seed=seed, stack=st,
                        gammas=gammas, log=_log(json_out))
    trace = res.pop("trace")
    res.pop("fits")
    if trace_out:
        res["trace_out"] = str(trace.write(trace_out))
    if json_out:
        emit_json(res)
        return
    _validate_tables(res, tgt.name, dft.name, gamma, temperature, gammas)


def _validate_tables(res: dict, tgt: str, dft: str, gamma: int, temperature: float, gammas: list[int]) -> None:
    from specsim.executor.validate import MODES

    for mode in MODES:
        if mode not in res:
            continue
        cmp_ = res[mode]["compare"]
        table(f"{mode} mode: {tgt} ← {dft}, γ = {gamma}, T = {temperature}, α = {res['alpha']:.3f}",
              ["quantity", "measured", "predicted", "error_pct"],
              [[k, v["measured"], v["predicted"], v["error_pct"]] for k, v in cmp_.items()],
              caption=f"replay: {res[mode]['replay']['steps_agreeing']}/{res[mode]['replay']['steps']} steps agree")
    if gammas:
        modes = [m for m in MODES if m in res]
        sw = {m: {r["gamma"]: r for r in res[m]["gamma_sweep"]} for m in modes}
        table(f"predicted speedup by γ (same trace and costs; measured at γ = {gamma}: "
              f"{res['executor']['speedup']:.3f})", ["gamma", *modes, "closed_form_eq5"],
              [[g, *[sw[m][g]["speedup"] for m in modes], sw[modes[-1]][g]["closed_form_speedup"]] for g in gammas])


def _gamma_list(text: str) -> list[int]:
    """--predict-gammas: '' (none), '1-6' or '1,2,4' → sorted distinct γ in 1..GAMMA_CAP."""
    return _ints(text, "--predict-gammas", 1, GAMMA_CAP) if text.strip() else []


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
    app.command("validate")(validate_cmd)
