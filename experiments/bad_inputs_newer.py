"""Issue 21 part 6: the inputs added with methods, trees, heads, MoE, plans, power, the vLLM readers, step tables
and the engine arguments, held to the bar of experiments/bad_inputs.py (same classes, same conventions as
bad_inputs_cases.py: {d} is the scratch folder; "error" = exit 2 with one line, "good" = exit 0 with one JSON
object, "either" = a clear refusal or an answer).

Files are written by `newer_files(d)`; the cases of the CLI surfaces are here, those of the measured inputs (plans,
power CSVs, bench JSON, /metrics, step tables) in bad_inputs_measured.py. Kinds start with the surface they test;
`NEWER_PARTS` says which part of issue 21 owns each.
"""

from __future__ import annotations

from pathlib import Path

from bad_inputs_measured import measured_cases, measured_files

REPO = Path(__file__).resolve().parents[1]
NEWER_PARTS = {"spec-json": "21.3", "bands": "21.3", "tree-json": "21.3", "head": "21.3", "moe-file": "21.3",
               "engine-arg": "21.3", "sweep-newer": "21.3", "context": "21.3", "pasted": "21.4", "plan-file": "21.2",
               "power-csv": "21.3",
               "bench-json": "21.3", "metrics-text": "21.3", "step-table": "21.3"}
SIM = "simulate --hardware a100-80gb --target llama-3.1-8b --requests 2 --output-len 8 --json --alpha 0.7"
SIM_D = SIM + " --draft llama-3.2-1b"
CD = ("choose-draft --hardware a100-80gb --target llama-3.1-8b --batch 1,2 --requests 4 --output-len 8 --gamma-max 3 "
      "--json")
DEEP = 20_000  # nesting depth of the recursion cases (issue 21: 20,000 `[`)
L1B, E3 = "meta-llama/Llama-3.2-1B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def esc(text: str) -> str:
    """A literal for a case's command line, which is .format()-ed with {d} and {port}."""
    return text.replace("{", "{{").replace("}", "}}")


def label(text: str, n: int = 70) -> str:
    """A case name for a value: as given, or its start and its length when long (the 20,000-deep nests)."""
    return text if len(text) <= n else f"{text[:24]}... ({len(text):,} chars)"


def q(text: str) -> str:
    """A JSON value as one shell word (none of these values holds a single quote)."""
    assert "'" not in text
    return "'" + esc(text) + "'"


# --- files ----------------------------------------------------------------------------------------------------------

HEAD_VARIANTS = {  # eagle3-llama-3.1-8b.toml with one line changed
    "hd_dmodel_8192": ("d_model = 4096", "d_model = 8192"), "hd_dmodel_str": ("d_model = 4096", 'd_model = "4096"'),
    "hd_layers0": ("n_layers = 1 ", "n_layers = 0 "), "hd_layers_true": ("n_layers = 1 ", "n_layers = true "),
    "hd_method": ('method = "eagle3"', 'method = "eagle5"'), "hd_target70": ('target = "llama-3.1-8b"',
                                                                            'target = "llama-3.1-70b"'),
    "hd_target_unknown": ('target = "llama-3.1-8b"', 'target = "no-such-model"'),
    "hd_no_vocab": ("lm_head_vocab = 32000", ""), "hd_extra": ('method = "eagle3"', 'method = "eagle3"\ncolour = 1'),
    "hd_attn9": ("attention_input_multiple = 2", "attention_input_multiple = 9"),
    "hd_dtype": ('dtype = "bf16"', 'dtype = "fp7"'), "hd_kv7": ("n_kv_heads = 8", "n_kv_heads = 7"),
    "hd_headdim": ("head_dim = 128", "head_dim = 1024"), "hd_vocab_big": ("lm_head_vocab = 32000",
                                                                         "lm_head_vocab = 200000"),
    "hd_dff_float": ("d_ff = 14336", "d_ff = 14336.5"), "hd_nan": ("d_ff = 14336", "d_ff = nan"),
    "hd_broken": ("n_layers = 1 ", "n_layers == 1 "), "hd_medusa": ('method = "eagle3"', 'method = "medusa"'),
    "hd_shares_str": ("shares_lm_head = false", 'shares_lm_head = "no"'),
}
NGRAM_VARIANTS = {"ng_host0": ("host_s_per_request = 20e-6", "host_s_per_request = 0"),
                  "ng_host_neg": ("host_s_per_request = 20e-6", "host_s_per_request = -1e-6"),
                  "ng_host_str": ("host_s_per_request = 20e-6", 'host_s_per_request = "2e-5"'),
                  "ng_host_inf": ("host_s_per_request = 20e-6", "host_s_per_request = inf")}
MOE_VARIANTS = {  # mixtral-8x7b.toml with one line changed
    "mx_k0": ("experts_per_token = 2", "experts_per_token = 0"), "mx_e0": ("n_experts = 8", "n_experts = 0"),
    "mx_e_float": ("n_experts = 8", "n_experts = 8.0"), "mx_e_huge": ("n_experts = 8", "n_experts = 1e9"),
    "mx_kv_dtype": ('dtype = "bf16"', 'dtype = "bf16"\nkv_dtype = "fp7"'),
    "mx_kv_dtype_int": ('dtype = "bf16"', 'dtype = "bf16"\nkv_dtype = 8'),
    "mx_load_len": ("experts_per_token = 2", "experts_per_token = 2\nexpert_load = [1.0, 2.0]"),
    "mx_load_zero": ("experts_per_token = 2", "experts_per_token = 2\nexpert_load = [0, 1, 1, 1, 1, 1, 1, 1]"),
    "mx_load_str": ("experts_per_token = 2", 'experts_per_token = 2\nexpert_load = "uniform"'),
    "mx_load_nan": ("experts_per_token = 2", "experts_per_token = 2\nexpert_load = [nan, 1, 1, 1, 1, 1, 1, 1]"),
    "mx_dense_all": ("experts_per_token = 2", "experts_per_token = 2\nn_dense_layers = 32"),
    "mx_shared_neg": ("experts_per_token = 2", "experts_per_token = 2\nn_shared_experts = -1"),
    "mx_edff0": ("experts_per_token = 2", "experts_per_token = 2\nexpert_d_ff = 0"),
    "mx_active_gt": ("published_active_params = 12.9e9", "published_active_params = 93e9"),
    "mx_active_bool": ("published_active_params = 12.9e9", "published_active_params = true"),
}
DENSE_MOE_VARIANTS = {"dn_only_e": ("n_layers = 32", "n_layers = 32\nn_experts = 8"),
                      "dn_edff": ("n_layers = 32", "n_layers = 32\nexpert_d_ff = 1024"),
                      "dn_mla_part": ("n_layers = 32", "n_layers = 32\nkv_lora_rank = 512")}


def _variants(d: Path, base: Path, variants: dict) -> None:
    text = base.read_text(encoding="utf-8")
    for name, (a, b) in variants.items():
        assert a in text, (base, a)
        (d / f"{name}.toml").write_text(text.replace(a, b, 1), encoding="utf-8")


def newer_files(d: Path, exe: str) -> None:
    heads, models = REPO / "model_profiles" / "heads", REPO / "model_profiles"
    _variants(d, heads / "eagle3-llama-3.1-8b.toml", HEAD_VARIANTS)
    _variants(d, heads / "ngram.toml", NGRAM_VARIANTS)
    _variants(d, models / "mixtral-8x7b.toml", MOE_VARIANTS)
    _variants(d, models / "llama-3.1-8b.toml", DENSE_MOE_VARIANTS)
    (d / "hd_good.toml").write_text((heads / "eagle3-llama-3.1-8b.toml").read_text(encoding="utf-8"))
    (d / "mx_good.toml").write_text((models / "mixtral-8x7b.toml").read_text(encoding="utf-8"))
    (d / "hd_empty.toml").write_text("")
    (d / "hd_deep.toml").write_text('method = "eagle3"\nd_model = ' + "[" * DEEP + "]" * DEEP + "\n")
    (d / "ctx_arrivals.csv").write_text("arrival_s,prompt_len,output_len\n0.0,200000,8\n")
    measured_files(d, exe)


# --- cases ----------------------------------------------------------------------------------------------------------

def _spec_json() -> list[tuple]:
    bad = ['{"method": "eagle4"}', '{"method": ""}', '{"method": null}', '{"method": 3}', '{"method": ["eagle3"]}',
           '{"method": {"name": "eagle3"}}', '{"method": true}',
           '{"method": "eagle3", "num_speculative_tokens": "3"}',
           '{"method": "eagle3", "num_speculative_tokens": true}',
           '{"method": "eagle3", "num_speculative_tokens": 3.0}', '{"method": "eagle3", "num_speculative_tokens": 0}',
           '{"method": "eagle3", "num_speculative_tokens": -1}', '{"method": "eagle3", "num_speculative_tokens": 65}',
           '{"method": "eagle3", "num_speculative_tokens": NaN}',
           '{"method": "eagle3", "num_speculative_tokens": 1e400}',
           '{"method": "eagle3", "num_speculative_tokens": 99999999999999999999999}',
           '{"method": "eagle3", "num_speculative_tokens": [3]}',
           '{"method": "eagle3", "model": "eagle3-llama-3.1-70b"}', '{"method": "mtp", "model": "eagle3-llama-3.1-8b"}',
           '{"method": "eagle3", "model": "llama-3.2-1b"}', '{"method": "draft_model", "model": "eagle3-llama-3.1-8b"}',
           '{"method": "eagle3", "model": 5}', '{"method": "eagle3", "model": ""}', '{"method": "eagle3", "model": []}',
           '{"method": "draft_model", "model": "llama-3.1-70b"}',
           '{"method": "ngram", "prompt_lookup_min": 0}', '{"method": "ngram", "prompt_lookup_max": "4"}',
           '{"method": "ngram", "prompt_lookup_min": 2.5}', '{"method": "eagle3", "prompt_lookup_min": 2}',
           '{"method": "eagle3", "draft_tensor_parallel_size": 3}',
           '{"method": "eagle3", "draft_tensor_parallel_size": 8}',
           '{"method": "eagle3", "draft_tensor_parallel_size": true}',
           '{"method": "eagle3", "draft_tensor_parallel_size": 0}',
           '{"method": "eagle3", "speculative_token_tree": 5}', '{"method": "eagle3", "speculative_token_tree": true}',
           'null', '"eagle3"', '3', 'true', '[]', '', '{"method": "eagle3"} trailing', '{"method": "eagle3",}',
           '{"method": "eagle3"', "[" * DEEP, '{"a": ' * DEEP, '[{"a": ' * (DEEP // 2)]
    c = [("spec-json", f"--speculative-config {label(t)}", f"{SIM} --speculative-config {q(t)}", "error") for t in bad]
    c += [("spec-json", "--method eagle3 with a draft model", f"{SIM_D} --method eagle3", "error"),
          ("spec-json", "--method medusa: no shipped head for the target", f"{SIM} --method medusa", "error"),
          ("spec-json", "--method ngram with an EAGLE-3 head", f"{SIM} --method ngram --draft eagle3-llama-3.1-8b",
           "error"),
          ("spec-json", "--method draft_model without --draft", f"{SIM} --method draft_model", "error"),
          ("spec-json", "--method EAGLE3 (case)", f"{SIM} --method EAGLE3", "error"),
          ("spec-json", "--method eagle3 --draft-tp 8 with --tp 1", f"{SIM} --method eagle3 --draft-tp 8", "error")]
    cd_bad = ['{"method": "eagle3", "alpha": "0.8"}', '{"method": "eagle3", "alpha": true}',
              '{"method": "eagle3", "alpha": 1.5}', '{"method": "eagle3", "alpha": NaN}', '{"method": "eagle3"}',
              '{"method": "eagle3", "alpha": 0.8, "trace": "absent.csv"}',
              '{"method": "eagle3", "trace": "absent.csv"}', '{"method": "eagle3", "alpha": [0.8]}',
              '{"method": "eagle3", "alpha": 0.8, "tree_topk_acceptance": [0.8, 0.9]}',
              '{"method": "eagle3", "alpha": 0.8, "colour": 1}', "[" * DEEP]
    c += [("spec-json", f"choose-draft --speculative-config {label(t)}", f"{CD} --speculative-config {q(t)}", "error")
          for t in cd_bad]
    c += [("good", "simulate --speculative-config eagle3 γ 3",
           f"{SIM} --speculative-config " + q('{"method": "eagle3", "num_speculative_tokens": 3}'), "good"),
          ("good", "simulate --speculative-config ngram", f"{SIM} --speculative-config "
           + q('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'),
           "good"),
          ("good", "choose-draft --speculative-config eagle3 α 0.8",
           f"{CD} --speculative-config " + q('{"method": "eagle3", "alpha": 0.8}'), "good")]
    return c


def _bands() -> list[tuple]:
    base = f"{SIM_D} --policy bands --batch 4 --num-speculative-tokens-per-batch-size"
    bad = ['[[1,8,"4"]]', "[[1,8,true]]", "[[1,8,4.5]]", "[[1,8,-1]]", "[[1,8,65]]", "[[1,8]]", "[1,8,4]",
           "[[1,4,3],[3,8,2]]", "[[8,1,3]]", "[[4,8,2],[1,3,3]]", "[[0,8,3]]", "[[1,8,NaN]]", "[]", '"[[1,8,4]]"',
           "[[1,8,4]", "[" * DEEP, "[[-1,8,4]]", "[[1,1e9,4]]"]
    c = [("bands", f"bands {label(t)}", f"{base} {q(t)}", "error") for t in bad]
    c += [("bands", "bands without --policy bands", f"{SIM_D} --num-speculative-tokens-per-batch-size "
           f"{q('[[1,8,3]]')}", "error"),
          ("good", "simulate --policy bands with bands", f"{base} {q('[[1,2,3],[3,8,2]]')}", "good")]
    return c


def _trees() -> list[tuple]:
    topk = " --tree-topk-acceptance '[0.7,0.85,0.9]'"
    bad_tree = ['{"dynamic": 16, "top_k": 4}', '{"dynamic": 0, "top_k": 2}', '{"dynamic": 16, "top_k": 0}',
                '{"dynamic": 2000, "top_k": 2}', '{"dynamic": 16, "top_k": 2, "depth": 0}',
                '{"dynamic": 16, "top_k": 2, "depth": 65}', '{"dynamic": "16"}', '{"dynamic": 16, "colour": 1}',
                '{"dynamic": true, "top_k": 2}', '{"widths": []}', '{"widths": [0]}', '{"widths": [2, "2"]}',
                '{"widths": [2, true]}', '{"widths": [2.0, 2]}', '{"widths": [1025]}', '{"widths": 2}',
                '{"widths": [2], "dynamic": 4}', "[]", "[[]]", "[[-1]]", "[[0],[0]]", "[[0,1]]", "[[0],[true]]",
                "[[0],[0.0]]", "[[1024]]", "[(0,), (1,)", "__import__(\"os\").getcwd()", "[[0],[1]] x", '"[[0]]"',
                "[" * DEEP, "[(" * (DEEP // 2),
                "[" + ",".join("[" + ",".join(["0"] * k) + "]" for k in range(1, 66)) + "]"]
    c = [("tree-json", f"tree {label(t)}", f"{SIM_D} --speculative-token-tree {q(t)}{topk}", "error")
         for t in bad_tree]
    c += [("tree-json", "dynamic tree without top-k acceptance",
           f"{SIM_D} --speculative-token-tree " + q('{"dynamic": 16, "top_k": 4}'), "error"),
          ("tree-json", "dynamic tree without top_k or top-k acceptance",
           f"{SIM_D} --speculative-token-tree " + q('{"dynamic": 8}'), "error")]
    tree = f"{SIM_D} --speculative-token-tree '[[0],[1],[0,0]]' --tree-topk-acceptance"
    bad_topk = ['[0.7,"0.85"]', "[0.7,true]", "[true,0.85]", "[0.7,NaN]", "[0.7,Infinity]", "[0.7,1.5]",
                "[0.7,-0.1]", "[0.8,0.7]", "[0.6,0.8]", "[]", "0.7", "[[0.7,0.8]]", '{"a": 1}', "[0.7]",
                "[0.7,null]", '"[0.7,0.85]"', "[" * DEEP, "[0.7,0.85" , "[0.7," * 3 + "0.9]"]
    c += [("tree-json", f"top-k {label(t)}", f"{tree} {q(t)}", "error") for t in bad_topk]
    chain = f"{SIM_D} --speculative-token-tree '[[0],[1]]' --tree-topk-acceptance '[0.7,0.85]'"
    c += [("tree-json", "tree with --method ngram", chain.replace("--draft llama-3.2-1b", "--method ngram"),
           "error"),
          ("tree-json", "tree with --engine-profile vllm-v1", f"{chain} --engine-profile vllm-v1", "error"),
          ("tree-json", "tree with --engine-profile hf-assisted", f"{chain} --engine-profile hf-assisted", "error"),
          ("tree-json", "tree with --draft-catchup", f"{chain} --draft-catchup", "error"),
          ("tree-json", "tree with --policy optimal", f"{chain} --policy optimal", "error"),
          ("tree-json", "tree with --gamma 5", f"{chain} --gamma 5", "error"),
          ("tree-json", "tree with --lenience on a trace", SIM_D.replace(" --alpha 0.7", "")
           + " --trace {d}/t_good.csv --lenience 0.5 --speculative-token-tree '[[0],[1]]'", "error"),
          ("tree-json", "wide tree on a β-only trace", SIM_D.replace(" --alpha 0.7", "")
           + " --trace {d}/t_good.csv --speculative-token-tree '[[0],[1]]'", "error"),
          ("tree-json", "tree rank 3 with top-k of 2", f"{SIM_D} --speculative-token-tree '[[0],[3]]' "
           "--tree-topk-acceptance '[0.7,0.85]'", "error"),
          ("good", "tree as vLLM's tuple literal", f"{SIM_D} --speculative-token-tree '[(0,), (1,), (0, 0)]'"
           " --tree-topk-acceptance '[0.7,0.85]'", "good"),
          ("good", "dynamic tree with top-k acceptance", f"{SIM_D} --speculative-token-tree "
           + q('{"dynamic": 8, "top_k": 2, "depth": 4}') + " --tree-topk-acceptance '[0.7,0.85]'", "good"),
          ("good", "EAGLE-3 head with a widths tree", f"{SIM} --method eagle3 --speculative-token-tree "
           + q('{"widths": [2, 1]}') + " --tree-topk-acceptance '[0.7,0.85]'", "good")]
    return c


def _heads_moe() -> list[tuple]:
    c = [("head", f"--draft {n}", f"{SIM} --method eagle3 --draft {{d}}/{n}.toml", "error")
         for n in list(HEAD_VARIANTS) + ["hd_empty", "hd_deep"]]
    c += [("head", f"--method ngram --draft {n}", f"{SIM} --method ngram --draft {{d}}/{n}.toml", "error")
          for n in NGRAM_VARIANTS]
    c += [("head", "EAGLE-3 8B head on the 70B", "simulate --hardware h100-sxm --target llama-3.1-70b --tp 4 "
           "--method eagle3 --draft eagle3-llama-3.1-8b --alpha 0.7 --requests 2 --output-len 8 --json", "error"),
          ("head", "MTP 8B head on Llama 3.2 3B", "simulate --hardware h100-sxm --target llama-3.2-3b --method mtp "
           "--draft mtp-llama-3.1-8b --alpha 0.7 --requests 2 --output-len 8 --json", "error"),
          ("head", "--draft a head file that is a folder", f"{SIM} --method eagle3 --draft {{d}}/hw_dir", "error"),
          ("head", "--draft a head file that is absent", f"{SIM} --method eagle3 --draft {{d}}/absent_head.toml",
           "error"),
          ("good", "EAGLE-3 head as a file", f"{SIM} --method eagle3 --draft {{d}}/hd_good.toml", "good")]
    moe = ("simulate --hardware h100-sxm --target {{d}}/{n}.toml --draft llama-3.2-1b --tp 2 --alpha 0.7 "
           "--requests 2 --output-len 8 --json")
    c += [("moe-file", f"--target {n}", moe.format(n=n), "error")
          for n in list(MOE_VARIANTS) + list(DENSE_MOE_VARIANTS)]
    c += [("moe-file", "Qwen3-30B-A3B --tp 3", moe.format(n="x").replace("{d}/x.toml", "qwen3-30b-a3b")
           .replace("--tp 2", "--tp 3"), "error"),
          ("good", "MoE profile as a file", moe.format(n="mx_good"), "good"),
          ("good", "Qwen3-30B-A3B", moe.format(n="x").replace("{d}/x.toml", "qwen3-30b-a3b"), "good")]
    return [(k, n, a.replace("{{d}}", "{d}"), e) for k, n, a, e in c]


def _engine_args() -> list[tuple]:
    v1 = f"{SIM_D} --engine-profile vllm-v1"
    bad = ["--block-size 7", "--block-size 0", "--block-size -16", "--block-size 3", "--block-size 1000000",
           "--block-size 24", "--max-num-seqs 8 --max-num-batched-tokens 4", "--max-num-batched-tokens 0",
           "--max-num-seqs 0", "--max-num-seqs 1000000000", "--num-gpu-blocks 0", "--num-gpu-blocks -1",
           "--num-gpu-blocks 1 --prompt-len 4096", "--long-prefill-token-threshold -1", "--draft-tp 8",
           "--tp 4 --draft-tp 2", "--draft-tp 0", "--max-num-batched-tokens 1e3", "--block-size 16.0"]
    c = [("engine-arg", f"vllm-v1 {a}", f"{v1} {a}", "error") for a in bad]
    c += [("engine-arg", "--slo-tpot 50 (no unit)", f"{SIM_D} --slo-tpot 50", "error"),
          ("engine-arg", "--slo-ttft 3600 (no unit)", f"{SIM_D} --slo-ttft 3600", "error"),
          ("engine-arg", "--gamma 3.0 (an integer flag, a fraction's spelling)", f"{SIM_D} --gamma 3.0", "error"),
          ("engine-arg", "--tp 1.0", f"{SIM_D} --tp 1.0", "error"),
          ("engine-arg", "--max-num-seqs 8.0", f"{v1} --max-num-seqs 8.0", "error"),
          ("engine-arg", "--slo-tpot-s -1", f"{SIM_D} --slo-tpot-s -1", "error"),
          ("engine-arg", "--slo-tpot-s nan", f"{SIM_D} --slo-tpot-s nan", "error"),
          ("engine-arg", "--slo-ttft-s 0", f"{SIM_D} --slo-ttft-s 0", "error"),
          ("engine-arg", "--slo-warmup-s -1", f"{SIM_D} --slo-warmup-s -1", "error"),
          ("engine-arg", "--max-num-seqs under the specsim profile", f"{SIM_D} --max-num-seqs 8", "error"),
          ("engine-arg", "--block-size under hf-assisted", f"{SIM_D} --engine-profile hf-assisted --block-size 32",
           "error"),
          ("engine-arg", "hf-assisted at --batch 4", f"{SIM_D} --engine-profile hf-assisted --batch 4", "error"),
          ("engine-arg", "--engine-profile vllm-v2", f"{SIM_D} --engine-profile vllm-v2", "error"),
          ("engine-arg", "--draft-kv-budget-tokens 0", f"{SIM_D} --draft-kv-budget-tokens 0", "error"),
          ("engine-arg", "--draft-kv-budget-tokens with ngram", f"{SIM} --method ngram --draft-kv-budget-tokens 64",
           "error"),
          ("engine-arg", "--draft-tp 8 with --tp 1 (specsim profile)", f"{SIM_D} --draft-tp 8", "error"),
          ("engine-arg", "--draft-tp 2 with --tp 4", f"{SIM_D} --tp 4 --draft-tp 2", "error"),
          ("engine-arg", "--step-table-target without vllm-v1", f"{SIM_D} --step-table-target {{d}}/st_good.csv",
           "error"),
          ("good", "vllm-v1 with vLLM-valid engine arguments", f"{v1} --tp 2 --draft-tp 1 --block-size 32 "
           "--max-num-seqs 8 --max-num-batched-tokens 512", "good"),
          ("good", "--draft-tp 1 with --tp 8", f"{SIM_D} --tp 8 --draft-tp 1", "good")]
    return c


def _context_pasted() -> list[tuple]:
    c = [("context", "prompt 200k on a 128k model", f"{SIM_D} --prompt-len 200000", "error"),
         ("context", "prompt + output over 128k", f"{SIM_D} --prompt-len 130000 --output-len 2000", "error"),
         ("context", "Llama 7B (2k context) prompt 2000 + output 100", "simulate --hardware a100-80gb --target "
          "llama-7b --draft llama-68m --alpha 0.7 --requests 2 --prompt-len 2000 --output-len 100 --json", "error"),
         ("context", "arrivals row over the context", f"{SIM_D} --arrivals {{d}}/ctx_arrivals.csv", "error"),
         ("context", "choose-draft --prompt-len 200000", f"{CD} --draft llama-3.2-1b:0.7 --prompt-len 200000",
          "error"),
         ("context", "sweep with prompt_len 200000", "sweep {d}/ctx_sweep.toml --out {d}/work/ctx_sweep --workers 1 "
          "--no-plots --json", "error"),
         ("context", "plan with prompt_len 200000", "plan {d}/ctx_plan.toml --out {d}/work/ctx_plan --workers 1 "
          "--json", "error"),
         ("context", "vllm-v1 prompt 200k", f"{SIM_D} --engine-profile vllm-v1 --prompt-len 200000", "error"),
         ("context", "lognormal lengths whose tail passes a 2k context (clip or refuse)", "simulate --hardware "
          "a100-80gb --target llama-7b --draft llama-68m --alpha 0.7 --requests 50 --prompt-len 1000 --output-len 100 "
          "--length-dist lognormal --json", "either"),
         ("good", "TPU v4 slice: roofline chinchilla-70b --tp 16", "roofline --hardware tpu-v4 --model chinchilla-70b "
          "--tp 16 --json", "good"),
         ("good", "TPU v4 slice: simulate chinchilla-70b --tp 16", "simulate --hardware tpu-v4 --target chinchilla-70b "
          "--draft chinchilla-4b-draft --tp 16 --alpha 0.7 --requests 2 --output-len 8 --json", "good"),
         ("good", "Llama 7B prompt 1000 + output 100", "simulate --hardware a100-80gb --target llama-7b --draft "
          "llama-68m --alpha 0.7 --requests 2 --prompt-len 1000 --output-len 100 --json", "good")]
    pasted_bad = ['{"model": "someone/unknown-model-7B", "num_speculative_tokens": 3}',
                  '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", "num_speculative_tokens": 3}',
                  f'{{"model": "{L1B}", "num_speculative_tokens": 3, "max_model_len": "4096"}}',
                  f'{{"model": "{L1B}", "num_speculative_tokens": 3, "disable_by_batch_size": 0}}',
                  f'{{"model": "{L1B}", "num_speculative_tokens": 3, "disable_by_batch_size": 1}}',
                  f'{{"model": "{L1B}", "num_speculative_tokens": 3, "disable_by_batch_size": "4"}}',
                  f'{{"model": "{L1B}", "num_speculative_tokens": 3, "disable_by_batch_size": true}}',
                  f'{{"model": "{L1B}", "num_speculative_tokens": 3, "quantization": "fp8"}}',
                  f'{{"model": "{L1B}", "num_speculative_tokens": 3, "colour": 1}}',
                  '{"model": "meta-llama/", "num_speculative_tokens": 3}',
                  '{"model": "https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct"}',
                  '{"model": "../../etc/passwd", "num_speculative_tokens": 3}']
    c += [("pasted", f"pasted {label(t, 120)}", f"{SIM} --speculative-config {q(t)}", "error") for t in pasted_bad]
    c += [("pasted", "sweep with an unknown repo id", "sweep {d}/paste_sweep_bad.toml --out {d}/work/paste_sweep_bad "
           "--workers 1 --no-plots --json", "error"),
          ("pasted", "plan with an unknown repo id", "plan {d}/paste_plan_bad.toml --out {d}/work/paste_plan_bad "
           "--workers 1 --json", "error"),
          ("pasted", "choose-draft with an unknown repo id", f"{CD} --speculative-config "
           + q('{"model": "someone/unknown-model-7B", "alpha": 0.7}'), "error"),
          ("pasted", "--draft given as a repo id (map or refuse)", f"{SIM} --draft {L1B}", "either"),
          ("pasted", "--target given as a repo id (map or refuse)", SIM.replace("llama-3.1-8b",
                                                                                "meta-llama/Llama-3.1-8B-Instruct")
           + " --draft llama-3.2-1b", "either")]
    good = f'{{"model": "{L1B}", "num_speculative_tokens": 3}}'
    c += [("good", "pasted HF repo id: simulate", f"{SIM} --speculative-config {q(good)}", "good"),
          ("good", "pasted EAGLE-3 repo id: simulate", f"{SIM} --speculative-config "
           + q(f'{{"method": "eagle3", "model": "{E3}", "num_speculative_tokens": 3}}'), "good"),
          ("good", "pasted with max_model_len and disable_by_batch_size", f"{SIM} --batch 4 --speculative-config "
           + q(f'{{"model": "{L1B}", "num_speculative_tokens": 3, "max_model_len": 4096, '
               '"disable_by_batch_size": 4}'), "good"),
          ("good", "pasted HF repo id: choose-draft", f"{CD} --speculative-config "
           + q(f'{{"model": "{L1B}", "alpha": 0.7}}'), "good"),
          ("good", "pasted choose-draft with num_speculative_tokens", f"{CD} --speculative-config "
           + q(f'{{"model": "{L1B}", "num_speculative_tokens": 3, "alpha": 0.7}}'), "good"),
          ("good", "pasted HF repo id: sweep", "sweep {d}/paste_sweep.toml --out {d}/work/paste_sweep --workers 1 "
           "--no-plots --json", "good"),
          ("good", "pasted HF repo id: plan", "plan {d}/paste_plan.toml --out {d}/work/paste_plan --workers 1 --json",
           "good")]
    return c


def newer_cases() -> list[tuple]:
    return (_spec_json() + _bands() + _trees() + _heads_moe() + _engine_args() + _context_pasted()
            + measured_cases())
