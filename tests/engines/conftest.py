"""Session-wide engines for the engine tests (issue 16): one Dask LocalCluster of 2 worker
processes and one Spark session ``local[2,2]`` (2 Python workers, a failed task run twice),
started once per test session and shared by every test that asks for them.

Nothing here is skipped: without a Java runtime the Spark tests fail, with a message saying so
(``make setup`` installs Java 17).

Test functions sent to the workers are pickled by value (the workers cannot import the test
modules by name: ``tests/`` is on the driver's ``sys.path`` only).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent.parent


def pickle_test_modules_by_value() -> None:
    """Make cloudpickle (Dask's and PySpark's copy) send the functions of every loaded test
    module by value."""
    import cloudpickle

    picklers = [cloudpickle]
    try:
        from pyspark import cloudpickle as spark_cloudpickle

        picklers.append(spark_cloudpickle)
    except ImportError:  # pragma: no cover - the engines extra is installed in CI
        pass
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f or name == "__main__":
            continue
        try:
            inside = Path(f).resolve().is_relative_to(_TESTS)
        except (OSError, ValueError):
            continue
        if inside:
            for cp in picklers:
                try:
                    cp.register_pickle_by_value(mod)
                except (ValueError, TypeError):  # pragma: no cover - not a registrable module
                    pass


@pytest.fixture(scope="session")
def dask_engine():
    """A :class:`textdp.engines.dask.DaskEngine` on a LocalCluster of 2 worker processes
    (one thread each, 127.0.0.1), for the whole test session."""
    from textdp.engines.dask import DaskEngine

    pickle_test_modules_by_value()
    eng = DaskEngine(workers=2).start()
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture(scope="session")
def spark_engine():
    """A :class:`textdp.engines.spark.SparkEngine` on ``local[2,2]`` for the whole test session.
    Fails (never skips) when no Java runtime is installed."""
    from textdp.engines.spark import SparkEngine
    from textdp.errors import MissingPackageError

    pickle_test_modules_by_value()
    eng = SparkEngine(workers=2)
    try:
        eng.start()
    except MissingPackageError as e:
        pytest.fail(f"the Spark engine tests need Java 17 (make setup installs it): {e}", pytrace=False)
    try:
        yield eng
    finally:
        eng.close()
