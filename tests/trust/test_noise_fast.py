"""The fast exact samplers (textdp.noise.exact: certified geometric candidates, numpy and
numba evaluation): same laws as CKS20 on every path, the same draws on both backends,
the exact continuation path, and tests of the tests.

Significance level ALPHA = 1e-3 (fixed seeds), as in test_samplers.py.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from textdp.noise import exact, make_rng
from textdp.noise import samplers as S

from ._stats import ALPHA, chi2_pvalue, discrete_gaussian_pmf, discrete_laplace_pmf

N = 60_000
BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(not exact.numba_available(), reason="numba"))]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    monkeypatch.setattr(exact, "BACKEND", request.param)
    return request.param


def _dlap_cdf(z: np.ndarray, t: int, s: int) -> np.ndarray:
    """Exact CDF of P(Z = z) ∝ exp(-|z| s / t) (float), for binned tests of wide laws."""
    q = math.exp(-s / t)
    z = np.asarray(z, dtype=np.float64)
    return np.where(z >= 0, 1.0 - q ** (z + 1) / (1 + q), q ** (-z) / (1 + q))


def _binned_pvalue(x: np.ndarray, t: int, s: int, bins: int = 40) -> float:
    """Chi-square of integer draws against the exact discrete-Laplace CDF on ~equiprobable bins."""
    scale = t / s
    edges = np.unique(np.floor(stats.laplace.ppf(np.linspace(0, 1, bins + 1)[1:-1], scale=scale)))
    cdf = _dlap_cdf(edges, t, s)  # P(Z <= edge)
    probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    counts = np.bincount(np.searchsorted(edges, x, side="left"), minlength=probs.size)
    return float(stats.chisquare(counts, probs * x.size).pvalue)


# ------------------------------------------------------------------ laws on both backends


@pytest.mark.parametrize("scale", [0.4, 1.0, 3.7, 17.3])
def test_discrete_laplace_law(backend, scale):
    z = S.discrete_laplace(scale, N, make_rng(21))
    support = np.arange(-int(40 * scale) - 5, int(40 * scale) + 6)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, scale)) > ALPHA


@pytest.mark.parametrize("t,s", [(1000, 1), (123_456_789, 7), ((1 << 40) - 3, 1), (5, 12)])
def test_discrete_laplace_rational_wide_and_narrow_laws(backend, t, s):
    """One word per candidate (t/s <= 2**16), two words (t/s > 2**16: the r step), and a
    law concentrated near 0 (rate 2.4 per unit)."""
    z = exact.discrete_laplace_rational(t, s, N, make_rng(22))
    if t / s < 1:
        support = np.arange(-8, 9)
        assert chi2_pvalue(z, support, np.exp(-np.abs(support) * (s / t))) > ALPHA
    else:
        assert _binned_pvalue(z, t, s) > ALPHA
    assert not np.any(exact.discrete_laplace_rational(5, 3 << 40, 1000, make_rng(22)))  # P(z != 0) ~ e^-6e11


@pytest.mark.parametrize("sigma", [1, 3, 40, 4096])
def test_discrete_gaussian_law(backend, sigma):
    z = S.discrete_gaussian(sigma, N, make_rng(23))
    if sigma <= 40:
        support = np.arange(-12 * sigma, 12 * sigma + 1)
        assert chi2_pvalue(z, support, discrete_gaussian_pmf(support, sigma)) > ALPHA
    else:  # exact pmf on 40 near-equiprobable bins
        support = np.arange(-12 * sigma, 12 * sigma + 1)
        pmf = discrete_gaussian_pmf(support, sigma)
        cdf = np.cumsum(pmf / pmf.sum())
        edges = support[np.searchsorted(cdf, np.linspace(0, 1, 41)[1:-1])]  # bin b: values <= edges[b]
        probs = np.diff(np.concatenate([[0.0], cdf[np.searchsorted(support, edges)], [1.0]]))
        counts = np.bincount(np.searchsorted(edges, z, side="left"), minlength=probs.size)
        assert stats.chisquare(counts, probs * z.size).pvalue > ALPHA


def test_float_samplers_on_both_backends(backend):
    x = S.laplace(2.5, N, make_rng(24))
    assert stats.kstest(x, "laplace", args=(0, 2.5)).pvalue > ALPHA
    y = S.gaussian(0.7, N, make_rng(25))
    assert stats.kstest(y, "norm", args=(0, 0.7)).pvalue > ALPHA


def test_fast_sampler_agrees_with_the_cks20_reference():
    """Two-sample chi-square: the fast sampler and CKS20 Algorithm 2 as written, same (t, s)."""
    t, s = 37, 10
    a = exact.discrete_laplace_rational(t, s, N, make_rng(26))
    b = exact.discrete_laplace_rational_cks(t, s, N, make_rng(27))
    vals = np.arange(-12, 13)
    ca = np.array([(np.clip(a, -12, 12) == v).sum() for v in vals])
    cb = np.array([(np.clip(b, -12, 12) == v).sum() for v in vals])
    assert stats.chi2_contingency(np.stack([ca, cb]))[1] > ALPHA
    g1 = exact.discrete_gaussian_int(5, N, make_rng(28))
    g2 = exact.discrete_gaussian_int_cks(5, N, make_rng(29))
    vals = np.arange(-20, 21)
    c1 = np.array([(np.clip(g1, -20, 20) == v).sum() for v in vals])
    c2 = np.array([(np.clip(g2, -20, 20) == v).sum() for v in vals])
    keep = (c1 + c2) > 10
    assert stats.chi2_contingency(np.stack([c1[keep], c2[keep]]))[1] > ALPHA


# ------------------------------------------------------------------ backends: identical draws


@pytest.mark.skipif(not exact.numba_available(), reason="numba")
@pytest.mark.parametrize("t,s,gauss", [((1 << 40) - 3, 1, 0), (10, 1, 0), (1, 1, 0), (4097, 1, 4096), (2, 1, 1),
                                       (123_456_789, 7, 0), (3, 1000, 0)])
def test_numba_kernel_mirrors_numpy_evaluation(t, s, gauss):
    plan = exact._plan(t, s, gauss)
    c = 200_000
    words = exact._words(make_rng(30), c * plan.ncols).reshape(plan.ncols, c)
    k_tol = exact.E_TOL * plan.inv_step
    v1, s1 = exact._evaluate_numpy(words, plan, exact.EXP_MARGIN, k_tol)
    v2, s2 = exact._evaluate_numba(words, plan, exact.EXP_MARGIN, k_tol)
    assert np.array_equal(s1, s2)
    assert np.array_equal(v1[s1 == 1], v2[s2 == 1])
    assert 0.4 < (s1 == 1).mean() and (s1 == 2).mean() < 1e-3


@pytest.mark.parametrize("t,s,gauss", [((1 << 40) - 3, 1, 0), (10, 1, 0), (1, 1, 0), (4097, 1, 4096), (2, 1, 1),
                                       (123_456_789, 7, 0), (3, 1000, 0)])
def test_scalar_evaluation_mirrors_numpy_evaluation(t, s, gauss):
    plan = exact._plan(t, s, gauss)
    c = 3000
    words = exact._words(make_rng(40), c * plan.ncols).reshape(plan.ncols, c)
    k_tol = exact.E_TOL * plan.inv_step
    v1, s1 = exact._evaluate_numpy(words, plan, exact.EXP_MARGIN, k_tol)
    v2, s2 = exact._evaluate_scalar(words, plan, exact.EXP_MARGIN, k_tol)
    assert np.array_equal(s1, s2)
    assert np.array_equal(v1[s1 == 1], np.array(v2)[s1 == 1])


@pytest.mark.skipif(not exact.numba_available(), reason="numba")
def test_seeded_draws_do_not_depend_on_the_backend(monkeypatch):
    out = {}
    for b in ("numpy", "numba"):
        monkeypatch.setattr(exact, "BACKEND", b)
        out[b] = (S.discrete_laplace(17.3, 50_000, make_rng(31)), S.laplace(1.0, 3000, make_rng(32)),
                  S.gaussian(2.0, 3000, make_rng(33)),
                  [S.discrete_laplace(2.5, 8, r) for r in [make_rng(41)] for _ in range(50)])
    for x, y in zip(out["numpy"], out["numba"]):  # numpy: small calls on Python ints, large ones vectorised
        assert np.array_equal(x, y)


def test_backend_env_is_checked(monkeypatch):
    from textdp.errors import ParameterError

    monkeypatch.setattr(exact, "BACKEND", "gpu")
    with pytest.raises(ParameterError):
        S.discrete_laplace(1.0, 3, make_rng(0))


# ------------------------------------------------------------------ the exact continuation path


@pytest.mark.parametrize("t,s", [(37, 10), ((1 << 20) + 7, 1)])
def test_exact_path_alone_has_the_law(monkeypatch, t, s):
    """Huge tolerances send almost every candidate through _exact_candidate (more bits of R
    against decimal values of exp): the law must not change."""
    monkeypatch.setattr(exact, "E_TOL", 0.45 * min(1.0, exact._plan(t, s).step))
    monkeypatch.setattr(exact, "EXP_MARGIN", 0.3)
    monkeypatch.setattr(exact, "BACKEND", "numpy")
    n = 3000
    z = exact.discrete_laplace_rational(t, s, n, make_rng(34))
    if t < 100:
        support = np.arange(-40, 41)
        assert chi2_pvalue(z, support, np.exp(-np.abs(support) * s / t)) > ALPHA
    else:
        assert _binned_pvalue(z, t, s, bins=10) > ALPHA


def test_exact_path_alone_gaussian(monkeypatch):
    monkeypatch.setattr(exact, "E_TOL", 0.2)
    monkeypatch.setattr(exact, "EXP_MARGIN", 0.3)
    monkeypatch.setattr(exact, "BACKEND", "numpy")
    z = exact.discrete_gaussian_int(3, 3000, make_rng(35))
    support = np.arange(-36, 37)
    assert chi2_pvalue(z, support, discrete_gaussian_pmf(support, 3)) > ALPHA


def test_exact_candidate_matches_the_fast_decision():
    """On decided candidates, the exact evaluation returns the same status and value."""
    for t, s, g in [((1 << 40) - 3, 1, 0), (37, 10, 0), (4, 1, 3)]:
        plan = exact._plan(t, s, g)
        c = 300
        words = exact._words(make_rng(36), c * plan.ncols).reshape(plan.ncols, c)
        val, st = exact._evaluate_numpy(words, plan, exact.EXP_MARGIN, exact.E_TOL * plan.inv_step)
        rng = make_rng(37)
        for i in np.flatnonzero(st != 2)[:120]:
            e_st, e_val = exact._exact_candidate(words[:, i], plan, rng)
            assert e_st == st[i] and (e_st == 0 or e_val == val[i])


def test_lazy_uniform_comparisons_are_exact_for_large_exponents():
    rng = make_rng(38)
    # exp(-3000) ~ 1e-1303: a 62-bit prefix already shows R is larger
    assert exact._LazyUniform(12345, 62, rng).lt_exp(3000, 1) is False
    assert exact._LazyUniform(0, 62, rng).lt_exp(0, 5) is True
    # R in [0, 2**-1000) with more bits drawn on demand: compare with exp(-700) ~ 2**-1010
    lu = exact._LazyUniform(0, 1000, rng)
    want = Fraction(lu.r, 1 << lu.bits)
    got = lu.lt_exp(700, 1)
    r = Fraction(lu.r, 1 << lu.bits)  # R is now known to many more bits
    ref = Fraction(decimal.Context(prec=60, Emin=-10**6).exp(decimal.Decimal(-700)))
    assert want <= r and got == (r < ref)
    # the decimal interval is valid whatever the size of num/den (the quotient is computed exactly enough)
    lo, hi = exact._exp_interval_decimal(10**9 + 7, 10**6, 40)
    ref = Fraction(decimal.Context(prec=120, Emin=-10**9).exp(decimal.Context(prec=120).divide(
        decimal.Decimal(-(10**9 + 7)), decimal.Decimal(10**6))))
    assert lo < ref < hi and (hi - lo) / ref < 1e-38


# ------------------------------------------------------------------ calls, shapes, generators


def test_small_calls_shapes_and_scalars(monkeypatch):
    monkeypatch.setattr(exact, "BACKEND", "numpy")  # batches of <= 64 candidates: the Python-int path
    rng = make_rng(39)
    assert S.discrete_laplace(2.0, 0, rng).shape == (0,)
    assert np.ndim(S.discrete_laplace(2.0, None, rng)) == 0
    assert S.discrete_gaussian(3, (2, 3), rng).shape == (2, 3)
    assert S.laplace(1.0, (4, 1), rng).shape == (4, 1)
    x = np.concatenate([S.discrete_laplace(3.0, 8, rng) for _ in range(4000)])  # many 8-value calls
    support = np.arange(-125, 126)
    assert chi2_pvalue(x, support, discrete_laplace_pmf(support, 3.0)) > ALPHA


def test_other_bit_generators_are_used_through_integers():
    """MT19937's random_raw gives 32-bit words: such generators go through Generator.integers."""
    rng = np.random.Generator(np.random.MT19937(5))
    z = S.discrete_laplace(2.0, 30_000, rng)
    support = np.arange(-85, 86)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, 2.0)) > ALPHA


# ------------------------------------------------------------------ tests of the tests


@pytest.mark.skipif(not exact.numba_available(), reason="numba")
def test_gof_rejects_a_kernel_with_a_wrong_step(monkeypatch):
    """A numba-path bug (the geometric step 3% too small, i.e. 3% too much noise) fails the check."""
    real = exact._evaluate_numba

    class Wrong:
        def __init__(self, plan):
            self.__dict__.update(plan.__dict__)
            self.inv_step = plan.inv_step * 1.03

    monkeypatch.setattr(exact, "BACKEND", "numba")
    monkeypatch.setattr(exact, "_evaluate_numba", lambda w, plan, m, k: real(w, Wrong(plan), m, k))
    z = S.discrete_laplace(3.7, N, make_rng(21))
    support = np.arange(-153, 154)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, 3.7)) < ALPHA


def test_gof_rejects_a_sampler_that_keeps_negative_zero(monkeypatch):
    """Dropping the (B = 1, Y = 0) rejection of CKS20 Alg. 2 (zero twice as likely) fails the check."""
    real = exact._evaluate_numpy

    def broken(words, plan, margin, k_tol):
        val, st = real(words, plan, margin, k_tol)
        st[(st == 0) & (val == 0)] = 1
        return val, st

    monkeypatch.setattr(exact, "BACKEND", "numpy")
    monkeypatch.setattr(exact, "_evaluate_numpy", broken)
    z = S.discrete_laplace(3.7, N, make_rng(21))
    support = np.arange(-153, 154)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, 3.7)) < ALPHA


def test_raw_words_equal_generator_integers():
    """The fast word source (random_raw of 64-bit bit generators) draws exactly what
    ``Generator.integers(0, 2**64, dtype=uint64)`` would."""
    for mk in (lambda: make_rng(42), lambda: np.random.Generator(np.random.PCG64(42))):
        a, b = mk(), mk()
        assert np.array_equal(exact._words(a, 1000), b.integers(0, 1 << 64, size=1000, dtype=np.uint64))


def test_without_numba_auto_falls_back_to_numpy_and_numba_mode_is_refused(monkeypatch):
    """As in an install without the `topics` extra: auto uses the numpy path, numba mode says why not."""
    import types

    from textdp.errors import ParameterError

    monkeypatch.setattr(exact, "_kernels", types.SimpleNamespace(AVAILABLE=False))
    monkeypatch.setattr(exact, "BACKEND", "auto")
    monkeypatch.setattr(exact, "_numpy_total", exact.AUTO_NUMBA_MIN_CANDIDATES)
    assert exact._backend(1 << 24) == "numpy" and exact._backend(10) == "scalar"
    z = S.discrete_laplace(3.7, N, make_rng(21))
    support = np.arange(-153, 154)
    assert chi2_pvalue(z, support, discrete_laplace_pmf(support, 3.7)) > ALPHA
    monkeypatch.setattr(exact, "BACKEND", "numba")
    with pytest.raises(ParameterError):
        S.discrete_laplace(3.7, N, make_rng(21))


def test_auto_backend_policy(monkeypatch):
    """auto: Python ints for small batches; numpy until numba's start-up would be amortised."""
    import sys

    monkeypatch.setattr(exact, "BACKEND", "auto")
    monkeypatch.setattr(exact, "_kernels", None)
    monkeypatch.setattr(exact, "_numpy_total", 0)
    monkeypatch.delitem(sys.modules, "numba", raising=False)  # as in a process that never imported numba
    assert exact._backend(40) == "scalar"
    assert exact._backend(41) == "numpy"
    assert exact._backend(exact.AUTO_NUMBA_MIN_CANDIDATES - 1) == "numpy"
