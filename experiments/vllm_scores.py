"""A grid's scores from its paired runs (used by experiments/vllm_analyze.py): per point the median over repeats of
the measured and predicted speedups and p50 times, the prediction's error unpaired and paired by repeat, the
break-evens, α and the share of request-steps that drafted, eq. (5) and the every-step-alike baseline beside."""

from __future__ import annotations

import numpy as np

from specsim import theory
from specsim.validation import vllm_runs as vrun

METRICS = ("speedup_throughput", "speedup_tpot", "plain_ttft_p50_s", "plain_tpot_p50_s", "spec_ttft_p50_s",
           "spec_tpot_p50_s")


def score_points(rows: list[dict]) -> list[dict]:
    """Median (and min, max) over repeats per (variant, point), and the prediction's relative errors."""
    out = []
    for v, loop, x in sorted({(r["variant"], r["loop"], r["x"]) for r in rows}):
        rs = [r for r in rows if (r["variant"], r["loop"], r["x"]) == (v, loop, x)]
        d = {"variant": v, "point": rs[0]["point"], "loop": loop, "x": x, "k": rs[0]["k"], "repeats": len(rs),
             "unmeasured_steps": sum(r["unmeasured_steps"] for r in rs),
             "priced_steps": sum(r["priced_steps"] for r in rs)}
        d["extrapolated"] = d["unmeasured_steps"] > 0  # the flag: this prediction priced steps nobody measured
        # the baseline "every step costs the same" (verification priced as a decode, drafting free): on a closed
        # loop the throughput ratio is then the plain run's step count over the speculative run's
        d["steps_ratio"] = float(np.median([r.get("steps_ratio", float("nan")) for r in rs]))
        for m in METRICS:
            for pre in ("meas", "pred"):
                vals = np.array([r[f"{pre}_{m}"] for r in rs], float)
                d[f"{pre}_{m}"] = float(np.median(vals))
                if pre == "meas":
                    d[f"meas_{m}_min"], d[f"meas_{m}_max"] = float(vals.min()), float(vals.max())
            d[f"err_{m}"] = d[f"pred_{m}"] / d[f"meas_{m}"] - 1.0
            # paired: each repeat's prediction against that repeat's measurement (its own block's tables), then
            # the median; err_ divides the median prediction of one repeat by the median measurement of another
            d[f"paired_err_{m}"] = float(np.median([r[f"pred_{m}"] / r[f"meas_{m}"] - 1.0 for r in rs]))
        out.append(d)
    return out


def break_even(points: list[dict], variant: str, loop: str, key: str) -> str:
    """The first grid point (lowest concurrency or rate) where speculation stops paying, or none in the grid."""
    ps = sorted((p for p in points if p["variant"] == variant and p["loop"] == loop), key=lambda p: p["x"])
    tag = "c" if loop == "closed" else "r"
    for p in ps:
        if p[key] < 1.0:
            return f"{tag}{p['x']:g}"
    return f"none up to {tag}{ps[-1]['x']:g}" if ps else "n/a"


def alpha(runs: list[dict], variant: str) -> float:
    """Mean β over the positions a draft was tested at, from vLLM's own per-request counts of that variant."""
    acc = drafted = 0
    for r in runs:
        if vrun.variant(r["cfg"]) == variant:
            for d, a in vrun.request_spec(r) or []:
                acc += sum(a)
                drafted += sum(min(x + 1, y) for x, y in zip(a, d))  # a + 1 tested, all d at a clean sweep
    return acc / drafted if drafted else float("nan")


def proposed_share(runs: list[dict], variant: str) -> float:
    """The share of a variant's request-steps (one request in one decode step) that carried drafts, from vLLM's own
    per-request counts: 1 for a draft model, below 1 for an n-gram lookup that finds no match on some steps."""
    steps = [d for r in runs if vrun.variant(r["cfg"]) == variant for ds, _ in vrun.request_spec(r) or [] for d in ds]
    return sum(1 for d in steps if d > 0) / len(steps) if steps else float("nan")


def flat_baseline(ps: list[dict]) -> dict:
    """Closed loops priced as if every step cost the same (`steps_ratio`): the throughput ratio's error against the
    measured one (median and max |error|) and its break-even: the baseline a step table has to beat."""
    cl = [p for p in ps if p["loop"] == "closed" and np.isfinite(p.get("steps_ratio", float("nan")))]
    if not cl:
        return {}
    e = np.array([abs(p["steps_ratio"] / p["meas_speedup_throughput"] - 1.0) for p in cl])
    return {"flat_median_abs_err_speedup_throughput": float(np.median(e)),
            "flat_max_abs_err_speedup_throughput": float(e.max()),
            "flat_break_even_closed": break_even(cl, ps[0]["variant"], "closed", "steps_ratio")}


def abs_errors(points: list[dict], key: str) -> dict:
    """Median and max |error| of `key` over points, unpaired (err_) and paired (paired_err_); zeros for none."""
    out = {}
    for err in ("err", "paired_err"):
        e = np.array([abs(p[f"{err}_{key}"]) for p in points]) if points else np.zeros(1)
        out[f"median_abs_{err}_{key}"], out[f"max_abs_{err}_{key}"] = float(np.median(e)), float(e.max())
    return out


def summarize(points: list[dict], runs: list[dict], tt, td) -> dict:
    res: dict = {"variants": {}}
    for v in sorted({p["variant"] for p in points}):
        ps = [p for p in points if p["variant"] == v]
        k = ps[0]["k"]
        a = alpha(runs, v)
        c = td.time_at(1) / tt.time_at(1) if v.startswith("draft") else 0.0
        # eq. (5) assumes k drafts every step: not an n-gram lookup, which proposes only where it finds a match
        eq5 = float(theory.speedup(a, k, c)) if np.isfinite(a) and v.startswith("draft") else None
        s = {"k": k, "alpha": a, "c": c, "speedup_eq5": eq5, "proposed_share": proposed_share(runs, v)}
        for key in METRICS:
            s.update(abs_errors(ps, key))
        for loop in ("closed", "poisson"):
            s[f"break_even_{loop}_measured"] = break_even(points, v, loop, "meas_speedup_throughput")
            s[f"break_even_{loop}_predicted"] = break_even(points, v, loop, "pred_speedup_throughput")
        s.update(flat_baseline(ps))
        s["unmeasured_steps"] = sum(p["unmeasured_steps"] for p in ps)
        s["priced_steps"] = sum(p["priced_steps"] for p in ps)
        res["variants"][v] = s
    for key in ("speedup_throughput", "speedup_tpot"):
        res.update(abs_errors(points, key))
        # the measurement's own spread: (max - min) / median over a point's repeats
        w = np.array([(p[f"meas_{key}_max"] - p[f"meas_{key}_min"]) / p[f"meas_{key}"] for p in points]) \
            if points else np.zeros(1)
        res[f"median_spread_{key}"], res[f"max_spread_{key}"] = float(np.median(w)), float(w.max())
    return res
