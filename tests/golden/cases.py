"""The golden points: exact `specsim ... --json` output for fixed seeds, one per engine path.

Each case is a command line (run from the repository root). `regen.py` writes tests/golden/<name>.json;
tests/test_golden.py fails on any drift. A change that alters a golden output on purpose regenerates it and says
why in its commit message.
"""

G = "tests/golden/inputs"
LLAMA_H100 = ["--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b"]
QWEN_CPU = ["--hardware", "cpu-2core", "--target", "qwen2.5-coder-1.5b", "--draft", "qwen2.5-coder-0.5b"]

CASES: dict[str, list[str]] = {
    # batch 1, the vectorized fast path
    "batch1_fast": ["simulate", "--hardware", "a100-80gb", "--target", "llama-7b", "--draft", "llama-68m",
                    "--alpha", "0.8", "--gamma", "3", "--engine", "fast", "--requests", "32", "--json"],
    # the SimPy engine at batch 8, closed loop
    "simpy_batch8": ["simulate", *LLAMA_H100, "--alpha", "0.7", "--gamma", "4", "--batch", "8",
                     "--requests", "32", "--json"],
    # open loop: Poisson arrivals, uniform lengths, two replicas
    "poisson": ["simulate", *LLAMA_H100, "--alpha", "0.7", "--gamma", "3", "--rate", "20", "--max-batch", "16",
                "--requests", "64", "--length-dist", "uniform", "--replicas", "2", "--seed", "3", "--json"],
    # a recorded β trace driving the adaptive heuristic policy
    "trace_heuristic": ["simulate", *QWEN_CPU, "--trace", f"{G}/trace_qwen.csv", "--policy", "heuristic",
                        "--gamma", "3", "--requests", "16", "--prompt-len", "64", "--output-len", "32",
                        "--json"],
    # encoder-decoder target on a TPU (cross-attention KV)
    "t5_encdec": ["simulate", "--hardware", "tpu-v4", "--target", "t5-v1_1-xxl", "--draft", "t5-v1_1-small",
                  "--alpha", "0.75", "--gamma", "3", "--batch", "4", "--requests", "16", "--json"],
    # measured cost mode (tables instead of the roofline), with the draft's catch-up pass priced
    "measured": ["simulate", *LLAMA_H100, "--alpha", "0.8", "--gamma", "4", "--measured-target",
                 f"{G}/measured_target.csv", "--measured-draft", f"{G}/measured_draft.csv", "--draft-catchup",
                 "--requests", "16", "--json"],
    # the vLLM V1 engine profile from measured step tables
    "vllm_profile": ["simulate", *QWEN_CPU, "--alpha", "0.85", "--gamma", "3", "--batch", "4",
                     "--engine-profile", "vllm-v1", "--block-size", "128", "--max-num-batched-tokens", "2048",
                     "--step-table-target", f"{G}/step_table_target.csv", "--step-table-draft",
                     f"{G}/step_table_draft.csv", "--requests", "16", "--prompt-len", "100", "--output-len", "32",
                     "--json"],
    # Hugging Face assisted generation at batch 1
    "hf_assisted": ["simulate", *QWEN_CPU, "--alpha", "0.8", "--gamma", "4", "--engine-profile", "hf-assisted",
                    "--requests", "8", "--prompt-len", "64", "--output-len", "32", "--json"],
    # choose-draft: two candidates, three batch sizes
    "choose_draft": ["choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                     "llama-3.2-1b:0.7", "--draft", "llama-3.2-3b:0.8", "--batch", "1,8,32", "--gamma-max", "4",
                     "--requests", "32", "--json"],
}

# sweep rows: this spec run in one process; the golden file holds results.parquet's rows (point ids dropped)
SWEEP_SPEC = """
name = "golden"
[fixed]
hardware = "h100-sxm"
target = "llama-3.1-8b"
requests = 16
[grid]
draft = ["llama-3.2-1b:0.7"]
gamma = [2, 4]
batch = [1, 4]
[run]
point_fn = "specsim.simulate:run"
plots = false
"""
