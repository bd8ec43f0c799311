"""Tokenizers that match an embedding vocabulary.

* :class:`WordTokenizer` -- for word-level vocabularies such as GloVe 6B (which
  is lower-cased and follows Stanford/PTB-style splits: ``don't`` -> ``do n't``,
  ``it's`` -> ``it 's``, punctuation as separate tokens). It returns tokens with
  their character spans so that a sanitizer can substitute tokens in place and
  keep the original spacing and line layout.
* :class:`WordPieceTokenizer` -- for BERT vocabularies, built on the
  ``tokenizers`` library from a ``vocab.txt``. It never emits special tokens
  (``[CLS]``, ``[SEP]``, ``[PAD]``, ``[MASK]``, ``[UNK]``) or ``[unused*]``
  placeholders: pieces that would map to ``[UNK]`` are reported as
  out-of-vocabulary words instead.

Detokenization rule (documented and used by every writer): word-level outputs are
written by replacing each token's span in the original text with its sanitized
token, so whitespace and layout are kept exactly; WordPiece outputs join pieces
(``##`` continuations glued to the previous piece) with single spaces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WordTokenizer", "WordPieceTokenizer", "SPECIAL_TOKEN_RE"]

# PTB-like: contraction suffixes split off ("n't", "'s", "'re", ...), words with
# internal hyphens/periods kept together only when the vocabulary has them (the
# sanitizer decides OOV), single punctuation marks as tokens.
_WORD_RE = re.compile(
    r"""\w+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\w+(?:[-.]\w+)*|[^\w\s]""",
    re.UNICODE | re.IGNORECASE,
)
# the same pattern as one capturing group: re.split then alternates separators and tokens
_SPLIT_RE = re.compile("(" + _WORD_RE.pattern + ")", _WORD_RE.flags)
SPECIAL_TOKEN_RE = re.compile(r"^\[(?:CLS|SEP|PAD|MASK|UNK|unused\d+)\]$")


@dataclass
class WordTokenizer:
    """Regex word tokenizer; ``lowercase=True`` for GloVe 6B."""

    lowercase: bool = True

    def tokenize(self, text: str) -> list[str]:
        """Tokens of ``text`` (lower-cased when ``lowercase``)."""
        toks = _WORD_RE.findall(text)
        return [t.lower() for t in toks] if self.lowercase else toks

    def tokenize_with_spans(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        """Tokens and their ``(start, end)`` character spans in ``text``."""
        toks, spans = [], []
        for m in _WORD_RE.finditer(text):
            t = m.group(0)
            toks.append(t.lower() if self.lowercase else t)
            spans.append(m.span())
        return toks, spans

    @staticmethod
    def split(text: str) -> list[str]:
        """``text`` cut into alternating pieces ``[sep, tok, sep, tok, ..., sep]``.

        Odd positions are the tokens (original case), even positions the text
        between them (whitespace, possibly empty); ``"".join(pieces) == text``.
        Replacing the odd pieces and joining is the span-substitution rule in one
        C-level call per document (used by the sanitizers).
        """
        return _SPLIT_RE.split(text)

    @staticmethod
    def substitute(text: str, spans: list[tuple[int, int]], tokens: list[str]) -> str:
        """Replace each span of ``text`` by the token at the same position."""
        out, last = [], 0
        for (s, e), t in zip(spans, tokens):
            out.append(text[last:s])
            out.append(t)
            last = e
        out.append(text[last:])
        return "".join(out)

    @staticmethod
    def detokenize(tokens: list[str]) -> str:
        """Join tokens with single spaces (used when no original text is at hand)."""
        return " ".join(tokens)


class WordPieceTokenizer:
    """BERT WordPiece tokenizer from a ``vocab.txt`` (``tokenizers`` library).

    ``tokenize`` returns WordPieces without special tokens; words that cannot be
    split into known pieces come back as ``None`` entries' source words via
    :meth:`tokenize_words` so the caller can apply its OOV policy.
    Raises MissingPackageError when ``tokenizers`` is not installed.
    """

    def __init__(self, vocab_file: str | Path, lowercase: bool = True):
        from textdp.errors import MissingPackageError

        try:
            from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
        except ImportError:
            raise MissingPackageError("WordPiece mode needs 'tokenizers'; run: pip install 'textdp[nlp]'") from None
        self.vocab_file = str(vocab_file)
        self.lowercase = lowercase
        wp = models.WordPiece.from_file(self.vocab_file, unk_token="[UNK]")
        tok = Tokenizer(wp)
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None, clean_text=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self._tok = tok
        self.vocab = tok.get_vocab()

    def tokenize(self, text: str) -> list[str]:
        """WordPieces of ``text``; ``[UNK]`` pieces are kept as ``[UNK]`` for the
        caller to treat as OOV (they are never written to an output)."""
        return self._tok.encode(text, add_special_tokens=False).tokens

    def tokenize_batch(self, texts: list[str]) -> list[list[str]]:
        return [e.tokens for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    @staticmethod
    def detokenize(tokens: list[str]) -> str:
        """Join pieces: ``##x`` is glued to the previous piece, others separated by a space."""
        out: list[str] = []
        for t in tokens:
            if t.startswith("##") and out:
                out[-1] += t[2:]
            else:
                out.append(t)
        return " ".join(out)
