"""Reading what a vLLM server reports: its per-step log, its Prometheus `/metrics`, and `bench serve` JSON.

Why here (torch-free, no vLLM import): the simulator is scored against vLLM runs that happen in vLLM's own venv or
on a user's GPU deployment; only their text outputs cross over, and CI tests this parsing on committed fixtures.

Sources (vLLM 0.32, the CPU build this project measured):
- per-step log: `vllm/v1/metrics/loggers.py` `LoggingStatLogger._log_iteration_details`, enabled by
  `--enable-logging-iteration-details`; one line per engine step: "Iteration(i): C context requests, T context
  tokens, G generation requests, U generation tokens, iteration elapsed time: X ms, CPU KV cache usage: Y%".
  A "context" request is one whose output is still empty (a prefill or a prefill chunk,
  `vllm/v1/utils.py compute_iteration_details`); a generation request's tokens include its draft tokens.
- `/metrics`: Prometheus text format; the speculative counters are `vllm:spec_decode_num_drafts_total`,
  `vllm:spec_decode_num_draft_tokens_total`, `vllm:spec_decode_num_accepted_tokens_total` and
  `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="k"}` (`vllm/v1/spec_decode/metrics.py`).
- `vllm bench serve --save-result --save-detailed` (`vllm/benchmarks/serve.py`): lists `input_lens`,
  `output_lens`, `ttfts`, `itls` (per request, seconds), `latencies`, `start_times`, `errors`, and `duration`.
  specsim's own harness (experiments/vllm_cpu.py) writes the same keys, so both are read by `read_bench`.
What a real run cannot report is refused in one line naming the key (a bench result: a negative or non-finite
time, a latency below its TTFT or past the run's duration, a length that is not a non-negative integer; /metrics:
more tokens accepted than drafted, more acceptances at a position than drafts or than at the position before it,
a counter that went down between two scrapes).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.errors import ConfigError
from specsim.inputs.files import check_nesting

_ITER = re.compile(
    r"Iteration\((?P<i>\d+)\): (?P<ctx_req>\d+) context requests, (?P<ctx_tok>\d+) context tokens, "
    r"(?P<gen_req>\d+) generation requests, (?P<gen_tok>\d+) generation tokens, "
    r"iteration elapsed time: (?P<ms>[0-9]+(?:\.[0-9]*)?) ms(?P<dummy> \(dummy\))?"
    r"(?:, \w+ KV cache usage: (?P<kv>[0-9]+(?:\.[0-9]*)?)%)?")

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Step:
    """One engine step from the per-step log."""

    index: int
    ctx_requests: int
    ctx_tokens: int
    gen_requests: int
    gen_tokens: int
    time_s: float
    kv_usage: float | None

    @property
    def tokens(self) -> int:
        return self.ctx_tokens + self.gen_tokens

    @property
    def requests(self) -> int:
        return self.ctx_requests + self.gen_requests


def parse_steps(text: str) -> list[Step]:
    """Every non-dummy step line in a server log (other lines are ignored)."""
    out = []
    for m in _ITER.finditer(text):
        if m.group("dummy"):
            continue
        kv = m.group("kv")
        out.append(Step(int(m.group("i")), int(m.group("ctx_req")), int(m.group("ctx_tok")),
                        int(m.group("gen_req")), int(m.group("gen_tok")), float(m.group("ms")) / 1e3,
                        None if kv is None else float(kv) / 100))
    return out


def parse_metrics(text: str, where: str | Path | None = None) -> dict[tuple[str, tuple], float]:
    """Prometheus text → {(name, sorted label pairs): value}; comments and unparsable lines are skipped. With
    `where` (a user's file or scrape), text holding no `vllm:` sample at all is refused: it is not a vLLM server's
    /metrics (an empty or garbled scrape would otherwise read as a server that never drafted)."""
    out: dict[tuple[str, tuple], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            v = float(m.group("value"))
        except ValueError:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group("labels") or "")))
        out[(m.group("name"), labels)] = v
    if where is not None and not any(n.startswith("vllm:") for n, _ in out):
        raise ConfigError("not a vLLM /metrics page: no vllm: sample in it", file=where, field="metrics",
                          value=f"{len(out)} other samples", allowed="the text of a vLLM server's /metrics")
    return out


def _sum(metrics: dict, name: str, **want) -> float:
    return sum(v for (n, lab), v in metrics.items() if n == name and all((k, w) in lab for k, w in want.items()))


_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"



def spec_counters(metrics: dict, where: str | Path = "/metrics") -> dict:
    """The speculative-decoding counters (summed over engines and models), per position too; checked for physics
    (`check_counters`)."""
    pos: dict[int, float] = {}
    for (n, lab), v in metrics.items():
        if n == _PER_POS:
            label = dict(lab).get("position", "-1")
            if not re.fullmatch(r"-?[0-9]{1,9}", label):
                raise ConfigError("a position label that is not an integer", file=where, field=f"{n}.position",
                                  value=label, allowed='position="0", "1", ...')
            k = int(label)
            pos[k] = pos.get(k, 0.0) + v
    out = {"drafts": _sum(metrics, "vllm:spec_decode_num_drafts_total"),
           "draft_tokens": _sum(metrics, "vllm:spec_decode_num_draft_tokens_total"),
           "accepted_tokens": _sum(metrics, "vllm:spec_decode_num_accepted_tokens_total"),
           "accepted_per_pos": [pos[k] for k in sorted(pos) if k >= 0]}
    return check_counters(out, where)


def check_counters(c: dict, where: str | Path = "/metrics", what: str = "") -> dict:
    """Counters a speculating server can report: finite and >= 0, accepted tokens <= drafted tokens, at most one
    acceptance per draft at each position, and no more acceptances at position k + 1 than at k (a chain accepts
    position k + 1 only after position k: vllm/v1/spec_decode/metrics.py counts the first n positions)."""
    names = [("drafts", c["drafts"]), ("draft_tokens", c["draft_tokens"]), ("accepted_tokens", c["accepted_tokens"])]
    names += [(f"accepted_per_pos[{k}]", v) for k, v in enumerate(c["accepted_per_pos"])]
    for name, v in names:
        if not math.isfinite(v) or v < 0:
            raise ConfigError(f"a counter{what} that is negative or not finite", file=where, field=name, value=v,
                              allowed="a finite count >= 0")
    if c["accepted_tokens"] > c["draft_tokens"]:
        raise ConfigError(f"more tokens accepted than drafted{what}", file=where, field="accepted_tokens",
                          value=c["accepted_tokens"], allowed=f"<= draft_tokens = {c['draft_tokens']:g}")
    per = c["accepted_per_pos"]
    # vLLM counts each accepted draft token once in the total and once at its position (vllm/v1/spec_decode/
    # metrics.py observe_draft): the positions add up to the total
    if per and not math.isclose(math.fsum(per), c["accepted_tokens"], rel_tol=1e-9, abs_tol=0.5):
        raise ConfigError(f"accepted tokens per position do not add up to the accepted total{what}", file=where,
                          field="accepted_per_pos", value=math.fsum(per),
                          allowed=f"= accepted_tokens = {c['accepted_tokens']:g}")
    for k, v in enumerate(per):
        if v > c["drafts"]:
            raise ConfigError(f"more acceptances at position {k} than drafts{what}", file=where,
                              field=f"accepted_per_pos[{k}]", value=v, allowed=f"<= drafts = {c['drafts']:g}")
        if k and v > per[k - 1]:
            raise ConfigError(f"more acceptances at position {k} than at position {k - 1}{what} (a chain accepts a "
                              f"position only after the one before it)", file=where, field=f"accepted_per_pos[{k}]",
                              value=v, allowed=f"<= {per[k - 1]:g}")
    return c


def counter_delta(before: dict, after: dict, where: str | Path = "/metrics") -> dict:
    """`spec_counters(after) − spec_counters(before)`: what one measured point added (a counter that went down —
    the server restarted between the two scrapes — is refused, as is a delta that breaks `check_counters`)."""
    d = {k: after[k] - before[k] for k in ("drafts", "draft_tokens", "accepted_tokens")}
    a, b = after["accepted_per_pos"], before["accepted_per_pos"] + [0.0] * len(after["accepted_per_pos"])
    d["accepted_per_pos"] = [x - y for x, y in zip(a, b)]
    if len(before["accepted_per_pos"]) > len(a):
        raise ConfigError("positions vanished between the two scrapes", file=where, field="accepted_per_pos",
                          value=len(a), allowed=f">= {len(before['accepted_per_pos'])} positions")
    return check_counters(d, where, " between the two scrapes (did the server restart?)")


def acceptance_summary(delta: dict) -> dict:
    """vLLM's own figures: draft acceptance rate, mean acceptance length (1 + accepted / drafts) and the
    per-position rates accepted_k / drafts."""
    n = delta["drafts"]
    if not n:
        return {"draft_acceptance_rate": None, "mean_acceptance_length": None, "acceptance_by_position": []}
    return {"draft_acceptance_rate": delta["accepted_tokens"] / delta["draft_tokens"],
            "mean_acceptance_length": 1.0 + delta["accepted_tokens"] / n,
            "acceptance_by_position": [a / n for a in delta["accepted_per_pos"]]}


_BENCH_KEYS = ("input_lens", "output_lens", "ttfts", "itls")


def read_bench(path: str | Path) -> dict:
    """A `vllm bench serve --save-result --save-detailed` JSON (or the harness's own, same keys), checked.

    Returns the dict with numpy arrays `ttft_s`, `tpot_s`, `e2e_s` per completed request and `output_throughput`
    (output tokens / duration) recomputed from the lists, so imported and own runs are scored the same way."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        check_nesting(text, file=p)  # the one depth bound for JSON from a user
        d = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read bench JSON ({type(e).__name__}: {e})", file=p) from None
    except RecursionError:
        raise ConfigError("cannot read bench JSON (nested too deeply)", file=p,
                          allowed="a bench result object (lists of numbers, one level of itls lists)") from None
    if not isinstance(d, dict):
        raise ConfigError("not a bench result object", file=p, allowed="a JSON object")
    for k in _BENCH_KEYS + ("duration",):
        if k not in d:
            raise ConfigError("missing key (saved without --save-detailed?)", file=p, field=k,
                              allowed="vllm bench serve --save-result --save-detailed output")
    return summarize_requests(d, p)


def summarize_requests(d: dict, where: str | Path = "bench result") -> dict:
    """Per-request figures of a bench result, every value typed and checked for physics (`_checked`)."""
    n, ok, out_l, ttft, lat, itls, dur = _checked(d, where)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_l > 1, (lat - ttft) / (out_l - 1), np.nan)
    itl = np.concatenate([x for x, k in zip(itls, ok) if k] or [np.zeros(0)])
    res = dict(d)
    res.update(ttft_s=ttft[ok], tpot_s=tpot[ok], e2e_s=lat[ok], itl_s=itl, completed=int(ok.sum()),
               output_tokens=int(out_l[ok].sum()), output_throughput=float(out_l[ok].sum()) / dur)
    return res


# A request cannot end after the run it belongs to: latency <= duration, with this much slack for the two clocks
# (vLLM's bench times a request and the run with the same perf_counter; our harness too).
DURATION_SLACK_S = 1e-3
LATENCY_SLACK_S = 0.05  # s: what a stream's close adds after its last token (the committed fixture: < 2 ms)


def _numbers(v, key: str, where, integer: bool = False) -> np.ndarray:
    """A JSON list of numbers (integers for a count): never a bool, a string or null."""
    if not isinstance(v, list):
        raise ConfigError("not a list", file=where, field=key, value=type(v).__name__, allowed="a JSON list")
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int if integer else (int, float)):
            raise ConfigError(f"not {'an integer' if integer else 'a number'}", file=where, field=f"{key}[{i}]",
                              value=x, allowed="integers >= 0" if integer else "numbers")
    return np.asarray(v, dtype=float)


def _bad_time(where, key: str, i: int, value, allowed: str, what: str = "a time that is negative or not finite"):
    return ConfigError(f"request {i}: {what}", file=where, field=f"{key}[{i}]", value=float(value), allowed=allowed)


def _checked(d: dict, where):
    """(n, completed mask, output_lens, ttfts, latencies, itls per request, duration) of a bench result: typed
    (numbers, integer lengths) and physical for every completed request — times finite and >= 0, latency >= TTFT
    (the first token comes before the last), latency <= duration (+ DURATION_SLACK_S); a failed request (non-empty
    `errors` entry) is only typed (vLLM writes zeros for it)."""
    for k in _BENCH_KEYS:
        if not isinstance(d[k], list):
            raise ConfigError("not a list", file=where, field=k, value=type(d[k]).__name__, allowed="a JSON list")
    n = len(d["ttfts"])
    if any(len(d[k]) != n for k in _BENCH_KEYS):
        raise ConfigError("per-request lists differ in length", file=where, field="ttfts/itls/input_lens/output_lens")
    errors = d.get("errors") or [""] * n
    if not isinstance(errors, list) or len(errors) != n or not all(isinstance(e, str) or e is None for e in errors):
        raise ConfigError("errors must be one string per request", file=where, field="errors",
                          allowed=f"a list of {n} strings ('' = completed)")
    ok = np.array([not e for e in errors], bool)
    for k in ("input_lens", "output_lens"):
        lens = _numbers(d[k], k, where, integer=True)
        if (lens < 0).any():
            i = int(np.argmax(lens < 0))
            raise ConfigError("a negative length", file=where, field=f"{k}[{i}]", value=int(lens[i]), allowed=">= 0")
    out_l = np.asarray(d["output_lens"], float)
    ttft = _numbers(d["ttfts"], "ttfts", where)
    itls = [_numbers(x, f"itls[{i}]", where) for i, x in enumerate(d["itls"])]
    given = d.get("latencies")
    lat = _numbers(given, "latencies", where) if given else \
        np.array([t + math.fsum(x) for t, x in zip(ttft, itls)], float)
    if len(lat) != n:
        raise ConfigError("per-request lists differ in length", file=where, field="latencies", value=len(lat),
                          allowed=f"{n} entries, one per request")
    dur = d["duration"]
    if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not math.isfinite(dur) or dur <= 0:
        raise ConfigError("duration must be a positive number of seconds", file=where, field="duration", value=dur)
    for i in np.flatnonzero(ok):
        if not (math.isfinite(ttft[i]) and ttft[i] >= 0):
            raise _bad_time(where, "ttfts", i, ttft[i], "seconds >= 0")
        if out_l[i] < 1:  # a completed request streamed at least its first token (its TTFT says so)
            raise ConfigError(f"request {i}: completed with no output token", file=where, field=f"output_lens[{i}]",
                              value=int(out_l[i]), allowed=">= 1 for a completed request")
        if len(itls[i]) > out_l[i] - 1:  # vllm/benchmarks: one gap per streamed chunk after the first token
            raise ConfigError(f"request {i}: more inter-token gaps than tokens after the first", file=where,
                              field=f"itls[{i}]", value=len(itls[i]), allowed=f"<= output_lens[{i}] - 1 = "
                              f"{int(out_l[i]) - 1} entries")
        bad = [j for j, x in enumerate(itls[i]) if not (math.isfinite(x) and x >= 0)]
        if bad:
            raise ConfigError(f"request {i}: an inter-token latency that is negative or not finite", file=where,
                              field=f"itls[{i}][{bad[0]}]", value=float(itls[i][bad[0]]), allowed="seconds >= 0")
        if not math.isfinite(lat[i]) or lat[i] < ttft[i]:
            raise _bad_time(where, "latencies", i, lat[i], f">= its TTFT {ttft[i]:.6g} s",
                            "latency below the time to its first token")
        if lat[i] > dur + DURATION_SLACK_S:
            raise _bad_time(where, "latencies", i, lat[i], f"<= duration {dur:.6g} s",
                            "a request longer than the whole run")
        if given and itls[i].size and abs(lat[i] - ttft[i] - math.fsum(itls[i])) > LATENCY_SLACK_S + 0.02 * lat[i]:
            # vllm/benchmarks: a streamed request's latency ends at its last token = TTFT + the gaps after it
            raise _bad_time(where, "latencies", i, lat[i], f"TTFT + the sum of its ITLs = "
                            f"{ttft[i] + math.fsum(itls[i]):.6g} s (± {LATENCY_SLACK_S:g} s + 2%)",
                            "a latency that is not its TTFT plus its inter-token gaps")
    return n, ok, out_l, ttft, lat, itls, float(dur)
