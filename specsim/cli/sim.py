"""`specsim simulate`: one simulation point, simulated figures beside the paper's closed forms."""

from __future__ import annotations

import typer

from specsim.cli.output import emit_json, table
from specsim.errors import ConfigError


def simulate_cmd(
    hardware: str = typer.Option(..., "--hardware", help="hardware profile name or TOML path"),
    target: str = typer.Option(..., "--target", help="target model profile"),
    draft: str = typer.Option(..., "--draft", help="draft model profile"),
    alpha: float | None = typer.Option(None, "--alpha", help="i.i.d. acceptance rate α in [0, 1)"),
    trace: str | None = typer.Option(None, "--trace", help="β trace file (parquet or CSV)"),
    gamma: int | None = typer.Option(None, "--gamma", help="draft length γ (initial γ for 'heuristic')"),
    policy: str | None = typer.Option(None, "--policy", help="fixed | optimal | heuristic | oracle"),
    batch: int | None = typer.Option(None, "--batch", help="closed loop: concurrent requests (max batch)"),
    rate: float | None = typer.Option(None, "--rate", help="open loop: Poisson arrivals per second"),
    max_batch: int | None = typer.Option(None, "--max-batch", help="batch cap under --rate / --arrivals"),
    arrivals: str | None = typer.Option(None, "--arrivals", help="CSV arrival_s,prompt_len,output_len"),
    requests: int | None = typer.Option(None, "--requests", help="number of requests"),
    prompt_len: int | None = typer.Option(None, "--prompt-len", help="prompt tokens per request"),
    output_len: int | None = typer.Option(None, "--output-len", help="output tokens per request"),
    length_dist: str | None = typer.Option(None, "--length-dist", help="fixed | uniform (L/2 … 3L/2)"),
    seed: int | None = typer.Option(None, "--seed", help="random seed"),
    stack: str | None = typer.Option(None, "--stack", help="software stack profile, or 'ideal'"),
    tp: int | None = typer.Option(None, "--tp", help="tensor-parallel degree"),
    replicas: int | None = typer.Option(None, "--replicas", help="engine replicas sharing the arrivals"),
    lenience: float | None = typer.Option(None, "--lenience", help="App. A.5 lenience l in (0, 1]"),
    fixed_c: float | None = typer.Option(None, "--fixed-c", help="free verification, draft pass = c units"),
    slo_ttft: float | None = typer.Option(None, "--slo-ttft", help="TTFT objective for goodput, s"),
    slo_tpot: float | None = typer.Option(None, "--slo-tpot", help="TPOT objective for goodput, s"),
    engine: str | None = typer.Option(None, "--engine", help="simpy (default) | fast | auto"),
    measured_target: str | None = typer.Option(None, "--measured-target", metavar="CSV",
                                               help="target pass times from a measured table (batch, positions, "
                                                    "context, time_s) instead of the roofline"),
    measured_draft: str | None = typer.Option(None, "--measured-draft", metavar="CSV",
                                              help="draft pass times from a measured table, as --measured-target"),
    draft_catchup: bool = typer.Option(False, "--draft-catchup", help="price the 2-position draft pass after a "
                                       "clean sweep (HF-style executors; matters on CPUs)"),
    engine_profile: str | None = typer.Option(None, "--engine-profile", help="specsim (default) | hf-assisted | "
                                              "vllm-v1: how the serving engine schedules a step"),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="vllm-v1: running requests per step"),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens",
                                                      help="vllm-v1: token budget per step"),
    block_size: int | None = typer.Option(None, "--block-size", help="vllm-v1: KV block size, tokens"),
    num_gpu_blocks: int | None = typer.Option(None, "--num-gpu-blocks", help="vllm-v1: KV blocks in the pool, as "
                                              "the engine reports them"),
    long_prefill_token_threshold: int | None = typer.Option(None, "--long-prefill-token-threshold",
                                                            help="vllm-v1: cap on one prefill chunk (0 = off)"),
    step_table_target: str | None = typer.Option(None, "--step-table-target", metavar="CSV",
                                                 help="vllm-v1: target step times (tokens,time_s) from vLLM's log"),
    step_table_draft: str | None = typer.Option(None, "--step-table-draft", metavar="CSV",
                                                help="vllm-v1: draft step times (tokens,time_s)"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Simulate speculative decoding and its paired no-speculation baseline."""
    from specsim.simulate import make_config, run

    if batch is not None and (rate is not None or arrivals is not None):
        raise ConfigError("give either a closed-loop batch or open-loop arrivals", field="--batch", value=batch,
                          allowed="--batch alone, or --rate / --arrivals with --max-batch")
    cfg = make_config(hardware=hardware, target=target, draft=draft, alpha=alpha, trace=trace, gamma=gamma,
                      policy=policy, batch=batch, rate=rate, max_batch=max_batch, arrivals_csv=arrivals,
                      requests=requests, prompt_len=prompt_len, output_len=output_len, length_dist=length_dist,
                      seed=seed, stack=stack, tp=tp, replicas=replicas, lenience=lenience, fixed_c=fixed_c,
                      slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot, engine=engine, measured_target=measured_target,
                      measured_draft=measured_draft, draft_catchup=draft_catchup or None,
                      engine_profile=engine_profile, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens, block_size=block_size,
                      num_gpu_blocks=num_gpu_blocks, long_prefill_token_threshold=long_prefill_token_threshold,
                      step_table_target=step_table_target, step_table_draft=step_table_draft)
    r = run(cfg)
    if json_out:
        emit_json(r)
        return
    _human(cfg, r)


def _human(cfg, r: dict) -> None:
    unit = "s" if r["time_unit"] == "s" else "target passes"
    g = r["gamma"] if r["gamma"] is not None else "oracle"
    title = (f"{cfg.target} ← {cfg.draft} on {cfg.hardware}: α = {r['alpha']:.4g}, c = {r['c']:.4g}, "
             f"policy {r['policy']} (γ = {g}, mean {r['gamma_mean']:.3g}), {r['mode']} loop")
    table(title, ["quantity", "simulated", "closed form", "closed form is"], [
        ("speedup", r["speedup"], r["speedup_eq5"], "eq. (5)"),
        ("tokens per target run (τ)", r["tokens_per_target_run"], r["tokens_per_target_run_eq1"], "eq. (1)"),
        ("clustering Δτ", r["clustering_delta"], 0.0, "i.i.d. β"),
        ("draft acceptance rate", r["draft_acceptance_rate"], r["draft_acceptance_rate_eq"], "α(1−α^γ)/((1−α)γ)"),
    ], caption=f"speedup = {'makespan' if r['mode'] == 'closed' else 'mean end-to-end latency'} ratio against "
               f"plain decoding of the same requests; times in {unit}")
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
