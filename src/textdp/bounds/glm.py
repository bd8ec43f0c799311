"""Output perturbation of L2-regularised GLMs: exact fits, influence Jacobians, per-record
FIL, and the informed-adversary reconstruction attack (Guo et al. 2022 §5/§7; spec A.5, A.8).

Model (both GLMs): θ* = argmin Σ_j ℓ(θ; x_j, y_j) + (nλ/2)‖θ‖², i.e. the mean loss plus
(λ/2)‖θ‖² (every coordinate regularised, the bias feature x₀ = 1 included). Rows of ``X``
are ``(n, p)`` float64 (dense ndarray or scipy.sparse CSR) whose **first column is the
constant bias feature 1**; the record's data coordinates are columns 1..p−1 (d = p − 1).

* logistic (y ∈ {0, 1}, s = sigmoid(xᵀθ)): H = Σ s(1−s) x xᵀ + nλI and
  ∂θ*/∂x_i = −H⁻¹[s_i(1−s_i) x_i θᵀ + (s_i − y_i) I], ∂θ*/∂y_i = H⁻¹x_i.
* linear (least squares, y ∈ {−1, +1}, r = xᵀθ − y, loss r²/2): A = (XᵀX + nλI)⁻¹ and
  ∂θ*/∂x_i = −A[r_i I + x_i θᵀ], ∂θ*/∂y_i = A x_i.

Both are ``−K (a_i x_i θᵀ + c_i I)`` with K = H⁻¹ (implicit function theorem on the
stationarity condition Σ_j ∇ℓ_j + nλθ = 0). The per-record trace FIL over the data
coordinates S = {1..p−1} follows in O(p) per record after one p × p inverse:

    ‖J_S‖_F² = a² ‖Kx‖² ‖θ_S‖² + 2ac (Kx)·(Kθ̃) + c² ‖K[:, S]‖_F²      (θ̃ = θ with θ₀ = 0)

so η²_i = ‖J_S‖_F² / (d σ²) (``dfil_trace``); this is what makes 10⁴ records × 5,000
features take seconds (see benchmarks/bench_bounds.py).

Sensitivity (replace-one, rows with ‖x‖ ≤ R including the bias): logistic ℓ is R-Lipschitz,
so Δ = 2R/(nλ) (Chaudhuri et al. 2011) and ε(α) = α Δ²/(2σ²), i.e. ε₂ = 4R²/(nλσ)² (the
official code's formula after commit dc87132, with R = 1). Least squares with |y| ≤ 1: the
minimiser satisfies ‖θ*‖ ≤ 1/√λ (compare the objective with θ = 0), so the gradient norm is
≤ R(R/√λ + 1) on that ball and Δ = 2R(R/√λ + 1)/(nλ). Rows outside the R-ball are refused
(the official scripts silently used unnormalised MNIST, bug 4 of spec A.9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from textdp._lazy import lazy_module
from textdp.errors import InputError, ParameterError

# imported on first use (about 0.3 s): `textdp bounds mse` and the closed-form curves never fit a GLM
sla = lazy_module("scipy.linalg")
sp = lazy_module("scipy.sparse")

__all__ = [
    "GLMFit",
    "fit_glm",
    "influence_jacobian",
    "per_sample_fil",
    "output_perturbation_sensitivity",
    "glm_informed_attack",
    "AttackResult",
    "attack_experiment",
]

_MODELS = ("logistic", "linear")


def _sigmoid(t):
    return 0.5 * (1.0 + np.tanh(0.5 * t))  # overflow-free


def _check_lam(lam) -> float:
    try:
        v = float(lam)
    except (TypeError, ValueError):
        raise ParameterError(f"lam must be a positive number, got {lam!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ParameterError(f"lam (the L2 regularisation λ) must be > 0, got {lam!r}")
    return v


def _check_xy(X, y, model: str):
    if model not in _MODELS:
        raise ParameterError(f"model must be 'logistic' or 'linear', got {model!r}")
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
    else:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise InputError(f"X must be a 2-D (n, p) array, got shape {X.shape}")
    y = np.asarray(y, dtype=np.float64).ravel()
    n, p = X.shape
    if n < 2 or p < 2:
        raise InputError(f"need at least 2 records and a bias column plus 1 feature, got X of shape {X.shape}")
    if y.shape[0] != n:
        raise InputError(f"X has {n} rows but y has {y.shape[0]} labels")
    col0 = X[:, 0].toarray().ravel() if sp.issparse(X) else X[:, 0]
    if not np.allclose(col0, 1.0):
        raise InputError("the first column of X must be the constant bias feature 1 (use textdp.bounds.add_bias)")
    if model == "logistic" and not np.all((y == 0) | (y == 1)):
        raise InputError("logistic regression needs labels y in {0, 1}")
    if model == "linear" and np.any(np.abs(y) > 1 + 1e-12):
        raise InputError("least squares here needs labels |y| <= 1 (use {-1, +1})")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(X.data if sp.issparse(X) else X))):
        raise InputError("X and y must be finite")
    return X, y


def _row_norms(X) -> np.ndarray:
    if sp.issparse(X):
        return np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return np.linalg.norm(X, axis=1)


@dataclass
class GLMFit:
    """A fitted L2-regularised GLM and what the FIL and the attack need.

    theta: ``(p,)`` float64 exact minimiser θ* (gradient norm ``grad_norm`` at the end);
    hessian_inv: ``(p, p)`` float64 K = H⁻¹ of the summed objective at θ*;
    a, c: ``(n,)`` the per-record coefficients of the influence Jacobian −K(a x θᵀ + c I).
    """

    model: str
    lam: float
    n: int
    theta: np.ndarray
    hessian_inv: np.ndarray
    a: np.ndarray
    c: np.ndarray
    grad_norm: float
    iterations: int
    extra: dict = field(default_factory=dict)

    @property
    def p(self) -> int:
        return int(self.theta.shape[0])


def _hessian(X, w, nlam):
    p = X.shape[1]
    if sp.issparse(X):
        H = (X.T @ X.multiply(w[:, None]).tocsr()).toarray()
    else:
        H = X.T @ (X * w[:, None])
    H[np.diag_indices(p)] += nlam
    return H


def fit_glm(X, y, lam: float, model: str = "logistic", tol: float = 1e-13, max_iter: int = 100) -> GLMFit:
    """Exact minimiser of Σ_j ℓ_j(θ) + (nλ/2)‖θ‖² by Newton's method (float64).

    X: ``(n, p)`` dense or CSR, first column 1 (bias); y: ``(n,)`` in {0,1} (logistic) or
    [−1, 1] (linear). Newton with backtracking converges quadratically, so the gradient
    reaches ~1e-12·n: the attack of :func:`glm_informed_attack` needs the exact optimum.
    Raises ParameterError (λ ≤ 0, unknown model) and InputError (bad shapes/labels).
    """
    lam = _check_lam(lam)
    X, y = _check_xy(X, y, model)
    n, p = X.shape
    nlam = n * lam
    if model == "linear":
        H = _hessian(X, np.ones(n), nlam)
        cf = sla.cho_factor(H)
        theta = sla.cho_solve(cf, X.T @ y)
        K = sla.cho_solve(cf, np.eye(p))
        r = X @ theta - y
        g = X.T @ r + nlam * theta
        return GLMFit(model, lam, n, theta, K, np.ones(n), r, float(np.linalg.norm(g)), 1)

    theta = np.zeros(p)

    def obj(t):
        z = X @ t
        # Σ log(1+e^z) − y z, stable
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * nlam * t @ t)

    f = obj(theta)
    it = 0
    for it in range(1, max_iter + 1):
        s = _sigmoid(X @ theta)
        g = X.T @ (s - y) + nlam * theta
        gn = float(np.linalg.norm(g))
        if gn <= tol * max(1.0, n):
            break
        H = _hessian(X, s * (1 - s), nlam)
        step = sla.cho_solve(sla.cho_factor(H), g)
        t = 1.0
        while True:
            cand = theta - t * step
            fc = obj(cand)
            if fc <= f - 1e-4 * t * (g @ step) + 1e-13 * max(1.0, abs(f)) or t < 1e-10:
                break
            t *= 0.5
        theta, f = cand, fc
    s = _sigmoid(X @ theta)
    g = X.T @ (s - y) + nlam * theta
    H = _hessian(X, s * (1 - s), nlam)
    K = sla.cho_solve(sla.cho_factor(H), np.eye(p))
    return GLMFit(model, lam, n, theta, K, s * (1 - s), s - y, float(np.linalg.norm(g)), it)


def influence_jacobian(fit: GLMFit, X, i: int, with_label: bool = True) -> np.ndarray:
    """Exact Jacobian of θ* with respect to record i: ``(p, p+1)`` float64, columns
    ∂θ*/∂x_{i,0..p−1} then ∂θ*/∂y_i (``(p, p)`` without the label column). Column 0 is the
    bias feature (a constant, excluded from FIL by :func:`per_sample_fil`)."""
    x = X[i].toarray().ravel() if sp.issparse(X) else np.asarray(X[i], dtype=np.float64)
    K = fit.hessian_inv
    Jx = -K @ (fit.a[i] * np.outer(x, fit.theta) + fit.c[i] * np.eye(fit.p))
    if not with_label:
        return Jx
    return np.concatenate([Jx, (K @ x)[:, None]], axis=1)


def per_sample_fil(
    fit: GLMFit,
    X,
    sigma: float,
    kind: str = "trace",
    include_label: bool = False,
    indices=None,
    chunk_size: int = 2048,
) -> np.ndarray:
    """Per-record FIL η² of output perturbation θ* + N(0, σ²I) over the data coordinates.

    kind ``"trace"`` (dFIL, default): η²_i = ‖J_S‖_F²/(dσ²), exact, O(p) per record after
    K = H⁻¹ (formula in the module docstring), vectorised in chunks of rows.
    kind ``"spectral"`` (FIL): η²_i = ‖J_S‖₂²/σ², exact SVD, O(p³) per record: use
    ``indices`` to pick a few records on wide models.
    include_label adds the ∂θ*/∂y column (d + 1 coordinates; the official code drops it).
    Returns ``(len(indices) or n,)`` float64. These values are data-dependent: keep them secret.
    """
    from textdp.bounds.fil import _sigma

    s2 = _sigma(sigma) ** 2
    n, p = X.shape
    idx = np.arange(n) if indices is None else np.asarray(indices, dtype=np.int64)
    d = p - 1 + (1 if include_label else 0)
    K = fit.hessian_inv
    if kind == "spectral":
        out = np.empty(len(idx))
        for k, i in enumerate(idx):
            J = influence_jacobian(fit, X, int(i), with_label=include_label)
            J = np.delete(J, 0, axis=1)
            out[k] = np.linalg.norm(J, 2) ** 2 / s2
        return out
    if kind != "trace":
        raise ParameterError(f"kind must be 'trace' or 'spectral', got {kind!r}")
    theta_t = fit.theta.copy()
    theta_t[0] = 0.0
    th2 = float(theta_t @ theta_t)
    Kth = K @ theta_t
    KS2 = float(np.sum(K[:, 1:] ** 2))
    out = np.empty(len(idx))
    for start in range(0, len(idx), chunk_size):
        sl = idx[start:start + chunk_size]
        Xc = X[sl]
        U = np.asarray(Xc @ K) if sp.issparse(Xc) else Xc @ K  # rows: (K x_i)ᵀ
        kx2 = np.einsum("ij,ij->i", U, U)
        cross = U @ Kth
        a, c = fit.a[sl], fit.c[sl]
        fro = a * a * kx2 * th2 + 2 * a * c * cross + c * c * KS2
        if include_label:
            fro = fro + kx2
        out[start:start + len(sl)] = fro / (d * s2)
    return out


def output_perturbation_sensitivity(n: int, lam: float, model: str = "logistic", feature_norm_bound: float = 1.0) -> float:
    """Replace-one L2 sensitivity Δ of θ* (see the module docstring): 2R/(nλ) for logistic,
    2R(R/√λ + 1)/(nλ) for least squares with |y| ≤ 1. R bounds ‖x‖ including the bias."""
    lam = _check_lam(lam)
    if int(n) < 1:
        raise ParameterError(f"n must be ≥ 1, got {n!r}")
    R = float(feature_norm_bound)
    if not math.isfinite(R) or R <= 0:
        raise ParameterError(f"feature_norm_bound must be > 0, got {feature_norm_bound!r}")
    if model == "logistic":
        L = R
    elif model == "linear":
        L = R * (R / math.sqrt(lam) + 1.0)
    else:
        raise ParameterError(f"model must be 'logistic' or 'linear', got {model!r}")
    return 2.0 * L / (int(n) * lam)


# --------------------------------------------------------------------------- the attack


def _attack_core(X, y, theta_cols: np.ndarray, lam: float, targets: np.ndarray):
    """x̂ for every target and every θ column. theta_cols: (p, T). Returns (T, k, p) and ŷ (T, k)."""
    n, p = X.shape
    Z = np.asarray(X @ theta_cols)  # (n, T)
    R = _sigmoid(Z) - y[:, None]  # residuals s_j − y_j, (n, T)
    S = np.asarray(X.T @ R) + n * lam * theta_cols  # Σ_j g_j + nλθ, (p, T)
    Xt = X[targets].toarray() if sp.issparse(X) else np.asarray(X[targets])  # (k, p)
    Rt = R[targets]  # (k, T)
    # B_i = S − g_i ; (T, k, p)
    B = S.T[:, None, :] - Rt.T[:, :, None] * Xt[None, :, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        xhat = B / B[:, :, :1]
        yhat = _sigmoid(np.einsum("tkp,pt->tk", xhat, theta_cols)) + B[:, :, 0]
    return xhat, yhat


def glm_informed_attack(X, y, theta, lam: float, targets) -> tuple[np.ndarray, np.ndarray]:
    """Balle et al. (2022) informed reconstruction of records from logistic-regression
    weights (spec A.8). The adversary knows every record but i and λ; stationarity
    Σ_j g_j + nλθ = 0 with g_j = (σ(x_jᵀθ) − y_j) x_j gives g_i = −B_i with
    B_i = Σ_{j≠i} g_j + nλθ, and the bias feature x_{i,0} = 1 fixes the scale:
    x̂_i = B_i / B_{i,0}, ŷ_i = σ(x̂_iᵀθ) + B_{i,0}.

    X ``(n, p)`` (bias first), y ``(n,)`` in {0,1}, theta ``(p,)`` (released weights; the
    attack ignores row i's own values, which are only used to form Σ_{j≠i}). targets: int
    indices ``(k,)``. Returns x̂ ``(k, p)`` and ŷ ``(k,)``; NaN where B_{i,0} = 0.
    """
    lam = _check_lam(lam)
    X, y = _check_xy(X, y, "logistic")
    t = np.atleast_1d(np.asarray(targets, dtype=np.int64))
    xh, yh = _attack_core(X, y, np.asarray(theta, dtype=np.float64)[:, None], lam, t)
    return xh[0], yh[0]


@dataclass
class AttackResult:
    """Per-target outcome of :func:`attack_experiment` (all arrays ``(k,)`` unless noted).

    mse: empirical per-coordinate MSE of x̂ over the valid noise draws (bias excluded);
    valid_draws: draws without NaN (B₀ ≈ 0 is dropped, as in the official script);
    dfil_trace: η² per target; fil_bound: 1/η² (unbiased dFIL bound);
    rdp_epsilon2 and rdp_bound: the data-independent (2, ε) value and its Theorem-1 bound
    (same for every target); below_fil: mse < fil_bound; share_below: the fraction of
    targets whose empirical MSE is below the FIL bound (the attack is not exactly unbiased,
    so a few are expected; reported, never hidden).
    """

    targets: np.ndarray
    mse: np.ndarray
    valid_draws: np.ndarray
    dfil_trace: np.ndarray
    fil_bound: np.ndarray
    rdp_epsilon2: float
    rdp_bound: float
    sigma: float
    lam: float
    trials: int
    exact_at_zero_noise: float = float("nan")

    @property
    def below_fil(self) -> np.ndarray:
        return self.mse < self.fil_bound

    @property
    def share_below(self) -> float:
        ok = np.isfinite(self.mse)
        return float(np.mean(self.below_fil[ok])) if ok.any() else float("nan")

    def summary(self) -> dict:
        ok = np.isfinite(self.mse)
        return {
            "targets": int(len(self.targets)),
            "trials": int(self.trials),
            "sigma": self.sigma,
            "lam": self.lam,
            "rdp_epsilon2": self.rdp_epsilon2,
            "rdp_mse_bound": self.rdp_bound,
            "median_fil_bound": float(np.median(self.fil_bound)),
            "median_attack_mse": float(np.median(self.mse[ok])) if ok.any() else None,
            "share_below_fil_bound": self.share_below,
            "n_below_fil_bound": int(np.sum(self.below_fil[ok])),
            "max_reconstruction_error_at_zero_noise": self.exact_at_zero_noise,
        }


def attack_experiment(
    X,
    y,
    lam: float,
    sigma: float,
    trials: int = 1000,
    targets=None,
    n_targets: int = 200,
    rng=None,
    feature_norm_bound: float | None = None,
    diam: float = 1.0,
    block: int = 64,
    progress=None,
) -> AttackResult:
    """Run the informed GLM attack on output-perturbed logistic regression over ``trials``
    noise draws θ* + N(0, σ²I) (noise from :func:`textdp.noise.gaussian`) and compare the
    per-target empirical MSE with the dFIL bound 1/η² and the RDP bound (Guo et al. Fig. 3).

    X ``(n, p)`` with bias column first, y in {0,1}; targets: indices, else ``n_targets``
    drawn without replacement from ``rng``; feature_norm_bound R (default: the largest row
    norm of X, which makes the RDP number data-dependent; pass the domain bound for a real
    guarantee); diam: per-coordinate data range for the RDP bound. ``progress(k, total)`` is
    called after each block of draws. Raises ParameterError for σ ≤ 0, λ ≤ 0, trials < 1,
    n_targets < 1 or targets outside [0, n).
    """
    from textdp.bounds.fil import _sigma, fil_mse_bound
    from textdp.bounds.rdp import epsilon2_gaussian, rdp_mse_lower_bound
    from textdp.noise import gaussian, make_rng

    sigma = _sigma(sigma)
    lam = _check_lam(lam)
    if int(trials) < 1:
        raise ParameterError(f"trials must be ≥ 1, got {trials!r}")
    trials = int(trials)
    X, y = _check_xy(X, y, "logistic")
    rng = make_rng(rng)
    n, p = X.shape
    fit = fit_glm(X, y, lam, "logistic")
    if targets is None:
        if int(n_targets) < 1:
            raise ParameterError(f"n_targets (the number of records attacked) must be ≥ 1, got {n_targets!r}")
        k = min(int(n_targets), n)
        targets = np.sort(rng.choice(n, size=k, replace=False))
    t = np.atleast_1d(np.asarray(targets, dtype=np.int64))
    if t.size == 0 or t.min() < 0 or t.max() >= n:
        raise ParameterError(f"targets must be a non-empty list of record indices in [0, {n}), got "
                             f"{t.size} indices" + (f" from {t.min()} to {t.max()}" if t.size else ""))
    Xt = X[t].toarray() if sp.issparse(X) else np.asarray(X[t])
    # exactness check at zero noise
    xh0, _ = _attack_core(X, y, fit.theta[:, None], lam, t)
    exact = float(np.nanmax(np.abs(xh0[0] - Xt)))
    sse = np.zeros(len(t))
    valid = np.zeros(len(t), dtype=np.int64)
    done = 0
    while done < trials:
        b = min(block, trials - done)
        noise = gaussian(sigma, (p, b), rng)
        xh, _ = _attack_core(X, y, fit.theta[:, None] + noise, lam, t)
        err = np.sum((xh[:, :, 1:] - Xt[None, :, 1:]) ** 2, axis=2) / (p - 1)  # (b, k)
        good = np.isfinite(err)
        sse += np.where(good, err, 0.0).sum(axis=0)
        valid += good.sum(axis=0)
        done += b
        if progress is not None:
            progress(done, trials)
    with np.errstate(invalid="ignore", divide="ignore"):
        mse = np.where(valid > 0, sse / np.maximum(valid, 1), np.nan)
    eta2 = per_sample_fil(fit, X, sigma, indices=t)
    R = float(_row_norms(X).max()) if feature_norm_bound is None else float(feature_norm_bound)
    eps2 = epsilon2_gaussian(sigma, output_perturbation_sensitivity(n, lam, "logistic", R))
    return AttackResult(t, mse, valid, eta2, fil_mse_bound(eta2), eps2, rdp_mse_lower_bound(eps2, diam),
                        sigma, lam, trials, exact)
