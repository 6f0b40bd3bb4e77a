"""The `vllm-v1` engine profile: a SimConfig → vLLM's scheduler (`vllm_scheduler`) with ragged step pricing.

Defaults follow vLLM 0.32 for the OpenAI server (`vllm/engine/arg_utils.py
EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`): max_num_batched_tokens 2048 and max_num_seqs 256,
8192 / 1024 on devices of >= 70 GB (not A100), 16384 / 1024 at >= 160 GB; block_size 16 (`config/cache.py`).
What the profile cannot represent is refused: adaptive γ policies (vLLM drafts a fixed num_speculative_tokens),
several replicas, encoder-decoder models, the fixed-c and measured-grid cost modes.
"""

from __future__ import annotations

from specsim import methods
from specsim.engine.engine_profiles.base import EngineProfile
from specsim.cost.ragged import RooflinePricer, StepTable
from specsim.engine.engine_profiles.vllm_scheduler import VllmV1Config, VllmV1Engine, pool_blocks
from specsim.config import flag, vllm_budget_rule
from specsim.errors import ConfigError


def default_budget(hardware) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM picks for the OpenAI server on this device."""
    mem = hardware.memory_capacity_gb * 1e9
    if mem >= 160 * 2 ** 30:  # vLLM compares bytes with GiB
        return 16384, 1024
    if mem >= 70 * 2 ** 30 and "a100" not in hardware.name.lower():
        return 8192, 1024
    return 2048, 256


class VllmV1(EngineProfile):
    name = "vllm-v1"

    def accepts(self, cfg) -> list[ConfigError]:
        d, w, policy = cfg.deployment, cfg.workload, cfg.speculation.policy
        bad = [("policy", policy != "fixed", policy, "fixed (vLLM drafts num_speculative_tokens every step)"),
               ("replicas", w.replicas != 1, w.replicas, "1 (one vLLM engine; run replicas as separate points)"),
               ("fixed_c", d.fixed_c is not None, d.fixed_c, "unset (vllm-v1 prices ragged steps)"),
               ("measured_target", d.measured_target is not None, d.measured_target,
                "unset; give a vLLM step table with --step-table-target"),
               ("measured_draft", d.measured_draft is not None, d.measured_draft,
                "unset; give a vLLM step table with --step-table-draft"),
               ("max_batch", w.max_batch is not None, w.max_batch, "unset; vLLM's cap is --max-num-seqs"),
               ("draft_catchup", d.draft_catchup, True, "unset (vLLM's draft pass covers the step's tokens)")]
        return [ConfigError("not what the vllm-v1 engine profile models", field=flag(field), value=value,
                            allowed=allowed) for field, is_bad, value, allowed in bad if is_bad]

    def run(self, setup) -> tuple:
        cfg, target, draft, wl = setup.cfg, setup.target, setup.draft, setup.workload
        if target is None or target.model.architecture != "decoder":
            raise ConfigError("the vllm-v1 profile simulates decoder-only models", field="--target",
                              value=cfg.deployment.target, allowed="a decoder-only model profile")
        vc = _config(cfg, target.hardware)
        tp, dp = _pricer(target, cfg.engine.step_table_target), _pricer(draft, cfg.engine.step_table_draft)
        spec = VllmV1Engine(wl, vc, tp, dp, setup.acceptance, k=setup.policy.gamma,
                            blocks=pool_blocks(vc, [target, draft], True),
                            draft_slots=methods.get(cfg.speculation.method).draft_input_slots)
        base = VllmV1Engine(wl, vc, tp, None, None, k=0, blocks=pool_blocks(vc, [target, draft], False))
        rs, rb = spec.run(), base.run()
        extra = {"engine": "vllm-v1", "engine_profile": "vllm-v1", "max_num_seqs": vc.max_num_seqs,
                 "max_num_batched_tokens": vc.max_num_batched_tokens, "block_size": vc.block_size,
                 "num_gpu_blocks": spec.total_blocks, "baseline_num_gpu_blocks": base.total_blocks,
                 "preemptions": spec.preemptions, "baseline_preemptions": base.preemptions}
        return rs, rb, extra


def _config(cfg, hardware) -> VllmV1Config:
    mnbt, mns = default_budget(hardware)
    e = cfg.engine
    budget, seqs = e.max_num_batched_tokens or mnbt, e.max_num_seqs or mns
    broken = vllm_budget_rule(budget, seqs, "" if e.max_num_seqs and e.max_num_batched_tokens else
                              f" ({'max_num_seqs' if not e.max_num_seqs else 'the budget'} is vLLM's default on "
                              f"{hardware.name}; give both)")
    if broken is not None:
        raise ConfigError(broken.render(flag))
    return VllmV1Config(max_num_seqs=cfg.engine.max_num_seqs or mns,
                        max_num_batched_tokens=cfg.engine.max_num_batched_tokens or mnbt,
                        block_size=cfg.engine.block_size or 16, num_gpu_blocks=cfg.engine.num_gpu_blocks,
                        long_prefill_token_threshold=cfg.engine.long_prefill_token_threshold)


def _pricer(cm, table_path: str | None):
    if table_path is None and hasattr(cm, "ragged_pricer"):  # a measured-kernel stack (cost.measured_stack)
        return cm.ragged_pricer()
    return RooflinePricer(cm) if table_path is None else StepTable.read_csv(table_path)


PROFILE = VllmV1()
