"""The acceptance step of the per-request kernels, written once: uniforms pre-drawn per request, one draw per step.

The event loop's 'live' kernel and the fast path's lockstep hold a set of requests (a compacted batch) and, each
step, judge every request's drafts with `LiveDraws.draw(G, gamma)`: the uniforms at each request's cursor against
the thresholds at its walk offset (`Acceptance.thresholds`), the number of leading accepts per request. The γ
policy (`specsim.engine.policies`) decides G (and per-request γ) and how far each stream advances; `advance` moves
the cursors and walk offsets. The rule itself is stated in `specsim.engine.acceptance`'s docstring.
"""

from __future__ import annotations

import numpy as np

from specsim.engine.acceptance import GAMMA_CAP, Acceptance

_AR = np.arange(GAMMA_CAP + 2, dtype=np.int64)
_I64 = np.int64


class UniformPool:
    """Per-slot blocks of pre-drawn uniforms in one flat buffer, refilled in order from each request's stream.

    `cursor` values handed out are absolute flat offsets; a slot's live window is [slot·W, slot·W + W).
    """

    def __init__(self, acceptance: Acceptance, slots: int, need: int, typical_use: float = 4096):
        self.acc = acceptance
        self.need = int(need)  # most uniforms one step may look at (gather width)
        # window: at least 4 gathers; else about what a typical request consumes, within a memory cap
        self.W = max(4 * self.need, min(4096, (1 << 22) // max(1, slots), int(typical_use) + self.need))
        self.buf = np.empty(slots * self.W)
        self.gens: list = [None] * slots

    def assign(self, slot: int, request: int) -> int:
        """Give `slot` to `request` (fresh stream); return its cursor."""
        g = self.gens[slot]
        if g is None:
            g = self.gens[slot] = self.acc.streams.generator()
        self.acc.streams.load(request, g)
        base = slot * self.W
        g.random(out=self.buf[base:base + self.W])
        return base

    def headroom(self, cursor: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Uniforms left in each window beyond the gather width."""
        return slots * self.W + self.W - self.need - cursor

    def refill(self, cursor: np.ndarray, slots: np.ndarray, step_max: int) -> np.ndarray:
        """Shift the unread part of every window that could overflow within one step; return new cursors."""
        low = np.flatnonzero(self.headroom(cursor, slots) < step_max)
        if low.size == 0:
            return cursor
        cursor = cursor.copy()
        W = self.W
        for j in low:
            s = int(slots[j])
            base = s * W
            off = int(cursor[j]) - base
            keep = self.buf[base + off:base + W].copy()
            self.buf[base:base + len(keep)] = keep
            self.buf[base + len(keep):base + W] = self.gens[s].random(W - len(keep))
            cursor[j] = base
        return cursor


class LiveDraws:
    """The acceptance state of a set of requests, in admission order: slot, uniform cursor, β walk offset each.

    draws = most uniforms one step looks at; step_draws = most one step consumes (both from the policy);
    typical_use sizes the uniform windows (see `UniformPool`)."""

    def __init__(self, acc: Acceptance, slots: int, draws: int, step_draws: int, typical_use: float):
        self.acc, self.step_draws = acc, int(step_draws)
        self.walk = not acc.constant  # a trace: follow each request's β walk (pos); a constant α has none
        self.pool = UniformPool(acc, slots, draws, typical_use)
        self.free = list(range(slots - 1, -1, -1))
        e = np.zeros(0, _I64)
        self.slot, self.cur, self.pos = e, e, e
        self.countdown = 0  # steps left before some window may need a refill
        self._take, self._thresholds = self.pool.buf.take, acc.thresholds  # bound once: draw runs every step

    def admit(self, requests: np.ndarray) -> None:
        """Append `requests` (fresh streams in free slots; walks start at output position 1)."""
        cat, pool = np.concatenate, self.pool
        slots = np.array([self.free.pop() for _ in range(requests.size)], dtype=_I64)
        self.slot = cat((self.slot, slots))
        self.cur = cat((self.cur, [pool.assign(int(s), int(i)) for s, i in zip(slots, requests)]))
        if self.walk:
            self.pos = cat((self.pos, self.acc.walk_start(requests) + 1))

    def keep(self, mask: np.ndarray) -> None:
        """Keep the requests where `mask` holds; the others' slots are free again."""
        self.free.extend(self.slot[~mask].tolist())
        self.slot, self.cur = self.slot[mask], self.cur[mask]
        if self.walk:
            self.pos = self.pos[mask]

    def draw(self, G: int, gamma: np.ndarray | None = None) -> np.ndarray:
        """Leading accepted drafts of every request judged on G drafts, or on its own gamma[r] ≤ G of them."""
        if self.countdown <= 0:
            pool = self.pool
            self.cur = pool.refill(self.cur, self.slot, self.step_draws)
            self.countdown = int(pool.headroom(self.cur, self.slot).min()) // self.step_draws + 1
        self.countdown -= 1
        U = self._take(self.cur[:, None] + _AR[:G + 1])
        thr = self._thresholds(G, self.pos if self.walk else None)
        if gamma is not None:
            thr = np.where(_AR[:G + 1] >= gamma[:, None], -1.0, thr)
        return (U < thr).argmin(1)

    def advance(self, consumed, tokens: np.ndarray) -> None:
        """Move each stream past the uniforms it consumed and each walk past the tokens it emitted."""
        self.cur += consumed
        if self.walk:
            self.pos += tokens
