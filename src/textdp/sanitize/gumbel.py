"""TruncatedGumbel (Carvalho, Vasiloudis, Feyisetan. *BRR: Preserving Privacy of Text Data Efficiently on
Device.* arXiv 2107.07923, 2021), as implemented by mldp-text 0.1.2 (``mldp_text/mechanisms.py``
``TruncatedGumbel``, ``mldp_text/utils.py`` ``truncated_Poisson``, ``truncated_Gumbel``): the k nearest
output words of the input, k from a truncated Poisson, each distance perturbed by truncated Gumbel noise,
the smallest noisy distance wins. The nearest words are by exact float64 distance, memoised per input word
(:class:`NeighbourLists`).

The paper claims ``eps·d`` metric DP for this calibration. textdp's audit (tests/sanitize/test_gumbel.py)
refutes that claim on a 12-word table, so this module claims no metric guarantee: only the plain-DP worst
case that its uniform share ``eta`` proves, and only where every accepted input is an output word (see
:class:`TruncatedGumbel`).
"""

from __future__ import annotations

import math

import numpy as np

from textdp.accounting import MetricDP
from textdp.errors import ParameterError
from textdp.noise import keyed
from textdp.sanitize.base import TokenSanitizer, _single_threaded_blas

#: neighbours memoised per input word: the ``K`` nearest output words (:class:`NeighbourLists`); a token
#: whose drawn ``k`` exceeds it (probability below 1e-9 at n = 30,000) gets its ``k`` nearest computed then
NEIGHBOURS = 32
#: new distinct words per prefilter block, at most (B x V float32 scores: 15 MB for 30,000 words; fewer
#: for larger vocabularies, within ``block_bytes``)
_BLOCK = 128
#: tokens per sampling chunk (progress is reported after each)
_CHUNK = 16384
_U64 = 2.0**-53  # unit roundoff of float64
_U32 = 2.0**-24  # unit roundoff of float32
#: beyond this (|x - c| Y + H), float32 could overflow: the word is scored exactly on every column
_FLOAT32_SAFE = 1e30


def _gamma(n: int, u: float) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)`` (*Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
    Sec. 3.1)."""
    return n * u / (1.0 - n * u)


class NeighbourLists:
    """The ``k`` nearest output words of input words, by exact float64 squared distance, memoised.

    ``vectors``: the embedding table (float ``(N, m)``, rows = input rows); ``out_rows``: int64 ``(V,)``
    the output words' rows; ``center``: float64 ``(m,)`` (public: the table's mean; it only tightens the
    prefilter's bound); ``k``: the list length (``min(k, V)`` is kept).

    **The rule.** The list of an input word ``x`` is the ``k`` output columns ``j`` of smallest
    ``(E_j, j)``, ``E_j`` = :func:`textdp.sanitize._gumbel_kernels.exact_sq` of ``x`` and ``y_j``
    (``sum_t (x_t - y_jt)^2`` in float64 in one fixed order), with the distances ``sqrt(E_j)``. It depends
    only on the word, the table and the output vocabulary: not on the other words of a call, the block,
    the BLAS or the prefilter. ``E = 0`` exactly for the word itself.

    **The prefilter and its error bound.** A float32 GEMM (BLAS) scores every column:
    ``a_j = fl32([x~, 1] . [y~_j, -h~_j])``, ``x~ = fl32(fl64(x - c))``, ``y~_j = fl32(fl64(y_j - c))``,
    ``h~_j = fl32(h_j)``, ``h_j = ||fl64(y_j - c)||^2 / 2`` in float64: an approximation of
    ``s_j = x_c . y_cj - ||y_cj||^2 / 2`` (``x_c = x - c``, ``y_cj = y_j - c``; ``D_j = ||x - y_j||^2 =
    ||x_c||^2 - 2 s_j``). With ``m`` the dimension, ``e = (1 + 2^-53)(1 + 2^-24) - 1`` (the relative error
    of one input rounding), ``gamma_n(u) = n u / (1 - n u)`` (Higham, *Accuracy and Stability of Numerical
    Algorithms*, 2nd ed., Sec. 3.1), ``X = ||x_c||``, ``Y = max_j ||y_cj||``, ``P = X Y`` (bounds
    ``sum_t |x_ct y_cjt|``), ``H = max_j h_j``:

    * input rounding: ``((1 + e)^2 - 1) P`` for the products, plus ``e_h = max_j |h~_j - h_j| +
      gamma_{m+3}(2^-53) H`` for the norms (the first part measured when the table is built);
    * float32 accumulation of the ``m + 1`` terms in any order (any BLAS kernel, with or without fused
      multiply-adds): ``gamma_{m+1}(2^-24) ((1 + e)^2 P + H + e_h)``;
    * underflow: ``4 (m + 1) 2^-126`` absolute;

    so ``|a_j - s_j| <= beta``, the sum of the three. The exact value itself: every term of ``E_j`` is
    non-negative, so ``|E_j - D_j| <= gamma_{m+2}(2^-53) D_j <= eps_E = gamma_{m+2}(2^-53) (X + Y)^2``.
    With ``g_j = ||x_c||^2 - 2 a_j`` (the GEMM's squared distance), ``|g_j - E_j| <= B = 2 beta + eps_E``.
    Let ``A`` be the ``k``-th largest ``a_j`` (the ``k``-th smallest ``g_j``): the ``k`` columns with
    ``a_i >= A`` have ``E_i <= g_i + B <= ||x_c||^2 - 2A + B``, and a column with ``a_j < A - B`` (``g_j``
    more than ``2B`` above the ``k``-th smallest) has ``E_j >= g_j - B > ||x_c||^2 - 2A + B``: ``k``
    columns are strictly nearer, so it is not in the list. Hence every column with ``a_j >= A - 1.1 B``
    (1.1 covers the float64 evaluation of the bound) is scored exactly, and the list is the ``k`` best of
    those (:func:`textdp.sanitize._gumbel_kernels.nearest_lists`). A word with ``X Y + H >= 1e30`` (or a
    table with entries beyond 1e15 or non-finite ones) is scored exactly on every column (no float32
    overflow). For GloVe 6B 50d's default 30,000 words and the 19,472 distinct words of Rotten Tomatoes,
    ``1.1 B`` is 0.0009-0.0014 (the 32nd nearest squared distance: median 15.1) and 32.04 columns are
    scored exactly per word at ``k`` = 32.

    **Memory.** The memo: 4 bytes per row of the embedding table (the slot of each input row: 1.6 MB for
    GloVe 6B's 400,000 words) and ``12 k`` bytes per distinct input word seen (int32 columns and float64
    distances: 384 bytes at ``k`` = 32, 11.5 MB for 30,000 words); the tables: ``4 (m + 1) V`` bytes
    (the float32 prefilter) and the output vectors C-contiguous (``4 m V`` for a float32 table): 12 MB
    for 30,000 words of dimension 50.
    """

    def __init__(self, vectors, out_rows: np.ndarray, center: np.ndarray, k: int = NEIGHBOURS):
        self.vectors = vectors
        self.out_rows = np.asarray(out_rows, dtype=np.int64)
        v = len(self.out_rows)
        self.k = max(1, min(int(k), v))
        whole = v == len(vectors) and np.array_equal(self.out_rows, np.arange(len(vectors)))
        y = np.asarray(vectors if whole else vectors[self.out_rows])
        if y.dtype not in (np.float32, np.float64):
            y = y.astype(np.float64)
        self.y = np.ascontiguousarray(y)
        m = self.y.shape[1]
        self.dim = m
        self.center = np.asarray(center, dtype=np.float64)
        h = np.empty(v, dtype=np.float64)
        t = np.empty((m + 1, v), dtype=np.float32)
        big = 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            for s in range(0, v, 65536):  # chunked: memory O(chunk) beyond the tables
                yc = self.y[s:s + 65536].astype(np.float64) - self.center  # fl64(y - c)
                h[s:s + 65536] = 0.5 * np.einsum("ij,ij->i", yc, yc)
                big = max(big, float(np.abs(yc).max(initial=0.0)))
                t[:m, s:s + 65536] = yc.T
            self.h_max = float(h.max(initial=0.0))
            self.y_max = math.sqrt(2.0 * self.h_max) * (1.0 + 1e-12)
            finite = bool(np.isfinite(h).all())
            self.exact_only = not (finite and big < 1e15 and self.h_max < 1e29)
            self.tiles = None
            self.e_h = math.inf
            if not self.exact_only:
                t[m] = -h
                self.e_h = (float(np.abs(t[m].astype(np.float64) + h).max(initial=0.0))
                            + _gamma(m + 3, _U64) * self.h_max)
                self.tiles = t
        self.slot = np.full(len(vectors), -1, dtype=np.int32)
        self.cols = np.empty((0, self.k), dtype=np.int32)
        self.dist = np.empty((0, self.k), dtype=np.float64)
        self.size = 0
        #: columns scored exactly and words listed since the lists were built (for the benchmarks)
        self.scored = 0
        self.listed = 0

    def slack(self, xc: np.ndarray) -> np.ndarray:
        """``1.1 B`` (class docstring) for each centred query ``xc`` (float64 ``(B, m)``), ``inf`` where the
        float32 prefilter is not safe."""
        m = self.dim
        e = (1.0 + _U64) * (1.0 + _U32) - 1.0
        x_norm = np.sqrt(np.einsum("ij,ij->i", xc, xc)) * (1.0 + 1e-12)
        p = x_norm * self.y_max
        beta = (((1.0 + e) ** 2 - 1.0) * p + self.e_h
                + _gamma(m + 1, _U32) * ((1.0 + e) ** 2 * p + self.h_max + self.e_h)
                + 4.0 * (m + 1) * 2.0**-126)
        eps_e = _gamma(m + 2, _U64) * (x_norm + self.y_max) ** 2
        s = 1.1 * (2.0 * beta + eps_e)
        unsafe = ~(p + self.h_max < _FLOAT32_SAFE) | ~np.isfinite(xc).all(axis=1)
        if self.exact_only:
            unsafe[:] = True
        s[unsafe] = np.inf
        return s

    def compute(self, rows: np.ndarray, k: int, block_rows: int = _BLOCK) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest output columns (int32 ``(n, k)``) and their distances (float64 ``(n, k)``) of
        the input rows ``rows`` (int64 ``(n,)``), ordered by (exact squared distance, column); ``k <= V``.
        Not memoised. ``block_rows``: words per prefilter GEMM (the result does not depend on it)."""
        import textdp.noise._keyed_kernels  # noqa: F401 - numba is loaded now: the keyed draws use its kernels
        from textdp.sanitize._gumbel_kernels import nearest_lists

        rows = np.asarray(rows, dtype=np.int64)
        n, v = len(rows), len(self.out_rows)
        cols = np.empty((n, k), dtype=np.int32)
        dist = np.empty((n, k), dtype=np.float64)
        scored = np.empty(n, dtype=np.int64)
        blk = max(1, min(int(block_rows), n))
        with _single_threaded_blas():  # one BLAS thread per GEMM: a multi-threaded one only spins here
            for s in range(0, n, blk):
                e = min(n, s + blk)
                x = np.ascontiguousarray(np.asarray(self.vectors[rows[s:e]]), dtype=np.float64)
                xc = x - self.center
                slack = self.slack(xc)
                if self.tiles is None:
                    a = np.zeros((e - s, v), dtype=np.float32)
                else:
                    q = np.ones((e - s, self.dim + 1), dtype=np.float32)
                    q[:, :-1] = xc
                    a = q @ self.tiles
                nearest_lists(a, slack, x, self.y, k, cols[s:e], dist[s:e], scored[s:e])
        self.scored += int(scored.sum())
        self.listed += n
        return cols, dist

    def ensure(self, rows: np.ndarray, block_rows: int = _BLOCK) -> np.ndarray:
        """Memoise the lists of the input rows ``rows`` not seen yet; returns the slots of ``rows`` (int32
        ``(n,)``, row indices into :attr:`cols` and :attr:`dist`)."""
        rows = np.asarray(rows, dtype=np.int64)
        new = np.unique(rows[self.slot[rows] < 0])
        if len(new):
            cols, dist = self.compute(new, self.k, block_rows)
            need = self.size + len(new)
            if need > len(self.cols):
                cap = max(need, 2 * len(self.cols), 1024)
                c2 = np.empty((cap, self.k), dtype=np.int32)
                d2 = np.empty((cap, self.k), dtype=np.float64)
                c2[:self.size], d2[:self.size] = self.cols[:self.size], self.dist[:self.size]
                self.cols, self.dist = c2, d2
            self.cols[self.size:need] = cols
            self.dist[self.size:need] = dist
            self.slot[new] = np.arange(self.size, need, dtype=np.int32)
            self.size = need
        return self.slot[rows]

    def __getstate__(self) -> dict:
        """A pickled copy (a mechanism sent to a worker or saved) carries no memo: which input words were
        listed is a fact about the private corpus; the copy recomputes the same lists when it needs them."""
        state = self.__dict__.copy()
        state["slot"] = np.full(len(self.slot), -1, dtype=np.int32)
        state["cols"] = np.empty((0, self.k), dtype=np.int32)
        state["dist"] = np.empty((0, self.k), dtype=np.float64)
        state["size"] = state["scored"] = state["listed"] = 0
        return state


def mldp_scale(epsilon: float, n_words: int, d_min: float, d_max: float) -> float:
    """The Gumbel scale ``b`` of mldp-text's TruncatedGumbel (``mechanisms.py``, ``__init__``)::

        a = (eps - 2 (1 + ln n) / d_min) / 3
        b = 2 d_max / Re W(2 a d_max)                         if a d_min <= 0
        b = 2 d_max / min(Re W(2 a d_max), ln(a d_min))       otherwise

    with ``W`` the principal branch of Lambert's W (complex below ``-1/e``: mldp-text takes its real
    part), ``n`` the vocabulary size and ``d_min``/``d_max`` the smallest and largest non-zero
    distance from a reference word. May be negative, zero or infinite (mldp-text then fails in numpy)."""
    from scipy.special import lambertw

    a = (float(epsilon) - 2.0 * (1.0 + math.log(n_words)) / d_min) / 3.0
    w = float(lambertw(2.0 * a * d_max).real)
    den = w if a * d_min <= 0 else min(w, math.log(a * d_min))
    return math.inf if den == 0 else 2.0 * d_max / den


class TruncatedGumbel(TokenSanitizer):
    """TruncatedGumbel (Carvalho et al. 2021, BRR, arXiv 2107.07923; law as in mldp-text 0.1.2
    ``TruncatedGumbel.replace_word``, its exact-search path ``use_faiss=False``). For an input word ``x``
    and the output vocabulary ``W`` (``n = |W|`` words):

    1. ``k ~ Poisson(ln(n - 1))`` conditioned on ``k <= n - 1`` (``truncated_Poisson``);
    2. ``k = 0``: the output is ``x`` itself (mldp-text returns the word);
    3. else the ``k`` output words nearest to ``x`` (Euclidean distance of raw embeddings; ties by
       output-vocabulary order) get noisy distances ``d(x, y_i) + G_i``, ``G_i`` i.i.d. Gumbel(0, b)
       conditioned on ``|G_i| <= d_max`` (``truncated_Gumbel``), and the smallest wins.

    ``b`` is :func:`mldp_scale` of ``eps``, ``n``, ``d_min`` and ``d_max``, the smallest and largest
    non-zero distance from a reference word to the output words (mldp-text: a random word; here the
    first output word, so the law is reproducible and data-independent). With
    ``output_vocabulary="corpus"`` (a private word set) ``d_min``, ``d_max`` and ``n`` of the formula
    come from public data instead: the distances from the embedding table's first word to every table
    word, and the table's size, so the card (which shows ``scale``, ``min_distance``, ``max_distance``)
    reveals nothing of the corpus; ``k`` and the candidates still use the corpus's words. Where that
    formula gives a negative scale (mldp-text then stops with numpy's "scale < 0"), textdp uses ``|b|``
    and the card says so; ``scale`` sets ``b`` directly.

    **eps does not control the noise.** The formula needs ``a > 0``, i.e. ``eps > 2(1 + ln n)/d_min``
    (11.7 for GloVe 6B 50d's 30,000-word default vocabulary). Below that, Lambert W is evaluated where
    it is complex (argument below ``-1/e``) and its real part is used, as mldp-text does; the scale is
    then not monotone in eps (``b`` = 9.29, 9.48, 10.0, 17.3, 40.8, 18.6, 9.72, 4.83 at eps = 0.1, 1,
    3, 10, 15, 20, 50, 1000 on that vocabulary: raising eps from 3 to 15 gives 4 times more noise).
    :meth:`formula_domain` reports where eps lies and the card warns when it is outside the domain.

    **Nearest words.** "Nearest" is by the exact float64 squared distance ``sum_t (x_t - y_t)^2`` summed in
    one fixed order (:class:`NeighbourLists`; ties by output-vocabulary column), and the noisy score uses
    its square root (``d(x, x) = 0`` exactly). The first :data:`NEIGHBOURS` (32) nearest output words of
    each distinct input word are computed once (a float32 GEMM prefilter with a proven error bound picks
    the words scored exactly) and memoised on the instance: later calls, and later chunks of a streamed
    release, reuse them (384 bytes per distinct word, plus 4 bytes per embedding row). A token whose
    ``k`` exceeds 32 gets its word's ``k`` nearest by the same rule, computed for it. A word's list
    depends only on the word, the table and the output vocabulary, so a record's output depends only on
    the record, its index and the key, never on the other records of the call.

    **Float safety and randomness.** ``k`` is drawn exactly: integer weights ``rint(2^62 pmf_k)`` of the
    truncated Poisson (outcomes whose weight rounds to 0 -- k > 50 for n = 30,000 -- never occur)
    and one keyed uniform integer. Noise ``G_i`` for the ``i``-th nearest word comes from word ``i`` of
    the token's keyed stream: a 52-bit uniform ``(j + 1/2) 2^-52`` mapped by the inverse CDF of the
    truncated Gumbel (no rejection loop; the result is clipped into ``[-d_max, d_max]`` against rounding).
    The float discretisation of the continuous noise is not accounted. A uniform share ``eta``
    (an exact keyed Bernoulli, as FBDD) replaces the output by a uniform word of ``W``.

    **Guarantee (audited, tests/sanitize/test_gumbel.py).** The paper's claim is ``eps·d`` metric DP.
    textdp's audit refutes it: on a 12-word 4-dimensional table at eps = 1 (where the paper's formula
    itself gives b = 12.96), with 100,000 keyed draws per word, Clopper-Pearson lower bounds of the
    log-ratio (level 1e-3, Bonferroni over every (x, x', y)) exceed ``eps·d`` by 5.57 on the closest
    pairs (w9 against w7: at least 8.50 where eps·d = 2.93) and by 5.42 on random pairs (w2/w10: 8.45
    against 3.03). The cause is structural, so no eps escapes it: the output is one of the ``k <= n - 1``
    nearest words, so the word ``x`` ranks last is never a candidate (the paper's law gives it
    probability 0 from ``x``, and a positive one from its neighbours: an infinite ratio; with the uniform
    share, ``eta/n``). At eps = 10 sampling alone cannot resolve the violation (bounds about 3 against
    eps·d >= 10.8) but the argument holds. So ``guarantee.epsilon`` is infinite (no metric claim) and what is claimed is
    the plain-DP worst case per token that the uniform share proves: every output word has probability
    in ``[eta/n, 1 - eta + eta/n]`` from every input, hence ``ln((1 - eta + eta/n) n / eta)`` (26.8 for
    GloVe 6B's full 400,000-word table) -- but only when every accepted input is an output word
    (``output_vocabulary="full"``): otherwise step 2 releases an input that is not an output word and is
    produced by no other input, and the worst case is infinite. ``oov`` other than ``uniform``: infinite.

    Parameters (keyword-only; ``--param KEY=VALUE``): ``scale`` (the Gumbel scale b > 0; default: the
    formula above), ``min_distance``/``max_distance`` (``d_min``/``d_max`` > 0; default: from the
    reference word). ParameterError (one line) for non-positive or non-finite values, or
    ``min_distance > max_distance``.
    """

    name = "truncated-gumbel"
    paper = ("Carvalho, Vasiloudis, Feyisetan, arXiv 2107.07923 (2021, BRR: truncated Gumbel noise on the "
             "k nearest words); law as in mldp-text 0.1.2 TruncatedGumbel")
    exact_probabilities = False
    supports_workers = False
    #: length of the memoised neighbour lists (:class:`NeighbourLists`; the law does not depend on it)
    neighbours = NEIGHBOURS

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, scale: float | None = None,
                 min_distance: float | None = None, max_distance: float | None = None, **kwargs):
        def positive(v, name):
            if v is None:
                return None
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise ParameterError(f"{name} (--param {name}) must be a positive number, got {v!r}") from None
            if not (f > 0 and math.isfinite(f)):
                raise ParameterError(f"{name} (--param {name}) must be a positive finite number, got {v!r}")
            return f

        self.scale_param = positive(scale, "scale")
        self.min_distance_param = positive(min_distance, "min_distance")
        self.max_distance_param = positive(max_distance, "max_distance")
        if (self.min_distance_param is not None and self.max_distance_param is not None
                and self.min_distance_param > self.max_distance_param):
            raise ParameterError(f"min_distance ({min_distance!r}) must not exceed max_distance ({max_distance!r})")
        super().__init__(embeddings, epsilon, **kwargs)

    # ------------------------------------------------------------------ calibration (public data only)
    def _reference_distances(self) -> tuple[np.ndarray, int]:
        """Non-zero Euclidean distances from the reference word, and the ``n`` of the scale formula,
        both public: over the output vocabulary from its first word; with ``output_vocabulary="corpus"``
        (a private set) over the whole embedding table from the table's first word, with ``n`` the
        table's size (:meth:`_n_out_bound`)."""
        vec = self.embeddings.vectors
        if self.output_vocabulary == "corpus":
            rows, n = None, int(self._n_out_bound())
            ref = np.asarray(vec[0], dtype=np.float64)
            total = len(vec)
        else:
            rows, n = self.output_rows, len(self.output_rows)
            ref = np.asarray(vec[rows[0]], dtype=np.float64)
            total = len(rows)
        parts = []
        for s in range(0, total, 65536):  # float64 blocks of at most 65,536 rows
            y = np.asarray(vec[s:s + 65536] if rows is None else vec[rows[s:s + 65536]], dtype=np.float64)
            parts.append(np.sqrt(((y - ref) ** 2).sum(axis=1)))
        d0 = np.concatenate(parts) if parts else np.zeros(0)
        return d0[d0 > 0], n

    def _prepare_mechanism(self) -> None:
        out = self.output_rows
        vec = self.embeddings.vectors
        d0, n_formula = self._reference_distances()
        n = len(out)
        self.d_min = self.min_distance_param if self.min_distance_param is not None else (
            float(d0.min()) if len(d0) else 1.0)
        self.d_max = self.max_distance_param if self.max_distance_param is not None else (
            float(d0.max()) if len(d0) else 1.0)
        self.d_min = min(self.d_min, self.d_max)
        self.scale_flipped = False
        self._n_formula = None  # n of the paper's formula where it sets b
        if self.scale_param is not None:
            b = self.scale_param
        elif n_formula < 2:
            b = 1.0  # nothing to choose from: k = 0 always
        else:
            b = mldp_scale(self.epsilon, n_formula, self.d_min, self.d_max)
            self._n_formula = n_formula
            if b < 0:
                b, self.scale_flipped = -b, True
            if not (b > 0 and math.isfinite(b)):
                raise ParameterError(f"the paper's Gumbel scale formula has no finite value at eps={self.epsilon:g} "
                                     f"(d_min={self.d_min:.4g}, d_max={self.d_max:.4g}, n={n_formula}); pass "
                                     "--param scale=B")
        self.b = float(b)
        # k ~ Poisson(ln(n - 1)) conditioned on k <= n - 1, as exact integer weights
        lam = math.log(n - 1) if n > 2 else 0.0
        kmax = max(0, n - 1)
        if lam == 0.0:
            pmf = np.array([1.0])
        else:
            ks = np.arange(min(kmax, int(lam + 60 * math.sqrt(lam) + 200)) + 1, dtype=np.float64)
            from scipy.special import gammaln

            logp = ks * math.log(lam) - gammaln(ks + 1)
            pmf = np.exp(logp - logp.max())
            pmf /= pmf.sum()
        c = np.rint(pmf * 2.0**62).astype(np.int64)
        c = c[: int(np.flatnonzero(c)[-1]) + 1]
        self._k_weights = c
        self._k_cdf = np.cumsum(c)
        old = getattr(self, "_lists", None)  # the memo survives a re-preparation with the same output words
        if old is None or old.vectors is not vec or not np.array_equal(old.out_rows, out):
            self._lists = NeighbourLists(vec, out, self._geometry()[0], self.neighbours)
        # truncated Gumbel(0, b) on [-d_max, d_max]: F(g) = exp(-exp(-g/b))
        self._f_lo = math.exp(-math.exp(self.d_max / self.b)) if self.d_max / self.b < 700 else 0.0
        self._f_hi = math.exp(-math.exp(-self.d_max / self.b))

    def k_probabilities(self) -> np.ndarray:
        """The exact law of ``k`` sampled: float64 ``(K,)`` over ``k = 0 .. K-1`` (the truncated Poisson
        in integer weights; outcomes past ``K`` have weight 0)."""
        self._prepare()
        return self._k_weights / float(self._k_cdf[-1])

    # ------------------------------------------------------------------ noise
    def _gumbel(self, words: np.ndarray) -> np.ndarray:
        """Truncated Gumbel(0, b) on [-d_max, d_max] from uint64 words (inverse CDF of a 52-bit uniform)."""
        u = ((words >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52
        p = self._f_lo + u * (self._f_hi - self._f_lo)
        with np.errstate(divide="ignore"):
            g = -self.b * np.log(-np.log(p))
        return np.clip(g, -self.d_max, self.d_max)

    def noise(self, n: int, rng=None) -> np.ndarray:
        """``(n,)`` float64 draws of the truncated Gumbel noise (fresh key from ``rng``, or the next key)."""
        from textdp.noise import make_rng
        from textdp.noise.keyed import ReleaseKey

        self._prepare()
        key = ReleaseKey.from_generator(make_rng(rng)) if rng is not None else self._next_key()
        w = keyed.keyed_words(key, np.arange(int(n)), np.zeros(int(n), dtype=np.int64), keyed.MAIN, 1)
        return self._gumbel(w[:, 0])

    def sample_k(self, n: int, rng=None) -> np.ndarray:
        """``(n,)`` int64 draws of ``k`` (fresh key from ``rng``, or the next key)."""
        from textdp.noise import make_rng
        from textdp.noise.keyed import ReleaseKey

        self._prepare()
        key = ReleaseKey.from_generator(make_rng(rng)) if rng is not None else self._next_key()
        return self._draw_k(key, np.arange(int(n)), np.zeros(int(n), dtype=np.int64))

    def _draw_k(self, key, streams, positions) -> np.ndarray:
        u = keyed.keyed_uniform_below(key, streams, positions, keyed.COIN, int(self._k_cdf[-1]))
        return np.searchsorted(self._k_cdf, u.astype(np.int64), side="right").astype(np.int64)

    # ------------------------------------------------------------------ the mechanism
    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        out_rows = self.output_rows
        n_out = len(out_rows)
        out = rows.copy()  # k = 0: the word itself
        k = self._draw_k(key, streams, positions)
        for s in range(0, len(rows), _CHUNK):
            e = min(len(rows), s + _CHUNK)
            sel = s + np.flatnonzero(k[s:e] > 0)
            if len(sel):
                out[sel] = self._noisy_nearest(rows[sel], k[sel], key, streams[sel], positions[sel])
            if progress is not None:
                progress(e - s)
        mix = np.flatnonzero(keyed.keyed_bernoulli(key, streams, positions, keyed.MIX, self.eta))
        if len(mix):  # the uniform share (class docstring)
            pick = keyed.keyed_uniform_below(key, streams[mix], positions[mix], keyed.MIX_PICK, n_out)
            out[mix] = out_rows[pick.astype(np.int64)]
        return out

    def _noisy_nearest(self, rows, k, key, streams, positions) -> np.ndarray:
        """Output rows of tokens with ``k >= 1``: the argmin of ``d(x, y_i) + G_i`` over the ``k`` nearest
        output words ``y_i`` (the memoised lists; a token with ``k`` above their length gets its word's
        ``k`` nearest by the same exact rule, computed for it), ``G_i`` from word ``i`` of the token's
        stream."""
        lists = self._lists
        out_rows = self.output_rows
        blk = max(1, min(_BLOCK, self._block_bytes() // (4 * len(out_rows))))  # B x V float32 scores
        res = np.empty(len(rows), dtype=np.int64)
        small = np.flatnonzero(k <= lists.k)
        if len(small):
            from textdp.sanitize._gumbel_kernels import noisy_argmin

            slot = lists.ensure(rows[small], blk)
            nb = (k[small] + 7) // 8  # ChaCha20 blocks of 8 words: draw whole blocks, the first k words count
            for b in np.unique(nb).tolist():
                g = np.flatnonzero(nb == b)
                t = small[g]
                width = min(8 * b, lists.k)
                noise = self._gumbel(keyed.keyed_words(key, streams[t], positions[t], keyed.MAIN, width))
                noisy_argmin(lists.dist, lists.cols, slot[g], k[t], noise, out_rows, res, t)
        big = np.flatnonzero(k > lists.k)
        if len(big):  # k beyond the memoised lists: the same exact rule, k nearest for this word
            words, inv = np.unique(rows[big], return_inverse=True)
            for i, r in enumerate(words.tolist()):
                t = big[inv == i]
                kw = int(k[t].max())
                cols, dist = lists.compute(np.array([r]), kw, blk)
                w = keyed.keyed_words(key, streams[t], positions[t], keyed.MAIN, kw)
                score = dist[0][None, :] + self._gumbel(w)
                score[np.arange(kw)[None, :] >= k[t][:, None]] = np.inf
                res[t] = out_rows[cols[0][np.argmin(score, axis=1)]]
        return res

    # ------------------------------------------------------------------ guarantee and card
    def worst_case_epsilon(self) -> float:
        """``ln((1 - eta + eta/n) n / eta)`` when every accepted input is an output word and ``oov`` is
        ``uniform`` (an OOV token's uniform law lies inside the same interval); infinite otherwise."""
        if self.oov != "uniform" or self.output_vocabulary != "full":
            return math.inf
        self._prepare()
        v = len(self.output_rows)
        hi, lo = 1.0 - self.eta + self.eta / v, self.eta / v
        return math.log(hi / lo)

    @property
    def guarantee(self) -> MetricDP:
        return _AuditedNoMetric(epsilon=math.inf, metric=f"euclidean ({self.embeddings.source})", unit="token",
                                epsilon0=0.0, worst_case_epsilon=self.worst_case_epsilon())

    def card_units(self) -> dict:
        units = super().card_units()
        units["epsilon"] = ("not a guarantee: the Gumbel noise is calibrated from eps by the paper's formula, but "
                            "its eps*d metric-DP claim fails textdp's audit, so no metric bound is claimed "
                            "(guarantee.epsilon = inf)")
        units["per_document"] = "tokens are sanitized independently; L times worst_case_epsilon per document"
        units["kind"] = ("no guarantee from eps: guarantee.kind 'metric-dp' is only the class the ledger files it "
                         "under; its epsilon is inf (no metric claim)")
        return units

    def card_per_document(self) -> dict:
        """The card's per-document rule: no metric rule applies (the audit refutes it); plain DP composes."""
        return {"rule": "no eps*d metric rule (the paper's claim fails textdp's audit); documents of L tokens "
                        "differing anywhere: L * worst_case_epsilon (plain DP, composed over tokens)",
                "worst_case_epsilon_per_token": self.worst_case_epsilon()}

    def card_warnings(self) -> list[str]:
        self._prepare()
        w = ["truncated-gumbel: the paper's eps*d metric-DP claim fails textdp's audit (log-ratios far above eps*d "
             "on close and random word pairs); no metric guarantee is claimed, only the plain-DP worst case "
             "per token of its uniform share eta"]
        if self.output_vocabulary != "full":
            w.append("truncated-gumbel releases the input word itself when k = 0 (probability about 1/(n-1)): an "
                     "input that is not an output word is then released unchanged, so the worst case is infinite; "
                     "use --output-vocabulary full for the finite worst case of the uniform share")
        dom = self.formula_domain()
        if dom is not None and not dom["in_domain"]:
            grid = (0.1, 1.0, 3.0, 10.0, 15.0, 20.0, 50.0, 1000.0)
            bs = []
            for e in grid:
                try:
                    bs.append(f"{abs(mldp_scale(e, dom['n'], self.d_min, self.d_max)):.3g}")
                except (ValueError, OverflowError, ZeroDivisionError):  # pragma: no cover - defensive
                    bs.append("undefined")
            where = (f"Lambert W is evaluated at 2*a*d_max = {dom['lambert_argument']:.4g} < -1/e, where it is complex, "
                     "and its real part is used (as mldp-text does)" if dom["complex"] else
                     f"a = {dom['a']:.4g} <= 0")
            w.append(f"truncated-gumbel: eps does not control the noise here. At eps={self.epsilon:g} the paper's Gumbel "
                     f"scale formula is outside its domain (it needs eps > 2(1 + ln n)/d_min = {dom['threshold']:.4g}, "
                     f"n={dom['n']}, d_min={self.d_min:.4g}): {where}. The noise scale b={self.b:.4g} it gives is not "
                     f"monotone in eps: |b| = {', '.join(bs)} at eps = {', '.join(f'{e:g}' for e in grid)}; "
                     "pass --param scale=B to set the noise directly")
        if self.scale_flipped:
            w.append(f"the paper's Gumbel scale formula is negative at eps={self.epsilon:g} (mldp-text fails there); "
                     f"its absolute value b={self.b:.4g} is used")
        w.append("its Gumbel noise is continuous and drawn in floating point: the discretisation is not accounted "
                 "(the uniform share bounds every per-token log-ratio by worst_case_epsilon)")
        return w

    def formula_domain(self) -> dict | None:
        """Where ``eps`` lies against the domain of the paper's scale formula (:func:`mldp_scale`), or None
        when the formula does not set ``b`` (``scale`` given, or fewer than 2 words): ``a``, the
        ``threshold`` ``2(1 + ln n)/d_min`` that ``eps`` must exceed (``a > 0``), ``lambert_argument``
        ``2 a d_max``, ``complex`` (that argument is below ``-1/e``: Lambert W is complex there),
        ``in_domain`` (``a > 0``) and ``n``."""
        self._prepare()
        n = self._n_formula
        if n is None:
            return None
        thr = 2.0 * (1.0 + math.log(n)) / self.d_min
        a = (self.epsilon - thr) / 3.0
        x = 2.0 * a * self.d_max
        return {"a": a, "threshold": thr, "lambert_argument": x, "complex": x < -math.exp(-1.0),
                "in_domain": a > 0, "n": n}

    def parameters(self) -> dict:
        self._prepare()
        d = super().parameters()
        d.update(scale=self.b, min_distance=self.d_min, max_distance=self.d_max)
        return d


class _AuditedNoMetric(MetricDP):
    """MetricDP with infinite epsilon (no metric claim), described as such."""

    def describe(self) -> str:
        wc = self.worst_case_epsilon
        tail = "unbounded" if wc is None or math.isinf(wc) else f"{wc:.4g}"
        return (f"no guarantee from eps (epsilon = inf: the paper's eps·d metric-DP claim fails the audit; "
                f"'metric-dp' is only the ledger's filing class); plain-DP worst case per {self.unit}: {tail}")


REGISTERED = (
    ("truncated-gumbel", TruncatedGumbel,
     "TruncatedGumbel (BRR): truncated Gumbel noise on the k nearest words (paper's eps·d claim fails the audit: "
     "no metric guarantee)", ("token",)),
)
