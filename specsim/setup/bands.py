"""The bands policy's default bands, worked out by the setup stage (never inside the policy).

Without `num_speculative_tokens_per_batch_size` given, `--policy bands` runs the bands choose-draft advises for the
config's setup (`specsim.engine.policies.bands` states the rule): `choose_draft` on its hardware, stack, TP,
target, and the draft with the run's α (or its trace), prompt and output lengths and seed, at choose-draft's
default batch sizes and γ range, each point simulated with ADVICE_REQUESTS requests; cached per setup within a
process.

The advice is a study (it simulates fixed-γ points, which never need advice themselves), so this is the one
place the setup stage calls upward into `specsim.studies` — listed in tests/test_architecture.py's ALLOWLIST.
"""

from __future__ import annotations

from functools import lru_cache

ADVICE_REQUESTS = 64  # requests per choose-draft point when the bands come from its advice (see the docstring)


def policy_inputs(cfg, alpha: float) -> dict:
    """What `BandsPolicy.build` needs beyond the config: the advised bands when none are given."""
    if cfg.get("num_speculative_tokens_per_batch_size") is not None:
        return {}
    return {"bands": advised_bands(cfg, alpha)}


def advised_bands(cfg, alpha: float) -> tuple:
    """The bands choose-draft advises for the config's setup, as [[start, end, γ], ...] (see the docstring)."""
    g = cfg.get
    return _advice(g("hardware"), g("target"), g("draft"), float(alpha), g("trace"), g("stack"), int(g("tp")),
                   int(g("prompt_len")), int(g("output_len")), int(g("seed")))


@lru_cache(maxsize=64)
def _advice(hardware, target, draft, alpha, trace, stack, tp, prompt_len, output_len, seed) -> tuple:
    from specsim.studies.choose import DraftSpec, choose_draft

    spec = DraftSpec(text=f"{draft}:{trace or alpha}", model=draft, alpha=alpha, trace=trace)
    res = choose_draft(hardware, target, [spec], tp=tp, stack=stack, prompt_len=prompt_len, output_len=output_len,
                       requests=ADVICE_REQUESTS, seed=seed)
    return tuple((int(b["min"]), int(b["max"]), int(b["gamma"])) for b in res["drafts"][0]["bands"])
