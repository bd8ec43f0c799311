"""Goodness-of-fit tests of every noise sampler against its exact law, plus
"tests of the tests": the same checks fail on deliberately broken samplers.

Significance level: ALPHA = 1e-3 for every test (fixed seeds, so a pass/fail is
reproducible); sample sizes are chosen so that the broken variants used below
are rejected by a wide margin.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from textdp.errors import ParameterError
from textdp.noise import exact, make_rng
from textdp.noise import samplers as S

from ._stats import ALPHA, chi2_pvalue, discrete_gaussian_pmf, discrete_laplace_pmf

# Registry names whose distribution tests live in this module (see tests/test_registry_coverage.py).
DISTRIBUTION_TESTED = ("noise.laplace", "noise.gaussian", "noise.randomized_response", "noise.exponential")

N = 100_000


# ------------------------------------------------------------------ exact integer samplers


@pytest.mark.parametrize("num,den", [(0, 5), (1, 3), (7, 7), (5, 2), (13, 4)])
def test_bernoulli_exp_matches_exp_minus_gamma(num, den):
    rng = make_rng(1)
    x = exact.bernoulli_exp(np.full(N, num, dtype=np.int64), den, rng)
    p = math.exp(-num / den)
    assert stats.binomtest(int(x.sum()), N, p).pvalue > ALPHA


@pytest.mark.parametrize("num,den", [(1, 3), (5, 7)])
def test_bernoulli_exp_integer_cks_path_matches_exp_minus_gamma(num, den):
    x = exact.bernoulli_exp_frac_cks(np.full(N, num, dtype=np.int64), den, make_rng(1))
    assert stats.binomtest(int(x.sum()), N, math.exp(-num / den)).pvalue > ALPHA


def test_bernoulli_exp_exact_continuation_path(monkeypatch):
    """Force most draws through the high-precision continuation (a huge margin):
    the law must still be exactly exp(-gamma)."""
    monkeypatch.setattr(exact, "EXP_MARGIN", 0.3)
    n = 4000
    x = exact.bernoulli_exp_frac(np.full(n, 2, dtype=np.int64), 5, make_rng(2))
    assert stats.binomtest(int(x.sum()), n, math.exp(-0.4)).pvalue > ALPHA
    lo, hi = exact._exp_interval_decimal(2, 5, 40)
    import decimal
    from fractions import Fraction

    ref = Fraction(decimal.Context(prec=80).exp(decimal.Decimal("-0.4")))
    assert lo < ref < hi and float(hi - lo) < 1e-35


@pytest.mark.parametrize("p", [0.5, 0.3, 1 / 3, 2.0**-70 + 0.25, 1e-3])
def test_bernoulli_dyadic_is_exact(p):
    rng = make_rng(2)
    x = S.bernoulli(p, N, rng)
    assert stats.binomtest(int(x.sum()), N, p).pvalue > ALPHA


@pytest.mark.parametrize("scale", [0.4, 1.0, 3.7, 25.0])
def test_discrete_laplace_goodness_of_fit(scale):
    rng = make_rng(3)
    z = S.discrete_laplace(scale, N, rng)
    assert z.dtype == np.int64
    support = np.arange(-int(40 * scale) - 5, int(40 * scale) + 6)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, scale)) > ALPHA


@pytest.mark.parametrize("sigma", [1, 3, 17])
def test_discrete_gaussian_goodness_of_fit(sigma):
    rng = make_rng(4)
    z = S.discrete_gaussian(sigma, N, rng)
    support = np.arange(-12 * sigma, 12 * sigma + 1)
    assert chi2_pvalue(z, support, discrete_gaussian_pmf(support, sigma)) > ALPHA


def test_discrete_gaussian_large_sigma_moments():
    rng = make_rng(5)
    z = S.discrete_gaussian(4096, 100_000, rng).astype(float)
    # variance of N_Z(0, s^2) equals s^2 up to 1e-100 for s >= 2 (CKS20 Cor. 9)
    assert abs(z.var() / 4096**2 - 1) < 5 * math.sqrt(2 / 100_000)
    assert abs(stats.skew(z)) < 0.05


# ------------------------------------------------------------------ float-safe public samplers


@pytest.mark.parametrize("scale", [0.01, 1.0, 123.4])
def test_laplace_law_and_grid(scale):
    rng = make_rng(6)
    x = S.laplace(scale, (400, 500), rng)
    assert x.shape == (400, 500) and x.dtype == np.float64
    g = S.laplace_granularity(scale)
    assert g <= scale * 2.0**-39 and math.log2(g).is_integer()
    k = x / g
    assert np.array_equal(k, np.rint(k))  # every output is on the power-of-two grid
    assert stats.kstest(x.ravel(), "laplace", args=(0, scale)).pvalue > ALPHA


@pytest.mark.parametrize("sigma", [0.05, 1.0, 300.0])
def test_gaussian_law_and_grid(sigma):
    rng = make_rng(7)
    x = S.gaussian(sigma, N, rng)
    g = S.gaussian_granularity(sigma)
    assert np.array_equal(x / g, np.rint(x / g))
    assert stats.kstest(x, "norm", args=(0, sigma)).pvalue > ALPHA


def test_laplace_mechanism_snaps_values_to_the_noise_lattice():
    rng = make_rng(8)
    vals = np.array([0.1, 1 / 3, 1e6 + 0.123456789, -2.5])
    out = S.laplace_mechanism(np.tile(vals, (50_000, 1)), sensitivity=1.0, epsilon=1.0, rng=rng)
    # output mod g reveals nothing: all outputs lie on one lattice whatever the input bits
    gs = [S.laplace_granularity(s) for s in (1.0, 1.0 + 4 * 2.0**-40)]
    assert any(np.array_equal(out / g, np.rint(out / g)) for g in gs)
    assert np.allclose(np.median(out, axis=0), vals, atol=0.05)


def test_gaussian_mechanism_law():
    rng = make_rng(9)
    out = S.gaussian_mechanism(np.full(N, 2.0 / 3.0), l2_sensitivity=1.0, sigma=2.0, rng=rng)
    g, sig = S.gaussian_mechanism_params(N, 1.0, 2.0)
    assert sig > 2.0  # the discretisation cost is paid in noise (sqrt(d) g / Delta)
    assert np.array_equal(out / g, np.rint(out / g))
    assert stats.kstest(out - 2.0 / 3.0, "norm", args=(0, sig)).pvalue > ALPHA
    g1, sig1 = S.gaussian_mechanism_params(1, 1.0, 2.0)
    assert 2.0 < sig1 <= 2.0 * (1 + 2.0**-9)


def test_randomized_response_frequencies():
    rng = make_rng(10)
    f = 0.3
    bits = np.zeros(N, dtype=bool)
    out = S.randomized_response(bits, f, rng)
    assert out.dtype == np.uint8 and out.shape == bits.shape
    assert stats.binomtest(int(out.sum()), N, f / 2).pvalue > ALPHA
    out1 = S.randomized_response(~bits, f, rng)
    assert stats.binomtest(int(out1.sum()), N, 1 - f / 2).pvalue > ALPHA


def test_gamma_and_direction():
    rng = make_rng(11)
    r = S.gamma(5.0, 0.5, N, rng)
    assert stats.kstest(r, "gamma", args=(5.0, 0, 0.5)).pvalue > ALPHA
    u = S.uniform_direction(20_000, 3, rng)
    assert np.allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-10)
    # uniform on S^2: each coordinate is Uniform(-1, 1) (Archimedes)
    assert stats.kstest(u[:, 0], "uniform", args=(-1, 2)).pvalue > ALPHA


# ------------------------------------------------------------------ exponential mechanism


def _softmax(lw):
    w = np.exp(lw - lw.max())
    return w / w.sum()


def test_categorical_goodness_of_fit_and_shapes():
    rng = make_rng(12)
    lw = np.log(np.array([[0.5, 0.25, 0.125, 0.125], [1, 1, 1, 1.0]]))
    out = S.categorical_from_log_weights(lw, np.array([N, 1000]), rng)
    assert [len(o) for o in out] == [N, 1000] and out[0].dtype == np.int64
    assert chi2_pvalue(out[0], np.arange(4), _softmax(lw[0])) > ALPHA
    assert set(np.unique(out[1])) <= {0, 1, 2, 3}


def test_exact_categorical_matches_categorical_from_log_weights():
    lw = np.random.default_rng(0).normal(size=(5, 50)) * 3
    ec = S.ExactCategorical(lw)
    rows = np.repeat(np.arange(5), 40_000)[::-1].copy()  # unsorted input order
    x = ec.sample(rows, make_rng(13))
    for b in range(5):
        assert chi2_pvalue(x[rows == b], np.arange(50), ec.probabilities()[b]) > ALPHA


def test_categorical_tail_outcomes_keep_positive_probability_and_ratio_bound():
    # Metric-DP toy: outcomes on a line, two neighbouring inputs at distance 1, eps = 8.
    eps, pos = 8.0, np.arange(40, dtype=float)
    lw = np.stack([-eps * np.abs(pos - 0) / 2, -eps * np.abs(pos - 1) / 2])
    probs = S.ExactCategorical(lw).probabilities()
    assert (probs > 0).all()  # the far tail (ideal mass e^-156) is not rounded to zero
    ideal = np.stack([_softmax(r) for r in lw])
    bound = S.categorical_discretisation_epsilon(40)
    ratio = np.abs(np.log(probs[0] / probs[1]))
    assert ratio.max() <= eps * 1.0 + bound  # metric DP with the documented extra loss
    # where the ideal law is not dominated by the uniform share, realised == ideal closely
    big = ideal > 1e-3
    assert np.allclose(probs[big], ideal[big], rtol=1e-5)


def test_categorical_discretisation_bound_holds_entrywise():
    lw = np.random.default_rng(1).normal(size=(3, 1000)) * 20
    ec = S.ExactCategorical(lw)
    q = np.stack([(1 - ec.eta) * _softmax(r) + ec.eta / 1000 for r in lw])
    err = np.abs(np.log(ec.probabilities() / q))
    assert err.max() <= ec.extra_epsilon / 4


def test_categorical_rejects_bad_input():
    rng = make_rng(0)
    with pytest.raises(ParameterError):
        S.categorical_from_log_weights(np.array([[np.nan, 0.0]]), np.array([1]), rng)
    with pytest.raises(ParameterError):
        S.categorical_from_log_weights(np.array([[-np.inf, -np.inf]]), np.array([1]), rng)
    with pytest.raises(ParameterError):
        S.categorical_from_log_weights(np.zeros((2, 3)), np.array([1]), rng)
    with pytest.raises(ParameterError):
        S.laplace(0.0, 3, rng)
    with pytest.raises(ParameterError):
        S.randomized_response(np.zeros(3), 1.0, rng)
    with pytest.raises(ParameterError):
        S.discrete_gaussian(2.5, 3, rng)


def test_seeded_samplers_reproduce():
    a = S.laplace(1.0, 100, make_rng(3))
    b = S.laplace(1.0, 100, make_rng(3))
    assert np.array_equal(a, b)
    lw = np.zeros((2, 10))
    c = S.categorical_from_log_weights(lw, np.array([5, 5]), make_rng(4))
    d = S.categorical_from_log_weights(lw, np.array([5, 5]), make_rng(4))
    assert all(np.array_equal(x, y) for x, y in zip(c, d))


# ------------------------------------------------------------------ tests of the tests


def test_gof_rejects_a_broken_bernoulli_exp(monkeypatch):
    """Break CKS20 Algorithm 1 (5% of the Bernoulli(exp(-gamma)) decisions flipped): the
    discrete Laplace built on it (the CKS20 reference sampler) must fail the same
    chi-square check that passes above."""
    real = exact.bernoulli_exp_frac

    def broken(num, den, rng):
        out = real(num, den, rng)
        flip = rng.random(out.shape) < 0.05  # 5% of decisions wrong
        return out ^ flip

    monkeypatch.setattr(exact, "bernoulli_exp_frac", broken)
    z = exact.discrete_laplace_rational_cks(37, 10, N, make_rng(3))  # P(z) ∝ exp(-|z| 10/37)
    support = np.arange(-153, 154)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, 3.7)) < ALPHA


def test_gof_rejects_a_miscertified_fast_sampler(monkeypatch):
    """Break the fast sampler's certified geometric step (5% of the K values off by one, as a
    wrong certification would give): ``discrete_laplace`` must fail the chi-square check."""
    real = exact._estimate_k

    def broken(u, plan, k_tol):
        k, ok = real(u, plan, k_tol)
        return k + (u % 20 == 0), ok

    monkeypatch.setattr(exact, "BACKEND", "numpy")
    monkeypatch.setattr(exact, "_estimate_k", broken)
    z = S.discrete_laplace(3.7, N, make_rng(3))
    support = np.arange(-153, 154)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, 3.7)) < ALPHA


def test_gof_rejects_a_slightly_wrong_scale():
    z = S.discrete_laplace(3.7 * 1.03, N, make_rng(3))  # 3% too much noise
    support = np.arange(-153, 154)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, 3.7)) < ALPHA


def test_ks_rejects_a_broken_gaussian():
    x = S.gaussian(1.0, N, make_rng(7)) * 1.04
    assert stats.kstest(x, "norm", args=(0, 1.0)).pvalue < ALPHA


def _naive_softmax_sampler(lw_row, n, rng):
    """The textbook sampler textdp replaced: float cumsum + a 53-bit uniform."""
    w = np.exp(lw_row - lw_row.max())
    cdf = np.cumsum(w)
    return np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")


def test_tail_check_catches_the_naive_float_sampler():
    """The naive sampler gives probability exactly 0 to outcomes lighter than
    2**-53 of the row (the float cumsum absorbs them), so its support depends on
    the input and no epsilon bounds the ratio; the secure one keeps them."""
    eps, pos = 8.0, np.arange(40, dtype=float)
    row = -eps * np.abs(pos - 0) / 2
    w = np.exp(row - row.max())
    cdf = np.cumsum(w)
    reachable = np.diff(np.concatenate([[0.0], cdf])) > 0
    assert not reachable.all()  # the check fails for the naive sampler ...
    assert (S.ExactCategorical(row[None, :]).probabilities() > 0).all()  # ... and passes for ours
    # and the naive sampler's draws agree with that: outcomes >= 10 never appear
    assert _naive_softmax_sampler(row, 10_000, make_rng(0)).max() < 10


def test_categorical_from_weights_contract_and_law():
    rng = make_rng(14)
    w = np.array([[1.0, 2.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0], [5.0, 5.0, 5.0, 5.0]], dtype=np.float32)
    counts = np.array([N, 300, 0])
    out = S.categorical_from_weights(w, counts, rng)
    assert out.shape == (N + 300,) and out.dtype == np.int64
    q = (1 - S.DEFAULT_ETA) * w[0] / w[0].sum() + S.DEFAULT_ETA / 4
    assert chi2_pvalue(out[:N], np.arange(4), q) > ALPHA
    assert (out[N:] == 2).sum() >= 299  # an underflowed (0) weight keeps only the tiny eta/V share
    with pytest.raises(ParameterError):
        S.categorical_from_weights(np.zeros((1, 3)), np.array([1]), rng)
