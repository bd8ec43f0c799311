"""The Spark engine (issue 16): order, failures, and the seeded release identical to the local
engine's for any partitioning; a running session is reused and left running."""

import time

import pytest

from textdp.engines import LocalEngine, get_engine
from textdp.engines.spark import SparkEngine, SparkJobError
from textdp.errors import InputError, MissingPackageError, ParameterError

from .release_helpers import TEXTS, release, seeded_plan


def _slow_inverse(x):
    time.sleep(0.05 * (4 - x))  # later items finish first
    return x * 10


def _fail_on_three(x):
    if x == 3:
        raise InputError("item 3 is bad")
    return x


def _crash_always(x):
    import os

    os._exit(3)


def test_session_is_local_2_2_and_map_keeps_item_order_and_reports_progress(spark_engine):
    conf = spark_engine.session.sparkContext.getConf()
    assert conf.get("spark.master") == "local[2,2]"
    assert conf.get("spark.io.encryption.enabled") == "true"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    seen = []
    assert spark_engine.map(_slow_inverse, range(5), progress=seen.append) == [0, 10, 20, 30, 40]
    assert sum(seen) == 5
    assert spark_engine.map(_slow_inverse, []) == []
    assert spark_engine.describe() == {"engine": "spark", "workers": 2}


def test_a_failing_task_raises_its_own_error_and_the_engine_stays_usable(spark_engine):
    with pytest.raises(InputError, match="item 3 is bad") as info:
        spark_engine.map(_fail_on_three, range(6))
    assert "Spark task" in "\n".join(getattr(info.value, "__notes__", []))  # the worker's traceback
    with pytest.raises(SparkJobError, match="the Spark job failed"):  # no Python exception to carry
        spark_engine.map(_crash_always, [0])
    assert spark_engine.map(_fail_on_three, [0, 1, 2]) == [0, 1, 2]


@pytest.mark.parametrize("sizes", [[12], [5, 7], [1] * 12])
def test_seeded_release_equals_the_local_engines_for_any_partitioning(spark_engine, sizes):
    plan = seeded_plan()
    reference = release(LocalEngine(), plan, [len(TEXTS)])
    assert reference[1] is None and reference[4] == ""
    assert release(spark_engine, plan, sizes) == reference
    if sizes == [5, 7]:  # another key gives another release (the comparison can fail)
        assert release(spark_engine, seeded_plan(seed=8), sizes) != reference


def test_a_running_session_is_reused_and_not_stopped(spark_engine):
    with get_engine("spark") as eng:  # finds the fixture's session
        assert eng.session is spark_engine.session
        assert eng.map(_slow_inverse, [2]) == [20]
    assert not spark_engine.session.sparkContext._jsc.sc().isStopped()
    assert spark_engine.map(_slow_inverse, [1]) == [10]
    with pytest.raises(ParameterError, match="not both"):
        SparkEngine(workers=2, master="spark://127.0.0.1:7077")


def test_no_java_is_a_clear_error(spark_engine, monkeypatch):
    from pyspark import SparkContext

    import textdp.engines.spark as spark_mod

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(spark_mod, "_has_java", lambda: False)
    with pytest.raises(MissingPackageError, match="Java 17"):
        SparkEngine(workers=1).start()


def test_a_running_session_without_io_encryption_is_refused(spark_engine, monkeypatch):
    from types import SimpleNamespace

    from pyspark.sql import SparkSession

    conf = {"spark.io.encryption.enabled": "false"}
    spark_conf = SimpleNamespace(get=lambda k, d=None: conf.get(k, d))
    fake = SimpleNamespace(sparkContext=SimpleNamespace(getConf=lambda: spark_conf))
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", lambda self: fake)
    with pytest.raises(ParameterError, match="spark.io.encryption.enabled"):
        SparkEngine().start()
    conf["spark.io.encryption.enabled"] = "true"
    assert SparkEngine().start().session is fake  # taken as it is, not owned
