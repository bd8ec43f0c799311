"""A small seeded release split into partitions, shared by the Dask, Spark and fault tests."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from textdp.engines import ReleasePlan, sanitize_records
from textdp.sanitize import make_mechanism

TEXTS = [
    "the movie was great fun", None, "a dull , lifeless film", "i loved it !", "",
    "not my cup of tea", "the actors were good but the plot was thin", "what a waste of time",
    "an honest and moving story", "the music carried every scene", "too long by half", "go see it",
]


def seeded_plan(name: str = "santext", seed: int = 7, epsilon: float = 3.0) -> ReleasePlan:
    """The plan of a seeded release of ``name`` over the built-in glove-6b-50d table."""
    mech = make_mechanism(name, "glove-6b-50d", epsilon, rng=seed)
    mech.begin_release()
    return ReleasePlan.of(mech)


def chunks(texts, sizes):
    """``texts`` cut into consecutive pieces of the given sizes, each as (first_record, texts)."""
    assert sum(sizes) == len(texts)
    out, start = [], 0
    for n in sizes:
        out.append((start, list(texts[start:start + n])))
        start += n
    return out


def sanitize_chunk(plan, chunk):
    """Task: sanitize one (first_record, texts) piece with the plan's keyed streams."""
    first, texts = chunk
    return sanitize_records(plan, texts, first)[0]


def release(engine, plan, sizes, texts=TEXTS, task=None):
    """The whole release of ``texts`` computed on ``engine`` over pieces of ``sizes``."""
    fn = functools.partial(task or sanitize_chunk, plan)
    parts = engine.map(fn, chunks(texts, sizes), description="test release")
    return [t for part in parts for t in part]


def first_time(marker: Path) -> bool:
    """True exactly once per marker path, in any process (atomic create of the marker file)."""
    try:
        fd = os.open(str(marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True
