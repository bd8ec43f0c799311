"""1-Diffractor (Meisenbacher, Chevli, Vladika, Matthes. *1-Diffractor: Efficient and Utility-Preserving
Text Obfuscation Leveraging Word-Level Metric Differential Privacy.* ACM WPES 2024, arXiv 2405.01678;
reference code github.com/sjmeis/Diffractor): the output vocabulary is ordered into ``K`` one-dimensional
lists (greedy nearest-neighbour chains over the embeddings), each token takes one list uniformly at
random, and two-sided geometric noise (the discrete Laplace law) is added to its index in that list,
clamped to the list's ends.

The law, the guarantee and how textdp differs from the reference code are in :class:`Diffractor`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np

from textdp.accounting import MetricDP
from textdp.errors import ParameterError
from textdp.noise import keyed
from textdp.sanitize.base import TokenSanitizer

#: scale of the integer weights of the geometric part of the law (the uniform share comes on top)
_SCALE_BITS = 60
#: bound on the relative float error of one computed weight ``S·c·alpha^d`` (exp/log of arguments up
#: to ~800 in magnitude: about 800·2^-53 < 2^-43, taken with a margin)
_WEIGHT_REL_ERROR = 2.0**-40
#: candidates per word proposed by the float32 GEMM when building a list
_CANDIDATES = 32
#: version of the list construction (part of the on-disk cache key)
_LISTS_VERSION = "greedy-chain-v1"


class Diffractor(TokenSanitizer):
    """1-Diffractor (Meisenbacher et al. 2024, arXiv 2405.01678, the method section; the law is that of
    the "geometric" method of the reference code, sjmeis/Diffractor ``src/diffractor/core.py``) over the output vocabulary ``V_out`` (``N`` words).

    **Lists.** ``K = n_lists`` orderings of ``V_out`` (each a permutation), built once from the public
    embedding table, deterministically: list ``k`` is the greedy nearest-neighbour chain (the
    paper's construction: start at one word, then repeatedly append the nearest word not yet in
    the list; exact Euclidean distance of the raw vectors, ties to the earlier output column)
    started at the output word with the ``k``-th largest norm (the reference code's "outside"
    start: the words farthest from the origin; its other variant draws the starts at random,
    unseeded). The paper takes one list per embedding model (five models); with the one table the
    generic API takes, the ``K`` lists differ by their start only. Lists are cached on disk
    (``$TEXTDP_CACHE/diffractor``) keyed by the SHA-256 of the output words and their vectors.

    **Law.** For input ``x``: pick list ``k`` uniformly (an exact keyed uniform); let ``i`` be
    ``x``'s index in list ``k``; output the word at index ``j = clamp(i + Z, 0, N - 1)``,
    ``Z`` two-sided geometric ``P(Z = z) = (1 - a)/(1 + a) a^|z|``, ``a = exp(-eps)`` (sensitivity
    1, the reference code's default; its current ``apply_privacy_mechanism`` draws the difference of
    two ``Geometric(p = 1 - e^-eps)`` and clips the index to the list; its first version,
    ``Diffractor.py``, used diffprivlib's ``GeometricTruncated`` bounded to the list). So
    ``P_k(j | i) = (1 - a)/(1 + a) a^|j - i|`` inside the list and ``a^i/(1 + a)``,
    ``a^(N-1-i)/(1 + a)`` at its two ends. Float safety: the law is sampled exactly from integer
    weights ``floor(S·P_k(j|i)) + u`` (``S = 2^60``, ``u = floor(eta·S/N)``: a uniform share
    about ``eta``, default ``2^-20``) by inversion with one exact keyed uniform per token (prefix
    sums of the geometric weights, a binary search; no per-token loop over the vocabulary);
    :meth:`probabilities` returns exactly these integer weights normalised, mixed over the lists.
    An input word with an embedding that is not an output word takes the position of its nearest
    output word (exact Euclidean distance, ties to the earlier column): public, deterministic
    pre-processing, so its law is that word's law.

    **Guarantee.** Per list, clamping is post-processing of ``i + Z``, so
    ``P_k(j|i) <= exp(eps·|i - i'|) P_k(j|i')``; the list is chosen independently of the input,
    so for the mixture ``p(y|x) <= exp(eps·d(x,x') + epsilon0) p(y|x')`` with
    ``d(x, x') = max_k |pos_k(x) - pos_k(x')|`` (the largest index distance over the ``K`` lists; a
    metric on ``V_out``, a pseudometric on inputs mapped to the same output word). This is NOT the
    Euclidean embedding distance: two words close in the embedding space can lie far apart in a
    list (a chain breaks where it jumps), and ``eps`` here is per list position, not per unit of
    distance. The paper states its guarantee per list (eps-metric DP on the 1-D index); the
    mixture's metric is the max over lists (a word's neighbours in one list are protected only as
    well as its farthest position difference over all lists). ``epsilon0`` (about ``1/u + N/S``,
    ~3e-8 by default) is the accounted cost of the integer rounding (:attr:`rounding_epsilon0`);
    mixing the uniform share cannot raise any ratio. ``guarantee.worst_case_epsilon`` (plain DP
    per token) is an upper bound: ``min(eps·(N - 1) + epsilon0, ln(hi/lo))`` for two words, with
    ``hi``/``lo`` the largest and smallest realised probability, and the uniform OOV replacement
    against any word. With ``output_vocabulary="corpus"`` both depend on the corpus's number of
    distinct words ``N``, so the guarantee (and the card) gives instead their upper bounds over every
    ``N`` up to the embedding table's size (public data; :meth:`_public_bounds`).

    **Differences from the reference code** (sjmeis/Diffractor ``core.py``): it keeps stop words
    and words outside its lists unchanged (released unprotected); textdp sanitizes every token (OOV
    tokens by the ``oov`` policy). It perturbs the token in every list and picks one candidate
    with an unkeyed generator; textdp picks the list first (the same law) from the token's keyed
    stream. Its TEM method is not implemented here (the ``tem`` sanitizer is TEM over embedding
    distances).

    Parameters: ``n_lists`` (``K``, integer >= 1, default 3), plus the common ones of
    :class:`TokenSanitizer`. Cost: building the lists once per table (about ``N^2 m`` flops of
    float32 GEMM plus the chain, about 12 s of CPU for the 30,000-word default vocabulary of GloVe
    6B 50d; quadratic in ``N``, so the full 400k-word table takes on the order of 180 times that;
    cached), then O(log N) integer work per token, plus one nearest-word search per distinct input
    word outside the output vocabulary.
    """

    name = "1-diffractor"
    paper = ("Meisenbacher et al., ACM WPES 2024 (arXiv 2405.01678), 1-Diffractor, geometric method "
             "(law as in the reference code sjmeis/Diffractor)")
    supports_workers = False

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 1.0, *, n_lists: int = 3, **kwargs):
        if isinstance(n_lists, bool):
            raise ParameterError(f"n_lists must be an integer >= 1, got {n_lists!r}")
        try:
            k = int(n_lists)
        except (TypeError, ValueError):
            raise ParameterError(f"n_lists must be an integer >= 1, got {n_lists!r}") from None
        if k != n_lists or k < 1:
            raise ParameterError(f"n_lists must be an integer >= 1, got {n_lists!r}")
        self.n_lists = k
        super().__init__(embeddings, epsilon, **kwargs)

    # ------------------------------------------------------------------ parameters and card
    def parameters(self) -> dict:
        d = super().parameters()
        d["n_lists"] = self.n_lists
        return d

    def epsilon0_meaning(self) -> str:
        return "the accounted rounding of the integer weights the geometric law is sampled from"

    @property
    def metric_name(self) -> str:
        return (f"1-Diffractor list index: max over {self.n_lists} greedy nearest-neighbour list(s) of "
                f"|position difference| ({self.embeddings.source})")

    def card_units(self) -> dict:
        units = super().card_units()
        units["epsilon"] = ("per token, per position of list-index distance: P[M(x)=y] <= exp(eps*d(x,x') + "
                            "epsilon0) P[M(x')=y] with d(x,x') = max over the lists of |index of x - index of x'| "
                            "(not the Euclidean embedding distance)")
        units["per_document"] = ("tokens are sanitized independently; two documents of equal length L are "
                                 "eps*sum_i d(x_i,x'_i)-indistinguishable (+ L*eps0)")
        return units

    def card_warnings(self) -> list[str]:
        return [f"1-diffractor's epsilon is per position in its {self.n_lists} ordered word list(s), not per unit "
                "of embedding distance: words next to each other in the embedding space can lie far apart in a "
                "list, and epsilon values are not comparable with the Euclidean metric-DP mechanisms"]

    # ------------------------------------------------------------------ preparation
    def _prepare_mechanism(self) -> None:
        n = len(self.output_rows)
        self._lists = self._build_lists()  # (K, N) output columns, list order
        pos = np.empty_like(self._lists)
        for k in range(self.n_lists):
            pos[k, self._lists[k]] = np.arange(n)
        self._positions = pos  # (K, N): index of output column c in list k
        self._nn = np.full(len(self.embeddings), -2, dtype=np.int64)  # nearest output column (-2: not computed)
        self._nn[self.output_rows] = np.arange(n)
        self._weights()

    def _weights(self) -> None:
        """The integer law (class docstring): ``A[d]`` (geometric weight at offset ``d`` inside the
        list), ``B[m]`` (clamped mass at an end ``m`` positions away), prefix sums, ``u`` and the
        totals ``T[i]`` per input index."""
        n = len(self.output_rows)
        eps = self.epsilon
        scale = float(2**_SCALE_BITS)
        self._u = max(1, int(math.floor(self.eta * scale / n)))
        if n == 1:
            self._A = np.zeros(1, dtype=np.int64)
            self._B = np.zeros(1, dtype=np.int64)
            self._PA = np.zeros(2, dtype=np.int64)
            self._T = np.array([1], dtype=np.int64)
            return
        d = np.arange(n, dtype=np.float64)
        log_c = math.log(-math.expm1(-eps)) - math.log1p(math.exp(-eps))  # (1 - a)/(1 + a)
        log_b = -math.log1p(math.exp(-eps))  # 1/(1 + a)
        ls = math.log(scale)
        with np.errstate(under="ignore"):
            A = np.floor(np.exp(ls + log_c - eps * d))
            B = np.floor(np.exp(ls + log_b - eps * d))
        self._A = A.astype(np.int64)
        self._B = B.astype(np.int64)
        self._PA = np.concatenate([[0], np.cumsum(self._A)]).astype(np.int64)
        i = np.arange(n, dtype=np.int64)
        self._T = self._cumulative(i, np.full(n, n - 1, dtype=np.int64))

    def _cumulative(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """``C_i(j) = sum_{t <= j} w_i(t)`` (int64, vectorised over pairs), ``w_i`` the integer
        weights of index ``t`` given input index ``i``."""
        n = len(self.output_rows)
        u, A, B, PA = self._u, self._A, self._B, self._PA
        c = B[i] + u  # t = 0
        m = np.minimum(j, n - 2)  # interior t = 1..m
        has = m >= 1
        left = np.clip(np.minimum(m, i - 1), 0, None)  # t = 1..left, offsets i - t
        c = c + np.where(has, PA[i] - PA[i - left], 0)
        c = c + np.where(has & (i >= 1) & (i <= m), A[0], 0)
        right = np.where(has & (m > i), m - i, 0)  # t = i+1..m, offsets 1..m-i
        c = c + np.where(right > 0, PA[np.minimum(right + 1, n)] - PA[1], 0)
        c = c + u * np.maximum(m, 0)
        c = c + np.where(j >= n - 1, B[n - 1 - i] + u, 0)  # t = N - 1
        return c.astype(np.int64)

    def _row_weights(self, i: int) -> np.ndarray:
        """Integer weights ``w_i(t)`` for every index ``t`` (int64 ``(N,)``)."""
        n = len(self.output_rows)
        if n == 1:
            return np.ones(1, dtype=np.int64)
        t = np.arange(n)
        w = self._A[np.abs(t - i)] + self._u
        w[0] = self._B[i] + self._u
        w[n - 1] = self._B[n - 1 - i] + self._u
        return w

    @property
    def rounding_epsilon0(self) -> float:
        """Accounted extra per-token loss of the integer weights over the ideal clamped law mixed with
        the uniform share: ``ln((1+r)/(1-r)) - ln(1 - 1/((1-r) u)) + ln(T_max/T_min)``, ``r`` the
        relative float error of one weight (``2^-40``), ``u`` the uniform weight, ``T`` the totals."""
        self._prepare()
        if len(self.output_rows) == 1:
            return 0.0
        r = _WEIGHT_REL_ERROR
        t = self._T
        return (math.log1p(r) - math.log1p(-r) - math.log1p(-1.0 / ((1.0 - r) * self._u))
                + math.log(int(t.max()) / int(t.min())))

    # ------------------------------------------------------------------ lists
    def _build_lists(self) -> np.ndarray:
        out = self.output_rows
        y = np.ascontiguousarray(self.embeddings.vectors[out], dtype=np.float64)
        key = self._lists_key(y)
        path = None
        if len(out) >= 2048:  # small tables are rebuilt in milliseconds
            from textdp.cache import cache_dir

            path = cache_dir("diffractor", create=False) / f"lists-{key[:32]}.npy"
            try:
                cached = np.load(path, allow_pickle=False)
                if cached.shape == (self.n_lists, len(out)) and _are_permutations(cached):
                    return cached.astype(np.int64)
            except (OSError, ValueError):
                pass
        lists = build_lists(y, self.n_lists)
        if path is not None:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as f:
                    np.save(f, lists.astype(np.int32))
                os.replace(tmp, path)
            except OSError:  # a read-only cache only costs the rebuild next time
                try:
                    tmp.unlink()
                except OSError:
                    pass
        return lists

    def _lists_key(self, y: np.ndarray) -> str:
        h = hashlib.sha256()
        h.update(json.dumps({"v": _LISTS_VERSION, "k": self.n_lists, "n": len(y), "m": y.shape[1]}).encode())
        words = self.embeddings.words
        h.update("\n".join(words[r] for r in self.output_rows.tolist()).encode("utf-8", "surrogatepass"))
        h.update(np.ascontiguousarray(y).tobytes())
        return h.hexdigest()

    @property
    def lists(self) -> list[list[str]]:
        """The ``K`` ordered lists of output words (public: built from the table alone)."""
        self._prepare()
        w = self.embeddings.words
        return [[w[r] for r in self.output_rows[lst].tolist()] for lst in self._lists]

    # ------------------------------------------------------------------ input positions
    def _input_cols(self, rows: np.ndarray) -> np.ndarray:
        """Output column of each input row: itself when it is an output word, else its nearest output
        word (exact float64 distance, ties to the earlier column; computed once per row)."""
        cols = self._nn[rows]
        todo = np.unique(rows[cols == -2])
        if len(todo):
            self._nn[todo] = nearest_columns(np.asarray(self.embeddings.vectors[todo], dtype=np.float64),
                                             np.asarray(self.embeddings.vectors[self.output_rows], dtype=np.float64))
            cols = self._nn[rows]
        return cols

    # ------------------------------------------------------------------ sampling and law
    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        n = len(self.output_rows)
        cols = self._input_cols(rows)
        if self.n_lists > 1:
            k = keyed.keyed_uniform_below(key, streams, positions, keyed.MIX_PICK, self.n_lists).astype(np.int64)
        else:
            k = np.zeros(len(rows), dtype=np.int64)
        if n == 1:
            if progress is not None:
                progress(len(rows))
            return np.full(len(rows), self.output_rows[0], dtype=np.int64)
        i = self._positions[k, cols]
        total = self._T[i]
        u = keyed.keyed_uniform_below(key, streams, positions, keyed.MAIN, total).astype(np.int64)
        # smallest j with C_i(j) > u (binary search; C_i(N-1) = T_i > u)
        lo = np.zeros(len(rows), dtype=np.int64)
        hi = np.full(len(rows), n - 1, dtype=np.int64)
        while True:
            open_ = lo < hi
            if not open_.any():
                break
            mid = (lo + hi) // 2
            above = self._cumulative(i, mid) > u
            hi = np.where(open_ & above, mid, hi)
            lo = np.where(open_ & ~above, mid + 1, lo)
        if progress is not None:
            progress(len(rows))
        return self.output_rows[self._lists[k, lo]]

    def probabilities(self, words) -> np.ndarray:
        """The exact law sampled: float64 ``(k, V_out)``, the mixture over the lists of the integer
        weights normalised (rows sum to 1)."""
        rows = self._known_rows(words)
        cols = self._input_cols(rows)
        n = len(self.output_rows)
        out = np.zeros((len(rows), n))
        for r, c in enumerate(cols.tolist()):
            for k in range(self.n_lists):
                i = int(self._positions[k, c])
                w = self._row_weights(i)
                out[r, self._lists[k]] += w / float(int(self._T[i]) if n > 1 else 1) / self.n_lists
        return out

    def ideal_probabilities(self, words) -> np.ndarray:
        """The paper's law in float64 (clamped two-sided geometric on the index, no uniform share),
        mixed over the lists: ``(k, V_out)``."""
        rows = self._known_rows(words)
        cols = self._input_cols(rows)
        n = len(self.output_rows)
        a = math.exp(-self.epsilon)
        t = np.arange(n)
        out = np.zeros((len(rows), n))
        for r, c in enumerate(cols.tolist()):
            for k in range(self.n_lists):
                i = int(self._positions[k, c])
                if n == 1:
                    p = np.ones(1)
                else:
                    p = (1 - a) / (1 + a) * a ** np.abs(t - i).astype(np.float64)
                    p[0] = a**i / (1 + a)
                    p[n - 1] = a ** (n - 1 - i) / (1 + a)
                out[r, self._lists[k]] += p / self.n_lists
        return out

    def distance(self, word_a, word_b) -> int:
        """The guarantee's metric ``d(x, x') = max_k |pos_k(x) - pos_k(x')|`` (list positions)."""
        self._prepare()
        ca, cb = self._input_cols(self.input_rows([word_a, word_b]))
        return int(np.abs(self._positions[:, ca] - self._positions[:, cb]).max())

    # ------------------------------------------------------------------ guarantee
    @property
    def guarantee(self) -> MetricDP:
        if self.output_vocabulary == "corpus":  # the realised figures are functions of the corpus's N
            e0, wc = self._public_bounds()
        else:
            e0, wc = self.rounding_epsilon0, self.worst_case_epsilon()
        return MetricDP(epsilon=self.epsilon, metric=self.metric_name, unit="token", epsilon0=e0,
                        worst_case_epsilon=wc)

    def _public_bounds(self) -> tuple[float, float]:
        """``(epsilon0, worst_case_epsilon)`` bounds that hold for every output vocabulary of ``N`` words,
        ``2 <= N <= `` :meth:`_n_out_bound` (the embedding table's size): public, so the card of a
        corpus-vocabulary release does not reveal the corpus's number of distinct words. For each
        ``N``: ``u = max(1, floor(eta S / N))`` exactly; every total ``T_i`` (``N`` floored weights of
        ``S`` times a law that sums to 1, each within a relative ``r`` of its value, plus ``N u``)
        lies in ``[S(1 - r) - N + N u, S(1 + r) + N u]``; ``B[0]`` does not depend on ``N``. These
        bound the terms of :attr:`rounding_epsilon0` and :meth:`worst_case_epsilon`; the maximum over
        ``N`` is reported (each realised figure is at most its bound at the realised ``N``)."""
        wc_oov = self.oov == "uniform"
        nb = max(1, int(self._n_out_bound()))
        if nb == 1:
            return 0.0, (0.0 if wc_oov else math.inf)
        scale = float(2**_SCALE_BITS)
        r = _WEIGHT_REL_ERROR
        n = np.arange(2, nb + 1, dtype=np.float64)
        u = np.maximum(1.0, np.floor(self.eta * scale / n))
        t_lo = scale * (1.0 - r) - n + n * u
        t_hi = scale * (1.0 + r) + n * u
        e0 = (math.log1p(r) - math.log1p(-r) - np.log1p(-1.0 / ((1.0 - r) * u)) + np.log(t_hi / t_lo))
        b0 = scale / (1.0 + math.exp(-self.epsilon)) * (1.0 + r)  # >= B[0], whatever N
        hi = np.minimum(1.0, (b0 + u) / t_lo)
        lo = u / t_hi
        pair = np.minimum(self.epsilon * (n - 1) + e0, np.log(hi / lo))
        oov = np.maximum(np.log(n * hi), -np.log(n * lo))
        e0_max = float(e0.max())
        if not wc_oov:
            return e0_max, math.inf
        return e0_max, float(np.maximum(pair, oov).max())

    def worst_case_epsilon(self) -> float:
        """Upper bound of the largest per-token log-ratio over every pair of accepted inputs (plain
        DP): two words: ``min(eps (N - 1) + epsilon0, ln(hi/lo))``, ``hi = (B[0] + u)/T_min`` and
        ``lo = u/T_max`` bounding every realised probability; an OOV token under ``oov="uniform"``
        (each output ``1/N``) against a word: ``max(ln(N hi), ln(1/(N lo)))``; other OOV policies
        release whether a token has an embedding: infinite. With ``output_vocabulary="corpus"`` this is
        the realised figure; :attr:`guarantee` (the card) reports the public bound of
        :meth:`_public_bounds` instead."""
        if self.oov != "uniform":
            return math.inf
        self._prepare()
        n = len(self.output_rows)
        if n == 1:
            return 0.0
        tmin, tmax = int(self._T.min()), int(self._T.max())
        hi = (int(self._B[0]) + self._u) / tmin
        lo = self._u / tmax
        pair = min(self.epsilon * (n - 1) + self.rounding_epsilon0, math.log(hi / lo))
        oov = max(math.log(n * hi), -math.log(n * lo))
        return max(pair, oov)


def _are_permutations(lists: np.ndarray) -> bool:
    n = lists.shape[1]
    return all(np.array_equal(np.sort(lst), np.arange(n)) for lst in lists)


def _candidates(y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every row of ``y`` (float64 ``(N, m)``): its ``k`` nearest other rows proposed by a float32
    GEMM, their exact squared distances (sorted by (distance, row)), and a certified lower bound of
    the exact squared distance to every row not proposed."""
    from textdp.sanitize import _diffractor_kernels as kern

    n, m = y.shape
    k = min(k, n - 1)
    y32 = y.astype(np.float32)
    sq = (y * y).sum(axis=1)
    sq32 = sq.astype(np.float32)
    # |float32 ||x-y||^2 estimate - exact| <= (m + 4) 2^-23 (||x||^2 + ||y||^2 + 2|x||y|) <= slack
    slack = (m + 8) * 2.0**-22 * 2.0 * (sq + sq.max())
    cand = np.empty((n, k), dtype=np.int64)
    bound = np.empty(n, dtype=np.float64)
    b = max(1, min(n, (64 << 20) // (4 * n)))
    for s in range(0, n, b):
        e = min(n, s + b)
        g = y32[s:e] @ y32.T
        g *= -2.0
        g += sq32[None, :]
        thr = np.empty(e - s, dtype=np.float64)
        kern.smallest_k(g, s, k, cand[s:e], thr)
        bound[s:e] = thr + sq[s:e] - slack[s:e]
    cand_d = np.empty((n, k), dtype=np.float64)
    kern.exact_candidates(y, np.arange(n), cand, cand_d)
    return cand, cand_d, bound


def build_lists(y: np.ndarray, n_lists: int) -> np.ndarray:
    """``n_lists`` greedy nearest-neighbour chains over the rows of ``y`` (float64 ``(N, m)``), list
    ``k`` started at the row with the ``k``-th largest norm (ties to the smaller row; when
    ``n_lists > N`` the starts repeat cyclically): int64 ``(n_lists, N)`` rows in list order."""
    from textdp.sanitize import _diffractor_kernels as kern

    n = len(y)
    if n == 1:
        return np.zeros((n_lists, 1), dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    norms = kern.sqnorms(y)
    starts = np.lexsort((np.arange(n), -norms))
    cand, cand_d, bound = _candidates(y, _CANDIDATES)
    out = np.empty((n_lists, n), dtype=np.int64)
    for k in range(n_lists):
        out[k], _ = kern.greedy_chain(y, cand, cand_d, bound, int(starts[k % n]))
    return out


def nearest_columns(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Column of the nearest row of ``y`` for each row of ``x`` (exact float64 squared distance, ties
    to the smaller column; a float32 GEMM proposes the columns within a certified slack of its
    minimum, then the exact distances decide)."""
    from textdp.sanitize import _diffractor_kernels as kern

    m = y.shape[1]
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    y32 = y.astype(np.float32)
    sqy = (y * y).sum(axis=1)
    sqy32 = sqy.astype(np.float32)
    sqx = (x * x).sum(axis=1)
    out = np.empty(len(x), dtype=np.int64)
    b = max(1, min(len(x), (64 << 20) // (4 * max(1, len(y)))))
    for s in range(0, len(x), b):
        e = min(len(x), s + b)
        g = x[s:e].astype(np.float32) @ y32.T
        g *= -2.0
        g += sqy32[None, :]
        slack = (m + 8) * 2.0**-22 * 2.0 * (sqx[s:e] + sqy.max())
        kern.nearest_in_block(g, slack, x[s:e], y, out[s:e])
    return out


REGISTERED = (
    ("1-diffractor", Diffractor, "1-Diffractor: clamped geometric noise on the index in ordered word lists "
     "(eps·d metric LDP per token, d = list-index distance)", ("token", "metric-dp")),
)
