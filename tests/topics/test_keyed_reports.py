"""LP/OLP-LDA's user-side randomized response draws from per-document keyed streams (design.md "Scale-out",
issue 12 item 9): document r's report depends only on the release key, r (its input index) and its own words."""

from __future__ import annotations

import numpy as np
import pytest

from textdp.noise.keyed import ReleaseKey
from textdp.topics import LPLDA, OLPLDA, Corpus, rr_encode

from .conftest import synthetic


@pytest.fixture(scope="module")
def corpus():
    c, _ = synthetic(K=3, V=40, M=90, L=20, seed=3)
    docs = c.documents()
    docs.insert(7, [])   # empty documents at their input positions
    docs.insert(50, [])
    docs.append([])
    return Corpus.from_word_ids(docs, c.vocabulary)


def _same(a, b):
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.streams, b.streams)
    np.testing.assert_array_equal(a.kept_docs, b.kept_docs)


def test_input_positions_place_the_empty_documents(corpus):
    kept, empty = corpus.input_positions()
    assert corpus.n_input_docs == 93 and empty.tolist() == [7, 50, 92]
    np.testing.assert_array_equal(kept, corpus.kept_docs)
    sub = corpus.subset([5, 2])  # a subset keeps its parent's indices
    assert sub.input_positions()[0].tolist() == [corpus.kept_docs[5], corpus.kept_docs[2]]
    weird = Corpus.from_word_ids([[0], [1]], ["aa", "bb"])
    weird.kept_docs = np.array([4, 4])  # not a set of positions: the corpus's own order
    assert [x.tolist() for x in weird.input_positions()] == [[0, 1], []]


def test_reports_are_in_input_order_and_the_same_for_any_chunking(corpus):
    key = ReleaseKey.from_seed(11)
    ref = rr_encode(corpus, 0.3, key)
    assert ref.n_docs == 93 and ref.streams.tolist() == list(range(93))
    assert ref.kept_docs[[7, 50, 92]].tolist() == [-1, -1, -1]
    for chunk_bits, workers in ((1, 1), (40, 2), (97, 3), (10**9, 1)):
        _same(rr_encode(corpus, 0.3, key, chunk_bits, workers=workers), ref)
    # the report is the true vector XOR the keyed flip bits of stream r
    from fractions import Fraction

    from textdp.noise.keyed import BITS, keyed_bernoulli_bits

    flips = keyed_bernoulli_bits(key, np.arange(93), corpus.n_words, BITS, Fraction(0.3) / 2)
    truth = np.zeros((93, corpus.n_words), bool)
    X = corpus.doc_word_binary().toarray().astype(bool)
    truth[corpus.kept_docs] = X
    got = np.zeros_like(truth)
    got[np.repeat(np.arange(93), np.diff(ref.indptr)), ref.indices] = True
    np.testing.assert_array_equal(got, truth ^ flips)


def _input_docs(c):
    """The input documents of ``c`` (lists of word ids), the empty ones at their input positions."""
    out = [[] for _ in range(c.n_input_docs)]
    for pos, d in zip(c.input_positions()[0], c.documents()):
        out[pos] = list(d)
    return out


def test_a_document_report_does_not_depend_on_the_others(corpus):
    """Document r's report is the same when another document is added after it (or a later one changes)."""
    key = ReleaseKey.from_seed(12)
    docs = _input_docs(corpus)
    base = rr_encode(corpus, 0.4, key)
    for extra in ([[1, 2, 3]], [[]], [[4], [], [0, 1, 2, 3, 5]]):
        longer = rr_encode(Corpus.from_word_ids(docs + extra, corpus.vocabulary), 0.4, key)
        assert longer.n_docs == 93 + len(extra)
        for r in range(93):
            np.testing.assert_array_equal(longer.report(r), base.report(r))
    changed = [list(d) for d in docs]
    changed[60] = [0]  # a later document changes: the earlier reports stay
    rep = rr_encode(Corpus.from_word_ids(changed, corpus.vocabulary), 0.4, key)
    for r in range(93):
        if r != 60:
            np.testing.assert_array_equal(rep.report(r), base.report(r))


def test_seeded_lp_lda_release_is_the_same_for_any_chunk_size(corpus):
    kw = dict(n_topics=3, flip=0.2, iterations=5, seed=4, threshold=0.0)
    ref = LPLDA(**kw)
    ref_rep, ref_model = ref.encode(corpus), ref.fit(corpus)
    _same(ref_rep, rr_encode(corpus, 0.2, ReleaseKey.from_seed(4)))
    for chunk_bits, workers in ((1, 1), (333, 2), (10**8, 4)):
        t = LPLDA(chunk_bits=chunk_bits, workers=workers, **kw)
        _same(t.encode(corpus), ref_rep)
        m = t.fit(corpus)
        np.testing.assert_array_equal(m.topic_word, ref_model.topic_word)
        assert m.accounting == ref_model.accounting and m.params == ref_model.params
    assert "chunk_bits" not in ref_model.params and "workers" not in ref_model.params


def test_olp_lda_reports_do_not_depend_on_the_batch_size(corpus, monkeypatch):
    """Each batch's reports are LP-LDA's reports of those input documents (same seed, same streams)."""
    import textdp.topics.private as private

    seen = []

    def recording(*a, **k):
        rep = rr_encode(*a, **k)
        seen.append(rep)
        return rep

    monkeypatch.setattr(private, "rr_encode", recording)
    whole = LPLDA(3, flip=0.3, seed=5).encode(corpus)
    for batch_size, chunk_bits in ((10, 4_000_000), (31, 50), (93, 7), (500, 4_000_000)):
        seen.clear()
        OLPLDA(3, flip=0.3, iterations=2, batch_size=batch_size, seed=5, threshold=0.0,
               chunk_bits=chunk_bits).fit(corpus)
        assert [r.n_docs for r in seen] == [min(batch_size, 93 - i) for i in range(0, 93, batch_size)]
        streams = np.concatenate([r.streams for r in seen])
        np.testing.assert_array_equal(streams, np.arange(93))
        for r in range(93):
            b, i = divmod(r, batch_size)
            np.testing.assert_array_equal(seen[b].report(i), whole.report(r))
