"""A trained topic model: the released topic-word matrix plus what it promises.

Saved format (a folder, open formats only):

* ``model.npz``: ``topic_word`` (K, V) float64, rows sum to 1 (φ); for
  non-private models also ``topic_word_counts`` (K, V) int32. Private models never
  store true counts.
* ``model.json``: format version, method, hyperparameters, vocabulary (index =
  column of φ), guarantee (``textdp.accounting.guarantees`` dict), privacy
  accounting, seed mode, preprocessing (with the vocabulary's source and hash),
  textdp version.
* ``model.card.json``: the privacy card of ``model.npz`` (built with
  :func:`textdp.accounting.card.build_card`: mechanism, parameters, guarantee,
  units, input (a built-in dataset's name; for a file only :data:`FILE_INPUT`), vocabulary
  source, randomness, accounting, warnings, version, time; ``output``: ``model.npz``, the
  file beside it, without the folder's name or path).

Everything written is part of the release, so no file holds an exact statistic of
the private training input (documents, tokens, out-of-vocabulary tokens, timings,
the log-likelihood of the true counts): those stay in :attr:`TopicModel.private`,
which the CLI prints to the curator's terminal and :meth:`TopicModel.save` never
writes. ``info`` is saved through the allow-list :data:`RELEASED_INFO_KEYS`. The
training input is named only when it is a built-in (public) dataset; a file's name
or path is the curator's and is written as :data:`FILE_INPUT` (the budget ledger,
which is the curator's, keeps the file's content hash with the release's card). The
released facts are parameters, public data (a public vocabulary, its size and
hash) and values computed from the DP output (LP/OLP-LDA's reconstructed-corpus
sizes and log-likelihood, from the randomized reports). A vocabulary built from the
private corpus is released unprotected: the card's ``warnings`` say so.

Exports (:meth:`TopicModel.export`): ``gensim`` writes ``topics.npy`` (K, V) float64
(what ``gensim.models.LdaModel.get_topics()`` returns) and ``dictionary.txt`` in the
format of ``gensim.corpora.Dictionary.save_as_text`` (loadable with
``Dictionary.load_from_text``); ``csv`` writes ``topic_word.csv`` (one row per word,
one column per topic) and ``top_words.csv``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from textdp.accounting.guarantees import Guarantee, NoPrivacy, guarantee_from_dict
from textdp.errors import InputError, OutputError, ParameterError
from textdp.topics import evaluation as ev
from textdp.topics.corpus import Corpus

__all__ = ["TopicModel", "load_model", "FORMAT_VERSION", "RELEASED_INFO_KEYS", "FILE_INPUT", "released_input"]

FORMAT_VERSION = 1

#: the keys of ``info`` that :meth:`TopicModel.save` writes (anything else stays in memory): the input
#: (:func:`released_input`: a built-in dataset's name, else :data:`FILE_INPUT`), the preprocessing
#: (parameters and the vocabulary's description) and, for LP/OLP-LDA only, the log-likelihood trace of CGS
#: on the corpus reconstructed from the randomized reports (post-processing)
RELEASED_INFO_KEYS = ("input", "preprocessing", "log_likelihood")
#: methods whose log-likelihood trace is computed from the randomized reports (released); for the others it
#: comes from the true counts (curator-only)
_LL_RELEASED = ("lp-lda", "olp-lda")
#: what released files say about a training input that is not a built-in dataset (a file's name or path is
#: the curator's private information)
FILE_INPUT = "a file of the curator's (not part of the release)"
_LOCAL_METHODS = ("lp-lda", "olp-lda")


def released_input(name) -> str:
    """What a released file may say about the training input ``name``: the name of a built-in (public)
    dataset as it is, anything else (a file's name or path) :data:`FILE_INPUT`."""
    from textdp.data.datasets import DATASETS

    if isinstance(name, str) and name.strip().lower() in DATASETS:
        return name
    return FILE_INPUT


def _version() -> str:
    try:
        from textdp import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


@dataclass
class TopicModel:
    """A trained LDA model.

    topic_word: (K, V) float64 φ (rows normalised on construction); vocabulary: V
    words; alpha, beta: the hyperparameters used (α is also the fold-in prior);
    method: ``lda``/``hdp-lda``/``lp-lda``/``olp-lda``; guarantee: what the release
    promises; accounting: how it was computed; info: released facts (input, saved as
    :func:`released_input` of it; preprocessing with the vocabulary's description;
    LP/OLP-LDA: log-likelihood on the reconstructed corpus); seed: seed mode dict;
    private: curator-only facts about the training input (documents, tokens,
    out-of-vocabulary tokens, timings, true log-likelihood), never saved.
    """

    topic_word: np.ndarray
    vocabulary: list[str]
    alpha: float
    beta: float
    method: str = "lda"
    params: dict = field(default_factory=dict)
    guarantee: Guarantee = field(default_factory=NoPrivacy)
    accounting: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    seed: dict = field(default_factory=dict)
    topic_word_counts: np.ndarray | None = None
    private: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        phi = np.asarray(self.topic_word, dtype=np.float64)
        if phi.ndim != 2 or phi.shape[1] != len(self.vocabulary):
            raise ParameterError(f"topic-word matrix {phi.shape} does not match a vocabulary of {len(self.vocabulary)}")
        if not np.all(np.isfinite(phi)) or np.any(phi < 0) or np.any(phi.sum(axis=1) <= 0):
            raise ParameterError("topic-word matrix must be finite, non-negative, with positive row sums")
        self.topic_word = phi / phi.sum(axis=1, keepdims=True)

    @property
    def n_topics(self) -> int:
        return int(self.topic_word.shape[0])

    # -- use -----------------------------------------------------------------------------------------------
    def top_words(self, n: int = 10) -> list[list[str]]:
        """The ``n`` most probable words of each topic."""
        return [[self.vocabulary[i] for i in row] for row in ev.top_word_ids(self.topic_word, n)]

    def corpus_from_texts(self, texts) -> Corpus:
        """Tokenize texts over the model's vocabulary (same preprocessing as training; unknown words dropped)."""
        c = Corpus(np.zeros(0, np.int32), np.zeros(0, np.int32), list(self.vocabulary), np.zeros(0, np.int64),
                   np.zeros(0, np.int64), preprocessing=self.info.get("preprocessing", {}))
        return c.transform_texts(texts)

    def _as_corpus(self, docs) -> Corpus:
        if isinstance(docs, Corpus):
            if list(docs.vocabulary) != list(self.vocabulary):
                raise ParameterError("the corpus uses another vocabulary; build it with model.corpus_from_texts(texts)")
            return docs
        return self.corpus_from_texts(list(docs))

    def transform(self, docs, iterations: int = 50, burn_in: int = 10, seed=None) -> np.ndarray:
        """Document-topic distributions (M, K) of new documents (texts or a Corpus) by fold-in.

        Documents empty over the vocabulary are skipped (see ``Corpus.kept_docs``).
        """
        c = self._as_corpus(docs)
        if c.n_docs == 0:
            return np.zeros((0, self.n_topics))
        return ev.fold_in(self.topic_word, c, self.alpha, iterations, burn_in, seed)

    def perplexity(self, docs, protocol: str = "fold-in", iterations: int = 50, burn_in: int = 10, seed=None) -> float:
        """Held-out perplexity (see :mod:`textdp.topics.evaluation` for the protocol)."""
        c = self._as_corpus(docs)
        if c.n_docs == 0:
            raise InputError("no held-out document has a word of the model's vocabulary")
        return ev.perplexity(self.topic_word, c, self.alpha, protocol, iterations, burn_in, seed)

    def coherence(self, docs, top_n: int = 10) -> np.ndarray:
        """NPMI coherence (K,) of each topic over ``docs`` (usually the training corpus)."""
        return ev.npmi_coherence(self.topic_word, self._as_corpus(docs), top_n)

    # -- cards and files -----------------------------------------------------------------------------------
    @property
    def mechanism_name(self) -> str:
        """Registry name of the trainer (``topics.hdp-lda`` ...; ``topics.lda`` for the non-private one)."""
        return f"topics.{self.method}"

    def vocabulary_description(self) -> dict:
        """Where the vocabulary comes from (``info["preprocessing"]["vocabulary"]``, written by
        :meth:`Corpus.from_texts`); for a model built otherwise, a vocabulary given by the caller."""
        d = (self.info.get("preprocessing") or {}).get("vocabulary")
        if isinstance(d, dict) and d.get("source"):
            return d
        from textdp.topics.vocabulary import given_vocabulary

        return given_vocabulary(self.vocabulary).describe() | {
            "note": "given by the caller; the guarantee covers it only if it is public"}

    def warnings(self) -> list[str]:
        """The card's and terminal's statements about what the guarantee does not cover."""
        from textdp.topics.vocabulary import vocabulary_warnings

        return vocabulary_warnings(self.vocabulary_description(), local=self.method in _LOCAL_METHODS)

    def card(self, output: str | os.PathLike | None = None) -> dict:
        """The privacy card of this release (JSON-ready dict, :func:`textdp.accounting.card.build_card`).

        ``data`` holds the input (:func:`released_input`: a built-in dataset's name, else
        :data:`FILE_INPUT`), K and the vocabulary's description (source, name, size
        and SHA-256 for a public one; for a corpus vocabulary its rule and ``covered_by_guarantee:
        false``, no size); ``warnings`` what the guarantee leaves uncovered. No exact statistic of
        the private input.
        """
        from textdp.accounting.card import build_card

        g = self.guarantee
        voc = self.vocabulary_description()
        data = ({"input": released_input(self.info["input"])} if "input" in self.info else {}) | {
            "n_topics": self.n_topics, "vocabulary": voc}
        if voc.get("source") != "corpus":
            data["n_words"] = len(self.vocabulary)
        return build_card(
            mechanism=self.mechanism_name, parameters=self.params, guarantee=g,
            units={"epsilon": f"per {getattr(g, 'unit', 'record')} ({getattr(g, 'neighbours', 'replace-one')}), "
                              "whole training run"},
            data=data, randomness=self.seed, statistics=self.accounting, output=output,
            release="topic-word matrix (K x V)" + (" and its exact topic-word counts (non-private)"
                                                   if self.method == "lda" else ""),
            seed=self.seed, warnings=self.warnings(),
        )

    def to_json(self) -> dict:
        info = {k: (released_input(v) if k == "input" else v) for k, v in self.info.items()
                if k in RELEASED_INFO_KEYS and (k != "log_likelihood" or self.method in _LL_RELEASED)}
        return {
            "format": "textdp-topic-model", "format_version": FORMAT_VERSION, "textdp_version": _version(),
            "method": self.method, "n_topics": self.n_topics, "alpha": self.alpha, "beta": self.beta,
            "params": self.params, "guarantee": self.guarantee.to_dict(), "accounting": self.accounting,
            "seed": self.seed, "info": info, "vocabulary": list(self.vocabulary),
        }

    def save(self, path: str | os.PathLike, overwrite: bool = False, inputs: list | None = None,
             create_parents: bool = False) -> Path:
        """Write the model folder atomically (see the module docstring). Returns the folder.

        Raises OutputError when ``path`` exists and ``overwrite`` is False, is a file,
        is a non-empty folder not written by textdp, contains one of ``inputs``, or its
        parent folder is missing and ``create_parents`` is False (with it, missing folders
        above ``path`` are created, and removed again when the write fails; see
        :func:`textdp.data.io.atomic_output_dir`).
        """
        from textdp.data.io import atomic_output_dir

        out = Path(path)
        with atomic_output_dir(out, overwrite=overwrite, kind="topic-model", inputs=inputs,
                               create_parents=create_parents) as tmp:
            arrays = {"topic_word": self.topic_word}
            if self.topic_word_counts is not None and self.method == "lda":
                arrays["topic_word_counts"] = np.asarray(self.topic_word_counts, dtype=np.int32)
            np.savez_compressed(tmp / "model.npz", **arrays)
            (tmp / "model.json").write_text(json.dumps(self.to_json(), indent=1, default=_json_default), "utf-8")
            card = self.card(output="model.npz")  # the file beside the card: no folder of the curator's
            (tmp / "model.card.json").write_text(json.dumps(card, indent=2, ensure_ascii=False), "utf-8")
        return out

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TopicModel":
        """Load a folder written by :meth:`save`.

        Raises InputError (one line, "cannot read the model ...") when it is not a textdp
        topic model or a file in it is truncated, corrupt or inconsistent (not a zip/npz,
        malformed JSON, missing fields, a matrix that does not match the vocabulary).
        """
        p = Path(path)
        if not (p / "model.json").is_file() or not (p / "model.npz").is_file():
            raise InputError(f"{str(p)!r} is not a textdp topic model folder (model.json and model.npz missing)")

        def unreadable(name: str, exc: BaseException) -> InputError:
            why = str(exc).splitlines()[0][:100] if str(exc) else ""
            return InputError(f"{str(p)!r}: cannot read the model ({name}: {type(exc).__name__}"
                              f"{': ' + why if why else ''}); train it again or restore the folder")

        try:
            meta = json.loads((p / "model.json").read_text("utf-8"))
        except (ValueError, OSError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise unreadable("model.json", exc) from None
        if not isinstance(meta, dict) or meta.get("format") != "textdp-topic-model":
            raise InputError(f"{str(p)!r}: model.json is not a textdp topic model")
        try:
            version = int(meta.get("format_version", 0))
        except (TypeError, ValueError) as exc:
            raise unreadable("model.json", exc) from None
        if version > FORMAT_VERSION:
            raise InputError(f"{str(p)!r}: saved by a newer textdp (format {meta['format_version']}); upgrade textdp")
        try:  # a truncated or garbled npz: BadZipFile, EOFError, zlib.error, ValueError (bad header), KeyError
            with np.load(p / "model.npz", allow_pickle=False) as z:
                phi = np.asarray(z["topic_word"])
                counts = np.asarray(z["topic_word_counts"]) if "topic_word_counts" in z.files else None
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, KeyError, OSError) as exc:
            raise unreadable("model.npz", exc) from None
        missing = [k for k in ("vocabulary", "alpha", "beta", "method", "guarantee") if k not in meta]
        if missing:
            raise InputError(f"{str(p)!r}: cannot read the model (model.json lacks the field {missing[0]!r}); "
                             "train it again or restore the folder")
        bad = [k for k in ("params", "accounting", "info", "seed") if not isinstance(meta.get(k, {}), dict)]
        if bad:
            raise InputError(f"{str(p)!r}: cannot read the model (model.json field {bad[0]!r} is not an object); "
                             "train it again or restore the folder")
        try:
            return cls(topic_word=phi, vocabulary=list(meta["vocabulary"]), alpha=float(meta["alpha"]),
                       beta=float(meta["beta"]), method=str(meta["method"]), params=meta.get("params", {}),
                       guarantee=guarantee_from_dict(meta["guarantee"]), accounting=meta.get("accounting", {}),
                       info=meta.get("info", {}), seed=meta.get("seed", {}), topic_word_counts=counts)
        except (KeyError, TypeError, ValueError) as exc:  # ParameterError too: φ does not match the vocabulary, ...
            raise unreadable("model.json and model.npz", exc) from None

    def export(self, path: str | os.PathLike, format: str = "gensim", top_n: int = 20, overwrite: bool = False) -> list[Path]:
        """Export to ``gensim`` (topics.npy + dictionary.txt) or ``csv`` (topic_word.csv + top_words.csv) in folder ``path``.

        Returns the written files. Raises ParameterError for an unknown format and
        OutputError for existing files without ``overwrite``.
        """
        out = Path(path)
        if format == "gensim":  # every check before anything is created
            names = ["topics.npy", "dictionary.txt"]
        elif format == "csv":
            names = ["topic_word.csv", "top_words.csv"]
        else:
            raise ParameterError(f"unknown export format {format!r}; use 'gensim' or 'csv'")
        if not out.is_dir() and not out.parent.is_dir():
            raise OutputError(f"cannot create export folder {str(out)!r}; create its parent first")
        if out.exists() and not out.is_dir():
            raise OutputError(f"{str(out)!r} is a file, not a folder; give a folder to export into")
        files = [out / n for n in names]
        for f in files:
            if f.exists() and not overwrite:
                raise OutputError(f"{str(f)!r} already exists; pass --overwrite to replace it")
        out.mkdir(parents=False, exist_ok=True)
        from textdp.data.io import atomic_output

        if format == "gensim":
            with atomic_output(files[0]) as tmp:
                with open(tmp, "wb") as fh:
                    np.save(fh, self.topic_word)
            with atomic_output(files[1]) as tmp:
                # gensim Dictionary.save_as_text: first line = number of documents, then id<TAB>word<TAB>docfreq.
                # Document frequencies are not part of a (private) release: written as 0.
                lines = ["0"] + [f"{i}\t{w}\t0" for i, w in enumerate(self.vocabulary)]
                Path(tmp).write_text("\n".join(lines) + "\n", "utf-8")
        else:
            import pandas as pd

            df = pd.DataFrame(self.topic_word.T, columns=[f"topic_{k}" for k in range(self.n_topics)])
            df.insert(0, "word", self.vocabulary)
            with atomic_output(files[0]) as tmp:
                df.to_csv(tmp, index=False)
            ids = ev.top_word_ids(self.topic_word, top_n)
            rows = [{"topic": k, "rank": r + 1, "word": self.vocabulary[i], "probability": float(self.topic_word[k, i])}
                    for k, row in enumerate(ids) for r, i in enumerate(row)]
            with atomic_output(files[1]) as tmp:
                pd.DataFrame(rows).to_csv(tmp, index=False)
        return files


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def load_model(path: str | os.PathLike) -> TopicModel:
    """Load a saved topic model folder (see :meth:`TopicModel.load`)."""
    return TopicModel.load(path)
