"""The Dask engine: partitions as tasks of a ``distributed`` cluster (issue 16).

:class:`DaskEngine` runs :meth:`~textdp.engines.base.Engine.map` as one Dask task per item
(``Client.map``) on a running cluster (``scheduler=`` its address, e.g. ``tcp://10.0.0.5:8786``)
or on a :class:`distributed.LocalCluster` of worker processes that the engine starts on the
loopback address (``127.0.0.1``) and closes with :meth:`DaskEngine.close`.

**Faults.** A task that raises is retried (``retries=1``); a task whose worker process dies
is rescheduled on another worker by the scheduler (up to ``distributed.scheduler.allowed-failures``,
3 by default, then ``distributed.KilledWorker``). Because every record draws its noise from the
release key at its global index (:mod:`textdp.engines.base`), a second run of a task computes
the same bytes: nothing new is released.

**Where the key travels.** The release key lives in the :class:`~textdp.engines.base.ReleasePlan`
inside the mapped function (a task argument): it goes from the client to the scheduler and the
worker over Dask's sockets and stays in their memory. It is never ``scatter``-ed: scattered data
and task *results* are data keys that a worker may spill to its local disk under memory pressure;
task arguments are not. Task names are the job's random id and the item number (never a hash
of the function, which would be a hash of the key), and a failed task's log line
(``Compute Failed ... Task: ...``) shows ``textdp-task(...)`` and ``<partition>`` instead of the
plan and the item (so neither the key nor a partition's text reaches a worker's log). A
LocalCluster started by the engine also has spilling turned off (results are handed to the
driver and released as soon as each task finishes).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any, Callable, Sequence

from textdp.engines.base import Engine, check_cluster_address, check_workers
from textdp.errors import MissingPackageError, ParameterError, TextDPError

__all__ = ["DaskEngine"]

#: times a task that raised is run again before its error reaches the driver
TASK_RETRIES = 1


#: seconds the engine tries to reach a running scheduler (``scheduler=``) before giving up
CONNECT_TIMEOUT_S = 20

#: seconds a failed job waits for its still-running tasks before restarting the engine's own workers
DRAIN_RESTART_S = 30.0

#: worker-side states of a task that may still start or is running
_LIVE_STATES = frozenset({"ready", "constrained", "executing", "long-running", "cancelled", "resumed"})


def _job_tasks_on_worker(prefix: str, dask_worker=None) -> int:
    """Run on each worker: how many tasks named ``prefix...`` it may still start or is running."""
    return sum(1 for key, ts in list(dask_worker.state.tasks.items())
               if isinstance(key, str) and key.startswith(prefix) and ts.state in _LIVE_STATES)


@contextlib.contextmanager
def _sigint_ignored_by_children():
    """SIGINT ignored while the LocalCluster starts its worker processes (restored after): they inherit the
    disposition, so a terminal's Ctrl-C, which reaches the whole process group, interrupts the driver only.
    The driver then cancels the job and closes the cluster (one error line, no worker tracebacks). Only
    in the main thread (elsewhere Python cannot change a signal handler, and nothing is changed)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class _Opaque:
    """An item as a task argument whose repr (shown in Dask's failure log) hides its content."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return "<partition>"

    def __reduce__(self):
        return (_Opaque, (self.value,))


class _Refused:
    """A task's TextDPError (bad input, parameters or output), returned as a value: Dask would retry a raised
    one (it fails the same way again) and log it on the worker; the driver raises it (:meth:`DaskEngine.map`)."""

    __slots__ = ("exc", "tb")

    def __init__(self, exc: BaseException, tb: str):
        self.exc = exc
        self.tb = tb


class _Call:
    """``fn`` as a Dask task function: unwraps the item, shows a safe repr and tokenizes as the
    job's random id (Dask never hashes the plan the function carries)."""

    __slots__ = ("fn", "name", "token")

    def __init__(self, fn, name: str, token: str):
        self.fn = fn
        self.name = name
        self.token = token

    def __call__(self, item: _Opaque):
        try:
            return self.fn(item.value)
        except TextDPError as exc:  # bad input or parameters: the same on a retry, so returned, not raised
            import traceback

            return _Refused(exc, traceback.format_exc())

    def __repr__(self) -> str:
        return f"textdp-task({self.name})"

    def __dask_tokenize__(self):
        return ("textdp-task", self.token)

    def __reduce__(self):
        return (_Call, (self.fn, self.name, self.token))


def _import_distributed():
    try:
        import distributed  # noqa: F401
    except ImportError as e:  # pragma: no cover - the engines extra is installed in CI
        raise MissingPackageError(
            "the dask engine needs dask[distributed]: pip install 'textdp[engines]'") from e
    return distributed


class DaskEngine(Engine):
    """Partitions as tasks of a Dask ``distributed`` cluster.

    ``workers``: worker processes of the LocalCluster the engine starts (one thread each; None:
    2). ``scheduler``: address of a running scheduler (``tcp://HOST:PORT``) to use instead; the
    engine then only connects a client and never stops that cluster, and ``workers`` must be
    None (the cluster's own workers run the job). The cluster is started (or connected) on the
    first :meth:`map` or :meth:`start`; :meth:`close` (or leaving a ``with`` block) stops what
    the engine started. ParameterError for bad arguments or an unreachable scheduler;
    MissingPackageError when ``distributed`` is not installed.
    """

    name = "dask"

    def __init__(self, workers: int | None = None, scheduler: str | None = None):
        workers = check_workers(workers)
        self.scheduler = check_cluster_address(scheduler, workers,
                                               "a Dask scheduler address such as tcp://127.0.0.1:8786",
                                               "a running Dask cluster brings its own workers")
        self._n_local = workers or 2
        self._client = None
        self._cluster = None

    # ---------------------------------------------------------------------------- life cycle
    @property
    def workers(self) -> int:
        """Tasks run at once: the LocalCluster's worker processes, or the running cluster's
        worker threads (connects to it)."""
        if self.scheduler is None:
            return self._n_local
        info = self.client.scheduler_info(n_workers=-1)
        return max(1, sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values()))

    @property
    def client(self):
        """The ``distributed.Client`` (starts or connects on first use)."""
        if self._client is None:
            self.start()
        return self._client

    def start(self) -> "DaskEngine":
        """Start the LocalCluster (or connect to ``scheduler``); does nothing when already done."""
        if self._client is not None:
            return self
        _import_distributed()
        import dask
        from distributed import Client, LocalCluster

        if self.scheduler is not None:
            self._client = _connect(Client, self.scheduler)
            return self
        # workers inherit this config from their nanny: results never spill to a worker's disk,
        # and no statistical profiler thread samples the tasks (it costs CPU on every worker)
        with dask.config.set({"distributed.worker.memory.target": False,
                              "distributed.worker.memory.spill": False,
                              "distributed.worker.profile.enabled": False}), _sigint_ignored_by_children():
            cluster = LocalCluster(n_workers=self._n_local, threads_per_worker=1, processes=True,
                                   dashboard_address=None, host="127.0.0.1", silence_logs=logging.ERROR,
                                   # no dashboard; the scheduler's small HTTP server (health,
                                   # metrics) on a free loopback port instead of 8787
                                   scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        try:
            self._client = Client(cluster, set_as_default=False)
        except BaseException:
            cluster.close()
            raise
        self._cluster = cluster
        return self

    def close(self) -> None:
        """Close the client, and the LocalCluster when the engine started it."""
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        try:
            if client is not None:
                client.close()
        finally:
            if cluster is not None:
                cluster.close()

    def describe(self) -> dict:
        """Engine name and worker count (no address: the card travels with the release)."""
        return {"engine": self.name, "workers": self.workers}

    # ---------------------------------------------------------------------------------- map
    def map(self, fn: Callable[[Any], Any], items: Sequence, *, description: str | None = None,
            progress: Callable[[int], None] | None = None) -> list:
        """``[fn(item) for item in items]`` as one Dask task per item, results in item order.

        ``progress(1)`` is called on the driver as each task finishes. A task that raises is
        retried once; one that fails for good cancels the job's other tasks, waits until none
        of them is still running on a worker (so none can write after this returns), and its
        exception is raised here (its own type, with the worker's traceback)."""
        items = list(items)
        if not items:
            return []
        from distributed import as_completed

        client = self.client
        job = uuid.uuid4().hex[:16]
        label = _label(description)
        task = _Call(fn, label, job)
        keys = [f"textdp-{label}-{job}-{i}" for i in range(len(items))]
        futures = client.map(task, [_Opaque(it) for it in items], key=keys, pure=True,
                             retries=TASK_RETRIES)
        index = {f.key: i for i, f in enumerate(futures)}
        out: list = [None] * len(items)
        try:
            for fut in as_completed(futures, loop=client.loop):
                # raises the task's own exception (after its retries) when it failed for good
                r = fut.result()
                fut.release()
                if isinstance(r, _Refused):
                    if hasattr(r.exc, "add_note"):
                        r.exc.add_note("raised in a Dask task; the worker's traceback:\n" + r.tb)
                    raise r.exc
                out[index[fut.key]] = r
                if progress is not None:
                    progress(1)
        except BaseException:
            # raise only once no task of this job can still run (and write): a late attempt must
            # not recreate output after the driver has cleaned up a failed job
            client.cancel(futures)
            self._drain(f"textdp-{label}-{job}-")
            raise
        return out

    def _drain(self, prefix: str) -> None:
        """Wait until no worker holds a queued or running task whose name starts with ``prefix``
        (Dask cannot interrupt a running task; cancelling only drops its result). On the
        LocalCluster the engine started, workers still running one after ``DRAIN_RESTART_S``
        seconds are restarted; on a user's cluster the engine waits for them to end."""
        import time

        client = self._client
        start = time.monotonic()
        while True:
            try:
                busy = client.run(_job_tasks_on_worker, prefix)
            except Exception:  # a worker leaving mid-call: ask again
                busy = {"?": 1}
            busy = {w: n for w, n in busy.items() if n}
            if not busy:
                return
            if self._cluster is not None and time.monotonic() - start > DRAIN_RESTART_S:
                client.restart_workers([w for w in busy if w != "?"])
                start = time.monotonic()
            time.sleep(0.1)

    def __repr__(self) -> str:
        where = "scheduler" if self.scheduler is not None else f"LocalCluster({self._n_local} workers)"
        return f"DaskEngine({where})"


def _label(description: str | None) -> str:
    """A short, key-safe task name from the job's description (letters, digits, dashes)."""
    if not description:
        return "map"
    safe = "".join(c if c.isalnum() else "-" for c in str(description).lower()).strip("-")
    return (safe or "map")[:24]


def _connect(Client, address: str):
    """A Client of the scheduler at ``address``, or ParameterError in one line within about
    CONNECT_TIMEOUT_S seconds: an address without a port, nothing listening, or something that is
    not a Dask scheduler (an HTTP server's bytes once read as a 3.5e18-byte message length raised
    MemoryError; another kept the handshake waiting forever)."""
    import threading

    from textdp.engines.spark import _check_reachable

    url = address if "://" in address else f"tcp://{address}"
    if url.split("://", 1)[0] in ("tcp", "tls"):
        _check_reachable(url, "Dask scheduler", example="tcp://HOST:8786", shown=address)
    box: dict = {}

    def run():
        try:
            box["client"] = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s", set_as_default=False)
        except BaseException as e:  # noqa: BLE001 - reported on the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, name="textdp-dask-connect", daemon=True)
    t.start()
    t.join(CONNECT_TIMEOUT_S + 5)
    if "client" in box:
        return box["client"]
    e = box.get("error")
    why = "no answer (is it a Dask scheduler?)" if e is None else \
        ((str(e).strip().splitlines() or [type(e).__name__])[0][:200] if not isinstance(e, MemoryError)
         else "its answer is not the Dask protocol")
    raise ParameterError(f"cannot reach the Dask scheduler at {address}: {why}")
