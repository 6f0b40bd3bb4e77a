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
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.errors import ConfigError

_ITER = re.compile(
    r"Iteration\((?P<i>\d+)\): (?P<ctx_req>\d+) context requests, (?P<ctx_tok>\d+) context tokens, "
    r"(?P<gen_req>\d+) generation requests, (?P<gen_tok>\d+) generation tokens, "
    r"iteration elapsed time: (?P<ms>[0-9.]+) ms(?P<dummy> \(dummy\))?(?:, \w+ KV cache usage: (?P<kv>[0-9.]+)%)?")

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


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text → {(name, sorted label pairs): value}; comments and unparsable lines are skipped."""
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
    return out


def _sum(metrics: dict, name: str, **want) -> float:
    return sum(v for (n, lab), v in metrics.items() if n == name and all((k, w) in lab for k, w in want.items()))


def spec_counters(metrics: dict) -> dict:
    """The speculative-decoding counters (summed over engines and models), per position too."""
    pos: dict[int, float] = {}
    for (n, lab), v in metrics.items():
        if n == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            k = int(dict(lab).get("position", "-1"))
            pos[k] = pos.get(k, 0.0) + v
    return {"drafts": _sum(metrics, "vllm:spec_decode_num_drafts_total"),
            "draft_tokens": _sum(metrics, "vllm:spec_decode_num_draft_tokens_total"),
            "accepted_tokens": _sum(metrics, "vllm:spec_decode_num_accepted_tokens_total"),
            "accepted_per_pos": [pos[k] for k in sorted(pos) if k >= 0]}


def counter_delta(before: dict, after: dict) -> dict:
    """`spec_counters(after) − spec_counters(before)`: what one measured point added."""
    d = {k: after[k] - before[k] for k in ("drafts", "draft_tokens", "accepted_tokens")}
    a, b = after["accepted_per_pos"], before["accepted_per_pos"] + [0.0] * len(after["accepted_per_pos"])
    d["accepted_per_pos"] = [x - y for x, y in zip(a, b)]
    return d


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
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read bench JSON ({type(e).__name__}: {e})", file=p) from None
    if not isinstance(d, dict):
        raise ConfigError("not a bench result object", file=p, allowed="a JSON object")
    for k in _BENCH_KEYS + ("duration",):
        if k not in d:
            raise ConfigError("missing key (saved without --save-detailed?)", file=p, field=k,
                              allowed="vllm bench serve --save-result --save-detailed output")
    return summarize_requests(d, p)


def summarize_requests(d: dict, where: str | Path = "bench result") -> dict:
    n = len(d["ttfts"])
    if any(len(d[k]) != n for k in _BENCH_KEYS):
        raise ConfigError("per-request lists differ in length", file=where, field="ttfts/itls/input_lens/output_lens")
    errors = d.get("errors") or [""] * n
    ok = np.array([not e for e in errors], bool)
    out_l = np.asarray(d["output_lens"], float)
    ttft = np.asarray(d["ttfts"], float)
    lat = np.asarray(d.get("latencies") or [t + sum(i) for t, i in zip(d["ttfts"], d["itls"])], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_l > 1, (lat - ttft) / (out_l - 1), np.nan)
    itl = np.concatenate([np.asarray(x, float) for x, k in zip(d["itls"], ok) if k] or [np.zeros(0)])
    dur = float(d["duration"])
    if not math.isfinite(dur) or dur <= 0:
        raise ConfigError("duration must be a positive number of seconds", file=where, field="duration", value=dur)
    res = dict(d)
    res.update(ttft_s=ttft[ok], tpot_s=tpot[ok], e2e_s=lat[ok], itl_s=itl, completed=int(ok.sum()),
               output_tokens=int(out_l[ok].sum()), output_throughput=float(out_l[ok].sum()) / dur)
    return res
