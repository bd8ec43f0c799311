"""Privacy analysis and local-DP primitives for LDA (Zhao et al., IEEE TIFS 2021, arXiv 2010.04391).

Contents (section numbers of ``specs/bounds-and-lda.md`` Part B):

* :func:`cgs_inherent_epsilon`, :class:`InherentPrivacyMonitor` -- inherent privacy of
  collapsed Gibbs sampling (B.2, Propositions 1-2 and Theorem 1; reconstruction [R]).
* :func:`lp_epsilon`, :func:`flip_for_epsilon`, :func:`rr_encode`, :func:`rr_estimate`,
  :func:`rr_variance`, :func:`reconstruct_corpus` -- LP-LDA's randomized response on
  per-document binary word vectors (B.4, Eqs. 8-9). The reports are keyed per document
  (:func:`rr_encode`: document r flips its bits with ChaCha20 stream r of the release key,
  :mod:`textdp.noise.keyed`); the curator's estimation and reconstruction are
  post-processing and draw from an ordinary generator.
* :func:`bayes_denoise` -- OLP-LDA's Bayesian denoising (B.5, Eqs. 14-20, Theorem 7).
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from textdp.errors import ParameterError
from textdp.topics.corpus import Corpus

__all__ = [
    "InherentPrivacy", "cgs_inherent_epsilon", "InherentPrivacyMonitor", "DataDependentPrivacyWarning",
    "lp_epsilon", "flip_for_epsilon", "LP_EPSILON_MIN", "LP_EPSILON_MAX",
    "RRReports", "rr_encode", "rr_estimate", "rr_variance",
    "reconstruct_corpus", "BayesDenoised", "bayes_denoise",
]


class DataDependentPrivacyWarning(UserWarning):
    """The value is computed from the private counts: an analysis tool, never to be published."""


_INHERENT_WARNING = ("inherent CGS privacy loss is data-dependent (computed from the private counts); "
                     "use it for analysis only and do not publish it")


# ------------------------------------------------------------------------------------------------------------
# B.2 Inherent privacy of CGS
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InherentPrivacy:
    """Per-iteration inherent loss for replacing one token of word t by t' (natural log units).

    epsilon_replaced: loss on the replaced token's own draw; epsilon_related_t /
    epsilon_related_t_prime: bound per related token of word t / t'; n_related_t,
    n_related_t_prime: how many related tokens; epsilon_iteration: their sum
    (Theorem 1-type); epsilon_total: ``iterations`` x epsilon_iteration (basic
    composition); replaced_topic: the topic the bound was evaluated at (the
    maximising one when not given).
    """

    epsilon_replaced: float
    epsilon_related_t: float
    epsilon_related_t_prime: float
    n_related_t: int
    n_related_t_prime: int
    epsilon_iteration: float
    epsilon_total: float
    iterations: int
    replaced_topic: int
    data_dependent: bool = True


def _inherent_at(ct: np.ndarray, ctp: np.ndarray, beta: float, zr: int) -> tuple[float, float, float]:
    a = ct.astype(np.float64).copy()
    a[zr] -= 1.0                      # the replaced token is excluded from its own counts
    a += beta
    b = ctp.astype(np.float64) + beta
    eps_rep = math.log(np.max(a / b)) + math.log(np.max(b / a))
    m_t = max(1.0, float(ct[zr]) - 1.0)     # smallest count a related t-token can see at z_r (D has m, D' m-1)
    eps_t = math.log((m_t + beta) / (m_t - 1.0 + beta))
    m_tp = max(0.0, float(ctp[zr]) - 1.0)   # smallest count a related t'-token can see at z_r (D has m, D' m+1)
    eps_tp = math.log((m_tp + 1.0 + beta) / (m_tp + beta))
    return eps_rep, eps_t, eps_tp


def cgs_inherent_epsilon(counts: np.ndarray, t: int, t_prime: int, beta: float, iterations: int = 1,
                         replaced_topic: int | None = None, warn: bool = True) -> InherentPrivacy:
    """Inherent privacy loss of CGS for the neighbour "one token of word t becomes t'".

    counts: (K, V) int topic-word counts n_k^(w) of corpus D (including the replaced
    token, assigned to ``replaced_topic``; when None the bound is maximised over
    every topic k with n_k^(t) >= 1). beta: symmetric topic-word prior. Returns an
    :class:`InherentPrivacy`; ``epsilon_total`` composes ``iterations`` sweeps with
    the same counts (the monitor composes live values instead).

    Derivation (reconstruction of Propositions 1-2 and Theorem 1 [R]; the exact
    statements must be checked against the PDF). D and D' share every topic
    assignment. The draw of token i uses the unnormalised weights
    r_k = (n_{k,-i}^(w_i) + β)/(n_{k,-i} + Vβ) · (n_{m,-i}^(k) + α).

    * Replaced token: D uses a_k = n_{k,-r}^(t) + β, D' uses b_k = n_{k,-r}^(t') + β;
      every other factor is identical (the topic totals n_k agree because the two
      counts change in the same topic), so
      ln p_D(k)/p_D'(k) = ln(a_k/b_k) − ln(Σ_j a_j r'_j / Σ_j b_j r'_j) and
      |·| <= ln max_k(a_k/b_k) + ln max_k(b_k/a_k) =: ε_rep (a ratio of normalisers
      lies between the smallest and largest coordinate ratio).
    * Related token j of word t: only the weight of topic z_r changes, by the factor
      (m+β)/(m−1+β) with m = n_{z_r,-j}^(t) >= 1. Changing one weight by a factor
      c >= 1 moves every log-probability by at most ln c, so the loss is
      ln((m+β)/(m−1+β)), largest for the smallest possible m = max(1, n_{z_r}^(t) − 1).
      Related token of word t': the factor is (m+1+β)/(m+β) with m = n_{z_r,-j}^(t'),
      smallest m = max(0, n_{z_r}^(t') − 1). Both are <= ln(1 + 1/β) (spec B.2).
    * Unrelated tokens: identical conditionals, loss 0.
    * One sweep (sequential composition): ε_iter = ε_rep + (n_t − 1)·ε_t + n_t'·ε_t'.
      Over T sweeps: basic composition, ε_total = T·ε_iter.

    The bound is a property of the exact collapsed Gibbs chain (``LDA(workers=1)``,
    :class:`textdp.topics.GibbsState`); it does not apply to the approximate parallel
    sampler (``LDA(workers>1)``, AD-LDA), whose workers sample against stale counts.

    The V-dependent variant (the replaced token's topic differs between D and D')
    is not implemented. Warns :class:`DataDependentPrivacyWarning` (``warn=False``
    silences it): the value depends on private counts and must not be published.
    Raises ParameterError for bad word ids, β <= 0 or iterations < 1.
    """
    counts = np.asarray(counts)
    if counts.ndim != 2:
        raise ParameterError(f"counts must be a (K, V) topic-word count matrix, got shape {counts.shape}")
    K, V = counts.shape
    for name, w in (("t", t), ("t_prime", t_prime)):
        if not (0 <= int(w) < V):
            raise ParameterError(f"word id {name}={w} outside [0, {V})")
    if int(t) == int(t_prime):
        raise ParameterError("t and t_prime must be different words")
    if not (float(beta) > 0 and math.isfinite(float(beta))):
        raise ParameterError(f"beta must be positive and finite, got {beta!r}")
    if int(iterations) < 1:
        raise ParameterError(f"iterations must be >= 1, got {iterations!r}")
    ct, ctp = counts[:, int(t)], counts[:, int(t_prime)]
    if ct.sum() < 1:
        raise ParameterError(f"word t={t} does not occur in the counts; the replaced token must be an occurrence of t")
    if replaced_topic is None:
        cands = [k for k in range(K) if ct[k] >= 1]
    else:
        if not (0 <= int(replaced_topic) < K) or ct[int(replaced_topic)] < 1:
            raise ParameterError(f"replaced_topic={replaced_topic} has no token of word t")
        cands = [int(replaced_topic)]
    n_t, n_tp = int(ct.sum()), int(ctp.sum())
    best = None
    for zr in cands:
        e_rep, e_t, e_tp = _inherent_at(ct, ctp, float(beta), zr)
        it = e_rep + (n_t - 1) * e_t + n_tp * e_tp
        if best is None or it > best[0]:
            best = (it, e_rep, e_t, e_tp, zr)
    it, e_rep, e_t, e_tp, zr = best
    if warn:
        warnings.warn(_INHERENT_WARNING, DataDependentPrivacyWarning, stacklevel=2)
    return InherentPrivacy(e_rep, e_t, e_tp, n_t - 1, n_tp, it, it * int(iterations), int(iterations), zr)


class InherentPrivacyMonitor:
    """Callback for :meth:`LDA.fit` that evaluates :func:`cgs_inherent_epsilon` on the live
    counts after every sweep ("privacy monitoring") and composes them (basic composition).

    ``per_iteration`` lists ε_iter per sweep; ``total`` their sum. Data-dependent:
    warns once, never publish the values. Exact sampler only: ``LDA(workers>1).fit``
    (the approximate parallel sampler) refuses this callback with ParameterError.
    """

    def __init__(self, t: int, t_prime: int, beta: float):
        self.t, self.t_prime, self.beta = int(t), int(t_prime), float(beta)
        self.per_iteration: list[float] = []
        warnings.warn(_INHERENT_WARNING, DataDependentPrivacyWarning, stacklevel=2)

    def __call__(self, iteration, loglik, state) -> None:
        r = cgs_inherent_epsilon(state.nwk.T, self.t, self.t_prime, self.beta, warn=False)
        self.per_iteration.append(r.epsilon_iteration)

    @property
    def total(self) -> float:
        return float(np.sum(self.per_iteration))


# ------------------------------------------------------------------------------------------------------------
# B.4 LP-LDA: randomized response on per-document binary word vectors
# ------------------------------------------------------------------------------------------------------------
def _check_f(f) -> float:
    try:
        f = float(f)
    except (TypeError, ValueError):
        raise ParameterError(f"the flip probability (--flip) must be a number in (0, 1), got {f!r}") from None
    if not (0.0 < f < 1.0):
        raise ParameterError(f"the flip probability (--flip) must be in (0, 1), got {f!r}")
    return f


#: supported ε range of LP/OLP-LDA (:func:`flip_for_epsilon`): f = 2/(e^{ε/2}+1) is a float64 in (0, 1)
#: only there. Above ~1419, e^{ε/2} overflows; below ~5e-16, f rounds to 1 (no information kept).
LP_EPSILON_MIN = 1e-15
LP_EPSILON_MAX = 1400.0


def lp_epsilon(f: float) -> float:
    """ε of LP-LDA's randomized response per word replacement in a document: 2 ln(2/f − 1).

    Each bit is kept with probability 1 − f/2 and flipped with f/2, so one bit costs
    ln((1 − f/2)/(f/2)) = ln(2/f − 1); replacing one word changes at most two bits.
    f = 0.1 -> 5.89, 0.5 -> 2.20, 0.8 -> 0.81. Computed as 2 (ln(2 − f) − ln f), finite
    for every f in (0, 1) (2/f overflows for f below 1.1e-308).
    """
    f = _check_f(f)
    return 2.0 * (math.log(2.0 - f) - math.log(f))


def flip_for_epsilon(epsilon: float) -> float:
    """Inverse of :func:`lp_epsilon`: f = 2 / (e^{ε/2} + 1).

    Raises ParameterError (naming ``--epsilon``) unless ε is in
    [``LP_EPSILON_MIN``, ``LP_EPSILON_MAX``] = [1e-15, 1400], where f is a float64
    strictly inside (0, 1).
    """
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"--epsilon must be a number, got {epsilon!r}") from None
    if not (e > 0 and math.isfinite(e)):
        raise ParameterError(f"--epsilon must be a positive finite number, got {epsilon!r}")
    if e > LP_EPSILON_MAX:
        raise ParameterError(f"--epsilon {e!r} is too large for LP/OLP-LDA: the largest supported is "
                             f"{LP_EPSILON_MAX:g} (the flip probability f = 2/(e^(ε/2)+1) underflows float64 "
                             "near ε = 1419)")
    if e < LP_EPSILON_MIN:
        raise ParameterError(f"--epsilon {e!r} is too small for LP/OLP-LDA: the smallest supported is "
                             f"{LP_EPSILON_MIN:g} (the flip probability f = 2/(e^(ε/2)+1) rounds to 1 in float64 "
                             "below about 5e-16)")
    return 2.0 / (math.exp(e / 2.0) + 1.0)


@dataclass
class RRReports:
    """The randomized reports of M documents, in input order: report m (the document of input
    index ``streams[m]``) holds the word ids ``indices[indptr[m]:indptr[m+1]]`` as present.
    ``f``: flip probability; V words; ``kept_docs``: the input index of each report's document,
    −1 for a document empty over the vocabulary (it reports too); ``streams``: the input index of
    every report (its keyed stream, :func:`rr_encode`)."""

    indptr: np.ndarray
    indices: np.ndarray
    n_words: int
    f: float
    kept_docs: np.ndarray
    streams: np.ndarray | None = None

    @property
    def n_docs(self) -> int:
        return int(self.indptr.shape[0] - 1)

    def counts(self) -> np.ndarray:
        """c_v (V,) int64: how many reports contain word v."""
        return np.bincount(self.indices, minlength=self.n_words).astype(np.int64)

    def report(self, m: int) -> np.ndarray:
        """The word ids report ``m`` holds (int32, increasing)."""
        return self.indices[self.indptr[m]:self.indptr[m + 1]]


def _release_key(key):
    from textdp.noise.keyed import ReleaseKey

    if isinstance(key, ReleaseKey):
        return key
    if key is None:
        return ReleaseKey.fresh()
    if isinstance(key, np.random.Generator):
        return ReleaseKey.from_generator(key)
    raise ParameterError("the randomness of rr_encode must be a textdp.noise.keyed.ReleaseKey (or a numpy Generator, "
                         f"or None for a fresh key), got {type(key).__name__}")


def _rr_chunk(key, X, src, streams, n_words, p):
    """Reports of one chunk: the keyed flip bits of ``streams`` XOR the true bits (rows ``src`` of X,
    −1: empty). Returns (per-report counts, word ids) of the reported ones."""
    from textdp.noise.keyed import BITS, BITS_TIE, keyed_bernoulli_bits

    bits = keyed_bernoulli_bits(key, streams, n_words, BITS, p, tie_purpose=BITS_TIE)
    has = np.flatnonzero(src >= 0)
    if has.size:
        sub = X[src[has]]
        rows = np.repeat(has, np.diff(sub.indptr))
        bits[rows, sub.indices] ^= True
    rows, cols = np.nonzero(bits)
    return np.bincount(rows, minlength=streams.size), cols.astype(np.int32)


def rr_encode(corpus: Corpus, f: float, key=None, chunk_bits: int = 4_000_000, *, streams=None,
              workers: int | None = None) -> RRReports:
    """Simulate the user side of LP-LDA (Zhao et al. 2021; spec B.4): each document's binary
    presence vector over the V-word vocabulary goes through randomized response, bit v flipped
    with probability exactly f/2 (kept with 1 − f/2; ε = ln(2/f − 1) per bit).

    **Per-document keyed randomness** (design.md "Scale-out", issue 12 item 9): the flips of the
    document of input index r are bits ``0 .. V-1`` of stream r under the release key ``key``
    (:func:`textdp.noise.keyed.keyed_bernoulli_bits`, purposes ``BITS``/``BITS_TIE``; one ChaCha20
    word per bit against the 62-bit words of the dyadic f/2, exact). A document's report depends
    only on the key, its input index and its own words: not on ``chunk_bits``, ``workers``, the
    mini-batch it is in or the other documents, and a retried chunk reproduces the same report.

    ``key``: a :class:`~textdp.noise.keyed.ReleaseKey` (``ReleaseKey.fresh()`` for a release,
    ``ReleaseKey.from_seed(seed)`` for a research run); a numpy Generator draws a 256-bit key
    from it; None: a fresh key. ``streams``: ``(kept, empty)`` input indices of the corpus's
    documents (in corpus order) and of its empty ones; default :meth:`Corpus.input_positions`.
    Every input document reports once, the empty ones (``corpus.skipped_docs``) too: the number
    of reports is the number of input documents, so a document whose only vocabulary word is
    replaced by an out-of-vocabulary word does not vanish from the reports. Reports come in input
    order. Documents are processed in chunks of about ``chunk_bits`` bits (memory about
    ``workers`` × ``chunk_bits`` bytes) by ``workers`` threads (default ``min(4, cpus)``). Cost:
    M·V ChaCha20 words.
    """
    f = _check_f(f)
    from concurrent.futures import ThreadPoolExecutor
    from fractions import Fraction

    key = _release_key(key)
    V = corpus.n_words
    X = corpus.doc_word_binary()
    kept_pos, empty_pos = corpus.input_positions() if streams is None else streams
    kept_pos = np.asarray(kept_pos, dtype=np.int64).reshape(-1)
    empty_pos = np.asarray(empty_pos, dtype=np.int64).reshape(-1)
    if kept_pos.size != corpus.n_docs:
        raise ParameterError(f"streams: {kept_pos.size} input indices for {corpus.n_docs} documents")
    pos = np.concatenate([kept_pos, empty_pos])
    src = np.concatenate([np.arange(corpus.n_docs, dtype=np.int64), np.full(empty_pos.size, -1, np.int64)])
    order = np.argsort(pos, kind="stable")
    pos, src = pos[order], src[order]
    if pos.size and (pos[0] < 0 or np.any(np.diff(pos) == 0)):
        raise ParameterError("every document needs its own non-negative input index (stream)")
    N = pos.size
    p = Fraction(f) / 2  # exact even where f / 2 would round (subnormal f)
    step = max(1, int(chunk_bits) // max(V, 1))
    starts = list(range(0, N, step))
    workers = max(1, int(workers if workers is not None else min(4, os.cpu_count() or 1)))

    def run(s):
        return _rr_chunk(key, X, src[s:s + step], pos[s:s + step], V, p)

    if workers > 1 and len(starts) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(run, starts))
    else:
        parts = [run(s) for s in starts]
    counts = np.concatenate([c for c, _ in parts]) if parts else np.zeros(0, np.int64)
    indices = np.concatenate([w for _, w in parts]) if parts else np.zeros(0, np.int32)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    kept = np.where(src >= 0, pos, -1)
    return RRReports(indptr, indices, V, f, kept, pos)


def rr_estimate(reported_counts: np.ndarray, n_reports: int, f: float) -> np.ndarray:
    """Unbiased moment estimator (Eq. 8) of the true document frequency t_v:

    E[c_v] = t_v (1 − f/2) + (N − t_v) f/2  ⇒  t̂_v = (c_v − N f/2) / (1 − f).

    reported_counts: (V,) reports containing v; n_reports: N (documents in the
    corpus or mini-batch). Returns (V,) float64 (may be negative; clip downstream).
    """
    f = _check_f(f)
    c = np.asarray(reported_counts, dtype=np.float64)
    return (c - n_reports * f / 2.0) / (1.0 - f)


def rr_variance(n_reports: int, f: float) -> float:
    """Var(t̂_v) = N (f/2)(1 − f/2) / (1 − f)² (Eq. 9): each of the N reported bits has
    variance (f/2)(1 − f/2) whatever its true value, independently."""
    f = _check_f(f)
    return n_reports * (f / 2.0) * (1.0 - f / 2.0) / (1.0 - f) ** 2


def reconstruct_corpus(reports: RRReports, estimated_df: np.ndarray, vocabulary, rng: np.random.Generator,
                       threshold: float = 0.0, variance: float | None = None) -> Corpus:
    """Rebuild a bag-of-words corpus from randomized reports (post-processing, no privacy cost).

    Rule (the spec's "round(max(t̂, 0)) copies of each word", distributed over the
    documents that reported it): word v is kept in each report that contains it
    with probability q_v = clip(t̃_v / c_v, 0, 1), where t̃_v = max(estimated_df_v, 0),
    so the expected document frequency of v in the rebuilt corpus is t̃_v
    (estimate < c_v). Words with estimate <= ``threshold``·sqrt(``variance``) are
    dropped entirely (their counts are indistinguishable from noise). Each kept
    word appears once per document (the reports carry presence only). Documents
    left empty are skipped.
    """
    est = np.maximum(np.asarray(estimated_df, dtype=np.float64), 0.0)
    if threshold > 0 and variance is not None:
        est[est <= threshold * math.sqrt(variance)] = 0.0
    c = reports.counts().astype(np.float64)
    q = np.where(c > 0, np.minimum(est / np.maximum(c, 1.0), 1.0), 0.0)
    keep = rng.random(reports.indices.shape[0]) < q[reports.indices]
    docs = []
    ptr = reports.indptr
    for m in range(reports.n_docs):
        sl = slice(ptr[m], ptr[m + 1])
        docs.append(reports.indices[sl][keep[sl]])
    return Corpus.from_word_ids(docs, vocabulary, preprocessing={"reconstructed_from": "randomized response"})


# ------------------------------------------------------------------------------------------------------------
# B.5 OLP-LDA: Bayesian denoising
# ------------------------------------------------------------------------------------------------------------
@dataclass
class BayesDenoised:
    """estimate (V,) t̃; omega (V,) weight of the prior mean; variance (V,) (1 − ω)² Var_RR;
    approx_ok (V,) bool whether the Gaussian approximation held (else ω = 0)."""

    estimate: np.ndarray
    omega: np.ndarray
    variance: np.ndarray
    approx_ok: np.ndarray


def bayes_denoise(t_hat: np.ndarray, n_reports: int, f: float, prior_mean: np.ndarray, prior_variance,
                  strict: bool = False, warn: bool = True) -> BayesDenoised:
    """Posterior-mean denoising of the moment estimates (seed 004, Eqs. 14-20, Theorem 7) [R]:

        t̃_v = (1 − ω_v) t̂_v + ω_v μ_v,   ω_v = σ²_RR / (σ²_RR + σ²_v),   Var(t̃_v | t_v) = (1 − ω_v)² σ²_RR

    Derivation: approximating both binomials of the observed count (Lemma 2) by
    Gaussians, c_v | t_v ~ N(t_v(1−f) + N f/2, σ_p²) with σ_p² = N (f/2)(1 − f/2),
    i.e. t̂_v | t_v ~ N(t_v, σ²_RR) with σ²_RR = σ_p²/(1 − f)² (:func:`rr_variance`).
    With the prior t_v ~ N(μ_v, σ²_v) the Gaussian conjugate posterior mean is the
    precision-weighted average above; ω (the weight of the *prior* mean, as in the
    paper) shrinks as σ² grows. Given t_v the estimate's variance is (1 − ω)² σ²_RR.

    The approximation is checked per word for both binomials (retained part n = t,
    p = 1 − f/2; flipped-in part n = N − t, p = f/2; t̂ clipped to [0, N] stands in
    for t): the seed's rule np > 5 or n(1 − p) > 5, or with ``strict`` both. Where it
    fails the plain moment estimator is used (ω = 0), with a warning. Result clamped
    to [0, N].
    """
    f = _check_f(f)
    t_hat = np.asarray(t_hat, dtype=np.float64)
    mu = np.broadcast_to(np.asarray(prior_mean, dtype=np.float64), t_hat.shape)
    s2 = np.broadcast_to(np.asarray(prior_variance, dtype=np.float64), t_hat.shape)
    if np.any(~np.isfinite(s2)) or np.any(s2 <= 0):
        raise ParameterError("prior variance sigma^2 must be positive and finite")
    var_rr = rr_variance(n_reports, f)
    t = np.clip(t_hat, 0.0, float(n_reports))
    p_keep, p_flip = 1.0 - f / 2.0, f / 2.0
    conds = []
    for n, p in ((t, p_keep), (n_reports - t, p_flip)):
        a, b = n * p > 5, n * (1 - p) > 5
        conds.append((a & b) if strict else (a | b))
    ok = conds[0] & conds[1]
    omega = np.where(ok, var_rr / (var_rr + s2), 0.0)
    if warn and not ok.all():
        warnings.warn(f"Gaussian approximation fails for {int((~ok).sum())} of {ok.size} words "
                      f"(batch of {n_reports} reports); using the moment estimator for them", UserWarning,
                      stacklevel=2)
    est = np.clip((1.0 - omega) * t_hat + omega * mu, 0.0, float(n_reports))
    return BayesDenoised(est, omega, (1.0 - omega) ** 2 * var_rr, ok)
