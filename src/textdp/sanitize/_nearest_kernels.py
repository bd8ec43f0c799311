"""numba kernel of the nearest-word search of :mod:`textdp.sanitize.perturbation` (imported on first use:
a plain ``import textdp.sanitize`` does not load numba)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def scan_tile(g, ncols, col0, q, qq, arow, crow, ynorm, bnorm, bmax, y, best_d, best_j):  # pragma: no cover - compiled
    """One tile of approximate scores ``g`` (float32 ``(>= n, >= ncols)``, ``g[i, c]`` approximates
    ``||y_j||^2 - 2 q_i·y_j`` for column ``j = col0 + c``) into the running exact top ``k`` of each row
    (``best_d``/``best_j``: float64/int64 ``(n, k)``, ``k`` = 1 or 2, sorted by (distance, column)).

    Column ``j`` is re-ranked exactly (``sum_t (q[i, t] - y[j, t])^2`` in float64, in index order) unless
    its lower bound ``qq[i] + g[i, c] - (arow[i] ynorm[j] + bnorm[j] + crow[i])`` exceeds the current
    ``k``-th best exact distance ``u``. A first float32 pass skips 32 columns at once when every ``g``
    exceeds ``u - qq[i] + crow[i] + arow[i] max ynorm + max bnorm`` (``bmax``: those two maxima), rounded up
    to float32 (so no column it skips has a lower bound <= ``u``). Columns arrive in increasing order and
    only a strictly smaller distance enters the top ``k``, so ties go to the lowest column."""
    n, m = q.shape
    k = best_d.shape[1]
    for i in range(n):
        u = best_d[i, k - 1]
        base = qq[i] - crow[i]
        a = arow[i]
        tt = u - base + (a * bmax[0] + bmax[1])
        t32 = np.float32(tt + abs(tt) * 2.0 ** -22 + 1e-38) if tt == tt else np.float32(np.inf)
        for c0 in range(0, ncols, 32):
            c1 = min(ncols, c0 + 32)
            hit = 0
            for c in range(c0, c1):
                hit += g[i, c] <= t32
            if hit == 0:
                continue
            for c in range(c0, c1):
                lo = (np.float64(g[i, c]) + base) - (a * ynorm[col0 + c] + bnorm[col0 + c])
                if lo > u:
                    continue
                j = col0 + c
                d = 0.0
                for t in range(m):
                    e = q[i, t] - y[j, t]
                    d += e * e
                if d < best_d[i, 0]:
                    if k == 2:
                        best_d[i, 1] = best_d[i, 0]
                        best_j[i, 1] = best_j[i, 0]
                    best_d[i, 0] = d
                    best_j[i, 0] = j
                elif k == 2 and d < best_d[i, 1]:
                    best_d[i, 1] = d
                    best_j[i, 1] = j
                else:
                    continue
                u = best_d[i, k - 1]
                tt = u - base + (a * bmax[0] + bmax[1])
                t32 = np.float32(tt + abs(tt) * 2.0 ** -22 + 1e-38) if tt == tt else np.float32(np.inf)
    return best_j


@njit(inline="always")
def _key16(b):  # pragma: no cover - compiled
    """Order-preserving integer key of a bfloat16 bit pattern (not NaN): negative values reversed below
    the positive ones."""
    return (0xFFFF - b) if b & 0x8000 else (b | 0x8000)


@njit(inline="always")
def _threshold_key(tt, tmpu, tmpf):  # pragma: no cover - compiled
    """Key of the smallest bfloat16 >= ``tt`` (float64): every bfloat16 ``g <= tt`` has ``key(g) <=`` it;
    ``tt`` infinite or NaN: a key above every pattern."""
    if not tt < np.inf:
        return 0x10000
    tmpf[0] = np.float32(tt + abs(tt) * 2.0 ** -22 + 1e-38)  # rounded up to float32
    bits = tmpu[0]
    hi = np.int64(bits >> 16)
    if (bits & 0xFFFF) != 0 and (bits & 0x80000000) == 0:  # a positive value truncated: one step up
        hi += 1
    return _key16(hi)


@njit(nogil=True, cache=True)
def scan_tile_bf16(g, ncols, col0, q, qq, arow, crow, ynorm, bnorm, bmax, y, best_d, best_j):  # pragma: no cover
    """:func:`scan_tile` for a bfloat16 tile, ``g`` its bit patterns (uint16): the first pass compares
    integer keys (order-preserving) against the key of the threshold rounded up to bfloat16."""
    n, m = q.shape
    k = best_d.shape[1]
    tmpu = np.empty(1, dtype=np.uint32)
    tmpf = tmpu.view(np.float32)
    for i in range(n):
        u = best_d[i, k - 1]
        base = qq[i] - crow[i]
        a = arow[i]
        kt = _threshold_key(u - base + (a * bmax[0] + bmax[1]), tmpu, tmpf)
        for c0 in range(0, ncols, 64):
            c1 = min(ncols, c0 + 64)
            hit = 0
            for c in range(c0, c1):
                hit += _key16(np.int64(g[i, c])) <= kt
            if hit == 0:
                continue
            for c in range(c0, c1):
                tmpu[0] = np.uint32(g[i, c]) << 16
                lo = (np.float64(tmpf[0]) + base) - (a * ynorm[col0 + c] + bnorm[col0 + c])
                if lo > u:
                    continue
                j = col0 + c
                d = 0.0
                for t in range(m):
                    e = q[i, t] - y[j, t]
                    d += e * e
                if d < best_d[i, 0]:
                    if k == 2:
                        best_d[i, 1] = best_d[i, 0]
                        best_j[i, 1] = best_j[i, 0]
                    best_d[i, 0] = d
                    best_j[i, 0] = j
                elif k == 2 and d < best_d[i, 1]:
                    best_d[i, 1] = d
                    best_j[i, 1] = j
                else:
                    continue
                u = best_d[i, k - 1]
                kt = _threshold_key(u - base + (a * bmax[0] + bmax[1]), tmpu, tmpf)
    return best_j
