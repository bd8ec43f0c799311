"""The Spark engine: partitions as tasks of a Spark job (issue 16).

:class:`SparkEngine` runs :meth:`~textdp.engines.base.Engine.map` as one Spark task per item
(``sc.parallelize(items, numSlices=len(items)).map(fn).collect()``) on the running SparkSession
when the user has one, on a cluster (``master=``, e.g. ``spark://HOST:7077`` or ``yarn``), or in
local mode ``local[N,2]``: N Python worker processes, and a task that fails is run a second time
(Spark's local mode retries a failed task only when the second number is given).

**Faults.** A task that raises or whose Python worker dies is retried by Spark (local mode:
once; a cluster: ``spark.task.maxFailures``, 4 by default). Every record draws its noise from the
release key at its global index (:mod:`textdp.engines.base`), so a retried or speculative task
computes the same bytes and releases nothing new. A task that fails for good raises its own
exception (type and message, with the worker's traceback as a note) on the driver.

**Where the key travels.** The release key lives in the :class:`~textdp.engines.base.ReleasePlan`
inside the mapped function. PySpark pickles that function into the job's task closure, which the
driver sends to the executors' memory. Spark keeps task closures as broadcast blocks that it may
store on local disk (and a function that pickles larger than ``spark.broadcast`` threshold, 1 MB,
e.g. a plan that carries an :class:`~textdp.embeddings.Embeddings` object, becomes a broadcast
variable): the engine therefore starts its session with ``spark.io.encryption.enabled=true``, so
anything Spark writes to local disk (blocks, shuffle and spill files) is AES-encrypted with a key
held in memory only, and refuses a running session that has it off. The items themselves (a task
description may carry the plan as well) go from Python to the JVM through ``sc.parallelize``:
over a local socket when encryption is on (PySpark writes them to a temporary file otherwise). The Web UI is off, the
driver binds to ``127.0.0.1`` in local mode, and Spark's own log and console progress bar are off
(``FATAL`` only, through a log4j2 configuration given to the driver JVM; failures reach the driver
as exceptions).
"""

from __future__ import annotations

import base64
import os
import pickle
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
import uuid
import warnings
from typing import Any, Callable, Sequence

from textdp.engines.base import Engine, check_cluster_address, check_workers
from textdp.errors import MissingPackageError, ParameterError

__all__ = ["SparkEngine", "SparkJobError"]

#: Spark's own log level in a session the engine starts: failures reach the driver as exceptions
#: (a retried task that then succeeds is not an error), so Spark's log stays silent
SPARK_LOG_LEVEL = "FATAL"

# The driver JVM's log4j2 configuration in a session the engine starts: everything at
# SPARK_LOG_LEVEL, including the loggers whose level Spark's shell start-up consults (so it prints
# neither "Using Spark's default log4j profile" nor "Setting default log level"). The JVM's own
# "WARNING: Using incubator modules" line (Spark's launcher always adds that module) remains.
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = {level}
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
logger.context.name = org.apache.spark.SparkContext
logger.context.level = {level}
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
"""

#: attempts of a task in local mode (``local[N,2]``): the first run and one retry
LOCAL_ATTEMPTS = 2

_MARK = "textdp-task-error"
_MARK_RE = re.compile(re.escape(_MARK) + r":([A-Za-z0-9+/=]+):")
_MAX_BLOB = 1 << 16


class SparkJobError(RuntimeError):
    """A Spark job failed for a reason other than an exception raised by textdp's function
    (a crashed Python worker on its last attempt, a lost executor, the JVM)."""


class _TaskFailed(Exception):
    """Raised on a worker: carries the task's exception, pickled, to the driver."""


def _encode_failure(exc: BaseException) -> str:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        blob = pickle.dumps((exc, tb), protocol=4)
        pickle.loads(blob)
    except Exception:
        blob = b""
    if not blob or len(blob) > _MAX_BLOB:
        blob = pickle.dumps((RuntimeError(f"{type(exc).__name__}: {exc}"[:2000]), tb[-8000:]), protocol=4)
    return base64.b64encode(blob).decode("ascii")


class _Task:
    """``fn`` as the function of a Spark task: a failure is re-raised with its pickled
    exception in the message, which the driver turns back into the exception itself."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, item):
        try:
            return self.fn(item)
        except Exception as exc:
            raise _TaskFailed(f"{type(exc).__name__} {_MARK}:{_encode_failure(exc)}:") from exc

    def __repr__(self) -> str:
        return "textdp-task"


def _driver_exception(err: BaseException) -> BaseException:
    """The exception a failed job raises on the driver: the task's own when it was carried."""
    found = _MARK_RE.findall(str(err))
    if found:
        try:
            exc, tb = pickle.loads(base64.b64decode(found[-1]))
            if isinstance(exc, BaseException):
                if hasattr(exc, "add_note"):
                    exc.add_note("raised in a Spark task (after Spark's retries); the worker's traceback:\n" + tb)
                return exc
        except Exception:
            pass
    first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
    return SparkJobError(f"the Spark job failed: {first[:500]}")


def _has_java() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


class SparkEngine(Engine):
    """Partitions as tasks of a Spark job.

    ``workers``: Python worker processes of a local-mode session the engine starts
    (``local[workers,2]``; None: 2). ``master``: a cluster's master URL (``spark://HOST:7077``,
    ``yarn``, ``k8s://...``) to start the session on instead (``workers`` must then be None: the
    cluster's executors run the job). When a SparkSession is already running in this process
    (yours), the engine uses it as it is and never stops it; it must have
    ``spark.io.encryption.enabled=true`` (ParameterError otherwise).

    The session is started on the first :meth:`map` or :meth:`start`; :meth:`close` stops it
    when the engine started it. Needs ``pyspark`` (MissingPackageError: ``pip install
    'textdp[engines]'``) and a Java 17 runtime (MissingPackageError when ``java`` is not found).
    """

    name = "spark"

    def __init__(self, workers: int | None = None, master: str | None = None):
        workers = check_workers(workers)
        self.master = check_cluster_address(master, workers,
                                            "a Spark master URL such as spark://127.0.0.1:7077",
                                            "a Spark cluster (--scheduler, its master URL) brings its own executors")
        self._n_local = workers or 2
        self._session = None
        self._owned = False

    # ---------------------------------------------------------------------------- life cycle
    @property
    def session(self):
        """The SparkSession (started, or the running one taken, on first use)."""
        if self._session is None:
            self.start()
        return self._session

    @property
    def workers(self) -> int:
        """Tasks run at once: N of ``local[N,2]``, else the session's default parallelism."""
        if self._session is None and self.master is None:
            return self._n_local
        return max(1, int(self.session.sparkContext.defaultParallelism))

    @property
    def local_master(self) -> str:
        """The local-mode master URL the engine starts when no session runs and no master is given."""
        return f"local[{self._n_local},{LOCAL_ATTEMPTS}]"

    def start(self) -> "SparkEngine":
        """Take the running SparkSession, or start one; does nothing when already done."""
        if self._session is not None:
            return self
        with warnings.catch_warnings():  # pyspark 4.3 warns that pandas 3 is newer than it knows
            warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                                    category=FutureWarning)
            return self._start()

    def _start(self) -> "SparkEngine":
        try:
            from pyspark import SparkContext
            from pyspark.sql import SparkSession
        except ImportError as e:  # pragma: no cover - the engines extra is installed in CI
            raise MissingPackageError("the spark engine needs pyspark: pip install 'textdp[engines]'") from e

        running = SparkContext._active_spark_context
        if running is not None:
            session = SparkSession.builder.getOrCreate()
            enc = session.sparkContext.getConf().get("spark.io.encryption.enabled", "false")
            if str(enc).strip().lower() != "true":
                raise ParameterError(
                    "the running SparkSession has spark.io.encryption.enabled=false; textdp sends the "
                    "release key in task closures that Spark may write to local disk: start the session "
                    "with .config('spark.io.encryption.enabled', 'true')")
            self._session, self._owned = session, False
            return self

        if not _has_java():
            raise MissingPackageError(
                "the spark engine needs a Java 17 runtime and none was found (no java on PATH or in "
                "JAVA_HOME): install one, e.g. apt-get install openjdk-17-jre-headless")
        master = self.master or self.local_master
        local = master.startswith("local")
        if local:
            # the workers must run this Python (the one with textdp and pyarrow), not `python` on PATH
            os.environ["PYSPARK_PYTHON"] = sys.executable
            os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        log_dir = tempfile.mkdtemp(prefix="textdp-spark-log4j2-")
        log_conf = os.path.join(log_dir, "log4j2.properties")
        with open(log_conf, "w", encoding="utf-8") as fh:
            fh.write(_LOG4J2.format(level=SPARK_LOG_LEVEL.lower()))
        builder = (SparkSession.builder.master(master).appName("textdp")
                   .config("spark.ui.enabled", "false")
                   .config("spark.io.encryption.enabled", "true")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_conf}"))
        if local:
            builder = (builder.config("spark.driver.host", "127.0.0.1")
                       .config("spark.driver.bindAddress", "127.0.0.1"))
        if not local and master.startswith("spark://"):
            _check_reachable(master, "Spark master")  # a dead master: one line now, not a JVM error later
        try:
            self._session = builder.getOrCreate()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # Py4J / JVM errors while starting: the session never came up
            if local:
                raise
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise ParameterError(f"cannot start a Spark session on the master {master}: {first}") from None
        finally:  # read once by the JVM at start-up
            shutil.rmtree(log_dir, ignore_errors=True)
        self._owned = True
        return self

    def close(self) -> None:
        """Stop the session when the engine started it (a session it found running is left alone)."""
        session, owned = self._session, self._owned
        self._session, self._owned = None, False
        if session is not None and owned:
            session.stop()

    def describe(self) -> dict:
        """Engine name and worker count (no master URL: the card travels with the release)."""
        return {"engine": self.name, "workers": self.workers}

    # ---------------------------------------------------------------------------------- map
    def map(self, fn: Callable[[Any], Any], items: Sequence, *, description: str | None = None,
            progress: Callable[[int], None] | None = None) -> list:
        """``[fn(item) for item in items]`` as one Spark task per item, results in item order.

        ``progress(k)`` is called on the driver as ``k`` more tasks finish (polled from Spark's
        status tracker). A task that fails for good raises its own exception here (after
        Spark's retries and once no other attempt of the job is still running, so none can
        write afterwards); a job that fails otherwise raises :class:`SparkJobError`."""
        items = list(items)
        if not items:
            return []
        sc = self.session.sparkContext
        rdd = sc.parallelize(items, numSlices=len(items)).map(_Task(fn))
        group = f"textdp-{uuid.uuid4().hex[:16]}"
        box: dict = {}

        def run():
            sc.setJobGroup(group, str(description or "textdp map")[:200], interruptOnCancel=False)
            try:
                box["out"] = rdd.collect()
            except BaseException as e:  # handed to the driver thread
                box["err"] = e

        worker = threading.Thread(target=run, name="textdp-spark-job", daemon=True)
        worker.start()
        reported = 0
        try:
            while worker.is_alive():
                worker.join(0.25)
                if progress is not None:
                    done = _completed_tasks(sc, group)
                    if done > reported:
                        progress(done - reported)
                        reported = done
        except BaseException:  # Ctrl-C on the driver: stop the job's tasks
            sc.cancelJobGroup(group)
            _drain(sc, group)
            raise
        if "err" in box:
            # raise only once no attempt of this job still runs (and may write): Spark fails the
            # job before its other running attempts have been killed
            sc.cancelJobGroup(group)
            _drain(sc, group)
            raise _driver_exception(box["err"]) from None
        out = box["out"]
        if progress is not None and len(out) > reported:
            progress(len(out) - reported)
        return out

    def __repr__(self) -> str:
        where = "master" if self.master is not None else self.local_master
        return f"SparkEngine({where})"


#: seconds a failed job waits for its other attempts to stop (Spark kills a cancelled Python
#: task's worker after ``spark.python.task.killTimeout``, 2 s by default)
DRAIN_TIMEOUT_S = 120.0


def _drain(sc, group: str) -> None:
    """Wait until no task attempt of job group ``group`` is running (status tracker; at most
    ``DRAIN_TIMEOUT_S`` seconds)."""
    tracker = sc.statusTracker()
    end = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < end:
        try:
            active = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in (info.stageIds if info is not None else ()):
                    st = tracker.getStageInfo(stage)
                    if st is not None:
                        active += int(st.numActiveTasks)
        except Exception:
            active = 1
        if active == 0:
            return
        time.sleep(0.1)


def _completed_tasks(sc, group: str) -> int:
    """Tasks of job group ``group`` that have finished (0 when Spark has not started it yet)."""
    tracker = sc.statusTracker()
    done = 0
    try:
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in (info.stageIds if info is not None else ()):
                st = tracker.getStageInfo(stage)
                if st is not None:
                    done += int(st.numCompletedTasks)
    except Exception:  # the tracker is advisory: a race with the job's end is not an error
        return 0
    return done


def _check_reachable(url: str, what: str, timeout: float = 5.0, example: str = "spark://HOST:7077",
                     shown: str | None = None) -> None:
    """ParameterError (one line) unless a TCP connection to ``url``'s host:port opens within ``timeout`` s."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise ParameterError(f"--scheduler {shown or url!r}: give the {what}'s address with its port, e.g. {example}")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise ParameterError(f"cannot reach the {what} at {url}: {e.strerror or type(e).__name__}") from None
