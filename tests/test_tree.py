"""Token trees as a specification: a width-1 tree is the chain (eq. (1)), the closed form equals a brute-force
enumeration of rank sequences, the dynamic tree is the best tree of its size, and bad trees are refused."""

import itertools

import numpy as np
import pytest

from specsim import theory
from specsim.errors import ConfigError
from specsim.methods.tree import Tree, parse_tree, rank_probabilities

P = np.array([0.55, 0.15, 0.08, 0.05])  # P(rank = r), r = 0..3; 0.17 of the mass beyond rank 3


def _brute(tree: Tree, p: np.ndarray) -> float:
    """E[accepted depth] by enumerating every rank sequence up to the tree's depth (rank len(p) = 'beyond')."""
    q = np.r_[p, 1 - p.sum()]
    total = 0.0
    for ranks in itertools.product(range(len(q)), repeat=tree.depth):
        total += float(np.prod(q[list(ranks)])) * tree.accepted(ranks)
    return total


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_a_width_one_tree_is_the_chain(depth):
    chain = Tree.from_widths([1] * depth)
    assert chain.is_chain and chain.nodes == depth and chain.frontiers == (1,) * depth
    alpha = 0.7
    assert chain.expected_tokens([alpha]) == pytest.approx(theory.expected_tokens(alpha, depth), rel=1e-12)
    assert np.allclose(chain.conditional_acceptance([alpha]), alpha)


@pytest.mark.parametrize("tree", [
    Tree.from_widths([2, 2, 1]),
    Tree.from_widths([3, 1, 2]),
    Tree.from_paths([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0]]),
])
def test_closed_form_equals_brute_force(tree):
    assert tree.expected_tokens(P) - 1 == pytest.approx(_brute(tree, P), rel=1e-12)
    # the per-depth conditional rates reproduce the survival curve (what the engine's per-slot thresholds use)
    assert np.cumprod(tree.conditional_acceptance(P)) == pytest.approx(tree.survival(P)[1:], rel=1e-12)


def test_a_wider_tree_accepts_more_and_costs_more_positions():
    chain, tree = Tree.from_widths([1, 1, 1]), Tree.from_widths([2, 2, 1])
    assert tree.expected_tokens(P) > chain.expected_tokens(P)
    assert tree.nodes == 2 + 4 + 4 and tree.per_depth == (2, 4, 4) and tree.frontiers == (1, 2, 4)


def test_the_dynamic_tree_is_the_best_tree_of_its_size():
    """Among every prefix-closed tree of 4 nodes with ranks < 3 and depth <= 3, none beats the dynamic one."""
    best = Tree.dynamic(4, 3, P, max_depth=3)
    assert best.nodes == 4
    candidates = [(r,) for r in range(3)] + [(a, b) for a in range(3) for b in range(3)] + \
                 [(a, b, c) for a in range(2) for b in range(2) for c in range(2)]
    top = 0.0
    for combo in itertools.combinations(candidates, 4):
        s = set(combo)
        if all(len(p) == 1 or p[:-1] in s for p in s):
            top = max(top, Tree.from_paths(list(combo)).expected_tokens(P))
    assert best.expected_tokens(P) == pytest.approx(top, rel=1e-12)


def test_accepted_depth_is_the_longest_prefix_in_the_tree():
    t = Tree.from_paths([[0], [1], [0, 0], [1, 0], [1, 0, 2]])
    assert t.accepted([0, 0, 0]) == 2 and t.accepted([1, 0, 2]) == 3 and t.accepted([2, 0, 0]) == 0
    assert t.accepted([0, 1, 0]) == 1 and t.accepted([1]) == 1


def test_parse_forms():
    assert parse_tree("[(0,), (1,), (0, 0)]", None).paths == ((0,), (1,), (0, 0))  # vLLM's literal
    assert parse_tree("[[0], [1], [0, 0]]", None).nodes == 3
    assert parse_tree({"widths": [2, 1]}, None).paths == ((0,), (1,), (0, 0), (1, 0))
    assert parse_tree({"dynamic": 5, "top_k": 2}, P).nodes == 5


@pytest.mark.parametrize("value, what", [
    ([[0, 0]], "parent is missing"), ([[0], [0]], "twice"), ([[-1]], "path of ranks"), ([], "at least one"),
    ({"widths": [2, 0]}, "widths"), ({"dynamic": 4}, "rank model"), ({"depth": 3}, "unknown tree form"),
    ("[[0], [1]", "not a tree"), ({"widths": [32, 32, 32]}, "too many nodes"),
])
def test_bad_trees_are_refused(value, what):
    with pytest.raises(ConfigError, match=what):
        parse_tree(value, None)


def test_rank_probabilities_from_the_acceptance_vector():
    assert rank_probabilities([0.55, 0.7, 0.78], 0.55) == pytest.approx([0.55, 0.15, 0.08])
    with pytest.raises(ConfigError, match="α"):
        rank_probabilities([0.5, 0.7], 0.55)
    with pytest.raises(ConfigError, match="cumulative"):
        rank_probabilities([0.55, 0.5], 0.55)


# --- trees in the simulator -------------------------------------------------------------------------------------

from conftest import cli_capsys, cli_redirect  # noqa: E402

from specsim.cost.steptime import StepCosts  # noqa: E402
from specsim.simulate import _costs, make_config, run  # noqa: E402

BASE = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, requests=40,
            output_len=96, stack="ideal")
TOPK = [0.7, 0.82, 0.88]


def test_a_width_one_tree_simulates_exactly_the_chain():
    chain = run(make_config(**BASE, gamma=3))
    tree = run(make_config(**BASE, speculative_token_tree="[[0], [0, 0], [0, 0, 0]]"))
    assert tree.pop("tree_nodes") == 3 and tree.pop("tree_depth") == 3 and tree.pop("tree_per_depth") == [1, 1, 1]
    assert tree == chain


def test_a_tree_accepts_as_its_closed_form_says():
    cfg = make_config(**dict(BASE, requests=400), speculative_token_tree='{"widths": [3, 2, 1]}',
                      tree_topk_acceptance=TOPK)
    r = run(cfg)
    want = Tree.from_widths([3, 2, 1]).expected_tokens(rank_probabilities(TOPK, 0.7))
    assert r["tokens_per_target_run_eq1"] == pytest.approx(want, rel=1e-12)
    assert r["tokens_per_target_run"] == pytest.approx(want, rel=0.02)  # ~12k request-steps
    assert r["tokens_per_target_run"] > run(make_config(**dict(BASE, requests=400), gamma=3))["tokens_per_target_run"]
    assert r["tree_nodes"] == 3 + 6 + 6 and r["gamma"] == 3
    assert sum(r["tokens_per_run_dist_eq1"]) == pytest.approx(1.0)


def test_a_tree_step_prices_every_node_and_each_frontier():
    cfg = make_config(**BASE, speculative_token_tree='{"widths": [3, 2, 1]}', tree_topk_acceptance=TOPK)
    costs, dep = _costs(cfg)
    target, draft = dep.cost_models
    L = 300.0
    t, b, f = costs.spec_step(1, 3, L)
    want_t = target.pass_time_s(1, 16, 300) + sum(draft.pass_time_s(1, n, 301) for n in (1, 3, 6))
    assert t == pytest.approx(want_t, rel=1e-9)
    assert b == pytest.approx(target.pass_cost(1, 16, 300).bytes + sum(draft.pass_cost(1, n, 301).bytes
                                                                        for n in (1, 3, 6)), rel=1e-9)
    chain = StepCosts(target, draft)
    assert t > chain.spec_step(1, 3, L)[0]  # 16 verified positions and 10 drafted cost more than 4 and 3
    # the batch-1 fast path prices the same step
    vt, vb, vf = costs.spec_step_vec(np.array([3]), np.array([L]), np.array([0.0]))
    assert vt[0] == pytest.approx(t, rel=1e-12) and vb[0] == pytest.approx(b, rel=1e-12)


def test_a_tree_reserves_kv_for_its_nodes():
    tree = make_config(**BASE, speculative_token_tree='{"widths": [3, 2, 1]}', tree_topk_acceptance=TOPK)
    _, dep = _costs(tree)
    spec, _ = dep.memory(16)
    chain_spec, _ = dep.memory(4)
    assert spec.request_bytes(np.array([128]), np.array([96]))[0] > chain_spec.request_bytes(np.array([128]),
                                                                                               np.array([96]))[0]


def test_the_tree_comes_through_vllms_speculative_config():
    a = run(make_config(**BASE, speculative_token_tree="[(0,), (1,), (0, 0)]", tree_topk_acceptance=[0.7, 0.8]))
    b = run(make_config(**{k: v for k, v in BASE.items() if k != "draft"}, tree_topk_acceptance=[0.7, 0.8],
                        speculative_config='{"model": "llama-3.2-1b", "speculative_token_tree": '
                                           '"[(0,), (1,), (0, 0)]"}'))
    assert a["speedup"] == b["speedup"] and a["tree_nodes"] == 3


@pytest.mark.parametrize("extra, words", [
    (["--speculative-token-tree", "[[0],[1]]"], "top-k acceptance"),
    (["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", "[0.7,0.8]", "--policy", "heuristic"],
     "--policy fixed"),
    (["--speculative-token-tree", "[[0],[0,0]]", "--gamma", "3"], "depth, 2"),
    (["--tree-topk-acceptance", "[0.7,0.8]"], "--speculative-token-tree"),
    (["--speculative-token-tree", "[[0],[2]]", "--tree-topk-acceptance", "[0.7,0.8]"], "rank 2"),
    (["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", "[0.6,0.8]"], "α"),
    (["--speculative-token-tree", "[[0,0]]"], "parent is missing"),
    (["--speculative-token-tree", "[[0],[1]]", "--tree-topk-acceptance", "[0.7,0.8]", "--draft-catchup"],
     "catch-up"),
])
def test_bad_tree_setups_exit_2_in_one_line(capsys, extra, words):
    args = ["simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
            "--alpha", "0.7", "--requests", "4"] + extra
    code, out, err = cli_capsys(capsys, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err, err


def test_a_lookup_method_has_no_tree(capsys):
    code, _, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--alpha",
                              "0.7", "--method", "ngram", "--speculative-token-tree", "[[0]]")
    assert code == 2 and "no candidates to branch on" in err


def test_choose_draft_takes_a_tree_candidate(capsys):
    """A tree candidate in --speculative-config gets the same rows as a chain (speedup, eq. (5), bands, break-even),
    its γ fixed at the tree's depth."""
    import json

    chain = '{"method": "eagle3", "alpha": 0.7}'
    tree = ('{"method": "eagle3", "alpha": 0.7, "speculative_token_tree": "{\\"widths\\": [3, 2, 1]}", '
            '"tree_topk_acceptance": [0.7, 0.8, 0.85]}')
    code, out, err = cli_capsys(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                                "--speculative-config", chain, "--speculative-config", tree, "--batch", "1,64,256",
                                "--json")
    assert code == 0, err
    rows = {r["draft"]: r for r in json.loads(out)["drafts"]}
    t = rows["eagle3-llama-3.1-8b (15-node tree)"]
    assert t["tree_nodes"] == 15 and all(p["best_gamma"] == 3 for p in t["points"])
    assert {b["gamma"] for b in t["bands"]} <= {0, 3}
    assert t["points"][0]["best_speedup"] > rows["eagle3-llama-3.1-8b"]["points"][0]["best_speedup"]
    assert t["break_even"] is not None and t["break_even"] <= 256  # 16 verified positions: compute-bound early
    for bad, words in (('{"method": "eagle3", "alpha": 0.7, "speculative_token_tree": "[[0],[1]]"}', "top-k"),
                       ('{"method": "eagle3", "alpha": 0.7, "tree_topk_acceptance": [0.7]}', "belongs to a tree")):
        code, _, err = cli_capsys(capsys, "choose-draft", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                                  "--speculative-config", bad, "--batch", "1")
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("tree, needle", [('{"dynamic": "16"}', "dynamic must be an integer (got '16')"),
                                          ('{"dynamic": 16.0}', "dynamic must be an integer (got 16.0)"),
                                          ('{"dynamic": 0}', "out of range (got 0)")])
def test_a_dynamic_tree_budget_that_is_text_or_a_float_is_named_as_such(tree, needle):
    code, out, err = cli_redirect("simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                                  "llama-3.2-1b", "--alpha", "0.7", "--speculative-token-tree", tree,
                                  "--tree-topk-acceptance", "[0.7, 0.8]", "--requests", "4")
    assert code == 2 and err.count("\n") == 1 and needle in err, err
