"""Which drafts the target accepts: the β each request walks and the uniforms it draws.

Conventions (every engine — the step-by-step engine of record and the fast path — follows them exactly):

- Request i walks its own β sequence. From a trace: sequence (i mod n_sequences), continuing into the following
  sequences (wrapping to the first) if the request needs more positions than that sequence has. From an α: β ≡ α.
- β is indexed by *output position* t (0-based) of the drafted token. Output position 0 is produced by the target's
  prefill (plain decoding and speculation alike), so a speculative step starting after e emitted tokens drafts
  positions e … e+γ−1: trace position 0 of each sequence is never drafted.
- Draws come from `specsim.rng.stream(seed, ACCEPTANCE, i)` only. A step with draft length γ consumes exactly γ
  uniforms u_0 … u_{γ−1} of that stream, in order; it accepts n = the number of leading k with
  u_k < β'_{t+k,k}, where β'_{t,k} = lenient(β_t · slot_factor(k)). The target then adds one token (the correction,
  or the bonus after a clean sweep): n + 1 tokens, truncated to what the request still has to emit.
- Oracle (γ = the number about to be accepted): the step draws uniforms one at a time until the first rejection,
  with the same rule (u_k against β'_{t+k,k}, slot factors included), and stops after ORACLE_CAP accepts. It
  consumes n + 1 uniforms (n accepted + the rejecting one), or ORACLE_CAP when capped; its γ for that step is n.
- Implementation: uniforms are pre-drawn per request in blocks (`specsim.engine.draws.UniformPool`). That is
  numerically identical to calling `g.random(γ)` every step, because numpy's PCG64 `random()` turns each 64-bit
  word into one double with no buffering: `g.random(a)` followed by `g.random(b)` equals `g.random(a + b)` (tested
  in tests/test_engine.py).
  Streams are opened through `specsim.rng.StreamFamily` (the same streams, cheaper to open). With a fixed γ and a
  constant α a request's whole life is independent of everything else, so `FixedRuns` draws and judges it for a
  block of requests at once, vectorized over all their steps.

A token tree (`specsim.methods.tree`) under a constant α is a chain whose slot k accepts with the tree's per-depth
rate a_{k+1} = P(n ≥ k + 1 | n ≥ k) (`slot_rates`): the accepted depth then has the tree's distribution exactly.
A tree wider than a chain on a trace is judged on the trace's `rank` column instead of β
(`specsim.engine.rank_walk`): each step accepts the longest rank prefix that is a node, exactly; the thresholds
are 1/0 per slot, so the uniforms drawn are the chain's and only the accepted depths change. A chain (a width-1
tree included) on the same trace reads β as before, bit for bit.

Lenience l (App. A.5, lossy speculative sampling): the exact β_l needs both distributions, which a trace does not
carry. We use β_l = 1 − (1 − β) · l^κ with κ = LENIENCE_KAPPA = 0.38 — an APPROXIMATION fitted by us to the paper's
T5-small figures for T5-XXL EnDe at T = 1 (α = 0.62 / 0.71 / 0.76 / 0.84 at l = 1 / 0.5 / 0.3 / 0.1; the fit gives
0.62 / 0.708 / 0.760 / 0.842). At l = 1 it is exact (β_l = β).
"""

from __future__ import annotations

import math

import numpy as np

from specsim.errors import ConfigError
from specsim.limits import GAMMA_CAP  # noqa: F401  (the one γ cap; importers here read it from this module)
from specsim.rng import ACCEPTANCE, StreamFamily, stream

LENIENCE_KAPPA = 0.38  # fitted to PAPER-FACTS "Lenience" T5-small row; see the module docstring
ORACLE_CAP = GAMMA_CAP


def lenient(beta, lenience: float):
    """β_l = 1 − (1 − β)·l^κ (approximation, κ = 0.38; exact at l = 1)."""
    if lenience == 1.0:
        return beta
    return 1.0 - (1.0 - np.asarray(beta, dtype=float)) * lenience ** LENIENCE_KAPPA


def accepted_reference(u: np.ndarray, beta_walk: np.ndarray, start: int, gamma: int,
                       slot_factor=lambda k: 1.0, lenience: float = 1.0) -> int:
    """Plain-Python statement of the acceptance rule (for reading and tests; engines use the vectorized form)."""
    n = 0
    for k in range(gamma):
        if u[k] < lenient(beta_walk[start + k] * slot_factor(k), lenience):
            n += 1
        else:
            break
    return n


class Acceptance:
    """The acceptance source of one simulation: constant α or a trace, with lenience and slot factors.

    The engines compare a block of uniforms against thresholds; a threshold row has γ + 1 columns whose last one is
    −1 (never accepted), so `argmin(u < threshold)` is the number of leading accepts, capped at γ.
    """

    def __init__(self, alpha: float | None = None, trace=None, lenience: float = 1.0, seed: int = 0,
                 slot_rates=None, tree=None):
        if (alpha is None) == (trace is None):
            raise ConfigError("give exactly one of alpha and trace", field="alpha")
        self.ranks = None  # a tree on the trace's ranks (`rank_walk.RankWalk`), else None: thresholds from β
        if trace is not None and tree is not None and not tree.is_chain:
            self.ranks = _rank_walk(trace, tree, lenience)
        self.seed = int(seed)
        self.lenience = float(lenience)
        lk = 1.0 if lenience == 1.0 else lenience ** LENIENCE_KAPPA  # β' = 1 − (1 − β·f_k)·lk = a + b_k·β
        self.trace = trace
        cap = GAMMA_CAP + 1
        if trace is None:
            self.constant = True
            self.alpha_raw = float(alpha)
            sf = np.ones(cap)
            if slot_rates is not None:  # a token tree's per-depth acceptance a_d (specsim.methods.tree_config)
                r = np.asarray(slot_rates, dtype=float)[:cap]
                sf[:len(r)] = r / self.alpha_raw if self.alpha_raw > 0 else 0.0
        else:
            self.constant = False
            self.alpha_raw = float(trace.alpha)
            sf = np.array([trace.slot_factor(k) for k in range(cap)], dtype=float)
            seqs = trace.sequences()
            self.beta = np.ascontiguousarray(np.concatenate(seqs), dtype=float)
            self.seq_starts = np.r_[0, np.cumsum([len(s) for s in seqs])[:-1]].astype(np.int64)
        self.slot_factors = sf
        self.has_slot_decay = bool(np.any(sf != 1.0))
        # α of the run: mean of lenient β at slot 0 (what eq. (1)/(5) are evaluated at)
        self.alpha = float(1.0 - (1.0 - self.alpha_raw) * lk)
        # Rows for draft length G (G + 1 columns, last = never): threshold = a_row + b_row * β_t
        self._a = np.full(cap + 1, 1.0 - lk)
        self._b = lk * np.append(sf, 0.0)
        self._a[-1] = -1.0
        self._rows: dict[int, tuple] = {}
        self._fixed: dict[int, tuple] = {}
        self.streams = StreamFamily(self.seed, ACCEPTANCE)

    @classmethod
    def from_config(cls, cfg) -> Acceptance:
        a = cfg.acceptance
        from specsim.methods.tree_config import from_config as tree_of

        trace = None if a.trace is None else read_trace(a.trace)
        tree = tree_of(cfg)
        # a width-1 tree is the chain itself (its rates are α up to rounding: the chain's thresholds, exactly)
        rates = tree.slot_rates() if tree is not None and a.alpha is not None and not tree.tree.is_chain else None
        return cls(alpha=a.alpha, trace=trace, lenience=a.lenience, seed=cfg.workload.seed, slot_rates=rates,
                   tree=None if tree is None else tree.tree)

    # --- per-request walk ---------------------------------------------------------------------------
    def walk_start(self, request: np.ndarray | int):
        """Offset into `self.beta` where request i's output position 0 lies (0 for a constant α)."""
        if self.constant:
            return np.zeros_like(np.asarray(request, dtype=np.int64))
        return self.seq_starts[np.asarray(request, dtype=np.int64) % len(self.seq_starts)]

    def generator(self, request: int) -> np.random.Generator:
        return stream(self.seed, ACCEPTANCE, request)

    # --- thresholds ---------------------------------------------------------------------------------
    def row(self, G: int) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) of length G+1 with threshold_k = a_k + b_k·β_{t+k}; the last column never accepts."""
        r = self._rows.get(G)
        if r is None:
            a = np.append(self._a[:G], -1.0)
            b = np.append(self._b[:G], 0.0)
            const = a + b * self.alpha_raw if self.constant else None
            r = self._rows[G] = (a, b, const)
        return r

    def _fixed_params(self, G: int) -> tuple[np.ndarray, float, float]:
        """(thresholds, mean and variance of the tokens one step emits) for draft length G, constant α."""
        f = self._fixed.get(G)
        if f is None:
            thr = self.row(G)[2][:G]
            ge = np.concatenate(([1.0], np.cumprod(thr)))  # P(n ≥ m), m = 0 … G
            p = ge - np.append(ge[1:], 0.0)  # P(n = m): the step emits m + 1 tokens
            tok = np.arange(1, G + 2)
            mean = 1.0 + float(ge[1:].sum())
            # math.fsum, not a BLAS dot: exactly rounded, so the same on every CPU
            f = self._fixed[G] = (thr, mean, max(0.0, math.fsum(p * tok ** 2) - mean * mean))
        return f

    def fixed_run(self, request: int, G: int, tokens: int) -> np.ndarray:
        """Accepted counts, step by step, of request `request` drafting G every step until it has emitted `tokens`
        tokens (constant α only). Same draws as stepping one at a time: step s reads uniforms s·G … s·G + G − 1.

        The one-request statement of the rule; engines use `fixed_runs`, which gives the same counts."""
        if tokens <= 0:
            return np.zeros(0, np.int64)
        if G == 0:
            return np.zeros(tokens, np.int64)
        thr, per_step, _ = self._fixed_params(G)
        g = self.generator(request)
        parts, left = [], tokens
        while True:
            k = min(left, int(left / per_step * 1.25) + 16)
            acc = np.empty((k, G + 1), dtype=bool)
            np.less(g.random(k * G).reshape(k, G), thr, out=acc[:, :G])
            acc[:, G] = False  # argmin = the first rejection, or G after a clean sweep
            n = acc.argmin(1)
            cs = np.cumsum(n + 1)
            if cs[-1] >= left:
                n = n[:int(np.searchsorted(cs, left)) + 1]
                return n if not parts else np.concatenate(parts + [n])
            parts.append(n)
            left -= int(cs[-1])

    def fixed_runs(self, requests: np.ndarray, G: int, tokens: np.ndarray, z: float = 5.0):
        """`fixed_run` for many requests at once: (n, tok, start, count) with request r's accepted counts in
        n[start[r]:start[r] + count[r]] and its tokens per step (n + 1, the last step truncated) in tok[…].

        Each request's uniforms go into one flat buffer (its stream's first k·G draws, k ≥ its likely step count), so
        the buffer's rows of G are all the requests' steps; one pass counts the leading accepts of every row and a
        cumulative sum over all rows finds where each request has emitted its tokens. k is the mean step count plus
        z standard deviations (renewal approximation); a request whose k steps were too few (~1e-7 at z = 5) is
        redone with more."""
        requests = np.asarray(requests, dtype=np.int64)
        tokens = np.maximum(np.asarray(tokens, dtype=np.int64), 0)
        if G == 0:
            count = tokens.copy()
            return (np.zeros(int(count.sum()), np.int64), np.ones(int(count.sum()), np.int64),
                    np.cumsum(count) - count, count)
        thr, mu, var = self._fixed_params(G)
        k = np.ceil(tokens / mu + z * np.sqrt(tokens * var / mu ** 3)).astype(np.int64) + 4
        k = np.minimum(k, tokens)  # a step emits at least one token
        row0 = np.cumsum(k) - k
        U = np.empty(int(k.sum()) * G)
        fill = self.streams.fill
        for i, r0, kk in zip(requests.tolist(), (row0 * G).tolist(), (k * G).tolist()):
            if kk:
                fill(i, U[r0:r0 + kk])
        n_rows = leading_accepts(U.reshape(-1, G), thr)
        cs = np.cumsum(n_rows + 1, dtype=np.int64)
        base = np.concatenate((np.zeros(1, np.int64), cs))[row0]
        cut = np.searchsorted(cs, base + tokens)  # first row where the request has emitted all its tokens
        count = np.where(tokens > 0, cut - row0 + 1, 0)
        short = (tokens > 0) & (cut >= row0 + k)
        count[short] = 0
        start = np.cumsum(count) - count
        total = int(count.sum())
        idx = np.repeat(row0 - start, count) + np.arange(total, dtype=np.int64)
        n = n_rows[idx].astype(np.int64)
        tok = n + 1
        has = count > 0
        tok[(start + count - 1)[has]] -= (cs[cut[has]] - base[has] - tokens[has])
        if short.any():  # redo the few requests that needed more steps than drawn, and splice them in
            rn, rt, rs, rc = self.fixed_runs(requests[short], G, tokens[short], 2 * z + 4)
            sn, st = np.split(n, start[1:]), np.split(tok, start[1:])  # one piece per request
            for j, r in enumerate(np.flatnonzero(short)):
                sn[r], st[r] = rn[rs[j]:rs[j] + rc[j]], rt[rs[j]:rs[j] + rc[j]]
            count[short] = rc
            start = np.cumsum(count) - count
            n, tok = np.concatenate(sn), np.concatenate(st)
        return n, tok, start, count

    def thresholds(self, G: int, bpos: np.ndarray | None) -> np.ndarray:
        """Thresholds for draft length G: a row (constant α) or a (B, G+1) block gathered at walk offsets bpos."""
        if self.ranks is not None:
            return self.ranks.thresholds(G, bpos)
        a, b, const = self.row(G)
        if const is not None:
            return const
        return a + self.beta.take(bpos[:, None] + _AR[:G + 1], mode="wrap") * b


_AR = np.arange(GAMMA_CAP + 2, dtype=np.int64)
_TRACES: dict = {}


def accepted_in_step(acc, gen: np.random.Generator, g: int, pos: int) -> int:
    """One request's verification of g drafts, one request at a time (the step-by-step engine profiles): g fresh
    uniforms from its own stream against the thresholds at walk offset `pos`; the number of leading accepts."""
    u = gen.random(g)
    thr = acc.thresholds(g, None if acc.constant else np.array([pos]))
    ok = u < (thr[0] if thr.ndim == 2 else thr)[:g]
    return int(g if ok.all() else ok.argmin())


def leading_accepts(u: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Per row of u (R, G): the number of leading k with u[:, k] < thr[k] (0 … G), as uint8."""
    alive = u[:, 0] < thr[0]
    n = alive.view(np.uint8).copy()
    for k in range(1, u.shape[1]):
        alive &= u[:, k] < thr[k]
        n += alive.view(np.uint8)
    return n


class FixedRuns:
    """`Acceptance.fixed_runs` for every request of a workload (request i emits tokens[i] after its prefill token),
    computed block by block on first use, so a run pays one vectorized pass per block of requests."""

    UNIFORMS_PER_BLOCK = 1 << 18

    def __init__(self, acc: Acceptance, G: int, tokens: np.ndarray):
        self.acc, self.G = acc, int(G)
        self.tokens = np.maximum(np.asarray(tokens, dtype=np.int64), 0)
        per = (float(self.tokens.mean()) / acc._fixed_params(G)[1] + 16) * G if G and len(tokens) else 1
        self.block = max(1, min(len(self.tokens), int(self.UNIFORMS_PER_BLOCK // max(per, 1.0))))
        self._blocks: dict[int, tuple] = {}
        acc.streams.expect(len(self.tokens))

    def _get(self, b: int) -> tuple:
        blk = self._blocks.get(b)
        if blk is None:
            lo, hi = b * self.block, min(len(self.tokens), (b + 1) * self.block)
            n, tok, start, count = self.acc.fixed_runs(np.arange(lo, hi), self.G, self.tokens[lo:hi])
            blk = self._blocks[b] = (n, tok, start.tolist(), count.tolist(), count)
        return blk

    def steps(self, i: int) -> np.ndarray:
        """Tokens request i emits at each of its steps (n + 1, the last step truncated)."""
        _, tok, start, count, _ = self._get(i // self.block)
        r = i % self.block
        return tok[start[r]:start[r] + count[r]]

    def get(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(accepted counts, tokens per step) of request i, step by step."""
        n, tok, start, count, _ = self._get(i // self.block)
        r = i % self.block
        a, c = start[r], count[r]
        return n[a:a + c], tok[a:a + c]

    def all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n, tok, count) of all requests in request order."""
        blocks = [self._get(b) for b in range(-(-len(self.tokens) // self.block))]
        if not blocks:
            z = np.zeros(0, np.int64)
            return z, z, z
        return (np.concatenate([x[0] for x in blocks]), np.concatenate([x[1] for x in blocks]),
                np.concatenate([x[4] for x in blocks]))


def _rank_walk(trace, tree, lenience: float):
    """The tree's thresholds on the trace's ranks; a trace without ranks (or with a chain-only model on it) is
    refused in one line naming the file and the flag."""
    from specsim.config import flag
    from specsim.engine.rank_walk import RankWalk

    where = trace.path or "<in-memory trace>"
    if trace.rank is None:
        raise ConfigError("the trace has no rank column; record it with specsim record", file=where,
                          field=flag("speculative_token_tree"), allowed="a trace with a rank column, or a chain")
    if lenience != 1.0 or trace.metadata.get("slot_decay") is not None:
        raise ConfigError("a tree on the trace's ranks is exact at temperature 0: no lenience, no slot_decay",
                          file=where, field=flag("lenience" if lenience != 1.0 else "speculative_token_tree"),
                          allowed="lenience 1 and a trace without slot_decay")
    return RankWalk(tree, trace.rank)


def read_trace(path: str):
    """Read a trace once per process while the file is unchanged (sweeps run thousands of points on one trace)."""
    import os

    from specsim.traces.format import Trace

    try:
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    except OSError:
        return Trace.read(path)  # raises the ConfigError naming the file
    if key not in _TRACES:
        if len(_TRACES) >= 8:
            _TRACES.pop(next(iter(_TRACES)))
        _TRACES[key] = Trace.read(path)
    return _TRACES[key]

