"""`specsim` command line: a thin layer over the Python API.

Each command group lives in its own module and registers itself here. Every command takes `--json`.
User errors (SpecsimError, and Typer's own usage errors) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import sys

import typer

from specsim.errors import SpecsimError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Performance simulator for speculative decoding (Leviathan et al., ICML 2023).")

# Modules that define `register(app)`; a missing one is skipped so partial installs still run.
_COMMAND_MODULES = ["core", "trace", "sim", "sweep", "choose", "executor", "models", "validate"]


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"specsim.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"specsim.cli.{name}":
                continue
            raise
        mod.register(app)


_register_all()


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=False)
    except SpecsimError as e:
        print(f"specsim: error: {e}", file=sys.stderr)
        return (2)
    except typer.Exit as e:
        return (e.exit_code)
    except typer.Abort:
        print("specsim: aborted", file=sys.stderr)
        return (130)
    except Exception as e:  # click usage errors
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):  # click's (or typer's vendored) usage errors
            print(f"specsim: error: {e.format_message()}", file=sys.stderr)
            return (2)
        raise
    return (0)

