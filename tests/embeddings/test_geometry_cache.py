"""The embedding table's geometry (centre, radius) cached with the table, and GloVe's word list
cached as plain text: equal to a fresh computation, recomputed when the file changes (issue 14,
item 3). Every test uses its own TEXTDP_CACHE."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from textdp.embeddings import core, load_embeddings
from textdp.sanitize import sampling


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(core, "GEOMETRY_CACHE_MIN_VALUES", 0)  # small test tables are cached too


def _table(path, seed=0, rows=300, dim=7, shift=0.0):
    g = np.random.default_rng(seed)  # test data only
    vec = g.standard_normal((rows, dim)) * 3 + shift
    path.write_text("".join(f"w{i} " + " ".join(repr(float(v)) for v in row) + "\n" for i, row in enumerate(vec)),
                    encoding="utf-8")
    return path


def _load(path):
    """The table as an installed package table (files recorded: cached by identity), like the built-in GloVe."""
    e = load_embeddings(path)
    return core.Embeddings(list(e.words), np.asarray(e.vectors), source=e.source, kind=e.kind, lowercase=e.lowercase,
                           files=core.file_identity(path))


def _fresh(vectors):
    sampling._GEOMETRY.clear()  # table_geometry's own per-array cache
    return sampling.table_geometry(vectors)


def _cache_files(tmp_path, prefix="geometry-"):
    folder = tmp_path / "cache" / "embeddings"
    return sorted(folder.glob(prefix + "*")) if folder.exists() else []


def test_cached_geometry_equals_a_fresh_computation_and_is_read_back(tmp_path):
    p = _table(tmp_path / "t.txt")
    emb = _load(p)
    center, radius = emb.geometry(sampling.table_geometry)
    c0, r0 = _fresh(emb.vectors)
    assert center.dtype == np.float64 and np.array_equal(center, c0) and radius == r0
    files = _cache_files(tmp_path)
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["key"]["files"][0][:2] == [str(p.resolve()), p.stat().st_size]
    # a new load reads the file (shown by a marker radius written into it), not a recomputation
    doc["radius"] = (r0 * 2).hex()
    files[0].write_text(json.dumps(doc))
    again = _load(p)
    assert again.geometry(sampling.table_geometry)[1] == r0 * 2
    # the exact float64 values survive the round trip through the file
    doc["radius"] = r0.hex()
    files[0].write_text(json.dumps(doc))
    c1, r1 = _load(p).geometry(sampling.table_geometry)
    assert np.array_equal(c1, c0) and r1 == r0


def test_a_changed_file_gets_a_fresh_geometry(tmp_path):
    p = _table(tmp_path / "t.txt", seed=1)
    old = _load(p).geometry(sampling.table_geometry)
    st = p.stat()
    _table(p, seed=2, shift=5.0)  # new numbers, and a different modification time
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    emb = _load(p)
    new = emb.geometry(sampling.table_geometry)
    c, r = _fresh(emb.vectors)
    assert np.array_equal(new[0], c) and new[1] == r
    assert new[1] != old[1] and not np.array_equal(new[0], old[0])
    assert len(_cache_files(tmp_path)) == 2  # keyed by the file's identity: one entry per version


def test_mechanism_geometry_is_the_tables(tmp_path):
    from textdp.sanitize import SanText

    p = _table(tmp_path / "t.txt", seed=3)
    mech = SanText(_load(p), epsilon=2.0, output_vocabulary="full")
    c, r = _fresh(_load(p).vectors)
    center, radius = mech._geometry()
    assert np.array_equal(center, c) and radius == r
    assert len(_cache_files(tmp_path)) == 1


def test_tables_without_files_or_small_are_computed_not_cached(tmp_path, monkeypatch):
    vec = np.random.default_rng(4).standard_normal((50, 3)).astype(np.float32)
    emb = core.Embeddings([f"w{i}" for i in range(50)], vec, source="memory")
    c, r = emb.geometry(sampling.table_geometry)
    c0, r0 = _fresh(vec)
    assert np.array_equal(c, c0) and r == r0
    monkeypatch.setattr(core, "GEOMETRY_CACHE_MIN_VALUES", 10**9)
    _load(_table(tmp_path / "t.txt")).geometry(sampling.table_geometry)
    assert _cache_files(tmp_path) == []


def test_unreadable_cache_entry_is_recomputed(tmp_path):
    p = _table(tmp_path / "t.txt", seed=5)
    _load(p).geometry(sampling.table_geometry)
    (f,) = _cache_files(tmp_path)
    f.write_text("{not json")
    emb = _load(p)
    c, r = emb.geometry(sampling.table_geometry)
    c0, r0 = _fresh(emb.vectors)
    assert np.array_equal(c, c0) and r == r0
    assert json.loads(f.read_text())["radius"] == r0.hex()  # rewritten


def test_word_list_cache_equals_the_parquet_and_follows_the_file(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "index.parquet"
    words = ["the", ",", "café", "a b", ""]
    pq.write_table(pa.table({"word": words}), p)
    assert core._cached_word_list(p) == words
    assert len(_cache_files(tmp_path, "words-")) == 1
    assert core._cached_word_list(p) == words  # read back from the plain-text copy
    st = p.stat()
    pq.write_table(pa.table({"word": ["x", "y"]}), p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert core._cached_word_list(p) == ["x", "y"]
    # a word with a line break cannot be stored one per line: read from the parquet every time
    q = tmp_path / "nl.parquet"
    pq.write_table(pa.table({"word": ["a", "b\nc"]}), q)
    assert core._cached_word_list(q) == ["a", "b\nc"]
    assert core._cached_word_list(q) == ["a", "b\nc"]
    assert len(_cache_files(tmp_path, "words-")) == 2
    for edge in ([""], ["", ""], ["only"]):  # empty words survive the one-per-line copy
        e = tmp_path / f"edge{len(edge)}{edge[0]}.parquet"
        pq.write_table(pa.table({"word": edge}), e)
        assert core._cached_word_list(e) == edge
        assert core._cached_word_list(e) == edge


def test_word_index_answers_as_the_full_dict(monkeypatch):
    """The two-tier index of a large table gives the first-occurrence row of every word, as the
    dict of all words does, and builds that dict only for a word outside its first tier."""
    monkeypatch.setattr(core.WordIndex, "FIRST", 4)
    words = ["the", "a", "of", "a", "to", "in", "the", "zebra", "okapi"]  # repeats: first occurrence wins
    idx = core.WordIndex(words)
    ref = {}
    for i, w in enumerate(words):
        ref.setdefault(w, i)
    assert idx["a"] == 1 and "of" in idx and idx.get("the") == 0
    assert idx._full is None  # first-tier words only so far
    for w in [*words, "missing", ""]:
        assert (w in idx) == (w in ref) and idx.get(w, -1) == ref.get(w, -1)
    assert idx["zebra"] == 7 and idx._full is not None
    with pytest.raises(KeyError):
        idx["missing"]
    assert len(idx) == len(ref) and list(idx) == list(ref) and dict(idx) == ref
    vec = np.zeros((len(words), 2), dtype=np.float32)
    emb = core.Embeddings(words, vec, source="memory")  # 9 words > 2 * FIRST: a WordIndex
    assert isinstance(emb.index, core.WordIndex)
    assert emb.rows(["okapi", "a", "the"]).tolist() == [8, 1, 0] and "zebra" in emb and "x" not in emb
    assert core.WordIndex(words).rows(["a", "the"]).tolist() == [1, 0] and emb.rows([]).dtype == np.int64
    assert type(emb.index) is dict and emb.index == ref  # a rare word was looked up: the owner holds the dict
    with pytest.raises(KeyError):
        emb.rows(["a", "missing"])


def test_a_users_embedding_file_is_never_cached_by_identity(tmp_path):
    """An edit that keeps the size and the modification time (cp -p, rsync -a, touch -r) must not reuse
    the old geometry: user files are recomputed every run (independent review)."""
    p = _table(tmp_path / "u.txt", rows=50, dim=4)
    emb = load_embeddings(p)
    assert emb.files == ()
    c0, r0 = emb.geometry(sampling.table_geometry)
    assert _cache_files(tmp_path) == []
    st = os.stat(p)
    text = p.read_text(encoding="utf-8").splitlines(keepends=True)
    first = text[0].split(" ")
    first[1] = first[1].replace("-", "9", 1) if "-" in first[1] else "9" + first[1][1:]
    text[0] = " ".join(first)
    p.write_text("".join(text), encoding="utf-8")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = load_embeddings(p)
    c1, r1 = again.geometry(sampling.table_geometry)
    assert not np.array_equal(again.vectors, emb.vectors)
    c2, r2 = _fresh(again.vectors)
    assert not np.array_equal(c1, c0) and np.array_equal(c1, c2) and r1 == r2
