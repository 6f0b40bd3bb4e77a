"""Score the vllm-v1 engine profile against the vLLM runs experiments/vllm_cpu.py measured.

    .venv/bin/python experiments/vllm_cpu.py analyze      # (= this module's analyze(OUT))

1. Calibrate from runs WITHOUT speculation only: `calibration_runs` takes the cal-target and cal-draft sessions
   (each model served alone) and refuses any of them that drafted (`step_fit.check_no_speculation`: its config, its
   counters, its per-request metrics or a step whose generation tokens outnumber its generation requests);
   tests/test_vllm_calibration.py guards it. Each model's table is `step_fit.fit_step_table`: knots at the measured
   token counts, monotone (isotonic), interpolated between measured counts only, per-step KV context carried when
   logged, no overhead split out of the draft's table. A prediction that needed a step outside the measured range
   says so (`unmeasured_steps` per point and in total).
2. Acceptance: vLLM's own per-request accepted and drafted counts of each run, replayed step by step
   (experiments/vllm_predict.py), draft model and n-gram alike.
3. Predict every measured run with its own recorded knobs (k, max_num_seqs, token budget, block size, KV pool),
   requests (prompt lengths, order), loop (closed at its concurrency, or the measured arrivals of a Poisson point)
   and arrival pattern (offline engine: a request added while it is busy joins one step late), and compare, per
   speculative variant (method and k) and point: speedup as output-throughput ratio and as TPOT-p50 ratio (spec over
   plain, paired within a repeat), TTFT p50 and TPOT p50 of each mode, eq. (5) beside, break-even concurrency and
   rate. Each point shows its measured spread (min and max over repeats).
"""

from __future__ import annotations

import csv
import fnmatch
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from specsim.validation import host_scale as hs  # noqa: E402
from specsim.validation import request_table as rt  # noqa: E402
from specsim.validation import step_fit as sf  # noqa: E402
from specsim.validation import vllm_outputs as vr  # noqa: E402
from specsim.validation import vllm_runs as vrun  # noqa: E402
from vllm_blocks import MOMENT  # noqa: E402  (experiments/vllm_blocks.py)
from vllm_host import block_drift, join_lag, probes  # noqa: E402  (experiments/vllm_host.py)
from vllm_predict import predict  # noqa: E402  (experiments/vllm_predict.py)
from vllm_scores import score_points, summarize  # noqa: E402  (experiments/vllm_scores.py)

CAL = {"target": "cal-target", "draft": "cal-draft"}


def load_runs(out: Path) -> list[dict]:
    runs = []
    for f in sorted((out / "runs").glob("*.json")):
        d = json.loads(f.read_text())
        d["_file"] = str(f.relative_to(out)) if f.is_relative_to(out) else str(f)
        d["summary"] = vr.summarize_requests(d, f)
        d["cfg"] = vrun.run_config(d, f)
        runs.append(d)
    return runs


def check_plain_steps(run: dict, where: str) -> None:
    """A step that generated more tokens than it had generation requests verified drafts: refused."""
    for i, s in enumerate(run.get("steps") or []):
        if s.get("gen_tokens", 0) > s.get("gen_requests", s.get("gen_tokens", 0)):
            from specsim.errors import ConfigError
            raise ConfigError("a step verified drafts (more generation tokens than generation requests): a "
                              "speculative run cannot calibrate a step table", file=where,
                              field=f"steps[{i}].gen_tokens", value=s["gen_tokens"],
                              allowed=f"<= gen_requests = {s.get('gen_requests')}")


def calibration_runs(runs: list[dict], model: str, block: str | None = None) -> list[dict]:
    """The runs a model's step table is fitted on: that model served alone (in `block` only, if given), not the
    runs at a grid pair's moment (experiments/vllm_blocks.py MOMENT: they price their own pair, vllm_moment_cal.py);
    a speculative one is refused."""
    picked = [r for r in runs if r.get("mode") == CAL[model] and (block is None or r.get("block") == block)
              and not str(r.get("point", "")).startswith(MOMENT)]
    for r in picked:
        sf.check_no_speculation(r, r.get("_file", "run"))
        check_plain_steps(r, r.get("_file", "run"))
    return picked


def step_table(runs: list[dict], where: str, monotone: bool = True, kv: str = "context") -> sf.FittedStepTable:
    """Step time against the tokens a step scheduled (a candidate of experiments/vllm_select.py)."""
    steps = [s for r in runs for s in r["steps"]]
    return sf.fit_step_table(sf.StepSamples.from_steps(steps, where, kv), where=where, monotone=monotone)


def request_table(runs: list[dict], where: str, monotone: bool = True, kv: str = "context",
                  logits: str = "last") -> rt.RequestStepTable:
    """The (tokens, requests) table (specsim.validation.request_table; a candidate of experiments/vllm_select.py);
    `logits`: where a verification reads its bracket (rt.LOGITS)."""
    return rt.fit_request_table([s for r in runs for s in r["steps"]], where=where, monotone=monotone, kv=kv,
                                logits=logits)


def kv_blocks(out: Path, run: dict) -> int | None:
    """The KV pool in blocks: the run's config, else the engine's "KV cache size: N tokens" line in its logs."""
    cfg = run["cfg"]
    if cfg.get("num_gpu_blocks"):
        return int(cfg["num_gpu_blocks"])
    mode = run.get("mode")
    for f in sorted((out / "logs").glob(f"*_{mode}.log")):
        m = re.search(r"KV cache size: ([\d,]+) tokens", f.read_text(errors="replace"))
        if m:
            return int(m.group(1).replace(",", "")) // cfg["block_size"]
    return None


def measured(run: dict) -> dict:
    s = run["summary"]
    return {"throughput": s["output_throughput"], "tpot_p50": float(np.nanmedian(s["tpot_s"])),
            "ttft_p50": float(np.median(s["ttft_s"])), "e2e_mean": float(np.mean(s["e2e_s"]))}


def _x(cfg: dict) -> float:
    return float(cfg["concurrency"] if cfg["loop"] == "closed" else cfg["rate"])


def _unit(run: dict):
    """What a run is paired within: its block (the block protocol: plain and speculative back to back), else its
    repeat (the session protocol)."""
    return run.get("block") or run["repeat"]


def _pair(runs: list[dict], preds: dict) -> list[dict]:
    """Per speculative run: it and the plain run of the same point and block (or repeat), measured and predicted."""
    plain = {(r["point"], _unit(r)): r for r in runs if r.get("mode") != CAL["target"] and
             r.get("mode") != CAL["draft"] and vrun.variant(r["cfg"]) == "plain"}
    rows = []
    for r in runs:
        v = vrun.variant(r["cfg"])
        if v == "plain" or r.get("mode") in CAL.values() or (r["point"], _unit(r)) not in plain:
            continue
        p = plain[(r["point"], _unit(r))]
        row = {"variant": v, "point": r["point"], "repeat": r["repeat"], "loop": r["cfg"]["loop"], "x": _x(r["cfg"]),
               "k": r["cfg"]["k"], "unmeasured_steps": preds[p["_file"]]["unmeasured_steps"] +
               preds[r["_file"]]["unmeasured_steps"],
               "priced_steps": preds[p["_file"]]["priced_steps"] + preds[r["_file"]]["priced_steps"],
               "steps_ratio": len(p["steps"]) / len(r["steps"]) if r["steps"] else float("nan")}
        for key, (a, b) in (("meas", (measured(p), measured(r))), ("pred", (preds[p["_file"]], preds[r["_file"]]))):
            row[f"{key}_speedup_throughput"] = b["throughput"] / a["throughput"]
            row[f"{key}_speedup_tpot"] = a["tpot_p50"] / b["tpot_p50"]
            for m, d in (("plain", a), ("spec", b)):
                row[f"{key}_{m}_ttft_p50_s"] = d["ttft_p50"]
                row[f"{key}_{m}_tpot_p50_s"] = d["tpot_p50"]
        rows.append(row)
    return rows


def fit_tables(runs: list[dict], fit: tuple, block: str | None = None, models=tuple(CAL)) -> tuple:
    """The tables of `models` (default: target, draft) of one fit — (kind "token" | "request", monotone, pool,
    KV measure "context" | "attended", a request table's logits rule "last" | "positions"; context and last where
    not given) — on the calibration runs of `block` (every block when None)."""
    kind, monotone = fit[:2]
    kv = fit[3] if len(fit) > 3 else "context"
    extra = {"logits": fit[4] if len(fit) > 4 else "last"} if kind == "request" else {}
    make = step_table if kind == "token" else request_table
    at = f", block {block}" if block else ""
    return tuple(make(calibration_runs(runs, m, block), f"{m} alone ({CAL[m]}{at})", monotone=monotone, kv=kv,
                      **extra) for m in models)


POOLS = ("block", "pooled", "scaled")  # a block's own calibration; every block's; every block's x the block's factor


def tables_by_block(runs: list[dict], fit: tuple, models=tuple(CAL)) -> dict:
    """Per block (key None: a run outside the block protocol) the tables of `models` its runs are priced with
    under `fit` = (kind, monotone, pool): pool "block" fits the block's own calibration, "pooled" every block's,
    "scaled" every block's rescaled by the block's host factor (specsim.validation.host_scale)."""
    pool = fit[2] if len(fit) > 2 else "block"
    if pool not in POOLS:
        raise ValueError(f"pool {pool!r} is not one of {POOLS}")
    pooled = fit_tables(runs, fit, None, models)
    out: dict = {None: pooled}
    for b in sorted({r["block"] for r in runs if r.get("block")}):
        out[b] = block_tables(runs, fit, b, pooled, models)
    return out


def block_tables(runs: list[dict], fit: tuple, b: str, pooled: tuple, models=tuple(CAL)) -> tuple:
    """One block's tables under `fit`'s pool (`tables_by_block`), `pooled` the fit on every block's calibration."""
    pool = fit[2] if len(fit) > 2 else "block"
    if pool == "block":
        return fit_tables(runs, fit, b, models)
    if pool == "pooled":
        return pooled
    return tuple(hs.ScaledTable(t, hs.host_factor(t, [s for r in calibration_runs(runs, m, b) for s in r["steps"]],
                                                  f"{m}, block {b}")) for m, t in zip(models, pooled))


def block_csvs(out: Path, runs: list[dict], fit: tuple) -> None:
    """Per block, the chosen kind of table fitted on that block's own calibration, to step_tables/ (what each
    block measured, whichever pool prices the runs)."""
    (out / "step_tables").mkdir(exist_ok=True)
    for b in sorted({r["block"] for r in runs if r.get("block")}):
        for m, t in zip(CAL, fit_tables(runs, fit, b)):
            t.write_csv(out / "step_tables" / f"{b}_{m}.csv", f"vLLM per-step log, {m} alone, block {b}")


def _scored(out: Path, runs: list[dict], tables, draft_pass: str = "scheduled") -> tuple[list[dict], list[dict]]:
    """(rows, points) with every grid run priced by `tables(run)` = (target table, draft table); `draft_pass` as
    vllm_predict.predict takes it (its default here: what the sessions 12-22 diagnoses calling this committed)."""
    preds = {}
    for r in runs:
        if r.get("mode") not in CAL.values():
            preds[r["_file"]] = predict(r, r["cfg"], *tables(r), kv_blocks(out, r), draft_pass=draft_pass)
    rows = _pair(runs, preds)
    return rows, score_points(rows)


SESSION12 = ("token", True, "block", "context")  # the fit of record until session 13: token-only, monotone, per
# block, KV slope per cached token


def analyze(out: Path, dst: Path | None = None, blocks: list[str] | None = None,
            fit_from: Path | None = None, logits: str = "positions", draft_pass: str = "vllm") -> dict:
    """Grid runs are priced by the tables of the fit `vllm_select.select` chose on the plain runs alone (or the
    fit a committed table_selection.json names: `fit_from`), per block as its pool says (`tables_by_block`);
    beside them, the same runs priced by the block's token-only monotone tables (session 12's fit of record,
    `token_monotone`) and by the chosen fit's tables pooled over every block (`pooled`). `blocks` (glob patterns)
    keeps those blocks' grid runs only, the tables still see every block's calibration (runs without
    speculation); what is written goes to `dst` (default: `out`). `logits`: a request table's rule for the
    positions a verification computes logits at (specsim.validation.request_table; "positions", the record's since
    session 20; "last", sessions 12-19). `draft_pass`: the draft's first pass over the scheduled tokens plus one
    new slot per request as vLLM 0.32's draft model runs it ("vllm", the record's since session 23:
    results/vllm_cpu_lockstep2/preregistered_r17_draft_pass.md) or over the scheduled tokens alone ("scheduled",
    sessions 12-22)."""
    from vllm_select import fixed, previous, select  # experiments/vllm_select.py

    dst = out if dst is None else dst
    dst.mkdir(parents=True, exist_ok=True)
    if dst != out and (out / "measurement.json").exists():
        shutil.copy(out / "measurement.json", dst / "measurement.json")
    every = load_runs(out)
    runs = [r for r in every if not blocks or any(fnmatch.fnmatch(r.get("block") or "", b) for b in blocks)]
    if not runs:
        raise SystemExit(f"vllm_analyze: no runs in {out / 'runs'}" + (f" of blocks {blocks}" if blocks else ""))
    # what tables are fitted on: the kept blocks' runs and every block's calibration (a pooled fit pools it all)
    fit_runs = [r for r in runs if r.get("mode") not in CAL.values()] + \
        [r for r in every if r.get("mode") in CAL.values()]
    sel = fixed(fit_from) if fit_from else select(out, fit_runs, dst, incumbent=previous(dst))
    fit = (sel["kind"], sel["monotone"], sel.get("pool", "block"), sel.get("kv", "context"), logits)
    tt, td = fit_tables(fit_runs, SESSION12)
    pooled = fit_tables(fit_runs, fit)
    for m, t in zip(CAL, pooled):
        t.write_csv(dst / f"step_table_{m}.csv", f"vLLM per-step log, {m} served alone (runs {CAL[m]}); fit: "
                                                  f"{sel['chosen']} (experiments/vllm_select.py)")
    fits = {"chosen": fit} | ({"token_monotone": SESSION12} if fit != SESSION12 else {})
    tabs = {name: tables_by_block(fit_runs, f) for name, f in fits.items()}
    block_csvs(dst, runs, fit)

    def pick(name):
        return lambda r: tabs[name].get(r.get("block"), tabs[name][None])

    rows, points = _scored(out, runs, pick("chosen"), draft_pass)
    res = summarize(points, runs, tt, td)
    blocks_seen = sorted({r["block"] for r in runs if r.get("block")})
    beside = {"pooled": lambda r: pooled} | ({"token_monotone": pick("token_monotone")}
                                            if "token_monotone" in fits and blocks_seen else {})
    _beside(out, runs, points, res, beside, (tt, td), draft_pass)
    if blocks_seen:
        res["block_tables"] = {b: {m: _info(a) for m, a in zip(CAL, tabs["chosen"][b])} for b in blocks_seen}
    rq = tuple(request_table(calibration_runs(fit_runs, m), f"{m} alone ({CAL[m]})") for m in CAL)
    res.update(points=points, rows=rows, probes=probes(runs, out), table_selection=sel, verify_logits=logits,
               draft_pass=draft_pass,
               tables={m: _info(t) for m, t in zip(CAL, pooled)}, holdout=_holdout(fit_runs, rq, (tt, td)),
               unmeasured_steps=sum(p["unmeasured_steps"] for p in points),
               priced_steps=sum(p["priced_steps"] for p in points),
               points_with_unmeasured_steps=sum(1 for p in points if p["unmeasured_steps"]),
               calibration_blocks=len({r["block"] for r in fit_runs if r.get("mode") in CAL.values()
                                       and r.get("block")}),
               legacy_runs=sum(1 for r in runs if not r.get("config")), runs=len(runs), join_lag_steps=join_lag(runs),
               blocks=block_drift(runs, out))
    _write(dst, res)
    return res


def _beside(out: Path, runs: list[dict], points: list[dict], res: dict, beside: dict, ref, draft_pass: str) -> None:
    """Each other way of pricing (name -> run -> tables) scored on the same runs: its summary in res[name], its
    predictions and errors on every point as name_pred_* / name_err_* (the plot draws them)."""
    for name, how in beside.items():
        other = _scored(out, runs, how, draft_pass)[1]
        res[name] = summarize(other, runs, *ref)
        by = {(q["variant"], q["loop"], q["x"]): q for q in other}
        for p in points:
            q = by[(p["variant"], p["loop"], p["x"])]
            p.update({f"{name}_{k}": q[k] for k in q if k.startswith(("pred_", "err_", "paired_err_"))})


def _holdout(runs: list[dict], rq, tok) -> dict:
    """The request table's rule on steps neither of its families holds, from runs without speculation: the
    multi-request prefills of the calibration runs, and the plain grid runs' multi-request prefill and mixed
    steps (pooled tables; the token-only table beside)."""
    plain = [s for r in runs if r.get("mode") == "plain" for s in r["steps"]]
    res = {m: rt.holdout(t, [s for r in cal for s in r["steps"]], k)
           for m, t, k, cal in zip(CAL, rq, tok, (calibration_runs(runs, m) for m in CAL))}
    res["target_plain_runs"] = rt.holdout(rq[0], plain, tok[0])
    return res


def _info(t) -> dict:
    """What the report says of a table: its range, knots, gaps, KV slope and unmeasured steps (per family for a
    (tokens, requests) table; with its host factor for a rescaled one)."""
    if isinstance(t, hs.ScaledTable):
        return {"host_factor": t.factor, "base": "pooled over every block"} | _info(t.base)
    if isinstance(t, rt.RequestStepTable):
        return {"one_request": _table_info(t.single), "decode": _table_info(t.decode),
                "unmeasured": t.unmeasured.summary()}
    return _table_info(t)


def _table_info(t: sf.FittedStepTable) -> dict:
    gaps = [[int(a), int(b)] for a, b, c in zip(t.tokens[:-1], t.tokens[1:], t.covered) if not c]
    return {"range": [int(t.tokens[0]), int(t.tokens[-1])], "knots": int(t.tokens.size), "gaps": gaps,
            "monotone": t.monotone, "kv_measure": t.kv_measure, "kv_left_out_steps": t.left_out,
            "kv_slope_s_per_token": t.kv_slope_s_per_token, "unmeasured": t.unmeasured.summary()}


def _write(out: Path, res: dict) -> None:
    pts = res["points"]
    if pts:
        with open(out / "vllm_cpu.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(pts[0]))
            w.writeheader()
            w.writerows(pts)
    (out / "vllm_cpu_analysis.json").write_text(json.dumps(res, indent=1, default=float, sort_keys=True))
    from vllm_report import plot, report  # experiments/vllm_report.py

    plot(out, res)
    report(out, res)
