"""Non-private textdp LDA against the `lda` package (a Cython CGS; in the dev extra)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from textdp.topics import LDA, perplexity

from .conftest import synthetic


def test_perplexity_within_two_percent_of_lda_package():
    lda = pytest.importorskip("lda")
    import logging

    logging.getLogger("lda").setLevel(logging.WARNING)
    c, _ = synthetic(K=5, V=100, M=400, L=50, alpha=0.2, seed=3)
    tr, te = c.subset(range(300)), c.subset(range(300, 400))
    X = sparse.csr_matrix((np.ones(tr.n_tokens, np.int64), (tr.doc_ids, tr.word_ids)), shape=(tr.n_docs, tr.n_words))
    ours = LDA(5, alpha=0.1, beta=0.01, iterations=200, seed=0).fit(tr)
    peer = lda.LDA(5, n_iter=200, alpha=0.1, eta=0.01, random_state=0, refresh=10_000).fit(X)
    p_ours = perplexity(ours.topic_word, te, 0.1, rng=0)
    p_peer = perplexity(peer.topic_word_, te, 0.1, rng=0)
    assert abs(p_ours / p_peer - 1) < 0.02, (p_ours, p_peer)
    # and both far better than a model that knows nothing (uniform topics: perplexity = V)
    assert p_ours < 0.6 * tr.n_words
