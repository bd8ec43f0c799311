"""A module imported on first attribute access (start-up cost paid only where it is used)."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["lazy_module"]


class _LazyModule:
    """Stands for module ``name``; the first attribute read imports it (``sys.modules`` is not
    touched before that, so ``"pandas" in sys.modules`` stays a true statement)."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str):
        mod = self._module
        if mod is None:
            mod = importlib.import_module(self._name)
            self._module = mod
        return getattr(mod, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (loaded)' if self._module is not None else ''}>"


def lazy_module(name: str):
    """A stand-in for ``import name`` that imports the module on first attribute access,
    e.g. ``pd = lazy_module("pandas")`` at the top of a module whose plain-text path never
    touches pandas."""
    return _LazyModule(name)
