"""The privacy-budget ledger: one append-only JSON Lines file per dataset.

Every releasing command (``textdp sanitize``, ``textdp topics train``, ...)
appends one ``release`` entry holding the guarantee, the privacy card and a
hash of the input; ``textdp budget set`` appends a ``budget`` entry. Nothing is
ever rewritten: the current budget is the last ``budget`` entry, the spend is the
composition (:mod:`textdp.accounting.composition`) of every ``release`` entry.

Tamper evidence: each line carries ``prev``, the SHA-256 of the previous line
(``""`` for the first), so an edited or deleted line breaks the chain
(:meth:`Ledger.verify`). A sidecar ``<ledger>.head`` holds the entry count and
the hash of the last line, so deleting the LAST line (which leaves a valid chain)
is detected too. Nothing is appended to a ledger that fails this check (a
release, reservation or budget change is refused with one line), so a tampered
spend is never used and ``.head`` is never rewritten over the evidence. An
attacker with write access can still rewrite both files: the
chain is tamper evidence against accidents and casual edits, not a security
boundary.

Concurrency: every write holds an exclusive ``fcntl.flock`` on a sibling
``<key>.lock`` file from the budget check to the fsync'ed append
(:meth:`Ledger.record` re-checks under the lock), so two parallel releases
cannot both pass a check that only one of them fits.

Reservations (what the CLI does): a releasing command first appends a
``reservation`` entry (:meth:`Ledger.reserve`, checked under the lock) BEFORE it
computes or writes anything, and the spend counts open reservations like
releases; when its output is written it appends the ``release`` entry that
closes the reservation (:meth:`Ledger.record` with ``reservation=``), and on
failure a ``cancel`` entry (:meth:`Ledger.cancel`). So a parallel release sees the
budget already taken and no output ever exists whose spend is not yet in the
ledger. A run killed without cleanup (SIGKILL, power loss) leaves its
reservation open: it keeps counting as spent (the safe side) and shows in
``textdp budget show``. The final release is checked again only for what it
needs beyond its reservation (e.g. a float-safety term known only after the run).

Which ledger: a dataset FILE is identified by the SHA-256 of its bytes, not by
its path, so a copy, a symlink, a hard link or a renamed file all share one
ledger (a DP budget protects a dataset, whatever it is called). The ledger file
is ``<first file name used>-<24 hex of the content hash>.jsonl`` and is looked up
by the hash. A changed file (even one byte) is a different dataset with its own
ledger: near-duplicates are NOT detected. A built-in dataset (or any plain name
given to the Python API) uses its name: ``rotten-tomatoes.jsonl``.

A dataset of parts (a folder or a glob of Parquet/CSV/JSONL files, issue 16) is identified
by its manifest: the size and SHA-256 of each part in record order, combined into one digest
(:func:`textdp.data.parts.manifest_identity`; a one-part dataset's identity is that file's
own hash, so a file and a folder holding only it share one ledger). ``textdp sanitize`` has
the engine's workers hash the parts and combines them on the driver
(:meth:`Ledger.for_content`): the lake is never read on the driver. An in-memory frame has no
bytes to hash: it is recorded under a name the caller gives (:meth:`Ledger.named`,
``dataset_id=``) or in the ledger of unidentified releases (:meth:`Ledger.unidentified`).

Where: ``$TEXTDP_LEDGER_DIR`` if set, else ``$TEXTDP_CACHE/ledgers`` (default
``~/.cache/textdp/ledgers``).

Currencies (see ``composition.py``). A composition group is a *currency*: a DP
epsilon per document (``dp/document/replace-one``), a DP/LDP epsilon per token
(``dp/token/replace-one``) and a metric epsilon per token (``metric/token``) are
never added. Every term of every release is charged (:func:`~textdp.accounting.
composition.charges`): epsilon (and delta) in a DP currency; epsilon AND the
additive epsilon0 in a metric currency (SanText+'s ``ln(1/p)`` + sampler cost,
MetricDP's sampler cost), each summed over releases. A budget entry names its
currency (``currency``) and caps ``epsilon`` (and ``delta`` in a DP currency,
``epsilon0`` in a metric one; without an explicit ``epsilon0`` cap the epsilon0
component is capped by the same number as epsilon). The current budget of a
currency is the last budget entry naming it.

A budget entry without a currency (every entry written before currencies, and
``textdp budget set DATASET --epsilon E`` without ``--currency``) is a wildcard:
it caps every currency that has no budget of its own, each separately, at that
epsilon (the behaviour before currencies), except the currencies of
:data:`~textdp.accounting.composition.NAMED_BUDGET_ONLY` (``group/<unit>``: CusText's
epsilon holds only between words of the same group), which only a budget naming them
covers. Under budgets that all name a
currency, a release in a currency none of them names is refused
(:class:`CurrencyNotBudgetedError`). With no budget at all, every release is
recorded and nothing is refused.

A release is refused (a :class:`~textdp.errors.BudgetExceededError`; the CLI's
``--force`` records it anyway with ``"forced": true`` and ``forced_reason``) when,
with a budget: a term of its guarantee is infinite (:class:`UnboundedTermError`:
SanText+ with ``p = 0``, a NoPrivacy release); its currency is not budgeted; or,
in its currency, the composed spend including it would exceed a cap.
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

from textdp.accounting.composition import (
    NAMED_BUDGET_ONLY,
    charges,
    compose_by_group,
    group_key,
    parse_currency,
    unbounded_terms,
    worst_case_per_document,
    worst_case_per_token,
)
from textdp.accounting.guarantees import Guarantee, guarantee_from_dict, positive_number
from textdp.errors import BudgetExceededError, InputError, ParameterError

__all__ = ["Ledger", "Budget", "ledger_dir", "dataset_id", "dataset_key", "hash_input", "parts_sha256", "DEFAULT_DELTA",
           "check_output_outside_ledgers", "UnboundedTermError", "CurrencyNotBudgetedError"]


class UnboundedTermError(BudgetExceededError):
    """A release with an infinite term (e.g. SanText+ with p = 0: epsilon0 = inf) under a finite budget."""


class CurrencyNotBudgetedError(BudgetExceededError):
    """A release in a currency that the dataset's budgets do not name."""

DEFAULT_DELTA = 1e-6  # delta used to convert RDP spends when no budget delta is set
LEDGER_VERSION = 1


def ledger_dir() -> Path:
    """Folder of the ledgers (see the module docstring)."""
    env = os.environ.get("TEXTDP_LEDGER_DIR")
    if env:
        return Path(env)
    from textdp.cache import cache_dir

    return cache_dir("ledgers", create=False)


def check_output_outside_ledgers(output: str | os.PathLike, directory: str | os.PathLike | None = None) -> None:
    """Raise OutputError when ``output`` lies inside the ledger folder (``directory``,
    default :func:`ledger_dir`): an output written there could replace a ledger
    file and erase the record of what was spent."""
    from textdp.errors import OutputError

    d = Path(directory) if directory is not None else ledger_dir()
    try:
        inside = Path(output).resolve().is_relative_to(d.resolve())
    except OSError:
        return
    if inside:
        raise OutputError(f"output {str(output)!r} is inside the privacy-ledger folder {str(d)!r}; "
                          "write it somewhere else (outputs there could overwrite a ledger)")


def _is_path(s: str) -> bool:
    p = Path(s)
    return p.exists() or os.sep in s or bool(p.suffix)


def dataset_key(dataset: str | os.PathLike, sha256: str | None = None) -> tuple[str, str]:
    """``(key, readable stem)`` of a dataset.

    A file: key = first 24 hex digits of the SHA-256 of its bytes (copies and links
    share it), stem = its file name. A folder or a glob of parts: the same digits of its
    manifest identity (:func:`parts_sha256`), stem = its last component. A plain name
    (built-in dataset): key = stem = the name, lower-cased. A path that does not exist raises
    InputError. ``sha256``: the file's hash (or the manifest identity) when the caller already
    has it.
    """
    from textdp.errors import InputError

    s = str(dataset)
    if _is_parts(s):  # a folder or a glob of parts: its manifest identity
        return (sha256 or parts_sha256(s))[:24], _stem_of(s)
    if _is_path(s):
        p = Path(s)
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", p.name)[:60] or "data"
        if p.is_file():
            return (sha256 or hash_input(p))[:24], stem
        if p.exists():
            return "path" + hashlib.sha256(str(p.resolve()).encode("utf-8")).hexdigest()[:20], stem
        raise InputError(f"dataset file {s[:200]!r} does not exist")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", s):
        raise ParameterError(f"dataset name {s[:40]!r} is neither an existing file nor a plain name")
    s = s.lower()  # built-in names are case-insensitive: one ledger for Rotten-Tomatoes and rotten-tomatoes
    return s, s


def dataset_id(dataset: str | os.PathLike) -> str:
    """Stable id of a dataset: a plain (built-in) name, or ``<file name>-<content hash>`` for a file.

    The ledger of an existing dataset may carry another file name (the first one used);
    lookups go by the hash (:class:`Ledger`).
    """
    key, stem = dataset_key(dataset)
    return key if key == stem else f"{stem}-{key}"


#: key and name of the ledger of unidentified releases (:meth:`Ledger.unidentified`)
UNIDENTIFIED = "_unidentified"


def _is_parts(s: str) -> bool:
    """A folder or a glob: a dataset of parts (:mod:`textdp.data.parts`)."""
    from textdp.data.parts import is_parts_input

    return is_parts_input(s)


def _stem_of(label: str) -> str:
    """A readable file-name stem from a path or glob (its last component, sanitized)."""
    name = Path(label.rstrip("/\\")).name or "data"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:60].strip("_") or "data"


def parts_sha256(dataset: str | os.PathLike) -> str:
    """The identity of a folder or glob of parts (:func:`~textdp.data.parts.manifest_identity`),
    hashing every part on THIS machine (``textdp budget`` on a folder). ``textdp sanitize``
    computes the same identity on the engine's workers instead."""
    from textdp.data.io import file_sha256
    from textdp.data.parts import find_parts, manifest_identity

    parts = find_parts(dataset)
    return manifest_identity([(p.stat().st_size, file_sha256(p)) for p in parts.paths])


def hash_input(path: str | os.PathLike | None, block: int = 1 << 22) -> str | None:
    """SHA-256 of a file's bytes (streamed, bounded memory); None for a non-file."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        return None
    from textdp.data.io import file_sha256

    return file_sha256(p, block)


@dataclass(frozen=True)
class Budget:
    """A dataset's budget in one currency (``currency``: a group key such as
    ``metric/token``; None: a wildcard that caps every currency without a budget of
    its own). ``epsilon`` caps the composed epsilon; ``delta`` the composed delta (DP
    currencies); ``epsilon0`` the composed additive term (metric currencies; None:
    capped by ``epsilon``)."""

    epsilon: float
    delta: float | None = None
    currency: str | None = None
    epsilon0: float | None = None

    @property
    def epsilon0_cap(self) -> float:
        """The cap of the additive epsilon0 component (``epsilon0``, else ``epsilon``)."""
        return self.epsilon if self.epsilon0 is None else self.epsilon0

    @classmethod
    def from_entry(cls, e: dict[str, Any]) -> "Budget":
        """The budget of a ledger ``budget`` entry (an entry without a currency: a wildcard)."""
        return cls(float(e["epsilon"]), None if e.get("delta") is None else float(e["delta"]),
                   e.get("currency") or None, None if e.get("epsilon0") is None else float(e["epsilon0"]))

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "currency": self.currency,
                "epsilon0": self.epsilon0}

    def describe(self) -> str:
        cur = self.currency or "every currency"
        extra = (f", δ = {self.delta:g}" if self.delta else "") + (
            f", ε₀ = {self.epsilon0:g}" if self.epsilon0 is not None else "")
        return f"ε = {self.epsilon:g}{extra} ({cur})"


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
        s = str(dataset)
        if _is_parts(s):  # a folder or a glob of parts: its manifest, hashed on this machine
            sha = parts_sha256(s)
            self._setup(s, sha[:24], _stem_of(s), sha, directory)
            return
        # the content hash at open time: what the budget protects, recorded with each release
        # (hashed once: the key of a file is the start of the same hash)
        sha = hash_input(dataset) if _is_path(s) else None
        key, stem = dataset_key(dataset, sha)
        self._setup(s, key, stem, sha, directory)

    def _setup(self, dataset: str, key: str, stem: str, input_sha256: str | None, directory) -> None:
        self.dataset = dataset
        self.input_sha256 = input_sha256
        self.key, self._stem = key, stem
        self.id = self.key if self.key == self._stem else f"{self._stem}-{self.key}"
        self.directory = Path(directory) if directory is not None else ledger_dir()
        self.lock_path = self.directory / f"{self.key}.lock"
        self.path = self._find()

    @classmethod
    def for_content(cls, dataset: str | os.PathLike, sha256: str,
                    directory: str | os.PathLike | None = None) -> "Ledger":
        """The ledger of a dataset whose content hash was computed elsewhere: a file's SHA-256, or
        a dataset of parts' :func:`~textdp.data.parts.manifest_identity` (per-part hashes computed
        by an engine's workers, combined on the driver; nothing is read here). ``dataset``: the
        curator's label (a path or glob; the ledger's file name starts with its last component).
        A file and a one-part dataset with the same bytes share one ledger; ParameterError when
        ``sha256`` is not a SHA-256 digest."""
        sha = str(sha256).lower()
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ParameterError(f"not a SHA-256 digest: {sha[:70]!r}")
        obj = cls.__new__(cls)
        obj._setup(str(dataset), sha[:24], _stem_of(str(dataset)), sha, directory)
        return obj

    @classmethod
    def named(cls, dataset_id: str, directory: str | os.PathLike | None = None) -> "Ledger":
        """The ledger of a dataset the caller names (``dataset_id=`` of an in-memory frame: a
        pandas, Dask, Spark or Hugging Face object has no file to hash). The name is never read
        as a path: letters, digits, ``.``, ``_``, ``-`` (first a letter or digit, at most 81),
        case-insensitive; the same name always means the same ledger, and a built-in dataset's
        name is its ledger (``Ledger.named("rotten-tomatoes")`` is ``Ledger("rotten-tomatoes")``).
        ParameterError for another name."""
        s = str(dataset_id).strip()
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}", s):
            raise ParameterError(f"dataset_id {s[:40]!r} must be a plain name: letters, digits, '.', '_' or '-' "
                                 "(first a letter or digit, at most 81 characters)")
        obj = cls.__new__(cls)
        obj._setup(s, s.lower(), s.lower(), None, directory)
        return obj

    @classmethod
    def unidentified(cls, directory: str | os.PathLike | None = None) -> "Ledger":
        """The ledger of releases whose dataset is not identified (an in-memory frame given
        without ``dataset_id=``): all such releases compose in this one ledger
        (``_unidentified.jsonl``; no plain name maps to it), so their spend is still counted,
        but no dataset's own budget sees it: the card says the release is unidentified."""
        obj = cls.__new__(cls)
        obj._setup(UNIDENTIFIED, UNIDENTIFIED, UNIDENTIFIED, None, directory)
        return obj

    @property
    def identified(self) -> bool:
        """False for :meth:`unidentified`'s ledger."""
        return self.key != UNIDENTIFIED

    def _find(self) -> Path:
        """The ledger file of this key: an existing one (any file name) or a new name."""
        if self.key != self._stem:
            found = sorted(self.directory.glob(f"*-{self.key}.jsonl")) if self.directory.is_dir() else []
            if found:
                return found[0]
            # a deleted ledger leaves its .head: keep pointing at it (under its first name), so the
            # deletion is detected whatever name the dataset is used under now
            heads = sorted(self.directory.glob(f"*-{self.key}.jsonl.head")) if self.directory.is_dir() else []
            if heads:
                return heads[0].with_name(heads[0].name[: -len(".head")])
        return self.directory / f"{self.id}.jsonl"

    @property
    def head_path(self) -> Path:
        return self.path.with_name(self.path.name + ".head")

    def exists(self) -> bool:
        """True when this dataset already has a ledger file."""
        return self.path.exists()

    @contextlib.contextmanager
    def lock(self):
        """Exclusive lock of this dataset's ledger (held across check + append)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as fh:
            with _locked(fh):
                self.path = self._find()  # another process may have created it meanwhile
                yield

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
        """The last ``budget`` entry set (in any currency), or None. For checks use
        :meth:`budgets` / :meth:`budget_for`: a dataset may have one budget per currency."""
        b = None
        for e in self.entries():
            if e.get("type") == "budget":
                b = Budget.from_entry(e)
        return b

    def budgets(self, entries: list[dict[str, Any]] | None = None) -> dict[str | None, Budget]:
        """The current budget of each currency: ``{currency: Budget}``, the last entry per
        currency (key None: the wildcard budget of entries without a currency)."""
        out: dict[str | None, Budget] = {}
        for e in self.entries() if entries is None else entries:
            if e.get("type") == "budget":
                b = Budget.from_entry(e)
                out.pop(b.currency, None)  # keep the order in which they were last set
                out[b.currency] = b
        return out

    def budget_for(self, currency: str, budgets: dict[str | None, Budget] | None = None) -> Budget | None:
        """The budget that caps ``currency``: its own, else the wildcard (except for a currency of
        :data:`~textdp.accounting.composition.NAMED_BUDGET_ONLY`, which only its own covers), else None."""
        budgets = self.budgets() if budgets is None else budgets
        if currency is not None and currency.startswith(NAMED_BUDGET_ONLY):
            return budgets.get(currency)
        return budgets.get(currency) or budgets.get(None)

    def releases(self) -> list[dict[str, Any]]:
        return [e for e in self.entries() if e.get("type") == "release"]

    def open_reservations(self, entries: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """``reservation`` entries not yet closed by a ``release`` or ``cancel`` entry."""
        entries = self.entries() if entries is None else entries
        closed = {e.get("reservation") for e in entries if e.get("type") in ("release", "cancel")}
        return [e for e in entries if e.get("type") == "reservation" and e.get("id") not in closed]

    def guarantees(self, exclude_reservation: str | None = None) -> list[Guarantee]:
        """Guarantees of every release and every open reservation (both count as spent);
        ``exclude_reservation``: leave that reservation out (the one being closed)."""
        entries = self.entries()
        spend = [e for e in entries if e.get("type") == "release"]
        spend += [e for e in self.open_reservations(entries) if e.get("id") != exclude_reservation]
        return [guarantee_from_dict(e["guarantee"]) for e in spend]

    def _delta(self, currency: str | None = None, budgets: dict[str | None, Budget] | None = None) -> float:
        """The delta used to convert RDP spends in ``currency``: its budget's delta, else DEFAULT_DELTA."""
        budgets = self.budgets() if budgets is None else budgets
        b = self.budget_for(currency, budgets) if currency is not None else budgets.get(None)
        return b.delta if (b is not None and b.delta) else DEFAULT_DELTA

    def spent(self) -> dict[str, Guarantee]:
        """Composed spend per currency (group): ``{group_key: guarantee}``."""
        gs = self.guarantees()
        budgets = self.budgets()
        out: dict[str, Guarantee] = {}
        for g in gs:
            out.setdefault(group_key(g), None)
        for key in out:
            out[key] = compose_by_group([g for g in gs if group_key(g) == key], self._delta(key, budgets))[key]
        return out

    def summary(self, document_tokens: int | None = None) -> dict[str, Any]:
        """Machine-readable state: budgets, per-currency spend of every term and what
        remains, the worst case in plain DP per token (and per document of
        ``document_tokens`` tokens when given), release count.

        ``groups[currency]``: ``epsilon``, ``delta`` (DP) or ``epsilon0`` (metric),
        ``remaining_*`` under the budget that caps it (None: no budget), ``budget``,
        ``budgeted`` (False when budgets exist but none names this currency), and
        ``worst_case_epsilon_per_token`` (None: not computed for every release, see
        ``worst_case_note``). ``worst_case``: the sum over currencies (None unless
        every currency has a figure).
        """
        entries = self.entries()
        budgets = self.budgets(entries)
        last = None
        for e in entries:
            if e.get("type") == "budget":
                last = Budget.from_entry(e)
        gs = self.guarantees()
        groups: dict[str, Any] = {}
        keys = list(dict.fromkeys(group_key(g) for g in gs))
        for key in keys:
            members = [g for g in gs if group_key(g) == key]
            b = self.budget_for(key, budgets)
            delta = self._delta(key, budgets)
            g = compose_by_group(members, delta)[key]
            ch = charges(g, delta)
            row: dict[str, Any] = {
                "currency": key,
                "guarantee": g.to_dict(),
                "describe": g.describe(),
                "epsilon": ch["epsilon"],
                "delta": ch.get("delta", 0.0),
                "remaining_epsilon": None if b is None else b.epsilon - ch["epsilon"],
                "budget": None if b is None else b.to_dict(),
                "budgeted": b is not None or not budgets,
            }
            if "epsilon0" in ch:
                row["epsilon0"] = ch["epsilon0"]
                row["remaining_epsilon0"] = None if b is None else b.epsilon0_cap - ch["epsilon0"]
            wc, note = worst_case_per_token(g)
            missing = sum(1 for m in members if worst_case_per_token(m)[0] is None)
            if wc is None and missing:
                note = f"{note} for {missing} of {len(members)} releases"
            row["worst_case_epsilon_per_token"] = wc
            row["worst_case_note"] = note
            if document_tokens is not None:
                row["worst_case_epsilon_per_document"] = worst_case_per_document(g, document_tokens)[0]
            groups[key] = row
        per_token = [r["worst_case_epsilon_per_token"] for r in groups.values()]
        worst = {
            "per_token": None if (not per_token or any(x is None for x in per_token)) else float(sum(per_token)),
            "note": ("sum over currencies of the plain-DP worst case for a change of one token "
                     "(sequential composition); None when a currency has no figure"),
        }
        if document_tokens is not None:
            per_doc = [r["worst_case_epsilon_per_document"] for r in groups.values()]
            worst["document_tokens"] = int(document_tokens)
            worst["per_document"] = (None if (not per_doc or any(x is None for x in per_doc))
                                     else float(sum(per_doc)))
        return {
            "dataset": self.dataset,
            "ledger": str(self.path),
            "budget": None if last is None else last.to_dict(),
            "budgets": {("*" if c is None else c): b.to_dict() for c, b in budgets.items()},
            "releases": len(self.releases()),
            "open_reservations": len(self.open_reservations(entries)),
            "groups": groups,
            "worst_case": worst,
            "chain_ok": self.verify(),
        }

    def verify(self) -> bool:
        """True when every line's ``prev`` is the hash of the line before it and the
        count and last hash match the ``.head`` sidecar (a deleted last line fails)."""
        if not self.path.exists():
            return not self.head_path.exists()  # a head without its ledger: the ledger was deleted
        prev, n = "", 0
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
                n += 1
        if n == 0:
            return not self.head_path.exists()
        try:
            head = json.loads(self.head_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(head, dict) and head.get("count") == n and head.get("last") == prev

    # ------------------------------------------------------------ checking
    def check(self, guarantee: Guarantee, exclude_reservation: str | None = None) -> None:
        """Raise BudgetExceededError (one line, with the numbers) when ``guarantee`` may not
        be released under the dataset's budgets: an infinite term (UnboundedTermError), a
        currency no budget names (CurrencyNotBudgetedError), or a composed epsilon,
        epsilon0 or delta over its cap.

        No budget set: always allowed. Open reservations count as spent, except
        ``exclude_reservation`` (the reservation this guarantee replaces). Raises
        InputError first when the ledger fails its integrity check.
        """
        reason = self.refusal(guarantee, exclude_reservation)
        if reason is not None:
            raise reason

    def refusal(self, guarantee: Guarantee, exclude_reservation: str | None = None) -> BudgetExceededError | None:
        """The error :meth:`check` would raise for ``guarantee`` (None: allowed). Raises
        InputError when the ledger fails its integrity check."""
        self.check_integrity()
        entries = self.entries()
        budgets = self.budgets(entries)
        if not budgets:
            return None
        key = group_key(guarantee)
        b = self.budget_for(key, budgets)
        force_hint = "pass --force to release anyway (recorded as forced, and stated on the card)"
        infinite = unbounded_terms(guarantee)
        if infinite:
            term, why = infinite[0]
            shown = b if b is not None else next(iter(budgets.values()))
            return _refused(UnboundedTermError,
                            f"{why}; this release ({guarantee.describe()}) has {term} = ∞ and no finite budget "
                            f"covers it (budget of {self.dataset!r}: {shown.describe()})", force_hint)
        if b is None:
            named = ", ".join(sorted(c for c in budgets if c is not None))
            if key.startswith(NAMED_BUDGET_ONLY):
                shown = "; ".join(x.describe() for x in budgets.values())
                why = (f"this release ({guarantee.describe()}) spends currency {key}, which only a budget naming "
                       f"it covers (its ε holds only between words of the same group), and the budgets of "
                       f"{self.dataset!r} are: {shown}")
            else:
                why = (f"this release ({guarantee.describe()}) spends currency {key}, but the budget of "
                       f"{self.dataset!r} names only {named}")
            return _refused(CurrencyNotBudgetedError, why,
                            f"set one for it with `textdp budget set DATASET --epsilon E --currency {key}` or "
                            f"{force_hint}", sep=": ")
        delta = self._delta(key, budgets)
        others = self.guarantees(exclude_reservation)
        new_total = compose_by_group([*others, guarantee], delta)[key]
        after = charges(new_total, delta)
        before_g = compose_by_group(others, delta).get(key)
        before = charges(before_g, delta) if before_g is not None else {k: 0.0 for k in after}
        # what of "before" is released and what is only reserved by open reservations (a run in
        # progress, or one killed before it could close its reservation): told apart in the message
        entries_now = self.entries()
        pending = [e for e in self.open_reservations(entries_now)
                   if e.get("id") != exclude_reservation and e.get("group") == key]
        released_g = compose_by_group([guarantee_from_dict(e["guarantee"]) for e in entries_now
                                       if e.get("type") == "release" and e.get("group") == key], delta).get(key)
        released = charges(released_g, delta) if released_g is not None else {k: 0.0 for k in after}

        def spent_text(term: str) -> str:
            done, total = released.get(term, 0.0), before.get(term, 0.0)
            if not pending:
                return f"{total:.4g} already spent"
            n = len(pending)
            return (f"{done:.4g} already spent and {max(0.0, total - done):.4g} reserved by "
                    f"{'an open reservation' if n == 1 else f'{n} open reservations'} (a release in progress, or a "
                    "run killed before it finished: `textdp budget reservations DATASET` lists them)")

        fix = f"{force_hint} or raise it with `textdp budget set`"
        eps, eps_before = after["epsilon"], before["epsilon"]
        over_delta = "delta" in after and b.delta is not None and after["delta"] > b.delta * (1 + 1e-12)
        if eps > b.epsilon * (1 + 1e-12) or over_delta:
            need = "∞ (no privacy)" if math.isinf(eps) else f"{eps - eps_before:.4g}"
            delta_note = f", delta {after['delta']:.3g} > {b.delta:.3g}" if over_delta else ""
            return _refused(BudgetExceededError,
                            f"privacy budget of {self.dataset!r} exceeded: this release ({guarantee.describe()}) "
                            f"needs ε={need}, {spent_text('epsilon')} in currency {key} of a budget of "
                            f"ε={b.epsilon:g} (remaining {max(0.0, b.epsilon - eps_before):.4g}){delta_note}", fix)
        if "epsilon0" in after and after["epsilon0"] > b.epsilon0_cap * (1 + 1e-12):
            cap = b.epsilon0_cap
            return _refused(BudgetExceededError,
                            f"privacy budget of {self.dataset!r} exceeded: this release ({guarantee.describe()}) "
                            f"needs ε₀={after['epsilon0'] - before['epsilon0']:.4g} (the additive term per "
                            f"{guarantee.unit}), {spent_text('epsilon0')} in currency {key} of a budget "
                            f"of ε₀={cap:g} (remaining {max(0.0, cap - before['epsilon0']):.4g}"
                            + ("" if b.epsilon0 is not None else "; without --epsilon0 the budget's ε caps ε₀ too")
                            + ")", fix)
        return None

    # ------------------------------------------------------------ writing
    def check_integrity(self) -> None:
        """Raise InputError when :meth:`verify` fails (an edited, truncated or deleted
        ledger): nothing is appended to a ledger whose spend cannot be trusted, so a
        release can neither rely on an edited spend nor rewrite ``.head`` and erase
        the evidence. Called under the lock before every append."""
        if not self.verify():
            what = ("is missing but its .head sidecar exists (the ledger was deleted)"
                    if not self.path.exists() else "fails its hash-chain check (an entry was edited, removed or added)")
            raise InputError(f"privacy ledger {str(self.path)!r} {what}; nothing is recorded on a ledger that "
                             "cannot be trusted: restore it and its .head from a backup "
                             "(`textdp budget verify DATASET` checks it)")

    def _append(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Append one entry; the caller holds :meth:`lock`. Raises InputError when the
        ledger fails its integrity check (:meth:`check_integrity`)."""
        self.check_integrity()
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+", encoding="utf-8") as fh:
            with _locked(fh):
                fh.seek(0)
                prev, n = "", 0
                for line in fh:
                    if line.strip():
                        prev = _line_hash(line.rstrip("\n"))
                        n += 1
                entry = {"v": LEDGER_VERSION, "prev": prev, **entry}
                # strict JSON (an infinite epsilon0 is written "inf", as on the cards; read back by
                # guarantee_from_dict): a bare Infinity token is refused by strict parsers
                from textdp.accounting.card import json_safe

                line = json.dumps(json_safe(entry), sort_keys=True, default=str, ensure_ascii=False, allow_nan=False)
                fh.seek(0, os.SEEK_END)
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        tmp = self.head_path.with_name(self.head_path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"count": n + 1, "last": _line_hash(line)}), encoding="utf-8")
        os.replace(tmp, self.head_path)
        return entry

    def set_budget(self, epsilon: float, delta: float | None = None, currency: str | None = None,
                   epsilon0: float | None = None) -> dict[str, Any]:
        """Append a ``budget`` entry: it replaces the budget of its currency for checks.

        ``currency``: a group key or short form (:func:`~textdp.accounting.composition.
        parse_currency`); None: a wildcard budget for every currency without its own.
        ``delta``: the cap of a DP currency's composed delta; ``epsilon0``: the cap of a
        metric currency's composed additive term (default: ``epsilon``).
        """
        def positive(x, name):
            return positive_number(x, f"budget {name}")

        eps = positive(epsilon, "epsilon")
        e0 = None if epsilon0 is None else positive(epsilon0, "epsilon0")
        try:
            dlt = None if delta is None else float(delta)
        except (TypeError, ValueError):
            raise ParameterError(f"budget delta must be a number, got {delta!r}") from None
        if dlt is not None and not (0 <= dlt < 1):
            raise ParameterError(f"budget delta must be in [0, 1), got {delta!r}")
        cur = None if currency is None else parse_currency(currency)
        if cur is not None and cur.startswith(("metric/", "group/")) and dlt is not None:
            raise ParameterError(f"--delta applies to dp/... currencies; {cur} has no delta (cap its additive term "
                                 "with --epsilon0)")
        if cur is not None and cur.startswith("dp/") and e0 is not None:
            raise ParameterError(f"--epsilon0 applies to metric/... currencies; {cur} has no additive term")
        with self.lock():
            return self._append({"type": "budget", "time": _now(), "dataset": self.dataset, "epsilon": eps,
                                 "delta": dlt, "currency": cur, "epsilon0": e0,
                                 "input_sha256": self.input_sha256})

    def reserve(self, guarantee: Guarantee, command: str = "", force: bool = False,
                outputs: list[str | os.PathLike] | None = None) -> str:
        """Check the budget and append a ``reservation`` entry under the lock; returns its id.

        Call before computing a release; close it with :meth:`record` (``reservation=id``)
        or :meth:`cancel`. Until closed it counts as spent. Raises BudgetExceededError
        when over budget and not ``force`` (nothing is appended).

        The entry records the process (``pid``, ``host``) and ``outputs``: the absolute paths
        the release will write (its output and card), so that a reservation left open by a
        killed run can be settled (:meth:`settle`): cancelled when none of them exists, else
        committed.
        """
        import socket
        import uuid

        rid = uuid.uuid4().hex
        with self.lock():
            refused = self.refusal(guarantee)  # checks the ledger's integrity first
            if refused is not None and not force:
                raise refused
            entry = {"type": "reservation", "id": rid, "time": _now(), "dataset": self.dataset,
                     "command": command, "guarantee": guarantee.to_dict(), "group": group_key(guarantee),
                     "forced": refused is not None, "pid": os.getpid(), "host": socket.gethostname()}
            if outputs is not None:
                entry["outputs"] = [os.path.abspath(os.fspath(o)) for o in outputs]
            if refused is not None:
                entry["forced_reason"] = _reason(refused)
            self._append(entry)
        return rid

    def forced_reason(self, reservation: str) -> str | None:
        """Why reservation ``reservation`` was forced (the refusal it overrode), or None when
        it was not forced (or is unknown). The CLI states it on the terminal and the card."""
        for e in self.entries():
            if e.get("type") == "reservation" and e.get("id") == reservation:
                return e.get("forced_reason") or ("forced" if e.get("forced") else None)
        return None

    def cancel(self, reservation: str) -> dict[str, Any] | None:
        """Close an open reservation without a release (the run failed or was refused);
        returns the ``cancel`` entry, or None when the reservation is not open or the
        ledger fails its integrity check (the reservation then stays counted as spent:
        the safe side; the caller is already on an error path)."""
        with self.lock():
            if not self.verify() or not any(e.get("id") == reservation for e in self.open_reservations()):
                return None
            return self._append({"type": "cancel", "reservation": reservation, "time": _now(),
                                 "dataset": self.dataset})

    def find_open_reservation(self, prefix: str) -> dict[str, Any]:
        """The open reservation whose id is ``prefix`` or starts with it; ParameterError (one line)
        when none or several match."""
        prefix = prefix.strip().lower()
        opened = self.open_reservations()
        hits = [e for e in opened if str(e.get("id", "")).startswith(prefix)] if prefix else []
        if len(hits) == 1:
            return hits[0]
        if not hits:
            closed = any(e.get("type") == "reservation" and str(e.get("id", "")).startswith(prefix)
                         for e in self.entries()) if prefix else False
            raise ParameterError(f"no open reservation {prefix[:40]!r} in {self.path}"
                                 + ("; it is already closed (released, cancelled or settled)" if closed else
                                    "; `textdp budget reservations DATASET` lists the open ones"))
        raise ParameterError(f"{len(hits)} open reservations start with {prefix!r}; give more of the id")

    def settle(self, reservation: str, commit: bool, reason: str, card: dict[str, Any] | None = None,
               by: str = "textdp budget settle") -> dict[str, Any]:
        """Close an open reservation left by a run that cannot close it (killed, lost): with
        ``commit`` a ``release`` entry charging its guarantee (its output or card reached disk:
        a release on disk is spent; ``card``: that card when readable), else a ``cancel`` entry
        (nothing of it exists). Both record ``settled`` (``reason``, ``by``). Raises
        ParameterError when the reservation is not open, InputError when the ledger fails its
        integrity check. No budget check: an open reservation is already counted as spent."""
        with self.lock():
            self.check_integrity()
            r = next((e for e in self.open_reservations() if e.get("id") == reservation), None)
            if r is None:
                raise ParameterError(f"reservation {reservation!r} is not open in {self.path}")
            settled = {"reason": reason, "by": by, "pid": os.getpid()}
            if not commit:
                return self._append({"type": "cancel", "reservation": reservation, "time": _now(),
                                     "dataset": self.dataset, "settled": settled})
            entry = self._record_locked(guarantee_from_dict(r["guarantee"]), card, r.get("command", ""),
                                        bool(r.get("forced")), self.input_sha256, reservation,
                                        r.get("forced_reason"), settled=settled)
            return entry

    def record(
        self,
        guarantee: Guarantee,
        card: dict[str, Any] | None = None,
        input_path: str | os.PathLike | None = None,
        command: str = "",
        force: bool = False,
        input_hash: str | None = None,
        reservation: str | None = None,
    ) -> dict[str, Any]:
        """Check the budget and append a ``release`` entry atomically (one exclusive
        lock held from the check to the fsync'ed append); returns the entry.

        Raises BudgetExceededError when over budget and not ``force`` (nothing is
        appended). ``card``: the privacy card written next to the output.
        ``input_hash`` skips re-hashing when the caller already hashed the input
        (default: the hash of ``input_path``, else the hash taken when the ledger was opened).
        ``reservation``: the id from :meth:`reserve` this release closes (the check then
        replaces the reservation's guarantee by ``guarantee``); raises ParameterError
        when that reservation is not open.
        """
        if input_hash is None:
            input_hash = hash_input(input_path) if input_path is not None else self.input_sha256
        with self.lock():
            self.check_integrity()
            if reservation is not None and not any(e.get("id") == reservation for e in self.open_reservations()):
                raise ParameterError(f"reservation {reservation!r} is not open in {self.path}")
            refused = self.refusal(guarantee, exclude_reservation=reservation)
            if refused is not None and not force:
                raise refused
            return self._record_locked(guarantee, card, command, refused is not None, input_hash, reservation,
                                       None if refused is None else _reason(refused))

    def _record_locked(self, guarantee, card, command, forced, input_hash, reservation=None,
                       forced_reason=None, settled=None) -> dict[str, Any]:
        rnd = (card.get("randomness") or card.get("seed") or {}) if isinstance(card, dict) else {}
        seeded = bool(rnd.get("seeded", False)) if isinstance(rnd, dict) else False
        entry = {
            "type": "release",
            "time": _now(),
            "dataset": self.dataset,
            "command": command,
            "guarantee": guarantee.to_dict(),
            "group": group_key(guarantee),
            "input_sha256": input_hash,
            "seeded": seeded,
            "forced": forced,
            "card": card,
        }
        if reservation is not None:
            entry["reservation"] = reservation
        if forced_reason is not None:
            entry["forced_reason"] = forced_reason
        if settled is not None:
            entry["settled"] = settled
        return self._append(entry)


def _refused(cls: type[BudgetExceededError], reason: str, fix: str, sep: str = "; ") -> BudgetExceededError:
    """A refusal: its message is ``reason`` + ``sep`` + ``fix`` (one line); ``.reason`` keeps what is
    refused without the fix (what a forced release records and states on its card)."""
    exc = cls(f"{reason}{sep}{fix}")
    exc.reason = reason
    return exc


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or str(exc)


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
