"""Other libraries' word sanitizers as samplers for the metric-DP audit (:mod:`textdp.audit.metric`).

**pyPANTERA** 1.0.2 (``pip install pypantera``; its top-level package is named ``src``): CMP
(Feyisetan et al., WSDM 2020), Mahalanobis (Xu et al. 2020), VickreyCMP / VickreyMhl (Xu et al. 2021),
SanText (Yue et al. 2021), CusText (Chen et al. 2023) and TEM (Carvalho et al. 2023), run through their
own ``processText`` on an embedding table written to a GloVe-format text file (their ``Vocab`` reads
only files). Each is wrapped as ``f(word, n, rng) -> n words`` in a :class:`~textdp.audit.metric.CallableTarget`
with the claim its paper states:

=================  =====================================================================================
pypantera name     claim audited (per word)
=================  =====================================================================================
cmp                ``eps · d``, d Euclidean (Feyisetan et al. 2020, Thm. on d_X-privacy)
mahalanobis        ``eps · d_RM``, ``d_RM(x, x') = ||Sigma_lambda^(-1/2) (x - x')||`` with pypantera's own
                   ``Sigma_lambda^(1/2)`` (Xu et al. 2020)
vickrey            ``eps · d`` (Xu et al. 2021: the selection is post-processing of CMP's noisy vector)
vickrey-mhl        ``eps · d_RM`` (the same on Mahalanobis noise)
santext            ``eps · d`` (Yue et al. 2021, SanText)
custext            ``eps`` between any two words (Chen et al. 2023 state eps-DP; their proof covers
                   inputs that share an output set, and pyPANTERA gives every word its own top-k set)
tem                ``eps · d`` (Carvalho et al. 2023)
=================  =====================================================================================

pyPANTERA draws from numpy's *global* random state (``numpy.random.*``); the adapter seeds it from the
audit's generator around each call and restores it after (textdp itself never uses that state). Its
``Vocab`` loader reads the file in one chunk per CPU with a ``multiprocessing`` pool and can drop a line at
a chunk boundary: words it did not load are left out of the candidates (the target's ``notes`` say which).
A call that raises (e.g. its CusText's ``np.random.choice`` on float32 probabilities, "probabilities do not
sum to 1" under numpy 2) is reported per word through :class:`~textdp.audit.metric.SamplerFailure`.

mldp-text (``pip install mldp-text``) pins numpy < 2 and cannot share textdp's environment; the
benchmark (``benchmarks/bench_audit.py --sanitizers``) audits it only through a separate interpreter.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Sequence

import numpy as np

from textdp.audit.metric import CallableTarget, LawTarget, MetricClaim, SamplerFailure, _euclidean, nearest_word_candidates
from textdp.errors import MissingPackageError, ParameterError
from textdp.sanitize.base import _single_threaded_blas

__all__ = ["PYPANTERA", "pypantera_available", "pypantera_target", "write_glove_file"]

#: pyPANTERA mechanism name -> (module, class, required extra parameters with defaults)
PYPANTERA = {
    "cmp": ("src.EmbeddingPerturbationMechanism.cmp", "CMP", {}),
    "mahalanobis": ("src.EmbeddingPerturbationMechanism.mahalanobis", "Mahalanobis", {"lam": 0.75}),
    "vickrey": ("src.EmbeddingPerturbationMechanism.vickrey", "VickreyCMP", {"t": 0.75}),
    "vickrey-mhl": ("src.EmbeddingPerturbationMechanism.vickrey", "VickreyMhl", {"t": 0.75, "lam": 0.75}),
    "santext": ("src.SamplingPerturbationMechanism.santext", "SanText", {}),
    "custext": ("src.SamplingPerturbationMechanism.custext", "CusText", {"k": 20, "distance": "euclidean"}),
    "tem": ("src.SamplingPerturbationMechanism.tem", "TEM", {"beta": 0.001}),
}
#: words per processText call (their distance computation materialises (chunk, V, dim) floats)
_CHUNK = 100


def pypantera_available() -> bool:
    """Whether pyPANTERA (top-level package ``src`` with its mechanism modules) can be imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("src.EmbeddingPerturbationMechanism.cmp") is not None
    except (ImportError, ValueError):
        return False


def write_glove_file(words: Sequence[str], vectors: np.ndarray, path: str | os.PathLike) -> None:
    """Write ``words`` and their ``(k, dim)`` vectors as a GloVe text file (7 decimals)."""
    with open(path, "w", encoding="utf-8") as fh:
        for w, v in zip(words, np.asarray(vectors, dtype=np.float64)):
            fh.write(f"{w} {' '.join(f'{x:.7f}' for x in v)}\n")


@contextlib.contextmanager
def _global_numpy_state(rng: np.random.Generator):
    """Seed numpy's global state (which pyPANTERA draws from) from ``rng``; restore it afterwards."""
    state = np.random.get_state()
    np.random.seed(int(rng.integers(0, 2**32 - 1)))
    try:
        yield
    finally:
        np.random.set_state(state)


def pypantera_target(name: str, embeddings, epsilon: float, words: Sequence[str] | None = None,
                     vocabulary: Sequence[str] | int = 1000, n_words: int = 20, seed: int | None = 0,
                     law: bool = False, **params) -> CallableTarget | LawTarget:
    """pyPANTERA's mechanism ``name`` (a key of :data:`PYPANTERA`) as an audit target.

    embeddings: an :class:`textdp.embeddings.Embeddings` or a name/path (default tables as in
    :func:`textdp.embeddings.load_embeddings`); vocabulary: pyPANTERA's whole table (its output set), a
    list of words or the first ``k`` words of the embedding table (default 1,000: its distance step
    is ``O(V · dim)`` floats per word); words: the candidate inputs (default: ``n_words`` random words of
    the vocabulary, each with its nearest neighbour; ``seed`` picks them); params: the mechanism's own
    (``lam``, ``t``, ``k``, ``beta``; defaults in :data:`PYPANTERA`). Returns a
    :class:`~textdp.audit.metric.CallableTarget` whose ``fn`` calls pyPANTERA's ``processText``; with
    ``law=True`` (``custext`` only) a :class:`~textdp.audit.metric.LawTarget` holding the law pyPANTERA's own
    ``_getCustomizedMapping`` computes for each word (its word list and float32 probabilities, renormalised
    in float64), audited exactly: for when its sampler cannot run (``np.random.choice`` refuses its float32
    probabilities under numpy 2).
    Raises MissingPackageError without pypantera, ParameterError for an unknown name or parameter.
    """
    import importlib

    from textdp.embeddings import Embeddings, load_embeddings

    key = str(name).lower()
    if key not in PYPANTERA:
        raise ParameterError(f"unknown pypantera mechanism {name!r}; use one of {', '.join(PYPANTERA)}")
    if not pypantera_available():
        raise MissingPackageError("auditing pyPANTERA needs it installed: pip install pypantera")
    mod_name, cls_name, defaults = PYPANTERA[key]
    unknown = set(params) - set(defaults)
    if unknown:
        raise ParameterError(f"pypantera {key} has no parameter {sorted(unknown)[0]!r}; its parameters: "
                             f"{', '.join(defaults) or 'none'}")
    emb = embeddings if isinstance(embeddings, Embeddings) else load_embeddings(embeddings)
    if isinstance(vocabulary, (int, np.integer)):
        vocab = list(emb.words[: int(vocabulary)])
    else:
        vocab = list(dict.fromkeys(str(w) for w in vocabulary))
    rows = np.array([emb.index.get(w, -1) for w in vocab])
    if (rows < 0).any():
        raise ParameterError(f"vocabulary words without an embedding: {vocab[int(np.flatnonzero(rows < 0)[0])]!r}")
    vec = np.asarray(emb.vectors[rows], dtype=np.float64)
    cls = getattr(importlib.import_module(mod_name), cls_name)
    kwargs = {**defaults, **params, "epsilon": float(epsilon)}
    with tempfile.TemporaryDirectory(prefix="textdp-pypantera-") as tmp:
        path = os.path.join(tmp, "emb.txt")
        write_glove_file(vocab, vec, path)
        obj = cls({**kwargs, "embPath": path})
    loaded = obj.vocab.embeddings  # word -> float32 vector, as pyPANTERA read them
    lost = [w for w in vocab if w not in loaded]
    if words is None:
        keep = [i for i, w in enumerate(vocab) if w in loaded]
        words = nearest_word_candidates([vocab[i] for i in keep], vec[keep], n_words, seed)
    words = [w for w in dict.fromkeys(str(x) for x in words)]
    missing = [w for w in words if w not in loaded]
    words = [w for w in words if w in loaded]
    x = np.array([np.asarray(loaded[w], dtype=np.float64) for w in words])
    if key in ("mahalanobis", "vickrey-mhl"):
        sig_half = np.real(np.asarray(obj._sigmaLoc))  # pyPANTERA's Sigma_lambda^(1/2)
        inv = np.linalg.inv(sig_half)
        dist = _euclidean(x @ inv.T)
        metric = f"regularized Mahalanobis d_RM (lambda = {kwargs['lam']:g}, pypantera's Sigma)"
    else:
        dist = _euclidean(x)
        metric = "euclidean"
    if key == "custext":
        claim = MetricClaim(float(epsilon), 0.0, "discrete", "pure-dp", worst_case_epsilon=float(epsilon),
                            description=f"{epsilon:g}-DP per word (Chen et al. 2023; the proof covers inputs that "
                                        "share an output set)")
        dist = 1.0 - np.eye(len(words))
    else:
        claim = MetricClaim(float(epsilon), 0.0, metric, "metric-dp",
                            description=f"{epsilon:g}·d metric DP per word ({metric})")
    if law:
        if key != "custext":
            raise ParameterError("law=True reads the law from pyPANTERA's code: only for custext")
        labels = list(loaded)
        col = {w: i for i, w in enumerate(labels)}
        probs = np.zeros((len(words), len(labels)))
        for i, w in enumerate(words):
            sim, pd = obj._getCustomizedMapping(w)
            for y, q in zip(sim[w], pd[w]):
                probs[i, col[y]] += float(q)
            probs[i] /= probs[i].sum()
        t = LawTarget(words, probs, labels, claim, dist, name=f"pypantera {key} (its law)",
                      sampler_note="pyPANTERA 1.0.2 CusText._getCustomizedMapping: its top-k words and probabilities")
        t.notes = []
        return t
    fn = _sampler(key, obj)
    t = CallableTarget(fn, words, claim, dist, name=f"pypantera {key}",
                       sampler_note=f"pyPANTERA 1.0.2 {cls_name}.processText (numpy's global state, seeded from "
                                    f"the audit's generator per call); table of {len(vocab):,} words")
    t.notes = []
    if lost:
        t.notes.append(f"pyPANTERA's loader dropped {len(lost)} of {len(vocab)} words ({lost[0]!r}, ...)")
    if missing:
        t.notes.append(f"{len(missing)} candidate words not in pyPANTERA's table left out")
    return t


def _sampler(key: str, obj):
    embedding_family = key in ("cmp", "mahalanobis", "vickrey", "vickrey-mhl")

    def f(word: str, n: int, rng: np.random.Generator) -> list[str]:
        out: list[str] = []
        with _global_numpy_state(rng), _single_threaded_blas():  # its per-word 50 x 50 SVDs
            # (multivariate_normal) are ~100 times slower with BLAS threads contending on a busy machine
            for s in range(0, n, _CHUNK):
                k = min(_CHUNK, n - s)
                try:
                    if embedding_family:
                        text = obj.processText(obj.noisyEmb([word] * k))
                    else:
                        text = obj.processText([word] * k)
                except Exception as exc:  # noqa: BLE001 - the peer's own failure, reported per word
                    raise SamplerFailure(f"{type(exc).__name__}: {exc}") from None
                got = text.split(" ")
                if len(got) != k:
                    raise SamplerFailure(f"processText returned {len(got)} words for {k}")
                out.extend(got)
        return out

    f.__name__ = f"pypantera_{key}"
    return f
