"""The engine interface: map a function over partitions, then commit on the driver.

Every engine (local threads, Dask, Spark) offers one operation, :meth:`Engine.map`: apply a
picklable function to each item of a list on the engine's workers and return the results in
item order. What a release does with it is engine-independent (:mod:`textdp.engines.parts`
for files, :mod:`textdp.engines.frames` for in-memory frames); the mechanisms never know which
engine runs them.

**Exactly-once noise.** A release's randomness is its 256-bit key
(:class:`textdp.noise.keyed.ReleaseKey`) and the *global record index* of each document (input
file order, then row): document ``i`` draws every token from the keyed stream ``i``
(:meth:`textdp.sanitize.base.TokenSanitizer.sanitize_with_stats` with ``first_record=``). A task
that is retried, run speculatively twice, or split differently computes the same bytes, so a
second attempt releases nothing new (design.md, "Everything the output reveals is part of the
release"; issue 16).

**The key on workers.** :class:`ReleasePlan` carries the mechanism's constructor call and the
release key to the workers inside the task itself (the pickled function argument, sent over the
engine's socket to the worker's memory). It is never written to a card, a log line (its repr
hides the key), a checkpoint or a file by textdp; see each engine module for what its engine
may spill and how that is prevented or encrypted.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from textdp.errors import ParameterError

__all__ = ["Engine", "LocalEngine", "ReleasePlan", "sanitize_records", "check_workers"]

T = TypeVar("T")
R = TypeVar("R")


def check_workers(workers, name: str = "--workers") -> int | None:
    """``workers`` as a positive int (None stays None); ParameterError otherwise."""
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError(f"{name} must be a positive number of workers, got {workers!r}")
    return int(workers)


def check_cluster_address(address, workers, flag_example: str, brings: str) -> str | None:
    """A running cluster's address (``--scheduler``) stripped, or None; ParameterError when both it and
    ``workers`` are given (``brings``: what the cluster brings instead), or when it is not a non-empty string
    (``flag_example``: what ``--scheduler`` must be, e.g. "a Dask scheduler address such as tcp://…")."""
    if address is None:
        return None
    if workers is not None:
        raise ParameterError(f"give --scheduler or --workers, not both: {brings}")
    if not isinstance(address, str) or not address.strip():
        raise ParameterError(f"--scheduler must be {flag_example}, got {address!r}")
    return address.strip()


class Engine(ABC):
    """Where a release's partitions run. ``name``: ``local`` | ``dask`` | ``spark``;
    ``workers``: the number of partitions processed at once (an engine's slots)."""

    name: str = "engine"
    workers: int = 1

    @abstractmethod
    def map(self, fn: Callable[[T], R], items: Sequence[T], *, description: str | None = None,
            progress: Callable[[int], None] | None = None) -> list[R]:
        """``[fn(item) for item in items]`` computed on the engine's workers, in item order.

        ``fn`` must be a picklable top-level function whose result depends only on its item
        (a retried or speculative task then returns the same result). ``progress(k)`` is called
        on the driver as ``k`` more items finish. A task that fails for good raises its
        exception on the driver (the engine's own retries happen first)."""

    def close(self) -> None:
        """Release the engine's resources (a cluster the engine started itself)."""

    def describe(self) -> dict:
        """Public facts for the card: engine name and worker count (no address, no host name)."""
        return {"engine": self.name, "workers": self.workers}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class LocalEngine(Engine):
    """Partitions on threads of this process (today's path). ``workers=None``: 1 (each partition
    then uses the mechanism's own sampler threads, ``--workers`` of ``textdp sanitize``)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = check_workers(workers) or 1

    def map(self, fn, items, *, description=None, progress=None):
        items = list(items)
        if self.workers == 1 or len(items) <= 1:
            out = []
            for it in items:
                out.append(fn(it))
                if progress is not None:
                    progress(1)
            return out
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="textdp-local") as pool:
            futures = [pool.submit(fn, it) for it in items]
            out = []
            for f in futures:  # in item order; the first failure raises here
                out.append(f.result())
                if progress is not None:
                    progress(1)
            return out


# ------------------------------------------------------------------------------- mechanism transport
_LOCAL = threading.local()  # per-thread cache of rebuilt mechanisms (a mechanism is not thread-safe)


@dataclass(frozen=True, repr=False)
class ReleasePlan:
    """What a worker needs to draw one release's noise: the mechanism's class and constructor
    arguments (not its embedding table, loaded on the worker by name or path), the fitted counts
    of a corpus-dependent mechanism, and the release key.

    Build it on the driver with :meth:`of` after ``mech.begin_release()``; a worker calls
    :meth:`mechanism` (rebuilt once per process and thread, then reused with this plan's key).
    Embeddings given by name (a built-in table) or by path must be readable on every worker; an
    :class:`~textdp.embeddings.Embeddings` object is pickled with the plan (its whole table).
    The repr never shows the key.
    """

    cls: type
    args: tuple
    kwargs: dict
    key: Any  # textdp.noise.keyed.ReleaseKey
    seed_info: dict = field(default_factory=dict)
    fitted: Any = None

    @classmethod
    def of(cls, mech) -> "ReleasePlan":
        """The plan of ``mech``'s current release (``mech.begin_release()`` first; ParameterError
        when no release was begun or the mechanism was not built through its constructor)."""
        call = getattr(mech, "_init_call", None)
        if call is None:
            raise ParameterError(f"{type(mech).__name__} cannot be sent to workers (built without its constructor)")
        key = getattr(mech, "_release_key", None)
        if key is None:
            raise ParameterError("begin the release first (mech.begin_release()): the plan carries its key")
        args, kwargs = call
        kwargs = {k: v for k, v in kwargs.items() if k != "rng"}  # the key travels instead
        fitted = mech._fitted if getattr(mech, "corpus_dependent", False) else None
        return cls(type(mech), tuple(args), kwargs, key, dict(getattr(mech, "seed_info", {}) or {}), fitted)

    def __repr__(self) -> str:
        return f"ReleasePlan({self.cls.__name__}, key=<secret>)"

    def _cache_key(self) -> str:
        h = hashlib.sha256()
        h.update(f"{self.cls.__module__}.{self.cls.__qualname__}".encode())
        h.update(pickle.dumps((self.args, sorted(self.kwargs.items())), protocol=4))
        if self.fitted is not None:
            h.update(pickle.dumps(self.fitted, protocol=4))
        return h.hexdigest()

    def mechanism(self):
        """The mechanism, rebuilt (once per worker process and thread) and set to this plan's key.
        Its ``begin_release`` is disabled: a worker never draws a key of its own."""
        cache = getattr(_LOCAL, "mechs", None)
        if cache is None:
            cache = _LOCAL.mechs = {}
        ck = self._cache_key()
        mech = cache.get(ck)
        if mech is None:
            mech = self.cls(*self.args, **self.kwargs)
            if self.fitted is not None:
                mech._fitted = self.fitted
                mech._prepared = False
            if len(cache) >= 4:  # a worker serving several jobs keeps the latest few
                cache.pop(next(iter(cache)))
            cache[ck] = mech
        mech._release_key = self.key
        mech._gen = None
        mech._seed = None
        mech.seed_info = dict(self.seed_info)
        mech.begin_release = _no_new_key
        return mech


def _no_new_key() -> None:
    raise ParameterError("a worker's mechanism draws with the release's key only (no new release on a worker)")


def sanitize_records(plan: ReleasePlan, texts: Sequence, first_record: int):
    """Sanitize ``texts`` (str or None; a None is the empty document, given back as None) whose
    first document is record ``first_record`` of the release. Returns ``(released, stats)``:
    ``released[i]`` is ``texts[i]`` sanitized with the keyed streams of record
    ``first_record + i``, so any split of a corpus gives the same bytes. ``stats`` are the
    curator's private counts (:class:`textdp.sanitize.base.SanitizeStats`)."""
    if isinstance(first_record, bool) or int(first_record) != first_record or first_record < 0:
        raise ParameterError(f"first_record must be a non-negative integer, got {first_record!r}")
    mech = plan.mechanism()
    texts = list(texts)
    out, stats = mech.sanitize_with_stats(["" if t is None else t for t in texts], first_record=int(first_record))
    return [None if t is None else o for t, o in zip(texts, out)], stats


def default_workers() -> int:
    """The machine's CPU count (at least 1)."""
    return max(1, os.cpu_count() or 1)
