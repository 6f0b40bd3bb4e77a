"""Moved to `specsim.cost.ragged` (a ragged step's price is a cost model, below the engine); this old path re-exports
it for code written against it. New code imports `specsim.cost.ragged`."""

from specsim.cost.ragged import RooflinePricer, StepTable  # noqa: F401
