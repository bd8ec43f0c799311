"""How likely is a reconstruction to succeed? Upper bounds on reconstruction success (ReRo).

Guo et al.'s bounds (:mod:`textdp.bounds.rdp`, :mod:`textdp.bounds.fil`) bound the *error* of
an attack. Hayes, Mahloujifar & Balle, "Bounding Training Data Reconstruction in DP-SGD"
(NeurIPS 2023), and Kaissis, Hayes, Ziller & Rueckert, "Bounding data reconstruction
attacks with the hypothesis testing interpretation of differential privacy" (2023), bound
its *success probability* instead, through the hypothesis-testing view of DP.

Game (reconstruction robustness, Balle, Cherubin & Hayes 2022). An informed adversary knows
every record but the target ``z``, which is drawn from a prior ``π``; it sees the output of the
mechanism run with ``z`` in and guesses ``ẑ``. Success: ``ẑ`` is within ``η`` of ``z``. The
*baseline* ``κ = sup_{z₀} P_{Z∼π}[ρ(Z, z₀) ≤ η]`` is the success of the best guess made without
seeing the output (exact recovery, ``η = 0``: ``κ = max_z π(z)``; ``1/|V|`` for a uniform prior
over ``|V|`` candidates).

Bound. Let ``ν`` be the output law for a reference input that does not depend on ``z`` (the
dataset without the target, or with a fixed other record) and ``ν_z`` the law with ``z``. If one
trade-off function ``f`` lower-bounds ``T(ν, ν_z)`` for every ``z`` (``f``-DP, Dong, Roth & Su
2022), then every attack succeeds with probability at most

    ReRo(κ) = 1 − f(κ) = sup { ν_z(E) : ν(E) ≤ κ },

the largest power at level κ of a test of ``ν`` against ``ν_z`` (Hayes et al. call it the
blow-up function). Derivation (reconstructed; the property it must have is tested): with
``E_z`` the outputs on which the attack succeeds for ``z``, ``α_z = ν(E_z)`` has
``E_{z∼π}[α_z] = E_{y∼ν}[π(ball around the guess)] ≤ κ``; success is ``E_z[ν_z(E_z)] ≤
E_z[1 − f(α_z)] ≤ 1 − f(E_z α_z) ≤ 1 − f(κ)``, because 1 − f is concave and non-decreasing.

Computation. ``1 − f(κ) = min(1, inf_ε (e^ε κ + δ(ε)))`` over all real ε, with ``δ(ε)`` the
hockey-stick divergence of ``(ν_z, ν)``, i.e. the privacy-loss distribution (PLD) of the pair.
textdp takes the PLD from dp-accounting (``dp_accounting.pld``, pessimistic discretisation,
so every δ(ε) is an upper bound and so is the result) and evaluates the infimum exactly by
the Neyman–Pearson lemma: the best test rejects the largest privacy losses first, the last
loss level partly (:func:`rero_bound_from_pld`). Mechanisms (:func:`rero_mechanism`):

==========================  =========================================  ===========================================
mechanism                   parameters                                 pair of laws (ν, ν_z)
==========================  =========================================  ===========================================
``laplace``                 ε = Δ₁/b per release, R releases           Lap(0, b)^R, Lap(Δ₁, b)^R
``gaussian``                σ, L2 sensitivity Δ₂, R releases           N(0, σ²)^R, N(Δ₂, σ²)^R
``dpsgd``                   noise multiplier σ, rate q, T steps        N(0, σ²)^T, ((1 − q) N(0, σ²) + q N(1, σ²))^T
``randomized-response``     ε per report, k categories                 k-RR on x₀ and on x ≠ x₀
``dp``                      ε, δ (any (ε, δ)-DP mechanism)             closed form (below)
==========================  =========================================  ===========================================

Neighbours: Laplace and Gaussian: two inputs whose query values differ by the sensitivity
(whatever relation the sensitivity is stated for); randomized response: replace-one (one
report changes); DP-SGD: Poisson subsampling with rate q, the reference is training without
the target (add/remove one example, Hayes et al.) and the target's clipped gradient has
norm at most C, noise std σC.

Closed forms (tested against the PLD route): μ-GDP (the Gaussian mechanism with
μ = Δ₂√R/σ) gives ``Φ(Φ⁻¹(κ) + μ)`` (Hayes et al.; Kaissis et al.); (ε, δ)-DP gives
``min(1, e^ε κ + δ, 1 − e^{−ε}(1 − δ − κ))``, the trade-off of (ε, δ)-DP (Kairouz, Oh &
Viswanath 2015; Dong, Roth & Su 2022, §2), reached by binary randomized response; k-ary
randomized response and the Laplace mechanism have the piecewise forms of
:func:`randomized_response_rero_bound` and :func:`laplace_rero_bound`.

Token sanitizers (:func:`token_reconstruction`): the exact success of the best attacker who
sees one sanitized token is the Bayes optimum ``Σ_y max_x π(x) p(y|x)`` of
:func:`textdp.attacks.bayes.bayes_optimum` (reused, the one place textdp computes it); it is
placed at ``κ = max π`` beside the bound of the mechanism's plain-DP ε over the prior's words.

Units: κ and every bound are probabilities in [0, 1], per protected record (one report, one
token, one training example), for the whole release (all R releases, all T steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from textdp.errors import InputError, MissingPackageError, ParameterError

__all__ = [
    "RERO_MECHANISMS",
    "ReRoBound",
    "rero_mechanism",
    "rero_bound",
    "rero_bound_from_pld",
    "gaussian_rero_bound",
    "approx_dp_rero_bound",
    "laplace_rero_bound",
    "randomized_response_rero_bound",
    "check_kappa",
    "TokenReconstruction",
    "token_reconstruction",
    "DEFAULT_DISCRETIZATION",
]

#: names accepted by :func:`rero_mechanism` (and ``textdp bounds rero --mechanism``)
RERO_MECHANISMS = ("laplace", "gaussian", "dpsgd", "randomized-response", "dp")

#: privacy-loss discretisation interval of the PLDs (dp-accounting's default): the bound is an
#: upper bound for any value, within about 1e-4 of the exact one at this value (tests)
DEFAULT_DISCRETIZATION = 1e-4

#: at most about this many loss levels per release: a coarser grid is used when one release's losses
#: span more (a Gaussian with Δ/σ = μ spans about 20μ), so a tiny σ costs neither minutes nor gigabytes
MAX_LEVELS = 400_000

#: smallest σ/Δ the Gaussian PLDs are built for (μ = Δ/σ ≤ 50 per release): below it dp-accounting's
#: construction takes gigabytes (σ/Δ = 0.001: 2.5 GB, 26 s of CPU) and the answer is known anyway
MIN_NOISE = 0.02


def _grid(disc: float, width: float) -> float:
    """The discretisation used: ``disc``, or ``width / MAX_LEVELS`` when one release's losses span
    ``width`` and would need more levels (still a pessimistic PLD, hence still an upper bound)."""
    return max(disc, width / MAX_LEVELS)


# --------------------------------------------------------------------------- checks


def check_kappa(kappa) -> np.ndarray:
    """κ (the baseline success of the prior) as a float64 array, every value in (0, 1).

    ParameterError (one line) for anything else: κ = 0 would be a prior no guess can hit, κ = 1
    a target known in advance."""
    try:
        k = np.asarray(kappa, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"kappa (the baseline success of the prior) must be numbers in (0, 1), got {kappa!r}") from None
    if k.size == 0:
        raise ParameterError("kappa (the baseline success of the prior) needs at least one value in (0, 1)")
    bad = ~((k > 0) & (k < 1))
    if bad.any():
        v = float(k.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]])
        raise ParameterError(f"kappa (the baseline success of the prior) must be in (0, 1), got {v:g}")
    return k


def _positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a positive finite number, got {x!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ParameterError(f"{name} must be a positive finite number, got {x!r}")
    return v


def _count(x, name: str, minimum: int = 1) -> int:
    if isinstance(x, bool):
        raise ParameterError(f"{name} must be a whole number ≥ {minimum}, got {x!r}")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a whole number ≥ {minimum}, got {x!r}") from None
    if not math.isfinite(v) or v < minimum or v != int(v):
        raise ParameterError(f"{name} must be a whole number ≥ {minimum}, got {x!r}")
    return int(v)


def _rate(q) -> float:
    try:
        v = float(q)
    except (TypeError, ValueError):
        raise ParameterError(f"sampling_rate q must be in (0, 1], got {q!r}") from None
    if not (0.0 < v <= 1.0):
        raise ParameterError(f"sampling_rate q (the Poisson sampling probability) must be in (0, 1], got {q!r}")
    return v


def _delta(d) -> float:
    try:
        v = float(d)
    except (TypeError, ValueError):
        raise ParameterError(f"delta must be a number in [0, 1), got {d!r}") from None
    if not (0.0 <= v < 1.0):
        raise ParameterError(f"delta must be in [0, 1), got {d!r}")
    return v


# --------------------------------------------------------------------------- closed forms


def gaussian_rero_bound(kappa, mu: float) -> np.ndarray:
    """ReRo bound of a μ-GDP mechanism: ``Φ(Φ⁻¹(κ) + μ)`` (Hayes et al. 2023, the Gaussian
    mechanism with μ = Δ₂/σ; Kaissis et al. 2023 for any μ-GDP mechanism).

    ``kappa``: baseline success(es) in (0, 1), any shape; ``mu`` ≥ 0 (R Gaussian releases with
    noise σ and L2 sensitivity Δ₂: μ = Δ₂√R/σ). Returns float64 of ``kappa``'s shape.
    ParameterError for κ outside (0, 1) or μ < 0."""
    from scipy.stats import norm

    k = check_kappa(kappa)
    try:
        m = float(mu)
    except (TypeError, ValueError):
        raise ParameterError(f"mu must be a number ≥ 0, got {mu!r}") from None
    if not (m >= 0) or math.isnan(m):
        raise ParameterError(f"mu (the GDP parameter) must be ≥ 0, got {mu!r}")
    return norm.cdf(norm.ppf(k) + m)


def approx_dp_rero_bound(kappa, epsilon: float, delta: float = 0.0) -> np.ndarray:
    """ReRo bound of any (ε, δ)-DP mechanism: ``min(1, e^ε κ + δ, 1 − e^{−ε}(1 − δ − κ))``.

    1 − f at κ for the trade-off function of (ε, δ)-DP, f(α) = max(0, 1 − δ − e^ε α,
    e^{−ε}(1 − δ − α)) (Kairouz, Oh & Viswanath 2015; Dong, Roth & Su 2022, §2); binary
    randomized response (δ = 0) attains it, so no smaller bound holds for every ε-DP mechanism.
    ``kappa`` in (0, 1), any shape; ``epsilon`` ≥ 0 (+inf gives 1); ``delta`` in [0, 1).
    Returns float64 of ``kappa``'s shape."""
    k = check_kappa(kappa)
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"epsilon must be a number ≥ 0, got {epsilon!r}") from None
    if not (e >= 0):
        raise ParameterError(f"epsilon must be ≥ 0, got {epsilon!r}")
    d = _delta(delta)
    if math.isinf(e):
        return np.ones_like(k)
    with np.errstate(over="ignore"):
        a = np.exp(e) * k + d
    b = 1.0 - math.exp(-e) * (1.0 - d - k)
    return np.minimum(1.0, np.minimum(a, b))


def laplace_rero_bound(kappa, epsilon: float) -> np.ndarray:
    """Exact ReRo bound of one Laplace release with ε = Δ₁/b (shift Δ₁ of Lap(0, b)).

    The likelihood ratio of Lap(Δ₁, b) to Lap(0, b) increases with the output, so the best
    test at level κ rejects above a threshold (Dong, Roth & Su 2022, Laplace trade-off):
    ``e^ε κ`` for κ ≤ e^{−ε}/2, ``1 − e^{−ε}/(4κ)`` for e^{−ε}/2 < κ ≤ 1/2, and
    ``1 − e^{−ε}(1 − κ)`` above. ``kappa`` in (0, 1), any shape; ``epsilon`` > 0.
    Returns float64 of ``kappa``'s shape. (R > 1 releases: use :func:`rero_mechanism`.)"""
    k = check_kappa(kappa)
    e = _positive(epsilon, "epsilon")
    low = k <= math.exp(-e) / 2
    mid = (~low) & (k <= 0.5)
    out = 1.0 - math.exp(-e) * (1.0 - k)
    out = np.where(mid, 1.0 - math.exp(-e) / (4.0 * np.where(mid, k, 1.0)), out)
    out = np.where(low, math.exp(e) * k, out)
    return np.minimum(out, 1.0)


def randomized_response_rero_bound(kappa, epsilon: float, categories: int = 2) -> np.ndarray:
    """Exact ReRo bound of k-ary randomized response with ε per report (replace-one).

    k-RR keeps the input with probability p = e^ε r and reports each other category with
    r = 1/(e^ε + k − 1) (Warner 1965; Kairouz, Oh & Viswanath 2016). Testing input x₀ against
    x: the likelihood ratio is e^ε on output x (ν-mass r), 1 on the k − 2 other outputs (mass
    (k − 2) r) and e^{−ε} on x₀ (mass p). Rejecting in that order,

        ReRo(κ) = e^ε κ                                   κ ≤ r
                = p + (κ − r)                             r < κ ≤ (k − 1) r
                = p + (k − 2) r + e^{−ε} (κ − (k − 1) r)  above (at most 1).

    k = 2 is the (ε, 0)-DP curve of :func:`approx_dp_rero_bound`. ``kappa`` in (0, 1), any
    shape; ``epsilon`` > 0; ``categories`` k ≥ 2. Returns float64 of ``kappa``'s shape."""
    k = check_kappa(kappa)
    e = _positive(epsilon, "epsilon")
    c = _count(categories, "categories", 2)
    r = 1.0 / (math.exp(e) + c - 1) if e < 700 else 0.0
    p = 1.0 - (c - 1) * r
    out = np.where(k <= r, math.exp(min(e, 700)) * k,
                   np.where(k <= (c - 1) * r, p + (k - r), p + (c - 2) * r + math.exp(-e) * (k - (c - 1) * r)))
    return np.minimum(out, 1.0)


# --------------------------------------------------------------------------- from a PLD


def _dense(pmf):
    """(losses ascending, probabilities, infinity mass) of a dp-accounting PLD pmf."""
    try:
        d = pmf.to_dense_pmf()
        disc = float(d._discretization)  # noqa: SLF001 - dp-accounting keeps the dense arrays private
        losses = (np.arange(d.size) + int(d._lower_loss)) * disc  # noqa: SLF001
        probs = np.asarray(d._probs, dtype=np.float64)  # noqa: SLF001
        inf_mass = float(d._infinity_mass)  # noqa: SLF001
    except AttributeError as e:  # pragma: no cover - a dp-accounting release that renamed its fields
        raise MissingPackageError(f"this dp-accounting version stores its privacy-loss distribution differently "
                                  f"({e}); pip install 'dp-accounting>=0.4,<0.7'") from None
    return losses, probs, inf_mass


def _power(losses: np.ndarray, probs: np.ndarray, inf_mass: float, kappa: np.ndarray) -> np.ndarray:
    """Largest power at level κ of a test between the pair of laws behind one PLD pmf.

    The pmf is the law of the loss L = ln(ν_z/ν) under ν_z (mass ``probs`` at ``losses``, and
    ``inf_mass`` where ν has none). Under ν the same level set has mass ``probs·e^{−L}``. The
    Neyman–Pearson test takes the infinite loss (free), then the largest losses while their
    ν-mass fits in κ, then a fraction of the next level. Equals ``inf_{t>0} t κ +
    Σ (1 − t e^{−L})₊ p + inf_mass`` (LP duality), i.e. ``inf_ε e^ε κ + δ(ε)``."""
    Lr = losses[::-1]
    pr = np.maximum(probs[::-1], 0.0)  # FFT composition leaves rounding noise of either sign near 0
    with np.errstate(divide="ignore", over="ignore"):
        m = np.exp(np.minimum(np.log(pr) - Lr, 700.0))  # ν-mass of each level, p·e^{−L} (0 where p = 0)
    under_ref = np.cumsum(m)  # ν-mass of the top levels
    under_alt = np.cumsum(pr)  # ν_z-mass of the same levels
    j = np.minimum(np.searchsorted(under_ref, kappa, side="left"), len(Lr) - 1)
    before_ref = np.where(j > 0, under_ref[np.maximum(j - 1, 0)], 0.0)
    before_alt = np.where(j > 0, under_alt[np.maximum(j - 1, 0)], 0.0)
    # the level that straddles κ is taken in part: the share (κ − before)/m_j of its ν-mass, hence of its p_j
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.clip(np.where(m[j] > 0, (kappa - before_ref) / m[j], 1.0), 0.0, 1.0)
    out = inf_mass + before_alt + share * pr[j]
    out = np.where(kappa >= under_ref[-1], inf_mass + under_alt[-1], out)
    return np.clip(out, 0.0, 1.0)


def rero_bound_from_pld(pld, kappa, adjacency: str = "both") -> np.ndarray:
    """ReRo bound ``1 − f(κ)`` from a dp-accounting ``PrivacyLossDistribution``.

    ``pld``: a ``dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution``. Its
    REMOVE pmf is the pair (ν_z = law with the record, ν = law without it); its ADD pmf the
    reversed pair. ``adjacency``: ``"remove"`` (the reference is the dataset without the target:
    DP-SGD, Hayes et al.), ``"add"``, or ``"both"`` (the larger of the two: valid whatever the
    reference; default; for symmetric PLDs the three agree). ``kappa``: baseline success(es)
    in (0, 1), any shape. Returns float64 of ``kappa``'s shape, in [κ, 1] up to discretisation.

    Exact for the discretised PLD (the Neyman–Pearson test over its loss levels; equal to
    ``min(1, inf_ε e^ε κ + δ(ε))`` with dp-accounting's δ(ε), checked in the tests); with a
    pessimistic PLD (dp-accounting's default) every δ(ε) is an upper bound, so the result is
    an upper bound on the true ReRo bound. ParameterError for κ outside (0, 1) or an unknown
    ``adjacency``."""
    k = check_kappa(kappa)
    if adjacency not in ("remove", "add", "both"):
        raise ParameterError(f"adjacency must be 'remove', 'add' or 'both', got {adjacency!r}")
    pmfs = []
    if adjacency in ("remove", "both"):
        pmfs.append(pld._pmf_remove)  # noqa: SLF001 - the two pmfs are not exposed publicly
    if adjacency in ("add", "both") and not (adjacency == "both" and pld._symmetric):  # noqa: SLF001
        pmfs.append(pld._pmf_add)  # noqa: SLF001
    flat = k.reshape(-1)
    out = np.max([_power(*_dense(p), flat) for p in pmfs], axis=0)
    return out.reshape(k.shape)


# --------------------------------------------------------------------------- named mechanisms


@dataclass
class ReRoBound:
    """A named mechanism with its parameters; :meth:`bound` gives its ReRo bound at κ.

    ``describe``: one human line; ``neighbours``: the pair of inputs the bound compares;
    ``source``: how it is computed (dp-accounting PLD with its discretisation, or a closed
    form); ``params``: the parameters as given (JSON-ready)."""

    mechanism: str
    params: dict
    describe: str
    neighbours: str
    source: str
    _fn: Callable[[np.ndarray], np.ndarray] = field(repr=False, default=None)

    def bound(self, kappa) -> np.ndarray:
        """ReRo bound at ``kappa`` (in (0, 1), any shape): float64 of its shape, probabilities."""
        k = check_kappa(kappa)
        return np.asarray(self._fn(k), dtype=np.float64).reshape(k.shape)

    def to_dict(self) -> dict:
        return {"mechanism": self.mechanism, **self.params, "neighbours": self.neighbours, "source": self.source,
                "describe": self.describe}


def _pld_module():
    try:
        from dp_accounting.pld import privacy_loss_distribution as pld
    except ImportError:  # pragma: no cover - a core dependency
        raise MissingPackageError("dp-accounting is needed for ReRo bounds; pip install dp-accounting") from None
    return pld


def rero_mechanism(name: str, *, epsilon: float | None = None, delta: float | None = None,
                   sigma: float | None = None, sensitivity: float | None = None, releases: int | None = None,
                   sampling_rate: float | None = None, steps: int | None = None, categories: int | None = None,
                   discretization: float = DEFAULT_DISCRETIZATION) -> ReRoBound:
    """Build the ReRo bound of a named mechanism (:data:`RERO_MECHANISMS`).

    * ``laplace``: ``epsilon`` = Δ₁/b per release, ``releases`` R (default 1). PLD of
      dp-accounting's Laplace mechanism (scale 1/ε, sensitivity 1), composed R times.
    * ``gaussian``: ``sigma`` (noise std), L2 ``sensitivity`` Δ₂ (default 1), ``releases`` R.
    * ``dpsgd``: ``sigma`` = noise multiplier (noise std / clip norm C), ``sampling_rate`` q in
      (0, 1] (Poisson subsampling), ``steps`` T. The pair of Hayes et al.: N(0, σ²)^T
      against ((1 − q) N(0, σ²) + q N(1, σ²))^T, the REMOVE pmf of dp-accounting's subsampled
      Gaussian composed T times (the reference is training without the target).
    * ``randomized-response``: ``epsilon`` per report, ``categories`` k ≥ 2 (default 2);
      dp-accounting's randomized response with noise parameter k/(e^ε + k − 1), replace-one.
    * ``dp``: ``epsilon``, ``delta`` (default 0): the closed form for every (ε, δ)-DP
      mechanism (:func:`approx_dp_rero_bound`), no PLD.

    ``discretization``: privacy-loss interval of the PLDs (smaller: tighter and slower); when one
    release's losses would need more than :data:`MAX_LEVELS` levels at that interval (Gaussian
    and DP-SGD with Δ/σ above 2, Laplace with ε above 20, at 1e-4) a coarser grid is used and
    named in ``source``.
    Parameters a mechanism does not use are refused (ParameterError naming them).
    ParameterError for σ ≤ 0, ε ≤ 0, q outside (0, 1], T or R < 1, k < 2, δ outside [0, 1), and for
    σ/Δ below :data:`MIN_NOISE` (Gaussian, DP-SGD: the PLD would take gigabytes; the message gives
    the bound's known limit).
    Cost: one PLD (about 1 s for a Gaussian at 1e-4, T-fold composition by FFT in well under
    a second for T = 10⁴ at q = 0.004).
    """
    given = {"epsilon": epsilon, "delta": delta, "sigma": sigma, "sensitivity": sensitivity, "releases": releases,
             "sampling_rate": sampling_rate, "steps": steps, "categories": categories}
    allowed = {"laplace": {"epsilon", "releases"},
               "gaussian": {"sigma", "sensitivity", "releases"},
               "dpsgd": {"sigma", "sampling_rate", "steps"},
               "randomized-response": {"epsilon", "categories"},
               "dp": {"epsilon", "delta"}}
    needed = {"laplace": ("epsilon",), "gaussian": ("sigma",), "dpsgd": ("sigma", "sampling_rate", "steps"),
              "randomized-response": ("epsilon",), "dp": ("epsilon",)}
    if name not in allowed:
        raise ParameterError(f"unknown mechanism {name!r}; known: {', '.join(RERO_MECHANISMS)}")
    extra = sorted(k for k, v in given.items() if v is not None and k not in allowed[name])
    if extra:
        raise ParameterError(f"{name} takes no {', '.join(extra)} (it uses: {', '.join(sorted(allowed[name]))})")
    missing = [k for k in needed[name] if given[k] is None]
    if missing:
        raise ParameterError(f"{name} needs {', '.join(missing)}")
    disc = _positive(discretization, "discretization")
    R = _count(releases, "releases") if releases is not None else 1
    rtxt = f", {R} releases" if R > 1 else ""
    if name == "dp":
        e = _positive(epsilon, "epsilon")
        d = _delta(delta) if delta is not None else 0.0
        return ReRoBound(name, {"epsilon": e, "delta": d}, f"any ({e:g}, {d:g})-DP mechanism",
                         "any pair of neighbouring inputs", "closed form (trade-off of (ε, δ)-DP)",
                         lambda k: approx_dp_rero_bound(k, e, d))
    pldm = _pld_module()
    if name == "laplace":
        e = _positive(epsilon, "epsilon")
        disc = _grid(disc, 2.0 * e)  # Laplace losses lie in [−ε, ε]
        pld = pldm.from_laplace_mechanism(1.0 / e, 1.0, value_discretization_interval=disc)
        if R > 1:
            pld = pld.self_compose(R)
        return ReRoBound(name, {"epsilon": e, "releases": R}, f"Laplace mechanism, ε = {e:g} per release{rtxt}",
                         "two inputs whose query values differ by the L1 sensitivity",
                         f"dp-accounting PLD (pessimistic, discretisation {disc:g})",
                         lambda k: rero_bound_from_pld(pld, k, "both"))
    if name == "gaussian":
        s = _positive(sigma, "sigma")
        sens = _positive(sensitivity, "sensitivity") if sensitivity is not None else 1.0
        if s / sens < MIN_NOISE:
            raise ParameterError(f"sigma/sensitivity = {s / sens:.3g} is below {MIN_NOISE:g} (μ = Δ/σ above "
                                 f"{1 / MIN_NOISE:g}): its privacy-loss distribution would take gigabytes, and the bound "
                                 "Φ(Φ⁻¹(κ) + μ) is 1 in float64 for every κ ≥ 1e-300 (gaussian_rero_bound)")
        disc = _grid(disc, 20.0 * sens / s)  # losses μx − μ²/2 over the ~±10 σ dp-accounting keeps
        pld = pldm.from_gaussian_mechanism(s / sens, 1.0, value_discretization_interval=disc)
        if R > 1:
            pld = pld.self_compose(R)
        mu = sens * math.sqrt(R) / s
        return ReRoBound(name, {"sigma": s, "sensitivity": sens, "releases": R, "mu": mu},
                         f"Gaussian mechanism, σ/Δ₂ = {s / sens:.6g}{rtxt} (μ = {mu:.4g})",
                         "two inputs whose query values differ by the L2 sensitivity",
                         f"dp-accounting PLD (pessimistic, discretisation {disc:g})",
                         lambda k: rero_bound_from_pld(pld, k, "both"))
    if name == "dpsgd":
        s = _positive(sigma, "sigma (the noise multiplier)")
        q = _rate(sampling_rate)
        T = _count(steps, "steps")
        if s < MIN_NOISE:
            raise ParameterError(f"noise multiplier sigma = {s:.3g} is below {MIN_NOISE:g}: its privacy-loss distribution "
                                 "would take gigabytes; as σ → 0 the bound rises to 1 − (1 − q)^T (1 − κ), which bounds "
                                 "it for every σ")
        disc = _grid(disc, 20.0 / s)
        pld = pldm.from_gaussian_mechanism(s, 1.0, value_discretization_interval=disc, sampling_prob=q)
        if T > 1:
            pld = pld.self_compose(T)
        return ReRoBound(name, {"sigma": s, "sampling_rate": q, "steps": T},
                         f"DP-SGD, noise multiplier σ = {s:g}, Poisson sampling rate q = {q:g}, {T} steps",
                         "add/remove one example (reference: training without the target)",
                         f"dp-accounting PLD of the Poisson-subsampled Gaussian (REMOVE pair, pessimistic, "
                         f"discretisation {disc:g})",
                         lambda k: rero_bound_from_pld(pld, k, "remove"))
    # randomized-response
    e = _positive(epsilon, "epsilon")
    c = _count(categories, "categories", 2) if categories is not None else 2
    noise = c / (math.exp(e) + c - 1) if e < 700 else 0.0
    if not noise > 0:
        raise ParameterError(f"epsilon {e:g} is too large for randomized response in float64 (every report is "
                             "kept); the bound is 1")
    pld = pldm.from_randomized_response(noise, c, value_discretization_interval=disc)
    return ReRoBound(name, {"epsilon": e, "categories": c}, f"{c}-ary randomized response, ε = {e:g} per report",
                     "replace-one (one report changes)", f"dp-accounting PLD (pessimistic, discretisation {disc:g})",
                     lambda k: rero_bound_from_pld(pld, k, "both"))


def rero_bound(name: str, kappa, **params) -> np.ndarray:
    """``rero_mechanism(name, **params).bound(kappa)``: the ReRo bound of a named mechanism at
    ``kappa`` (in (0, 1), any shape), float64 probabilities of ``kappa``'s shape."""
    return rero_mechanism(name, **params).bound(kappa)


# --------------------------------------------------------------------------- token sanitizers


@dataclass
class TokenReconstruction:
    """One token's reconstruction game against a finite-vocabulary sanitizer.

    ``kappa``: the baseline success ``max π(x)`` (1/|V| for a uniform prior over |V| words);
    ``bayes_top1``: the exact success of the best attacker who sees the sanitized token
    (:func:`textdp.attacks.bayes.bayes_optimum`, prior π); ``epsilon_pairs``: the plain-DP ε of the
    mechanism's exact law over the prior's words, ``max ln p(y|x)/p(y|x′)`` over x, x′ with
    π > 0; ``bound``: the ReRo bound of ``epsilon_pairs``-DP at κ (:func:`approx_dp_rero_bound`);
    ``epsilon_reference`` and ``bound_reference``: the same with the best reference word x₀ (the
    smallest ``max_{x, y} |ln p(y|x)/p(y|x₀)|``; a valid, usually tighter bound since the
    reference may be any input independent of the target); ``epsilon_guarantee`` /
    ``bound_guarantee``: from the mechanism's stated worst case (``guarantee.worst_case_epsilon``,
    every accepted input) when it has one. ``n_inputs``: words in the prior's support;
    ``n_outputs``: output vocabulary size; ``skipped_mass``: prior mass on words the
    mechanism does not accept (left out, the rest renormalised, as the Bayes attack does)."""

    mechanism: str
    kappa: float
    bayes_top1: float
    epsilon_pairs: float
    bound: float
    epsilon_reference: float
    bound_reference: float
    epsilon_guarantee: float | None
    bound_guarantee: float | None
    n_inputs: int
    n_outputs: int
    skipped_mass: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _channel_and_prior(mech, prior):
    """The exact channel over the prior's words and the prior as normalised weights over it."""
    from textdp.attacks.bayes import Channel, MechanismChannel, _prior_weights, prior_weight

    if isinstance(mech, Channel):
        ch = mech
    elif hasattr(mech, "probabilities") and hasattr(mech, "output_words"):
        if prior is None or not hasattr(prior, "items"):
            ch = MechanismChannel(mech)  # inputs: the output vocabulary (an array prior is over it)
        else:
            words = [w for w, c in prior.items() if prior_weight(w, c) > 0]
            if hasattr(mech, "input_rows") and words:
                words = [w for w, r in zip(words, mech.input_rows(words).tolist()) if r >= 0]
            if not words:
                raise InputError("the prior puts no mass on words the mechanism accepts (no word can be attacked)")
            ch = MechanismChannel(mech, inputs=words)
    else:
        raise ParameterError(f"expected a fitted textdp token sanitizer or a textdp.attacks.bayes.Channel, got "
                             f"{type(mech).__name__}")
    if not getattr(ch, "exact", True):
        raise ParameterError(f"the channel of {getattr(ch, 'name', 'this mechanism')} is an approximation; the exact "
                             "optimum needs the mechanism's exact law")
    if prior is None:
        return ch, np.full(len(ch.inputs), 1.0 / len(ch.inputs)), 0.0
    w, skipped = _prior_weights(ch, prior)
    return ch, w, skipped


def _log_ratio_extremes(ch, ids: np.ndarray, block_bytes: int) -> tuple[float, float]:
    """(max over pairs x, x′ in ``ids`` of max_y ln p(y|x)/p(y|x′), min over reference x₀ in
    ``ids`` of max_{x, y} |ln p(y|x)/p(y|x₀)|), streamed over blocks of rows (memory
    O(block·|Y|)). Outputs no input in ``ids`` can produce are ignored; an output some input
    in ``ids`` produces and another cannot makes both infinite."""
    m = len(ch.outputs)
    rows = max(1, int(block_bytes) // (8 * max(m, 1) * 2))
    hi = np.full(m, -np.inf)
    lo = np.full(m, np.inf)
    for s in range(0, len(ids), rows):
        with np.errstate(divide="ignore"):
            L = np.log(np.asarray(ch.prob_rows(ids[s:s + rows]), dtype=np.float64))
        hi = np.maximum(hi, L.max(axis=0))
        lo = np.minimum(lo, L.min(axis=0))
    used = np.isfinite(hi)  # some input can produce y
    if not used.any():
        raise InputError("the mechanism's law gives no output any probability")
    hi, lo = hi[used], lo[used]
    with np.errstate(invalid="ignore"):
        pairs = float(np.max(hi - lo))
    best = math.inf
    for s in range(0, len(ids), rows):
        with np.errstate(divide="ignore"):
            L = np.log(np.asarray(ch.prob_rows(ids[s:s + rows]), dtype=np.float64))[:, used]
        with np.errstate(invalid="ignore"):
            radius = np.maximum(hi[None, :] - L, L - lo[None, :]).max(axis=1)
        best = min(best, float(np.min(radius)))
    return pairs, best


def token_reconstruction(mech, prior=None, *, block_bytes: int = 32 * 2**20) -> TokenReconstruction:
    """The exact per-token reconstruction success of the informed attacker, with its ReRo bounds.

    ``mech``: a fitted textdp token sanitizer with an exact law (``probabilities``,
    ``output_words``: SanText, SanText+, CusText, ...; FBDD's approximate channel is refused) or
    a :class:`textdp.attacks.bayes.Channel` (e.g. a ``MatrixChannel`` of randomized response).
    ``prior``: ``None`` (uniform over the mechanism's output vocabulary, or the channel's
    inputs: κ = 1/|V|), a mapping word → weight ≥ 0 (e.g. token counts; words the mechanism does
    not accept are skipped and the rest renormalised), or a ``(n_inputs,)`` weight array over the
    output vocabulary / the channel's inputs.

    The success is :func:`textdp.attacks.bayes.bayes_optimum` (top-1) with this prior, the one
    place textdp computes it; κ = max π. The bound is the ReRo bound of pure ε-DP at κ
    (:func:`approx_dp_rero_bound`) with ε the plain-DP figure of the exact law over the prior's
    words: the attacker's target is one of them, so pairs outside the support do not matter.
    ``bayes_top1 <= bound_reference <= bound`` always holds (tested).

    Returns :class:`TokenReconstruction` (probabilities in [0, 1], ε in nats, per token).
    Cost: two passes over |supp π| × |V_out| channel entries plus the optimum's one pass.
    Raises ParameterError (not a sanitizer or channel, approximate channel, bad prior) or
    InputError (no prior mass on accepted words).
    """
    from textdp.attacks.bayes import bayes_optimum

    ch, w, skipped = _channel_and_prior(mech, prior)
    ids = np.flatnonzero(w > 0)
    kappa = float(w.max())
    opt = bayes_optimum(ch, w, k=1, block_bytes=block_bytes)
    eps_pairs, eps_ref = _log_ratio_extremes(ch, ids, block_bytes)
    name = getattr(mech, "name", None) or getattr(ch, "name", type(mech).__name__.lower())
    g = getattr(mech, "guarantee", None)
    eg = getattr(g, "worst_case_epsilon", None) if g is not None else None
    eg = float(eg) if eg is not None else None

    def dp_bound(eps):
        if kappa >= 1.0:  # a single word: the prior already names the target
            return 1.0
        return float(approx_dp_rero_bound(kappa, eps))

    b, br = dp_bound(eps_pairs), dp_bound(eps_ref)
    bg = dp_bound(eg) if eg is not None and eg >= 0 else None
    return TokenReconstruction(str(name), kappa, float(opt.top1), eps_pairs, b, eps_ref, br, eg, bg,
                               int(len(ids)), int(len(ch.outputs)), float(skipped))
