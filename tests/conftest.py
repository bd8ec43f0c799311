"""Shared fixtures. Statistical tests use fixed seeds and stated significance levels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _isolated_budget_ledgers(tmp_path_factory, monkeypatch):
    """CLI runs in tests append to a temporary ledger folder, never to ~/.cache/textdp/ledgers."""
    monkeypatch.setenv("TEXTDP_LEDGER_DIR", str(tmp_path_factory.mktemp("ledgers")))


@pytest.fixture
def rng():
    """A seeded generator (tests only: DP code defaults to a CSPRNG)."""
    from textdp.noise import make_rng

    return make_rng(12345)


@pytest.fixture
def small_glove_file(tmp_path):
    """A tiny GloVe-format text file with 6 words in 3 dimensions."""
    words = {"good": [1, 0, 0], "great": [0.9, 0.1, 0], "bad": [-1, 0, 0], "awful": [-0.9, -0.1, 0],
             "film": [0, 1, 0], "movie": [0, 0.95, 0.05]}
    p = tmp_path / "tiny.glove.txt"
    p.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in words.items()), encoding="utf-8")
    return p


# ------------------------------------------------------------------ engines (issue 16), shared by every folder
# One Dask LocalCluster of 2 worker processes and one Spark session local[2,2] (2 Python workers, a failed
# task run twice), started once per test session for every test that asks for them (tests/engines,
# tests/topics, ...). Nothing is skipped: without Java the Spark tests fail, saying so (make setup installs it).
_TESTS_DIR = Path(__file__).resolve().parent


def pickle_test_modules_by_value() -> None:
    """Make cloudpickle (Dask's and PySpark's copy) send the functions of every loaded test module
    by value: the workers cannot import the test modules by name (``tests/`` is on the driver's
    ``sys.path`` only)."""
    import sys

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
            inside = Path(f).resolve().is_relative_to(_TESTS_DIR)
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
    """A :class:`textdp.engines.dask.DaskEngine` on a LocalCluster of 2 worker processes (one thread
    each, 127.0.0.1), for the whole test session."""
    from textdp.engines.dask import DaskEngine

    pickle_test_modules_by_value()
    eng = DaskEngine(workers=2).start()
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture(scope="session")
def spark_engine():
    """A :class:`textdp.engines.spark.SparkEngine` on ``local[2,2]`` for the whole test session. Fails
    (never skips) when no Java runtime is installed."""
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
