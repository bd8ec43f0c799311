"""Latent Dirichlet allocation trained by collapsed Gibbs sampling (numba).

:class:`GibbsState` holds the sampler state (true integer counts, assignments,
prior) and runs sweeps; :class:`LDA` is the non-private trainer that returns a
:class:`textdp.topics.model.TopicModel`. The private trainers in
:mod:`textdp.topics.private` reuse :class:`GibbsState`.

Randomness: one explicit generator per run (:func:`textdp.noise.make_rng`; a
ChaCha20 CSPRNG unless a seed is given). Each sweep draws its N uniforms from it
in bulk and passes them to the numba kernel, which has no random state of its own.
The global numpy state is never used.

``LDA(workers=P)`` with P > 1 runs :class:`ParallelGibbsState`, an approximate parallel
sampler (AD-LDA, Newman et al. 2009): documents are split across P threads, each
sampling against its own stale copy of the topic-word counts, merged after every sweep.
It is **not** the exact collapsed Gibbs chain, so no inherent-privacy claim
(:func:`textdp.topics.cgs_inherent_epsilon`) is made for it, and the private trainers
never use it.
"""

from __future__ import annotations

import math
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from textdp.accounting.guarantees import NoPrivacy
from textdp.errors import InputError, ParameterError
from textdp.noise import make_rng, random_source
from textdp.topics import _kernels as kern
from textdp.topics.corpus import Corpus

__all__ = ["LDA", "GibbsState", "ParallelGibbsState", "check_hyperparameters", "check_workers",
           "approximate_sampler_note"]


def check_hyperparameters(n_topics, alpha, beta, iterations=1) -> tuple[int, float, float, int]:
    """Validate K >= 1, α > 0, β > 0 (finite), iterations >= 1; return them typed.

    Raises ParameterError with a one-line message.
    """
    if isinstance(n_topics, bool) or not isinstance(n_topics, (int, np.integer)) or n_topics < 1:
        raise ParameterError(f"number of topics K must be an integer >= 1 (--k), got {n_topics!r}")
    for name, v in (("alpha", alpha), ("beta", beta)):
        try:
            fv = float(v)
        except (TypeError, ValueError):
            raise ParameterError(f"{name} (--{name}) must be a positive number, got {v!r}") from None
        if not math.isfinite(fv) or fv <= 0:
            raise ParameterError(f"{name} (--{name}) must be a positive finite number, got {v!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 1:
        raise ParameterError(f"iterations (--iterations) must be an integer >= 1, got {iterations!r}")
    return int(n_topics), float(alpha), float(beta), int(iterations)


def check_workers(workers) -> int:
    """Validate the number of sampler threads (an integer >= 1); raise ParameterError otherwise."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ParameterError(f"workers (--workers) must be an integer >= 1, got {workers!r}")
    return int(workers)


def approximate_sampler_note(workers: int) -> str:
    """The statement that cards and the terminal carry for a run of the approximate parallel sampler."""
    return (f"approximate parallel sampler (AD-LDA, Newman et al. 2009), {int(workers)} workers: not the exact "
            "collapsed Gibbs chain; no inherent-privacy claim")


def check_corpus(corpus: Corpus, n_topics: int) -> None:
    """Raise InputError for an empty corpus, fewer documents than topics, or a one-word vocabulary."""
    if not isinstance(corpus, Corpus):
        raise ParameterError(f"expected a textdp.topics.Corpus, got {type(corpus).__name__}; build one with Corpus.from_texts")
    if corpus.n_tokens == 0 or corpus.n_docs == 0:
        raise InputError("the corpus has no tokens; every document is empty after preprocessing")
    if corpus.n_words < 2:
        raise InputError("the vocabulary has fewer than two words; a topic model needs at least two")
    if corpus.n_docs < n_topics:
        raise InputError(f"the corpus has {corpus.n_docs} documents, fewer than K={n_topics} topics; "
                         "lower --k or give a larger corpus")


class GibbsState:
    """State of a CGS run on one corpus.

    Arrays: ``W, D, Z`` (N,) int32; ``nwk`` (V, K) int32; ``ndk`` (M, K) int32;
    ``nk`` (K,) int64. Prior: symmetric ``beta`` (float) or, when ``beta_wk``
    (V, K) float64 is given, the asymmetric per-topic-word prior β_{k,w}.
    """

    def __init__(self, corpus: Corpus, n_topics: int, alpha: float, beta: float, rng: np.random.Generator,
                 beta_wk: np.ndarray | None = None):
        self.corpus = corpus
        self.K = int(n_topics)
        self.V = corpus.n_words
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.rng = rng
        self.W = np.ascontiguousarray(corpus.word_ids, dtype=np.int32)
        self.D = np.ascontiguousarray(corpus.doc_ids, dtype=np.int32)
        self.doc_len = np.ascontiguousarray(corpus.doc_lengths, dtype=np.int64)
        self.Z = rng.integers(0, self.K, size=self.W.shape[0]).astype(np.int32)
        self.nwk = np.zeros((self.V, self.K), dtype=np.int32)
        self.ndk = np.zeros((corpus.n_docs, self.K), dtype=np.int32)
        self.nk = np.zeros(self.K, dtype=np.int64)
        kern.init_counts(self.W, self.D, self.Z, self.nwk, self.ndk, self.nk)
        self.set_prior(beta_wk)

    def set_prior(self, beta_wk: np.ndarray | None) -> None:
        """Use the asymmetric prior ``beta_wk`` (V, K) (all entries > 0), or the symmetric β when None."""
        if beta_wk is None:
            self.beta_wk = None
            self.beta_k = None
            return
        b = np.ascontiguousarray(beta_wk, dtype=np.float64)
        if b.shape != (self.V, self.K):
            raise ParameterError(f"asymmetric prior must have shape (V, K) = {(self.V, self.K)}, got {b.shape}")
        if not np.all(np.isfinite(b)) or np.any(b <= 0):
            raise ParameterError("asymmetric topic-word prior must be positive and finite everywhere")
        self.beta_wk = b
        self.beta_k = b.sum(axis=0)

    def sweep(self) -> None:
        """One CGS sweep over all tokens (true counts updated in place)."""
        U = self.rng.random(self.W.shape[0])
        if self.beta_wk is None:
            kern.sweep_symmetric(self.W, self.D, self.Z, self.nwk, self.ndk, self.nk, self.alpha, self.beta,
                                 self.V * self.beta, U)
        else:
            kern.sweep_prior(self.W, self.D, self.Z, self.nwk, self.ndk, self.nk, self.alpha, self.beta_wk,
                             self.beta_k, U)

    def sweep_with_view(self, phi_wk: np.ndarray) -> None:
        """One sweep whose topic-word term is the fixed ``phi_wk`` (V, K) (HDP-LDA's noisy view).

        True counts ``nwk``/``nk`` are still updated, never touched by noise.
        """
        U = self.rng.random(self.W.shape[0])
        kern.sweep_fixed_phi(self.W, self.D, self.Z, np.ascontiguousarray(phi_wk), self.ndk, self.alpha, U,
                             self.nwk, self.nk, True)

    def log_likelihood(self) -> float:
        """Joint log p(w, z) of the current state (true counts; data-dependent, never released)."""
        if self.beta_wk is None:
            return float(kern.log_likelihood_symmetric(self.nwk, self.ndk, self.nk, self.doc_len, self.alpha,
                                                       self.beta))
        return float(kern.log_likelihood_prior(self.nwk, self.ndk, self.nk, self.doc_len, self.alpha,
                                               self.beta_wk, self.beta_k))

    def phi(self) -> np.ndarray:
        """(K, V) float64 topic-word estimate (n_k^(w) + β_{k,w}) / (n_k + Σ_w β_{k,w}) from the true counts."""
        if self.beta_wk is None:
            return ((self.nwk + self.beta) / (self.nk + self.V * self.beta)).T.copy()
        return ((self.nwk + self.beta_wk) / (self.nk + self.beta_k)).T.copy()

    def check_consistency(self) -> bool:
        """True when the count arrays equal the counts recomputed from the assignments."""
        nwk = np.zeros_like(self.nwk)
        ndk = np.zeros_like(self.ndk)
        nk = np.zeros_like(self.nk)
        kern.init_counts(self.W, self.D, self.Z, nwk, ndk, nk)
        return bool(np.array_equal(nwk, self.nwk) and np.array_equal(ndk, self.ndk) and np.array_equal(nk, self.nk))


class ParallelGibbsState(GibbsState):
    """Approximate parallel CGS: AD-LDA (Newman, Asuncion, Smyth & Welling 2009, "Distributed algorithms
    for topic models", JMLR 10, Sec. 2.1), ``workers`` = P >= 2 threads. **Not the exact collapsed Gibbs
    chain**: during a sweep each worker samples its documents against its own copy of the topic-word
    counts, which does not see the other workers' moves; after the sweep the copies are merged,
    n_k^(w) ← n_k^(w) + Σ_p (n_{k,p}^(w) − n_k^(w)) (the same for n_k), and every worker starts the next
    sweep from the merged counts. The counts stay exact tallies of the assignments after every merge
    (:meth:`check_consistency` holds); what differs from the exact chain is the law of the moves. No
    inherent-privacy bound (:func:`textdp.topics.cgs_inherent_epsilon`) applies to it.

    Symmetric priors only. Documents are split into P contiguous groups of about N/P tokens (whole
    documents). Arrays as in :class:`GibbsState`, plus ``local`` (P, V, K) int32 and ``local_nk`` (P, K)
    int64, the workers' copies: memory (P + 1)·V·K·4 bytes for the topic-word counts.

    Randomness: the initial assignments come from ``rng`` (the run's generator, as for
    :class:`GibbsState`); each worker then draws its uniforms from its own PCG64 stream, seeded from
    ``rng`` (``numpy.random.SeedSequence`` of 256 bits drawn from it, spawned P times), inside its
    thread. PCG64 is not a cryptographic generator; no privacy is claimed for this sampler. A seeded run
    is reproducible for a given P (the result does not depend on thread timing), and differs between
    values of P. Threads: a ``concurrent.futures.ThreadPoolExecutor`` of P − 1 threads plus the caller's
    (numba kernels and numpy's bulk draws release the GIL); :meth:`close` stops them.
    """

    def __init__(self, corpus: Corpus, n_topics: int, alpha: float, beta: float, rng: np.random.Generator,
                 workers: int = 2):
        P = check_workers(workers)
        if P < 2:
            raise ParameterError("ParallelGibbsState needs workers >= 2; use GibbsState for the exact chain")
        super().__init__(corpus, n_topics, alpha, beta, rng)
        self.workers = P
        N = self.W.shape[0]
        bounds = [0]
        for p in range(1, P):  # split at the document boundary at or before token N·p/P
            i = min(N, (N * p) // P)
            if 0 < i < N:
                i = int(np.searchsorted(self.D, self.D[i], side="left"))
            bounds.append(max(i, bounds[-1]))
        bounds.append(N)
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.row_bounds = np.linspace(0, self.V, P + 1).astype(np.int64)
        self.local = np.empty((P, self.V, self.K), dtype=np.int32)
        self.local[:] = self.nwk
        self.local_nk = np.empty((P, self.K), dtype=np.int64)
        self.local_nk[:] = self.nk
        entropy = [int(x) for x in rng.integers(0, 2 ** 32, size=8, dtype=np.uint64)]
        self.worker_rngs = [np.random.Generator(np.random.PCG64(s))
                            for s in np.random.SeedSequence(entropy).spawn(P)]
        self._U = [np.empty(int(self.bounds[p + 1] - self.bounds[p]), dtype=np.float64) for p in range(P)]
        self._pool = ThreadPoolExecutor(max_workers=P - 1, thread_name_prefix="textdp-adlda")
        self._finalizer = weakref.finalize(self, self._pool.shutdown, wait=False)

    def set_prior(self, beta_wk: np.ndarray | None) -> None:
        if beta_wk is not None:
            raise ParameterError("the approximate parallel sampler (workers > 1) supports the symmetric prior only")
        super().set_prior(None)

    def sweep_with_view(self, phi_wk: np.ndarray) -> None:
        raise ParameterError("the approximate parallel sampler (workers > 1) has no fixed-view sweep; HDP-LDA "
                             "uses the exact sampler")

    def _run(self, fn) -> None:
        futures = [self._pool.submit(fn, p) for p in range(1, self.workers)]
        fn(0)
        for f in futures:
            f.result()

    def _sample_part(self, p: int) -> None:
        U = self._U[p]
        self.worker_rngs[p].random(out=U)
        kern.sweep_range_symmetric(self.W, self.D, self.Z, self.local[p], self.ndk, self.local_nk[p], self.alpha,
                                   self.beta, self.V * self.beta, U, int(self.bounds[p]), int(self.bounds[p + 1]))

    def _merge_part(self, p: int) -> None:
        kern.merge_worker_counts(self.nwk, self.local, int(self.row_bounds[p]), int(self.row_bounds[p + 1]))

    def sweep(self) -> None:
        """One AD-LDA sweep: every worker samples its documents against its own copy, then the merge."""
        self._run(self._sample_part)
        self._run(self._merge_part)
        self.nk += (self.local_nk - self.nk).sum(axis=0)
        self.local_nk[:] = self.nk

    def close(self) -> None:
        """Stop the worker threads (also done when the state is garbage-collected)."""
        self._finalizer()


Callback = Callable[[int, "float | None", GibbsState], None]


class LDA:
    """Non-private LDA by collapsed Gibbs sampling (Griffiths & Steyvers 2004).

    Parameters: ``n_topics`` K >= 1; symmetric ``alpha`` (doc-topic) and ``beta``
    (topic-word) > 0; ``iterations`` sweeps; ``seed`` None (CSPRNG) or int
    (reproducible, not for release); ``ll_every``: compute the log-likelihood every
    this many sweeps (0 = never; the last sweep always); ``workers``: sampler threads.
    ``workers=1`` (default) is the exact collapsed Gibbs chain. ``workers > 1`` runs the
    approximate parallel sampler AD-LDA (:class:`ParallelGibbsState`; Newman et al. 2009):
    not the exact chain, so its card says so, no inherent-privacy claim is made, and
    ``fit`` refuses an :class:`textdp.topics.InherentPrivacyMonitor` callback
    (ParameterError).

    ``fit(corpus, callback=None)`` returns a :class:`TopicModel` whose topic-word
    matrix is φ from the final sample. ``callback(iteration, loglik_or_None, state)``
    is called after every sweep (progress bars, inherent-privacy monitoring).
    Raises ParameterError / InputError for bad parameters or corpora.
    """

    privacy = "none"

    def __init__(self, n_topics: int = 20, alpha: float = 0.1, beta: float = 0.01, iterations: int = 200,
                 seed: int | None = None, ll_every: int = 10, workers: int = 1):
        self.n_topics, self.alpha, self.beta, self.iterations = check_hyperparameters(n_topics, alpha, beta,
                                                                                      iterations)
        self.seed = seed
        self.ll_every = int(ll_every)
        self.workers = check_workers(workers)

    @property
    def guarantee(self):
        if self.workers > 1:
            return NoPrivacy(reason="non-private LDA by an " + approximate_sampler_note(self.workers))
        return NoPrivacy(reason="non-private collapsed Gibbs sampling (its inherent privacy is data-dependent; "
                                "see textdp.topics.cgs_inherent_epsilon)")

    def params(self) -> dict:
        p = {"n_topics": self.n_topics, "alpha": self.alpha, "beta": self.beta, "iterations": self.iterations}
        if self.workers > 1:  # the exact sampler's parameters (and its cards) stay as they were
            p |= {"workers": self.workers, "sampler": "AD-LDA (approximate parallel, not the exact chain)"}
        return p

    def fit(self, corpus: Corpus, callback: Callback | None = None):
        from textdp.topics.model import TopicModel

        from textdp.topics.privacy import InherentPrivacyMonitor

        if self.workers > 1 and isinstance(callback, InherentPrivacyMonitor):
            raise ParameterError("the inherent privacy of collapsed Gibbs sampling is a property of the exact chain; "
                                 f"workers={self.workers} runs the approximate parallel sampler (AD-LDA): use workers=1")
        check_corpus(corpus, self.n_topics)
        src = random_source(self.seed)
        rng = src.generator()
        t0 = time.perf_counter()
        accounting = {"mechanism": "none", "note": "no privacy: topic-word counts are released as is"}
        seed = src.describe()
        if self.workers > 1:
            state = ParallelGibbsState(corpus, self.n_topics, self.alpha, self.beta, rng, self.workers)
            accounting["sampler"] = approximate_sampler_note(self.workers)
            seed["sampler_generator"] = ("PCG64, one stream per worker, seeded from the run's generator "
                                         "(not cryptographic; no privacy is claimed)")
            # the run's generator only seeds the workers: say so instead of the release wording
            seed["note"] = (("seeded: reproducible; " if src.seeded else "") + "the Gibbs draws come from "
                            "non-cryptographic PCG64 worker streams (sampler_generator); a non-private model, "
                            "no release guarantee")
        else:
            state = GibbsState(corpus, self.n_topics, self.alpha, self.beta, rng)
        try:
            lls = run_sweeps(state, self.iterations, self.ll_every, callback)
        finally:
            if self.workers > 1:
                state.close()
        secs = time.perf_counter() - t0
        return TopicModel(
            topic_word=state.phi(), vocabulary=list(corpus.vocabulary), alpha=self.alpha, beta=self.beta,
            method="lda", params=self.params(), guarantee=self.guarantee, accounting=accounting,
            info={"preprocessing": corpus.preprocessing},
            private=_private_facts(corpus, secs, lls),
            seed=seed, topic_word_counts=state.nwk.T.copy(),
        )


def _private_facts(corpus: Corpus, seconds: float, lls=None, **more) -> dict:
    """Curator-only facts about a training run (exact statistics of the private input, timings, the
    log-likelihood of the true counts): :attr:`TopicModel.private`, shown on the terminal, never saved."""
    d = {"n_docs": corpus.n_docs, "n_tokens": corpus.n_tokens, "skipped_docs": int(corpus.skipped_docs),
         "oov_tokens": int(getattr(corpus, "oov_tokens", 0)), "seconds": seconds}
    if lls is not None:
        d["log_likelihood"] = lls
    return d | more


def run_sweeps(state: GibbsState, iterations: int, ll_every: int, callback: Callback | None,
               sweep: Callable[[], None] | None = None) -> list[list[float]]:
    """Run ``iterations`` sweeps; returns [[iteration, loglik], ...] for the sweeps where it was computed."""
    lls = []
    step = sweep or state.sweep
    for it in range(1, iterations + 1):
        step()
        ll = None
        if (ll_every and it % ll_every == 0) or it == iterations:
            ll = state.log_likelihood()
            lls.append([it, ll])
        if callback is not None:
            callback(it, ll, state)
    return lls
