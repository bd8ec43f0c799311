"""numba kernels of the exact nearest-word search (:class:`textdp.sanitize.nearest.NearestSearch`;
imported on first use: a plain ``import textdp.sanitize`` does not load numba).

Scores: ``s_j = sum_t q_t y_jt - h_j`` (``h_j = ||y_j||^2 / 2``; the largest score is the nearest word),
computed in float64 by :func:`exact_score` in one fixed order, so a score does not depend on the block,
the tile, the thread or the prefilter that selected the column. A prefilter tile holds, for the words
``s0 .. s0 + T - 1`` of the table (rows) and the queries ``i`` of a block (columns), approximate scores
``a`` with ``|a - s| <= B0[i] + c |a|`` (:mod:`textdp.sanitize.nearest` derives ``B0`` and ``c``):
bfloat16 bits as int16 (:func:`scan_tile_bf16`) or float32 values (:func:`scan_tile_f32`).

The rule (for ``k`` = 1 or 2 nearest words). ``f(a) = a - c|a|`` and ``g(a) = a + c|a|`` increase with
``a`` and ``f(a) - B0 <= s <= g(a) + B0``. If ``k`` distinct columns have ``a >= M`` they have ``s >= f(M)
- B0``; with ``T`` the larger of that and the ``k``-th best exact score found so far, a column with ``g(a)
+ B0 < T`` is strictly worse than ``k`` others and cannot enter the top ``k``: only columns with ``g(a) >=
T - B0`` are scored exactly. The tile's ``M`` is the ``k``-th largest of its chunk maxima (``k`` distinct
chunks, hence ``k`` distinct columns).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: words per chunk of the chunk maxima (pass 1)
CHUNK = 16
#: int16 above every bfloat16 bit pattern of a finite value (a threshold nothing reaches)
_NEVER16 = 32767


@njit(nogil=True, cache=True)
def half_squared_norms(y, out):  # pragma: no cover - compiled
    """``out[j] = (sum_t y[j, t]^2) / 2`` in float64, in :func:`exact_score`'s order."""
    for j in range(y.shape[0]):
        out[j] = 0.5 * _dot(y, j, y, j)


@njit(nogil=True, cache=True, inline="always")
def _dot(q, i, y, j):  # pragma: no cover - compiled
    """``sum_t q[i, t] y[j, t]`` in float64: four partial sums over ``t = 0, 4, 8, ...``, ``1, 5, ...``
    (each in increasing ``t``; the tail ``t >= 4 floor(m/4)`` goes to the first), then ``(a0 + a1) + (a2
    + a3)``: one fixed order."""
    m = q.shape[1]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    t = 0
    while t + 4 <= m:
        a0 += np.float64(q[i, t]) * np.float64(y[j, t])
        a1 += np.float64(q[i, t + 1]) * np.float64(y[j, t + 1])
        a2 += np.float64(q[i, t + 2]) * np.float64(y[j, t + 2])
        a3 += np.float64(q[i, t + 3]) * np.float64(y[j, t + 3])
        t += 4
    while t < m:
        a0 += np.float64(q[i, t]) * np.float64(y[j, t])
        t += 1
    return (a0 + a1) + (a2 + a3)


@njit(nogil=True, cache=True, inline="always")
def exact_score(q, i, y, h, j):  # pragma: no cover - compiled
    """``s_j`` of query row ``i``: :func:`_dot` minus ``h_j`` (``y`` float32 or float64: its values are
    used exactly)."""
    return _dot(q, i, y, j) - h[j]


@njit(nogil=True, cache=True, inline="always")
def _insert(bs, bj, i, s, j, k):  # pragma: no cover - compiled
    """Insert column ``j`` of score ``s`` into row ``i`` of the top-``k`` buffers, ordered by (score
    descending, column ascending): the result does not depend on the order columns are offered."""
    if not (s > bs[i, k - 1] or (s == bs[i, k - 1] and j < bj[i, k - 1])):
        return
    p = k - 1
    while p > 0 and (s > bs[i, p - 1] or (s == bs[i, p - 1] and j < bj[i, p - 1])):
        bs[i, p] = bs[i, p - 1]
        bj[i, p] = bj[i, p - 1]
        p -= 1
    bs[i, p] = s
    bj[i, p] = j


@njit(nogil=True, cache=True)
def exact_all(q, rows, y, h, k, bs, bj):  # pragma: no cover - compiled
    """Every column of ``y`` scored exactly for the query rows ``rows`` (the search without a prefilter)."""
    for r in range(rows.shape[0]):
        i = rows[r]
        for c in range(k):
            bs[i, c] = -np.inf
            bj[i, c] = -1
        for j in range(y.shape[0]):
            _insert(bs, bj, i, exact_score(q, i, y, h, j), j, k)


@njit(nogil=True, cache=True, inline="always")
def _bf16_floor_bits(x, f32, u32):  # pragma: no cover - compiled
    """int16 bits of a bfloat16 value ``<= x`` (``x > 0`` float64) and within a few units of it."""
    f32[0] = np.float32(x)
    while np.float64(f32[0]) > x:
        f32[0] = np.nextafter(f32[0], np.float32(-np.inf))
    return np.int16(np.uint16(u32[0] >> np.uint32(16)))  # truncation rounds a positive value down


@njit(nogil=True, cache=True, inline="always")
def _bf16_value(bits, f32, u32):  # pragma: no cover - compiled
    u32[0] = np.uint32(np.uint16(bits)) << np.uint32(16)
    return np.float64(f32[0])


@njit(nogil=True, cache=True)
def _chunk_max(g, nq, cm):  # pragma: no cover - compiled
    """``cm[c, i]``: the largest entry of rows ``c*CHUNK .. c*CHUNK + CHUNK - 1`` of column ``i``; returns
    the number of chunks. A full chunk's row loop has the constant trip count ``CHUNK``, which LLVM
    unrolls, so the loop over the queries ``i`` is the innermost one and runs in vector registers (the
    running maxima never go to memory: half the time of a row-by-row update of ``cm``)."""
    t_rows = g.shape[0]
    full = t_rows // CHUNK
    for c in range(full):
        b = c * CHUNK
        for i in range(nq):
            m = g[b, i]
            for j in range(1, CHUNK):
                x = g[b + j, i]
                m = x if x > m else m
            cm[c, i] = m
    if full * CHUNK == t_rows:
        return full
    b = full * CHUNK
    for i in range(nq):
        m = g[b, i]
        for j in range(b + 1, t_rows):
            x = g[j, i]
            m = x if x > m else m
        cm[full, i] = m
    return full + 1


@njit(nogil=True, cache=True)
def _top2(cm, nch, nq, m1, m2):  # pragma: no cover - compiled
    """``m1[i]``, ``m2[i]``: the largest and second largest of ``cm[:nch, i]`` (equal on a tie; ``m2 =
    m1`` when ``nch = 1``), row by row (vectorised across the queries)."""
    for i in range(nq):
        m1[i] = cm[0, i]
        m2[i] = cm[0, i]
    if nch >= 2:
        for i in range(nq):
            x = cm[1, i]
            a = m1[i]
            m1[i] = x if x > a else a
            m2[i] = a if x > a else x
    for c in range(2, nch):
        for i in range(nq):
            x = cm[c, i]
            a = m1[i]
            b = m2[i]
            lo = x if x < a else a
            m2[i] = lo if lo > b else b
            m1[i] = x if x > a else a


@njit(nogil=True, cache=True)
def _merge(g, s0, nq, cm, nch, thr, q, y, h, cols, k, bs, bj):  # pragma: no cover - compiled
    """Score exactly every tile row ``j`` with ``g[j, i] >= thr[i]`` and insert its column ``cols[s0 + j]``
    into query ``i``'s top ``k``; chunks whose maximum is below are passed over: per row of ``cm``, a
    vectorised comparison into a byte mask, then its 8-byte words, most of them zero."""
    t_rows = g.shape[0]
    nw = (nq + 7) // 8
    mask = np.zeros(nw * 8, dtype=np.uint8)
    words = mask.view(np.uint64)
    for c in range(nch):
        for i in range(nq):
            mask[i] = np.uint8(cm[c, i] >= thr[i])
        for w in range(nw):
            if words[w] == 0:
                continue
            for i in range(w * 8, min(nq, w * 8 + 8)):
                if mask[i]:
                    t = thr[i]
                    for j in range(c * CHUNK, min(t_rows, (c + 1) * CHUNK)):
                        if g[j, i] >= t:
                            _insert(bs, bj, i, exact_score(q, i, y, h, s0 + j), cols[s0 + j], k)


@njit(nogil=True, cache=True)
def _merge_by_value(g, s0, i, q, y, h, cols, b0, c, k, bs, bj):  # pragma: no cover - compiled
    """One query of a bfloat16 tile whose threshold is not positive: the module's rule on the decoded
    values, ``M`` the tile's ``k``-th largest value (a scalar pass; rare)."""
    f32 = np.empty(1, dtype=np.float32)
    u32 = f32.view(np.uint32)
    t_rows = g.shape[0]
    v1 = -np.inf
    v2 = -np.inf
    for j in range(t_rows):
        x = _bf16_value(g[j, i], f32, u32)
        if x > v1:
            v2 = v1
            v1 = x
        elif x > v2:
            v2 = x
    vk = v1 if k == 1 else v2
    t = bs[i, k - 1]
    if t_rows >= k:
        t = max(t, vk - c * abs(vk) - b0)
    for j in range(t_rows):
        x = _bf16_value(g[j, i], f32, u32)
        if x + c * abs(x) + b0 >= t:
            _insert(bs, bj, i, exact_score(q, i, y, h, s0 + j), cols[s0 + j], k)


@njit(nogil=True, cache=True)
def scan_tile_bf16(g, s0, nq, q, y, h, cols, b0, c, k, bs, bj, skip, cm, m1, m2, thr):  # pragma: no cover - compiled
    """Merge one bfloat16 prefilter tile into the exact top ``k`` of each query (the module's rule).

    ``g``: int16 ``(T, R)``, the bfloat16 bits of the approximate scores of the words ``s0 .. s0 + T - 1``
    of the (permuted) table ``y``/``h`` (rows; ``cols`` maps them to output columns) for the queries ``0 ..
    nq - 1`` (columns), ``|a - s| <= b0[i] + c |a|``; ``bs``/``bj`` ``(R, k)``: the exact top ``k`` so far
    (float64 scores, int64 columns, ``-inf``/-1 when empty); queries with ``skip[i]`` are left alone;
    ``cm`` int16 ``(>= ceil(T / CHUNK), R)``, ``m1``, ``m2``, ``thr`` int16 ``(R,)`` work arrays.

    Positive bfloat16 values order as their int16 bits (negative ones do not, and have negative bits), so
    a positive threshold ``(T - B0)/(1 + c)``, rounded down to a bfloat16, is compared on the bits; a query
    whose threshold is not positive takes :func:`_merge_by_value` instead."""
    f32 = np.empty(1, dtype=np.float32)
    u32 = f32.view(np.uint32)
    nch = _chunk_max(g, nq, cm)
    _top2(cm, nch, nq, m1, m2)
    for i in range(nq):
        thr[i] = _NEVER16
        if skip[i]:
            continue
        b = b0[i]
        mk = m1[i] if k == 1 else m2[i]
        t = bs[i, k - 1]
        if nch >= k and mk >= 0:  # mk >= 0: k chunks hold a positive value, mk the k-th largest
            v = _bf16_value(mk, f32, u32)
            t = max(t, v - c * v - b)
        lim = (t - b) / (1.0 + c)
        if lim > 0.0:
            thr[i] = _bf16_floor_bits(lim, f32, u32)
        else:
            _merge_by_value(g, s0, i, q, y, h, cols, b, c, k, bs, bj)
    _merge(g, s0, nq, cm, nch, thr, q, y, h, cols, k, bs, bj)


@njit(nogil=True, cache=True)
def scan_tile_f32(g, s0, nq, q, y, h, cols, b0, c, k, bs, bj, skip, cm, m1, m2, thr):  # pragma: no cover - compiled
    """:func:`scan_tile_bf16` for a float32 tile (``g``, ``cm``, ``m1``, ``m2``, ``thr`` float32; the
    numpy prefilter has ``c = 0``): no sign restriction."""
    nch = _chunk_max(g, nq, cm)
    _top2(cm, nch, nq, m1, m2)
    for i in range(nq):
        thr[i] = np.inf
        if skip[i]:
            continue
        b = b0[i]
        mk = np.float64(m1[i] if k == 1 else m2[i])
        t = bs[i, k - 1]
        if nch >= k:
            t = max(t, mk - c * abs(mk) - b)
        lim = t - b
        if lim >= 0.0:
            lim = lim / (1.0 + c)
        else:
            lim = lim / (1.0 - c)
        v = np.float32(-np.inf)
        if lim > -np.inf:
            v = np.float32(lim)
            while np.float64(v) > lim:  # round down
                v = np.nextafter(v, np.float32(-np.inf))
        thr[i] = v
    _merge(g, s0, nq, cm, nch, thr, q, y, h, cols, k, bs, bj)


@njit(nogil=True, cache=True, inline="always")
def sq_distance(x, y, j):  # pragma: no cover - compiled
    """``sum_t (x[t] - y[j, t])^2`` in float64 for a float64 row ``x`` ``(m,)`` and a float table ``y``,
    ``t`` in increasing order (one rounding for each difference, square and addition; compiled without
    fastmath, so no reassociation and no fused multiply-add): the one definition of an exact squared
    distance, shared with :mod:`textdp.sanitize._gumbel_kernels`."""
    acc = 0.0
    for t in range(x.shape[0]):
        d = x[t] - np.float64(y[j, t])
        acc += d * d
    return acc


@njit(nogil=True, cache=True)
def vickrey_pairs(q, first, second, y, t, w1, w2, p):  # pragma: no cover - compiled
    """Vickrey's pair of each noisy point ``q[i]`` (:class:`textdp.sanitize.perturbation.Vickrey`): the
    distances ``d1``, ``d2`` (float64: the square root of :func:`sq_distance`) to the columns
    ``first[i]`` and ``second[i]`` of ``y`` (``second[i] = -1``: no second word), the pair ordered by
    (distance, column) into ``w1[i]``, ``w2[i]``, and ``p[i] = (1 - t) d2 / (t d1 + (1 - t) d2)`` (1 where
    the denominator is 0 or there is no second word), clipped to [0, 1]."""
    for i in range(q.shape[0]):
        a = first[i]
        b = second[i]
        if b < 0:
            w1[i] = a
            w2[i] = a
            p[i] = 1.0
            continue
        d1 = np.sqrt(sq_distance(q[i], y, a))
        d2 = np.sqrt(sq_distance(q[i], y, b))
        if d2 < d1 or (d2 == d1 and b < a):
            a, b = b, a
            d1, d2 = d2, d1
        w1[i] = a
        w2[i] = b
        p[i] = vickrey_p(d1, d2, t)


@njit(nogil=True, cache=True, inline="always")
def vickrey_p(d1, d2, t):  # pragma: no cover - compiled
    """Vickrey's probability of the nearer word: ``(1 - t) d2 / (t d1 + (1 - t) d2)``, 1 where the
    denominator is 0, clipped to [0, 1] (the one definition: :func:`vickrey_pairs` and
    :meth:`textdp.sanitize.perturbation.Vickrey.first_probability`)."""
    num = (1.0 - t) * d2
    den = t * d1 + num
    v = num / den if den > 0 else 1.0
    return min(1.0, max(0.0, v))


@njit(nogil=True, cache=True)
def vickrey_probabilities(d1, d2, t, out):  # pragma: no cover - compiled
    """``out[i] = vickrey_p(d1[i], d2[i], t)`` for float64 arrays of one length."""
    for i in range(out.shape[0]):
        out[i] = vickrey_p(d1[i], d2[i], t)
