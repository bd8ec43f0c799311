"""Closed forms of Theorem 1 / Theorem 2 and the conversions (Guo et al. 2022; spec A.3–A.5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from textdp.accounting.guarantees import RDP, ApproxDP, PureDP
from textdp.bounds import (
    cramer_rao_mse_bound,
    epsilon2_from_approx_dp,
    epsilon2_from_guarantee,
    epsilon2_from_pure_dp,
    epsilon2_from_rdp_curve,
    epsilon2_gaussian,
    fil_from_jacobian,
    fil_mse_bound,
    gaussian_fisher_information,
    mia_advantage_bound,
    mse_to_std,
    rdp_mse_lower_bound,
)
from textdp.errors import ParameterError


def test_seed_worked_example_age_range():
    # Z = [0, 100], ε = 2: 10⁴ / (4 (e² − 1)) ≈ 391, standard deviation ≈ 19 (seed 001, item 3)
    b = rdp_mse_lower_bound(2.0, 100.0)
    assert b == pytest.approx(1e4 / (4 * (math.e**2 - 1)))
    assert round(b) == 391
    assert mse_to_std(b) == pytest.approx(19.78, abs=0.01)


@pytest.mark.parametrize("eps,ref", [(0.1, 2.377), (0.5, 0.385), (1, 0.1455), (2, 0.0391), (4, 0.00466), (8, 8.4e-5)])
def test_reference_table_unit_diam(eps, ref):
    assert rdp_mse_lower_bound(eps, 1.0) == pytest.approx(ref, rel=2e-3)


def test_numerically_safe_extremes():
    assert rdp_mse_lower_bound(0.0, 1.0) == math.inf
    tiny = rdp_mse_lower_bound(1e-12, 1.0)
    assert tiny == pytest.approx(0.25e12, rel=1e-9)  # expm1, not exp − 1
    assert rdp_mse_lower_bound(1e4, 1.0) == 0.0
    assert rdp_mse_lower_bound(math.inf, 1.0) == 0.0
    assert 0 < rdp_mse_lower_bound(700.0, 1.0) < 1e-300


def test_per_coordinate_diam_and_bias():
    diam = np.array([1.0, 2.0, 4.0])
    b = rdp_mse_lower_bound(1.0, diam)
    assert b == pytest.approx(np.mean(diam**2) / (4 * math.expm1(1.0)))
    # γ-biased: (diam/2 − γ)² / (e^ε − 1), clipped at 0; "absolute" doubles γ
    g = rdp_mse_lower_bound(1.0, diam, gamma=0.5)
    assert g == pytest.approx(np.mean(np.array([0.0, 0.5, 1.5]) ** 2) / math.expm1(1.0))
    ga = rdp_mse_lower_bound(1.0, diam, gamma=0.5, gamma_mode="absolute")
    assert ga == pytest.approx(np.mean(np.array([0.0, 0.0, 1.0]) ** 2) / math.expm1(1.0))
    assert ga <= g <= b


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "x"])
def test_bad_epsilon(bad):
    with pytest.raises(ParameterError):
        rdp_mse_lower_bound(bad, 1.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, [1.0, 0.0], float("inf")])
def test_bad_diam(bad):
    with pytest.raises(ParameterError):
        rdp_mse_lower_bound(1.0, bad)


def test_mia_advantage_values():
    assert (mia_advantage_bound(0.1) + 1) / 2 == pytest.approx(0.525, abs=0.005)  # ≈ 53 %
    assert (mia_advantage_bound(2.0) + 1) / 2 > 0.88


def test_gaussian_rdp_order2_closed_form():
    for sens, sigma in [(1.0, 1.0), (2.0, 3.0), (0.1, 0.01)]:
        assert epsilon2_gaussian(sigma, sens) == pytest.approx(sens**2 / sigma**2)
        assert epsilon2_gaussian(sigma, sens, order=5.0) == pytest.approx(5 * sens**2 / (2 * sigma**2))
    with pytest.raises(ParameterError):
        epsilon2_gaussian(0.0)
    with pytest.raises(ParameterError):
        epsilon2_gaussian(-1.0)


def test_pure_dp_conversion_is_randomized_response_chi2():
    for eps in [0.01, 0.5, 1.0, 2.0, 10.0, 29.0, 31.0, 200.0]:
        lq = -math.log1p(math.exp(-eps))  # log q, q = e^ε/(1+e^ε)
        l1q = -eps + lq  # log(1 − q)
        ref = np.logaddexp(2 * lq - l1q, 2 * l1q - lq)  # log(q²/(1−q) + (1−q)²/q)
        e2 = epsilon2_from_pure_dp(eps)
        assert e2 == pytest.approx(ref, rel=1e-6)
        assert e2 <= eps + 1e-12  # never looser than D₂ ≤ D_∞
    assert epsilon2_from_pure_dp(0.0) == 0.0
    # continuity across the library / log-space switch at ε = 30
    assert epsilon2_from_pure_dp(30.0) == pytest.approx(epsilon2_from_pure_dp(30.0 + 1e-9), rel=1e-6)


def test_approx_dp_conversion():
    import dp_accounting

    e2 = epsilon2_from_approx_dp(1.0, 1e-5, assume="gaussian")  # named: no silent assumption (issue 12)
    with pytest.raises(ParameterError, match="implies no MSE lower bound"):
        epsilon2_from_approx_dp(1.0, 1e-5)
    sigma = dp_accounting.get_sigma_gaussian(1.0, 1e-5)
    assert e2 == pytest.approx(1 / sigma**2)
    assert epsilon2_from_approx_dp(1.0, 1e-5, assume="any") == math.inf
    assert rdp_mse_lower_bound(epsilon2_from_approx_dp(1.0, 1e-5, assume="any")) == 0.0
    for bad in [0.0, 1.0, -0.1, 2.0, float("nan")]:
        with pytest.raises(ParameterError):
            epsilon2_from_approx_dp(1.0, bad, assume="gaussian")
    with pytest.raises(ParameterError):
        epsilon2_from_approx_dp(-1.0, 1e-5, assume="gaussian")


def test_rdp_curve_conversion():
    assert epsilon2_from_rdp_curve([1.5, 2, 4], [0.1, 0.3, 0.9]) == 0.3
    assert epsilon2_from_rdp_curve([3, 4], [0.5, 0.4]) == 0.4  # monotone in α: min over α ≥ 2
    with pytest.raises(ParameterError):
        epsilon2_from_rdp_curve([1.5], [0.1])
    g = RDP(orders=(2.0, 3.0), epsilons=(0.5, 0.8))
    assert epsilon2_from_guarantee(g) == 0.5
    assert epsilon2_from_guarantee(PureDP(epsilon=1.0)) == pytest.approx(epsilon2_from_pure_dp(1.0))
    with pytest.raises(ParameterError, match="implies no MSE lower bound"):
        epsilon2_from_guarantee(ApproxDP(epsilon=1.0, delta=1e-5))
    assert epsilon2_from_guarantee(ApproxDP(epsilon=1.0, delta=0.0)) == pytest.approx(epsilon2_from_pure_dp(1.0))


def test_gaussian_fil_closed_forms(rng):
    J = rng.normal(size=(4, 3))
    sigma = 0.7
    I = gaussian_fisher_information(J, sigma)
    assert np.allclose(I, J.T @ J / sigma**2)
    assert fil_from_jacobian(J, sigma, "trace") == pytest.approx(np.trace(I) / 3)
    assert fil_from_jacobian(J, sigma, "spectral") == pytest.approx(np.linalg.eigvalsh(I).max())
    # Tr(I⁻¹)/d ≥ d/Tr(I) ≥ 1/‖I‖₂ (unbiased CRB, trace and spectral summaries)
    crb = cramer_rao_mse_bound(I)
    assert crb == pytest.approx(np.trace(np.linalg.inv(I)) / 3)
    assert crb >= fil_mse_bound(fil_from_jacobian(J, sigma, "trace")) >= fil_mse_bound(fil_from_jacobian(J, sigma, "spectral"))
    # batched
    Jb = np.stack([J, 2 * J])
    assert np.allclose(fil_from_jacobian(Jb, sigma), [fil_from_jacobian(J, sigma), 4 * fil_from_jacobian(J, sigma)])
    with pytest.raises(ParameterError):
        fil_from_jacobian(J, 0.0)


def test_biased_cramer_rao():
    I = np.diag([4.0, 1.0])
    # shrinkage attack μ(z) = 0.5 z, bias b = −0.5 z
    z = np.array([1.0, 2.0])
    b = cramer_rao_mse_bound(I, jacobian_mu=0.5 * np.eye(2), bias=-0.5 * z)
    assert b == pytest.approx((0.25 * (1 / 4 + 1) + 0.25 * 5) / 2)
    # no information about coordinate 2 → unbiased bound infinite; an attack ignoring it has finite bound
    I0 = np.diag([4.0, 0.0])
    assert cramer_rao_mse_bound(I0) == math.inf
    assert cramer_rao_mse_bound(I0, jacobian_mu=np.diag([1.0, 0.0])) == pytest.approx(0.25 / 2)


def test_gaussian_mechanism_tight_for_identity():
    # h = z + N(0, σ²): RDP ε₂ = M²/σ² on Z = [0, M]; the bound → σ²/4 as M → 0, FIL bound = σ² exactly
    sigma, M = 2.0, 1e-3
    e2 = epsilon2_gaussian(sigma, M)
    assert rdp_mse_lower_bound(e2, M) == pytest.approx(sigma**2 / 4, rel=1e-3)
    assert fil_mse_bound(fil_from_jacobian(np.eye(5), sigma)) == pytest.approx(sigma**2)
