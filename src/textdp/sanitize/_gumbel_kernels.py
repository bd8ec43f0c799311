"""numba kernels of :mod:`textdp.sanitize.gumbel` (imported on first use: a plain ``import textdp.sanitize``
does not load numba).

:func:`exact_sq` is the one definition of the exact squared distance of the mechanism:
``sum_t (x_t - y_t)^2`` in float64, ``t = 0 .. m-1`` in that order (one rounding for the difference, one
for the square, one for each addition; no reassociation, no fused multiply-add: numba compiles without
fastmath). tests/sanitize/test_gumbel.py's numpy oracle computes the same numbers (tested equal).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from textdp.sanitize._nearest_kernels import sq_distance as _sq  # the shared exact squared distance


@njit(nogil=True, cache=True)
def exact_sq(x, y, cols, out):  # pragma: no cover - compiled
    """``out[i] = sum_t (x[t] - y[cols[i], t])^2`` (float64, ``t`` in increasing order) for float64 ``x``
    ``(m,)`` and float ``y`` ``(V, m)``."""
    for i in range(cols.shape[0]):
        out[i] = _sq(x, y, cols[i])
    return out


# The scans over the prefilter scores compare float32 values only (max and < are exact: fastmath's
# reassociation cannot change their result; the caller passes finite scores, see nearest_lists). They are
# separate functions, never inlined at numba's level, so fastmath does not reach the exact distances.
@njit(nogil=True, cache=True, fastmath=True)
def _group_max(row, w, out):  # pragma: no cover - compiled
    """``out[j] = max(row[j], row[j + w], row[j + 2w], ...)`` for ``j < w`` (``w <= len(row)``): one
    vectorised pass over the row."""
    n = row.shape[0]
    for j in range(w):
        out[j] = row[j]
    o = w
    while o < n:
        z = min(w, n - o)
        seg = row[o:o + z]
        for j in range(z):
            r = seg[j]
            out[j] = r if r > out[j] else out[j]
        o += w


@njit(nogil=True, cache=True)
def _insert_largest(vals, m, k, x):  # pragma: no cover - compiled
    """Insert ``x`` into ``vals[:m]`` (sorted, largest first, at most ``k`` kept); returns the new ``m``."""
    if m < k:
        p = m
        m += 1
    elif x > vals[k - 1]:
        p = k - 1
    else:
        return m
    while p > 0 and vals[p - 1] < x:
        vals[p] = vals[p - 1]
        p -= 1
    vals[p] = x
    return m


@njit(nogil=True, cache=True)
def nearest_lists(a, slack, x, y, k, cols, dist, n_scored):  # pragma: no cover - compiled
    """For each row ``i`` of the prefilter scores ``a`` (float32 ``(B, V)``, larger = nearer, within
    ``slack[i]`` of the exact ranking: see :class:`textdp.sanitize.gumbel.NeighbourLists`): the ``k``
    output words nearest to ``x[i]`` (float64 ``(B, m)``) by :func:`exact_sq` against ``y`` (float
    ``(V, m)``), ordered by (exact squared distance, column); ``1 <= k <= V``.

    Every column whose score is at least ``A - slack[i]``, ``A`` the ``k``-th largest score of the row,
    is scored exactly (every column where ``slack[i]`` is not finite; a row with a finite slack must have
    finite scores), and the ``k`` smallest (exact value, column) pairs are kept: a total order, so the
    result does not depend on the order of the scan. The scan: the columns form ``w = ceil(V / 32)``
    groups ``{j, j + w, j + 2w, ...}``; the ``k``-th largest group maximum ``L`` is at most ``A`` (``k``
    groups hold a score >= ``L``), so ``A`` is found among the groups whose maximum is >= ``L``, and the
    columns to score among the groups whose maximum is >= the threshold. Writes ``cols[i, :k]`` (int32),
    ``dist[i, :k]`` = ``sqrt`` of the exact squared distance and ``n_scored[i]`` (columns scored
    exactly)."""
    b, v = a.shape
    best = np.empty(k, dtype=np.float64)
    who = np.empty(k, dtype=np.int64)
    top = np.empty(k, dtype=np.float32)
    w = (v + 31) // 32
    gmax = np.empty(w, dtype=np.float32)
    for i in range(b):
        row = a[i]
        every = not slack[i] < np.inf
        thr = np.float32(-np.inf)
        if not every:
            _group_max(row, w, gmax)
            lo = np.float32(-np.inf)
            if w >= k:
                mg = 0
                for j in range(w):
                    mg = _insert_largest(top, mg, k, gmax[j])
                lo = top[k - 1]
            mt = 0
            for j in range(w):
                if gmax[j] >= lo:
                    for c in range(j, v, w):
                        if row[c] >= lo:
                            mt = _insert_largest(top, mt, k, row[c])
            # a float32 threshold at or below A - slack: every column with a_j >= A - slack passes a_j >= thr
            t64 = np.float64(top[k - 1]) - slack[i]
            thr = np.float32(t64)
            if np.float64(thr) > t64:
                thr = np.nextafter(thr, np.float32(-np.inf))
        m = 0
        scored = 0
        for j in range(w):
            if not every and gmax[j] < thr:
                continue
            for c in range(j, v, w):
                if not every and row[c] < thr:
                    continue
                e = _sq(x[i], y, c)
                scored += 1
                if m < k:
                    p = m
                    m += 1
                elif e < best[k - 1] or (e == best[k - 1] and c < who[k - 1]):
                    p = k - 1
                else:
                    continue
                while p > 0 and (best[p - 1] > e or (best[p - 1] == e and who[p - 1] > c)):
                    best[p] = best[p - 1]
                    who[p] = who[p - 1]
                    p -= 1
                best[p] = e
                who[p] = c
        n_scored[i] = scored
        for p in range(k):
            cols[i, p] = who[p]
            dist[i, p] = np.sqrt(best[p])
    return cols


@njit(nogil=True, cache=True)
def noisy_argmin(dist, cols, slots, k, noise, out_rows, res, tokens):  # pragma: no cover - compiled
    """``res[tokens[i]] = out_rows[cols[s, p]]``, ``s = slots[i]``, ``p`` the first argmin over
    ``p < k[i]`` of ``dist[s, p] + noise[i, p]`` (float64; the same sums and the same first-minimum rule
    as numpy's ``argmin``)."""
    for i in range(slots.shape[0]):
        s = slots[i]
        best = np.inf
        arg = 0
        for p in range(k[i]):
            v = dist[s, p] + noise[i, p]
            if v < best:
                best = v
                arg = p
        res[tokens[i]] = out_rows[cols[s, arg]]
    return res
