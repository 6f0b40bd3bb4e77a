"""SimConfig: the one typed description of a simulation point (CLI, sweeps and the API all build it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Policy = Literal["fixed", "optimal", "heuristic", "oracle", "bands"]
LengthDist = Literal["fixed", "uniform"]
Engine = Literal["simpy", "fast", "auto"]
EngineProfile = Literal["specsim", "hf-assisted", "vllm-v1"]


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    hardware: str = Field(description="hardware profile name or TOML path")
    target: str = Field(description="target model profile name or TOML path")
    draft: str = Field(description="draft model profile name or TOML path")
    stack: str | None = Field(default=None, description="stack profile; None = the hardware's default_stack, "
                                                      "'ideal' = idealized roofline")
    tp: int = Field(default=1, ge=1, le=1024, description="tensor-parallel degree of the target (draft shares it)")

    # acceptance: exactly one of alpha / trace
    alpha: float | None = Field(default=None, ge=0, lt=1)
    trace: str | None = Field(default=None, description="β trace file (parquet or CSV)")

    # speculation
    gamma: int = Field(default=4, ge=1, le=64, description="draft length (initial value for adaptive policies)")
    policy: Policy = "fixed"
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = Field(
        default=None, description="policy 'bands': γ by live batch size, vLLM's shape [[start, end, γ], ...] "
        "(inclusive batch-size ranges, ascending, not overlapping; None = the bands choose-draft advises)")
    lenience: float = Field(default=1.0, gt=0, le=1, description="App. A.5 lenience l; 1 = exact")
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

    # workload
    batch: int = Field(default=1, ge=1, le=4096, description="closed loop: concurrent requests (max batch)")
    rate: float | None = Field(default=None, gt=0, le=1e6, description="Poisson arrivals per second (open loop)")
    max_batch: int | None = Field(default=None, ge=1, le=4096, description="batch cap under open-loop arrivals")
    arrivals_csv: str | None = Field(default=None, description="replay arrivals: arrival_s,prompt_len,output_len")
    requests: int = Field(default=64, ge=1, le=10_000_000)
    prompt_len: int = Field(default=128, ge=1, le=10_000_000)
    output_len: int = Field(default=128, ge=1, le=10_000_000)
    seed: int = Field(default=0, ge=0)
    length_dist: LengthDist = Field(default="fixed", description="prompt/output lengths: 'fixed' = exactly "
                                    "prompt_len/output_len; 'uniform' = integers uniform in [L/2, 3L/2] (mean L)")
    replicas: int = Field(default=1, ge=1, le=1024, description="engine replicas sharing one arrival queue; "
                          "each holds its own weights and KV (batch / max_batch are per replica)")

    # service-level objective for goodput (requests/s finishing within both)
    slo_ttft_s: float = Field(default=1.0, gt=0, le=1e6, description="TTFT objective for goodput")
    slo_tpot_s: float = Field(default=0.05, gt=0, le=1e6, description="TPOT objective for goodput")

    engine: Engine = Field(default="simpy", description="'simpy' = the discrete-event engine of record; 'fast' = "
                           "the vectorized batch-1 path (closed loop, batch 1 only); 'auto' = fast when eligible")

    # engine profile: how a serving engine schedules a step (specsim.engine.engine_profiles); vLLM's flag names
    engine_profile: EngineProfile = Field(default="specsim", description="'specsim' = specsim's own engine: one "
                                          "draft-then-verify iteration over the batch, prefill stalling it; "
                                          "'hf-assisted' = Hugging Face assisted generation at batch 1 (prefill "
                                          "fused into round 1, draft re-fed 2 positions every round); 'vllm-v1' = "
                                          "vLLM's V1 scheduler: token budget, chunked prefill mixed with decodes, "
                                          "KV blocks, preemption")
    max_num_seqs: int | None = Field(default=None, ge=1, le=65536, description="vllm-v1: running requests per "
                                     "step (default 256)")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=1 << 22, description="vllm-v1: token budget "
                                               "per step (default: vLLM's rule for the device, 2048 / 8192 / 16384)")
    block_size: int | None = Field(default=None, ge=1, le=4096, description="vllm-v1: KV block size in tokens "
                                   "(default 16; vLLM's CPU backend uses 128)")
    num_gpu_blocks: int | None = Field(default=None, ge=1, le=1 << 40, description="vllm-v1: KV blocks in the pool, "
                                       "as the engine reports them (default: from device memory)")
    long_prefill_token_threshold: int = Field(default=0, ge=0, le=1 << 22, description="vllm-v1: cap on one "
                                              "request's prefill chunk when others wait (0 = off)")
    step_table_target: str | None = Field(default=None, description="vllm-v1: CSV tokens,time_s of the target's "
                                          "measured step times (from a vLLM per-step log without speculation) "
                                          "instead of the roofline")
    step_table_draft: str | None = Field(default=None, description="vllm-v1: the draft's step table, as "
                                         "step_table_target")

    @model_validator(mode="after")
    def _one_acceptance_source(self) -> "SimConfig":
        if (self.alpha is None) == (self.trace is None):
            raise ValueError("give exactly one of alpha and trace")
        if self.rate is not None and self.arrivals_csv is not None:
            raise ValueError("give at most one of rate and arrivals_csv")
        if self.fixed_c is not None and (self.measured_target is not None or self.measured_draft is not None):
            raise ValueError("give at most one of fixed_c and measured_target / measured_draft")
        bands = self.num_speculative_tokens_per_batch_size
        if bands is not None:
            if self.policy != "bands":
                raise ValueError("num_speculative_tokens_per_batch_size belongs to policy 'bands'")
            _check_bands(bands)
        vllm_only = ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks", "step_table_target",
                     "step_table_draft")
        if self.engine_profile != "vllm-v1":
            given = [k for k in vllm_only if getattr(self, k) is not None] + \
                (["long_prefill_token_threshold"] if self.long_prefill_token_threshold else [])
            if given:
                raise ValueError(f"--{given[0].replace('_', '-')} belongs to --engine-profile vllm-v1")
        return self


def _check_bands(bands) -> None:
    """vLLM-style γ bands: each [start, end, γ] with 1 <= start <= end and 1 <= γ <= 64, ascending, disjoint."""
    if not bands:
        raise ValueError("num_speculative_tokens_per_batch_size is empty; give at least one [start, end, γ]")
    prev_end = 0
    for start, end, gamma in bands:
        if not 1 <= start <= end:
            raise ValueError(f"band [{start}, {end}, {gamma}]: need 1 <= start <= end")
        if not 1 <= gamma <= 64:
            raise ValueError(f"band [{start}, {end}, {gamma}]: γ must be in 1..64")
        if start <= prev_end:
            raise ValueError(f"band [{start}, {end}, {gamma}] overlaps or precedes the band before it")
        prev_end = end
