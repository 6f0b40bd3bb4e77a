"""experiments/vllm_logit_positions.py: decodes of N requests against one request's N-token chunks, by N."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
vlp = pytest.importorskip("vllm_logit_positions")


def test_decodes_and_chunks_are_told_apart_and_compared_at_the_same_tokens():
    steps = ([{"ctx_requests": 0, "gen_requests": 4, "ctx_tokens": 0, "gen_tokens": 4, "time_s": t} for t in (.2, .3)]
             + [{"ctx_requests": 1, "gen_requests": 0, "ctx_tokens": 4, "gen_tokens": 0, "time_s": .15}]
             + [{"ctx_requests": 1, "gen_requests": 3, "ctx_tokens": 4, "gen_tokens": 3, "time_s": 9.9}])  # mixed
    dec, chunk = {}, {}
    vlp.split(steps, dec, chunk)
    assert dec == {4: [.2, .3]} and chunk == {4: [.15]}
    assert vlp.lines(dec, chunk)[1] == "  4: 0.250 s (2) | 0.150 s (1) | +0.100 s"
