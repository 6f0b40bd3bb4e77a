"""`specsim profiles`, `specsim theory`, `specsim roofline`: the closed forms and the cost model."""

from __future__ import annotations

from typing import Optional

import typer

from specsim import profiles as prof
from specsim.cli.output import emit_json, table
from specsim.cli.parse import int_list
from specsim.errors import ConfigError, check_range
from specsim.setup.deployment import STACK_HELP

# Bounds of the numeric options (each refused in one line beyond them): a cost ratio c above 1e6 or a γ above 1e6
# is a typo, not a question; a batch or context beyond these is no device's.
MAX_C = 1e6
MAX_GAMMA = 1_000_000
MAX_BATCH = 1_000_000
MAX_CONTEXT = 100_000_000


def profiles_cmd(json_out: bool = typer.Option(False, "--json", help="print one JSON object")) -> None:
    """List hardware, stack and model profiles with their key figures."""
    hw = [prof.hardware(n) for n in prof.list_names(prof.HARDWARE_DIR)]
    st = [prof.stack(n) for n in prof.list_names(prof.STACK_DIR)]
    ms = [prof.model(n) for n in prof.list_names(prof.MODEL_DIR)]
    from specsim.methods import heads

    hs = [heads.head(n) for n in heads.head_names()]
    if json_out:
        emit_json({
            "hardware": [{"name": h.name, "kind": h.kind, "peak_tflops": h.peak_tflops,
                          "memory_bandwidth_gb_s": h.memory_bandwidth_gb_s, "memory_capacity_gb": h.memory_capacity_gb,
                          "interconnect_bandwidth_gb_s": h.interconnect_bandwidth_gb_s,
                          "chips_per_node": h.chips_per_node, "max_tp": h.max_tp,
                          "default_stack": h.default_stack} for h in hw],
            "stacks": [s.model_dump() for s in st],
            "models": [{"name": m.name, "architecture": m.architecture, "params": m.total_params,
                        "step_params": m.step_params, "published_params": m.published_params,
                        "active_params": m.active_params, "n_experts": m.n_experts,
                        "experts_per_token": m.experts_per_token,
                        "n_layers": m.n_layers, "d_model": m.d_model, "kv_bytes_per_token": m.kv_bytes_per_token,
                        "dtype": m.dtype} for m in ms],
            "heads": [{"name": h.name, "method": h.method, "target": h.target, "description": h.description}
                      for h in hs],
        })
        return
    table("Hardware profiles", ["name", "kind", "bf16 TFLOP/s", "HBM GB/s", "memory GB", "link GB/s", "max tp",
                                "stack"],
          [(h.name, h.kind, h.peak_tflops.get("bf16"), h.memory_bandwidth_gb_s, h.memory_capacity_gb,
            h.interconnect_bandwidth_gb_s, h.max_tp, h.default_stack) for h in hw],
          caption="max tp: chips one tensor-parallel group may span (tp_domain_chips, else chips_per_node)")
    table("Software-stack profiles", ["name", "bw fraction", "peak fraction", "per call µs", "per layer µs"],
          [(s.name, s.bandwidth_fraction, s.compute_fraction, s.per_call_overhead_s * 1e6,
            s.per_layer_overhead_s * 1e6) for s in st])
    table("Model profiles", ["name", "kind", "params (derived)", "published", "active (MoE)", "layers", "d_model",
                             "KV KiB/token"],
          [(m.name, m.architecture, f"{m.total_params / 1e9:.3f} B",
            f"{m.published_params / 1e9:.3f} B" if m.published_params else "",
            f"{m.active_params / 1e9:.3f} B, {m.experts_per_token} of {m.n_experts}" if m.is_moe else "",
            m.n_layers, m.d_model, m.kv_bytes_per_token / 1024) for m in ms])
    table("Proposer heads (model_profiles/heads/; --method, or --draft NAME)", ["name", "kind", "target", "what"],
          [(h.name, h.method, h.target, h.description) for h in hs])


def theory_cmd(
    alpha: Optional[float] = typer.Option(None, "--alpha", help="acceptance rate α in [0, 1)"),
    gamma: Optional[int] = typer.Option(None, "--gamma", help="draft length γ >= 1"),
    c: float = typer.Option(0.0, "--c", help="cost coefficient c = T_draft / T_target"),
    c_hat: Optional[float] = typer.Option(None, "--c-hat", help="ops ratio ĉ (defaults to c)"),
    table1: bool = typer.Option(False, "--table1", help="print the paper's Table 1"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Closed forms of the paper: eq. (1), eq. (5), Thm 3.11, optimal γ."""
    from specsim import theory as th

    if table1:
        rows = th.table1()
        if json_out:
            emit_json({"table1": rows})
        else:
            table("Table 1 (c = ĉ = 0)", ["α", "γ", "operations", "speed"],
                  [(r["alpha"], r["gamma"], f"{r['operations']:.2f}X", f"{r['speed']:.2f}X") for r in rows])
        return
    if alpha is None:
        raise ConfigError("missing option", field="--alpha", allowed="[0, 1); or use --table1")
    check_range("--alpha", alpha, lo=0, hi=1, hi_open=True)
    check_range("--c", c, lo=0, hi=MAX_C)
    c_hat = c if c_hat is None else check_range("--c-hat", c_hat, lo=0, hi=MAX_C)
    if gamma is not None and not 1 <= gamma <= MAX_GAMMA:
        raise ConfigError("draft length out of range", field="--gamma", value=gamma,
                          allowed=f">= 1 (integer) and <= {MAX_GAMMA}")
    g_opt = th.optimal_gamma(alpha, c)
    if gamma is None:
        gamma = g_opt
    out = {"alpha": alpha, "gamma": gamma, "c": c, "c_hat": c_hat,
           "expected_tokens": th.expected_tokens(alpha, gamma), "speedup": th.speedup(alpha, gamma, c),
           "ops_factor": th.ops_factor(alpha, gamma, c_hat), "optimal_gamma": g_opt,
           "speedup_at_optimal_gamma": th.speedup(alpha, g_opt, c),
           "oracle_expected_tokens": th.oracle_expected_tokens(alpha),
           "draft_acceptance_rate": th.draft_acceptance_rate(alpha, gamma)}
    if json_out:
        emit_json(out)
        return
    table(f"Closed forms at α={alpha:g}, γ={gamma}, c={c:g}", ["quantity", "value", "source"], [
        ("expected tokens per target run", out["expected_tokens"], "eq. (1)"),
        ("walltime speedup", out["speedup"], "eq. (5), Thm 3.8"),
        ("operations factor", out["ops_factor"], "Thm 3.11"),
        ("optimal integer γ", g_opt, "argmax eq. (5)"),
        ("speedup at optimal γ", out["speedup_at_optimal_gamma"], "eq. (5)"),
        ("oracle tokens per run", out["oracle_expected_tokens"], "1/(1-α)"),
        ("draft acceptance rate (vLLM)", out["draft_acceptance_rate"], "α(1-α^γ)/((1-α)γ)"),
    ])


def roofline_cmd(
    hardware: str = typer.Option(..., "--hardware", help="hardware profile name, or a path to a TOML file"),
    model: str = typer.Option(..., "--model", help="model profile name, or a path to a TOML file or a Hugging "
                                                   "Face config folder"),
    batch: int = typer.Option(1, "--batch"),
    positions: str = typer.Option("1,2,4,8,16,32,64,128,256", "--positions", help="comma-separated"),
    context: int = typer.Option(0, "--context", help="KV entries already cached"),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel degree (divides the heads; at most the profile's max_tp: "
                                                      "tp_domain_chips, else chips_per_node)"),
    stack: Optional[str] = typer.Option(None, "--stack", help=STACK_HELP),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Pass time against positions for one model on one device (the paper's Figure 1)."""
    from specsim.cost.power import pass_power_w
    from specsim.cost.roofline import check_fits
    from specsim.setup.deployment import Deployment

    check_range("--batch", batch, lo=1, hi=MAX_BATCH)
    check_range("--context", context, lo=0, hi=MAX_CONTEXT)
    check_range("--tp", tp, lo=1, hi=1024)
    pos = int_list(positions, "--positions", hi=MAX_CONTEXT)
    dep = Deployment.resolve(hardware, model, stack=stack, tp=tp)
    hw, m, st, cm = dep.hardware, dep.target, dep.stack, dep.cost_models[0]
    check_fits([cm], batch, context + max(pos))
    passes = [cm.pass_cost(batch, p, context).as_dict() for p in pos]
    for p in passes:  # the chip's modelled draw while this pass runs (specsim/cost/power.py)
        p["power_w_per_chip"] = pass_power_w(hw, p["bytes"], p["flops"], p["time_s"], m.dtype)
    ridge = cm.ridge_positions(batch, context)
    measured = hasattr(cm, "parts")  # a measured-kernel stack: each pass's parts and the engine's term apart
    for p in passes if measured else ():
        p["parts_s"] = cm.parts(batch, p["positions"], context)
        p["kernel_time_s"] = p["time_s"] - p["parts_s"]["engine"]
    if json_out:
        extra = {"engine_term_source": cm.pass_source} if measured else {}
        emit_json({"hardware": hw.name, "model": m.name, "stack": st.name, "mode": cm.mode, "batch": batch,
                   "context": context, "tp": tp, "ridge_positions": ridge, "passes": passes, **extra})
        return
    if measured:
        return _measured_table(m, hw, st, batch, context, tp, passes, cm.pass_source)
    table(f"{m.name} on {hw.name} ({st.name}, batch {batch}, context {context}, tp {tp})",
          ["positions", "time ms", "GB moved", "GFLOP", "bound", "× one position", "W per chip"],
          [(p["positions"], p["time_s"] * 1e3, p["bytes"] / 1e9, p["flops"] / 1e9, p["bound"],
            p["time_s"] / passes[0]["time_s"], p["power_w_per_chip"]) for p in passes],
          caption=f"compute-bound from {ridge} positions per sequence; W per chip: the power model's draw while the "
                  f"pass runs (specsim/cost/power.py)")


def _measured_table(m, hw, st, batch, context, tp, passes, source) -> None:
    """`roofline` on a measured stack: each pass's kernels by part, and the engine's own term separately."""
    from specsim.cost.kernels_db import PARTS

    table(f"{m.name} on {hw.name} ({st.name} measured kernels, batch {batch}, context {context}, tp {tp})",
          ["positions", "time ms", "kernels ms"] + [f"{x} ms" for x in PARTS] + ["engine ms", "× one position"],
          [(p["positions"], p["time_s"] * 1e3, p["kernel_time_s"] * 1e3, *(p["parts_s"][x] * 1e3 for x in PARTS),
            p["parts_s"]["engine"] * 1e3, p["time_s"] / passes[0]["time_s"]) for p in passes],
          caption=f"kernels: aiconfigurator-core's measured {st.name} kernels (specsim/cost/kernels_db.py); "
                  f"engine: the engine's own time per step ({source})")


def compare_cmd(
    out: str = typer.Option("results/compare", "--out", help="folder for compare.csv and compare.png (default "
                            "results/compare, gitignored; experiments/compare.py regenerates the committed copy)"),
    simulate: bool = typer.Option(True, "--simulate/--no-simulate", help="run the engine beside eq. (5)"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Main job: T5 drafts for T5-XXL on TPU v4 and Llama drafts on H100, as a table and a plot."""
    from pathlib import Path

    from specsim.studies.compare import compare, plot
    from specsim.sweep.dir import check_out_dir

    d = Path(out)
    check_out_dir(d)  # a file / under a file / unwritable --out: one line, before any work
    df = compare(simulate=simulate, progress=not json_out)
    d.mkdir(parents=True, exist_ok=True)
    df.to_csv(d / "compare.csv", index=False)
    plot(df, d / "compare.png")
    if json_out:
        emit_json({"rows": df.to_dict(orient="records"), "csv": str(d / "compare.csv"), "png": str(d / "compare.png")})
        return
    cols = ["study", "draft", "alpha", "c", "gamma", "speedup_eq5"] + (["speedup_sim"] if simulate else []) \
        + ["rank_in_study"]
    table("Draft comparison (batch 1, c derived from the profiles; α: paper or assumed)",
          ["study", "draft", "α", "c", "γ*", "eq. (5)"] + (["simulated"] if simulate else []) + ["rank"],
          df[cols].itertuples(index=False),
          caption=f"written: {d / 'compare.csv'}, {d / 'compare.png'}")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
    app.command("profiles")(profiles_cmd)
    app.command("theory")(theory_cmd)
    app.command("roofline")(roofline_cmd)
