"""Bag-of-words corpora for the topic models.

A :class:`Corpus` is the token stream CGS works on: ``word_ids`` (N,) int32 and
``doc_ids`` (N,) int32 with tokens sorted by document, a vocabulary (list of str,
index = word id) and the document lengths. Documents that end up empty after
filtering are *skipped* (documented, counted in ``skipped_docs``), never kept as
zero-length documents.

Preprocessing of :meth:`Corpus.from_texts` (fixed, so every method and peer sees
the same tokens): Unicode NFC, lower-case; tokens are runs of at least two letters
(Unicode letters, no digits or underscores); words outside the vocabulary dropped.

Vocabulary (:mod:`textdp.topics.vocabulary`): by default the public word list
``wordfreq-en-20k`` (``vocabulary="public"``; ``max_vocab`` keeps its first N words
by public rank), or a word-list file, or a list of words. Only on request
(``vocabulary="corpus"``) is it built from the private texts: English stop words
removed (:data:`textdp.topics._stopwords.ENGLISH_STOP_WORDS`), words with fewer than
``min_count`` occurrences removed, optionally only the ``max_vocab`` most frequent
kept (ties broken alphabetically). Such a vocabulary is a function of the private
data and is *not* covered by any DP guarantee of the trainers (the model's card
says so).
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from textdp.errors import InputError, ParameterError
from textdp.topics._stopwords import ENGLISH_STOP_WORDS
from textdp.topics.vocabulary import Vocabulary, given_vocabulary, public_vocabulary, read_vocabulary

__all__ = ["Corpus", "tokenize"]

_TOKEN_RE = re.compile(r"[^\W\d_]{2,}", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of >= 2 letters of ``text`` (NFC-normalised first, so decomposed accents stay in their word)."""
    return _TOKEN_RE.findall(unicodedata.normalize("NFC", text).lower()) if isinstance(text, str) else []


@dataclass
class Corpus:
    """Tokens of M documents over a fixed vocabulary.

    word_ids: (N,) int32 word id of each token; doc_ids: (N,) int32 document of
    each token (non-decreasing); vocabulary: V words; doc_lengths: (M,) int64;
    kept_docs: (M,) int64 index of each kept document in the input sequence;
    skipped_docs: how many input documents were empty after filtering;
    oov_tokens: tokens of the input outside the vocabulary (stop words not counted),
    dropped. Sizes, ``skipped_docs`` and ``oov_tokens`` are exact statistics of the
    private input: the CLI shows them to the curator only, no released file holds them.
    """

    word_ids: np.ndarray
    doc_ids: np.ndarray
    vocabulary: list[str]
    doc_lengths: np.ndarray
    kept_docs: np.ndarray
    skipped_docs: int = 0
    preprocessing: dict = field(default_factory=dict)
    oov_tokens: int = 0

    @property
    def n_input_docs(self) -> int:
        """Documents of the input, the empty ones (skipped) included."""
        return self.n_docs + int(self.skipped_docs)

    def input_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """``(kept, empty)`` int64: the input index (the records' global order, from 0) of each
        kept document (``kept_docs``, in corpus order) and of each skipped (empty) one.

        For a corpus built from texts or word ids the kept documents' indices are increasing in
        ``[0, n_input_docs)`` and the empty documents hold the other positions of that range
        (ascending). A :meth:`subset` keeps its parent's indices (no empty document): ``kept`` is
        then ``kept_docs`` as they are. Where ``kept_docs`` cannot describe positions (repeated
        indices, a wrong length, or empty documents whose places are unknown) the corpus's own
        order is used: the kept documents ``0 .. M-1``, then the empty ones. Used to address each
        document's keyed random stream (LP/OLP-LDA's reports, :mod:`textdp.noise.keyed`).
        """
        M, n_in = self.n_docs, self.n_input_docs
        kept = np.asarray(self.kept_docs, dtype=np.int64).reshape(-1)
        fallback = (np.arange(M, dtype=np.int64), np.arange(M, n_in, dtype=np.int64))
        if kept.shape[0] != M or (M and kept.min() < 0) or np.unique(kept).size != M:
            return fallback
        if M == 0 or kept.max() < n_in:
            taken = np.zeros(n_in, dtype=bool)
            taken[kept] = True
            return kept.copy(), np.flatnonzero(~taken).astype(np.int64)
        if self.skipped_docs == 0:
            return kept.copy(), np.zeros(0, dtype=np.int64)
        return fallback

    # -- sizes -------------------------------------------------------------------------------------------
    @property
    def n_docs(self) -> int:
        return int(self.doc_lengths.shape[0])

    @property
    def n_tokens(self) -> int:
        return int(self.word_ids.shape[0])

    @property
    def n_words(self) -> int:
        return len(self.vocabulary)

    def __repr__(self) -> str:
        return f"Corpus({self.n_docs} documents, {self.n_tokens} tokens, {self.n_words} words, {self.skipped_docs} skipped)"

    @property
    def doc_ptr(self) -> np.ndarray:
        """(M+1,) int64 offsets: tokens of document m are ``[doc_ptr[m], doc_ptr[m+1])``."""
        return np.concatenate([[0], np.cumsum(self.doc_lengths)]).astype(np.int64)

    def word_index(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.vocabulary)}

    def documents(self) -> list[np.ndarray]:
        """The word ids of each document (list of int32 arrays)."""
        ptr = self.doc_ptr
        return [self.word_ids[ptr[m]:ptr[m + 1]] for m in range(self.n_docs)]

    def word_counts(self) -> np.ndarray:
        """(V,) int64 corpus frequency of each word."""
        return np.bincount(self.word_ids, minlength=self.n_words).astype(np.int64)

    def doc_word_binary(self):
        """(M, V) scipy.sparse CSR 0/1 matrix: does document m contain word v."""
        from scipy import sparse

        data = np.ones(self.n_tokens, dtype=np.int8)
        m = sparse.csr_matrix((data, (self.doc_ids, self.word_ids)), shape=(self.n_docs, self.n_words))
        m.sum_duplicates()
        m.data[:] = 1
        return m

    def subset(self, docs: Sequence[int] | np.ndarray) -> "Corpus":
        """The corpus of the given document indices (same vocabulary)."""
        docs = np.asarray(docs, dtype=np.int64)
        ptr = self.doc_ptr
        parts = [self.word_ids[ptr[m]:ptr[m + 1]] for m in docs]
        return Corpus.from_word_ids(parts, self.vocabulary, kept=self.kept_docs[docs], preprocessing=self.preprocessing)

    # -- constructors --------------------------------------------------------------------------------------
    @classmethod
    def from_word_ids(cls, docs: Iterable[Sequence[int]], vocabulary: Sequence[str], kept=None,
                      preprocessing: dict | None = None) -> "Corpus":
        """Build from lists of word ids; empty documents are skipped.

        Raises ParameterError for ids outside ``[0, len(vocabulary))``.
        """
        vocabulary = list(vocabulary)
        V = len(vocabulary)
        arrays, kept_idx, skipped = [], [], 0
        for i, d in enumerate(docs):
            a = np.asarray(d, dtype=np.int64).ravel()
            if a.size == 0:
                skipped += 1
                continue
            if a.min() < 0 or a.max() >= V:
                raise ParameterError(f"document {i} has word ids outside [0, {V}); check the vocabulary")
            arrays.append(a)
            kept_idx.append(i)
        lengths = np.array([a.size for a in arrays], dtype=np.int64)
        w = np.concatenate(arrays).astype(np.int32) if arrays else np.zeros(0, np.int32)
        dids = np.repeat(np.arange(len(arrays), dtype=np.int32), lengths)
        kept_arr = np.asarray(kept, dtype=np.int64) if kept is not None else np.asarray(kept_idx, dtype=np.int64)
        if kept is not None and skipped:
            kept_arr = kept_arr[np.asarray(kept_idx, dtype=np.int64)]
        return cls(w, dids, vocabulary, lengths, kept_arr, skipped, dict(preprocessing or {}))

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        min_count: int = 5,
        stop_words: str | Iterable[str] | None = "english",
        max_vocab: int | None = None,
        vocabulary: "str | os.PathLike | Vocabulary | Sequence[str]" = "public",
    ) -> "Corpus":
        """Tokenize ``texts`` and build a corpus over a vocabulary (see the module docstring).

        ``vocabulary``: ``"public"`` (default, the shipped public list; ``max_vocab`` keeps its
        first N words); a :class:`~textdp.topics.vocabulary.Vocabulary`; a path of a word-list
        file (one word per line; ``max_vocab`` keeps its first N); a sequence of words (used as
        given); or ``"corpus"``: built from ``texts`` with ``min_count`` and ``max_vocab``, not
        covered by any guarantee. ``min_count`` and ``stop_words`` select words only for
        ``"corpus"`` (stop words are never counted as out-of-vocabulary tokens). Empty
        documents are skipped.

        Raises ParameterError for min_count < 1 or max_vocab < 2; InputError when the
        texts hold no document, or no word survives the filters, or only one word does,
        or no document has a word of the vocabulary.
        """
        if int(min_count) < 1:
            raise ParameterError(f"min_count (--min-count) must be >= 1, got {min_count!r}")
        if max_vocab is not None and int(max_vocab) < 2:
            raise ParameterError(f"max_vocab (--max-vocab) must be >= 2 (a topic model needs several words), got {max_vocab!r}")
        if isinstance(vocabulary, str) and vocabulary == "public":
            vocab = public_vocabulary(max_vocab)
        elif isinstance(vocabulary, str) and vocabulary == "corpus":
            vocab = None
        elif isinstance(vocabulary, Vocabulary):
            vocab = vocabulary
        elif isinstance(vocabulary, (str, os.PathLike)):
            vocab = read_vocabulary(vocabulary, max_vocab)
        else:
            vocab = given_vocabulary(vocabulary)
            if max_vocab is not None:
                vocab = given_vocabulary(vocab.words[: int(max_vocab)])
        toks = [tokenize(t) for t in texts]
        if not toks:
            raise InputError("no documents to train on; the input is empty")
        if stop_words == "english":
            stops = ENGLISH_STOP_WORDS
        elif stop_words is None:
            stops = frozenset()
        else:
            stops = frozenset(w.lower() for w in stop_words)
        if vocab is None:
            cnt = Counter(w for doc in toks for w in doc if w not in stops)
            items = sorted(((w, c) for w, c in cnt.items() if c >= min_count), key=lambda x: (-x[1], x[0]))
            if max_vocab is not None:
                items = items[: int(max_vocab)]
            vocab = Vocabulary(tuple(sorted(w for w, _ in items)), "corpus",
                               extra={"min_count": int(min_count), "max_vocab": max_vocab,
                                      "stop_words": stop_words if isinstance(stop_words, str) or stop_words is None
                                      else "custom"})
        vocabulary = list(vocab.words)
        prep = {"lowercase": True, "unicode": "NFC", "token_pattern": _TOKEN_RE.pattern,
                "public_vocabulary": vocab.public, "vocabulary": vocab.describe()}
        if len(vocabulary) == 0:
            raise InputError(f"no word occurs at least min_count={min_count} times after stop-word removal; "
                             "lower --min-count or give a larger corpus")
        if len(vocabulary) == 1:
            raise InputError(f"the vocabulary has a single word ({vocabulary[0]!r}); a topic model needs at least "
                             "two; lower --min-count or give a larger corpus")
        index = {w: i for i, w in enumerate(vocabulary)}
        docs = [[index[w] for w in doc if w in index] for doc in toks]
        oov = sum(1 for doc in toks for w in doc if w not in index and w not in stops)
        c = cls.from_word_ids(docs, vocabulary, preprocessing=prep)
        c.oov_tokens = int(oov)
        if c.n_docs == 0:
            raise InputError("every document is empty after preprocessing (no word of the vocabulary); nothing to "
                             "train on" + ("" if vocab.source == "corpus" else "; check the texts' language or give "
                                           "a word list with --vocabulary FILE"))
        return c

    def transform_texts(self, texts: Iterable[str]) -> "Corpus":
        """Tokenize new texts over this corpus's vocabulary (unknown words dropped and counted in
        ``oov_tokens``, stop words not counted; empty documents skipped)."""
        index = self.word_index()
        toks = [tokenize(t) for t in texts]
        docs = [[index[w] for w in doc if w in index] for doc in toks]
        oov = sum(1 for doc in toks for w in doc if w not in index and w not in ENGLISH_STOP_WORDS)
        c = Corpus.from_word_ids(docs, self.vocabulary, preprocessing=self.preprocessing)
        c.oov_tokens = int(oov)
        return c
