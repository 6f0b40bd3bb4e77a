"""The measured-kernel stacks' speculative side (`specsim.cost.measured_stack` holds the kernels, the engine
terms' tables and the measured cost model): a draft head priced on a measured stack (`head_cost`: its method's
roofline stand-in, `methods.pricing`, plus measured kernels of its shape), the engine terms calibrated on the
published rows (`engine_terms`: the per-draft-pass term prices the calibration rows' heads), and the stack profile
built from them (`measured_stack`). Here, in the methods layer, because pricing a head needs its method; the cost
layer below never imports methods (tests/test_architecture.py).
"""

from __future__ import annotations

from functools import lru_cache

from specsim import methods
from specsim.cost import kernels_db as kd
from specsim.cost.measured_stack import (CAL_CONTEXT, PLAIN, SPECULATIVE, EngineTerms, MeasuredCost, MeasuredStack,
                                         head_gemms, model_cost, per_pass_from_row)
from specsim.methods import heads
from specsim.profiles import loader
from specsim.profiles.schema import IDEAL_STACK, HardwareProfile


def _package_version() -> str:
    from importlib.metadata import version

    return f"aiconfigurator-core {version('aiconfigurator-core')}"


def measured_stack(hardware: HardwareProfile | None, name: str) -> MeasuredStack:
    """The stack `name` ('vllm', 'vllm@0.24.0', ...) on `hardware`; one line when it has no measured kernels."""
    engine, pinned = kd.parse_stack(name)
    kd._aic()
    system = None if hardware is None else kd.system_for(hardware, name)
    if system is not None:
        version = kd.resolve_version(system, engine, pinned, name)
    else:  # no hardware yet (a sweep's content hash): the pin as given, else the current version on H100
        version = pinned or kd.resolve_version("h100_sxm", engine, None, name)
    t = engine_terms(engine, version)
    return MeasuredStack(name=f"{engine}@{version}", description=f"measured {engine} {version} kernels "
                         f"({system or 'any system'}) + the engine's own time per step", engine=engine,
                         version=version, system=system, package=_package_version(), step_s=t.step_s,
                         verify_s=t.verify_s, draft_pass_s=t.draft_pass_s, term_sources=t.sources,
                         provenance="aiconfigurator-core database; engine terms: " + "; ".join(
                             f"{k}: {v}" for k, v in sorted(t.sources.items())))


@lru_cache(maxsize=16)
def engine_terms(engine: str, version: str) -> EngineTerms:
    """The engine's own terms, calibrated as the module doc says (kernels of the calibration setup at the
    engine's version on the calibration system when measured there, else that system's current version)."""
    plain = PLAIN.get(engine)
    if plain is None:
        src = "uncalibrated: no published plain figure for this engine (kernels only)"
        return EngineTerms(0.0, 0.0, {}, {"step_s": src, "verify_s": src})
    hw = loader.hardware(plain.hardware)
    try:
        cal_version = kd.resolve_version(hw.measured_system, engine, version, engine)
    except Exception:  # the pinned version is not measured on the calibration system
        cal_version = kd.resolve_version(hw.measured_system, engine, None, engine)
    target = model_cost(loader.model(plain.target), hw, engine, cal_version, 1, EngineTerms())
    step_s = plain.tpot_s - target.kernel_s(1, 1, CAL_CONTEXT)
    sources = {"step_s": f"{plain.source}: {plain.tpot_s * 1e3:.2f} ms − kernels "
                         f"{target.kernel_s(1, 1, CAL_CONTEXT) * 1e3:.2f} ms "
                         f"({engine} {cal_version}, {hw.name}, batch 1, context {CAL_CONTEXT})",
               "verify_s": "0: vLLM's greedy rejection sampler is one small kernel "
                           "(vllm/v1/sample/rejection_sampler.py)"}
    draft = {}
    for (eng, method), row in SPECULATIVE.items():
        if eng != engine:
            continue
        h = head_cost(heads.head(row.head), hw, engine, cal_version, 1, EngineTerms())
        draft[method] = per_pass_from_row(target, h, step_s, row)
        sources[f"draft_pass_s.{method}"] = f"{row.source}: (AL·TPOT − verification − {row.k} head passes) / {row.k}"
    return EngineTerms(step_s, 0.0, draft, sources)


def head_cost(head, hardware: HardwareProfile, engine: str, version: str, tp: int, terms: EngineTerms):
    """A draft head on a measured stack: a one-layer (n_layers) Llama of its shape, LM head over lm_head_vocab,
    plus `head_gemms`, through the same engine's op evaluation; its per-draft-pass term is the method's."""
    roof = methods.get(head.method).cost_model(head, hardware, IDEAL_STACK, tp)
    if getattr(roof, "host_only", False):
        return roof  # ngram / suffix: host lookups, no kernels
    per, once = head_gemms(head)
    layers = head.method != "medusa"
    n_heads = head.n_heads or max(1, head.d_model // 128)
    cfg = kd.llama_config(1, head.d_model, head.d_ff or head.d_model, n_heads, head.n_kv_heads or n_heads,
                          head.head_dim or head.d_model // n_heads, head.lm_head_vocab, head.dtype)
    if layers:
        cfg["num_hidden_layers"] = head.n_layers
    k = kd.pricer(kd.config_dir(cfg), hardware.measured_system, engine, version, roof.tp, False, per, layers)
    s, src = terms.draft_term(head.method)
    return MeasuredCost(roof, k, s, src, once_gemms=once)
