"""The (tokens, requests) step table (specsim.validation.request_table): one request's line plus what more requests
add, both measured without speculation; a verification step reads both, and what was not measured is counted."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.errors import ConfigError
from specsim.validation import request_table as rt
from specsim.validation import step_fit as sf


def g(T):  # the token term of the synthetic engine (seconds)
    return 0.10 + 0.004 * T


def h(R):  # the request term: each request beyond the first costs 15 ms
    return 0.015 * (R - 1)


def _step(ctx_req, ctx_tok, gen_req, gen_tok, time_s=None, kv=None):
    T, R = ctx_tok + gen_tok, ctx_req + gen_req
    return {"ctx_requests": ctx_req, "ctx_tokens": ctx_tok, "gen_requests": gen_req, "gen_tokens": gen_tok,
            "time_s": g(T) + h(R) if time_s is None else time_s, "kv_ctx_tokens": kv}


def _calibration(chunks=(2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32), decodes=range(1, 17)):
    """Prefill chunks of one request and decodes of R requests, three steps each, as a block's calibration."""
    steps = [_step(1, c, 0, 0) for c in chunks for _ in range(3)]
    steps += [_step(0, 0, r, r) for r in decodes for _ in range(3)]
    return steps


def test_an_additive_engine_is_recovered_at_verification_steps():
    """t = g(T) + h(R): a verification of 3 requests x 4 tokens is priced g(12) + h(3) from steps that never held
    one; the token-only table, which pools 12-request decodes with 12-token chunks, is not."""
    cal = _calibration()
    table = rt.fit_request_table(cal)
    got = table.price(np.array([4, 4, 4]), np.zeros(3))[0]
    assert got == pytest.approx(g(12) + h(3), rel=1e-9)
    assert table.price(np.array([1, 1, 1, 1]), np.zeros(4))[0] == pytest.approx(g(4) + h(4), rel=1e-9)
    assert table.price(np.array([20]), np.zeros(1))[0] == pytest.approx(g(20), rel=1e-9)
    token = sf.fit_step_table(sf.StepSamples.from_steps(cal))
    assert abs(token.time_at(12) - (g(12) + h(3))) > 0.02  # the mixture the 2-D table replaces
    assert table.unmeasured.steps == 0 and table.unmeasured.queries == 3


def test_steps_are_split_into_the_two_families_and_the_rest():
    steps = [_step(1, 8, 0, 0), _step(0, 0, 1, 1), _step(0, 0, 3, 3), _step(2, 40, 0, 0), _step(1, 8, 2, 2),
             _step(0, 0, 2, 8)]
    f = rt.Families.split(steps)
    assert len(f.single) == 2 and len(f.decode) == 1 and len(f.other) == 3
    assert f.other[-1]["gen_tokens"] == 8  # a step that verified drafts is never a decode


def test_a_request_count_outside_the_decodes_is_flagged():
    """Decodes measured at 1-4 requests: a step of 6 requests is priced but counted as unmeasured."""
    table = rt.fit_request_table(_calibration(decodes=range(1, 5)))
    table.price(np.array([2, 2, 2, 2, 2, 2]), np.zeros(6))
    assert table.unmeasured.above == 1 and table.unmeasured.steps == 1
    table.price(np.array([3, 3]), np.zeros(2))
    assert table.unmeasured.steps == 1 and table.unmeasured.queries == 2


def test_a_token_count_outside_the_chunks_is_flagged():
    table = rt.fit_request_table(_calibration(chunks=(2, 3, 4, 5, 6, 8)))
    table.price(np.array([40]), np.zeros(1))
    table.price(np.array([20, 20]), np.zeros(2))
    assert table.unmeasured.above == 2 and 40 in table.unmeasured.tokens


def test_a_gap_in_the_one_request_line_below_the_request_count_is_flagged():
    """The request term at R reads the one-request line at R tokens: chunks from 10 tokens on leave 2-9 unmeasured,
    so a 4-request verification is flagged even though its 16 tokens were measured."""
    table = rt.fit_request_table(_calibration(chunks=(10, 12, 14, 16, 20)))
    table.price(np.array([4, 4, 4, 4]), np.zeros(4))
    assert table.unmeasured.gap == 1


def test_each_family_needs_its_own_steps():
    with pytest.raises(ConfigError, match="one-request steps and multi-request decode steps"):
        rt.fit_request_table([_step(1, c, 0, 0) for c in (2, 4, 8)])


@pytest.mark.parametrize("bad", [{"ctx_requests": None}, {"gen_requests": -1}, {"gen_tokens": 1.5}])
def test_a_malformed_step_is_one_line_naming_it(bad):
    steps = _calibration()
    steps[5] = dict(steps[5], **bad)
    with pytest.raises(ConfigError, match=r"steps\[5\]"):
        rt.fit_request_table(steps)


def test_holdout_scores_the_rule_on_steps_neither_family_holds():
    table = rt.fit_request_table(_calibration())
    token = sf.fit_step_table(sf.StepSamples.from_steps(_calibration()))
    held = [_step(3, 12, 0, 0), _step(1, 10, 3, 3), _step(4, 16, 0, 0)]
    res = rt.holdout(table, held, token)
    assert res["steps"] == 3 and res["request_table_median_err"] == pytest.approx(0.0, abs=1e-9)
    assert abs(res["token_table_median_err"]) > 0.01
    assert table.unmeasured.queries == 0  # a check, not a prediction


def test_the_kv_context_moves_one_request_steps():
    """The one-request line carries its KV slope: the same chunk at a longer cached context costs more."""
    steps = [_step(1, c, 0, 0, time_s=g(c) + 1e-4 * kv, kv=kv) for c in (2, 4, 8, 16) for kv in (0, 100, 200)]
    steps += [_step(0, 0, r, r, kv=50 * r) for r in (1, 2, 4) for _ in range(2)]
    table = rt.fit_request_table(steps)
    assert table.single.kv_slope_s_per_token == pytest.approx(1e-4, rel=1e-6)
    lo, hi = table.time_at(8, 1, 0.0), table.time_at(8, 1, 200.0)
    assert hi - lo == pytest.approx(0.02, rel=1e-6)


def test_the_written_table_holds_both_families(tmp_path):
    table = rt.fit_request_table(_calibration())
    text = table.write_csv(tmp_path / "t.csv", "block r0").read_text()
    assert text.startswith("# block r0\n") and "t_decode(R)" in text
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body[0] == "family,tokens,time_s,ctx_tokens,steps,raw_median_s"
    assert sum(line.startswith("one_request,") for line in body) == 13  # the chunks and the one-token decode
    assert sum(line.startswith("decode,") for line in body) == 16


def test_a_fit_as_measured_keeps_a_measured_dip_and_never_falls_past_its_last_knot():
    """monotone=False: 2-token steps slower than 4-token ones (as this CPU's decodes) stay so; past the last knot
    the price continues flat, not down; the default fit pools the dip."""
    steps = [_step(0, 0, r, r, time_s=t) for r, t in ((1, 0.17), (2, 0.19), (3, 0.17), (4, 0.15), (5, 0.14))
             for _ in range(3)]
    raw = sf.fit_step_table(sf.StepSamples.from_steps(steps), monotone=False)
    assert raw.time_at(2) == pytest.approx(0.19) and raw.time_at(4) == pytest.approx(0.15)
    assert raw.time_at(8) == pytest.approx(0.14) and raw.unmeasured.above == 1
    iso = sf.fit_step_table(sf.StepSamples.from_steps(steps))
    assert iso.time_at(4) >= iso.time_at(2) and iso.monotone and not raw.monotone
    assert "dips kept" in raw.describe()


def _logit_engine(T, R, P):
    """A synthetic engine whose extra requests cost only their logit positions: 2.5 ms per position beyond one."""
    return g(T) + 0.0025 * (P - 1)


def _logit_calibration():
    steps = [_step(1, c, 0, 0, time_s=_logit_engine(c, 1, 1)) for c in (2, 3, 4, 6, 8, 12, 16, 24) for _ in range(3)]
    return steps + [_step(0, 0, r, r, time_s=_logit_engine(r, r, r)) for r in range(1, 13) for _ in range(3)]


def test_a_verification_reads_the_bracket_at_its_logit_positions():
    """3 requests verifying 3 drafts each: 12 tokens, 12 logit positions (vLLM's rejection sampler reads every
    verified position). Read at P, the bracket recovers the step; read at R ("last", sessions 12-19) it is short
    by the 9 positions' logits."""
    cal = _logit_calibration()
    new, ctx, pos = np.array([4, 4, 4]), np.zeros(3), np.array([4, 4, 4])
    table = rt.fit_request_table(cal, logits="positions")
    assert table.price(new, ctx, pos)[0] == pytest.approx(_logit_engine(12, 3, 12), rel=1e-9)
    last = rt.fit_request_table(cal, logits="last")
    assert last.price(new, ctx, pos)[0] == pytest.approx(_logit_engine(12, 3, 3), rel=1e-9)
    assert table.price(new, ctx, pos)[0] - last.price(new, ctx, pos)[0] == pytest.approx(9 * 0.0025, rel=1e-6)
    # one request verifying 5 drafts: 6 positions, where "last" reads the one-request line alone
    assert table.price(np.array([6]), np.zeros(1), np.array([6]))[0] == pytest.approx(_logit_engine(6, 1, 6))
    assert last.price(np.array([6]), np.zeros(1), np.array([6]))[0] == pytest.approx(_logit_engine(6, 1, 1))


def test_steps_without_drafts_are_priced_as_before():
    """One logit per request (every step the calibration and the plain runs hold) is the bracket at R: passing
    the positions changes nothing, under either rule."""
    cal = _calibration()
    for rule in rt.LOGITS:
        table = rt.fit_request_table(cal, logits=rule)
        for new in (np.array([1, 1, 1]), np.array([9, 1]), np.array([20])):
            ones = np.ones(new.size, np.int64)
            assert table.price(new, np.zeros(new.size), ones) == table.price(new, np.zeros(new.size))


@pytest.mark.parametrize("pos", [[1, 0], [5, 1]])
def test_logit_positions_outside_one_per_request_to_every_token_are_refused(pos):
    for rule in rt.LOGITS:  # refused under either rule: an engine passing them wrong is a bug either way
        table = rt.fit_request_table(_calibration(), logits=rule)
        with pytest.raises(ConfigError, match="positions") as e:
            table.price(np.array([4, 1]), np.zeros(2), np.array(pos))
        assert "1 <= requests <= positions <= tokens" in str(e.value)


def test_logit_positions_outside_the_decodes_are_flagged():
    """Decodes measured at 1-4 requests: 2 requests verifying 2 drafts each read the bracket at 6 positions."""
    table = rt.fit_request_table(_calibration(decodes=range(1, 5)), logits="positions")
    table.price(np.array([3, 3]), np.zeros(2), np.array([3, 3]))
    assert table.unmeasured.above == 1 and table.unmeasured.steps == 1
    last = rt.fit_request_table(_calibration(decodes=range(1, 5)), logits="last")
    last.price(np.array([3, 3]), np.zeros(2), np.array([3, 3]))
    assert last.unmeasured.steps == 0


def test_an_unknown_logits_rule_is_refused():
    with pytest.raises(ConfigError, match="logits"):
        rt.fit_request_table(_calibration(), logits="all")
