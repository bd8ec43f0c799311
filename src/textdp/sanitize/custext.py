"""CusText and CusText+ (Chen, Mo, Wang, Chen, Nie, Wang, Cui. *A Customized Text Sanitization
Mechanism with Differential Privacy.* Findings of ACL 2023, Sec. 3): each token is replaced by a
word drawn with the exponential mechanism from the output set of its *group*.

The law (Sec. 3, the mapping function and the sampling function; the same formulas are in the
authors' code, ``sai4july/CusText`` ``CusText/sst2/utils.py`` ``get_customized_mapping``, and in
pypantera 1.0.2 ``SamplingPerturbationMechanism/custext.py`` lines 84-94):

* **groups** (the paper's mapping function, the authors' default ``conservative`` strategy): the
  output vocabulary is split into groups of ``k`` words, built once and deterministically from
  public data: walk the output vocabulary in its public order (for GloVe: general-English
  frequency order), and let the first word not yet in a group take its ``k - 1`` nearest words
  (Euclidean distance between embeddings, ties by embedding row) among the words not yet in a
  group; the last group holds what is left (``|V_out| mod k`` words when ``k`` does not divide the
  vocabulary). The groups *partition* the output vocabulary. Every word of a group has the group
  as its output set.
* **score**: for input ``x`` and the words ``y`` of its output set ``Y``,
  ``u(x, y) = -(d(x, y) - d_min(x)) / (d_max(x) - d_min(x))`` with ``d`` the Euclidean distance
  and ``d_min``, ``d_max`` its extremes over ``Y`` (``u = 0`` when they are equal, e.g. a group of
  one word): ``u`` lies in ``[-1, 0]`` for every input, so its sensitivity is ``Δu = 1``.
* **sampling** (the exponential mechanism, McSherry & Talwar 2007):
  ``p(y | x) = exp(eps u(x, y) / 2) / Σ_{y' ∈ Y} exp(eps u(x, y') / 2)``.

Guarantee (:class:`textdp.accounting.GroupDP`): for two inputs ``x, x'`` with the same output
set, ``u(x, y) - u(x', y) <= 1`` and the normalisers differ by at most ``exp(eps/2)``, so
``p(y|x) <= exp(eps) p(y|x')``: ``eps``-DP per token **between words of the same group only**.
Two words of different groups have disjoint output sets: an output tells their group apart with
certainty (plain-DP worst case infinite). The paper's claim of "eps-DP" holds in this sense only.

Why groups and not one top-k set per token: pypantera (and the authors' ``aggressive`` strategy)
give every token its own ``k`` nearest words as output set. Two neighbouring tokens then have
different supports (some output of one has probability 0 under the other), and no finite epsilon
bounds their ratio: the guarantee is void for every pair. With a partition, words of one group
share one output set and the exponential-mechanism bound holds between them.

Inputs outside the output vocabulary (words with an embedding that are not output words) take the
group of their nearest output word (Euclidean, ties by embedding row: public and deterministic)
and their own scores over it. Tokens without an embedding follow the ``oov`` policy of
:class:`textdp.sanitize.base.TokenSanitizer`.

CusText+ (Sec. 3, "CusText+"; the authors' ``save_stop_words``): stop words (NLTK's English list,
:data:`textdp.attacks.inversion.stopwords.NLTK_ENGLISH_STOPWORDS`, the list the authors' code
loads) that are output words are released unchanged, **unprotected**; every other word as
CusText. Stop words stay in the groups as outputs of the other words.

Sampling is float-safe: each group's ``k x k`` law (and the law of each input outside the output
vocabulary) is turned once into integer weights by :class:`textdp.noise.ExactCategorical` (a
uniform share ``eta`` mixed in, ``rint(2^62 ((1 - eta) p + eta/m))``), and each token draws one
exact keyed uniform integer (:func:`textdp.noise.keyed.keyed_uniform_below`, its record's stream)
and looks it up in its row's integer cumulative weights. The accounted extra loss is
``epsilon0 = categorical_discretisation_epsilon(k, eta)`` (about 1.3e-11 for k = 20): the score
need not be exact for the bound, only in ``[-1, 0]``, which the computed score is.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.accounting import GroupDP
from textdp.errors import ParameterError
from textdp.noise import ExactCategorical, categorical_discretisation_epsilon
from textdp.noise import keyed
from textdp.sanitize.base import TokenSanitizer, _single_threaded_blas

__all__ = ["CusText", "CusTextPlus", "build_groups", "DEFAULT_K"]

#: the authors' default group size (``--top_k 20`` in ``CusText/sst2/args.py``)
DEFAULT_K = 20


def _check_k(k) -> int:
    if isinstance(k, bool):
        raise ParameterError(f"k (the group size) must be an integer >= 1, got {k!r}")
    try:
        kk = int(k)
    except (TypeError, ValueError):
        raise ParameterError(f"k (the group size) must be an integer >= 1, got {k!r}") from None
    if kk != k or kk < 1:
        raise ParameterError(f"k (the group size) must be an integer >= 1, got {k!r}")
    if kk == 1:
        raise ParameterError("k = 1 makes every word its own group: every word is released unchanged (no "
                             "protection); use k >= 2 (the paper uses 20)")
    return kk


def build_groups(vectors: np.ndarray, k: int) -> np.ndarray:
    """The greedy partition of the rows of ``vectors`` (``(n, dim)``, in their public order) into
    groups of ``k``: the first row not yet grouped and its ``k - 1`` nearest ungrouped rows
    (float64 Euclidean distance, ties by row index), repeated; the last group takes the rest.

    Returns int64 ``(n,)``: the group index of each row (groups numbered in the order built).
    Deterministic: depends only on ``vectors`` and ``k``. Time ``O(n^2 dim / k)``.
    """
    y = np.array(vectors, dtype=np.float64, order="C")  # private copies: rows are swapped in place
    y32 = y.astype(np.float32)
    n = len(y)
    k = int(k)
    group = np.full(n, -1, dtype=np.int64)
    ids = np.arange(n)  # ids[:n_alive]: the original index of each ungrouped slot (swap-remove order)
    slot = np.arange(n)  # slot of each original index
    sq = np.einsum("ij,ij->i", y, y)
    sq32 = sq.astype(np.float32)
    # float32 screening error bound on d^2 = |x|^2 - 2 x.y + |y|^2 (generous: 64 ulp of the largest term)
    tol = 64 * 2.0**-24 * 2.0 * float(sq.max() if n else 0.0)
    n_alive = n
    leader = 0  # the smallest original index still ungrouped
    g = 0
    with _single_threaded_blas():  # a threaded GEMV per step is many times slower on a busy machine
        while n_alive:
            if n_alive <= k:
                group[ids[:n_alive]] = g
                break
            while group[leader] >= 0:
                leader += 1
            li = slot[leader]
            d32 = sq32[:n_alive] - 2.0 * (y32[:n_alive] @ y32[li])
            part = np.argpartition(d32, k - 1)[:k]
            pool = np.flatnonzero(d32 <= d32[part].max() + tol)  # every slot that may be among the k nearest
            # exact float64 distances decide (ties by the lower original index); the leader first
            d2 = ((y[pool] - y[li]) ** 2).sum(axis=1)
            d2[pool == li] = -1.0
            cand = pool[np.lexsort((ids[pool], d2))[:k]]
            group[ids[cand]] = g
            # swap-remove the chosen slots (highest first, so each swap moves a slot that stays alive)
            for c in np.sort(cand)[::-1].tolist():
                last = n_alive - 1
                if c != last:
                    y[c], y32[c], sq[c], sq32[c], ids[c] = y[last], y32[last], sq[last], sq32[last], ids[last]
                    slot[ids[c]] = c
                n_alive -= 1
            g += 1
    return group


def _nltk_stop_words() -> frozenset:
    """NLTK's English stop words, vendored in :mod:`textdp.attacks.inversion.stopwords`; loaded from
    that file alone, since importing the ``textdp.attacks.inversion`` package imports torch (seconds)."""
    import importlib.util
    import sys
    from pathlib import Path

    name = "textdp.attacks.inversion.stopwords"
    mod = sys.modules.get(name)
    if mod is None:
        path = Path(__file__).resolve().parent.parent / "attacks" / "inversion" / "stopwords.py"
        spec = importlib.util.spec_from_file_location("_textdp_nltk_stopwords", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    return mod.NLTK_ENGLISH_STOPWORDS


def _scores(x: np.ndarray, y: np.ndarray, epsilon: float) -> np.ndarray:
    """Log-weights ``eps u(x, y) / 2`` of the exponential mechanism, float64 ``(b, m)``, for inputs
    ``x`` ``(b, dim)`` and each input's output set ``y`` ``(b, m, dim)``; ``u`` in ``[-1, 0]``."""
    d = np.sqrt(((y - x[:, None, :]) ** 2).sum(axis=2))
    lo = d.min(axis=1, keepdims=True)
    span = d.max(axis=1, keepdims=True) - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        u = np.where(span > 0, -(d - lo) / np.where(span > 0, span, 1.0), 0.0)
    u = np.clip(u, -1.0, 0.0)
    return 0.5 * epsilon * u


class CusText(TokenSanitizer):
    """CusText (Chen et al., Findings of ACL 2023, Sec. 3): the exponential mechanism with the
    normalised distance score ``u(x, y) = -(d(x,y) - d_min)/(d_max - d_min)`` (``Δu = 1``) over
    the output set of the token's group; the groups of ``k`` words partition the output
    vocabulary (module docstring: how they are built, and why not per-token top-k sets).

    Parameters (keyword-only, beyond :class:`TokenSanitizer`'s): ``k`` the group size (an integer
    >= 1, at most the size of the output vocabulary; default 20, the authors' default). ``k = 1``
    releases every word unchanged (groups of one word).

    Guarantee: :class:`textdp.accounting.GroupDP`, ``eps``-DP per token between words of the same
    group (plus ``epsilon0``, the float-safe sampler's accounted cost), nothing between groups;
    its ledger currency is ``group/token``, which no wildcard budget covers.

    Raises ParameterError for ``k < 2`` (``k = 1``: every word its own group, released unchanged), a non-integer ``k``, or ``k`` above the output
    vocabulary's size (checked when the vocabulary is built; with the corpus vocabulary, a corpus of
    fewer than ``k`` words makes one group).
    Example: ``CusText("glove-6b-50d", epsilon=3, k=20).sanitize(texts)``.
    """

    name = "custext"
    paper = ("Chen, Mo, Wang, Chen, Nie, Wang, Cui, Findings of ACL 2023, Sec. 3 (CusText: exponential mechanism "
             "over a customized output set)")
    torch_sampler = False
    supports_workers = False
    #: CusText+ keeps stop words; CusText none
    keeps_stop_words = False

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, k: int = DEFAULT_K, **kwargs):
        self.k = _check_k(k)
        super().__init__(embeddings, epsilon, **kwargs)

    # ------------------------------------------------------------------ the groups
    def _prepare_mechanism(self) -> None:
        out = self.output_rows
        if self.k > len(out) and self.output_vocabulary != "corpus":  # a corpus smaller than k: one group
            raise ParameterError(f"k = {self.k} is larger than the output vocabulary ({len(out)} words): "
                                 f"use k <= {len(out)}")
        vec = self.embeddings.vectors
        group = build_groups(vec[out], self.k)
        n_groups = int(group.max()) + 1
        order = np.lexsort((np.arange(len(out)), group))  # members of each group in public order
        sizes = np.bincount(group, minlength=n_groups)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        width = int(sizes.max())
        members = np.full((n_groups, width), -1, dtype=np.int64)  # output positions, -1 padding
        slot = np.arange(len(out)) - starts[group[order]]
        members[group[order], slot] = order
        self._group = group  # output position -> group
        self._members = members
        self._sizes = sizes
        self._width = width
        # each output word's own law over its group (integer cumulative weights, padded rows)
        self._out_cdf = self._laws(np.arange(len(out)), group, out_positions=True)
        self._keep_mask = np.zeros(len(self.embeddings), dtype=bool)
        if self.keeps_stop_words:
            self._keep_mask[self._stop_rows()] = True

    def _stop_rows(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    def _laws(self, items: np.ndarray, groups: np.ndarray, out_positions: bool = False,
              ideal: bool = False) -> np.ndarray:
        """Integer cumulative weights ``(n, width)`` uint64 (``ideal``: the paper's float64 law
        ``(n, width)``) of inputs ``items`` (output positions when ``out_positions``, else embedding
        rows) over the output sets of ``groups``; padding columns repeat the row total (zero
        probability, never drawn)."""
        vec = self.embeddings.vectors
        rows = self.output_rows[items] if out_positions else items
        res = np.zeros((len(items), self._width), dtype=np.float64 if ideal else np.uint64)
        for m in np.unique(self._sizes[groups]).tolist():
            sel = np.flatnonzero(self._sizes[groups] == m)
            for s in range(0, len(sel), 4096):
                part = sel[s:s + 4096]
                mem = self._members[groups[part], :m]
                x = np.asarray(vec[rows[part]], dtype=np.float64)
                y = np.asarray(vec[self.output_rows[mem]], dtype=np.float64)
                logw = _scores(x, y, self.epsilon)
                if ideal:
                    w = np.exp(logw - logw.max(axis=1, keepdims=True))
                    res[part, :m] = w / w.sum(axis=1, keepdims=True)
                    continue
                cdf = ExactCategorical(logw, self.eta).cdf
                res[part, :m] = cdf
                res[part, m:] = cdf[:, -1:]
        return res

    def _nearest_output(self, rows: np.ndarray) -> np.ndarray:
        """Output position of the nearest output word of each embedding row (exact float64 Euclidean
        distance, ties by the lower output position; a float32 GEMM screens the candidates)."""
        vec = self.embeddings.vectors
        cache = getattr(self, "_nearest_cache", None)
        if cache is None or cache[0] is not self.output_rows:
            y = np.asarray(vec[self.output_rows], dtype=np.float64)
            sq = np.einsum("ij,ij->i", y, y)
            cache = self._nearest_cache = (self.output_rows, y, np.ascontiguousarray(y, dtype=np.float32),
                                           sq.astype(np.float32), float(sq.max()))
        _, y, y32, sq32, sqmax = cache
        res = np.empty(len(rows), dtype=np.int64)
        with _single_threaded_blas():
            for s in range(0, len(rows), 256):
                x = np.asarray(vec[rows[s:s + 256]], dtype=np.float64)
                d32 = sq32[None, :] - 2.0 * (x.astype(np.float32) @ y32.T)
                # float32 error bound on |y|^2 - 2 x.y (64 ulp of the largest term): every column that may be
                # the nearest is re-measured exactly
                tol = 64 * 2.0**-24 * 2.0 * (sqmax + float(np.einsum("ij,ij->i", x, x).max()))
                best = np.argmin(d32, axis=1)
                mask = d32 <= d32[np.arange(len(x)), best][:, None] + tol
                res[s:s + len(x)] = best
                amb = np.flatnonzero(mask.sum(axis=1) > 1)  # rows with more than one possible nearest
                if len(amb):
                    r, c = np.nonzero(mask[amb])
                    d2 = ((y[c] - x[amb[r]]) ** 2).sum(axis=1)
                    order = np.lexsort((c, d2, r))
                    first = np.concatenate([[True], r[order][1:] != r[order][:-1]])
                    res[s + amb[r[order][first]]] = c[order][first]
        return res

    def _input_groups(self, rows: np.ndarray) -> np.ndarray:
        """Group of each embedding row: its own as an output word, else its nearest output word's."""
        self._prepare()
        pos = self._out_pos[rows]
        grp = np.empty(len(rows), dtype=np.int64)
        inside = pos >= 0
        grp[inside] = self._group[pos[inside]]
        if (~inside).any():
            grp[~inside] = self._group[self._nearest_output(rows[~inside])]
        return grp

    def groups(self, words=None) -> list[list[str]]:
        """The groups as lists of output words (all groups, in the order built), or the group of
        each word of ``words`` (str or embedding rows)."""
        self._prepare()
        w = self.embeddings.words
        if words is None:
            gids = range(len(self._sizes))
        else:
            rows = self.input_rows(words)
            if (rows < 0).any():
                raise ParameterError("groups needs in-vocabulary words")
            gids = self._input_groups(rows).tolist()
        return [[w[self.output_rows[p]] for p in self._members[g, :self._sizes[g]].tolist()] for g in gids]

    # ------------------------------------------------------------------ sampling
    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        out = rows.copy()
        keep = self._keep_mask[rows]
        idx = np.flatnonzero(~keep)
        if len(idx):
            uniq, inv = np.unique(rows[idx], return_inverse=True)
            pos = self._out_pos[uniq]
            grp = np.empty(len(uniq), dtype=np.int64)
            cdf = np.empty((len(uniq), self._width), dtype=np.uint64)
            inside = np.flatnonzero(pos >= 0)
            grp[inside] = self._group[pos[inside]]
            cdf[inside] = self._out_cdf[pos[inside]]
            outside = np.flatnonzero(pos < 0)
            if len(outside):
                grp[outside] = self._group[self._nearest_output(uniq[outside])]
                cdf[outside] = self._laws(uniq[outside], grp[outside])
            tok_cdf = cdf[inv]
            u = keyed.keyed_uniform_below(key, streams[idx], positions[idx], keyed.MAIN, tok_cdf[:, -1])
            col = (tok_cdf <= u[:, None]).sum(axis=1)  # the smallest j with cdf[j] > u
            out[idx] = self.output_rows[self._members[grp[inv], col]]
        if progress is not None and len(rows):
            progress(len(rows))
        return out

    # ------------------------------------------------------------------ laws
    def probabilities(self, words) -> np.ndarray:
        """The exact law each word is sampled from: float64 ``(n, V_out)`` over :attr:`output_words`,
        nonzero only on the word's group: the integer weights of the float-safe sampler normalised
        (``(1 - eta) p + eta/m`` on a group of ``m`` words, up to a relative ~1e-12); a kept
        stop word (CusText+) has probability 1 on itself."""
        return self._probabilities(words, ideal=False)

    def ideal_probabilities(self, words) -> np.ndarray:
        """The paper's ``exp(eps u/2) / Z`` in float64 (no uniform mix), ``(n, V_out)``."""
        return self._probabilities(words, ideal=True)

    def _probabilities(self, words, ideal: bool) -> np.ndarray:
        rows = self._known_rows(words)
        grp = self._input_groups(rows)
        law = self._laws(rows, grp, ideal=ideal)
        if not ideal:
            tot = law[:, -1:].astype(np.float64)
            law = np.diff(law, axis=1, prepend=np.zeros((len(rows), 1), dtype=np.uint64)).astype(np.float64) / tot
        res = np.zeros((len(rows), len(self.output_rows)))
        for i in range(len(rows)):
            m = self._sizes[grp[i]]
            res[i, self._members[grp[i], :m]] = law[i, :m]
        for i in np.flatnonzero(self._keep_mask[rows]).tolist():
            res[i] = 0.0
            res[i, self._out_pos[rows[i]]] = 1.0
        return res

    # ------------------------------------------------------------------ guarantee and card
    def _partition_name(self) -> str:
        vocab = f"{self.output_vocabulary} vocabulary"
        if self._vocab_info is not None:
            vocab = f"{self._vocab_info.name} sha256 {self._vocab_info.sha256[:12]}"
        return f"groups of k={self.k} of {vocab}, {self.embeddings.source}"

    def _unprotected(self) -> str:
        return ""

    @property
    def sampling_epsilon0(self) -> float:
        """Accounted extra loss of the integer sampler over the ideal law (groups of at most k words)."""
        return categorical_discretisation_epsilon(self.k, self.eta)

    def worst_case_epsilon(self) -> float:
        """Plain DP per token over every pair of accepted inputs: infinite with two groups or more
        (their output sets are disjoint), with a kept stop word, or with an ``oov`` policy other
        than ``uniform``; with one group (``k`` = the output vocabulary's size) ``eps + epsilon0``
        (a uniform OOV draw is the exponential mechanism of a constant score)."""
        if self.oov != "uniform" or self.output_vocabulary == "corpus":
            return math.inf
        self._prepare()
        if len(self._sizes) > 1 or self._keep_mask.any():
            return math.inf
        return self.epsilon + self.sampling_epsilon0

    @property
    def guarantee(self) -> GroupDP:
        if self.output_vocabulary == "corpus" and not self._prepared:
            partition = f"groups of k={self.k} of the corpus vocabulary, {self.embeddings.source}"
        else:
            self._prepare()
            partition = self._partition_name()
        return GroupDP(epsilon=self.epsilon, epsilon0=self.sampling_epsilon0, partition=partition,
                       unprotected=self._unprotected(), unit="token", worst_case_epsilon=self.worst_case_epsilon())

    def epsilon0_meaning(self) -> str:
        return "the accounted cost of float-safe sampling (integer weights with a uniform share eta)"

    def card_units(self) -> dict:
        g = self.guarantee
        units = {
            "epsilon": "per token, plain DP between two words of the SAME group (output set): "
                       "P[M(x)=y] <= exp(eps + epsilon0) P[M(x')=y]; words of different groups have disjoint "
                       "output sets and are told apart with certainty",
            "per_document": "tokens are sanitized independently; two documents of equal length L that differ "
                            "position-wise only by words of the same group are (L*(eps + epsilon0))-indistinguishable; "
                            "documents that differ by a word of another group are not protected",
            "neighbours": "replace one token by a word of its group (per-token guarantee); replace tokens "
                          "position-wise within their groups (document)",
            "worst_case_epsilon": "plain DP per token over every pair of accepted inputs (out-of-vocabulary tokens "
                                  "included): infinite as soon as there are two groups; L times it per document",
            "k": "the group size: every output set holds k words (the last group the remainder)",
        }
        if g.epsilon0:
            units["epsilon0"] = "additive per-token term: " + self.epsilon0_meaning()
        return units

    def card_per_document(self) -> dict:
        """The card's per-document composition rule (no statistic of the data; a metric rule does not apply)."""
        return {"rule": "documents of equal length L whose tokens differ position-wise only within their groups: "
                        "L * (eps + epsilon0)-DP; a token replaced by a word of another group: not protected",
                "epsilon_per_token_within_group": self.epsilon + self.sampling_epsilon0,
                "group_size": self.k}

    def card_warnings(self) -> list[str]:
        return [f"{self.name} protects a token only against the other words of its group (k = {self.k} words of "
                "the output vocabulary): the group of every sanitized word, hence of its input, is released "
                "exactly (the plain-DP worst case per token is unbounded); the epsilon is not comparable with a "
                "metric-DP epsilon, and the ledger accepts the release only under a budget naming currency "
                "group/token"]

    def parameters(self) -> dict:
        d = super().parameters()
        d["k"] = self.k
        return d


class CusTextPlus(CusText):
    """CusText+ (Chen et al., Findings of ACL 2023, Sec. 3): CusText, except that stop words are
    released unchanged, **unprotected** (``stop_words="nltk"``, default: NLTK's English list, the
    one the authors' code loads; only those that are output words), so the plain-DP worst case is
    infinite for them; every other word is sanitized as by :class:`CusText`.

    ``stop_words``: ``"nltk"`` (default), ``"none"`` (then CusText+ is CusText), or a list of words
    (public data by the caller's word). Raises ParameterError for another string.
    """

    name = "custext+"
    paper = ("Chen, Mo, Wang, Chen, Nie, Wang, Cui, Findings of ACL 2023, Sec. 3 (CusText+: stop words kept, "
             "other words as CusText)")
    keeps_stop_words = True

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, k: int = DEFAULT_K,
                 stop_words="nltk", **kwargs):
        if isinstance(stop_words, str):
            if stop_words not in ("nltk", "none"):
                raise ParameterError(f"stop_words must be 'nltk', 'none' or a list of words, got {stop_words!r}")
            self.stop_words = stop_words
            self._stop_list = None
        else:
            self._stop_list = frozenset(str(w) for w in stop_words)
            self.stop_words = "custom list"
        super().__init__(embeddings, epsilon, k=k, **kwargs)

    def _stop_set(self) -> frozenset:
        if self._stop_list is not None:
            return self._stop_list
        if self.stop_words == "none":
            return frozenset()
        return _nltk_stop_words()

    def _stop_rows(self) -> np.ndarray:
        words = sorted(self._stop_set())
        if not words:
            return np.zeros(0, dtype=np.int64)
        rows = self.input_rows(words)
        rows = rows[rows >= 0]
        return np.unique(rows[self._out_pos[rows] >= 0])

    @property
    def kept_words(self) -> list[str]:
        """The stop words released unchanged (output words of the stop-word list), in row order."""
        self._prepare()
        w = self.embeddings.words
        return [w[r] for r in np.flatnonzero(self._keep_mask).tolist()]

    def _unprotected(self) -> str:
        if self.stop_words == "none" and self._stop_list is None:
            return ""
        name = "NLTK English stop words" if self._stop_list is None else "the given stop words"
        if self._prepared:
            return f"{int(self._keep_mask.sum())} {name}"
        return name

    def card_warnings(self) -> list[str]:
        w = super().card_warnings()
        if self._unprotected():
            w.append(f"custext+ releases the {self._unprotected()} unchanged: they are NOT protected (a kept stop "
                     "word reveals its input exactly)")
        return w

    def parameters(self) -> dict:
        d = super().parameters()
        d["stop_words"] = self.stop_words
        return d


REGISTERED = (
    ("custext", CusText, "CusText: exponential mechanism within public groups of k words (eps-DP per token between "
     "words of the same group only)", ("token", "group-dp")),
    ("custext+", CusTextPlus, "CusText+: CusText with stop words released unchanged (unprotected)",
     ("token", "group-dp")),
)
