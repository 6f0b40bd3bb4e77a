"""Validate the simulator against real speculative decoding on this 2-core CPU (issue 5, items 8 and 9).

For each real pair — Qwen2.5-Coder-1.5B-Instruct ← 0.5B-Instruct, and SmolLM2-135M-Instruct ← a bigram draft
counted over the prompts — on the committed code prompts (chat template, temperature 0, EOS ignored):
1. pass times of both models over positions × contexts (`specsim.executor.validate.grid_pass_times`), a cpu stack
   fitted to them (hold-out error reported, TOML written with provenance) → calibrated mode; the same table
   interpolated → measured mode;
2. measured speculative decoding (γ fixed, no clipping of the last step) and plain decoding, interleaved, medians
   over repetitions; the β trace of the same prompts recorded; the trace replayed through the SimPy engine;
3. Qwen pair only: the same prompts through Hugging Face `generate(..., assistant_model=draft)` (constant γ),
   per prompt back to back with our executor as shipped, in alternating order: walltime ratio ours / HF (HF on its
   stock kernels), and ours / HF with our kernels switched on for HF too (the loops alone).
Writes experiments/results/validate_cpu.csv, .md, .json and the fitted stacks cpu_stack_<pair>.toml.

The machine is shared: the script waits (up to --wait-s) for the 1-minute load average to drop below --max-load
before each pair, and records the load before and after, since other processes inflate walltimes unevenly.
Usage: .venv/bin/python experiments/validate_cpu.py [--pairs qwen,smollm] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from specsim.executor.validate import MODES, QUANTITIES  # noqa: E402  (torch-free)

RESULTS = ROOT / "experiments" / "results"
PROMPTS = ROOT / "experiments" / "prompts" / "code_prompts.txt"
PAIRS = {
    "qwen": {"target": "qwen2.5-coder-1.5b-instruct", "draft": "qwen2.5-coder-0.5b-instruct", "prompts": 3,
             "tokens": 32, "repeats": 3, "hf": True},
    # the same pair at γ = 2: a second measured point on the predicted speedup-vs-γ curve, and one whose
    # 3-position verification stays on the stock kernels where γ = 3's 4 positions run the packed ones
    "qwen_g2": {"target": "qwen2.5-coder-1.5b-instruct", "draft": "qwen2.5-coder-0.5b-instruct", "prompts": 3,
                "tokens": 32, "repeats": 3, "hf": True, "gamma": 2},
    "smollm": {"target": "smollm2-135m-instruct", "draft": "bigram", "prompts": 6, "tokens": 48, "repeats": 3,
               "hf": False},
    "smollm_g1": {"target": "smollm2-135m-instruct", "draft": "bigram", "prompts": 6, "tokens": 48, "repeats": 3,
                  "hf": False, "gamma": 1},
}
GAMMAS = (1, 2, 3, 4, 5, 6)  # predicted for every pair from its trace and costs (the γ table and figure)


def wait_quiet(max_load: float, wait_s: float) -> float:
    t0 = time.time()
    while os.getloadavg()[0] > max_load and time.time() - t0 < wait_s:
        time.sleep(10)
    return os.getloadavg()[0]


def run_pair(key: str, cfg: dict, args) -> dict:
    import torch

    from specsim import profiles
    from specsim.executor.fetch import cached_model_dir
    from specsim.executor.measure import hf_kinds, paired_hf_round
    from specsim.executor.record import load_prompts
    from specsim.executor.sampling import SamplingConfig
    from specsim.executor.sources import BigramDraft, hf_source
    from specsim.executor.speculative import SpeculativeDecoder
    from specsim.executor.validate import profile_of_source, validate_pair

    tdir = cached_model_dir(cfg["target"])
    if tdir is None:
        raise SystemExit(f"validate_cpu: {cfg['target']} is not fetched (specsim models fetch {cfg['target']})")
    target = hf_source(tdir, dtype="fp32", kernels=args.kernels)
    prompts = load_prompts(PROMPTS, target.tokenizer, target.vocab_size, chat=True, limit=cfg["prompts"])
    if cfg["draft"] == "bigram":
        draft, dprof = BigramDraft(prompts, target.vocab_size), None
    else:
        ddir = cached_model_dir(cfg["draft"])
        if ddir is None:
            raise SystemExit(f"validate_cpu: {cfg['draft']} is not fetched")
        draft = hf_source(ddir, dtype="fp32", kernels=args.kernels)
        dprof = profile_of_source(str(ddir), draft)
    hw = profiles.hardware("cpu-2core")
    load_before = wait_quiet(args.max_load, args.wait_s)
    print(f"[validate_cpu] {key}: {target.name} <- {draft.name}, {len(prompts)} prompts x {cfg['tokens']} tokens, "
          f"load {load_before:.2f}", flush=True)
    greedy = SamplingConfig(temperature=0.0)
    use_hf = cfg["hf"] and not args.no_hf

    gamma = cfg.get("gamma") or args.gamma
    ours_default = SpeculativeDecoder(target, draft, gamma, greedy, timing=False)  # clips γ at the end, as HF
    kinds = hf_kinds(target.kernels)
    rounds_done = itertools.count()

    def hf_round():
        """Right after the round's validation runs: our executor as shipped (γ clipped on the last step, like HF)
        against HF's assisted generation, per prompt back to back in ABBA order (`paired_hf_round`)."""
        w = paired_hf_round(ours_default, prompts, cfg["tokens"], next(rounds_done))
        return {"ours_default_walltime_s": w["ours"]["walltime_s"], "hf_walltime_s": w["hf"]["walltime_s"],
                "hf_new_tokens": w["hf"]["new_tokens"], **{f"{k}_walltime_s": w[k]["walltime_s"] for k in kinds[2:]}}

    if use_hf:   # HF's first generate call pays one-off set-up; keep it out of round 0
        paired_hf_round(ours_default, prompts[:1], 4)

    res = validate_pair(target, draft, prompts, hardware=hw, target_profile=profile_of_source(str(tdir), target),
                        draft_profile=dprof, gamma=gamma, max_new_tokens=cfg["tokens"], sampling=greedy,
                        repeats=cfg["repeats"], warmup=1, seed=0, grid_repeats=args.grid_repeats,
                        positions=args.positions, per_round=hf_round if use_hf else None, gammas=GAMMAS,
                        log=lambda m: print(m, flush=True))
    trace = res.pop("trace")
    tag = "_quick" if args.quick else ""
    trace.write(RESULTS / f"validate_cpu_trace_{key}{tag}.csv")
    import transformers
    extra = {"machine": _cpu(), "torch": torch.__version__, "transformers": transformers.__version__,
             "torch threads": torch.get_num_threads(), "script": "experiments/validate_cpu.py",
             "kernels": target.kernels,
             "pair": f"{target.name} <- {draft.name}"}
    write_stacks(res, key, tag, hw, extra)
    if use_hf:  # paired by prompt within each round: ours and HF ran back to back
        ours = [r["ours_default_walltime_s"] for r in res["per_round"]]
        for k in kinds[1:]:
            key = "ours_over_" + k
            other = [r[f"{k}_walltime_s"] for r in res["per_round"]]
            res[key + "_rounds"] = [a / b for a, b in zip(ours, other)]
            res[key] = statistics.median(res[key + "_rounds"])
            res[f"{k}_walltime_s"] = statistics.median(other)
        res["ours_default_walltime_s"] = statistics.median(ours)
    res["load_before"], res["load_after"] = load_before, os.getloadavg()[0]
    res["torch_threads"] = torch.get_num_threads()
    res["kernels"] = target.kernels
    res["machine"] = extra["machine"]  # so --render / --refit elsewhere still name the CPU that ran it
    return res


def _profile(name: str):
    """The ModelProfile of a cached model as validate_cpu loads it (fp32), from its config.json."""
    from specsim.executor.fetch import cached_model_dir
    from specsim.profiles import ModelProfile
    d = cached_model_dir(name)
    if d is None:
        raise SystemExit(f"validate_cpu --refit: {name} is not fetched (specsim models fetch {name})")
    return ModelProfile.from_hf_config(d, name=name).model_copy(update={"dtype": "fp32", "description": f"from {d}"})


def refit_pair(key: str, res: dict) -> dict:
    """`analyze_pair` on a saved run: same measurements, same trace, today's fits and engine."""
    from specsim import profiles
    from specsim.executor.validate import analyze_pair
    from specsim.traces.format import Trace

    cfg = PAIRS[key]
    trace = Trace.read(RESULTS / f"validate_cpu_trace_{key}.csv")
    hw = profiles.hardware("cpu-2core")
    new = analyze_pair(res["grid"], res["executor"], trace, res["prompt_lens"], hardware=hw,
                       target_profile=_profile(cfg["target"]),
                       draft_profile=None if cfg["draft"] == "bigram" else _profile(cfg["draft"]),
                       gamma=res["gamma"], max_new_tokens=res["max_new_tokens"], names=(res["target"], res["draft"]),
                       gammas=GAMMAS)
    extra = {"machine": res.get("machine", _cpu()), "script": "experiments/validate_cpu.py --refit",
             "pair": f"{res['target']} <- {res['draft']}", "measured": "the saved run of validate_cpu.json"}
    write_stacks(new, key, "", hw, extra)
    return {**res, **new}


def write_stacks(res: dict, key: str, tag: str, hw, extra: dict) -> None:
    """Pop the fits out of `res`, write them as cpu_stack_<key>[_multi_row|_serial]<tag>.toml, note the paths."""
    from specsim.cost.calibrate import write_stack_toml
    for mode, fit in res.pop("fits").items():
        suffix = mode.removeprefix("calibrated")
        path = RESULTS / f"cpu_stack_{key}{suffix}{tag}.toml"
        fit.stack = fit.stack.model_copy(update={"name": path.stem})
        write_stack_toml(path, fit, hw, extra)
        res[f"stack_toml{suffix}"] = str(path.relative_to(ROOT))


def _machine(results: dict) -> str:
    """The CPU the saved runs were measured on (this one for runs saved before it was recorded)."""
    return next((r["machine"] for r in results.values() if r.get("machine")), None) or _cpu()


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "cpu")
    except OSError:
        return "cpu"


def rows_of(key: str, res: dict) -> list[dict]:
    rows = []
    for mode in MODES:
        for q in QUANTITIES:  # report order (a saved JSON has its keys sorted)
            v = res[mode]["compare"][q]
            rows.append({"pair": key, "target": res["target"], "draft": res["draft"], "gamma": res["gamma"],
                         "mode": mode, "quantity": q, "measured": v["measured"], "predicted": v["predicted"],
                         "error_pct": v["error_pct"],
                         "abs_error_pct": None if v["error_pct"] is None else abs(v["error_pct"])})
        for i, e in enumerate(res[mode]["prompt_speedup_error_pct"]):
            rows.append({"pair": key, "target": res["target"], "draft": res["draft"], "gamma": res["gamma"],
                         "mode": mode, "quantity": f"speedup_prompt_{i}",
                         "measured": res["executor"]["prompt_speedups"][i],
                         "predicted": res[mode]["predicted"]["prompt_speedups"][i], "error_pct": e,
                         "abs_error_pct": abs(e)})
    for q in ("ours_over_hf", "ours_over_hf_same_kernels"):
        if q in res:
            rows.append({"pair": key, "target": res["target"], "draft": res["draft"], "gamma": res["gamma"],
                         "mode": "hf", "quantity": "walltime_" + q, "measured": res[q],
                         "predicted": None, "error_pct": None, "abs_error_pct": None})
    return rows


def markdown(results: dict, rows: list[dict], started: str) -> str:
    out = ["# Simulator vs measured speculative decoding on this CPU", "",
           (f"Run {started} by `experiments/validate_cpu.py` ({_machine(results)}; temperature 0, chat-templated code "
           f"prompts from `experiments/prompts/code_prompts.txt`, EOS ignored, no γ clipping at the end). "
           "Calibrated = roofline cost model with a cpu stack fitted to this run's pass-time grid (today's "
           "StackProfile: one bandwidth fraction); calibrated_multi_row = the same plus a separate bandwidth fraction "
           "for passes of at least R rows, R fitted too (`StackProfile.multi_row_bandwidth_fraction`), and a fixed "
           "cost of every pass of several positions (`multi_position_overhead_s`); calibrated_serial = "
           "that with the memory and compute times added instead of overlapped (`StackProfile.overlap = \"sum\"`: "
           "eager CPU kernels stream a weight block, then multiply it); measured = the grid "
           "interpolated (`specsim.cost.measured.MeasuredCosts`). All replay the β trace recorded on the same prompts "
           "through the SimPy engine."), ""]
    for key, res in results.items():
        ex = res["executor"]
        out += [(f"## {res['target']} ← {res['draft']} (γ = {res['gamma']}, α = {res['alpha']:.3f}, "
                f"{res['prompts']} prompts × {res['max_new_tokens']} tokens)"), "",
                (f"Load average before/after: {res['load_before']:.2f} / {res['load_after']:.2f}; torch threads "
                f"{res['torch_threads']}; our executor's kernels: {res.get('kernels', 'stock')}. Spec walltimes "
                f"per repetition {[round(x, 2) for x in ex['spec_walltimes_s']]}"
                f" s, plain {[round(x, 2) for x in ex['plain_walltimes_s']]} s."), ""]
        out += [f"Measured speedup per round (spec and plain back to back): "
                f"{[round(x, 3) for x in ex['round_speedups']]}.", ""]
        for label in MODES[:-1]:
            suffix = label.removeprefix("calibrated")
            cal, tkey = res["calibration" + suffix], "stack_toml" + suffix
            s = cal["stack"]
            multi = cal.get("multi_row_bandwidth_fraction")
            out.append(f"Stack for {label} (`{res[tkey]}`), fitted to the whole grid (P = "
                       f"{sorted({p['positions'] for p in res['grid']['target']})}, contexts "
                       f"{sorted({p['context'] for p in res['grid']['target']})}): bandwidth_fraction "
                       f"{s['bandwidth_fraction']:.3f}"
                       + (f", multi-row bandwidth_fraction {multi:.3f} from {cal.get('multi_row_min_rows') or 2} "
                          "rows" if multi else "")
                       + (", memory and compute times added" if s.get("overlap") == "sum" else "")
                       + (f", multi-position {s['multi_position_overhead_s'] * 1e3:.2f} ms"
                          if s.get("multi_position_overhead_s") else "")
                       + f", compute_fraction {s['compute_fraction']:.3f}, per_call "
                       f"{s['per_call_overhead_s'] * 1e3:.2f} ms, per_layer {s['per_layer_overhead_s'] * 1e3:.3f} ms; "
                       f"fit median |err| {cal['fit_error']['median_abs_pct']:.1f}% ({cal['fit_error']['n']} points), "
                       f"hold-out median |err| {cal['holdout_error']['median_abs_pct']:.1f}%, max "
                       f"{cal['holdout_error']['max_abs_pct']:.1f}% ({cal['holdout_error']['n']} points).")
            out.append("")
        out += [
                "| mode | quantity | measured | predicted | error % |", "|---|---|---|---|---|"]
        for r in rows:
            if r["pair"] == key and r["mode"] != "hf" and not r["quantity"].startswith("speedup_prompt"):
                err = "" if r["error_pct"] is None else f"{r['error_pct']:+.1f}"
                out.append(f"| {r['mode']} | {r['quantity']} | {r['measured']:.4g} | {r['predicted']:.4g} | {err} |")
        for mode in MODES:
            e = [abs(x) for x in res[mode]["prompt_speedup_error_pct"]]
            rp = res[mode]["replay"]
            out.append(f"\n{mode}: per-prompt speedup |error| median {statistics.median(e):.1f}% (max {max(e):.1f}%); "
                       f"replay reproduces {rp['steps_agreeing']}/{rp['steps']} steps' accepted counts "
                       f"({rp['sequences_identical']}/{rp['sequences']} prompts identical).")
        acc = [a for seq in ex["accepted"] for a in seq]
        clean = sum(a == res["gamma"] for a in acc) / max(1, len(acc))
        d1 = [g["time_s"] for g in res["grid"]["draft"] if g["positions"] == 1]
        d2 = [g["time_s"] for g in res["grid"]["draft"] if g["positions"] == 2]
        if d1 and d2:
            ratio = statistics.median(d2) / statistics.median(d1)
            out.append(f"\nDraft catch-up pass: after a clean sweep ({100 * clean:.0f}% of steps here) the executor's "
                       "next first draft pass covers 2 positions (the last draft and the bonus token); a 2-position "
                       f"draft pass costs {ratio:.2f}x a 1-position one here. The replay prices it "
                       "(`StepCosts(draft_catchup=True)`); without that the simulated draft time would be about "
                       f"{100 * clean * (ratio - 1) / res['gamma']:.0f}% low.")
        out += gamma_lines(res)
        if "ours_over_hf" in res:
            kern = res.get("kernels", "stock")
            out.append(f"\nHF assisted generation (same γ, constant schedule, greedy, same prompts, stock kernels): "
                       f"median {res['hf_walltime_s']:.2f} s vs our executor as shipped (kernels {kern}, γ clipped "
                       f"at the end like HF) {res['ours_default_walltime_s']:.2f} s; ours / HF per round "
                       f"{[round(x, 3) for x in res['ours_over_hf_rounds']]} → median **{res['ours_over_hf']:.3f}**.")
            if "ours_over_hf_same_kernels" in res:
                out.append(f"With our kernels switched on for HF too (the two loops alone, same passes): HF median "
                           f"{res['hf_same_kernels_walltime_s']:.2f} s; ours / HF per round "
                           f"{[round(x, 3) for x in res['ours_over_hf_same_kernels_rounds']]} → median "
                           f"**{res['ours_over_hf_same_kernels']:.3f}**.")
        out.append("")
    out += ["## Summary", ""]
    for mode in MODES:
        agg = [r["abs_error_pct"] for r in rows if r["mode"] == mode and r["quantity"] == "speedup"]
        per = [r["abs_error_pct"] for r in rows if r["mode"] == mode and r["quantity"].startswith("speedup_prompt")]
        if agg:
            out.append(f"- {mode}: median |error| of the end-to-end speedup over pairs {statistics.median(agg):.1f}%"
                       f" (per pair {', '.join(f'{x:.1f}%' for x in agg)}); over all prompts "
                       f"{statistics.median(per):.1f}%. Goal: ≤ 3%.")
    return "\n".join(out) + "\n"


def gamma_lines(res: dict) -> list[str]:
    """The replayed speedup at every γ of GAMMAS in each mode, the closed form beside it."""
    sw = {m: {r["gamma"]: r for r in res[m].get("gamma_sweep", [])} for m in MODES}
    if not sw["measured"]:
        return []
    best = {m: max(sw[m], key=lambda g: sw[m][g]["speedup"]) for m in MODES}
    out = ["", (f"Predicted speedup by γ (the same β trace replayed at each γ with this run's costs; measured at "
                f"γ = {res['gamma']}: **{res['executor']['speedup']:.3f}**). Closed form: eq. (5) at the trace's α "
                "with c = draft / target one-token step from the measured table, a verification priced as one "
                "target step. Best γ: " + ", ".join(f"{m} {best[m]}" for m in MODES) + "."), "",
           "| γ | " + " | ".join(MODES) + " | verify / plain step (measured) | closed form |",
           "|---" * (len(MODES) + 3) + "|"]
    for g in sorted(sw["measured"]):
        m = sw["measured"][g]
        out.append(f"| {g}{' (run)' if g == res['gamma'] else ''} | "
                   + " | ".join(f"{sw[k][g]['speedup']:.3f}" for k in MODES)
                   + f" | {m['verify_over_plain']:.2f} | {m['closed_form_speedup']:.3f} |")
    return out


def plot_gammas(results: dict, path: Path) -> Path | None:
    """Predicted speedup vs γ per pair (lines: modes and the closed form), the measured runs as points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs: dict = {}
    for res in results.values():
        if res["measured"].get("gamma_sweep"):
            pairs.setdefault((res["target"], res["draft"]), []).append(res)
    if not pairs:
        return None
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 3.8), squeeze=False)
    for ax, ((tname, dname), runs) in zip(axes[0], pairs.items()):
        ref = runs[0]
        for mode, style in zip(MODES, ("C0:", "C1--", "C2-", "C3-"), strict=True):
            sw = ref[mode]["gamma_sweep"]
            ax.plot([r["gamma"] for r in sw], [r["speedup"] for r in sw], style, marker=".",
                    label=f"{mode} (table)" if mode == "measured" else mode)
        sw = ref["measured"]["gamma_sweep"]
        ax.plot([r["gamma"] for r in sw], [r["closed_form_speedup"] for r in sw], "C7-.", label="closed form (5)")
        for res in runs:
            ax.plot([res["gamma"]], [res["executor"]["speedup"]], "kD", ms=7,
                    label="measured run" if res is runs[0] else None)
        ax.axhline(1.0, color="0.6", lw=0.8)
        ax.set(title=f"{tname}\n<- {dname}", xlabel="γ (draft tokens per step)", ylabel="speedup over plain decoding")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _write(results: dict, rows: list[dict], started: str, suffix: str) -> None:
    with (RESULTS / f"validate_cpu{suffix}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    md = markdown(results, rows, started)
    fig = plot_gammas(results, RESULTS / f"validate_cpu_gamma{suffix}.png")
    if fig is not None:
        md += f"\n![predicted speedup by γ]({fig.name})\n"
    (RESULTS / f"validate_cpu{suffix}.md").write_text(md)
    print((RESULTS / f"validate_cpu{suffix}.md").read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", default="qwen,qwen_g2,smollm,smollm_g1")
    ap.add_argument("--gamma", type=int, default=3, help="γ of the pairs that do not set their own")
    ap.add_argument("--grid-repeats", type=int, default=1, help="passes per grid point per round")
    ap.add_argument("--positions", default="1,2,3,4,6,8,16,32,64")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--repeats", type=int, default=None, help="rounds per pair (default: the pair's own, 3)")
    ap.add_argument("--kernels", default="auto", help="our executor's kernels (specsim.executor.kernels): auto "
                    "(packed on this CPU) | stock | packed | row-gemm; HF's generate runs the stock kernels, and "
                    "once more on ours")
    ap.add_argument("--quick", action="store_true", help="1 prompt, 6 tokens, 1 round (a smoke test)")
    ap.add_argument("--max-load", type=float, default=0.7)
    ap.add_argument("--wait-s", type=float, default=600)
    ap.add_argument("--render", action="store_true", help="only re-write the .md/.csv from the saved .json")
    ap.add_argument("--refit", action="store_true", help="no new measurement: refit the stacks and re-predict the "
                    "saved run (.json grid and walltimes + the saved trace CSVs) with today's cost models")
    args = ap.parse_args(argv)
    if args.refit:
        saved = json.loads((RESULTS / "validate_cpu.json").read_text())
        results = {key: refit_pair(key, res) for key, res in saved["results"].items()}
        rows = [r for key, res in results.items() for r in rows_of(key, res)]
        (RESULTS / "validate_cpu.json").write_text(json.dumps(
            {**saved, "results": results, "refitted": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")},
            indent=1, sort_keys=True, default=str))
        _write(results, rows, saved["started"], "")
        return 0
    if args.render:
        saved = json.loads((RESULTS / "validate_cpu.json").read_text())
        rows = [r for key, res in saved["results"].items() for r in rows_of(key, res)]
        _write(saved["results"], rows, saved["started"], "")
        return 0
    args.positions = [int(x) for x in args.positions.split(",")]
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.time()
    pairs = {k: dict(PAIRS[k]) for k in args.pairs.split(",")}
    if args.repeats:
        pairs = {k: {**v, "repeats": args.repeats} for k, v in pairs.items()}
    if args.quick:
        pairs = {k: {**v, "prompts": 1, "tokens": 6, "repeats": 1} for k, v in pairs.items()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    results, rows = {}, []
    for key, cfg in pairs.items():
        results[key] = run_pair(key, cfg, args)
        rows += rows_of(key, results[key])
    suffix = "_quick" if args.quick else ""
    (RESULTS / f"validate_cpu{suffix}.json").write_text(json.dumps(
        {"started": started, "elapsed_s": time.time() - t0, "results": results}, indent=1, sort_keys=True,
        default=str))
    _write(results, rows, started, suffix)
    print(f"[validate_cpu] done in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
