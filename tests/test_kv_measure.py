"""The step tables' KV measure (specsim/validation/step_fit.py KV_MEASURES): cached tokens, or query x key pairs.

Why (issue 24, session 15): a verification of k + 1 tokens over one request's context reads that context k + 1
times, as a decode of k + 1 requests reads theirs; a slope per cached token summed over requests counts it once.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specsim.errors import ConfigError
from specsim.validation import host_scale as hs
from specsim.validation import request_table as rt
from specsim.validation import step_fit as sf

A, B, S = 0.1, 0.002, 1e-5  # s per step, s per token, s per query x key pair (a made-up engine, exactly additive)


def _decode(R: int, ctx: int) -> dict:
    """R one-token decodes, each over `ctx` cached tokens, timed as the made-up engine would."""
    pairs = R * (ctx + 1)
    return {"ctx_requests": 0, "ctx_tokens": 0, "gen_requests": R, "gen_tokens": R, "kv_ctx_tokens": R * ctx,
            "time_s": A + B * R + S * pairs}


def _chunk(T: int, ctx: int) -> dict:
    """One request's prefill chunk of T tokens after `ctx` cached ones."""
    return {"ctx_requests": 1, "ctx_tokens": T, "gen_requests": 0, "gen_tokens": 0, "kv_ctx_tokens": ctx,
            "time_s": A + B * T + S * (T * ctx + T * (T + 1) / 2)}


def _log() -> list[dict]:
    steps = [_decode(R, c) for R in (1, 2, 3, 4, 6, 8) for c in (60, 80, 100, 120)]
    return steps + [_chunk(T, c) for T in (2, 3, 4, 6, 8) for c in (0, 16, 32, 48)]


def test_the_measure_of_a_logged_step():
    d, c = _decode(3, 100), _chunk(4, 10)
    assert sf.step_kv(d, kv="context") == 300 and sf.step_kv(d, kv="attended") == 303
    assert sf.step_kv(c, kv="context") == 10 and sf.step_kv(c, kv="attended") == 4 * 10 + 10
    mixed = {"ctx_requests": 1, "ctx_tokens": 5, "gen_requests": 2, "gen_tokens": 2, "kv_ctx_tokens": 90,
             "time_s": 0.2}
    assert math.isnan(sf.step_kv(mixed, kv="attended"))  # which request read which context: not in an older log
    assert sf.step_kv(dict(mixed, kv_attended_tokens=123), kv="attended") == 123  # the harness logs it now
    assert math.isnan(sf.step_kv({k: v for k, v in d.items() if k != "kv_ctx_tokens"}, kv="context"))
    with pytest.raises(ConfigError, match="unknown KV measure"):
        sf.step_kv(d, kv="pairs")


def test_attended_pairs_of_a_step():
    assert sf.attended_pairs([6], [100]) == 6 * 100 + 21  # a k = 5 verification
    assert sf.attended_pairs([1, 1, 1], [10, 20, 30]) == 63  # three decodes


def test_steps_the_log_does_not_determine_are_left_out_and_counted():
    mixed = {"ctx_requests": 1, "ctx_tokens": 5, "gen_requests": 2, "gen_tokens": 2, "kv_ctx_tokens": 90,
             "time_s": 0.2}
    s = sf.StepSamples.from_steps(_log() + [mixed], kv="attended")
    assert s.left_out == 1 and s.tokens.size == len(_log()) and np.isfinite(s.ctx_tokens).all()
    t = sf.fit_step_table(s)
    assert t.kv_measure == "attended" and t.left_out == 1 and "1 steps of an older log" in t.describe()
    ctx = sf.StepSamples.from_steps(_log() + [mixed], kv="context")
    assert ctx.left_out == 0 and ctx.tokens.size == len(_log()) + 1  # the cached-token measure has it


def test_attended_prices_a_verification_as_the_engine_costs_it_and_context_does_not():
    """Fitted on decodes and chunks only, the pair measure recovers the made-up engine's pair cost and prices a
    k = 5 verification (one request, 6 tokens, 150 cached) exactly; the cached-token measure, whose 6-token knot
    sits at 6 decodes' summed context, prices it below what the engine charges."""
    truth = A + B * 6 + S * (6 * 150 + 21)
    att = sf.fit_step_table(sf.StepSamples.from_steps(_log(), kv="attended"), monotone=False)
    ctx = sf.fit_step_table(sf.StepSamples.from_steps(_log(), kv="context"), monotone=False)
    assert att.kv_slope_s_per_token == pytest.approx(S, rel=1e-6)
    assert att.price(np.array([6]), np.array([150]))[0] == pytest.approx(truth, rel=1e-6)
    assert ctx.price(np.array([6]), np.array([150]))[0] < truth * 0.97


def test_the_request_table_and_the_host_factor_read_the_same_measure():
    log = _log()
    tab = rt.fit_request_table(log, monotone=False, kv="attended")
    assert tab.kv_measure == "attended"
    assert tab.price(np.array([6]), np.array([150]))[0] == pytest.approx(A + B * 6 + S * (6 * 150 + 21), rel=1e-6)
    tok = sf.fit_step_table(sf.StepSamples.from_steps(log, kv="attended"), monotone=False)
    assert hs.host_factor(tok, [dict(s, time_s=2 * s["time_s"]) for s in log]) == pytest.approx(2.0, rel=1e-9)


def test_a_selection_file_names_its_kv_measure(tmp_path):
    """Every fit is a candidate with either measure; a file written before the measure was one (no "kv") reads as
    cached tokens, and a file whose measure contradicts its name is refused."""
    vs = pytest.importorskip("vllm_select")
    assert len(vs.CANDIDATES) == 24 and {c[3] for c in vs.CANDIDATES.values()} == set(sf.KV_MEASURES)
    f = tmp_path / "table_selection.json"
    f.write_text('{"chosen": "token, as measured, pooled", "kind": "token", "monotone": false, "pool": "pooled"}')
    assert vs.fixed(f)["kv"] == "context"
    f.write_text('{"chosen": "token, as measured, pooled, attended KV", "kind": "token", "monotone": false, '
                 '"pool": "pooled", "kv": "attended"}')
    assert vs.fixed(f)["kv"] == "attended"
    f.write_text('{"chosen": "token, as measured, pooled, attended KV", "kind": "token", "monotone": false, '
                 '"pool": "pooled"}')
    with pytest.raises(SystemExit, match="vllm_select: .*table_selection.json"):
        vs.fixed(f)
