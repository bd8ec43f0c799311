"""Bayes-optimal mechanism-aware inversion (textdp.attacks.bayes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from textdp.attacks.bayes import (BayesInversion, ExponentialChannel, MatrixChannel, NoisyNearestChannel,
                                  word_prior)
from textdp.errors import InputError, ParameterError

WORDS = ["good", "great", "bad", "awful", "film", "movie", "the", "a"]
VEC = np.array([[1, 0, 0], [0.9, 0.1, 0], [-1, 0, 0], [-0.9, -0.1, 0], [0, 1, 0], [0, 0.95, 0.05],
                [0, 0, 1], [0.05, 0, 0.9]], dtype=float)


def santext_matrix(eps):
    d = np.sqrt(((VEC[:, None, :] - VEC[None, :, :]) ** 2).sum(-1))
    L = -0.5 * eps * d
    P = np.exp(L - L.max(1, keepdims=True))
    return P / P.sum(1, keepdims=True)


def test_exponential_channel_equals_explicit_matrix():
    ch = ExponentialChannel(WORDS, VEC, WORDS, VEC, epsilon=3.0, block=3)
    np.testing.assert_allclose(ch.prob_matrix(), santext_matrix(3.0), rtol=1e-6, atol=1e-12)  # float32 sums in Z


def test_santext_plus_channel_structure():
    sens = {"good", "great", "bad", "awful"}
    ch = ExponentialChannel(WORDS, VEC, WORDS, VEC, epsilon=2.0, sensitive=sens, p=0.3)
    P = ch.prob_matrix()
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    s_cols = [WORDS.index(w) for w in sens]
    ns = [i for i in range(len(WORDS)) if WORDS[i] not in sens]
    for i in range(len(WORDS)):
        for j in ns:  # a non-sensitive output only from itself, with prob 1-p
            assert P[i, j] == pytest.approx(0.7 if i == j else 0.0)
    for i in s_cols:
        assert P[i, s_cols].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0])
def test_bayes_success_equals_exact_expected(eps, rng):
    """Tiny vocabulary: the attack's empirical success on sampled tokens agrees with the exact
    expected success Σ_y w(x̂(y)) p(y|x̂(y)) (binomial 99.9% interval, n = 40000)."""
    P = santext_matrix(eps)
    ch = MatrixChannel(P, WORDS, WORDS)
    w = np.array([8, 4, 6, 1, 5, 3, 20, 15], float)
    w /= w.sum()
    atk = BayesInversion(ch, word_prior(WORDS, {x: c for x, c in zip(WORDS, w * 1000)}, smoothing=0), k=2)
    n = 40_000
    x = rng.choice(len(WORDS), size=n, p=w)
    y = ch.sample(x, rng)
    res = atk.attack([WORDS[i] for i in x], [WORDS[j] for j in y])
    for got, k in ((res.top1, 1), (res.topk, 2)):
        exact = atk.expected_success(w, k=k)
        half = 3.29 * math.sqrt(exact * (1 - exact) / n)
        assert abs(got - exact) <= half + 1e-9, (k, got, exact)
    # and the exact value computed by brute force over every output
    g = [int(np.argmax(P[:, yy] * w)) for yy in range(len(WORDS))]
    brute = sum(w[g[yy]] * P[g[yy], yy] for yy in range(len(WORDS)))
    assert atk.expected_success(w, k=1) == pytest.approx(brute, rel=1e-12)


def test_bayes_is_optimal_among_simple_rules():
    """The MAP rule beats 'guess the output itself' and 'guess the prior mode' (exact values)."""
    P = santext_matrix(2.0)
    w = np.array([8, 4, 6, 1, 5, 3, 20, 15], float)
    w /= w.sum()
    atk = BayesInversion(MatrixChannel(P, WORDS, WORDS), np.log(w), k=1)
    ident = float((w * np.diag(P)).sum())
    prior_mode = float(w.max())
    assert atk.expected_success(w) >= max(ident, prior_mode) - 1e-12


def test_eps_zero_attack_equals_prior(rng):
    ch = ExponentialChannel(WORDS, VEC, WORDS, VEC, epsilon=0.0)
    lp = word_prior(WORDS, {"the": 50, "a": 30, "film": 5}, smoothing=1)
    atk = BayesInversion(ch, lp, k=1)
    x = rng.integers(0, len(WORDS), 2000)
    y = ch.sample(x, rng)
    res = atk.attack([WORDS[i] for i in x], [WORDS[j] for j in y])
    assert res.top1 == pytest.approx(res.prior_top1)
    assert all(g == ["the"] for g in atk.guess(WORDS))


def test_success_grows_with_epsilon(rng):
    w = np.ones(len(WORDS))
    vals = [BayesInversion(ExponentialChannel(WORDS, VEC, WORDS, VEC, epsilon=e), k=1).expected_success(w)
            for e in (0.01, 1, 4, 16, 64)]
    assert all(b >= a - 1e-12 for a, b in zip(vals, vals[1:]))
    assert vals[0] == pytest.approx(1 / len(WORDS), abs=1e-3) and vals[-1] > 0.95


def test_fbdd_channel_is_flagged_approximate():
    ch = NoisyNearestChannel(WORDS, VEC, WORDS, VEC, epsilon=3.0, calibration=(np.arange(8), np.arange(8)))
    assert ch.exact is False
    res = BayesInversion(ch, k=1).attack(["good", "bad"], ["great", "awful"])
    assert res.exact is False and res.n_tokens == 2


def test_wordfreq_prior_and_bad_input():
    lp = word_prior(["the", "zzqxj"], "wordfreq")
    assert np.exp(lp).sum() == pytest.approx(1.0) and lp[0] > lp[1]
    with pytest.raises(ParameterError):
        word_prior(["a"], "nonsense")
    atk = BayesInversion(MatrixChannel(np.eye(2), ["a", "b"], ["a", "b"]))
    with pytest.raises(InputError):
        atk.attack(["zz"], ["a"])
    with pytest.raises(InputError):
        atk.attack(["a", "b"], ["a"])
    res = atk.attack(["a", "b", "zz"], ["a", "b", "a"])
    assert res.top1 == 1.0 and res.n_skipped == 1
