"""HDP-LDA's Gibbs sweeps over partitions of documents, on any engine (issue 16, item 5).

Between two releases, HDP-LDA (:class:`textdp.topics.HDPLDA`) samples every token with the
topic-word term fixed to φ̃, computed from the last *released* noisy view:
p(z_i = k | ·) ∝ φ̃_{k,w_i} · (n_{m_i,-i}^{(k)} + α). Given φ̃, a document's new assignments
depend only on φ̃, α, its own tokens and assignments, and its own uniforms. If each document's
uniforms come from a stream addressed by the document itself, the sweeps over a partition of the
documents are *exactly* the sweeps of one process: any partition, any worker count, any engine
gives the same assignments, token for token. This is not an approximate parallel sampler (AD-LDA
samples against stale copies of the *true* counts; it is for the non-private LDA only).

Randomness (:func:`textdp.noise.keyed.keyed_record_uniforms`, purpose
:data:`textdp.noise.keyed.GIBBS`): the uniform of token ``j`` of the document with input index
``r`` in sweep ``t`` (``t = 0``: the initial assignment ``z = floor(K u)``) is the ChaCha20 word at
stream ``r``, position ``t << 20 | j >> 15``, block ``(j >> 3) & 4095`` of the run's sampler key
(:class:`textdp.noise.keyed.ReleaseKey`; ``from_seed(seed)`` for a seeded run, else from the OS).
A retried or speculative task recomputes the same assignments.

The driver keeps everything that is released or accounted: it draws the initial view and every
release's discrete Laplace noise once (from the run's generator, as a single process does),
computes φ̃, and sends each partition one :class:`SweepTask` per segment of sweeps (between two
releases, or one sweep when a callback or the log-likelihood needs the counts): the partition's
word ids, document lengths and input indices, its current assignments, φ̃, α and the sampler key,
all inside the task's argument (in memory; the key's repr is hidden; see docs/engines.md for what
each engine may spill). A worker returns only the partition's new assignments; the driver
rebuilds the true counts from them (for the next release, the log-likelihood and callbacks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from textdp.errors import ParameterError
from textdp.noise.keyed import GIBBS, ReleaseKey, keyed_record_uniforms
from textdp.topics import _kernels as kern
from textdp.topics.corpus import Corpus
from textdp.topics.lda import GibbsState

__all__ = ["DocumentPartition", "SweepTask", "sweep_partition", "partition_documents", "PartitionedState",
           "run_fixed_view_sweeps", "check_engine", "engine_refusal", "engine_note"]


def check_engine(engine):
    """``engine`` (None: the local engine, one worker) as a :class:`textdp.engines.Engine`;
    ParameterError for anything else."""
    from textdp.engines.base import Engine, LocalEngine

    if engine is None:
        return LocalEngine(1)
    if not isinstance(engine, Engine):
        raise ParameterError(f"engine must be a textdp.engines.Engine (textdp.engines.get_engine('dask', workers=2)), "
                             f"got {type(engine).__name__}")
    return engine


def engine_refusal(method: str, engine_name: str) -> str:
    """The one-line refusal of ``--engine`` other than local for a trainer other than HDP-LDA."""
    if method in ("lp", "olp"):
        what, why = (f"{method.upper()}-LDA's collapsed Gibbs sampler (on the corpus rebuilt from the reports)",
                     "not the published exact chain")
    else:
        what, why = ("non-private LDA's collapsed Gibbs sampler",
                     "not the exact chain, and it would void the inherent-privacy analysis")
    return (f"--engine {engine_name}: {what} stays single-node: each token's conditional depends on every other "
            f"document's counts, so a distributed sampler would be approximate Gibbs, {why}; only --privacy hdp "
            "(sampling from the released noisy view, independent per document) runs on dask or spark")


def engine_note(engine, partitions: int | None = None) -> str:
    """The curator's line about where HDP-LDA's sweeps run (no address, no host name)."""
    d = engine.describe()
    n = d["workers"] if partitions is None else int(partitions)
    return (f"HDP-LDA's sweeps run on {d['engine']} ({d['workers']} worker{'s' if d['workers'] != 1 else ''}) over "
            f"{n} partition{'s' if n != 1 else ''} of the documents: the same model as one process (each document's "
            "Gibbs draws come from its own keyed stream); the noise of every release is drawn once, here")


@dataclass(frozen=True, repr=False)
class DocumentPartition:
    """Whole documents ``doc_start:doc_end`` of a corpus (tokens ``start:end``): ``W`` (n,) int32 word
    ids, ``lengths`` (m,) int64 tokens per document, ``streams`` (m,) int64 the documents' input
    indices (their keyed streams)."""

    W: np.ndarray
    lengths: np.ndarray
    streams: np.ndarray
    start: int
    end: int
    doc_start: int
    doc_end: int

    def __repr__(self) -> str:
        return f"DocumentPartition(documents {self.doc_start}:{self.doc_end}, tokens {self.start}:{self.end})"


@dataclass(frozen=True, repr=False)
class SweepTask:
    """One partition's sweeps ``first..last`` (1-based, inclusive) with the fixed view ``phi``
    (V, K) float64. ``Z`` (n,) int32 the partition's assignments before sweep ``first``, or None
    when ``first == 1`` (the initial assignments are drawn from sweep 0's uniforms). ``key``: the
    sampler key (repr hidden). Picklable: it travels to the worker as the task's argument."""

    part: DocumentPartition
    Z: np.ndarray | None
    phi: np.ndarray
    alpha: float
    key: ReleaseKey
    first: int
    last: int

    def __repr__(self) -> str:
        return f"SweepTask({self.part!r}, sweeps {self.first}..{self.last}, key=<secret>)"


def initial_assignments(part: DocumentPartition, key: ReleaseKey, n_topics: int) -> np.ndarray:
    """(n,) int32: z = floor(K u) from sweep 0's keyed uniforms of each document."""
    u = keyed_record_uniforms(key, part.streams, part.lengths, 0, GIBBS)
    return np.minimum((u * n_topics).astype(np.int32), np.int32(n_topics - 1))


def sweep_partition(task: SweepTask) -> np.ndarray:
    """Run ``task``'s sweeps on its partition; returns the partition's assignments (n,) int32 after
    the last one. A pure function of its argument (the argument is not modified), so a retried or
    duplicated task returns the same array."""
    part = task.part
    phi = np.ascontiguousarray(task.phi, dtype=np.float64)
    K = phi.shape[1]
    Z = initial_assignments(part, task.key, K) if task.Z is None else np.array(task.Z, dtype=np.int32, copy=True)
    W = np.ascontiguousarray(part.W, dtype=np.int32)
    offsets = np.zeros(part.lengths.size + 1, dtype=np.int64)
    np.cumsum(part.lengths, out=offsets[1:])
    for t in range(int(task.first), int(task.last) + 1):
        U = keyed_record_uniforms(task.key, part.streams, part.lengths, t, GIBBS)
        kern.sweep_documents_fixed_phi(W, offsets, Z, phi, float(task.alpha), U)
    return Z


def partition_documents(doc_lengths: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Split documents ``0..M-1`` into at most ``parts`` contiguous ranges ``(doc_lo, doc_hi)`` of about
    equal token counts (each non-empty)."""
    lengths = np.asarray(doc_lengths, dtype=np.int64)
    M = lengths.size
    parts = max(1, min(int(parts), M))
    cum = np.concatenate([[0], np.cumsum(lengths)])
    total = int(cum[-1])
    cuts = [0]
    for p in range(1, parts):
        target = total * p / parts
        c = int(np.searchsorted(cum, target, side="left"))  # the document boundary nearest the target
        if c > 0 and (c > M or target - cum[c - 1] <= cum[c] - target):
            c -= 1
        c = min(max(c, cuts[-1] + 1), M - (parts - p))
        cuts.append(c)
    cuts.append(M)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


class PartitionedState(GibbsState):
    """The driver's state of a fixed-view run: assignments ``Z`` gathered from the partitions and the
    true counts ``nwk`` (V, K) int32, ``ndk`` (M, K) int32, ``nk`` (K,) int64 rebuilt from them
    (:meth:`sync`). The exact chain's state (a :class:`GibbsState`: log-likelihood, φ,
    consistency check), without a generator: the sweeps run in :func:`sweep_partition`."""

    def __init__(self, corpus: Corpus, n_topics: int, alpha: float, beta: float):
        self.corpus = corpus
        self.K = int(n_topics)
        self.V = corpus.n_words
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.rng = None
        self.W = np.ascontiguousarray(corpus.word_ids, dtype=np.int32)
        self.D = np.ascontiguousarray(corpus.doc_ids, dtype=np.int32)
        self.doc_len = np.ascontiguousarray(corpus.doc_lengths, dtype=np.int64)
        self.Z = np.zeros(self.W.shape[0], dtype=np.int32)
        self.nwk = np.zeros((self.V, self.K), dtype=np.int32)
        self.ndk = np.zeros((corpus.n_docs, self.K), dtype=np.int32)
        self.nk = np.zeros(self.K, dtype=np.int64)
        self.set_prior(None)
        self._stale = True

    def sync(self) -> None:
        """Rebuild the true counts from ``Z`` (after the partitions' sweeps)."""
        if self._stale:
            self.nwk[:] = 0
            self.ndk[:] = 0
            self.nk[:] = 0
            kern.init_counts(self.W, self.D, self.Z, self.nwk, self.ndk, self.nk)
            self._stale = False

    def sweep(self) -> None:
        raise ParameterError("a partitioned state's sweeps run on the engine (run_fixed_view_sweeps)")

    def sweep_with_view(self, phi_wk: np.ndarray) -> None:
        raise ParameterError("a partitioned state's sweeps run on the engine (run_fixed_view_sweeps)")


def run_fixed_view_sweeps(state: PartitionedState, phi: np.ndarray, key: ReleaseKey, engine, iterations: int,
                          sweeps_per_release: int, ll_every: int, callback, release, partitions: int | None = None,
                          streams: np.ndarray | None = None) -> list[list[float]]:
    """HDP-LDA's ``iterations`` sweeps over partitions of ``state``'s documents on ``engine``.

    ``phi`` (V, K) float64: the view of the first sweeps. After sweep ``t`` with
    ``t % sweeps_per_release == 0`` or ``t == iterations`` the driver calls ``release(nwk)`` with the
    true counts (V, K) int32, which returns the next view's φ̃ (V, K). ``partitions``: number of
    document partitions (default: the engine's workers). ``streams``: (M,) int64 input index of
    each document (default ``0..M-1``). ``callback(t, loglik_or_None, state)`` and the
    log-likelihood every ``ll_every`` sweeps (and after the last) as in
    :func:`textdp.topics.lda.run_sweeps`. Returns [[t, loglik], ...]."""
    corpus = state.corpus
    M = corpus.n_docs
    streams = np.arange(M, dtype=np.int64) if streams is None else np.asarray(streams, dtype=np.int64)
    if streams.shape != (M,):
        raise ParameterError("streams must give one input index per document")
    n_parts = engine.workers if partitions is None else int(partitions)
    if n_parts < 1:
        raise ParameterError(f"partitions must be >= 1, got {partitions!r}")
    ptr = np.concatenate([[0], np.cumsum(state.doc_len)]).astype(np.int64)
    parts = [DocumentPartition(state.W[ptr[a]:ptr[b]], state.doc_len[a:b], streams[a:b], int(ptr[a]), int(ptr[b]),
                               a, b) for a, b in partition_documents(state.doc_len, n_parts)]
    spr, lls, done = int(sweeps_per_release), [], 0
    phi = np.ascontiguousarray(phi, dtype=np.float64)
    while done < iterations:
        end = min(iterations, (done // spr + 1) * spr)  # the next release (or the last sweep)
        if callback is not None:
            end = done + 1
        elif ll_every:
            end = min(end, (done // ll_every + 1) * ll_every)
        tasks = [SweepTask(p, None if done == 0 else state.Z[p.start:p.end], phi, state.alpha, key, done + 1, end)
                 for p in parts]
        for p, z in zip(parts, engine.map(sweep_partition, tasks, description="HDP-LDA sweeps")):
            state.Z[p.start:p.end] = z
        state._stale = True
        done = end
        if done % spr == 0 or done == iterations:
            state.sync()
            phi = np.ascontiguousarray(release(state.nwk), dtype=np.float64)
        ll = None
        if (ll_every and done % ll_every == 0) or done == iterations:
            state.sync()
            ll = state.log_likelihood()
            lls.append([done, ll])
        if callback is not None:
            state.sync()
            callback(done, ll, state)
    state.sync()
    return lls
