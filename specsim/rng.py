"""Named random streams: each random subsystem draws from its own seeded generator.

Keys are (seed, stream, index) so that, e.g., changing γ (which changes how many acceptance draws a
request consumes) never changes which requests arrive or how long they are.
"""

from __future__ import annotations

import numpy as np

ARRIVALS, LENGTHS, ACCEPTANCE, POLICY, TRACE_SYNTH = 0, 1, 2, 3, 4


def stream(seed: int, which: int, index: int = 0) -> np.random.Generator:
    return np.random.default_rng((int(seed), int(which), int(index)))
