"""`specsim record` (β traces from a real or random-weight pair) and `specsim measure` (pass times, walltimes).

SRC is a local Hugging Face directory, a .gguf file, `profile:<model-profile>[:layers=N]` (random weights in
the profile's shapes), or, as a draft, `bigram[:k=K]` / `prompt-lookup[:n=N][:eps=E]`. torch and transformers
are imported inside the commands only, so the rest of the CLI runs without them.
"""

from __future__ import annotations

import sys

import typer

from specsim.cli import options as o
from specsim.cli.output import emit_json, table
from specsim.cli.parse import int_list
from specsim.errors import ConfigError


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"the executor needs torch and transformers ({e.name} is missing)",
                          allowed="pip install 'specsim[executor]'") from None


def _device(device: str) -> str:
    import torch
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("no CUDA device here", field="device", value=device, allowed="cpu, auto")
    return device


def _load_pair(target: str, draft: str | None, prompts_file: str | None, device: str, dtype: str, seed: int,
               chat: bool, limit: int | None, kernels: str = "stock"):
    """Target first (its vocabulary and tokenizer define the prompts), then prompts, then the draft."""
    from specsim.executor.record import load_prompts
    from specsim.executor.sources import load_source
    tgt = load_source(target, device=device, dtype=dtype, seed=seed, kernels=kernels)
    prompts = (load_prompts(prompts_file, tgt.tokenizer, tgt.vocab_size, chat=chat, limit=limit)
               if prompts_file else None)
    dft = None
    if draft is not None:
        dft = load_source(draft, device=device, dtype=dtype, seed=seed + 1, vocab_size=tgt.vocab_size,
                          corpus=prompts or [], kernels=kernels)
    return tgt, dft, prompts


def check_inputs(sources: dict[str, str | None], prompts: str | None = None) -> None:
    """Every model SRC and the prompts file checked before any model loads (a bad draft folder must not wait for
    the target's weights)."""
    from specsim.executor.inputs import check_source
    from specsim.executor.record import read_prompt_items
    for field, spec in sources.items():
        if spec is not None:
            check_source(spec, field)
    if prompts is not None:
        read_prompt_items(prompts)


def _sampling(temperature: float, top_k: int | None, top_p: float | None):
    from specsim.executor.sampling import SamplingConfig
    return SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)


def record_cmd(
    target: str = o.TARGET,
    draft: str = o.DRAFT,
    prompts: str = typer.Option(..., "--prompts", help="prompts file (.jsonl/.json/.txt)"),
    out: str = typer.Option(..., "--out", help="trace file to write (.parquet/.pq/.csv)"),
    max_new_tokens: int = o.max_new_tokens(128, "tokens the target generates"),
    temperature: float = o.temperature(1.0),
    top_k: int | None = o.TOP_K,
    top_p: float | None = o.TOP_P,
    lenience: float = typer.Option(1.0, "--lenience", help="App. A.5 lenience l in (0, 1]; 1 = exact"),
    seed: int = o.SEED,
    task: str | None = typer.Option(None, "--task", help="task label for the metadata [prompts file stem]"),
    limit: int | None = o.LIMIT,
    chat: bool = o.CHAT,
    stop_at_eos: bool = typer.Option(False, "--stop-at-eos", help="end a sequence at the tokenizer's EOS"),
    device: str = o.DEVICE,
    dtype: str = o.DTYPE,
    kernels: str = o.KERNELS,
    json_out: bool = o.JSON,
) -> None:
    """Record a β trace: the target generates, the draft scores the same tokens teacher-forced."""
    from pathlib import Path

    from specsim.errors import check_range
    from specsim.inputs.files import output_file
    from specsim.traces.format import CSV_SUFFIXES, PARQUET_SUFFIXES
    output_file(out, "trace file", field="--out", suffixes=PARQUET_SUFFIXES + CSV_SUFFIXES)  # before recording
    check_range("lenience", lenience, lo=0, hi=1, lo_open=True)
    _need_torch()
    from specsim.executor.record import record_trace
    cfg = _sampling(temperature, top_k, top_p)
    check_inputs({"--target": target, "--draft": draft}, prompts)
    tgt, dft, prompt_ids = _load_pair(target, draft, prompts, _device(device), dtype, seed, chat, limit,
                                       kernels)
    eos = getattr(tgt.tokenizer, "eos_token_id", None) if stop_at_eos else None
    trace = record_trace(tgt, dft, prompt_ids, max_new_tokens, cfg, lenience=lenience, seed=seed,
                         eos_token_id=eos, task=task or Path(prompts).stem, prompts_file=str(prompts),
                         progress=not json_out and sys.stderr.isatty())
    path = trace.write(out)
    res = {"out": str(path), "alpha": trace.alpha, "n_sequences": trace.n_sequences, "n_tokens": trace.n_tokens,
           "rank": trace.rank is not None, "metadata": trace.metadata}  # rank: written at temperature 0
    if json_out:
        emit_json(res)
        return
    table("record", ["target", "draft", "temperature", "sequences", "tokens", "alpha"],
          [[tgt.name, dft.name, temperature, trace.n_sequences, trace.n_tokens, trace.alpha]], caption=str(path))


def measure_cmd(
    target: str = o.TARGET,
    draft: str | None = o.DRAFT_OPTIONAL,
    prompts: str | None = typer.Option(None, "--prompts", help="prompts file: adds end-to-end walltimes"),
    gamma: int = typer.Option(4, "--gamma", min=1, max=256, help="draft length γ"),
    positions: str = typer.Option("1,2,3,4,5,6,8,12,16,32,64,128", "--positions", help="P grid of the target pass"),
    context: int = typer.Option(128, "--context", min=0, help="cached positions L before each timed pass"),
    batches: str = typer.Option("1", "--batch", help="batch sizes B of the timed target passes, e.g. 1,4,16"),
    repeats: int = o.repeats(5, "timed repetitions (median reported)"),
    warmup: int = typer.Option(2, "--warmup", min=0, help="discarded runs before timing"),
    max_new_tokens: int = o.max_new_tokens(64),
    temperature: float = o.temperature(0.0),
    top_k: int | None = o.TOP_K,
    top_p: float | None = o.TOP_P,
    limit: int | None = o.LIMIT,
    chat: bool = o.CHAT,
    hf_compare: bool = typer.Option(False, "--hf-compare", help="also time HF assisted generation"),
    seed: int = o.SEED,
    device: str = o.DEVICE,
    dtype: str = o.DTYPE,
    kernels: str = o.KERNELS,
    json_out: bool = o.JSON,
) -> None:
    """Measure pass times T(P, L) for the target (and the draft step), c, and speculative vs plain walltime."""
    _need_torch()
    from specsim.executor import measure as m
    grid = int_list(positions, "--positions")
    batch_sizes = int_list(batches, "--batch")
    cfg = _sampling(temperature, top_k, top_p)
    check_inputs({"--target": target, "--draft": draft}, prompts)
    tgt, dft, prompt_ids = _load_pair(target, draft, prompts, _device(device), dtype, seed, chat, limit,
                                       kernels)
    res: dict = {"target": tgt.describe(), "draft": dft.describe() if dft else None, "gamma": gamma,
                 "sampling": cfg.as_dict(), "device": str(tgt.device)}
    res["target_passes"] = [row for b in batch_sizes
                            for row in m.pass_times(tgt, grid, context, repeats, warmup, seed, batch=b)]
    if dft is not None:
        res["draft_passes"] = m.pass_times(dft, [1], context, repeats, warmup, seed)
        t1 = next((r["time_s"] for r in res["target_passes"] if r["positions"] == 1 and r["batch"] == 1), None)
        if t1 is None:
            t1 = m.pass_times(tgt, [1], context, repeats, warmup, seed)[0]["time_s"]
        res["c"] = res["draft_passes"][0]["time_s"] / t1
        res["sampling_overhead"] = m.sampling_overhead(tgt.vocab_size, gamma, cfg, tgt.device, seed=seed)
        if prompt_ids:
            res["end_to_end"] = m.end_to_end(tgt, dft, prompt_ids, gamma, max_new_tokens, cfg, seed,
                                             max(1, repeats // 2), min(warmup, 1))
            if hf_compare:
                hf = m.hf_assisted(tgt, dft, prompt_ids, gamma, max_new_tokens, cfg, seed, max(1, repeats // 2),
                                   min(warmup, 1))
                res["hf"] = hf
                res["ours_over_hf"] = res["end_to_end"]["spec_walltime_s"] / hf["walltime_s"]
    if json_out:
        emit_json(res)
        return
    _measure_tables(res, tgt, dft, gamma, context)


def _measure_tables(res: dict, tgt, dft, gamma: int, context: int) -> None:
    table(f"pass times: {tgt.name} (context {context})", ["batch", "positions", "time_s", "min_time_s"],
          [[r["batch"], r["positions"], r["time_s"], r["min_time_s"]] for r in res["target_passes"]])
    if dft is not None:
        rows = [["draft step", res["draft_passes"][0]["time_s"]], ["c", res["c"]],
                ["sampling overhead / step", res["sampling_overhead"]["time_s"]]]
        if "end_to_end" in res:
            e = res["end_to_end"]
            rows += [["speculative walltime", e["spec_walltime_s"]], ["plain walltime", e["plain_walltime_s"]],
                     ["speedup", e["speedup"]], ["tokens / target run", e["tokens_per_target_run"]],
                     ["acceptance rate", e["acceptance_rate"]]]
        if "ours_over_hf" in res:
            rows += [["HF assisted walltime", res["hf"]["walltime_s"]], ["ours / HF", res["ours_over_hf"]]]
        table(f"draft {dft.name}, γ = {gamma}", ["quantity", "value"], rows)


def register(app: typer.Typer) -> None:
    app.command("record")(record_cmd)
    app.command("measure")(measure_cmd)
