"""β traces (issue 3, item 1): file format, validation, statistics, synthetic generators and `specsim trace`."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specsim.traces import stats as st
from specsim.traces import synth as ts
from specsim.errors import ConfigError
from specsim.traces.format import Trace

AWKWARD = np.array([0.1, 1 / 3, 5e-324, np.nextafter(1.0, 0.0), 1.0, 0.0, 2 / 3 * 1e-5, 0.95, 1e-300])
META = {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "temperature": 0.7, "top_k": 40, "top_p": None,
        "lenience": 1.0, "task": "Übersetzung EnDe: ±β", "source": "executor", "how_recorded": "teacher-forced",
        "seed": 3, "exact": True, "generator": {"kind": "test", "values": [0.1, 2, "x"]}}


def bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


from conftest import cli_capsys as run  # noqa: E402  (the shared CLI runner)


def write_text(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ---- file format --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".parquet", ".pq", ".csv"])
def test_round_trip_is_bit_exact_with_metadata(tmp_path, suffix):
    rand = np.random.default_rng(5).random(300)
    trace = Trace.from_sequences([AWKWARD, rand], META, sequence_ids=[7, 2])
    back = Trace.read(trace.write(tmp_path / f"t{suffix}"))
    assert back.metadata == META
    assert back.sequence_ids == [2, 7]
    assert np.array_equal(bits(back.sequences()[0]), bits(rand))
    assert np.array_equal(bits(back.sequences()[1]), bits(AWKWARD))
    pd.testing.assert_frame_equal(back.frame, trace.frame)
    assert back.frame["sequence_id"].dtype == np.int64 and back.frame["position"].dtype == np.int64


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_extra_columns_survive(tmp_path, suffix):
    frame = pd.DataFrame({"sequence_id": [0, 0, 1], "position": [0, 1, 0], "beta": [0.5, 0.25, 1.0],
                          "accepted": [1, 0, 1]})
    back = Trace.read(Trace(frame, {"a": 1}).write(tmp_path / f"x{suffix}"))
    assert back.frame["accepted"].tolist() == [1, 0, 1]


def test_csv_is_for_people(tmp_path):
    trace = Trace.from_sequences([[0.5, 1.0]], {"task": "EnDe", "temperature": 0})
    text = trace.write(tmp_path / "t.csv").read_text()
    assert text.splitlines()[:3] == ['# task: "EnDe"', "# temperature: 0", "sequence_id,position,beta"]
    # hand-written: plain-string values, a free comment, integer β, rows out of order
    p = write_text(tmp_path, "hand.csv", "# task: EnDe\n# a free comment\n# top_k: 40\n"
                   "sequence_id,position,beta\n1,0,0\n0,1,1\n0,0,1\n")
    t = Trace.read(p)
    assert t.metadata == {"task": "EnDe", "top_k": 40}
    assert [s.tolist() for s in t.sequences()] == [[1.0, 1.0], [0.0]]
    assert t.sequences()[0].dtype == np.float64


def test_accessors(tmp_path):
    t = Trace.from_sequences([[0.5, 0.25], [1.0]], sequence_ids=[9, 4])
    assert t.alpha == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    assert t.n_tokens == 3 and t.n_sequences == 2 and t.sequence_ids == [4, 9]
    assert [s.tolist() for s in t.sequences()] == [[1.0], [0.5, 0.25]]
    with pytest.raises(ValueError):
        t.sequences()[0][0] = 0.0  # read-only views
    assert t.slot_factor(0) == 1.0 and t.slot_factor(5) == 1.0
    d = Trace.from_sequences([[0.8]], {"slot_decay": 0.5})
    assert d.slot_factor(0) == 1.0 and d.slot_factor(3) == 0.125


# ---- validation ---------------------------------------------------------------------------------------------
HEAD = "sequence_id,position,beta\n"
BAD_CSV = [
    ("above_one", HEAD + "0,0,0.5\n0,1,1.5\n", ["'beta'", "out of range", "sequence_id 0, position 1", "1.5",
                                               "[0, 1]"]),
    ("negative", HEAD + "0,0,-0.01\n", ["'beta'", "-0.01", "[0, 1]"]),
    ("nan", HEAD + "0,0,0.5\n3,0,nan\n", ["'beta'", "NaN", "sequence_id 3, position 0", "[0, 1]"]),
    ("blank", HEAD + "0,0,0.5\n0,1,\n", ["'beta'", "NaN", "position 1"]),
    ("text", HEAD + "0,0,high\n", ["'beta'", "not a number", "'high'"]),
    ("gap", HEAD + "0,0,.5\n0,1,.5\n7,0,.5\n7,1,.5\n7,4,.5\n", ["'position'", "sequence_id 7", "2 is missing",
                                                             "followed by 4"]),
    ("late_start", HEAD + "2,1,.5\n2,2,.5\n", ["'position'", "sequence_id 2", "start at 0"]),
    ("duplicate", HEAD + "0,0,.5\n0,1,.5\n0,1,.5\n", ["'position'", "sequence_id 0", "more than once"]),
    ("fraction", HEAD + "0,0.5,.5\n", ["'position'", "not an integer"]),
    ("missing_column", "sequence_id,position\n0,0\n", ["'beta'", "missing column", "sequence_id, position, beta"]),
    ("header_only", HEAD, ["no rows"]),
    ("no_header", "\n\n", ["no header and no rows"]),
    ("empty", "", ["empty file"]),
]


@pytest.mark.parametrize("name,text,needles", BAD_CSV, ids=[b[0] for b in BAD_CSV])
def test_bad_csv_is_one_clear_line(tmp_path, name, text, needles):
    p = write_text(tmp_path, f"{name}.csv", text)
    with pytest.raises(ConfigError) as e:
        Trace.read(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg
    for needle in needles:
        assert needle in msg


def test_bad_parquet_content(tmp_path):
    p = tmp_path / "range.parquet"
    pq.write_table(pa.table({"sequence_id": [0, 0], "position": [0, 1], "beta": [0.5, 2.0]}), p)
    with pytest.raises(ConfigError, match=r"range\.parquet: field 'beta': beta is out of range.*2\.0"):
        Trace.read(p)
    pq.write_table(pa.table({"sequence_id": [0], "beta": [0.5]}), p)
    with pytest.raises(ConfigError, match=r"field 'position': missing column"):
        Trace.read(p)
    pq.write_table(pa.table({"sequence_id": pa.array([], pa.int64()), "position": pa.array([], pa.int64()),
                             "beta": pa.array([], pa.float64())}), p)
    with pytest.raises(ConfigError, match="no rows"):
        Trace.read(p)


def test_parquet_without_specsim_metadata_reads(tmp_path):
    p = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"sequence_id": [0, 0], "position": [0, 1], "beta": [0.5, 0.75]}), p)
    assert Trace.read(p).metadata == {} and Trace.read(p).alpha == 0.625


def test_truncated_parquet(tmp_path):
    good = Trace.from_sequences([np.linspace(0, 1, 2000)], META).write(tmp_path / "good.parquet")
    data = good.read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError) as e:
        Trace.read(cut)
    assert str(cut) in str(e.value) and "truncated or corrupt" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "zero.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match="empty file"):
        Trace.read(tmp_path / "zero.parquet")


def test_unknown_suffix_and_missing_file(tmp_path):
    t = Trace.from_sequences([[0.5]])
    for call in (lambda: Trace.read(tmp_path / "t.txt"), lambda: t.write(tmp_path / "t.json"),
                 lambda: t.write(tmp_path / "noext")):
        with pytest.raises(ConfigError, match=r"field 'suffix'.*allowed: \.parquet, \.pq, \.csv"):
            call()
    with pytest.raises(ConfigError, match="no such trace file"):
        Trace.read(tmp_path / "absent.csv")


def test_bad_metadata():
    with pytest.raises(ConfigError, match=r"field 'slot_decay'.*1\.5.*\[0, 1\]"):
        Trace.from_sequences([[0.5]], {"slot_decay": 1.5})
    with pytest.raises(ConfigError, match="not JSON-serializable"):
        Trace.from_sequences([[0.5]], {"when": object()})
    with pytest.raises(ConfigError, match="bad metadata key"):
        Trace.from_sequences([[0.5]], {"a: b": 1})


# ---- statistics ---------------------------------------------------------------------------------------------
def test_walk_by_hand_at_temperature_zero():
    # γ = 2. Steps start at 0 (accept, reject), 2 (accept, accept, bonus at 4), 5 (reject), 6 (accept, end).
    t = Trace.from_sequences([[1, 0, 1, 1, 0, 0, 1]])
    w = st.walk(t, 2)
    assert w["acceptance_by_position"].tolist() == [0.75, 0.5]
    assert w["tokens_per_target_run"] == 7 / 4


def test_constant_beta_matches_eq1():
    t = ts.iid(0.8, n_sequences=2, length=3000)
    s = st.summarize(t, gamma=5, max_lag=3)
    assert s["acceptance_by_position"] == pytest.approx([0.8] * 5, abs=1e-12)
    assert s["tokens_per_target_run"] == pytest.approx(s["tokens_per_target_run_eq1"], rel=2e-3)
    assert s["tokens_per_target_run_eq1"] == pytest.approx((1 - 0.8 ** 6) / 0.2)
    assert all(np.isnan(s["autocorrelation"]))  # constant β: correlation undefined
    assert s["clustering_index"] == pytest.approx(1.0, abs=1e-12)
    assert s["mean_run_length_iid"] == pytest.approx(0.8 / 0.2, rel=2e-3)


def test_all_accepted_trace_gives_the_alpha_one_limits():
    """β = 1 everywhere: eq. (1) is its limit γ + 1 (what the walk sees too), and the i.i.d. run length from a
    position is the positions left, so clustering is exactly 1."""
    t = Trace.from_sequences([[1.0] * 20, [1.0] * 7])
    s = st.summarize(t, gamma=4, max_lag=2)
    assert s["tokens_per_target_run_eq1"] == 5.0
    assert s["mean_run_length_iid"] == s["mean_run_length"] == (20 * 21 / 2 + 7 * 8 / 2) / 27
    assert s["clustering_index"] == 1.0


def test_slot_decay_enters_the_walk():
    t = ts.decay(0.9, 0.8, n_sequences=1, length=500)
    assert st.acceptance_by_position(t, 4) == pytest.approx([0.9 * 0.8 ** k for k in range(4)], abs=1e-12)


def replay(trace, gamma, rng):
    """Monte Carlo of the walk in DESIGN.md "Simulation semantics" — the DP must agree with it."""
    reached, accepted, steps = np.zeros(gamma), np.zeros(gamma), 0
    for seq in trace.sequences():
        t, n = 0, len(seq)
        while t < n:
            steps += 1
            k = 0
            while True:
                if k == gamma:
                    t += gamma + 1
                    break
                if t + k >= n:
                    t = n
                    break
                reached[k] += 1
                if rng.random() < seq[t + k] * trace.slot_factor(k):
                    accepted[k] += 1
                    k += 1
                else:
                    t += k + 1
                    break
    return accepted / reached, trace.n_tokens / steps


def test_walk_agrees_with_seeded_replay():
    t = ts.markov(0.6, 8, n_sequences=3, length=300, seed=2)
    t = Trace(t.frame, {**t.metadata, "slot_decay": 0.95})
    rng = np.random.default_rng(11)
    runs = [replay(t, 3, rng) for _ in range(150)]
    w = st.walk(t, 3)
    assert np.mean([r[0] for r in runs], axis=0) == pytest.approx(w["acceptance_by_position"], abs=0.02)
    assert np.mean([r[1] for r in runs]) == pytest.approx(w["tokens_per_target_run"], rel=0.02)


def test_run_length_by_hand():
    t = Trace.from_sequences([[1, 1, 0, 1]])
    observed, iid = st.run_lengths(t)
    assert observed == 1.0  # consecutive accepts from each position: 2, 1, 0, 1
    a = 0.75
    assert iid == pytest.approx(np.mean([a * (1 - a ** m) / (1 - a) for m in (4, 3, 2, 1)]))


def test_iid_bernoulli_is_geometric_and_uncorrelated():
    t = ts.iid(0.7, n_sequences=20, length=1000, seed=1, bernoulli=True)
    s = st.summarize(t, gamma=4, max_lag=5)
    assert set(np.unique(t.beta)) == {0.0, 1.0}
    assert max(abs(x) for x in s["autocorrelation"]) < 0.05
    assert s["mean_run_length_iid"] == pytest.approx(t.alpha / (1 - t.alpha), rel=0.01)
    assert s["mean_run_length"] == pytest.approx(s["mean_run_length_iid"], rel=0.1)
    assert 0.9 < s["clustering_index"] < 1.1


@pytest.mark.parametrize("bernoulli", [False, True])
def test_markov_is_clustered(bernoulli):
    t = ts.markov(0.7, 20, n_sequences=20, length=1000, seed=4, bernoulli=bernoulli)
    s = st.summarize(t, gamma=4, max_lag=3)
    assert s["autocorrelation"][0] > 0.3
    assert s["clustering_index"] > 1.3
    if not bernoulli:  # β is a function of the chain: corr at lag k = λ^k
        lam = ts.markov_chain(0.7, 20).eigenvalue
        assert s["autocorrelation"] == pytest.approx([lam, lam ** 2, lam ** 3], abs=0.08)


def test_stat_arguments_are_checked():
    t = Trace.from_sequences([[0.5]])
    with pytest.raises(ConfigError, match="'gamma'"):
        st.walk(t, 0)
    with pytest.raises(ConfigError, match="'max_lag'"):
        st.autocorrelation(t, 0)


# ---- generators ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make,alpha", [
    (lambda: ts.iid(0.6, 16, 1000, seed=1, bernoulli=True), 0.6),
    (lambda: ts.iid(0.6, 2, 10), 0.6),
    (lambda: ts.beta_dist(0.7, 5.0, 16, 1000, seed=1), 0.7),
    (lambda: ts.markov(0.3, 10, 32, 2000, seed=1), 0.3),
    (lambda: ts.markov(0.7, 10, 32, 2000, seed=1), 0.7),
    (lambda: ts.markov(0.9, 10, 32, 2000, seed=1, bernoulli=True), 0.9),
    (lambda: ts.decay(0.8, 0.9, 2, 10), 0.8),
])
def test_generator_means(make, alpha):
    t = make()
    assert abs(t.alpha - alpha) < 0.02
    assert t.metadata["source"] == "synthetic" and "kind" in t.metadata["generator"]


def test_beta_dist_spread():
    t = ts.beta_dist(0.7, 5.0, 16, 1000, seed=1)
    assert t.beta.std() == pytest.approx(np.sqrt(0.7 * 0.3 / 6.0), rel=0.05)


def test_markov_chain_parameters_and_stretches():
    chain = ts.markov_chain(0.7, 10, beta_easy=0.9, beta_hard=0.1)
    P = chain.transition
    assert P.sum(axis=1) == pytest.approx([1, 1])
    assert chain.stationary @ P == pytest.approx(chain.stationary)
    assert chain.stationary @ chain.betas == pytest.approx(0.7)
    t = ts.markov(0.7, 10, 40, 2000, seed=3, beta_easy=0.9, beta_hard=0.1)
    assert t.metadata["generator"]["p_easy_to_hard"] == chain.p_easy_to_hard
    changes = sum(int(np.count_nonzero(np.diff(s))) for s in t.sequences())
    assert t.n_tokens / (changes + t.n_sequences) == pytest.approx(10, rel=0.1)  # mean stretch length


def test_markov_refuses_unreachable_settings():
    with pytest.raises(ConfigError, match=r"field 'alpha'.*not reachable.*allowed: \(0\.2, 0\.95\)"):
        ts.markov(0.97, 10)
    with pytest.raises(ConfigError, match=r"field 'alpha'.*\(0\.5, 0\.9\)"):
        ts.markov(0.3, 10, beta_easy=0.9, beta_hard=0.5)
    with pytest.raises(ConfigError, match=r"field 'mean_stretch'.*\[7\.5, "):  # π_hard = 1/15 needs S >= 7.5
        ts.markov(0.9, 2)
    with pytest.raises(ConfigError, match="field 'beta_hard'"):
        ts.markov(0.5, 10, beta_easy=0.4, beta_hard=0.6)


def test_generator_arguments_are_checked():
    with pytest.raises(ConfigError, match="'n_sequences'"):
        ts.iid(0.5, n_sequences=0)
    with pytest.raises(ConfigError, match="'alpha'"):
        ts.iid(1.5)
    with pytest.raises(ConfigError, match="'decay'"):
        ts.decay(0.5, 1.2)
    with pytest.raises(ConfigError, match="'concentration'"):
        ts.beta_dist(0.5, 0)


def test_decay_metadata():
    t = ts.decay(0.8, 0.9, 2, 10)
    assert t.metadata["slot_decay"] == 0.9 and t.slot_factor(2) == pytest.approx(0.81)
    assert np.all(t.beta == 0.8)


@pytest.mark.parametrize("kind,kw", [("iid", {"bernoulli": True}), ("beta", {}), ("markov", {}),
                                     ("markov", {"bernoulli": True}), ("decay", {})])
def test_same_seed_same_bytes(tmp_path, kind, kw):
    def make(seed, n=4, name="a.csv"):
        return ts.synthesize(kind, 0.6, n_sequences=n, length=200, seed=seed, **kw).write(tmp_path / name)

    a, b = make(7, name="a.csv").read_bytes(), make(7, name="b.csv").read_bytes()
    assert a == b
    pa_ = make(7, name="a.parquet").read_bytes()
    assert pa_ == make(7, name="b.parquet").read_bytes()
    if kind != "decay":  # decay is deterministic
        assert make(8, name="c.csv").read_bytes() != a
        few, many = (ts.synthesize(kind, 0.6, n_sequences=n, length=200, seed=7, **kw) for n in (2, 4))
        assert all(np.array_equal(x, y) for x, y in zip(few.sequences(), many.sequences()[:2]))


# ---- CLI ----------------------------------------------------------------------------------------------------
def test_cli_synth_stats_convert(tmp_path, capsys):
    csv = tmp_path / "m.csv"
    code, out, err = run(capsys, "trace", "synth", "--kind", "markov", "--alpha", "0.7", "--stretch", "15",
                         "--sequences", "8", "--length", "400", "--seed", "3", "--out", csv, "--json")
    assert code == 0, err
    made = json.loads(out)
    assert made["n_tokens"] == 3200 and made["metadata"]["generator"]["mean_stretch"] == 15.0
    code, out, err = run(capsys, "trace", "stats", csv, "--gamma", "3", "--max-lag", "4", "--json")
    assert code == 0, err
    s = json.loads(out)
    for key in ("alpha", "n_tokens", "n_sequences", "acceptance_by_position", "autocorrelation", "mean_run_length",
                "mean_run_length_iid", "clustering_index", "metadata"):
        assert key in s
    assert len(s["acceptance_by_position"]) == 3 and len(s["autocorrelation"]) == 4
    assert s["alpha"] == made["alpha"] and s["metadata"] == made["metadata"] and s["clustering_index"] > 1
    pq_path, back = tmp_path / "m.parquet", tmp_path / "back.csv"
    assert run(capsys, "trace", "convert", csv, pq_path, "--json")[0] == 0
    assert run(capsys, "trace", "convert", pq_path, back)[0] == 0
    assert back.read_bytes() == csv.read_bytes()
    code, out, _ = run(capsys, "trace", "stats", pq_path)
    assert code == 0 and "clustering index" in out and "Acceptance by draft slot" in out


@pytest.mark.parametrize("args,needle", [
    (["stats", "{d}/absent.csv"], "no such trace file"),
    (["stats", "{d}/bad.csv"], "'beta'"),
    (["stats", "{d}/t.txt"], "'suffix'"),
    (["stats", "{d}/cut.parquet"], "truncated or corrupt"),
    (["stats", "{d}/good.csv", "--gamma", "0"], "'gamma'"),
    (["stats", "{d}/good.csv", "--max-lag", "0"], "'max_lag'"),
    (["synth", "--kind", "zipf", "--alpha", "0.5", "--out", "{d}/x.csv"], "'--kind'"),
    (["synth", "--kind", "markov", "--alpha", "0.99", "--out", "{d}/x.csv"], "not reachable"),
    (["synth", "--kind", "iid", "--alpha", "0.5", "--stretch", "4", "--out", "{d}/x.csv"], "'--stretch'"),
    (["synth", "--kind", "iid", "--alpha", "1.5", "--out", "{d}/x.csv"], "'alpha'"),
    (["synth", "--kind", "iid", "--alpha", "0.5", "--out", "{d}/x.txt"], "'suffix'"),
    (["synth", "--kind", "iid", "--alpha", "0.5", "--out", "{d}/no/dir/x.csv"], "cannot write"),
    (["convert", "{d}/good.csv", "{d}/out.xlsx"], "'suffix'"),
    (["synth", "--kind", "iid", "--out", "{d}/x.csv"], "--alpha"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, args, needle):
    write_text(tmp_path, "bad.csv", HEAD + "0,0,1.5\n")
    write_text(tmp_path, "t.txt", HEAD + "0,0,0.5\n")
    Trace.from_sequences([[0.5, 0.7]]).write(tmp_path / "good.csv")
    data = Trace.from_sequences([np.linspace(0, 1, 1000)]).write(tmp_path / "g.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    code, out, err = run(capsys, "trace", *[a.format(d=tmp_path) for a in args], "--json")
    assert code == 2
    assert out == ""
    assert err.startswith("specsim: error:") and err.count("\n") == 1 and "Traceback" not in err
    assert needle in err
