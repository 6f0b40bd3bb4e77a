"""`specsim plan`: the fewest replicas that meet the SLOs at each request rate, with and without speculation.

For every (hardware option, TP degree, rate, candidate) — the candidates being the no-speculation baseline, each
fixed γ and each γ policy of the plan (`specsim.studies.plan_spec`) — the search finds the smallest replica count
whose replicas keep up with the load (`specsim.studies.plan_keepup`: served throughput within its tolerance of
offered, TTFT not growing over the run — checked whatever the objectives say, so an overloaded system is never an
answer) and whose simulated latency percentiles all meet the plan's SLOs. The search starts where the step
costs say the answer likely is (`plan_keepup.replica_bounds`: a mean-value estimate, never below the lower bound
under which the replicas cannot serve the offered tokens even in the best case) and probes that count and the one
below it together; from a miss it climbs
(+1, +2, +4, …, no further than the count that provably keeps up while that is above the last miss, and never past
`max_replicas`), from a hit it bisects down; then it bisects between the last miss and the first hit. So every
answer r comes with r − 1 simulated and failing, with the reason (or r = 1) — the bound only says where to look.
The bisection assumes more replicas never hurt; the table says where a probe contradicted that (`monotone` false).

All searches advance together: each round is one sweep (`specsim.sweep.run_sweep`) of the points the open searches
probe next, in DIR/rounds/round-NN-HASH/ (HASH: of its points), so a plan runs on local processes or a Dask
cluster, and a killed plan rerun with the same file and --out reuses every finished point and continues. The
baseline is read from the paired baseline of the first candidate's runs (it does not depend on γ). The answer per
(option, tp, rate) is `specsim.studies.plan_answer`: `best` the fewest replicas, then the lowest $/Mtok, plain
decoding included.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specsim.errors import ConfigError, SpecsimError
from specsim.studies import plan_keepup
from specsim.studies.plan_answer import provisioned, summary_rows  # noqa: F401  (provisioned: the study's figure)
from specsim.studies.plan_spec import BASELINE, Candidate, Option, PlanSpec, load_plan
from specsim.sweep.checks import digests_of
from specsim.sweep.grid import canonical_json, point_id
from specsim.sweep.run import SweepInterrupted, run_sweep
from specsim.sweep.spec import SweepSpec

MANIFEST = "plan.json"
ROUNDS = "rounds"
MAX_ROUNDS = 64  # doubling to 1024 replicas and bisecting back takes 21; beyond this something is wrong
POINT_FN = "specsim.studies.plan_keepup:run_point"  # the simulation row plus its keep-up figures


@dataclass
class Search:
    """The smallest replica count meeting the SLOs for one (option, tp, rate, candidate)."""

    option: Option
    tp: int
    rate: float | None
    cand: Candidate
    lo: int = 0  # the largest replica count seen to fail (miss an SLO or not keep up; 0: none yet)
    hi: int | None = None  # the smallest seen to pass
    lower: int = 1  # fewer cannot serve the offered load even in the best case (plan_keepup.replica_bounds)
    stable: int | None = None  # a count that provably keeps up (the climb's ceiling while above the last miss)
    likely: int = 1  # where the search starts: a mean-value estimate, never below `lower`
    infeasible: str | None = None
    monotone: bool = True  # False once a probe met the SLOs below one that missed them
    fallback: bool = False  # the baseline is read from an n-gram run (the first candidate's run failed)
    rows: dict = field(default_factory=dict)  # replicas -> the point's result row
    why: dict = field(default_factory=dict)  # replicas -> why that count failed (`miss`)

    def next_probes(self, max_replicas: int) -> list[int]:
        """The counts to simulate next (none: the search is over); see the module docstring."""
        if self.infeasible is not None:
            return []
        start = min(max(self.lower, self.likely), max_replicas)
        if self.hi is None and self.lo == 0:  # nothing probed yet: the bound and the count below it
            return [start - 1, start] if start > 1 else [1]
        if self.hi is None:
            if self.lo >= max_replicas:
                self.infeasible = f"fails even at max_replicas = {max_replicas}: {self.why.get(self.lo, '?')}"
                return []
            step = max(1, self.lo - start + 1)  # +1, +2, +4, … from the start
            top = self.stable if self.stable is not None and self.stable > self.lo else max_replicas
            return [min(self.lo + step, top, max_replicas)]
        return [] if self.hi - self.lo <= 1 else [(self.lo + self.hi) // 2]

    def record(self, replicas: int, row: dict, slo: dict, fallback: bool = False) -> None:
        """The row of the probe at `replicas` (run as the n-gram fallback when `fallback`, see PlanSpec.config)."""
        if fallback != self.fallback:
            return  # a probe run before the fallback was known: run again as the fallback
        if row.get("error") and self.cand.policy is None and not self.fallback:
            self.fallback = True  # its draft, not plain decoding, failed: probe the same count again (PlanSpec.config)
            return
        self.rows[replicas] = row
        if row.get("error"):
            self.infeasible = str(row["error"])
            return
        why = miss(row, slo, self.cand)
        if why is None:
            if replicas <= self.lo:
                self.monotone = False
            self.hi = replicas if self.hi is None else min(self.hi, replicas)
        else:
            self.why[replicas] = why
            if self.hi is not None and replicas >= self.hi:
                self.monotone = False
            self.lo = max(self.lo, replicas)


def miss(row: dict, slo: dict, cand: Candidate) -> str | None:
    """Why the candidate's run (the baseline's columns for the baseline) is not an answer: its replicas do not
    keep up (`plan_keepup`, whatever the objectives say), or an objective is missed; None when it is one."""
    prefix = "baseline_" if cand.policy is None else ""
    why = plan_keepup.why_not_keeping_up(row, prefix)
    if why is not None:
        return why
    for key, limit in slo.items():
        v = row.get(prefix + key)
        if v is None or v != v or v > limit:  # None / NaN: nothing finished, so nothing met
            return f"{key} = {'none' if v is None or v != v else f'{v:.4g}'} > {limit:g}"
    return None


def meets(row: dict, slo: dict, cand: Candidate) -> bool:
    """The candidate's run keeps up and meets every objective."""
    return miss(row, slo, cand) is None


@dataclass
class PlanReport:
    out_dir: str
    rounds: int
    points: int
    searches: list[Search]
    rows: list[dict]
    notes: list[str]
    slo: dict = field(default_factory=dict)  # the plan's objectives (the plot's title states them)


def run_plan(plan: PlanSpec | str | Path, out_dir: str | Path, *, scheduler: str | None = None,
             workers: int | None = None, progress: bool = True, bracket: bool = True) -> PlanReport:
    """bracket=False starts every search at 1 replica and doubles (the search before the bounds, kept so that
    experiments/bench_plan.py can time both on the same code; the answers are the same)."""
    if not isinstance(plan, PlanSpec):
        plan = load_plan(plan)
    out = Path(out_dir)
    _claim(out, plan)
    searches = [Search(o, tp, rate, cand) for o in plan.options for tp in o.tps for rate in (plan.rates or (None,))
                for cand in (BASELINE,) + plan.candidates]
    for s in searches if bracket else ():
        s.lower, s.likely, s.stable = _bounds(plan, s)
    seen: dict[str, dict] = {}  # canonical config -> result row, across rounds
    notes: list[str] = []
    for k in range(1, MAX_ROUNDS + 1):
        probes = [(s, r, s.fallback) for s in searches for r in s.next_probes(plan.max_replicas)]
        if not probes:
            break
        configs = {}
        for s, r, fb in probes:
            cfg = plan.config(s.option, s.tp, s.rate, s.cand, r, fb)
            configs.setdefault(canonical_json(cfg), cfg)
        # the costliest points first (most requests, then most replicas: more, smaller steps), so that the cheap
        # ones fill the workers' tails instead of one worker finishing a big point alone; the candidates of one
        # (option, rate, replicas) side by side, so a worker reuses their one plain-decoding run (run_point)
        todo = sorted((c for key, c in configs.items() if key not in seen),
                      key=lambda c: (-(c.get("requests") or 0), -c.get("replicas"), str(c.get("hardware")),
                                     c.get("tp"), str(c.get("stack"))))
        if progress:
            print(f"specsim plan: round {k}: {len(probes)} open searches, {len(todo)} new points", file=sys.stderr)
        if todo:
            rows, round_notes = _run_round(plan, out, k, todo, scheduler, workers, progress)
            seen.update(zip((canonical_json(c) for c in todo), rows))
            notes += round_notes
        for s, r, fb in probes:
            s.record(r, seen[canonical_json(plan.config(s.option, s.tp, s.rate, s.cand, r, fb))], plan.slo, fb)
    else:
        raise SpecsimError(f"plan did not converge in {MAX_ROUNDS} rounds")
    rows = summary_rows(plan, searches)
    return PlanReport(str(out), k - 1, len(seen), searches, rows, notes, dict(plan.slo))


def _bounds(plan: PlanSpec, s: Search) -> tuple[int, int, int | None]:
    """Where the search starts, from the step costs (`plan_keepup.replica_bounds`); (1, None) where the setup
    cannot be resolved here (its simulation then says why). Run in this process before any round, it also fills
    the caches a forked worker inherits (profiles, step costs, the bands choose-draft advises)."""
    try:
        return plan_keepup.replica_bounds(plan.config(s.option, s.tp, s.rate, s.cand, 1), s.cand.policy is None)
    except (SpecsimError, ValueError, ArithmeticError):
        return 1, 1, None


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
         "candidates": [(c.policy, c.gamma) + ((c.draft,) if c.draft else ()) for c in plan.candidates],
         "max_replicas": plan.max_replicas,
         "duration_s": plan.duration_s, "min_requests": plan.min_requests, "slo": plan.slo}
    if plan.warmup_s:  # only when set: plans written before it keep their id
        d["warmup_s"] = plan.warmup_s
    # the keep-up rule changes which points are answers: a directory of a plan run without it is another plan
    d["keepup"] = [plan_keepup.SERVED_TOL, plan_keepup.NOISE_SIGMAS, plan_keepup.QUEUE_GROWTH_MAX]
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
    spec = SweepSpec(path=record, name=f"{plan.name}-{stem}", fixed={}, axes={}, point_fn=POINT_FN,
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
