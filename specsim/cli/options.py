"""The options the executor commands share (record, measure, calibrate, validate), declared once.

Each is a `typer.Option` used as a parameter default (typer copies it per command), or a function giving one where
the commands differ only in the default (a temperature of 1 to record a trace, 0 to time and validate).
"""

from __future__ import annotations

import typer

KERNELS_HELP = ("auto | stock | packed | row-gemm: CPU matmul kernels (specsim.executor.kernels). auto = packed "
                "(oneDNN-packed weights for passes of >= 4 rows, 2x weight memory) on a CPU fp32 model where it "
                "fits, else stock")
DRAFT_HELP = "draft SRC (also bigram / prompt-lookup)"

TARGET = typer.Option(..., "--target", help="target SRC")
DRAFT = typer.Option(..., "--draft", help=DRAFT_HELP)
DRAFT_OPTIONAL = typer.Option(None, "--draft", help=DRAFT_HELP)
DEVICE = typer.Option("auto", "--device", help="auto | cpu | cuda")
DTYPE = typer.Option("auto", "--dtype", help="auto | fp32 | bf16 | fp16")
KERNELS = typer.Option("auto", "--kernels", help=KERNELS_HELP)
SEED = typer.Option(0, "--seed")
LIMIT = typer.Option(None, "--limit", min=1, help="use the first N prompts")
CHAT = typer.Option(False, "--chat", help="wrap text prompts in the tokenizer's chat template")
TOP_K = typer.Option(None, "--top-k")
TOP_P = typer.Option(None, "--top-p")
JSON = typer.Option(False, "--json", help="print one JSON object")


def temperature(default: float, help: str = "0 = argmax"):
    return typer.Option(default, "--temperature", help=help)


def max_new_tokens(default: int, help: str | None = None):
    return typer.Option(default, "--max-new-tokens", min=1, help=help)


def repeats(default: int, help: str):
    return typer.Option(default, "--repeats", min=1, help=help)
