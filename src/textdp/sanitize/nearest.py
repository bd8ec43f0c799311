"""Exact nearest-word search of the embedding-perturbation mechanisms (:mod:`textdp.sanitize.perturbation`).

:class:`NearestSearch` returns, for each noisy point ``q``, the output word(s) of largest score
``s_j = q·y_j - ||y_j||^2/2`` (the nearest words: ``||q - y_j||^2 = ||q||^2 - 2 s_j``), with ``s_j`` computed
in float64 in one fixed order (:func:`textdp.sanitize._nearest_kernels.exact_score`) and ties to the lowest
column. A low-precision GEMM prefilter with a proven error bound (below) decides which columns need the
exact score; the result does not depend on the prefilter, the tiling, the block or the thread, so it is
the same with or without torch, for any ``workers``.

Prefilters (:data:`PREFILTERS`): ``"torch"``, a bfloat16 GEMM (torch's oneDNN kernels: AMX or
AVX-512 BF16 where the CPU has them) with bfloat16 output; ``"numpy"``, a float32 GEMM (BLAS); ``"auto"``
(default): ``$TEXTDP_NEAREST_PREFILTER`` if set, else torch when it is installed and the job is large
enough to repay its import (:func:`resolve_prefilter`).

Error bound. The prefilter's score ``a_j`` of column ``j`` for ``q`` (dimension ``m``) is the GEMM of
``[q, 1, 1]`` with ``[y_j, -hi_j, -lo_j]`` (torch: ``h_j = ||y_j||^2/2`` split into two bfloat16 parts) or
``[q, 1]`` with ``[y_j, -h_j]`` (numpy), ``K`` terms. With ``e`` the relative error of one input rounding
(float64 to float32 to bfloat16: ``(1 + 2^-24)(1 + 2^-8) - 1``; numpy ``2^-24``), ``gamma_n(u) = n u / (1 -
n u)`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Sec. 3.1), ``P = ||q|| Y``
(``Y`` the largest ``||y_j||`` of the tile, so ``sum_t |q_t y_jt| <= P``), ``H`` the largest ``h_j`` and
``S = (1 + e)^2 P + 1.01 H`` the sum of the absolute terms:

* input rounding: ``((1 + e)^2 - 1) P`` for the products (a product of two bfloat16 or float32 values is
  exact in the float32 accumulator) plus ``e_h = max_j |h_j - hi_j - lo_j|`` (numpy ``|h_j - fl32(h_j)|``),
  measured exactly when the table is built;
* float32 accumulation of the ``K`` terms in any order or tree: ``gamma_K(2^-24) S``;
* output rounding (torch's bfloat16 output): ``2^-7 (1 + gamma_K(2^-24)) S`` (one rounding, by nearest or
  toward zero; numpy: none);
* the float64 exact score itself: ``gamma_{m+1}(2^-53) (P + H)``;
* subnormals flushed to zero (AMX does): ``4 K 2^-126 (1 + Y + ||q||)`` absolute;

all times 1.1 (the float64 evaluation of the bound). A column whose ``a_j`` is below the current ``k``-th
best exact score minus the bound is strictly worse and is skipped (:func:`textdp.sanitize._nearest_kernels.
scan_tile_bf16`). The torch bound assumes what oneDNN documents for its bfloat16 matmul: float32
accumulation and one rounding of the result to bfloat16. A query with ``||q|| Y + H >= 1e30`` (or any
query of a table with entries that large) is scored exactly on every column (no float32 overflow).

For GloVe 6B 50d at eps = 3 (``||q|| ~ 17``) the bound is about 1-3 (torch) and the search scores ~10-30
columns exactly per query instead of 30,000.
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np

from textdp.errors import ParameterError

#: the prefilters of the search (the result does not depend on the choice)
PREFILTERS = ("auto", "torch", "numpy")
#: environment variable that forces a prefilter where the mechanism's is "auto"
PREFILTER_ENV = "TEXTDP_NEAREST_PREFILTER"
#: queries per GEMM block (columns of a tile)
SEARCH_ROWS = 256
#: words per tile (rows): 2048 x 256 bfloat16 = 1 MiB (torch), 1024 x 256 float32 = 1 MiB (numpy)
TILE_WORDS = {"torch": 2048, "numpy": 1024}
#: "auto" imports torch for jobs of at least this many noisy points (about 1 s of search with numpy)
AUTO_TORCH_QUERIES = 20000
#: beyond this (|q| Y + H), float32 could overflow: the query is scored exactly on every column
_FLOAT32_SAFE = 1e30


def _torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def resolve_prefilter(choice: str = "auto", queries: int | None = None) -> str:
    """``"torch"`` or ``"numpy"`` for ``choice`` in :data:`PREFILTERS`; ParameterError otherwise, or for
    torch without torch. ``"auto"``: ``$TEXTDP_NEAREST_PREFILTER`` if set; else torch when it is already
    imported, or installed and the job has at least :data:`AUTO_TORCH_QUERIES` ``queries`` (unknown: yes);
    else numpy (importing torch costs about 2 s of CPU, more than a short job's whole search)."""
    if choice == "auto":
        choice = os.environ.get(PREFILTER_ENV, "") or "auto"
        if choice == "auto":
            import sys

            if "torch" in sys.modules:
                return "torch"
            big = queries is None or queries >= AUTO_TORCH_QUERIES
            return "torch" if big and _torch_available() else "numpy"
    if choice not in PREFILTERS:
        raise ParameterError(f"the nearest-word prefilter must be one of {', '.join(PREFILTERS)}, got {choice!r}")
    if choice == "torch" and not _torch_available():
        raise ParameterError("the torch prefilter needs torch (pip install 'textdp[nlp]')")
    return choice


def _gamma(n: int, u: float) -> float:
    return n * u / (1.0 - n * u)


def half_squared_norms(y) -> np.ndarray:
    """``h_j = ||y_j||^2 / 2`` in float64, summed in :func:`textdp.sanitize._nearest_kernels.exact_score`'s
    order (one fixed order), ``(V,)`` for ``y`` float ``(V, m)``."""
    from textdp.sanitize import _nearest_kernels as kn

    y = np.asarray(y)
    if y.dtype not in (np.float32, np.float64):
        y = y.astype(np.float64)
    out = np.empty(len(y), dtype=np.float64)
    kn.half_squared_norms(np.ascontiguousarray(y), out)
    return out


class NearestSearch:
    """Exact nearest (``k = 1``) or two nearest (``k = 2``) rows of ``y`` (float ``(V, m)``) for noisy
    points ``q`` (float ``(n, m)``): largest float64 score ``s_j = q·y_j - h_j`` (module docstring), ties
    to the lowest row; ``prefilter`` in :data:`PREFILTERS` changes the speed only.

    Call: ``search(q, k)`` -> int64 columns and float64 scores, ``(n, k)`` each (column -1, score -inf
    where ``V < k``). Thread-safe (each call has its own buffers): run it on worker threads inside
    :meth:`single_threaded`."""

    def __init__(self, y, prefilter: str = "auto"):
        self.prefilter = resolve_prefilter(prefilter)
        self._local = threading.local()
        y64 = np.ascontiguousarray(y, dtype=np.float64)
        v, m = y64.shape
        self.dim = m
        # the exact scores read float32 values where the table holds float32 values (the same numbers: the
        # same scores, half the memory traffic)
        y32 = y64.astype(np.float32)
        self.y = y32 if np.array_equal(y32.astype(np.float64), y64) else y64
        self.h = half_squared_norms(self.y)
        norms = np.sqrt(2.0 * self.h)
        finite = bool(np.isfinite(y64).all())
        big = not (float(np.abs(y64).max(initial=0.0)) < 1e15 and float(self.h.max(initial=0.0)) < 1e29)
        self.exact_only = bool(v == 0 or big or not finite)
        # words by decreasing norm (ties by column): tiles of similar norms (tighter bounds) and the likely
        # winners first; cols maps the permuted rows back to columns
        self.cols = np.lexsort((np.arange(v), -norms)).astype(np.int64)
        self.yp = np.ascontiguousarray(self.y[self.cols])
        self.hp = np.ascontiguousarray(self.h[self.cols])
        self.tiles = []
        if self.exact_only:
            return
        tw = TILE_WORDS[self.prefilter]
        if self.prefilter == "torch":
            import torch

            self.k_terms = m + 2 + (m % 2)
            hi = torch.from_numpy(self.hp.astype(np.float32)).to(torch.bfloat16)
            rest = self.hp - hi.to(torch.float64).numpy()  # exact (Sterbenz)
            lo = torch.from_numpy(rest.astype(np.float32)).to(torch.bfloat16)
            e_h = np.abs(rest - lo.to(torch.float64).numpy())
            w = torch.zeros((v, self.k_terms), dtype=torch.bfloat16)
            w[:, :m] = torch.from_numpy(self.yp.astype(np.float32)).to(torch.bfloat16)
            w[:, m] = -hi
            w[:, m + 1] = -lo
            self.e_in = (1.0 + 2.0 ** -24) * (1.0 + 2.0 ** -8) - 1.0
            self.c_out = 2.0 ** -8 / (1.0 - 2.0 ** -8)
            mats = [w[s:s + tw].contiguous() for s in range(0, v, tw)]
        else:
            self.k_terms = m + 1
            h32 = self.hp.astype(np.float32)
            e_h = np.abs(self.hp - h32.astype(np.float64))
            w = np.zeros((v, self.k_terms), dtype=np.float32)
            w[:, :m] = self.yp
            w[:, m] = -h32
            self.e_in = 2.0 ** -24
            self.c_out = 0.0
            mats = [np.ascontiguousarray(w[s:s + tw]) for s in range(0, v, tw)]
        normp = norms[self.cols]
        for i, s in enumerate(range(0, v, tw)):
            self.tiles.append((s, mats[i]))
        starts = np.arange(0, v, tw)
        self._tile_y = np.maximum.reduceat(normp, starts)
        self._tile_h = np.maximum.reduceat(self.hp, starts)
        self._tile_eh = np.maximum.reduceat(e_h, starts)

    def __getstate__(self) -> dict:  # the per-thread buffers stay behind (a copy makes its own)
        state = self.__dict__.copy()
        state.pop("_local", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def bounds(self, qn: np.ndarray) -> np.ndarray:
        """``B0`` of every tile for queries of norms ``qn`` (module docstring, without the output rounding,
        which is the relative ``c_out``): float64 ``(tiles, n)``."""
        e, k = self.e_in, self.k_terms
        gk = _gamma(k, 2.0 ** -24)
        ymax, hmax, e_h = self._tile_y[:, None], self._tile_h[:, None], self._tile_eh[:, None]
        p = qn[None, :] * ymax
        s = (1.0 + e) ** 2 * p + 1.01 * hmax
        b = ((1.0 + e) ** 2 - 1.0) * p + e_h + gk * s + _gamma(self.dim + 1, 2.0 ** -53) * (p + hmax)
        return 1.1 * b + 4.0 * k * 2.0 ** -126 * (1.0 + ymax + qn[None, :])

    @contextlib.contextmanager
    def single_threaded(self):
        """torch's intra-op pool limited to one thread meanwhile (worker threads parallelise; restored after).
        Each call on a worker thread also sets its own OpenMP thread count to 1 (that count is per thread)."""
        if self.prefilter != "torch" or self.exact_only:
            yield
            return
        import torch

        old = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(old)

    def __call__(self, q, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
        from textdp.sanitize import _nearest_kernels as kn

        q = np.ascontiguousarray(q, dtype=np.float64)
        n, m = q.shape
        if m != self.dim:
            raise ParameterError(f"query dimension {m} != table dimension {self.dim}")
        bs = np.full((n, k), -np.inf)
        bj = np.full((n, k), -1, dtype=np.int64)
        v = len(self.y)
        if n == 0 or v == 0:
            return bj, bs
        qn = np.sqrt(np.einsum("ij,ij->i", q, q))  # for the bound only (its 1.1 factor covers this rounding)
        if self.exact_only or v < k:
            slow = np.ones(n, dtype=bool)
        else:
            slow = ~(qn * float(self._tile_y.max()) + float(self._tile_h.max()) < _FLOAT32_SAFE)
        if not slow.all():
            for s0 in range(0, n, SEARCH_ROWS):
                e = min(n, s0 + SEARCH_ROWS)
                self._scan_block(q[s0:e], qn[s0:e], k, bs[s0:e], bj[s0:e], slow[s0:e], kn)
        if slow.any():
            kn.exact_all(q, np.flatnonzero(slow).astype(np.int64), self.y, self.h, k, bs, bj)
        return bj, bs

    def _buffers(self, kn):
        """This thread's work arrays (the tile of prefilter scores and the scan's), made once per thread."""
        local = self._local.__dict__
        if "buf" not in local:
            tw = TILE_WORDS[self.prefilter]
            if self.prefilter == "torch":
                import torch

                buf = torch.empty((tw, SEARCH_ROWS), dtype=torch.bfloat16)
                dt = np.int16
                outs = [(buf[:mat.shape[0]], buf[:mat.shape[0]].view(torch.int16).numpy()) for _, mat in self.tiles]
            else:
                buf = np.empty((tw, SEARCH_ROWS), dtype=np.float32)
                dt = np.float32
                outs = [(buf[:mat.shape[0]], buf[:mat.shape[0]]) for _, mat in self.tiles]
            local["buf"] = buf
            local["outs"] = outs
            local["work"] = (np.empty((-(-tw // kn.CHUNK), SEARCH_ROWS), dtype=dt),
                             *(np.empty(SEARCH_ROWS, dtype=dt) for _ in range(3)))
        return local["outs"], local["work"]

    def _scan_block(self, q, qn, k, bs, bj, slow, kn) -> None:
        n, m = q.shape
        qa = np.zeros((SEARCH_ROWS, self.k_terms), dtype=np.float32)
        qa[:n, :m] = q
        qa[:n, :m][slow] = 0.0
        qa[:, m:m + (2 if self.prefilter == "torch" else 1)] = 1.0  # the -h_j terms
        b0 = self.bounds(qn)
        outs, (cm, m1, m2, thr) = self._buffers(kn)
        if self.prefilter == "torch":
            import torch

            if torch.get_num_threads() != 1:  # OpenMP's thread count is per thread: a worker starts with all cores
                torch.set_num_threads(1)
            xt = torch.from_numpy(np.ascontiguousarray(qa.T)).to(torch.bfloat16)
            for t, (s0, mat) in enumerate(self.tiles):
                out, g = outs[t]
                torch.mm(mat, xt, out=out)
                kn.scan_tile_bf16(g, s0, n, q, self.yp, self.hp, self.cols, b0[t], self.c_out, k, bs, bj, slow,
                                  cm, m1, m2, thr)
        else:
            xt = np.ascontiguousarray(qa.T)
            for t, (s0, mat) in enumerate(self.tiles):
                out, g = outs[t]
                np.matmul(mat, xt, out=out)
                kn.scan_tile_f32(g, s0, n, q, self.yp, self.hp, self.cols, b0[t], self.c_out, k, bs, bj, slow,
                                 cm, m1, m2, thr)
