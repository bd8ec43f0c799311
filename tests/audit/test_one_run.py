"""The one-run ε lower bound (Steinke, Nasr & Jagielski 2023, Theorem 3.1) and its f-DP refinement
(Mahloujifar, Melis & Chaudhuri 2024) on SIMULATED canary scores with a known privacy level.

Validity: over repeated simulated runs of a mechanism with known ε (randomized response, exactly
ε-DP per canary) or known μ (Gaussian scores, exactly μ-GDP per canary), the bound exceeds the truth
in at most a fraction β of the runs (each test allows a binomial slack stated next to it, at
significance about 1e-3). Non-triviality: true ε = 2 with m = 10,000 canaries gives a bound >= 1.
Simulations draw from fixed-seed numpy generators (test data, not releases).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from textdp.audit import one_run as O
from textdp.errors import ParameterError


def _rr_run(m: int, eps: float, g: np.random.Generator):
    """Randomized response per canary (exactly ε-DP in each coin): the score is the coin reported
    truthfully with probability e^ε/(1+e^ε), plus a tiny tie-breaking jitter (public randomness)."""
    coins = g.random(m) < 0.5
    keep = g.random(m) < 1.0 / (1.0 + math.exp(-eps))
    return np.where(keep, coins, ~coins).astype(float) + 1e-3 * g.random(m), coins


def _gauss_run(m: int, mu: float, g: np.random.Generator):
    """Gaussian scores N(μ·1{in}, 1): each coin's effect is exactly μ-GDP (Dong, Roth & Su 2022)."""
    coins = g.random(m) < 0.5
    return g.standard_normal(m) + mu * coins, coins


def _max_exceed(runs: int, beta: float) -> int:
    """Largest count of exceedances over ``runs`` runs that a valid bound (rate <= beta) reaches with
    probability >= 0.999: the 0.999 quantile of Binomial(runs, beta)."""
    return int(binom.ppf(0.999, runs, beta))


# -------------------------------------------------------------------------- formulas, exactly
def test_ceiling_is_ln_q_over_one_minus_q():
    for m, beta in [(1000, 0.05), (10_000, 0.05), (50, 0.01)]:
        q = beta ** (1 / m)
        assert O.ceiling(m, beta) == pytest.approx(math.log(q / (1 - q)), rel=1e-12)
    assert O.ceiling(1000, 0.05) == pytest.approx(5.81, abs=0.01)  # the "about 5.8"
    # every guess right is the most any run can show, and it reaches the ceiling
    assert O.epsilon_lower_bound(1000, 1000, 1000, 0.05) <= O.ceiling(1000, 0.05)
    assert O.epsilon_lower_bound(1000, 1000, 1000, 0.05) >= O.ceiling(1000, 0.05) - 1e-3


def test_p_value_without_delta_is_the_binomial_tail():
    for r, v, eps in [(100, 80, 1.0), (1000, 620, 0.5), (37, 37, 3.0), (10, 0, 2.0)]:
        q = math.exp(eps) / (1 + math.exp(eps))
        assert O.p_value(5000, r, v, eps) == pytest.approx(min(1.0, binom.sf(v - 1, r, q)), rel=1e-9, abs=1e-300)


def test_p_value_delta_term_matches_theorem_by_brute_force():
    # P[B >= v] + 2 m δ max_{i=1..m} P[v - i <= B < v] / i, B ~ Bin(r, e^ε/(1+e^ε)), the max over ALL i
    m, r, v, eps, delta = 300, 120, 90, 0.8, 1e-4
    q = math.exp(eps) / (1 + math.exp(eps))
    alpha = max((binom.cdf(v - 1, r, q) - binom.cdf(v - i - 1, r, q)) / i for i in range(1, m + 1))
    want = binom.sf(v - 1, r, q) + 2 * m * delta * alpha
    assert O.p_value(m, r, v, eps, delta) == pytest.approx(want, rel=1e-9)


def test_bound_is_where_the_p_value_crosses_beta():
    m, r, v, beta, delta = 2000, 400, 330, 0.05, 1e-5
    e = O.epsilon_lower_bound(m, r, v, beta, delta)
    assert e > 0
    assert O.p_value(m, r, v, e, delta) <= beta < O.p_value(m, r, v, e + 2e-4, delta)
    for x in np.linspace(0, e, 30):  # every smaller ε is refuted too
        assert O.p_value(m, r, v, x, delta) <= beta
    assert O.epsilon_lower_bound(m, r, r // 2, beta) == 0.0  # chance-level guessing refutes nothing


def test_guesses_top_and_bottom_with_index_ties():
    s = np.array([0.5, 3.0, -1.0, 3.0, 0.0, -1.0])
    t = O.guesses(s, 2, 1)
    assert t.tolist() == [0, 1, -1, 1, 0, 0]  # the two 3.0s IN; of the two -1.0s the lower index OUT
    assert O.guesses(s, 0, 0).tolist() == [0] * 6
    assert O.guesses(s, 3, 3).tolist() == [1, 1, -1, 1, -1, -1]


def test_guess_grid_is_fixed_and_symmetric():
    g = O.guess_grid(1000)
    assert g == [(3, 2), (5, 5), (10, 10), (25, 25), (50, 50), (100, 100), (250, 250), (500, 500)]
    assert O.guess_grid(3) == [(1, 1), (2, 1)]


def test_one_run_audit_counts_and_union_bound():
    g = np.random.default_rng(3)
    s, c = _rr_run(1000, 1.5, g)
    a = O.one_run_audit(s, c, beta=0.05, fdp=False)
    assert len(a.rows) == 8 and all(r.beta_each == pytest.approx(0.05 / 8) for r in a.rows)
    for row in a.rows:  # counts are what the guesses give
        t = O.guesses(s, row.k_plus, row.k_minus)
        assert row.correct == int(np.sum(t == np.where(c, 1, -1)))
        assert row.epsilon_lower == O.epsilon_lower_bound(1000, row.guesses, row.correct, 0.05 / 8)
    assert a.epsilon_lower == max(r.epsilon_lower for r in a.rows) == a.best.epsilon_lower
    assert a.epsilon_lower <= a.attainable <= a.ceiling
    one = O.one_run_audit(s, c, beta=0.05, guess_counts=[(500, 500)], fdp=False)
    assert one.rows[0].beta_each == 0.05 and "one pre-declared" in one.selection
    assert one.included == int(c.sum()) and one.canaries == 1000


# ----------------------------------------------------------------------------- validity
RUNS = 200


def test_valid_on_randomized_response_over_repeated_runs():
    """ε = 1, m = 1,000, one pre-declared guess count (the sharpest case: no union-bound slack) and the
    default grid; both the theorem's bound and the f-DP (ε, δ=0) refinement."""
    beta, eps, g = 0.05, 1.0, np.random.default_rng(20231)
    ex_one = ex_fdp = ex_grid = naive = 0
    for _ in range(RUNS):
        s, c = _rr_run(1000, eps, g)
        a = O.one_run_audit(s, c, beta=beta, guess_counts=[(500, 500)], fdp=True)
        ex_one += a.epsilon_lower > eps
        ex_fdp += a.fdp_epsilon_lower > eps
        v = a.rows[0].correct
        naive += math.log(v / (1000 - v)) > eps  # the plug-in estimate: no confidence at all
        ex_grid += O.one_run_audit(s, c, beta=beta, fdp=False).epsilon_lower > eps
    limit = _max_exceed(RUNS, beta)  # 21 of 200 (measured: 6, 4 and 5 with this seed)
    assert ex_one <= limit and ex_fdp <= limit and ex_grid <= limit, (ex_one, ex_fdp, ex_grid, limit)
    assert naive > 2 * limit  # control: a bound without the binomial tail fails this test (about half the runs)


def test_valid_on_gaussian_scores_with_delta_over_repeated_runs():
    """Gaussian scores are μ-GDP, hence (ε(μ, δ), δ)-DP: the theorem with its δ term, the f-DP (ε, δ)
    curve and the Gaussian curve (μ) must all stay below the truth. β = 0.3 makes the check sharp
    enough that an invalid bound is caught, with the slack stated by _max_exceed."""
    beta, delta, g = 0.3, 1e-5, np.random.default_rng(4242)
    for mu, m, k in [(1.0, 2000, 100), (0.5, 4000, 400)]:
        eps_true = O.gdp_epsilon(mu, delta)
        ex = np.zeros(3, dtype=int)
        for _ in range(RUNS // 2):
            s, c = _gauss_run(m, mu, g)
            a = O.one_run_audit(s, c, beta=beta, delta=delta, guess_counts=[(k // 2, k // 2)], fdp=True)
            ex += [a.epsilon_lower > eps_true, a.fdp_epsilon_lower > eps_true, a.gdp_mu_lower > mu]
        assert np.all(ex <= _max_exceed(RUNS // 2, beta)), (mu, ex.tolist())


def test_non_trivial_true_epsilon_2_with_10000_canaries():
    g = np.random.default_rng(7)
    for _ in range(3):
        s, c = _rr_run(10_000, 2.0, g)
        a = O.one_run_audit(s, c, beta=0.05, fdp=True)  # default grid, union bound over 8 guess counts
        assert 1.0 <= a.epsilon_lower <= 2.0, a.epsilon_lower
        assert 1.0 <= a.fdp_epsilon_lower <= 2.0, a.fdp_epsilon_lower
        assert a.epsilon_lower < a.ceiling == pytest.approx(8.113, abs=1e-3)


def test_fdp_refutation_is_monotone_in_the_claim():
    inv = O._approx_dp_inverse
    m, k, c = 1000, 200, 170
    flags = [O.fdp_refutes(m, k, c, 0.05, inv(e, 0.0)) for e in np.linspace(0, 4, 41)]
    assert flags[0] and not flags[-1]
    assert flags == sorted(flags, reverse=True)  # refuted below a threshold, not above
    assert not O.fdp_refutes(m, k, 0, 0.05, inv(0.0, 0.0))  # no correct guess refutes nothing


def test_gdp_epsilon_solves_the_gaussian_delta_equation():
    from statistics import NormalDist

    N = NormalDist()
    for mu, delta in [(0.5, 1e-5), (1.0, 1e-5), (2.0, 1e-3)]:
        e = O.gdp_epsilon(mu, delta)
        d = N.cdf(-e / mu + mu / 2) - math.exp(e) * N.cdf(-e / mu - mu / 2)
        assert d == pytest.approx(delta, rel=1e-6)
    assert O.gdp_epsilon(0.0, 1e-5) == 0.0 and O.gdp_epsilon(1.0, 0.0) == math.inf


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("call,needle", [
    (lambda: O.ceiling(1000, 1.5), "beta must be in (0, 1)"),
    (lambda: O.p_value(10, 11, 3, 1.0), "0 <= correct <= guesses <= canaries"),
    (lambda: O.p_value(10, 5, 3, 1.0, delta=-1e-5), "delta must be in [0, 1)"),
    (lambda: O.epsilon_lower_bound(10, 5, 6), "0 <= correct <= guesses <= canaries"),
    (lambda: O.guesses([1.0, 2.0], 2, 1), "k+ + k- <= 2 canaries"),
    (lambda: O.guesses([1.0, float("nan")], 1, 0), "must be finite"),
    (lambda: O.one_run_audit([1.0, 2.0, 3.0], [True, False], fdp=False), "one entry per canary"),
    (lambda: O.one_run_audit([1.0, 2.0], [2, 0], fdp=False), "included must be booleans"),
    (lambda: O.one_run_audit([1.0], [True], fdp=False), "at least 2 canaries"),
    (lambda: O.one_run_audit([1.0, 2.0], [True, False], guess_counts=[], fdp=False), "at least one (k+, k-)"),
    (lambda: O.fdp_epsilon_lower_bound(10, 4, 2, curve="laplace"), "curve must be"),
])
def test_bad_input_is_one_parameter_error_line(call, needle):
    with pytest.raises(ParameterError) as e:
        call()
    assert needle in str(e.value) and "\n" not in str(e.value)
