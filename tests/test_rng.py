"""The fast ways of drawing acceptance give exactly the documented streams: `StreamFamily` = `default_rng((seed, 2, i))`
and `Acceptance.fixed_runs` / `FixedRuns` = `Acceptance.fixed_run` request by request."""

import numpy as np
import pytest

from specsim.engine.acceptance import Acceptance, FixedRuns
from specsim.rng import ACCEPTANCE, StreamFamily, pcg64_states, seed_sequence_state, stream

SEEDS = [0, 1, 12345, 2**32 - 1, 2**32, 2**40 + 5, 2**64 + 3, 10**25]


@pytest.mark.parametrize("seed", SEEDS)
def test_vectorized_seeding_equals_numpys(seed):
    idx = np.r_[0:40, 4095, 4096, 2**31, 2**32 - 1]
    want = [np.random.SeedSequence((seed, ACCEPTANCE, int(i))).generate_state(4, np.uint64) for i in idx]
    np.testing.assert_array_equal(seed_sequence_state((seed, ACCEPTANCE), idx), np.array(want))
    for i, (s, inc) in zip(idx, pcg64_states((seed, ACCEPTANCE), idx)):
        st = stream(seed, ACCEPTANCE, int(i)).bit_generator.state["state"]
        assert (st["state"], st["inc"]) == (s, inc)


@pytest.mark.parametrize("expect", [None, 5, 100, 5000])
def test_stream_family_replays_each_stream_bit_for_bit(expect):
    fam = StreamFamily(7, ACCEPTANCE)
    if expect is not None:
        fam.expect(expect)
    gen = fam.generator()
    for i in (0, 3, 17, 4095, 4096, 4200, 2**32 + 1):
        out = np.empty(257)
        fam.fill(i, out)
        ref = stream(7, ACCEPTANCE, i)
        np.testing.assert_array_equal(out, ref.random(257))
        fam.load(i, gen)  # a loaded generator continues exactly as the stream does
        np.testing.assert_array_equal(np.concatenate([gen.random(5), gen.random(300)]),
                                      stream(7, ACCEPTANCE, i).random(305))


@pytest.mark.parametrize("alpha,gamma,lenience", [(0.7, 4, 1.0), (0.0, 3, 1.0), (0.95, 12, 0.5), (0.5, 1, 1.0),
                                                  (0.999, 7, 1.0), (0.6, 0, 1.0)])
def test_fixed_runs_equal_fixed_run_request_by_request(alpha, gamma, lenience):
    acc = Acceptance(alpha=alpha, seed=3, lenience=lenience)
    g = np.random.default_rng(1)
    req = g.permutation(200)[:60]
    tokens = g.integers(0, 600, 60)
    tokens[:3] = (0, 1, -2)
    for z in (5.0, -3.0):  # z = -3 draws too few steps for most requests: the redo path
        n, tok, start, count = acc.fixed_runs(req, gamma, tokens, z=z)
        for r in range(len(req)):
            want = acc.fixed_run(int(req[r]), gamma, int(tokens[r]))
            got = slice(start[r], start[r] + count[r])
            np.testing.assert_array_equal(n[got], want)
            assert tok[got].sum() == max(0, tokens[r])  # the last step is truncated to what is owed
            np.testing.assert_array_equal(tok[got][:-1], want[:-1] + 1)


def test_fixed_runs_blocks_cover_a_workload_in_request_order():
    acc = Acceptance(alpha=0.8, seed=11)
    tokens = np.random.default_rng(2).integers(0, 300, 500)
    FixedRuns.UNIFORMS_PER_BLOCK, old = 4096, FixedRuns.UNIFORMS_PER_BLOCK  # many small blocks
    try:
        runs = FixedRuns(acc, 5, tokens)
        assert runs.block < len(tokens)
        n, _, count = runs.all()
    finally:
        FixedRuns.UNIFORMS_PER_BLOCK = old
    want = [acc.fixed_run(i, 5, int(t)) for i, t in enumerate(tokens)]
    np.testing.assert_array_equal(count, [len(w) for w in want])
    np.testing.assert_array_equal(n, np.concatenate(want))
    for i in (0, 7, 499):
        np.testing.assert_array_equal(runs.get(i)[0], want[i])
        assert runs.steps(i).sum() == tokens[i]
