"""SimConfig: the one typed description of a simulation point (CLI, sweeps and the API all build it).

A SimConfig is six groups — deployment, acceptance, speculation, workload, slo, engine — each a frozen pydantic
model. Sweep specs, the sweep's results table and the `simulate` command speak *flat* field names (`gamma`,
`batch`, `alpha`); the one mapping between the two is `FLAT` (flat name -> group, in the historic column order),
used by `SimConfig.from_flat` / `SimConfig.flat`. `SimConfig(**flat)` goes through `from_flat` too (a
`mode="before"` validator), so every caller builds a config the same way. `CLI_ALIASES` is the one table of
`simulate` flags whose names differ from their field; `flag(field)` gives any field's flag, and the cross-field
rules (`specsim.config_rules`: `RuleViolation`, and vLLM's own rules for the engine arguments, each citing its
source in vLLM) name their fields so each surface renders them in its own words (`--arrivals` on the command line,
`arrivals_csv` in a sweep spec).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo

from specsim.config_rules import (CLI_ALIASES, VLLM_BLOCK_SIZES, RuleViolation, check_bands,  # noqa: F401
                                   engine_rules, flag, method_rules, one_of,
                                   vllm_budget_rule)  # CLI_ALIASES, flag, RuleViolation, vllm_budget_rule: API
from specsim import registry
from specsim.errors import FieldError
from specsim.limits import (GAMMA_CAP, MAX_BATCH, MAX_BATCHED_TOKENS, MAX_LENGTH_TOKENS, MAX_NUM_SEQS,
                            MAX_REPLICAS, MAX_REQUESTS, MAX_TP)
from specsim.methods import METHODS  # config sits above methods (tests/test_architecture.py)

Policy = Literal[tuple(registry.POLICIES)]  # "fixed", "optimal", ...: the registry names every γ policy
LengthDist = Literal["fixed", "uniform", "lognormal"]
Engine = Literal["simpy", "fast", "auto"]
EngineProfile = Literal[tuple(registry.ENGINE_PROFILES)]  # "specsim", "hf-assisted", "vllm-v1"
RouterName = Literal[tuple(registry.ROUTERS)]  # "round-robin" (the default), ...: engine/routers.py
# speculation methods, named as vLLM's SpeculativeConfig names them: specsim.methods.METHODS is the one list
Method = Literal[tuple(METHODS)]  # "draft_model", "eagle", "eagle3", "mtp", "medusa", "ngram", "suffix"
HEAD_METHODS = tuple(n for n, m in METHODS.items() if m.model_kind == "head")  # their `draft` is a head profile


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeploymentConfig(_Group):
    """What runs where, and how its passes are priced (resolved by `specsim.setup.deployment.Deployment`)."""

    hardware: str = Field(description="hardware profile name or TOML path")
    target: str = Field(description="target model profile name or TOML path")
    draft: str | None = Field(default=None, description="the proposer (vLLM's speculative_config.model): a draft "
                              "model profile for method draft_model (required then); a head profile "
                              "(model_profiles/heads/) for the other methods, default the target's shipped "
                              "head <method>-<target> (ngram / suffix: the host-cost profile of that name)")
    stack: str | None = Field(default=None, description="software-stack profile; None = the hardware's "
                              "default_stack, 'ideal' = idealized roofline")
    tp: int = Field(default=1, ge=1, le=MAX_TP, description="tensor-parallel degree of the target (the draft's too "
                    "unless draft_tp is given)")
    draft_tp: int | None = Field(default=None, ge=1, le=MAX_TP, description="tensor-parallel degree of the draft or "
                                 "head (vLLM's draft_tensor_parallel_size): 1 or the target's tp, as vLLM allows; "
                                 "None = the target's tp")
    fixed_c: float | None = Field(default=None, ge=0, lt=10,
                                  description="override the cost model: target pass = 1 unit whatever its "
                                              "positions (free verification), draft pass = c units")
    measured_target: str | None = Field(default=None, description="measured cost mode for the target: CSV of "
                                        "measured pass times (`MeasuredCosts.read_csv`: columns kind, batch, "
                                        "positions, context, time_s; kind = decode | prefill, default decode; "
                                        "decode rows a full grid over batch × positions × context, interpolated); "
                                        "None = the roofline cost model")
    draft_catchup: bool = Field(default=False, description="price the draft's catch-up: after a clean sweep the "
                                "next first draft pass feeds 2 positions (what HF-style executors do; matters where "
                                "a 2-position pass costs more than a 1-position one, e.g. on a CPU)")
    measured_draft: str | None = Field(default=None, description="measured cost mode for the draft: CSV of "
                                       "measured pass times, same format as measured_target; None = the roofline")
    draft_kv_budget_tokens: int | None = Field(default=None, ge=1, le=MAX_LENGTH_TOKENS,
                                               description="cap on the draft's "
                                               "KV per request, in tokens: its passes read and attend min(context, "
                                               "budget) tokens and admission reserves at most that much draft KV "
                                               "(StreamingLLM's attention sinks + sliding window, Xiao et al. 2023; "
                                               "capped-KV drafts for long-context speculation, MagicDec, Chen et al. "
                                               "2024, TriForce, Sun et al. 2024); None = the full context")


class AcceptanceConfig(_Group):
    """Where acceptance comes from: exactly one of alpha / trace."""

    alpha: float | None = Field(default=None, ge=0, lt=1, description="i.i.d. acceptance rate α in [0, 1)")
    trace: str | None = Field(default=None, description="β trace file (parquet or CSV)")
    lenience: float = Field(default=1.0, gt=0, le=1, description="App. A.5 lenience l; 1 = exact")


class SpeculationConfig(_Group):
    gamma: int = Field(default=4, ge=1, le=GAMMA_CAP,
                       description="draft length γ (initial value for adaptive policies)")
    policy: Policy = Field(default="fixed", description="γ policy: " + " | ".join(registry.POLICIES))
    method: Method = Field(default="draft_model", description="speculation method, as vLLM names it: "
                           "draft_model | eagle | eagle3 | mtp | medusa | ngram | suffix (specsim.methods)")
    speculative_config: str | None = Field(default=None, description="vLLM's speculative config as JSON, e.g. "
                                           "'{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}': method, "
                                           "model (-> draft), num_speculative_tokens (-> gamma), "
                                           "draft_tensor_parallel_size (-> draft_tp), prompt_lookup_min/max "
                                           "(specsim.methods.spec_config); a field given both ways must agree")
    speculative_token_tree: str | None = Field(default=None, description="token tree (vLLM's "
                                               "speculative_token_tree; specsim.methods.tree): a list of rank "
                                               "paths '[[0], [1], [0, 0]]' (or vLLM's '[(0,), (1,), (0, 0)]'), "
                                               "'{\"widths\": [2, 2, 1]}' or '{\"dynamic\": 16, \"top_k\": 4}'; "
                                               "γ = its depth; None = a chain of γ")
    tree_topk_acceptance: tuple[float, ...] | None = Field(default=None, description="cumulative top-k acceptance "
                                                           "[P(rank < 1) = α, P(rank < 2), ...] of the draft's "
                                                           "candidates, for a tree wider than a chain")
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = Field(
        default=None, description="policy 'bands': γ by live batch size, vLLM's shape [[start, end, γ], ...] "
        "(inclusive batch-size ranges, ascending, not overlapping; None = the bands choose-draft advises)")


class WorkloadConfig(_Group):
    batch: int = Field(default=1, ge=1, le=MAX_BATCH, description="closed loop: concurrent requests (max batch)")
    rate: float | None = Field(default=None, gt=0, le=1e6, description="Poisson arrivals per second (open loop)")
    max_batch: int | None = Field(default=None, ge=1, le=MAX_BATCH, description="batch cap under open-loop arrivals")
    arrivals_csv: str | None = Field(default=None, description="replay arrivals: CSV arrival_s,prompt_len,output_len")
    requests: int = Field(default=64, ge=1, le=MAX_REQUESTS, description="number of requests")
    prompt_len: int = Field(default=128, ge=1, le=MAX_LENGTH_TOKENS, description="prompt tokens per request")
    output_len: int = Field(default=128, ge=1, le=MAX_LENGTH_TOKENS, description="output tokens per request")
    seed: int = Field(default=0, ge=0, description="random seed (arrivals, lengths, acceptance draws)")
    length_dist: LengthDist = Field(default="fixed", description="prompt/output lengths: 'fixed' = exactly "
                                    "prompt_len/output_len; 'uniform' = integers uniform in [L/2, 3L/2] (mean L); "
                                    "'lognormal' = "
                                    "ShareGPT-like heavy tail: lognormal with mean L and log-σ 1, rounded, clipped "
                                    "to [1, 8L]")
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, description="engine replicas behind the router; "
                          "each holds its own weights and KV (batch / max_batch are per replica)")
    router: RouterName = Field(default="round-robin", description="which replica an arriving request joins: "
                               "'round-robin' (vLLM production-stack's default routing logic), "
                               "'least-outstanding', 'power-of-two' (each replica queues alone), or "
                               "'shared-queue' (one queue any free replica takes from: the ideal bound)")


class SloConfig(_Group):
    """Service-level objective for goodput (requests/s finishing within both)."""

    slo_ttft_s: float = Field(default=1.0, gt=0, le=1e6, description="TTFT objective for goodput, s")
    slo_tpot_s: float = Field(default=0.05, gt=0, le=1e6, description="TPOT objective for goodput, s")
    slo_warmup_s: float = Field(default=0.0, ge=0, le=1e9, description="warm-up: requests arriving before this "
                                "many seconds are left out of the latency percentiles, SLO attainment and goodput "
                                "(0 = every request)")


class EngineConfig(_Group):
    """Which kernel runs the loop, and the engine profile: how a serving engine schedules a step
    (specsim.engine.engine_profiles); the vllm-v1 options carry vLLM's own flag names and vLLM's own rules
    (`VLLM_BLOCK_SIZES`, `vllm_budget_rule`)."""

    engine: Engine = Field(default="auto", description="'auto' (default) = the fast path where it "
                           "is exact (closed loop, batch 1, one replica: the same accepted counts as SimPy, times "
                           "equal to float rounding), else SimPy; 'simpy' = the discrete-event engine of record; "
                           "'fast' = the vectorized batch-1 path only")
    engine_profile: EngineProfile = Field(default="specsim", description="'specsim' = specsim's own engine: one "
                                          "draft-then-verify iteration over the batch, prefill stalling it; "
                                          "'hf-assisted' = Hugging Face assisted generation at batch 1 (prefill "
                                          "fused into round 1, draft re-fed 2 positions every round); 'vllm-v1' = "
                                          "vLLM's V1 scheduler: token budget, chunked prefill mixed with decodes, "
                                          "KV blocks, preemption")
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_NUM_SEQS, description="vllm-v1: running requests per "
                                     "step (default 256)")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_BATCHED_TOKENS,
                                               description="vllm-v1: token budget "
                                               "per step (default: vLLM's rule for the device, 2048 / 8192 / 16384)")
    block_size: int | None = Field(default=None, ge=1, json_schema_extra={"one_of": VLLM_BLOCK_SIZES},
                                   description="vllm-v1: KV block size in tokens, one of vLLM's "
                                   f"{', '.join(map(str, VLLM_BLOCK_SIZES))} (default 16; vLLM's CPU backend uses "
                                   "128)")
    num_gpu_blocks: int | None = Field(default=None, ge=1, le=1 << 40, description="vllm-v1: KV blocks in the pool, "
                                       "as the engine reports them (default: from device memory)")
    long_prefill_token_threshold: int = Field(default=0, ge=0, le=MAX_BATCHED_TOKENS, description="vllm-v1: cap on one "
                                              "request's prefill chunk when others wait (0 = off)")
    step_table_target: str | None = Field(default=None, description="vllm-v1: CSV tokens,time_s of the target's "
                                          "measured step times (from a vLLM per-step log without speculation) "
                                          "instead of the roofline")
    step_table_draft: str | None = Field(default=None, description="vllm-v1: the draft's step table, as "
                                         "step_table_target")

    @field_validator("block_size")
    @classmethod
    def _vllm_block_size(cls, v: int | None) -> int | None:
        if v is not None and v not in VLLM_BLOCK_SIZES:
            raise FieldError("not a block size vLLM accepts (vllm/config/cache.py BlockSize)", field="block_size",
                             value=v, allowed=one_of(VLLM_BLOCK_SIZES))
        return v


GROUPS: dict[str, type[_Group]] = {"deployment": DeploymentConfig, "acceptance": AcceptanceConfig,
                                   "speculation": SpeculationConfig, "workload": WorkloadConfig, "slo": SloConfig,
                                   "engine": EngineConfig}

# The flat <-> nested mapping, derived from the groups: flat field name -> group. Its order is the sweep table's
# column order (and cfg.flat()'s): the results table, sweep ids and users' CSVs keep it. `_FROZEN_COLUMNS` is that
# order as of issue 25 (names only: each field's group is its class above) and never grows; a field added later
# follows, in its group's declaration order — adding a field touches its group only.
_FROZEN_COLUMNS = (
    "hardware", "target", "draft", "stack", "tp", "alpha", "trace", "gamma", "policy",
    "num_speculative_tokens_per_batch_size", "lenience", "fixed_c", "measured_target", "draft_catchup",
    "measured_draft", "batch", "rate", "max_batch", "arrivals_csv", "requests", "prompt_len", "output_len", "seed",
    "length_dist", "replicas", "router", "slo_ttft_s", "slo_tpot_s", "engine", "engine_profile", "max_num_seqs",
    "max_num_batched_tokens", "block_size", "num_gpu_blocks", "long_prefill_token_threshold", "step_table_target",
    "step_table_draft", "draft_kv_budget_tokens", "method", "draft_tp", "speculative_config",
    "speculative_token_tree", "tree_topk_acceptance", "slo_warmup_s")


def flat_map(groups: dict[str, type[BaseModel]]) -> dict[str, str]:
    """Flat field name -> group name, in column order (`_FROZEN_COLUMNS`, then later fields by group)."""
    group_of = {f: g for g, cls in groups.items() for f in cls.model_fields}
    assert len(group_of) == sum(len(c.model_fields) for c in groups.values()), "a field name in two groups"
    return {f: group_of[f] for f in (*[c for c in _FROZEN_COLUMNS if c in group_of],
                                     *[f for f in group_of if f not in _FROZEN_COLUMNS])}


FLAT: dict[str, str] = flat_map(GROUPS)
FLAT_FIELDS: dict[str, FieldInfo] = {f: GROUPS[g].model_fields[f] for f, g in FLAT.items()}


def field_of_loc(loc: tuple) -> str | None:
    """The flat field a pydantic error location points at: ('workload', 'batch') -> 'batch'; () -> None."""
    if len(loc) >= 2 and loc[0] in GROUPS:
        return str(loc[1])
    return str(loc[0]) if loc else None


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    deployment: DeploymentConfig
    acceptance: AcceptanceConfig = Field(default_factory=AcceptanceConfig)
    speculation: SpeculationConfig = Field(default_factory=SpeculationConfig)
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    slo: SloConfig = Field(default_factory=SloConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)

    # --- the flat <-> nested mapping -----------------------------------------------------------------------
    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> "SimConfig":
        """Build from flat field names (a sweep point, the CLI's options, keyword arguments)."""
        return cls.model_validate(flat)

    def flat(self, mode: str = "python", exclude_unset: bool = False) -> dict[str, Any]:
        """Every field by its flat name, in FLAT's order (`mode="json"`: JSON-able values, tuples as lists)."""
        d: dict[str, Any] = {}
        for g in GROUPS:
            d.update(getattr(self, g).model_dump(mode=mode, exclude_unset=exclude_unset))
        return {f: d[f] for f in FLAT if f in d}

    def get(self, field: str) -> Any:
        """One field by its flat name."""
        return getattr(getattr(self, FLAT[field]), field)

    def replace(self, **changes) -> "SimConfig":
        """A copy with some flat fields changed (validated again; the fields set stay those set)."""
        return SimConfig.from_flat({**self.flat(exclude_unset=True), **changes})

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Flat keys go into their groups (a key that is neither stays, for pydantic to refuse by name); a head
        method without a `draft` gets the target's shipped head (`_default_head`)."""
        from specsim.methods.tree_config import tree_gamma  # lazily: the methods package reads profiles

        return tree_gamma(_default_head(_speculative_config(cls._grouped(data))))

    @staticmethod
    def _grouped(data: Any) -> Any:
        if not isinstance(data, dict) or all(k in GROUPS and not isinstance(v, str) for k, v in data.items()):
            return data  # already nested (`engine` is a group and a field: a string is the field)
        out: dict[str, Any] = {g: {} for g in GROUPS}
        for k, v in data.items():
            g = FLAT.get(k) if k not in GROUPS or isinstance(v, str) else None
            if g is not None:
                out[g][k] = v
            elif k in GROUPS:
                if isinstance(v, BaseModel):
                    v = v.model_dump(exclude_unset=True)
                if not isinstance(v, dict):
                    raise ValueError(f"group {k!r} must be a dict of its fields")
                both = sorted(set(v) & set(out[k]))
                if both:
                    raise ValueError(f"{both[0]} given twice (flat and in group {k!r})")
                out[k].update(v)
            else:
                out[k] = v
        return out

    # --- cross-field rules (each names its fields: see RuleViolation) ---------------------------------------
    @model_validator(mode="after")
    def _rules(self) -> "SimConfig":
        a, d, w, e = self.acceptance, self.deployment, self.workload, self.engine
        if (a.alpha is None) == (a.trace is None):
            raise RuleViolation("give exactly one of {0} and {1}", "alpha", "trace")
        if w.rate is not None and w.arrivals_csv is not None:
            raise RuleViolation("give at most one of {0} and {1}", "rate", "arrivals_csv")
        if d.fixed_c is not None and (d.measured_target is not None or d.measured_draft is not None):
            raise RuleViolation("give at most one of {0} and {1} / {2}", "fixed_c", "measured_target",
                                "measured_draft")
        if d.draft_kv_budget_tokens is not None:  # only the roofline draft under specsim's engine prices it
            for other in ("fixed_c", "measured_draft"):
                if getattr(d, other) is not None:
                    raise RuleViolation("{0} needs the roofline draft; drop {1}", "draft_kv_budget_tokens", other)
            if e.engine_profile != "specsim":
                raise RuleViolation("{0} belongs to {1} specsim", "draft_kv_budget_tokens", "engine_profile")
        method_rules(self)
        if self.speculation.speculative_token_tree is not None or self.speculation.tree_topk_acceptance is not None:
            from specsim.methods.tree_config import tree_rules

            tree_rules(self)
        bands = self.speculation.num_speculative_tokens_per_batch_size
        if bands is not None:
            if self.speculation.policy != "bands":
                raise RuleViolation("{0} belongs to {1} 'bands'", "num_speculative_tokens_per_batch_size", "policy")
            check_bands(bands)
        engine_rules(self)
        return self


def _speculative_config(data: Any) -> Any:
    """vLLM's speculative config read into its fields (`specsim.methods.spec_config.expand`)."""
    if not isinstance(data, dict) or not isinstance(data.get("speculation"), (dict, BaseModel)):
        return data
    spec = data["speculation"]
    spec = spec.model_dump(exclude_unset=True) if isinstance(spec, BaseModel) else spec
    if spec.get("speculative_config") is None:
        return data
    from specsim.methods.spec_config import expand  # lazily: the methods package reads profiles

    groups = {k: (v.model_dump(exclude_unset=True) if isinstance(v, BaseModel) else v) for k, v in data.items()}
    return expand(dict(groups, speculation=spec), flag("speculative_config"), FLAT)


def _default_head(data: Any) -> Any:
    """No method but a head profile as the draft: the head's method. method ≠ draft_model and no draft: the
    target's shipped head, `<method>-<target>` (ngram / suffix: the host-cost profile of that name;
    `specsim.methods.heads.shipped_head_name`), named so results say which."""
    if not isinstance(data, dict):
        return data
    spec, dep = data.get("speculation"), data.get("deployment")
    spec = spec.model_dump(exclude_unset=True) if isinstance(spec, BaseModel) else spec
    dep = dep.model_dump(exclude_unset=True) if isinstance(dep, BaseModel) else dep
    if not isinstance(spec, dict) or not isinstance(dep, dict):
        return data
    method, target = spec.get("method"), dep.get("target")
    if method is None and isinstance(dep.get("draft"), str):  # a head named as the draft says its method
        from specsim.methods.heads import head_method  # lazily: profiles are read only for this

        method = head_method(dep["draft"])
        if method is not None:
            data = dict(data, speculation=dict(spec, method=method))
    if method in HEAD_METHODS and dep.get("draft") is None and isinstance(target, str):
        stem = target.replace("\\", "/").rsplit("/", 1)[-1]
        stem = stem[:-5] if stem.endswith((".toml", ".json")) else stem
        dep = dict(dep, draft=method if method in ("ngram", "suffix") else f"{method}-{stem}")
        data = dict(data, deployment=dep)
    return data
