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
                             Only Euclidean metrics share this currency.
``metric/<unit>/<family>``   The same for the other metric families
                             (:func:`metric_family`: ``mahalanobis``,
                             ``list_index``): an epsilon per unit of another
                             kind of distance is never added to a Euclidean one.
``group/<unit>``             GroupDP (CusText, CusText+): epsilon-DP between
                             inputs of the same group of a public partition,
                             nothing between groups. Epsilons (and epsilon0)
                             add; two releases under different partitions
                             protect only pairs that share a group in both
                             (the composed partition is named ``meet(p1, p2)``).
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

Currencies (what the budget ledger charges)
-------------------------------------------
A group key is also the *currency* a release spends and a budget names
(``textdp budget set DATASET --epsilon E --currency metric/token``). Every term
of a guarantee is charged (:func:`charges`):

* ``dp/<unit>/<neighbours>``: ``epsilon`` (and ``delta``) of the composition.
  Local DP shares the currency of central DP on the same unit (an epsilon-LDP
  release is epsilon-DP for the dataset at that unit), so ``ldp/token`` names
  ``dp/token/replace-one``.
* ``metric/<unit>``: two named components, both summed over releases:
  ``epsilon`` (per unit of metric distance) and ``epsilon0`` (the additive term
  per unit: SanText+'s ``ln(1/p)`` plus the sampler's float cost, and the small
  sampler cost of MetricDP). A budget caps each component.
* ``group/<unit>``: ``epsilon`` and ``epsilon0`` as for a metric currency, summed
  over releases; the epsilon holds only between inputs of the same group. A
  wildcard budget (no currency) does NOT cover it (:data:`NAMED_BUDGET_ONLY`):
  only a budget that names ``group/<unit>`` does.
* ``none``: a release without privacy; its loss is unbounded.

A term that is infinite (SanText+ with ``p = 0`` has ``epsilon0 = inf``; a
NoPrivacy release) fits no finite budget (:func:`unbounded_terms`).

Worst case in plain DP (:func:`worst_case_per_token`): the largest log-ratio
``ln p(y|x)/p(y|x')`` over every pair of accepted inputs, per token. Metric
guarantees carry it as ``worst_case_epsilon`` (None when not computed);
composition adds it over releases (sequential composition of pure DP). For a
pure/local DP guarantee on tokens or documents it is its epsilon (doubled under
add/remove, where replacing a token is a removal plus an addition). Per
document of ``L`` tokens (position-wise replacement) a per-token figure is
multiplied by ``L``; a per-document DP figure is not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from textdp.accounting.guarantees import (
    RDP,
    UMLDP,
    ApproxDP,
    Guarantee,
    GroupDP,
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
    "CURRENCY_HELP",
    "parse_currency",
    "NAMED_BUDGET_ONLY",
    "charges",
    "unbounded_terms",
    "worst_case_per_token",
    "worst_case_per_document",
]

DEFAULT_ORDERS: tuple[float, ...] = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0,
                                     20.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0)
_DP = (PureDP, LocalDP, ApproxDP, RDP)
_METRIC = (MetricDP, UMLDP)
#: currency prefixes that a wildcard budget (no currency) does not cover: only a budget naming them does
NAMED_BUDGET_ONLY = ("group/",)


#: metric families with a currency of their own (issue 15): an epsilon per unit of a regularized Mahalanobis
#: distance or of a list-index distance is not comparable with one per unit of Euclidean distance, so they
#: are never added together in one budget; the Euclidean family keeps the plain ``metric/<unit>`` key
METRIC_FAMILIES = {"mahalanobis": "mahalanobis", "list index": "list_index"}


def metric_family(metric: str) -> str:
    """The currency suffix of a metric guarantee's ``metric`` text: ``""`` for a Euclidean distance
    (``"euclidean (glove-6b-50d ...)"``, the SanText family), ``"mahalanobis"`` for a regularized
    Mahalanobis distance, ``"list_index"`` for 1-Diffractor's list-index distance; any other metric name
    (an embedding table's name, as ledgers written before issue 15 hold) is read as a Euclidean one."""
    text = str(metric).strip().lower()
    name = re.split(r"[(:]", text, maxsplit=1)[0].strip()
    if name.startswith("euclidean") or not name:
        return ""
    if name.startswith("max(") or text.startswith("max("):
        return ""
    for needle, family in METRIC_FAMILIES.items():
        if needle in name:
            return family
    return ""


def group_key(g: Guarantee) -> str:
    """The composition group of ``g`` (see the module docstring)."""
    if isinstance(g, NoPrivacy):
        return "none"
    if isinstance(g, _DP):
        return f"dp/{g.unit}/{g.neighbours}"
    if isinstance(g, _METRIC):
        family = metric_family(g.metric)
        return f"metric/{g.unit}" + (f"/{family}" if family else "")
    if isinstance(g, GroupDP):
        return f"group/{g.unit}"
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
        wcs = [getattr(g, "worst_case_epsilon", None) for g in gs]
        wc = None if any(w is None for w in wcs) else float(sum(wcs))  # plain-DP view adds too
        if all(isinstance(g, MetricDP) for g in gs):
            return MetricDP(epsilon=eps, metric=first.metric, unit=first.unit, neighbours=first.neighbours,
                            epsilon0=sum(g.epsilon0 for g in gs), worst_case_epsilon=wc)
        e0 = sum(getattr(g, "epsilon0", 0.0) for g in gs)
        w = min(getattr(g, "sensitive_fraction", 1.0) for g in gs)
        return UMLDP(epsilon=eps, epsilon0=e0, metric=first.metric, sensitive_fraction=w, unit=first.unit,
                     neighbours=first.neighbours, worst_case_epsilon=wc)
    if key.startswith("group/"):
        parts = list(dict.fromkeys(g.partition for g in gs))
        unprot = list(dict.fromkeys(g.unprotected for g in gs if g.unprotected))
        wcs = [g.worst_case_epsilon for g in gs]
        return GroupDP(epsilon=sum(g.epsilon for g in gs), epsilon0=sum(g.epsilon0 for g in gs),
                       partition=parts[0] if len(parts) == 1 else "meet(" + ", ".join(parts) + ")",
                       unprotected="; ".join(unprot), unit=first.unit, neighbours=first.neighbours,
                       worst_case_epsilon=None if any(w is None for w in wcs) else float(sum(wcs)))
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
    currency; its additive ``epsilon0`` is a second component charged beside it
    (see :func:`charges`). None: ``(inf, 1)``.
    """
    if isinstance(g, NoPrivacy):
        return math.inf, 1.0
    if isinstance(g, (*_METRIC, GroupDP)):
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


# ---------------------------------------------------------------------------- currencies

#: what ``--currency`` accepts (one line, for help texts and errors)
CURRENCY_HELP = ("metric/token (SanText, SanText+, FBDD, TEM, Vickrey with CMP noise: metric ε per unit of Euclidean "
                 "embedding distance and the additive ε₀ per token), metric/token/mahalanobis (Mahalanobis, Vickrey "
                 "with Mahalanobis noise; short form mahalanobis), metric/token/list_index (1-Diffractor; short form "
                 "diffractor), group/token (CusText, CusText+: ε-DP between words of the same group only; "
                 "short form custext), dp/document/replace-one (DP per document: HDP-LDA), dp/token/replace-one (DP or "
                 "LDP per token: LP/OLP-LDA), or any group key dp/<unit>/<replace-one|add-remove>, metric/<unit>; "
                 "short forms: metric-token, dp-document, ldp-token")

_NEIGHBOURS = ("replace-one", "add-remove")


def parse_currency(text: str) -> str:
    """The canonical currency (a group key, see the module docstring) named by ``text``.

    Accepts a group key (``metric/token``, ``dp/document/replace-one``), the same with
    ``-`` separators (``metric-token``, ``dp-document-add-remove``), and ``dp/<unit>`` or
    ``ldp/<unit>`` for ``dp/<unit>/replace-one`` (local DP shares central DP's currency).
    Raises ParameterError (one line) otherwise.
    """
    raw = str(text).strip()
    t = raw.lower()
    bad = ParameterError(f"unknown currency {raw[:40]!r}; use {CURRENCY_HELP}")
    if not t:
        raise bad
    if t in ("custext", "custext+", "group"):
        return "group/token"
    if t in ("mahalanobis", "vickrey-mahalanobis"):
        return "metric/token/mahalanobis"
    if t in ("diffractor", "1-diffractor", "list-index", "list_index"):
        return "metric/token/list_index"
    if t == "none":
        raise ParameterError("a budget cannot be set in currency 'none': a release without privacy has an "
                             "unbounded loss and fits no budget")
    if "/" in t:
        parts = t.split("/")
    else:  # dashes: keep the neighbouring relation's own dash
        parts = t.split("-")
        if len(parts) >= 2 and "-".join(parts[-2:]) in _NEIGHBOURS:
            parts = [*parts[:-2], "-".join(parts[-2:])]
    kind, rest = parts[0], parts[1:]
    if not rest or not all(re.fullmatch(r"[a-z][a-z0-9_]{0,30}", u) for u in rest[:1]):
        raise bad
    unit = rest[0]
    if kind in ("metric", "group") and len(rest) == 1:
        return f"{kind}/{unit}"
    if kind == "metric" and len(rest) == 2 and rest[1] in ("mahalanobis", "list_index", "list-index"):
        return f"metric/{unit}/{rest[1].replace('-', '_')}"
    if kind in ("dp", "ldp") and len(rest) in (1, 2):
        nb = rest[1] if len(rest) == 2 else "replace-one"
        if nb not in _NEIGHBOURS:
            raise bad
        return f"dp/{unit}/{nb}"
    raise bad


def charges(g: Guarantee, delta: float = 1e-6) -> dict[str, float]:
    """Every term a (composed) guarantee charges against a budget in its currency.

    DP group: ``{"epsilon", "delta"}`` (:func:`spent_epsilon`). Metric group:
    ``{"epsilon", "epsilon0"}``: the metric epsilon per unit of distance and the
    additive epsilon0 per unit (UMLDP's ``ln(1/p)`` + sampler cost; MetricDP's sampler
    cost). None: ``{"epsilon": inf, "delta": 1}``.
    """
    if isinstance(g, (*_METRIC, GroupDP)):
        return {"epsilon": float(g.epsilon), "epsilon0": float(getattr(g, "epsilon0", 0.0) or 0.0)}
    eps, dlt = spent_epsilon(g, delta)
    return {"epsilon": eps, "delta": dlt}


def unbounded_terms(g: Guarantee) -> list[tuple[str, str]]:
    """``[(term, why), ...]`` for every infinite term of ``g`` (empty when all are finite).

    Such a release fits no finite budget: its privacy loss is unbounded.
    """
    if isinstance(g, NoPrivacy):
        return [("epsilon", "no privacy guarantee" + (f" ({g.reason})" if g.reason else "")
                 + ": the input is released unprotected")]
    out: list[tuple[str, str]] = []
    if isinstance(g, GroupDP):
        if math.isinf(g.epsilon):
            out.append(("epsilon", "the mechanism claims no bound within a group (epsilon = inf)"))
        if math.isinf(g.epsilon0):
            out.append(("epsilon0", "the additive term is unbounded"))
        return out
    if isinstance(g, _METRIC):
        if math.isinf(g.epsilon):
            out.append(("epsilon", "the mechanism claims no metric bound (epsilon = inf)"))
        if math.isinf(getattr(g, "epsilon0", 0.0) or 0.0):
            why = ("santext+ with p = 0 has epsilon0 = inf: non-sensitive words are released unprotected"
                   if isinstance(g, UMLDP) else "the additive term is unbounded")
            out.append(("epsilon0", why))
    elif isinstance(g, RDP):
        if all(math.isinf(e) for e in g.epsilons):
            out.append(("epsilon", "the Rényi curve is infinite at every order"))
    elif isinstance(g, _DP) and math.isinf(getattr(g, "epsilon", 0.0)):
        out.append(("epsilon", "the loss is unbounded"))
    return out


def _doubling(g: Guarantee) -> int:
    """Replacing one token is one neighbouring step under replace-one, two under add/remove."""
    return 2 if g.neighbours == "add-remove" else 1


def worst_case_per_token(g: Guarantee) -> tuple[float | None, str]:
    """``(epsilon, note)``: the plain-DP worst case of ``g`` for a change of one token.

    Metric guarantees: their ``worst_case_epsilon`` (None: "not computed"). Pure or
    local DP per token or per document: epsilon (x2 under add/remove). NoPrivacy:
    inf. Otherwise None with the reason (approximate or Rényi DP has no pure figure; a
    unit other than token or document says nothing per token).
    """
    if isinstance(g, NoPrivacy):
        return math.inf, "no privacy"
    if isinstance(g, (*_METRIC, GroupDP)):
        wc = getattr(g, "worst_case_epsilon", None)
        if wc is None:
            return None, "not computed"
        return float(wc), "largest log-ratio of the channel over accepted inputs"
    if isinstance(g, (PureDP, LocalDP)):
        if g.unit not in ("token", "document"):
            return None, f"per {g.unit}: no per-token figure"
        return _doubling(g) * float(g.epsilon), f"pure DP per {g.unit}"
    return None, "approximate or Rényi DP: no pure-DP figure"


def worst_case_per_document(g: Guarantee, document_tokens: int) -> tuple[float | None, str]:
    """``(epsilon, note)``: the plain-DP worst case of ``g`` for two documents of
    ``document_tokens`` tokens that differ position-wise (sequential composition over
    positions: a per-token figure times L; a per-document DP figure as is)."""
    L = int(document_tokens)
    if L < 1:
        raise ParameterError(f"the document length must be at least 1 token, got {document_tokens!r}")
    per_token, note = worst_case_per_token(g)
    if per_token is None:
        return None, note
    if isinstance(g, (PureDP, LocalDP)) and g.unit == "document":
        return per_token, note
    return (math.inf if math.isinf(per_token) else per_token * L), note
