"""Tokenized texts as flat arrays, and the rule that turns sanitized tokens back into text.

Detokenization rule (what a sanitized document looks like):

* **word vocabularies** (GloVe): each document is cut into alternating
  separator / token pieces (:meth:`textdp.data.tokenize.WordTokenizer.split`);
  every token piece is replaced by its sanitized token and the pieces are joined
  again, so whitespace and line layout are kept and only tokens change. Where two
  tokens touch in the input (``class.``, ``don't`` = ``do`` + ``n't``) and either
  is replaced, a single space is put between them so sanitized words never glue.
  Sanitized tokens are vocabulary entries, i.e. lower-cased for GloVe 6B (the
  input's capitalisation is not carried over: it would leak information).
  A dropped token (``oov="drop"``) disappears together with the separator in
  front of it.
* **WordPiece vocabularies** (MiniLM/BERT): pieces are re-joined with
  :meth:`textdp.data.tokenize.WordPieceTokenizer.detokenize` (``##`` pieces glued
  to the previous piece, single spaces otherwise).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from textdp.data.tokenize import WordTokenizer

__all__ = ["TokenizedTexts", "tokenize_texts", "count_rows"]


@dataclass
class TokenizedTexts:
    """A batch of documents as one flat token array.

    pieces: per document, the separator/token pieces (word mode) or the token list
    (wordpiece mode). rows: int64 ``(n_tokens,)`` embedding row of each token, -1
    when the token has no embedding (out of vocabulary). lengths: int64
    ``(n_docs,)`` tokens per document. raw: the tokens as they appear in the text
    (object array, ``(n_tokens,)``), used only by ``oov="keep"``.
    """

    mode: str
    pieces: list[list[str]]
    rows: np.ndarray
    lengths: np.ndarray
    codes: np.ndarray
    uniques: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.rows.shape[0])

    @property
    def n_docs(self) -> int:
        return len(self.pieces)

    def raw_tokens(self, positions: np.ndarray) -> np.ndarray:
        """Original token strings at ``positions`` (object array)."""
        return self.uniques[self.codes[positions]]

    def rebuild(self, tokens: np.ndarray | list, changed: np.ndarray | None = None) -> list[str]:
        """Documents with their tokens replaced by ``tokens`` (``(n_tokens,)``, str;
        ``None`` drops a token). ``changed`` (bool ``(n_tokens,)``) marks replaced
        tokens: two adjacent tokens without a separator (``class.``, ``do n't``)
        get a single space between them when either was replaced, so sanitized
        words never glue together. See the module docstring for the rule."""
        toks = tokens.tolist() if isinstance(tokens, np.ndarray) else list(tokens)
        ch = changed.tolist() if changed is not None else None
        out: list[str] = []
        pos = 0
        if self.mode == "word":
            for p, n in zip(self.pieces, self.lengths.tolist()):
                q = list(p)
                new = toks[pos : pos + n]
                pos += n
                if None in new:
                    out.append(_join_with_drops(q, new))
                    continue
                q[1::2] = new
                if ch is not None and n > 1:
                    c = ch[pos - n : pos]
                    for i in range(n - 1):
                        if not q[2 * i + 2] and (c[i] or c[i + 1]):
                            q[2 * i + 2] = " "
                out.append("".join(q))
        else:
            from textdp.data.tokenize import WordPieceTokenizer

            for n in self.lengths.tolist():
                new = [t for t in toks[pos : pos + n] if t is not None]
                pos += n
                out.append(WordPieceTokenizer.detokenize(new))
        return out


def _join_with_drops(pieces: list[str], new: list) -> str:
    q = list(pieces)
    for i, t in enumerate(new):
        j = 2 * i + 1
        if t is None:
            q[j] = ""
            if j - 1 > 0:
                q[j - 1] = ""  # the separator in front of a dropped token
            elif j + 1 < len(q):
                q[j + 1] = ""  # first token: the separator after it
        else:
            q[j] = t
    return "".join(q)


def tokenize_texts(texts, embeddings, tokenizer=None) -> TokenizedTexts:
    """Tokenize ``texts`` (a sequence of str) to match ``embeddings``' vocabulary.

    Token -> embedding row lookup is done once per distinct token string
    (``pandas.factorize`` over the flat token list), lower-casing first when the
    vocabulary is lower-cased. Returns a :class:`TokenizedTexts`.
    """
    texts = [t if isinstance(t, str) else ("" if t is None else str(t)) for t in texts]
    if embeddings.kind == "wordpiece":
        tok = tokenizer or embeddings.tokenizer()
        pieces = tok.tokenize_batch(texts)
        flat = list(itertools.chain.from_iterable(pieces))
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        mode = "wordpiece"
    else:
        split = WordTokenizer.split
        pieces = [split(t) for t in texts]
        flat = list(itertools.chain.from_iterable(p[1::2] for p in pieces))
        lengths = np.fromiter(((len(p) - 1) // 2 for p in pieces), dtype=np.int64, count=len(pieces))
        mode = "word"
    if flat:
        codes, uniques = pd.factorize(np.asarray(flat, dtype=object), sort=False)
        uniques = np.asarray(uniques, dtype=object)
    else:
        codes, uniques = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
    index = embeddings.index
    lower = embeddings.lowercase
    uniq_rows = np.fromiter(
        (index.get(u.lower() if lower else u, -1) for u in uniques.tolist()), dtype=np.int64, count=len(uniques)
    )
    if mode == "wordpiece":
        uniq_rows[uniques == "[UNK]"] = -1
    rows = uniq_rows[codes] if len(codes) else np.zeros(0, dtype=np.int64)
    return TokenizedTexts(mode, pieces, rows, lengths, np.asarray(codes, dtype=np.int64), uniques)


def count_rows(texts, embeddings, tokenizer=None) -> tuple[np.ndarray, int, int, int]:
    """Embedding-row counts of ``texts`` without keeping the tokens (the streaming fit pass).

    Returns ``(counts, n_docs, n_tokens, n_oov)``: ``counts`` is int64
    ``(len(embeddings),)``, the number of tokens mapped to each embedding row;
    ``n_oov`` the tokens without an embedding. Equal to what
    :func:`tokenize_texts` gives for the same texts (a test checks it); for word
    vocabularies it runs the tokenizer's pattern once over the whole batch joined
    by newlines (tokens never contain whitespace, so no token crosses a document
    boundary) and looks each distinct token up once, which is about twice as fast
    as tokenizing document by document.
    """
    texts = [t if isinstance(t, str) else ("" if t is None else str(t)) for t in texts]
    n_docs = len(texts)
    counts = np.zeros(len(embeddings), dtype=np.int64)
    if embeddings.kind == "wordpiece":
        tok = tokenize_texts(texts, embeddings, tokenizer)
        ok = tok.rows >= 0
        counts += np.bincount(tok.rows[ok], minlength=len(embeddings))
        return counts, n_docs, tok.n_tokens, int((~ok).sum())
    from collections import Counter

    from textdp.data.tokenize import _WORD_RE

    raw = Counter(_WORD_RE.findall("\n".join(texts)))
    index, lower = embeddings.index, embeddings.lowercase
    n_tokens = n_oov = 0
    for word, c in raw.items():
        n_tokens += c
        r = index.get(word.lower() if lower else word, -1)
        if r < 0:
            n_oov += c
        else:
            counts[r] += c
    return counts, n_docs, n_tokens, n_oov
