"""Exact bounds: Clopper–Pearson values, the two-count estimator, and coverage.

Coverage tests use fixed seeds and 400 repetitions; the bound is valid if it lies below
the true loss in at least 1 − α of the runs (α = 0.05). We assert coverage >= 0.93
(1 − α minus two binomial standard errors, 2·0.011): a bound that is too high (e.g.
a plug-in estimate, coverage ≈ 0.5, or a bound without the multiplicity correction)
fails by a wide margin, which `test_plugin_estimate_would_fail_coverage` checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from textdp.audit import (
    audit_mechanism,
    clopper_pearson_lower,
    clopper_pearson_upper,
    empirical_epsilon_lower_bound,
    selected_event_bound,
    zoo_oracle,
)
from textdp.audit.oracle import majority_vote_probabilities
from textdp.errors import ParameterError
from textdp.mechanisms.zoo import make_zoo_mechanism
from textdp.noise import make_rng

ALPHA = 0.05
REPS = 400


def test_clopper_pearson_known_values():
    # k = 0: upper = 1 − α^(1/n); k = n: lower = α^(1/n)
    assert math.isclose(float(clopper_pearson_upper(0, 100, 0.05)), 1 - 0.05 ** (1 / 100), rel_tol=1e-9)
    assert math.isclose(float(clopper_pearson_lower(100, 100, 0.05)), 0.05 ** (1 / 100), rel_tol=1e-9)
    assert float(clopper_pearson_lower(0, 10, 0.05)) == 0.0 and float(clopper_pearson_upper(10, 10, 0.05)) == 1.0
    # agrees with scipy's exact binomial test interval (two-sided at 2α = one-sided at α)
    ci = stats.binomtest(37, 120).proportion_ci(0.90, method="exact")
    assert math.isclose(float(clopper_pearson_lower(37, 120, 0.05)), ci.low, rel_tol=1e-9)
    assert math.isclose(float(clopper_pearson_upper(37, 120, 0.05)), ci.high, rel_tol=1e-9)


def test_estimator_values_and_infinite_case():
    b = empirical_epsilon_lower_bound([700, 300], [500, 500], 0.05)
    assert math.isclose(b.epsilon_hat, abs(math.log(0.3 / 0.5)), rel_tol=1e-12)
    assert 0 < b.epsilon_lower < b.epsilon_hat < b.epsilon_upper
    assert b.output == 1 and b.direction == "D'>D"
    z = empirical_epsilon_lower_bound([1000, 0], [0, 1000], 0.05)
    assert math.isinf(z.epsilon_hat) and math.isinf(z.epsilon_upper)
    assert math.isclose(z.epsilon_lower, z.lower_ceiling) and z.epsilon_lower < z.ceiling == math.log(1000)
    same = empirical_epsilon_lower_bound([500, 500], [500, 500], 0.05)
    assert same.epsilon_hat == 0 and same.epsilon_lower == 0


def test_estimator_multi_output_and_unequal_totals():
    b = empirical_epsilon_lower_bound([10, 20, 70, 0], [40, 40, 20, 0], 0.05)
    assert math.isclose(b.epsilon_hat, math.log(0.4 / 0.1), rel_tol=1e-12)  # output 0
    assert b.method.startswith("Clopper-Pearson") and "16" in b.method
    u = empirical_epsilon_lower_bound([50, 50], [100, 300], 0.05)
    assert math.isclose(u.epsilon_hat, math.log(0.5 / 0.25), rel_tol=1e-12)


@pytest.mark.parametrize("bad", [([1, 2], [1, 2, 3]), ([-1, 2], [1, 2]), ([0, 0], [1, 1]), ([1.5, 2], [1, 2]), ([3], [3])])
def test_estimator_bad_counts(bad):
    with pytest.raises(ParameterError):
        empirical_epsilon_lower_bound(*bad)


@pytest.mark.parametrize("alpha", [0, 1, -0.1, float("nan"), "x"])
def test_bad_alpha(alpha):
    with pytest.raises(ParameterError):
        empirical_epsilon_lower_bound([1, 2], [2, 1], alpha)


def _two_output_runs(p1, p2, n, rng):
    k1 = rng.binomial(n, p1, REPS)
    k2 = rng.binomial(n, p2, REPS)
    return [empirical_epsilon_lower_bound([n - a, a], [n - b, b], ALPHA) for a, b in zip(k1, k2)]


@pytest.mark.parametrize("p1,p2,n", [(0.3, 0.5, 400), (0.02, 0.2, 300), (0.5, 0.5, 200), (0.001, 0.05, 2000)])
def test_lower_bound_coverage_two_outputs(p1, p2, n):
    true = max(abs(math.log(p1 / p2)), abs(math.log((1 - p1) / (1 - p2))))
    res = _two_output_runs(p1, p2, n, make_rng(11))
    cover = np.mean([r.epsilon_lower <= true for r in res])
    cover_up = np.mean([r.epsilon_lower <= true <= r.epsilon_upper for r in res])
    assert cover >= 1 - ALPHA - 0.02
    assert cover_up >= 1 - ALPHA - 0.02


def test_plugin_estimate_would_fail_coverage():
    # test of the test: the plug-in ε̂ as a "bound" covers only about half the time
    p1, p2, n = 0.3, 0.5, 400
    true = abs(math.log(p1 / p2))
    res = _two_output_runs(p1, p2, n, make_rng(11))
    assert np.mean([r.epsilon_hat <= true for r in res]) < 0.8


def test_auditor_coverage_full_noise_path():
    """Repeated small audits of the real mechanism (ADePT, ε = 0.5, n = 2, full noise arrays):
    the majority-vote lower bound is below the exact loss at about the stated rate."""
    true = zoo_oracle("adept", 0.5, 2)
    lows = [audit_mechanism("adept", 0.5, 2, 1500, ALPHA, seed=s, strong=False, workers=1).epsilon_lower
            for s in range(200)]
    assert np.mean(np.array(lows) <= true) >= 1 - ALPHA - 0.03


def test_auditor_coverage_both_attacks_fast_path():
    """Same for both attacks on the exact sufficient-statistic path; the threshold attack's
    bound is checked against the exact loss of the event it selected."""
    eps, n = 1.0, 8
    m = make_zoo_mechanism("adept", eps, n)
    p0, p1 = m.bit_probability(0.0), m.bit_probability(1.0)
    true_mv = zoo_oracle("adept", eps, n)
    ok_mv, ok_thr = [], []
    for s in range(REPS):
        r = audit_mechanism("adept", eps, n, 3000, ALPHA, seed=s, sampler="sufficient-statistic")
        ok_mv.append(r.epsilon_lower <= true_mv)
        ev = r.strong
        ks = np.arange(n + 1)
        mask = ks <= ev.threshold if ev.event == "s <= t" else ks >= ev.threshold
        P0 = stats.binom.pmf(ks, n, p0)[mask].sum()
        P1 = stats.binom.pmf(ks, n, p1)[mask].sum()
        true_ev = math.log(P0 / P1) if ev.direction == "D>D'" else math.log(P1 / P0)
        ok_thr.append(ev.epsilon_lower <= true_ev + 1e-12)
    assert np.mean(ok_mv) >= 1 - ALPHA - 0.02
    assert np.mean(ok_thr) >= 1 - ALPHA - 0.02


def test_selected_event_bound_prefers_the_extreme_event():
    # bit counts 0..4 with a strong signal at s = 0
    sel_D, sel_D2 = [500, 300, 150, 40, 10], [5, 40, 150, 300, 505]
    ev = selected_event_bound(sel_D, sel_D2, [5000, 3000, 1500, 400, 100], [50, 400, 1500, 3000, 5050], 0.05)
    assert ev.direction in ("D>D'", "D'>D") and ev.epsilon_lower > 2.0
    assert ev.epsilon_hat >= ev.epsilon_lower
    with pytest.raises(ParameterError):
        selected_event_bound([1, 2], [1, 2], [1, 2, 3], [1, 2, 3])


def test_majority_vote_probabilities_tie_rule():
    # n = 2, p = 0.5: P(y=1) = P(S=2) = 1/4 (a 1-1 tie answers 0)
    l0, l1 = majority_vote_probabilities(0.5, 2)
    assert math.isclose(math.exp(l1), 0.25) and math.isclose(math.exp(l0), 0.75)
