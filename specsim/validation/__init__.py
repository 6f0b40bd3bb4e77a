"""Meeting reality, torch-free: replaying a measured run through the engine (`replay`) and reading a reference
engine's outputs — vLLM's logs, /metrics and bench JSON (`vllm_outputs`)."""
