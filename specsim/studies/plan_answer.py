"""The plan's answer per (option, tp, rate): replicas with and without speculation, priced on the tokens served.

- `best` is the way to serve with the fewest replicas, then the lowest $/Mtok — plain decoding included: it reads
  "plain decoding" when speculation does not need fewer replicas (or as few, for more $/Mtok), and `best_why`
  says why in words. `replicas_spec` / `spec_candidate` are the best speculative candidate by the same rule,
  then the largest speedup_latency (at equal replicas answers tie on $/Mtok: see `provisioned`).
- $/Mtok and J/token (`provisioned`) bill every chip for the hour and divide by the tokens the replicas SERVE
  (`plan_keepup`), not the tokens asked for: for an answer, whose replicas keep up, the two are the same.
- Speedups, one meaning per name: `speedup_latency` = plain mean end-to-end latency / speculative, both at
  `replicas_spec` replicas (what speculation does to a user's wait); `speedup_walltime` = plain makespan /
  speculative makespan on the same requests (in an open loop the arrivals set most of it); `speedup_eq5` = the
  closed form at the run's α and c. (Simulate's own `speedup` is the walltime ratio in a closed loop and the
  latency ratio under --rate; the plan reports neither under that name.)
"""

from __future__ import annotations

_PROVISIONED = ("usd_per_mtok", "energy_j_per_token", "power_w_per_chip")
_FIGURES = ("usd_per_mtok", "energy_j_per_token", "ttft_p90_s", "tpot_p90_s", "throughput_tok_s", "served_tok_s",
            "offered_tok_s", "served_ratio", "ttft_growth_s_per_s")
PLAIN = "plain decoding"


def provisioned(row: dict, prefix: str, hardware: str, tp: int, replicas: int, rate: float | None) -> dict:
    """$/Mtok and J/token of serving `rate` for an hour on `replicas` replicas: every chip billed and idling for
    the whole hour, per token SERVED, the dynamic energy per token as simulated. Tokens served per second: the
    offered rate (rate × the run's mean output) × the run's served_ratio (at most 1) when its replicas do not keep
    up (`plan_keepup`); when they do, the offered rate itself — a run that keeps up serves what arrives, and its
    measured half-run ratio differs from 1 by sampling noise only (±10 % at 1 req/s), which would move the price
    without cause. A finite run's own figures (`*_sim`) also bill the drain after the last arrival, which a
    minute-long run overweights; the planner's figure is this steady-state one (the run's own for a replayed
    CSV)."""
    from specsim.studies.plan_keepup import why_not_keeping_up

    from specsim.cost.power import per_token
    from specsim.profiles import loader

    out = {}
    tokens, requests = row.get("output_tokens"), row.get("requests")
    if rate is None or not tokens or not requests:
        return {"usd_per_mtok": row.get(f"{prefix}usd_per_mtok"), "energy_j_per_token":
                row.get(f"{prefix}energy_j_per_token"),
                "power_w_per_chip": row.get(f"{prefix}power_w_per_chip_mean")}
    hw, chips = loader.hardware(hardware), tp * replicas
    token_rate = rate * tokens / requests
    ratio = row.get(f"{prefix}served_ratio")
    if ratio is not None and why_not_keeping_up(row, prefix) is not None:
        token_rate *= min(1.0, ratio)
    if token_rate <= 0:
        return dict.fromkeys(_PROVISIONED)
    out["usd_per_mtok"] = None if hw.price_usd_per_hour is None else \
        per_token(chips * hw.price_usd_per_hour / 3600.0, token_rate, 1e6)
    e, wall = row.get(f"{prefix}energy_j_per_token"), row.get(f"{prefix}walltime_s")
    out["energy_j_per_token"] = None if e is None or hw.idle_w is None else \
        e - hw.idle_w * chips * wall / tokens + hw.idle_w * chips / token_rate
    # mean draw per chip over the hour (what nvidia-smi would average): the hour's joules / (chips · 3600 s)
    out["power_w_per_chip"] = None if out["energy_j_per_token"] is None else \
        out["energy_j_per_token"] * token_rate / chips
    return out


def summary_rows(plan, searches: list) -> list[dict]:
    """One row per (option, tp, rate): replicas without and with speculation, the best of all, and figures."""
    groups: dict = {}
    for s in searches:
        groups.setdefault((s.option.name, s.tp, s.rate), []).append(s)
    return [_row(plan, key, ss) for key, ss in groups.items()]


def _usd(s, hw: str, tp: int, rate) -> float:
    prefix = "baseline_" if s.cand.policy is None else ""
    v = provisioned(s.rows[s.hi], prefix, hw, tp, s.hi, rate)["usd_per_mtok"]
    return float("inf") if v is None else v


def _row(plan, key, ss: list) -> dict:
    name, tp, rate = key
    base = next(s for s in ss if s.cand.policy is None)
    hw = base.option.fields.get("hardware")
    spec = [s for s in ss if s.cand.policy is not None and s.hi is not None]
    # among speculative answers at equal replicas and $/Mtok, the one that cuts the mean latency most
    best = min(spec, key=lambda s: (s.hi, _usd(s, hw, tp, rate), -(s.rows[s.hi].get("speedup_latency") or 0.0)),
               default=None)
    row = {"option": name, "hardware": hw, "tp": tp,
           "rate": rate if rate is not None else _replay_rate(base, plan), "replicas_baseline": base.hi,
           "replicas_spec": best.hi if best else None, "spec_candidate": best.cand.label if best else None}
    row.update(_best(base, best, hw, tp, rate, plan.max_replicas))
    row.update(replicas_saved=(base.hi - best.hi) if best and base.hi else None,
               monotone=all(s.monotone for s in ss),
               why_not=None if best else "; ".join(sorted({s.infeasible for s in ss
                                                           if s.cand.policy is not None and s.infeasible} or {"?"})),
               why_not_baseline=base.infeasible)
    for prefix, s, side in (("baseline_", base, "baseline"), ("", best, "spec")):
        if s is None or s.hi is None:
            continue
        r = s.rows[s.hi]
        for f in _FIGURES:
            row[f"{f}_{'sim_' if f in _PROVISIONED else ''}{side}"] = r.get(f"{prefix}{f}")
        row.update({f"{k}_{side}": v for k, v in provisioned(r, prefix, hw, tp, s.hi, rate).items()})
        row[f"{side}_missed_at"] = _missed(s)
    if best is not None:
        r = best.rows[best.hi]
        row.update(speedup_latency=r.get("speedup_latency"), speedup_walltime=r.get("speedup_walltime"),
                   speedup_eq5=r.get("speedup_eq5"), alpha=r.get("alpha"), c=r.get("c"))
    row["candidates"] = {s.cand.label: s.hi for s in ss}
    return row


def _best(base, spec, hw: str, tp: int, rate, max_replicas: int) -> dict:
    """`best`: the fewest replicas, then the lowest $/Mtok served; a tie goes to plain decoding (no draft to
    run). At equal replicas two answers bill the same chips for the same tokens served, so they tie on $/Mtok;
    `best_why` then says what speculation would still buy (mean latency, J/token)."""
    if base.hi is None and spec is None:
        return {"best": None, "best_why": "neither plain decoding nor any speculative candidate passes within "
                                          f"max_replicas = {max_replicas}"}
    if spec is None:
        return {"best": PLAIN, "best_why": f"plain decoding: {_n(base.hi)}; no speculative candidate passes "
                                           f"within max_replicas = {max_replicas}"}
    label = spec.cand.label
    if base.hi is None:
        return {"best": label, "best_why": f"{label}: {_n(spec.hi)}; plain decoding fails even at "
                                           f"max_replicas = {max_replicas}"}
    if base.hi < spec.hi:
        return {"best": PLAIN, "best_why": f"plain decoding: {_n(base.hi)}, speculation ({label}) needs "
                                           f"{spec.hi}"}
    if spec.hi < base.hi:
        return {"best": label, "best_why": f"{label}: {_n(spec.hi)}, plain decoding needs {base.hi}"}
    ub, us = _usd(base, hw, tp, rate), _usd(spec, hw, tp, rate)
    rs, rb = spec.rows[spec.hi], base.rows[base.hi]
    lat = rs.get("speedup_latency")
    lat = f"; {label} cuts the mean latency {lat:.3g}×" if lat and lat > 1 else \
        f"; {label} does not cut the mean latency ({lat:.3g}×)" if lat else ""
    eb, es = (provisioned(r, p, hw, tp, base.hi, rate)["energy_j_per_token"] for r, p in ((rb, "baseline_"),
                                                                                          (rs, "")))
    if eb and es:
        lat += f" and {'saves' if es < eb else 'costs'} {abs(1 - es / eb):.0%} of the J/token"
    if us < ub:
        return {"best": label, "best_why": f"{label}: the same {_n(spec.hi)} as plain decoding, "
                                           f"${us:.3g} vs ${ub:.3g} per Mtok served{lat}"}
    cost = f"the same ${ub:.3g} per Mtok served" if us == ub else f"${ub:.3g} vs ${us:.3g} per Mtok served"
    return {"best": PLAIN, "best_why": f"plain decoding: the same {_n(base.hi)} as speculation ({label}), "
                                       f"{cost}{lat}"}


def _n(replicas: int) -> str:
    return f"{replicas} replica{'' if replicas == 1 else 's'}"


def _missed(s) -> str | None:
    """Why the run at one replica fewer failed (None at 1 replica): the proof the answer is the minimum."""
    if s.hi is None or s.hi == 1:
        return None
    if s.hi - 1 not in s.rows:
        return "not simulated"
    why = s.why.get(s.hi - 1)
    return f"{why} at {_n(s.hi - 1)}" if why else "passed (non-monotone)"


def _replay_rate(s, plan) -> float | None:
    """A replayed log's mean arrival rate: (requests − 1) / (last arrival − first arrival)."""
    from specsim.engine.workload import build_workload

    cand = plan.candidates[0]
    wl = build_workload(plan.config(s.option, s.tp, None, cand, 1))
    span = float(wl.arrival_s.max() - wl.arrival_s.min()) if wl.n > 1 else 0.0
    return (wl.n - 1) / span if span > 0 else None
