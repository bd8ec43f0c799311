"""Differentially private LDA trainers (Zhao et al., IEEE TIFS 2021): HDP-LDA, LP-LDA, OLP-LDA.

Each trainer exposes ``.guarantee`` (a :mod:`textdp.accounting.guarantees` object)
and ``fit(corpus, callback=None) -> TopicModel``; the model carries the guarantee
and the accounting. Randomness: the user-side randomized response of LP/OLP-LDA draws
from per-document keyed ChaCha20 streams (:mod:`textdp.noise.keyed`; the release key is
``ReleaseKey.fresh()``, or ``ReleaseKey.from_seed(seed)`` for a seeded run; stream = the
document's input index), so each document's report is the same for any chunking,
mini-batch size or worker count. HDP-LDA's Gibbs uniforms are keyed the same way (stream =
the document's input index; :mod:`textdp.topics.distributed`), so its sweeps run over
partitions of documents on any engine with the same result. Everything else (HDP-LDA's
initial view and discrete Laplace noise, drawn once per release on the driver, and the
curator-side post-processing of LP/OLP-LDA: reconstruction and Gibbs sampling) uses one
generator per run from :func:`textdp.noise.random_source` (CSPRNG unless seeded); all noise
goes through :mod:`textdp.noise`.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from textdp.accounting.guarantees import ApproxDP, LocalDP, PureDP
from textdp.errors import InputError, ParameterError
from textdp.noise import discrete_laplace, random_source
from textdp.noise.keyed import ReleaseKey
from textdp.topics.corpus import Corpus
from textdp.topics.lda import (
    Callback,
    GibbsState,
    _private_facts,
    check_corpus,
    check_hyperparameters,
    check_workers,
    run_sweeps,
)
from textdp.topics.privacy import (
    RRReports,
    bayes_denoise,
    flip_for_epsilon,
    lp_epsilon,
    reconstruct_corpus,
    rr_encode,
    rr_estimate,
    rr_variance,
)

__all__ = ["HDPLDA", "LPLDA", "OLPLDA", "laplace_composition", "HDP_MAX_SCALE"]


def refuse_parallel_sampler(method: str, workers) -> None:
    """ParameterError unless ``workers`` is 1: a private trainer samples with the exact collapsed Gibbs chain;
    the approximate parallel sampler (AD-LDA, ``LDA(workers>1)``) is for the non-private LDA only."""
    if check_workers(workers) != 1:
        raise ParameterError(f"{method} samples with the exact collapsed Gibbs chain; workers={workers} (the "
                             "approximate parallel sampler AD-LDA) is for the non-private LDA only: use workers=1")


#: largest discrete-Laplace scale HDP-LDA accepts: textdp.noise.discrete_laplace takes scales below 2^49
#: (exact rational arithmetic); 2^48 leaves room for its rounding up. Sets the smallest ε: Δ₁·releases/2^48.
HDP_MAX_SCALE = 2.0**48


def _check_eps(epsilon, name="--epsilon") -> float:
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a positive number, got {epsilon!r}") from None
    if not (e > 0 and math.isfinite(e)):
        raise ParameterError(f"{name} must be a positive finite number, got {epsilon!r}")
    return e


# ------------------------------------------------------------------------------------------------------------
# Accounting of repeated Laplace releases
# ------------------------------------------------------------------------------------------------------------
def _pld_epsilon(scale: float, releases: int, sensitivity: int, delta: float) -> float:
    """ε at δ of ``releases`` self-composed discrete Laplace mechanisms, P(z) ∝ exp(−|z|/scale), with integer
    L1 sensitivity (dp_accounting PLD, pessimistic estimate, value discretization 1e-3)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    d = pld.from_discrete_laplace_mechanism(1.0 / scale, sensitivity=int(sensitivity),
                                            value_discretization_interval=1e-3)
    return float(d.self_compose(int(releases)).get_epsilon_for_delta(delta))


def laplace_composition(epsilon: float, releases: int, sensitivity: int, delta: float = 0.0) -> dict:
    """Calibrate the scale b of ``releases`` adaptive discrete-Laplace releases of integer counts with integer
    L1 ``sensitivity`` so that the whole run is ε-DP (δ = 0) or (ε, δ)-DP (δ > 0).

    Discrete Laplace P(z) ∝ exp(−|z|/b) on an integer query with L1 sensitivity Δ is
    (Δ/b)-DP (Canonne, Kamath & Steinke 2020), exactly as the continuous one, with no
    floating-point leak (the noise comes from :func:`textdp.noise.discrete_laplace`).

    δ = 0: basic composition of pure DP (no accountant is tighter for pure ε): each
    release gets ε_t = ε / releases and b = Δ/ε_t.
    δ > 0: dp_accounting's PLD of the discrete Laplace mechanism self-composed
    ``releases`` times; b is found by bisection (the smallest noise whose composed ε
    at δ is <= the target) and is never larger than the δ = 0 scale.
    Returns {"scale", "epsilon_per_release", "composition", "epsilon", "delta", ...}.
    """
    epsilon = _check_eps(epsilon)
    releases = int(releases)
    if releases < 1:
        raise ParameterError("at least one release is needed")
    if not (0.0 <= float(delta) < 1.0):
        raise ParameterError(f"delta must be in [0, 1), got {delta!r}")
    sensitivity = int(sensitivity)
    basic = sensitivity * releases / epsilon
    out = {"scale": basic, "epsilon_per_release": epsilon / releases, "composition": "basic (pure DP)",
           "noise": "discrete Laplace P(z) ∝ exp(-|z|/scale) on the integer counts",
           "epsilon": epsilon, "delta": 0.0, "releases": releases, "sensitivity_l1": sensitivity}
    if delta > 0:
        lo, hi = math.log(basic / 1000.0), math.log(basic)
        for _ in range(16):  # bisection on log(scale): the smallest noise meeting the target
            mid = 0.5 * (lo + hi)
            if _pld_epsilon(math.exp(mid), releases, sensitivity, float(delta)) <= epsilon:
                hi = mid
            else:
                lo = mid
        if hi < math.log(basic):  # the PLD accountant certifies less noise than basic composition
            scale = math.exp(hi)
            out.update(scale=scale, epsilon_per_release=sensitivity / scale, delta=float(delta),
                       composition="dp_accounting PLD accountant (discrete Laplace, self-composed, pessimistic, "
                                   "value discretization 1e-3)",
                       epsilon_achieved=_pld_epsilon(scale, releases, sensitivity, float(delta)))
        else:  # no gain over basic composition (e.g. few releases with a large ε each): keep the pure-DP scale
            out.update(delta=float(delta), composition="basic (pure DP); the PLD accountant gave no tighter scale")
    return out


# ------------------------------------------------------------------------------------------------------------
# HDP-LDA
# ------------------------------------------------------------------------------------------------------------
class HDPLDA:
    """HDP-LDA: centralized CGS whose topic-word statistics are released with Laplace noise (spec B.3) [R].

    Mechanism (one run, ``iterations`` sweeps): the curator holds the true counts.
    The first sweeps use a data-independent view (φ_k drawn from Dir(1, …, 1)). After every
    ``sweeps_per_release`` sweeps it releases the noisy view
    ñ_k^(w) = max(n_k^(w) + Z, 0), Z discrete Laplace P(z) ∝ exp(−|z|/b) (the counts are
    integers, so the exact integer mechanism applies; float-safe by construction) (a separate float array; the integer counts are
    never touched) and the following sweeps sample with the topic-word term fixed to
    φ̃ = (ñ_k^(w) + β)/(ñ_k + Vβ), ñ_k = Σ_w ñ_k^(w) (post-processing, no extra cost),
    as workers of a distributed sampler would. The model is φ̃ of the last release.
    Releases: R = ceil(iterations / sweeps_per_release).

    Sensitivity (L1, per release) -- ``unit``:

    * ``"document"`` (default; the formal guarantee): documents are truncated to
      ``max_doc_length`` = L tokens. Condition on the sampler's uniforms and the past
      releases: a document's own assignments depend only on the released views and
      its own tokens, so replacing one document changes only that document's ≤ L
      tokens' cells: Δ₁ = 2L. The same holds for one changed token (its document's
      assignments can all move), so the guarantee is stated per document.
    * ``"token-paper"``: Δ₁ = 2 for one replaced token (one cell −1, one +1), the
      spec's reading of the paper. It holds only if the other tokens' topic
      assignments did not react to the change, which Gibbs sampling does not ensure;
      registered as a *broken* replica (``topics.hdp-lda-paper``) for audits.

    Budget: ``epsilon`` for the whole run (all R releases), split evenly (basic
    composition, pure ε-DP) or, with ``delta > 0``, calibrated with dp_accounting's
    PLD accountant (:func:`laplace_composition`). The inherent randomness of CGS is
    *not* credited (it is data-dependent, spec B.2). Topic assignments and
    document-topic counts are never released. ε must be at least Δ₁·R/2^48
    (:data:`HDP_MAX_SCALE`, the exact sampler's noise scale limit; 2.85e-10 with the
    defaults), else ParameterError at construction.

    Sampler: the exact chain of fixed-view sweeps. Given the view, each document's new
    assignments depend only on the view, α and the document itself, and each document draws its
    uniforms from its own keyed stream (the sampler key: ``ReleaseKey.from_seed(seed)`` for a
    seeded run, else fresh from the OS; stream = the document's input index; see
    :mod:`textdp.topics.distributed`). So the sweeps run over partitions of the documents on
    ``engine`` (a :class:`textdp.engines.Engine`, e.g. ``textdp.engines.get_engine("dask",
    workers=2)``; default: one local worker), ``partitions`` of them (default: the engine's
    workers), and give the same model for any engine, worker count and partitioning. The
    initial view and every release's noise are drawn once, on the driver, from the run's
    generator; the guarantee and the accounting do not depend on the engine. ``workers`` exists
    only to refuse values other than 1 with a clear ParameterError: the approximate parallel
    sampler (AD-LDA, ``LDA(workers>1)``) is for the non-private LDA only; HDP-LDA's workers are
    the engine's.
    """

    privacy = "hdp"

    def __init__(self, n_topics: int = 20, epsilon: float = 1.0, alpha: float = 0.1, beta: float = 0.01,
                 iterations: int = 100, sweeps_per_release: int = 1, delta: float = 0.0, unit: str = "document",
                 max_doc_length: int = 200, seed: int | None = None, ll_every: int = 10, workers: int = 1,
                 engine=None, partitions: int | None = None):
        refuse_parallel_sampler("HDP-LDA", workers)
        from textdp.topics.distributed import check_engine

        check_engine(engine)
        self.engine = engine
        if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, (int, np.integer))
                                       or partitions < 1):
            raise ParameterError(f"partitions must be a positive integer, got {partitions!r}")
        self.partitions = None if partitions is None else int(partitions)
        self.n_topics, self.alpha, self.beta, self.iterations = check_hyperparameters(n_topics, alpha, beta,
                                                                                      iterations)
        self.epsilon = _check_eps(epsilon)
        if not (0.0 <= float(delta) < 1.0):
            raise ParameterError(f"delta (--delta) must be in [0, 1), got {delta!r}")
        self.delta = float(delta)
        if unit not in ("document", "token-paper"):
            raise ParameterError(f"unit must be 'document' or 'token-paper', got {unit!r}")
        self.unit = unit
        if int(sweeps_per_release) < 1:
            raise ParameterError(f"sweeps per release (--sweeps-per-release) must be >= 1, got {sweeps_per_release!r}")
        self.sweeps_per_release = int(sweeps_per_release)
        if int(max_doc_length) < 1:
            raise ParameterError(f"max document length (--max-doc-length) must be >= 1, got {max_doc_length!r}")
        self.max_doc_length = int(max_doc_length)
        self.seed = seed
        self.ll_every = int(ll_every)
        # the noise scale Δ₁·R/ε (never smaller with δ > 0) must suit the exact sampler: checked before any work
        eps_min = self.sensitivity * self.releases / HDP_MAX_SCALE
        if self.epsilon < eps_min:
            sens = f"{self.sensitivity}" + (" (2 x --max-doc-length)" if self.unit == "document" else "")
            raise ParameterError(
                f"--epsilon {self.epsilon!r} is too small for HDP-LDA: the smallest supported here is "
                f"{float(f'{eps_min * 1.001:.3g}'):g} = sensitivity {sens} x {self.releases} releases "
                "(--iterations / --sweeps-per-release) / 2^48, the largest noise scale of the exact Laplace sampler")

    @property
    def releases(self) -> int:
        return -(-self.iterations // self.sweeps_per_release)

    @property
    def sensitivity(self) -> int:
        """L1 sensitivity (integer) of one release of the (V, K) topic-word counts."""
        return 2 * self.max_doc_length if self.unit == "document" else 2

    def accounting(self) -> dict:
        key = (self.epsilon, self.releases, self.sensitivity, self.delta)
        if getattr(self, "_acc_key", None) != key:
            self._acc_key, self._acc = key, laplace_composition(*key)
        acc = dict(self._acc)
        acc.update(mechanism="discrete Laplace on the topic-word counts at every release", unit=self.unit,
                   max_doc_length=self.max_doc_length if self.unit == "document" else None,
                   sweeps_per_release=self.sweeps_per_release,
                   not_credited="inherent CGS randomness (data-dependent)",
                   not_released="topic assignments, document-topic counts, true counts")
        return acc

    @property
    def guarantee(self):
        unit = "document" if self.unit == "document" else "token"
        if self.delta > 0:
            return ApproxDP(epsilon=self.epsilon, delta=self.delta, unit=unit, neighbours="replace-one")
        return PureDP(epsilon=self.epsilon, unit=unit, neighbours="replace-one")

    def params(self) -> dict:
        return {"n_topics": self.n_topics, "alpha": self.alpha, "beta": self.beta, "iterations": self.iterations,
                "epsilon": self.epsilon, "delta": self.delta, "unit": self.unit,
                "max_doc_length": self.max_doc_length, "sweeps_per_release": self.sweeps_per_release}

    def noisy_view(self, nwk: np.ndarray, scale: float, rng) -> np.ndarray:
        """(V, K) float64 max(n + Z, 0) with Z discrete Laplace(scale); ``nwk`` itself is not modified."""
        return np.maximum(nwk + discrete_laplace(scale, nwk.shape, rng), 0).astype(np.float64)

    def _phi_from_view(self, view: np.ndarray) -> np.ndarray:
        V = view.shape[0]
        return (view + self.beta) / (view.sum(axis=0) + V * self.beta)

    def release_key(self) -> ReleaseKey:
        """The key of the per-document Gibbs uniforms: derived from the seed (research run), else fresh
        from the OS. Never written anywhere."""
        return ReleaseKey.from_seed(self.seed) if self.seed is not None else ReleaseKey.fresh()

    def release(self, corpus: Corpus, rng: np.random.Generator, callback: Callback | None = None,
                scale: float | None = None, key: ReleaseKey | None = None) -> tuple[np.ndarray, list]:
        """Run the mechanism on an already truncated ``corpus``: the initial view and every release's
        noise from generator ``rng`` (on the driver), the Gibbs uniforms from ``key``'s per-document
        streams (default: a key drawn from ``rng``), the sweeps on :attr:`engine`. Returns the last
        released noisy view (V, K) float64 and the log-likelihood trace (curator-only). Used by
        :meth:`fit` and by the audits (many runs from one generator)."""
        from textdp.topics.distributed import PartitionedState, check_engine, run_fixed_view_sweeps

        if scale is None:
            scale = self.accounting()["scale"]
        if key is None:
            key = ReleaseKey.from_generator(rng)
        state = PartitionedState(corpus, self.n_topics, self.alpha, self.beta)
        phi_wk = np.ascontiguousarray(rng.dirichlet(np.ones(state.V), size=state.K).T)  # data-independent start
        box = {"view": None}

        def release(nwk):
            box["view"] = self.noisy_view(nwk, scale, rng)
            return self._phi_from_view(box["view"])

        lls = run_fixed_view_sweeps(state, phi_wk, key, check_engine(self.engine), self.iterations,
                                    self.sweeps_per_release, self.ll_every, callback, release,
                                    partitions=self.partitions, streams=corpus.input_positions()[0])
        return box["view"], lls

    def fit(self, corpus: Corpus, callback: Callback | None = None):
        from textdp.topics.model import TopicModel

        check_corpus(corpus, self.n_topics)
        if self.unit == "document" and corpus.doc_lengths.max() > self.max_doc_length:
            docs = [d[: self.max_doc_length] for d in corpus.documents()]
            corpus = Corpus.from_word_ids(docs, corpus.vocabulary, kept=corpus.kept_docs,
                                          preprocessing=corpus.preprocessing | {"max_doc_length": self.max_doc_length})
        acc = self.accounting()
        src = random_source(self.seed)
        rng = src.generator()
        t0 = time.perf_counter()
        view, lls = self.release(corpus, rng, callback, acc["scale"], key=self.release_key())
        secs = time.perf_counter() - t0
        phi = self._phi_from_view(view).T.copy()
        from textdp.topics.distributed import check_engine

        engine = check_engine(self.engine).describe()  # the curator's: the model is the same on every engine
        seed = src.describe() | {"sampler_uniforms": "per-document keyed ChaCha20 streams (textdp.noise.keyed; "
                                                     "stream = the document's input index; key "
                                                     + ("from the seed)" if src.seeded else "from the OS, never "
                                                        "written)")}
        return TopicModel(topic_word=phi, vocabulary=list(corpus.vocabulary), alpha=self.alpha, beta=self.beta,
                          method="hdp-lda" if self.unit == "document" else "hdp-lda-paper", params=self.params(),
                          guarantee=self.guarantee, accounting=acc,
                          info={"preprocessing": corpus.preprocessing},
                          private=_private_facts(corpus, secs, lls, engine=engine),
                          seed=seed)


# ------------------------------------------------------------------------------------------------------------
# LP-LDA
# ------------------------------------------------------------------------------------------------------------
def _flip(flip, epsilon) -> float:
    if (flip is None) == (epsilon is None):
        raise ParameterError("give exactly one of flip probability f (--flip) or epsilon (--epsilon)")
    if flip is not None:
        f = float(flip) if isinstance(flip, (int, float)) else flip
        lp_epsilon(f)  # validates f in (0, 1)
        return float(f)
    return flip_for_epsilon(_check_eps(epsilon))


class LPLDA:
    """LP-LDA: local DP by randomized response on each document's binary word vector (spec B.4) [R].

    Pipeline: each document owner reports its presence vector over the (public)
    vocabulary through randomized response (:func:`textdp.topics.privacy.rr_encode`:
    each bit flipped with probability exactly f/2); the server estimates every word's
    document frequency with the unbiased moment estimator (Eq. 8, variance Eq. 9),
    rebuilds a corpus (:func:`textdp.topics.privacy.reconstruct_corpus`) and runs
    ordinary CGS on it.

    Keyed: document r's flips come from stream r (its input index, empty documents at
    their input position) under the release key (``ReleaseKey.fresh()``; a seeded run
    ``ReleaseKey.from_seed(seed)``), so a seeded run's reports, and with them the model,
    do not depend on ``chunk_bits`` or ``workers`` (engineering knobs of the encoding,
    not in :meth:`params`), and document r's report does not change when other
    documents are added after it. :meth:`encode` returns the reports a fit uses (for a
    seeded trainer). The server side draws from the run's ordinary generator
    (post-processing of the reports).

    Guarantee: ε = 2 ln(2/f − 1)-LDP per replaced word in a document (two bits
    change); everything after the reports is post-processing. Give ``flip`` f or
    ``epsilon`` (then f = 2/(e^{ε/2} + 1)). ``threshold``: drop words whose estimate
    is within ``threshold`` standard deviations of 0. The vocabulary must be public
    for the guarantee to cover it (see :mod:`textdp.topics.corpus`).

    ``workers``: threads of the users' randomized-response encoding only (the reports, and
    so the model, are the same for any value). The Gibbs sampler on the reconstructed
    corpus is always the exact single-thread chain, never the approximate parallel
    sampler of ``LDA(workers>1)``.
    """

    privacy = "lp"

    def __init__(self, n_topics: int = 20, flip: float | None = None, epsilon: float | None = None,
                 alpha: float = 0.1, beta: float = 0.01, iterations: int = 100, threshold: float = 1.0,
                 seed: int | None = None, ll_every: int = 10, chunk_bits: int = 4_000_000,
                 workers: int | None = None):
        self.n_topics, self.alpha, self.beta, self.iterations = check_hyperparameters(n_topics, alpha, beta,
                                                                                      iterations)
        self.f = _flip(flip, epsilon)
        self.threshold = float(threshold)
        if not (self.threshold >= 0 and math.isfinite(self.threshold)):
            raise ParameterError(f"threshold (--threshold) must be >= 0, got {threshold!r}")
        self.seed = seed
        self.ll_every = int(ll_every)
        if isinstance(chunk_bits, bool) or int(chunk_bits) < 1:
            raise ParameterError(f"chunk_bits must be >= 1, got {chunk_bits!r}")
        self.chunk_bits = int(chunk_bits)
        self.workers = workers

    def release_key(self) -> ReleaseKey:
        """The key of the users' reports: derived from the seed (research run), else fresh from the OS."""
        return ReleaseKey.from_seed(self.seed) if self.seed is not None else ReleaseKey.fresh()

    def encode(self, corpus: Corpus, key: ReleaseKey | None = None, streams=None) -> RRReports:
        """The randomized reports of ``corpus``'s documents (all input documents, in input order)
        under ``key`` (default :meth:`release_key`: for a seeded trainer, the reports its fit uses)."""
        return rr_encode(corpus, self.f, key if key is not None else self.release_key(), self.chunk_bits,
                         streams=streams, workers=self.workers)

    @property
    def epsilon(self) -> float:
        return lp_epsilon(self.f)

    @property
    def guarantee(self):
        return LocalDP(epsilon=self.epsilon, unit="token", neighbours="replace-one")

    def params(self) -> dict:
        return {"n_topics": self.n_topics, "alpha": self.alpha, "beta": self.beta, "iterations": self.iterations,
                "flip": self.f, "epsilon": self.epsilon, "threshold": self.threshold}

    def accounting(self) -> dict:
        return {"mechanism": "randomized response on per-document binary word vectors (flip f/2 per bit)",
                "flip": self.f, "epsilon": self.epsilon, "formula": "epsilon = 2 ln(2/f - 1) per replaced word",
                "unit": "word replacement within one document (local)",
                "post_processing": "moment estimator, reconstruction, CGS"}

    def _train_reconstructed(self, rc: Corpus, rng, callback, beta_wk=None):
        check_corpus(rc, self.n_topics)
        state = GibbsState(rc, self.n_topics, self.alpha, self.beta, rng, beta_wk=beta_wk)
        lls = run_sweeps(state, self.iterations, self.ll_every, callback)
        return state, lls

    def fit(self, corpus: Corpus, callback: Callback | None = None):
        from textdp.topics.model import TopicModel

        check_corpus(corpus, self.n_topics)
        src = random_source(self.seed)
        rng = src.generator()
        t0 = time.perf_counter()
        reports = self.encode(corpus)
        N = reports.n_docs
        est = rr_estimate(reports.counts(), N, self.f)
        rc = reconstruct_corpus(reports, est, corpus.vocabulary, rng, self.threshold, rr_variance(N, self.f))
        if rc.n_docs < self.n_topics or rc.n_tokens == 0:
            raise InputError(f"after randomized response only {rc.n_docs} non-empty documents remain, fewer than "
                             f"K={self.n_topics}; raise --epsilon (lower --flip) or --threshold 0")
        state, lls = self._train_reconstructed(rc, rng, callback)
        # from the randomized reports (post-processing): may be released
        acc = self.accounting() | {"reconstructed_docs": rc.n_docs, "reconstructed_tokens": rc.n_tokens}
        return TopicModel(topic_word=state.phi(), vocabulary=list(corpus.vocabulary), alpha=self.alpha,
                          beta=self.beta, method="lp-lda", params=self.params(), guarantee=self.guarantee,
                          accounting=acc,
                          info={"log_likelihood": lls, "preprocessing": corpus.preprocessing},
                          private=_private_facts(corpus, time.perf_counter() - t0),
                          seed=src.describe())


# ------------------------------------------------------------------------------------------------------------
# OLP-LDA
# ------------------------------------------------------------------------------------------------------------
class OLPLDA(LPLDA):
    """OLP-LDA: online LP-LDA over mini-batches with a Bayesian-denoised reconstruction (spec B.5) [R].

    For mini-batch l (``batch_size`` documents, in input order):

    1. the batch's documents report through randomized response (as LP-LDA, from the
       same per-document keyed streams: a seeded run's reports are LP-LDA's reports with
       the same seed, whatever ``batch_size``);
    2. moment estimate t̂^l (N = |D_l|), then Bayesian denoising
       t̃ = (1 − ω) t̂ + ω μ with ω = σ²_RR/(σ²_RR + σ²)
       (:func:`textdp.topics.privacy.bayes_denoise`). Prior mean μ: the pooled moment
       estimates of the earlier batches scaled to |D_l| (batch 1: the public
       ``prior_corpus``'s document frequencies, or no denoising). Prior variance σ²:
       ``prior_variance`` if given, else the variance of μ itself,
       |D_l|²·c_f/Σ_{j<l}|D_j| (c_f the per-report RR variance), which makes ω the
       precision weight |earlier| / (|earlier| + |D_l|) for a stationary stream; with
       a public prior corpus and no ``prior_variance``, σ² = σ²_RR (ω = 1/2);
    3. rebuild the batch (as LP-LDA) and run ``iterations`` CGS sweeps with the
       asymmetric prior β^l (Eq. 10 as reconstructed):
       β^1 = β, β^{l+1}_{k,w} = β^l_{k,w} + λ · n^l_{k,w};
       λ = 0: batches independent; larger λ: stronger carry-over.

    The model is φ = (n^L + β^L)/(n^L_k + Σ_w β^L_{k,w}) after the last batch. The
    guarantee is LP-LDA's (each document reports once); all server steps are
    post-processing. ``batch_perplexity``: optional callable(model) evaluated after
    each batch (perplexity against the number of mini-batches).
    """

    privacy = "olp"

    def __init__(self, n_topics: int = 20, flip: float | None = None, epsilon: float | None = None,
                 alpha: float = 0.1, beta: float = 0.01, iterations: int = 50, batch_size: int = 1000,
                 lam: float = 0.5, prior_variance: float | None = None, prior_corpus: Corpus | None = None,
                 threshold: float = 1.0, seed: int | None = None, ll_every: int = 10, chunk_bits: int = 4_000_000,
                 workers: int | None = None):
        super().__init__(n_topics, flip, epsilon, alpha, beta, iterations, threshold, seed, ll_every, chunk_bits,
                         workers)
        if isinstance(batch_size, bool) or int(batch_size) < 1:
            raise ParameterError(f"batch size (--batch-size) must be >= 1, got {batch_size!r}")
        self.batch_size = int(batch_size)
        lam = float(lam)
        if not (0.0 <= lam <= 1.0):
            raise ParameterError(f"correlation factor lambda (--lambda) must be in [0, 1], got {lam!r}")
        self.lam = lam
        if prior_variance is not None and not (float(prior_variance) > 0 and math.isfinite(float(prior_variance))):
            raise ParameterError(f"prior variance (--prior-variance) must be positive and finite, got {prior_variance!r}")
        self.prior_variance = None if prior_variance is None else float(prior_variance)
        self.prior_corpus = prior_corpus

    def params(self) -> dict:
        return super().params() | {"batch_size": self.batch_size, "lambda": self.lam,
                                   "prior_variance": self.prior_variance,
                                   "prior_corpus": self.prior_corpus is not None}

    def fit(self, corpus: Corpus, callback: Callback | None = None, batch_callback=None):
        from textdp.topics.model import TopicModel

        check_corpus(corpus, self.n_topics)
        if self.prior_corpus is not None and list(self.prior_corpus.vocabulary) != list(corpus.vocabulary):
            raise ParameterError("the prior corpus must use the training vocabulary (build it with Corpus.from_texts(..., vocabulary=...))")
        src = random_source(self.seed)
        rng = src.generator()
        key = self.release_key()
        t0 = time.perf_counter()
        V, K = corpus.n_words, self.n_topics
        c_f = rr_variance(1, self.f)
        beta_wk = np.full((V, K), self.beta)
        pooled_est = np.zeros(V)
        pooled_n = 0
        state = None
        batches = []  # released in the accounting: facts computed from the randomized reports only
        batch_docs = []  # input documents per batch (curator-only)
        # mini-batches of the INPUT documents in input order, the empty ones included (every document reports
        # once, so the batches and their sizes do not depend on which documents are empty); each document's
        # report comes from its own keyed stream (its input index), whatever batch it falls in
        kept_pos, empty_pos = corpus.input_positions()
        all_pos = np.concatenate([kept_pos, empty_pos])
        row = np.concatenate([np.arange(corpus.n_docs, dtype=np.int64), np.full(empty_pos.size, -1, np.int64)])
        order = np.argsort(all_pos, kind="stable")
        all_pos, row = all_pos[order], row[order]
        n_input = all_pos.size
        n_batches = -(-n_input // self.batch_size)
        for b in range(n_batches):
            lo, hi = b * self.batch_size, min((b + 1) * self.batch_size, n_input)
            r, ps = row[lo:hi], all_pos[lo:hi]
            batch = corpus.subset(r[r >= 0])
            batch.skipped_docs = int((r < 0).sum())
            reports = self.encode(batch, key, streams=(ps[r >= 0], ps[r < 0]))
            N = reports.n_docs
            t_hat = rr_estimate(reports.counts(), N, self.f)
            var_rr = rr_variance(N, self.f)
            omega_mean = 0.0
            if pooled_n > 0 or self.prior_corpus is not None:
                if pooled_n > 0:
                    mu = pooled_est / pooled_n * N
                    s2 = self.prior_variance if self.prior_variance is not None else N * N * c_f / pooled_n
                else:
                    pc = self.prior_corpus
                    mu = np.asarray(pc.doc_word_binary().sum(axis=0)).ravel() / pc.n_docs * N
                    s2 = self.prior_variance if self.prior_variance is not None else var_rr
                with warnings.catch_warnings(record=True) as wlist:
                    warnings.simplefilter("always")
                    den = bayes_denoise(t_hat, N, self.f, mu, s2)
                n_fallback = int((~den.approx_ok).sum())
                est = den.estimate
                omega_mean = float(den.omega.mean())
                var_used = float(np.mean(den.variance))
            else:
                est, n_fallback, var_used = t_hat, 0, var_rr
            pooled_est += t_hat
            pooled_n += N
            rc = reconstruct_corpus(reports, est, corpus.vocabulary, rng, self.threshold, var_used)
            if rc.n_docs < K or rc.n_tokens == 0:
                batches.append({"batch": b + 1, "skipped": True})
                batch_docs.append(N)
                continue  # nothing usable in this batch: documented skip, prior unchanged
            state = GibbsState(rc, K, self.alpha, self.beta, rng, beta_wk=beta_wk)
            run_sweeps(state, self.iterations, self.ll_every, callback)
            batch_docs.append(N)
            info = {"batch": b + 1, "reconstructed_tokens": rc.n_tokens, "omega_mean": omega_mean,
                    "gaussian_fallback_words": n_fallback}
            phi = state.phi()
            beta_wk = beta_wk + self.lam * state.nwk
            if batch_callback is not None:
                info["callback"] = batch_callback(phi)
            batches.append(info)
        if state is None:
            raise InputError("no mini-batch kept enough documents after randomized response; raise --epsilon, "
                             "--batch-size or set --threshold 0")
        acc = self.accounting() | {"batches": batches,
                                   "post_processing": "moment estimator, Bayesian denoising, reconstruction, "
                                                      "streaming CGS with beta^l recursion"}
        return TopicModel(topic_word=phi, vocabulary=list(corpus.vocabulary), alpha=self.alpha, beta=self.beta,
                          method="olp-lda", params=self.params(), guarantee=self.guarantee, accounting=acc,
                          info={"preprocessing": corpus.preprocessing},
                          private=_private_facts(corpus, time.perf_counter() - t0, batch_docs=batch_docs),
                          seed=src.describe())
