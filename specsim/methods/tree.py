"""Token trees: the draft proposes a tree of candidates, the target verifies every node in one pass (tree attention),
and the step keeps the deepest path the target agrees with.

A tree is the set of its nodes, each written as the path of ranks that leads to it from the root: (0,) is the
draft's top-1 token at depth 1, (1,) its second choice, (0, 2) the third choice after the top-1, ... — the shape
EAGLE (`tree_choices`), Medusa (`medusa_choices`) and vLLM (`speculative_token_tree`) ship. Three ways to give one:
- a list of paths, e.g. [[0], [1], [0, 0], [0, 1], [0, 0, 0]] (vLLM's "[(0,), (1,), (0, 0)]" literal is read too);
- {"widths": [k1, ..., kD]}: every path whose rank at depth d is below k_d (SpecInfer's expansion configuration
  ⟨k1, ..., kD⟩, Miao et al. 2024; nodes Σ_d Π_{j≤d} k_j);
- {"dynamic": N, "top_k": k, "depth": D}: the N most likely paths under the rank model with ranks below k and at
  most D deep (EAGLE-2's dynamic tree, Li et al. 2024, total_token / top_k / depth, keeps the nodes of highest draft
  confidence; here the confidence is the rank model's path
  probability, so the tree is the same every step — the per-step adaptation EAGLE-2 adds is not modelled).

At temperature 0 the target's token at depth d has a rank r_d among the draft's candidates given the accepted
prefix; the step accepts the longest prefix (r_1, ..., r_d) that is a node. With the ranks i.i.d. over positions,
P(rank = r) = p_r (`rank_probabilities`: from a measured top-k acceptance vector, Sequoia's "acceptance vector",
Chen et al. 2024), the accepted depth n has P(n ≥ d) = Σ over the tree's depth-d paths of Π_j p_{r_j}, and the
expected tokens per step is 1 + Σ_d P(n ≥ d) — the tree's own closed form (a chain's is eq. (1)).
Pricing: D draft passes, pass d over the n_{d−1} frontier nodes of depth d − 1 (n_0 = 1: the root), and one
verification pass over N + 1 positions (the nodes and the root); the tree-attention mask's own cost is not priced.
"""

from __future__ import annotations

import ast
import heapq
import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from specsim.errors import ConfigError
from specsim.limits import GAMMA_CAP

MAX_TREE_NODES = 1024  # far above shipped trees (EAGLE's default 26 nodes, Medusa's 63; EAGLE-2 60)
MAX_TREE_DEPTH = GAMMA_CAP  # a tree's depth is its γ
MAX_RANK = 1024
FIELD = "speculative_token_tree"


@dataclass(frozen=True)
class Tree:
    paths: tuple[tuple[int, ...], ...]  # every node, sorted by depth then path

    @classmethod
    def from_paths(cls, paths, field: str = FIELD) -> "Tree":
        nodes = set()
        for p in paths:
            if not isinstance(p, (list, tuple)) or not p or not all(
                    isinstance(r, int) and not isinstance(r, bool) and 0 <= r < MAX_RANK for r in p):
                raise ConfigError("a tree node is a non-empty path of ranks", field=field, value=p,
                                  allowed=f"lists of integers 0..{MAX_RANK - 1}, e.g. [[0], [1], [0, 0]]")
            if tuple(p) in nodes:
                raise ConfigError("a node appears twice", field=field, value=list(p))
            nodes.add(tuple(p))
        if not nodes:
            raise ConfigError("a tree needs at least one node", field=field, value=[], allowed="e.g. [[0]]")
        for p in nodes:
            if len(p) > 1 and p[:-1] not in nodes:
                raise ConfigError("a node's parent is missing (every prefix of a path must be a node)", field=field,
                                  value=list(p), allowed=f"add {list(p[:-1])}")
        tree = cls(tuple(sorted(nodes, key=lambda p: (len(p), p))))
        if tree.nodes > MAX_TREE_NODES or tree.depth > MAX_TREE_DEPTH:
            raise ConfigError(f"tree of {tree.nodes} nodes and depth {tree.depth}", field=field,
                              allowed=f"at most {MAX_TREE_NODES} nodes and depth {MAX_TREE_DEPTH}")
        return tree

    @classmethod
    def from_widths(cls, widths, field: str = FIELD) -> "Tree":
        if not isinstance(widths, (list, tuple)) or not widths or not all(
                isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= MAX_RANK for k in widths):
            raise ConfigError("widths per depth must be a non-empty list of integers >= 1", field=f"{field}.widths",
                              value=widths, allowed="e.g. [2, 2, 1] (SpecInfer's expansion configuration)")
        if np.prod([float(k) for k in widths]) > MAX_TREE_NODES:
            raise ConfigError("too many nodes", field=f"{field}.widths", value=list(widths),
                              allowed=f"at most {MAX_TREE_NODES} nodes")
        level, paths = [()], []
        for k in widths:
            level = [p + (r,) for p in level for r in range(k)]
            paths += level
        return cls.from_paths(paths, field)

    @classmethod
    def dynamic(cls, budget: int, top_k: int, p_rank: np.ndarray, max_depth: int = MAX_TREE_DEPTH,
                field: str = FIELD) -> "Tree":
        """The `budget` most likely paths (ranks < top_k): grown best-first from the root, which is optimal for
        a fixed node count because a child is never likelier than its parent."""
        for name, v, hi in (("dynamic", budget, MAX_TREE_NODES), ("top_k", top_k, MAX_RANK)):
            if not isinstance(v, int) or isinstance(v, bool):  # "16" is text, 16.0 a float: neither is a count
                raise ConfigError(f"{name} must be an integer", field=f"{field}.{name}", value=repr(v),
                                  allowed=f"integers 1..{hi}")
            if not 1 <= v <= hi:
                raise ConfigError("out of range", field=f"{field}.{name}", value=v, allowed=f"integers 1..{hi}")
        p = np.asarray(p_rank, dtype=float)
        heap, paths, seq = [(-p[r], r, (r,)) for r in range(min(top_k, len(p)))], [], 0
        heapq.heapify(heap)
        while heap and len(paths) < budget:
            neg, _, path = heapq.heappop(heap)
            if -neg <= 0:
                break
            paths.append(path)
            if len(path) < max_depth:
                for r in range(min(top_k, len(p))):
                    seq += 1
                    heapq.heappush(heap, (neg * p[r], seq, path + (r,)))
        return cls.from_paths(paths, field)

    # --- shape ------------------------------------------------------------------------------------------------
    @property
    def nodes(self) -> int:
        return len(self.paths)

    @property
    def depth(self) -> int:
        return max(len(p) for p in self.paths)

    @cached_property
    def per_depth(self) -> tuple[int, ...]:
        """n_d: nodes at depth d = 1..D."""
        return tuple(int(v) for v in np.bincount([len(p) for p in self.paths], minlength=self.depth + 1)[1:])

    @property
    def frontiers(self) -> tuple[int, ...]:
        """Positions of draft pass d = 1..D: the n_{d−1} nodes it extends (the root for d = 1)."""
        return (1,) + self.per_depth[:-1]

    @property
    def is_chain(self) -> bool:
        return all(set(p) == {0} for p in self.paths)

    @property
    def max_rank(self) -> int:
        return max(max(p) for p in self.paths)

    # --- acceptance ---------------------------------------------------------------------------------------------
    @cached_property
    def _set(self) -> frozenset:
        return frozenset(self.paths)

    def accepted(self, ranks) -> int:
        """Depth the step accepts when the target's tokens have these ranks (the longest prefix that is a node)."""
        n = 0
        for d in range(1, min(len(ranks), self.depth) + 1):
            if tuple(int(r) for r in ranks[:d]) not in self._set:
                break
            n = d
        return n

    def survival(self, p_rank) -> np.ndarray:
        """P(n ≥ d), d = 0..D, with i.i.d. ranks P(rank = r) = p_rank[r] (ranks beyond the vector: never a node)."""
        p = np.asarray(p_rank, dtype=float)
        out = np.zeros(self.depth + 1)
        out[0] = 1.0
        for path in self.paths:
            out[len(path)] += float(np.prod([p[r] if r < len(p) else 0.0 for r in path]))
        return out

    def expected_tokens(self, p_rank) -> float:
        """Tokens per step, the tree's closed form: 1 + E[n] = 1 + Σ_{d≥1} P(n ≥ d)."""
        return 1.0 + float(self.survival(p_rank)[1:].sum())

    def conditional_acceptance(self, p_rank) -> np.ndarray:
        """a_d = P(n ≥ d | n ≥ d − 1), d = 1..D: a chain with these per-depth rates accepts like the tree."""
        s = self.survival(p_rank)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(s[:-1] > 0, s[1:] / np.where(s[:-1] > 0, s[:-1], 1.0), 0.0)


def rank_probabilities(topk_acceptance, alpha: float | None, field: str = "tree_topk_acceptance") -> np.ndarray:
    """p_r = P(rank = r) from the cumulative top-k acceptance [P(rank < 1), P(rank < 2), ...]; its first entry is
    the chain's α and must equal the run's α when both are given."""
    v = np.asarray(topk_acceptance, dtype=float)
    if v.ndim != 1 or not v.size or not np.all(np.isfinite(v)) or v[0] < 0 or v[-1] > 1 or np.any(np.diff(v) < 0):
        raise ConfigError("not a cumulative top-k acceptance", field=field, value=list(topk_acceptance),
                          allowed="non-decreasing probabilities [P(rank < 1), P(rank < 2), ...] in [0, 1]")
    if alpha is not None and abs(v[0] - alpha) > 1e-9:
        raise ConfigError("its first entry is P(rank < 1) = α", field=field, value=float(v[0]),
                          allowed=f"alpha = {alpha:g}")
    return np.diff(np.r_[0.0, v])


def parse_tree(value, p_rank: np.ndarray | None, field: str = FIELD) -> Tree:
    """A tree from its config value: a list of paths (JSON, or vLLM's Python tuple literal), {"widths": [...]},
    or {"dynamic": N, "top_k": k} (needs the rank model)."""
    if isinstance(value, str):
        value = _literal(value, field)
    if isinstance(value, dict):
        keys = set(value)
        if keys == {"widths"}:
            return Tree.from_widths(value["widths"], field)
        if "dynamic" in keys and keys <= {"dynamic", "top_k", "depth"}:
            if p_rank is None:
                raise ConfigError("a dynamic tree picks its nodes by the rank model, the draft's top-k acceptance "
                                  "(with α alone every node would be rank 0: a chain)", field=field,
                                  value=json.dumps(value),
                                  allowed="give tree_topk_acceptance as well, or a list of paths / widths")
            depth = value.get("depth", MAX_TREE_DEPTH)
            if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_TREE_DEPTH:
                raise ConfigError("out of range", field=f"{field}.depth", value=depth,
                                  allowed=f"integers 1..{MAX_TREE_DEPTH}")
            top_k = value.get("top_k", len(p_rank))
            if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > len(p_rank):
                raise ConfigError(f"top_k {top_k} branches on ranks the top-k acceptance does not reach "
                                  f"(it gives P(rank < {len(p_rank)}) at most)", field=f"{field}.top_k", value=top_k,
                                  allowed=f"1..{len(p_rank)}, or a longer tree_topk_acceptance")
            return Tree.dynamic(value["dynamic"], top_k, p_rank, depth, field=field)
        raise ConfigError("unknown tree form", field=field, value=sorted(keys),
                          allowed='a list of paths, {"widths": [...]} or {"dynamic": N, "top_k": k, "depth": D}')
    return Tree.from_paths(value if isinstance(value, (list, tuple)) else [value], field)


def _literal(text: str, field: str):
    from specsim.inputs.files import check_nesting

    check_nesting(text, field=field)  # 20,000 nested [ are one line, not a RecursionError
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)  # vLLM's speculative_token_tree: "[(0,), (1,), (0, 0)]"
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ConfigError("not a tree: neither JSON nor a Python list of tuples", field=field,
                          value=text[:80], allowed='e.g. "[[0], [1], [0, 0]]" or "[(0,), (1,), (0, 0)]"') from None
