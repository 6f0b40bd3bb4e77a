"""Issue 21 part 6, measured and planned inputs: plan TOML, calibrate-power CSVs, vLLM bench JSON and /metrics,
step tables (bad_inputs_newer.py's conventions). "@reader ..." cases run experiments/bad_inputs_readers.py, the
command line of the vLLM readers, with the venv's Python."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bad_inputs_more import PLAN

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "vllm"
DEEP = 20_000
SIM_D = ("simulate --hardware a100-80gb --target llama-3.1-8b --draft llama-3.2-1b --requests 2 --output-len 8 "
         "--json --alpha 0.7")
SLO = "[slo]\nttft_p90_s = 1.0\ntpot_p90_s = 0.05\n"
OPTION = '[[option]]\nname = "h100"\nhardware = "h100-sxm"\n'
PLAN_VARIANTS = {
    "pl_slo_ms": ("tpot_p90_s = 0.05", "tpot_p90_ms = 50"), "pl_slo_str": ("tpot_p90_s = 0.05", 'tpot_p90_s = "0.05"'),
    "pl_slo_bool": ("tpot_p90_s = 0.05", "tpot_p90_s = true"), "pl_slo_nan": ("tpot_p90_s = 0.05", "tpot_p90_s = nan"),
    "pl_slo_inf": ("tpot_p90_s = 0.05", "tpot_p90_s = inf"), "pl_slo_zero": ("tpot_p90_s = 0.05", "tpot_p90_s = 0"),
    "pl_slo_p100": ("ttft_p90_s", "ttft_p100_s"), "pl_slo_empty": (SLO, "[slo]\n"),
    "pl_slo_unknown": ("tpot_p90_s = 0.05", "tpot_p90_s = 0.05\ncolour = 1"),
    "pl_slo_list": ("tpot_p90_s = 0.05", "tpot_p90_s = [0.05]"),
    "pl_rates_empty": ("rates = [4]", "rates = []"), "pl_rates_zero": ("rates = [4]", "rates = [0]"),
    "pl_rates_neg": ("rates = [4]", "rates = [-4]"), "pl_rates_nan": ("rates = [4]", "rates = [nan]"),
    "pl_rates_inf": ("rates = [4]", "rates = [inf]"), "pl_rates_dup": ("rates = [4]", "rates = [4, 4]"),
    "pl_rates_scalar": ("rates = [4]", "rates = 4"), "pl_rates_bool": ("rates = [4]", "rates = [true]"),
    "pl_rates_huge": ("rates = [4]", "rates = [1e9]"),
    "pl_rates_deep": ("rates = [4]", "rates = " + "[" * DEEP + "4" + "]" * DEEP),
    "pl_maxrep_big": ("max_replicas = 4", "max_replicas = 2000"),
    "pl_maxrep_str": ("max_replicas = 4", 'max_replicas = "4"'),
    "pl_maxrep_float": ("max_replicas = 4", "max_replicas = 4.5"),
    "pl_warm_eq": ("duration_s = 5", "duration_s = 5\nwarmup_s = 5"),
    "pl_warm_gt": ("duration_s = 5", "duration_s = 5\nwarmup_s = 60"),
    "pl_warm_neg": ("duration_s = 5", "duration_s = 5\nwarmup_s = -1"),
    "pl_warm_nan": ("duration_s = 5", "duration_s = 5\nwarmup_s = nan"),
    "pl_dur0": ("duration_s = 5", "duration_s = 0"), "pl_dur_neg": ("duration_s = 5", "duration_s = -5"),
    "pl_minreq0": ("min_requests = 20", "min_requests = 0"),
    "pl_search_unknown": ("max_replicas = 4", "max_replicas = 4\ncolour = 1"),
    "pl_option_unknown": ('hardware = "h100-sxm"', 'hardware = "h100-sxm"\ncolour = 1'),
    "pl_option_dup": (OPTION, OPTION + OPTION), "pl_option_noname": ('name = "h100"', 'name = ""'),
    "pl_gammas65": ("gammas = [3]", "gammas = [65]"), "pl_gammas_str": ("gammas = [3]", 'gammas = ["3"]'),
    "pl_gammas_float": ("gammas = [3]", "gammas = [3.5]"), "pl_gammas_neg": ("gammas = [3]", "gammas = [-3]"),
    "pl_policies_bogus": ("gammas = [3]", 'gammas = [3]\npolicies = ["bogus"]'),
    "pl_policies_str": ("gammas = [3]", 'gammas = [3]\npolicies = "bands"'),
    "pl_drafts_alpha": ("gammas = [3]", 'gammas = [3]\ndrafts = ["llama-3.2-1b:1.5"]'),
    "pl_drafts_unknown": ("gammas = [3]", 'gammas = [3]\ndrafts = ["no-such-model:0.7"]'),
    "pl_drafts_abc": ("gammas = [3]", 'gammas = [3]\ndrafts = ["llama-3.2-1b:abc"]'),
    "pl_drafts_head70": ("gammas = [3]", 'gammas = [3]\ndrafts = ["eagle3-llama-3.1-70b:0.7"]'),
    "pl_no_target": ('target = "llama-3.1-8b"\n', ""), "pl_no_alpha": ("alpha = 0.7\n", ""),
    "pl_tp_list": ('hardware = "h100-sxm"', 'hardware = "h100-sxm"\ntp = [1, 3]'),
    "pl_hw_unknown": ('hardware = "h100-sxm"', 'hardware = "no-such-gpu"'),
    "pl_fixed_warm": ("alpha = 0.7", "alpha = 0.7\nslo_warmup_s = 1"),
    "pl_fixed_speccfg": ("alpha = 0.7", "alpha = 0.7\nspeculative_config = '{\"method\": '"),
    "pl_fixed_tree": ("alpha = 0.7", "alpha = 0.7\nspeculative_token_tree = '{\"dynamic\": 16, \"top_k\": 4}'"),
    "pl_fixed_block": ("alpha = 0.7", 'alpha = 0.7\nengine_profile = "vllm-v1"\nblock_size = 7'),
    "pl_fixed_slo": ("alpha = 0.7", "alpha = 0.7\nslo_tpot = 50"),
}
PWFIX = REPO / "tests" / "fixtures" / "power" / "mlenergy_v3_lm_arena_chat.csv"  # calibrate-power's example
PW_ROW = "llama-3.1-8b,h100-sxm,1,8,8.0,486,0.455,1070,cuda-graphs"  # the row the variants change
PW_HEAD = "model,gpu,tp,max_num_seqs,batch,w_per_gpu,j_per_token,tok_s,stack"
POWER_ROW = {"pw_w_neg": "-486,0.455", "pw_w_nan": "nan,0.455", "pw_w_inf": "inf,0.455", "pw_w_bool": "true,0.455",
             "pw_w_text": "high,0.455", "pw_w_over_tdp": "2000,1.869", "pw_w_below_idle": "10,0.009",
             "pw_w_absurd": "50000,46.7", "pw_j_mismatch": "486,4.55", "pw_j_neg": "486,-0.455",
             "pw_blank": ","}
POWER_LINE = {"pw_tok0": PW_ROW.replace(",1070,", ",0,"), "pw_tok_neg": PW_ROW.replace(",1070,", ",-1070,"),
              "pw_tp3": PW_ROW.replace(",1,8,", ",3,8,").replace("486,0.455", "486,1.363"),
              "pw_tp_float": PW_ROW.replace(",1,8,", ",1.5,8,"),
              "pw_model_unknown": PW_ROW.replace("llama-3.1-8b", "no-such-model"),
              "pw_gpu_unknown": PW_ROW.replace("h100-sxm", "no-such-gpu"),
              "pw_batch0": PW_ROW.replace(",8,8.0,", ",8,0,"), "pw_batch_neg": PW_ROW.replace(",8,8.0,", ",8,-8,"),
              "pw_batch_over_cap": PW_ROW.replace(",8,8.0,", ",8,80.0,"),
              "pw_stack_unknown": PW_ROW.replace("cuda-graphs", "no-such-stack"),
              "pw_extra_cell": PW_ROW + ",1"}


def _power_files(d: Path) -> None:
    text = PWFIX.read_text(encoding="utf-8")
    assert PW_ROW in text and PW_HEAD in text
    for name, cells in POWER_ROW.items():
        (d / f"{name}.csv").write_text(text.replace(PW_ROW, PW_ROW.replace("486,0.455", cells)), encoding="utf-8")
    for name, line in POWER_LINE.items():
        (d / f"{name}.csv").write_text(text.replace(PW_ROW, line), encoding="utf-8")
    rows = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    cut = {"pw_no_w": lambda h: h not in ("w_per_gpu", "j_per_token"), "pw_no_model": lambda h: h != "model",
           "pw_no_tok": lambda h: h != "tok_s", "pw_no_stack": lambda h: h != "stack"}
    head = rows[0].split(",")
    for name, keep in cut.items():
        cols = [i for i, h in enumerate(head) if keep(h)]
        (d / f"{name}.csv").write_text("\n".join(",".join(r.split(",")[i] for i in cols) for r in rows) + "\n")
    (d / "pw_header.csv").write_text(PW_HEAD + "\n")
    (d / "pw_empty.csv").write_text("")
    (d / "pw_one_row.csv").write_text(PW_HEAD + "\n" + PW_ROW + "\n")
    (d / "pw_b200_only.csv").write_text("\n".join([rows[0]] + [r for r in rows if ",b200," in r]) + "\n")
    (d / "pw_dup_cols.csv").write_text(PW_HEAD + ",tok_s\n" + PW_ROW + ",1070\n")
    (d / "pw_old_format.csv").write_text("utilisation,watts\n0.1,133\n0.5,385\n0.9,637\n")


ST = "tokens,time_s\n"
STEPS = {"st_good": ST + "1,0.010\n64,0.012\n512,0.030\n2048,0.100\n",
         "st_falling": ST + "1,0.010\n64,0.012\n512,0.030\n2048,0.010\n",
         "st_falling_mid": ST + "1,0.030\n64,0.012\n512,0.030\n2048,0.100\n",
         "st_neg": ST + "1,-0.010\n64,0.012\n", "st_zero": ST + "1,0\n64,0.012\n", "st_dup": ST + "1,0.01\n1,0.012\n",
         "st_unsorted": ST + "64,0.012\n1,0.010\n", "st_tok0": ST + "0,0.010\n64,0.012\n", "st_one": ST + "1,0.01\n",
         "st_no_time": "tokens\n1\n64\n", "st_str": ST + "1,fast\n64,0.012\n", "st_nan": ST + "1,nan\n64,0.012\n",
         "st_inf": ST + "1,0.01\n64,inf\n", "st_tok_float": ST + "1.5,0.01\n64,0.012\n",
         "st_bool": ST + "1,true\n64,0.012\n", "st_empty": "", "st_header": ST, "st_hour": ST + "1,3600\n64,3601\n"}
MH = "kind,batch,positions,context,time_s\n"
_GRID = [(p, c) for p in (1, 4) for c in (0, 512)]
MEASURED = {"mk_caps": MH + "".join(f"DECODE,1,{p},{c},{0.01 + 0.001 * p}\n" for p, c in _GRID),
            "mk_pos_falling": MH + "".join(f"decode,1,{p},{c},{0.02 - 0.002 * p}\n" for p, c in _GRID),
            "mk_ctx_falling": MH + "".join(f"decode,1,{p},{c},{0.02 - c * 1e-5}\n" for p, c in _GRID),
            "mk_prefill_neg": MH + "".join(f"decode,1,{p},{c},{0.01 + 0.001 * p}\n" for p, c in _GRID)
            + "prefill,1,128,0,-0.05\n"}


def _bench_variants() -> dict[str, object]:
    base = json.loads((FIX / "bench_detailed.json").read_text(encoding="utf-8"))

    def v(**kw):
        d = json.loads(json.dumps(base))
        for k, f in kw.items():
            f(d) if callable(f) else d.__setitem__(k, f)
        return d
    n = len(base["ttfts"])
    return {
        "bj_ttft_neg": v(ttfts=lambda d: d["ttfts"].__setitem__(0, -0.5)),
        "bj_lat_lt_ttft": v(latencies=lambda d: d["latencies"].__setitem__(0, d["ttfts"][0] / 2)),
        "bj_ttft_str": v(ttfts=[str(t) for t in base["ttfts"]]),
        "bj_ttft_bool": v(ttfts=lambda d: d["ttfts"].__setitem__(0, True)),
        "bj_ttft_nan": v(ttfts=lambda d: d["ttfts"].__setitem__(0, float("nan"))),
        "bj_ttft_null": v(ttfts=lambda d: d["ttfts"].__setitem__(0, None)),
        "bj_out_neg": v(output_lens=lambda d: d["output_lens"].__setitem__(0, -32)),
        "bj_out_float": v(output_lens=lambda d: d["output_lens"].__setitem__(0, 32.5)),
        "bj_out_zero": v(output_lens=lambda d: d["output_lens"].__setitem__(0, 0)),
        "bj_in_neg": v(input_lens=lambda d: d["input_lens"].__setitem__(0, -19)),
        "bj_dur0": v(duration=0), "bj_dur_str": v(duration="80.5"), "bj_dur_short": v(duration=1.0),
        "bj_no_dur": v(duration=lambda d: d.pop("duration")), "bj_no_itls": v(itls=lambda d: d.pop("itls")),
        "bj_len_mismatch": v(ttfts=base["ttfts"][:-1]), "bj_list": [base],
        "bj_itl_neg": v(itls=lambda d: d["itls"][0].__setitem__(0, -0.1)),
        "bj_itl_scalar": v(itls=lambda d: d["itls"].__setitem__(0, 0.5)),
        "bj_itl_too_many": v(itls=lambda d: d["itls"].__setitem__(0, d["itls"][0] * 2)),  # 62 gaps, 32 tokens
        "bj_lat_sum": v(latencies=lambda d: d["latencies"].__setitem__(0, d["latencies"][0] + 10.0)),  # != TTFT + ΣITL
        "bj_errors_str": v(errors="none"), "bj_all_errors": v(errors=["timeout"] * n),
        "bj_empty": v(input_lens=[], output_lens=[], ttfts=[], itls=[], latencies=[], start_times=[], errors=[],
                      completed=0)}


def _metrics_variants() -> dict[str, str]:
    t = (FIX / "metrics_spec.txt").read_text(encoding="utf-8")
    acc = 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 751.0'
    drafts = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 324.0'
    pos0 = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 281.0'
    for s in (acc, drafts, pos0):
        assert s in t, s
    return {"mt_acc_gt_draft": t.replace(acc, acc.replace("751.0", "1500.0")),
            "mt_neg": t.replace(drafts, drafts.replace("324.0", "-324.0")),
            "mt_nan": t.replace(acc, acc.replace("751.0", "NaN")),
            "mt_inf": t.replace(acc, acc.replace("751.0", "+Inf")),
            "mt_garbage": "hello world\n%%% not prometheus\n{}\n", "mt_empty": "",
            "mt_pos_label": t.replace(pos0, pos0.replace('position="0"', 'position="x"')),
            "mt_pos_gt_drafts": t.replace(pos0, pos0.replace("281.0", "400.0")),
            "mt_pos_sum": t.replace(acc, acc.replace("751.0", "700.0")),
            "mt_drafts0": t.replace(drafts, drafts.replace("324.0", "0.0")),
            "mt_pos_rising": t.replace(pos0, pos0.replace("281.0", "200.0")).replace("751.0", "670.0"),
            "mt_half": t.replace("324.0", "162.0").replace("972.0", "486.0").replace("751.0", "375.0")
            .replace("281.0", "140.0").replace("250.0", "125.0").replace("220.0", "110.0")}


def measured_files(d: Path, exe: str) -> None:
    for name, (a, b) in PLAN_VARIANTS.items():
        assert a in PLAN, a
        (d / f"{name}.toml").write_text(PLAN.replace(a, b, 1), encoding="utf-8")
    (d / "pl_no_search.toml").write_text(PLAN.split("[search]")[0] + SLO)
    (d / "pl_option_empty.toml").write_text("option = []\n" + PLAN.replace(OPTION, ""))
    (d / "pl_good_warm.toml").write_text(PLAN.replace("duration_s = 5", "duration_s = 5\nwarmup_s = 1"))
    (d / "pl_latin1.toml").write_bytes(PLAN.replace('"h100"', '"h100 \xe9"').encode("latin-1"))
    (d / "pl_binary.toml").write_bytes(b"\x00\xff\xfe\x89PNG")
    (d / "pl_infeasible.toml").write_text(PLAN.replace("rates = [4]", "rates = [64]").replace(
        "max_replicas = 4", "max_replicas = 1").replace("tpot_p90_s = 0.05", "tpot_p90_s = 0.005"))
    (d / "ctx_plan.toml").write_text(PLAN.replace("output_len = 16", "output_len = 16\nprompt_len = 200000"))
    (d / "paste_plan.toml").write_text(PLAN.replace('draft = "llama-3.2-1b"', "speculative_config = "
                                                    "'{\"model\": \"meta-llama/Llama-3.2-1B-Instruct\"}'"))
    (d / "paste_plan_bad.toml").write_text(PLAN.replace('draft = "llama-3.2-1b"', "speculative_config = "
                                                        "'{\"model\": \"someone/unknown-model-7B\"}'"))
    sweep = ('name = "n"\n[fixed]\nhardware = "a100-80gb"\ntarget = "llama-3.1-8b"\nalpha = 0.7\nrequests = 2\n'
             'output_len = 8\n')
    (d / "ctx_sweep.toml").write_text(sweep + 'draft = "llama-3.2-1b"\nprompt_len = 200000\n[grid]\ngamma = [1, 2]\n')
    (d / "paste_sweep_bad.toml").write_text(sweep + "speculative_config = '{\"model\": \"someone/unknown-model-"
                                            "7B\", \"num_speculative_tokens\": 3}'\n[grid]\nseed = [0, 1]\n")
    (d / "paste_sweep.toml").write_text(sweep + "speculative_config = '{\"model\": \"meta-llama/Llama-3.2-1B-"
                                        "Instruct\", \"num_speculative_tokens\": 3}'\n[grid]\nseed = [0, 1]\n")
    for name, line in SWEEP_FIXED.items():
        (d / f"{name}.toml").write_text(SWEEP + line + "\n[grid]\nseed = [0, 1]\n", encoding="utf-8")
    _power_files(d)
    for group, suffix in ((STEPS, ".csv"), (MEASURED, ".csv"), (_metrics_variants(), ".txt")):
        for name, text in group.items():
            (d / f"{name}{suffix}").write_text(text, encoding="utf-8")
    for name, obj in _bench_variants().items():
        (d / f"{name}.json").write_text(json.dumps(obj), encoding="utf-8")
    good = (FIX / "bench_detailed.json").read_text(encoding="utf-8")
    (d / "bj_cut.json").write_text(good[: len(good) // 2])
    (d / "bj_deep.json").write_text('{"duration": 1, "ttfts": ' + "[" * DEEP + "]" * DEEP + "}")
    (d / "bj_binary.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (d / "mt_binary.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    subprocess.run([exe, "calibrate-power", str(PWFIX), "--hardware", "h100-sxm", "--out",
                    str(d / "pw_written.toml"), "--json"], capture_output=True, timeout=120, cwd=d / "work")


SWEEP = ('name = "n"\n[fixed]\nhardware = "a100-80gb"\ntarget = "llama-3.1-8b"\nalpha = 0.7\nrequests = 2\n'
         'output_len = 8\ndraft = "llama-3.2-1b"\n')
SWEEP_FIXED = {  # the newer fields in a sweep spec's [fixed] (a sweep's [grid] then varies the seed)
    "sw_topk_str": "speculative_token_tree = '[[0],[1]]'\ntree_topk_acceptance = [0.7, \"0.85\"]",
    "sw_topk_bool": "speculative_token_tree = '[[0],[1]]'\ntree_topk_acceptance = [0.7, true]",
    "sw_tree_int": "speculative_token_tree = 5", "sw_tree_deep": "speculative_token_tree = '" + "[" * DEEP + "'",
    "sw_bands_str": 'policy = "bands"\nbatch = 4\nnum_speculative_tokens_per_batch_size = [[1, 8, "4"]]',
    "sw_method": 'method = "eagle4"', "sw_block7": 'engine_profile = "vllm-v1"\nblock_size = 7',
    "sw_budget": 'engine_profile = "vllm-v1"\nmax_num_seqs = 8\nmax_num_batched_tokens = 4',
    "sw_draft_tp": "draft_tp = 8", "sw_speccfg_str": "speculative_config = '{\"method\": \"eagle3\", "
    "\"num_speculative_tokens\": \"3\"}'", "sw_speccfg_table": "speculative_config = 3",
    "sw_ctx": "prompt_len = 200000", "sw_slo_tpot": "slo_tpot = 50",
}


def _plans() -> list[tuple]:
    names = list(PLAN_VARIANTS) + ["pl_no_search", "pl_option_empty", "pl_latin1", "pl_binary"]
    c = [("plan-file", f"plan {n}", f"plan {{d}}/{n}.toml --out {{d}}/work/{n} --workers 1 --json", "error")
         for n in names]
    c += [("plan-file", "plan --workers 0", "plan {d}/plan_good.toml --out {d}/work/pw0 --workers 0 --json", "error"),
          ("plan-file", "plan a folder", "plan {d}/hw_dir --out {d}/work/pdir --workers 1 --json", "error"),
          ("plan-file", "plan with no feasible answer (says so, or refuses)", "plan {d}/pl_infeasible.toml --out "
           "{d}/work/pinf --workers 1 --json", "either"),
          *[("sweep-newer", f"sweep {n}", f"sweep {{d}}/{n}.toml --out {{d}}/work/{n} --workers 1 --no-plots "
             "--json", "error") for n in SWEEP_FIXED],
          ("good", "plan with a warm-up under its duration", "plan {d}/pl_good_warm.toml --out {d}/work/pgood2 "
           "--workers 1 --json", "good")]
    return c


def _power() -> list[tuple]:
    names = list(POWER_ROW) + list(POWER_LINE) + ["pw_no_w", "pw_no_model", "pw_no_tok", "pw_header", "pw_empty",
                                                    "pw_one_row", "pw_b200_only", "pw_dup_cols", "pw_old_format"]
    c = [("power-csv", f"calibrate-power {n}", f"calibrate-power {{d}}/{n}.csv --hardware h100-sxm --json", "error")
         for n in names]
    good = f"calibrate-power {PWFIX} --hardware h100-sxm"
    c += [("power-csv", "calibrate-power absurd row written with --out", "calibrate-power {d}/pw_w_absurd.csv "
           "--hardware h100-sxm --out {d}/work/pw_absurd.toml --json", "error"),
          *[("power-csv", f"calibrate-power {n}", f"calibrate-power {{d}}/{n} --hardware h100-sxm --json", "error")
            for n in ("binary.csv", "dir.csv", "absent.csv")],
          ("power-csv", "calibrate-power --out .csv", f"{good} --out {{d}}/work/pw.csv --json", "error"),
          ("power-csv", "calibrate-power --out a folder", f"{good} --out {{d}}/hw_dir --json", "error"),
          ("power-csv", "calibrate-power --hardware unknown", good.replace("h100-sxm", "no-such-gpu") + " --json",
           "error"),
          ("power-csv", "calibrate-power --hardware without tdp_w", good.replace("h100-sxm", "cpu-2core") + " --json",
           "error"),
          ("power-csv", "calibrate-power --prompt-len 0", f"{good} --prompt-len 0 --json", "error"),
          ("power-csv", "calibrate-power --output-len -1", f"{good} --output-len -1 --json", "error"),
          ("power-csv", "calibrate-power --stack unknown (rows without a stack)", "calibrate-power "
           "{d}/pw_no_stack.csv --hardware h100-sxm --stack no-such-stack --json", "error"),
          ("good", "calibrate-power with --out", f"{good} --out {{d}}/work/pw_good.toml --json", "good"),
          ("good", "simulate on a profile calibrate-power wrote", SIM_D.replace("a100-80gb", "{d}/pw_written.toml"),
           "good")]
    return c


def _readers() -> list[tuple]:
    either = ("bj_all_errors", "bj_empty")  # no completed request: saying so (completed 0) is an answer too
    c = [("bench-json", f"bench {n}", f"@reader bench {{d}}/{n}.json", "either" if n in either else "error")
         for n in list(_bench_variants()) + ["bj_cut", "bj_deep", "bj_binary"]]
    c += [("bench-json", "bench absent", "@reader bench {d}/absent.json", "error"),
          ("bench-json", "bench a folder", "@reader bench {d}/hw_dir", "error")]
    c += [("metrics-text", f"metrics {n}", f"@reader metrics {{d}}/{n}.txt", "error")
          for n in list(_metrics_variants()) + ["mt_binary"] if n != "mt_half"]
    c += [("metrics-text", "metrics counters going backwards", "@reader metrics {d}/mt_half.txt --before "
           f"{FIX}/metrics_spec.txt", "error"),
          ("good", "bench JSON (fixture)", f"@reader bench {FIX}/bench_detailed.json", "good"),
          ("good", "/metrics (fixture), plain run before", f"@reader metrics {FIX}/metrics_spec.txt --before "
           f"{FIX}/metrics_plain.txt", "good")]
    return c


def _steps() -> list[tuple]:
    v1 = f"{SIM_D} --engine-profile vllm-v1"
    c = [("step-table", f"--step-table-target {n}", f"{v1} --step-table-target {{d}}/{n}.csv", "error")
         for n in STEPS if n != "st_good"]
    c += [("step-table", f"--step-table-draft {n}", f"{v1} --step-table-target {{d}}/st_good.csv "
           f"--step-table-draft {{d}}/{n}.csv", "error") for n in ("st_falling", "st_neg")]
    c += [("step-table", f"--step-table-target {n}", f"{v1} --step-table-target {{d}}/{n}", "error")
          for n in ("binary.csv", "dir.csv", "absent.csv")]
    c += [("step-table", f"--measured-target {n}", f"{SIM_D} --measured-target {{d}}/{n}.csv", "error")
          for n in MEASURED]
    c += [("good", "vllm-v1 with a step table", f"{v1} --step-table-target {{d}}/st_good.csv", "good"),
          ("good", "hf-assisted with a measured table", f"{SIM_D} --engine-profile hf-assisted --measured-target "
           "{d}/m_good.csv", "good")]
    return c


def measured_cases() -> list[tuple]:
    return _plans() + _power() + _readers() + _steps()
