"""The Dask engine (issue 16): order, failures, and the seeded release identical to the local
engine's for any partitioning and worker count; the key stays out of logs and off disk."""

import time

import pytest

from textdp.engines import LocalEngine, get_engine
from textdp.engines.dask import DaskEngine
from textdp.errors import ParameterError

from .release_helpers import TEXTS, release, sanitize_chunk, seeded_plan

SECRET_TEXT = "zebra-quartz-secret-doc"


def _slow_inverse(x):
    time.sleep(0.05 * (4 - x))  # later items finish first
    return x * 10


def _fail_on_three(x):
    if x == 3:
        raise ParameterError("item 3 is bad")
    return x


def _fail_on_secret(item):
    plan, text = item
    raise ValueError("this partition cannot be sanitized")


def _sanitize_chunk_where(plan, chunk):
    from distributed import get_worker

    return [(sanitize_chunk(plan, chunk), get_worker().address)]


def test_map_keeps_item_order_and_reports_progress(dask_engine):
    seen = []
    assert dask_engine.map(_slow_inverse, range(5), progress=seen.append) == [0, 10, 20, 30, 40]
    assert sum(seen) == 5
    assert dask_engine.map(_slow_inverse, []) == []
    assert dask_engine.describe() == {"engine": "dask", "workers": 2}


def test_a_failing_task_raises_its_own_error_once_and_the_engine_stays_usable(dask_engine):
    with pytest.raises(ParameterError, match="item 3 is bad"):
        dask_engine.map(_fail_on_three, range(6))
    assert dask_engine.map(_fail_on_three, [0, 1, 2]) == [0, 1, 2]


@pytest.mark.parametrize("sizes", [[12], [5, 7], [1] * 12, [3, 1, 4, 4]])
def test_seeded_release_equals_the_local_engines_for_any_partitioning(dask_engine, sizes):
    plan = seeded_plan()
    reference = release(LocalEngine(), plan, [len(TEXTS)])
    assert reference[1] is None and reference[4] == ""
    assert release(dask_engine, plan, sizes) == reference
    if sizes == [5, 7]:  # another key gives another release (the comparison can fail)
        assert release(dask_engine, seeded_plan(seed=8), sizes) != reference


def test_one_and_two_workers_give_the_same_release(dask_engine):
    import dask

    plan = seeded_plan("fbdd", seed=3)
    two = release(dask_engine, plan, [2, 2, 2, 2, 2, 2])
    one_worker = sorted(dask_engine.client.scheduler_info()["workers"])[:1]
    with dask.annotate(workers=one_worker, allow_other_workers=False):  # every task on one worker process
        one = release(dask_engine, plan, [4, 8], task=_sanitize_chunk_where)
    assert {where for _, where in one} == set(one_worker)
    assert [t for part, _ in one for t in part] == two == release(LocalEngine(), plan, [len(TEXTS)])
    assert DaskEngine(workers=1).workers == 1


def test_scheduler_address_uses_the_running_cluster_and_leaves_it_running(dask_engine, monkeypatch):
    import textdp.engines.dask as dask_mod

    address = dask_engine.client.scheduler.address
    assert address.startswith("tcp://127.0.0.1:")
    with get_engine("dask", scheduler=address) as eng:
        assert eng.workers == 2
        assert eng.map(_slow_inverse, [1, 2]) == [10, 20]
    assert dask_engine.map(_slow_inverse, [3]) == [30]  # the cluster survived the engine's close
    with pytest.raises(ParameterError, match="not both"):
        DaskEngine(workers=2, scheduler=address)
    monkeypatch.setattr(dask_mod, "CONNECT_TIMEOUT_S", 2)
    with pytest.raises(ParameterError, match="cannot reach"):
        DaskEngine(scheduler="tcp://127.0.0.1:9").start()


def test_failure_log_shows_neither_the_key_nor_the_partition_and_workers_never_spill(dask_engine):
    plan = seeded_plan()
    key_hex = plan.key.words.astype("<u4").tobytes().hex()
    with pytest.raises(ValueError, match="cannot be sanitized"):
        dask_engine.map(_fail_on_secret, [(plan, SECRET_TEXT)])
    logs = "\n".join(msg for recs in dask_engine.client.get_worker_logs().values() for _, msg in recs)
    assert "Compute Failed" in logs and "cannot be sanitized" in logs  # the failure was logged ...
    assert SECRET_TEXT not in logs and key_hex not in logs  # ... without the item or the key
    # whatever length of task name Dask's log line leaves room for, it shows neither
    from dask._task_spec import Task

    from textdp.engines.dask import _Call, _Opaque

    line = repr(Task("k", _Call(_fail_on_secret, "map", "job"), _Opaque((plan, SECRET_TEXT))))
    assert "textdp-task(map)(<partition>)" in line and SECRET_TEXT not in line
    # the cluster the engine started never writes task data to a worker's disk
    spill = dask_engine.client.run(lambda dask_worker: dask_worker.memory_manager.memory_spill_fraction)
    assert set(spill.values()) == {False}


def _refuse_input(path):
    with open(path, "a") as fh:  # one mark per attempt
        fh.write("x")
    from textdp.errors import InputError

    raise InputError("part-00007.parquet: no column 'body-refused'")


def test_bad_input_in_a_task_is_raised_once_neither_retried_nor_logged(dask_engine, tmp_path):
    """A TextDPError (bad input, parameters) fails the same way on a retry: the task returns it, the driver
    raises it (its own type), the task ran once and the worker logged no 'Compute Failed' for it."""
    from textdp.errors import InputError

    marks = tmp_path / "attempts"
    with pytest.raises(InputError, match="no column 'body-refused'") as err:
        dask_engine.map(_refuse_input, [str(marks)])
    assert marks.read_text() == "x"
    assert any("raised in a Dask task" in n for n in getattr(err.value, "__notes__", []))
    logs = "\n".join(msg for recs in dask_engine.client.get_worker_logs().values() for _, msg in recs)
    assert "body-refused" not in logs
    assert dask_engine.map(abs, [-3]) == [3]  # the engine still runs jobs


def test_a_terminals_ctrl_c_reaches_the_driver_only():
    """A terminal's Ctrl-C sends SIGINT to the whole process group: the LocalCluster's worker processes
    start with SIGINT ignored, so they survive it (no worker traceback, no restart) and only the driver
    is interrupted (it then cancels the job and closes the cluster). The test process's own handler is
    Python's default meanwhile (a background job may have inherited SIGINT ignored, which would make
    the check vacuous)."""
    import os
    import signal
    import time

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        eng = DaskEngine(workers=2).start()
    finally:
        signal.signal(signal.SIGINT, old)
    try:
        before = eng._client.run(os.getpid)
        assert len(before) == 2
        for pid in before.values():
            os.kill(pid, signal.SIGINT)
        time.sleep(1.5)
        assert eng._client.run(os.getpid) == before  # the same two processes answer: none was interrupted
        assert eng._client.run(lambda: signal.getsignal(signal.SIGINT) == signal.SIG_IGN) == {
            w: True for w in before}
    finally:
        eng.close()
