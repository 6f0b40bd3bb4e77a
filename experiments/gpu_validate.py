"""GPU validation (issue 5, item 10): random-weight Llama-3.1-8B target + Llama-3.2-1B draft in bf16 on one GPU.

What it does, in a few minutes on an H200:
1. builds both models with random weights from the model profiles (timing does not depend on weight values);
2. times one pass (forward + argmax of the last position, CUDA-synchronized) over positions P ∈ 1..64, batch sizes
   B ∈ 1..32 and two cached contexts, for both models;
3. fits a stack profile to those passes (`specsim.cost.calibrate`, every 4th point held out) and writes it as TOML;
4. runs speculative decoding (γ drafts, one verification of γ+1 positions, caches cropped to the accepted prefix)
   with acceptance replayed from a synthetic β ∈ {0, 1} trace (i.i.d. Bernoulli(α)), and plain decoding, on the
   same random prompts, interleaved, repeated; then replays the same trace through the SimPy engine;
5. writes CSVs and a Markdown summary: pass times measured against the `h200` profile's ideal and calibrated
   (its default stack) predictions and the fitted stack; end-to-end walltimes and speedup measured against the
   ideal, calibrated, fitted and measured (interpolated table) cost modes.

No CUDA device → exits at once with code 2 and a message. To check the script without a GPU:
    .venv/bin/python experiments/gpu_validate.py --device cpu --layers 1 --dry-run --out /tmp/gpu_dry
On the device machine (its image has torch + transformers but no pydantic / simpy: carry them as wheels, see
/work/.library/device/README.md; `.whl` must hold pydantic, pydantic-core, annotated-types, typing-inspection,
simpy):
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site;
    python3 experiments/gpu_validate.py --out $OUT
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
NEEDED = ("numpy", "scipy", "pandas", "pydantic", "simpy", "torch", "transformers")


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) | cpu (only with --dry-run)")
    ap.add_argument("--layers", type=int, default=None, help="override both models' layer counts (checks)")
    ap.add_argument("--dry-run", action="store_true", help="tiny grid, few tokens: checks the script, not the GPU")
    ap.add_argument("--target", default="llama-3.1-8b", help="target model profile")
    ap.add_argument("--draft", default="llama-3.2-1b", help="draft model profile")
    ap.add_argument("--hardware", default="h200", help="hardware profile the predictions use")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--alpha", type=float, default=0.8, help="acceptance rate of the synthetic trace")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4, help="random prompts (closed loop, batch 1)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=128, help="new tokens per prompt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "experiments" / "results"), help="output folder")
    return ap.parse_args(argv)


def check_environment(device: str, dry_run: bool) -> None:
    """Fail fast, with one clear message, before anything slow."""
    missing = []
    for name in NEEDED:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        sys.exit(f"gpu_validate: missing Python packages: {', '.join(missing)} (carry them as wheels; see the "
                 f"docstring)")
    import torch
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_validate: error: no CUDA device here (torch.cuda.is_available() is False). This script measures "
              "a GPU; to check it on a CPU run: --device cpu --layers 1 --dry-run", file=sys.stderr)
        sys.exit(2)
    if device == "cpu" and not dry_run:
        print("gpu_validate: error: --device cpu is only for --dry-run checks", file=sys.stderr)
        sys.exit(2)


def sync(dev):
    import torch
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def leading_accepts(beta, start: int, gamma: int) -> int:
    n = 0
    while n < gamma and start + n < len(beta) and beta[start + n] >= 1.0:
        n += 1
    return n


def spec_replay(target, draft, prompt, beta, gamma: int, n_new: int) -> list[int]:
    """Speculative decoding whose accept/reject comes from β (the executor's loop and cache handling, batch 1).

    Every step: γ draft passes, one target pass over γ+1 positions, one host sync, both caches cropped to the
    emitted prefix. Returns the accepted count of every step."""
    import torch
    dev = target.device
    ids = torch.as_tensor(prompt, dtype=torch.long)
    ts, ds = target.new_state(), draft.new_state()
    target.forward(ids[:-1], ts, keep=1)
    draft.forward(ids[:-1], ds, keep=1)
    seq = ids.tolist()
    t_pend, d_pend = ids[-1:].to(dev), ids[-1:]
    e, accepted = 0, []
    while e < n_new:
        xs, inp = [], d_pend
        for _ in range(gamma):
            x = draft.forward(inp, ds, keep=1)[-1].argmax(-1).view(1).to(dev)
            xs.append(x)
            inp = x
        drafts = torch.cat(xs)
        top = target.forward(torch.cat([t_pend, drafts]), ts, keep=gamma + 1).argmax(-1)
        vals = torch.cat([drafts, top]).tolist()  # the step's one host sync
        n = leading_accepts(beta, e, gamma)
        emitted = vals[:n] + [vals[gamma + n]]
        ctx = len(seq)
        seq += emitted
        e += len(emitted)
        target.crop(ts, ctx + n)
        keep_d = min(ctx + n, draft.length(ds))
        draft.crop(ds, keep_d)
        d_pend = torch.tensor(seq[keep_d:], dtype=torch.long)
        t_pend = d_pend[-1:].to(dev)
        accepted.append(n)
    sync(dev)
    return accepted


def plain(target, prompt, n_new: int) -> None:
    import torch
    ids = torch.as_tensor(prompt, dtype=torch.long)
    st = target.new_state()
    target.forward(ids[:-1], st, keep=1)
    pend = ids[-1:].to(target.device)
    for _ in range(n_new):
        pend = target.forward(pend, st, keep=1)[-1].argmax(-1).view(1)
        int(pend)  # host sync per token, as a decode loop does
    sync(target.device)


def write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv=None) -> int:
    args = parse(argv)
    check_environment(args.device, args.dry_run)
    import numpy as np
    import torch

    from specsim import profiles
    from specsim.cost.calibrate import fit_stack, points_from_rows, write_stack_toml
    from specsim.cost.roofline import CostModel
    from specsim.executor.sources import random_source
    from specsim.executor.validate import grid_pass_times, predict_replay, prefill_times, replay_matches
    from specsim.cost.measured import MeasuredCosts
    from specsim.profiles import IDEAL_STACK
    from specsim.traces.synth import iid

    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(args.device)
    if args.dry_run:
        positions, batches, contexts, reps = [1, 2, 5], [1, 2], [16], 1
        args.prompts, args.prompt_len, args.tokens, args.repeats = 2, 16, 12, 1
    else:
        positions, batches, contexts, reps = [1, 2, 3, 4, 5, 6, 8, 16, 32, 64], [1, 2, 4, 8, 16, 32], [128, 1024], 5
    hw = profiles.hardware(args.hardware)
    prof = {r: profiles.model(n).model_copy(update={"dtype": args.dtype}) for r, n in
            (("target", args.target), ("draft", args.draft))}
    if args.layers:
        prof = {r: p.model_copy(update={"n_layers": args.layers, "name": f"{p.name}-{args.layers}l"})
                for r, p in prof.items()}
    machine = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu (dry run)"
    print(f"[gpu_validate] {machine}, torch {torch.__version__}; building {prof['target'].name} and "
          f"{prof['draft'].name} ({args.dtype}, random weights)", flush=True)
    src = {r: random_source(profiles.model(n), layers=args.layers, dtype=args.dtype, device=args.device,
                            seed=args.seed + i)
           for i, (r, n) in enumerate((("target", args.target), ("draft", args.draft)))}

    # 1. pass-time grid
    grid, points = {}, []
    for role in ("target", "draft"):
        grid[role] = grid_pass_times(src[role], positions, contexts, batches, repeats=reps, warmup=2, seed=args.seed)
        points += points_from_rows(grid[role], prof[role])
        print(f"[gpu_validate] {role}: {len(grid[role])} passes timed ({time.perf_counter() - t_start:.0f} s)",
              flush=True)
    fit = fit_stack(points, hw, name=f"{hw.name}-fitted", base=profiles.stack(hw.default_stack),
                    description=f"fitted by experiments/gpu_validate.py on {machine}")
    extra = {"machine": machine, "torch": torch.__version__, "script": "experiments/gpu_validate.py",
             "models": f"{prof['target'].name}, {prof['draft'].name} (random weights, {args.dtype})"}
    write_stack_toml(out / f"{hw.name}-fitted-stack.toml", fit, hw, extra)
    fit2 = fit_stack(points, hw, name=f"{hw.name}-fitted-multi-row", base=profiles.stack(hw.default_stack),
                     description=f"fitted by experiments/gpu_validate.py on {machine}", multi_row=True)
    write_stack_toml(out / f"{hw.name}-fitted-multi-row-stack.toml", fit2, hw, extra)
    calibrated = profiles.stack(hw.default_stack)
    cms = {mode: {r: CostModel(prof[r], hw, st) for r in prof}
           for mode, st in (("ideal", IDEAL_STACK), ("calibrated", calibrated), ("fitted", fit.stack))}
    cms["fitted_multi_row"] = {r: fit2.cost_model(prof[r], hw) for r in prof}
    pass_modes = tuple(cms)  # measured mode (added below) is the table itself
    rows = []
    roles = ["target"] * len(grid["target"]) + ["draft"] * len(grid["draft"])
    for role, r, q in zip(roles, grid["target"] + grid["draft"], fit.rows()):
        row = {"model": prof[role].name, "role": role, "batch": r["batch"], "positions": r["positions"],
               "context": r["context"], "measured_s": r["time_s"], "min_s": r["min_time_s"], "held_out": q["held_out"]}
        for mode in cms:
            p = cms[mode][role].pass_time_s(r["batch"], r["positions"], r["context"])
            row[f"{mode}_s"], row[f"{mode}_err_pct"] = p, 100 * (p / r["time_s"] - 1)
        rows.append(row)
    write_csv(out / "gpu_pass_times.csv", rows)

    # 2. speculative run with replayed acceptance, and the plain baseline
    g = np.random.default_rng(args.seed)
    vocab = min(prof["target"].vocab_size, prof["draft"].vocab_size)
    prompts = [g.integers(0, vocab, args.prompt_len).tolist() for _ in range(args.prompts)]
    trace = iid(args.alpha, n_sequences=args.prompts, length=args.tokens + args.gamma + 1, seed=args.seed,
                bernoulli=True)
    betas = trace.sequences()
    spec_plain_warm = (spec_replay(src["target"], src["draft"], prompts[0], betas[0], args.gamma, 8),
                       plain(src["target"], prompts[0], 8))
    del spec_plain_warm
    spec_t, plain_t, accepted = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        accepted = [spec_replay(src["target"], src["draft"], p, b, args.gamma, args.tokens)
                    for p, b in zip(prompts, betas)]
        spec_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for p in prompts:
            plain(src["target"], p, args.tokens)
        plain_t.append(time.perf_counter() - t0)
    meas = {"spec_walltime_s": statistics.median(spec_t), "plain_walltime_s": statistics.median(plain_t)}
    meas["speedup"] = meas["plain_walltime_s"] / meas["spec_walltime_s"]
    print(f"[gpu_validate] end to end: {meas} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    # 3. predictions: the same trace through the engine in each cost mode
    lens = [len(p) for p in prompts]
    b1 = {r: [x for x in grid[r] if x["batch"] == 1] for r in grid}
    pre = {r: prefill_times(src[r], [n - 1 for n in lens], repeats=reps) for r in src}
    cms["measured"] = {r: MeasuredCosts(b1[r], prof[r], hw, pre[r]) for r in src}
    e2e = []
    for mode, cm in cms.items():
        pred = predict_replay(trace, lens, args.tokens, args.gamma, cm["target"], cm["draft"], args.seed)
        match = replay_matches(accepted, pred["accepted"])
        for k in ("spec_walltime_s", "plain_walltime_s", "speedup"):
            e2e.append({"mode": mode, "quantity": k, "measured": meas[k], "predicted": pred[k],
                        "error_pct": 100 * (pred[k] / meas[k] - 1), "replay_identical": match["all_identical"]})
    write_csv(out / "gpu_e2e.csv", e2e)
    summary = {"machine": machine, "torch": torch.__version__, "date": dt.datetime.now(dt.timezone.utc).isoformat(
        timespec="seconds"), "args": vars(args), "fit": fit.summary(), "measured": meas, "spec_walltimes_s": spec_t,
        "plain_walltimes_s": plain_t, "alpha_trace": trace.alpha, "elapsed_s": time.perf_counter() - t_start}
    (out / "gpu_validate.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str))
    md = [f"# GPU validation: {prof['target'].name} ← {prof['draft'].name} on {machine}", "",
          (f"{summary['date']}, torch {torch.__version__}, {args.dtype}, random weights; γ = {args.gamma}, "
          f"synthetic Bernoulli trace α = {trace.alpha:.3f}, {args.prompts} prompts × {args.tokens} tokens, "
          f"median of {args.repeats}."), "",
          "## Pass times: median |error| % of each cost mode", "",
          "| model | ideal | calibrated (" + hw.default_stack + ") | fitted (hold-out) | fitted multi-row (hold-out) |",
          "|---|---|---|---|---|"]
    for role in ("target", "draft"):
        rs = [r for r in rows if r["role"] == role]
        med = {m: statistics.median(abs(r[f"{m}_err_pct"]) for r in rs) for m in pass_modes}
        ho = {m: [abs(r[f"{m}_err_pct"]) for r in rs if r["held_out"]] for m in ("fitted", "fitted_multi_row")}
        ho = {m: statistics.median(v) if v else float("nan") for m, v in ho.items()}
        md.append(f"| {prof[role].name} | {med['ideal']:.1f} | {med['calibrated']:.1f} | {med['fitted']:.1f} "
                  f"({ho['fitted']:.1f}) | {med['fitted_multi_row']:.1f} ({ho['fitted_multi_row']:.1f}) |")
    s = fit.stack
    md += ["", (f"Fitted stack: bandwidth_fraction {s.bandwidth_fraction:.3f}, compute_fraction "
           f"{s.compute_fraction:.3f}, per_call {s.per_call_overhead_s * 1e6:.0f} us, per_layer "
           f"{s.per_layer_overhead_s * 1e6:.1f} us; hold-out median |err| {fit.holdout_error['median_abs_pct']:.2f}%. "
           f"With a multi-row bandwidth fraction ({fit2.multi_row_bandwidth_fraction:.3f}): hold-out median |err| "
           f"{fit2.holdout_error['median_abs_pct']:.2f}%."),
           "", "## End to end (batch 1)", "", "| mode | quantity | measured | predicted | error % | replay identical |",
           "|---|---|---|---|---|---|"]
    md += [f"| {r['mode']} | {r['quantity']} | {r['measured']:.4g} | {r['predicted']:.4g} | {r['error_pct']:+.1f} | "
           f"{r['replay_identical']} |" for r in e2e]
    (out / "gpu_validate.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"[gpu_validate] done in {time.perf_counter() - t_start:.0f} s; wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
