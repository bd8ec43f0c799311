"""The noise primitives as registered mechanisms (``noise.*`` in the registry).

Each is a small object with ``.guarantee`` (data) and ``__call__(x, rng)``, so the
CI audits (``tests/trust/test_audits.py``) and the registry-coverage test treat
them like any other mechanism. Sensitivity is 1 in the units of ``x``.

==========================  ========================================  =====================================
name                        release                                   guarantee
==========================  ========================================  =====================================
noise.laplace               ``laplace_mechanism(x, 1, eps)``          ``eps``-DP per record (replace-one)
noise.gaussian              ``gaussian_mechanism(x, 1, sigma)``       ``rho = 1/(2 sigma^2)`` zCDP, as RDP
noise.randomized_response   ``randomized_response(bits, f)``          ``ln((2-f)/f)``-LDP per bit
noise.exponential           ``categorical_from_log_weights(-eps d/2)`` ``eps d`` metric DP (+ discretisation)
==========================  ========================================  =====================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from textdp.accounting.guarantees import RDP, LocalDP, MetricDP, PureDP
from textdp.noise import samplers as _s

__all__ = ["LaplaceRelease", "GaussianRelease", "RandomizedResponseRelease", "ExponentialRelease"]


@dataclass
class LaplaceRelease:
    """``x + Laplace(1/eps)`` per record, float-safe (sensitivity 1 per record in L1)."""

    epsilon: float = 1.0

    @property
    def guarantee(self) -> PureDP:
        return PureDP(epsilon=self.epsilon, unit="record", neighbours="replace-one")

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        g, scale = _s.laplace_mechanism_params(1, 1.0, self.epsilon)
        return _s.snap_to_grid(x, g) + _s.laplace(scale, x.shape, rng)


@dataclass
class GaussianRelease:
    """``x + N(0, sigma^2)`` per record, float-safe (L2 sensitivity 1 per record)."""

    sigma: float = 1.0

    @property
    def guarantee(self) -> RDP:
        orders = (1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0)
        return RDP(orders=orders, epsilons=tuple(a / (2 * self.sigma**2) for a in orders), unit="record")

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        g, sig = _s.gaussian_mechanism_params(1, 1.0, self.sigma)
        return _s.snap_to_grid(x, g) + _s.gaussian(sig, x.shape, rng)


@dataclass
class RandomizedResponseRelease:
    """LP-LDA randomized response on bits: replace by a fair coin with probability ``f``."""

    f: float = 0.5

    @property
    def guarantee(self) -> LocalDP:
        return LocalDP(epsilon=math.log((2 - self.f) / self.f), unit="bit")

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return _s.randomized_response(np.asarray(x) >= 0.5, self.f, rng).astype(np.float64)


@dataclass
class ExponentialRelease:
    """Exponential mechanism on points ``0, 1, ..., V-1`` of a line: ``p(y|x) ∝ exp(-eps |x-y| / 2)``."""

    epsilon: float = 1.0
    n_outcomes: int = 16

    @property
    def guarantee(self) -> MetricDP:
        return MetricDP(epsilon=self.epsilon, metric="absolute", unit="token")

    @property
    def extra_epsilon(self) -> float:
        return _s.categorical_discretisation_epsilon(self.n_outcomes)

    def log_weights(self, inputs: np.ndarray) -> np.ndarray:
        pos = np.arange(self.n_outcomes, dtype=np.float64)
        return -self.epsilon * np.abs(np.asarray(inputs, dtype=np.float64)[:, None] - pos[None, :]) / 2

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x).astype(np.int64).ravel()
        uniq, inv = np.unique(x, return_inverse=True)
        counts = np.bincount(inv, minlength=uniq.size)
        draws = _s.categorical_from_log_weights(self.log_weights(uniq), counts, rng)
        out = np.empty(x.size, dtype=np.int64)
        for k in range(uniq.size):
            out[inv == k] = draws[k]
        return out


def _register() -> None:
    from textdp.mechanisms.registry import MechanismInfo, register

    for name, cls, desc in (
        ("noise.laplace", LaplaceRelease, "float-safe Laplace release (exact discrete Laplace on a 2^-40 grid)"),
        ("noise.gaussian", GaussianRelease, "float-safe Gaussian release (exact discrete Gaussian on a 2^-12 grid)"),
        ("noise.randomized_response", RandomizedResponseRelease, "randomized response with exact Bernoulli draws"),
        ("noise.exponential", ExponentialRelease, "integer-weighted exponential mechanism (eta-uniform floor)"),
    ):
        register(MechanismInfo(name=name, factory=cls, capability="noise", description=desc, tags=("noise",)))
