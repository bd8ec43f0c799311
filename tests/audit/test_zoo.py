"""Distribution tests of the audit zoo (every registered audit.* mechanism).

Significance level ALPHA = 1e-3 for every goodness-of-fit test, fixed seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from textdp.accounting.guarantees import NoPrivacy, PureDP
from textdp.errors import ParameterError
from textdp.mechanisms import registry
from textdp.mechanisms.zoo import ZOO, make_zoo_mechanism
from textdp.noise import make_rng

ALPHA = 1e-3
N, DIM = 20_000, 4

# Registry names whose distribution tests live in this module (see tests/test_registry_coverage.py).
DISTRIBUTION_TESTED = tuple(f"audit.{k}" for k in ZOO)


def _run(name, eps, n, value, seed=1, size=N):
    m = make_zoo_mechanism(name, eps, n)
    x = np.full((size, n), float(value))
    y = m(x, make_rng(seed))
    assert y.shape == x.shape and y.dtype == np.float64
    return m, y


def test_registry_has_the_zoo_with_flags():
    reg = registry()
    for k in ZOO:
        info = reg[f"audit.{k}"]
        assert info.capability == "audit"
        assert callable(info.factory(epsilon=1.0, n=3))
    assert reg["audit.adept"].broken and reg["audit.adept"].reason
    assert reg["audit.dptext"].broken and "U(0,1)" in reg["audit.dptext"].reason
    for ok in ("laplace", "random", "wrong-sensitivity", "laplace-secure", "copy"):
        assert not reg[f"audit.{ok}"].broken
    assert isinstance(make_zoo_mechanism("copy", 1, 2).guarantee, NoPrivacy)
    g = make_zoo_mechanism("adept", 0.5, 8).guarantee
    assert isinstance(g, PureDP) and g.epsilon == 0.5 and g.unit == "record"


@pytest.mark.parametrize("name,scale", [("laplace", lambda e, n: n / e), ("adept", lambda e, n: 1 / e)])
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_laplace_noise_is_laplace_with_the_stated_scale(name, scale, value):
    eps = 0.7
    m, y = _run(name, eps, DIM, value)
    noise = (y - value).ravel()
    assert stats.kstest(noise, stats.laplace(scale=scale(eps, DIM)).cdf).pvalue > ALPHA
    # a wrong scale is rejected by the same test (test of the test)
    assert stats.kstest(noise, stats.laplace(scale=1.2 * scale(eps, DIM)).cdf).pvalue < ALPHA


def test_dptext_noise_is_half_zero_half_exponential():
    eps = 2.0
    m, y = _run("dptext", eps, DIM, 0.0)
    t = y.ravel() / m.scale
    assert np.all(t >= 0) and not np.isnan(t).any()
    zero = np.count_nonzero(t == 0)
    assert stats.binomtest(zero, t.size, 0.5).pvalue > ALPHA
    assert stats.kstest(t[t > 0], stats.expon().cdf).pvalue > ALPHA
    _, y1 = _run("dptext", eps, DIM, 1.0)
    assert y1.min() >= 1.0  # one-sided: D' never goes below 1


def test_random_is_fair_and_ignores_the_input():
    _, y0 = _run("random", 1.0, DIM, 0.0, seed=3)
    _, y1 = _run("random", 1.0, DIM, 1.0, seed=3)
    assert set(np.unique(y0)) <= {0.0, 1.0}
    assert np.array_equal(y0, y1)  # same stream, output independent of x
    assert stats.binomtest(int(y0.sum()), y0.size, 0.5).pvalue > ALPHA


def test_copy_is_identity():
    x = make_rng(0).random((50, 3))
    assert np.array_equal(make_zoo_mechanism("copy", 1, 3)(x, make_rng(1)), x)


def test_wrong_sensitivity_halves_the_laplace_output():
    eps = 1.5
    _, y = _run("wrong-sensitivity", eps, DIM, 1.0)
    noise = (2 * y - 1.0).ravel()
    assert stats.kstest(noise, stats.laplace(scale=DIM / eps).cdf).pvalue > ALPHA


def test_secure_laplace_is_laplace_within_discretisation():
    eps = 1.0
    _, y = _run("laplace-secure", eps, DIM, 0.0, size=5000)
    assert stats.kstest(y.ravel(), stats.laplace(scale=DIM / eps).cdf).pvalue > ALPHA


@pytest.mark.parametrize("name", [k for k in ZOO if k != "laplace-secure"])
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_bit_probability_matches_simulation(name, value):
    m, y = _run(name, 0.8, DIM, value, seed=7)
    p = m.bit_probability(value)
    k = int(np.count_nonzero(y >= 0.5))
    if p in (0.0, 1.0):
        assert k == p * y.size
    else:
        assert stats.binomtest(k, y.size, p).pvalue > ALPHA


def test_zoo_bad_parameters():
    with pytest.raises(ParameterError):
        make_zoo_mechanism("laplace", 0, 3)
    with pytest.raises(ParameterError):
        make_zoo_mechanism("laplace", 1, 0)
    with pytest.raises(ParameterError):
        make_zoo_mechanism("nope", 1, 1)
    with pytest.raises(ParameterError):
        make_zoo_mechanism("laplace", 1, 3)(np.zeros((4, 2)), make_rng(0))
    assert math.isclose(make_zoo_mechanism("audit.laplace", 2, 4).scale, 2.0)


def test_literal_inverse_cdf_formula_has_the_law_of_numpy_laplace():
    # the official code's L = −sgn(U−½)·ln(1−2|U−½|) and numpy's Generator.laplace: same law
    from textdp.mechanisms.zoo import _inverse_cdf_laplace

    a = _inverse_cdf_laplace((N,), make_rng(1))
    b = make_rng(2).laplace(0.0, 1.0, N)
    assert stats.ks_2samp(a, b).pvalue > ALPHA
    assert stats.kstest(a, stats.laplace().cdf).pvalue > ALPHA


def test_float_samplers_are_labelled_not_float_safe():
    # issue 12: the float `laplace` passes the bit audit as an ideal law, but its float outputs are not ε-DP
    from textdp.mechanisms.registry import registry
    from textdp.mechanisms.zoo import ZOO

    safe = {name for name, cls in ZOO.items() if cls(1.0, 1).float_safe}
    assert safe == {"copy", "random", "laplace-secure"}
    lap = ZOO["laplace"](1.0, 2)
    assert not lap.float_safe and "not float-safe" in lap.describe()["float_note"]
    assert "not-float-safe" in registry()["audit.laplace"].tags
    assert "not-float-safe" not in registry()["audit.laplace-secure"].tags
