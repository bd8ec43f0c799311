"""Vocabularies of the topic models: public by default, private only on request.

A topic model's vocabulary is part of its release (the columns of φ, saved in
``model.json``). If it is built from the private corpus, it says which words occur
there, and no DP guarantee of the trainers covers that. So (see
``docs/threat-model.md``, "Topic models: the vocabulary is part of the release"):

* **default**: :data:`PUBLIC_LIST`, the 20 000 most frequent English words of
  wordfreq 3.1.1 (``wordfreq.top_n_list("en", 100_000)``, NFC-normalised, kept when
  they are tokens of :func:`textdp.topics.corpus.tokenize` (lower-case runs of >= 2
  letters) and not English stop words, first 20 000 in wordfreq's rank order). It is
  shipped as the versioned file ``textdp/topics/data/wordfreq-en-20k.txt`` whose
  SHA-256 is pinned here (:data:`PUBLIC_LIST_SHA256`) and checked on every load, so
  an upgrade of wordfreq cannot move it. ``max_words`` keeps its first N words
  (public rank: a data-independent choice). :func:`wordfreq_list` rebuilds it.
* **a file** (:func:`read_vocabulary`): one word per line, as the user gives it; the
  card names the file and its SHA-256. It must be public for the guarantee to cover it.
* **the corpus** (``Corpus.from_texts(..., vocabulary="corpus")``): words with at
  least ``min_count`` occurrences. Explicit only; the card and the terminal carry
  :data:`CORPUS_VOCABULARY_WARNING`.

:meth:`Vocabulary.describe` is what the card and ``model.json`` say about it: its
source, name, size (public vocabularies only) and hashes, never a statistic of the
private corpus.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Sequence

from textdp.errors import InputError, ParameterError

__all__ = ["Vocabulary", "public_vocabulary", "read_vocabulary", "given_vocabulary", "wordfreq_list",
           "words_sha256", "PUBLIC_LIST", "PUBLIC_LIST_FILE", "PUBLIC_LIST_SHA256", "PUBLIC_LIST_SIZE",
           "CORPUS_VOCABULARY_WARNING", "CORPUS_VOCABULARY_LOCAL_WARNING", "vocabulary_warnings"]

#: name of the default public word list (the card's ``data.vocabulary.name``)
PUBLIC_LIST = "wordfreq-en-20k"
#: its file inside the package
PUBLIC_LIST_FILE = "wordfreq-en-20k.txt"
#: SHA-256 of that file's bytes (UTF-8, one word per line, trailing newline)
PUBLIC_LIST_SHA256 = "95e4500ea6c69e931540d27711d9811ef45f53d4d0499d14ed442e155a0aab14"
PUBLIC_LIST_SIZE = 20_000
#: how the list was made (reproduced by :func:`wordfreq_list`)
PUBLIC_LIST_SOURCE = ("wordfreq 3.1.1 top_n_list('en', 100000), NFC, tokens of >= 2 letters, lower-case, "
                      "English stop words removed, first 20000 in wordfreq's rank order")

CORPUS_VOCABULARY_WARNING = (
    "vocabulary built from the private corpus (--vocabulary corpus): which words occur in the corpus (at least "
    "--min-count times) is released unprotected in the model; the privacy guarantee does not cover the vocabulary")
CORPUS_VOCABULARY_LOCAL_WARNING = (
    "local DP does not hold end to end: the curator needed the raw texts to build the vocabulary the documents "
    "report over")


def words_sha256(words: Sequence[str]) -> str:
    """SHA-256 of the words as a file: UTF-8, one word per line, trailing newline (``sha256sum`` of such a file)."""
    return hashlib.sha256(("\n".join(words) + "\n").encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Vocabulary:
    """A topic-model vocabulary and where it comes from.

    words: the words (index = column of φ); source: ``public`` (the shipped list),
    ``file`` (a user's word list), ``given`` (a Python list from the caller) or
    ``corpus`` (built from the private texts); name: the list's or file's name;
    list_sha256: SHA-256 of the source file's bytes; first: how many of the list's
    first words were kept (``max_words``), None for all.
    """

    words: tuple[str, ...]
    source: str
    name: str | None = None
    list_sha256: str | None = None
    first: int | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.words)

    @property
    def public(self) -> bool:
        """False only for a vocabulary built from the private corpus."""
        return self.source != "corpus"

    def describe(self) -> dict:
        """What the card and ``model.json`` say about the vocabulary (no private statistic).

        A corpus vocabulary's entry holds its rule (``min_count``, ``max_vocab``), no size and no hash.
        """
        if self.source == "corpus":
            return {"source": "corpus", "covered_by_guarantee": False, **self.extra}
        d = {"source": self.source, "name": self.name, "size": len(self.words), "sha256": words_sha256(self.words)}
        if self.list_sha256 is not None:
            d["list_sha256"] = self.list_sha256
        if self.first is not None:
            d["first"] = self.first
        if self.source == "public":
            d["made_by"] = PUBLIC_LIST_SOURCE
        return d | self.extra


def _check_max_words(max_words) -> int | None:
    if max_words is None:
        return None
    if isinstance(max_words, bool) or int(max_words) < 2:
        raise ParameterError(f"max_vocab (--max-vocab) must be >= 2 (a topic model needs several words), got {max_words!r}")
    return int(max_words)


def _words_from_bytes(data: bytes, where: str) -> list[str]:
    from textdp.topics.corpus import _TOKEN_RE

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start}); give one word per line in UTF-8") from None
    words, seen = [], set()
    for n, line in enumerate(text.splitlines(), 1):
        w = unicodedata.normalize("NFC", line.strip()).lower()
        if not w:
            continue
        if not _TOKEN_RE.fullmatch(w):
            raise InputError(f"{where}, line {n}: {line.strip()[:40]!r} is not a word the topic tokenizer produces "
                             "(one run of at least two letters, no digits, spaces or punctuation)")
        if w in seen:
            continue
        seen.add(w)
        words.append(w)
    return words


def public_vocabulary(max_words: int | None = None) -> Vocabulary:
    """The shipped public list :data:`PUBLIC_LIST` (its first ``max_words`` words when given).

    Raises ParameterError for max_words < 2 and RuntimeError if the shipped file does
    not have the pinned SHA-256 (a damaged installation).
    """
    n = _check_max_words(max_words)
    data = resources.files("textdp.topics").joinpath("data", PUBLIC_LIST_FILE).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != PUBLIC_LIST_SHA256:
        raise RuntimeError(f"the shipped word list {PUBLIC_LIST_FILE} has SHA-256 {digest}, expected "
                           f"{PUBLIC_LIST_SHA256}; reinstall textdp")
    words = data.decode("utf-8").splitlines()
    if n is not None and n < len(words):
        words = words[:n]
    else:
        n = None
    return Vocabulary(tuple(words), "public", PUBLIC_LIST, PUBLIC_LIST_SHA256, n)


def read_vocabulary(path: str | Path, max_words: int | None = None) -> Vocabulary:
    """A word list file: one word per line (UTF-8; blank lines skipped; lower-cased and NFC-normalised as the
    tokenizer does; repeated words kept once, at their first line). ``max_words``: keep the first N.

    The card names the file (its base name) and the SHA-256 of its bytes. Raises InputError
    for a missing or unreadable file, a line that is not a token (with its number), or fewer
    than two words; ParameterError for max_words < 2.
    """
    n = _check_max_words(max_words)
    p = Path(path)
    if not p.is_file():
        raise InputError(f"vocabulary file {str(p)!r} not found; give one word per line, or --vocabulary public")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read vocabulary file {str(p)!r}: {exc.strerror or exc}") from None
    words = _words_from_bytes(data, f"vocabulary file {str(p)!r}")
    if n is not None and n < len(words):
        words = words[:n]
    else:
        n = None
    if len(words) < 2:
        raise InputError(f"vocabulary file {str(p)!r} has {len(words)} word(s); a topic model needs at least two")
    return Vocabulary(tuple(words), "file", p.name, hashlib.sha256(data).hexdigest(), n)


def given_vocabulary(words: Sequence[str]) -> Vocabulary:
    """A vocabulary passed as a Python sequence (used as given; public if the caller says so)."""
    words = list(words)
    if len(set(words)) != len(words):
        raise ParameterError("the vocabulary repeats a word; give each word once")
    return Vocabulary(tuple(words), "given", None)


def vocabulary_warnings(description: dict | None, local: bool = False) -> list[str]:
    """The card's and terminal's statements for a vocabulary description (empty for a public one)."""
    if not description or description.get("source") != "corpus":
        return []
    return [CORPUS_VOCABULARY_WARNING] + ([CORPUS_VOCABULARY_LOCAL_WARNING] if local else [])


def wordfreq_list(n: int = PUBLIC_LIST_SIZE, candidates: int = 100_000) -> list[str]:
    """Rebuild the public list from wordfreq (needs the ``data`` extra): the first ``n`` words of
    ``wordfreq.top_n_list("en", candidates)`` that, NFC-normalised, are lower-case tokens of >= 2
    letters and not English stop words. With wordfreq 3.1.1 and the defaults this is exactly the
    shipped file (a test checks it when that version is installed)."""
    import wordfreq

    from textdp.topics._stopwords import ENGLISH_STOP_WORDS
    from textdp.topics.corpus import _TOKEN_RE

    out, seen = [], set()
    for w in wordfreq.top_n_list("en", candidates):
        w = unicodedata.normalize("NFC", w)
        if w in seen or w != w.lower() or w in ENGLISH_STOP_WORDS or not _TOKEN_RE.fullmatch(w):
            continue
        seen.add(w)
        out.append(w)
        if len(out) == n:
            break
    return out
