"""Exact RDP curves of named mechanisms (textdp.bounds.curves) and card conversion (issue 12, item 7)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from textdp.bounds import (
    discrete_laplace_rdp,
    epsilon2_from_approx_dp,
    epsilon2_from_guarantee,
    epsilon2_from_pure_dp,
    gaussian_rdp,
    laplace_rdp,
    mechanism_curve,
    mechanism_from_card,
    randomized_response_rdp,
    rdp_mse_lower_bound,
)
from textdp.errors import ParameterError


# ----------------------------------------------------------------------------- randomized response


def _renyi(P, Q, alpha):
    P, Q = np.asarray(P, float), np.asarray(Q, float)
    return math.log(np.sum(P**alpha * Q ** (1 - alpha))) / (alpha - 1)


@pytest.mark.parametrize("k,eps", [(2, 1.0), (3, 0.5), (4, 2.0), (10, 3.0)])
def test_rr_matches_hand_computed_renyi_divergence(k, eps):
    # output laws of k-RR for inputs 0 and 1, written out row by row
    den = math.exp(eps) + k - 1
    P = [math.exp(eps) / den] + [1 / den] * (k - 1)
    Q = [1 / den, math.exp(eps) / den] + [1 / den] * (k - 2)
    for alpha in (1.5, 2.0, 3.0, 8.0):
        assert randomized_response_rdp(alpha, eps, k) == pytest.approx(_renyi(P, Q, alpha), rel=1e-12)
    # every pair of inputs is alike; m changed reports add
    assert randomized_response_rdp(2.0, eps, k, reports=3) == pytest.approx(3 * _renyi(P, Q, 2.0), rel=1e-12)


def test_rr_small_case_by_hand():
    # k = 3, ε = ln 2: P = (1/2, 1/4, 1/4), Q = (1/4, 1/2, 1/4); Σ P²/Q = 1 + 1/8 + 1/4 = 11/8
    assert randomized_response_rdp(2.0, math.log(2), 3) == pytest.approx(math.log(11 / 8), rel=1e-12)


def test_rr_equals_dp_accounting_and_binary_is_the_pure_dp_worst_case():
    from dp_accounting import NeighboringRelation, RandomizedResponseDpEvent
    from dp_accounting.rdp import RdpAccountant

    for k, eps in ((2, 0.7), (5, 2.5), (50, 4.0)):
        acc = RdpAccountant([2.0, 4.0], NeighboringRelation.REPLACE_ONE)
        acc.compose(RandomizedResponseDpEvent(k / (math.exp(eps) + k - 1), k))
        assert randomized_response_rdp(2.0, eps, k) == pytest.approx(acc._rdp[0], rel=1e-9)
        assert randomized_response_rdp(4.0, eps, k) == pytest.approx(acc._rdp[1], rel=1e-9)
    assert randomized_response_rdp(2.0, 1.3, 2) == pytest.approx(epsilon2_from_pure_dp(1.3), rel=1e-12)
    assert randomized_response_rdp(2.0, 1.3, 7) < epsilon2_from_pure_dp(1.3)
    assert math.isfinite(randomized_response_rdp(2.0, 800.0, 2))  # log space: no overflow


# ----------------------------------------------------------------------------- discrete Laplace


def _dlap_direct(alpha, b, t):
    """D_α(DLap(0, b) ‖ DLap(t, b)) by summing the two pmfs term by term over a window of ℤ wide
    enough that the tails beyond it are below 1e-30 (log domain, no underflow)."""
    zmax = int(80 * b) + t + 10
    z = np.arange(-zmax, zmax + 1)
    l0 = -np.abs(z) / b
    l1 = -np.abs(z - t) / b
    l0 -= np.logaddexp.reduce(l0)
    l1 -= np.logaddexp.reduce(l1)
    return float(np.logaddexp.reduce(alpha * l0 + (1 - alpha) * l1)) / (alpha - 1)


@pytest.mark.parametrize("b,t", [(0.5, 1), (1.0, 1), (1.0, 3), (2.5, 4), (7.0, 10), (20.0, 5)])
def test_discrete_laplace_curve_vs_numeric_summation(b, t):
    for alpha in (1.5, 2.0, 3.0, 6.0):
        assert discrete_laplace_rdp(alpha, b, sensitivity=t) == pytest.approx(_dlap_direct(alpha, b, t), rel=1e-9)


def test_discrete_laplace_worst_split_is_one_coordinate_and_releases_add():
    from textdp.bounds.curves import _dlap_divergence

    b, D = 1.7, 6
    f = [_dlap_divergence(2.0, b, t) for t in range(D + 1)]
    # exhaustive search over integer splits of the L1 change (product law: divergences add)
    best = [0.0] * (D + 1)
    for n in range(1, D + 1):
        best[n] = max(f[m] + best[n - m] for m in range(1, n + 1))
    assert best[D] == pytest.approx(f[D], rel=1e-12)
    assert discrete_laplace_rdp(2.0, b, D, releases=5) == pytest.approx(5 * f[D], rel=1e-12)
    # the divergence never exceeds the pure-DP value Δ/b and tends to it for a large shift
    assert discrete_laplace_rdp(2.0, 1.0, 50) < 50 and discrete_laplace_rdp(2.0, 1.0, 50) > 49
    # large scale: tiny divergence, still accurate (α t²/(2b²) to first order)
    assert discrete_laplace_rdp(2.0, 1e6, 1) == pytest.approx(1e-12, rel=1e-3)


def test_laplace_and_gaussian_curves():
    a = 2.0
    eps = 1.0
    mironov = math.log(a / (2 * a - 1) * math.exp((a - 1) * eps) + (a - 1) / (2 * a - 1) * math.exp(-a * eps)) / (a - 1)
    assert laplace_rdp(a, eps) == pytest.approx(mironov, rel=1e-9)
    assert laplace_rdp(a, eps, releases=4) == pytest.approx(4 * mironov, rel=1e-9)
    assert gaussian_rdp(2.0, 2.0) == pytest.approx(2 / (2 * 4), rel=1e-12)
    assert gaussian_rdp(3.0, 1.0, releases=2) == pytest.approx(3.0, rel=1e-12)


# ----------------------------------------------------------------------------- named mechanisms, cards


def test_mechanism_curve_parameters():
    c = mechanism_curve("randomized-response", epsilon=2.0, categories=10)
    assert c.epsilon2 == pytest.approx(randomized_response_rdp(2.0, 2.0, 10))
    c = mechanism_curve("discrete-laplace", epsilon=1.0, sensitivity=4, releases=10)  # b = 4·10/1
    assert c.params["scale"] == 40.0
    c = mechanism_curve("gaussian", epsilon=1.0, delta=1e-5)
    assert c.epsilon2 == pytest.approx(epsilon2_from_approx_dp(1.0, 1e-5, assume="gaussian"), rel=1e-9)
    with pytest.raises(ParameterError, match="takes no categories"):
        mechanism_curve("laplace", epsilon=1.0, categories=3)
    with pytest.raises(ParameterError, match="unknown mechanism"):
        mechanism_curve("staircase", epsilon=1.0)
    with pytest.raises(ParameterError, match="exactly one of scale"):
        mechanism_curve("discrete-laplace", epsilon=1.0, scale=2.0)


def test_bare_approx_dp_is_refused_in_the_api():
    from textdp.accounting.guarantees import ApproxDP, LocalDP

    with pytest.raises(ParameterError, match="implies no MSE lower bound"):
        epsilon2_from_approx_dp(1.0, 1e-5)
    with pytest.raises(ParameterError, match="implies no MSE lower bound"):
        epsilon2_from_guarantee(ApproxDP(epsilon=1.0, delta=1e-5))
    c = mechanism_curve("gaussian", sigma=2.0)
    assert epsilon2_from_guarantee(ApproxDP(epsilon=1.0, delta=1e-5), mechanism=c) == pytest.approx(0.25)
    assert epsilon2_from_guarantee(LocalDP(epsilon=1.0)) == pytest.approx(epsilon2_from_pure_dp(1.0))


def _hdp_card(scale=2058.6, releases=100, sens=400, eps=10.0, delta=1e-6):
    return {"format": "textdp-card/1", "mechanism": "topics.hdp-lda",
            "parameters": {"epsilon": eps, "delta": delta, "iterations": releases, "max_doc_length": sens // 2},
            "guarantee": {"kind": "approx-dp", "epsilon": eps, "delta": delta, "unit": "document",
                          "neighbours": "replace-one"},
            "statistics": {"scale": scale, "releases": releases, "sensitivity_l1": sens}}


def test_cards_of_textdp_mechanisms_convert_exactly():
    c = mechanism_from_card(_hdp_card())
    assert c.name == "discrete-laplace" and c.unit == "document"
    assert c.epsilon2 == pytest.approx(discrete_laplace_rdp(2.0, 2058.6, 400, 100))
    lp = {"mechanism": "topics.lp-lda", "parameters": {"flip": 0.2, "epsilon": 2 * math.log(9)},
          "guarantee": {"kind": "local-dp", "epsilon": 2 * math.log(9), "unit": "token"}}
    c = mechanism_from_card(lp)
    assert c.epsilon2 == pytest.approx(2 * randomized_response_rdp(2.0, math.log(9), 2))
    # an unknown mechanism's (ε, δ) is refused, its pure ε through the worst ε-DP mechanism
    other = {"mechanism": "mine", "guarantee": {"kind": "approx-dp", "epsilon": 1.0, "delta": 1e-5}}
    with pytest.raises(ParameterError, match="implies no MSE lower bound"):
        mechanism_from_card(other)
    e2, how = mechanism_from_card({"mechanism": "mine", "guarantee": {"kind": "pure-dp", "epsilon": 1.0}})
    assert e2 == pytest.approx(epsilon2_from_pure_dp(1.0)) and "worst ε-DP mechanism" in how
    with pytest.raises(ParameterError, match="worst_case_epsilon"):
        mechanism_from_card({"mechanism": "santext", "guarantee": {"kind": "metric-dp", "epsilon": 3.0}})


def test_real_hdp_lda_card_and_the_gaussian_assumption_it_replaces():
    pytest.importorskip("dp_accounting")
    from textdp.topics import HDPLDA

    h = HDPLDA(n_topics=5, epsilon=10.0, delta=1e-6, iterations=20, max_doc_length=50)
    acc = h.accounting()
    card = {"mechanism": "topics.hdp-lda", "parameters": h.params(), "guarantee": h.guarantee.to_dict(),
            "statistics": acc}
    exact = mechanism_from_card(card).epsilon2
    gauss = epsilon2_from_approx_dp(10.0, 1e-6, assume="gaussian")
    # the Gaussian reading understates ε₂ here, so it overstates the protection
    assert exact > gauss
    assert rdp_mse_lower_bound(gauss) / rdp_mse_lower_bound(exact) > 2
