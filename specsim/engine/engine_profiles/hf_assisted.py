"""The `hf-assisted` engine profile: Hugging Face assisted generation as transformers 5.25 runs it (batch 1).

Rules, from the installed code (`transformers/generation/utils.py GenerationMixin._assisted_decoding`,
`transformers/generation/candidate_generator.py AssistedCandidateGenerator`):
- batch 1 only: `_assisted_decoding` raises "assisted generate is only supported for batch_size = 1".
- The prefill is fused into the first round: the draft's `generate` runs over the whole prompt (its first pass,
  P positions, context 0) and γ − 1 one-position passes; the target then runs ONE pass over the prompt and the
  γ candidates (P + γ positions, context 0). Output token 0 and the round's accepted drafts arrive together at the
  end of that round (TTFT = the first round).
- Every later round rolls the draft's cache back by the candidates the target refused
  (`_update_past_and_masks`: tokens_to_remove = last drafted length − len(input_ids), cropped only when ≥ 0;
  5.25 onward). After a rejection the cache keeps len − 1 positions and the draft's first pass feeds the target's
  token alone (1 position, context len − 1); after a clean sweep (all γ accepted, tokens_to_remove = −1, no crop)
  it feeds the last draft and the bonus token (2 positions, context len − 2). Then γ − 1 one-position passes; the
  target verifies γ + 1 positions at context len − 1. (Up to 5.24 the cache was cropped to len − 2 in every round,
  so the first pass fed 2 positions after a rejection too.)
- γ is clipped at the end: max_new_tokens of the draft = min(γ, max_length − cur_len − 1)
  (`_calculate_new_tokens`); at 0 the round has no draft passes and the target runs one position.
- The baseline is plain `generate`: one prefill pass (token 0), then one position per step.
- γ is the assistant's `num_assistant_tokens` with `num_assistant_tokens_schedule="constant"` and
  `assistant_confidence_threshold=0`: HF's default threshold (0.4) stops a round's drafting as soon as the draft's
  probability of its token falls below it, a dynamic γ this profile does not model.
tests/test_hf_assisted_vs_transformers.py holds these rules against the installed transformers' own calls.

Round 1's tokens are recorded as output token 0 plus a step row of n accepted at the same time, so τ and the
acceptance metrics count the first round; one ITL gap per request is 0.

Passes over the prompt at context 0 (the draft's first pass, the target's fused round-1 pass over P + γ positions,
the baseline's prefill) are priced by the cost model's `prefill_cost`, so a measured table's `kind=prefill` rows
price them as they price the specsim profile's prefills; the roofline's decoder prefill is the same pass either way.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from specsim.engine.acceptance import accepted_in_step
from specsim.engine.engine_profiles.base import EngineProfile, closed_batch_one
from specsim.errors import ConfigError
from specsim.engine.metrics import Records, RequestStep, request_step_columns


class HfAssisted(EngineProfile):
    name = "hf-assisted"

    def accepts(self, cfg) -> list[ConfigError]:
        out = []
        if not closed_batch_one(cfg):
            out.append(ConfigError("Hugging Face assisted generation runs batch 1 only (transformers raises for "
                                   "batch_size > 1)", field="--engine-profile", value="hf-assisted",
                                   allowed="--batch 1 without --rate / --arrivals / --replicas, or --engine-profile "
                                           "specsim or vllm-v1"))
        if cfg.deployment.fixed_c is not None:
            out.append(ConfigError("hf-assisted prices real passes (prefill fused into round 1)", field="--fixed-c",
                                   value=cfg.deployment.fixed_c, allowed="unset, or --engine-profile specsim"))
        if cfg.speculation.policy != "fixed":
            out.append(ConfigError("the profile runs a constant num_assistant_tokens", field="--policy",
                                   value=cfg.speculation.policy, allowed="fixed"))
        return out

    def run(self, setup) -> tuple:
        costs, wl, cfg = setup.costs, setup.workload, setup.cfg
        if costs.target.model.architecture != "decoder":  # known only once the profile is read
            raise ConfigError("the hf-assisted profile simulates decoder-only models", field="--target",
                              value=cfg.deployment.target, allowed="a decoder-only model profile")
        t, d = _Passes(costs.target), _Passes(costs.draft)
        P, out = wl.prompt_len.tolist(), wl.output_len.tolist()
        spec = [_request(i, P[i], out[i], setup.policy.gamma, t, d, setup.acceptance) for i in range(wl.n)]
        base = [[t.prompt(P[i]) + (0, 0)] + [t.at(1, P[i] + k - 1) + (0, 0) for k in range(1, out[i])]
                for i in range(wl.n)]
        return _records(wl, spec, True), _records(wl, base, False), {"engine": "hf-assisted"}


class _Passes:
    """Cached pass times (and bytes, FLOPs) of one model at batch 1: `at` a cached context, `prompt` over a prompt
    at context 0 (the cost model's prefill_cost: a measured table's prefill rows where it has them)."""

    def __init__(self, cm):
        self.cm = cm
        self.at = lru_cache(maxsize=1 << 16)(self._at)
        self.prompt = lru_cache(maxsize=1 << 12)(self._prompt)

    def _at(self, positions: int, context: int):
        c = self.cm.pass_cost(1, positions, context)
        return c.time_s, c.bytes, c.flops

    def _prompt(self, positions: int):
        c = self.cm.prefill_cost(1, positions)
        return c.time_s, c.bytes, c.flops


def _request(i: int, P: int, out: int, G: int, t: _Passes, d: _Passes, acc):
    """One request's rounds: list of (duration, bytes, flops, γ_r, accepted)."""
    gen = acc.generator(i)
    pos = int(acc.walk_start(i))
    cur, end, rounds = P, P + out, []
    swept = False  # the previous round accepted all its drafts
    while cur < end:
        g = min(G, end - cur - 1)
        first = cur == P
        if g == 0:
            tt = t.prompt(P) if first else t.at(1, cur - 1)
            rounds.append((tt[0], tt[1], tt[2], 0, 0))
            cur += 1
            pos += 1
            continue
        parts = [d.prompt(P) if first else d.at(2, cur - 2) if swept else d.at(1, cur - 1)]
        parts += [d.at(1, cur + j) for j in range(g - 1)]
        parts.append(t.prompt(P + g) if first else t.at(g + 1, cur - 1))
        n = accepted_in_step(acc, gen, g, pos)
        rounds.append((sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts), g, n))
        swept = n == g
        cur += n + 1
        pos += n + 1
    return rounds


def _records(wl, per_req: list, spec: bool) -> Records:
    n = wl.n
    arrival, first, finish = np.zeros(n), np.zeros(n), np.zeros(n)
    ends, durs, byts, flos, gams, rs = [], [], [], [], [], []
    now = 0.0
    for i, rounds in enumerate(per_req):
        arrival[i] = now
        for j, (dur, b, f, g, acc_n) in enumerate(rounds):
            now += dur
            ends.append(now)
            durs.append(dur)
            byts.append(b)
            flos.append(f)
            gams.append(g)
            if j == 0:
                first[i] = now
                if spec and g:
                    rs.append(RequestStep(len(ends) - 1, i, acc_n, g))
            else:
                rs.append(RequestStep(len(ends) - 1, i, acc_n, g))
        finish[i] = now
    return Records(arrival_s=arrival, admit_s=arrival.copy(), first_token_s=first, finish_s=finish,
                   output_len=wl.output_len, step_end_s=np.array(ends), step_dur_s=np.array(durs),
                   step_batch=np.ones(len(ends), np.int64), step_gamma=np.array(gams, np.int64),
                   step_bytes=np.array(byts), step_flops=np.array(flos), **request_step_columns(rs))


PROFILE = HfAssisted()
