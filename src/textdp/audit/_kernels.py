"""numba kernels of the audit's per-record statistics (imported lazily by :mod:`textdp.audit.core`).

One pass over a block of privatized records ``y`` (``(m, n)`` float64, C order) adds each
record's statistic to a histogram and counts NaN values (which the audit refuses), with no
temporary arrays:

* ``bits``: the number of coordinates ``>= 0.5`` (0 … n), the majority vote's input;
* ``clipped-mean``: ``mean(clip(y, 0, 1))`` in ``bins`` equal bins of ``[0, 1]`` (bin
  ``min(floor(t·bins), bins − 1)``), the coordinates summed left to right (numpy's mean sums
  pairwise, so the two can put a record one bin apart when ``t·bins`` is within rounding of an
  integer).

The numpy twin used for short audits is :func:`textdp.audit.core._histograms`.
"""

from __future__ import annotations

from numba import njit

__all__ = ["bit_histogram", "bit_and_clipped_histograms"]


@njit(cache=True, nogil=True)
def bit_histogram(y, hist):
    """Add the bit count of every row of ``y`` (m, n) to ``hist`` (n + 1,) int64; return the
    number of NaN values in ``y``."""
    m, n = y.shape
    nan = 0
    if n == 1:  # one coordinate per record: count the flat array without a row loop
        ones = 0
        for r in range(m):
            v = y[r, 0]
            ones += v >= 0.5
            nan += v != v
        hist[1] += ones
        hist[0] += m - ones
        return nan
    for r in range(m):
        c = 0
        for j in range(n):
            v = y[r, j]
            c += v >= 0.5  # branch-free: the bits are coin flips, a branch would be mispredicted
            nan += v != v
        hist[c] += 1
    return nan


@njit(cache=True, nogil=True)
def bit_and_clipped_histograms(y, hist, clip_hist):
    """:func:`bit_histogram` and the clipped-mean histogram ``clip_hist`` (bins,) int64 in the
    same pass; returns the number of NaN values."""
    m, n = y.shape
    bins = clip_hist.size
    nan = 0
    for r in range(m):
        c = 0
        s = 0.0
        for j in range(n):
            v = y[r, j]
            c += v >= 0.5
            nan += v != v
            s += min(max(v, 0.0), 1.0) if v == v else 0.0
        hist[c] += 1
        if nan == 0:
            k = int((s / n) * bins)
            clip_hist[min(k, bins - 1)] += 1
    return nan
