"""The sufficient-statistic fast path has the same distribution as the full-noise path.

For each zoo mechanism with a closed-form bit probability, the bit-count histogram of the
full-noise path (real arrays through the real mechanism) is tested against the exact
Binomial(n, p) law the fast path samples from (chi-square goodness of fit), and the two
paths' histograms against each other (chi-square two-sample test). ALPHA = 1e-3, fixed seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from textdp.audit.core import _task_stats, resolve_mechanism
from textdp.noise import make_rng

ALPHA = 1e-3
N = 20_000


def _gof(hist, pmf):
    keep = pmf * hist.sum() >= 5
    obs = np.append(hist[keep], hist[~keep].sum())
    exp = np.append(pmf[keep], pmf[~keep].sum()) * hist.sum()
    if exp[-1] == 0:
        assert obs[-1] == 0
        obs, exp = obs[:-1], exp[:-1]
    if len(obs) < 2:
        return 1.0
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


@pytest.mark.parametrize("name", ["laplace", "adept", "dptext", "random", "wrong-sensitivity", "copy"])
@pytest.mark.parametrize("n", [1, 8, 33])
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_full_noise_bit_counts_follow_the_fast_path_law(name, n, value):
    mech = resolve_mechanism(name, 0.5, n)
    full, _ = _task_stats(mech, n, value, N, make_rng(100 + n), "bits")
    pmf = stats.binom.pmf(np.arange(n + 1), n, mech.zoo.bit_probability(value))
    assert _gof(full, pmf) > ALPHA
    fast = make_rng(200 + n).multinomial(N, pmf / pmf.sum())
    both = np.vstack([full, fast])
    both = both[:, both.sum(0) > 0]
    if both.shape[1] > 1:
        assert stats.chi2_contingency(both)[1] > ALPHA


def test_goodness_of_fit_rejects_a_wrong_law():
    # test of the test: ADePT's bit counts are not those of the correct Laplace mechanism
    n = 8
    adept = resolve_mechanism("adept", 0.5, n)
    lap = resolve_mechanism("laplace", 0.5, n)
    full, _ = _task_stats(adept, n, 0.0, N, make_rng(1), "bits")
    pmf = stats.binom.pmf(np.arange(n + 1), n, lap.zoo.bit_probability(0.0))
    assert _gof(full, pmf) < ALPHA
