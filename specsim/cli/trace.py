"""`specsim trace synth | stats | convert`: make, inspect and convert β traces."""

from __future__ import annotations

import typer

from specsim.cli.output import emit_json, table
from specsim.errors import ConfigError

trace_app = typer.Typer(no_args_is_help=True, help="β traces: synthesize, summarize, convert (parquet <-> CSV).")

# Which generator options apply to which --kind (an option given to another kind is an error, not ignored).
_APPLIES = {"--stretch": ("markov",), "--concentration": ("beta",), "--decay": ("decay",),
            "--beta-easy": ("markov",), "--beta-hard": ("markov",), "--bernoulli": ("iid", "markov")}


@trace_app.command("synth")
def synth_cmd(
    kind: str | None = typer.Option(None, "--kind", help="iid | beta | markov | decay | ranked (required)"),
    alpha: float | None = typer.Option(None, "--alpha", help="mean β (for decay: β at draft slot 0) (required)"),
    stretch: float | None = typer.Option(None, "--stretch", help="markov: mean stretch length [20]"),
    concentration: float | None = typer.Option(None, "--concentration", help="beta: κ = a + b [20]"),
    decay: float | None = typer.Option(None, "--decay", help="decay: factor r per draft slot [0.9]"),
    beta_easy: float | None = typer.Option(None, "--beta-easy", help="markov: β in easy stretches [0.95]"),
    beta_hard: float | None = typer.Option(None, "--beta-hard", help="markov: β in hard stretches [0.2]"),
    bernoulli: bool = typer.Option(False, "--bernoulli", help="iid/markov: draw β ∈ {0, 1} (like T = 0)"),
    topk_acceptance: str | None = typer.Option(None, "--topk-acceptance", metavar="JSON", help="ranked: the "
                                               "draft's cumulative top-k acceptance [P(rank < 1) = α, ...] "
                                               "(required; --alpha, if given, must equal its first entry)"),
    sequences: int = typer.Option(16, "--sequences", help="number of sequences"),
    length: int = typer.Option(256, "--length", help="positions per sequence"),
    seed: int = typer.Option(0, "--seed"),
    out: str | None = typer.Option(None, "--out", help="output file: .parquet, .pq or .csv (required)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Write a synthetic β trace (generator and seed recorded in its metadata)."""
    from specsim.traces import synth as trace_synth

    # required options are checked here, not by typer, so a missing one is a one-line ConfigError
    kinds = " | ".join(trace_synth.KINDS + ("ranked",))
    for opt, value, allowed in (("--kind", kind, kinds), ("--alpha", alpha if kind != "ranked" else 0.0, "[0, 1]"),
                                ("--out", out, "a path ending in .parquet, .pq or .csv")):
        if value is None:
            raise ConfigError("missing option", field=opt, allowed=allowed)
    if kind == "ranked" or topk_acceptance is not None:
        return _synth_ranked(kind, alpha, topk_acceptance, sequences, length, seed, out, json_out)
    given = {"--stretch": stretch, "--concentration": concentration, "--decay": decay, "--beta-easy": beta_easy,
             "--beta-hard": beta_hard, "--bernoulli": bernoulli or None}
    from specsim.traces.format import check_trace_out
    check_trace_out(out, "--out")  # before synthesizing up to 1e8 positions
    if kind not in trace_synth.KINDS:
        raise ConfigError("unknown trace generator", field="--kind", value=kind, allowed=" | ".join(trace_synth.KINDS))
    for opt, value in given.items():
        if value is not None and kind not in _APPLIES[opt]:
            raise ConfigError(f"option does not apply to --kind {kind}", field=opt,
                              allowed="--kind " + " | ".join(_APPLIES[opt]))
    trace = trace_synth.synthesize(
        kind, alpha, n_sequences=sequences, length=length, seed=seed,
        mean_stretch=20.0 if stretch is None else stretch,
        concentration=20.0 if concentration is None else concentration,
        decay_rate=0.9 if decay is None else decay,
        beta_easy=0.95 if beta_easy is None else beta_easy, beta_hard=0.2 if beta_hard is None else beta_hard,
        bernoulli=bernoulli)
    path = trace.write(out)
    result = {"out": str(path), "kind": kind, "alpha": trace.alpha, "n_tokens": trace.n_tokens,
              "n_sequences": trace.n_sequences, "metadata": trace.metadata}
    if json_out:
        emit_json(result)
        return
    table(f"Synthetic β trace → {path}", ["name", "value"],
          [("kind", kind), ("alpha (measured)", trace.alpha), ("n_tokens", trace.n_tokens),
           ("n_sequences", trace.n_sequences), ("seed", seed)])


def _synth_ranked(kind, alpha, topk_text, sequences, length, seed, out, json_out) -> None:
    """`--kind ranked`: a temperature-0 trace with ranks (`specsim.traces.synth.ranked`), for token trees."""
    from specsim.traces import synth as trace_synth
    from specsim.traces.format import check_trace_out

    if kind != "ranked":
        raise ConfigError(f"option does not apply to --kind {kind}", field="--topk-acceptance", allowed="--kind ranked")
    if topk_text is None:
        raise ConfigError("missing option", field="--topk-acceptance", allowed="[P(rank < 1), P(rank < 2), ...]")
    from specsim.inputs.files import loads_json
    from specsim.sweep.values import check_value

    v = loads_json(topk_text, field="--topk-acceptance", allowed="e.g. [0.7, 0.8, 0.85]")
    check_value("tree_topk_acceptance", v, file=None, where="--topk-acceptance")  # typed as the simulate flag
    if alpha is not None and isinstance(v, list) and v and v[0] != alpha:
        raise ConfigError("--alpha is P(rank < 1), the first entry", field="--alpha", value=alpha,
                          allowed=f"{v[0]} or leave it out")
    check_trace_out(out, "--out")
    try:
        trace = trace_synth.ranked(v, n_sequences=sequences, length=length, seed=seed)
    except ConfigError as e:
        if e.field != "topk_acceptance":
            raise
        raise ConfigError(e.message, field="--topk-acceptance", value=e.value, allowed=e.allowed) from None
    path = trace.write(out)
    if json_out:
        emit_json({"out": str(path), "kind": kind, "alpha": trace.alpha, "n_tokens": trace.n_tokens,
                   "n_sequences": trace.n_sequences, "metadata": trace.metadata})
        return
    table(f"Synthetic ranked trace → {path}", ["name", "value"],
          [("kind", kind), ("alpha (measured)", trace.alpha), ("n_tokens", trace.n_tokens),
           ("n_sequences", trace.n_sequences), ("seed", seed)])


@trace_app.command("stats")
def stats_cmd(
    file: str = typer.Argument(..., help="trace file (.parquet, .pq or .csv)"),
    gamma: int = typer.Option(4, "--gamma", help="draft length γ for acceptance by position"),
    max_lag: int = typer.Option(10, "--max-lag", help="autocorrelation lags 1..K"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """α, acceptance by draft slot, autocorrelation and clustering of a β trace."""
    from specsim.traces.stats import summarize
    from specsim.traces.format import Trace

    s = summarize(Trace.read(file), gamma=gamma, max_lag=max_lag)
    if json_out:
        emit_json(s)
        return
    table(f"β trace {file}", ["name", "value"],
          [("alpha", s["alpha"]), ("n_tokens", s["n_tokens"]), ("n_sequences", s["n_sequences"]),
           (f"tokens per target run (γ={gamma})", s["tokens_per_target_run"]),
           ("  eq. (1), i.i.d. β", s["tokens_per_target_run_eq1"]),
           ("mean run length", s["mean_run_length"]), ("  i.i.d. (geometric)", s["mean_run_length_iid"]),
           ("clustering index", s["clustering_index"])]
          + ([("top-k acceptance P(rank < k), k = 1…", ", ".join(f"{x:.3f}" for x in s["topk_acceptance"]))]
             if s["topk_acceptance"] is not None else []),
          caption=", ".join(f"{k}={v}" for k, v in sorted(s["metadata"].items()) if not isinstance(v, dict)))
    table("Acceptance by draft slot", ["slot k", "P(accept | reached)"],
          list(enumerate(s["acceptance_by_position"])))
    table("Autocorrelation of β", ["lag", "corr"], [(k + 1, v) for k, v in enumerate(s["autocorrelation"])])


@trace_app.command("convert")
def convert_cmd(
    src: str = typer.Argument(..., metavar="IN", help="input trace (.parquet, .pq or .csv)"),
    dst: str = typer.Argument(..., metavar="OUT", help="output trace (.parquet, .pq or .csv)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Convert a trace between CSV and parquet, metadata included, β bit-exact."""
    from specsim.traces.format import Trace

    from specsim.traces.format import check_trace_out
    check_trace_out(dst, "OUT")
    trace = Trace.read(src)
    path = trace.write(dst)
    result = {"in": src, "out": str(path), "n_tokens": trace.n_tokens, "n_sequences": trace.n_sequences}
    if json_out:
        emit_json(result)
        return
    table("Converted β trace", ["name", "value"], [(k, v) for k, v in result.items()])


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
