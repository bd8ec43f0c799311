"""Registry of randomized mechanisms.

Every randomized release textdp offers is registered here with a name, the
capability it belongs to, its guarantee (or a function computing it from the
parameters) and whether it is a deliberately broken replica kept for auditing.
Tests enumerate the registry: a mechanism without a distribution test and an
audit makes the suite fail (see ``tests/test_registry_coverage.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["MechanismInfo", "register", "registry", "get"]


@dataclass(frozen=True)
class MechanismInfo:
    """What the registry knows of a mechanism.

    name: unique id (e.g. ``"santext"``, ``"audit.laplace"``).
    factory: callable building the mechanism object or function.
    capability: owning subpackage (``"sanitize"``, ``"audit"``, ``"topics"`` ...).
    broken: True for deliberately broken replicas (ADePT, DPText); ``reason`` says why.
    description: one line for listings.
    """

    name: str
    factory: Callable[..., Any]
    capability: str
    description: str = ""
    broken: bool = False
    reason: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


_REGISTRY: dict[str, MechanismInfo] = {}


def register(info: MechanismInfo) -> MechanismInfo:
    """Add a mechanism; re-registering the same name with the same factory is a no-op."""
    old = _REGISTRY.get(info.name)
    if old is not None and old.factory is not info.factory:
        raise ValueError(f"mechanism {info.name!r} registered twice")
    _REGISTRY[info.name] = info
    return info


def _load_all() -> None:
    # Importing the capability packages registers their mechanisms.
    import importlib

    for mod in ("textdp.sanitize", "textdp.audit", "textdp.topics", "textdp.bounds", "textdp.noise"):
        try:
            importlib.import_module(mod)
        except ImportError:  # an optional extra not installed
            continue


def registry() -> dict[str, MechanismInfo]:
    """All registered mechanisms (importing the capabilities first)."""
    _load_all()
    return dict(_REGISTRY)


def get(name: str) -> MechanismInfo:
    from textdp.errors import ParameterError

    reg = registry()
    if name not in reg:
        raise ParameterError(f"unknown mechanism {name!r}; known: {', '.join(sorted(reg))}")
    return reg[name]
