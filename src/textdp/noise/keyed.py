"""Per-record keyed randomness: ChaCha20 streams addressed by (record, token, purpose).

Every draw of a release comes from the ChaCha20 block function (Bernstein 2008;
RFC 8439 Sec. 2.3, 20 rounds) under the release's secret 256-bit key, at a
position that depends only on *which* record and token it is for:

==========  ==================================================================
state words  content
==========  ==================================================================
0-3          the constants ``"expand 32-byte k"``
4-11         the key: 256 bits (:class:`ReleaseKey`), never persisted
12-13        block counter (64 bits) = ``position << 16 | purpose << 12 | block``
14-15        stream (64 bits) = the record's global index (input order, from 0)
==========  ==================================================================

``position`` is the token's index inside its record (``< 2**48``), ``purpose``
separates the independent decisions about one token (:data:`MAIN`,
:data:`COIN`, :data:`UNIFORM`, :data:`MIX`, :data:`MIX_PICK`; ``< 16``), and
``block`` (``< 4096``) numbers the 64-byte blocks one decision may consume (8
uint64 words each; word ``i`` of a block is state-output words ``2i`` (low) and
``2i+1`` (high)).

Bit vectors (:func:`keyed_bernoulli_bits`: a record's many Bernoulli bits, e.g. the
randomized response of LP-LDA over a V-word vocabulary) use one word per bit from
consecutive blocks: bit ``j`` of record ``r`` is decided by word ``j % 8`` of the block
at ``position = j >> 15``, ``block = (j >> 3) & 4095`` of the bits' purpose
(:data:`BITS` by default), so 32 768 bits share one position; the rare tie (the
word's top 62 bits equal the first 62-bit word of ``p``, probability ``2**-62``) is
resolved from the words at ``position = j`` of a second purpose (:data:`BITS_TIE`).
Bit ``j`` of record ``r`` thus depends only on the key, ``r``, ``j`` and ``p``.

Consequences (design.md, "Scale-out"; issue 12 item 9):

* a record's noise depends only on the key, the record's global index and its
  own tokens: a seeded output is the same for any chunk size, block size,
  number of worker threads or processes, and a retried task reproduces the same
  draws instead of releasing a second noisy copy;
* the key comes from the operating system (:func:`secrets.token_bytes`, 256
  bits: not through ``numpy.random.SeedSequence``, whose pool holds 128 bits) or,
  for a research run, from ``SHA-256("textdp/release-key/v1", seed)``; it lives
  in memory only: :class:`ReleaseKey`'s ``repr`` hides it and nothing writes it.

The kernels are numba functions (numba is a core dependency, imported on first use,
:mod:`textdp.noise._keyed_kernels`); a short job draws the same words through a numpy
implementation instead (see "backends" below). Both are checked against the RFC 8439 test
vector (Sec. 2.3.2) and against each other in the tests.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import sys

import numpy as np

from textdp.errors import ParameterError

__all__ = [
    "ReleaseKey", "MAIN", "COIN", "UNIFORM", "MIX", "MIX_PICK", "chacha20_block", "keyed_words",
    "keyed_uniform_below", "keyed_bernoulli", "keyed_bernoulli_per_token", "keyed_laplace_vectors", "LAPLACE_TRUNCATION",
    "BITS", "BITS_TIE", "keyed_bernoulli_bits", "GIBBS", "keyed_record_uniforms",
]

#: purposes (separate decisions about one token)
MAIN, COIN, UNIFORM, MIX, MIX_PICK = 0, 1, 2, 3, 4
#: purposes of :func:`keyed_bernoulli_bits` (a record's bit vector, and its tie-breaking words)
BITS, BITS_TIE = 5, 6
#: purpose of :func:`keyed_record_uniforms` when a Gibbs sampler draws its per-token uniforms (HDP-LDA)
GIBBS = 7
_BLOCKS_PER_PURPOSE = 4096
_MASK32 = np.uint64(0xFFFFFFFF)
#: probability that one exponential or one Box-Muller radius of :func:`keyed_laplace_vectors` is
#: clipped by the 52-bit uniform it is computed from (the realised law's distance from the ideal one)
LAPLACE_TRUNCATION = 2.0**-52
#: uniforms multiplied together before one logarithm in the radius of :func:`keyed_laplace_vectors`
#: (each is >= 2^-53, so a product of 16 is >= 2^-848: no underflow). The same random variable in
#: exact arithmetic; in floats the product's rounding (at most 15 relative units of 2^-53) is an
#: absolute error of at most about 15 * 2^-53 in the radius before scaling, so a small radius (m = 2)
#: can differ from the sum of logarithms by a few tens of ulps: float discretisation, which the
#: accounting leaves out as before (see keyed_laplace_vectors)
RADIUS_RUN = 16


class ReleaseKey:
    """The secret 256-bit key of one release (32 bytes), kept in memory only.

    ``ReleaseKey.fresh()``: from the OS's CSPRNG (the default of every release);
    ``ReleaseKey.from_seed(seed)``: derived from a research seed (reproducible, not for
    release); ``ReleaseKey.from_generator(rng)``: 256 bits drawn from a caller's numpy
    Generator (what the Python API does when given one). ``words`` is the key as eight
    little-endian uint32 words (RFC 8439 state words 4-11). The repr never shows it.
    """

    __slots__ = ("words", "seeded", "seed", "origin")

    def __init__(self, key: bytes, *, seeded: bool, seed: int | None = None, origin: str = ""):
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise ParameterError("a release key is exactly 32 bytes")
        self.words = np.frombuffer(bytes(key), dtype="<u4").astype(np.uint64)
        self.words.setflags(write=False)
        self.seeded = bool(seeded)
        self.seed = seed
        self.origin = origin

    @classmethod
    def fresh(cls) -> "ReleaseKey":
        return cls(secrets.token_bytes(32), seeded=False, origin="os")

    @classmethod
    def from_seed(cls, seed: int, release: int = 0) -> "ReleaseKey":
        """``SHA-256("textdp/release-key/v1", seed, release)``: the key of the ``release``-th
        release (from 0) of a research run seeded with ``seed``."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ParameterError(f"seed must be a non-negative integer, got {seed!r}")
        digest = hashlib.sha256(b"textdp/release-key/v1\x00%d\x00%d" % (int(seed), int(release))).digest()
        return cls(digest, seeded=True, seed=int(seed), origin="seed")

    @classmethod
    def from_generator(cls, rng: np.random.Generator) -> "ReleaseKey":
        raw = rng.integers(0, 2**64, size=4, dtype=np.uint64).astype("<u8").tobytes()
        return cls(raw, seeded=False, origin="generator")

    def __repr__(self) -> str:
        return f"ReleaseKey(<secret>, seeded={self.seeded})"


# ---------------------------------------------------------------------------------------- backends
# The numba kernels live in textdp.noise._keyed_kernels and are imported on first use. A short job
# (a one-line sanitize) draws through the numpy implementation below instead: the same ChaCha20
# words bit for bit (integer arithmetic only; the float Laplace vectors use Python's math, the same
# C library functions numba calls), vectorised over tokens. numpy costs about 4 us per block against
# numba's ~1 us, but numba's start-up (import and cached kernels, 0.5-1 s) is skipped; once
# NUMPY_BLOCK_BUDGET blocks have been drawn with numpy in a process (about 0.2 s), or the kernels
# are already loaded, the numba kernels take over. $TEXTDP_KEYED_BACKEND=numba|numpy forces one.

#: environment variable forcing the backend of the keyed samplers: auto (default) | numba | numpy
BACKEND_ENV = "TEXTDP_KEYED_BACKEND"
#: ChaCha20 blocks the numpy backend computes in one process before the numba kernels take over
NUMPY_BLOCK_BUDGET = 1 << 16
_numpy_blocks_used = 0


def _kernels():
    """The numba kernels (imports numba on first call)."""
    from textdp.noise import _keyed_kernels

    return _keyed_kernels


def _use_numpy(n_blocks: int) -> bool:
    """Whether a call that needs about ``n_blocks`` ChaCha20 blocks uses the numpy backend."""
    global _numpy_blocks_used
    backend = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if backend not in ("auto", "numba", "numpy"):
        raise ParameterError(f"${BACKEND_ENV} must be auto, numba or numpy, got {backend!r}")
    if backend == "numpy":
        return True
    if backend == "numba" or "textdp.noise._keyed_kernels" in sys.modules:
        return False
    if _numpy_blocks_used + n_blocks > NUMPY_BLOCK_BUDGET:
        return False
    _numpy_blocks_used += n_blocks
    return True


def __getattr__(name: str):
    """The numba kernels under their former names (``keyed._block``, ...), loaded on first use."""
    if name in ("_block", "_word", "_base", "_words_kernel", "_uniform_below_kernel", "_bernoulli_kernel",
                "_bits_tie", "_bernoulli_bits_kernel", "_laplace_kernel"):
        return getattr(_kernels(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)
_QUARTER_ROUNDS = ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                   (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14))


def _np_blocks(key, counters, streams) -> np.ndarray:
    """ChaCha20 blocks (RFC 8439 Sec. 2.3) for ``N`` (counter, stream) pairs, vectorised over
    the pairs: uint64 ``(N, 8)``, word ``i`` = output words ``2i`` (low) and ``2i+1`` (high), as
    the kernels' ``_word``. ``key``: eight uint32 words (uint64 array)."""
    c = np.asarray(counters, dtype=np.uint64).reshape(-1)
    s = np.asarray(streams, dtype=np.uint64).reshape(-1)
    n = c.size
    lo = np.uint64(0xFFFFFFFF)
    sh32 = np.uint64(32)
    init = np.empty((16, n), dtype=np.uint32)
    init[:4] = np.asarray(_SIGMA, dtype=np.uint32)[:, None]
    init[4:12] = np.asarray(key, dtype=np.uint64).astype(np.uint32)[:, None]
    init[12] = c & lo
    init[13] = c >> sh32
    init[14] = s & lo
    init[15] = s >> sh32
    x = init.copy()
    tmp = np.empty(n, dtype=np.uint32)
    rot = [(np.uint32(r), np.uint32(32 - r)) for r in (16, 12, 8, 7)]

    def rotate(v, k):
        left, right = rot[k]
        np.left_shift(v, left, out=tmp)
        np.right_shift(v, right, out=v)
        np.bitwise_or(v, tmp, out=v)

    for _ in range(10):
        for a, b, cc, d in _QUARTER_ROUNDS:
            xa, xb, xc, xd = x[a], x[b], x[cc], x[d]
            np.add(xa, xb, out=xa); np.bitwise_xor(xd, xa, out=xd); rotate(xd, 0)
            np.add(xc, xd, out=xc); np.bitwise_xor(xb, xc, out=xb); rotate(xb, 1)
            np.add(xa, xb, out=xa); np.bitwise_xor(xd, xa, out=xd); rotate(xd, 2)
            np.add(xc, xd, out=xc); np.bitwise_xor(xb, xc, out=xb); rotate(xb, 3)
    x += init  # uint32: wraps mod 2^32, as the RFC's addition
    w = x.T.astype(np.uint64)  # (N, 16)
    return w[:, 0::2] | (w[:, 1::2] << sh32)


def _np_base(positions, purpose: int) -> np.ndarray:
    return (np.asarray(positions, dtype=np.uint64) << np.uint64(16)) | (np.uint64(purpose) << np.uint64(12))


def _np_words(key, s, p, purpose, n_words, out) -> None:
    base = _np_base(p, purpose)
    n_blocks = -(-n_words // 8)
    for j in range(n_blocks):
        w = _np_blocks(key, base | np.uint64(j), s)
        m = min(8, n_words - 8 * j)
        out[:, 8 * j:8 * j + m] = w[:, :m]


def _np_bit_length(v: np.ndarray) -> np.ndarray:
    """Exact bit length of each uint64 (0 for 0)."""
    v = v.copy()
    bits = np.zeros(v.shape, dtype=np.int64)
    for sh in (32, 16, 8, 4, 2, 1):
        big = v >= (np.uint64(1) << np.uint64(sh))
        bits += sh * big
        v = np.where(big, v >> np.uint64(sh), v)
    return bits + (v > 0)


def _np_uniform_below(key, s, p, purpose, b, out) -> int:
    """The numpy twin of the kernel ``_uniform_below_kernel`` (same words, same acceptance)."""
    bits = np.where(b > (np.uint64(1) << np.uint64(61)), 63, 1 + _np_bit_length(b - np.uint64(1)))
    shift = (64 - bits).astype(np.uint64)
    base = _np_base(p, purpose)
    todo = np.arange(s.size)
    for j in range(_BLOCKS_PER_PURPOSE):
        if todo.size == 0:
            return 0
        x = _np_blocks(key, base[todo] | np.uint64(j), s[todo]) >> shift[todo, None]
        ok = x < b[todo, None]
        hit = ok.any(axis=1)
        first = ok.argmax(axis=1)
        done = todo[hit]
        out[done] = x[hit, first[hit]]
        todo = todo[~hit]
    return int(todo.size > 0)


def _np_bernoulli(key, s, p, purpose, pwords, out) -> None:
    """The numpy twin of ``_bernoulli_kernel``."""
    base = _np_base(p, purpose)
    out[:] = False
    todo = np.arange(s.size)
    w = None
    for k in range(pwords.size):
        if todo.size == 0:
            return
        if k % 8 == 0:
            w = _np_blocks(key, base[todo] | np.uint64(k // 8), s[todo])
        u = w[:, k % 8] >> np.uint64(2)
        less, more = u < pwords[k], u > pwords[k]
        out[todo[less]] = True
        keep = ~(less | more)
        todo, w = todo[keep], w[keep]


def _np_bits_tie(key, stream, j, tie_purpose, pwords) -> bool:
    base = _np_base(np.array([j]), tie_purpose)
    w = None
    for k in range(1, pwords.size):
        i = k - 1
        if i % 8 == 0:
            w = _np_blocks(key, base | np.uint64(i // 8), np.array([stream], dtype=np.uint64))[0]
        u = w[i % 8] >> np.uint64(2)
        if u < pwords[k]:
            return True
        if u > pwords[k]:
            return False
    return False


def _np_bernoulli_bits(key, s, purpose, tie_purpose, pwords, out) -> None:
    """The numpy twin of ``_bernoulli_bits_kernel``."""
    n, n_bits = out.shape
    j0 = np.arange(0, n_bits, 8, dtype=np.uint64)
    counters = (((j0 >> np.uint64(15)) << np.uint64(16)) | (np.uint64(purpose) << np.uint64(12))
                | ((j0 >> np.uint64(3)) & np.uint64(4095)))
    w = _np_blocks(key, np.tile(counters, n), np.repeat(s.astype(np.uint64), j0.size))
    u = (w >> np.uint64(2)).reshape(n, 8 * j0.size)[:, :n_bits]
    out[...] = u < pwords[0]
    for t, j in zip(*np.nonzero(u == pwords[0])):  # ties: probability 2^-62 per bit
        out[t, j] = _np_bits_tie(key, np.uint64(s[t]), int(j), tie_purpose, pwords)


def _np_laplace(key, s, p, purpose, scale, out) -> None:
    """The numpy twin of ``_laplace_kernel``: the same words, and the same float operations in
    the same order through Python's ``math`` (the C library's log, sqrt, cos, sin)."""
    m = out.shape[1]
    n_words = m + 2 * ((m + 1) // 2)
    words = np.empty((s.size, n_words), dtype=np.uint64)
    _np_words(key, s, p, purpose, n_words, words)
    us = ((words >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52
    two_pi = 2.0 * math.pi
    log, sqrt, cos, sin = math.log, math.sqrt, math.cos, math.sin
    run = RADIUS_RUN
    for t in range(s.size):
        u = us[t].tolist()
        radius = 0.0
        for j0 in range(0, m, run):
            prod = 1.0
            for j in range(j0, min(m, j0 + run)):
                prod *= u[j]
            radius -= log(prod)
        row = [0.0] * m
        norm2 = 0.0
        k = 0
        for j in range(m, n_words, 2):
            r = sqrt(-2.0 * log(u[j]))
            a = r * cos(two_pi * u[j + 1])
            row[k] = a
            norm2 += a * a
            k += 1
            if k < m:
                b = r * sin(two_pi * u[j + 1])
                row[k] = b
                norm2 += b * b
                k += 1
        inv = 1.0 / sqrt(norm2) if norm2 > 0 else 0.0
        for i in range(m):
            out[t, i] = row[i] * inv * radius * scale

def _np_record_uniforms(key, s, offsets, step, purpose, out) -> None:
    """The numpy twin of ``_record_uniforms_kernel`` (the same words and the same floats)."""
    lengths = np.diff(offsets)
    nblk = -(-lengths // 8)  # blocks per record
    first_blk = np.cumsum(nblk) - nblk  # index of each record's first block among all blocks
    rec = np.repeat(np.arange(s.size), nblk)
    b = (np.arange(rec.size) - first_blk[rec]).astype(np.uint64)  # block index within its record
    pos = (np.uint64(step) << np.uint64(20)) | ((b << np.uint64(3)) >> np.uint64(15))
    words = _np_blocks(key, _np_base(pos, purpose) | (b & np.uint64(4095)), s[rec].astype(np.uint64))
    vals = (words >> np.uint64(11)).astype(np.float64) * 2.0**-53  # (blocks, 8)
    j = np.arange(out.size) - np.repeat(offsets[:-1], lengths)  # value index within its record
    out[:] = vals[np.repeat(first_blk, lengths) + j // 8, j % 8]


# ---------------------------------------------------------------------------------------- API
def _addr(key, streams, positions):
    if not isinstance(key, ReleaseKey):
        raise ParameterError("key must be a textdp.noise.keyed.ReleaseKey")
    s = np.ascontiguousarray(streams, dtype=np.int64).reshape(-1)
    p = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
    if s.shape != p.shape:
        raise ParameterError("streams and positions must have the same length")
    if s.size and (s.min() < 0 or p.min() < 0 or p.max() >= 2**48):
        raise ParameterError("record indices must be >= 0 and token positions in [0, 2**48)")
    return key.words, s, p


def _purpose(purpose: int) -> int:
    if not 0 <= int(purpose) < 16:
        raise ParameterError("purpose must be in [0, 16)")
    return int(purpose)


def chacha20_block(key: ReleaseKey, counter: int, stream: int) -> np.ndarray:
    """The 16 output words (uint32) of one ChaCha20 block at ``counter`` (state words 12-13)
    and ``stream`` (words 14-15); for tests against RFC 8439."""
    w = _np_blocks(key.words, np.array([counter], dtype=np.uint64), np.array([stream], dtype=np.uint64))[0]
    out = np.empty(16, np.uint64)
    out[0::2], out[1::2] = w & _MASK32, w >> np.uint64(32)
    return out.astype(np.uint32)


def keyed_words(key: ReleaseKey, streams, positions, purpose: int, n_words: int) -> np.ndarray:
    """uint64 ``(n, n_words)``: the first ``n_words`` words of each token's stream."""
    k, s, p = _addr(key, streams, positions)
    n_words = int(n_words)
    if not 0 < n_words <= 8 * _BLOCKS_PER_PURPOSE:
        raise ParameterError("n_words out of range")
    out = np.empty((s.size, n_words), dtype=np.uint64)
    if _use_numpy(s.size * -(-n_words // 8)):
        _np_words(k, s, p, _purpose(purpose), n_words, out)
    else:
        _kernels()._words_kernel(k, s, p, _purpose(purpose), n_words, out)
    return out


def keyed_uniform_below(key: ReleaseKey, streams, positions, purpose: int, bounds) -> np.ndarray:
    """Exact uniform integers ``u_t`` in ``[0, bounds[t])`` (``1 <= bounds < 2**63``), uint64,
    one per token, each from its own stream (rejection sampling; see the kernel)."""
    k, s, p = _addr(key, streams, positions)
    b = np.ascontiguousarray(np.broadcast_to(np.asarray(bounds, dtype=np.uint64), s.shape))
    if b.size and (b.min() < 1 or b.max() >= np.uint64(2**63)):
        raise ParameterError("uniform bounds must be in [1, 2**63)")
    out = np.empty(s.size, dtype=np.uint64)
    draw = _np_uniform_below if _use_numpy(s.size) else _kernels()._uniform_below_kernel
    if draw(k, s, p, _purpose(purpose), b, out):  # pragma: no cover - probability < 2^-9000
        raise RuntimeError("keyed uniform draw exhausted its stream")
    return out


def keyed_bernoulli(key: ReleaseKey, streams, positions, purpose: int, p: float) -> np.ndarray:
    """Exact Bernoulli(``p``) per token (bool ``(n,)``); ``p`` a float in [0, 1] (a dyadic rational)."""
    from textdp.noise.exact import _dyadic_words

    k, s, pos = _addr(key, streams, positions)
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ParameterError(f"probability must be in [0, 1], got {p!r}")
    if p in (0.0, 1.0):
        return np.full(s.size, p == 1.0)
    words, _ = _dyadic_words(p)
    if len(words) > 8 * _BLOCKS_PER_PURPOSE:  # pragma: no cover - a float has at most 1075 bits
        raise ParameterError("p has too long a binary expansion")
    out = np.empty(s.size, dtype=np.bool_)
    draw = _np_bernoulli if _use_numpy(s.size) else _kernels()._bernoulli_kernel
    draw(k, s, pos, _purpose(purpose), np.asarray(words, dtype=np.uint64), out)
    return out


def keyed_bernoulli_per_token(key: ReleaseKey, streams, positions, purpose: int, p) -> np.ndarray:
    """Exact Bernoulli(``p[i]``) per token, each a float in [0, 1]: the same draw as
    ``keyed_bernoulli(key, streams[i], positions[i], purpose, p[i])`` token by token (the first
    62-bit word of the stream against ``floor(p 2^62)``, vectorised; on equality, probability
    ``2^-62``, that token's remaining words through :func:`keyed_bernoulli`)."""
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    s = np.asarray(streams, dtype=np.int64).reshape(-1)
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    if p.size and not (np.all(p >= 0.0) and np.all(p <= 1.0)):
        raise ParameterError("probabilities must be in [0, 1]")
    if s.size == 0:
        return np.zeros(0, dtype=bool)
    u = keyed_words(key, s, pos, purpose, 1)[:, 0] >> np.uint64(2)
    w0 = np.floor(np.ldexp(p, 62)).astype(np.uint64)  # exact: a power-of-two scaling of p < 1 (p = 1: 2^62)
    out = u < w0
    for i in np.flatnonzero((u == w0) & (p > 0.0) & (p < 1.0)):  # pragma: no cover - probability 2^-62
        out[i] = bool(keyed_bernoulli(key, s[i:i + 1], pos[i:i + 1], purpose, float(p[i]))[0])
    return out


def _dyadic_p_words(p) -> tuple[bool | None, np.ndarray]:
    """``p`` (a float, or a :class:`fractions.Fraction` with a power-of-two denominator) in [0, 1]:
    (True/False for p = 1/0, None otherwise; p's binary expansion as 62-bit words)."""
    from fractions import Fraction

    if isinstance(p, bool) or not isinstance(p, (float, int, Fraction, np.floating, np.integer)):
        raise ParameterError(f"probability must be a float or a dyadic Fraction, got {p!r}")
    q = Fraction(p) if not isinstance(p, Fraction) else p
    if not 0 <= q <= 1:
        raise ParameterError(f"probability must be in [0, 1], got {p!r}")
    if q in (0, 1):
        return q == 1, np.zeros(1, dtype=np.uint64)
    den = q.denominator
    if den & (den - 1):
        raise ParameterError(f"probability must be a dyadic rational (a float is), got {p!r}")
    nbits = den.bit_length() - 1
    nwords = -(-nbits // 62)
    if nwords > 8 * _BLOCKS_PER_PURPOSE:  # pragma: no cover - a float has at most 1075 bits
        raise ParameterError("p has too long a binary expansion")
    scaled = q.numerator << (62 * nwords - nbits)
    words = [(scaled >> (62 * (nwords - 1 - i))) & ((1 << 62) - 1) for i in range(nwords)]
    return None, np.asarray(words, dtype=np.uint64)


def keyed_bernoulli_bits(key: ReleaseKey, streams, n_bits: int, purpose: int = BITS, p=0.5, *,
                         tie_purpose: int = BITS_TIE, out: np.ndarray | None = None) -> np.ndarray:
    """bool ``(n, n_bits)``: bits ``0 .. n_bits-1`` of each record ``streams[t]``, independent exact
    Bernoulli(``p``) draws; ``p`` a float in [0, 1] or a :class:`fractions.Fraction` with a
    power-of-two denominator (e.g. ``Fraction(f) / 2``, exact where ``f / 2`` would round).

    One ChaCha20 word per bit, consecutive blocks (module docstring): bit ``j`` of record ``r``
    depends only on the key, ``r``, ``j``, ``p`` and the purposes, never on ``n_bits`` or on the
    other records requested, so a record's vector can be drawn in any chunking, order or
    worker. Exact: a uniform U in [0, 1) is compared with p's binary expansion 62 bits at a
    time, decided at the first differing word. ``out``: an optional C-contiguous bool array
    of that shape to fill (memory reuse). Records' streams must be distinct within a release.
    """
    k = key.words if isinstance(key, ReleaseKey) else None
    if k is None:
        raise ParameterError("key must be a textdp.noise.keyed.ReleaseKey")
    s = np.ascontiguousarray(streams, dtype=np.int64).reshape(-1)
    if s.size and s.min() < 0:
        raise ParameterError("record indices must be >= 0")
    n_bits = int(n_bits)
    if not 0 <= n_bits < 2**63:
        raise ParameterError("n_bits must be >= 0")
    purpose, tie_purpose = _purpose(purpose), _purpose(tie_purpose)
    if purpose == tie_purpose:
        raise ParameterError("the bits and their ties need two different purposes")
    if out is None:
        out = np.empty((s.size, n_bits), dtype=np.bool_)
    elif out.shape != (s.size, n_bits) or out.dtype != np.bool_ or not out.flags.c_contiguous:
        raise ParameterError(f"out must be a C-contiguous bool array of shape {(s.size, n_bits)}")
    const, words = _dyadic_p_words(p)
    if const is not None:
        out[...] = const
        return out
    if s.size and n_bits:
        draw = _np_bernoulli_bits if _use_numpy(s.size * -(-n_bits // 8)) else _kernels()._bernoulli_bits_kernel
        draw(k, s, purpose, tie_purpose, words, out)
    return out


def keyed_laplace_vectors(key: ReleaseKey, streams, positions, purpose: int, dim: int, scale: float) -> np.ndarray:
    """float64 ``(n, dim)`` noise vectors of density ∝ ``exp(-||z|| / scale)`` (FBDD's
    multivariate Laplace with ``scale = 1/eps``; Feyisetan et al. 2020, Sec. 3), one per token.

    Radius: a sum of ``dim`` exponentials ``-ln U`` (= Gamma(dim, scale)), computed as ``-ln``
    of the product of each run of 16 uniforms (the same random variable, 16 times fewer
    logarithms); direction:
    normalised Gaussians (Box-Muller). Every uniform is ``(k + 1/2) 2^-52`` with ``k`` a
    uniform 52-bit integer, so each exponential and each Box-Muller radius is clipped with
    probability :data:`LAPLACE_TRUNCATION` (2^-52); the total variation between the realised
    and the ideal noise law, truncation only, is at most ``2 dim 2^-52`` per token (the float
    discretisation of a continuous law is not accounted; see FBDD)."""
    k, s, p = _addr(key, streams, positions)
    dim = int(dim)
    if dim < 1:
        raise ParameterError("dim must be >= 1")
    out = np.empty((s.size, dim), dtype=np.float64)
    # the numpy twin loops in Python over the floats: only for a few tokens (a short job)
    if s.size * dim <= 4096 and _use_numpy(s.size * -(-(2 * dim + 1) // 8)):
        _np_laplace(k, s, p, _purpose(purpose), float(scale), out)
    else:
        _kernels()._laplace_kernel(k, s, p, _purpose(purpose), float(scale), out)
    return out


def keyed_record_uniforms(key: ReleaseKey, streams, lengths, step: int, purpose: int = GIBBS) -> np.ndarray:
    """float64 ``(sum(lengths),)``: ``lengths[t]`` uniforms in [0, 1) for each record ``streams[t]``,
    concatenated in record order, for draw round ``step`` (e.g. a Gibbs sweep; ``0 <= step < 2**28``).

    Value ``j`` of record ``r`` is ``(w >> 11) 2^-53`` (53 random bits), ``w`` being word ``j % 8``
    of the block at ``position = step << 20 | j >> 15``, ``block = (j >> 3) & 4095`` of ``purpose``
    (one 64-bit word per value, 8 values per ChaCha20 block; a record holds up to ``2**35``
    values). It depends only on the key, ``r``, ``step``, ``j`` and ``purpose``, never on the
    other records requested or their order: a record's uniforms are the same in any partition,
    on any worker, and for a retried task. Records' streams must be distinct within a release.
    ParameterError for a bad key, negative indices or lengths, or ``step`` out of range."""
    if not isinstance(key, ReleaseKey):
        raise ParameterError("key must be a textdp.noise.keyed.ReleaseKey")
    s = np.ascontiguousarray(streams, dtype=np.int64).reshape(-1)
    n = np.ascontiguousarray(lengths, dtype=np.int64).reshape(-1)
    if s.shape != n.shape:
        raise ParameterError("streams and lengths must have the same length")
    if s.size and (s.min() < 0 or n.min() < 0 or n.max() > 2**35):
        raise ParameterError("record indices must be >= 0 and lengths in [0, 2**35]")
    if isinstance(step, bool) or int(step) != step or not 0 <= int(step) < 2**28:
        raise ParameterError(f"step must be an integer in [0, 2**28), got {step!r}")
    offsets = np.zeros(s.size + 1, dtype=np.int64)
    np.cumsum(n, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.float64)
    if out.size:
        if _use_numpy(int((-(-n // 8)).sum())):
            _np_record_uniforms(key.words, s, offsets, int(step), _purpose(purpose), out)
        else:
            _kernels()._record_uniforms_kernel(key.words, s, offsets, int(step), _purpose(purpose), out)
    return out
