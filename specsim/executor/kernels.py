"""CPU matmul kernels for the executor's passes: which GEMM a Linear layer runs, by how many rows it is fed.

Why this exists: with fp32 on a 2-core CPU a pass is weight streaming, so 1..8 positions should cost about the
same, but the BLAS picks kernels by row count and some are far off that. On the 2-core Intel Xeon we measure on
(2026-12-01, torch 2.13 CPU, Qwen2.5-Coder-1.5B, 48 tokens cached, median of 5) the stock F.linear (MKL) took
294 / 298 / 323 ms for 1 / 2 / 3 positions and then 577 / 609 / 751 ms for 4 / 5 / 8: a 4-position
verification cost 2x a one-token step. oneDNN with the weight reordered once into its blocked layout ("packed")
streams it in one go: 365 / 386 / 416 ms for 4 / 5 / 8, and prefills about halve; at 1-3 rows it is no better
than stock (a 8960x1536 layer: 1.27 vs 1.12 ms at one row), hence the hybrid below.

- `stock`:    F.linear everywhere.
- `packed`:   passes of >= `min_rows` (4) rows use a oneDNN-packed copy of each Linear weight; fewer rows stock.
              Costs a second copy of every Linear weight (2x weight memory). Same math, another summation order:
              logits move ~1e-5 relative (a 1.5B model: max 5e-5 on logits of size ~10).
- `row-gemm`: 2..4 rows as W @ xᵀ (the fix for the AMD EPYC of earlier sessions; slower on this Xeon).
- `auto`:     packed on a CPU fp32 model when oneDNN is built in and the copy fits in half the available memory,
              else stock. The CLI's default; the Python loaders default to stock (they do what they are told).

Kernels are installed per model and, from an HFSource, scoped: only calls made through that source use them, so
HF's own `generate` on the same model object keeps the stock kernels (the HF comparison relies on this).
"""

from __future__ import annotations

import contextlib
import threading
import types

import torch

from specsim.errors import ConfigError

KERNELS = ("auto", "stock", "packed", "row-gemm")
# From the module doc's measurements: stock MKL is as fast as packed up to 3 rows and ~2x slower from 4 on the
# Intel Xeon; row-gemm fixed 2..4 rows on the AMD EPYC of earlier sessions.
PACKED_MIN_ROWS = 4
ROW_GEMM_MAX_ROWS = 4
_SCOPE = threading.local()  # .kernels: the kernels of the HFSource whose forward is running (None outside)


def check_kernels(kernels: str) -> str:
    if kernels not in KERNELS:
        raise ConfigError("unknown kernels", field="kernels", value=kernels, allowed=", ".join(KERNELS))
    return kernels


def _linear_bytes(model) -> int:
    seen, n = set(), 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            n += m.weight.numel() * m.weight.element_size()
    return n


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def packed_supported(model) -> bool:
    p = next(model.parameters(), None)
    return (p is not None and p.device.type == "cpu" and p.dtype == torch.float32
            and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def resolve_kernels(kernels: str, model) -> str:
    """`auto` -> the concrete kernels for this model here; anything else is checked and returned."""
    check_kernels(kernels)
    if kernels == "auto":
        if not packed_supported(model):
            return "stock"
        free = _available_bytes()
        return "packed" if free is None or _linear_bytes(model) <= free / 2 else "stock"
    if kernels == "packed" and not packed_supported(model):
        raise ConfigError("packed kernels need a float32 model on the CPU and a torch built with oneDNN",
                          field="kernels", value=kernels, allowed="stock, row-gemm, auto (falls back to stock)")
    return kernels


def _patched_linear(self, x: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cpu" and (self._kernels_always or getattr(_SCOPE, "kernels", None) == self._kernels):
        rows = x.shape[:-1].numel()
        if self._kernels == "packed" and rows >= self._kernels_rows:
            return torch.ops.mkldnn._linear_pointwise(x, self._packed_weight, self.bias, "none", [], "")
        if self._kernels == "row-gemm" and 1 < rows <= self._kernels_rows:
            y = (self.weight @ x.reshape(rows, -1).T).T
            if self.bias is not None:
                y = y + self.bias
            return y.reshape(*x.shape[:-1], -1)
    return torch.nn.functional.linear(x, self.weight, self.bias)


def install(model, kernels: str, scoped: bool = True, rows: int | None = None) -> int:
    """Patch every Linear of `model` (in place) to run `kernels` ('packed' or 'row-gemm'); returns how many.

    scoped=True: only inside `kernel_scope(kernels)` (an HFSource's forward); scoped=False: for every caller.
    'packed' reorders each weight now (seconds for a 1.5B model); later changes to the weights are not seen."""
    if kernels not in ("packed", "row-gemm"):
        raise ConfigError("only packed and row-gemm kernels are installed", field="kernels", value=kernels)
    rows = rows or (PACKED_MIN_ROWS if kernels == "packed" else ROW_GEMM_MAX_ROWS)
    n = 0
    with torch.inference_mode():
        for m in model.modules():
            if not isinstance(m, torch.nn.Linear):
                continue
            if kernels == "packed" and getattr(m, "_packed_weight", None) is None:
                m._packed_weight = torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), None)
            m._kernels, m._kernels_rows = kernels, int(rows)
            m._kernels_always = (not scoped) or getattr(m, "_kernels_always", False)
            m.forward = types.MethodType(_patched_linear, m)
            n += 1
    return n


def use_row_gemm(model, max_rows: int = ROW_GEMM_MAX_ROWS, scoped: bool = False) -> int:
    """Linear layers on 2..max_rows rows as W @ xᵀ. Why: with MKL fp32 on a 2-core AMD EPYC, F.linear on 2-4 rows
    took a path 2-3x slower than one row; W @ xᵀ brought a 4-position pass to ~1.1x (Qwen2.5-1.5B: 0.59 → 0.32 s).
    On the 2-core Intel Xeon (2026-12-01) it is slower for 2-3 rows (Qwen2.5-0.5B: P = 2 163 ms vs 108 ms stock)."""
    return install(model, "row-gemm", scoped=scoped, rows=max_rows)


def use_packed(model, min_rows: int = PACKED_MIN_ROWS, scoped: bool = False) -> int:
    """Linear layers on >= min_rows rows through a oneDNN-packed weight (see the module docstring)."""
    return install(model, "packed", scoped=scoped, rows=min_rows)


@contextlib.contextmanager
def kernel_scope(kernels: str):
    """Inside: models with scoped `kernels` installed run them, whoever calls the model."""
    outer, _SCOPE.kernels = getattr(_SCOPE, "kernels", None), kernels
    try:
        yield
    finally:
        _SCOPE.kernels = outer


def row_gemm_scope():
    return kernel_scope("row-gemm")
