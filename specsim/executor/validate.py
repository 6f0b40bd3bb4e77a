"""Validation: run speculative and plain decoding for real, replay the recorded trace through the engine, compare.

Pipeline (`validate_pair`):
1. prefill times of both models at the prompts' lengths; then `repeats` rounds, each timing the pass-time grid of
   both models before and after its decoding (batch 1 on a CPU; `grid_pass_times` also times batches), a pass
   timed as the executor runs it (see `grid_pass_times`); the decoding runs every prompt speculatively (γ drafts
   every step,
   `clip_gamma=False`, which is what the simulator does: the last step drafts a full γ and the output is
   truncated) and plainly, EOS ignored so every run emits exactly `max_new_tokens`. Interleaving the grid with
   the walltimes makes both see the same machine load; every figure is the median over rounds;
2. a stack profile fitted to the grid (`specsim.cost.calibrate.fit_stack`, hold-out error reported) → calibrated mode;
   the same with a separate bandwidth fraction for multi-row passes → calibrated_multi_row mode; that with memory
   and compute times added instead of overlapped (overlap "sum") → calibrated_serial mode; the table
   interpolated → measured mode (`specsim.cost.measured.MeasuredCosts`);
3. the β trace of the same prompts (`record_trace`, `max_new_tokens + γ` positions so the last step's drafts are
   covered), replayed through the SimPy engine (closed loop, batch 1, request i = prompt i) in both cost modes.

The replay (position mapping, β trace → engine → predictions) lives in `specsim.validation.replay`.

torch is imported inside the functions that measure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import numpy as np

from specsim.errors import ConfigError
from specsim.validation.replay import (  # noqa: F401  (re-exported: validate's public names)
    QUANTITIES, compare, predict_gammas, predict_replay, replay_matches, shifted_trace)

_DTYPE_NAMES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}
# the cost modes fitted to the grid (fit_stack options) and the one that interpolates it; calibrated comes first
FITTED_MODES = {"calibrated": {}, "calibrated_multi_row": {"multi_row": True},
                "calibrated_serial": {"multi_row": True, "overlap": "sum"}}
MODES = (*FITTED_MODES, "measured")


def profile_of_source(spec: str, source):
    """The ModelProfile whose roofline describes a loaded source, in the dtype it runs in; None for n-gram drafts.

    `profile:NAME[:layers=N]` → that profile with N layers; a HF directory → its config.json."""
    from pathlib import Path

    from specsim import profiles
    from specsim.profiles import ModelProfile

    if getattr(source, "free", False) or not hasattr(source, "model"):
        return None
    dtype = _DTYPE_NAMES.get(str(getattr(source, "dtype", "")), "fp32")
    head, *rest = spec.split(":")
    if head == "profile":
        prof = profiles.model(rest[0])
        layers = int(source.model.config.num_hidden_layers)
        return prof.model_copy(update={"n_layers": layers, "dtype": dtype,
                                       "name": prof.name + (f"-{layers}l" if layers != prof.n_layers else "")})
    import tempfile
    with tempfile.TemporaryDirectory() as d:  # the loaded model's own config (HF directory or GGUF alike)
        source.model.config.to_json_file(str(Path(d) / "config.json"))
        name = Path(spec).stem if Path(spec).suffix == ".gguf" else Path(spec).name
        return ModelProfile.from_hf_config(d, name=name).model_copy(update={"dtype": dtype,
                                                                            "description": f"from {spec}"})


# --- measuring ---------------------------------------------------------------------------------------------
def grid_pass_times(source, positions: Sequence[int], contexts: Sequence[int] = (0,), batches: Sequence[int] = (1,),
                    repeats: int = 3, warmup: int = 1, seed: int = 0, sample: bool = True) -> list[dict]:
    """Median time of one pass (B sequences × P new positions after L cached) over the grid.

    With `sample` (batch 1), a pass is timed the way the executor runs it: a one-position pass (draft or plain
    step) adds adjust + sample of its distribution; a P-position pass (verification) adds adjust of all P rows
    and the accept/reject rule over P − 1 drafts. Batch > 1 (transformers sources only) adds an argmax of the
    last position. On CUDA each timed region ends with a synchronize."""
    import torch

    from specsim.executor.sampling import SamplingConfig, adjust, speculative_accept
    from specsim.executor.sampling import sample as draw
    from specsim.executor.speculative import _sync

    greedy = SamplingConfig(temperature=0)
    gen = torch.Generator().manual_seed(seed)
    dev = source.device
    rng = torch.Generator(device=dev).manual_seed(seed) if dev.type != "cpu" else gen
    rows = []

    def finish(logits, P: int):
        if logits.shape[0] > 1:
            logits[:, -1].argmax(-1).tolist()
        elif P == 1:
            int(draw(adjust(logits[0, -1], greedy), rng, True))
        else:
            p = adjust(logits[0], greedy)
            n, tok = speculative_accept(p, p[:-1], p[:-1].argmax(-1), rng, greedy=True)
            torch.stack([n, tok]).tolist()

    with torch.inference_mode():
        for B in batches:
            if B > 1 and not hasattr(source, "model"):
                raise ConfigError("batch > 1 needs a transformers model source", field="batches", value=B)
            for L in contexts:
                state = source.new_state()
                if L > 0:
                    _forward(source, torch.randint(source.vocab_size, (B, L), generator=gen), state, 1)
                for P in positions:
                    ids = torch.randint(source.vocab_size, (B, P), generator=gen).to(dev)

                    def one(ids=ids, state=state, P=P, L=L):
                        logits = _forward(source, ids, state, P)
                        if sample:
                            finish(logits, P)
                        source.crop(state, L)
                    for _ in range(warmup):
                        one()
                    _sync(dev)
                    times = []
                    for _ in range(repeats):
                        t0 = time.perf_counter()
                        one()
                        _sync(dev)
                        times.append(time.perf_counter() - t0)
                    rows.append({"batch": int(B), "positions": int(P), "context": int(L),
                                 "time_s": statistics.median(times), "min_time_s": min(times)})
    return rows


def _forward(source, ids, state, keep: int):
    """Logits [B, keep, V] (batch 1 through the Source interface; batch > 1 through the HF model)."""
    if ids.shape[0] == 1:
        return source.forward(ids.view(-1), state, keep=keep).unsqueeze(0)
    kw = {source._cache_kw: state, "use_cache": True}
    if source._keep_kw:
        kw["logits_to_keep"] = keep
    return source.model(input_ids=ids.to(source.device), **kw).logits[:, -keep:]


def prefill_times(source, prompt_lens: Sequence[int], repeats: int = 3, warmup: int = 1) -> list[dict]:
    """Prefill (one pass over P tokens from an empty cache) for each distinct length: MeasuredCosts prefill rows."""
    return [{**r, "context": 0} for r in grid_pass_times(source, sorted({int(p) for p in prompt_lens if p > 0}),
                                                        (0,), (1,), repeats, warmup, sample=False)]


def run_end_to_end(target, draft, prompts, gamma: int, max_new_tokens: int, sampling, repeats: int = 2,
                   warmup: int = 1, seed: int = 0) -> dict:
    """Speculative (no γ clipping) and plain decoding of every prompt, `repeats` times after warm-up.

    Per prompt the two run back to back in ABBA order over prompts and repetitions (spec first where rep + i is
    even, plain first otherwise), so a machine whose speed drifts by the minute slows both alike. Returns the
    walltimes of each repetition (whole prompt set, the sum of its prompts' runs), and the last repetition's
    per-prompt results."""
    from specsim.executor.speculative import PlainDecoder, SpeculativeDecoder

    spec = SpeculativeDecoder(target, draft, gamma, sampling, clip_gamma=False, timing=True,
                              fuse_prefill=False)  # the engine models a separate prefill
    plain = PlainDecoder(target, sampling, timing=True)
    for _ in range(warmup):
        spec.generate(prompts[0], min(8, max_new_tokens), seed=seed)
        plain.generate(prompts[0], min(8, max_new_tokens), seed=seed)
    spec_t, plain_t, spec_res, plain_res, spec_p, plain_p = [], [], [], [], [], []
    for rep in range(repeats):
        spec_res, plain_res, ts, tp = [], [], 0.0, 0.0
        for i, p in enumerate(prompts):
            for kind in (("spec", "plain") if (rep + i) % 2 == 0 else ("plain", "spec")):
                t0 = time.perf_counter()
                if kind == "spec":
                    spec_res.append(spec.generate(p, max_new_tokens, seed=seed + i))
                    ts += time.perf_counter() - t0
                else:
                    plain_res.append(plain.generate(p, max_new_tokens, seed=seed + i))
                    tp += time.perf_counter() - t0
        spec_t.append(ts)
        plain_t.append(tp)
        spec_p.append([r.walltime_s for r in spec_res])
        plain_p.append([r.walltime_s for r in plain_res])
    return {"spec_walltimes_s": spec_t, "plain_walltimes_s": plain_t, "spec": spec_res, "plain": plain_res,
            "spec_prompt_s": spec_p, "plain_prompt_s": plain_p}


def _measured_summary(e2e: dict, gamma: int, max_new_tokens: int, prompt_lens: Sequence[int]) -> dict:
    steps = [s for r in e2e["spec"] for s in r.steps]
    psteps = [s for r in e2e["plain"] for s in r.steps]
    spec_w, plain_w = statistics.median(e2e["spec_walltimes_s"]), statistics.median(e2e["plain_walltimes_s"])
    # speedups are paired within a round (spec and plain ran back to back), then the median over rounds
    sp, pp = np.array(e2e["spec_prompt_s"]), np.array(e2e["plain_prompt_s"])
    spec_p, plain_p = np.median(sp, axis=0), np.median(pp, axis=0)
    rounds = np.array(e2e["plain_walltimes_s"]) / np.array(e2e["spec_walltimes_s"])
    return {"spec_walltime_s": spec_w, "plain_walltime_s": plain_w, "speedup": float(np.median(rounds)),
            "round_speedups": rounds.tolist(),
            "spec_walltimes_s": e2e["spec_walltimes_s"], "plain_walltimes_s": e2e["plain_walltimes_s"],
            "prompt_speedups": np.median(pp / sp, axis=0).tolist(), "spec_prompt_s": spec_p.tolist(),
            "plain_prompt_s": plain_p.tolist(),
            "accepted": [r.accepted for r in e2e["spec"]], "target_runs": len(steps),
            "tokens_per_target_run": float(np.mean([s.accepted for s in steps]) + 1),
            "draft_step_s": statistics.median(s.draft_time_s / s.gamma for s in steps if s.gamma),
            "verify_pass_s": statistics.median(s.verify_time_s for s in steps if s.gamma == gamma),
            "plain_step_s": statistics.median(s.verify_time_s + s.overhead_time_s for s in psteps),
            "spec_overhead_share": sum(s.overhead_time_s for s in steps) / max(  # 1e-12 s: no division by 0
                1e-12, sum(s.draft_time_s + s.verify_time_s + s.overhead_time_s for s in steps)),
            "mean_context": float(np.mean(prompt_lens)) - 1 + max_new_tokens / 2}


def _median_rows(runs: list[list[dict]]) -> list[dict]:
    """Point-wise median over rounds of grid_pass_times results (same grid each round)."""
    out = []
    for rows in zip(*runs):
        times = [r["time_s"] for r in rows]
        out.append({**rows[0], "time_s": statistics.median(times), "min_time_s": min(r["min_time_s"] for r in rows),
                    "round_times_s": times})
    return out


def validate_pair(target, draft, prompts, *, hardware, target_profile, draft_profile=None, gamma: int = 3,
                  max_new_tokens: int = 32, sampling=None, repeats: int = 2, warmup: int = 1, seed: int = 0,
                  positions: Sequence[int] = (1, 2, 3, 4, 6, 8, 16, 32, 64), contexts: Sequence[int] | None = None,
                  grid_repeats: int = 1, stack=None, per_round=None, gammas: Sequence[int] = (), log=print) -> dict:
    """The whole validation for one pair (see the module docstring).

    Cost modes compared (`MODES`): `calibrated` (a StackProfile fitted to the grid, or `stack` if given),
    `calibrated_multi_row` (the same with a separate bandwidth fraction for multi-row passes,
    `StackProfile.multi_row_bandwidth_fraction`), `calibrated_serial` (that with memory and compute times added;
    these two only when fitting here) and `measured`
    (the grid interpolated). `per_round()`: called after each round's decoding (e.g. to time HF's
    assisted generation under the same load); its results are returned in `per_round`. `draft_profile` None = a
    draft without weights (n-gram)."""
    from specsim.executor.record import record_trace
    from specsim.executor.sampling import SamplingConfig

    sampling = sampling or SamplingConfig(temperature=0.0)
    prompt_lens = [len(p) for p in prompts]
    if contexts is None:
        contexts = (0, int(2 ** np.ceil(np.log2(max(prompt_lens) + max_new_tokens + gamma))))
    positions = sorted(set(positions) | {1, gamma + 1})
    t0 = time.perf_counter()
    d_pos = positions if draft_profile is not None else [1, 2]
    pre_lens = [n - 1 for n in prompt_lens]
    # Rounds: each one times the prefills and the grid once (`grid_repeats` passes per point) and then decodes
    # every prompt speculatively and plainly, so that the pass-time table and the walltimes see the same load.
    t_runs, d_runs, tp_runs, dp_runs, rounds, e2e = [], [], [], [], [], None
    for r in range(repeats):
        log(f"[validate] round {r + 1}/{repeats}: pass-time grids ({time.perf_counter() - t0:.0f} s so far)")
        tp_runs.append(prefill_times(target, pre_lens, repeats=grid_repeats))
        dp_runs.append(prefill_times(draft, pre_lens, repeats=grid_repeats))
        t_runs.append(grid_pass_times(target, positions, contexts, repeats=grid_repeats, seed=seed))
        d_runs.append(grid_pass_times(draft, d_pos, contexts, repeats=grid_repeats, seed=seed))
        log(f"[validate] round {r + 1}/{repeats}: end to end ({time.perf_counter() - t0:.0f} s so far)")
        one = run_end_to_end(target, draft, prompts, gamma, max_new_tokens, sampling, 1, warmup if r == 0 else 0,
                             seed)
        e2e = one if e2e is None else {k: (e2e[k] + one[k]) if k.endswith("_s") else one[k] for k in one}
        # the grids again, so that the table brackets the walltimes it predicts (the machine drifts by the minute)
        t_runs.append(grid_pass_times(target, positions, contexts, repeats=grid_repeats, seed=seed))
        d_runs.append(grid_pass_times(draft, d_pos, contexts, repeats=grid_repeats, seed=seed))
        if per_round is not None:
            rounds.append(per_round())
    t_rows, d_rows = _median_rows(t_runs), _median_rows(d_runs)
    t_pre, d_pre = _median_rows(tp_runs), _median_rows(dp_runs)
    log(f"[validate] recording the β trace ({time.perf_counter() - t0:.0f} s so far)")
    trace = record_trace(target, draft, prompts, max_new_tokens + max([gamma, *gammas]), sampling, seed=seed,
                         task="validate")
    measured = _measured_summary(e2e, gamma, max_new_tokens, prompt_lens)
    out = analyze_pair({"target": t_rows, "draft": d_rows, "target_prefill": t_pre, "draft_prefill": d_pre},
                       measured, trace, prompt_lens, hardware=hardware, target_profile=target_profile,
                       draft_profile=draft_profile, gamma=gamma, max_new_tokens=max_new_tokens, stack=stack,
                       seed=seed, names=(target.name, draft.name), gammas=gammas)
    out.update({"temperature": sampling.temperature, "prompts": len(prompts), "per_round": rounds})
    out["trace"] = trace  # not JSON: callers pop it (to write the trace), as "fits"
    out["elapsed_s"] = time.perf_counter() - t0
    return out


def analyze_pair(grid: dict, measured: dict, trace, prompt_lens: Sequence[int], *, hardware, target_profile,
                 draft_profile=None, gamma: int, max_new_tokens: int, stack=None, seed: int = 0,
                 names: tuple[str, str] = ("target", "draft"), gammas: Sequence[int] = ()) -> dict:
    """Fit the stacks to the measured grid and predict the measured run in every cost mode (`validate_pair`'s
    second half; also runs on saved measurements, so a better cost model can be scored on the same run).

    grid: {"target", "draft", "target_prefill", "draft_prefill"} rows (median over rounds); measured:
    `_measured_summary`; trace: the β trace recorded on the same prompts (one sequence per prompt); gammas: also
    predict these γ (`predict_gammas`, in each mode's "gamma_sweep")."""
    from specsim.cost.calibrate import fit_stack, points_from_rows
    from specsim.cost.measured import MeasuredCosts

    t_rows, d_rows = grid["target"], grid["draft"]
    meas_t = MeasuredCosts(t_rows, target_profile, hardware, grid["target_prefill"], name=names[0])
    meas_d = MeasuredCosts(d_rows, draft_profile, hardware if draft_profile else None, grid["draft_prefill"],
                           name=names[1])
    points = points_from_rows(t_rows, target_profile)
    if draft_profile is not None:
        points += points_from_rows(d_rows, draft_profile)
    fits = {} if stack is not None else {
        m: fit_stack(points, hardware, name=f"{hardware.name}-calibrated", **kw) for m, kw in FITTED_MODES.items()}
    st = stack or fits["calibrated"].stack
    out = {"target": names[0], "draft": names[1], "gamma": gamma, "max_new_tokens": max_new_tokens,
           "prompt_lens": list(prompt_lens), "alpha": trace.alpha, "executor": measured, "stack": st.model_dump(),
           "calibration_points": fits["calibrated"].rows() if fits else None, "grid": grid}
    for m in FITTED_MODES:  # calibration, calibration_multi_row, calibration_serial: the fits' summaries
        out["calibration" + m.removeprefix("calibrated")] = fits[m].summary() if fits else None
    from specsim.setup.deployment import Deployment  # the one place a setup becomes cost models

    dep = Deployment(hardware, st, target_profile, draft_profile)
    modes = {"calibrated": dep.cost_models if draft_profile is not None else (dep.cost_models[0], meas_d)}
    for m, f in fits.items():
        if m != "calibrated":
            modes[m] = (f.cost_model(target_profile, hardware),
                        f.cost_model(draft_profile, hardware) if draft_profile else meas_d)
    modes["measured"] = (meas_t, meas_d)
    for mode, (tc, dc) in modes.items():
        pred = predict_replay(trace, prompt_lens, max_new_tokens, gamma, tc, dc, seed)
        errs = [100.0 * (p / m - 1.0) for p, m in zip(pred["prompt_speedups"], measured["prompt_speedups"])]
        out[mode] = {"predicted": {k: v for k, v in pred.items() if k != "accepted"},
                     "predicted_accepted": pred["accepted"], "compare": compare(measured, pred),
                     "prompt_speedup_error_pct": errs,
                     "replay": replay_matches(measured["accepted"], pred["accepted"]),
                     "gamma_sweep": predict_gammas(trace, prompt_lens, max_new_tokens, gammas, tc, dc, seed)}
    out["fits"] = fits  # not JSON: callers pop it (to write the stack TOMLs)
    return out
