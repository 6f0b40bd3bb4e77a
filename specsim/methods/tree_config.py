"""A run's token tree, from its SimConfig: the rules a tree puts on the other fields, its γ, and the tree itself.

- γ is the tree's depth: without an explicit γ the tree sets it; a γ that differs is refused.
- A tree runs under policy fixed and the `specsim` engine profile, with a proposer that has candidates to branch on
  (a draft model, an EAGLE / MTP head, Medusa heads — not the n-gram / suffix lookups), without draft catch-up.
- A tree wider than a chain needs the draft's top-k acceptance (`tree_topk_acceptance`) with a constant α, or a
  trace with a `rank` column (`specsim record` writes it; judged by `specsim.engine.rank_walk`), without lenience.
  Whether the trace has the column is checked where the trace is read (`Acceptance`), not here, so validating a
  config never opens the file; a β-only trace serves chains (a width-1 tree is the chain). On a trace,
  `tree_topk_acceptance` only picks a dynamic tree's nodes; acceptance comes from the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from specsim.errors import ConfigError
from specsim.methods.tree import FIELD, Tree, parse_tree, rank_probabilities

TREE_METHODS = ("draft_model", "eagle", "eagle3", "mtp", "medusa")


@dataclass(frozen=True)
class TreeSetup:
    tree: Tree
    p_rank: np.ndarray  # P(rank = r) of the draft's candidates (r = 0: α)

    def slot_rates(self) -> np.ndarray:
        """Per-depth acceptance a_d = P(n ≥ d | n ≥ d − 1), d = 1..D: the engine's thresholds for this tree."""
        return self.tree.conditional_acceptance(self.p_rank)

    def dist(self) -> list[float]:
        """P(the step emits m + 1 tokens), m = 0..D."""
        s = self.tree.survival(self.p_rank)
        return (s - np.append(s[1:], 0.0)).tolist()


@lru_cache(maxsize=256)
def tree_setup(tree_text: str, topk: tuple | None, alpha: float | None) -> TreeSetup:
    """The tree and rank model of a tree text, its top-k acceptance and α (cached: configs re-read it)."""
    ranks = rank_probabilities(topk, alpha) if topk is not None else None
    # a dynamic tree picks its nodes by the draft's top-k acceptance: with α alone every rank above 0 has
    # probability 0 and the tree would silently be a chain of N nodes, so parse_tree refuses it without one
    tree = parse_tree(tree_text, ranks)
    p = ranks if ranks is not None else np.array([alpha if alpha is not None else 1.0])
    return TreeSetup(tree, p)  # a trace without top-k: its β is acceptance at rank 0 (a chain, by tree_rules)


def from_config(cfg) -> TreeSetup | None:
    """The run's tree and rank model (None: a chain of γ)."""
    s = cfg.speculation
    if s.speculative_token_tree is None:
        return None
    return tree_setup(s.speculative_token_tree, s.tree_topk_acceptance, cfg.acceptance.alpha)


def tree_gamma(data: Any) -> Any:
    """Grouped SimConfig input: a tree without an explicit γ sets γ to its depth (an unreadable tree is left for
    `tree_rules` to refuse with its reason)."""
    if not isinstance(data, dict) or not isinstance(data.get("speculation"), dict):
        return data
    spec = data["speculation"]
    text = spec.get("speculative_token_tree")
    if not isinstance(text, str) or spec.get("gamma") is not None:
        return data
    acc = data.get("acceptance") if isinstance(data.get("acceptance"), dict) else {}
    try:
        topk = spec.get("tree_topk_acceptance")
        depth = tree_setup(text, None if topk is None else tuple(topk), acc.get("alpha")).tree.depth
    except (ConfigError, TypeError, ValueError):
        return data
    return dict(data, speculation=dict(spec, gamma=depth))


def tree_rules(cfg) -> None:
    """The rules of the module doc, each one line naming its fields."""
    from specsim.config_rules import RuleViolation

    s, d, a = cfg.speculation, cfg.deployment, cfg.acceptance
    if s.speculative_token_tree is None:
        raise RuleViolation("{0} belongs to a tree: give {1}", "tree_topk_acceptance", "speculative_token_tree")
    try:
        setup = tree_setup(s.speculative_token_tree, s.tree_topk_acceptance, a.alpha)
    except ConfigError as e:
        what = e.message + (f" (got {e.value})" if e.value is not None else "") + \
            (f"; allowed: {e.allowed}" if e.allowed else "")
        raise RuleViolation("{0}: {what}", "tree_topk_acceptance" if e.field == "tree_topk_acceptance"
                            else "speculative_token_tree", what=what) from None  # user text: never a template
    tree = setup.tree
    if s.gamma != tree.depth:
        raise RuleViolation(f"{{0}} is the tree's depth, {tree.depth} (got {s.gamma}); drop {{0}}", "gamma",
                            "speculative_token_tree")
    if s.policy != "fixed":
        raise RuleViolation("a tree runs under {0} fixed (its shape sets γ)", "policy", "speculative_token_tree")
    if s.method not in TREE_METHODS:
        raise RuleViolation(f"{{0}} {s.method} has no candidates to branch on; a tree needs one of "
                            f"{', '.join(TREE_METHODS)}", "method", "speculative_token_tree")
    if cfg.engine.engine_profile != "specsim":
        raise RuleViolation("a tree runs under {0} specsim", "engine_profile", "speculative_token_tree")
    if d.draft_catchup:
        raise RuleViolation("{0} is a chain's catch-up; drop it with {1}", "draft_catchup", "speculative_token_tree")
    if not tree.is_chain and a.trace is not None and a.lenience != 1.0:
        raise RuleViolation("a tree on a trace's ranks is exact at temperature 0: drop {0}", "lenience",
                            "speculative_token_tree")
    if not tree.is_chain and a.alpha is not None and s.tree_topk_acceptance is None:
        raise RuleViolation("a tree wider than a chain needs the draft's top-k acceptance {0}",
                            "tree_topk_acceptance", "speculative_token_tree")
    if s.tree_topk_acceptance is not None and tree.max_rank >= len(s.tree_topk_acceptance):
        raise RuleViolation(f"the tree uses rank {tree.max_rank}; {{0}} must reach P(rank < {tree.max_rank + 1})",
                            "tree_topk_acceptance", "speculative_token_tree")


__all__ = ["FIELD", "TreeSetup", "from_config", "tree_gamma", "tree_rules", "tree_setup"]
