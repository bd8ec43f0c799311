"""Float-safe, blocked, vectorised sampling for SanText and SanText+.

Three pieces:

* :class:`DistanceKernel` turns a block of ``B`` input embeddings into
  ``g = (eps/2)^2 d~^2``, a ``(B, V)`` float64 block of scaled squared Euclidean
  distances to the ``V`` output words: one float64 GEMM on augmented centred
  vectors (``[x, |x|^2, 1] . (eps/2)^2 [-2y, 1, |y|^2]``). Memory: one block,
  never ``V x V``.
* :func:`sample_block` draws from the exponential mechanism of each row,
  ``p(y_j | x) ∝ exp(-s_j)`` with ``s_j = sqrt(g_j) = (eps/2) d(x, y_j)``,
  through the **float-safe integer construction of** :mod:`textdp.noise`
  (:func:`textdp.noise.categorical_from_log_weights`): the law is mixed with a
  uniform share ``eta`` (default ``2**-20``), turned into integer weights
  ``c_j = rint(2^62 ((1-eta) p_j + eta/V))`` and sampled with one exact uniform
  integer in ``[0, sum c)`` and an integer binary search. No outcome ever has
  probability 0 (each has at least about ``eta/V``), so the support does not
  depend on the input -- the flaw of a float softmax + cumulative sum, where
  weights below ``2**-53`` (or ``e^-87`` in float32) of the total vanish.
  The numba kernels (:mod:`textdp.sanitize._kernels`) compute the same
  construction fused per row (exp, normalise, integer rounding, cumulative sum,
  in place); without numba, or for small jobs (numba's start-up costs ~1 s),
  :class:`textdp.noise.ExactCategorical` does it in numpy. Both consume the
  generator identically (:func:`uniform_below`), so a seeded run gives the same
  draws either way (except with probability ~1e-9 per draw, where the two
  backends' integer weights, which agree to a relative ~1e-8, differ exactly
  under the uniform).
* :func:`block_probabilities` returns the law actually sampled (``c / sum c``,
  float64) for the same rows, for tests, attacks and cards.
* :func:`fused_sample` is what the mechanisms run when numba is present: the
  same integer construction, fused and cache-resident. Per block of at most 64
  input words, the GEMM runs tile by tile (``TILE`` = 1024 output words, a
  ``(64, 1024)`` float64 tile = 512 KiB stays in L2) and each tile is turned into
  weights ``exp(-s)`` at once; the exact integer chunk sums follow in one read of
  the weights; a draw recomputes only its chunk's integer weights (bit-identical,
  strict IEEE arithmetic). Its law is :func:`fused_probabilities`; it differs from
  :func:`block_probabilities` only by the float rounding of the weights (a
  relative ~1e-8: rows without their own word use offset 0 instead of their
  minimum), so seeded runs draw the same words on either path, and for every
  block size and number of workers, except at exact float ties (probability
  ~1e-9 per draw).

Accounting (:func:`sampling_epsilon0`): the realised law differs from the ideal
``exp(-eps d/2)/Z`` by (i) the uniform mix, which cannot raise the privacy
loss (mediant inequality; see :func:`textdp.noise.categorical_discretisation_epsilon`),
(ii) the integer rounding, bounded by that function, (iii) the float64 GEMM
error in ``d`` and (iv) the float error of ``exp`` and of the row sum. Items
(ii)-(iv) make the guarantee ``p(y|x) <= exp(eps d(x,x') + epsilon0) p(y|x')``
with ``epsilon0`` about ``1e-5 * eps`` for GloVe 6B 50d; the mechanisms put it in
``guarantee.epsilon0`` and the privacy card.
"""

from __future__ import annotations

import math
import os
import weakref

import numpy as np

from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA, ExactCategorical, categorical_discretisation_epsilon

__all__ = [
    "DistanceKernel", "FusedWorkspace", "fused_sample", "fused_probabilities", "TILE", "DEFAULT_FUSED_BLOCK_BYTES", "sample_block", "block_probabilities", "sampling_epsilon0", "table_geometry", "uniform_below",
    "squared_norms", "numba_available", "warm_up", "DEFAULT_BLOCK_BYTES", "DEFAULT_ETA", "BACKEND_ENV",
]

#: default memory budget for one ``(B, V_out)`` float64 block (at least 16 rows are used)
DEFAULT_BLOCK_BYTES = 32 * 2**20
#: default memory budget of one block of the fused kernel's weights (it takes at most 64 rows, so this
#: matters only for output vocabularies above 65,536 words: 64 rows of the full 400k GloVe = 195 MiB)
DEFAULT_FUSED_BLOCK_BYTES = 256 * 2**20
MIN_BLOCK_ROWS = 16
#: environment variable selecting the sampler backend: auto (default) | numba | numpy
BACKEND_ENV = "TEXTDP_SANITIZE_BACKEND"
#: below this many weights (distinct words x output words) ``auto`` uses numpy (numba's start-up is ~1 s)
AUTO_NUMBA_MIN_WEIGHTS = 1 << 23
_U = 2.0**-53  # unit roundoff of float64
_CLAMP = 700.0  # exp arguments are clamped to >= -700 (numba kernel)
#: relative error bound of the numba kernel's exp (degree-7 Taylor remainder 7.5e-9 + rounding)
EXP_RELATIVE_ERROR = 1e-8

_kernels = None


def squared_norms(vectors: np.ndarray) -> np.ndarray:
    """Row-wise squared Euclidean norms, float64 ``(n,)``."""
    v = np.asarray(vectors, dtype=np.float64)
    return np.einsum("ij,ij->i", v, v)


def numba_available() -> bool:
    """Whether the numba kernels can be used (imports numba on first call)."""
    global _kernels
    if _kernels is None:
        from textdp.sanitize import _kernels as k

        _kernels = k
    return bool(_kernels.AVAILABLE)


def _k():
    if not numba_available():
        raise ParameterError(f"the numba sampler needs numba (pip install numba); or set {BACKEND_ENV}=numpy")
    return _kernels


def load_blas() -> None:
    """Load the BLAS that the numba kernels call (scipy's, through ``scipy.linalg.cython_blas``)
    now, so that a ``threadpoolctl`` limit set before a sampling run also covers it (a limit
    only reaches libraries loaded when it is set)."""
    if numba_available():
        import scipy.linalg.cython_blas  # noqa: F401


def warm_up() -> bool:
    """Import numba and load the compiled kernels now (numba's one-off start-up,
    about 1 s of CPU, otherwise paid by the first large sampling call). Returns
    whether numba is available. Benchmarks call it to time that cost separately."""
    if not numba_available():
        return False
    g = np.zeros((1, 2))
    law = _IntegerLaw(g, np.zeros(1, dtype=np.int64), DEFAULT_ETA, True)
    law.search(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.uint64))
    y = np.eye(2)  # the fused kernel (what the mechanisms run) and its BLAS
    load_blas()
    fused_sample(DistanceKernel(y, 1.0, np.zeros(2)), y[:1], [0], np.ones(1, dtype=np.int64),
                 lambda t: np.zeros(len(t), dtype=np.uint64))
    return True


def use_numba(n_weights: int) -> bool:
    """Backend choice for a job of ``n_weights`` weights (``$TEXTDP_SANITIZE_BACKEND``:
    ``auto`` (default: numba for jobs of at least 2^23 weights), ``numba`` or ``numpy``)."""
    mode = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "numba", "numpy"):
        raise ParameterError(f"{BACKEND_ENV} must be auto, numba or numpy, got {mode!r}")
    if mode == "numpy":
        return False
    if mode == "auto" and n_weights < AUTO_NUMBA_MIN_WEIGHTS:
        return False
    return numba_available()


_GEOMETRY: dict[int, tuple] = {}


def table_geometry(vectors: np.ndarray, chunk_rows: int = 65536) -> tuple[np.ndarray, float]:
    """``(center, radius)`` of a whole embedding table: its float64 mean and the largest
    Euclidean norm of a centred row. Chunked (memory O(chunk)); cached per array."""
    key = id(vectors)
    hit = _GEOMETRY.get(key)
    if hit is not None and hit[0]() is vectors:
        return hit[1], hit[2]
    n, m = vectors.shape
    total = np.zeros(m)
    for s in range(0, n, chunk_rows):
        total += np.asarray(vectors[s : s + chunk_rows], dtype=np.float64).sum(axis=0)
    center = total / max(n, 1)
    r2 = 0.0
    for s in range(0, n, chunk_rows):
        c = np.asarray(vectors[s : s + chunk_rows], dtype=np.float64) - center
        r2 = max(r2, float(np.einsum("ij,ij->i", c, c).max(initial=0.0)))
    radius = math.sqrt(r2) * (1 + 1e-12)
    try:
        _GEOMETRY[key] = (weakref.ref(vectors), center, radius)
    except TypeError:  # not weak-referenceable: no caching
        pass
    return center, radius


def sampling_epsilon0(epsilon: float, dim: int, radius: float, n_outcomes: int, eta: float = DEFAULT_ETA) -> float:
    """Additive privacy loss per draw of the secure SanText sampler over the ideal law.

    The guarantee is ``p(y|x) <= exp(eps d(x,x') + epsilon0) p(y|x')`` with
    ``epsilon0 = categorical_discretisation_epsilon(V, eta) + 4 Delta + 4 rho``:

    * ``Delta`` bounds ``|s~ - s|``, the error of a computed scaled distance
      ``s = (eps/2) d``. The GEMM computes ``g = (eps/2)^2 d^2`` as an inner
      product of ``n = dim + 2`` terms whose absolute values sum to at most
      ``(eps/2)^2 (|x| + |y|)^2 <= (eps/2)^2 (2R)^2`` (centred vectors, ``R`` =
      ``radius``), so ``|g~ - g| <= E = gamma_k (eps R)^2`` with
      ``gamma_k = k u / (1 - k u)``, ``k = 2 dim + 8`` (the GEMM, the norms, the
      centring and the scaling), ``u = 2^-53``; and ``|sqrt(a) - sqrt(b)| <=
      sqrt(|a - b|)`` gives ``Delta = sqrt(E) + 8 u eps R`` (sqrt rounding).
      A computed-distance law is then within ``exp(+-2 Delta)`` of the ideal one
      (numerator and normaliser), hence ``4 Delta`` on a ratio.
    * ``rho`` bounds the relative error of each computed weight and of the row
      sum: ``exp`` (1e-8, :mod:`textdp.sanitize._kernels`; numpy's exp is far
      better), the rounding of its argument (``700 u``), the clamp at
      ``e^-700`` (absolute; the row's largest weight is at least ``e^-512``, so a
      clamped weight is below ``e^-188`` of it, far below the ``eta/V`` floor), the row sum
      (``(V + 16) u``); ``4 rho`` on a ratio.
    * ``categorical_discretisation_epsilon`` covers the integer rounding and the
      float evaluation of the mixed law (:mod:`textdp.noise`).

    ``n_outcomes``: size of the output vocabulary (an upper bound is fine: the
    mechanisms pass the embedding table size, so the value is data-independent).
    Returns a float (about ``1.2e-5 * eps`` for GloVe 6B 50d, ``R`` = 14.2).
    """
    eps = float(epsilon)
    k = 2 * int(dim) + 8
    gamma = k * _U / (1 - k * _U)
    e_abs = gamma * (eps * radius) ** 2
    delta = math.sqrt(e_abs) + 8 * _U * eps * radius
    rho = EXP_RELATIVE_ERROR + _CLAMP * _U + (int(n_outcomes) + 16) * _U
    return categorical_discretisation_epsilon(int(n_outcomes), eta) + 4 * delta + 4 * rho


#: output columns per GEMM tile of the fused sampler (:func:`fused_sample`): a ``(rows, TILE)``
#: float64 tile of distances (512 KiB for 64 rows) is turned into weights while it is in L2
TILE = 1024


class DistanceKernel:
    """Scaled squared distances ``(eps/2)^2 d^2`` of input blocks to a fixed output set.

    y: ``(V, m)`` output embeddings (any float dtype, may be a memory map);
    epsilon: the privacy parameter (SanText uses ``eps/2``, Yue et al. 2021
    Sec. 4.2); center: float64 ``(m,)`` subtracted from every vector (distances
    are translation invariant; the table mean keeps norms, hence GEMM errors,
    small -- see :func:`sampling_epsilon0`). The augmented scaled outputs
    ``(eps/2)^2 [-2y, 1, |y|^2]`` are stored in column tiles, ``tiles``: float64
    ``(ceil(V / T), m + 2, T)`` with ``T = min(tile, V)`` (default :data:`TILE`), zero-padded
    (memory ``8 (m + 2) V`` bytes, rounded up to a tile). ``cap``: clip of the scaled distance
    ``s = (eps/2) d`` (default ``inf``: none): every distance computed here, by :meth:`scaled_sq` and by
    the fused kernel, is ``min(s, cap)`` (TEM's truncated exponential mechanism,
    :mod:`textdp.sanitize.tem`; clipping is 1-Lipschitz, so the error bound of
    :func:`sampling_epsilon0` on ``s`` holds for the clipped value too).
    """

    def __init__(self, y: np.ndarray, epsilon: float, center: np.ndarray, chunk_rows: int = 65536,
                 tile: int = TILE, cap: float = math.inf):
        v, m = y.shape
        cap = float(cap)
        if not cap >= 0:
            raise ParameterError(f"the distance cap must be >= 0, got {cap!r}")
        #: clip of the scaled squared distances: ``g = min(g, cap^2)`` (``inf``: none)
        self.cap2 = cap * cap
        c2 = (0.5 * float(epsilon)) ** 2
        self.center = np.asarray(center, dtype=np.float64)
        t = max(1, min(int(tile), v))
        nt = max(1, -(-v // t))
        tiles = np.zeros((nt, m + 2, t), dtype=np.float64)
        for s in range(0, v, chunk_rows):  # chunked: memory stays O(chunk) beyond the result
            yc = np.asarray(y[s : s + chunk_rows], dtype=np.float64) - self.center
            cols = np.empty((m + 2, len(yc)), dtype=np.float64)
            cols[:m] = (-2.0 * c2 * yc).T
            cols[m] = c2
            cols[m + 1] = c2 * squared_norms(yc)
            j = s
            while j < s + len(yc):  # scatter the chunk's columns into their tiles
                k, a = divmod(j, t)
                z = min(t - a, s + len(yc) - j)
                tiles[k, :, a : a + z] = cols[:, j - s : j - s + z]
                j += z
        self.tiles = tiles
        self.v = v
        self.epsilon = float(epsilon)

    def augment(self, x: np.ndarray) -> np.ndarray:
        """``[x - c, |x - c|^2, 1]``: float64 ``(B, m + 2)`` (C-contiguous)."""
        xc = np.asarray(x, dtype=np.float64) - self.center
        xa = np.empty((xc.shape[0], xc.shape[1] + 2), dtype=np.float64)
        xa[:, :-2] = xc
        xa[:, -2] = squared_norms(xc)
        xa[:, -1] = 1.0
        return xa

    def scaled_sq(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``(B, V)`` float64 ``(eps/2)^2 d~(x_b, y_j)^2`` (may be slightly negative
        for coincident vectors: callers clamp at 0). ``out``: reusable float64
        buffer with at least ``B`` rows (its first ``B`` rows are returned).
        The same GEMM, tile by tile, as :func:`fused_sample`."""
        xa = self.augment(x)
        b = xa.shape[0]
        if out is None or out.shape[0] < b or out.shape[1] != self.v or out.dtype != np.float64:
            out = np.empty((b, self.v), dtype=np.float64)
        g = out[:b]
        nt, _, t = self.tiles.shape
        tmp = np.empty((b, t), dtype=np.float64)
        for k in range(nt):
            a = k * t
            z = min(t, self.v - a)
            np.matmul(xa, self.tiles[k], out=tmp)
            g[:, a : a + z] = tmp[:, :z]
        if self.cap2 != math.inf:
            np.minimum(g, self.cap2, out=g)
        return g


class FusedWorkspace:
    """Per-thread buffers of :func:`fused_sample` for blocks of at most ``rows`` rows:
    the GEMM tile ``(rows, T)``, the weights ``(rows, V)`` (float64: ``8 rows V`` bytes,
    the block's memory), row sums, scales and chunk sums."""

    def __init__(self, kernel: DistanceKernel, rows: int):
        k = _k()
        t = kernel.tiles.shape[2]
        self.rows = int(rows)
        self.gt = np.empty((rows, t), dtype=np.float64)
        self.w = np.empty((rows, kernel.v), dtype=np.float64)
        self.tot = np.empty(rows, dtype=np.float64)
        self.scale = np.empty(rows, dtype=np.float64)
        self.csum = np.empty((rows, -(-kernel.v // k.CHUNK)), dtype=np.int64)


def _fused_law(kernel: DistanceKernel, x: np.ndarray, self_cols, eta: float, ws: FusedWorkspace | None):
    k = _k()
    n = x.shape[0]
    if ws is None or ws.rows < n or ws.w.shape[1] != kernel.v:
        ws = FusedWorkspace(kernel, max(n, 1))
    sc = np.full(n, -1, dtype=np.int64) if self_cols is None else np.ascontiguousarray(self_cols, dtype=np.int64)
    if sc.shape != (n,) or (sc >= kernel.v).any():
        raise ParameterError("self_cols must give one column (or -1) per row")
    base = k.fused_block(kernel.augment(x), kernel.tiles, kernel.v, sc, float(eta), ws.gt, ws.w, ws.tot,
                         ws.scale, ws.csum[:n], kernel.cap2)
    return ws, base


def fused_sample(kernel: DistanceKernel, x: np.ndarray, self_cols, counts: np.ndarray, uniforms,
                 eta: float = DEFAULT_ETA, ws: FusedWorkspace | None = None) -> np.ndarray:
    """Exact draws from the float-safe exponential mechanism of each input row: the fused,
    cache-resident numba kernel (:func:`textdp.sanitize._kernels.fused_block`).

    For every tile of ``T`` output words the distance GEMM (BLAS, float64) fills a
    ``(B, T)`` tile that stays in L2, and the weights ``w_j = exp(-s_j)`` (``s_j =
    sqrt(max(g_j, 0))``, ``g`` = 0 at the row's own column) are computed from it at once;
    the exact integer chunk sums follow (``c_j = rint(w_j (1-eta) 2^62 / sum(w) + eta 2^62 / V)``,
    the construction of :func:`sample_block`); a draw is a binary search on the chunk sums and
    the chosen chunk's integer weights recomputed bit for bit. The integer weights are never
    stored, so memory traffic is one write and one read of ``w`` per weight.

    The offset of the weights is 0 for every row (the row's own word has weight 1); a row whose
    weights all lie below ``e^-512`` (no output word within scaled distance 512) is recomputed
    with its minimum as offset. :func:`sample_block` offsets rows without their own word by
    their minimum: the two laws agree to a relative ~1e-8 (the float rounding of ``w``) and a
    seeded run draws the same words except with probability ~1e-9 per draw.

    x: ``(B, m)`` input embeddings; self_cols: int ``(B,)`` or None; counts: int ``(B,)`` draws
    per row; uniforms: ``f(totals) -> uint64`` exact uniform integers ``u_k`` in ``[0,
    totals[k])`` (the keyed streams of :mod:`textdp.noise.keyed`); ws: reusable buffers.
    Returns int64 ``(counts.sum(),)`` output columns, row by row. Raises ParameterError
    (bad shapes; numba missing).
    """
    counts = np.asarray(counts, dtype=np.int64)
    n = x.shape[0]
    if counts.shape != (n,) or (counts < 0).any():
        raise ParameterError(f"counts must be {n} non-negative integers")
    ws, base = _fused_law(kernel, x, self_cols, eta, ws)
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    u = uniforms(ws.csum[:n, -1][rows])
    return _kernels.fused_search(ws.w, kernel.v, ws.csum, ws.scale, base, rows, u,
                                 np.empty(rows.size, dtype=np.int64))


def fused_probabilities(kernel: DistanceKernel, x: np.ndarray, self_cols=None, eta: float = DEFAULT_ETA
                        ) -> np.ndarray:
    """The law :func:`fused_sample` realises for each row: float64 ``(B, V)``, ``c_j / sum(c)``."""
    ws, base = _fused_law(kernel, x, self_cols, eta, None)
    n = x.shape[0]
    c = _kernels.fused_integer_weights(ws.w, kernel.v, ws.scale, base, np.empty((n, kernel.v), dtype=np.int64))
    return c.astype(np.float64) / ws.csum[:n, -1].astype(np.float64)[:, None]


def _check_block(g: np.ndarray, self_cols) -> np.ndarray:
    if g.ndim != 2 or g.dtype != np.float64 or not g.flags.c_contiguous:
        raise ParameterError("g must be a C-contiguous float64 (rows, outcomes) block")
    if self_cols is None:
        return np.full(g.shape[0], -1, dtype=np.int64)
    sc = np.ascontiguousarray(self_cols, dtype=np.int64)
    if sc.shape != (g.shape[0],) or (sc >= g.shape[1]).any():
        raise ParameterError("self_cols must give one column (or -1) per row")
    has = np.flatnonzero(sc >= 0)
    g[has, sc[has]] = 0.0  # d(x, x) = 0 exactly (the GEMM leaves ~1e-15, i.e. s ~ 3e-8)
    return sc


class _IntegerLaw:
    """Integer weights of a block's rows, as built by one backend.

    numba: ``c`` (``(B, V)`` int64 weights) and ``csum`` (cumulative chunk sums);
    numpy: ``cdf`` (``(B, V)`` int64 cumulative weights, from textdp.noise)."""

    def __init__(self, g: np.ndarray, sc: np.ndarray, eta: float, numba: bool):
        self.numba = numba
        if numba:
            k = _k()
            self.csum = np.empty((g.shape[0], -(-g.shape[1] // k.CHUNK)), dtype=np.int64)
            self.c = k.integer_weights_rows(g, sc, float(eta), self.csum)
            self.totals = self.csum[:, -1]
        else:  # log-weights -sqrt(max(g, 0)) (in place) into textdp.noise's sampler
            np.maximum(g, 0.0, out=g)
            np.sqrt(g, out=g)
            np.negative(g, out=g)
            self.cdf = ExactCategorical(g, eta).cdf.view(np.int64)
            self.totals = self.cdf[:, -1]

    def search(self, rows: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Smallest ``j`` whose cumulative weight in row ``rows[k]`` exceeds ``u[k]``
        (``rows`` grouped, non-decreasing)."""
        if self.numba:
            return _kernels.search_rows(self.c, self.csum, rows, u, np.empty(rows.size, dtype=np.int64))
        out = np.empty(rows.size, dtype=np.int64)
        cut = np.flatnonzero(np.diff(rows)) + 1
        for a, z in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [rows.size]]).tolist()):
            if z > a:
                out[a:z] = np.searchsorted(self.cdf[rows[a]], u[a:z].astype(np.int64), side="right")
        return out

    def probabilities(self) -> np.ndarray:
        c = self.c if self.numba else np.diff(self.cdf, axis=1, prepend=np.zeros((len(self.cdf), 1), np.int64))
        return c.astype(np.float64) / self.totals[:, None].astype(np.float64)


def _bit_length(n: np.ndarray) -> np.ndarray:
    """Exact ``int.bit_length`` of each uint64 (int64 array)."""
    n = np.array(n, dtype=np.uint64)
    out = np.zeros(n.shape, dtype=np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        big = (n >> np.uint64(s)) > 0
        out += big * s
        n = np.where(big, n >> np.uint64(s), n)
    return out + (n > 0)


def uniform_below(bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Exact uniform integers ``u_k`` in ``[0, bounds[k])`` (``1 <= bounds < 2^63``), uint64.

    Rejection sampling: ``x`` = the top ``b_k`` bits of a 63-bit word
    (``rng.integers(0, 2**63)``, one raw word each), accepted when
    ``x < bound``, with ``b_k = min(63, bit_length(bound - 1) + 1)`` (acceptance
    probability in (1/4, 1/2]). Totals of ``2^62``-scaled integer weights lie
    within ``V`` of ``2^62``, so ``b_k = 63`` for all of them, on either side of
    ``2^62``: two backends whose totals differ by a few units then accept and
    reject the same words (unless one falls between the two totals, probability
    ~``2^-50``) and consume the generator identically, giving the same seeded
    draws. (A Lemire draw, numpy's default, changes its rejection threshold
    ``2^64 mod C`` abruptly when ``C`` crosses ``2^62``.)
    """
    b = np.asarray(bounds, dtype=np.uint64)
    if b.size and b.min() < 1:
        raise ParameterError("uniform_below needs bounds >= 1")
    if b.size and b.min() > 2**61:  # the usual case (totals ~2^62): 63-bit words, no shift
        shift = np.zeros(b.shape, dtype=np.uint64)
    else:
        shift = (63 - np.minimum(63, _bit_length(b - np.uint64(1)) + 1)).astype(np.uint64)
    out = np.empty(b.shape, dtype=np.uint64)
    pending = np.arange(b.size)
    while pending.size:
        x = rng.integers(0, 2**63, size=pending.size, dtype=np.uint64) >> shift[pending]
        ok = x < b[pending]
        out[pending[ok]] = x[ok]
        pending = pending[~ok]
    return out


def sample_block(g: np.ndarray, self_cols, counts: np.ndarray, rng: np.random.Generator | None,
                 eta: float = DEFAULT_ETA, numba: bool | None = None, uniforms=None) -> np.ndarray:
    """Exact draws from the float-safe exponential mechanism of each row of ``g``.

    g: C-contiguous float64 ``(B, V)``, ``g[b, j] = s_bj^2`` (scaled squared
    distances from :meth:`DistanceKernel.scaled_sq`); **overwritten**.
    self_cols: int ``(B,)`` column of row b's own word or -1: that entry is set
    to 0 (the exact distance of a word to itself) and used as the offset.
    counts: int ``(B,)`` draws per row. rng: the Generator all uniforms come
    from (unused when ``uniforms`` is given). numba: force a backend (default: :func:`use_numba`).
    uniforms: optional ``f(bounds) -> uint64`` giving draw ``k`` its exact uniform integer in
    ``[0, bounds[k])`` (the sanitizers pass per-token keyed streams, :mod:`textdp.noise.keyed`).
    Returns int64 ``(counts.sum(),)`` columns: the ``counts[0]`` draws of row 0,
    then those of row 1, ... Law of each draw: ``(1 - eta) softmax(-s_b) + eta/V``
    in exact integer weights (module docstring); uniforms from :func:`uniform_below`.
    """
    sc = _check_block(g, self_cols)
    counts = np.asarray(counts, dtype=np.int64)
    b, v = g.shape
    if counts.shape != (b,) or (counts < 0).any():
        raise ParameterError(f"counts must be {b} non-negative integers")
    if numba is None:
        numba = use_numba(b * v)
    law = _IntegerLaw(g, sc, eta, numba)
    rows = np.repeat(np.arange(b, dtype=np.int64), counts)
    bounds = law.totals[rows]
    return law.search(rows, uniform_below(bounds, rng) if uniforms is None else uniforms(bounds))


def block_probabilities(g: np.ndarray, self_cols=None, eta: float = DEFAULT_ETA, numba: bool | None = None
                        ) -> np.ndarray:
    """The law :func:`sample_block` realises for each row of ``g`` (overwritten):
    float64 ``(B, V)``, ``c_j / sum(c)`` of the integer weights."""
    sc = _check_block(g, self_cols)
    b, v = g.shape
    if numba is None:
        numba = use_numba(b * v)
    return _IntegerLaw(g, sc, eta, numba).probabilities()
