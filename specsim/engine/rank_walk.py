"""A token tree judged on a trace's ranks (temperature 0): the depth a step accepts, for every step start at once.

At temperature 0 the target's token at output position t has a rank r_t among the draft's candidates (the trace's
`rank` column, `specsim.traces.format`); a step starting at t accepts the longest prefix (r_t, r_{t+1}, …) that is
a node of the tree (`specsim.methods.tree.Tree.accepted`; SpecInfer's token-tree verification, Miao et al. 2024,
at greedy decoding). That depth depends on the step start t alone, so it is computed once per walk position,
n_t, by walking the tree's trie over the rank sequence, all positions in one vectorized pass per depth. The walk
wraps at the end of the concatenated trace, as the β walk does (`Acceptance.thresholds`' mode="wrap").

The engines still read acceptance as thresholds against uniforms u ∈ [0, 1): slot k of a step starting at t gets
threshold 1 (u < 1: a sure accept) when k < n_t and 0 (u ≥ 0: a sure reject) otherwise, so the leading accepts
are n_t exactly and the uniforms each step consumes are those of a chain of the same γ — one (B, γ + 1) row per
step, no (position, slot) table.
"""

from __future__ import annotations

import numpy as np

_I64 = np.int64


def accepted_depths(tree, ranks: np.ndarray) -> np.ndarray:
    """n_t for every position t of the (wrapping) rank walk: the depth a step starting at t accepts."""
    r = np.asarray(ranks, dtype=_I64)
    N = r.size
    width = tree.max_rank + 1
    ids = {p: i + 1 for i, p in enumerate(tree.paths)}  # node id; 0 is the root
    child = np.full((len(ids) + 1, width), -1, _I64)  # child[node, rank]: the node reached, −1 = not a node
    for p, i in ids.items():
        child[ids.get(p[:-1], 0), p[-1]] = i
    inside = (r >= 0) & (r < width)  # RANK_NONE (−1) and ranks past the tree's widest: never a node
    col = np.where(inside, r, 0)
    node = np.zeros(N, _I64)
    depth = np.zeros(N, _I64)
    alive = np.ones(N, bool)
    for d in range(tree.depth):
        nxt = child[node, np.roll(col, -d)]  # the rank at position t + d (wrapping)
        alive &= np.roll(inside, -d) & (nxt >= 0)
        if not alive.any():
            break
        node = np.where(alive, nxt, 0)
        depth += alive
    return depth


class RankWalk:
    """The thresholds of a tree on ranks: `thresholds(G, bpos)` as `Acceptance.thresholds` states them."""

    def __init__(self, tree, ranks: np.ndarray):
        self.depth = accepted_depths(tree, ranks)
        self._cols = np.arange(tree.depth + 2, dtype=_I64)

    def thresholds(self, G: int, bpos: np.ndarray) -> np.ndarray:
        """(B, G + 1): 1 for the first n_t slots of the step starting at bpos, 0 after, −1 in the last column."""
        n = self.depth.take(np.asarray(bpos, dtype=_I64), mode="wrap")
        cols = self._cols[:G + 1] if G + 1 <= self._cols.size else np.arange(G + 1, dtype=_I64)
        thr = (cols < n[:, None]).astype(float)
        thr[:, G] = -1.0
        return thr
