"""Readers of reference engines outputs (vLLM): torch-free, tested on committed fixtures."""
