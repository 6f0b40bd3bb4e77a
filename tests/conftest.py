"""Fixtures and helpers shared by several test files.

- `cli_capsys(capsys, *args)` / `cli_redirect(*args)`: the real CLI entry point, in this process, → (exit code,
  stdout, stderr); arguments are passed as a shell would (str). `cli_redirect` captures with contextlib instead
  of capsys, for code that runs many commands per test (hypothesis examples) or has no capsys at hand.
- `one_thread`: torch on one thread for the tiny-model executor tests (imports torch only when used).
- hypothesis: derandomized by default (profile "ci"); `SPECSIM_HYPOTHESIS=explore` for fresh examples.

Test files import the helpers with `from conftest import ...` (tests/ is on sys.path: no __init__.py, pytest's
default prepend import mode) and keep their historical local names.
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (a clean-clone CI run must not pass or fail by chance: the
# standard is same seed, same output); SPECSIM_HYPOTHESIS=explore draws fresh ones, to hunt for new counterexamples.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("SPECSIM_HYPOTHESIS") == "explore" else "ci")

from specsim.cli import main


def cli_capsys(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def cli_redirect(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: thread hand-offs cost more than the matmuls, and CI cores are shared."""
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
