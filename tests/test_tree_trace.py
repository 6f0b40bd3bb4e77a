"""Token trees on a recorded trace's ranks, as a specification: a chain on a rank trace is the β run bit for bit,
the engine's accepted depths are the longest rank prefix in the tree (a plain-Python replay, every engine), a wider
tree accepts at least as much, the rank column is strictly typed, and `specsim record` writes it at T = 0."""

import json

import numpy as np
import pandas as pd
import pytest

from conftest import cli_capsys
from specsim.engine.acceptance import Acceptance
from specsim.engine.rank_walk import RankWalk, accepted_depths
from specsim.errors import ConfigError
from specsim.methods.tree import Tree, parse_tree
from specsim.simulate import make_config, run, simulate
from specsim.traces import synth
from specsim.traces.format import RANK_NONE, Trace

BASE = dict(hardware="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", stack="ideal")
TREE = "[[0], [1], [0, 0], [1, 0], [0, 1], [0, 0, 0], [1, 0, 2]]"
# three hand-made sequences: ranks 0..5, RANK_NONE, runs of 0s and the tree's one depth-3 branch (1, 0, 2)
RANKS = [[0, 0, 0, 1, 0, 2, 3, 0, 1, 1, 0, 0, -1, 0, 0, 0, 0, 5, 1, 0, 2],
         [4, 1, 0, 0, 0, -1, 1, 0, 2, 0, 1, 0, 0],
         [0, 2, 0, 0, 1, 1, 1, 0, 0, 0, 0, 3]]


def _write(tmp_path, ranks, name="r.csv", rank=True, **meta):
    t = Trace.from_sequences([(np.asarray(r) == 0).astype(float) for r in ranks], dict(meta), ranks=ranks)
    if not rank:
        t = Trace(t.frame.drop(columns="rank"), t.metadata)
    return str(t.write(tmp_path / name))


def _replay(tree: Tree, ranks, requests, owed):
    """Accepted depth of every step of every request, by the rule in plain Python: request i walks sequence
    i mod n from output position 1 onward (into the next sequences, wrapping); a step starting at t accepts the
    longest prefix of ranks t, t+1, … that is a node, emits n + 1 tokens (the last step truncated) and the next
    step starts where it ended."""
    flat = [r for seq in ranks for r in seq]
    starts = np.cumsum([0] + [len(s) for s in ranks])[:-1]
    out = {}
    for i in range(requests):
        t, left, steps = int(starts[i % len(ranks)]) + 1, int(owed[i]), []
        while left > 0:
            n = tree.accepted([flat[(t + k) % len(flat)] for k in range(tree.depth)])
            steps.append(n)
            tok = min(n + 1, left)
            t, left = t + tok, left - tok
        out[i] = steps
    return out


# --- (a) a chain on a rank trace is the β run -------------------------------------------------------------------

def test_a_chain_on_a_rank_trace_is_the_beta_run_bit_for_bit(tmp_path):
    tr = synth.ranked([0.6, 0.8, 0.9], n_sequences=6, length=200, seed=3)
    with_rank = str(tr.write(tmp_path / "r.parquet"))
    beta_only = str(Trace(tr.frame.drop(columns="rank"), tr.metadata).write(tmp_path / "b.parquet"))
    for extra in (dict(requests=12, output_len=80), dict(requests=12, output_len=80, batch=4)):
        chain = run(make_config(**BASE, **extra, trace=beta_only, gamma=3))
        assert run(make_config(**BASE, **extra, trace=with_rank, gamma=3)) == chain
        tree = run(make_config(**BASE, **extra, trace=with_rank, speculative_token_tree='{"widths": [1, 1, 1]}'))
        assert [tree.pop(k) for k in ("tree_nodes", "tree_depth", "tree_per_depth")] == [3, 3, [1, 1, 1]]
        assert tree == chain


def test_the_rank_walk_of_a_chain_is_the_beta_walk():
    """Forced through the rank thresholds, a chain accepts what a T = 0 trace's β says (rank 0 ⇔ β = 1)."""
    tr = synth.ranked([0.7, 0.9], n_sequences=3, length=50, seed=1)
    bpos = np.arange(0, 160)
    by_rank = RankWalk(Tree.from_widths([1] * 4), tr.rank).thresholds(4, bpos)
    by_beta = Acceptance(trace=tr).thresholds(4, bpos)
    u = np.random.default_rng(0).random(by_rank.shape)
    assert np.array_equal((u < by_rank).argmin(1), (u < by_beta).argmin(1))
    assert set(np.unique(by_rank[:, :4])) == {0.0, 1.0} and (by_rank[:, 4] == -1).all()


# --- (b) the accepted depth is the longest rank prefix in the tree ------------------------------------------------

def test_accepted_depths_are_the_trees_rule_at_every_start():
    tree = parse_tree(TREE, None)
    flat = [r for s in RANKS for r in s]
    want = [tree.accepted([flat[(t + k) % len(flat)] for k in range(3)]) for t in range(len(flat))]
    assert accepted_depths(tree, np.array(flat)).tolist() == want
    assert max(want) == 3 and 0 in want  # the hand-made ranks reach the deep branch and miss the tree


@pytest.mark.parametrize("extra", [dict(), dict(batch=3), dict(rate=50.0, max_batch=3)],
                         ids=["fast path", "closed kernel", "event loop"])
def test_the_engine_accepts_the_longest_rank_prefix_in_the_tree(tmp_path, extra):
    path = _write(tmp_path, RANKS)
    res = simulate(make_config(**BASE, trace=path, speculative_token_tree=TREE, requests=7, output_len=30, **extra))
    spec, owed = res.spec, res.workload.output_len - 1
    want = _replay(parse_tree(TREE, None), RANKS, 7, owed)
    got = {i: spec.rs_accepted[spec.rs_request == i].tolist() for i in range(7)}
    assert got == want
    steps = [n for v in want.values() for n in v]
    assert res.summary["tokens_per_target_run"] == pytest.approx(np.mean(steps) + 1.0, rel=1e-12)  # τ: mean n + 1


# --- (c) a wider tree accepts at least as much ------------------------------------------------------------------

def test_a_wider_tree_accepts_at_least_as_many_tokens_as_the_chain(tmp_path):
    tr = synth.ranked([0.55, 0.75, 0.85], n_sequences=8, length=300, seed=7)
    path = str(tr.write(tmp_path / "r.csv"))
    chain, tree = Tree.from_widths([1, 1, 1]), Tree.from_widths([3, 2, 1])
    assert (accepted_depths(tree, tr.rank) >= accepted_depths(chain, tr.rank)).all()
    common = dict(BASE, trace=path, requests=40, output_len=120)
    c = run(make_config(**common, gamma=3))
    t = run(make_config(**common, speculative_token_tree='{"widths": [3, 2, 1]}'))
    assert t["tokens_per_target_run"] > c["tokens_per_target_run"] and t["tree_nodes"] == 15
    # the closed form is the tree's at the trace's own P(rank = r); i.i.d. ranks simulate close to it
    want = tree.expected_tokens(tr.rank_probabilities(3))
    assert t["tokens_per_target_run_eq1"] == pytest.approx(want, rel=1e-12)
    assert t["tokens_per_target_run"] == pytest.approx(want, rel=0.05)


# --- (d) the rank column ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["t.csv", "t.parquet"])
def test_rank_round_trips(tmp_path, name):
    tr = Trace.from_sequences([[1.0, 0.0, 0.0], [0.0, 1.0]], {"temperature": 0}, ranks=[[0, 3, -1], [7, 0]])
    back = Trace.read(tr.write(tmp_path / name))
    assert back.rank.tolist() == [0, 3, RANK_NONE, 7, 0] and back.rank.dtype == np.int64
    assert np.array_equal(back.beta, tr.beta) and back.metadata == tr.metadata
    assert Trace.from_sequences([[0.5]]).rank is None


@pytest.mark.parametrize("cell, what", [("-2", "out of range"), ("1.5", "not an integer"),
                                        ("true", "not an integer"), ("x", "not an integer"), ("", "missing")])
def test_a_bad_rank_in_a_csv_is_one_line(tmp_path, cell, what):
    p = tmp_path / "bad.csv"
    p.write_text(f"sequence_id,position,beta,rank\n0,0,1.0,0\n0,1,0.0,{cell}\n")
    with pytest.raises(ConfigError) as e:
        Trace.read(p)
    msg = str(e.value)
    assert what in msg and "data row 2" in msg and "'rank'" in msg and str(p) in msg and "\n" not in msg


@pytest.mark.parametrize("values, what", [(["0", "3"], "where integers belong"), ([True, False], "true/false"),
                                          ([0.0, 1.5], "type float64 where integers")])
def test_a_bad_rank_in_parquet_is_one_line(tmp_path, values, what):
    p = tmp_path / "bad.parquet"
    pd.DataFrame({"sequence_id": [0, 0], "position": [0, 1], "beta": [1.0, 0.0], "rank": values}).to_parquet(p)
    with pytest.raises(ConfigError, match=what) as e:
        Trace.read(p)
    assert "'rank'" in str(e.value) and str(p) in str(e.value)


def test_at_temperature_zero_rank_and_beta_must_agree():
    Trace.from_sequences([[1.0, 0.0]], {"temperature": 0.5}, ranks=[[2, 0]])  # above T = 0: not checked
    with pytest.raises(ConfigError, match="sequence_id 0, position 1 has beta 0 and rank 0"):
        Trace.from_sequences([[1.0, 0.0]], {"temperature": 0}, ranks=[[0, 0]])


def test_a_wide_tree_on_a_trace_without_ranks_is_one_line(tmp_path, capsys):
    path = _write(tmp_path, RANKS, "b.csv", rank=False)
    make_config(**BASE, trace=path, speculative_token_tree=TREE)  # validating the config does not read the trace
    code, out, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                                "--draft", "llama-3.2-1b", "--trace", path, "--speculative-token-tree", TREE)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "no rank column; record it with specsim record" in err and path in err and "--speculative-token-tree" \
        in err
    code, _, err = cli_capsys(capsys, "simulate", "--hardware", "h100-sxm", "--target", "llama-3.1-8b",
                              "--draft", "llama-3.2-1b", "--trace", _write(tmp_path, RANKS), "--lenience", "0.5",
                              "--speculative-token-tree", TREE)
    assert code == 2 and "--lenience" in err and len(err.strip().splitlines()) == 1


# --- (e) record writes the rank -----------------------------------------------------------------------------------

def test_record_writes_the_drafts_rank_at_temperature_zero(one_thread):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import tiny_pair

    from specsim.executor.record import record_trace
    from specsim.executor.sampling import SamplingConfig

    target, draft = tiny_pair(vocab=32)
    prompts = [[1, 2, 3], [9, 4]]
    tr = record_trace(target, draft, prompts, 16, SamplingConfig(temperature=0.0))
    assert ((tr.rank == 0) == (tr.beta == 1.0)).all() and 0 < tr.alpha < 1 and tr.rank.max() > 0
    tokens = tr.frame["token"].tolist()
    with torch.inference_mode():  # the rank by a direct sort of the draft's logits (ties: lower id first)
        for i, prompt in enumerate(prompts):
            seq = tokens[16 * i:16 * (i + 1)]
            for t in (0, 5, 15):
                logits = draft.model(torch.tensor([prompt + seq[:t]])).logits[0, -1].float().tolist()
                order = sorted(range(32), key=lambda x: (-logits[x], x))
                assert tr.rank[16 * i + t] == order.index(seq[t])
    assert record_trace(target, draft, prompts, 4, SamplingConfig(temperature=1.0)).rank is None


def test_cli_record_writes_the_rank_column(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "rank-test-tiny.toml").write_text(
        'n_layers = 1\nd_model = 32\nd_ff = 64\nn_heads = 4\nn_kv_heads = 2\nhead_dim = 8\nvocab_size = 64\n'
        'dtype = "fp32"\n')
    monkeypatch.setenv("SPECSIM_PROFILE_PATH", str(d))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the cat sat\non the mat\n")
    out = tmp_path / "t.csv"
    code, stdout, _ = cli_capsys(capsys, "record", "--target", "profile:rank-test-tiny", "--draft", "bigram",
                                 "--prompts", str(prompts), "--out", str(out), "--max-new-tokens", "6",
                                 "--temperature", "0", "--device", "cpu", "--json")
    assert code == 0 and json.loads(stdout)["rank"] is True
    tr = Trace.read(out)
    assert tr.rank is not None and ((tr.rank == 0) == (tr.beta == 1.0)).all()


def test_trace_synth_ranked_and_stats_round_trip_the_topk_acceptance(tmp_path, capsys):
    """`trace synth --kind ranked` writes a rank trace whose measured top-k acceptance (`trace stats`) is the one
    asked for, within sampling error; bad vectors are one line."""
    import json

    from conftest import cli_capsys

    out = tmp_path / "r.parquet"
    code, _, err = cli_capsys(capsys, "trace", "synth", "--kind", "ranked", "--topk-acceptance", "[0.6, 0.75, 0.82]",
                              "--sequences", "64", "--out", out, "--json")
    assert code == 0, err
    code, text, err = cli_capsys(capsys, "trace", "stats", out, "--json")
    got = json.loads(text)["topk_acceptance"]
    assert code == 0 and got[:3] == pytest.approx([0.6, 0.75, 0.82], abs=0.02) and got[3] == got[2]
    for bad in ("[0.6, 0.5]", "[0.6", "[]"):
        code, _, err = cli_capsys(capsys, "trace", "synth", "--kind", "ranked", "--topk-acceptance", bad, "--out", out)
        assert code == 2 and "--topk-acceptance" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = cli_capsys(capsys, "trace", "synth", "--kind", "iid", "--alpha", "0.6", "--topk-acceptance",
                              "[0.6]", "--out", out)
    assert code == 2 and "does not apply" in err
