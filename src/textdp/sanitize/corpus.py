"""Tokenized texts as flat arrays, and the rule that turns sanitized tokens back into text.

Detokenization rule (what a sanitized document looks like):

* **word vocabularies** (GloVe): each document is cut into alternating
  separator / token pieces (:meth:`textdp.data.tokenize.WordTokenizer.split`);
  every token piece is replaced by its sanitized token and the pieces are joined
  again, so whitespace and line layout are kept and only tokens change. Where two
  tokens touch in the input (``class.``, ``don't`` = ``do`` + ``n't``), the output
  keeps them touching when the OUTPUT tokens read well glued (:func:`glue`: the right
  one is closing punctuation or a clitic such as ``n't``/``'s``, or the left one is
  opening punctuation, or either is a bare quote) and puts one space between them
  otherwise. The rule looks only at the input's separators and the output tokens,
  never at whether a token was kept (issue 12: a rule keyed on "replaced" made a
  glued ``film.`` disclose that both tokens were kept), so it is post-processing of
  the sampled tokens and the input layout.
  Sanitized tokens are vocabulary entries, i.e. lower-cased for GloVe 6B (the
  input's capitalisation is not carried over: it would leak information).
  A dropped token (``oov="drop"``) disappears together with the separator in
  front of it (whether a token has an embedding is then released: cards say so).
  Texts are normalised to Unicode NFC before tokenizing (decomposed accents would
  otherwise split words into fragments and bare combining marks), so the output
  is NFC text.
* **WordPiece vocabularies** (MiniLM/BERT): pieces are re-joined with
  :meth:`textdp.data.tokenize.WordPieceTokenizer.detokenize` (``##`` pieces glued
  to the previous piece, single spaces otherwise).
"""

from __future__ import annotations

import functools
import itertools
import re
import sys
import unicodedata
from dataclasses import dataclass

import numpy as np

from textdp.data.tokenize import WordTokenizer

__all__ = ["TokenizedTexts", "tokenize_texts", "count_rows", "glue", "normalize_texts"]

_CLITICS = frozenset({"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"})
_PUNCT = re.compile(r"^[^\w\s]+$")
_OPENING = frozenset("([{“‘«¿¡$#@`")
_QUOTES = frozenset({'"', "'", "''", "``"})


@functools.lru_cache(maxsize=1 << 16)  # called once per touching pair; output pairs repeat a lot
def glue(left: str, right: str) -> bool:
    """Whether two output tokens that touched in the input are written without a space:
    ``right`` is a clitic (``n't``, ``'s``, ...) or punctuation that does not open, or
    ``left`` is opening punctuation (``(``, ``[``, ``“``, ``$``, ...), or either is a bare
    quote. A function of the output tokens only."""
    if left in _QUOTES or right in _QUOTES:
        return True
    if right.lower() in _CLITICS or (_PUNCT.match(right) and right[0] not in _OPENING):
        return True
    return bool(_PUNCT.match(left)) and left[-1] in _OPENING


def normalize_texts(texts) -> list[str]:
    """``texts`` as str (None -> ``""``) in Unicode NFC (cheap for text that already is)."""
    out = []
    for t in texts:
        t = t if isinstance(t, str) else ("" if t is None else str(t))
        out.append(t if unicodedata.is_normalized("NFC", t) else unicodedata.normalize("NFC", t))
    return out


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

    def rebuild(self, tokens: np.ndarray | list) -> list[str]:
        """Documents with their tokens replaced by ``tokens`` (``(n_tokens,)``, str;
        ``None`` drops a token). Two tokens that touch in the input (``class.``,
        ``do|n't``) stay glued when :func:`glue` says the output tokens read well
        glued, else get one space: the layout is a function of the input's
        separators and the output tokens only (module docstring)."""
        toks = tokens.tolist() if isinstance(tokens, np.ndarray) else list(tokens)
        out: list[str] = []
        pos = 0
        if self.mode == "word":
            for p, n in zip(self.pieces, self.lengths.tolist()):
                new = toks[pos : pos + n]
                pos += n
                if None in new:
                    out.append(_join_with_drops(p, new))
                    continue
                q = list(p)
                q[1::2] = new
                for i in range(n - 1):
                    if not q[2 * i + 2] and not glue(new[i], new[i + 1]):
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
    """Rebuild one document where some tokens are dropped (``None``): the leading separator
    is kept and the first kept token follows it; every later kept token keeps the separator
    directly in front of it (the dropped tokens and their separators go), a touching pair
    following :func:`glue`; the trailing separator is kept."""
    seps = pieces[0::2]
    out = [seps[0]]
    prev = None
    for i, t in enumerate(new):
        if t is None:
            continue
        if prev is not None:
            out.append(seps[i] if seps[i] or glue(prev, t) else " ")
        out.append(t)
        prev = t
    out.append(seps[-1])
    return "".join(out)


#: tokens above which :func:`tokenize_texts` factorizes with pandas even when pandas is not imported
#: yet (its import, ~0.4 s, against ~0.5 us per token saved; below: a dict, the same codes)
_PANDAS_FACTORIZE_MIN = 200_000


def tokenize_texts(texts, embeddings, tokenizer=None) -> TokenizedTexts:
    """Tokenize ``texts`` (a sequence of str) to match ``embeddings``' vocabulary.

    Token -> embedding row lookup is done once per distinct token string
    (``pandas.factorize`` over the flat token list; a dict, with the same codes, for a short
    input when pandas is not imported), lower-casing first when the
    vocabulary is lower-cased. Returns a :class:`TokenizedTexts`.
    """
    texts = normalize_texts(texts)
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
    if len(flat) > _PANDAS_FACTORIZE_MIN or (flat and "pandas" in sys.modules):
        import pandas as pd  # its hash table is faster; a short plain-text run skips the import

        codes, uniques = pd.factorize(np.asarray(flat, dtype=object), sort=False)
        uniques = np.asarray(uniques, dtype=object)
    elif flat:  # the same codes (first-appearance order) with a dict
        first: dict[str, int] = {}
        codes = np.fromiter((first.setdefault(t, len(first)) for t in flat), dtype=np.intp, count=len(flat))
        uniques = np.empty(len(first), dtype=object)
        uniques[:] = list(first)
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
    texts = normalize_texts(texts)
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
