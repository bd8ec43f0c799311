"""numba kernels of the secure SanText sampler (optional accelerator).

Imported by :mod:`textdp.sanitize.sampling`; when numba is missing,
``AVAILABLE`` is False and the sampler falls back to the numpy path
(:class:`textdp.noise.ExactCategorical`), which realises the same law.

What the kernels compute, per row ``i`` of a block (``g[i, j] = (eps/2)^2 d~^2``
from the float64 GEMM, ``s_j = sqrt(max(g_ij, 0))`` the scaled distance):

    w_j = exp(off_i - s_j)                 off_i = s at the row's own column, or min_j s_j
    c_j = rint(w_j * (1 - eta) 2^62 / sum(w) + eta 2^62 / V)       (int64)

i.e. exactly the integer construction of
:func:`textdp.noise.categorical_from_log_weights` (uniform share ``eta``,
integer weights summing to about 2^62) on log-weights ``-s``; ``c`` is stored in
place (reusing the float64 buffer as int64) with cumulative sums per chunk of
``CHUNK`` columns, and a draw -- an exact uniform integer ``u`` in ``[0, C)`` --
is located by a binary search on the chunk sums and a scan of one chunk.

``exp`` is evaluated by Cody-Waite range reduction and a degree-7 Taylor
polynomial on ``|r| <= ln2/2`` (remainder < 7.5e-9; with rounding the relative
error is < 1e-8, :data:`EXP_RELATIVE_ERROR`), which LLVM vectorises; arguments below -700 are clamped to -700
(a weight of 1e-304 instead of less: far below the uniform floor eta/V, and
inside the float slack accounted in :func:`textdp.sanitize.sampling.float_slack`).
"""

from __future__ import annotations

import numpy as np

try:  # numba is in the `topics` extra, installed by `make setup`
    from numba import njit

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised by the numpy-fallback test via monkeypatch
    AVAILABLE = False

from textdp.sanitize.sampling import EXP_RELATIVE_ERROR  # noqa: E402,F401  (the bound of _exp, accounted there)

_INV_LN2 = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm: k * LN2_HI exact for |k| < 2**11
_LN2_LO = 1.90821492927058770002e-10
_FM = {"nsz", "contract", "reassoc", "arcp"}  # no nnan/ninf: NaN must not be assumed away

#: columns per chunk of the integer layout (chunk sums pick a chunk, a scan picks the column)
CHUNK = 128

if AVAILABLE:
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def _f2i(typingctx, x):
        """Bit pattern of a float64 as int64 (an LLVM bitcast: free and vectorisable)."""

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], context.get_value_type(types.int64))

        return types.int64(types.float64), codegen

    @intrinsic
    def _i2f(typingctx, x):
        """The float64 whose bit pattern is the int64 (LLVM bitcast)."""

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], context.get_value_type(types.float64))

        return types.float64(types.int64), codegen

    _T52 = 4503599627370496.0  # 2^52
    _B52 = np.int64(0x4330000000000000)  # bits of 2^52
    _M52 = np.int64((1 << 52) - 1)
    _MAGIC = 6755399441055744.0  # 1.5 * 2^52

    @njit(inline="always", fastmath=_FM, cache=True)
    def _exp(t):
        """exp(t) for t <= ~0 (clamped to t >= -700), relative error < 1e-8 (vectorisable)."""
        t = max(t, -700.0)
        k = np.rint(t * _INV_LN2)
        r = (t - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (
            1.0 / 720 + r * (1.0 / 5040)))))))
        # 2^k: k + 1.5*2^52 holds k in its low mantissa bits; shifting them into the exponent
        return p * _i2f((_f2i(k + _MAGIC) << 52) + (np.int64(1023) << 52))

    @njit(inline="always", fastmath=_FM, cache=True)
    def _rint_i64(y):
        """``int64(rint(y))`` for ``0 <= y < 2^63`` with vectorisable integer ops (AVX2
        has no packed float64 -> int64 conversion): below 2^52, ``y + 2^52`` rounds
        ``y`` to an integer held in the mantissa; from 2^52 on, ``y`` is an integer and
        its mantissa is shifted by the exponent."""
        small = _f2i(y + _T52) - _B52
        bits = _f2i(y)
        big = ((bits & _M52) | (_M52 + 1)) << max((bits >> 52) - 1075, 0)
        return small if y < _T52 else big

    @njit(nogil=True, fastmath=_FM, cache=True)
    def integer_weights_rows(g, self_cols, eta, csum):
        """In place: float64 ``g`` ``(B, V)`` (scaled squared distances) -> int64
        integer weights ``c`` (returned: the int64 view of the same memory).
        ``self_cols`` int64 ``(B,)``: column of the row's own word (its ``g`` must be
        0), or -1 (then the row minimum is the offset). ``csum`` int64
        ``(B, ceil(V / CHUNK))`` receives the cumulative chunk sums (last = total)."""
        b, v = g.shape
        gi = g.view(np.int64)
        nch = csum.shape[1]
        base = eta * 4611686018427387904.0 / v  # eta 2^62 / V
        for i in range(b):
            row = g[i]
            c = self_cols[i]
            if c >= 0:
                m = row[c]
            else:  # sqrt is monotone: the offset is sqrt(min g)
                m = row[0]
                for j in range(1, v):
                    m = min(m, row[j])
            off = np.sqrt(max(m, 0.0))
            tot = 0.0
            for j in range(v):
                w = _exp(off - np.sqrt(max(row[j], 0.0)))
                row[j] = w
                tot += w
            scale = (1.0 - eta) * 4611686018427387904.0 / tot
            irow = gi[i]
            acc = np.int64(0)
            nfull = v // CHUNK
            for k in range(nfull):  # fixed-length inner loops vectorise (a variable bound did not)
                s = np.int64(0)
                b0 = k * CHUNK
                for j in range(CHUNK):
                    cj = _rint_i64(row[b0 + j] * scale + base)
                    irow[b0 + j] = cj
                    s += cj
                acc += s
                csum[i, k] = acc
            if nfull < nch:
                s = np.int64(0)
                for j in range(nfull * CHUNK, v):
                    cj = _rint_i64(row[j] * scale + base)
                    irow[j] = cj
                    s += cj
                acc += s
                csum[i, nfull] = acc
        return gi

    @njit(inline="always", cache=True)
    def _first_chunk(cs, target):
        """The chunk holding ``target`` (first whose cumulative sum ``cs`` exceeds it) and the
        cumulative sum before it: the binary search both integer searches share."""
        lo = 0
        hi = cs.shape[0] - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if cs[mid] > target:
                hi = mid
            else:
                lo = mid + 1
        return lo, (cs[lo - 1] if lo > 0 else np.int64(0))

    @njit(nogil=True, cache=True)
    def search_rows(c, csum, rows, u, out):
        """``out[k]`` = smallest ``j`` with ``c[rows[k], 0] + ... + c[rows[k], j] > u[k]``
        (exact integer search: binary search on the chunk sums, then a scan)."""
        v = c.shape[1]
        for k in range(rows.shape[0]):
            r = rows[k]
            target = np.int64(u[k])
            lo, acc = _first_chunk(csum[r], target)
            row = c[r]
            j = lo * CHUNK
            end = min(v, j + CHUNK) - 1
            while j < end:
                acc += row[j]
                if acc > target:
                    break
                j += 1
            out[k] = j
        return out


# ---------------------------------------------------------------------------------------------- fused kernel
#: a row whose weights exp(-s_j) all lie below e^-FAR (every output word at scaled distance > FAR)
#: is recomputed with its own minimum as offset (the offset-0 weights would lose precision near the clamp)
FAR = 512.0
_TINY = float(np.exp(-FAR))

if AVAILABLE:

    def _host_has_avx512dq() -> bool:
        try:
            import llvmlite.binding as llvm

            return "+avx512dq" in llvm.get_host_cpu_features().flatten().split(",")
        except Exception:  # pragma: no cover - feature query unavailable: the portable form
            return False

    if _host_has_avx512dq():  # packed float64 -> int64 conversion exists: LLVM vectorises rint + cast

        @njit(inline="always", cache=True)
        def _iweight(w, scale, base):
            """The integer weight ``rint(w * scale + base)`` in strict IEEE arithmetic (no fast-math
            flags: the search recomputes it and must get the same bits as the chunk sums)."""
            return np.int64(np.rint(w * scale + base))

    else:  # AVX2 and older: the same value with vectorisable integer operations (see _rint_i64)

        @njit(inline="always", cache=True)
        def _iweight(w, scale, base):
            """The integer weight ``rint(w * scale + base)`` in strict IEEE arithmetic (no fast-math
            flags: the search recomputes it and must get the same bits as the chunk sums)."""
            y = w * scale + base
            small = _f2i(y + _T52) - _B52
            bits = _f2i(y)
            big = ((bits & _M52) | (_M52 + 1)) << max((bits >> 52) - 1075, 0)
            return small if y < _T52 else big

    @njit(nogil=True, fastmath=_FM, cache=True)
    def _tile_weights(gt, w, j0, width, self_cols, tot, cap2):
        """Weights ``exp(-sqrt(min(max(g, 0), cap2)))`` of one GEMM tile (columns ``j0 .. j0+width`` of
        the block) into ``w``, row sums accumulated in ``tot``; the row's own column gets g = 0. ``cap2``:
        the clip of the scaled squared distance (``inf``: none; TEM's truncation, :mod:`textdp.sanitize.tem`)."""
        r = gt.shape[0]
        for i in range(r):
            c = self_cols[i] - j0
            if c >= 0 and c < width:
                gt[i, c] = 0.0
            gi = gt[i]
            wi = w[i]
            acc = 0.0
            for j in range(width):
                x = _exp(-np.sqrt(min(max(gi[j], 0.0), cap2)))
                wi[j0 + j] = x
                acc += x
            tot[i] += acc

    @njit(nogil=True, fastmath=_FM, cache=True)
    def _far_row(xa_row, tiles, v, self_col, w_row, gt_row, cap2):
        """Slow path of a row whose weights all lie below e^-FAR: recompute its distances and
        use ``exp(min_s - s_j)`` (the row's largest weight is then 1). Returns the row sum."""
        nt, _, t = tiles.shape
        m = np.inf
        for k in range(nt):
            width = min(t, v - k * t)
            np.dot(xa_row, tiles[k], gt_row)
            for j in range(width):
                s = np.sqrt(min(max(gt_row[0, j], 0.0), cap2))
                if k * t + j == self_col:
                    s = 0.0
                w_row[k * t + j] = s
                if s < m:
                    m = s
        acc = 0.0
        for j in range(v):
            x = _exp(m - w_row[j])
            w_row[j] = x
            acc += x
        return acc

    @njit(nogil=True, cache=True)
    def _chunk_sums(w, v, tot, eta, scale, csum):
        """Exact cumulative chunk sums of the integer weights ``rint(w_j (1-eta) 2^62 / tot +
        eta 2^62 / V)`` of each row (the weights are not stored: the search recomputes them)."""
        b = csum.shape[0]
        nch = csum.shape[1]
        base = eta * 4611686018427387904.0 / v
        nfull = v // CHUNK
        for i in range(b):
            row = w[i]
            sc = (1.0 - eta) * 4611686018427387904.0 / tot[i]
            scale[i] = sc
            acc = np.int64(0)
            for k in range(nfull):
                s = np.int64(0)
                b0 = k * CHUNK
                for j in range(CHUNK):
                    s += _iweight(row[b0 + j], sc, base)
                acc += s
                csum[i, k] = acc
            if nfull < nch:
                s = np.int64(0)
                for j in range(nfull * CHUNK, v):
                    s += _iweight(row[j], sc, base)
                acc += s
                csum[i, nfull] = acc
        return base

    @njit(nogil=True, cache=True)
    def fused_block(xa, tiles, v, self_cols, eta, gt, w, tot, scale, csum, cap2):
        """One block of the fused sampler: for every tile of ``TILE`` output columns, the distance
        GEMM ``xa . tiles[t]`` (BLAS) into the cache-resident ``gt`` and the weights of that tile at once;
        then the exact integer chunk sums. Shapes: ``xa`` float64 ``(n, m+2)`` (augmented centred
        inputs), ``tiles`` float64 ``(nt, m+2, TILE)`` (augmented scaled outputs, zero-padded),
        ``self_cols`` int64 ``(n,)`` (the row's own column or -1), buffers ``gt`` ``(>=n, TILE)``
        (C-contiguous, exactly TILE columns),
        ``w`` ``(>=n, >=V)``, ``tot``/``scale`` ``(>=n,)``, ``csum`` int64 ``(n, ceil(V/CHUNK))``.
        ``cap2``: clip of the scaled squared distances (``inf``: none; TEM).
        Returns ``base`` (the uniform share's integer weight ``eta 2^62 / V``)."""
        n = xa.shape[0]
        nt, _, t = tiles.shape
        g = gt[:n]
        for i in range(n):
            tot[i] = 0.0
        for k in range(nt):
            width = min(t, v - k * t)
            np.dot(xa, tiles[k], g)
            _tile_weights(g, w, k * t, width, self_cols, tot, cap2)
        for i in range(n):
            if tot[i] < _TINY:
                tot[i] = _far_row(xa[i:i + 1], tiles, v, self_cols[i], w[i], gt[:1], cap2)
        return _chunk_sums(w, v, tot, eta, scale, csum)

    @njit(nogil=True, cache=True)
    def fused_search(w, v, csum, scale, base, rows, u, out):
        """``out[k]`` = smallest ``j`` whose cumulative integer weight in row ``rows[k]`` exceeds
        ``u[k]``: binary search on the chunk sums, then the chunk's weights recomputed
        (:func:`_iweight`, bit-identical to the chunk sums)."""
        for k in range(rows.shape[0]):
            r = rows[k]
            target = np.int64(u[k])
            lo, acc = _first_chunk(csum[r], target)
            row = w[r]
            sc = scale[r]
            j = lo * CHUNK
            end = min(v, j + CHUNK) - 1
            while j < end:
                acc += _iweight(row[j], sc, base)
                if acc > target:
                    break
                j += 1
            out[k] = j
        return out

    @njit(nogil=True, cache=True)
    def fused_integer_weights(w, v, scale, base, out):
        """All integer weights of the fused kernel's rows (for tests and cards): int64 ``out``
        ``(n, V)``, bit-identical to what :func:`_chunk_sums` sums and :func:`fused_search` scans."""
        for i in range(out.shape[0]):
            for j in range(v):
                out[i, j] = _iweight(w[i, j], scale[i], base)
        return out
