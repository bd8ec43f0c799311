"""Exact Rényi-DP curves of named mechanisms, and the order-2 value a privacy card implies.

The reconstruction bound (Theorem 1, :mod:`textdp.bounds.rdp`) needs the order-2 Rényi
divergence ε₂ between the output laws of two neighbouring inputs. An (ε, δ)-DP statement
with δ > 0 does not determine it (a mechanism may reveal the record outright with
probability δ), and a pure ε-DP statement only bounds it by the worst ε-DP mechanism
(binary randomized response). So textdp converts through the *mechanism's own* curve:

==========================  ============================================  ==============================
mechanism                   parameters                                    source
==========================  ============================================  ==============================
``randomized-response``     ε per report, k categories, m changed reports closed form (below)
``laplace``                 ε = Δ₁/b per release, R releases              dp-accounting ``LaplaceDpEvent``
``discrete-laplace``        scale b, integer L1 sensitivity Δ, R releases closed form (below)
``gaussian``                σ/Δ₂ (or calibrated to (ε, δ)), R releases    dp-accounting ``GaussianDpEvent``
==========================  ============================================  ==============================

Every value is replace-one (what the reconstruction game needs), for the stated unit,
composed over R adaptive releases by adding RDP (Mironov 2017, Prop. 1).

textdp's own releases map onto these (:func:`mechanism_from_card`): HDP-LDA releases its
topic-word counts R times with discrete Laplace noise of scale b (L1 sensitivity Δ = 2L per
document); LP-LDA and OLP-LDA report every bit of a document's word vector through binary
randomized response that keeps a bit with probability 1 − f/2, and one replaced word
changes at most two bits; ``noise.laplace`` / ``noise.gaussian`` are the float-safe
Laplace and Gaussian releases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import numpy as np

from textdp.errors import InputError, ParameterError

__all__ = [
    "MECHANISMS",
    "MechanismCurve",
    "randomized_response_rdp",
    "discrete_laplace_rdp",
    "laplace_rdp",
    "gaussian_rdp",
    "mechanism_curve",
    "mechanism_from_card",
    "read_card_for_bounds",
    "NO_BOUND_FROM_APPROX_DP",
]

#: names accepted by :func:`mechanism_curve` (and ``textdp bounds mse --mechanism``)
MECHANISMS = ("randomized-response", "laplace", "discrete-laplace", "gaussian")

#: why a bare (ε, δ) is refused (one line, used by the API and the CLI)
NO_BOUND_FROM_APPROX_DP = (
    "an (ε, δ)-DP guarantee alone implies no MSE lower bound (with δ > 0 a mechanism may reveal the record "
    "outright with probability δ)")


def _order(alpha) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ParameterError(f"the Rényi order must be a number > 1, got {alpha!r}") from None
    if not (a > 1) or math.isnan(a):
        raise ParameterError(f"the Rényi order must be > 1, got {alpha!r}")
    return a


def _pos(x, name: str, allow_inf: bool = False) -> float:
    from textdp.accounting.guarantees import positive_number

    return positive_number(x, name, allow_inf)


def _count(x, name: str) -> int:
    if isinstance(x, bool):
        raise ParameterError(f"{name} must be a whole number ≥ 1, got {x!r}")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a whole number ≥ 1, got {x!r}") from None
    if not math.isfinite(v) or v < 1 or v != int(v):
        raise ParameterError(f"{name} must be a whole number ≥ 1, got {x!r}")
    return int(v)


# --------------------------------------------------------------------------- closed forms


def randomized_response_rdp(alpha: float, epsilon: float, categories: int = 2, reports: int = 1) -> float:
    """Order-α RDP of k-ary randomized response with ε per report, for ``reports`` changed reports.

    k-RR reports the true category with probability p = e^ε/(e^ε + k − 1) and each other one
    with q = 1/(e^ε + k − 1) (Warner 1965; Kairouz, Oh & Viswanath 2016). Every pair of
    inputs x ≠ x′ is alike, and the Rényi divergence of the two output laws is

        D_α = 1/(α−1) · log Σ_y P(y)^α Q(y)^{1−α}
            = 1/(α−1) · [log(e^{αε} + e^{−(α−1)ε} + k − 2) − log(e^ε + k − 1)]

    (the outputs x, x′ and the k − 2 others). ``reports`` independent reports that each
    change (LP-LDA: 2 bits per replaced word) add their divergences. Equals dp-accounting's
    ``RandomizedResponseDpEvent(k/(e^ε + k − 1), k)`` under REPLACE_ONE (checked in the tests);
    computed in log space, so it stays finite for large ε.
    """
    a = _order(alpha)
    eps = _pos(epsilon, "epsilon")
    k = _count(categories, "categories")
    m = _count(reports, "reports")
    if k < 2:
        raise ParameterError(f"randomized response needs at least 2 categories, got {k}")
    terms = [a * eps, -(a - 1) * eps] + ([math.log(k - 2)] if k > 2 else [])
    num = float(np.logaddexp.reduce(terms))
    den = float(np.logaddexp(eps, math.log(k - 1)))
    return m * max(num - den, 0.0) / (a - 1)


def _dlap_divergence(a: float, b: float, t: int) -> float:
    """D_α(DLap(0, b) ‖ DLap(t, b)) for an integer shift t ≥ 0, P(z) ∝ exp(−|z|/b) on ℤ.

    Σ_z P(z)^α P(z−t)^{1−α} splits into z ≤ 0, 0 < z < t and z ≥ t (three geometric series):

        A(t) = [e^{(α−1)t/b} (1 + (1 − r) S) + e^{−αt/b}] / (1 + r),
        r = e^{−1/b},  S = Σ_{z=1}^{t−1} ρ^z = ρ (1 − ρ^{t−1})/(1 − ρ),  ρ = e^{−(2α−1)/b}

    and D_α = log A(t)/(α − 1). Evaluated with 60-digit decimals (the divergence is O(t²/b²)
    for large b, far below the float64 cancellation error of the three O(t/b) terms).
    """
    if t == 0:
        return 0.0
    with localcontext() as ctx:
        ctx.prec = 60
        A, B, T = Decimal(repr(a)), Decimal(repr(b)), Decimal(int(t))
        one = Decimal(1)
        r = (-one / B).exp()
        rho = (-(2 * A - one) / B).exp()
        s = rho * (one - rho ** (T - one)) / (one - rho) if t > 1 else Decimal(0)
        big = ((A - one) * T / B).exp()
        total = (big * (one + (one - r) * s) + (-A * T / B).exp()) / (one + r)
        return max(float(total.ln() / (A - one)), 0.0)


def discrete_laplace_rdp(alpha: float, scale: float, sensitivity: int = 1, releases: int = 1) -> float:
    """Order-α RDP of the discrete Laplace mechanism on an integer vector query.

    Noise P(z) ∝ exp(−|z|/scale) per coordinate (Canonne, Kamath & Steinke 2020, as drawn by
    :func:`textdp.noise.discrete_laplace`); neighbouring inputs differ by an integer vector
    of L1 norm ≤ ``sensitivity`` Δ; ``releases`` R adaptive releases compose additively.

    Worst case over neighbours: the divergence of a product law is the sum over
    coordinates, Σ_i f(t_i) with f(t) = D_α(DLap(0,b) ‖ DLap(t,b)) (:func:`_dlap_divergence`,
    closed form). log A(t) is convex in t (A is a sum of exponentials of convex functions of
    t, α > 1), so f is convex with f(0) = 0, hence superadditive: putting the whole change Δ
    on one coordinate is the worst case, and ε(α) = R · f(Δ). Cross-checked against direct
    numeric summation and an exhaustive split search in the tests.
    """
    a = _order(alpha)
    b = _pos(scale, "scale")
    d = _count(sensitivity, "sensitivity")
    r = _count(releases, "releases")
    return r * _dlap_divergence(a, b, d)


def laplace_rdp(alpha: float, epsilon: float, releases: int = 1) -> float:
    """Order-α RDP of the (continuous, float-safe) Laplace mechanism with ε = Δ₁/b per release.

    dp-accounting's ``LaplaceDpEvent(b/Δ₁)`` (Mironov 2017, Prop. 6):
    1/(α−1) log(α/(2α−1) e^{(α−1)ε} + (α−1)/(2α−1) e^{−αε}). For a vector query the worst
    case puts the whole L1 change on one coordinate (the same convexity argument as
    :func:`discrete_laplace_rdp`). R releases add.
    """
    a = _order(alpha)
    eps = _pos(epsilon, "epsilon")
    r = _count(releases, "releases")
    from dp_accounting import LaplaceDpEvent

    from textdp.bounds.rdp import _rdp_accountant

    acc = _rdp_accountant([a])
    acc.compose(LaplaceDpEvent(1.0 / eps), r)
    return float(acc._rdp[0])  # noqa: SLF001


def gaussian_rdp(alpha: float, noise_multiplier: float, releases: int = 1) -> float:
    """Order-α RDP of the Gaussian mechanism with σ/Δ₂ = ``noise_multiplier``: α/(2 (σ/Δ₂)²)
    per release (Mironov 2017, Prop. 7; dp-accounting ``GaussianDpEvent``). The float-safe
    discrete Gaussian of :mod:`textdp.noise` has the same curve (Canonne, Kamath & Steinke 2020,
    Thm 14-15)."""
    a = _order(alpha)
    z = _pos(noise_multiplier, "noise multiplier σ/Δ")
    r = _count(releases, "releases")
    from dp_accounting import GaussianDpEvent

    from textdp.bounds.rdp import _rdp_accountant

    acc = _rdp_accountant([a])
    acc.compose(GaussianDpEvent(z), r)
    return float(acc._rdp[0])  # noqa: SLF001


# --------------------------------------------------------------------------- named mechanisms


@dataclass(frozen=True)
class MechanismCurve:
    """A named mechanism with its parameters: ``epsilon(α)`` is its exact replace-one RDP.

    ``describe`` is one human line (it goes into the bound's output); ``source`` says
    where the mechanism came from (``"command line"`` or a card path)."""

    name: str
    params: dict = field(default_factory=dict)
    describe: str = ""
    unit: str = "record"
    source: str = "command line"

    def epsilon(self, alpha: float) -> float:
        p = self.params
        if self.name == "randomized-response":
            return randomized_response_rdp(alpha, p["epsilon"], p.get("categories", 2), p.get("reports", 1))
        if self.name == "discrete-laplace":
            return discrete_laplace_rdp(alpha, p["scale"], p.get("sensitivity", 1), p.get("releases", 1))
        if self.name == "laplace":
            return laplace_rdp(alpha, p["epsilon"], p.get("releases", 1))
        if self.name == "gaussian":
            return gaussian_rdp(alpha, p["noise_multiplier"], p.get("releases", 1))
        raise ParameterError(f"unknown mechanism {self.name!r}; known: {', '.join(MECHANISMS)}")

    @property
    def epsilon2(self) -> float:
        """The order-2 value the reconstruction bound uses."""
        return self.epsilon(2.0)

    def to_dict(self) -> dict:
        return {"mechanism": self.name, **self.params, "unit": self.unit, "source": self.source}


def mechanism_curve(name: str, *, epsilon: float | None = None, delta: float | None = None,
                    categories: int | None = None, reports: int | None = None, scale: float | None = None,
                    sensitivity: float | None = None, sigma: float | None = None, releases: int | None = None,
                    unit: str = "record", source: str = "command line") -> MechanismCurve:
    """Build a :class:`MechanismCurve` from a mechanism name and the parameters it needs.

    * ``randomized-response``: ``epsilon`` (per report), ``categories`` k (default 2),
      ``reports`` m (how many reports one protected change alters; default 1).
    * ``laplace``: ``epsilon`` = Δ₁/b per release; ``releases`` R (default 1).
    * ``discrete-laplace``: ``scale`` b, or ``epsilon`` (then b = Δ·R/ε, basic composition
      of pure DP); integer ``sensitivity`` Δ (default 1); ``releases`` R.
    * ``gaussian``: ``sigma`` (noise std, with L2 ``sensitivity`` Δ₂, default 1), or
      ``epsilon`` and ``delta`` (σ/Δ₂ calibrated tightly to (ε, δ) per release: analytic
      Gaussian, Balle & Wang 2018, ``dp_accounting.get_sigma_gaussian``); ``releases`` R.

    Parameters a mechanism does not use are refused (ParameterError naming them), so a
    typo never silently changes the bound.
    """
    given = {"epsilon": epsilon, "delta": delta, "categories": categories, "reports": reports, "scale": scale,
             "sensitivity": sensitivity, "sigma": sigma, "releases": releases}
    allowed = {"randomized-response": {"epsilon", "categories", "reports"},
               "laplace": {"epsilon", "releases"},
               "discrete-laplace": {"epsilon", "scale", "sensitivity", "releases"},
               "gaussian": {"epsilon", "delta", "sigma", "sensitivity", "releases"}}
    if name not in allowed:
        raise ParameterError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    extra = sorted(k for k, v in given.items() if v is not None and k not in allowed[name])
    if extra:
        raise ParameterError(f"{name} takes no {', '.join(extra)} (it uses: {', '.join(sorted(allowed[name]))})")
    R = _count(releases, "releases") if releases is not None else 1
    rtxt = f", {R} releases" if R > 1 else ""
    if name == "randomized-response":
        if epsilon is None:
            raise ParameterError("randomized-response needs epsilon (ε per report)")
        eps = _pos(epsilon, "epsilon")
        k = _count(categories, "categories") if categories is not None else 2
        if k < 2:
            raise ParameterError(f"randomized response needs at least 2 categories, got {k}")
        m = _count(reports, "reports") if reports is not None else 1
        return MechanismCurve(name, {"epsilon": eps, "categories": k, "reports": m},
                              f"{k}-ary randomized response, ε = {eps:g} per report"
                              + (f", {m} reports changed" if m > 1 else ""), unit, source)
    if name == "laplace":
        if epsilon is None:
            raise ParameterError("laplace needs epsilon (= L1 sensitivity / scale, per release)")
        eps = _pos(epsilon, "epsilon")
        return MechanismCurve(name, {"epsilon": eps, "releases": R}, f"Laplace mechanism, ε = {eps:g} per release{rtxt}",
                              unit, source)
    if name == "discrete-laplace":
        d = _count(sensitivity, "sensitivity (integer L1)") if sensitivity is not None else 1
        if (scale is None) == (epsilon is None):
            raise ParameterError("discrete-laplace needs exactly one of scale (b) or epsilon (then b = "
                                 "sensitivity × releases / ε)")
        b = _pos(scale, "scale") if scale is not None else d * R / _pos(epsilon, "epsilon")
        return MechanismCurve(name, {"scale": b, "sensitivity": d, "releases": R},
                              f"discrete Laplace, scale {b:.6g}, L1 sensitivity {d}{rtxt}", unit, source)
    # gaussian
    sens = _pos(sensitivity, "sensitivity") if sensitivity is not None else 1.0
    if sigma is not None:
        if epsilon is not None or delta is not None:
            raise ParameterError("gaussian takes either sigma or (epsilon, delta), not both")
        z = _pos(sigma, "sigma") / sens
        how = f"Gaussian mechanism, σ/Δ₂ = {z:.6g}{rtxt}"
    else:
        if epsilon is None or delta is None:
            raise ParameterError("gaussian needs sigma, or epsilon and delta (the (ε, δ) it is calibrated to)")
        from textdp.bounds.rdp import check_epsilon

        eps = check_epsilon(epsilon, allow_zero=False)
        try:
            dl = float(delta)
        except (TypeError, ValueError):
            raise ParameterError(f"delta must be a number in (0, 1), got {delta!r}") from None
        if not (0.0 < dl < 1.0) or not math.isfinite(eps):
            raise ParameterError(f"gaussian calibration needs a finite ε > 0 and δ in (0, 1), got ({epsilon!r}, "
                                 f"{delta!r})")
        import dp_accounting

        z = float(dp_accounting.get_sigma_gaussian(eps, dl))
        how = f"Gaussian mechanism calibrated to ({eps:g}, {dl:g})-DP per release (σ/Δ₂ = {z:.6g}){rtxt}"
    return MechanismCurve(name, {"noise_multiplier": z, "releases": R}, how, unit, source)


# --------------------------------------------------------------------------- cards


def read_card_for_bounds(path) -> tuple[dict, str]:
    """Read a privacy card: a ``*.card.json`` file, an output with a card beside it, or a
    folder holding ``model.card.json`` (a topic model). Returns ``(card, path)``; InputError
    (one line) when there is none or it is not a textdp card."""
    import json

    p = Path(path)
    if p.is_dir():
        cands = [p / "model.card.json"] + sorted(p.glob("*.card.json"))
        found = [c for c in cands if c.is_file()]
        if not found:
            raise InputError(f"{str(p)!r} is a folder without a privacy card (*.card.json)")
        p = found[0]
    elif not p.name.endswith(".card.json"):
        from textdp.accounting.card import card_path

        if card_path(p).is_file():
            p = card_path(p)
    if not p.is_file():
        raise InputError(f"no privacy card at {str(p)!r}")
    try:
        card = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"cannot read the privacy card {str(p)!r} ({type(e).__name__})") from None
    if not isinstance(card, dict) or not isinstance(card.get("guarantee"), dict):
        raise InputError(f"{str(p)!r} is not a textdp privacy card (no guarantee)")
    return card, str(p)


def _num(d: dict, *keys) -> Any:
    for k in keys:
        if isinstance(d, dict) and d.get(k) is not None:
            return d[k]
    return None


def mechanism_from_card(card: dict, source: str = "card") -> MechanismCurve | tuple[float, str]:
    """The mechanism a privacy card describes, for the reconstruction bound.

    textdp's own mechanisms convert exactly: ``topics.hdp-lda`` (discrete Laplace: scale,
    releases and L1 sensitivity from the card's accounting), ``topics.lp-lda`` /
    ``topics.olp-lda`` (binary randomized response keeping a bit with probability 1 − f/2,
    2 bits per replaced word), ``noise.laplace`` / ``noise.gaussian``. For any other card the
    guarantee itself decides: an RDP curve (exact at order 2, else by monotonicity), pure
    ε-DP or a plain-DP worst case (``worst_case_epsilon`` of metric DP), converted through
    the worst ε-DP mechanism (binary randomized response, valid for every ε-DP mechanism);
    then a ``(ε₂, description)`` pair is returned. (ε, δ)-DP with δ > 0 from an unknown
    mechanism, local DP of an unknown mechanism and guarantees without a finite plain-DP
    value are refused (ParameterError saying why).
    """
    from textdp.bounds.rdp import epsilon2_from_pure_dp, epsilon2_from_rdp_curve

    g = card.get("guarantee") or {}
    kind = g.get("kind")
    mech = str(card.get("mechanism") or "")
    params = card.get("parameters") or {}
    stats = card.get("statistics") or {}
    unit = str(g.get("unit") or "record")
    where = f"card of {mech or 'an unnamed mechanism'}"
    if mech in ("topics.hdp-lda", "topics.hdp-lda-paper"):
        scale = _num(stats, "scale")
        releases = _num(stats, "releases")
        sens = _num(stats, "sensitivity_l1", "sensitivity")
        if scale is None or releases is None or sens is None:
            raise ParameterError(f"the {where} lacks the noise scale, releases or sensitivity (statistics.scale, "
                                 ".releases, .sensitivity_l1); give the mechanism on the command line instead")
        c = mechanism_curve("discrete-laplace", scale=float(scale), sensitivity=int(sens), releases=int(releases),
                            unit=unit, source=source)
        return MechanismCurve(c.name, c.params, f"HDP-LDA: {c.describe} (from its card)", unit, source)
    if mech in ("topics.lp-lda", "topics.olp-lda"):
        f = _num(params, "flip")
        if f is None:
            f = _num(stats, "flip")
        if f is None:
            raise ParameterError(f"the {where} lacks the flip probability (parameters.flip)")
        f = float(f)
        if not (0 < f < 1):
            raise ParameterError(f"the {where} has flip probability {f!r}, not in (0, 1)")
        eps_bit = math.log(2.0 - f) - math.log(f)  # keep 1 − f/2, flip f/2
        c = mechanism_curve("randomized-response", epsilon=eps_bit, categories=2, reports=2, unit=unit,
                            source=source)
        return MechanismCurve(c.name, c.params, f"{mech[len('topics.'):].upper()}: binary randomized response per "
                              f"bit (flip f = {f:g}, ε = {eps_bit:.4g} per bit), 2 bits per replaced word (from its "
                              "card)", unit, source)
    if mech == "noise.laplace" and kind == "pure-dp":
        return mechanism_curve("laplace", epsilon=float(g["epsilon"]), unit=unit, source=source)
    if kind == "rdp":
        e2 = epsilon2_from_rdp_curve(g.get("orders") or [], g.get("epsilons") or [])
        return e2, f"RDP curve of the {where} ({'exact at order 2' if 2.0 in map(float, g['orders']) else 'smallest ε(α) with α ≥ 2'})"
    if kind in ("pure-dp", "local-dp") or (kind == "approx-dp" and float(g.get("delta") or 0.0) == 0.0):
        eps = float(g["epsilon"])
        what = "LDP" if kind == "local-dp" else "DP"
        return epsilon2_from_pure_dp(eps), (f"{eps:g}-{what} per {unit} from the {where}, through the worst ε-DP "
                                            "mechanism (binary randomized response; valid for any ε-DP mechanism)")
    if kind in ("metric-dp", "umldp"):
        w = g.get("worst_case_epsilon")
        try:
            w = float(w) if w is not None else None
        except (TypeError, ValueError):
            w = None
        if w is None or not math.isfinite(w):
            raise ParameterError(f"the {where} states {kind} without a finite plain-DP worst case "
                                 "(worst_case_epsilon): no order-2 Rényi value follows")
        return epsilon2_from_pure_dp(w), (f"plain-DP worst case {w:g} per {unit} from the {where}, through the worst "
                                          "ε-DP mechanism (binary randomized response)")
    if kind == "approx-dp":
        raise ParameterError(f"the {where} states ({g.get('epsilon')}, {g.get('delta')})-DP: {NO_BOUND_FROM_APPROX_DP}; "
                             "name the mechanism with --mechanism")
    raise ParameterError(f"the {where} states a {kind or 'missing'} guarantee: no order-2 Rényi value follows")
