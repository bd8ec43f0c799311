"""Embedding-perturbation mechanisms: noise added to the token's embedding, then the nearest word (or
one of the two nearest words) of the output vocabulary, as post-processing of the noisy vector.

* FBDD / MadLib = CMP (Feyisetan, Balle, Drake, Diethe. *Privacy- and Utility-Preserving Textual
  Analysis via Calibrated Multivariate Perturbations.* WSDM 2020, Sec. 3, Alg. 1).
* Mahalanobis (Xu, Aggarwal, Feyisetan, Teissier. *A Differentially Private Text Perturbation Method
  Using a Regularized Mahalanobis Metric.* PrivateNLP @ EMNLP 2020).
* Vickrey (Xu, Aggarwal, Feyisetan, Teissier. *On a Utilitarian Approach to Privacy Preserving Text
  Generation.* PrivateNLP @ NAACL 2021), on CMP or Mahalanobis noise.

The two Xu et al. papers were not available offline when this was written: their laws are taken from
their abstracts and the two reference implementations (pypantera 1.0.2, mldp-text 0.1.2; file and
line cited in each class), and their section, equation and theorem numbers are not cited.

All three share :class:`EmbeddingPerturbation`: the keyed noise of each token
(:func:`textdp.noise.keyed.keyed_laplace_vectors`, on the token's own stream), the exact nearest-word
search (:class:`textdp.sanitize.nearest.NearestSearch`: float64 scores, a bfloat16 or float32 GEMM
prefilter with a proven error bound; the result depends on the noisy point only) and the uniform share
``eta``.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.accounting import MetricDP
from textdp.errors import ParameterError
from textdp.noise import keyed, make_rng
from textdp.noise.keyed import ReleaseKey
from textdp.sanitize.base import TokenSanitizer, check_unit, run_blocks
from textdp.sanitize.nearest import SEARCH_ROWS, NearestSearch

#: the largest float64 copy of the distinct words' vectors a call gathers at once (beyond it: block by block)
_GATHER_BYTES = 64 * 2**20
#: what the card's ``nearest_search`` parameter says (the only search: exact; see docs/performance.md for the
#: cluster index that was measured and not kept)
NEAREST_SEARCH = "exact"


class EmbeddingPerturbation(TokenSanitizer):
    """Shared base: ``y = select(phi(x) + z)`` over the output vocabulary, ``z`` keyed noise of density
    ``∝ exp(-eps ||A^-1 z||)`` (``A = I`` for CMP, ``A = Sigma_lambda^{1/2}`` for Mahalanobis) drawn as
    ``A · r · u``, ``u`` a uniform direction (normalised Gaussians), ``r ~ Gamma(m, 1/eps)``, from the
    token's keyed stream; ``select`` the nearest output word (or the Vickrey rule).

    Float safety (issue 12): the float sampler clips each of the ``2m`` exponentials
    and Box-Muller radii it draws with probability ``2^-52`` (the realised law is within
    total variation ``tau = 2m 2^-52`` of the ideal one; the linear map ``A`` is post-processing
    and keeps that bound), which alone could put outputs outside the reachable set of one input
    and not of another (an infinite loss). So a uniform share ``eta`` (default ``2^-20``, an exact
    Bernoulli coin) replaces the output by a uniform word of the output vocabulary: every output
    then has probability at least ``eta/V`` from every input, and the truncation is charged as
    ``epsilon0 = ln((1 + a)/(1 - a))``, ``a = tau V / eta`` (mixing cannot raise the ideal loss:
    mediant inequality). The float discretisation of the continuous noise below the clipping is
    not accounted (no float implementation of continuous noise is exact); the uniform share caps
    its effect: no per-token log-ratio exceeds :meth:`worst_case_epsilon`.

    Nearest-word search (post-processing of the noisy vector): the exact nearest word(s) by the float64
    score ``s_j = q·y_j - ||y_j||^2 / 2`` (the largest score is the nearest word), computed in one fixed
    order, ties to the lowest column (:class:`textdp.sanitize.nearest.NearestSearch`: a bfloat16 (torch)
    or float32 (numpy) GEMM prefilter with a proven error bound picks the columns to score exactly; the
    result does not depend on it, on the CPU's GEMM kernels or on the threads). The card's parameters say
    ``nearest_search: exact``. Blocks of 256 tokens run on ``workers`` threads (BLAS and torch
    single-threaded in each); every token's noise comes from its own keyed stream, so the output does not
    depend on ``workers``. The tiles have a fixed size (1 MiB of scores per thread): ``block_bytes`` is
    not used. ``nearest_prefilter`` (class attribute, or ``$TEXTDP_NEAREST_PREFILTER``) chooses the
    prefilter: ``"auto"`` (torch for jobs of 20,000 tokens or more when installed), ``"torch"`` or ``"numpy"``.
    """

    supports_workers = True
    exact_probabilities = False
    #: prefilter of the nearest-word search (:data:`textdp.sanitize.nearest.PREFILTERS`; the output does not
    #: depend on it)
    nearest_prefilter = "auto"
    #: the noise radius is Gamma(m, 1/eps) (mean m/eps) and the nearest-word search's prefilter runs in float32
    #: (largest value 3.4e38; a query beyond 1e30 is scored exactly on every column, slowly): 1e-20 keeps
    #: radius x norm far inside it for tables with norms below 1e8
    epsilon_min = 1e-20
    epsilon_limit_reason = ("its noise vector has length about dim/ε and the nearest-word search runs in "
                            "float32, which overflows for smaller ε")
    #: how many nearest words the selection rule needs (1: the nearest; Vickrey: 2)
    _neighbours = 1

    def epsilon0_meaning(self) -> str:
        return "the accounted clipping of its float noise"

    def card_warnings(self) -> list[str]:
        return [f"{self.name} draws continuous noise in floating point: its clipping is charged in epsilon0, its "
                "discretisation is not accounted (the uniform share eta bounds every per-token log-ratio by "
                "worst_case_epsilon)"]

    def _prepare_mechanism(self) -> None:
        self._search = None

    # ------------------------------------------------------------------ noise
    def _noise_map(self) -> np.ndarray | None:
        """``A`` (float64 ``(m, m)``, symmetric) applied to the multivariate-Laplace noise, or None (CMP)."""
        return None

    def _keyed_noise(self, key: ReleaseKey, streams, positions) -> np.ndarray:
        z = keyed.keyed_laplace_vectors(key, streams, positions, keyed.MAIN, self.embeddings.dim, 1.0 / self.epsilon)
        a = self._noise_map()
        return z if a is None else z @ a

    def noise(self, n: int, rng=None) -> np.ndarray:
        """``(n, m)`` float64 noise vectors (fresh key from ``rng``, or the mechanism's next key), the
        ones :meth:`sample_rows` adds for entries ``0 .. n-1`` with the same key."""
        self._prepare()
        key = ReleaseKey.from_generator(make_rng(rng)) if rng is not None else self._next_key()
        return self._keyed_noise(key, np.arange(int(n)), np.zeros(int(n), dtype=np.int64))

    # ------------------------------------------------------------------ guarantee
    @property
    def truncation_epsilon0(self) -> float:
        """``ln((1 + a)/(1 - a))`` with ``a = 2m 2^-52 V / eta``: the accounted cost of the clipped
        float noise (class docstring); ``V`` the output vocabulary's size bound."""
        a = 2 * self.embeddings.dim * keyed.LAPLACE_TRUNCATION * self._n_out_bound() / self.eta
        return math.inf if a >= 1 else math.log1p(a) - math.log1p(-a)

    def _metric_name(self) -> str:
        return f"euclidean ({self.embeddings.source})"

    def parameters(self) -> dict:
        """The common parameters and ``nearest_search`` (:data:`NEAREST_SEARCH`: the search is exact)."""
        return {**super().parameters(), "nearest_search": NEAREST_SEARCH}

    def metric_distance(self, a, b) -> np.ndarray:
        """The guarantee's ``d`` between embedding rows ``a`` and ``b`` (broadcast int arrays), float64:
        here the Euclidean distance."""
        v = self.embeddings.vectors
        d = np.asarray(v[np.asarray(a)], dtype=np.float64) - np.asarray(v[np.asarray(b)], dtype=np.float64)
        return np.sqrt((d * d).sum(-1))

    def _metric_diameter(self) -> float:
        """An upper bound of the metric's diameter over the whole embedding table (every word with an
        embedding is an accepted input): ``2R`` for the Euclidean distance."""
        return 2.0 * self._geometry()[1]

    @property
    def guarantee(self) -> MetricDP:
        return MetricDP(epsilon=self.epsilon, metric=self._metric_name(), unit="token",
                        epsilon0=self.truncation_epsilon0, worst_case_epsilon=self.worst_case_epsilon())

    def worst_case_epsilon(self) -> float:
        """Plain DP per token (the uniform share bounds every ratio whatever the float noise does):
        :meth:`TokenSanitizer._mixed_worst_case` with this mechanism's metric diameter."""
        e0 = self.truncation_epsilon0
        wc = self._mixed_worst_case(self._n_out_bound(), e0)
        d_euclid, d_metric = 2.0 * self._geometry()[1], self._metric_diameter()
        if d_metric <= d_euclid or self.oov != "uniform":
            return wc
        # the pair term with the larger diameter: min(eps D, ln(hi/lo)) + e0 (as _mixed_worst_case)
        v = max(1, int(self._n_out_bound()))
        hi, lo = 1.0 - self.eta + self.eta / v, self.eta / v
        return max(wc, min(self.epsilon * d_metric, math.log(hi / lo)) + e0)

    # ------------------------------------------------------------------ search
    def _search_engine(self, queries: int | None = None) -> NearestSearch:
        """The output vocabulary's :class:`NearestSearch` (built on first use, per prefilter; ``queries``: the
        job's size, for the ``"auto"`` prefilter)."""
        from textdp.sanitize.nearest import resolve_prefilter

        kind = resolve_prefilter(self.nearest_prefilter, queries)
        if self._search is None or self._search.prefilter != kind:
            self._search = NearestSearch(self.embeddings.vectors[self.output_rows], kind)
        return self._search

    def _nearest(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Columns of the nearest (``k = 1``) or two nearest (``k = 2``) output words of the rows of
        ``q`` (float ``(n, m)``): int64 ``(n,)`` and ``(n,)`` (the second is -1 for ``k = 1`` or a
        one-word vocabulary). Exact float64 scores (:class:`NearestSearch`), ties to the lowest column."""
        cols, _ = self._search_engine(len(q))(q, k)
        return cols[:, 0], (cols[:, 1] if k == 2 else np.full(len(q), -1, dtype=np.int64))

    def _select(self, q: np.ndarray, first: np.ndarray, second: np.ndarray, key, streams, positions) -> np.ndarray:
        """Output column per row from the noisy points ``q`` (float64 ``(n, m)``) and their nearest
        (``first``) and second nearest (``second``) columns: the nearest word by default."""
        return first

    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        out = np.empty(len(rows), dtype=np.int64)
        if len(rows) == 0:
            return out
        search = self._search_engine(len(rows))
        # the distinct words' vectors gathered once from the (memory-mapped, strided) table, in float64, when
        # they take at most _GATHER_BYTES (64 MiB: 167,000 words of dimension 50); else block by block
        uniq, inverse = np.unique(rows, return_inverse=True)
        table = self.embeddings.vectors
        if len(uniq) * self.embeddings.dim * 8 <= _GATHER_BYTES:
            vectors, index = np.asarray(table[uniq], dtype=np.float64), inverse
        else:
            vectors, index = table, rows
        blocks = [(s, min(len(rows), s + SEARCH_ROWS)) for s in range(0, len(rows), SEARCH_ROWS)]

        def run(i):
            s, e = blocks[i]
            q = np.asarray(vectors[index[s:e]], dtype=np.float64) + self._keyed_noise(key, streams[s:e], positions[s:e])
            first, second = self._nearest(q, self._neighbours)
            out[s:e] = self._select(q, first, second, key, streams[s:e], positions[s:e])
            return e - s

        with search.single_threaded():
            run_blocks(run, len(blocks), self.workers, progress)
        out = self.output_rows[out]
        mix = np.flatnonzero(keyed.keyed_bernoulli(key, streams, positions, keyed.MIX, self.eta))
        if len(mix):  # the uniform share (class docstring)
            pick = keyed.keyed_uniform_below(key, streams[mix], positions[mix], keyed.MIX_PICK, len(self.output_rows))
            out[mix] = self.output_rows[pick.astype(np.int64)]
        return out


class FBDD(EmbeddingPerturbation):
    """FBDD / MadLib = CMP (Feyisetan et al. 2020, Sec. 3, Alg. 1): ``y = argmin_v ||phi(v) - (phi(x) + z)||``
    over the output vocabulary, with noise ``z`` of density ``∝ exp(-eps·||z||)``
    drawn as a uniform direction (normalised Gaussians) times a
    ``Gamma(shape=m, scale=1/eps)`` radius (``m`` the embedding dimension), from the
    token's keyed stream (:func:`textdp.noise.keyed.keyed_laplace_vectors`).

    Guarantee: ``eps·d(x,x') + epsilon0`` metric LDP per token, ``d`` Euclidean (no ``/2``; the
    nearest-word step is post-processing), ``epsilon0`` the accounted clipping of the float noise and
    a uniform share ``eta`` (:class:`EmbeddingPerturbation`). No closed-form output distribution: use
    :meth:`estimate_probabilities`. Cost: one nearest-neighbour search per token occurrence (low-precision
    GEMMs of 256 tokens against the output vocabulary, then the exact score of a few candidates).
    """

    name = "fbdd"
    paper = "Feyisetan et al., WSDM 2020, Sec. 3, Alg. 1 (FBDD/MadLib, CMP)"


def _check_lam(lam) -> float:
    return check_unit(lam, "lam (the Mahalanobis regularisation lambda)")


def regularized_covariance(vectors: np.ndarray, lam: float) -> np.ndarray:
    """``Sigma_lambda = lam·Sigma + (1 - lam)·I`` (Xu et al. 2020), float64 ``(m, m)``, with
    ``Sigma`` the covariance (divisor ``n``) of ``vectors`` (``(n, m)``) divided by the mean of its
    diagonal (so ``trace Sigma = m``, the scale of ``I``; the normalisation of pypantera's
    ``mahalanobis.py`` lines 63-64)."""
    x = np.asarray(vectors, dtype=np.float64)
    x = x - x.mean(axis=0)
    cov = (x.T @ x) / max(1, len(x))
    scale = float(np.mean(np.diag(cov)))
    cov = cov / scale if scale > 0 else np.eye(x.shape[1])
    return lam * cov + (1.0 - lam) * np.eye(x.shape[1])


class Mahalanobis(EmbeddingPerturbation):
    """Mahalanobis mechanism (Xu et al. 2020): ``y = argmin_v ||phi(v) - (phi(x) + z)||``
    with elliptical noise ``z = Sigma_lambda^{1/2} · r · u``: ``u`` a uniform direction, ``r ~ Gamma(m,
    1/eps)``, ``Sigma_lambda = lam·Sigma + (1 - lam)·I`` and ``Sigma`` the covariance of the output
    vocabulary's embeddings scaled to mean variance 1 (:func:`regularized_covariance`; public data
    under the default public output vocabulary). The density of ``z`` is ``∝ exp(-eps ||z||_RM)``,
    ``||z||_RM = sqrt(z^T Sigma_lambda^{-1} z)`` (the paper's regularized Mahalanobis norm; change of
    variables from the multivariate Laplace ``r·u``).

    Guarantee (the paper's; it also follows from the density by the triangle inequality of
    ``||.||_RM``): ``eps·d_RM(x,x') + epsilon0`` metric LDP per token, ``d_RM(x,x') =
    ||phi(x) - phi(x')||_RM``; ``epsilon0`` the accounted float clipping with a uniform share ``eta``
    (:class:`EmbeddingPerturbation`). ``lam = 0`` is CMP (FBDD) exactly: the same draws for the same
    key. ``lam`` in [0, 1], default 0.2 (mldp-text 0.1.2's default, ``mechanisms.py`` line 329; the paper
    treats lambda as a tuning parameter); at ``lam = 1`` with a singular ``Sigma`` the metric is infinite
    off its range (the noise never leaves it).

    Differences from the peers (tests/sanitize/test_perturbation.py): pypantera 1.0.2 builds the same
    ``Sigma_lambda^{1/2}`` but renormalises ``Sigma^{1/2} u`` to unit length (``mahalanobis.py`` line 85),
    so its ``||z||`` is Gamma(m, 1/eps) and its density is not ``∝ exp(-eps ||z||_RM)``; mldp-text draws the
    paper's law but scales ``Sigma`` by the variance of all entries with divisor ``n - 1``
    (``mechanisms.py`` line 343), a constant factor away from ours.
    """

    name = "mahalanobis"
    paper = "Xu et al., PrivateNLP 2020 (regularized Mahalanobis metric)"

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, lam: float = 0.2, **kwargs):
        self.lam = _check_lam(lam)
        super().__init__(embeddings, epsilon, **kwargs)

    def _prepare_mechanism(self) -> None:
        super()._prepare_mechanism()
        sig = regularized_covariance(self.embeddings.vectors[self.output_rows], self.lam)
        w, u = np.linalg.eigh(sig)
        w = np.clip(w, 0.0, None)
        self._sigma_lambda = sig
        self._eig = (w, u)
        self._sqrt_sigma = (u * np.sqrt(w)) @ u.T
        self._min_eigenvalue = float(w.min())

    def _noise_map(self) -> np.ndarray | None:
        return self._sqrt_sigma

    def metric_distance(self, a, b) -> np.ndarray:
        """``d_RM`` between embedding rows ``a`` and ``b`` (broadcast int arrays): float64."""
        self._prepare()
        v = self.embeddings.vectors
        d = np.asarray(v[np.asarray(a)], dtype=np.float64) - np.asarray(v[np.asarray(b)], dtype=np.float64)
        w, u = self._eig
        c2 = (d @ u) ** 2  # coordinates in Sigma_lambda's eigenbasis; off its range (w = 0) the metric is infinite
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(w > 0, c2 / np.where(w > 0, w, 1.0), np.where(c2 > 0, np.inf, 0.0))
        return np.sqrt(terms.sum(-1))

    def _metric_name(self) -> str:
        return (f"regularized mahalanobis (lambda={self.lam:g}; Sigma: covariance of the output vocabulary's "
                f"embeddings scaled to mean variance 1; {self.embeddings.source})")

    def _metric_diameter(self) -> float:
        self._prepare()
        if self._min_eigenvalue <= 0:
            return math.inf
        return 2.0 * self._geometry()[1] / math.sqrt(self._min_eigenvalue)

    def parameters(self) -> dict:
        return {**super().parameters(), "lam": self.lam}

    def card_units(self) -> dict:
        units = super().card_units()
        units["epsilon"] = ("per token, per unit of the regularized Mahalanobis distance d_RM(x,x') = "
                            "sqrt((x-x')^T Sigma_lambda^-1 (x-x')), Sigma_lambda = lam*Sigma + (1-lam)*I, Sigma the "
                            "covariance of the output vocabulary's embeddings scaled to mean variance 1: "
                            "P[M(x)=y] <= exp(eps*d_RM(x,x') + epsilon0) P[M(x')=y]")
        units["per_document"] = units["per_document"].replace("d(x_i,x'_i)", "d_RM(x_i,x'_i)")
        if "epsilon0" in units:
            units["epsilon0"] = units["epsilon0"].replace("eps*d(x,x')", "eps*d_RM(x,x')")
        return units


#: the noise laws Vickrey runs on
VICKREY_NOISES = ("cmp", "mahalanobis")


class Vickrey(Mahalanobis):
    """Vickrey mechanism (Xu et al. 2021; the rule as in pypantera's ``vickrey.py`` line 98): the noisy
    point ``q = phi(x) + z`` of CMP
    (``noise="cmp"``, default) or Mahalanobis (``noise="mahalanobis"``, ``lam``) noise, then its two
    nearest output words ``w1`` (distance ``d1``) and ``w2`` (``d2 >= d1``); output ``w1`` with
    probability ``p = (1 - t)·d2 / (t·d1 + (1 - t)·d2)``, else ``w2`` (``p = 1`` when the denominator
    is 0: ``t = 1`` and ``q`` exactly on ``w1``).

    ``t`` in [0, 1] (default 0.5: ``p = d2 / (d1 + d2)``): ``t = 0`` always outputs ``w1`` (the plain
    CMP/Mahalanobis mechanism, the same draws for the same key); ``t = 1`` always outputs ``w2`` (the
    second nearest word of the noisy point); the paper tunes ``t`` per task.

    Guarantee: that of the noise, ``eps·d(x,x') + epsilon0`` metric LDP per token with ``d`` Euclidean
    (CMP) or ``d_RM`` (Mahalanobis): the top-2 selection and the coin are post-processing of the noisy
    point with randomness independent of ``x``. The coin is an exact keyed Bernoulli of the float
    ``p`` (:func:`textdp.noise.keyed.keyed_bernoulli`'s comparison, vectorised over tokens: a 62-bit
    word against ``p``'s binary expansion, further words on a tie); ``p`` itself is computed in float64
    from the float64 distances of the exact top two (:class:`textdp.sanitize.nearest.NearestSearch`).

    Differences from the peers (tests/sanitize/test_perturbation.py): pypantera 1.0.2 (``vickrey.py``
    lines 95-99) applies the same rule to ``np.argpartition(d, 2)[:, :2]``, whose order numpy does not
    document (numpy 2.x returns it sorted, so its law agrees on the same noisy points); mldp-text 0.1.2
    (``mechanisms.py`` lines 247-255) skips the nearest word when it is the input word itself (the
    selection then depends on ``x``, not only on the noisy point: not post-processing) and picks among
    the two with ``softmax(-t·d)``, ``t`` a vector (default ``[1, 0]``): not the paper's rule.
    """

    name = "vickrey"
    paper = "Xu et al., PrivateNLP 2021 (Vickrey mechanism)"
    _neighbours = 2

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, t: float = 0.5, noise: str = "cmp",
                 lam: float | None = None, **kwargs):
        self.t = check_unit(t, "t (the Vickrey threshold)")
        if noise not in VICKREY_NOISES:
            raise ParameterError(f"noise must be one of {', '.join(VICKREY_NOISES)}, got {noise!r}")
        if noise == "cmp" and lam is not None:
            raise ParameterError("lam applies to noise=mahalanobis only (vickrey's noise is cmp)")
        self.noise_law = noise
        super().__init__(embeddings, epsilon, lam=0.2 if lam is None else lam, **kwargs)

    def _noise_map(self) -> np.ndarray | None:
        return self._sqrt_sigma if self.noise_law == "mahalanobis" else None

    def _prepare_mechanism(self) -> None:
        if self.noise_law == "mahalanobis":
            super()._prepare_mechanism()
        else:
            EmbeddingPerturbation._prepare_mechanism(self)

    def _metric_name(self) -> str:
        return super()._metric_name() if self.noise_law == "mahalanobis" else EmbeddingPerturbation._metric_name(self)

    def metric_distance(self, a, b) -> np.ndarray:
        """``d_RM`` (Mahalanobis noise) or the Euclidean distance (CMP noise) between embedding rows."""
        if self.noise_law == "mahalanobis":
            return super().metric_distance(a, b)
        return EmbeddingPerturbation.metric_distance(self, a, b)

    def _metric_diameter(self) -> float:
        if self.noise_law == "mahalanobis":
            return super()._metric_diameter()
        return EmbeddingPerturbation._metric_diameter(self)

    def parameters(self) -> dict:
        p = {**EmbeddingPerturbation.parameters(self), "t": self.t, "noise": self.noise_law}
        if self.noise_law == "mahalanobis":
            p["lam"] = self.lam
        return p

    def card_units(self) -> dict:
        return super().card_units() if self.noise_law == "mahalanobis" else EmbeddingPerturbation.card_units(self)

    def first_probability(self, d1, d2) -> np.ndarray:
        """``p = (1 - t) d2 / (t d1 + (1 - t) d2)`` (1 where the denominator is 0), float64."""
        from textdp.sanitize import _nearest_kernels as kn

        d1, d2 = np.broadcast_arrays(np.asarray(d1, dtype=np.float64), np.asarray(d2, dtype=np.float64))
        out = np.empty(d1.shape, dtype=np.float64)
        kn.vickrey_probabilities(np.ascontiguousarray(d1).reshape(-1), np.ascontiguousarray(d2).reshape(-1),
                                 self.t, out.reshape(-1))
        return out

    def _select(self, q, first, second, key, streams, positions) -> np.ndarray:
        from textdp.sanitize import _nearest_kernels as kn

        if not (second >= 0).any():
            return first
        # the output words' vectors by column, in memory (the table's values, exactly)
        y = (self._search or self._search_engine(len(q))).y
        n = len(q)
        w1, w2, p = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float64)
        kn.vickrey_pairs(np.ascontiguousarray(q, dtype=np.float64), np.ascontiguousarray(first, dtype=np.int64),
                         np.ascontiguousarray(second, dtype=np.int64), y, self.t, w1, w2, p)
        keep_first = keyed.keyed_bernoulli_per_token(key, streams, positions, keyed.COIN, p)
        return np.where(keep_first, w1, w2)


REGISTERED = (
    ("fbdd", FBDD, "FBDD/MadLib (CMP): multivariate Laplace noise + nearest word (eps·d metric LDP per token)",
     ("token", "metric-dp")),
    ("mahalanobis", Mahalanobis, "Mahalanobis: elliptical noise Sigma_lambda^1/2 (Xu et al. 2020) + nearest word "
     "(eps·d_RM metric LDP per token)", ("token", "metric-dp")),
    ("vickrey", Vickrey, "Vickrey: CMP or Mahalanobis noise, then the nearest or second nearest word by the "
     "threshold t (Xu et al. 2021; the noise's metric LDP per token)", ("token", "metric-dp")),
)
