"""The executor's CPU kernels (specsim.executor.kernels): same logits, the right kernel by row count, scoped to the
source that asked, and `auto` choosing only what this model and machine support."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specsim.errors import ConfigError  # noqa: E402
from specsim.executor import kernels as K  # noqa: E402
from specsim.executor.sampling import SamplingConfig  # noqa: E402
from specsim.executor.sources import HFSource  # noqa: E402
from specsim.executor.speculative import PlainDecoder, SpeculativeDecoder  # noqa: E402

from tiny_models import tiny_pair  # noqa: E402

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):  # conftest's fixture, applied to every test here
    yield


def _count_linear(monkeypatch) -> list:
    calls: list = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@needs_onednn
def test_packed_linear_keeps_the_outputs_and_takes_over_from_four_rows(monkeypatch):
    lin = torch.nn.Linear(48, 40)
    x = torch.randn(1, 9, 48, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ref = [lin(x[:, :r]) for r in range(1, 10)]
        assert K.use_packed(lin) == 1
        calls = _count_linear(monkeypatch)
        for r in range(1, 10):
            calls.clear()
            y = lin(x[:, :r])
            assert y.shape == ref[r - 1].shape and torch.allclose(y, ref[r - 1], atol=1e-5)
            assert len(calls) == (1 if r < K.PACKED_MIN_ROWS else 0), r   # 1-3 rows: stock F.linear


@needs_onednn
def test_packed_kernels_are_scoped_to_their_source_and_keep_greedy_outputs(monkeypatch):
    """HFSource(kernels='packed') runs oneDNN for its own passes of >= 4 rows; the same model called directly (how
    HF's generate runs it) stays on F.linear; greedy speculative decoding still reproduces plain greedy decoding."""
    target, draft = tiny_pair(seed=4)
    stock_tokens = SpeculativeDecoder(target, draft, 4, SamplingConfig(0.0)).generate([1, 2, 3, 4, 5], 20).tokens
    packed = HFSource(target.model, "tiny", kernels="packed")
    assert packed.kernels == "packed" and packed.describe()["kernels"] == "packed"
    calls = _count_linear(monkeypatch)
    ids = torch.tensor([3, 1, 4, 1, 5])
    with torch.inference_mode():
        packed.forward(ids, packed.new_state(), keep=5)
        assert calls == []
        target.model(input_ids=ids.view(1, -1))
        assert len(calls) > 0
        calls.clear()
        packed.forward(ids[:1], packed.new_state())     # one row: stock
        assert len(calls) > 0
    monkeypatch.undo()
    plain = PlainDecoder(packed, SamplingConfig(0.0)).generate([1, 2, 3, 4, 5], 20).tokens
    spec = SpeculativeDecoder(packed, draft, 4, SamplingConfig(0.0)).generate([1, 2, 3, 4, 5], 20).tokens
    assert spec == plain == stock_tokens


def test_auto_picks_packed_only_where_it_runs_and_fits(monkeypatch):
    target, _ = tiny_pair(seed=5)
    model = target.model
    expect = "packed" if K.packed_supported(model) else "stock"
    assert K.resolve_kernels("auto", model) == expect
    monkeypatch.setattr(K, "_available_bytes", lambda: 1000)          # the copy would not fit
    assert K.resolve_kernels("auto", model) == "stock"
    bf16 = transformers.LlamaForCausalLM(model.config).to(torch.bfloat16)
    monkeypatch.setattr(K, "_available_bytes", lambda: None)
    assert K.resolve_kernels("auto", bf16) == "stock"
    with pytest.raises(ConfigError, match="float32 model on the CPU"):
        K.resolve_kernels("packed", bf16)
    with pytest.raises(ConfigError, match="unknown kernels"):
        K.resolve_kernels("fast", model)
    assert K.resolve_kernels("stock", bf16) == "stock"
