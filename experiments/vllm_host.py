"""The host under a vLLM measurement: probes, the same work timed in every block, the join lag (reported beside
the analysis's figures by experiments/vllm_report.py, never used to correct one)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CAL_MODES = ("cal-target", "cal-draft")


def probes(runs: list[dict], out: Path | None = None) -> list[dict]:
    """The host-speed probe each session (or each engine at a block's start and end) recorded (reported, never
    used to correct a figure)."""
    files = sorted((out / "probes").glob("*_before.json")) + sorted((out / "probes").glob("*_after.json")) \
        if out is not None and (out / "probes").is_dir() else []
    if files:
        ps = [json.loads(f.read_text()) for f in files]
        return sorted(({"session": p["session"], "mode": p.get("mode"), "probe_step_s": p.get("median_step_s"),
                        "host_probe_s": p.get("host_probe_s"), "cpu": None} for p in ps), key=lambda p: p["session"])
    seen = {}
    for r in runs:
        p = r.get("probe")
        if p and p.get("session") not in seen:
            seen[p.get("session")] = {"session": p.get("session"), "mode": r.get("mode"),
                                      "probe_step_s": p.get("median_step_s"), "host_probe_s": p.get("host_probe_s"),
                                      "cpu": r.get("cpu_model")}
    return [seen[k] for k in sorted(seen, key=str)]


def block_drift(runs: list[dict], out: Path) -> list[dict]:
    """Per block, the same work timed again: the target's 1-request decode (its calibration point cal-dec1 and the
    plain c1 point, median step) and the target engine's probe at the block's start and end: how far the host moved
    between blocks, which the block-matched tables follow and one pooled table cannot."""
    rows = []
    for b in sorted({r["block"] for r in runs if r.get("block")}, key=lambda b: min(
            r.get("wall_clock", 0.0) for r in runs if r.get("block") == b)):
        def med(mode, point, b=b):
            ts = [s["time_s"] for r in runs if (r.get("block"), r.get("mode"), r.get("point")) == (b, mode, point)
                  for s in r["steps"] if s["gen_requests"] == 1 and s["ctx_tokens"] == 0]
            return float(np.median(ts)) if ts else None

        files = {t: out / "probes" / f"{b}_P_{t}.json" for t in ("before", "after")}
        pr = {t: json.loads(f.read_text()).get("median_step_s") if f.exists() else None for t, f in files.items()}
        spec = [r for r in runs if r.get("block") == b and r.get("mode") not in ("plain", *CAL_MODES)]
        rows.append({"block": b, "cal_dec1_step_s": med("cal-target", "cal-dec1"),
                     "plain_c1_step_s": med("plain", "c1"), "probe_before_s": pr["before"],
                     "probe_after_s": pr["after"], "spec_c2_prefill_ratio": _first_prefill_ratio(spec, "c2"),
                     "spec_touched": any((r.get("config") or {}).get("touch_before_s") is not None for r in spec)})
    return rows


def _first_prefill_ratio(runs: list[dict], point: str) -> float | None:
    """The first prefill step of a run at `point` over its second (c2: the first pair's prompts, then the next
    pair's, 36 and 39 tokens): well above 1 where the engine ran its first step slow after sitting idle."""
    for r in (r for r in runs if r.get("point") == point):
        pre = [s["time_s"] for s in r["steps"] if s["ctx_tokens"] > 0]
        if len(pre) >= 2:
            return float(pre[0] / pre[1])
    return None


def join_lag(runs: list[dict]) -> dict:
    """Steps between a request's addition and its first step, less one, as the offline harness recorded them: for
    requests added while others were in flight (each run's prediction uses its own median, vllm_runs.run_config;
    1 is assumed where a run recorded none) and for those added to an idle engine."""
    busy, idle = [], []
    for r in runs:
        for a, f, b in zip(r.get("added_step") or [], r.get("first_scheduled_step") or [],
                           r.get("inflight_at_add") or []):
            if f is not None:
                (busy if a > 0 and b else idle).append(f - a - 1)
    return {"busy_median": float(np.median(busy)) if busy else None, "busy_n": len(busy),
            "at_start_median": float(np.median(idle)) if idle else None, "at_start_n": len(idle)}
