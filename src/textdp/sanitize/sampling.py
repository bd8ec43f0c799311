"""Blocked, vectorised sampling for token-level sanitizers.

Two pieces, kept apart so that each can be replaced on its own:

* :class:`ExponentialKernel` turns a block of ``B`` input embeddings into the
  unnormalised SanText weights ``w[b, j] = exp(-(eps/2)·(d(x_b, y_j) - d_0(b)))``
  over the ``V`` output words (``d_0(b)`` a per-row offset: the distance to the
  nearest output word, or 0 for a word that is itself an output; the offset
  cancels in the normalised distribution and keeps the largest weight at 1).
  One float32 GEMM per block on augmented vectors gives ``(eps/2)²·d²`` directly
  (``[x, |x|², 1]·(eps/2)²[-2y, 1, |y|²]``), then three in-place passes (clamp,
  sqrt, subtract) and one ``exp``. Memory is one ``(B, V)`` float32 block, never
  ``V × V``.
* :func:`sample_categorical_rows` is **the** single place where a categorical
  draw happens. Given the ``(B, V)`` weights and the number of draws per row it
  returns all draws of the block. Rows with many draws use a full float64
  cumulative sum and binary search; rows with few draws use a two-level inverse
  CDF: float32 chunk sums (``C ≈ sqrt(V)`` columns each), inflated to certified
  upper bounds, pick a chunk; the chunk's own float64 cumulative sum picks the
  column; a target that falls in the (tiny, ~1e-5 relative) slack between the
  bound and the chunk's true sum is rejected and redrawn. So every draw is
  exactly proportional to the given weights, at a cost of about one pass over
  the block plus ``O(sqrt(V))`` per draw.

Floating point (documented deviation, see issue 8): weights are float32 and the
squared distances come from a float32 GEMM (about 1e-4 relative error in a
weight); weights more than ``e^-87`` below a row's largest weight underflow to 0.
:meth:`textdp.sanitize.SanText.probabilities` computes the exact float64
distribution independently. The trust engineer's hardened samplers
(:mod:`textdp.noise`, issue 8) are meant to replace :func:`sample_categorical_rows`;
keep its signature.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ExponentialKernel", "sample_categorical_rows", "squared_norms", "DEFAULT_BLOCK_BYTES"]

#: default memory budget for one ``(B, V_out)`` float32 weight block
DEFAULT_BLOCK_BYTES = 8 * 2**20
_MAX_GATHER = 2**21  # elements gathered at once by the within-chunk search
_U32 = 2.0**-24


def squared_norms(vectors: np.ndarray) -> np.ndarray:
    """Row-wise squared Euclidean norms, float64 ``(n,)``."""
    v = np.asarray(vectors, dtype=np.float64)
    return np.einsum("ij,ij->i", v, v)


class ExponentialKernel:
    """SanText weights of input blocks against a fixed output set.

    y: ``(V, m)`` output embeddings (any float dtype); epsilon: the privacy
    parameter (weights use ``eps/2``, Yue et al. 2021 Sec. 4.2). The output set
    is centred on its mean (distances are translation invariant; centring
    reduces float32 cancellation).
    """

    def __init__(self, y: np.ndarray, epsilon: float, chunk_rows: int = 65536):
        v, m = y.shape
        c2 = (0.5 * float(epsilon)) ** 2
        total = np.zeros(m)
        for s in range(0, v, chunk_rows):  # chunked: memory stays O(chunk) beyond the result
            total += np.asarray(y[s : s + chunk_rows], dtype=np.float64).sum(axis=0)
        self.center = total / max(v, 1)
        yat = np.empty((m + 2, v), dtype=np.float32)
        for s in range(0, v, chunk_rows):
            yc = np.asarray(y[s : s + chunk_rows], dtype=np.float64) - self.center
            yat[:m, s : s + len(yc)] = (-2.0 * c2 * yc).T
            yat[m, s : s + len(yc)] = c2
            yat[m + 1, s : s + len(yc)] = c2 * squared_norms(yc)
        self._yaT = yat  # (m+2, V) float32
        self.v = v
        self.epsilon = float(epsilon)

    def weights(self, x: np.ndarray, self_cols: np.ndarray | None = None, out: np.ndarray | None = None
                ) -> np.ndarray:
        """``(B, V)`` float32 weights for input embeddings ``x`` (``(B, m)``).

        self_cols: int ``(B,)`` column of each input word in the output set, or
        -1 (then the row minimum is used as offset). ``out``: reusable buffer with
        at least ``B`` rows.
        """
        b = x.shape[0]
        xc = np.asarray(x, dtype=np.float64) - self.center
        xa = np.empty((b, xc.shape[1] + 2), dtype=np.float32)
        xa[:, :-2] = xc
        xa[:, -2] = squared_norms(xc)
        xa[:, -1] = 1.0
        if out is None or out.shape[0] < b or out.shape[1] != self.v:
            out = np.empty((b, self.v), dtype=np.float32)
        g = out[:b]
        np.matmul(xa, self._yaT, out=g)  # (eps/2)^2 * squared distances
        np.maximum(g, 0.0, out=g)
        np.sqrt(g, out=g)  # (eps/2) * d
        if self_cols is None:
            off = g.min(axis=1)
        else:
            self_cols = np.asarray(self_cols)
            off = np.where(self_cols >= 0, g[np.arange(b), np.maximum(self_cols, 0)], np.float32(0))
            need = np.flatnonzero(self_cols < 0)
            if len(need):
                off[need] = g[need].min(axis=1)
        np.subtract(off[:, None], g, out=g)
        np.exp(g, out=g)
        return g


def sample_categorical_rows(weights: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Independent draws from the categorical distributions given by weight rows.

    weights: ``(B, V)`` non-negative, finite, each row with a positive sum
    (float32 or float64; not modified). counts: ``(B,)`` int, draws per row.
    rng: the explicit Generator every uniform comes from.
    Returns int64 ``(counts.sum(),)`` column indices in ``[0, V)``: first the
    ``counts[0]`` draws of row 0, then those of row 1, and so on. Draw ``i`` of
    row ``b`` equals ``j`` with probability ``weights[b, j] / weights[b].sum()``
    (up to the 53-bit resolution of the uniforms). Method in the module docstring.
    This is the function to swap for a floating-point-hardened sampler (issue 8).
    """
    w = np.asarray(weights)
    counts = np.asarray(counts, dtype=np.int64)
    n_rows, v = w.shape
    total = int(counts.sum())
    out = np.empty(total, dtype=np.int64)
    if total == 0:
        return out
    starts_out = np.concatenate([[0], np.cumsum(counts)])
    chunk = max(16, int(math.isqrt(v)))
    n_chunks = -(-v // chunk)
    heavy = counts > max(8, n_chunks)  # full cumulative sum is cheaper than per-draw chunk searches
    for b in np.flatnonzero(heavy).tolist():
        cdf = np.cumsum(w[b], dtype=np.float64)
        if not cdf[-1] > 0:
            raise ValueError("a weight row with a positive draw count sums to zero")
        k = np.searchsorted(cdf, rng.random(int(counts[b])) * cdf[-1], side="right")
        while True:  # u·Z rounded up to Z (probability ~2^-53): redraw
            bad = np.flatnonzero(k >= v)
            if not len(bad):
                break
            k[bad] = np.searchsorted(cdf, rng.random(len(bad)) * cdf[-1], side="right")
        out[starts_out[b]:starts_out[b + 1]] = k
    light = np.flatnonzero(~heavy & (counts > 0))
    if len(light) == 0:
        return out
    starts = np.arange(0, v, chunk)
    # certified upper bounds of the chunk sums: recursive float32 summation of
    # n positive terms errs by at most (n-1)·u relative (u = 2^-24)
    sums = np.add.reduceat(w, starts, axis=1)
    sums = sums[light].astype(np.float64) if len(light) < n_rows else sums.astype(np.float64)
    sums *= 1.0 + 2.0 * (chunk + 1) * _U32
    sums[sums > 0] += 1e-300
    cum = np.cumsum(sums, axis=1)
    z = cum[:, -1]
    if not np.all(z > 0):
        raise ValueError("a weight row with a positive draw count sums to zero")
    cl = counts[light]
    rows = np.repeat(np.arange(len(light)), cl)  # index into wl
    first = np.concatenate([[0], np.cumsum(cl)[:-1]])
    dest = np.repeat(starts_out[light] - first, cl) + np.arange(len(rows))
    offs = np.arange(chunk)
    pending = np.arange(len(rows))
    step = max(1, _MAX_GATHER // max(n_chunks, chunk))
    while len(pending):
        rejected = []
        for s in range(0, len(pending), step):
            p = pending[s : s + step]
            r = rows[p]
            target = rng.random(len(r)) * z[r]
            cr = cum[r]
            c = np.minimum(np.count_nonzero(cr <= target[:, None], axis=1), n_chunks - 1)
            before = np.where(c > 0, cr[np.arange(len(r)), np.maximum(c - 1, 0)], 0.0)
            resid = target - before
            cols = starts[c][:, None] + offs[None, :]
            valid = cols < v
            np.minimum(cols, v - 1, out=cols)
            seg = w[light[r][:, None], cols].astype(np.float64)
            seg[~valid] = 0.0
            np.cumsum(seg, axis=1, out=seg)
            k = np.count_nonzero(seg <= resid[:, None], axis=1)
            ok = k < chunk
            ok[ok] = valid[np.flatnonzero(ok), k[ok]]
            # k == chunk or a padding column: the target fell in the bound's slack
            out[dest[p[ok]]] = starts[c[ok]] + k[ok]
            rejected.append(p[~ok])
        pending = np.concatenate(rejected) if rejected else np.zeros(0, dtype=np.int64)
    return out
