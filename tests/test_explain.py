"""`why`: whenever the simulated speedup is below 1, simulate says in one line what makes speculation lose — with
the run's own step costs, for any method and tree — and says nothing when speculation wins."""

import pytest

from specsim.simulate import make_config, run

BASE = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", requests=64)


def test_no_line_when_speculation_wins():
    r = run(make_config(**BASE, alpha=0.8))
    assert r["speedup"] > 1 and "why" not in r


def test_a_poor_draft_loses_by_draft_cost():
    r = run(make_config(**BASE, alpha=0.2, gamma=6))
    assert r["speedup"] < 1 and "by draft cost" in r["why"] and "\n" not in r["why"]
    assert f"{r['speedup']:.2f}×" in r["why"] and "γ = 6" in r["why"]


def test_large_batch_verification_is_named_compute_bound():
    r = run(make_config(**dict(BASE, requests=512), alpha=0.7, batch=256))
    assert r["speedup"] < 1 and "compute-bound" in r["why"]


def test_a_moe_target_names_the_experts_woken():
    r = run(make_config(hardware="h100-sxm", target="mixtral-8x7b", draft="llama-3.2-1b", tp=2, alpha=0.6,
                        requests=32))
    assert r["speedup"] < 1 and "experts" in r["why"]


@pytest.mark.parametrize("kw", [dict(method="eagle3", gamma=8, alpha=0.1),
                                dict(speculative_token_tree='{"widths": [4, 4, 2]}', alpha=0.3,
                                     tree_topk_acceptance=[0.3, 0.4, 0.45, 0.5])])
def test_methods_and_trees_are_explained_from_their_own_costs(kw):
    fields = dict(BASE, **kw)
    if kw.get("method"):
        fields.pop("draft")
    r = run(make_config(**fields))
    assert r["speedup"] < 1 and r["why"].startswith("speculation loses")
    if "speculative_token_tree" in kw:
        assert "52-node tree" in r["why"]
    else:
        assert "eagle3" in r["why"]
