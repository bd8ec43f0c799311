"""Engines: the same release on local threads, a Dask cluster or Spark (issue 16).

:func:`get_engine` builds one by name; :class:`textdp.engines.base.Engine` is the interface (map a
picklable function over partitions, results in order; the driver commits). Engine-specific code
stays in one module each (:mod:`textdp.engines.dask`, :mod:`textdp.engines.spark`), imported
only when that engine is asked for.

:func:`sanitize` (:func:`textdp.engines.frames.sanitize_frame`) sanitizes the user's own frame
(pandas, Hugging Face ``datasets``, Dask, Spark) and returns one of the same kind with its card.
"""

from __future__ import annotations

from textdp.engines.base import Engine, LocalEngine, ReleasePlan, check_workers, sanitize_records
from textdp.engines.frames import FrameRelease, sanitize_frame
from textdp.errors import ParameterError

__all__ = ["ENGINES", "Engine", "LocalEngine", "ReleasePlan", "get_engine", "sanitize_records", "sanitize",
           "sanitize_frame", "FrameRelease"]

#: ``sanitize(df, mech, column=..., dataset_id=...)``: the same as :func:`sanitize_frame`
sanitize = sanitize_frame

#: engine names accepted by :func:`get_engine` and ``--engine``
ENGINES = ("local", "dask", "spark")


def get_engine(name: str = "local", *, workers: int | None = None, scheduler: str | None = None) -> Engine:
    """The engine ``name`` (``local`` | ``dask`` | ``spark``).

    ``workers``: partitions processed at once (local: threads; dask: worker processes of a
    LocalCluster started for the job; spark: ``local[N]``). ``scheduler``: the address of a
    running cluster (dask: ``tcp://HOST:PORT``; spark: a master URL such as ``spark://HOST:7077``),
    which replaces the local one. ParameterError for an unknown name or bad values; ImportError's
    message names the extra to install (``pip install 'textdp[engines]'``).
    """
    key = str(name).strip().lower()
    workers = check_workers(workers)
    if key == "local":
        if scheduler is not None:
            raise ParameterError("--scheduler applies to --engine dask or spark, not local")
        return LocalEngine(workers)
    if key == "dask":
        from textdp.engines.dask import DaskEngine

        return DaskEngine(workers=workers, scheduler=scheduler)
    if key == "spark":
        from textdp.engines.spark import SparkEngine

        return SparkEngine(workers=workers, master=scheduler)
    raise ParameterError(f"unknown engine {name!r}; use one of {', '.join(ENGINES)}")
