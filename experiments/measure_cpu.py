"""Measure this machine's CPU so that `hardware_profiles/cpu-2core.toml` and the `cpu-eager` stack rest on data.

What it measures (best of several repeats each, so that a noisy neighbour only ever makes us pessimistic):
- streaming memory bandwidth: a 1 GiB copy with numpy (one thread) and with torch (all threads),
  counting bytes read + bytes written (the convention PAPER-FACTS.md uses for the H200 copy);
- dense matmul throughput: fp32 via numpy and torch, bf16 via torch (square n x n); fp16 via torch as a record;
- what eager torch achieves on decoder-shaped work: a linear layer y = x W^T with W 16384 x 4096 (an FFN
  projection) and M = 1, 8, 64, 256 rows (M = batch x positions), as effective GB/s and TFLOP/s;
- fixed eager costs: a tiny Llama (transformers, random weights) decoding one token with 1 and 9 layers;
  the slope is the per-layer overhead, the intercept the per-call overhead.

Writes experiments/results/cpu_measurement.json and .csv and prints a table. About 30 s on a quiet machine.
Usage: .venv/bin/python experiments/measure_cpu.py [--rounds N]   (default 2 rounds; each figure is the best round)
       .venv/bin/python experiments/measure_cpu.py --quick        (smaller sizes, one round, prints only)
On a shared machine use more rounds (the figures in hardware_profiles/cpu-2core.toml came from --rounds 10).
"""

from __future__ import annotations

import csv
import datetime as dt
import inspect
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 1 << 30


def best_time_s(fn, repeats: int, warmup: int = 1) -> float:
    """Minimum wall time of fn() over `repeats` runs: the least-disturbed estimate of what the machine can do."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def row(quantity: str, method: str, value: float, unit: str, time_s: float | None) -> dict:
    """One line of the results table (time_s is the timed call, None for derived figures)."""
    return {"quantity": quantity, "method": method, "value": value, "unit": unit, "time_s": time_s}


def memtotal_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / GIB
    return float("nan")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def measure_copy(rows: list[dict], size_bytes: int, repeats: int) -> None:
    import torch

    n = size_bytes // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)  # touch both before timing so page faults are not measured
    dst[:] = 0
    t = best_time_s(lambda: np.copyto(dst, src), repeats)
    size = f"{size_bytes / GIB:g} GiB"
    rows.append(row("copy_bandwidth_gb_s", f"numpy.copyto {size} fp32 (1 thread)", 2 * size_bytes / t / 1e9,
                    "GB/s", t))
    ts, td = torch.from_numpy(src), torch.from_numpy(dst)
    t = best_time_s(lambda: td.copy_(ts), repeats)
    rows.append(row("copy_bandwidth_gb_s", f"torch copy_ {size} fp32 ({torch.get_num_threads()} threads)",
                    2 * size_bytes / t / 1e9, "GB/s", t))


def measure_matmul(rows: list[dict], n: int, repeats: int) -> None:
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    flops = 2.0 * n ** 3
    t = best_time_s(lambda: a @ b, repeats)
    rows.append(row("matmul_tflops_fp32", f"numpy {n}^3 fp32", flops / t / 1e12, "TFLOP/s", t))
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    t = best_time_s(lambda: ta @ tb, repeats)
    rows.append(row("matmul_tflops_fp32", f"torch {n}^3 fp32", flops / t / 1e12, "TFLOP/s", t))
    ha, hb = ta.to(torch.bfloat16), tb.to(torch.bfloat16)
    t = best_time_s(lambda: ha @ hb, repeats)
    rows.append(row("matmul_tflops_bf16", f"torch {n}^3 bf16", flops / t / 1e12, "TFLOP/s", t))
    # fp16 only as a record: CPUs without AVX512-FP16 emulate it, orders of magnitude slower (small n keeps it short)
    k = 256
    fa, fb = ta[:k, :k].to(torch.float16), tb[:k, :k].to(torch.float16)
    t = best_time_s(lambda: fa @ fb, 2)
    rows.append(row("matmul_tflops_fp16", f"torch {k}^3 fp16", 2.0 * k ** 3 / t / 1e12, "TFLOP/s", t))


def measure_linear(rows: list[dict], d_in: int, d_out: int, ms: tuple[int, ...], repeats: int) -> None:
    """Decoder-shaped work: y = x W^T with W d_out x d_in (an FFN up-projection, 4x larger than the L3 cache even
    in bf16, so the weights stream from DRAM); reports effective bandwidth and throughput per M."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        w = torch.randn(d_out, d_in, generator=g).to(dtype)
        wbytes = w.numel() * w.element_size()
        for m in ms:
            x = torch.randn(m, d_in, generator=g).to(dtype)
            with torch.inference_mode():
                t = best_time_s(lambda x=x, w=w: F.linear(x, w), repeats, warmup=2)
            io_bytes = wbytes + m * (d_in + d_out) * w.element_size()
            how = f"torch F.linear {m}x{d_in} @ ({d_out}x{d_in})^T {name}"
            rows.append(row(f"linear_{name}_m{m}_gb_s", how, io_bytes / t / 1e9, "GB/s", t))
            rows.append(row(f"linear_{name}_m{m}_tflops", how, 2.0 * m * d_in * d_out / t / 1e12, "TFLOP/s", t))


def measure_eager_overheads(rows: list[dict], layer_counts=(1, 9), steps: int = 40) -> None:
    """One-token decode steps of a tiny random Llama: weights are KiB, so the time is all fixed cost.

    The models' steps are interleaved so that a busy neighbour slows both alike, and the minimum over all steps
    is kept (as for every other figure here): slope = per-layer overhead, intercept = per-call overhead.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    # transformers 5.x renamed `past_key_values` to `cache`; accept either so the script outlives the rename
    cache_kw = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"
    models = {}
    for n in layer_counts:
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=n, num_attention_heads=4,
                          num_key_value_heads=4, vocab_size=256, max_position_embeddings=1024)
        torch.manual_seed(0)
        models[n] = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 256, (1, 16))
    times: dict[int, list[float]] = {n: [] for n in layer_counts}
    with torch.inference_mode():
        for _ in range(3):  # restart the decode a few times so the KV cache stays short
            state = {}
            for n, model in models.items():
                out = model(ids, use_cache=True)
                state[n] = (_cache_of(out), out.logits[:, -1:].argmax(-1))
            for _ in range(steps):
                for n, model in models.items():
                    cache, nxt = state[n]
                    t0 = time.perf_counter()
                    out = model(nxt, **{cache_kw: cache}, use_cache=True)
                    times[n].append(time.perf_counter() - t0)
                    state[n] = (_cache_of(out), out.logits[:, -1:].argmax(-1))
    for n in layer_counts:
        t = min(times[n])
        rows.append(row(f"eager_step_s_{n}_layers", "transformers LlamaForCausalLM d=64, 1-token step", t, "s", t))


def derive_eager_overheads(rows: list[dict]) -> None:
    """Slope of the one-token step time over the layer count = per-layer cost; intercept = per-call cost."""
    steps = sorted((int(r["quantity"].split("_")[3]), r["value"]) for r in rows
                   if r["quantity"].startswith("eager_step_s_"))
    if len(steps) < 2:
        return
    (n0, t0), (n1, t1) = steps[0], steps[-1]
    per_layer = (t1 - t0) / (n1 - n0)
    rows.append(row("eager_per_layer_overhead_s", f"slope between {n0} and {n1} layers", per_layer, "s", None))
    rows.append(row("eager_per_call_overhead_s", "intercept at 0 layers", t0 - n0 * per_layer, "s", None))


def merge_rounds(rounds: list[list[dict]]) -> list[dict]:
    """Keep, for every measured row, the round with the shortest time: the least-disturbed one."""
    merged: dict[tuple, dict] = {}
    for rows in rounds:
        for r in rows:
            key = (r["quantity"], r["method"])
            if key not in merged or r["time_s"] < merged[key]["time_s"]:
                merged[key] = r
    return list(merged.values())


def _cache_of(out):
    return out["cache"] if "cache" in out else out["past_key_values"]


def best(rows: list[dict], quantity: str) -> float:
    return max(r["value"] for r in rows if r["quantity"] == quantity)


def value(rows: list[dict], quantity: str) -> float:
    return next(r["value"] for r in rows if r["quantity"] == quantity)


def main(argv: list[str]) -> int:
    import torch

    quick = "--quick" in argv
    n_rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else (1 if quick else 2)
    t_start = time.perf_counter()
    load_before = os.getloadavg()[0]
    rounds = []
    for _ in range(n_rounds):  # whole rounds, so that a burst of outside load spoils one round, not every figure
        rows: list[dict] = []
        measure_copy(rows, GIB // (8 if quick else 1), repeats=3 if quick else 4)
        measure_matmul(rows, 1024 if quick else 3072, repeats=3 if quick else 4)
        measure_linear(rows, 4096, 16384, (1, 8, 64, 256), repeats=4 if quick else 6)
        try:
            measure_eager_overheads(rows, steps=10 if quick else 30)
        except ImportError as e:  # transformers is an optional (executor) dependency
            print(f"skipping eager overheads: {e}", file=sys.stderr)
        rounds.append(rows)
    rows = merge_rounds(rounds)
    derive_eager_overheads(rows)

    bw = best(rows, "copy_bandwidth_gb_s")
    summary = {
        "copy_bandwidth_gb_s": bw,
        "peak_tflops_fp32": best(rows, "matmul_tflops_fp32"),
        "peak_tflops_bf16": best(rows, "matmul_tflops_bf16"),
        "memory_capacity_gib": memtotal_gib(),
        "memory_capacity_gb": memtotal_gib() * GIB / 1e9,
        "gemv_bandwidth_fraction_fp32": value(rows, "linear_fp32_m1_gb_s") / bw,
        "gemv_bandwidth_fraction_bf16": value(rows, "linear_bf16_m1_gb_s") / bw,
        "linear_m256_compute_fraction_fp32": value(rows, "linear_fp32_m256_tflops") / best(rows, "matmul_tflops_fp32"),
        "linear_m256_compute_fraction_bf16": value(rows, "linear_bf16_m256_tflops") / best(rows, "matmul_tflops_bf16"),
        # time of an 8-position pass over a one-position pass (DESIGN.md expects 2-3.5x on a 2-core CPU)
        "linear_m8_over_m1_time_fp32": 8 * value(rows, "linear_fp32_m1_tflops") / value(rows, "linear_fp32_m8_tflops"),
        "linear_m8_over_m1_time_bf16": 8 * value(rows, "linear_bf16_m1_tflops") / value(rows, "linear_bf16_m8_tflops"),
    }
    if any(r["quantity"] == "eager_per_layer_overhead_s" for r in rows):
        summary["eager_per_layer_overhead_s"] = value(rows, "eager_per_layer_overhead_s")
        summary["eager_per_call_overhead_s"] = value(rows, "eager_per_call_overhead_s")
    meta = {
        "date": dt.date.today().isoformat(), "cpu": cpu_model(), "cores": os.cpu_count(),
        "torch": torch.__version__, "numpy": np.__version__, "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "quick": quick, "rounds": n_rounds,
        "wall_s": round(time.perf_counter() - t_start, 1),
        # other processes on the machine only ever lower the figures (we keep the best of several runs);
        # a load average above ~1 before or after means the figures are lower bounds: rerun on a quiet machine
        "loadavg_1min_before": round(load_before, 2), "loadavg_1min_after": round(os.getloadavg()[0], 2),
    }

    if not quick:  # a quick look must not overwrite the figures the profiles cite
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "cpu_measurement.json").write_text(
            json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=2, sort_keys=True) + "\n")
        with (RESULTS / "cpu_measurement.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["quantity", "method", "value", "unit", "time_s"])
            w.writeheader()
            w.writerows(rows)

    print(f"{meta['cpu']}, {meta['cores']} cores, torch {meta['torch']} ({meta['torch_threads']} threads), "
          f"{meta['date']}, {meta['wall_s']} s, load average {meta['loadavg_1min_before']} -> "
          f"{meta['loadavg_1min_after']}")
    if max(meta["loadavg_1min_before"], meta["loadavg_1min_after"]) > 1.0:
        print("warning: other processes were running (load average > 1); these figures are lower bounds")
    print(f"{'quantity':34} {'value':>12} {'unit':8} method")
    for r in rows:
        print(f"{r['quantity']:34} {r['value']:12.4g} {r['unit']:8} {r['method']}")
    print("summary:")
    for k, v in summary.items():
        print(f"  {k:36} {v:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
