"""Named random streams: each random subsystem draws from its own seeded generator.

Keys are (seed, stream, index) so that, e.g., changing γ (which changes how many acceptance draws a
request consumes) never changes which requests arrive or how long they are.

`stream(seed, which, i)` is `numpy.random.default_rng((seed, which, i))`. Creating one costs ~8 µs (SeedSequence
hashing in Python-level Cython, a PCG64 and a Generator object), which dominated the engines when every admitted
request needed its own acceptance stream. `StreamFamily` gives the SAME streams, bit for bit, without that cost:
it computes the PCG64 starting states of many indices at once (the SeedSequence hash re-implemented on numpy
uint32 arrays, then PCG64's seeding step) and loads a state into a reusable PCG64 when a stream is needed (~1 µs).
tests/test_rng.py checks it against `default_rng` over many seeds and indices.
"""

from __future__ import annotations

import numpy as np

# Stream numbers are part of every seeded result: never renumber. 3 is retired (it was POLICY, which no policy
# ever drew from); a new stream takes 6.
ARRIVALS, LENGTHS, ACCEPTANCE, TRACE_SYNTH, ROUTER = 0, 1, 2, 4, 5


def stream(seed: int, which: int, index: int = 0) -> np.random.Generator:
    return np.random.default_rng((int(seed), int(which), int(index)))


# numpy.random.SeedSequence constants (numpy/random/bit_generator.pyx) and PCG64's multiplier (pcg64.h)
_M32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _XSHIFT, _POOL = 0xCA01F9DD, 0x4973F715, 16, 4
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_M128 = (1 << 128) - 1


def _words(n: int) -> list[int]:
    """SeedSequence's coercion of one non-negative int: little-endian 32-bit words (0 → one word)."""
    if n < 0:
        raise ValueError("seed keys must be non-negative")
    out = [n & _M32]
    n >>= 32
    while n:
        out.append(n & _M32)
        n >>= 32
    return out


def seed_sequence_state(key: tuple[int, ...], index: np.ndarray) -> np.ndarray:
    """`SeedSequence(key + (i,)).generate_state(4, np.uint64)` for every i in `index` (each < 2**32): (N, 4) uint64."""
    index = np.asarray(index, dtype=np.int64)
    if index.size and (index.min() < 0 or index.max() > _M32):
        raise ValueError("stream indices must lie in [0, 2**32)")
    n = index.size
    ent = [np.full(n, w, np.uint32) for k in key for w in _words(int(k))] + [index.astype(np.uint32)]
    hc = _INIT_A

    def hashmix(v):
        nonlocal hc
        v = v ^ np.uint32(hc)
        hc = (hc * _MULT_A) & _M32
        v = v * np.uint32(hc)
        return v ^ (v >> np.uint32(_XSHIFT))

    def mix(x, y):
        r = x * np.uint32(_MIX_L) - y * np.uint32(_MIX_R)
        return r ^ (r >> np.uint32(_XSHIFT))

    zero = np.zeros(n, np.uint32)
    pool = [hashmix(ent[i] if i < len(ent) else zero) for i in range(_POOL)]
    for s in range(_POOL):
        for d in range(_POOL):
            if s != d:
                pool[d] = mix(pool[d], hashmix(pool[s]))
    for s in range(_POOL, len(ent)):
        for d in range(_POOL):
            pool[d] = mix(pool[d], hashmix(ent[s]))
    hb = _INIT_B
    words = []
    for i in range(2 * _POOL):
        v = pool[i % _POOL] ^ np.uint32(hb)
        hb = (hb * _MULT_B) & _M32
        v = v * np.uint32(hb)
        words.append((v ^ (v >> np.uint32(_XSHIFT))).astype(np.uint64))
    return np.stack([words[2 * k] | (words[2 * k + 1] << np.uint64(32)) for k in range(4)], axis=1)


def pcg64_states(key: tuple[int, ...], index: np.ndarray) -> list[tuple[int, int]]:
    """(state, inc) of `PCG64(SeedSequence(key + (i,)))` for every i: numpy's pcg64_set_seed, in Python ints."""
    v = seed_sequence_state(key, index).tolist()
    out = []
    for v0, v1, v2, v3 in v:
        inc = ((((v2 << 64) | v3) << 1) | 1) & _M128
        out.append(((((inc + ((v0 << 64) | v1)) & _M128) * _PCG_MULT + inc) & _M128, inc))
    return out


class StreamFamily:
    """The streams (seed, which, i) for many i, bit-identical to `stream(seed, which, i)` and ~8× cheaper to open.

    Start states are computed in vectorized chunks of indices on first use (a chunk costs ~0.1 ms + ~0.6 µs per
    index, so `expect(n)` caps chunks at the n streams a run will use; below SMALL indices numpy seeds them one by
    one). `fill(i, out)` writes the first `out.size` uniforms of stream i (= `stream(seed, which, i).random(out.size)`);
    `load(i, gen)` puts stream i's start state into `gen` (a Generator from `generator()`), which then continues
    exactly as stream i would."""

    # our choice: 4096 states is ~2.5 ms of hashing, a small fraction of a run that opens that many streams
    CHUNK = 4096
    # our choice: one numpy seeding costs ~8 µs and a vectorized chunk ~0.1 ms + 0.6 µs each, so below ~16
    # indices seeding one by one is as fast
    SMALL = 16

    def __init__(self, seed: int, which: int):
        self.key = (int(seed), int(which))
        self.limit = None  # indices expected: [0, limit); None = unknown
        self._chunks: dict[int, list] = {}
        self._gen = self.generator()
        self._bg = self._gen.bit_generator
        self._inner = {"state": 0, "inc": 0}  # one state dict, refilled for each load (the setter copies it)
        self._dict = {"bit_generator": "PCG64", "state": self._inner, "has_uint32": 0, "uinteger": 0}

    def expect(self, n: int) -> None:
        self.limit = max(self.limit or 0, int(n))

    @staticmethod
    def generator() -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(0))

    def _state(self, i: int) -> dict:
        """Stream i's start state as PCG64's `state` dict (reused between calls: load it right away)."""
        c = i // self.CHUNK
        base = c * self.CHUNK
        chunk = self._chunks.get(c)
        if chunk is None or i - base >= len(chunk):
            end = base + self.CHUNK if self.limit is None else min(base + self.CHUNK, max(self.limit, i + 1))
            end = min(end, _M32 + 1)
            if i > _M32:  # beyond SeedSequence's one-word index: let numpy seed it
                return stream(self.key[0], self.key[1], i).bit_generator.state
            if end - base < self.SMALL:
                sts = [stream(self.key[0], self.key[1], k).bit_generator.state["state"] for k in range(base, end)]
                chunk = [(st["state"], st["inc"]) for st in sts]
            else:
                chunk = pcg64_states(self.key, np.arange(base, end, dtype=np.int64))
            self._chunks[c] = chunk
        self._inner["state"], self._inner["inc"] = chunk[i - base]
        return self._dict

    def load(self, i: int, gen: np.random.Generator) -> np.random.Generator:
        gen.bit_generator.state = self._state(int(i))
        return gen

    def fill(self, i: int, out: np.ndarray) -> None:
        self._bg.state = self._state(int(i))
        self._gen.random(out=out)
