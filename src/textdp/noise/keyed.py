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

The kernels are numba functions (numba is a core dependency); their output is
checked against the RFC 8439 test vector (Sec. 2.3.2) in the tests.
"""

from __future__ import annotations

import hashlib
import math
import secrets

import numpy as np
from numba import njit

from textdp.errors import ParameterError

__all__ = [
    "ReleaseKey", "MAIN", "COIN", "UNIFORM", "MIX", "MIX_PICK", "chacha20_block", "keyed_words",
    "keyed_uniform_below", "keyed_bernoulli", "keyed_laplace_vectors", "LAPLACE_TRUNCATION",
    "BITS", "BITS_TIE", "keyed_bernoulli_bits",
]

#: purposes (separate decisions about one token)
MAIN, COIN, UNIFORM, MIX, MIX_PICK = 0, 1, 2, 3, 4
#: purposes of :func:`keyed_bernoulli_bits` (a record's bit vector, and its tie-breaking words)
BITS, BITS_TIE = 5, 6
_BLOCKS_PER_PURPOSE = 4096
_MASK32 = np.uint64(0xFFFFFFFF)
#: probability that one exponential or one Box-Muller radius of :func:`keyed_laplace_vectors` is
#: clipped by the 52-bit uniform it is computed from (the realised law's distance from the ideal one)
LAPLACE_TRUNCATION = 2.0**-52


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


# ---------------------------------------------------------------------------------------- kernels
@njit(cache=True, nogil=True)
def _block(key, counter, stream, out16):
    """ChaCha20 block (RFC 8439 Sec. 2.3): 16 uint32 output words (held in uint64) into
    ``out16``; the state in scalars so that LLVM keeps it in registers."""
    M = np.uint64(0xFFFFFFFF)
    S7, S8, S12, S16 = np.uint64(7), np.uint64(8), np.uint64(12), np.uint64(16)
    S20, S24, S25 = np.uint64(20), np.uint64(24), np.uint64(25)
    c0, c1, c2, c3 = np.uint64(0x61707865), np.uint64(0x3320646E), np.uint64(0x79622D32), np.uint64(0x6B206574)
    k0, k1, k2, k3, k4, k5, k6, k7 = key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7]
    c12, c13 = counter & M, counter >> np.uint64(32)
    c14, c15 = stream & M, stream >> np.uint64(32)
    x0, x1, x2, x3 = c0, c1, c2, c3
    x4, x5, x6, x7, x8, x9, x10, x11 = k0, k1, k2, k3, k4, k5, k6, k7
    x12, x13, x14, x15 = c12, c13, c14, c15
    for _ in range(10):
        x0 = (x0 + x4) & M; x12 ^= x0; x12 = (((x12) << S16) | (x12 >> S16)) & M
        x8 = (x8 + x12) & M; x4 ^= x8; x4 = (((x4) << S12) | (x4 >> S20)) & M
        x0 = (x0 + x4) & M; x12 ^= x0; x12 = (((x12) << S8) | (x12 >> S24)) & M
        x8 = (x8 + x12) & M; x4 ^= x8; x4 = (((x4) << S7) | (x4 >> S25)) & M
        x1 = (x1 + x5) & M; x13 ^= x1; x13 = (((x13) << S16) | (x13 >> S16)) & M
        x9 = (x9 + x13) & M; x5 ^= x9; x5 = (((x5) << S12) | (x5 >> S20)) & M
        x1 = (x1 + x5) & M; x13 ^= x1; x13 = (((x13) << S8) | (x13 >> S24)) & M
        x9 = (x9 + x13) & M; x5 ^= x9; x5 = (((x5) << S7) | (x5 >> S25)) & M
        x2 = (x2 + x6) & M; x14 ^= x2; x14 = (((x14) << S16) | (x14 >> S16)) & M
        x10 = (x10 + x14) & M; x6 ^= x10; x6 = (((x6) << S12) | (x6 >> S20)) & M
        x2 = (x2 + x6) & M; x14 ^= x2; x14 = (((x14) << S8) | (x14 >> S24)) & M
        x10 = (x10 + x14) & M; x6 ^= x10; x6 = (((x6) << S7) | (x6 >> S25)) & M
        x3 = (x3 + x7) & M; x15 ^= x3; x15 = (((x15) << S16) | (x15 >> S16)) & M
        x11 = (x11 + x15) & M; x7 ^= x11; x7 = (((x7) << S12) | (x7 >> S20)) & M
        x3 = (x3 + x7) & M; x15 ^= x3; x15 = (((x15) << S8) | (x15 >> S24)) & M
        x11 = (x11 + x15) & M; x7 ^= x11; x7 = (((x7) << S7) | (x7 >> S25)) & M
        x0 = (x0 + x5) & M; x15 ^= x0; x15 = (((x15) << S16) | (x15 >> S16)) & M
        x10 = (x10 + x15) & M; x5 ^= x10; x5 = (((x5) << S12) | (x5 >> S20)) & M
        x0 = (x0 + x5) & M; x15 ^= x0; x15 = (((x15) << S8) | (x15 >> S24)) & M
        x10 = (x10 + x15) & M; x5 ^= x10; x5 = (((x5) << S7) | (x5 >> S25)) & M
        x1 = (x1 + x6) & M; x12 ^= x1; x12 = (((x12) << S16) | (x12 >> S16)) & M
        x11 = (x11 + x12) & M; x6 ^= x11; x6 = (((x6) << S12) | (x6 >> S20)) & M
        x1 = (x1 + x6) & M; x12 ^= x1; x12 = (((x12) << S8) | (x12 >> S24)) & M
        x11 = (x11 + x12) & M; x6 ^= x11; x6 = (((x6) << S7) | (x6 >> S25)) & M
        x2 = (x2 + x7) & M; x13 ^= x2; x13 = (((x13) << S16) | (x13 >> S16)) & M
        x8 = (x8 + x13) & M; x7 ^= x8; x7 = (((x7) << S12) | (x7 >> S20)) & M
        x2 = (x2 + x7) & M; x13 ^= x2; x13 = (((x13) << S8) | (x13 >> S24)) & M
        x8 = (x8 + x13) & M; x7 ^= x8; x7 = (((x7) << S7) | (x7 >> S25)) & M
        x3 = (x3 + x4) & M; x14 ^= x3; x14 = (((x14) << S16) | (x14 >> S16)) & M
        x9 = (x9 + x14) & M; x4 ^= x9; x4 = (((x4) << S12) | (x4 >> S20)) & M
        x3 = (x3 + x4) & M; x14 ^= x3; x14 = (((x14) << S8) | (x14 >> S24)) & M
        x9 = (x9 + x14) & M; x4 ^= x9; x4 = (((x4) << S7) | (x4 >> S25)) & M
    out16[0] = (x0 + c0) & M
    out16[1] = (x1 + c1) & M
    out16[2] = (x2 + c2) & M
    out16[3] = (x3 + c3) & M
    out16[4] = (x4 + k0) & M
    out16[5] = (x5 + k1) & M
    out16[6] = (x6 + k2) & M
    out16[7] = (x7 + k3) & M
    out16[8] = (x8 + k4) & M
    out16[9] = (x9 + k5) & M
    out16[10] = (x10 + k6) & M
    out16[11] = (x11 + k7) & M
    out16[12] = (x12 + c12) & M
    out16[13] = (x13 + c13) & M
    out16[14] = (x14 + c14) & M
    out16[15] = (x15 + c15) & M


@njit(inline="always")
def _word(out16, i):
    return out16[2 * i] | (out16[2 * i + 1] << np.uint64(32))


@njit(inline="always")
def _base(position, purpose):
    return (np.uint64(position) << np.uint64(16)) | (np.uint64(purpose) << np.uint64(12))


@njit(cache=True, nogil=True)
def _words_kernel(key, streams, positions, purpose, n_words, out):
    blk = np.empty(16, np.uint64)
    for t in range(streams.size):
        base = _base(positions[t], purpose)
        for j in range(n_words):
            if j % 8 == 0:
                _block(key, base | np.uint64(j // 8), np.uint64(streams[t]), blk)
            out[t, j] = _word(blk, j % 8)


@njit(cache=True, nogil=True)
def _uniform_below_kernel(key, streams, positions, purpose, bounds, out):
    """Exact uniform integers in ``[0, bounds[t])`` by rejection on the top bits of each word.

    ``b = 63`` bits for bounds above ``2**61`` (totals of the 2^62-scaled integer weights lie on
    either side of 2^62, and two backends must accept the same words), else the bit length of
    ``bound - 1`` plus one (acceptance probability above 1/4 in both cases). Returns 0, or 1 if
    some draw exhausted its 4096 blocks (probability below 2^-9000)."""
    blk = np.empty(16, np.uint64)
    for t in range(streams.size):
        bound = bounds[t]
        if bound > np.uint64(1) << np.uint64(61):
            bits = 63
        else:
            bits = 1
            v = bound - np.uint64(1)
            while v > np.uint64(0):
                bits += 1
                v >>= np.uint64(1)
        shift = np.uint64(64 - bits)
        base = _base(positions[t], purpose)
        done = False
        for j in range(_BLOCKS_PER_PURPOSE):
            _block(key, base | np.uint64(j), np.uint64(streams[t]), blk)
            for i in range(8):
                x = _word(blk, i) >> shift
                if x < bound:
                    out[t] = x
                    done = True
                    break
            if done:
                break
        if not done:
            return 1
    return 0


@njit(cache=True, nogil=True)
def _bernoulli_kernel(key, streams, positions, purpose, pwords, out):
    """Exact Bernoulli(p): uniform 62-bit words against p's binary expansion ``pwords``, decided
    at the first word that differs (equal after the last word: U = p exactly, so U < p is false)."""
    blk = np.empty(16, np.uint64)
    for t in range(streams.size):
        base = _base(positions[t], purpose)
        res = False
        for k in range(pwords.size):
            if k % 8 == 0:
                _block(key, base | np.uint64(k // 8), np.uint64(streams[t]), blk)
            u = _word(blk, k % 8) >> np.uint64(2)
            if u < pwords[k]:
                res = True
                break
            if u > pwords[k]:
                break
        out[t] = res


@njit(cache=True, nogil=True)
def _bits_tie(key, stream, j, tie_purpose, pwords, blk):
    """Bit ``j`` whose main word tied with ``pwords[0]``: the words of ``(stream, position j,
    tie_purpose)`` against ``pwords[1:]`` (equal to the end: U = p exactly, U < p false)."""
    base = _base(j, tie_purpose)
    for k in range(1, pwords.size):
        i = k - 1
        if i % 8 == 0:
            _block(key, base | np.uint64(i // 8), stream, blk)
        u = _word(blk, i % 8) >> np.uint64(2)
        if u < pwords[k]:
            return True
        if u > pwords[k]:
            return False
    return False


@njit(cache=True, nogil=True)
def _bernoulli_bits_kernel(key, streams, purpose, tie_purpose, pwords, out):
    """``out[t, j]`` = exact Bernoulli(p) bit ``j`` of record ``streams[t]``: the top 62 bits of
    word ``j % 8`` of block ``(position j >> 15, purpose, block (j >> 3) & 4095)`` against
    ``pwords[0]``, a tie resolved by :func:`_bits_tie`."""
    blk = np.empty(16, np.uint64)
    tie = np.empty(16, np.uint64)
    n_bits = out.shape[1]
    p0 = pwords[0]
    S2 = np.uint64(2)
    pur = np.uint64(purpose) << np.uint64(12)
    for t in range(streams.size):
        s = np.uint64(streams[t])
        for j0 in range(0, n_bits, 8):
            counter = (np.uint64(j0 >> 15) << np.uint64(16)) | pur | np.uint64((j0 >> 3) & 4095)
            _block(key, counter, s, blk)
            m = min(8, n_bits - j0)
            for i in range(m):
                u = _word(blk, i) >> S2
                if u < p0:
                    out[t, j0 + i] = True
                elif u > p0:
                    out[t, j0 + i] = False
                else:
                    out[t, j0 + i] = _bits_tie(key, s, j0 + i, tie_purpose, pwords, tie)


@njit(cache=True, nogil=True)
def _laplace_kernel(key, streams, positions, purpose, scale, out):
    """Noise vectors of density ∝ exp(-||z|| / scale) in R^m (m = out.shape[1]): a uniform
    direction (normalised Box-Muller Gaussians) times a Gamma(m, scale) radius (a sum of m
    exponentials -ln U). Uniforms are U = (k + 1/2) 2^-52 with k the top 52 bits of a word."""
    blk = np.empty(16, np.uint64)
    m = out.shape[1]
    n_words = m + 2 * ((m + 1) // 2)
    two_pi = 2.0 * math.pi
    for t in range(streams.size):
        base = _base(positions[t], purpose)
        radius = 0.0
        norm2 = 0.0
        j = 0
        k = 0
        g0 = 0.0
        while j < n_words:
            if j % 8 == 0:
                _block(key, base | np.uint64(j // 8), np.uint64(streams[t]), blk)
            u = (np.float64(_word(blk, j % 8) >> np.uint64(12)) + 0.5) * 2.0**-52
            if j < m:
                radius -= math.log(u)
            elif (j - m) % 2 == 0:
                g0 = u
            else:
                r = math.sqrt(-2.0 * math.log(g0))
                a = r * math.cos(two_pi * u)
                out[t, k] = a
                norm2 += a * a
                k += 1
                if k < m:
                    b = r * math.sin(two_pi * u)
                    out[t, k] = b
                    norm2 += b * b
                    k += 1
            j += 1
        inv = 1.0 / math.sqrt(norm2) if norm2 > 0 else 0.0
        for i in range(m):
            out[t, i] = out[t, i] * inv * radius * scale


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
    out = np.empty(16, np.uint64)
    _block(key.words, np.uint64(counter), np.uint64(stream), out)
    return out.astype(np.uint32)


def keyed_words(key: ReleaseKey, streams, positions, purpose: int, n_words: int) -> np.ndarray:
    """uint64 ``(n, n_words)``: the first ``n_words`` words of each token's stream."""
    k, s, p = _addr(key, streams, positions)
    n_words = int(n_words)
    if not 0 < n_words <= 8 * _BLOCKS_PER_PURPOSE:
        raise ParameterError("n_words out of range")
    out = np.empty((s.size, n_words), dtype=np.uint64)
    _words_kernel(k, s, p, _purpose(purpose), n_words, out)
    return out


def keyed_uniform_below(key: ReleaseKey, streams, positions, purpose: int, bounds) -> np.ndarray:
    """Exact uniform integers ``u_t`` in ``[0, bounds[t])`` (``1 <= bounds < 2**63``), uint64,
    one per token, each from its own stream (rejection sampling; see the kernel)."""
    k, s, p = _addr(key, streams, positions)
    b = np.ascontiguousarray(np.broadcast_to(np.asarray(bounds, dtype=np.uint64), s.shape))
    if b.size and (b.min() < 1 or b.max() >= np.uint64(2**63)):
        raise ParameterError("uniform bounds must be in [1, 2**63)")
    out = np.empty(s.size, dtype=np.uint64)
    if _uniform_below_kernel(k, s, p, _purpose(purpose), b, out):  # pragma: no cover - probability < 2^-9000
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
    _bernoulli_kernel(k, s, pos, _purpose(purpose), np.asarray(words, dtype=np.uint64), out)
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
        _bernoulli_bits_kernel(k, s, purpose, tie_purpose, words, out)
    return out


def keyed_laplace_vectors(key: ReleaseKey, streams, positions, purpose: int, dim: int, scale: float) -> np.ndarray:
    """float64 ``(n, dim)`` noise vectors of density ∝ ``exp(-||z|| / scale)`` (FBDD's
    multivariate Laplace with ``scale = 1/eps``; Feyisetan et al. 2020, Sec. 3), one per token.

    Radius: a sum of ``dim`` exponentials ``-ln U`` (= Gamma(dim, scale)); direction:
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
    _laplace_kernel(k, s, p, _purpose(purpose), float(scale), out)
    return out
