"""Every registered mechanism has a distribution test and an audit.

How a test declares what it covers (see CONTRIBUTING.md, "Registry coverage"):
a test module defines, at module level, one or both of

    DISTRIBUTION_TESTED = ("santext", "santext+")   # goodness-of-fit / exact-law tests live here
    AUDITED = ("santext",)                           # an audit at the claimed epsilon lives here

(any expression giving an iterable of registry names). This test reads the
declarations of every ``tests/**/test_*.py`` module that contains either name
(literal tuples statically; other expressions by importing the module), then
fails when a registered mechanism is missing from either set, or when a
declaration names a mechanism that is not registered.

``PENDING`` lists known gaps with the reason and owner; a NEW mechanism cannot
be added to the registry without both declarations.
"""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

from textdp.mechanisms.registry import registry

TESTS = Path(__file__).resolve().parent
KINDS = ("DISTRIBUTION_TESTED", "AUDITED")

# name -> reason (owner). Remove an entry as soon as both declarations exist.
PENDING: dict[str, str] = {}


def _module_name(path: Path) -> str:
    """The name pytest's default (prepend) import mode gives ``path``; puts its base on sys.path."""
    parts = [path.stem]
    d = path.parent
    while (d / "__init__.py").exists():
        parts.append(d.name)
        d = d.parent
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))
    return ".".join(reversed(parts))


def _declarations() -> dict[str, dict[str, set[str]]]:
    """``{kind: {mechanism name: {test module paths}}}``."""
    found: dict[str, dict[str, set[str]]] = {k: {} for k in KINDS}
    for path in sorted(TESTS.rglob("test_*.py")):
        if path.resolve() == Path(__file__).resolve():
            continue
        src = path.read_text(encoding="utf-8")
        if not any(k in src for k in KINDS):
            continue
        tree = ast.parse(src)
        needs_import = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                kind = node.targets[0].id
                if kind not in KINDS:
                    continue
                try:
                    names = ast.literal_eval(node.value)
                except ValueError:
                    needs_import.append(kind)
                    continue
                for n in names:
                    found[kind].setdefault(n, set()).add(str(path.relative_to(TESTS)))
        if needs_import:
            mod = importlib.import_module(_module_name(path))
            for kind in needs_import:
                for n in getattr(mod, kind):
                    found[kind].setdefault(n, set()).add(str(path.relative_to(TESTS)))
    return found


def test_every_registered_mechanism_has_a_distribution_test_and_an_audit():
    reg = registry()
    decl = _declarations()
    missing = []
    for name in sorted(reg):
        lacks = [k for k in KINDS if name not in decl[k]]
        if lacks and name not in PENDING:
            missing.append(f"{name} ({reg[name].capability}) lacks {' and '.join(lacks)}")
        if not lacks and name in PENDING:
            warnings.warn(f"{name} is now covered: remove it from PENDING in tests/test_registry_coverage.py",
                          stacklevel=1)
    assert not missing, (
        "registered mechanisms without their checks (declare DISTRIBUTION_TESTED / AUDITED in the test module "
        "that covers them; see CONTRIBUTING.md):\n  " + "\n  ".join(missing)
    )


def test_declarations_name_registered_mechanisms():
    reg = registry()
    decl = _declarations()
    stale = sorted(f"{n} (declared {k} in {', '.join(sorted(where))})"
                   for k in KINDS for n, where in decl[k].items() if n not in reg)
    assert not stale, "declarations of unregistered mechanisms: " + "; ".join(stale)
    assert set(PENDING) <= set(reg), f"PENDING names unknown mechanisms: {sorted(set(PENDING) - set(reg))}"


def test_the_coverage_check_fails_for_an_undeclared_mechanism():
    """Test of the test: registering a new mechanism without declarations is caught."""
    regmod = importlib.import_module("textdp.mechanisms.registry")

    info = regmod.MechanismInfo(name="trust.undeclared-probe", factory=object, capability="noise")
    regmod._REGISTRY[info.name] = info
    try:
        try:
            test_every_registered_mechanism_has_a_distribution_test_and_an_audit()
        except AssertionError as exc:
            assert "trust.undeclared-probe" in str(exc)
        else:
            raise AssertionError("the coverage check accepted an undeclared mechanism")
    finally:
        regmod._REGISTRY.pop(info.name, None)
