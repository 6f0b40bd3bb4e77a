"""One measured vLLM run as the simulator needs it: its engine configuration, its requests and their speculation.

A run record is a `vllm bench serve --save-result --save-detailed`-keyed JSON (read and checked by
`vllm_outputs.summarize_requests`) plus what experiments/vllm_cpu.py adds: `config` (the engine's knobs as passed:
k, method, max_num_seqs, max_num_batched_tokens, block_size, num_gpu_blocks, loop, concurrency or rate, arrival =
"offline" for the in-process engine, "server" for the API server), `steps` (the per-step log) and per-request
speculation (`request_spec[i].per_step_accepted / per_step_drafted`, vLLM's `--per-request-spec-decode-metrics
detailed`; runs of the first harness carry it in `final_chunks[i].metrics.speculative_decoding`).
Runs of the first harness have no `config`: `LEGACY_CONFIG` is what that harness passed to every server (its
`--max-num-seqs 256 --max-num-batched-tokens 2048 --block-size 128`, k = 3; experiments/results/vllm_cpu/vllm_cpu.md
of those runs), used only where a run records nothing itself.
"""

from __future__ import annotations

import numpy as np

from specsim.errors import ConfigError

LEGACY_CONFIG = {"max_num_seqs": 256, "max_num_batched_tokens": 2048, "block_size": 128, "k": 3,
                 "arrival": "server"}
LEGACY_METHOD = {"draft": "draft_model", "ngram": "ngram"}
# the in-process engine queues a request added between steps one engine step late (../shared/reference/vllm-cpu.md,
# "Learned since": a request added with LLM.enqueue joins one engine step late); the API server does not
JOIN_LAG_STEPS = {"offline": 1, "server": 0}


def run_config(run: dict, where: str = "run") -> dict:
    """The run's engine knobs and load: its own `config`, else the legacy harness's fixed flags."""
    cfg = dict(LEGACY_CONFIG)
    cfg.update(run.get("config") or {})
    if "method" not in cfg:
        cfg["method"] = LEGACY_METHOD.get(run.get("mode"))
    if not cfg.get("method"):
        cfg["k"] = 0
    for key in ("concurrency", "rate", "output_len"):
        if key not in cfg and key in run:
            cfg[key] = run[key]
    if "loop" not in cfg:
        cfg["loop"] = "closed" if cfg.get("concurrency") else "poisson"
    for key in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError("not a positive integer", file=where, field=f"config.{key}", value=v,
                              allowed="an integer >= 1 (the flag vLLM ran with)")
    k = cfg["k"]
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 64:
        raise ConfigError("k must be an integer 0..64", file=where, field="config.k", value=k)
    if cfg["arrival"] not in JOIN_LAG_STEPS:
        raise ConfigError("unknown arrival pattern", file=where, field="config.arrival", value=cfg["arrival"],
                          allowed=" | ".join(JOIN_LAG_STEPS))
    if cfg["loop"] == "closed" and not (isinstance(cfg.get("concurrency"), int) and cfg["concurrency"] >= 1):
        raise ConfigError("a closed loop needs its concurrency", file=where, field="config.concurrency",
                          value=cfg.get("concurrency"), allowed="an integer >= 1")
    lag = measured_join_lag(run)
    cfg["join_lag_steps"] = JOIN_LAG_STEPS[cfg["arrival"]] if lag is None else lag
    cfg["join_lag_source"] = "assumed" if lag is None else "measured"
    return cfg


def measured_join_lag(run: dict) -> int | None:
    """Steps a request added while others were in flight (after the first step) waited beyond the next step (the
    median, rounded), from the harness's added_step / first_scheduled_step / inflight_at_add; None where the run
    did not record them."""
    lags = [f - a - 1 for a, f, b in zip(run.get("added_step") or [], run.get("first_scheduled_step") or [],
                                         run.get("inflight_at_add") or []) if f is not None and a > 0 and b]
    return max(0, int(round(float(np.median(lags))))) if lags else None


def variant(cfg: dict) -> str:
    """'plain', or the method and k ('draft_model-k3', 'ngram-k3')."""
    return "plain" if not cfg.get("method") or not cfg["k"] else f"{cfg['method']}-k{cfg['k']}"


def request_spec(run: dict, where: str = "run") -> list[tuple[list[int], list[int]]] | None:
    """Per request (drafted, accepted) per verification step, or None when the run recorded none."""
    reqs = run.get("request_spec")
    if reqs is None:
        reqs = [_find_spec(ch) for ch in run.get("final_chunks") or []]
    if not reqs or not any(reqs):
        return None
    out = []
    for i, r in enumerate(reqs):
        d = [int(x) for x in (r or {}).get("per_step_drafted") or []]
        a = [int(x) for x in (r or {}).get("per_step_accepted") or []]
        if len(d) != len(a) or any(x < 0 or y < 0 or y > x for x, y in zip(d, a)):
            raise ConfigError("per-step accepted counts must pair with drafted counts, 0 <= accepted <= drafted",
                              file=where, field=f"request_spec[{i}].per_step_accepted", value=a[:8],
                              allowed=f"one count per drafted entry {d[:8]}")
        out.append((d, a))
    return out


def _find_spec(obj):
    """The per-request speculative_decoding object wherever a final chunk nests it."""
    if isinstance(obj, dict):
        if "per_step_accepted" in obj:
            return obj
        for v in obj.values():
            f = _find_spec(v)
            if f:
                return f
    return None


def step_schedule(drafted: list[int], accepted: list[int], output_len: int) -> list[tuple[int, int]]:
    """A request's verification steps in order, (drafts verified, accepted), covering its output_len tokens after
    the first: vLLM lists only the steps that verified drafts, so the steps that verified none (an n-gram lookup
    that found no match) are spread evenly between them — where they fell is not recorded."""
    spec = list(zip(drafted, accepted))
    gained = sum(a + 1 for _, a in spec)
    zero = max(0, output_len - 1 - gained)
    if not zero:
        return spec
    if not spec:
        return [(0, 0)] * zero
    out, per = [], zero / (len(spec) + 1)
    placed = 0
    for j, s in enumerate(spec):
        want = int(round(per * (j + 1)))
        out += [(0, 0)] * (want - placed)
        placed = want
        out.append(s)
    return out + [(0, 0)] * (zero - placed)


def beta_sequence(sched: list[tuple[int, int]], output_len: int, untested: float) -> tuple[list, list]:
    """(β per output position, tested flag): accepted drafts 1, the rejected one 0; positions no draft was tested at
    (output token 0, a bonus token after a clean sweep, a step without drafts) get `untested`."""
    beta, tested = [untested], [0]
    for d, a in sched:
        beta += [1.0] * a
        tested += [1] * a
        if a < d:
            beta.append(0.0)
            tested.append(1)
        else:
            beta.append(untested)
            tested.append(0)
    return beta[:output_len], tested[:output_len]


def arrivals(run: dict, cfg: dict, where: str = "run") -> np.ndarray:
    """Arrival times (s from the first) per request, in the run's request order."""
    st = run.get("start_times")
    if st is None:
        raise ConfigError("no start_times: the arrival of each request is unknown", file=where,
                          field="start_times", allowed="a bench result with start_times (or the harness's own)")
    a = np.asarray(st, float)
    if a.size != len(run["input_lens"]) or not np.isfinite(a).all():
        raise ConfigError("start_times must be one finite time per request", file=where, field="start_times",
                          value=a.size, allowed=f"{len(run['input_lens'])} times")
    return a - a.min()
