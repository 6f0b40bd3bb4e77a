"""The issue 15 / 16 part of experiments/bad_inputs.py's cases: plans, --speculative-config, trees, MoE profiles
(the conventions of bad_inputs_cases.py: {d} is the scratch folder, "error" / "good" as there)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIM_A = ("simulate --hardware a100-80gb --target llama-3.1-8b --draft llama-3.2-1b --requests 2 --output-len 8 --json "
         "--alpha 0.7")


PLAN = ('[fixed]\ntarget = "llama-3.1-8b"\ndraft = "llama-3.2-1b"\nalpha = 0.7\noutput_len = 16\n'
        '[[option]]\nname = "h100"\nhardware = "h100-sxm"\n'
        '[search]\nrates = [4]\ngammas = [3]\nmax_replicas = 4\nduration_s = 5\nmin_requests = 20\n'
        '[slo]\nttft_p90_s = 1.0\ntpot_p90_s = 0.05\n')
PLAN_VARIANTS = {"p_unknown_top": ("[fixed]", "colour = 1\n[fixed]"),
                 "p_rate_fixed": ("alpha = 0.7", "alpha = 0.7\nrate = 4"),
                 "p_slo_key": ("ttft_p90_s", "ttft_p95_s"), "p_slo_neg": ("ttft_p90_s = 1.0", "ttft_p90_s = -1.0"),
                 "p_gamma0": ("gammas = [3]", "gammas = [0]"), "p_rates_desc": ("rates = [4]", "rates = [8, 4]"),
                 "p_rates_str": ("rates = [4]", 'rates = ["4"]'),
                 "p_tp3": ('hardware = "h100-sxm"', 'hardware = "h100-sxm"\ntp = 3'),
                 "p_no_hw": ('hardware = "h100-sxm"\n', ""),
                 "p_no_option": ('[[option]]\nname = "h100"\nhardware = "h100-sxm"\n', ""),
                 "p_drafts": ("gammas = [3]", 'gammas = [3]\ndrafts = ["llama-3.2-1b"]'),
                 "p_maxrep0": ("max_replicas = 4", "max_replicas = 0"),
                 "p_duration": ("duration_s = 5", "duration_s = inf"),
                 "p_no_slo": ("[slo]\nttft_p90_s = 1.0\ntpot_p90_s = 0.05\n", ""),
                 "p_policy": ("gammas = [3]", 'gammas = [3]\npolicies = ["oracle"]'),
                 "p_broken": ("[search]", "[search"), "p_alpha_str": ("alpha = 0.7", 'alpha = "0.7"')}


def _plan_moe_files(d: Path) -> None:
    (d / "plan_good.toml").write_text(PLAN)
    for name, (a, b) in PLAN_VARIANTS.items():
        (d / f"{name}.toml").write_text(PLAN.replace(a, b, 1))
    mix = (REPO / "model_profiles" / "mixtral-8x7b.toml").read_text()
    for name, (a, b) in {"moe_k_gt_e": ("experts_per_token = 2", "experts_per_token = 9"),
                         "moe_no_k": ("experts_per_token = 2", ""),
                         "moe_k_float": ("experts_per_token = 2", "experts_per_token = 2.0"),
                         "moe_e_str": ("n_experts = 8", 'n_experts = "8"')}.items():
        (d / f"{name}.toml").write_text(mix.replace(a, b, 1))


def _esc(text: str) -> str:
    """A literal for the case's command line, which is .format()-ed with {d} and {port}."""
    return text.replace("{", "{{").replace("}", "}}")


def _cases_plan_methods() -> list[tuple]:
    """Issue 15 / 16 inputs: plans, --speculative-config, trees, MoE profiles."""
    c = [("plan", f"plan {n}", f"plan {{d}}/{n}.toml --out {{d}}/work/{n} --workers 1 --json", "error")
         for n in PLAN_VARIANTS]
    c += [("plan", "plan missing file", "plan {d}/absent.toml --out {d}/work/pa --json", "error"),
          ("plan", "plan --out is a file", "plan {d}/plan_good.toml --out {d}/plan_good.toml --json", "error")]
    sc = SIM_A.replace("--draft llama-3.2-1b ", "")
    configs = ('{"method": "eagle3", "num_speculative_tokens": 0}', '{"method": "lookahead"}',
               '{"method": "eagle3", "x": 1}', '{"method": ', '[1]', '{"method": "draft_model"}',
               '{"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2}')
    c += [("method", f"--speculative-config {t}", f"{sc} --speculative-config '{_esc(t)}'", "error") for t in configs]
    eagle3 = _esc('{"method": "eagle3", "num_speculative_tokens": 3}')
    c += [("method", "eagle3 on a target without a shipped head",
           "simulate --hardware h100-sxm --target llama-3.2-1b --method eagle3 --alpha 0.7 --json", "error"),
          ("method", "--gamma and num_speculative_tokens disagree", f"{sc} --gamma 2 --speculative-config '{eagle3}'",
           "error"),
          ("method", "--draft-tp 3", f"{SIM_A} --draft-tp 3", "error")]
    trees = ("--speculative-token-tree '[[0],[1]'", "--speculative-token-tree '[[0],[1]]'",
             "--speculative-token-tree '[[0,0]]'",
             "--speculative-token-tree '[[0],[1]]' --tree-topk-acceptance '[0.7,0.6]'",
             "--speculative-token-tree '[[0],[0,0]]' --gamma 4", "--tree-topk-acceptance '[0.7,0.8]'",
             """--speculative-token-tree '{"widths": [64, 64]}'""",
             "--speculative-token-tree '[[0],[1]]' --tree-topk-acceptance '[0.7,0.8]' --policy oracle")
    c += [("tree", f"tree {t}", f"{SIM_A} {_esc(t)}", "error") for t in trees]
    c += [("moe", f"--target {n}", f"{SIM_A} --target {{d}}/{n}.toml", "error")
          for n in ("moe_k_gt_e", "moe_no_k", "moe_k_float", "moe_e_str")]
    widths = _esc('{"widths": [2, 2]}')
    c += [("good", "plan", "plan {d}/plan_good.toml --out {d}/work/good_plan --workers 1 --json", "good"),
          ("good", "simulate --method eagle3", f"{sc} --method eagle3", "good"),
          ("good", "simulate a tree", f"{SIM_A} --speculative-token-tree '{widths}' --tree-topk-acceptance "
           "'[0.7,0.8]'", "good"),
          ("good", "simulate Mixtral tp 2", "simulate --hardware h100-sxm --target mixtral-8x7b --draft llama-3.2-1b "
           "--tp 2 --alpha 0.7 --requests 2 --output-len 8 --json", "good")]
    return c
