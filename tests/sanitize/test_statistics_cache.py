"""The card's public statistics (plausible deniability, diameters) cached between runs: a cached
value equals a fresh computation; another table, parameter or output vocabulary is recomputed
(issue 14, item 3)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from textdp.sanitize import SanText, SanTextPlus, stats


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stats, "STATISTICS_CACHE_MIN", 0)  # small test tables are cached too


def _table(path, seed=0, rows=120, dim=4):
    vec = np.random.default_rng(seed).standard_normal((rows, dim))  # test data only
    path.write_text("".join(f"w{i} " + " ".join(repr(float(v)) for v in row) + "\n" for i, row in enumerate(vec)),
                    encoding="utf-8")
    return path


def _pkg(path):
    """The table as an installed package table (files recorded: cacheable), like the built-in GloVe;
    a user's embedding file is never cached by identity."""
    from textdp.embeddings import core, load_embeddings

    e = load_embeddings(path)
    return core.Embeddings(list(e.words), np.asarray(e.vectors), source=e.source, kind=e.kind, lowercase=e.lowercase,
                           files=core.file_identity(path))


def _files(tmp_path):
    folder = tmp_path / "cache" / "privacy-statistics"
    return sorted(folder.glob("*.json")) if folder.exists() else []


def _fresh(mech, **kw):
    old = stats.STATISTICS_CACHE_MIN
    stats.STATISTICS_CACHE_MIN = 10**18  # no cache
    try:
        return stats.privacy_statistics(mech, **kw)
    finally:
        stats.STATISTICS_CACHE_MIN = old


@pytest.mark.parametrize("make", [lambda p: SanText(_pkg(p), epsilon=2.0, output_vocabulary="full"),
                                  lambda p: SanTextPlus(_pkg(p), epsilon=2.0, output_vocabulary="full",
                                                        frequencies="public")])
def test_cached_statistics_equal_a_fresh_computation(tmp_path, make):
    p = _table(tmp_path / "t.txt")
    first = stats.privacy_statistics(make(p))   # computed and stored
    assert len(_files(tmp_path)) == 1
    mech = make(p)
    second = stats.privacy_statistics(mech)     # read back
    fresh = _fresh(mech)
    assert second == fresh == first
    assert json.dumps(second, sort_keys=True) == json.dumps(fresh, sort_keys=True)
    with_lengths = stats.privacy_statistics(mech, mean_document_tokens=12.5, max_document_tokens=40)
    assert with_lengths == _fresh(mech, mean_document_tokens=12.5, max_document_tokens=40)


def test_statistics_are_recomputed_for_another_parameter_or_table(tmp_path):
    p = _table(tmp_path / "t.txt", seed=1)
    a = stats.privacy_statistics(SanText(_pkg(p), epsilon=2.0, output_vocabulary="full"))
    b = stats.privacy_statistics(SanText(_pkg(p), epsilon=5.0, output_vocabulary="full"))
    assert a != b and len(_files(tmp_path)) == 2
    st = p.stat()
    _table(p, seed=2)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    mech = SanText(_pkg(p), epsilon=2.0, output_vocabulary="full")
    c = stats.privacy_statistics(mech)
    assert c == _fresh(mech) and c != a and len(_files(tmp_path)) == 3


def test_in_memory_tables_are_not_cached(tmp_path, small_emb):
    stats.privacy_statistics(SanText(small_emb, epsilon=2.0, output_vocabulary="full"))
    assert _files(tmp_path) == []
