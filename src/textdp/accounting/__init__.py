"""Privacy accounting: guarantees as data, composition, the budget ledger."""

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
    guarantee_from_dict,
)

__all__ = [
    "Guarantee", "PureDP", "ApproxDP", "RDP", "MetricDP", "UMLDP", "LocalDP", "GroupDP", "NoPrivacy",
    "guarantee_from_dict",
]
