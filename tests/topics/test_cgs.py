"""The collapsed Gibbs sampler: recovery, log-likelihood, count consistency, randomness."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from textdp.noise import make_rng
from textdp.topics import LDA, GibbsState


def _aligned_l1(phi_hat, phi):
    cost = np.abs(phi_hat[:, None, :] - phi[None, :, :]).sum(-1)
    r, c = linear_sum_assignment(cost)
    return cost[r, c]


def test_recovers_known_topics_after_alignment(synth):
    corpus, phi = synth
    model = LDA(3, alpha=0.3, beta=0.01, iterations=150, seed=3).fit(corpus)
    l1 = _aligned_l1(model.topic_word, phi)
    # each recovered topic within L1 0.25 of its true topic (random topics are ~1.9 apart)
    assert np.all(l1 < 0.25), l1


def test_log_likelihood_rises(synth):
    corpus, _ = synth
    model = LDA(3, alpha=0.3, beta=0.01, iterations=60, seed=5, ll_every=1).fit(corpus)
    ll = np.array([v for _, v in model.private["log_likelihood"]])  # curator-only, never saved
    assert ll[-10:].mean() > ll[:3].mean() + 500  # from a random start the joint likelihood climbs a lot
    assert np.all(np.isfinite(ll))


def test_counts_consistent_after_every_sweep(synth):
    corpus, _ = synth
    checks = []
    LDA(3, iterations=8, seed=2).fit(corpus, callback=lambda it, ll, st: checks.append(st.check_consistency()))
    assert checks == [True] * 8


def test_counts_consistent_with_asymmetric_prior_and_view(synth):
    corpus, _ = synth
    rng = make_rng(7)
    st = GibbsState(corpus, 3, 0.1, 0.01, rng, beta_wk=np.full((corpus.n_words, 3), 0.05) + np.arange(3) * 0.1)
    for _ in range(3):
        st.sweep()
        assert st.check_consistency()
    st.set_prior(None)
    phi_wk = np.ascontiguousarray(st.phi().T)
    for _ in range(3):
        st.sweep_with_view(phi_wk)
        assert st.check_consistency()
    assert st.Z.min() >= 0 and st.Z.max() < 3


def test_asymmetric_prior_equal_to_symmetric_gives_same_chain(synth):
    corpus, _ = synth
    a = GibbsState(corpus, 3, 0.1, 0.01, make_rng(11))
    b = GibbsState(corpus, 3, 0.1, 0.01, make_rng(11), beta_wk=np.full((corpus.n_words, 3), 0.01))
    for _ in range(3):
        a.sweep()
        b.sweep()
    assert np.array_equal(a.Z, b.Z)
    assert np.isclose(a.log_likelihood(), b.log_likelihood())


def test_seeded_runs_reproducible_and_global_rng_untouched(synth):
    corpus, _ = synth
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    m1 = LDA(3, iterations=5, seed=9).fit(corpus)
    m2 = LDA(3, iterations=5, seed=9).fit(corpus)
    m3 = LDA(3, iterations=5, seed=10).fit(corpus)
    assert np.array_equal(m1.topic_word, m2.topic_word)
    assert not np.array_equal(m1.topic_word, m3.topic_word)
    assert np.array_equal(np.random.get_state()[1], before)
    assert m1.seed["seeded"] is True and LDA(3, iterations=1).fit(corpus).seed["seeded"] is False


def test_transform_new_documents(synth):
    corpus, phi = synth
    model = LDA(3, alpha=0.3, iterations=100, seed=3).fit(corpus)
    theta = model.transform(["waa wab wac wad wae waf", "waz wba wbb wbc", "zzz"], seed=0)
    assert theta.shape == (2, 3)  # the OOV-only document is skipped
    assert np.allclose(theta.sum(1), 1)
    assert theta[0].argmax() != theta[1].argmax()
    assert theta.max(axis=1).min() > 0.7
