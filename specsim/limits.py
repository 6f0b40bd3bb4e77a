"""Every bound that more than one module states, stated once (ground floor: imports nothing).

SimConfig's fields take their ranges from here, and the modules that must agree with them (the γ policies' cap,
the bands policy's largest live batch, a replayed arrivals file's lengths and rows, vLLM's speculative config
read into fields, a token tree's depth) read the same names. Change a bound here and every surface follows.
"""

from __future__ import annotations

GAMMA_CAP = 64  # largest draft length any policy may use (SimConfig.gamma's maximum; a token tree's depth)
MAX_BATCH = 4096  # SimConfig.batch / max_batch: no replica's live batch is larger
MAX_TP = 1024  # tensor-parallel degree of the target, and of the draft (draft_tp)
MAX_REPLICAS = 1024  # engine replicas behind the router
MAX_LENGTH_TOKENS = 10_000_000  # a request's prompt_len / output_len (and a draft KV budget)
MAX_REQUESTS = 10_000_000  # requests in one run (and rows of a replayed arrivals file)
MAX_NUM_SEQS = 65536  # vllm-v1: running requests per step
MAX_BATCHED_TOKENS = 1 << 22  # vllm-v1: token budget per step (and a prefill chunk cap)
