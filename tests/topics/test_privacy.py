"""Privacy math of the LDA trainers: RR estimator, ε formula, HDP-LDA noise scale,
inherent-privacy bound (brute force), Bayesian denoising."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from textdp.noise import make_rng
# Registry names whose distribution tests live here (tests/test_registry_coverage.py): the released noise of
# HDP-LDA (both calibrations share noisy_view) and the randomized response of LP-/OLP-LDA (shared rr_encode).
DISTRIBUTION_TESTED = ("topics.hdp-lda", "topics.hdp-lda-paper", "topics.lp-lda", "topics.olp-lda")

from textdp.topics import (  # noqa: E402
    HDPLDA,
    LPLDA,
    OLPLDA,
    DataDependentPrivacyWarning,
    Corpus,
    bayes_denoise,
    cgs_inherent_epsilon,
    flip_for_epsilon,
    laplace_composition,
    lp_epsilon,
    rr_encode,
    rr_estimate,
    rr_variance,
)


# --- LP-LDA --------------------------------------------------------------------------------------------------
def test_lp_epsilon_formula_and_inverse():
    for f, eps in ((0.1, 5.89), (0.2, 4.39), (0.5, 2.20), (0.8, 0.81)):
        assert lp_epsilon(f) == pytest.approx(eps, abs=0.005)
        assert lp_epsilon(f) == pytest.approx(2 * math.log((1 - f / 2) / (f / 2)))
        assert flip_for_epsilon(lp_epsilon(f)) == pytest.approx(f)
    assert LPLDA(2, epsilon=3.0).guarantee.epsilon == pytest.approx(3.0)
    assert LPLDA(2, flip=0.5).guarantee.kind == "local-dp"


def test_rr_estimator_unbiased_and_variance_matches_formula():
    # 20 documents over 6 words with known document frequencies; 1500 independent encodings.
    docs = [[0, 1], [0], [0, 2], [0, 3], [1]] * 4
    corpus = Corpus.from_word_ids(docs, ["aa", "bb", "cc", "dd", "ee", "ff"])
    t_true = np.asarray(corpus.doc_word_binary().sum(0)).ravel()
    f, N, R = 0.4, corpus.n_docs, 1500
    rng = make_rng(2024)
    ests = np.array([rr_estimate(rr_encode(corpus, f, rng).counts(), N, f) for _ in range(R)])
    var = rr_variance(N, f)
    assert var == pytest.approx(N * f * (2 - f) / (4 * (1 - f) ** 2))
    # unbiased: |mean - t| < 4 standard errors for every word (family-wise level ~ 4e-4)
    se = math.sqrt(var / R)
    assert np.all(np.abs(ests.mean(0) - t_true) < 4 * se), (ests.mean(0), t_true)
    # variance: chi-square 99.9% interval for the sample variance of each word
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], R - 1) / (R - 1)
    sv = ests.var(0, ddof=1)
    assert np.all((sv > lo * var) & (sv < hi * var)), (sv, var)


def test_rr_encode_flip_rate(rng):
    corpus = Corpus.from_word_ids([[0]] * 500, [f"w{chr(97 + i)}" for i in range(40)])
    rep = rr_encode(corpus, 0.3, rng)
    c = rep.counts()
    # word 0 kept with prob 1 - f/2 = 0.85; others flipped in with f/2 = 0.15 (binomial 4-sigma bands)
    assert abs(c[0] / 500 - 0.85) < 4 * math.sqrt(0.85 * 0.15 / 500)
    rest = c[1:].sum() / (500 * 39)
    assert abs(rest - 0.15) < 4 * math.sqrt(0.15 * 0.85 / (500 * 39))


# --- OLP-LDA Bayesian denoising ------------------------------------------------------------------------------
def test_bayes_denoise_weight_convention_and_variance():
    N, f = 400, 0.5
    var_rr = rr_variance(N, f)
    t_true = np.full(2000, 120.0)
    rng = make_rng(5)
    # simulate the moment estimator through actual RR bits
    X = np.zeros((N, 1), bool)
    X[:120] = True
    from textdp.noise import randomized_response

    t_hat = np.array([rr_estimate(randomized_response(X, f, rng).sum(0), N, f)[0] for _ in range(2000)])
    mu, s2 = 120.0, var_rr  # omega = 1/2
    d = bayes_denoise(t_hat, N, f, mu, s2)
    assert np.allclose(d.omega, 0.5)
    assert np.allclose(d.estimate, np.clip(0.5 * t_hat + 0.5 * mu, 0, N))
    # Theorem 7: variance is (1 - omega)^2 of the moment estimator's (chi-square 99.9% band)
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], 1999) / 1999
    sv = d.estimate.var(ddof=1)
    assert lo * 0.25 * var_rr < sv < hi * 0.25 * var_rr
    # weak belief in the prior -> omega -> 0; sharp prior -> omega -> 1
    assert bayes_denoise(t_hat[:3], N, f, mu, 1e12).omega.max() < 1e-6
    assert bayes_denoise(t_hat[:3], N, f, mu, 1e-9).omega.min() > 1 - 1e-6


def test_bayes_denoise_falls_back_when_gaussian_approximation_fails():
    with pytest.warns(UserWarning, match="Gaussian approximation"):
        d = bayes_denoise(np.array([0.0, 1.0]), 6, 0.1, np.array([3.0, 3.0]), 1.0)
    assert np.all(d.omega == 0) and not d.approx_ok.any()


# --- HDP-LDA -------------------------------------------------------------------------------------------------
def test_hdp_noise_scale_follows_from_epsilon_and_split():
    m = HDPLDA(5, epsilon=2.0, iterations=40, sweeps_per_release=4, max_doc_length=50)
    acc = m.accounting()
    assert m.releases == 10
    assert acc["sensitivity_l1"] == 100
    assert acc["scale"] == pytest.approx(100.0 * 10 / 2.0)  # b = Δ₁ R / ε
    assert acc["epsilon_per_release"] == pytest.approx(0.2)
    paper = HDPLDA(5, epsilon=2.0, iterations=40, unit="token-paper")
    assert paper.accounting()["scale"] == pytest.approx(2.0 * 40 / 2.0)
    # the released view carries discrete Laplace(b) noise (chi-square goodness of fit at level 0.001),
    # and the true counts are untouched
    b = 1.5
    nwk = np.full((4000, 5), 10_000, dtype=np.int32)
    view = m.noisy_view(nwk, b, make_rng(1))
    assert np.all(nwk == 10_000)
    z = (view - nwk).ravel()
    assert np.all(z == np.round(z))
    q = math.exp(-1 / b)
    support = np.arange(-6, 7)
    pmf = (1 - q) / (1 + q) * q ** np.abs(support)
    expected = np.append(pmf, 1 - pmf.sum()) * z.size
    observed = np.append([(z == v).sum() for v in support], (np.abs(z) > 6).sum())
    assert stats.chisquare(observed, expected).pvalue > 0.001
    assert m.guarantee.epsilon == 2.0 and m.guarantee.unit == "document"


def test_hdp_pld_accounting_is_tighter_and_valid():
    basic = laplace_composition(5.0, 100, 2)
    pld = laplace_composition(5.0, 100, 2, delta=1e-6)
    assert pld["scale"] < basic["scale"]
    assert pld["epsilon_achieved"] <= 5.0 + 1e-6
    assert HDPLDA(2, epsilon=5, delta=1e-6, iterations=100).guarantee.kind == "approx-dp"


def test_hdp_view_is_clamped_and_model_finite(synth):
    corpus, _ = synth
    m = HDPLDA(3, epsilon=1.0, iterations=5, seed=0, max_doc_length=40).fit(corpus)
    assert np.all(np.isfinite(m.topic_word)) and np.all(m.topic_word >= 0)
    assert np.allclose(m.topic_word.sum(1), 1.0)
    assert m.topic_word_counts is None  # true counts never leave a private trainer


# --- inherent privacy of CGS ---------------------------------------------------------------------------------
def _conditional(docs, z, i, K, V, alpha, beta):
    flat = [(d, w) for d, doc in enumerate(docs) for w in doc]
    nwk = np.zeros((V, K))
    ndk = np.zeros((len(docs), K))
    for j, (d, w) in enumerate(flat):
        if j != i:
            nwk[w, z[j]] += 1
            ndk[d, z[j]] += 1
    d, w = flat[i]
    r = (nwk[w] + beta) / (nwk.sum(0) + V * beta) * (ndk[d] + alpha)
    return r / r.sum()


@pytest.mark.parametrize("beta", [0.05, 0.5])
def test_inherent_bound_never_exceeded_brute_force(beta):
    """Every topic assignment of a 7-token corpus with K = 2: the exact max log-ratio of each token's
    sampling distribution under D and D' (token 0: word t=0 -> t'=1) never exceeds the bound."""
    K, V, alpha = 2, 4, 0.3
    D = [[0, 2, 1], [0, 1, 3], [2, 0]]
    Dp = [[1, 2, 1], [0, 1, 3], [2, 0]]
    flat = [w for doc in D for w in doc]
    N = len(flat)
    warnings.simplefilter("ignore", DataDependentPrivacyWarning)
    worst_gap = math.inf
    for z in itertools.product(range(K), repeat=N):
        counts = np.zeros((K, V), int)
        for w, k in zip(flat, z):
            counts[k, w] += 1
        b = cgs_inherent_epsilon(counts, 0, 1, beta, replaced_topic=z[0], warn=False)
        b_any = cgs_inherent_epsilon(counts, 0, 1, beta, warn=False)
        total = 0.0
        for i in range(N):
            lr = np.max(np.abs(np.log(_conditional(D, z, i, K, V, alpha, beta))
                               - np.log(_conditional(Dp, z, i, K, V, alpha, beta))))
            total += lr
            if i == 0:
                assert lr <= b.epsilon_replaced + 1e-12
            elif flat[i] == 0:
                assert lr <= b.epsilon_related_t + 1e-12
            elif flat[i] == 1:
                assert lr <= b.epsilon_related_t_prime + 1e-12
            else:
                assert lr < 1e-12  # unrelated tokens are unaffected
        assert total <= b.epsilon_iteration + 1e-12 <= b_any.epsilon_iteration + 1e-12
        assert b.epsilon_related_t <= math.log(1 + 1 / beta) + 1e-12
        worst_gap = min(worst_gap, b.epsilon_iteration - total)
    assert worst_gap < 1.0  # the bound is not vacuous: it is nearly attained somewhere


def test_inherent_epsilon_composes_and_warns(synth):
    corpus, _ = synth
    from textdp.topics import LDA, InherentPrivacyMonitor

    counts = np.array([[5, 0, 3], [1, 4, 0]])
    with pytest.warns(DataDependentPrivacyWarning):
        r = cgs_inherent_epsilon(counts, 0, 1, 0.1, iterations=7)
    assert r.epsilon_total == pytest.approx(7 * r.epsilon_iteration)
    assert cgs_inherent_epsilon(counts, 0, 1, 1.0, warn=False).epsilon_iteration < r.epsilon_iteration  # larger β, less loss
    with pytest.warns(DataDependentPrivacyWarning):
        mon = InherentPrivacyMonitor(0, 1, 0.01)
    LDA(3, iterations=4, seed=0).fit(corpus, callback=mon)
    assert len(mon.per_iteration) == 4 and mon.total == pytest.approx(sum(mon.per_iteration)) and mon.total > 0
