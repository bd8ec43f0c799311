"""Behaviour of the auditor: agreement with the oracle, verdicts, reproducibility.

Verdicts are at α = 0.05 per cell with fixed seeds. Monte-Carlo vs oracle: the exact oracle
must lie in the simultaneous 95% interval [ε_lo, ε_hi].
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from textdp.audit import audit_dims, audit_mechanism, run_grid, zoo_oracle
from textdp.mechanisms.zoo import make_zoo_mechanism

EPS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
DIMS = (1, 2, 8, 32, 64, 128)

# Registry names audited in this module (see tests/test_registry_coverage.py).
AUDIT_TESTED = ("audit.copy", "audit.random", "audit.laplace", "audit.adept", "audit.dptext",
                "audit.wrong-sensitivity", "audit.laplace-secure")


@pytest.mark.parametrize("name,eps,n", [("laplace", 1.0, 1), ("laplace", 0.5, 8), ("adept", 1.0, 8),
                                        ("adept", 0.2, 2), ("wrong-sensitivity", 2.0, 1)])
def test_monte_carlo_full_noise_agrees_with_oracle(name, eps, n):
    r = audit_mechanism(name, eps, n, 100_000, seed=5)
    assert r.sampler == "full"
    assert r.oracle == pytest.approx(zoo_oracle(name, eps, n))
    assert r.epsilon_lower <= r.oracle <= r.epsilon_upper


def test_monte_carlo_fast_path_agrees_with_oracle_on_all_laplace_and_adept_cells():
    g = run_grid(mechanisms=("laplace", "adept"), samples=10**6, seed=3, sampler="sufficient-statistic",
                 compare_published=False)
    inside = [c.epsilon_lower <= c.oracle <= c.epsilon_upper for c in g.cells]
    # 84 cells at 95% each: allow the few misses chance gives (P(more than 10 misses) < 1e-4)
    assert sum(not x for x in inside) <= 10


def test_verdicts_over_the_published_grid_fast_path():
    g = run_grid(samples=10**6, seed=4, sampler="sufficient-statistic", compare_published=False)
    for c in g.cells:
        if c.mechanism in ("laplace", "random", "wrong-sensitivity"):
            assert not c.any_violation, (c.mechanism, c.epsilon, c.n)
        elif c.mechanism in ("dptext", "copy"):
            assert c.violation and c.strong_violation, (c.mechanism, c.epsilon, c.n)
        elif c.mechanism == "adept":
            if c.n >= 8 and c.epsilon == 1.0:
                assert c.violation
            if c.n == 1:
                assert not c.violation  # n = 1: scale 1/ε is correct


def test_verdicts_full_noise_path():
    assert not audit_mechanism("laplace", 1.0, 8, 50_000, seed=1).any_violation
    assert not audit_mechanism("random", 0.1, 8, 50_000, seed=1).any_violation
    assert audit_mechanism("adept", 1.0, 8, 50_000, seed=1).violation
    assert audit_mechanism("adept", 1.0, 32, 20_000, seed=1).violation
    for eps in (0.1, 1.0):
        assert audit_mechanism("dptext", eps, 2, 20_000, seed=1).violation
        assert audit_mechanism("copy", eps, 2, 20_000, seed=1).violation
    # ε = 10 needs N with ln N well above 10: the lower bound's ceiling
    r = audit_mechanism("dptext", 10.0, 1, 10**6, seed=1, strong=False)
    assert r.violation and math.isinf(r.epsilon_hat) and r.epsilon_lower < r.majority.lower_ceiling + 1e-9
    assert audit_mechanism("copy", 10.0, 1, 10**6, seed=1, strong=False).violation


def test_secure_laplace_release_primitive_passes():
    r = audit_mechanism("laplace-secure", 1.0, 2, 20_000, seed=2)
    assert r.oracle is None and r.sampler == "full"
    assert not r.any_violation and r.epsilon_hat < 1.3


def test_stronger_attack_beats_majority_vote_where_it_can():
    # correct Laplace, n = 8: the extreme bit count reveals far more than the majority vote,
    # and still stays below ε (the mechanism is correct)
    r = audit_mechanism("laplace", 1.0, 8, 10**6, seed=9, sampler="sufficient-statistic")
    assert r.strong.epsilon_lower > r.epsilon_hat + 0.3
    assert r.strong.epsilon_lower <= 1.0
    a = audit_mechanism("adept", 0.5, 8, 10**6, seed=9, sampler="sufficient-statistic")
    assert a.strong.epsilon_lower > 2 * a.epsilon_upper


def test_clipped_mean_statistic_full_path():
    r = audit_mechanism("laplace", 1.0, 8, 50_000, seed=3, statistic="clipped-mean")
    assert r.statistic == "clipped-mean" and 0.3 < r.strong.epsilon_lower <= 1.0


def test_habernal_footnote_7_tolerance():
    # ADePT, ε = 0.1, n = 2, N = 10^7: the paper reports mean 0.195, sd 0.0008 over 100 seeds
    vals = [audit_mechanism("adept", 0.1, 2, 10**7, seed=s, sampler="sufficient-statistic", strong=False).epsilon_hat
            for s in range(30)]
    assert abs(np.mean(vals) - 0.195) < 0.001 and 0.0003 < np.std(vals) < 0.002


def test_reproducible_and_independent_of_workers():
    a = audit_mechanism("laplace", 1.0, 4, 30_000, seed=7, workers=1, chunk_elements=10_000)
    b = audit_mechanism("laplace", 1.0, 4, 30_000, seed=7, workers=2, chunk_elements=10_000)
    assert a.counts_D == b.counts_D and a.counts_D2 == b.counts_D2 and a.strong == b.strong
    c = audit_mechanism("laplace", 1.0, 4, 30_000, seed=8, workers=2, chunk_elements=10_000)
    assert c.counts_D != a.counts_D
    u = audit_mechanism("laplace", 1.0, 4, 1000)  # unseeded: secure randomness, recorded as such
    assert u.seed["seeded"] is False and a.seed["seeded"] is True


def test_user_callable_and_claimed_epsilon_from_guarantee():
    mech = make_zoo_mechanism("adept", 1.0, 8)
    r = audit_mechanism(mech, None, 8, 20_000, seed=1)  # ε from mech.guarantee
    assert r.epsilon == 1.0 and r.violation and r.broken is True

    def my_rr(x, rng):  # randomized response on each coordinate: flips w.p. 1/(1+e)
        flip = rng.random(x.shape) < 1 / (1 + math.e)
        return np.where(flip, 1 - x, x)

    # per coordinate ε = 1, so the record is 8-DP: no violation of 8, a violation of 0.5
    rs = audit_dims(my_rr, 8.0, [1, 8], 50_000, seed=2)
    assert [x.n for x in rs] == [1, 8] and not any(x.any_violation for x in rs)
    assert audit_mechanism(my_rr, 0.5, 8, 50_000, seed=2).any_violation


def test_result_to_dict_is_json_ready():
    import json

    r = audit_mechanism("copy", 1.0, 2, 1000, seed=1)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["violation"] is True and d["epsilon_hat"] == math.inf and d["guarantee"]["kind"] == "none"


def test_memory_is_bounded_by_the_chunk_not_by_n_times_N():
    import tracemalloc

    n, N = 64, 100_000  # one dataset as a single array would be 51 MB (x) + 51 MB (y)
    tracemalloc.start()
    try:
        audit_mechanism("laplace", 1.0, n, N, seed=1, strong=False, workers=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


@pytest.mark.slow
def test_full_grid_at_ten_million_reproduces_the_published_table():
    g = run_grid(samples=10**7, seed=2022, sampler="sufficient-statistic")
    rows = g.rows()
    assert len(rows) == 252
    assert all(r["published_consistent"] for r in rows)
    assert sum(r["epsilon_lower"] <= r["oracle"] <= r["epsilon_upper"] for r in rows) >= 245
    flagged = g.flagged()
    assert flagged["dptext"] == flagged["copy"] == (42, 42) and flagged["adept"] == (35, 42)
    assert flagged["laplace"][0] == flagged["random"][0] == flagged["wrong-sensitivity"][0] == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["laplace", "adept", "wrong-sensitivity", "random"])
def test_full_noise_path_agrees_with_oracle_at_one_million(name):
    for eps, n in [(0.5, 2), (2.0, 8), (1.0, 32)]:
        r = audit_mechanism(name, eps, n, 10**6, seed=11, strong=False)
        assert r.epsilon_lower <= r.oracle <= r.epsilon_upper
