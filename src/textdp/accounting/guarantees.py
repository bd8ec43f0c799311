"""Machine-readable privacy guarantees.

A mechanism states what it promises as one of these objects, so that privacy
cards, the budget ledger and the CI audits read a single source of truth.
Each guarantee says *per what* (``unit``: token, document, record, iteration,
run, ...) and under which *neighbouring relation* (``neighbours``:
``"replace-one"`` or ``"add-remove"``).

Modelled on the way Google's dp_accounting represents events and OpenDP its
privacy measures: plain, immutable data with a ``to_dict`` for JSON.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from textdp.errors import ParameterError

__all__ = [
    "Guarantee",
    "PureDP",
    "ApproxDP",
    "RDP",
    "MetricDP",
    "UMLDP",
    "LocalDP",
    "GroupDP",
    "NoPrivacy",
    "guarantee_from_dict",
]


def positive_number(eps: float, name: str = "epsilon", allow_inf: bool = False) -> float:
    """``eps`` as a float if it is a positive finite number (``allow_inf``: +inf too), else
    ParameterError naming ``name``: the one check of epsilons, scales and budgets."""
    try:
        val = float(eps)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {eps!r}") from None
    if math.isnan(val) or val <= 0 or (math.isinf(val) and not allow_inf):
        raise ParameterError(f"{name} must be a positive finite number, got {eps!r}")
    return val


_check_epsilon = positive_number


@dataclass(frozen=True)
class Guarantee:
    """Base class. ``unit``: what one protected change is; ``neighbours``: the relation."""

    unit: str = "record"
    neighbours: str = "replace-one"

    kind = "guarantee"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind
        return d

    def describe(self) -> str:  # pragma: no cover - overridden
        return self.kind


@dataclass(frozen=True)
class PureDP(Guarantee):
    """epsilon-DP: P[M(D) in S] <= exp(epsilon) P[M(D') in S] for neighbours D, D'."""

    epsilon: float = 1.0
    kind = "pure-dp"

    def __post_init__(self):
        _check_epsilon(self.epsilon)

    def describe(self) -> str:
        return f"{self.epsilon:g}-DP per {self.unit} ({self.neighbours})"


@dataclass(frozen=True)
class ApproxDP(Guarantee):
    """(epsilon, delta)-DP."""

    epsilon: float = 1.0
    delta: float = 1e-5
    kind = "approx-dp"

    def __post_init__(self):
        _check_epsilon(self.epsilon)
        if not (0 <= float(self.delta) < 1):
            raise ParameterError(f"delta must be in [0, 1), got {self.delta!r}")

    def describe(self) -> str:
        return f"({self.epsilon:g}, {self.delta:g})-DP per {self.unit} ({self.neighbours})"


@dataclass(frozen=True)
class RDP(Guarantee):
    """Renyi DP: a curve of (order alpha -> epsilon(alpha))."""

    orders: tuple[float, ...] = ()
    epsilons: tuple[float, ...] = ()
    kind = "rdp"

    def __post_init__(self):
        if len(self.orders) != len(self.epsilons) or not self.orders:
            raise ParameterError("RDP needs equally long, non-empty orders and epsilons")
        if any(a <= 1 for a in self.orders):
            raise ParameterError("RDP orders alpha must be > 1")

    def epsilon_at(self, alpha: float) -> float:
        for a, e in zip(self.orders, self.epsilons):
            if a == alpha:
                return e
        raise KeyError(alpha)

    def describe(self) -> str:
        pts = ", ".join(f"α={a:g}: {e:.4g}" for a, e in list(zip(self.orders, self.epsilons))[:4])
        return f"RDP per {self.unit} ({pts}{', …' if len(self.orders) > 4 else ''})"


@dataclass(frozen=True)
class MetricDP(Guarantee):
    """Metric LDP (d_X-privacy): p(y|x) <= exp(epsilon * d(x, x') + epsilon0) p(y|x').

    ``metric`` names d (e.g. ``"euclidean"`` over embeddings); ``unit`` is
    usually ``"token"``. ``epsilon0`` (default 0) is an additive term, e.g. the
    accounted discretisation cost of a float-safe sampler (SanText).
    """

    epsilon: float = 1.0
    metric: str = "euclidean"
    unit: str = "token"
    neighbours: str = "replace-one"
    epsilon0: float = 0.0
    #: plain-DP view: the largest log-ratio ln p(y|x)/p(y|x') of the mechanism's channel over every
    #: pair of inputs the release accepts (out-of-vocabulary against in-vocabulary included), per unit;
    #: None when not computed, math.inf when unbounded. Data-independent (parameters + public data).
    worst_case_epsilon: float | None = None
    kind = "metric-dp"

    def __post_init__(self):
        _check_epsilon(self.epsilon, allow_inf=True)

    def describe(self) -> str:
        extra = f" + {self.epsilon0:.2g}" if self.epsilon0 else ""
        return f"{self.epsilon:g}·d(x,x′){extra} metric LDP per {self.unit} (d = {self.metric})"


@dataclass(frozen=True)
class UMLDP(Guarantee):
    """Utility-optimised metric LDP (SanText+): metric LDP with epsilon on sensitive
    words, plus an additive term ``epsilon0`` (ln(1/p)) for outputs that reveal a
    non-sensitive input."""

    epsilon: float = 1.0
    epsilon0: float = 0.0
    metric: str = "euclidean"
    sensitive_fraction: float = 0.9
    unit: str = "token"
    neighbours: str = "replace-one"
    #: as :attr:`MetricDP.worst_case_epsilon` (infinite when non-sensitive words are ever kept)
    worst_case_epsilon: float | None = None
    kind = "umldp"

    def __post_init__(self):
        _check_epsilon(self.epsilon, allow_inf=True)

    def describe(self) -> str:
        return (
            f"({self.epsilon:g}, ε0={self.epsilon0:.4g})-UMLDP per {self.unit} "
            f"(d = {self.metric}, sensitive share w = {self.sensitive_fraction:g})"
        )


@dataclass(frozen=True)
class GroupDP(Guarantee):
    """epsilon-DP between inputs of the same group of a public partition, nothing between groups
    (CusText, CusText+: Chen et al., Findings of ACL 2023).

    ``p(y|x) <= exp(epsilon + epsilon0) p(y|x')`` for every output ``y`` and every two inputs
    ``x, x'`` whose group (``partition`` names how the groups are built, from public data only) is
    the same; two inputs of different groups have disjoint output sets, so an output reveals its
    input's group with certainty: the plain-DP ``worst_case_epsilon`` over every pair of accepted
    inputs is infinite as soon as there are two groups. ``epsilon0``: an additive term (the
    float-safe sampler's accounted cost). ``unprotected``: inputs released unchanged, outside
    every group (CusText+'s stop words), or empty.

    Its ledger currency is ``group/<unit>`` (:func:`textdp.accounting.composition.group_key`); a
    wildcard budget does not cover it: only a budget that names it does (the epsilon is not
    comparable with a DP or metric epsilon, and holds only inside a group).
    """

    epsilon: float = 1.0
    epsilon0: float = 0.0
    partition: str = ""
    unprotected: str = ""
    unit: str = "token"
    neighbours: str = "replace-one"
    #: plain-DP view over every pair of accepted inputs (inf with two groups or more; None: not computed)
    worst_case_epsilon: float | None = None
    kind = "group-dp"

    def __post_init__(self):
        _check_epsilon(self.epsilon, allow_inf=True)

    def describe(self) -> str:
        extra = f" + {self.epsilon0:.2g}" if self.epsilon0 else ""
        unprot = f"; {self.unprotected} released unchanged" if self.unprotected else ""
        return f"{self.epsilon:g}{extra}-DP per {self.unit} within a group only ({self.partition}{unprot})"


@dataclass(frozen=True)
class LocalDP(Guarantee):
    """epsilon-LDP: each user's report satisfies epsilon-DP on its own."""

    epsilon: float = 1.0
    unit: str = "document"
    kind = "local-dp"

    def __post_init__(self):
        _check_epsilon(self.epsilon)

    def describe(self) -> str:
        return f"{self.epsilon:g}-LDP per {self.unit} ({self.neighbours})"


@dataclass(frozen=True)
class NoPrivacy(Guarantee):
    """No formal guarantee (e.g. the identity, or a broken mechanism's real behaviour)."""

    reason: str = ""
    kind = "none"

    def describe(self) -> str:
        return f"no privacy guarantee{': ' + self.reason if self.reason else ''}"


_KINDS = {c.kind: c for c in (PureDP, ApproxDP, RDP, MetricDP, UMLDP, LocalDP, GroupDP, NoPrivacy)}


def guarantee_from_dict(d: dict[str, Any]) -> Guarantee:
    """Inverse of :meth:`Guarantee.to_dict` (used by the ledger)."""
    d = dict(d)
    kind = d.pop("kind")
    cls = _KINDS[kind]
    for k, v in list(d.items()):  # non-finite numbers as written by cards and the ledger ("inf", "-inf", "nan")
        if isinstance(v, str) and v in ("inf", "-inf", "nan") and k not in ("unit", "neighbours", "metric", "reason",
                                                                               "partition", "unprotected"):
            d[k] = float(v)
    for k in ("orders", "epsilons"):
        if k in d:
            d[k] = tuple(d[k])
    return cls(**d)
