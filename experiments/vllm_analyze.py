"""Score the vllm-v1 engine profile against the vLLM runs experiments/vllm_cpu.py measured.

    .venv/bin/python experiments/vllm_cpu.py analyze      # (= this module's analyze(OUT))

1. Calibrate from runs WITHOUT speculation only (`calibration_runs` takes the cal-target and cal-draft sessions,
   each model served alone; tests/test_vllm_analysis.py guards that no speculative run gets in): each model's
   step time against the tokens the step scheduled, from vLLM's per-step log (`StepTable`). The target's table is
   used as measured. A step of a speculative run pays the engine's own per-step work (scheduling, sampling,
   output) once, but the draft served alone pays it in every one of its steps, so the draft's passes inside a
   speculative step are priced as the draft's table less that overhead. The overhead o(T) is separated from the
   forward time per token count with one assumption fixed before any speculative run was looked at: at a given
   token count the forward time is proportional to the model's matmul parameters (t_model(T) = o(T) +
   params_model · g(T), two models → o and g). The plain sum of the two tables is reported too.
2. Acceptance: the per-request accepted counts vLLM itself reported (`--per-request-spec-decode-metrics
   detailed`), turned into one β trace per prompt (greedy: β = 1 for each accepted draft, 0 at the rejection;
   the untested bonus position 1).
3. Predict every measured speculative point (the measured prompt lengths; Poisson points replay the measured
   arrival times) and its plain baseline with `VllmV1Engine`, and compare: speedup as output-throughput ratio and
   as TPOT-p50 ratio (spec over plain, paired within a repeat), TTFT p50 and TPOT p50 of each mode, eq. (5)
   beside, break-even concurrency.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specsim import profiles as prof# noqa: E402
from specsim import theory# noqa: E402
from specsim.engine.acceptance import read_trace  # noqa: E402
from specsim.engine.engine_profiles.step_costs import StepTable  # noqa: E402
from specsim.engine.engine_profiles.vllm_scheduler import VllmV1Config, VllmV1Engine  # noqa: E402
from specsim.engine.metrics import latency_metrics  # noqa: E402
from specsim.validation import vllm_outputs as vr  # noqa: E402
from specsim.engine.workload import Workload  # noqa: E402

K = 3
SPEC_MODES = ("draft",)
CAL = {"target": "cal-target", "draft": "cal-draft"}
PROFILES = {"target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b"}


def load_runs(out: Path) -> list[dict]:
    runs = []
    for f in sorted((out / "runs").glob("*.json")):
        d = json.loads(f.read_text())
        d["summary"] = vr.summarize_requests(d, f)
        runs.append(d)
    return runs


def calibration_runs(runs: list[dict], model: str) -> list[dict]:
    """The runs a model's step table is fitted on: that model served alone, never a speculative run."""
    mode = CAL[model]
    picked = [r for r in runs if r["mode"] == mode]
    assert all(r["mode"] not in SPEC_MODES and not r.get("spec", {}).get("drafts") for r in picked)
    return picked


KNOTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)  # fixed before any data was looked at
MIN_STEPS = 5


def fit_knots(tokens: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Piecewise-linear least squares in the token count, knots at KNOTS within the data's range (a hat basis):
    every step counts, so the ±30% noise of a shared 2-core machine averages out instead of riding on the two or
    three steps that happen to share one exact token count."""
    k = [float(x) for x in KNOTS if x < tokens.max()] + [float(tokens.max())]
    i = 0
    while i < len(k) - 2:  # an interval with fewer than MIN_STEPS steps is merged with the next one
        if np.count_nonzero((tokens >= k[i]) & (tokens < k[i + 1])) < MIN_STEPS:
            del k[i + 1]
        else:
            i += 1
    k = np.array(k)
    A = np.zeros((tokens.size, k.size))
    j = np.clip(np.searchsorted(k, tokens, side="right") - 1, 0, k.size - 2)
    w = np.clip((tokens - k[j]) / (k[j + 1] - k[j]), 0.0, 1.0)
    A[np.arange(tokens.size), j] = 1 - w
    A[np.arange(tokens.size), j + 1] += w
    used = A.sum(0) > 0
    coef = np.linalg.lstsq(A[:, used], times, rcond=None)[0]
    return k[used], coef


def step_table(runs: list[dict]) -> StepTable:
    steps = [s for r in runs for s in r["steps"]]
    t = np.array([s["ctx_tokens"] + s["gen_tokens"] for s in steps], float)
    s = np.array([s["time_s"] for s in steps], float)
    kt, ks = fit_knots(t, s)
    return StepTable(kt, ks, where="vLLM per-step log")


def split_overhead(tt: StepTable, td: StepTable) -> tuple[StepTable, np.ndarray]:
    """(the draft's forward-only table, o at its knots): t_m(T) = o(T) + w_m·g(T) for m = target, draft."""
    wt = prof.model(PROFILES["target"]).matmul_params_per_token
    wd = prof.model(PROFILES["draft"]).matmul_params_per_token
    T = td.tokens
    a, b = np.array([tt.time_at(x) for x in T]), td.time_s
    g = (a - b) / (wt - wd)
    o = np.clip(a - wt * g, 0.0, 0.9 * b)
    return StepTable(T, b - o, where="draft forward (overhead split)"), o


def _beta_traces(runs: list[dict], n_prompts: int) -> list[list[float]]:
    """One β sequence per prompt index from vLLM's own per-step accepted counts (greedy, k drafts a step)."""
    seqs: dict[int, list[float]] = {}
    for r in sorted(runs, key=lambda r: (r["point"], r["repeat"])):
        if r["mode"] not in SPEC_MODES or r.get("concat", 1) != 1:
            continue
        for i, ch in enumerate(r.get("final_chunks") or []):
            sd = ((ch or {}).get("metrics") or {}).get("speculative_decoding") or _find_spec(ch)
            if not sd or not sd.get("per_step_accepted"):
                continue
            p = i % n_prompts
            if p in seqs:
                continue
            beta = [np.nan]  # output token 0 comes from the prefill: never a draft
            for a, d in zip(sd["per_step_accepted"], sd["per_step_drafted"]):
                beta += [1.0] * a + ([0.0] if a < d else [np.nan])  # after a clean sweep: the untested bonus
            seqs[p] = beta
    missing = sorted(set(range(n_prompts)) - set(seqs))
    if missing:  # request i replays sequence i mod n_prompts: a gap would shift every later prompt
        raise SystemExit(f"vllm_analyze: no per-request spec metrics for prompts {missing}")
    return [seqs[p] for p in range(n_prompts)]


def _find_spec(obj):
    """The per-request speculative_decoding object wherever the final chunk nests it."""
    if isinstance(obj, dict):
        if "per_step_accepted" in obj:
            return obj
        for v in obj.values():
            f = _find_spec(v)
            if f:
                return f
    return None


class _Trace:
    """The minimal trace object `Acceptance` reads (sequences, α, slot factors 1)."""

    def __init__(self, seqs):
        raw = np.concatenate([np.asarray(s, float) for s in seqs])
        self.alpha = float(np.nanmean(raw))  # over the positions a draft was tested at
        self._s = [np.nan_to_num(np.asarray(s, float), nan=1.0) for s in seqs]  # untested: never read at k = 3

    def sequences(self):
        return self._s

    def slot_factor(self, k):
        return 1.0


def _workload(run: dict) -> Workload:
    n = len(run["input_lens"])
    p = np.asarray(run["input_lens"], np.int64)
    o = np.asarray(run["output_lens"], np.int64)
    if "concurrency" in run:
        return Workload("closed", np.full(n, np.nan), p, o, 256, run["concurrency"])
    arr = np.asarray(run["start_times"], float)
    order = np.argsort(arr, kind="stable")
    return Workload("poisson", arr[order] - arr[order][0], p[order], o[order], 256, None)


def predict(run: dict, tt: StepTable, td: StepTable | None, acc, blocks: int) -> dict:
    wl = _workload(run)
    vc = VllmV1Config(max_num_seqs=256, max_num_batched_tokens=2048, block_size=128)
    e = VllmV1Engine(wl, vc, tt, td, acc, k=K if td is not None else 0, blocks=blocks)
    rec = e.run()
    m = latency_metrics(rec, 1.0, 0.05)
    return {"throughput": m["throughput_tok_s"], "tpot_p50": m["tpot_p50_s"], "ttft_p50": m["ttft_p50_s"],
            "e2e_mean": m["e2e_mean_s"]}


def measured(run: dict) -> dict:
    s = run["summary"]
    return {"throughput": s["output_throughput"], "tpot_p50": float(np.nanmedian(s["tpot_s"])),
            "ttft_p50": float(np.median(s["ttft_s"])), "e2e_mean": float(np.mean(s["e2e_s"]))}


def kv_blocks(out: Path, mode: str, block_size: int = 128) -> int:
    """The pool the engine reported ("CPU KV cache size: N tokens") in that mode's server log."""
    for f in sorted((out / "logs").glob(f"*_{mode}.log")):
        m = re.search(r"KV cache size: ([\d,]+) tokens", f.read_text(errors="replace"))
        if m:
            return int(m.group(1).replace(",", "")) // block_size
    return 1 << 30


def _pair(runs: list[dict], preds: dict) -> list[dict]:
    """Per (point, repeat): measured and predicted figures of plain and draft, and their ratios."""
    by = {(r["mode"], r["point"], r["repeat"]): r for r in runs}
    rows = []
    for (mode, point, rep), r in sorted(by.items()):
        if mode != "draft" or ("plain", point, rep) not in by:
            continue
        p = by[("plain", point, rep)]
        mp, md = measured(p), measured(r)
        row = {"point": point, "repeat": rep, "x": r.get("concurrency", r.get("rate")),
               "loop": "closed" if "concurrency" in r else "poisson"}
        variants = {"meas": (mp, md)}
        for name, key in (("pred", "draft"), ("pred_sum", "draft-sum"), ("pred_rec", "draft-rec")):
            if (key, point, rep) in preds:
                variants[name] = (preds[("plain", point, rep)], preds[(key, point, rep)])
        for key, (a, b) in variants.items():
            row[f"{key}_speedup_throughput"] = b["throughput"] / a["throughput"]
            row[f"{key}_speedup_tpot"] = a["tpot_p50"] / b["tpot_p50"]
            for m, d in (("plain", a), ("draft", b)):
                row[f"{key}_{m}_ttft_p50_s"] = d["ttft_p50"]
                row[f"{key}_{m}_tpot_p50_s"] = d["tpot_p50"]
        rows.append(row)
    return rows


def _points(rows: list[dict]) -> list[dict]:
    """Median (and min, max) over repeats per point, and the relative errors of the predictions."""
    out = []
    for point in sorted({r["point"] for r in rows}, key=lambda p: (p[0], float(p[1:]))):
        rs = [r for r in rows if r["point"] == point]
        d = {"point": point, "loop": rs[0]["loop"], "x": rs[0]["x"], "repeats": len(rs)}
        for k in [k for k in rs[0] if k.startswith(("meas_", "pred"))]:
            v = np.array([r[k] for r in rs], float)
            d[k] = float(np.median(v))
            if k.startswith("meas_"):
                d[k + "_min"], d[k + "_max"] = float(v.min()), float(v.max())
        for m in ("speedup_throughput", "speedup_tpot", "plain_ttft_p50_s", "plain_tpot_p50_s",
                  "draft_ttft_p50_s", "draft_tpot_p50_s"):
            for v, e in (("pred", "err"), ("pred_sum", "err_sum"), ("pred_rec", "err_rec")):
                if f"{v}_{m}" in d:
                    d[f"{e}_{m}"] = d[f"{v}_{m}"] / d[f"meas_{m}"] - 1.0
        out.append(d)
    return out


def _ngram(runs: list[dict]) -> list[dict]:
    """Measured only (the profile does not model n-gram proposers yet): ngram over plain, paired per repeat."""
    by = {(r["mode"], r["point"], r["repeat"]): r for r in runs}
    out = []
    for point in sorted({p for (m, p, _) in by if m == "ngram"}, key=lambda p: (p[0], float(p[1:]))):
        thr, tpot, acc = [], [], []
        for (m, p, rep), r in by.items():
            if m == "ngram" and p == point and ("plain", p, rep) in by:
                a, b = measured(by[("plain", p, rep)]), measured(r)
                thr.append(b["throughput"] / a["throughput"])
                tpot.append(a["tpot_p50"] / b["tpot_p50"])
                s = vr.acceptance_summary(r["spec"]) if r.get("spec") else {}
                acc.append(s.get("mean_acceptance_length") or float("nan"))
        if thr:
            out.append({"point": point, "repeats": len(thr), "speedup_throughput": float(np.median(thr)),
                        "speedup_throughput_min": min(thr), "speedup_throughput_max": max(thr),
                        "speedup_tpot": float(np.median(tpot)), "mean_acceptance_length": float(np.nanmedian(acc))})
    return out


def _break_even(points: list[dict], key: str) -> str:
    closed = sorted((p for p in points if p["loop"] == "closed"), key=lambda p: p["x"])
    for p in closed:
        if p[key] < 1.0:
            return f"c{p['x']:g}"
    return f"none up to c{closed[-1]['x']:g}" if closed else "n/a"


def analyze(out: Path) -> dict:
    runs = load_runs(out)
    tt = step_table(calibration_runs(runs, "target"))
    td_raw = step_table(calibration_runs(runs, "draft"))
    td, overhead = split_overhead(tt, td_raw)
    tt.write_csv(out / "step_table_target.csv")
    td_raw.write_csv(out / "step_table_draft_alone.csv")
    td.write_csv(out / "step_table_draft_forward.csv")
    from specsim.engine.acceptance import Acceptance

    n_prompts = 16
    seqs = _beta_traces(runs, n_prompts)
    trace = _Trace(seqs)
    preds = {}
    b_plain, b_spec = kv_blocks(out, "plain"), kv_blocks(out, "draft")
    rec_path = out / "trace_record.csv"  # `specsim record` on the same prompts (see the report for the command)
    rec_trace = read_trace(str(rec_path)) if rec_path.exists() else None
    for r in runs:
        if r["mode"] == "plain":
            preds[("plain", r["point"], r["repeat"])] = predict(r, tt, None, None, b_plain)
        elif r["mode"] == "draft":
            key = (r["point"], r["repeat"])
            preds[("draft",) + key] = predict(r, tt, td, Acceptance(trace=trace, seed=r["repeat"]), b_spec)
            preds[("draft-sum",) + key] = predict(r, tt, td_raw, Acceptance(trace=trace, seed=r["repeat"]), b_spec)
            if rec_trace is not None:
                preds[("draft-rec",) + key] = predict(r, tt, td, Acceptance(trace=rec_trace, seed=r["repeat"]),
                                                      b_spec)
    rows = _pair(runs, preds)
    points = _points(rows)
    c = td_raw.time_at(1) / tt.time_at(1)
    alpha = trace.alpha
    eq5 = float(theory.speedup(alpha, K, c))
    res = {"alpha_trace": alpha, "c": c, "speedup_eq5": eq5, "points": points, "rows": rows,
           "overhead_s_at_knots": dict(zip(td.tokens.tolist(), overhead.tolist())),
           "trace_sequences": len(seqs), "kv_blocks": {"plain": b_plain, "draft": b_spec}}
    res["alpha_record"] = None if rec_trace is None else float(rec_trace.alpha)
    for key in ("speedup_throughput", "speedup_tpot"):
        for e, pre in (("err", ""), ("err_sum", "sum_"), ("err_rec", "rec_")):
            if points and f"{e}_{key}" in points[0]:
                v = np.array([abs(p[f"{e}_{key}"]) for p in points])
                res[f"{pre}median_abs_err_{key}"], res[f"{pre}max_abs_err_{key}"] = float(np.median(v)), float(v.max())
    res["ngram"] = _ngram(runs)
    res["break_even_measured"] = _break_even(points, "meas_speedup_throughput")
    res["break_even_predicted"] = _break_even(points, "pred_speedup_throughput")
    _write(out, res)
    return res


def _write(out: Path, res: dict) -> None:
    pts = res["points"]
    with open(out / "vllm_cpu.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(pts[0]))
        w.writeheader()
        w.writerows(pts)
    (out / "vllm_cpu_analysis.json").write_text(json.dumps(res, indent=1, default=float))
    from vllm_report import plot, report  # experiments/vllm_report.py

    plot(out, res)
    report(out, res)
