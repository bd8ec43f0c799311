"""Bag-of-words corpora for the topic models.

A :class:`Corpus` is the token stream CGS works on: ``word_ids`` (N,) int32 and
``doc_ids`` (N,) int32 with tokens sorted by document, a vocabulary (list of str,
index = word id) and the document lengths. Documents that end up empty after
filtering are *skipped* (documented, counted in ``skipped_docs``), never kept as
zero-length documents.

Preprocessing of :meth:`Corpus.from_texts` (fixed, so every method and peer sees
the same tokens): lower-case; tokens are runs of at least two letters (Unicode
letters, no digits or underscores); English stop words removed
(:data:`textdp.topics._stopwords.ENGLISH_STOP_WORDS`); words with fewer than
``min_count`` occurrences in the corpus removed; optionally only the
``max_vocab`` most frequent words kept (ties broken alphabetically).

Privacy note: a vocabulary built from the private corpus (``min_count``,
``max_vocab``) is itself a function of the data and is *not* covered by any DP
guarantee of the private trainers. Pass a public ``vocabulary`` for an
end-to-end guarantee.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from textdp.errors import InputError, ParameterError
from textdp.topics._stopwords import ENGLISH_STOP_WORDS

__all__ = ["Corpus", "tokenize"]

_TOKEN_RE = re.compile(r"[^\W\d_]{2,}", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of >= 2 letters of ``text``."""
    return _TOKEN_RE.findall(text.lower()) if isinstance(text, str) else []


@dataclass
class Corpus:
    """Tokens of M documents over a fixed vocabulary.

    word_ids: (N,) int32 word id of each token; doc_ids: (N,) int32 document of
    each token (non-decreasing); vocabulary: V words; doc_lengths: (M,) int64;
    kept_docs: (M,) int64 index of each kept document in the input sequence;
    skipped_docs: how many input documents were empty after filtering.
    """

    word_ids: np.ndarray
    doc_ids: np.ndarray
    vocabulary: list[str]
    doc_lengths: np.ndarray
    kept_docs: np.ndarray
    skipped_docs: int = 0
    preprocessing: dict = field(default_factory=dict)

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
        vocabulary: Sequence[str] | None = None,
    ) -> "Corpus":
        """Tokenize ``texts`` and build a corpus (see the module docstring for the rules).

        ``vocabulary`` given: use it as is (words outside it dropped; ``min_count``,
        ``max_vocab`` and ``stop_words`` ignored for selection). Empty documents are skipped.

        Raises ParameterError for min_count < 1 or max_vocab < 2; InputError when the
        texts hold no document, or no word survives the filters, or only one word does.
        """
        if int(min_count) < 1:
            raise ParameterError(f"min_count (--min-count) must be >= 1, got {min_count!r}")
        if max_vocab is not None and int(max_vocab) < 2:
            raise ParameterError(f"max_vocab (--max-vocab) must be >= 2 (a topic model needs several words), got {max_vocab!r}")
        toks = [tokenize(t) for t in texts]
        if not toks:
            raise InputError("no documents to train on; the input is empty")
        if stop_words == "english":
            stops = ENGLISH_STOP_WORDS
        elif stop_words is None:
            stops = frozenset()
        else:
            stops = frozenset(w.lower() for w in stop_words)
        prep = {"lowercase": True, "token_pattern": _TOKEN_RE.pattern,
                "stop_words": stop_words if isinstance(stop_words, str) or stop_words is None else "custom",
                "min_count": int(min_count), "max_vocab": max_vocab, "public_vocabulary": vocabulary is not None}
        if vocabulary is None:
            cnt = Counter(w for doc in toks for w in doc if w not in stops)
            items = sorted(((w, c) for w, c in cnt.items() if c >= min_count), key=lambda x: (-x[1], x[0]))
            if max_vocab is not None:
                items = items[: int(max_vocab)]
            vocabulary = sorted(w for w, _ in items)
        vocabulary = list(vocabulary)
        if len(vocabulary) == 0:
            raise InputError(f"no word occurs at least min_count={min_count} times after stop-word removal; "
                             "lower --min-count or give a larger corpus")
        if len(vocabulary) == 1:
            raise InputError(f"the vocabulary has a single word ({vocabulary[0]!r}); a topic model needs at least "
                             "two; lower --min-count or give a larger corpus")
        index = {w: i for i, w in enumerate(vocabulary)}
        docs = [[index[w] for w in doc if w in index] for doc in toks]
        c = cls.from_word_ids(docs, vocabulary, preprocessing=prep)
        if c.n_docs == 0:
            raise InputError("every document is empty after preprocessing; nothing to train on")
        return c

    def transform_texts(self, texts: Iterable[str]) -> "Corpus":
        """Tokenize new texts over this corpus's vocabulary (unknown words dropped, empty documents skipped)."""
        index = self.word_index()
        docs = [[index[w] for w in tokenize(t) if w in index] for t in texts]
        return Corpus.from_word_ids(docs, self.vocabulary, preprocessing=self.preprocessing)
