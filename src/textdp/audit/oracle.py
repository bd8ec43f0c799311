"""Exact (infinite-sample) values of the Habernal (2022) sanity check.

When the coordinates of one output are independent given the input and a
coordinate of the output on ``0^n`` is ``>= 0.5`` with probability ``p0`` (on ``1^n``:
``p1``), the bit count ``S`` of one record is ``Binomial(n, p)``; the majority vote
answers 1 iff ``2S > n`` (ties go to 0: numpy's round-half-to-even on the mean, as
in the official code). The attack's privacy loss is then exact:

    ε_y = | ln P(y | D) − ln P(y | D') |,   ε* = max(ε_0, ε_1).

For Laplace-type noise of scale ``b`` (spec B.4, derived): ``p0 = q = ½·e^{−1/(2b)}``
and ``p1 = 1 − q``, so with ``K ~ Binomial(n, q)`` flipped coordinates
``ε_0 = |ln P(K <= n/2) / P(K >= n/2)|``, ``ε_1 = |ln P(K < n/2) / P(K > n/2)|``;
for ``n = 1`` this is ``ln(2e^{1/(2b)} − 1)``. Computed in log space (``logsf``/
``logcdf``) so losses far above any Monte-Carlo ceiling stay exact.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.errors import ParameterError

__all__ = ["majority_vote_probabilities", "majority_vote_oracle", "laplace_oracle", "zoo_oracle", "majority_vote_se",
           "binom_pmf", "binom_logcdf", "binom_logsf"]


# Binomial law through the Boost ufuncs that scipy.stats.binom evaluates (scipy.special._ufuncs): the same
# floats without importing scipy.stats (about 0.5 s of an audit's start-up). Without them (another scipy
# layout), scipy.stats.binom itself.
def _boost():
    try:
        from scipy.special._ufuncs import _binom_cdf, _binom_pmf, _binom_sf
    except ImportError:  # pragma: no cover - depends on the installed scipy
        return None
    return _binom_pmf, _binom_cdf, _binom_sf


def binom_pmf(k, n: int, p: float) -> np.ndarray:
    """``scipy.stats.binom.pmf(k, n, p)`` for integers ``0 <= k <= n`` and ``0 <= p <= 1`` (float64, bit
    for bit)."""
    f = _boost()
    if f is None:  # pragma: no cover
        from scipy.stats import binom

        return binom.pmf(k, n, p)
    return np.clip(f[0](np.asarray(k, dtype=np.float64), float(n), float(p)), 0.0, 1.0)  # as rv_discrete.pmf


def binom_logcdf(k: int, n: int, p: float) -> float:
    """``scipy.stats.binom.logcdf(k, n, p)`` for an integer ``0 <= k < n`` (bit for bit): ``ln P(S <= k)``."""
    f = _boost()
    if f is None:  # pragma: no cover
        from scipy.stats import binom

        return float(binom.logcdf(k, n, p))
    with np.errstate(divide="ignore"):
        return float(np.log(f[1](float(math.floor(k)), float(n), float(p))))


def binom_logsf(k: int, n: int, p: float) -> float:
    """``scipy.stats.binom.logsf(k, n, p)`` for an integer ``0 <= k < n`` (bit for bit): ``ln P(S > k)``."""
    f = _boost()
    if f is None:  # pragma: no cover
        from scipy.stats import binom

        return float(binom.logsf(k, n, p))
    with np.errstate(divide="ignore"):
        return float(np.log(f[2](float(math.floor(k)), float(n), float(p))))


def majority_vote_probabilities(p: float, n: int) -> tuple[float, float]:
    """``(ln P(y=0), ln P(y=1))`` of the majority vote when ``S ~ Binomial(n, p)``."""
    k = n // 2  # y = 1 iff S > n/2 iff S >= k + 1
    if p <= 0.0:
        return 0.0, -math.inf
    if p >= 1.0:
        return -math.inf, 0.0
    return binom_logcdf(k, n, p), binom_logsf(k, n, p)


def majority_vote_oracle(p0: float, p1: float, n: int) -> float:
    """Exact ε of the majority-vote attack (see module docstring).

    p0, p1: probability that one output coordinate is >= 0.5 on input ``0^n`` / ``1^n``.
    Returns ``inf`` when one dataset can produce an answer the other never does.
    """
    if n < 1:
        raise ParameterError(f"dimension n must be >= 1, got {n}")
    l0 = majority_vote_probabilities(p0, n)
    l1 = majority_vote_probabilities(p1, n)
    best = 0.0
    for a, b in zip(l0, l1):
        if a == -math.inf and b == -math.inf:
            continue
        if a == -math.inf or b == -math.inf:
            return math.inf
        best = max(best, abs(a - b))
    return best


def laplace_oracle(epsilon: float, n: int, scale: float | None = None) -> float:
    """Spec B.4: exact majority-vote ε for Laplace noise of ``scale`` (default ``n/epsilon``,
    the correct mechanism; ADePT is ``scale = 1/epsilon``) on ``0^n`` vs ``1^n``."""
    if epsilon <= 0:
        raise ParameterError(f"epsilon must be positive, got {epsilon}")
    b = n / epsilon if scale is None else float(scale)
    q = 0.5 * math.exp(-1.0 / (2.0 * b))
    return majority_vote_oracle(q, 1.0 - q, n)


def zoo_oracle(name: str, epsilon: float, n: int) -> float:
    """Exact majority-vote ε for a mechanism of :mod:`textdp.mechanisms.zoo`."""
    from textdp.mechanisms.zoo import make_zoo_mechanism

    m = make_zoo_mechanism(name, epsilon, n)
    return majority_vote_oracle(m.bit_probability(0.0), m.bit_probability(1.0), n)


def majority_vote_se(p0: float, p1: float, n: int, samples: int) -> float:
    """Delta-method standard error of the plug-in majority-vote ε̂ with ``samples`` records per
    dataset (at the output that attains the maximum); ``inf`` when that output is unobservable.
    Used to compare published point estimates with the oracle."""
    l0 = majority_vote_probabilities(p0, n)
    l1 = majority_vote_probabilities(p1, n)
    best, se = -1.0, math.inf
    for a, b in zip(l0, l1):
        if a == -math.inf or b == -math.inf:
            continue
        e = abs(a - b)
        if e > best:
            pa, pb = math.exp(a), math.exp(b)
            best = e
            se = math.sqrt((1 - pa) / (samples * pa) + (1 - pb) / (samples * pb))
    return se
