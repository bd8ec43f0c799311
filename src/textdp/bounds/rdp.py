"""Theorem 1 of Guo et al. (ICML 2022): MSE lower bounds for (2, ε)-RDP mechanisms,
and conversions of common guarantees to their order-2 Rényi value.

Threat model (spec A.1): an *informed* adversary knows every training record but the
target ``z ∈ Z ⊂ R^d`` and the mechanism; it sees the output ``h`` and returns ``ẑ``.
Success is the per-coordinate mean squared error ``E‖ẑ − z‖² / d``. The neighbouring
relation that matters is **replace-one** (only ``z`` changes), so every ε here must be
the replace-one (2, ε)-RDP value of the mechanism, per record.

Derivation (Hammersley–Chapman–Robbins, spec A.3): with μ(z) = E[ẑ] and χ²(P‖Q) =
exp(D₂(P‖Q)) − 1 ≤ e^ε − 1,

    Var_z(ẑ_i) ≥ (μ_i(z′) − μ_i(z))² / (e^ε − 1)   for every z, z′ ∈ Z.

For an unbiased attack pick z′ with |z′_i − z_i| ≥ diam_i/2:

    E‖ẑ − z‖²/d ≥ (1/d) Σ_i diam_i² / (4 (e^ε − 1)).

Biased form (paper's γ_i, reconstructed, see spec A.3(b)): the mean moves by at least
``diam_i/2 − γ_i`` (``gamma_mode="variation"``: γ_i bounds the change of the bias
between z and z′) or ``diam_i/2 − 2γ_i`` (``gamma_mode="absolute"``: γ_i bounds |b_i|
itself); the term is clipped at 0.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from textdp.errors import ParameterError

__all__ = [
    "rdp_mse_lower_bound",
    "mse_to_std",
    "mia_advantage_bound",
    "epsilon2_gaussian",
    "epsilon2_from_pure_dp",
    "epsilon2_from_approx_dp",
    "epsilon2_from_rdp_curve",
    "epsilon2_from_guarantee",
    "check_epsilon",
    "check_diam",
]


def check_epsilon(eps, name: str = "epsilon", allow_zero: bool = True) -> float:
    """A finite (or +inf) non-negative ε; ParameterError for NaN, negative or non-numbers."""
    try:
        v = float(eps)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {eps!r}") from None
    if math.isnan(v) or v < 0 or (v == 0 and not allow_zero):
        raise ParameterError(f"{name} must be {'≥' if allow_zero else '>'} 0, got {eps!r}")
    return v


def check_diam(diam) -> np.ndarray:
    """``diam`` as a 1-D float64 array of positive finite per-coordinate diameters."""
    d = np.atleast_1d(np.asarray(diam, dtype=np.float64))
    if d.ndim != 1 or d.size == 0:
        raise ParameterError("diam must be a positive number or a 1-D list of per-coordinate diameters")
    if not np.all(np.isfinite(d)) or np.any(d <= 0):
        raise ParameterError(f"every diam must be a positive finite number (the width of the data range), got {diam!r}")
    return d


def rdp_mse_lower_bound(
    epsilon: float,
    diam: float | Sequence[float] | np.ndarray = 1.0,
    gamma: float | Sequence[float] | np.ndarray | None = None,
    gamma_mode: str = "variation",
) -> float:
    """Lower bound on any reconstruction attack's per-coordinate MSE (Guo et al. 2022, Thm 1).

    Parameters
    ----------
    epsilon: the mechanism's replace-one (2, ε)-RDP value **per record** (float ≥ 0; +inf allowed).
    diam: per-coordinate diameters diam_i(Z) = sup |z_i − z′_i| (a scalar for all d
        coordinates, or a ``(d,)`` array). In the units of the data; the bound is in units².
    gamma: ``None`` for an unbiased attack, else the bias slack γ_i (scalar or ``(d,)``, ≥ 0).
    gamma_mode: ``"variation"`` (γ_i bounds |b_i(z′) − b_i(z)|, term diam_i/2 − γ_i, the
        recalled printed form) or ``"absolute"`` (γ_i bounds |b_i(z)|, term diam_i/2 − 2γ_i).

    Returns
    -------
    float: ``(1/d) Σ_i max(diam_i/2 − c·γ_i, 0)² / (e^ε − 1)``; ``+inf`` at ε = 0 (no attack
    can have finite variance then) and ``0.0`` where e^ε overflows (ε ≳ 709). ``expm1`` keeps
    tiny ε accurate.

    Raises
    ------
    ParameterError: ε negative or NaN; diam ≤ 0 / non-finite; γ < 0; unknown gamma_mode.

    Example: ε = 2, diam = 100 gives 10⁴ / (4 (e² − 1)) ≈ 391.3, a standard deviation of ≈ 19.8
    (the seed's worked example).
    """
    eps = check_epsilon(epsilon)
    d = check_diam(diam)
    half = d / 2.0
    if gamma is not None:
        g = np.asarray(gamma, dtype=np.float64)
        if not np.all(np.isfinite(g)) or np.any(g < 0):
            raise ParameterError(f"gamma must be ≥ 0 and finite, got {gamma!r}")
        if gamma_mode == "variation":
            c = 1.0
        elif gamma_mode == "absolute":
            c = 2.0
        else:
            raise ParameterError(f"gamma_mode must be 'variation' or 'absolute', got {gamma_mode!r}")
        half = np.maximum(half - c * np.broadcast_to(g, half.shape), 0.0)
    num = float(np.mean(half**2))
    if eps == 0:
        return math.inf if num > 0 else 0.0
    if eps > 709.0:  # e^ε overflows a double: the bound is numerically 0
        return 0.0
    return num / math.expm1(eps)


def mse_to_std(mse: float) -> float:
    """The standard deviation √MSE implied by an MSE bound (same units as the data)."""
    return math.sqrt(mse) if math.isfinite(mse) else math.inf


def mia_advantage_bound(epsilon: float) -> float:
    """Membership-inference advantage bound of ε-DP: (e^ε − 1)/(e^ε + 1) = tanh(ε/2)
    (Humphries et al. 2020, quoted in Guo et al. §2). ε = 0.1 → 0.05 (success ≈ 53 %)."""
    eps = check_epsilon(epsilon)
    return math.tanh(eps / 2.0)


# --------------------------------------------------------------------------- conversions


def _rdp_accountant(orders, relation: str = "replace-one"):
    from dp_accounting import NeighboringRelation
    from dp_accounting.rdp import RdpAccountant

    rel = {"replace-one": NeighboringRelation.REPLACE_ONE, "add-remove": NeighboringRelation.ADD_OR_REMOVE_ONE}
    if relation not in rel:
        raise ParameterError(f"neighbours must be 'replace-one' or 'add-remove', got {relation!r}")
    return RdpAccountant(list(map(float, orders)), rel[relation])


def epsilon2_gaussian(sigma: float, sensitivity: float = 1.0, order: float = 2.0) -> float:
    """(α, ε)-RDP of the Gaussian mechanism N(f(D), σ²I) with L2 sensitivity Δ:
    ε(α) = α Δ² / (2σ²), i.e. Δ²/σ² at α = 2 (Mironov 2017, Prop. 7). Computed with
    dp-accounting's RdpAccountant on ``GaussianDpEvent(σ/Δ)``.

    Raises ParameterError for σ ≤ 0 or Δ ≤ 0.
    """
    sigma = _positive(sigma, "sigma")
    sens = _positive(sensitivity, "sensitivity")
    from dp_accounting import GaussianDpEvent

    acc = _rdp_accountant([order])
    acc.compose(GaussianDpEvent(sigma / sens))
    return float(acc._rdp[0])  # noqa: SLF001 - public as .rdp in newer versions


def epsilon2_from_pure_dp(epsilon: float) -> float:
    """Tight order-2 RDP of an arbitrary ε-DP mechanism.

    Every ε-DP pair of output laws is a post-processing of binary randomized response with
    parameter ε (Kairouz, Oh & Viswanath 2015), and Rényi divergence obeys data processing,
    so D₂ ≤ D₂(RR_ε) = log(q²/(1−q) + (1−q)²/q) with q = e^ε/(1+e^ε) ≤ ε (the seed's
    monotonicity argument, D₂ ≤ D_∞ = ε, is the looser version). Computed with
    dp-accounting's ``RandomizedResponseDpEvent(2/(e^ε+1), 2)`` under REPLACE_ONE; above
    ε = 30, where the accountant divides by a vanishing noise parameter, the same quantity
    is evaluated in log space.
    """
    eps = check_epsilon(epsilon)
    if eps == 0:
        return 0.0
    if math.isinf(eps):
        return math.inf
    if eps <= 30.0:
        from dp_accounting import RandomizedResponseDpEvent

        acc = _rdp_accountant([2.0])
        acc.compose(RandomizedResponseDpEvent(noise_parameter=2.0 / (math.exp(eps) + 1.0), num_buckets=2))
        return float(acc._rdp[0])  # noqa: SLF001
    # log(q²/(1−q) + (1−q)²/q) with log q = −log1p(e^−ε), log(1−q) = −ε − log1p(e^−ε)
    lq = -math.log1p(math.exp(-eps))
    l1q = -eps + lq
    return float(np.logaddexp(2 * lq - l1q, 2 * l1q - lq))


def epsilon2_from_approx_dp(epsilon: float, delta: float, assume: str | None = None) -> float:
    """Order-2 RDP of a mechanism stated as (ε, δ)-DP, **only** with a named assumption.

    A general (ε, δ)-DP mechanism with δ > 0 has **no** finite Rényi divergence (it may
    reveal the record with probability δ), so no reconstruction bound follows from (ε, δ)
    alone. ``assume`` must say what the mechanism is:

    * ``"gaussian"``: a Gaussian mechanism calibrated tightly to (ε, δ) (analytic Gaussian,
      Balle & Wang 2018, via ``dp_accounting.get_sigma_gaussian``); returns 1/σ² (unit
      sensitivity). Only right when the mechanism *is* that Gaussian: for textdp's own
      mechanisms use their exact curves (:mod:`textdp.bounds.curves`), e.g. HDP-LDA's
      (10, 1e-6) guarantee comes from discrete Laplace noise, whose ε₂ is far larger.
    * ``"any"``: no assumption; returns +inf (bound 0).

    Raises ParameterError without ``assume`` (the message says why), for ε ≤ 0/NaN, δ
    outside (0, 1) or an unknown ``assume``.
    """
    from textdp.bounds.curves import NO_BOUND_FROM_APPROX_DP

    eps = check_epsilon(epsilon, allow_zero=False)
    try:
        dl = float(delta)
    except (TypeError, ValueError):
        raise ParameterError(f"delta must be a number in (0, 1), got {delta!r}") from None
    if not (0.0 < dl < 1.0):
        raise ParameterError(f"delta must be in (0, 1), got {delta!r}; for pure ε-DP leave delta out")
    if assume is None:
        raise ParameterError(f"{NO_BOUND_FROM_APPROX_DP}; say which mechanism gave it (assume='gaussian', or an "
                             "exact curve from textdp.bounds.curves.mechanism_curve)")
    if assume == "any":
        return math.inf
    if assume != "gaussian":
        raise ParameterError(f"assume must be 'gaussian' or 'any', got {assume!r}")
    if math.isinf(eps):
        return math.inf
    import dp_accounting

    sigma = dp_accounting.get_sigma_gaussian(eps, dl)
    return epsilon2_gaussian(sigma, 1.0)


def epsilon2_from_rdp_curve(orders: Iterable[float], epsilons: Iterable[float]) -> float:
    """ε at order 2 from an RDP curve {(α, ε(α))}.

    Exact if α = 2 is on the curve. Otherwise Rényi divergence is non-decreasing in α
    (van Erven & Harremoës 2014), so ε(2) ≤ min_{α ≥ 2} ε(α); orders below 2 give no upper
    bound. Raises ParameterError when no order ≥ 2 is present or a value is negative/NaN.
    """
    o = np.asarray(list(orders), dtype=np.float64)
    e = np.asarray(list(epsilons), dtype=np.float64)
    if o.shape != e.shape or o.size == 0:
        raise ParameterError("the RDP curve needs equally long, non-empty orders and epsilons")
    if np.any(np.isnan(e)) or np.any(e < 0) or np.any(np.isnan(o)) or np.any(o <= 1):
        raise ParameterError("RDP orders must be > 1 and epsilons ≥ 0")
    ok = o >= 2.0
    if not ok.any():
        raise ParameterError("the RDP curve has no order ≥ 2; compute it at order 2 (e.g. --rdp-order 2)")
    return float(e[ok].min())


def epsilon2_from_guarantee(guarantee, mechanism=None) -> float:
    """Order-2 RDP value of a :mod:`textdp.accounting.guarantees` object.

    RDP: from the curve; PureDP, LocalDP and ApproxDP with δ = 0: through the worst ε-DP
    mechanism (binary randomized response, valid for every ε-DP mechanism). ApproxDP with
    δ > 0 needs ``mechanism`` (a :class:`textdp.bounds.curves.MechanismCurve`, e.g. HDP-LDA's
    discrete Laplace); without it ParameterError says why (no bound follows from (ε, δ)).
    With ``mechanism`` given, its exact curve is used whatever the guarantee.
    """
    from textdp.accounting.guarantees import RDP, ApproxDP, LocalDP, PureDP
    from textdp.bounds.curves import NO_BOUND_FROM_APPROX_DP

    if mechanism is not None:
        return mechanism.epsilon2
    if isinstance(guarantee, RDP):
        return epsilon2_from_rdp_curve(guarantee.orders, guarantee.epsilons)
    if isinstance(guarantee, ApproxDP):
        if guarantee.delta == 0:
            return epsilon2_from_pure_dp(guarantee.epsilon)
        raise ParameterError(f"{guarantee.describe()}: {NO_BOUND_FROM_APPROX_DP}; pass mechanism= "
                             "(textdp.bounds.curves.mechanism_curve)")
    if isinstance(guarantee, (PureDP, LocalDP)):
        return epsilon2_from_pure_dp(guarantee.epsilon)
    raise ParameterError(f"no (2, ε)-RDP value for a {guarantee.kind} guarantee")


def _positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a positive number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ParameterError(f"{name} must be a positive finite number, got {x!r}")
    return v
