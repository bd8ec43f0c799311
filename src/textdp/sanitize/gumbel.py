"""TruncatedGumbel (Carvalho, Vasiloudis, Feyisetan. *BRR: Preserving Privacy of Text Data Efficiently on
Device.* arXiv 2107.07923, 2021), as implemented by mldp-text 0.1.2 (``mldp_text/mechanisms.py``
``TruncatedGumbel``, ``mldp_text/utils.py`` ``truncated_Poisson``, ``truncated_Gumbel``): the k nearest
output words of the input, k from a truncated Poisson, each distance perturbed by truncated Gumbel noise,
the smallest noisy distance wins.

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
from textdp.sanitize.sampling import DistanceKernel

#: distinct input words per block of the nearest-word search, at most (B x V float64: 30 MB for 30,000 words;
#: fewer for larger vocabularies, within ``block_bytes``)
_BLOCK = 128


def _numba_top_k():
    """The numba top-k kernel (:mod:`textdp.sanitize._gumbel_kernels`), or None without numba (the numpy
    fallback :func:`_top_k_numpy` gives the same columns)."""
    global _TOP_K
    if _TOP_K is False:
        try:
            from textdp.sanitize._gumbel_kernels import _top_k
        except ImportError:  # pragma: no cover - numba is a core dependency
            _top_k = None
        _TOP_K = _top_k
    return _TOP_K


_TOP_K = False


def _top_k_numpy(g: np.ndarray, k: int) -> np.ndarray:
    """Columns of the ``k`` smallest entries of each row of ``g``, ordered by (value, column)."""
    cols = np.broadcast_to(np.arange(g.shape[1]), g.shape)
    order = np.lexsort((cols, g), axis=-1)
    return np.ascontiguousarray(order[:, :k])


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
        y_kernel = vec if n == len(vec) and np.array_equal(out, np.arange(len(vec))) else vec[out]
        self._dkernel = DistanceKernel(y_kernel, 2.0, self._geometry()[0])  # (2/2)^2 d^2 = d^2
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
        uniq, inverse = np.unique(rows, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(uniq)))])
        vectors = self.embeddings.vectors
        with _single_threaded_blas():  # one BLAS thread per GEMM: a multi-threaded one only spins here
            self._search(rows, uniq, inverse, order, bounds, k, key, streams, positions, out, progress, vectors)
        mix = np.flatnonzero(keyed.keyed_bernoulli(key, streams, positions, keyed.MIX, self.eta))
        if len(mix):  # the uniform share (class docstring)
            pick = keyed.keyed_uniform_below(key, streams[mix], positions[mix], keyed.MIX_PICK, n_out)
            out[mix] = out_rows[pick.astype(np.int64)]
        return out

    def _search(self, rows, uniq, inverse, order, bounds, k, key, streams, positions, out, progress, vectors):
        """Blocks of distinct words: distances (one float64 GEMM), the ``max k`` nearest output words, the
        noisy argmin for every occurrence with ``k > 0`` (written into ``out``)."""
        out_rows = self.output_rows
        n_out = len(out_rows)
        blk = max(1, min(_BLOCK, self._block_bytes() // (8 * n_out)))  # B x V float64 within block_bytes
        for s in range(0, len(uniq), blk):
            e = min(len(uniq), s + blk)
            occ = order[bounds[s]:bounds[e]]
            occ = occ[k[occ] > 0]
            if len(occ):
                kk = k[occ]
                kb = int(min(kk.max(), n_out))
                g = self._dkernel.scaled_sq(vectors[uniq[s:e]])
                np.maximum(g, 0.0, out=g)
                own = self._out_pos[uniq[s:e]]  # d(x, x) = 0 exactly for an output word
                has = np.flatnonzero(own >= 0)
                g[has, own[has]] = 0.0
                if _numba_top_k() is not None:
                    cand = _numba_top_k()(g, kb, np.empty((e - s, kb), dtype=np.int64))
                else:  # pragma: no cover
                    cand = _top_k_numpy(g, kb)
                dist = np.sqrt(np.take_along_axis(g, cand, axis=1))
                wi = inverse[occ] - s
                noise = self._gumbel(keyed.keyed_words(key, streams[occ], positions[occ], keyed.MAIN, kb))
                score = dist[wi] + noise
                score[np.arange(kb)[None, :] >= kk[:, None]] = np.inf
                out[occ] = out_rows[cand[wi, np.argmin(score, axis=1)]]
            if progress is not None:
                progress(int(bounds[e] - bounds[s]))

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
