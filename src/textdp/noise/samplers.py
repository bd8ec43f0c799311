"""Noise samplers used by every DP release in textdp.

The signatures here are the contract the capabilities rely on. Each sampler
takes an explicit ``numpy.random.Generator`` (from :func:`textdp.noise.make_rng`).

NOTE: first implementations; hardening to floating-point-safe constructions
(snapping / exact discrete samplers) is tracked in issue 8 and keeps these
signatures.
"""

from __future__ import annotations

import numpy as np

from textdp.errors import ParameterError

__all__ = ["laplace", "gaussian", "randomized_response", "categorical_from_log_weights", "gamma", "uniform_direction"]


def _positive(x: float, name: str) -> float:
    x = float(x)
    if not np.isfinite(x) or x <= 0:
        raise ParameterError(f"{name} must be a positive finite number, got {x!r}")
    return x


def laplace(scale: float, size, rng: np.random.Generator) -> np.ndarray:
    """Laplace(0, scale) noise of shape ``size`` (float64)."""
    return rng.laplace(0.0, _positive(scale, "scale"), size)


def gaussian(sigma: float, size, rng: np.random.Generator) -> np.ndarray:
    """N(0, sigma^2) noise of shape ``size`` (float64)."""
    return rng.normal(0.0, _positive(sigma, "sigma"), size)


def gamma(shape: float, scale: float, size, rng: np.random.Generator) -> np.ndarray:
    """Gamma(shape, scale) draws (the radius of multivariate Laplace noise)."""
    return rng.gamma(_positive(shape, "shape"), _positive(scale, "scale"), size)


def uniform_direction(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, dim)`` unit vectors uniform on the sphere (normalised Gaussians)."""
    g = rng.standard_normal((n, dim))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return g / norms


def randomized_response(bits: np.ndarray, flip_probability: float, rng: np.random.Generator) -> np.ndarray:
    """Keep each bit with probability ``1 - flip_probability/2`` ... see LP-LDA:
    with probability ``f`` the bit is replaced by a fair coin, so it flips with
    probability ``f/2``. ``bits``: bool/0-1 array; returns the same shape (uint8)."""
    f = float(flip_probability)
    if not (0 < f < 1):
        raise ParameterError(f"flip probability f must be in (0, 1), got {flip_probability!r}")
    b = np.asarray(bits).astype(bool)
    replace = rng.random(b.shape) < f
    coin = rng.random(b.shape) < 0.5
    return np.where(replace, coin, b).astype(np.uint8)


def categorical_from_log_weights(log_w: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Exponential-mechanism style sampling from unnormalised log-weights.

    log_w: ``(B, V)`` float64, row b the log-weights of distribution b.
    counts: ``(B,)`` int, how many independent draws from each row.
    Returns a list of B int64 arrays (indices into V), ``counts[b]`` long each.
    """
    log_w = np.asarray(log_w, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    out = []
    for b in range(log_w.shape[0]):
        w = np.exp(log_w[b] - log_w[b].max())
        cdf = np.cumsum(w)
        u = rng.random(int(counts[b])) * cdf[-1]
        out.append(np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int64))
    return out
