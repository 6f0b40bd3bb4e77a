"""Diagnosis, never a fit: how much dearer a speculative step is than its tables price it, against the plain run
measured beside it in lockstep.

    .venv/bin/python experiments/vllm_step_excess.py --out experiments/results/vllm_cpu_lockstep2 [--kv attended] \
        [--probe experiments/results/vllm_lockstep_probe_c4]

Why (issue 24, sessions 14-15, docs/validation.md): the speedup's errors are a bias (speculative steps cost more
against the tables than the plain steps they are paired with). Here, per speculative grid run, its full decode steps
(every request verifying k drafts, no prefill) are priced part by part as experiments/vllm_predict.py prices them
(the target over the step's tokens, the draft over the step's tokens then k - 1 one-token passes) by tables pooled
over every block's calibration, and the measured time is divided by the host's speed during that pair: the median of
measured / priced over the lockstep-paired plain run's decode steps. Prints per (k, point) the median of measured /
priced and the excess in seconds, and a least-squares split measured = a x target part + b x draft part over runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_analyze as va  # noqa: E402
import vllm_lockstep_probe as lp  # noqa: E402  (its run files' naming; imports no vLLM)


def parts(s: dict, k: int, tt, td, slots: int = 0) -> tuple[float, float] | None:
    """(target part, draft part) of a full decode step (R requests x k + 1 tokens; the log's summed context spread
    evenly over its requests; the draft's first pass over R x (k + 1 + slots) tokens, slots = 1 as vLLM 0.32's draft
    model runs it), or None for any other step."""
    R = s["gen_requests"]
    if s["ctx_requests"] or not R or s["gen_tokens"] != R * (k + 1):
        return None
    ctx = np.full(R, s["kv_ctx_tokens"] / R)
    n = np.full(R, k + 1.0)
    a = tt.time_at(R * (k + 1), tt.kv_of(n, ctx), count=False)
    one = np.ones(R)
    d = td.time_at(R * (k + 1 + slots), td.kv_of(n + slots, ctx), count=False) + \
        sum(td.time_at(R, td.kv_of(one, ctx + k + 1 + j), count=False) for j in range(k - 1))
    return a, d


def decode_ratio(s: dict, tab) -> float:
    """A plain decode step's measured / priced (its logged context spread evenly over its requests)."""
    R = s["gen_requests"]
    return s["time_s"] / tab.time_at(s["gen_tokens"], tab.kv_of(np.ones(R), np.full(R, s["kv_ctx_tokens"] / R)),
                                     count=False)


def host(plain: dict, tt) -> float:
    """Median measured / priced over the paired plain run's decode steps."""
    return float(np.median([decode_ratio(s, tt) for s in plain["steps"]
                            if not s["ctx_requests"] and s["gen_requests"]]))


def excess(runs: list[dict], fit: tuple, slots: int = 0) -> list[dict]:
    tt, td = va.fit_tables(runs, fit)
    by = {(r["mode"], r["_file"].split("__")[1], r.get("block")): r for r in runs}
    out = []
    for (mode, point, block), r in sorted(by.items(), key=lambda x: str(x[0])):
        if not mode.startswith("draft") or ("plain", point, block) not in by:
            continue
        k, h = r["cfg"]["k"], host(by[("plain", point, block)], tt)
        rows = [(s["time_s"] / h, *p) for s in r["steps"] if (p := parts(s, k, tt, td, slots))]
        if len(rows) >= 5:
            m, a, d = map(np.array, zip(*rows))
            out.append({"k": k, "point": point, "block": block, "ratio": float(np.median(m / (a + d))),
                        "excess_s": float(np.median(m - a - d)), "target_s": float(np.median(a)),
                        "draft_s": float(np.median(d)), "measured_s": float(np.median(m)), "steps": len(rows)})
    return out


def probe_ratios(probe: Path, tt, td, k: int, slots: int) -> list[str]:
    """Median measured / priced per (engine, how) over a lockstep probe's full-size decode steps (experiments/
    vllm_lockstep_probe.py): the speculative steps part by part as `parts`, plain decodes by the target's table, the
    draft's decodes by the draft's. Then each speculative step against its parts at the probe's own host speed: the
    target part times the verify-sized plain decode's ratio, the draft part times the draft's decode ratio (both
    measured alone, without speculation, minutes apart)."""
    ratios, spec = defaultdict(list), defaultdict(list)
    for f in sorted((probe / "runs").glob("*.json")):
        mode, how = lp.run_name(f)
        for s in json.loads(f.read_text())["steps"]:
            if s["ctx_requests"] or not s["gen_requests"]:
                continue
            if mode.startswith("draft"):
                if s.get("drafts") == k * s["gen_requests"] and (p := parts(s, k, tt, td, slots)):
                    ratios[(mode, how)].append(s["time_s"] / sum(p))
                    spec[how].append((s["time_s"], *p))
                continue
            ratios[(mode, how)].append(decode_ratio(s, td if mode == "cal-draft" else tt))
    med = {key: float(np.median(r)) for key, r in ratios.items()}
    out = [f"probe {m} {h}: median measured / priced {med[(m, h)]:.3f} ({len(ratios[(m, h)])} steps)"
           for m, h in sorted(med)]
    fv, fd = med.get(("plain-verify", "alone")), med.get(("cal-draft", "alone"))
    for how, rows in (sorted(spec.items()) if fv and fd else []):
        m, a, d = map(np.array, zip(*rows))
        out.append(f"probe speculative {how}: measured / (target part x {fv:.3f} + draft part x {fd:.3f}) "
                   f"{np.median(m / (fv * a + fd * d)):.3f} ({len(m)} steps)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kv", choices=("context", "attended"), default="context")
    ap.add_argument("--monotone", action="store_true", help="isotonic tables (default: per-count medians as measured)")
    ap.add_argument("--draft-pass", choices=("scheduled", "vllm"), default="scheduled",
                    help="the draft's first pass over the scheduled tokens, or plus one new slot per request (vLLM "
                         "0.32's draft model)")
    ap.add_argument("--probe", type=Path, help="a vllm_lockstep_probe.py folder to price by the same tables")
    ap.add_argument("--k", type=int, default=5, help="the probe's k")
    a = ap.parse_args()
    if a.probe and not any((a.probe / "runs").glob("*.json")):
        print(f"vllm_step_excess: --probe {a.probe}: no runs in {a.probe / 'runs'} (a vllm_lockstep_probe.py folder)",
              file=sys.stderr)
        raise SystemExit(2)
    runs, fit, slots = va.load_runs(a.out), ("token", a.monotone, "pooled", a.kv), int(a.draft_pass == "vllm")
    if a.probe:
        print("\n".join(probe_ratios(a.probe, *va.fit_tables(runs, fit), a.k, slots)))
        return
    res = excess(runs, fit, slots)
    g = defaultdict(list)
    for e in res:
        g[(e["k"], e["point"])].append(e)
    print(f"KV measure {a.kv}; draft pass {a.draft_pass}; per (k, point): median over blocks of measured / priced, "
          "excess s, steps")
    for key, es in sorted(g.items()):
        print(f"k{key[0]} {key[1]:6s} {np.median([e['ratio'] for e in es]):.3f}  "
              f"{np.median([e['excess_s'] for e in es]):+.4f} s  ({sum(e['steps'] for e in es)} steps, "
              f"{len(es)} blocks)")
    M = np.array([e["measured_s"] for e in res])
    X = np.c_[[e["target_s"] for e in res], [e["draft_s"] for e in res]]
    coef = np.linalg.lstsq(X, M, rcond=None)[0]
    print(f"all {len(res)} runs: median ratio {np.median([e['ratio'] for e in res]):.3f}; measured = "
          f"{coef[0]:.3f} x target part + {coef[1]:.3f} x draft part")


if __name__ == "__main__":
    main()
