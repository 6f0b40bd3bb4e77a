"""`specsim simulate`: one simulation point, simulated figures beside the paper's closed forms.

The options are SimConfig's fields, generated from `specsim.config.FLAT_FIELDS`: the flag from `config.flag`
(`--field-name`, or the one alias table `CLI_ALIASES`), the help from the field's description, the type from its
annotation (a choice or a path is a string SimConfig checks; a structured value — vLLM's bands — is JSON).
Nothing is re-declared here, so a new field is a new option and every message names a flag that exists
(`--speculative-config JSON`, vLLM's speculative config, is the field `speculative_config`: SimConfig reads it into
method / draft / gamma / draft_tp).
"""

from __future__ import annotations

import inspect
import re
import types
import typing

import typer
from rich.markup import escape

from specsim.cli.output import emit_json, table
from specsim.config import FLAT_FIELDS, flag
from specsim.errors import ConfigError
from specsim.inputs.files import loads_json

_SCALARS = (bool, int, float, str)


def _kind(info) -> type | None:
    """The option's Python type: bool / int / float / str for a scalar field, None for a JSON value."""
    ann = info.annotation
    args = typing.get_args(ann) if typing.get_origin(ann) in (typing.Union, types.UnionType) else (ann,)
    args = [a for a in args if a is not type(None)]
    if len(args) == 1 and typing.get_origin(args[0]) is typing.Literal:
        return str  # SimConfig refuses a value outside the choice, naming the choices
    return args[0] if len(args) == 1 and args[0] in _SCALARS else None


def _parameters() -> list[inspect.Parameter]:
    params = []
    for name, info in FLAT_FIELDS.items():
        kind, text = _kind(info), escape(info.description or "")  # help is rich markup: "[[1, 8, 4]]" is text
        if kind is bool:
            opt, ann = typer.Option(False, flag(name), help=text), bool
        else:
            # an integer flag is read as text and parsed strictly in `_value` (typer would take '3.0' as 3, while
            # the same 3.0 in a sweep or plan file is refused: one type wherever a value enters)
            opt = typer.Option(... if info.is_required() else None, flag(name), help=text,
                               metavar={None: "JSON", int: "INTEGER"}.get(kind))
            kind = str if kind is int else kind
            ann = (kind or str) if info.is_required() else (kind or str) | None
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann))
    json_opt = typer.Option(False, "--json", help="print one JSON object")
    return params + _renamed_parameters() + [inspect.Parameter("json_out", inspect.Parameter.KEYWORD_ONLY,
                                                               default=json_opt, annotation=bool)]


def _value(name: str, v):
    """An option's value as SimConfig takes it: an unset flag is left out (None), JSON text is parsed (depth-bounded)
    and typed as strictly as the same value in a sweep spec (`sweep.values.check_value`: `[0.7, "0.85"]`, `[0.7,
    true]` and `[[1, 8, "4"]]` are refused, not read as numbers)."""
    if v is False and _kind(FLAT_FIELDS[name]) is bool:
        return None
    if v is not None and _kind(FLAT_FIELDS[name]) is int:
        if not re.fullmatch(r"\s*[+-]?[0-9]{1,18}\s*", v):
            raise ConfigError("not an integer", field=flag(name), value=v,
                              allowed="an integer written as one (not 3.0, 1e3 or a word)")
        return int(v)
    if v is not None and _kind(FLAT_FIELDS[name]) is None:
        from specsim.sweep.values import check_value  # lazily: the sweep package brings pandas

        value = loads_json(v, field=flag(name), allowed=_JSON_EXAMPLES.get(name, "a JSON value"))
        check_value(name, value, file=None, where=flag(name))
        return value
    return v


_JSON_EXAMPLES = {"tree_topk_acceptance": "e.g. [0.7, 0.85, 0.9]",
                  "num_speculative_tokens_per_batch_size": "e.g. [[1, 8, 4], [9, 64, 2]]"}

# SLO flags before they carried their unit (issue 21: `--slo-tpot 50` was 50 seconds); refused, naming the new flag
RENAMED = {"--slo-ttft": "slo_ttft_s", "--slo-tpot": "slo_tpot_s", "--slo-warmup": "slo_warmup_s"}


def _renamed_parameters() -> list[inspect.Parameter]:
    return [inspect.Parameter(f"renamed_{old.lstrip('-').replace('-', '_')}", inspect.Parameter.KEYWORD_ONLY,
                              default=typer.Option(None, old, hidden=True), annotation=str | None)
            for old in RENAMED]


def _refuse_renamed(opts: dict) -> None:
    for old, field in RENAMED.items():
        v = opts.pop(f"renamed_{old.lstrip('-').replace('-', '_')}")
        if v is not None:
            raise ConfigError(f"renamed to {flag(field)}: the value is in seconds", field=old, value=v,
                              allowed=f"{flag(field)} SECONDS (e.g. {flag(field)} 0.05 for 50 ms)")


def simulate_cmd(**opts) -> None:
    """Simulate speculative decoding and its paired no-speculation baseline."""
    from specsim.simulate import make_config, run

    json_out = opts.pop("json_out")
    _refuse_renamed(opts)
    if opts["batch"] is not None and (opts["rate"] is not None or opts["arrivals_csv"] is not None):
        raise ConfigError("give either a closed-loop batch or open-loop arrivals", field="--batch",
                          value=opts["batch"], allowed=f"--batch alone, or --rate / {flag('arrivals_csv')} with "
                                                       "--max-batch")
    cfg = make_config(**{k: _value(k, v) for k, v in opts.items()})
    r = run(cfg)
    if json_out:
        emit_json(r)
        return
    _human(cfg, r)


simulate_cmd.__signature__ = inspect.Signature(_parameters())  # typer reads the options from here
simulate_cmd.__annotations__ = {p.name: p.annotation for p in simulate_cmd.__signature__.parameters.values()}


def _human(cfg, r: dict) -> None:
    unit = "s" if r["time_unit"] == "s" else "target passes"
    g = r["gamma"] if r["gamma"] is not None else r.get("gamma_bands", r["policy"])  # no one γ: bands or oracle
    d = cfg.deployment
    title = (f"{d.target} ← {d.draft} ({r['method']}) on {d.hardware}: α = {r['alpha']:.4g}, c = {r['c']:.4g}, "
             f"policy {r['policy']} (γ = {g}, mean {r['gamma_mean']:.3g}), {r['mode']} loop")
    table(title, ["quantity", "simulated", "closed form", "closed form is"], [
        ("speedup", r["speedup"], r["speedup_eq5"], "eq. (5)"),
        ("tokens per target run (τ)", r["tokens_per_target_run"], r["tokens_per_target_run_eq1"], "eq. (1)"),
        ("clustering Δτ", r["clustering_delta"], 0.0, "i.i.d. β"),
        ("draft acceptance rate", r["draft_acceptance_rate"], r["draft_acceptance_rate_eq"], "α(1−α^γ)/((1−α)γ)"),
    ], caption=f"speedup = {'makespan' if r['mode'] == 'closed' else 'mean end-to-end latency'} ratio against "
               f"plain decoding of the same requests; times in {unit}")
    table("Energy and cost (all chips: tp × replicas)", ["quantity", "speculative", "baseline", "spec / baseline"], [
        ("J / output token", r["energy_j_per_token"], r["baseline_energy_j_per_token"], r["energy_ratio"]),
        ("mean W per chip (vs nvidia-smi)", r["power_w_per_chip_mean"], r["baseline_power_w_per_chip_mean"],
         _ratio(r["power_w_per_chip_mean"], r["baseline_power_w_per_chip_mean"])),
        ("$ / M output tokens", r["usd_per_mtok"], r["baseline_usd_per_mtok"], r["usd_ratio"]),
    ], caption="blank: the hardware profile has no tdp_w/idle_w or price_usd_per_hour (specsim/cost/power.py)")
    rows = []
    for m, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "end-to-end")):
        rows.append((name, r[f"{m}_p50_s"], r[f"{m}_p90_s"], r[f"{m}_p99_s"], r[f"baseline_{m}_p50_s"],
                     r[f"baseline_{m}_p99_s"]))
    table(f"Latency ({unit})", ["metric", "p50", "p90", "p99", "baseline p50", "baseline p99"], rows)
    table("Throughput", ["quantity", "speculative", "baseline"], [
        ("walltime", r["walltime_s"], r["baseline_walltime_s"]),
        ("output tokens/s", r["throughput_tok_s"], r["baseline_throughput_tok_s"]),
        ("goodput req/s", r["goodput_req_s"], r["baseline_goodput_req_s"]),
        ("mean batch", r["batch_mean"], r["baseline_batch_mean"]),
        ("MBU (mean)", r["mbu_mean"], r["baseline_mbu_mean"]),
        ("MFU (mean)", r["mfu_mean"], r["baseline_mfu_mean"]),
    ])


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)


def _ratio(a, b):
    return a / b if a is not None and b else None
