"""Speculation methods as strategies, named as vLLM names them (`--speculative-config '{"method": ...}'`).

One module per method family with a `base.Method` subclass and one entry in METHODS (`specsim.config.Method`, the
choices of `--method`, is built from it). `specsim.setup.deployment.Deployment` builds the method's proposal cost model;
`specsim.cost.steptime.StepCosts` prices a step with it (`passes`, `c_divisor`); the engines never name a method.
Head profiles (EAGLE-3, MTP, Medusa, the n-gram / suffix host costs) live in model_profiles/heads/ (`heads`).
"""

from __future__ import annotations

from specsim.errors import ConfigError
from specsim.methods.base import Method
from specsim.methods.draft_model import DraftModel
from specsim.methods.eagle import Eagle, Eagle3
from specsim.methods.medusa import Medusa
from specsim.methods.mtp import Mtp
from specsim.methods.ngram import Ngram, Suffix

METHODS: dict[str, Method] = {m.name: m for m in (DraftModel(), Eagle(), Eagle3(), Mtp(), Medusa(), Ngram(),
                                                   Suffix())}
DEFAULT_METHOD = "draft_model"

__all__ = ["DEFAULT_METHOD", "METHODS", "Method", "get"]


def get(name: str | None) -> Method:
    """The method `name` (None = draft_model); an unknown name is one line naming the allowed ones."""
    m = METHODS.get(DEFAULT_METHOD if name is None else name)
    if m is None:
        raise ConfigError("unknown speculation method", field="method", value=name, allowed=", ".join(METHODS))
    return m
