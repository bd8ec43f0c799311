"""Token-level metric-DP sanitizers: SanText, SanText+ and FBDD.

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
exact Bernoulli; FBDD's noise comes from :func:`textdp.noise.gamma` and
:func:`textdp.noise.uniform_direction`.

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

from textdp.accounting import UMLDP, MetricDP
from textdp.errors import InputError, ParameterError
from textdp.noise import DEFAULT_ETA, bernoulli, gamma, make_rng, random_source, uniform_direction
from textdp.sanitize import sampling
from textdp.sanitize.corpus import TokenizedTexts, count_rows, tokenize_texts
from textdp.sanitize.sampling import DEFAULT_BLOCK_BYTES, MIN_BLOCK_ROWS, DistanceKernel, squared_norms

__all__ = ["TokenSanitizer", "SanText", "SanTextPlus", "FBDD", "SanitizeStats", "OOV_POLICIES", "OUTPUT_VOCABULARIES"]

#: what happens to a token without an embedding (never a silent leak: "keep" must be asked for)
OOV_POLICIES = ("uniform", "unk", "drop", "keep")
#: output vocabulary choices: words of the fitted corpus that have embeddings, or the whole table
OUTPUT_VOCABULARIES = ("corpus", "full")


@contextlib.contextmanager
def _single_threaded_blas():
    """Limit BLAS to one thread while our own worker threads run (avoids oversubscription)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


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


class TokenSanitizer:
    """Base class: vocabulary fitting, OOV policy, tokenization and text rebuild.

    Parameters (shared by all mechanisms):

    embeddings: an :class:`textdp.embeddings.Embeddings` or a name/path for
        :func:`textdp.embeddings.load_embeddings` (default ``"glove-6b-50d"``).
    epsilon: privacy parameter per token (positive, finite, within the mechanism's
        ``[epsilon_min, epsilon_max]``: SanText and SanText+ at most 1e100, FBDD at
        least 1e-20). Its unit is "per unit of Euclidean embedding distance": the
        guarantee is ``eps·d(x,x')``.
    output_vocabulary: ``"corpus"`` (words of the fitted texts that have
        embeddings; the paper's choice; the default), ``"full"`` (every word of the
        embedding table, 400k for GloVe 6B) or an explicit list of words.
    oov: policy for tokens without an embedding: ``"uniform"`` (default: replaced by
        a word drawn uniformly from the output vocabulary -- from the sensitive set
        for SanText+ -- independently of the input, so 0-LDP for those tokens),
        ``"unk"`` (replaced by ``unk_token``), ``"drop"`` (removed) or ``"keep"``
        (released unchanged: NO protection for them; only when asked for).
    rng: ``None`` (cryptographically secure, fresh), an int seed (reproducible,
        not for release) or a ``numpy.random.Generator``.
    block_bytes: memory budget of one weight block (default 32 MiB, but at least
        16 rows; memory use is about ``workers × block_bytes`` plus the output
        embeddings as float64).
    eta: uniform share mixed into SanText's exponential mechanism by the
        float-safe sampler (default ``2**-20``; see :mod:`textdp.sanitize.sampling`).
    workers: threads computing blocks in parallel (default ``min(4, cpu_count)``);
        every block draws from its own child stream (``rng.spawn``), so a seeded
        run gives the same output for any number of workers.

    Raises ParameterError for invalid parameters.
    """

    name = "token-sanitizer"
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

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, output_vocabulary="corpus",
                 oov: str = "uniform", unk_token: str = "[UNK]", rng=None, block_bytes: int = DEFAULT_BLOCK_BYTES,
                 workers: int | None = None, eta: float = DEFAULT_ETA):
        self.epsilon = self.check_epsilon_range(epsilon)  # before the embeddings are loaded
        try:
            self.eta = float(eta)
        except (TypeError, ValueError):
            raise ParameterError(f"eta must be a number in (0, 1), got {eta!r}") from None
        if not (0.0 < self.eta < 1.0):
            raise ParameterError(f"eta must be in (0, 1), got {eta!r}")
        if isinstance(output_vocabulary, str):
            if output_vocabulary not in OUTPUT_VOCABULARIES:
                raise ParameterError(
                    f"output_vocabulary (--output-vocabulary) must be one of {', '.join(OUTPUT_VOCABULARIES)} "
                    f"or a list of words, got {output_vocabulary!r}")
        self.output_vocabulary = output_vocabulary
        if oov not in OOV_POLICIES:
            raise ParameterError(f"oov (--oov) must be one of {', '.join(OOV_POLICIES)}, got {oov!r}")
        self.oov = oov
        self.unk_token = str(unk_token)
        if int(block_bytes) < 1024:
            raise ParameterError(f"block_bytes (--block-size, in MiB) must be at least 1024 bytes, got {block_bytes!r}")
        self.block_bytes = int(block_bytes)
        self.workers = max(1, int(workers if workers is not None else min(4, os.cpu_count() or 1)))
        self.embeddings = _as_embeddings(embeddings)
        if self.eta * 2.0**52 < len(self.embeddings):  # every outcome keeps >= 2^10 integer weight units
            raise ParameterError(f"eta={self.eta:g} is too small for {len(self.embeddings)} words "
                                 f"(need eta >= {len(self.embeddings) * 2.0**-52:.3g})")
        if isinstance(rng, np.random.Generator):
            self.rng = rng
            self.seed_info = {"seeded": None, "seed": None, "generator": type(rng.bit_generator).__name__,
                              "note": "caller-supplied generator"}
        else:
            src = random_source(rng)
            self.rng = src.generator()
            self.seed_info = src.describe()
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
        """Learn the corpus vocabulary (and, for SanText+, word counts) from ``texts``.

        Only the texts passed here are counted (SanText's official code also
        counted the dev/test file; textdp does not). Returns ``self``.
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
    def is_fitted(self) -> bool:
        return self._fitted is not None or not isinstance(self.output_vocabulary, str) or \
            self.output_vocabulary == "full"

    def _require_fit(self):
        if not self.is_fitted:
            raise ParameterError(f"{type(self).__name__} is not fitted: call .fit(texts) first "
                                 "(or use output_vocabulary='full')")

    def _prepare(self) -> None:
        """Build the output vocabulary (and mechanism-specific state) once after fitting."""
        if self._prepared:
            return
        self._require_fit()
        emb = self.embeddings
        if isinstance(self.output_vocabulary, str):
            if self.output_vocabulary == "full":
                out = np.arange(len(emb), dtype=np.int64)
            else:
                out = np.flatnonzero(self._fitted.counts > 0).astype(np.int64)
        else:
            words = list(self.output_vocabulary)
            missing = [w for w in words if w not in emb.index]
            if missing:
                raise ParameterError(f"{len(missing)} output words have no embedding (first: {missing[0]!r})")
            out = np.unique(emb.rows(words))
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

    def output_positions(self, rows) -> np.ndarray:
        """Column of each embedding row in the output vocabulary (-1 if not an output word)."""
        self._prepare()
        return self._out_pos[np.asarray(rows, dtype=np.int64)]

    # ------------------------------------------------------------------ mechanism hooks
    def sample_rows(self, rows: np.ndarray, rng: np.random.Generator | None = None,
                    progress: Callable[[int], None] | None = None) -> np.ndarray:
        """One independent sanitized draw per entry of ``rows`` (embedding rows, all >= 0).

        Returns int64 ``(n,)`` embedding rows of the outputs. ``progress(k)`` is
        called with the number of tokens finished after each block.
        """
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
        rng = make_rng(rng) if rng is not None else self.rng
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

    def parameters(self) -> dict:
        """The mechanism's parameters, for cards and summaries."""
        p = {"epsilon": self.epsilon, "oov": self.oov, "eta": self.eta,
             "output_vocabulary": self.output_vocabulary if isinstance(self.output_vocabulary, str) else "custom"}
        if self.oov == "unk":
            p["unk_token"] = self.unk_token
        return p

    # ------------------------------------------------------------------ sanitizing
    def sanitize(self, texts: Iterable[str], progress: Callable[[int], None] | None = None) -> list[str]:
        """Sanitize each text; returns the sanitized texts in order (statistics in
        :attr:`last_stats`). Unfitted corpus-vocabulary mechanisms are fitted on
        ``texts`` first."""
        out, _ = self.sanitize_with_stats(texts, progress=progress)
        return out

    def sanitize_with_stats(self, texts: Iterable[str], progress: Callable[[int], None] | None = None
                            ) -> tuple[list[str], SanitizeStats]:
        """Like :meth:`sanitize`, also returning the :class:`SanitizeStats`."""
        t0 = time.perf_counter()
        texts = list(texts)
        if not self.is_fitted:
            self.fit(texts)
        self._prepare()
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
        t1 = time.perf_counter()
        if len(in_pos):
            new_rows[in_pos] = self.sample_rows(rows[in_pos], self.rng, progress=progress)
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
                tokens[oov_pos] = words[pool[self.rng.integers(0, len(pool), size=len(oov_pos))]]
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
        result = tok.rebuild(tokens, changed_mask)
        stats = SanitizeStats(
            documents=tok.n_docs, tokens=n, in_vocabulary_tokens=len(in_pos), changed_tokens=changed,
            oov_tokens=len(oov_pos), oov_policy=self.oov, dropped_tokens=dropped,
            distinct_input_words=int(len(np.unique(rows[in_pos]))) if len(in_pos) else 0,
            max_document_tokens=int(tok.lengths.max()) if tok.n_docs else 0,
            seconds=time.perf_counter() - t0, sampling_seconds=t_sample,
        )
        self.last_stats = stats
        return result, stats

    # ------------------------------------------------------------------ helpers for subclasses
    def _block_rows(self, width: int) -> int:
        return max(1, self.block_bytes // (4 * max(1, width)))

    def _exp_block_rows(self, width: int, n: int) -> int:
        """Rows per float64 block: ``block_bytes / (8 width)``, at least 16 (and at most ``n``)."""
        return max(1, min(n, max(MIN_BLOCK_ROWS, self.block_bytes // (8 * max(1, width)))))

    def _exp_sample(self, rows: np.ndarray, out_rows: np.ndarray, rng, progress) -> np.ndarray:
        """Float-safe exponential-mechanism draws for every entry of ``rows`` over
        ``out_rows``: distinct words in blocks, all occurrences of a word at once
        (:func:`textdp.sanitize.sampling.sample_block`)."""
        uniq, inverse, counts = np.unique(rows, return_inverse=True, return_counts=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        kernel = self._kernel(out_rows)
        self_cols = self._self_cols(uniq, out_rows)
        result = np.empty(len(rows), dtype=np.int64)
        b = self._exp_block_rows(len(out_rows), len(uniq))
        blocks = [(s, min(len(uniq), s + b)) for s in range(0, len(uniq), b)]
        numba = sampling.use_numba(len(uniq) * len(out_rows))
        try:  # one child stream per block: the result does not depend on the number of workers
            gens = rng.spawn(len(blocks))
        except (TypeError, ValueError, AttributeError):
            gens = None
        workers = self.workers if gens is not None else 1
        local = threading.local()
        vectors = self.embeddings.vectors

        def run(i):
            s, e = blocks[i]
            buf = getattr(local, "buf", None)
            if buf is None:
                buf = local.buf = np.empty((b, len(out_rows)), dtype=np.float64)
            g = kernel.scaled_sq(vectors[uniq[s:e]], out=buf)
            draws = sampling.sample_block(g, self_cols[s:e], counts[s:e], gens[i] if gens is not None else rng,
                                          self.eta, numba=numba)
            result[order[bounds[s]:bounds[e]]] = out_rows[draws]
            return int(bounds[e] - bounds[s])

        if workers > 1 and len(blocks) > 1:
            with _single_threaded_blas(), ThreadPoolExecutor(max_workers=workers) as pool:
                for k in pool.map(run, range(len(blocks))):
                    if progress is not None:
                        progress(k)
        else:
            for i in range(len(blocks)):
                k = run(i)
                if progress is not None:
                    progress(k)
        return result

    def _self_cols(self, rows: np.ndarray, out_rows: np.ndarray) -> np.ndarray:
        pos = np.full(len(self.embeddings), -1, dtype=np.int64)
        pos[out_rows] = np.arange(len(out_rows))
        return pos[rows]

    def _geometry(self) -> tuple[np.ndarray, float]:
        """Centre and radius of the whole embedding table (data-independent; cached)."""
        geo = getattr(self, "_geometry_cache", None)
        if geo is None:
            geo = self._geometry_cache = sampling.table_geometry(self.embeddings.vectors)
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
        on eps, eta and the embedding table, not on the data)."""
        return sampling.sampling_epsilon0(self.epsilon, self.embeddings.dim, self._geometry()[1],
                                          len(self.embeddings), self.eta)

    def _exp_realised(self, rows: np.ndarray, out_rows: np.ndarray) -> np.ndarray:
        """The law the secure sampler draws from: float64 ``(k, len(out_rows))`` (blocks
        of at most 64 rows through the same kernel as :meth:`_exp_sample`)."""
        kernel = self._kernel(out_rows)
        self_cols = self._self_cols(rows, out_rows)
        out = np.empty((len(rows), len(out_rows)))
        numba = sampling.use_numba(len(rows) * len(out_rows))
        for s in range(0, len(rows), 64):
            g = kernel.scaled_sq(self.embeddings.vectors[rows[s:s + 64]])
            out[s:s + 64] = sampling.block_probabilities(g, self_cols[s:s + 64], self.eta, numba=numba)
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


class SanText(TokenSanitizer):
    """SanText (Yue et al. 2021, Sec. 4.2): ``p(y|x) = exp(-eps·d(x,y)/2) / Z(x)``
    over the output vocabulary, ``d`` the Euclidean distance of raw embeddings.

    Guarantee: ``eps·d(x,x') + epsilon0`` metric LDP per token (triangle
    inequality: ``p(y|x)/p(y|x') <= exp(eps·d(x,x'))``, spec A.3), where
    ``epsilon0`` (:attr:`sampling_epsilon0`, about ``1.2e-5·eps`` for GloVe 6B
    50d) is the accounted cost of the float-safe integer sampler, which draws
    from ``(1 - eta) p + eta / V`` (:mod:`textdp.sanitize.sampling`).
    Example: ``SanText("glove-6b-50d", epsilon=3).fit(texts).sanitize(texts)``.
    """

    name = "santext"
    epsilon_max = _EXP_MECHANISM_MAX_EPSILON
    epsilon_limit_reason = _EXP_MECHANISM_LIMIT

    def _prepare_mechanism(self) -> None:
        pass

    @property
    def guarantee(self) -> MetricDP:
        return MetricDP(epsilon=self.epsilon, metric=f"euclidean ({self.embeddings.source})", unit="token",
                        epsilon0=self.sampling_epsilon0)

    def sample_rows(self, rows, rng=None, progress=None) -> np.ndarray:
        self._prepare()
        rows = np.asarray(rows, dtype=np.int64)
        return self._exp_sample(rows, self.output_rows, self.rng if rng is None else rng, progress)

    def probabilities(self, words) -> np.ndarray:
        """The exact law each word is sampled from: float64 ``(k, V_out)``, the
        integer weights of the float-safe sampler normalised (``(1 - eta) p + eta/V``
        up to a relative ``~1e-8``)."""
        self._prepare()
        rows = self.input_rows(words)
        if (rows < 0).any():
            raise ParameterError("probabilities needs in-vocabulary words")
        return self._exp_realised(rows, self.output_rows)

    def ideal_probabilities(self, words) -> np.ndarray:
        """The paper's ``exp(-eps d/2) / Z`` in float64 (no uniform mix), ``(k, V_out)``."""
        self._prepare()
        rows = self.input_rows(words)
        if (rows < 0).any():
            raise ParameterError("probabilities needs in-vocabulary words")
        return self._exp_probabilities(rows, self.output_rows)


class SanTextPlus(TokenSanitizer):
    """SanText+ (Yue et al. 2021, Sec. 4.3): sensitive / non-sensitive words.

    ``w`` in [0, 1]: the least frequent share ``w`` of the output vocabulary is
    sensitive (``V_S``): exactly ``floor(w·|V_out|)`` words, ordered by count
    (descending) with ties broken by embedding row (for GloVe: general-English
    frequency order), so the rarest words are sensitive. Counts come from the
    fitted texts only (``frequencies="corpus"``, default) or from ``wordfreq``
    (``frequencies="wordfreq"``). Input words outside the output vocabulary
    (unseen in the fitted texts) are treated as sensitive. Unlike the official
    code there is no off-by-one (w = 0 makes no word sensitive) and no dev/test
    text is counted.

    ``p`` in [0, 1]: a non-sensitive word is kept with probability ``1 - p``,
    else resampled into ``V_S``; a sensitive word is always resampled within
    ``V_S`` with ``exp(-eps·d/2) / Z_S(x)``.

    Guarantee (spec A.4, derived): ``(eps, eps0)``-UMLDP per token with
    ``eps0 = ln(1/p) + sampling_epsilon0`` (infinite for ``p = 0``: non-sensitive
    words then get no protection; the second term is the float-safe sampler's
    accounted cost, as for SanText); a non-sensitive output is only ever produced
    by itself. The keep/resample coin is an exact Bernoulli(p)
    (:func:`textdp.noise.bernoulli`).
    OOV tokens (policy ``uniform``) are drawn uniformly from ``V_S``.
    """

    name = "santext+"
    epsilon_max = _EXP_MECHANISM_MAX_EPSILON
    epsilon_limit_reason = _EXP_MECHANISM_LIMIT

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, w: float = 0.9, p: float = 0.3,
                 frequencies: str = "corpus", **kwargs):
        self.w = check_unit(w, "w")
        self.p = check_unit(p, "p")
        if frequencies not in ("corpus", "wordfreq"):
            raise ParameterError(f"frequencies (--frequencies) must be 'corpus' or 'wordfreq', got {frequencies!r}")
        self.frequencies = frequencies
        super().__init__(embeddings, epsilon, **kwargs)

    def _prepare_mechanism(self) -> None:
        out = self.output_rows
        if self.frequencies == "corpus":
            if self._fitted is not None:
                freq = self._fitted.counts[out].astype(np.float64)
            else:
                freq = np.zeros(len(out))
        else:
            try:
                from wordfreq import word_frequency
            except ImportError:
                from textdp.errors import MissingPackageError

                raise MissingPackageError("frequencies='wordfreq' needs wordfreq; run: pip install wordfreq") from None
            words = self.embeddings.words
            freq = np.fromiter((word_frequency(words[r], "en") for r in out.tolist()), dtype=np.float64,
                               count=len(out))
        order = np.lexsort((out, -freq))  # most frequent first; ties by embedding row
        n_sens = int(math.floor(self.w * len(out) + 1e-9))
        sens = np.sort(out[order[len(out) - n_sens:]]) if n_sens else np.zeros(0, dtype=np.int64)
        self.sensitive_rows = sens
        mask = np.ones(len(self.embeddings), dtype=bool)  # words outside the output vocabulary: sensitive
        mask[out] = False
        mask[sens] = True
        self._sensitive_mask = mask

    @property
    def sensitive_words(self) -> list[str]:
        """The sensitive set ``V_S`` (the protected outputs)."""
        self._prepare()
        w = self.embeddings.words
        return [w[i] for i in self.sensitive_rows.tolist()]

    def is_sensitive(self, words) -> np.ndarray:
        """Boolean per input word (str or embedding row)."""
        self._prepare()
        return self._sensitive_mask[self.input_rows(words)]

    @property
    def guarantee(self) -> UMLDP:
        eps0 = math.inf if self.p == 0 else math.log(1.0 / self.p) + self.sampling_epsilon0
        return UMLDP(epsilon=self.epsilon, epsilon0=eps0, metric=f"euclidean ({self.embeddings.source})",
                     sensitive_fraction=self.w, unit="token")

    def parameters(self) -> dict:
        d = super().parameters()
        d.update(w=self.w, p=self.p, frequencies=self.frequencies)
        return d

    def _need_sensitive(self):
        if len(self.sensitive_rows) == 0:
            raise ParameterError(f"w = {self.w:g} leaves no sensitive word to sample from; use a larger w or p = 0")

    def _oov_pool(self) -> np.ndarray:
        self._need_sensitive()
        return self.sensitive_rows

    def sample_rows(self, rows, rng=None, progress=None) -> np.ndarray:
        self._prepare()
        rng = self.rng if rng is None else rng
        rows = np.asarray(rows, dtype=np.int64)
        sens = self._sensitive_mask[rows]
        resample = sens.copy()
        non = np.flatnonzero(~sens)
        if len(non) and self.p > 0:
            resample[non] = bernoulli(self.p, len(non), rng)
        out = rows.copy()
        idx = np.flatnonzero(resample)
        if progress is not None and len(rows) - len(idx):
            progress(len(rows) - len(idx))
        if len(idx):
            self._need_sensitive()
            out[idx] = self._exp_sample(rows[idx], self.sensitive_rows, rng, progress)
        return out

    def probabilities(self, words) -> np.ndarray:
        """Exact ``(k, V_out)`` rows of the law sampled: sensitive x: the float-safe
        ``exp(-eps d/2)/Z_S`` law on V_S (see :meth:`SanText.probabilities`);
        non-sensitive x: ``1-p`` on x itself plus ``p`` times that row."""
        return self._probabilities(words, ideal=False)

    def ideal_probabilities(self, words) -> np.ndarray:
        """As :meth:`probabilities` with the paper's float64 formula (no uniform mix)."""
        return self._probabilities(words, ideal=True)

    def _probabilities(self, words, ideal: bool) -> np.ndarray:
        self._prepare()
        rows = self.input_rows(words)
        if (rows < 0).any():
            raise ParameterError("probabilities needs in-vocabulary words")
        out = np.zeros((len(rows), len(self.output_rows)))
        cols = self._out_pos[self.sensitive_rows]
        if len(self.sensitive_rows):
            law = self._exp_probabilities if ideal else self._exp_realised
            out[:, cols] = law(rows, self.sensitive_rows)
        sens = self._sensitive_mask[rows]
        for i in np.flatnonzero(~sens).tolist():
            out[i] *= self.p
            out[i, self._out_pos[rows[i]]] += 1.0 - self.p
        if len(self.sensitive_rows) == 0 and sens.any():
            self._need_sensitive()
        return out


class FBDD(TokenSanitizer):
    """FBDD / MadLib (Feyisetan et al. 2020): ``y = argmin_v ||phi(v) - (phi(x) + z)||``
    over the output vocabulary, with noise ``z`` of density ``∝ exp(-eps·||z||)``
    drawn as a uniform direction (normalised Gaussian) times a
    ``Gamma(shape=m, scale=1/eps)`` radius (``m`` the embedding dimension).

    Guarantee: ``eps·d(x,x')`` metric LDP per token (no ``/2``; the nearest-word
    step is post-processing). No closed-form output distribution: use
    :meth:`estimate_probabilities`. Cost: one nearest-neighbour search per token
    occurrence (a GEMM per block of tokens).
    """

    name = "fbdd"
    exact_probabilities = False
    #: the noise radius is Gamma(m, 1/eps) (mean m/eps) and the nearest-word search runs in float32
    #: (largest value 3.4e38): 1e-20 keeps radius x norm far inside it for tables with norms below 1e14
    epsilon_min = 1e-20
    epsilon_limit_reason = ("its noise vector has length about dim/ε and the nearest-word search runs in "
                            "float32, which overflows for smaller ε")

    def _prepare_mechanism(self) -> None:
        pass

    @property
    def guarantee(self) -> MetricDP:
        return MetricDP(epsilon=self.epsilon, metric=f"euclidean ({self.embeddings.source})", unit="token")

    def parameters(self) -> dict:
        d = super().parameters()
        d.pop("eta", None)  # FBDD does not use the categorical sampler
        return d

    def noise(self, n: int, rng=None) -> np.ndarray:
        """``(n, m)`` float64 noise vectors with density ``∝ exp(-eps ||z||)``."""
        rng = self.rng if rng is None else rng
        m = self.embeddings.dim
        r = gamma(float(m), 1.0 / self.epsilon, n, rng)
        return uniform_direction(n, m, rng) * r[:, None]

    def sample_rows(self, rows, rng=None, progress=None) -> np.ndarray:
        self._prepare()
        rng = self.rng if rng is None else rng
        rows = np.asarray(rows, dtype=np.int64)
        y = self._vectors(self.output_rows)
        ny = squared_norms(y).astype(np.float32)
        b = self._block_rows(len(self.output_rows))
        out = np.empty(len(rows), dtype=np.int64)
        buf = np.empty((min(b, max(1, len(rows))), len(self.output_rows)), dtype=np.float32)
        for s in range(0, len(rows), b):
            e = min(len(rows), s + b)
            q = (np.asarray(self.embeddings.vectors[rows[s:e]], dtype=np.float64) + self.noise(e - s, rng)
                 ).astype(np.float32)
            g = buf[: e - s]
            np.matmul(q, y.T, out=g)
            g *= -2.0
            g += ny[None, :]
            out[s:e] = self.output_rows[np.argmin(g, axis=1)]
            if progress is not None:
                progress(e - s)
        return out
