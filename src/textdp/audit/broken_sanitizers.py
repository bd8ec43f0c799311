"""Deliberately broken word sanitizers for the metric-DP audit (:mod:`textdp.audit.metric`): each runs a
correct textdp mechanism at *twice* the epsilon it claims, so its real guarantee is ``2 eps · d`` while
its ``guarantee`` states ``eps · d``. They exist to show that the audit catches a mis-scaled mechanism
(and are not registered: they release nothing). Each has ``broken = True`` and ``broken_reason``.

* :class:`MisScaledSanText`: the law ``exp(-eps · d(x, y)) / Z(x)`` where SanText's
  ``exp(-eps · d(x, y) / 2) / Z(x)`` (Yue et al., Findings of ACL 2021, Sec. 4.2) belongs.
* :class:`HalfNoiseFBDD`: FBDD / CMP (Feyisetan et al., WSDM 2020, Alg. 1) with its noise radius
  ``Gamma(m, 1/(2 eps))`` (the scale halved) where ``Gamma(m, 1/eps)`` belongs.
"""

from __future__ import annotations

from textdp.accounting import MetricDP
from textdp.sanitize import FBDD, SanText

__all__ = ["MisScaledSanText", "HalfNoiseFBDD", "BROKEN_SANITIZERS"]


class _ClaimsHalfItsEpsilon:
    """Mixin: the mechanism runs at ``2 eps`` while its guarantee claims ``eps`` (``epsilon`` is the claimed
    value; every other parameter as the parent sanitizer's)."""

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, **kwargs):
        self.claimed_epsilon = float(self.check_epsilon_range(epsilon))
        super().__init__(embeddings, 2.0 * self.claimed_epsilon, **kwargs)

    @property
    def guarantee(self) -> MetricDP:
        real = super().guarantee
        return MetricDP(epsilon=self.claimed_epsilon, metric=real.metric, unit="token", epsilon0=real.epsilon0,
                        worst_case_epsilon=real.worst_case_epsilon)


class MisScaledSanText(_ClaimsHalfItsEpsilon, SanText):
    """SanText whose law is ``exp(-eps·d)/Z`` (SanText at ``2 eps``) while it claims ``eps·d + eps0``
    metric LDP per token: its real loss reaches ``2 eps · d`` (module docstring). ``epsilon`` is the
    claimed value; every other parameter as :class:`textdp.sanitize.SanText`."""

    name = "santext-misscaled"
    broken = True
    broken_reason = "law exp(-eps*d) where SanText's exp(-eps*d/2) belongs: real guarantee 2*eps*d, claims eps*d"


class HalfNoiseFBDD(_ClaimsHalfItsEpsilon, FBDD):
    """FBDD whose noise scale is halved (FBDD at ``2 eps``) while it claims ``eps·d + eps0`` metric LDP
    per token (module docstring). ``epsilon`` is the claimed value."""

    name = "fbdd-half-noise"
    broken = True
    broken_reason = "noise radius Gamma(m, 1/(2 eps)) where Gamma(m, 1/eps) belongs: real guarantee 2*eps*d, claims eps*d"


#: name -> class, for ``textdp audit sanitizer NAME``
BROKEN_SANITIZERS = {c.name: c for c in (MisScaledSanText, HalfNoiseFBDD)}
