"""The privacy-budget ledger: one append-only JSON Lines file per dataset.

Every releasing command (``textdp sanitize``, ``textdp topics train``, ...)
appends one ``release`` entry holding the guarantee, the privacy card and a
hash of the input; ``textdp budget set`` appends a ``budget`` entry. Nothing is
ever rewritten: the current budget is the last ``budget`` entry, the spend is the
composition (:mod:`textdp.accounting.composition`) of every ``release`` entry.

Tamper evidence: each line carries ``prev``, the SHA-256 of the previous line
(``""`` for the first), so an edited or deleted line breaks the chain
(:meth:`Ledger.verify`). Writes take an exclusive ``fcntl`` lock and are
fsync'ed, so concurrent releases on one machine cannot interleave or lose an
entry.

Where: ``$TEXTDP_LEDGER_DIR`` if set, else ``$TEXTDP_CACHE/ledgers`` (default
``~/.cache/textdp/ledgers``). The file of a dataset is named after the dataset:
a built-in name as is (``rotten-tomatoes.jsonl``), a file path by its file name
plus a short hash of its absolute path (two files with the same name in
different folders get different ledgers).

The budget caps each composition group separately (a DP epsilon per document
and a metric epsilon per token are different currencies; see
``composition.py``): a release is refused when, for its group, the composed
spend including it would exceed the budget's epsilon (or delta).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textdp.accounting.composition import compose_by_group, group_key, spent_epsilon
from textdp.accounting.guarantees import Guarantee, guarantee_from_dict
from textdp.errors import BudgetExceededError, InputError, ParameterError

__all__ = ["Ledger", "Budget", "ledger_dir", "dataset_id", "hash_input", "DEFAULT_DELTA"]

DEFAULT_DELTA = 1e-6  # delta used to convert RDP spends when no budget delta is set
LEDGER_VERSION = 1


def ledger_dir() -> Path:
    """Folder of the ledgers (see the module docstring)."""
    env = os.environ.get("TEXTDP_LEDGER_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("TEXTDP_CACHE") or str(Path.home() / ".cache" / "textdp")
    return Path(cache) / "ledgers"


def dataset_id(dataset: str | os.PathLike) -> str:
    """Stable id of a dataset: a built-in name, or ``name-<hash of absolute path>`` for a file."""
    s = str(dataset)
    p = Path(s)
    if p.exists() or os.sep in s or p.suffix:
        absolute = str(p.resolve())
        h = hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:10]
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", p.name)[:60] or "data"
        return f"{stem}-{h}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", s):
        raise ParameterError(f"dataset name {s[:40]!r} is neither an existing file nor a plain name")
    return s


def hash_input(path: str | os.PathLike | None, block: int = 1 << 22) -> str | None:
    """SHA-256 of a file's bytes (streamed, bounded memory); None for a non-file."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        return None
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        while True:
            b = fh.read(block)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


@dataclass(frozen=True)
class Budget:
    """A dataset's budget: ``epsilon`` per composition group, optional ``delta``."""

    epsilon: float
    delta: float | None = None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _line_hash(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


class Ledger:
    """The ledger of one dataset.

    >>> led = Ledger("rotten-tomatoes")            # doctest: +SKIP
    >>> led.set_budget(10.0)                       # doctest: +SKIP
    >>> led.record(MetricDP(epsilon=3.0), card)    # doctest: +SKIP  (raises BudgetExceededError when over)
    """

    def __init__(self, dataset: str | os.PathLike, directory: str | os.PathLike | None = None):
        self.dataset = str(dataset)
        self.id = dataset_id(dataset)
        self.directory = Path(directory) if directory is not None else ledger_dir()
        self.path = self.directory / f"{self.id}.jsonl"

    # ------------------------------------------------------------ reading
    def entries(self) -> list[dict[str, Any]]:
        """All entries, oldest first. Raises InputError when the file is corrupt."""
        if not self.path.exists():
            return []
        out = []
        with open(self.path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    raise InputError(f"ledger {self.path} is corrupt on line {i}; restore it from a backup") from None
        return out

    def budget(self) -> Budget | None:
        """The current budget (the last ``budget`` entry), or None."""
        b = None
        for e in self.entries():
            if e.get("type") == "budget":
                b = Budget(float(e["epsilon"]), None if e.get("delta") is None else float(e["delta"]))
        return b

    def releases(self) -> list[dict[str, Any]]:
        return [e for e in self.entries() if e.get("type") == "release"]

    def guarantees(self) -> list[Guarantee]:
        return [guarantee_from_dict(e["guarantee"]) for e in self.releases()]

    def _delta(self) -> float:
        b = self.budget()
        return b.delta if (b is not None and b.delta) else DEFAULT_DELTA

    def spent(self) -> dict[str, Guarantee]:
        """Composed spend per group: ``{group_key: guarantee}``."""
        return compose_by_group(self.guarantees(), self._delta())

    def summary(self) -> dict[str, Any]:
        """Machine-readable state: budget, per-group spend and remaining, release count."""
        b = self.budget()
        delta = self._delta()
        groups = {}
        for key, g in self.spent().items():
            eps, dlt = spent_epsilon(g, delta)
            groups[key] = {
                "guarantee": g.to_dict(),
                "describe": g.describe(),
                "epsilon": eps,
                "delta": dlt,
                "remaining_epsilon": None if b is None else b.epsilon - eps,
            }
        return {
            "dataset": self.dataset,
            "ledger": str(self.path),
            "budget": None if b is None else {"epsilon": b.epsilon, "delta": b.delta},
            "releases": len(self.releases()),
            "groups": groups,
            "chain_ok": self.verify(),
        }

    def verify(self) -> bool:
        """True when every line's ``prev`` is the hash of the line before it."""
        if not self.path.exists():
            return True
        prev = ""
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    return False
                if e.get("prev", "") != prev:
                    return False
                prev = _line_hash(line.rstrip("\n"))
        return True

    # ------------------------------------------------------------ checking
    def check(self, guarantee: Guarantee) -> None:
        """Raise BudgetExceededError (with the numbers) when ``guarantee`` would overspend.

        No budget set: always allowed.
        """
        b = self.budget()
        if b is None:
            return
        key = group_key(guarantee)
        delta = self._delta()
        new_total = compose_by_group([*self.guarantees(), guarantee], delta)[key]
        eps, dlt = spent_epsilon(new_total, delta)
        before = self.spent().get(key)
        eps_before = spent_epsilon(before, delta)[0] if before is not None else 0.0
        over_delta = b.delta is not None and dlt > b.delta * (1 + 1e-12)
        if eps > b.epsilon * (1 + 1e-12) or over_delta:
            what = guarantee.describe()
            need = "∞ (no privacy)" if math.isinf(eps) else f"{eps - eps_before:.4g}"
            delta_note = f", delta {dlt:.3g} > {b.delta:.3g}" if over_delta else ""
            raise BudgetExceededError(
                f"privacy budget of {self.dataset!r} exceeded: this release ({what}) needs ε={need}, "
                f"{eps_before:.4g} already spent in group {key} of a budget of ε={b.epsilon:g} "
                f"(remaining {max(0.0, b.epsilon - eps_before):.4g}){delta_note}; "
                "pass --force to release anyway (recorded as forced) or raise it with `textdp budget set`"
            )

    # ------------------------------------------------------------ writing
    def _append(self, entry: dict[str, Any]) -> dict[str, Any]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+", encoding="utf-8") as fh:
            with _locked(fh):
                fh.seek(0)
                prev = ""
                for line in fh:
                    if line.strip():
                        prev = _line_hash(line.rstrip("\n"))
                entry = {"v": LEDGER_VERSION, "prev": prev, **entry}
                line = json.dumps(entry, sort_keys=True, default=str, ensure_ascii=False)
                fh.seek(0, os.SEEK_END)
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        return entry

    def set_budget(self, epsilon: float, delta: float | None = None) -> dict[str, Any]:
        """Append a ``budget`` entry (the new budget replaces the old one for checks)."""
        try:
            eps = float(epsilon)
        except (TypeError, ValueError):
            raise ParameterError(f"budget epsilon must be a number, got {epsilon!r}") from None
        if not (eps > 0 and math.isfinite(eps)):
            raise ParameterError(f"budget epsilon must be a positive finite number, got {epsilon!r}")
        if delta is not None and not (0 <= float(delta) < 1):
            raise ParameterError(f"budget delta must be in [0, 1), got {delta!r}")
        return self._append({"type": "budget", "time": _now(), "dataset": self.dataset, "epsilon": eps,
                             "delta": None if delta is None else float(delta)})

    def record(
        self,
        guarantee: Guarantee,
        card: dict[str, Any] | None = None,
        input_path: str | os.PathLike | None = None,
        command: str = "",
        force: bool = False,
        input_hash: str | None = None,
    ) -> dict[str, Any]:
        """Check the budget, then append a ``release`` entry; returns the entry.

        Raises BudgetExceededError when over budget and not ``force`` (nothing is
        appended). ``card``: the privacy card written next to the output.
        ``input_hash`` skips re-hashing when the caller already hashed the input.
        """
        forced = False
        if not force:
            self.check(guarantee)
        else:
            try:
                self.check(guarantee)
            except BudgetExceededError:
                forced = True
        rnd = (card.get("randomness") or card.get("seed") or {}) if isinstance(card, dict) else {}
        seeded = bool(rnd.get("seeded", False)) if isinstance(rnd, dict) else False
        return self._append({
            "type": "release",
            "time": _now(),
            "dataset": self.dataset,
            "command": command,
            "guarantee": guarantee.to_dict(),
            "group": group_key(guarantee),
            "input_sha256": input_hash if input_hash is not None else hash_input(input_path),
            "seeded": seeded,
            "forced": forced,
            "card": card,
        })


@contextlib.contextmanager
def _locked(fh):
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
