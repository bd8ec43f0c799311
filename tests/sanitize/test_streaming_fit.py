"""The streaming fit pass (count only, nothing kept) must count exactly what the tokenizer sees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textdp.embeddings import Embeddings
from textdp.sanitize import SanText
from textdp.sanitize.corpus import count_rows, tokenize_texts

WORDS = ["do", "n't", "'s", "don", "t", "a-b.c", "a", "b", "café", "istanbul", ".", ",", "x.y", "'", "the"]


def _emb(lowercase=True):
    g = np.random.Generator(np.random.PCG64(0))  # test data, not DP noise
    return Embeddings(WORDS, g.standard_normal((len(WORDS), 3)).astype(np.float32), source="test", kind="word",
                      lowercase=lowercase)


def _reference(texts, emb):
    tok = tokenize_texts(texts, emb)
    ok = tok.rows >= 0
    return np.bincount(tok.rows[ok], minlength=len(emb)), tok.n_docs, tok.n_tokens, int((~ok).sum())


TRICKY = ["Don't stop", "DON'T\nstop", "İstanbul n't 's 'S", "", "a-b.c x.y- .", "naïve Café ß",
          "end don", "'t start", "tab\tsep\r\nCRLF", "don\n't", None, "\x00 nul", "ﬁ ligature ǅ"]


@pytest.mark.parametrize("lowercase", [True, False])
def test_count_rows_matches_tokenizer_on_tricky_text(lowercase):
    emb = _emb(lowercase)
    got = count_rows(TRICKY, emb)
    ref = _reference(TRICKY, emb)
    assert np.array_equal(got[0], ref[0])
    assert got[1:] == ref[1:]
    assert got[0].sum() > 0 and got[3] > 0  # both in- and out-of-vocabulary tokens were seen


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("aAbtdonN'’.-,_ \n\tİ0é")), max_size=30), max_size=8))
def test_count_rows_matches_tokenizer_property(texts):
    emb = _emb()
    got = count_rows(texts, emb)
    ref = _reference(texts, emb)
    assert np.array_equal(got[0], ref[0]) and got[1:] == ref[1:]


def test_streamed_fit_equals_one_pass_fit():
    texts = ["the a b", "don't café", "x.y the the", "a-b.c ,", "unknownword a"] * 3
    one = SanText(_emb(), epsilon=1.0).fit(texts)
    streamed = SanText(_emb(), epsilon=1.0)
    for i in range(0, len(texts), 4):
        streamed.partial_fit(texts[i:i + 4], keep_tokens=(i == 0))
    assert np.array_equal(one._fitted.counts, streamed._fitted.counts)
    assert (one._fitted.documents, one._fitted.tokens, one._fitted.oov_tokens) == \
        (streamed._fitted.documents, streamed._fitted.tokens, streamed._fitted.oov_tokens)
    one._prepare(); streamed._prepare()  # noqa: E702
    assert np.array_equal(one.output_rows, streamed.output_rows)
