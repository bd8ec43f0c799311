"""Theorem 2 of Guo et al. (ICML 2022): Cramér–Rao lower bounds from Fisher information
leakage (FIL, Hannun, Guo & van der Maaten, UAI 2021).

For an output h ~ p(h | D₋ ∪ {z}) the Fisher information about the record is
I_h(z) = E[∇_z log p ∇_z log pᵀ] (d × d). For a Gaussian mechanism h = f(z) + N(0, σ²I)
it is I = J_fᵀ J_f / σ² with J_f = ∂f/∂z (p × d) (spec A.5).

Two scalar summaries are kept apart everywhere (spec A.4, pitfall P2):

* ``fil_spectral``: η² = ‖I‖₂ (the paper's definition of FIL), bound 1/η²;
* ``dfil_trace``: η² = Tr(I)/d (the "diagonal" FIL the official code computes), bound
  d/Tr(I) = 1/η², tighter than the spectral one.

Both are per-coordinate MSE lower bounds for an **unbiased** attack, because
Tr(I⁻¹)/d ≥ d/Tr(I) ≥ 1/‖I‖₂. The biased Cramér–Rao bound uses the Jacobian J_μ of the
attack's mean: E‖ẑ − z‖²/d ≥ [Tr(J_μ I⁻¹ J_μᵀ) + ‖b‖²] / d.

FIL values are data-dependent (one per record) and must be kept secret like the data
(Guo et al. footnote 2): they are analysis outputs, not releases.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.errors import ParameterError

__all__ = [
    "gaussian_fisher_information",
    "fil_from_jacobian",
    "fil_mse_bound",
    "cramer_rao_mse_bound",
]


def _sigma(sigma) -> float:
    try:
        s = float(sigma)
    except (TypeError, ValueError):
        raise ParameterError(f"sigma must be a positive number, got {sigma!r}") from None
    if not math.isfinite(s) or s <= 0:
        raise ParameterError(f"sigma (the noise standard deviation) must be > 0, got {sigma!r}")
    return s


def gaussian_fisher_information(jacobian: np.ndarray, sigma: float) -> np.ndarray:
    """Fisher information I = JᵀJ/σ² of h = f(z) + N(0, σ²I) about z.

    jacobian: ``(p, d)`` or batched ``(n, p, d)`` float array, J = ∂f/∂z at the record.
    Returns ``(d, d)`` or ``(n, d, d)`` float64. Raises ParameterError for σ ≤ 0.
    """
    s = _sigma(sigma)
    J = np.asarray(jacobian, dtype=np.float64)
    if J.ndim not in (2, 3):
        raise ParameterError(f"jacobian must have shape (p, d) or (n, p, d), got {J.shape}")
    return np.swapaxes(J, -1, -2) @ J / s**2


def fil_from_jacobian(jacobian: np.ndarray, sigma: float, kind: str = "trace") -> np.ndarray | float:
    """FIL η² of the Gaussian mechanism with Jacobian J and noise σ.

    kind ``"trace"`` (dFIL): η² = ‖J‖_F² / (d σ²); ``"spectral"`` (FIL): η² = ‖J‖₂² / σ².
    jacobian ``(p, d)`` → float, ``(n, p, d)`` → ``(n,)`` float64 array.
    """
    s = _sigma(sigma)
    J = np.asarray(jacobian, dtype=np.float64)
    if J.ndim not in (2, 3):
        raise ParameterError(f"jacobian must have shape (p, d) or (n, p, d), got {J.shape}")
    d = J.shape[-1]
    if kind == "trace":
        out = np.sum(J * J, axis=(-2, -1)) / (d * s**2)
    elif kind == "spectral":
        out = np.linalg.norm(J, ord=2, axis=(-2, -1)) ** 2 / s**2
    else:
        raise ParameterError(f"kind must be 'trace' or 'spectral', got {kind!r}")
    return float(out) if J.ndim == 2 else out


def fil_mse_bound(eta2):
    """Unbiased per-coordinate MSE lower bound 1/η² from a FIL value (trace or spectral).

    Works elementwise on arrays; η² = 0 gives +inf. Raises ParameterError for negative/NaN η².
    """
    e = np.asarray(eta2, dtype=np.float64)
    if np.any(np.isnan(e)) or np.any(e < 0):
        raise ParameterError("FIL values η² must be ≥ 0")
    with np.errstate(divide="ignore"):
        out = 1.0 / e
    return float(out) if out.ndim == 0 else out


def cramer_rao_mse_bound(
    fisher_information: np.ndarray,
    jacobian_mu: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    rcond: float = 1e-12,
) -> float:
    """Biased Cramér–Rao bound (Guo et al. Thm 2; Kay 1993):
    E‖ẑ − z‖²/d ≥ [Tr(J_μ I⁻¹ J_μᵀ) + ‖b‖²] / d.

    fisher_information: ``(d, d)`` symmetric PSD matrix I_h(z).
    jacobian_mu: ``(d, d)`` Jacobian of the attack's mean μ(z) = E[ẑ]; None = identity (unbiased).
    bias: ``(d,)`` bias b(z) = μ(z) − z, or None.
    Directions with no information (eigenvalue ≤ rcond·max) that J_μ does not annihilate
    give +inf. Returns a float (units² of the data).
    """
    I = np.asarray(fisher_information, dtype=np.float64)
    if I.ndim != 2 or I.shape[0] != I.shape[1]:
        raise ParameterError(f"fisher_information must be square (d, d), got {I.shape}")
    d = I.shape[0]
    w, V = np.linalg.eigh((I + I.T) / 2)
    tol = rcond * max(float(w.max()), 0.0)
    good = w > tol
    Jm = np.eye(d) if jacobian_mu is None else np.asarray(jacobian_mu, dtype=np.float64)
    if Jm.shape != (d, d):
        raise ParameterError(f"jacobian_mu must have shape {(d, d)}, got {Jm.shape}")
    JV = Jm @ V  # columns: J_μ applied to eigenvectors
    if np.any(~good) and np.any(np.abs(JV[:, ~good]) > 1e-12 * max(1.0, np.abs(Jm).max())):
        total = math.inf
    else:
        total = float(np.sum(JV[:, good] ** 2 / w[good]))
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64)
        total += float(b @ b)
    return total / d
