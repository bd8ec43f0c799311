"""CI audits of every registered mechanism with textdp's own auditor.

Each audit runs the mechanism on a neighbouring pair, counts its (discretised)
outputs and asks :func:`textdp.audit.empirical_epsilon_lower_bound` for an
``1 - alpha`` lower confidence bound on epsilon (alpha = 0.05, fixed seeds).
A correct mechanism must not be refuted at its claimed epsilon; a deliberately
broken one (``broken=True``) or one without privacy must be. Tests of the tests
break a mechanism on purpose and show the audit fails it.

Sizes keep this module at a few seconds; a fuller run is the slow-marked test
at the end (more samples, more pairs).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from textdp.audit import audit_mechanism, empirical_epsilon_lower_bound
from textdp.mechanisms import registry
from textdp.noise import make_rng
from textdp.noise.mechanisms import ExponentialRelease, GaussianRelease, LaplaceRelease, RandomizedResponseRelease

ALPHA = 0.05
ZOO_NAMES = tuple(sorted(k for k, v in registry().items() if v.capability == "audit"))

# Registry names audited in this module (see tests/test_registry_coverage.py).
AUDITED = ("noise.laplace", "noise.gaussian", "noise.randomized_response", "noise.exponential",
           "santext", "santext+", "fbdd") + ZOO_NAMES


def _bound(out_d, out_d2, edges=None):
    """Lower bound from two output samples (integer outputs, or binned by ``edges``)."""
    if edges is not None:
        out_d, out_d2 = np.digitize(out_d, edges), np.digitize(out_d2, edges)
        k = len(edges) + 1
    else:
        k = int(max(out_d.max(), out_d2.max())) + 1
    c1 = np.bincount(np.asarray(out_d, dtype=np.int64), minlength=k)
    c2 = np.bincount(np.asarray(out_d2, dtype=np.int64), minlength=k)
    return empirical_epsilon_lower_bound(c1, c2, ALPHA)


# ------------------------------------------------------------------ noise.* mechanisms

_EDGES = np.arange(-2.0, 3.01, 0.5)


def test_audit_noise_laplace():
    m = LaplaceRelease(epsilon=1.0)
    rng = make_rng(1)
    b = _bound(m(np.zeros(100_000), rng), m(np.ones(100_000), rng), _EDGES)
    assert b.epsilon_lower <= m.guarantee.epsilon
    assert b.epsilon_hat > 0.3  # the audit sees real privacy loss (it is not vacuous)


def test_audit_catches_a_laplace_with_half_the_noise():
    m = LaplaceRelease(epsilon=3.0)  # noise of eps = 3 ...
    rng = make_rng(1)
    b = _bound(m(np.zeros(100_000), rng), m(np.ones(100_000), rng), _EDGES)
    assert b.epsilon_lower > 1.0  # ... refutes a claim of eps = 1


def _gaussian_bin_loss(sigma, edges):
    from scipy import stats

    cuts = np.concatenate([[-np.inf], edges, [np.inf]])
    p0 = np.diff(stats.norm.cdf(cuts, 0, sigma))
    p1 = np.diff(stats.norm.cdf(cuts, 1, sigma))
    return float(np.max(np.abs(np.log(p0 / p1))))


def test_audit_noise_gaussian_against_its_exact_binned_loss():
    m = GaussianRelease(sigma=1.0)
    rng = make_rng(2)
    b = _bound(m(np.zeros(100_000), rng), m(np.ones(100_000), rng), _EDGES)
    assert b.epsilon_lower <= _gaussian_bin_loss(1.0, _EDGES)
    bad = GaussianRelease(sigma=0.5)  # test of the test: half the noise
    b2 = _bound(bad(np.zeros(100_000), rng), bad(np.ones(100_000), rng), _EDGES)
    assert b2.epsilon_lower > _gaussian_bin_loss(1.0, _EDGES)


def test_audit_noise_randomized_response():
    m = RandomizedResponseRelease(f=0.4)
    rng = make_rng(3)
    b = _bound(m(np.zeros(50_000), rng).astype(int), m(np.ones(50_000), rng).astype(int))
    assert b.epsilon_lower <= m.guarantee.epsilon
    bad = RandomizedResponseRelease(f=0.1)  # flips less than claimed
    b2 = _bound(bad(np.zeros(50_000), rng).astype(int), bad(np.ones(50_000), rng).astype(int))
    assert b2.epsilon_lower > m.guarantee.epsilon


def test_audit_noise_exponential():
    m = ExponentialRelease(epsilon=2.0, n_outcomes=8)
    rng = make_rng(4)
    b = _bound(m(np.zeros(100_000), rng), m(np.ones(100_000), rng))
    assert b.epsilon_lower <= m.guarantee.epsilon * 1.0 + m.extra_epsilon  # d(0, 1) = 1
    bad = ExponentialRelease(epsilon=4.0, n_outcomes=8)  # forgot the /2: true loss 2 eps d
    b2 = _bound(bad(np.zeros(100_000), rng), bad(np.ones(100_000), rng))
    assert b2.epsilon_lower > m.guarantee.epsilon


# ------------------------------------------------------------------ sanitize mechanisms


def _tiny_embeddings():
    from textdp.embeddings import Embeddings

    vec = np.array([[0, 0], [0.5, 0], [1, 0.3], [0, 1], [1.2, 1], [2, 0.2]], dtype=np.float32)
    return Embeddings([f"w{i}" for i in range(len(vec))], vec, source="test", kind="word", lowercase=True)


@pytest.mark.parametrize("name", ["santext", "santext+", "fbdd"])
def test_audit_sanitizers_at_their_claimed_metric_epsilon(name):
    from textdp.sanitize import make_mechanism

    emb = _tiny_embeddings()
    kwargs = {"w": 0.5, "p": 0.5} if name == "santext+" else {}
    m = make_mechanism(name, emb, epsilon=2.0, output_vocabulary="full", rng=5, workers=1, **kwargs)
    m.fit([" ".join(emb.words)])
    n = 40_000
    x, x2 = 0, 1
    if name == "santext+":  # condition (i) of UMLDP: a pair of sensitive inputs (outputs all protected)
        x, x2 = (int(r) for r in m.input_rows(m.sensitive_words[:2]))
    out = m.sample_rows(np.full(n, x), make_rng(6))
    out2 = m.sample_rows(np.full(n, x2), make_rng(7))
    b = _bound(out, out2)
    d = float(np.linalg.norm(emb.vectors[x].astype(float) - emb.vectors[x2].astype(float)))
    g = m.guarantee
    claimed = g.epsilon * d + getattr(g, "epsilon0", 0.0)
    assert b.epsilon_lower <= claimed, (b, claimed)
    assert b.epsilon_hat > 0  # outputs do depend on the input


# ------------------------------------------------------------------ the audit zoo


@pytest.mark.parametrize("name", ZOO_NAMES)
def test_audit_zoo_mechanism(name):
    info = registry()[name]
    r = audit_mechanism(name.split(".", 1)[1], epsilon=1.0, n=4, samples=20_000, alpha=ALPHA, seed=8,
                        sampler="auto")
    claims_nothing = "no-privacy" in info.tags
    if info.broken or claims_nothing:
        assert r.any_violation, f"{name}: the audit should refute its claim ({r.epsilon_lower:.3g})"
    else:
        assert not r.any_violation, f"{name}: refuted at its claimed epsilon ({r.epsilon_lower:.3g})"


@pytest.mark.slow
@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_full_audit_noise_mechanisms(eps):
    rng = make_rng(9)
    n = 1_000_000
    for m in (LaplaceRelease(epsilon=eps),):
        b = _bound(m(np.zeros(n), rng), m(np.ones(n), rng), np.arange(-4.0, 5.01, 0.25))
        assert b.epsilon_lower <= eps
    e = ExponentialRelease(epsilon=eps, n_outcomes=12)
    b = _bound(e(np.zeros(n), rng), e(np.ones(n), rng))
    assert b.epsilon_lower <= eps + e.extra_epsilon
    f = 2 / (1 + math.exp(eps))
    r = RandomizedResponseRelease(f=f)
    b = _bound(r(np.zeros(n), rng).astype(int), r(np.ones(n), rng).astype(int))
    assert b.epsilon_lower <= r.guarantee.epsilon + 1e-12
