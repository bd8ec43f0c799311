"""Faults on the Dask and Spark engines (issue 16): exactly-once noise and one ledger charge.

- Dask: a worker process terminated mid-job (the task kills its own worker the first time it
  runs) still completes, with output identical to an undisturbed seeded run.
- Spark ``local[2,2]``: a task made to fail once is retried and the output is identical.
- A failed map raises only once none of its tasks can still write.
- :func:`textdp.engines.parts.sanitize_parts` on both engines: a part task retried after it
  wrote its part gives the undisturbed release and one ledger charge; a job failing for good
  leaves no part behind and cancels the reservation.

"The first time" is a marker file created atomically in ``tmp_path`` (shared by the driver and
every worker process of this machine).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from textdp.data import io
from textdp.engines import Engine, LocalEngine
from textdp.engines.parts import SUCCESS, sanitize_parts
from textdp.sanitize import make_mechanism

from .release_helpers import TEXTS, first_time, release, sanitize_chunk, seeded_plan

ENGINES = ["dask_engine", "spark_engine"]


# ------------------------------------------------------------------------------------ tasks with faults
def _kill_worker_once(marker, plan, chunk):
    """Sanitize ``chunk``; the first time the chunk starting at record 6 runs, its worker process dies."""
    if chunk[0] == 6 and first_time(Path(marker)):
        os._exit(1)
    return sanitize_chunk(plan, chunk)


def _fail_once(marker, plan, chunk):
    """Sanitize ``chunk``; the first run of the chunk starting at record 6 raises."""
    if chunk[0] == 6 and first_time(Path(marker)):
        raise RuntimeError("injected failure (first attempt)")
    return sanitize_chunk(plan, chunk)


def _slow_write_or_fail(folder, i):
    """Item 0 fails at once; the others run until the driver creates ``go`` (at most 2.5 s), then
    write ``done-i``: a task still running after the map raised would write once ``go`` exists."""
    if i == 0:
        time.sleep(0.2)
        raise ValueError("item 0 fails for good")
    end = time.monotonic() + 2.5
    while time.monotonic() < end and not Path(folder, "go").exists():
        time.sleep(0.02)
    Path(folder, f"done-{i}").write_text("x")
    return i


def _after_write_fault(fn, marker_dir, item, mode, indexed):
    """Run the part task ``fn`` (it writes its part), then fault on item ``item``: ``kill`` its
    worker process / ``raise`` the first time; ``always`` raise on every attempt."""
    i, task = indexed
    result = fn(task)
    if i == item:
        d = Path(marker_dir)
        d.joinpath(f"attempt-{i}-{os.getpid()}-{time.monotonic_ns()}").write_text("x")
        if mode == "always":
            raise RuntimeError(f"injected failure of part {i} (every attempt)")
        if first_time(d / f"fault-{i}"):
            if mode == "kill":
                os._exit(1)
            raise RuntimeError(f"injected failure of part {i} (first attempt)")
    return result


class _FaultyEngine(Engine):
    """The session's engine with a fault injected into the sanitizing map of ``sanitize_parts``."""

    def __init__(self, inner: Engine, marker_dir: Path, item: int, mode: str):
        self.inner, self.marker_dir, self.item, self.mode = inner, marker_dir, item, mode
        self.name, self.workers = inner.name, inner.workers

    def map(self, fn, items, *, description=None, progress=None):
        if description == "sanitizing the parts":
            fn = functools.partial(_after_write_fault, fn, str(self.marker_dir), self.item, self.mode)
            items = list(enumerate(items))
        return self.inner.map(fn, items, description=description, progress=progress)

    def describe(self):
        return self.inner.describe()

    def close(self):  # the session fixture owns the engine
        pass


# ------------------------------------------------------------------------------------------- engines
def test_dask_worker_killed_mid_job_gives_the_undisturbed_release(dask_engine, tmp_path):
    plan = seeded_plan()
    undisturbed = release(LocalEngine(), plan, [len(TEXTS)])
    client = dask_engine.client
    pids = set(client.run(os.getpid).values())
    marker = tmp_path / "killed"
    out = release(dask_engine, plan, [3, 3, 3, 3], task=functools.partial(_kill_worker_once, str(marker)))
    assert marker.exists()  # a worker process did die mid-job ...
    assert out == undisturbed  # ... and the release is the undisturbed one
    client.wait_for_workers(2, timeout=120)
    assert set(client.run(os.getpid).values()) != pids  # the nanny started a new worker process


def test_spark_task_failing_once_is_retried_with_the_same_release(spark_engine, tmp_path):
    plan = seeded_plan("fbdd", seed=3)
    undisturbed = release(LocalEngine(), plan, [len(TEXTS)])
    marker = tmp_path / "failed"
    out = release(spark_engine, plan, [3, 3, 3, 3], task=functools.partial(_fail_once, str(marker)))
    assert marker.exists()
    assert out == undisturbed


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failed_map_raises_only_when_none_of_its_tasks_can_still_write(engine, request, tmp_path):
    eng = request.getfixturevalue(engine)
    with pytest.raises(ValueError, match="fails for good"):
        eng.map(functools.partial(_slow_write_or_fail, str(tmp_path)), [0, 1, 2, 3])
    at_raise = sorted(p.name for p in tmp_path.iterdir())
    (tmp_path / "go").write_text("x")  # a task still running would now write at once
    time.sleep(2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(at_raise + ["go"])


# ------------------------------------------------------------------------------ sanitize_parts on engines
def _parts_input(folder: Path) -> Path:
    folder.mkdir(parents=True)
    df = pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS})
    for i, (a, b) in enumerate([(0, 4), (4, 9), (9, 12)]):
        io.write_table(df.iloc[a:b].reset_index(drop=True), folder / f"in-{i}.parquet")
    return folder


def _part_digests(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.name.startswith("part-")}


def _ledger_types(ledger_dir: Path) -> list[str]:
    return [json.loads(x)["type"] for f in sorted(ledger_dir.glob("*.jsonl"))
            for x in f.read_text().splitlines() if x.strip()]


def _mech():
    return make_mechanism("santext", "glove-6b-50d", 3.0, rng=11)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_part_task_retried_after_writing_charges_once_and_releases_the_undisturbed_parts(engine, request,
                                                                                         tmp_path):
    eng = request.getfixturevalue(engine)
    src = _parts_input(tmp_path / "in")
    reference = sanitize_parts(src, tmp_path / "ref", _mech(), ledger=tmp_path / "led-ref")
    faulty = _FaultyEngine(eng, tmp_path, item=1, mode="kill" if engine == "dask_engine" else "raise")
    r = sanitize_parts(src, tmp_path / "out", _mech(), engine=faulty, ledger=tmp_path / "led")
    assert (tmp_path / "fault-1").exists() and len(list(tmp_path.glob("attempt-1-*"))) == 2  # failed, then retried
    assert r.engine["engine"] == eng.name
    assert _part_digests(tmp_path / "out") == _part_digests(tmp_path / "ref") and len(_part_digests(r.output)) == 3
    assert (tmp_path / "out" / SUCCESS).is_file()
    assert _ledger_types(tmp_path / "led") == ["reservation", "release"]  # charged exactly once
    assert reference.ledger_entry["guarantee"] == r.ledger_entry["guarantee"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_part_task_failing_for_good_leaves_no_part_and_cancels_the_reservation(engine, request, tmp_path):
    eng = request.getfixturevalue(engine)
    src = _parts_input(tmp_path / "in")
    faulty = _FaultyEngine(eng, tmp_path, item=1, mode="always")
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="every attempt"):
        sanitize_parts(src, out, _mech(), engine=faulty, ledger=tmp_path / "led")
    assert len(list(tmp_path.glob("attempt-1-*"))) == 2  # the engine retried it once before giving up
    assert not out.exists() or not [p.name for p in out.iterdir()]  # no part, temp file, card or _SUCCESS
    assert not list(tmp_path.glob("**/part-*")) and not list(tmp_path.glob("**/.part-*"))
    assert _ledger_types(tmp_path / "led") == ["reservation", "cancel"]
