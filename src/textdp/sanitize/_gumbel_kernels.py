"""numba kernel of :mod:`textdp.sanitize.gumbel` (imported on first use: a plain ``import textdp.sanitize``
does not load numba)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def _top_k(g, k, out):  # pragma: no cover - compiled
    """``out[i]``: columns of the ``k`` smallest entries of row ``i``, ordered by (value, column):
    an insertion buffer of size ``k``; columns are scanned in increasing order and only a strictly
    smaller value enters, so ties go to the smaller column (the same order as ``_top_k_numpy``)."""
    n, v = g.shape
    vals = np.empty(k, dtype=np.float64)
    for i in range(n):
        row = g[i]
        m = 0
        for c0 in range(0, v, 16):
            c1 = min(v, c0 + 16)
            if m == k:  # a full buffer: skip the chunk unless some entry beats its largest (vectorised)
                lo = row[c0]
                for j in range(c0 + 1, c1):
                    lo = min(lo, row[j])
                if not lo < vals[k - 1]:
                    continue
            for j in range(c0, c1):
                x = row[j]
                if m < k:
                    p = m
                    m += 1
                elif x < vals[k - 1]:
                    p = k - 1
                else:
                    continue
                while p > 0 and vals[p - 1] > x:
                    vals[p] = vals[p - 1]
                    out[i, p] = out[i, p - 1]
                    p -= 1
                vals[p] = x
                out[i, p] = j
    return out
