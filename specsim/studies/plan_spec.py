"""Plan specs: what `specsim plan` searches — hardware options, request rates, candidates, SLOs — checked up front.

A plan is a TOML file:

    name = "llama70b"                  # optional label
    [fixed]                            # SimConfig fields every point shares (flat names, as in a sweep's [fixed])
    target = "llama-3.1-70b"
    draft = "llama-3.2-1b"
    alpha = 0.65
    prompt_len = 161                   # with length_dist = "lognormal": ShareGPT-like lengths around these means
    output_len = 338
    length_dist = "lognormal"
    [[option]]                         # one table per hardware option; any SimConfig field, tp may be a list
    name = "4xH100"
    hardware = "h100-sxm"
    tp = 4
    [search]
    rates = [1, 2, 4, 8, 16, 32, 64]   # Poisson request rates, req/s (leave out with fixed.arrivals_csv)
    gammas = [3, 5]                    # speculative candidates with a fixed γ ...
    policies = []                      # ... and γ policies ("bands", "heuristic", "optimal")
    drafts = []                        # optional: "NAME:ALPHA" drafts, each tried with every γ and policy;
                                       #   NAME a draft model or a head (eagle3-llama-3.1-8b, mtp-..., ngram:
                                       #   its method follows), default fixed.draft at fixed.alpha
    max_replicas = 64                  # the search refuses to look further
    duration_s = 60                    # arrival window per point: requests = max(min_requests, ⌈rate·duration⌉)
    min_requests = 200
    warmup_s = 10                      # requests arriving earlier are left out of the SLO percentiles [0]
    [slo]                              # the objectives every point must meet, on percentiles of simulated latency
                                       #   (and, whatever they say, its replicas must keep up: plan_keepup)
    ttft_p90_s = 1.0
    tpot_p90_s = 0.05

The plan sets `rate`, `replicas`, `requests`, `gamma` and `policy` itself; giving them in [fixed] or an option is
refused. Every value is strictly typed (`specsim.sweep.values`), every option's profiles and TP are checked, and one
point per option is validated before any simulation runs; a bad value is one line naming the plan file and field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from specsim.config import FLAT_FIELDS, SimConfig
from specsim.engine.acceptance import GAMMA_CAP
from specsim.engine.metrics import PCTS
from specsim.errors import ConfigError
from specsim.sweep.checks import _point_error, check_files_and_profiles
from specsim.sweep.spec import _resolve_path, read_spec_file
from specsim.sweep.values import check_string, check_value, is_sequence, shown

_TOP_KEYS = {"name", "description", "fixed", "option", "search", "slo"}
_OPTION_KEYS = set(FLAT_FIELDS) | {"name"}
PLAN_SETS = ("rate", "replicas", "requests", "gamma", "policy", "batch", "slo_warmup_s")  # the plan sets these
SLO_KEYS = tuple(f"{m}_p{p}_s" for m in ("ttft", "tpot", "itl", "e2e") for p in PCTS)
SEARCH_POLICIES = ("optimal", "heuristic", "bands")  # γ policies a plan may try beside fixed γ (not the oracle)
MAX_REPLICAS = 1024  # SimConfig's bound on replicas
MAX_POINT_REQUESTS = 1_000_000  # rate × duration beyond this is a typo (a week of traffic at 1.6 req/s)


@dataclass(frozen=True)
class Option:
    name: str
    fields: dict  # SimConfig fields of this option (tp excluded)
    tps: tuple[int, ...]


@dataclass(frozen=True)
class Candidate:
    """One way to serve: the baseline (no speculation), a fixed γ, or a γ policy."""

    policy: str | None  # None = the paired baseline
    gamma: int | None = None
    draft: tuple[str, float] | None = None  # (draft, α) from search.drafts; None = fixed.draft / fixed.alpha

    @property
    def label(self) -> str:
        if self.policy is None:
            return "baseline"
        what = f"gamma={self.gamma}" if self.policy == "fixed" else f"policy={self.policy}"
        if self.draft is None:
            return what
        name = self.draft[0]
        return f"{Path(name).stem if name.endswith('.toml') else name}:{self.draft[1]:g} {what}"


BASELINE = Candidate(None)


@dataclass(frozen=True)
class PlanSpec:
    path: Path
    name: str
    fixed: dict
    options: tuple[Option, ...]
    rates: tuple[float, ...] | None  # None: the arrivals CSV sets the rate
    candidates: tuple[Candidate, ...]  # speculative ones; the baseline is always searched too
    max_replicas: int
    duration_s: float
    min_requests: int
    slo: dict  # metric key (ttft_p90_s, ...) -> limit, s
    warmup_s: float = 0.0  # SimConfig.slo_warmup_s of every point: a run starts empty, steady state comes later

    def requests(self, rate: float | None) -> int | None:
        return None if rate is None else max(self.min_requests, math.ceil(rate * self.duration_s))

    def config(self, option: Option, tp: int, rate: float | None, cand: Candidate, replicas: int,
               fallback: bool = False) -> SimConfig:
        """The simulation point of one probe. The baseline is read from the first candidate's run (plain decoding
        does not depend on the draft); with `fallback`, when that run cannot be made (its draft does not fit beside
        the target), from a run whose proposer holds no weights and no KV (n-gram), whose baseline is the same."""
        c = cand if cand.policy is not None else self.candidates[0]
        d = {**self.fixed, **option.fields, "tp": tp, "replicas": replicas, "policy": c.policy}
        if c.gamma is not None:
            d["gamma"] = c.gamma
        if c.draft is not None:
            d["draft"], d["alpha"] = c.draft
        if fallback and cand.policy is None:
            for k in ("speculative_config", "speculative_token_tree", "tree_topk_acceptance", "draft_tp",
                      "draft_kv_budget_tokens", "measured_draft", "draft_catchup"):
                d.pop(k, None)
            d.update(draft="ngram", method="ngram", policy="fixed")
        if rate is not None:
            d.update(rate=rate, requests=self.requests(rate))
        if self.warmup_s:
            d["slo_warmup_s"] = self.warmup_s
        return SimConfig.model_validate(d)


def load_plan(path: str | Path) -> PlanSpec:
    path = Path(path)
    data = read_spec_file(path)
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError("unknown top-level key", file=path, field=shown(key),
                              allowed=", ".join(sorted(_TOP_KEYS)))
    name = data.get("name", path.stem)
    check_string(name, file=path, where="name")
    fixed = _fields(_table(data, "fixed", path), "fixed", path)
    options = _options(data.get("option"), path)
    search = _table(data, "search", path)
    rates = _rates(search, fixed, path)
    plan = PlanSpec(path=path, name=name, fixed=fixed, options=options, rates=rates,
                    candidates=_candidates(search, path), max_replicas=_int(search, "max_replicas", 64, 1, MAX_REPLICAS,
                                                                             path),
                    duration_s=_num(search, "duration_s", 60.0, path), min_requests=_int(search, "min_requests", 200,
                                                                                          1, MAX_POINT_REQUESTS, path),
                    slo=_slo(_table(data, "slo", path), path), warmup_s=_warmup(search, path))
    _check_search_keys(search, path)
    if plan.warmup_s >= plan.duration_s:
        raise ConfigError("the warm-up would leave no request to measure", file=path, field="search.warmup_s",
                          value=plan.warmup_s, allowed=f"< duration_s = {plan.duration_s:g}")
    if rates and plan.requests(max(rates)) > MAX_POINT_REQUESTS:
        raise ConfigError(f"rate {max(rates):g} × duration_s {plan.duration_s:g} asks for more than "
                          f"{MAX_POINT_REQUESTS} requests per point", file=path, field="search.duration_s",
                          value=plan.duration_s, allowed=f"<= {MAX_POINT_REQUESTS / max(rates):g} s at that rate")
    _check_points(plan)
    return plan


def _table(data: dict, key: str, path: Path) -> dict:
    t = data.get(key, {})
    if not isinstance(t, dict):
        raise ConfigError("must be a table", file=path, field=key, value=shown(t))
    return t


def _fields(table: dict, where: str, path: Path, extra: tuple[str, ...] = ()) -> dict:
    out = {}
    base = path.parent
    for key, v in table.items():
        if key in extra:
            continue
        if key not in FLAT_FIELDS:
            raise ConfigError("unknown field", file=path, field=shown(f"{where}.{key}"),
                              allowed="a SimConfig field (as in a sweep's [fixed])")
        if key in PLAN_SETS:
            raise ConfigError("the plan sets this field itself", file=path, field=f"{where}.{key}", value=shown(v),
                              allowed=f"leave out {', '.join(PLAN_SETS)} ([search] sets rates, γ and policies)")
        if isinstance(v, dict) or (isinstance(v, list) and not is_sequence(key)):
            raise ConfigError("must be a scalar", file=path, field=f"{where}.{key}", value=shown(v))
        check_value(key, v, file=path, where=f"{where}.{key}")
        out[key] = _resolve_path(key, v, base)
    return out


def _options(raw, path: Path) -> tuple[Option, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(o, dict) for o in raw):
        raise ConfigError("needs at least one [[option]] table (hardware, tp, ...)", file=path, field="option")
    out, seen = [], set()
    for i, o in enumerate(raw):
        where = f"option[{i}]"
        name = o.get("name", o.get("hardware", f"option-{i}"))
        check_string(name, file=path, where=f"{where}.name")
        if not name.strip():  # the name labels the option's rows, plot lines and best_why: it must say something
            raise ConfigError("an option's name is empty", file=path, field=f"{where}.name", value=name,
                              allowed="a non-blank label (or leave it out: the hardware names the option)")
        if name in seen:
            raise ConfigError("two options share a name", file=path, field=f"{where}.name", value=name)
        seen.add(name)
        if "hardware" not in o:
            raise ConfigError("an option needs its hardware", file=path, field=f"{where}.hardware")
        tps = o.get("tp", 1)
        tps = tps if isinstance(tps, list) else [tps]
        if not tps or len(set(map(repr, tps))) != len(tps):
            raise ConfigError("tp must be one degree or a non-empty list of distinct degrees", file=path,
                              field=f"{where}.tp", value=shown(o.get("tp")))
        for t in tps:
            check_value("tp", t, file=path, where=f"{where}.tp")
        out.append(Option(name, _fields(o, where, path, extra=("name", "tp")), tuple(tps)))
    return tuple(out)


def _rates(search: dict, fixed: dict, path: Path) -> tuple[float, ...] | None:
    rates = search.get("rates")
    if "arrivals_csv" in fixed:
        if rates is not None:
            raise ConfigError("a replayed arrivals CSV sets the rate; drop search.rates", file=path,
                              field="search.rates")
        return None
    if not isinstance(rates, list) or not rates:
        raise ConfigError("needs a non-empty list of request rates (req/s), or fixed.arrivals_csv", file=path,
                          field="search.rates", value=shown(rates))
    for r in rates:
        check_value("rate", r, file=path, where="search.rates")
    if sorted(set(rates)) != list(rates):
        raise ConfigError("rates must be distinct and ascending", file=path, field="search.rates", value=shown(rates))
    return tuple(float(r) for r in rates)


def _candidates(search: dict, path: Path) -> tuple[Candidate, ...]:
    gammas, policies = search.get("gammas", [4]), search.get("policies", [])
    for key, v in (("gammas", gammas), ("policies", policies)):
        if not isinstance(v, list) or len(set(map(repr, v))) != len(v):
            raise ConfigError("must be a list of distinct values", file=path, field=f"search.{key}", value=shown(v))
    for g in gammas:
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= GAMMA_CAP:
            raise ConfigError("not a draft length", file=path, field="search.gammas", value=shown(g),
                              allowed=f"integers 1..{GAMMA_CAP}")
    for p in policies:
        if p not in SEARCH_POLICIES:
            raise ConfigError("not a policy a plan can try", file=path, field="search.policies", value=shown(p),
                              allowed=", ".join(SEARCH_POLICIES) + " (fixed γ: search.gammas)")
    drafts = _drafts(search, path)
    out = tuple(Candidate("fixed", g, d) for d in drafts for g in gammas) + tuple(Candidate(p, None, d)
                                                                                  for d in drafts for p in policies)
    if not out:
        raise ConfigError("no speculative candidate to compare with the baseline", file=path, field="search.gammas",
                          allowed="at least one γ in search.gammas or one policy in search.policies")
    return out


def _drafts(search: dict, path: Path) -> list:
    """search.drafts: "NAME:ALPHA" pairs (as a sweep writes them), each tried with every γ and policy."""
    raw = search.get("drafts")
    if raw is None:
        return [None]
    if not isinstance(raw, list) or not raw or len(set(map(repr, raw))) != len(raw):
        raise ConfigError("must be a non-empty list of distinct 'NAME:ALPHA' drafts", file=path,
                          field="search.drafts", value=shown(raw))
    out = []
    for d in raw:
        name, _, acc = d.rpartition(":") if isinstance(d, str) else ("", "", "")
        try:
            alpha = float(acc)
        except ValueError:
            alpha = None
        if not name or alpha is None:
            raise ConfigError("not a draft with its acceptance", file=path, field="search.drafts", value=shown(d),
                              allowed="'NAME:ALPHA', e.g. 'llama-3.2-1b:0.65'")
        check_value("alpha", alpha, file=path, where="search.drafts")
        out.append((_resolve_path("draft", name, path.parent), alpha))
    return out


def _int(t: dict, key: str, default: int, lo: int, hi: int, path: Path) -> int:
    v = t.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError("out of range", file=path, field=f"search.{key}", value=shown(v),
                          allowed=f"integers {lo}..{hi}")
    return v


def _num(t: dict, key: str, default: float, path: Path) -> float:
    v = t.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1e7:
        raise ConfigError("out of range", file=path, field=f"search.{key}", value=shown(v),
                          allowed="a number in (0, 1e7] seconds")
    return float(v)


def _warmup(t: dict, path: Path) -> float:
    v = t.get("warmup_s", 0.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1e7:
        raise ConfigError("out of range", file=path, field="search.warmup_s", value=shown(v),
                          allowed="a number of seconds in [0, duration_s)")
    return float(v)


def _check_search_keys(search: dict, path: Path) -> None:
    known = {"rates", "drafts", "gammas", "policies", "max_replicas", "duration_s", "min_requests", "warmup_s"}
    for key in search:
        if key not in known:
            raise ConfigError("unknown field", file=path, field=shown(f"search.{key}"),
                              allowed=", ".join(sorted(known)))


def _slo(t: dict, path: Path) -> dict:
    if not t:
        raise ConfigError("needs at least one objective", file=path, field="slo",
                          allowed=", ".join(SLO_KEYS) + " (seconds)")
    for key, v in t.items():
        if key not in SLO_KEYS:
            raise ConfigError("unknown objective", file=path, field=shown(f"slo.{key}"), allowed=", ".join(SLO_KEYS))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= 1e6:
            raise ConfigError("out of range", file=path, field=f"slo.{key}", value=shown(v),
                              allowed="a number of seconds in (0, 1e6]")
    return {k: float(v) for k, v in t.items()}


def _check_points(plan: PlanSpec) -> None:
    """One point per (option, tp, candidate) is validated and its profiles and TP checked before any run."""
    rate = plan.rates[0] if plan.rates else None
    for i, o in enumerate(plan.options):
        def where(f: str, i=i, o=o) -> str:
            return f"option[{i}].{f}" if f in o.fields or f == "tp" else f"fixed.{f}"

        for tp in o.tps:
            try:
                points = [plan.config(o, tp, rate, cand, 1) for cand in plan.candidates]
            except ValidationError as e:
                raise _point_error(e, plan.path, where) from None
            check_files_and_profiles(points, plan.path, where)
