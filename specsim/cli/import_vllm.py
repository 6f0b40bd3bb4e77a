"""`specsim import-vllm`: a measured vLLM run -> specsim's inputs (arrivals CSV, β trace, step table).

Reads a `vllm bench serve --save-result --save-detailed` JSON (or a run record of experiments/vllm_cpu.py, which
uses the same keys and adds `config`, `steps` and per-request speculation) and/or vLLM's per-step log
(`--enable-logging-iteration-details`), through `specsim.validation.vllm_outputs` and `vllm_runs`, and writes into
--out:
- arrivals.csv: arrival_s, prompt_len, output_len per request (`simulate --arrivals-csv`); needs start_times;
- trace.csv: one β sequence per request from vLLM's own per-request accepted/drafted counts (greedy: an accepted
  draft 1, the rejected one 0; positions no draft was tested at get --untested-beta, column `tested` says which);
  only for a run that speculated with --per-request-spec-decode-metrics detailed;
- step_table.csv: the per-step log fitted by `specsim.validation.step_fit` (knots at measured token counts,
  monotone, with its measured range and gaps) — only from a run WITHOUT speculation: a log or run that verified
  drafts is refused (`simulate --step-table-target / --step-table-draft`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import typer

from specsim.cli import options as o
from specsim.cli.output import emit_json, table
from specsim.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("import-vllm")(import_vllm)


def _read_run(path: Path) -> tuple[dict, dict]:
    from specsim.validation import vllm_outputs as vr

    s = vr.read_bench(path)  # checks keys, types and physics; one line naming the key
    return json.loads(path.read_text(encoding="utf-8")), s


def _steps(log: Path | None, run: dict | None, where) -> list[dict]:
    from specsim.validation import vllm_outputs as vr

    if log is not None:
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise ConfigError(f"cannot read the per-step log ({e.strerror or e})", file=log) from None
        steps = [s.__dict__ for s in vr.parse_steps(text)]
        if not steps:
            raise ConfigError("no step lines in the log (was --enable-logging-iteration-details on?)", file=log,
                              allowed="lines 'Iteration(i): C context requests, T context tokens, ...'")
        return steps
    return list((run or {}).get("steps") or [])


def _write_arrivals(run: dict, cfg: dict, out: Path, where) -> Path:
    from specsim.validation import vllm_runs as vrun

    arr = vrun.arrivals(run, cfg, where)
    p = np.asarray(run["input_lens"], np.int64)
    ol = np.asarray(run["output_lens"], np.int64)
    ok = np.array([not e for e in (run.get("errors") or [""] * len(p))], bool) & (p >= 1) & (ol >= 1)
    if not ok.any():
        raise ConfigError("no completed request with prompt and output tokens", file=where, field="errors")
    order = np.argsort(arr[ok], kind="stable")
    f = out / "arrivals.csv"
    pd.DataFrame({"arrival_s": [repr(float(x)) for x in arr[ok][order]], "prompt_len": p[ok][order],
                  "output_len": ol[ok][order]}).to_csv(f, index=False)
    return f


def _write_trace(run: dict, cfg: dict, out: Path, untested: float, where) -> tuple[Path, float] | None:
    from specsim.traces.format import Trace
    from specsim.validation import vllm_runs as vrun

    spec = vrun.request_spec(run, where)
    if spec is None:
        return None
    ids, pos, beta, tested = [], [], [], []
    for i, ((d, a), n) in enumerate(zip(spec, run["output_lens"])):
        b, t = vrun.beta_sequence(vrun.step_schedule(d, a, int(n)), int(n), untested)
        ids += [i] * len(b)
        pos += list(range(len(b)))
        beta += b
        tested += t
    frame = pd.DataFrame({"sequence_id": np.asarray(ids, np.int64), "position": np.asarray(pos, np.int64),
                          "beta": np.asarray(beta, float), "tested": np.asarray(tested, np.int64)})
    meta = {"source": "vllm", "method": cfg.get("method"), "k": cfg.get("k"), "untested_beta": untested,
            "how_recorded": "vLLM per-request accepted/drafted counts (--per-request-spec-decode-metrics "
                            "detailed): accepted 1, rejected 0, untested positions untested_beta"}
    f = Trace(frame, meta).write(out / "trace.csv")
    t = np.asarray(tested, bool)
    return f, float(np.asarray(beta)[t].mean()) if t.any() else float("nan")


def _write_table(steps: list[dict], run: dict | None, out: Path, where) -> tuple[Path, dict]:
    from specsim.validation import step_fit as sf

    if run is not None:
        sf.check_no_speculation(run, str(where))
    for i, s in enumerate(steps):
        if s.get("gen_tokens", 0) > s.get("gen_requests", s.get("gen_tokens", 0)):
            raise ConfigError("a step verified drafts (generation tokens > generation requests): a speculative "
                              "run cannot calibrate a step table", file=where, field=f"step {i} gen_tokens",
                              value=s["gen_tokens"], allowed=f"<= {s.get('gen_requests')} (a run without speculation)")
    t = sf.fit_step_table(sf.StepSamples.from_steps(steps, str(where)), where=str(where))
    f = t.write_csv(out / "step_table.csv", f"vLLM per-step log: {where}")
    gaps = [f"{int(a)}-{int(b)}" for a, b, c in zip(t.tokens[:-1], t.tokens[1:], t.covered) if not c]
    return f, {"range": [int(t.tokens[0]), int(t.tokens[-1])], "knots": int(t.tokens.size), "gaps": gaps}


def _speculated(run: dict, where) -> bool:
    from specsim.validation import step_fit as sf

    try:
        sf.check_no_speculation(run, str(where))
    except ConfigError:
        return True
    return False


def import_vllm(
    bench: Path | None = typer.Option(None, "--bench", help="`vllm bench serve --save-result --save-detailed` "
                                      "JSON, or a run record of experiments/vllm_cpu.py"),
    steps_log: Path | None = typer.Option(None, "--steps", help="vLLM's log with per-step lines "
                                          "(--enable-logging-iteration-details); default: the run record's steps"),
    out: Path = typer.Option(..., "--out", help="directory to write arrivals.csv, trace.csv, step_table.csv"),
    untested_beta: float = typer.Option(1.0, "--untested-beta", min=0.0, max=1.0,
                                        help="β written where no draft was tested (output token 0, the bonus token "
                                             "after a clean sweep, a step without drafts)"),
    json_out: bool = o.JSON,
) -> None:
    """Import a measured vLLM run: arrivals, β trace and step table in specsim's formats."""
    from specsim.validation import vllm_runs as vrun

    if bench is None and steps_log is None:
        raise ConfigError("nothing to import", field="--bench/--steps", allowed="a bench JSON, a per-step log, or both")
    for p, flag in ((bench, "--bench"), (steps_log, "--steps")):
        if p is not None and not p.is_file():
            raise ConfigError("no such file", file=p, field=flag)
    if out.exists() and not out.is_dir():
        raise ConfigError("not a directory", file=out, field="--out", allowed="a directory (created if missing)")
    run, res = None, {}
    if bench is not None:
        run, _ = _read_run(bench)
    steps = _steps(steps_log, run, steps_log or bench)
    out.mkdir(parents=True, exist_ok=True)
    if run is not None:
        cfg = vrun.run_config(run, bench)
        res["requests"] = len(run["input_lens"])
        if run.get("start_times") is not None:
            res["arrivals"] = str(_write_arrivals(run, cfg, out, bench))
        tr = _write_trace(run, cfg, out, untested_beta, bench)
        if tr is not None:
            res["trace"], res["alpha_tested"] = str(tr[0]), tr[1]
    if steps and steps_log is None and _speculated(run, bench):
        res["step_table_skipped"] = "the run speculated: only a run without speculation calibrates a step table"
    elif steps:
        f, info = _write_table(steps, run if steps_log is None else None, out, steps_log or bench)
        res.update(step_table=str(f), steps=len(steps), table=info)
    if not any(k in res for k in ("arrivals", "trace", "step_table")):
        raise ConfigError("nothing importable: no start_times, no per-request speculation, no per-step lines",
                          file=bench or steps_log, allowed="a bench JSON with start_times, or a per-step log")
    if json_out:
        emit_json(res)
        return
    table("import-vllm", ["what", "value"], [(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
                                             for k, v in sorted(res.items())])
