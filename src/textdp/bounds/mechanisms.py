"""Mechanisms textdp releases for the bounds capability, each with its guarantee as data
and its Fisher information, so Theorems 1 and 2 apply to them directly.

* :class:`GaussianMechanism`: f(D) + N(0, σ²I) for a function with L2 sensitivity Δ.
* :class:`OutputPerturbation`: θ*(D) + N(0, σ²I) for L2-regularised logistic or linear
  regression (Chaudhuri et al. 2011; Guo et al. 2022 §7).
* :class:`EmbeddingGaussianMechanism`: each document's text embedding, clipped to norm C,
  plus N(0, σ²I): the per-document release that makes the bounds speak about text.

All noise is drawn with :func:`textdp.noise.gaussian` from a :func:`textdp.noise.make_rng`
generator (CSPRNG by default). Guarantees are replace-one RDP curves on
``DEFAULT_ORDERS`` (order 2 included), computed with dp-accounting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from textdp.accounting.guarantees import RDP
from textdp.errors import InputError, ParameterError

__all__ = ["DEFAULT_ORDERS", "GaussianMechanism", "OutputPerturbation", "EmbeddingGaussianMechanism", "gaussian_rdp_curve"]

DEFAULT_ORDERS: tuple[float, ...] = (1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 16.0, 32.0, 64.0)


def _pos(x, name):
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a positive number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ParameterError(f"{name} must be > 0, got {x!r}")
    return v


def gaussian_rdp_curve(sigma: float, sensitivity: float, orders=DEFAULT_ORDERS, unit: str = "record") -> RDP:
    """Replace-one RDP curve ε(α) = αΔ²/(2σ²) of the Gaussian mechanism (dp-accounting)."""
    from dp_accounting import GaussianDpEvent, NeighboringRelation
    from dp_accounting.rdp import RdpAccountant

    acc = RdpAccountant(list(map(float, orders)), NeighboringRelation.REPLACE_ONE)
    acc.compose(GaussianDpEvent(_pos(sigma, "sigma") / _pos(sensitivity, "sensitivity")))
    return RDP(orders=tuple(map(float, orders)), epsilons=tuple(float(e) for e in acc._rdp),  # noqa: SLF001
               unit=unit, neighbours="replace-one")


@dataclass(frozen=True)
class GaussianMechanism:
    """h = f(D) + N(0, σ²I) for an f with replace-one L2 sensitivity Δ (units of f).

    guarantee: RDP curve per ``unit`` (ε₂ = Δ²/σ²). Fisher information about a record z
    with Jacobian J = ∂f/∂z: JᵀJ/σ² (:meth:`fisher_information`).
    """

    sigma: float
    sensitivity: float = 1.0
    unit: str = "record"

    def __post_init__(self):
        _pos(self.sigma, "sigma")
        _pos(self.sensitivity, "sensitivity")

    @property
    def guarantee(self) -> RDP:
        return gaussian_rdp_curve(self.sigma, self.sensitivity, unit=self.unit)

    @property
    def epsilon2(self) -> float:
        return self.guarantee.epsilon_at(2.0)

    def release(self, value, rng=None) -> np.ndarray:
        """value + N(0, σ²I), float64 of value's shape. rng: Generator/seed/None (CSPRNG)."""
        from textdp.noise import gaussian, make_rng

        v = np.asarray(value, dtype=np.float64)
        return v + gaussian(self.sigma, v.shape, make_rng(rng))

    def fisher_information(self, jacobian) -> np.ndarray:
        from textdp.bounds.fil import gaussian_fisher_information

        return gaussian_fisher_information(jacobian, self.sigma)


@dataclass(frozen=True)
class OutputPerturbation:
    """θ*(D) + N(0, σ²I) for L2-regularised ``model`` ("logistic" or "linear") on n records
    whose rows (bias feature included) have ‖x‖ ≤ ``feature_norm_bound`` R.

    guarantee: replace-one RDP per record with Δ from
    :func:`textdp.bounds.glm.output_perturbation_sensitivity` (ε₂ = 4R²/(nλσ)² for logistic).
    """

    sigma: float
    lam: float
    n: int
    model: str = "logistic"
    feature_norm_bound: float = 1.0

    def __post_init__(self):
        _pos(self.sigma, "sigma")
        self.sensitivity  # validates λ, n, model, R

    @property
    def sensitivity(self) -> float:
        from textdp.bounds.glm import output_perturbation_sensitivity

        return output_perturbation_sensitivity(self.n, self.lam, self.model, self.feature_norm_bound)

    @property
    def guarantee(self) -> RDP:
        return gaussian_rdp_curve(self.sigma, self.sensitivity, unit="record")

    @property
    def epsilon2(self) -> float:
        return self.guarantee.epsilon_at(2.0)

    def fit(self, X, y):
        """The exact non-private fit (:class:`textdp.bounds.glm.GLMFit`); checks n and R."""
        from textdp.bounds.glm import _check_xy, _row_norms, fit_glm

        X, y = _check_xy(X, y, self.model)
        if X.shape[0] != int(self.n):
            raise InputError(f"the mechanism was set up for n = {self.n} records but X has {X.shape[0]}")
        mx = float(_row_norms(X).max())
        if mx > self.feature_norm_bound * (1 + 1e-9):
            raise InputError(f"a row of X has norm {mx:.4g} > feature_norm_bound {self.feature_norm_bound:g}; "
                             "normalise the rows or raise the bound (the guarantee depends on it)")
        return fit_glm(X, y, self.lam, self.model)

    def release(self, X, y, rng=None, fit=None) -> np.ndarray:
        """θ* + N(0, σ²I): ``(p,)`` float64."""
        from textdp.noise import gaussian, make_rng

        f = self.fit(X, y) if fit is None else fit
        return f.theta + gaussian(self.sigma, f.theta.shape, make_rng(rng))

    def per_sample_fil(self, X, y, kind: str = "trace", fit=None) -> np.ndarray:
        """Per-record η² (dFIL by default) of this release; see :func:`textdp.bounds.glm.per_sample_fil`."""
        from textdp.bounds.glm import per_sample_fil

        f = self.fit(X, y) if fit is None else fit
        return per_sample_fil(f, X, self.sigma, kind=kind)


@dataclass(frozen=True)
class EmbeddingGaussianMechanism:
    """Each document's embedding e (``(m,)``), clipped to ‖e‖ ≤ C, plus N(0, σ²I).

    The protected unit is the document (replace-one of its text, Δ = 2C): ε(α) = 2αC²/σ².
    Per-document FIL is exact: the clip's Jacobian is I for ‖e‖ ≤ C, else
    (C/‖e‖)(I − uuᵀ) with u = e/‖e‖, so dFIL η² = 1/σ² (unclipped) or
    (C/‖e‖)²(m−1)/(mσ²), spectral η² = 1/σ² or (C/‖e‖)²/σ². For an unclipped document the
    unbiased attack ẑ = h has MSE σ² = 1/η²: the FIL bound is attained.
    """

    sigma: float
    clip_norm: float = 1.0

    def __post_init__(self):
        _pos(self.sigma, "sigma")
        _pos(self.clip_norm, "clip_norm")

    @property
    def guarantee(self) -> RDP:
        return gaussian_rdp_curve(self.sigma, 2.0 * self.clip_norm, unit="document")

    @property
    def epsilon2(self) -> float:
        return self.guarantee.epsilon_at(2.0)

    def clip(self, E) -> np.ndarray:
        E = np.atleast_2d(np.asarray(E, dtype=np.float64))
        if not np.all(np.isfinite(E)):
            raise InputError("embeddings must be finite")
        nr = np.linalg.norm(E, axis=1, keepdims=True)
        scale = np.minimum(1.0, self.clip_norm / np.maximum(nr, 1e-300))
        return E * scale

    def release(self, E, rng=None) -> np.ndarray:
        """``(n, m)`` embeddings → ``(n, m)`` float64 noisy clipped embeddings."""
        from textdp.noise import gaussian, make_rng

        C = self.clip(E)
        return C + gaussian(self.sigma, C.shape, make_rng(rng))

    def per_sample_fil(self, E, kind: str = "trace") -> np.ndarray:
        """``(n,)`` η² per document (closed form above)."""
        E = np.atleast_2d(np.asarray(E, dtype=np.float64))
        m = E.shape[1]
        nr = np.linalg.norm(E, axis=1)
        r = np.where(nr > self.clip_norm, self.clip_norm / np.maximum(nr, 1e-300), 1.0)
        clipped = nr > self.clip_norm
        if kind == "trace":
            val = np.where(clipped, r**2 * (m - 1) / m, 1.0)
        elif kind == "spectral":
            val = np.where(clipped, r**2, 1.0)
        else:
            raise ParameterError(f"kind must be 'trace' or 'spectral', got {kind!r}")
        return val / self.sigma**2
