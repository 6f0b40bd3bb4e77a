"""SimConfig's cross-field rules, each naming its fields (`RuleViolation`), and vLLM's own rules for the engine
arguments it validates, each with its source in vLLM:

- block sizes: vllm/config/cache.py `BlockSize = Literal[1, 8, 16, 32, 64, 128]` (the CLI's --block-size choices
  are built from it, engine/arg_utils.py); `--block-size 7` is refused there. (`VLLM_BLOCK_SIZES`, checked on the
  field `EngineConfig.block_size`.)
- token budget: vllm/config/scheduler.py `SchedulerConfig._verify_args` raises "max_num_batched_tokens (...) must be
  greater than or equal to max_num_seqs (...)" (`vllm_budget_rule`; with one of the two left to the device's
  default, `engine_profiles.vllm_v1` applies it to the default).
- draft TP: vllm/config/speculative.py `SpeculativeConfig._verify_and_get_draft_tp` raises unless
  draft_tensor_parallel_size is 1 or the target's tensor_parallel_size (`engine_rules`).
"""

from __future__ import annotations

import re
from typing import Any

from specsim.limits import GAMMA_CAP

_PLACEHOLDER = re.compile(r"\{(\d+|[a-z_]+)\}")

# `simulate` flags whose names differ from their field (every other field's flag is --field-name)
# (the SLO fields keep their unit in the flag: --slo-ttft-s, --slo-tpot-s, --slo-warmup-s; the unitless flags they
# once had are refused by `simulate`, naming these). Here, not in config, so a rule names its fields without
# importing config (config imports this module); `specsim.config` re-exports both.
CLI_ALIASES: dict[str, str] = {"arrivals_csv": "--arrivals"}


def flag(field: str) -> str:
    """The `simulate` option of a flat field."""
    return CLI_ALIASES.get(field) or "--" + field.replace("_", "-")


class RuleViolation(ValueError):
    """A cross-field rule broken; `fields` are the flat fields it names, `{0}`, `{1}`... in `template`, so each
    surface names them its own way (pydantic keeps the instance in ctx['error']); `{name}` is `values[name]`, a
    value the user gave, put in as it is.

    Filled in one pass by `_PLACEHOLDER`, never by `str.format`: a user's text (a tree '{"widths": [2]}', a path
    with braces) in the template or a value is shown verbatim — through `format` it raised KeyError (issue 21)."""

    def __init__(self, template: str, *fields: str, **values: Any):
        self.template, self.fields, self.values = template, fields, values
        super().__init__(self.render(str))

    def render(self, name=None) -> str:
        """The message with each field named by `name(field)` (default: its `simulate` flag)."""
        if name is None:
            name = flag

        def fill(m: re.Match) -> str:
            key = m.group(1)
            if key.isdigit():
                return name(self.fields[int(key)]) if int(key) < len(self.fields) else m.group()
            return str(self.values[key]) if key in self.values else m.group()

        return _PLACEHOLDER.sub(fill, self.template)


# vllm/config/cache.py BlockSize (the module doc)
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)


def one_of(values) -> str:
    return ", ".join(map(str, values[:-1])) + f" or {values[-1]}"


def vllm_budget_rule(budget: int, seqs: int, default: str = "") -> RuleViolation | None:
    """vLLM's SchedulerConfig refuses a token budget below max_num_seqs (vllm/config/scheduler.py _verify_args);
    `default` says which of the two is the device's default, for the message."""
    if budget >= seqs:
        return None
    return RuleViolation("{0} ({budget}) must be at least {1} ({seqs}){default}: vLLM's SchedulerConfig refuses a "
                         "token budget below max_num_seqs (vllm/config/scheduler.py)", "max_num_batched_tokens",
                         "max_num_seqs", budget=budget, seqs=seqs, default=default)


def engine_rules(cfg) -> None:
    """vLLM's rules on the engine arguments (the module doc), and the vllm-v1 options kept to that profile."""
    d, e = cfg.deployment, cfg.engine
    if d.draft_tp is not None and d.draft_tp not in (1, d.tp):
        raise RuleViolation("{0} must be 1 or {1} = {tp} (got {draft_tp}): vLLM refuses any other draft "
                            "tensor-parallel size (vllm/config/speculative.py _verify_and_get_draft_tp)",
                            "draft_tp", "tp", tp=d.tp, draft_tp=d.draft_tp)
    if e.max_num_batched_tokens is not None and e.max_num_seqs is not None:
        broken = vllm_budget_rule(e.max_num_batched_tokens, e.max_num_seqs)
        if broken is not None:
            raise broken
    vllm_only = ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks", "step_table_target",
                 "step_table_draft")
    if e.engine_profile != "vllm-v1":
        given = [k for k in vllm_only if getattr(e, k) is not None] + \
            (["long_prefill_token_threshold"] if e.long_prefill_token_threshold else [])
        if given:
            raise RuleViolation("{0} belongs to {1} vllm-v1", given[0], "engine_profile")


def method_rules(cfg) -> None:
    """A draft model is needed for draft_model; the draft-model-only options stay with it."""
    d, s = cfg.deployment, cfg.speculation
    if d.draft is None:
        raise RuleViolation("give {0} (the draft model), or a {1} that needs none", "draft", "method")
    if s.method == "draft_model":
        return
    for other in ("fixed_c", "measured_draft", "draft_kv_budget_tokens"):
        if getattr(d, other) is not None:
            raise RuleViolation("{0} belongs to {1} draft_model (got {method})", other, "method", method=s.method)
    if d.draft_catchup:
        raise RuleViolation("{0} belongs to {1} draft_model (got {method})", "draft_catchup", "method",
                            method=s.method)
    if cfg.engine.engine_profile != "specsim":
        raise RuleViolation("{0} {method} runs under {1} specsim", "method", "engine_profile", method=s.method)


def check_bands(bands) -> None:
    """vLLM-style γ bands: each [start, end, γ] with 1 <= start <= end and 0 <= γ <= GAMMA_CAP (0 = off, as in
    choose-draft's schedule: plain decode steps), ascending and disjoint."""
    field = "num_speculative_tokens_per_batch_size"
    if not bands:
        raise RuleViolation("{0} is empty; give at least one [start, end, γ]", field)
    prev_end = 0
    for start, end, gamma in bands:
        band = f"band [{start}, {end}, {gamma}]"
        if not 1 <= start <= end:
            raise RuleViolation("{0}: {band}: need 1 <= start <= end", field, band=band)
        if not 0 <= gamma <= GAMMA_CAP:
            raise RuleViolation("{0}: {band}: γ must be in 0..{cap} (0 = off)", field, band=band, cap=GAMMA_CAP)
        if start <= prev_end:
            raise RuleViolation("{0}: {band} overlaps or precedes the band before it", field, band=band)
        prev_end = end
