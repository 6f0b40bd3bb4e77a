"""`specsim choose-draft`: rank drafts for a target by simulated speedup, with γ per load band and break-even."""

from __future__ import annotations

import math

import typer

from specsim.cli.output import emit_json
from specsim.engine.acceptance import GAMMA_CAP
from specsim.errors import ConfigError, check_range
from specsim.setup.deployment import STACK_HELP

MAX_LEN = 10_000_000  # as SimConfig's prompt_len / output_len
MAX_REQUESTS = 1_000_000  # per simulated point, and every γ of every load point runs that many


def _parse_list(text: str | None, field: str, cast):
    if text is None:
        return None
    try:
        vals = [cast(x) for x in text.split(",") if x.strip()]
    except ValueError:
        what = "integers" if cast is _int else "numbers"
        raise ConfigError(f"not a comma-separated list of {what}", field=field, value=text,
                          allowed="e.g. 1,4,16,64" if cast is _int else "e.g. 0.5,2,8") from None
    if not vals:
        raise ConfigError("empty list", field=field, value=text, allowed="e.g. 1,4,16,64")
    return vals


def _int(x: str) -> int:
    v = float(x)
    if not math.isfinite(v) or v != int(v):  # nan, inf and fractions are not batch sizes
        raise ValueError(x)
    return int(v)


def choose_draft_cmd(
    hardware: str | None = typer.Option(None, "--hardware", help="hardware profile name or TOML path (required)"),
    target: str | None = typer.Option(None, "--target", help="target model profile (required)"),
    draft: list[str] | None = typer.Option(None, "--draft", help="NAME:ALPHA or NAME:TRACE_FILE; repeat for "
                                                                   "each candidate (required)"),
    batch: str | None = typer.Option(None, "--batch", help="closed-loop batch sizes, comma-separated "
                                                              "[1,2,4,8,16,32,64]"),
    rate: str | None = typer.Option(None, "--rate", help="Poisson request rates (req/s), comma-separated; "
                                                            "instead of --batch"),
    gamma_max: int = typer.Option(8, "--gamma-max", help="search γ in 1..G"),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel degree"),
    stack: str | None = typer.Option(None, "--stack", help=STACK_HELP),
    prompt_len: int = typer.Option(128, "--prompt-len"),
    output_len: int = typer.Option(128, "--output-len"),
    requests: int | None = typer.Option(None, "--requests", help="requests per simulated point [batch mode: "
                                                                    "max(64, 4·batch); rate mode: 200]"),
    seed: int = typer.Option(0, "--seed"),
    speculative_config: list[str] | None = typer.Option(None, "--speculative-config", metavar="JSON", help=(
        "one more candidate in vLLM's speculative-config shape (method, model, draft_tensor_parallel_size) plus "
        "its acceptance, \"alpha\": A or \"trace\": FILE; repeat for each; γ is searched (--gamma-max)")),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Rank drafts by simulated speedup; recommend γ per batch (or rate) band; break-even load; memory check."""
    from specsim.studies.choose import choose_draft

    for opt, value, allowed in (("--hardware", hardware, "a hardware profile, see `specsim profiles`"),
                                ("--target", target, "a model profile, see `specsim profiles`"),
                                ("--draft", draft or speculative_config, "NAME:ALPHA or NAME:TRACE_FILE, one or "
                                 "more (or --speculative-config)")):
        if not value:
            raise ConfigError("missing option", field=opt, allowed=allowed)
    for opt, v, lo, hi in (("--prompt-len", prompt_len, 1, MAX_LEN), ("--output-len", output_len, 1, MAX_LEN),
                           ("--seed", seed, 0, 2**63 - 1), ("--requests", requests, 1, MAX_REQUESTS),
                           ("--gamma-max", gamma_max, 1, GAMMA_CAP), ("--tp", tp, 1, 1024)):
        if v is not None:
            check_range(opt, v, lo=lo, hi=hi)
    candidates = list(draft or []) + [_method_candidate(t, target, hardware) for t in speculative_config or []]
    res = choose_draft(hardware, target, candidates, batches=_parse_list(batch, "--batch", _int),
                       rates=_parse_list(rate, "--rate", float), gamma_max=gamma_max, tp=tp, stack=stack,
                       prompt_len=prompt_len, output_len=output_len, requests=requests, seed=seed)
    if json_out:
        emit_json(res)
        return
    _print_human(res)


def _method_candidate(text: str, target: str, hardware: str):
    """A `--speculative-config` candidate: vLLM's keys (`specsim.methods.spec_config`) + "alpha" or "trace"."""
    from dataclasses import replace

    from specsim.methods.heads import shipped_head_name
    from specsim.methods.spec_config import FLAG, choose_ignored, parse
    from specsim.studies.choose import parse_draft

    spec = parse(text, extra_keys=("alpha", "trace", "tree_topk_acceptance"), target=target)
    if ("alpha" in spec) == ("trace" in spec):
        raise ConfigError('give the candidate\'s acceptance: exactly one of "alpha" and "trace"', field=FLAG,
                          value=text, allowed='e.g. {"method": "eagle3", "alpha": 0.8}')
    _strict(spec)
    acc = spec.get("alpha", spec.get("trace"))
    model = spec.get("draft") or shipped_head_name(spec["method"], target)
    d = parse_draft(f"{model}:{acc}")
    if d.method != spec["method"]:
        raise ConfigError(f"{model!r} serves method {d.method}", field=f"{FLAG}.model", value=model,
                          allowed=f"a model or head of method {spec['method']}")
    topk = spec.get("tree_topk_acceptance")
    if topk is not None and "speculative_token_tree" not in spec:
        raise ConfigError("belongs to a tree: give speculative_token_tree", field=f"{FLAG}.tree_topk_acceptance",
                          value=topk)
    d = replace(d, text=text, method=spec["method"], draft_tp=spec.get("draft_tp"),
                tree=spec.get("speculative_token_tree"), tree_topk=None if topk is None else tuple(topk),
                configured_gamma=spec.get("gamma"), ignored=choose_ignored(text))
    if d.tree is not None:
        from specsim.simulate import make_config

        kw = dict(hardware=hardware, target=target, draft=d.model, method=d.method, speculative_token_tree=d.tree,
                  tree_topk_acceptance=d.tree_topk, alpha=d.alpha if d.trace is None else None, trace=d.trace)
        make_config(**kw)  # the tree's rules, checked now: one line naming the field
    return d


def _strict(spec: dict) -> None:
    """The candidate's own values typed as the same fields anywhere else (`sweep.values.check_value`):
    {"alpha": "0.8"} or {"alpha": true} is refused, not read as a number; a trace is a path string."""
    from specsim.methods.spec_config import FLAG
    from specsim.sweep.values import check_value  # lazily: the sweep package brings pandas

    for key in ("alpha", "trace", "tree_topk_acceptance"):
        if key in spec:
            check_value(key, spec[key], file=None, where=f"{FLAG}.{key}")


def _print_human(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from specsim.cli.output import fmt

    console = Console()
    kind = res["load_kind"]
    G = res["gamma_max"]
    wide = console.width >= 100 + 5 * G  # the per-γ column only when the terminal has room for it
    for d in sorted(res["drafts"], key=lambda r: (r["rank"] is None, r["rank"] or 0)):
        src = f"trace {d['trace']}" if d["trace"] else "given"
        rank = f"rank {d['rank']}" if d["rank"] else "not ranked (does not fit)"
        be = f"{d['break_even']:g}" if d["break_even"] is not None else \
            f"none within the range (≤ {res['loads'][-1]:g})"
        m = d["memory"]
        mem = (f"memory per chip: weights {m['weights_gb']:.2f} GB + KV {m['kv_per_request_gb']:.3f} GB per request, "
               f"of {m['capacity_gb']:g} GB; largest batch that fits {m['max_batch']}")
        cap = [f"bands: {d['bands_text']}", f"break-even {kind}: {be}", mem]
        if m["message"]:
            cap.append(m["message"])
        if d.get("why"):
            cap.append(f"why: {d['why']}")
        if d["trace"] and d["clustering_delta"] is not None:
            cap.append(f"trace clustering: τ − eq. (1) = {d['clustering_delta']:+.3f} tokens per target run")
        t = Table(title=f"{d['draft']} (α={d['alpha']:.3g}, {src}) for {res['target']} on {res['hardware']} "
                        f"({res['stack']}, tp {res['tp']}): {rank}", caption="\n".join(cap))
        cols = [kind, "γ", "speedup", "eq. (5) at γ", "τ", "τ eq. (1)", "c"] + \
            ([f"speedup at γ = 1…{G}"] if wide else [])
        for c in cols:
            t.add_column(c, justify="right", no_wrap=True)
        for p in d["points"]:
            if not p["fits"]:
                t.add_row(fmt(p["load"]), "", "does not fit", *[""] * (len(cols) - 3))
                continue
            row = [p["load"], p["recommended_gamma"] or "off", p["speedup_at_recommended"],
                   p["speedup_eq5_at_recommended"],
                   p["tokens_per_target_run"], p["tokens_per_target_run_eq1"], p["c_at_batch"]]
            if wide:
                row.append(" ".join(f"{s:.2f}" for s in p["speedup_by_gamma"]))
            t.add_row(*[fmt(v) for v in row])
        console.print(t)
    from specsim.studies.schedule import config_lines

    for line in config_lines(res):  # the schedule as vLLM's and TensorRT-LLM's configs
        typer.echo(line)
    order = sorted((d for d in res["drafts"] if d["rank"]), key=lambda r: r["rank"])
    typer.echo(f"ranking (realized speedup averaged over the {kind} points): "
               + ", ".join(f"{d['rank']}. {d['draft']} {d['mean_realized_speedup']:.2f}×" for d in order))
    typer.echo("recommendation: " + res["recommendation"]["text"])
    if res["recommendation"].get("why"):
        typer.echo("why: " + res["recommendation"]["why"])


def register(app: typer.Typer) -> None:
    app.command("choose-draft")(choose_draft_cmd)
