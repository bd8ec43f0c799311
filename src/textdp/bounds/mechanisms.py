"""Mechanisms textdp releases for the bounds capability, each with its guarantee as data
and its Fisher information, so Theorems 1 and 2 apply to them directly.

* :class:`GaussianMechanism`: f(D) + N(0, σ²I) for a function with L2 sensitivity Δ.
* :class:`OutputPerturbation`: θ*(D) + N(0, σ²I) for L2-regularised logistic or linear
  regression (Chaudhuri et al. 2011; Guo et al. 2022 §7).
* :class:`EmbeddingGaussianMechanism`: each document's text embedding, clipped to norm C,
  plus N(0, σ²I): the per-document release that makes the bounds speak about text.

Releases go through textdp's float-safe Gaussian release (:func:`_float_safe_release`: the
value snapped to the noise grid of :func:`textdp.noise.gaussian_mechanism_params`, plus
:func:`textdp.noise.gaussian`, with σ inflated by the snapping slack, per record) from a
:func:`textdp.noise.make_rng` generator (CSPRNG by default); the RDP guarantee covers that
release. The Fisher-information analysis (Theorem 2) is for the idealised continuous
mechanism f(z) + N(0, σ²I): snapping to a 2⁻¹²σ grid makes the released density a lattice
law that is not differentiable in z, so FIL values describe the continuous mechanism. Guarantees are replace-one RDP curves on
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


def _float_safe_release(V: np.ndarray, sensitivity: float, sigma: float, rng, record_dim: int) -> np.ndarray:
    """Snap V to the noise grid and add discrete-Gaussian noise (textdp.noise), with the grid
    and σ inflation computed for ONE record of ``record_dim`` coordinates (V may hold many)."""
    from textdp.noise import gaussian, gaussian_mechanism_params, make_rng, snap_to_grid

    g, sig = gaussian_mechanism_params(int(record_dim), sensitivity, sigma)
    return snap_to_grid(V, g) + gaussian(sig, V.shape, make_rng(rng))


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
        """value + N(0, σ²I), float64 of value's shape (float-safe). ``value`` is ONE record's
        f(D) (its size sets the snapping slack); rng: Generator/seed/None (CSPRNG)."""
        v = np.asarray(value, dtype=np.float64)
        return _float_safe_release(v, self.sensitivity, self.sigma, rng, max(v.size, 1))

    def release_many(self, values, rng=None) -> np.ndarray:
        """Independent releases of each row of ``values`` (``(T, k)``): ``(T, k)`` float64."""
        V = np.atleast_2d(np.asarray(values, dtype=np.float64))
        return _float_safe_release(V, self.sensitivity, self.sigma, rng, V.shape[1])

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

    def release(self, X, y, rng=None, fit=None, draws: int | None = None) -> np.ndarray:
        """θ* + N(0, σ²I): ``(p,)`` float64 (float-safe), or ``(draws, p)`` independent draws."""
        f = self.fit(X, y) if fit is None else fit
        base = f.theta if draws is None else np.tile(f.theta, (int(draws), 1))
        return _float_safe_release(base, self.sensitivity, self.sigma, rng, f.p)

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
        """``(n, m)`` embeddings → ``(n, m)`` float64 noisy clipped embeddings (float-safe, per document)."""
        C = self.clip(E)
        return _float_safe_release(C, 2.0 * self.clip_norm, self.sigma, rng, C.shape[1])

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
