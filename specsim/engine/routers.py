"""Routers: which replica a request joins when it arrives (one strategy per class; `ROUTERS` is the registry).

With `--replicas N` a deployment runs N engines behind a load balancer. Each request is routed to one replica on
arrival and waits in that replica's own FCFS queue (`specsim.engine.simpy_engine`); the replica admits from it
under its own batch cap and KV budget. `shared-queue` is the ideal bound instead: one queue that any replica takes
from when it has room, which no HTTP load balancer can do (it would have to know, at arrival, which engine frees a
slot first) — keep it to see how much routing costs.

The default is `round-robin`, the routing logic vLLM's production stack router starts with
(vllm-project/production-stack, `src/vllm_router`: routing logic `roundrobin`, the Helm chart's default
`routingLogic: roundrobin`); `least-outstanding` is Envoy's / NGINX's least-request balancing; `power-of-two` is
the two-random-choices rule (Mitzenmacher 2001) that Envoy's LEAST_REQUEST uses by default (choice_count 2).

A user's own router is one subclass of `Router` (say, one that sends long prompts to a dedicated replica) passed
to `run_engine(..., router=...)`; it sees the request index, the workload and each replica's outstanding count.
"""

from __future__ import annotations

import numpy as np

from specsim import registry
from specsim.rng import ROUTER, stream


class Router:
    """Picks a replica for request i. `outstanding[r]`: requests routed to replica r and not yet finished."""

    name = "base"
    shared = False  # True: one queue for every replica (the ideal bound); pick() is never called

    def __init__(self, n_replicas: int, seed: int = 0):
        self.n = n_replicas
        self.seed = seed

    def pick(self, i: int, wl, outstanding: list[int]) -> int:
        raise NotImplementedError


class SharedQueue(Router):
    """One FCFS queue that every replica admits from (the ideal bound: no request waits while a replica idles)."""

    name, shared = "shared-queue", True


class RoundRobin(Router):
    """Requests go to replicas 0, 1, …, N−1, 0, … in arrival order (production-stack's `roundrobin`)."""

    name = "round-robin"

    def __init__(self, n_replicas: int, seed: int = 0):
        super().__init__(n_replicas, seed)
        self._next = 0

    def pick(self, i, wl, outstanding):
        r = self._next
        self._next = (r + 1) % self.n
        return r


class LeastOutstanding(Router):
    """The replica with the fewest outstanding requests (queued + running); ties go to the lowest index."""

    name = "least-outstanding"

    def pick(self, i, wl, outstanding):
        return min(range(self.n), key=outstanding.__getitem__)


class PowerOfTwo(Router):
    """Two distinct replicas drawn at random (seeded stream ROUTER), the one with fewer outstanding requests;
    a tie goes to the first drawn."""

    name = "power-of-two"

    def __init__(self, n_replicas: int, seed: int = 0):
        super().__init__(n_replicas, seed)
        self._rng = stream(seed, ROUTER)
        self._buf = np.empty((0, 2), np.int64)
        self._k = 0

    def pick(self, i, wl, outstanding):
        if self.n == 1:
            return 0
        if self._k == len(self._buf):  # draw pairs in blocks: one generator call per 4,096 requests
            a = self._rng.integers(0, self.n, 4096)
            b = (a + self._rng.integers(1, self.n, 4096)) % self.n  # distinct from a, uniform over the rest
            self._buf, self._k = np.stack([a, b], axis=1).tolist(), 0
        a, b = self._buf[self._k]
        self._k += 1
        return b if outstanding[b] < outstanding[a] else a


ROUTERS: dict[str, type[Router]] = {name: registry.load(target) for name, target in registry.ROUTERS.items()}
DEFAULT_ROUTER = next(iter(registry.ROUTERS))


def make_router(name: str, n_replicas: int, seed: int = 0) -> Router:
    return ROUTERS[name](n_replicas, seed)
