"""Composition of privacy guarantees, by the right rule for each kind.

Guarantees (``textdp.accounting.guarantees``) fall into *groups* that can be
composed with each other; guarantees of different groups are tracked side by
side and never added, because their epsilons are not in the same currency:

============================ ===================================================
group key                    members and rule
============================ ===================================================
``dp/<unit>/<neighbours>``   PureDP, LocalDP, ApproxDP, RDP on the same unit and
                             neighbouring relation. Pure and local epsilons add
                             (basic composition, Dwork & Roth Thm 3.14); with an
                             ApproxDP member epsilons and deltas add (Thm 3.16);
                             RDP curves add order by order (Mironov 2017, Prop. 1)
                             and a pure epsilon enters as
                             ``eps(alpha) = min(eps, alpha eps^2 / 2)`` (Bun &
                             Steinke 2016, Prop. 3.3 + RDP of zCDP).
``metric/<unit>``            MetricDP, UMLDP with the same unit (``token``).
                             Releases of the same data compose by adding
                             epsilons: ``M1 x M2`` is ``(e1 + e2) d``-private.
                             Under different metrics (e.g. two embedding
                             tables) the composition is ``e1 d1 + e2 d2 <=
                             (e1 + e2) max(d1, d2)``: the epsilons still add
                             (a conservative cap), and the composed metric is
                             named ``max(d1, d2)``. UMLDP also adds ``epsilon0``.
``none``                     NoPrivacy: anything composed with it has none.
============================ ===================================================

Per-token metric guarantees per document (documented rule, used by
:func:`metric_to_document`): a mechanism applied independently to each token of a
document that is ``eps d``-private per token is ``eps sum_i d(x_i, x'_i)``-private
for two documents of the same length (sequential composition over positions).
For documents of at most ``L`` tokens under a metric of diameter ``D`` this gives
pure ``eps L D``-DP per document (replace-one), which is what
:func:`metric_to_document` returns. It is usually vacuous for real vocabularies;
the ledger therefore keeps metric guarantees in their own per-token currency.

Conversions to (epsilon, delta) use Google's ``dp_accounting`` (the RDP
conversion of Canonne, Kamath & Steinke 2020 / Asoodeh et al.), with a
closed-form fallback when it is not installed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from textdp.accounting.guarantees import (
    RDP,
    UMLDP,
    ApproxDP,
    Guarantee,
    LocalDP,
    MetricDP,
    NoPrivacy,
    PureDP,
)
from textdp.errors import ParameterError

__all__ = [
    "DEFAULT_ORDERS",
    "group_key",
    "compose",
    "compose_by_group",
    "to_approx_dp",
    "rdp_to_epsilon",
    "spent_epsilon",
    "metric_to_document",
]

DEFAULT_ORDERS: tuple[float, ...] = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0,
                                     20.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0)
_DP = (PureDP, LocalDP, ApproxDP, RDP)
_METRIC = (MetricDP, UMLDP)


def group_key(g: Guarantee) -> str:
    """The composition group of ``g`` (see the module docstring)."""
    if isinstance(g, NoPrivacy):
        return "none"
    if isinstance(g, _DP):
        return f"dp/{g.unit}/{g.neighbours}"
    if isinstance(g, _METRIC):
        return f"metric/{g.unit}"
    raise ParameterError(f"no composition rule for guarantee kind {g.kind!r}")


def _pure_rdp(eps: float, orders: Sequence[float]) -> tuple[float, ...]:
    return tuple(min(eps, a * eps * eps / 2.0) for a in orders)


def rdp_to_epsilon(orders: Sequence[float], epsilons: Sequence[float], delta: float) -> float:
    """Smallest epsilon such that the RDP curve implies (epsilon, delta)-DP."""
    if not (0 < delta < 1):
        raise ParameterError(f"delta must be in (0, 1) to convert RDP, got {delta!r}")
    try:
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        eps, _ = compute_epsilon(list(orders), list(epsilons), delta)
        return float(eps)
    except ImportError:  # pragma: no cover - dp-accounting is in the privacy extra
        best = math.inf
        for a, e in zip(orders, epsilons):
            if a > 1:
                best = min(best, e + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1))
        return max(0.0, best)


def to_approx_dp(g: Guarantee, delta: float = 1e-6) -> ApproxDP:
    """An (epsilon, delta) statement implied by a DP-group guarantee.

    PureDP/LocalDP give ``(eps, 0)``; RDP is converted at ``delta``.
    """
    if isinstance(g, (PureDP, LocalDP)):
        return ApproxDP(epsilon=g.epsilon, delta=0.0, unit=g.unit, neighbours=g.neighbours)
    if isinstance(g, ApproxDP):
        return g
    if isinstance(g, RDP):
        return ApproxDP(epsilon=rdp_to_epsilon(g.orders, g.epsilons, delta), delta=delta, unit=g.unit,
                        neighbours=g.neighbours)
    raise ParameterError(f"{g.kind} has no (epsilon, delta) form; it is tracked in its own group")


def compose(guarantees: Sequence[Guarantee], delta: float = 1e-6) -> Guarantee:
    """Sequential composition of guarantees of ONE group (see the module docstring).

    ``delta`` is used only to convert RDP members when the group also holds an
    ApproxDP member. Raises ParameterError for an empty list or mixed groups.
    """
    gs = list(guarantees)
    if not gs:
        raise ParameterError("nothing to compose")
    keys = {group_key(g) for g in gs}
    if len(keys) > 1:
        raise ParameterError(f"cannot compose guarantees of different groups: {', '.join(sorted(keys))}")
    key = keys.pop()
    first = gs[0]
    if key == "none":
        return NoPrivacy(reason="composition includes a release without privacy", unit=first.unit,
                         neighbours=first.neighbours)
    if key.startswith("metric/"):
        eps = sum(g.epsilon for g in gs)
        metrics = list(dict.fromkeys(g.metric for g in gs))
        metric = metrics[0] if len(metrics) == 1 else "max(" + ", ".join(metrics) + ")"
        first = type(first)(**{**first.__dict__, "metric": metric})
        if all(isinstance(g, MetricDP) for g in gs):
            return MetricDP(epsilon=eps, metric=first.metric, unit=first.unit, neighbours=first.neighbours,
                            epsilon0=sum(g.epsilon0 for g in gs))
        e0 = sum(getattr(g, "epsilon0", 0.0) for g in gs)
        w = min(getattr(g, "sensitive_fraction", 1.0) for g in gs)
        return UMLDP(epsilon=eps, epsilon0=e0, metric=first.metric, sensitive_fraction=w, unit=first.unit,
                     neighbours=first.neighbours)
    unit, nb = first.unit, first.neighbours
    if all(isinstance(g, LocalDP) for g in gs):
        return LocalDP(epsilon=sum(g.epsilon for g in gs), unit=unit, neighbours=nb)
    if all(isinstance(g, (PureDP, LocalDP)) for g in gs):
        return PureDP(epsilon=sum(g.epsilon for g in gs), unit=unit, neighbours=nb)
    if any(isinstance(g, ApproxDP) for g in gs):
        approx = [to_approx_dp(g, delta) for g in gs]
        return ApproxDP(epsilon=sum(a.epsilon for a in approx), delta=min(0.999999, sum(a.delta for a in approx)),
                        unit=unit, neighbours=nb)
    # pure + RDP members: add curves on common orders
    orders = None
    for g in gs:
        if isinstance(g, RDP):
            orders = set(g.orders) if orders is None else orders & set(g.orders)
    orders = tuple(sorted(orders or DEFAULT_ORDERS))
    if not orders:
        raise ParameterError("RDP guarantees share no order; compute them on common orders")
    total = [0.0] * len(orders)
    for g in gs:
        curve = _pure_rdp(g.epsilon, orders) if isinstance(g, (PureDP, LocalDP)) else tuple(
            g.epsilon_at(a) for a in orders)
        total = [t + c for t, c in zip(total, curve)]
    return RDP(orders=orders, epsilons=tuple(total), unit=unit, neighbours=nb)


def compose_by_group(guarantees: Sequence[Guarantee], delta: float = 1e-6) -> dict[str, Guarantee]:
    """Compose each group separately: ``{group_key: composed guarantee}`` (insertion order)."""
    groups: dict[str, list[Guarantee]] = {}
    for g in guarantees:
        groups.setdefault(group_key(g), []).append(g)
    return {k: compose(v, delta) for k, v in groups.items()}


def spent_epsilon(g: Guarantee, delta: float = 1e-6) -> tuple[float, float]:
    """``(epsilon, delta)`` a composed guarantee charges against a budget.

    DP group: pure/local -> ``(eps, 0)``; approx -> ``(eps, delta)``; RDP ->
    converted at ``delta``. Metric group: ``(eps, 0)`` in its own per-unit
    currency (UMLDP's additive ``epsilon0`` is reported, not charged). None:
    ``(inf, 1)``.
    """
    if isinstance(g, NoPrivacy):
        return math.inf, 1.0
    if isinstance(g, _METRIC):
        return float(g.epsilon), 0.0
    a = to_approx_dp(g, delta)
    return float(a.epsilon), float(a.delta)


def metric_to_document(g: MetricDP | UMLDP, max_tokens: int, diameter: float) -> PureDP:
    """Per-document pure DP implied by a per-token metric guarantee.

    Documents of at most ``max_tokens`` tokens, metric diameter ``diameter``
    (largest distance between two vocabulary embeddings): ``eps L D``-DP per
    document under replace-one (sequential composition over token positions).
    UMLDP adds ``L epsilon0``.
    """
    if not isinstance(g, _METRIC):
        raise ParameterError("metric_to_document needs a MetricDP or UMLDP guarantee")
    if int(max_tokens) < 1 or not (diameter > 0 and math.isfinite(diameter)):
        raise ParameterError("need max_tokens >= 1 and a positive finite diameter")
    eps = g.epsilon * max_tokens * diameter + max_tokens * getattr(g, "epsilon0", 0.0)
    return PureDP(epsilon=eps, unit="document", neighbours="replace-one")
