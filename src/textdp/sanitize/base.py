"""The shared base of every word-level sanitizer (:class:`TokenSanitizer`) and the table of the
mechanisms built on it. Each family of mechanisms has its own module (:mod:`textdp.sanitize.santext`,
:mod:`textdp.sanitize.perturbation`, ...); this module holds what they share: fitting, the
out-of-vocabulary policy, keyed per-token randomness, the fused exponential-mechanism sampler and
the text rebuild.

Papers:

* Yue, Du, Wang, Li, Sun, Chow. *Differential Privacy for Text Analytics via
  Natural Text Sanitization.* Findings of ACL 2021 (SanText, SanText+; Sec. 4.2,
  4.3, App. A.2). Spec: ``santext-and-audit.md`` Part A.
* Feyisetan, Balle, Drake, Diethe. *Privacy- and Utility-Preserving Textual
  Analysis via Calibrated Multivariate Perturbations.* WSDM 2020 (FBDD / MadLib).

Every mechanism sanitizes each token independently:

=============  ======================================================  ==================================
mechanism      p(y | x)                                                guarantee (per token)
=============  ======================================================  ==================================
SanText        exp(-eps d(x,y)/2) / Z(x) over the output vocabulary     eps·d(x,x') + eps_s metric LDP
SanText+       x sensitive: same, restricted to the sensitive set V_S;  (eps, eps0 = ln(1/p) + eps_s)-UMLDP
               x non-sensitive: keep with prob 1-p, else as above
FBDD           nearest output word to phi(x) + z,                       eps·d(x,x') metric LDP
               z ~ density ∝ exp(-eps ||z||)
=============  ======================================================  ==================================

with ``d`` the Euclidean distance between raw embedding vectors and ``eps_s``
(``mech.sampling_epsilon0``, ~1e-5) the accounted cost of float-safe sampling. Per-token
guarantees compose over a document's tokens: two documents of equal length L
are ``eps · Σ_i d(x_i, x'_i)``-indistinguishable (plus ``L·eps0`` for SanText+).

Sampling is float-safe (issue 8): SanText and SanText+ draw through the
integer-weighted exponential mechanism of :mod:`textdp.noise` (uniform share
``eta``, exact integer sampling; :mod:`textdp.sanitize.sampling`), so no output
ever has probability 0; the accounted extra loss is ``guarantee.epsilon0``
(about ``1.2e-5·eps`` for GloVe 6B 50d). SanText+'s keep/resample coin is an
exact Bernoulli; FBDD's noise is a keyed multivariate Laplace with a uniform share
``eta`` (its float truncation is charged in ``epsilon0``; see :class:`FBDD`).

What a release reveals besides the sampled words (issue 12; design.md):

* **Law**: by default the output vocabulary is public (:mod:`textdp.sanitize.vocabulary`)
  and SanText+'s sensitive set is ranked in that list's public order, so the law of
  one token depends only on that token, the parameters and public data. The paper's
  corpus vocabulary (``output_vocabulary="corpus"``) and corpus frequencies
  (``frequencies="corpus"``) are explicit options whose cards say what they leave
  unprotected.
* **Randomness**: per-record keyed ChaCha20 streams (:mod:`textdp.noise.keyed`):
  the output does not depend on chunking, block size or workers.
* **Layout**: :meth:`textdp.sanitize.corpus.TokenizedTexts.rebuild` decides every
  space from the input's separators and the *output* tokens only, never from
  whether a token was kept.
* **Worst case**: ``guarantee.worst_case_epsilon`` is the plain-DP figure per token
  over every pair of accepted inputs (out-of-vocabulary tokens included).

Performance: each *distinct* input word's distribution is computed once per
call, in blocks of ``B`` words (one float64 GEMM per block, memory
``B × |V_out|`` float64, set by ``block_bytes``), and all its occurrences are
sampled at once (numba kernel, numpy fallback). The ``V × V`` matrix of the
official code is never built, so the full 400k-word GloVe output vocabulary
works in well under 2 GB.

Public API used by other capabilities (attacks, evaluation, audit):

* ``mech.fit(texts)`` then ``mech.sanitize(texts)`` -> list of str;
  :func:`textdp.sanitize.sanitize_texts` returns the statistics too.
* ``mech.output_words`` (list of ``V_out`` str) and ``mech.output_rows``
  (int64 ``(V_out,)`` embedding rows) -- the output vocabulary, in column order.
* ``mech.input_rows(words)`` -> int64 embedding rows (-1 if out of vocabulary).
* ``mech.probabilities(words_or_rows)`` -> float64 ``(k, V_out)``: the exact
  output distribution each input word is sampled from (SanText, SanText+; the
  integer law of the secure sampler), rows sum to 1.
  ``mech.ideal_probabilities(words)``: the paper's formula in float64 (no uniform
  mix); the two differ by a factor within ``exp(±epsilon0)``-ish (see
  :func:`textdp.sanitize.sampling.sampling_epsilon0`).
  FBDD has no closed form: use ``mech.estimate_probabilities``.
* ``mech.sample_rows(rows, rng)`` -> int64 output embedding rows, one
  independent draw per entry of ``rows`` (in-vocabulary inputs only).
* ``mech.guarantee`` (a :mod:`textdp.accounting.guarantees` object).
"""


from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from textdp.errors import InputError, ParameterError
from textdp.noise import DEFAULT_ETA, make_rng, random_source
from textdp.noise import keyed
from textdp.noise.keyed import ReleaseKey
from textdp.sanitize import sampling
from textdp.sanitize.corpus import TokenizedTexts, count_rows, tokenize_texts
from textdp.sanitize.sampling import DEFAULT_BLOCK_BYTES, MIN_BLOCK_ROWS, DistanceKernel

#: rows per block of the fused kernel (at most)
FUSED_MAX_ROWS = 64

__all__ = ["TokenSanitizer", "SanitizeStats", "OOV_POLICIES", "OUTPUT_VOCABULARIES", "check_epsilon", "check_unit",
           "CORPUS_VOCABULARY_WARNING", "CORPUS_FREQUENCIES_WARNING"]

#: what happens to a token without an embedding (never a silent leak: "keep" must be asked for)
OOV_POLICIES = ("uniform", "unk", "drop", "keep")
#: output vocabulary choices: a public word list (default; :mod:`textdp.sanitize.vocabulary`), the words
#: of the fitted corpus that have embeddings (the paper's choice: releases which words occur), or the
#: whole embedding table; a list of words or a word-list file is public data by the caller's word
OUTPUT_VOCABULARIES = ("public", "corpus", "full")
#: the statement a card and the terminal carry when the output vocabulary comes from the corpus
CORPUS_VOCABULARY_WARNING = (
    "the output vocabulary is the set of input words that have embeddings (--output-vocabulary corpus, the "
    "paper's choice): every token's output law depends on the whole corpus, and which words occur in the "
    "corpus is released UNPROTECTED (a word can appear in the output only if some document contains it)")
#: the same for SanText+'s sensitive set ranked by corpus counts
CORPUS_FREQUENCIES_WARNING = (
    "the sensitive set is ranked by corpus counts (--frequencies corpus, the paper's choice): whether a word "
    "is sensitive, hence its output law, depends on the rest of the corpus, and the corpus's word "
    "frequencies are released UNPROTECTED")


@contextlib.contextmanager
def _single_threaded_blas():
    """Limit BLAS to one thread while our own worker threads run (avoids oversubscription)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a core dependency
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def run_blocks(run: Callable[[int], int], n_blocks: int, workers: int,
               progress: Callable[[int], None] | None = None) -> None:
    """Call ``run(i)`` for every block ``i < n_blocks`` (on ``workers`` threads when more than one block),
    BLAS single-threaded meanwhile; ``progress(k)`` with the token count each call returns, as blocks end."""
    with _single_threaded_blas():
        if workers > 1 and n_blocks > 1:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for k in pool.map(run, range(n_blocks)):
                    if progress is not None:
                        progress(k)
        else:
            for i in range(n_blocks):
                k = run(i)
                if progress is not None:
                    progress(k)


def check_epsilon(epsilon) -> float:
    """A positive finite float, else ParameterError (named ``--epsilon``, as the CLI option).

    Each mechanism also has a supported range (``epsilon_min``, ``epsilon_max``),
    checked by its constructor before anything is loaded (:meth:`TokenSanitizer.check_epsilon_range`).
    """
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"--epsilon must be a number, got {epsilon!r}") from None
    if not math.isfinite(e) or e <= 0:
        raise ParameterError(f"--epsilon must be a positive finite number, got {epsilon!r}")
    return e


def check_unit(value, name: str) -> float:
    """A float in [0, 1], else ParameterError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number in [0, 1], got {value!r}") from None
    if not (0.0 <= v <= 1.0):  # also rejects NaN
        raise ParameterError(f"{name} must be in [0, 1], got {value!r}")
    return v


@dataclass
class SanitizeStats:
    """What one sanitization run did (summed over chunks with :meth:`merge`).

    Counts are tokens unless named otherwise; ``seconds`` is wall time of the
    whole call, ``sampling_seconds`` the part spent computing distributions and
    drawing (the hot path).
    """

    documents: int = 0
    tokens: int = 0
    in_vocabulary_tokens: int = 0
    changed_tokens: int = 0
    oov_tokens: int = 0
    oov_policy: str = "uniform"
    dropped_tokens: int = 0
    distinct_input_words: int = 0
    max_document_tokens: int = 0
    seconds: float = 0.0
    sampling_seconds: float = 0.0

    @property
    def share_changed(self) -> float:
        return self.changed_tokens / self.tokens if self.tokens else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    @property
    def sampling_tokens_per_second(self) -> float:
        return self.in_vocabulary_tokens / self.sampling_seconds if self.sampling_seconds > 0 else float("nan")

    def merge(self, other: "SanitizeStats") -> "SanitizeStats":
        """Sum of two runs (``distinct_input_words`` is a per-chunk sum, an upper bound)."""
        d = {k: getattr(self, k) + getattr(other, k) for k in
             ("documents", "tokens", "in_vocabulary_tokens", "changed_tokens", "oov_tokens", "dropped_tokens",
              "distinct_input_words", "seconds", "sampling_seconds")}
        return SanitizeStats(oov_policy=self.oov_policy,
                             max_document_tokens=max(self.max_document_tokens, other.max_document_tokens), **d)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["share_changed"] = self.share_changed
        d["tokens_per_second"] = self.tokens_per_second
        d["sampling_tokens_per_second"] = self.sampling_tokens_per_second
        return d


def _as_embeddings(embeddings):
    from textdp.embeddings import Embeddings, load_embeddings

    if isinstance(embeddings, Embeddings):
        return embeddings
    return load_embeddings(embeddings)


@dataclass
class _Fitted:
    counts: np.ndarray  # (V,) int64 corpus count per embedding row
    documents: int = 0
    tokens: int = 0
    oov_tokens: int = 0


class ReleaseKeys:
    """The release keys of a sanitizer (token- or document-level): ``rng`` None (a fresh 256-bit key from
    the OS per release), an int seed (the i-th release's key derived from the seed and i; not for release)
    or a ``numpy.random.Generator`` (keys drawn from it). Sets ``seed_info`` for the card."""

    def __new__(cls, *args, **kwargs):
        # the constructor call, kept so that an engine can rebuild the mechanism on a worker
        # (textdp.engines.base.ReleasePlan) without shipping its embedding table
        obj = super().__new__(cls)
        obj._init_call = (args, dict(kwargs))
        return obj

    def __getstate__(self) -> dict:
        """A pickled copy (``pickle``, ``cloudpickle``, ``copy.deepcopy``) leaves :attr:`last_stats` behind:
        the last call's exact counts are statistics of a private input (the card leaves them out too)."""
        state = self.__dict__.copy()
        if "last_stats" in state:
            state["last_stats"] = None
        return state

    def _init_keys(self, rng) -> None:
        self._gen = None  # a caller's Generator, which release keys are drawn from
        self._seed = None
        if isinstance(rng, np.random.Generator):
            self._gen = rng
            self.seed_info = {"seeded": None, "seed": None, "generator": "ChaCha20 (per-record keyed streams)",
                              "note": "keys drawn from a caller-supplied generator"}
        else:
            src = random_source(rng)  # validates the seed
            self._seed = src.seed
            self.seed_info = src.describe()
            self.seed_info["generator"] = "ChaCha20 (per-record keyed streams, 256-bit key)"
        self._n_keys = 0
        self._release_key: ReleaseKey | None = None

    def _next_key(self) -> ReleaseKey:
        """A new release key: from the caller's Generator, from the seed and the release's number,
        or fresh from the OS."""
        i = self._n_keys
        self._n_keys += 1
        if self._gen is not None:
            return ReleaseKey.from_generator(self._gen)
        if self._seed is not None:
            return ReleaseKey.from_seed(self._seed, release=i)
        return ReleaseKey.fresh()

    def begin_release(self) -> None:
        """Start a release made of several calls (chunks of one file): the chunks passed to
        :meth:`sanitize_with_stats` with ``first_record=`` share this release's key, and the
        record index (``first_record`` + position in the chunk) addresses each document's
        streams. A seeded mechanism's first release uses the same key as its first
        stand-alone call, so the CLI and the API give the same seeded output."""
        self._release_key = self._next_key()


class TokenSanitizer(ReleaseKeys):
    """Base class: vocabulary fitting, OOV policy, tokenization and text rebuild.

    Parameters (shared by all mechanisms):

    embeddings: an :class:`textdp.embeddings.Embeddings` or a name/path for
        :func:`textdp.embeddings.load_embeddings` (default ``"glove-6b-50d"``).
    epsilon: privacy parameter per token (positive, finite, within the mechanism's
        ``[epsilon_min, epsilon_max]``: SanText and SanText+ at most 1e100, FBDD at
        least 1e-20). Its unit is "per unit of Euclidean embedding distance": the
        guarantee is ``eps·d(x,x')``.
    output_vocabulary: ``"public"`` (the default: a public word list,
        :func:`textdp.sanitize.vocabulary.public_vocabulary` -- for GloVe 6B the
        shipped first 30,000 words of the table; the law of every token is then
        independent of the rest of the corpus), ``"corpus"`` (words of the fitted
        texts that have embeddings; the paper's choice: which words occur in the
        corpus is released unprotected, and cards say so), ``"full"`` (every word
        of the embedding table, 400k for GloVe 6B), a list of words, or the path
        of a word-list file (one word per line; public data by the caller's word).
        Any input word with an embedding is sanitized, inside the output
        vocabulary or not.
    oov: policy for tokens without an embedding: ``"uniform"`` (default: replaced by
        a word drawn uniformly from the output vocabulary -- from the sensitive set
        for SanText+ -- independently of which OOV token it was: indistinguishable
        among OOV tokens, but an OOV token is not protected against an in-vocabulary
        one beyond the worst-case figure of ``guarantee.worst_case_epsilon``),
        ``"unk"`` (replaced by ``unk_token``), ``"drop"`` (removed) or ``"keep"``
        (released unchanged: NO protection for them; only when asked for). For
        ``unk``, ``drop`` and ``keep`` whether a token had an embedding is released.
    rng: ``None`` (cryptographically secure: every release gets a fresh 256-bit
        ChaCha20 key from the OS), an int seed (reproducible, not for release: the
        i-th release's key is derived from the seed and i) or a
        ``numpy.random.Generator`` (keys are drawn from it). All draws of a release
        come from per-record keyed streams (:mod:`textdp.noise.keyed`): record
        ``r`` (its index in input order) and token position ``t`` address the
        stream, so the output does not depend on chunking, blocks or workers.
    block_bytes: memory budget of one weight block, at least 16 rows; memory use is
        about ``workers × block_bytes`` plus the output embeddings as float64. Default
        (None): 256 MiB for the fused numba kernel, which takes at most 64 rows (15 MB
        per worker for the 30,000-word default vocabulary, 195 MiB for the full 400k
        GloVe), and 32 MiB for the numpy fallback.
    eta: uniform share mixed into SanText's exponential mechanism by the
        float-safe sampler (default ``2**-20``; see :mod:`textdp.sanitize.sampling`).
    workers: threads computing blocks in parallel (default ``min(4, cpu_count)``);
        every token draws from its own keyed stream, so a seeded run gives the same
        output for any number of workers.
    device: ``"cpu"`` (default: the numba/numpy sampler), ``"cuda"`` or ``"auto"``
        (:func:`textdp.models.device.resolve_device`): SanText's and SanText+'s sampler on a
        CUDA device (:mod:`textdp.sanitize._torch_kernel`: the same integer law and keyed
        uniforms, so the same draws except at float ties; the same accounted ``epsilon0``).
        FBDD has no GPU sampler: ``cuda`` is refused, ``auto`` means ``cpu``.

    Raises ParameterError for invalid parameters.
    """

    #: whether the mechanism's sampler runs on a torch device (SanText, SanText+)
    torch_sampler = False

    name = "token-sanitizer"
    #: the paper (authors, venue, section) the mechanism implements, for cards and listings
    paper: str = ""
    #: whether ``workers > 1`` parallelises the sampler (threads over blocks of distinct words)
    supports_workers: bool = True
    #: document-level mechanisms (a document in, a document out: the token-layout rule does not apply)
    document_level: bool = False
    exact_probabilities = True
    #: supported epsilon range [epsilon_min, epsilon_max] of the mechanism and why it ends there
    epsilon_min: float = 0.0
    epsilon_max: float = math.inf
    epsilon_limit_reason: str = ""

    @classmethod
    def check_epsilon_range(cls, epsilon) -> float:
        """``epsilon`` as a float if it lies in this mechanism's supported range, else
        ParameterError naming ``--epsilon``, the range and why it ends there (the
        limits come from float arithmetic, not from the data)."""
        e = check_epsilon(epsilon)
        if e < cls.epsilon_min:
            raise ParameterError(f"--epsilon {e!r} is too small for {cls.name}: the smallest supported is "
                                 f"{cls.epsilon_min:g} ({cls.epsilon_limit_reason})")
        if e > cls.epsilon_max:
            raise ParameterError(f"--epsilon {e!r} is too large for {cls.name}: the largest supported is "
                                 f"{cls.epsilon_max:g} ({cls.epsilon_limit_reason})")
        return e

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, output_vocabulary="public",
                 oov: str = "uniform", unk_token: str = "[UNK]", rng=None, block_bytes: int | None = None,
                 workers: int | None = None, eta: float = DEFAULT_ETA, device: str = "cpu"):
        self.epsilon = self.check_epsilon_range(epsilon)  # before the embeddings are loaded
        from textdp.models.device import resolve_device

        if not self.torch_sampler and str(device).strip().lower() == "auto":
            device = "cpu"
        self.device = resolve_device(device)
        if self.device != "cpu" and not self.torch_sampler:
            raise ParameterError(f"--device {self.device}: {self.name} has no GPU sampler; use --device cpu")
        #: torch device of the exponential-mechanism sampler, None for the numba/numpy one
        self.sampler_device = None if self.device == "cpu" else self.device
        try:
            self.eta = float(eta)
        except (TypeError, ValueError):
            raise ParameterError(f"eta must be a number in (0, 1), got {eta!r}") from None
        if not (0.0 < self.eta < 1.0):
            raise ParameterError(f"eta must be in (0, 1), got {eta!r}")
        self._vocab_info = None  # PublicVocabulary of a public/file/list output vocabulary
        if isinstance(output_vocabulary, (str, os.PathLike)) and str(output_vocabulary) not in OUTPUT_VOCABULARIES:
            from textdp.sanitize.vocabulary import read_vocabulary_file

            if not os.path.isfile(output_vocabulary):
                raise ParameterError(
                    f"output_vocabulary (--output-vocabulary) must be one of {', '.join(OUTPUT_VOCABULARIES)}, "
                    f"a list of words or a word-list file, got {str(output_vocabulary)!r} (no such file)")
            self._vocab_info = read_vocabulary_file(output_vocabulary)
            output_vocabulary = "file"
        elif not isinstance(output_vocabulary, str):
            from textdp.sanitize.vocabulary import PublicVocabulary, _digest

            words = list(dict.fromkeys(str(w) for w in output_vocabulary))
            self._vocab_info = PublicVocabulary(tuple(words), "custom list", _digest(words))
            output_vocabulary = "custom"
        self.output_vocabulary = output_vocabulary
        if oov not in OOV_POLICIES:
            raise ParameterError(f"oov (--oov) must be one of {', '.join(OOV_POLICIES)}, got {oov!r}")
        self.oov = oov
        self.unk_token = str(unk_token)
        if block_bytes is not None and int(block_bytes) < 1024:
            raise ParameterError(f"block_bytes (--block-size, in MiB) must be at least 1024 bytes, got {block_bytes!r}")
        #: the caller's block budget, or None (the backend's default)
        self.block_bytes = None if block_bytes is None else int(block_bytes)
        self.workers = max(1, int(workers if workers is not None else min(4, os.cpu_count() or 1)))
        self.embeddings = _as_embeddings(embeddings)
        if self.eta * 2.0**52 < len(self.embeddings):  # every outcome keeps >= 2^10 integer weight units
            raise ParameterError(f"eta={self.eta:g} is too small for {len(self.embeddings)} words "
                                 f"(need eta >= {len(self.embeddings) * 2.0**-52:.3g})")
        self._init_keys(rng)
        self._tokenizer = None
        self._fitted: _Fitted | None = None
        self._prepared = False
        self.last_stats: SanitizeStats | None = None

    # ------------------------------------------------------------------ fitting
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = self.embeddings.tokenizer()
        return self._tokenizer

    def tokenize(self, texts) -> TokenizedTexts:
        """Tokenize ``texts`` to this mechanism's embedding vocabulary."""
        tk = self.tokenizer if self.embeddings.kind == "wordpiece" else None
        return tokenize_texts(texts, self.embeddings, tk)

    def fit(self, texts: Iterable[str]) -> "TokenSanitizer":
        """Count the words of ``texts``: needed only by the corpus-dependent options
        (``output_vocabulary="corpus"``, SanText+'s ``frequencies="corpus"``); with the
        public defaults the mechanism's law does not depend on them (the counts are
        then only the curator's statistics). Only the texts passed here are counted
        (SanText's official code also counted the dev/test file). Returns ``self``.
        """
        self._fitted = None
        return self.partial_fit(texts)

    def partial_fit(self, texts: Iterable[str], keep_tokens: bool = True) -> "TokenSanitizer":
        """Add ``texts`` to the counts (for streaming a large file chunk by chunk).

        ``keep_tokens=True`` keeps this batch's tokenization so that a following
        ``sanitize`` of the same texts does not tokenize again; ``False`` only
        counts (faster, and nothing is kept: the streaming fit pass)."""
        if self._fitted is None:
            self._fitted = _Fitted(np.zeros(len(self.embeddings), dtype=np.int64))
        texts = list(texts)
        if not keep_tokens:
            counts, n_docs, n_tokens, n_oov = count_rows(texts, self.embeddings, self.tokenizer)
            self._fitted.counts += counts
            self._fitted.documents += n_docs
            self._fitted.tokens += n_tokens
            self._fitted.oov_tokens += n_oov
            self._prepared = False
            return self
        tok = self.tokenize(texts)
        self._tok_cache = (texts, tok)  # fit(texts).sanitize(texts) tokenizes once
        rows = tok.rows
        ok = rows >= 0
        self._fitted.counts += np.bincount(rows[ok], minlength=len(self.embeddings))
        self._fitted.documents += tok.n_docs
        self._fitted.tokens += tok.n_tokens
        self._fitted.oov_tokens += int((~ok).sum())
        self._prepared = False
        return self

    @property
    def corpus_dependent(self) -> bool:
        """Whether the law depends on the fitted corpus (an explicit corpus option was chosen)."""
        return self.output_vocabulary == "corpus"

    @property
    def is_fitted(self) -> bool:
        return self._fitted is not None or not self.corpus_dependent

    def _require_fit(self):
        if not self.is_fitted:
            raise ParameterError(f"{type(self).__name__} is not fitted: call .fit(texts) first "
                                 "(or use the public output vocabulary)")

    def _prepare(self) -> None:
        """Build the output vocabulary (and mechanism-specific state) once after fitting."""
        if self._prepared:
            return
        self._require_fit()
        emb = self.embeddings
        if self.output_vocabulary == "full":
            out = np.arange(len(emb), dtype=np.int64)
        elif self.output_vocabulary == "corpus":
            out = np.flatnonzero(self._fitted.counts > 0).astype(np.int64)
        else:
            if self._vocab_info is None:  # "public"
                from textdp.sanitize.vocabulary import public_vocabulary

                self._vocab_info = public_vocabulary(emb)
            words = self._vocab_info.words
            missing = [w for w in words if w not in emb.index]
            if missing:
                raise ParameterError(f"{len(missing)} output words of {self._vocab_info.name} have no embedding "
                                     f"in {emb.source} (first: {missing[0]!r})")
            out = np.unique(emb.rows(list(words)))
        if len(out) == 0:
            raise InputError("no word of the input has an embedding: nothing to sample from; check the "
                             "--embeddings and the text column")
        self.output_rows = out
        self._out_pos = np.full(len(emb), -1, dtype=np.int64)
        self._out_pos[out] = np.arange(len(out))
        self._words_arr = None
        self._kernel_cache = None
        self._prepare_mechanism()
        self._prepared = True

    def _prepare_mechanism(self) -> None:  # pragma: no cover - overridden
        pass

    def _vectors(self, rows: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.embeddings.vectors[rows], dtype=np.float32)

    @property
    def output_words(self) -> list[str]:
        """The output vocabulary (column order of :meth:`probabilities`)."""
        self._prepare()
        w = self.embeddings.words
        return [w[i] for i in self.output_rows.tolist()]

    def _word_array(self) -> np.ndarray:
        if self._words_arr is None:
            self._words_arr = np.asarray(self.embeddings.words, dtype=object)
        return self._words_arr

    def input_rows(self, words) -> np.ndarray:
        """Embedding rows of ``words`` (str, normalised like the tokenizer), -1 if OOV;
        integer inputs are taken as rows already."""
        arr = np.asarray(words)
        if arr.dtype.kind in "iu":
            return arr.astype(np.int64).reshape(-1)
        idx = self.embeddings.index
        low = self.embeddings.lowercase
        return np.fromiter((idx.get(w.lower() if low else w, -1) for w in arr.reshape(-1).tolist()),
                           dtype=np.int64, count=arr.size)

    def _known_rows(self, words) -> np.ndarray:
        """:meth:`input_rows` of ``words`` after :meth:`_prepare`, for the exact-law methods: ParameterError
        if one has no embedding (an out-of-vocabulary token's law is the OOV policy's, not the mechanism's)."""
        self._prepare()
        rows = self.input_rows(words)
        if (rows < 0).any():
            raise ParameterError("probabilities needs in-vocabulary words")
        return rows

    def output_positions(self, rows) -> np.ndarray:
        """Column of each embedding row in the output vocabulary (-1 if not an output word)."""
        self._prepare()
        return self._out_pos[np.asarray(rows, dtype=np.int64)]

    # ------------------------------------------------------------------ mechanism hooks
    def sample_rows(self, rows: np.ndarray, rng: np.random.Generator | int | None = None,
                    progress: Callable[[int], None] | None = None) -> np.ndarray:
        """One independent sanitized draw per entry of ``rows`` (embedding rows, all >= 0).

        Returns int64 ``(n,)`` embedding rows of the outputs. ``progress(k)`` is
        called with the number of tokens finished after each block. The draws use a
        fresh key (drawn from ``rng`` when given, else the mechanism's next release
        key), entry ``i`` on stream ``i``.
        """
        self._prepare()
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        key = ReleaseKey.from_generator(make_rng(rng)) if rng is not None else self._next_key()
        n = len(rows)
        return self._draw(rows, key, np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), progress)

    def _draw(self, rows: np.ndarray, key: ReleaseKey, streams: np.ndarray, positions: np.ndarray,
              progress) -> np.ndarray:  # pragma: no cover - overridden
        """The mechanism: output rows for ``rows``, token ``i`` drawing from stream
        ``(streams[i], positions[i])`` under ``key`` (:mod:`textdp.noise.keyed`)."""
        raise NotImplementedError

    def probabilities(self, words) -> np.ndarray:
        """Exact output distribution: float64 ``(k, V_out)`` rows over :attr:`output_words`."""
        raise NotImplementedError(f"{self.name} has no closed-form output distribution; "
                                  "use estimate_probabilities")

    def estimate_probabilities(self, words, n_samples: int = 1000, rng=None) -> np.ndarray:
        """Monte-Carlo estimate of :meth:`probabilities`: float64 ``(k, V_out)``
        frequencies of ``n_samples`` independent draws per input word."""
        self._prepare()
        rows = self.input_rows(words)
        if (rows < 0).any():
            raise ParameterError("estimate_probabilities needs in-vocabulary words")
        draws = self.sample_rows(np.repeat(rows, n_samples), rng)
        pos = self._out_pos[draws].reshape(len(rows), n_samples)
        out = np.zeros((len(rows), len(self.output_rows)))
        for i in range(len(rows)):
            out[i] = np.bincount(pos[i], minlength=len(self.output_rows)) / n_samples
        return out

    def _oov_pool(self) -> np.ndarray:
        """Embedding rows a uniform OOV replacement is drawn from."""
        return self.output_rows

    @property
    def guarantee(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def card_warnings(self) -> list[str]:
        """Statements about this mechanism that follow from its parameters alone (never from the data);
        the CLI adds them to the privacy card and the terminal. Empty by default."""
        return []

    def card_units(self) -> dict:
        """What the guarantee's numbers mean, for the card's ``units`` (strings keyed by field).
        Default: metric LDP per token over Euclidean embedding distance."""
        g = self.guarantee
        units = {
            "epsilon": "per token, per unit of Euclidean distance between embeddings: "
                       "P[M(x)=y] <= exp(eps*d(x,x') + epsilon0) P[M(x')=y]",
            "per_document": "tokens are sanitized independently; two documents of equal length L are "
                            "eps*sum_i d(x_i,x'_i)-indistinguishable" +
                            (" (+ L*eps0)" if getattr(g, "epsilon0", 0) else ""),
            "neighbours": "replace one token (per-token guarantee); replace tokens position-wise (document)",
            "worst_case_epsilon": "plain DP per token: the largest log-ratio of the mechanism's channel over every "
                                  "pair of accepted inputs (out-of-vocabulary tokens included); L times it per "
                                  "document of L tokens",
        }
        if getattr(g, "epsilon0", 0):
            units["epsilon0"] = ("additive per-token term: P[M(x)=y] <= exp(eps*d(x,x') + epsilon0) P[M(x')=y]; "
                                 + self.epsilon0_meaning())
        return units

    def epsilon0_meaning(self) -> str:
        """One phrase: where this mechanism's additive ``epsilon0`` comes from (for the card)."""
        return "the accounted cost of float-safe sampling"

    def parameters(self) -> dict:
        """The mechanism's parameters, for cards and summaries."""
        p = {"epsilon": self.epsilon, "oov": self.oov, "eta": self.eta, "output_vocabulary": self.output_vocabulary}
        if self.oov == "unk":
            p["unk_token"] = self.unk_token
        return p

    def output_vocabulary_info(self) -> dict:
        """What the card says of the output vocabulary: for a public list its name, size and
        SHA-256; for the corpus vocabulary only that it is the corpus's (its size is a private
        statistic); for the full table the table's size."""
        if self.output_vocabulary == "corpus":
            return {"kind": "corpus", "note": CORPUS_VOCABULARY_WARNING}
        if self.output_vocabulary == "full":
            return {"kind": "full", "size": len(self.embeddings)}
        self._prepare()
        return {"kind": self.output_vocabulary, **self._vocab_info.describe()}

    # ------------------------------------------------------------------ sanitizing
    def sanitize(self, texts: Iterable[str], progress: Callable[[int], None] | None = None) -> list[str]:
        """Sanitize each text; returns the sanitized texts in order (statistics in
        :attr:`last_stats`). Unfitted corpus-vocabulary mechanisms are fitted on
        ``texts`` first."""
        out, _ = self.sanitize_with_stats(texts, progress=progress)
        return out

    def sanitize_with_stats(self, texts: Iterable[str], progress: Callable[[int], None] | None = None,
                            first_record: int | None = None) -> tuple[list[str], SanitizeStats]:
        """Like :meth:`sanitize`, also returning the :class:`SanitizeStats` (exact counts of the
        private input: the curator's, never written into a card).

        ``first_record``: global index (input order) of ``texts[0]`` within a release started
        with :meth:`begin_release` (chunked input); ``None``: the call is a release of its own
        (a new key; records numbered from 0). Document ``first_record + i`` draws every token
        from its own keyed stream, so the output does not depend on how the input is chunked.
        """
        t0 = time.perf_counter()
        texts = list(texts)
        if not self.is_fitted:
            self.fit(texts)
        self._prepare()
        if first_record is None:
            self.begin_release()
            first_record = 0
        elif self._release_key is None:
            self.begin_release()
        if int(first_record) < 0:
            raise ParameterError("first_record must be >= 0")
        key = self._release_key
        cached = getattr(self, "_tok_cache", None)
        self._tok_cache = None
        if cached is not None and len(cached[0]) == len(texts) and cached[0] == texts:
            tok = cached[1]
        else:
            tok = self.tokenize(texts)
        rows = tok.rows
        n = tok.n_tokens
        inv = rows >= 0
        in_pos = np.flatnonzero(inv)
        oov_pos = np.flatnonzero(~inv)
        new_rows = np.full(n, -1, dtype=np.int64)
        # stream of each token: its document's global index and its position in the document
        starts = np.concatenate([[0], np.cumsum(tok.lengths)[:-1]]).astype(np.int64) if tok.n_docs else \
            np.zeros(0, dtype=np.int64)
        streams = np.repeat(np.arange(tok.n_docs, dtype=np.int64) + int(first_record), tok.lengths)
        positions = np.arange(n, dtype=np.int64) - np.repeat(starts, tok.lengths)
        t1 = time.perf_counter()
        if len(in_pos):
            new_rows[in_pos] = self._draw(rows[in_pos], key, streams[in_pos], positions[in_pos], progress)
        t_sample = time.perf_counter() - t1
        changed_mask = np.ones(n, dtype=bool)
        changed_mask[in_pos] = new_rows[in_pos] != rows[in_pos]
        if self.oov == "keep":
            changed_mask[oov_pos] = False
        changed = int(changed_mask[in_pos].sum())
        words = self._word_array()
        tokens = np.empty(n, dtype=object)
        tokens[in_pos] = words[new_rows[in_pos]]
        dropped = 0
        if len(oov_pos):
            if self.oov == "uniform":
                pool = self._oov_pool()
                pick = keyed.keyed_uniform_below(key, streams[oov_pos], positions[oov_pos], keyed.UNIFORM, len(pool))
                tokens[oov_pos] = words[pool[pick.astype(np.int64)]]
                changed += len(oov_pos)
            elif self.oov == "unk":
                tokens[oov_pos] = self.unk_token
                changed += len(oov_pos)
            elif self.oov == "drop":
                tokens[oov_pos] = None
                dropped = len(oov_pos)
                changed += len(oov_pos)
            else:  # keep: released unchanged, as the user asked
                tokens[oov_pos] = tok.raw_tokens(oov_pos)
            if progress is not None:
                progress(len(oov_pos))
        result = tok.rebuild(tokens)
        stats = SanitizeStats(
            documents=tok.n_docs, tokens=n, in_vocabulary_tokens=len(in_pos), changed_tokens=changed,
            oov_tokens=len(oov_pos), oov_policy=self.oov, dropped_tokens=dropped,
            distinct_input_words=int(len(np.unique(rows[in_pos]))) if len(in_pos) else 0,
            max_document_tokens=int(tok.lengths.max()) if tok.n_docs else 0,
            seconds=time.perf_counter() - t0, sampling_seconds=t_sample,
        )
        self.last_stats = stats
        return result, stats

    # ------------------------------------------------------------------ worst case (plain DP)
    def _n_out_bound(self) -> int:
        """Size of the output set a token is drawn from, or a data-independent upper bound of it
        (the embedding table's size) when the output vocabulary comes from the corpus."""
        if self.output_vocabulary == "corpus":
            return len(self.embeddings)
        self._prepare()
        return len(self.output_rows)

    def _mixed_worst_case(self, v: int, epsilon0: float | None = None) -> float:
        """Largest per-token log-ratio ``ln p(y|x)/p(y|x')`` over every pair of accepted inputs,
        for a law mixed with a uniform share ``eta`` over ``v`` outputs (SanText's sampler,
        FBDD's uniform share): every output has probability in ``[eta/v, 1 - eta + eta/v]``.

        * two in-vocabulary words: ``min(eps D + epsilon0, ln((1 - eta + eta/v)/(eta/v)) + epsilon0)``,
          ``D = 2R`` bounding the diameter of the whole embedding table (every word with an
          embedding is an accepted input, whether or not it is an output word);
        * an out-of-vocabulary token under ``oov="uniform"`` (each output ``1/v``) against an
          in-vocabulary word: ``max(ln(v (1 - eta + eta/v)), ln(1/eta)) + epsilon0``;
        * ``oov`` ``unk``, ``drop`` or ``keep`` release whether a token has an embedding: infinite.
        """
        if self.oov != "uniform":
            return math.inf
        e0 = self.sampling_epsilon0 if epsilon0 is None else float(epsilon0)
        eta, v = self.eta, max(1, int(v))
        hi, lo = 1.0 - eta + eta / v, eta / v
        pair = min(self.epsilon * 2.0 * self._geometry()[1], math.log(hi / lo)) + e0
        oov = max(math.log(v * hi), math.log(1.0 / eta)) + e0
        return max(pair, oov)

    # ------------------------------------------------------------------ helpers for subclasses
    def _block_bytes(self, fused: bool = False) -> int:
        if self.block_bytes is not None:
            return self.block_bytes
        return sampling.DEFAULT_FUSED_BLOCK_BYTES if fused else DEFAULT_BLOCK_BYTES

    def _block_rows(self, width: int) -> int:
        return max(1, self._block_bytes() // (4 * max(1, width)))

    def _exp_block_rows(self, width: int, n: int, fused: bool = False) -> int:
        """Rows per float64 block: ``block_bytes / (8 width)``, at least 16 (and at most ``n``);
        the fused kernel takes at most 64 (its GEMM is then at the BLAS rate and its weights
        stay in the last-level cache)."""
        b = max(MIN_BLOCK_ROWS, self._block_bytes(fused) // (8 * max(1, width)))
        if fused:
            b = min(b, FUSED_MAX_ROWS)
        return max(1, min(n, b))

    def _exp_sample(self, rows: np.ndarray, out_rows: np.ndarray, key: ReleaseKey, streams: np.ndarray,
                    positions: np.ndarray, progress) -> np.ndarray:
        """Float-safe exponential-mechanism draws for every entry of ``rows`` over
        ``out_rows``: distinct words in blocks, all occurrences of a word at once
        (:func:`textdp.sanitize.sampling.fused_sample` with numba, else
        :func:`textdp.sanitize.sampling.sample_block`); occurrence ``i``'s uniform comes from
        its own keyed stream ``(streams[i], positions[i])``, so the result does not depend on
        the block size or the number of workers. With :attr:`sampler_device` set, the torch
        sampler (:func:`textdp.sanitize._torch_kernel.sample_tokens`) draws them on that device."""
        if getattr(self, "sampler_device", None) is not None:
            return self._exp_sample_torch(rows, out_rows, key, streams, positions, progress)
        uniq, inverse, counts = np.unique(rows, return_inverse=True, return_counts=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        kernel = self._kernel(out_rows)
        self_cols = self._self_cols(uniq, out_rows)
        result = np.empty(len(rows), dtype=np.int64)
        numba = sampling.use_numba(len(uniq) * len(out_rows))
        b = self._exp_block_rows(len(out_rows), len(uniq), fused=numba)
        blocks = [(s, min(len(uniq), s + b)) for s in range(0, len(uniq), b)]
        workers = self.workers
        local = threading.local()
        vectors = self.embeddings.vectors

        def run(i):
            s, e = blocks[i]
            occ = order[bounds[s]:bounds[e]]
            st, pos = streams[occ], positions[occ]

            def uniforms(totals):
                return keyed.keyed_uniform_below(key, st, pos, keyed.MAIN, totals)

            if numba:
                ws = getattr(local, "ws", None)
                if ws is None:
                    ws = local.ws = sampling.FusedWorkspace(kernel, b)
                draws = sampling.fused_sample(kernel, vectors[uniq[s:e]], self_cols[s:e], counts[s:e], uniforms,
                                              self.eta, ws)
            else:
                buf = getattr(local, "buf", None)
                if buf is None:
                    buf = local.buf = np.empty((b, len(out_rows)), dtype=np.float64)
                g = kernel.scaled_sq(vectors[uniq[s:e]], out=buf)
                draws = sampling.sample_block(g, self_cols[s:e], counts[s:e], None, self.eta, numba=False,
                                              uniforms=uniforms)
            result[occ] = out_rows[draws]
            return int(bounds[e] - bounds[s])

        if numba:
            sampling.load_blas()
        run_blocks(run, len(blocks), workers, progress)
        return result

    def _exp_sample_torch(self, rows, out_rows, key, streams, positions, progress) -> np.ndarray:
        from textdp.sanitize import _torch_kernel

        k = (id(out_rows), len(out_rows), self.sampler_device)
        cache = getattr(self, "_torch_cache", None)
        if cache is None or cache[0] != k:
            vec = self.embeddings.vectors
            y = vec if len(out_rows) == len(vec) and np.array_equal(out_rows, np.arange(len(vec))) else vec[out_rows]
            cache = self._torch_cache = (k, _torch_kernel.TorchExpSampler(
                y, self.epsilon, self._geometry()[0], eta=self.eta, device=self.sampler_device))
        cols = _torch_kernel.sample_tokens(cache[1], self.embeddings.vectors, rows, self._self_cols(rows, out_rows),
                                           key, streams, positions, progress=progress)
        return out_rows[cols]

    def _self_cols(self, rows: np.ndarray, out_rows: np.ndarray) -> np.ndarray:
        pos = np.full(len(self.embeddings), -1, dtype=np.int64)
        pos[out_rows] = np.arange(len(out_rows))
        return pos[rows]

    def _geometry(self) -> tuple[np.ndarray, float]:
        """Centre and radius of the whole embedding table (data-independent; cached here and, for
        a table read from files, on disk with the table: :meth:`textdp.embeddings.Embeddings.geometry`)."""
        geo = getattr(self, "_geometry_cache", None)
        if geo is None:
            cached = getattr(self.embeddings, "geometry", None)
            geo = self._geometry_cache = (cached(sampling.table_geometry) if callable(cached)
                                          else sampling.table_geometry(self.embeddings.vectors))
        return geo

    def _kernel(self, out_rows: np.ndarray) -> DistanceKernel:
        key = (id(out_rows), len(out_rows))
        cache = getattr(self, "_kernel_cache", None)
        if cache is None or cache[0] != key:
            vec = self.embeddings.vectors
            y = vec if len(out_rows) == len(vec) and np.array_equal(out_rows, np.arange(len(vec))) else vec[out_rows]
            cache = (key, DistanceKernel(y, self.epsilon, self._geometry()[0]))
            self._kernel_cache = cache
        return cache[1]

    @property
    def sampling_epsilon0(self) -> float:
        """Additive per-token privacy loss of the float-safe sampler over the ideal
        mechanism (:func:`textdp.sanitize.sampling.sampling_epsilon0`; depends only
        on eps, eta and the embedding table, not on the data). The torch sampler's exp
        bound (2 ulp, :mod:`textdp.sanitize._torch_kernel`) lies inside the CPU kernel's
        accounted 1e-8, so the value is the same on every device."""
        e0 = sampling.sampling_epsilon0(self.epsilon, self.embeddings.dim, self._geometry()[1],
                                        len(self.embeddings), self.eta)
        if getattr(self, "sampler_device", None) is not None:  # the larger of the two exp bounds (adds 0)
            from textdp.sanitize._torch_kernel import exp_relative_error

            e0 += 4 * (exp_relative_error() - sampling.EXP_RELATIVE_ERROR)
        return e0

    def _exp_realised(self, rows: np.ndarray, out_rows: np.ndarray) -> np.ndarray:
        """The law the secure sampler draws from: float64 ``(k, len(out_rows))`` (blocks
        of at most 64 rows through the same kernel and backend as :meth:`_exp_sample`)."""
        kernel = self._kernel(out_rows)
        self_cols = self._self_cols(rows, out_rows)
        out = np.empty((len(rows), len(out_rows)))
        numba = sampling.use_numba(len(rows) * len(out_rows))
        for s in range(0, len(rows), 64):
            x = self.embeddings.vectors[rows[s:s + 64]]
            if numba:
                out[s:s + 64] = sampling.fused_probabilities(kernel, x, self_cols[s:s + 64], self.eta)
            else:
                out[s:s + 64] = sampling.block_probabilities(kernel.scaled_sq(x), self_cols[s:s + 64], self.eta,
                                                             numba=False)
        return out

    def _exp_probabilities(self, rows: np.ndarray, out_rows: np.ndarray) -> np.ndarray:
        """Ideal float64 ``(k, len(out_rows))`` rows ``exp(-eps d/2)/Z`` (direct differences, no mix)."""
        y = np.asarray(self.embeddings.vectors[out_rows], dtype=np.float64)
        out = np.empty((len(rows), len(out_rows)))
        for i, r in enumerate(rows.tolist()):
            x = np.asarray(self.embeddings.vectors[r], dtype=np.float64)
            d = np.sqrt(((y - x) ** 2).sum(axis=1))
            logw = -0.5 * self.epsilon * (d - d.min())
            w = np.exp(logw)
            out[i] = w / w.sum()
        return out


#: SanText/SanText+ compute g = (eps/2)^2 d^2 and their accounting (eps R)^2 in float64 (overflow near
#: eps R = 1.3e154, R the table's radius: 14 for GloVe); 1e100 leaves room for any radius below 1e50.
_EXP_MECHANISM_MAX_EPSILON = 1e100
_EXP_MECHANISM_LIMIT = "the sampler computes (ε·d/2)² in float64, which overflows near ε = 1e154/d"


