"""numba kernels of :mod:`textdp.noise.keyed` (ChaCha20 blocks and the keyed samplers built on
them). Imported on first use only: small jobs draw through keyed's numpy implementation of the
same functions (bit for bit the same words; see ``keyed._use_numpy``), so a short run does not
pay numba's start-up."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, uint32

from textdp.noise.keyed import _BLOCKS_PER_PURPOSE, RADIUS_RUN


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


#: blocks per call of :func:`_blocks_lanes`: its state (16 x LANES uint32 words, 16 KiB) stays in the L1 cache
LANES = 256


@njit(inline="always")
def _rotl(v, n):
    return uint32((v << uint32(n)) | (v >> uint32(32 - n)))


@njit(cache=True, nogil=True)
def _blocks_lanes(key, counters, streams, n, x):
    """ChaCha20 blocks (RFC 8439 Sec. 2.3) of ``(counters[i], streams[i])``, ``i < n``, computed lane-parallel:
    the state as 16 rows of lanes (structure of arrays), one double round over all lanes at a time, so that
    LLVM vectorises across blocks (about 4 times the speed of :func:`_block` on AVX-512). ``x[r, i]``: uint32
    output word ``r`` of block ``i`` (the same words as :func:`_block`'s ``out16[r]``)."""
    k = np.empty(8, np.uint32)
    for j in range(8):
        k[j] = uint32(key[j])
    M = np.uint64(0xFFFFFFFF)
    for i in range(n):
        x[0, i] = uint32(0x61707865)
        x[1, i] = uint32(0x3320646E)
        x[2, i] = uint32(0x79622D32)
        x[3, i] = uint32(0x6B206574)
        for j in range(8):
            x[4 + j, i] = k[j]
        x[12, i] = uint32(counters[i] & M)
        x[13, i] = uint32(counters[i] >> np.uint64(32))
        x[14, i] = uint32(streams[i] & M)
        x[15, i] = uint32(streams[i] >> np.uint64(32))
    y0, y1, y2, y3, y4, y5, y6, y7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    y8, y9, y10, y11, y12, y13, y14, y15 = x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15]
    for _ in range(10):
        for i in range(n):
            x0, x1, x2, x3, x4, x5, x6, x7 = y0[i], y1[i], y2[i], y3[i], y4[i], y5[i], y6[i], y7[i]
            x8, x9, x10, x11, x12, x13, x14, x15 = y8[i], y9[i], y10[i], y11[i], y12[i], y13[i], y14[i], y15[i]
            x0 = uint32(x0 + x4); x12 = _rotl(uint32(x12 ^ x0), 16); x8 = uint32(x8 + x12); x4 = _rotl(uint32(x4 ^ x8), 12)
            x0 = uint32(x0 + x4); x12 = _rotl(uint32(x12 ^ x0), 8); x8 = uint32(x8 + x12); x4 = _rotl(uint32(x4 ^ x8), 7)
            x1 = uint32(x1 + x5); x13 = _rotl(uint32(x13 ^ x1), 16); x9 = uint32(x9 + x13); x5 = _rotl(uint32(x5 ^ x9), 12)
            x1 = uint32(x1 + x5); x13 = _rotl(uint32(x13 ^ x1), 8); x9 = uint32(x9 + x13); x5 = _rotl(uint32(x5 ^ x9), 7)
            x2 = uint32(x2 + x6); x14 = _rotl(uint32(x14 ^ x2), 16); x10 = uint32(x10 + x14); x6 = _rotl(uint32(x6 ^ x10), 12)
            x2 = uint32(x2 + x6); x14 = _rotl(uint32(x14 ^ x2), 8); x10 = uint32(x10 + x14); x6 = _rotl(uint32(x6 ^ x10), 7)
            x3 = uint32(x3 + x7); x15 = _rotl(uint32(x15 ^ x3), 16); x11 = uint32(x11 + x15); x7 = _rotl(uint32(x7 ^ x11), 12)
            x3 = uint32(x3 + x7); x15 = _rotl(uint32(x15 ^ x3), 8); x11 = uint32(x11 + x15); x7 = _rotl(uint32(x7 ^ x11), 7)
            x0 = uint32(x0 + x5); x15 = _rotl(uint32(x15 ^ x0), 16); x10 = uint32(x10 + x15); x5 = _rotl(uint32(x5 ^ x10), 12)
            x0 = uint32(x0 + x5); x15 = _rotl(uint32(x15 ^ x0), 8); x10 = uint32(x10 + x15); x5 = _rotl(uint32(x5 ^ x10), 7)
            x1 = uint32(x1 + x6); x12 = _rotl(uint32(x12 ^ x1), 16); x11 = uint32(x11 + x12); x6 = _rotl(uint32(x6 ^ x11), 12)
            x1 = uint32(x1 + x6); x12 = _rotl(uint32(x12 ^ x1), 8); x11 = uint32(x11 + x12); x6 = _rotl(uint32(x6 ^ x11), 7)
            x2 = uint32(x2 + x7); x13 = _rotl(uint32(x13 ^ x2), 16); x8 = uint32(x8 + x13); x7 = _rotl(uint32(x7 ^ x8), 12)
            x2 = uint32(x2 + x7); x13 = _rotl(uint32(x13 ^ x2), 8); x8 = uint32(x8 + x13); x7 = _rotl(uint32(x7 ^ x8), 7)
            x3 = uint32(x3 + x4); x14 = _rotl(uint32(x14 ^ x3), 16); x9 = uint32(x9 + x14); x4 = _rotl(uint32(x4 ^ x9), 12)
            x3 = uint32(x3 + x4); x14 = _rotl(uint32(x14 ^ x3), 8); x9 = uint32(x9 + x14); x4 = _rotl(uint32(x4 ^ x9), 7)
            y0[i], y1[i], y2[i], y3[i], y4[i], y5[i], y6[i], y7[i] = x0, x1, x2, x3, x4, x5, x6, x7
            y8[i], y9[i], y10[i], y11[i], y12[i], y13[i], y14[i], y15[i] = x8, x9, x10, x11, x12, x13, x14, x15
    for i in range(n):
        y0[i] = uint32(y0[i] + uint32(0x61707865))
        y1[i] = uint32(y1[i] + uint32(0x3320646E))
        y2[i] = uint32(y2[i] + uint32(0x79622D32))
        y3[i] = uint32(y3[i] + uint32(0x6B206574))
        for j in range(8):
            x[4 + j, i] = uint32(x[4 + j, i] + k[j])
        y12[i] = uint32(y12[i] + uint32(counters[i] & M))
        y13[i] = uint32(y13[i] + uint32(counters[i] >> np.uint64(32)))
        y14[i] = uint32(y14[i] + uint32(streams[i] & M))
        y15[i] = uint32(y15[i] + uint32(streams[i] >> np.uint64(32)))


@njit(inline="always")
def _lane_batch(key, streams, positions, purpose, t0, t1, nb, cnt, st, x):
    """The first ``nb`` blocks of tokens ``t0 .. t1 - 1`` (their ``purpose`` at their positions) into ``x``:
    token ``t``'s block ``b`` is lane ``(t - t0) nb + b``."""
    n = 0
    for t in range(t0, t1):
        base = _base(positions[t], purpose)
        for b in range(nb):
            cnt[n] = base | np.uint64(b)
            st[n] = np.uint64(streams[t])
            n += 1
    _blocks_lanes(key, cnt, st, n, x)


@njit(inline="always")
def _lane_word(x, lane, i):
    """64-bit word ``i`` (0..7) of block ``lane`` of :func:`_blocks_lanes`'s output (as :func:`_word`)."""
    return np.uint64(x[2 * i, lane]) | (np.uint64(x[2 * i + 1, lane]) << np.uint64(32))


@njit(inline="always")
def _word(out16, i):
    return out16[2 * i] | (out16[2 * i + 1] << np.uint64(32))


@njit(inline="always")
def _base(position, purpose):
    return (np.uint64(position) << np.uint64(16)) | (np.uint64(purpose) << np.uint64(12))


@njit(cache=True, nogil=True)
def _words_kernel(key, streams, positions, purpose, n_words, out):
    nb = (n_words + 7) // 8
    per = max(1, LANES // max(nb, 1))  # tokens per batch of lanes
    x = np.empty((16, per * nb), np.uint32)
    cnt = np.empty(per * nb, np.uint64)
    st = np.empty(per * nb, np.uint64)
    for t0 in range(0, streams.size, per):
        t1 = min(streams.size, t0 + per)
        _lane_batch(key, streams, positions, purpose, t0, t1, nb, cnt, st, x)
        for t in range(t0, t1):
            lane0 = (t - t0) * nb
            for j in range(n_words):
                out[t, j] = _lane_word(x, lane0 + j // 8, j % 8)


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
    exponentials -ln U, computed as -ln of the product of each run of RADIUS_RUN uniforms: one
    logarithm per run instead of one per uniform; a product of 16 uniforms >= 2^-53 stays a
    normal float). Uniforms are U = (k + 1/2) 2^-52 with k the top 52 bits of a word."""
    m = out.shape[1]
    n_words = m + 2 * ((m + 1) // 2)
    two_pi = 2.0 * math.pi
    nb = (n_words + 7) // 8
    per = max(1, LANES // nb)  # tokens per batch of lanes (their blocks computed together)
    x = np.empty((16, per * nb), np.uint32)
    cnt = np.empty(per * nb, np.uint64)
    st = np.empty(per * nb, np.uint64)
    u = np.empty(n_words, np.float64)
    for t in range(streams.size):
        t0 = t - t % per
        if t == t0:
            _lane_batch(key, streams, positions, purpose, t0, min(streams.size, t0 + per), nb, cnt, st, x)
        lane0 = (t - t0) * nb
        for j in range(n_words):  # branch-free: vectorised
            u[j] = (np.float64(_lane_word(x, lane0 + j // 8, j % 8) >> np.uint64(12)) + 0.5) * 2.0**-52
        radius = 0.0
        for j0 in range(0, m, RADIUS_RUN):
            prod = 1.0
            for j in range(j0, min(m, j0 + RADIUS_RUN)):
                prod *= u[j]
            radius -= math.log(prod)
        norm2 = 0.0
        k = 0
        for j in range(m, n_words, 2):
            r = math.sqrt(-2.0 * math.log(u[j]))
            a = r * math.cos(two_pi * u[j + 1])
            out[t, k] = a
            norm2 += a * a
            k += 1
            if k < m:
                b = r * math.sin(two_pi * u[j + 1])
                out[t, k] = b
                norm2 += b * b
                k += 1
        inv = 1.0 / math.sqrt(norm2) if norm2 > 0 else 0.0
        for i in range(m):
            out[t, i] = out[t, i] * inv * radius * scale


@njit(cache=True, nogil=True)
def _record_uniforms_kernel(key, streams, offsets, step, purpose, out):
    """Uniforms ``(w >> 11) 2^-53`` of records ``streams[t]``, record ``t`` filling
    ``out[offsets[t]:offsets[t + 1]]``: its value ``j`` is word ``j & 7`` of the block at
    position ``step << 20 | j >> 15``, block ``(j >> 3) & 4095`` of ``purpose``
    (:func:`textdp.noise.keyed.keyed_record_uniforms`)."""
    blk = np.empty(16, np.uint64)
    scale = 2.0 ** -53
    s11 = np.uint64(11)
    for t in range(streams.size):
        lo = offsets[t]
        n = offsets[t + 1] - lo
        stream = np.uint64(streams[t])
        for j in range(n):
            if j % 8 == 0:
                pos = (np.uint64(step) << np.uint64(20)) | (np.uint64(j) >> np.uint64(15))
                _block(key, _base(pos, purpose) | (np.uint64(j >> 3) & np.uint64(4095)), stream, blk)
            out[lo + j] = float(_word(blk, j % 8) >> s11) * scale
