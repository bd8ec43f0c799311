"""Shared mechanism layer: the registry (and, in ``textdp.mechanisms.zoo``, the
audit zoo of simple and deliberately broken mechanisms)."""

from textdp.mechanisms.registry import MechanismInfo, get, register, registry

__all__ = ["MechanismInfo", "get", "register", "registry"]
