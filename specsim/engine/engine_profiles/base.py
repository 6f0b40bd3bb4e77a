"""The engine-profile plugin: what every profile (`specsim`, `hf-assisted`, `vllm-v1`) provides.

A profile is one module in this package defining a subclass of `EngineProfile` and an instance `PROFILE`, plus one
line in `specsim.registry.ENGINE_PROFILES` (config's choices follow from it). The setup stage
(`specsim.setup.run.resolve`) asks it, before building anything, which parts of the config it cannot model
(`accepts`: every violation, each a one-line ConfigError naming the flag), then which engine path it takes and why
(`path`), and `simulate` hands it the resolved setup (`run`). A profile never re-checks the config in `run`.
"""

from __future__ import annotations

from specsim.errors import ConfigError


class EngineProfile:
    name: str = ""
    explains_steps: bool = False  # True: a losing run's `why` line (cost.explain) reads its steps as its own

    def accepts(self, cfg) -> list[ConfigError]:
        """What of `cfg` this profile cannot model, one ConfigError each (empty: all of it)."""
        return []

    def path(self, cfg) -> tuple[str, str]:
        """(the engine that runs the loop, the reason it was chosen): the summary's `engine` is the first."""
        return self.name, f"engine profile {self.name}"

    def run(self, setup) -> tuple:
        """(speculative Records, baseline Records, extra summary keys) for a `specsim.setup.run.RunSetup`."""
        raise NotImplementedError  # pragma: no cover - every profile overrides it


def closed_batch_one(cfg) -> bool:
    """Closed loop, at most one request in flight, one replica: the shape batch-1 engines need (the workload's
    `concurrency == 1 and max_batch == 1`, read off the config: no rate, no arrivals file, batch 1)."""
    w = cfg.workload
    return w.rate is None and w.arrivals_csv is None and w.batch == 1 and w.replicas == 1
