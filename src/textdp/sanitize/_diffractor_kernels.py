"""numba kernels of :mod:`textdp.sanitize.diffractor`: exact float64 squared distances and the greedy
nearest-neighbour chain that orders the output vocabulary into one 1-D list.

Every decision of the chain is made on :func:`sqdist` (a sequential float64 sum, the same operations
in the same order on every machine), so a list depends only on the table; the float32 GEMM of the
caller only proposes candidates, with a certified lower bound for everything it did not propose.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def sqdist(y, a, b):
    """Squared Euclidean distance of rows ``a`` and ``b`` of ``y`` (float64, sequential sum)."""
    s = 0.0
    for t in range(y.shape[1]):
        d = y[a, t] - y[b, t]
        s += d * d
    return s


@njit(cache=True, nogil=True)
def exact_candidates(y, rows, cand, out_d):
    """``out_d[r, t] = sqdist(y, rows[r], cand[r, t])``, then each row's candidates sorted by
    (distance, column) in place (insertion sort; rows hold a few dozen candidates)."""
    n, k = cand.shape
    for r in range(n):
        a = rows[r]
        for t in range(k):
            out_d[r, t] = sqdist(y, a, cand[r, t])
        for t in range(1, k):
            dv = out_d[r, t]
            cv = cand[r, t]
            s = t - 1
            while s >= 0 and (out_d[r, s] > dv or (out_d[r, s] == dv and cand[r, s] > cv)):
                out_d[r, s + 1] = out_d[r, s]
                cand[r, s + 1] = cand[r, s]
                s -= 1
            out_d[r, s + 1] = dv
            cand[r, s + 1] = cv


@njit(cache=True, nogil=True)
def greedy_chain(y, nbr, nbr_d, bound, start):
    """The greedy nearest-neighbour chain over the rows of ``y`` from ``start``: each next element
    is the nearest row not yet in the chain (exact :func:`sqdist`, ties to the smaller row).

    ``nbr[i]``: candidate rows of ``i`` sorted by (exact distance ``nbr_d[i]``, row);
    ``bound[i]``: a lower bound of the squared distance from ``i`` to every row not in ``nbr[i]``
    (other than ``i``). The first unused candidate is taken when its distance is below
    ``bound[i]`` (then it is provably the nearest unused row); otherwise every unused row is
    scanned. Returns (the chain as int64 rows, the number of full scans)."""
    n = y.shape[0]
    k = nbr.shape[1]
    used = np.zeros(n, dtype=np.bool_)
    rem = np.arange(n)  # unused rows, compacted by swap-remove
    where = np.arange(n)  # position of each row in rem
    n_rem = n
    order = np.empty(n, dtype=np.int64)
    scans = 0
    cur = start
    for step in range(n):
        order[step] = cur
        used[cur] = True
        p = where[cur]
        last = rem[n_rem - 1]
        rem[p] = last
        where[last] = p
        n_rem -= 1
        if n_rem == 0:
            break
        nxt = -1
        for t in range(k):
            c = nbr[cur, t]
            if not used[c]:
                if nbr_d[cur, t] < bound[cur]:
                    nxt = c
                break
        if nxt < 0:
            scans += 1
            best = np.inf
            m = y.shape[1]
            for r in range(n_rem):
                c = rem[r]
                dd = 0.0
                for t in range(m):  # partial sums only grow: stop once past the best (same result)
                    dv = y[cur, t] - y[c, t]
                    dd += dv * dv
                    if dd > best:
                        break
                if dd < best or (dd == best and c < nxt):
                    best = dd
                    nxt = c
        cur = nxt
    return order, scans


@njit(cache=True, nogil=True)
def sqnorms(y):
    """``||y_r||^2`` of every row (the same sequential float64 sum as :func:`sqdist`)."""
    n = y.shape[0]
    out = np.empty(n)
    for r in range(n):
        s = 0.0
        for t in range(y.shape[1]):
            s += y[r, t] * y[r, t]
        out[r] = s
    return out


@njit(cache=True, nogil=True)
def nearest_in_block(g, slack, x, y, out):
    """For each row ``r`` of the float32 GEMM estimates ``g`` (``(b, N)``, squared distance minus
    ``||x_r||^2``): among the columns within ``2 slack[r]`` of the row's smallest estimate (a set
    that holds the true nearest), the nearest row of ``y`` to ``x[r]`` by exact sequential float64
    squared distance, ties to the smaller column, into ``out[r]``."""
    b, n = g.shape
    m = y.shape[1]
    for r in range(b):
        gmin = np.inf
        for c in range(n):
            if g[r, c] < gmin:
                gmin = g[r, c]
        thr = gmin + 2.0 * slack[r]
        best = np.inf
        bc = -1
        for c in range(n):
            if g[r, c] <= thr:
                s = 0.0
                for q in range(m):
                    d = x[r, q] - y[c, q]
                    s += d * d
                if s < best:
                    best = s
                    bc = c
        out[r] = bc


@njit(cache=True, nogil=True)
def smallest_k(g, first, k, cand, thr):
    """Per row ``r`` of ``g`` (float32 ``(b, N)``): the columns of its ``k`` smallest values, column
    ``first + r`` (the row itself) excluded, into ``cand[r]``, and the ``(k+1)``-th smallest value into
    ``thr[r]`` (every column not in ``cand[r]`` has ``g >= thr[r]``; ``inf`` when there is none)."""
    b, n = g.shape
    vals = np.empty(k + 1, dtype=np.float32)
    idx = np.empty(k + 1, dtype=np.int64)
    for r in range(b):
        cnt = 0
        for c in range(n):
            if c == first + r:
                continue
            v = g[r, c]
            if cnt == k + 1 and v >= vals[k]:
                continue
            s = cnt - 1 if cnt < k + 1 else k - 1
            if cnt < k + 1:
                cnt += 1
            while s >= 0 and vals[s] > v:
                vals[s + 1] = vals[s]
                idx[s + 1] = idx[s]
                s -= 1
            vals[s + 1] = v
            idx[s + 1] = c
        for t in range(k):
            cand[r, t] = idx[t]
        thr[r] = vals[k] if cnt == k + 1 else np.inf
