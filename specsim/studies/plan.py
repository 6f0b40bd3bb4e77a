"""`specsim plan`: the fewest replicas that meet the SLOs at each request rate, with and without speculation.

For every (hardware option, TP degree, rate, candidate) — the candidates being the no-speculation baseline, each
fixed γ and each γ policy of the plan (`specsim.studies.plan_spec`) — the search finds the smallest replica count
whose simulated latency percentiles all meet the plan's SLOs: it doubles from 1 replica until one meets them (or
`max_replicas` does not), then bisects between the last miss and the first hit. So every answer r comes with r − 1
simulated and missing an SLO (or r = 1). The bisection assumes more replicas never hurt; the table says where a
probe contradicted that (`monotone` false).

All searches advance together: each round is one sweep (`specsim.sweep.run_sweep`) of the points the open searches
probe next, in DIR/rounds/round-NN-HASH/ (HASH: of its points), so a plan runs on local processes or a Dask
cluster, and a killed plan rerun with the same file and --out reuses every finished point and continues. The baseline is read from the paired
baseline of the first candidate's runs (it does not depend on γ). Every row carries the simulated speedup and the
closed-form eq. (5) at the chosen point, $/Mtok and J/token (`specsim.cost.power`) for both.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specsim.errors import ConfigError, SpecsimError
from specsim.studies.plan_spec import BASELINE, Candidate, Option, PlanSpec, load_plan
from specsim.sweep.checks import digests_of
from specsim.sweep.grid import canonical_json, point_id
from specsim.sweep.run import SweepInterrupted, run_sweep
from specsim.sweep.spec import DEFAULT_POINT_FN, SweepSpec

MANIFEST = "plan.json"
ROUNDS = "rounds"
MAX_ROUNDS = 64  # doubling to 1024 replicas and bisecting back takes 21; beyond this something is wrong


@dataclass
class Search:
    """The smallest replica count meeting the SLOs for one (option, tp, rate, candidate)."""

    option: Option
    tp: int
    rate: float | None
    cand: Candidate
    lo: int = 0  # the largest replica count seen to miss an SLO (0: none yet)
    hi: int | None = None  # the smallest seen to meet them all
    infeasible: str | None = None
    monotone: bool = True  # False once a probe met the SLOs below one that missed them
    fallback: bool = False  # the baseline is read from an n-gram run (the first candidate's run failed)
    rows: dict = field(default_factory=dict)  # replicas -> the point's result row

    def next_probe(self, max_replicas: int) -> int | None:
        if self.infeasible is not None:
            return None
        if self.hi is None:
            if self.lo >= max_replicas:
                self.infeasible = f"misses the SLOs even at max_replicas = {max_replicas}"
                return None
            return 1 if self.lo == 0 else min(2 * self.lo, max_replicas)
        return None if self.hi - self.lo <= 1 else (self.lo + self.hi) // 2

    def record(self, replicas: int, row: dict, slo: dict) -> None:
        if row.get("error") and self.cand.policy is None and not self.fallback:
            self.fallback = True  # its draft, not plain decoding, failed: probe the same count again (PlanSpec.config)
            return
        self.rows[replicas] = row
        if row.get("error"):
            self.infeasible = str(row["error"])
            return
        if meets(row, slo, self.cand):
            if replicas <= self.lo:
                self.monotone = False
            self.hi = replicas if self.hi is None else min(self.hi, replicas)
        else:
            if self.hi is not None and replicas >= self.hi:
                self.monotone = False
            self.lo = max(self.lo, replicas)


def meets(row: dict, slo: dict, cand: Candidate) -> bool:
    """Every objective met by the candidate's run (the baseline's columns for the baseline)."""
    prefix = "baseline_" if cand.policy is None else ""
    for key, limit in slo.items():
        v = row.get(prefix + key)
        if v is None or v != v or v > limit:  # None / NaN: nothing finished, so nothing met
            return False
    return True


@dataclass
class PlanReport:
    out_dir: str
    rounds: int
    points: int
    searches: list[Search]
    rows: list[dict]
    notes: list[str]


def run_plan(plan: PlanSpec | str | Path, out_dir: str | Path, *, scheduler: str | None = None,
             workers: int | None = None, progress: bool = True) -> PlanReport:
    if not isinstance(plan, PlanSpec):
        plan = load_plan(plan)
    out = Path(out_dir)
    _claim(out, plan)
    searches = [Search(o, tp, rate, cand) for o in plan.options for tp in o.tps for rate in (plan.rates or (None,))
                for cand in (BASELINE,) + plan.candidates]
    seen: dict[str, dict] = {}  # canonical config -> result row, across rounds
    notes: list[str] = []
    for k in range(1, MAX_ROUNDS + 1):
        probes = [(s, r) for s in searches if (r := s.next_probe(plan.max_replicas)) is not None]
        if not probes:
            break
        configs = {}
        for s, r in probes:
            cfg = plan.config(s.option, s.tp, s.rate, s.cand, r, s.fallback)
            configs.setdefault(canonical_json(cfg), cfg)
        todo = [c for key, c in configs.items() if key not in seen]
        if progress:
            print(f"specsim plan: round {k}: {len(probes)} open searches, {len(todo)} new points", file=sys.stderr)
        if todo:
            rows, round_notes = _run_round(plan, out, k, todo, scheduler, workers, progress)
            seen.update(zip((canonical_json(c) for c in todo), rows))
            notes += round_notes
        for s, r in probes:
            s.record(r, seen[canonical_json(plan.config(s.option, s.tp, s.rate, s.cand, r, s.fallback))], plan.slo)
    else:
        raise SpecsimError(f"plan did not converge in {MAX_ROUNDS} rounds")
    rows = summary_rows(plan, searches)
    return PlanReport(str(out), k - 1, len(seen), searches, rows, notes)


def _claim(out: Path, plan: PlanSpec) -> None:
    """DIR belongs to one plan: a rerun of the same plan resumes, another plan is refused."""
    from specsim.sweep.dir import check_out_dir, write_atomic

    check_out_dir(out)
    want = {"plan": str(plan.path), "plan_id": plan_id(plan)}
    m = out / MANIFEST
    if m.exists():
        try:
            have = json.loads(m.read_bytes())
        except (OSError, ValueError):
            have = None
        if not isinstance(have, dict) or have.get("plan_id") != want["plan_id"]:
            whose = have.get("plan") if isinstance(have, dict) else f"an unreadable {MANIFEST}"
            raise ConfigError(f"holds another plan ({whose}); use another --out, or delete this directory to start "
                              f"over", file=out)
        return
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"not empty and not a plan directory (no {MANIFEST})", file=out)
    (out / ROUNDS).mkdir(parents=True, exist_ok=True)
    write_atomic(m, lambda f: f.write(json.dumps(want, indent=1).encode()))


def plan_id(plan: PlanSpec) -> str:
    d = {"fixed": plan.fixed, "options": [(o.name, o.fields, o.tps) for o in plan.options], "rates": plan.rates,
         "candidates": [(c.policy, c.gamma) + ((c.draft,) if c.draft else ()) for c in plan.candidates], "max_replicas": plan.max_replicas,
         "duration_s": plan.duration_s, "min_requests": plan.min_requests, "slo": plan.slo}
    if plan.warmup_s:  # only when set: plans written before it keep their id
        d["warmup_s"] = plan.warmup_s
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _run_round(plan: PlanSpec, out: Path, k: int, configs: list, scheduler, workers, progress):
    """One sweep of this round's new points; its rows in the configs' order."""
    import pandas as pd

    from specsim.sweep.dir import write_atomic

    grid_key = json.dumps([canonical_json(c) for c in configs])
    # named by content: a round whose points differ from a stored one (another specsim version wrote them
    # differently) gets its own directory, and the stored one is kept
    stem = f"round-{k:02d}-{hashlib.sha256(grid_key.encode()).hexdigest()[:8]}"
    record = out / ROUNDS / f"{stem}.json"
    if not record.exists():
        write_atomic(record, lambda f: f.write(json.dumps([json.loads(canonical_json(c)) for c in configs],
                                                           indent=0).encode()))
    digests = digests_of(configs, plan.path, lambda f: f"fixed.{f}")
    spec = SweepSpec(path=record, name=f"{plan.name}-{stem}", fixed={}, axes={}, point_fn=DEFAULT_POINT_FN,
                     chunk_size=0, plots=False, points=configs, ids=[point_id(c, digests) for c in configs],
                     grid_key=grid_key, digests=digests)
    try:
        report = run_sweep(spec, out / ROUNDS / stem, scheduler=scheduler, workers=workers, progress=progress,
                           plots=False)
    except SweepInterrupted as e:
        cmd = f"specsim plan {shlex.quote(str(plan.path))} --out {shlex.quote(str(out))}"
        raise SweepInterrupted(f"{str(e).split('; resume with')[0]}; resume with `{cmd}`") from None
    df = pd.read_parquet(report.results)
    rows = [{k: (None if _isnan(v) else v) for k, v in r.items()} for r in df.to_dict("records")]
    return rows, report.notes


def _isnan(v) -> bool:
    return isinstance(v, float) and v != v


# --- the answer -------------------------------------------------------------------------------------------

_PROVISIONED = ("usd_per_mtok", "energy_j_per_token")
_FIGURES = ("usd_per_mtok", "energy_j_per_token", "ttft_p90_s", "tpot_p90_s", "throughput_tok_s")


def provisioned(row: dict, prefix: str, hardware: str, tp: int, replicas: int, rate: float | None) -> dict:
    """$/Mtok and J/token of serving `rate` for an hour on `replicas` replicas: every chip billed and idling for
    the whole hour, the tokens those requests ask for (rate × the run's mean output), the dynamic energy per token
    as simulated. A finite run's own figures (`*_sim`) also bill the drain after the last arrival, which a
    minute-long run overweights; the planner's figure is this steady-state one (None for a replayed CSV)."""
    from specsim.cost.power import per_token
    from specsim.profiles import loader

    out = {}
    tokens, requests = row.get("output_tokens"), row.get("requests")
    if rate is None or not tokens or not requests:
        return {"usd_per_mtok": row.get(f"{prefix}usd_per_mtok"), "energy_j_per_token":
                row.get(f"{prefix}energy_j_per_token")}
    hw, chips = loader.hardware(hardware), tp * replicas
    token_rate = rate * tokens / requests
    out["usd_per_mtok"] = None if hw.price_usd_per_hour is None else \
        per_token(chips * hw.price_usd_per_hour / 3600.0, token_rate, 1e6)
    e, wall = row.get(f"{prefix}energy_j_per_token"), row.get(f"{prefix}walltime_s")
    out["energy_j_per_token"] = None if e is None or hw.idle_w is None else \
        e - hw.idle_w * chips * wall / tokens + hw.idle_w * chips / token_rate
    return out


def summary_rows(plan: PlanSpec, searches: list[Search]) -> list[dict]:
    """One row per (option, tp, rate): replicas without and with speculation (its best candidate), and figures."""
    groups: dict = {}
    for s in searches:
        groups.setdefault((s.option.name, s.tp, s.rate), []).append(s)
    return [_row(plan, key, ss) for key, ss in groups.items()]


def _row(plan: PlanSpec, key, ss: list[Search]) -> dict:
    name, tp, rate = key
    base = next(s for s in ss if s.cand.policy is None)
    spec = [s for s in ss if s.cand.policy is not None and s.hi is not None]
    best = min(spec, key=lambda s: (s.hi, s.rows[s.hi].get("usd_per_mtok") or float("inf")), default=None)
    row = {"option": name, "hardware": base.option.fields.get("hardware"), "tp": tp,
           "rate": rate if rate is not None else _replay_rate(base, plan), "replicas_baseline": base.hi,
           "replicas_spec": best.hi if best else None, "best": best.cand.label if best else None,
           "replicas_saved": (base.hi - best.hi) if best and base.hi else None,
           "monotone": all(s.monotone for s in ss),
           "why_not": None if best else "; ".join(sorted({s.infeasible for s in ss if s.infeasible} or {"?"})),
           "why_not_baseline": base.infeasible}
    hw = base.option.fields.get("hardware")
    if base.hi is not None:
        b = base.rows[base.hi]
        for f in _FIGURES:
            row[f"{f}_{'sim_' if f in _PROVISIONED else ''}baseline"] = b.get(f"baseline_{f}")
        row.update({f"{k}_baseline": v for k, v in provisioned(b, "baseline_", hw, tp, base.hi, rate).items()})
        row["baseline_missed_at"] = _missed(base, plan)
    if best is not None:
        r = best.rows[best.hi]
        for f in _FIGURES:
            row[f"{f}_{'sim_' if f in _PROVISIONED else ''}spec"] = r.get(f)
        row.update({f"{k}_spec": v for k, v in provisioned(r, "", hw, tp, best.hi, rate).items()})
        row.update(speedup=r.get("speedup"), speedup_eq5=r.get("speedup_eq5"), alpha=r.get("alpha"), c=r.get("c"),
                   spec_missed_at=_missed(best, plan))
    row["candidates"] = {s.cand.label: s.hi for s in ss}
    return row


def _missed(s: Search, plan: PlanSpec) -> str | None:
    """The objective the run at one replica fewer missed (None at 1 replica): the proof the answer is the minimum."""
    if s.hi is None or s.hi == 1:
        return None
    row = s.rows.get(s.hi - 1)
    if row is None:
        return "not simulated"
    prefix = "baseline_" if s.cand.policy is None else ""
    for k, limit in plan.slo.items():
        v = row.get(prefix + k)
        if v is None or v > limit:
            return f"{k} = {'none' if v is None else f'{v:.4g}'} > {limit:g} at {s.hi - 1} replicas"
    return "met (non-monotone)"


def _replay_rate(s: Search, plan: PlanSpec) -> float | None:
    """A replayed log's mean arrival rate: (requests − 1) / (last arrival − first arrival)."""
    from specsim.engine.workload import build_workload

    cand = plan.candidates[0]
    wl = build_workload(plan.config(s.option, s.tp, None, cand, 1))
    span = float(wl.arrival_s.max() - wl.arrival_s.min()) if wl.n > 1 else 0.0
    return (wl.n - 1) / span if span > 0 else None
