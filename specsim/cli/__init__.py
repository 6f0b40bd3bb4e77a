"""`specsim` command line: a thin layer over the Python API.

Each command group lives in its own module and registers itself here. Every command takes `--json`.
User errors (SpecsimError, and Typer's own usage errors) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys

import typer
from typer.models import ParameterInfo

from specsim.errors import SpecsimError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Performance simulator for speculative decoding (Leviathan et al., ICML 2023).")

# Modules that define `register(app)`; a missing one is skipped so partial installs still run.
_COMMAND_MODULES = ["core", "trace", "sim", "sweep", "choose", "executor", "models", "validate", "plan", "power",
                    "import_vllm"]


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"specsim.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"specsim.cli.{name}":
                continue
            raise
        mod.register(app)


# Help text is plain text, but typer renders it as rich markup, where "[fixed]" is a style tag and vanishes. Rich's
# own escape (rich.markup.escape, same tag pattern) is not idempotent; this one skips a bracket already escaped, so
# help that a command escaped itself (cli/sim.py) is left as it is.
_MARKUP_TAG = re.compile(r"(?<!\\)(\[[a-z#/@][^[]*?])")


def plain_help(text: str | None) -> str | None:
    """`text` as rich shows it verbatim: every markup-looking [tag] escaped once."""
    return None if text is None else _MARKUP_TAG.sub(lambda m: "\\" + m.group(1), text)


def _escape_help(t: typer.Typer) -> None:
    """Every help text of a typer app (commands, their options and arguments, sub-apps) as plain text."""
    t.info.help = plain_help(t.info.help if isinstance(t.info.help, str) else None) or t.info.help
    for cmd in t.registered_commands:
        cmd.help = plain_help(cmd.help if cmd.help is not None else inspect.getdoc(cmd.callback))
        for p in inspect.signature(cmd.callback).parameters.values():
            if isinstance(p.default, ParameterInfo) and isinstance(p.default.help, str):
                p.default.help = plain_help(p.default.help)
    for group in t.registered_groups:
        if isinstance(group.help, str):
            group.help = plain_help(group.help)
        _escape_help(group.typer_instance)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"specsim {version('specsim')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            print("specsim (not installed: no package metadata; pip install -e .)")
        raise typer.Exit()


@app.callback()
def _root(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                            help="print specsim's version (from the installed package) and exit")):
    """Performance simulator for speculative decoding (Leviathan et al., ICML 2023)."""


_register_all()
_escape_help(app)


def _given_value(opts: list[str], argv: list[str]) -> str | None:
    """The value the user wrote for an option (`--x V` or `--x=V`, the last one wins), for the error line."""
    found = None
    for i, a in enumerate(argv):
        for o in opts:
            if a == o and i + 1 < len(argv):
                found = argv[i + 1]
            elif a.startswith(o + "="):
                found = a[len(o) + 1:]
    return found


def _usage_line(e, argv: list[str]) -> str:
    """Click's message, plus the value given (click's parse errors leave it out) and what an option allows."""
    msg = e.format_message()
    param = getattr(e, "param", None)
    opts = list(getattr(param, "opts", []) or []) + list(getattr(param, "secondary_opts", []) or [])
    if opts and "(got " not in msg:
        v = _given_value(opts, argv)
        if v is not None:
            msg += f" (got {v!r})"
        cause = e.__cause__  # typer coerces with pydantic: its error says which kind of value was expected
        kind = cause.errors()[0]["type"] if hasattr(cause, "errors") else ""
        want = {"int_parsing": "an integer", "int_from_float": "an integer", "float_parsing": "a number",
                "bool_parsing": "true or false"}.get(kind)
        if want and "allowed:" not in msg:
            msg += f"; allowed: {want}"
    return " ".join(msg.split())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
            line = _usage_line(e, argv)
            if line:  # click's no-args-is-help "error" has no message: the help it printed is the answer
                print(f"specsim: error: {line}", file=sys.stderr)
            return (2)
        raise
    return (0)

