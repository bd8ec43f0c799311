"""Sanitize the user's own frames: pandas, Hugging Face ``datasets``, Dask and Spark (issue 16).

:func:`sanitize_frame` (also :func:`textdp.engines.sanitize`) takes a frame and a sanitizer and
returns a frame of the same kind with the text column sanitized, every other column, the row order
and the index kept, together with the release's privacy card::

    from textdp.engines import sanitize
    from textdp.sanitize import SanText

    out, card = sanitize(df, SanText("glove-6b-50d", epsilon=3), column="text", dataset_id="reviews")

=====================================  ==========================================================
input                                  how it runs, what comes back
=====================================  ==========================================================
``pandas.Series`` / ``DataFrame``      chunks of ``chunk_size`` rows in this process (or on
                                       ``engine=``'s workers); the same kind, same index and name
``datasets.Dataset``                   ``Dataset.map(batched=True, with_indices=True)``,
                                       ``num_proc`` processes allowed; a ``Dataset`` in memory
``dask.dataframe`` ``DataFrame`` /     ``map_partitions`` on the Dask engine's client (or Dask's
``Series``                             default client, else its threads); a *persisted* dask
                                       frame (computed, its partitions held in the workers'
                                       memory: compute it with that client,
                                       ``engine.client.compute(out)``); with ``engine="dask"``
                                       (a cluster this call starts and stops) the partitions
                                       are gathered into this process first
``pyspark.sql.DataFrame``              ``mapInArrow`` in the DataFrame's own session; a
                                       *checkpointed* DataFrame (computed, lineage cut: it no
                                       longer holds the release key)
=====================================  ==========================================================

**Same bytes whatever the split** (design.md, "Scale-out"). Every record is sanitized by
:func:`textdp.engines.base.sanitize_records` with its *global record index*: its row position in
the frame (pandas, ``datasets``: the index ``Dataset.map`` passes; Dask: the partition's offset,
the sum of the lengths of the partitions before it, plus the row; Spark: the same with the
partitions in partition-id order, or the value of ``index_column=``). A seeded release is
therefore byte-identical to ``mech.sanitize(list_of_texts)`` with the same seed, for any chunk
size, batch size, ``num_proc``, number of partitions or workers, and a retried task redraws the
same noise. Both Dask and Spark count the partitions first (one pass) and sanitize second: each
partition checks that it has the length counted, so a frame whose partitioning is not
deterministic (a Spark DataFrame after a non-deterministic shuffle, a Dask frame built from a
random sample) is refused instead of being released with shifted indices. Read Spark input from
files (deterministic partitions) or give ``index_column=``: a column of unique non-negative
integers that numbers the records (then partitioning does not matter).

**Where the key goes.** The release key travels inside the task (a :class:`ReleasePlan` bound to
the task's function), in memory only: ``datasets`` gets a random fingerprint for the map (so its
cache neither hashes the key nor can serve an old release to a call with a fresh key; the result is
kept in memory and never loaded from a cache file); Dask gets the plan as a task argument (never
``scatter``-ed data, which may spill to disk) under a random token; Spark's session must have
``spark.io.encryption.enabled=true`` (what Spark writes to local disk, task binaries included, is
AES-encrypted with an in-memory key) and the returned DataFrame is checkpointed so its lineage no
longer carries the function and its key.

**Ledger** (issue 16, item 4). A frame has no file to hash, so the curator names it:
``dataset_id="reviews-2026"`` records the release in that dataset's privacy-budget ledger
(:meth:`textdp.accounting.ledger.Ledger.named`: the same ledger as ``textdp budget set
reviews-2026 ...``): the budget is reserved once before anything is sanitized
(:class:`~textdp.errors.BudgetExceededError` when over budget, nothing computed), the release is
recorded with its card after every partition succeeded, and the reservation is cancelled when
anything fails. Without ``dataset_id`` the release is recorded as *unidentified*: in the one
ledger of unidentified releases (:meth:`~textdp.accounting.ledger.Ledger.unidentified`, where they
all compose; no dataset's own budget sees them), and the card's ``ledger`` field says so.
``ledger=False`` records nothing (the card says that too).

**Nulls and types.** A null text (None, NaN, ``pd.NA``, an Arrow null) stays null. The text
column must hold strings: a column of another type (numbers, categories, lists) or a non-string
value in an object column raises :class:`~textdp.errors.InputError` (one line, with the record
index), never converted.

**Corpus-dependent options** (``output_vocabulary="corpus"``, SanText+'s ``frequencies="corpus"``):
a pandas or ``datasets`` frame fits an unfitted mechanism on its own text column first (as the CLI
does); a Dask or Spark frame needs a mechanism fitted beforehand (``mech.fit(texts)``), since
fitting would collect the whole column on the driver.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
from typing import Any, NamedTuple

from textdp.engines.base import Engine, LocalEngine, ReleasePlan, sanitize_records
from textdp.errors import InputError, ParameterError

__all__ = ["sanitize_frame", "FrameRelease", "DEFAULT_CHUNK_SIZE", "LEDGER_NAMED", "LEDGER_UNIDENTIFIED",
           "LEDGER_NOT_RECORDED"]

#: rows per chunk of a pandas frame (the CLI's ``--chunk-size`` default)
DEFAULT_CHUNK_SIZE = 50_000

#: the card's ``ledger`` statements
LEDGER_NAMED = ("recorded in the privacy-budget ledger of the dataset the curator named (dataset_id; the name is "
                "not in this card): its spend counts against that dataset's budget")
LEDGER_UNIDENTIFIED = ("unidentified: no dataset_id was given, so this release counts against no dataset's budget "
                       "(it is recorded in the ledger of unidentified releases, where they all compose)")
LEDGER_NOT_RECORDED = ("not recorded in any privacy-budget ledger (ledger=False): its spend is not counted against "
                       "any budget")


class FrameRelease(NamedTuple):
    """What :func:`sanitize_frame` returns: ``data``, the sanitized frame (the input's kind), and
    ``card``, the release's privacy card (a JSON-ready dict, format ``textdp-card/1``: parameters,
    guarantee, public statistics, the ledger statement; no statistic of the private input). Unpacks
    as ``out, card = sanitize_frame(...)``; :func:`textdp.accounting.card.write_card` writes the
    card beside a file the curator saves."""

    data: Any
    card: dict


def sanitize_frame(data, mech, *, column=None, engine: Engine | str | None = None, dataset_id: str | None = None,
                   ledger=True, chunk_size: int = DEFAULT_CHUNK_SIZE,
                   num_proc: int | None = None, batch_size: int = 1000, keep_in_memory: bool = True,
                   index_column=None) -> FrameRelease:
    """Sanitize the text column of ``data`` with ``mech``; returns :class:`FrameRelease`
    ``(data, card)`` with ``data`` of the input's kind (module docstring for each kind).

    data: a ``pandas.Series`` or ``DataFrame``, a ``datasets.Dataset``, a ``dask.dataframe``
        ``DataFrame`` or ``Series``, or a ``pyspark.sql.DataFrame``.
    mech: a sanitizer (:func:`textdp.sanitize.make_mechanism`, ``SanText(...)``, ...). Its next
        release key is used (a seeded mechanism's first release gives the same bytes as its first
        ``mech.sanitize(texts)``). Guarantee per token or document: ``mech.guarantee``.
    column: the text column of a table (default: ``text`` or a usual synonym, else the only
        column); None for a Series.
    engine: None (pandas: this process; Dask frames: Dask's default scheduler; Spark: the frame's
        session), ``"local"``/``"dask"``/``"spark"`` (built by :func:`textdp.engines.get_engine` and
        closed afterwards) or an :class:`~textdp.engines.base.Engine`. A pandas frame runs on any
        engine (chunks of ``chunk_size`` rows as tasks); a Dask frame on a Dask or local engine (a
        Dask engine's client runs it); a Spark frame in its own session only; a ``datasets.Dataset``
        on the local engine only (its parallelism is ``num_proc``).
    dataset_id: the name of the dataset in the privacy-budget ledger (a plain name: letters,
        digits, ``.``, ``-``, ``_``; case-insensitive); None: recorded as unidentified.
    ledger: True (the default ledger folder, ``$TEXTDP_LEDGER_DIR`` or the cache's), a ledger
        folder, or False (not recorded; the card says so).
    num_proc, batch_size, keep_in_memory: ``datasets`` only (``Dataset.map``'s; the output does
        not depend on the first two). ``keep_in_memory=False`` writes the result of a file-backed
        dataset to a cache file under a random name (never loaded again by a later call).
    index_column: Spark only: a column of unique non-negative integers numbering the records
        (their global record index), for a DataFrame whose partitioning is not deterministic.

    Raises ParameterError (bad arguments, an engine that cannot run this kind of frame, a Spark
    session without I/O encryption), InputError (no such column, a non-text column or value,
    partitions that changed between the counting and the sanitizing pass),
    BudgetExceededError (over the dataset's budget: nothing is computed); a failure of the
    engine's job is raised as is after the budget reservation is cancelled.
    """
    kind = _kind(data)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ParameterError(f"chunk_size must be a positive number of rows, got {chunk_size!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ParameterError(f"batch_size must be a positive number of rows, got {batch_size!r}")
    if num_proc is not None and kind != "datasets.Dataset":
        raise ParameterError(f"num_proc applies to a datasets.Dataset, not a {kind} (use engine=)")
    if index_column is not None and kind != "pyspark.sql.DataFrame":
        raise ParameterError(f"index_column applies to a Spark DataFrame, not a {kind}: its rows are numbered in "
                             "order")
    for a in ("begin_release", "guarantee", "sanitize_with_stats"):
        if not hasattr(mech, a):
            raise ParameterError(f"mech must be a sanitizer (textdp.sanitize.make_mechanism(...)), got "
                                 f"{type(mech).__name__}")
    led = _ledger(dataset_id, ledger)
    runner = _RUNNERS[kind]
    eng, own = _engine(engine)
    try:
        job = runner(data, column, eng, own_engine=own, chunk_size=chunk_size, num_proc=num_proc, batch_size=batch_size,
                     keep_in_memory=keep_in_memory, index_column=index_column)
        if not mech.is_fitted:
            job.fit(mech)  # a corpus-dependent option: the CLI's first pass, on the driver
        reservation = None
        if led is not None:
            # reserved before anything is sanitized; BudgetExceededError here computes nothing
            reservation = led.reserve(mech.guarantee, command=_command(kind, mech))
        out = None
        try:
            mech.begin_release()  # one key for the whole frame
            plan = ReleasePlan.of(mech)
            out = job.run(plan)
            card = _frame_card(mech, kind, job, eng,
                               LEDGER_NOT_RECORDED if led is None else LEDGER_NAMED if led.identified
                               else LEDGER_UNIDENTIFIED)
            if led is not None:  # the release is spent once every partition succeeded
                led.record(mech.guarantee, card=card, input_hash=None, command=_command(kind, mech),
                           reservation=reservation)
        except BaseException:
            if out is not None:
                job.discard(out)
            if led is not None:
                led.cancel(reservation)
            raise
    finally:
        if own:
            eng.close()
    return FrameRelease(out, card)


# ------------------------------------------------------------------------------------- shared pieces
def _kind(data) -> str:
    """The kind of ``data`` by its class (no import of an engine the caller does not use)."""
    mod = type(data).__module__ or ""
    cls = type(data).__name__
    if mod.startswith("pandas"):
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            return "pandas.DataFrame"
        if isinstance(data, pd.Series):
            return "pandas.Series"
    if mod.startswith("datasets"):
        if cls == "Dataset":
            return "datasets.Dataset"
        if cls == "DatasetDict":
            raise ParameterError("a DatasetDict holds several splits: sanitize one at a time (ds['train']); each "
                                 "split is a release of its own")
        if cls.startswith("Iterable"):
            raise ParameterError("an IterableDataset (streaming) is not supported: load it as a datasets.Dataset, or "
                                 "sanitize its files with `textdp sanitize FOLDER --engine ...`")
    if mod.startswith("dask"):
        import dask.dataframe as dd

        if isinstance(data, dd.DataFrame):
            return "dask.dataframe.DataFrame"
        if isinstance(data, dd.Series):
            return "dask.dataframe.Series"
    if mod.startswith("pyspark.sql") and cls == "DataFrame":
        return "pyspark.sql.DataFrame"
    if isinstance(data, (list, tuple)):
        raise ParameterError("sanitize_frame takes a frame; sanitize a list of texts with "
                             "textdp.sanitize.sanitize_texts(texts, mech)")
    raise ParameterError(f"cannot sanitize a {mod}.{cls}: give a pandas Series/DataFrame, a datasets.Dataset, a "
                         "dask.dataframe or a pyspark.sql.DataFrame")


def _ledger(dataset_id, ledger):
    """The release's ledger: the named dataset's, the unidentified releases' one, or None
    (``ledger=False``). ParameterError for a bad name or ``ledger`` value."""
    from textdp.accounting.ledger import Ledger

    if dataset_id is not None and not isinstance(dataset_id, str):
        raise ParameterError(f"dataset_id must be a name (str), got {type(dataset_id).__name__}")
    if ledger is False:
        if dataset_id is not None:
            raise ParameterError("dataset_id names the ledger that records the release; with ledger=False nothing "
                                 "is recorded (drop one of them)")
        return None
    if ledger is True:
        folder = None
    elif isinstance(ledger, (str, os.PathLike)) and str(ledger).strip():
        folder = ledger
    else:
        raise ParameterError(f"ledger must be True, False or a ledger folder, got {ledger!r}")
    return Ledger.unidentified(folder) if dataset_id is None else Ledger.named(dataset_id, folder)


def _engine(engine) -> tuple[Engine | None, bool]:
    """``(engine, whether this call built it and closes it)``."""
    if engine is None or isinstance(engine, Engine):
        return engine, False
    if isinstance(engine, str):
        from textdp.engines import get_engine

        return get_engine(engine), True
    raise ParameterError(f"engine must be None, 'local', 'dask', 'spark' or an Engine, got {type(engine).__name__}")


def _command(kind: str, mech) -> str:
    return f"sanitize_frame ({kind}) --mechanism {getattr(mech, 'name', type(mech).__name__)}"


def _frame_card(mech, kind, job, eng, ledger_text) -> dict:
    """The sanitizer's privacy card (:func:`textdp.sanitize.cards.sanitizer_card`: parameters,
    guarantee, public statistics) with the frame's kind, the engine, the record numbering and the
    ledger statement; no statistic of the private input."""
    from textdp.accounting.card import build_card
    from textdp.sanitize.cards import sanitizer_card

    data = {"frame": kind, "engine": job.engine_info(eng), "records": job.record_index_rule}
    return sanitizer_card(mech, f"in-memory {kind}", other_columns=job.other_columns, data=data,
                          build=lambda **kw: build_card(**kw, ledger=ledger_text))


def _is_null(v) -> bool:
    if v is None:
        return True
    if isinstance(v, float):  # NaN (numpy's float64 too)
        return v != v
    t = type(v)
    return t.__name__ in ("NAType", "NaTType") or (t.__module__ == "numpy" and getattr(v, "shape", None) == ()
                                                   and v != v)


def _what(v) -> str:
    if isinstance(v, bool):
        return "true/false value"
    if isinstance(v, (int, float)) or (type(v).__module__ == "numpy" and getattr(v, "shape", None) == ()):
        return "number"
    if isinstance(v, bytes):
        return "bytes value"
    if isinstance(v, dict):
        return "dict"
    if isinstance(v, (list, tuple)) or hasattr(v, "shape"):
        return "list"
    return f"{type(v).__name__} value"


def _texts(values, column, first_record: int) -> list:
    """``values`` as texts (str, or None for a null); InputError at the first value of another type."""
    out = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            out.append(v)
        elif _is_null(v):
            out.append(None)
        else:
            raise InputError(f"column {column!r} holds a {_what(v)} at record {first_record + i}, not text; the text "
                             "column must hold strings (nulls stay null)")
    return out


def _sanitize_block(plan: ReleasePlan, column, values, first_record: int) -> list:
    """``values`` (records ``first_record``, ``first_record + 1``, ...) sanitized; nulls kept."""
    released, _ = sanitize_records(plan, _texts(values, column, first_record), first_record)
    return released


def _sanitize_indexed(plan: ReleasePlan, column, values, indices) -> list:
    """``values[i]`` sanitized as record ``indices[i]`` (any order): one call per run of
    consecutive indices. InputError for a negative, non-integer or repeated index."""
    values = list(values)
    idx = []
    for j in indices:
        if _is_null(j) or isinstance(j, bool) or int(j) != j or j < 0:
            raise InputError(f"the record index column holds {j!r}; it must hold unique non-negative integers")
        idx.append(int(j))
    if len(idx) != len(values):
        raise InputError("the record index and the text column have different lengths")
    order = sorted(range(len(idx)), key=idx.__getitem__)
    out: list = [None] * len(values)
    s = 0
    while s < len(order):
        e = s + 1
        while e < len(order) and idx[order[e]] == idx[order[e - 1]] + 1:
            e += 1
        if e < len(order) and idx[order[e]] == idx[order[e - 1]]:
            raise InputError(f"record index {idx[order[e]]} appears twice; the record index column must be unique")
        run = order[s:e]
        released = _sanitize_block(plan, column, [values[k] for k in run], idx[run[0]])
        for k, r in zip(run, released):
            out[k] = r
        s = e
    return out


def _chunk_task(plan: ReleasePlan, column, item) -> list:
    """An engine task: ``item = (values, first_record)``."""
    values, first = item
    return _sanitize_block(plan, column, values, first)


def _pick_column(columns, column, what: str):
    """The text column among ``columns`` (given, or guessed like the CLI's); InputError otherwise."""
    columns = list(columns)
    if column is None:
        from textdp.data.io import guess_text_column

        try:
            guessed = guess_text_column([str(c) for c in columns])
        except InputError:
            raise InputError(f"cannot tell which column of the {what} holds the text (columns: "
                             f"{', '.join(map(str, columns[:10]))}{', …' if len(columns) > 10 else ''}); pass "
                             "column=") from None
        return next(c for c in columns if str(c) == guessed)
    if column not in columns:
        raise InputError(f"the {what} has no column {column!r} (columns: {', '.join(map(str, columns[:10]))}"
                         f"{', …' if len(columns) > 10 else ''}); pass column=")
    if columns.count(column) > 1:
        raise InputError(f"the {what} has {columns.count(column)} columns named {column!r}; rename them first")
    return column


def _check_pandas_dtype(dtype, column) -> None:
    import pandas as pd

    if dtype == object or isinstance(dtype, pd.StringDtype):
        return
    raise InputError(f"column {column!r} has dtype {dtype}, not text; the text column must hold strings (convert "
                     "with .astype('string') if its values are text)")


class _Job:
    """One frame's release: ``run(plan)`` returns the sanitized frame, ``fit(mech)`` counts the
    vocabulary for a corpus-dependent option, ``discard(out)`` drops a result never released."""

    other_columns: list = []
    record_index_rule = "row position in the frame"

    def fit(self, mech) -> None:
        raise ParameterError(f"{type(mech).__name__} with a corpus-dependent option must be fitted before it "
                             f"sanitizes a {self.kind} (mech.fit(texts)), or use the public output vocabulary")

    def discard(self, out) -> None:
        pass

    def engine_info(self, eng) -> dict:
        return eng.describe() if eng is not None else {"engine": "local", "workers": 1}


# ------------------------------------------------------------------------------------- pandas
class _PandasJob(_Job):
    def __init__(self, data, column, eng, *, chunk_size, **_):
        import pandas as pd

        self.kind = "pandas.DataFrame" if isinstance(data, pd.DataFrame) else "pandas.Series"
        self.data, self.eng, self.chunk_size = data, eng, chunk_size
        if isinstance(data, pd.Series):
            if column is not None:
                raise ParameterError("column= applies to a table; a pandas Series is the text column itself")
            self.series, self.column = data, data.name
        else:
            self.column = _pick_column(data.columns, column, "DataFrame")
            self.series = data[self.column]
            self.other_columns = [str(c) for c in data.columns if c != self.column]
        idx = data.index
        if not (isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1 and idx.name is None):
            # kept as it is, like the other columns: outside the guarantee, so named in the warning
            self.other_columns = list(self.other_columns) + [
                "(the index" + (f" {', '.join(map(str, idx.names))}" if any(n is not None for n in idx.names)
                                else "") + ")"]
        _check_pandas_dtype(self.series.dtype, self.column)
        # checked here, before the budget is reserved (the values are in memory anyway)
        self.values = _texts(self.series.tolist(), self.column, 0)

    def fit(self, mech) -> None:
        mech.fit(["" if t is None else t for t in self.values])

    def run(self, plan):
        import pandas as pd

        values = self.values
        cuts = range(0, len(values), self.chunk_size)
        if self.eng is None:
            released = [r for s in cuts for r in _sanitize_block(plan, self.column, values[s:s + self.chunk_size], s)]
        else:
            parts = self.eng.map(functools.partial(_chunk_task, plan, self.column),
                                 [(values[s:s + self.chunk_size], s) for s in cuts],
                                 description=f"sanitizing ({plan.cls.__name__})")
            released = [r for p in parts for r in p]
        s = self.series
        dtype = s.dtype if isinstance(s.dtype, pd.StringDtype) else object
        new = pd.Series(released, index=s.index, name=s.name, dtype=dtype)
        new.attrs = {}  # the input's pandas attrs (metadata such as an owner or a source) are not released
        if isinstance(self.data, pd.Series):
            return new
        out = self.data.copy(deep=False)
        out.attrs = {}
        out[self.column] = new
        for c in out.columns:
            if out[c].attrs:
                out[c].attrs = {}
        return out


# ------------------------------------------------------------------------------------- datasets
def _hf_batch(batch, indices, plan, column):
    """``Dataset.map`` function (batched, with indices): the batch's text column sanitized."""
    return {column: _sanitize_indexed(plan, column, batch[column], indices)}


class _DatasetsJob(_Job):
    kind = "datasets.Dataset"
    record_index_rule = "row position in the Dataset (the index Dataset.map passes)"

    def __init__(self, data, column, eng, *, num_proc, batch_size, keep_in_memory, **_):
        if eng is not None and not isinstance(eng, LocalEngine):
            raise ParameterError(f"a datasets.Dataset runs in this machine's processes (num_proc=), not on the "
                                 f"{eng.name} engine; convert it (ds.to_pandas(), or save it as Parquet and use "
                                 "`textdp sanitize FOLDER --engine ...`)")
        if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
            raise ParameterError(f"num_proc must be a positive number of processes, got {num_proc!r}")
        self.data, self.num_proc, self.batch_size, self.keep = data, num_proc, batch_size, bool(keep_in_memory)
        self.column = _pick_column(data.column_names, column, "Dataset")
        self.other_columns = [c for c in data.column_names if c != self.column]
        feature = data.features[self.column]
        if getattr(feature, "dtype", None) not in ("string", "large_string"):
            raise InputError(f"column {self.column!r} holds {feature}, not text; the text column must hold "
                             "strings")

    def fit(self, mech) -> None:
        texts = self.data.with_format(None)[self.column]
        mech.fit(["" if t is None else t for t in texts])

    def run(self, plan):
        fmt = self.data.format
        out = self.data.with_format(None).map(
            _hf_batch, batched=True, batch_size=self.batch_size, with_indices=True,
            fn_kwargs={"plan": plan, "column": self.column}, num_proc=self.num_proc,
            # a fresh random fingerprint: the key is never hashed into it, and no cache file of an
            # earlier call can be loaded in place of this release
            new_fingerprint=secrets.token_hex(16), load_from_cache_file=False, keep_in_memory=self.keep,
            desc="sanitizing")
        if fmt.get("type") is not None:
            out = out.with_format(fmt["type"], columns=fmt.get("columns"),
                                  output_all_columns=fmt.get("output_all_columns", False),
                                  **(fmt.get("format_kwargs") or {}))
        return out

    def engine_info(self, eng) -> dict:
        return {"engine": "datasets", "workers": self.num_proc or 1}


# ------------------------------------------------------------------------------------- dask
class _Opaque:
    """Carries the release plan into a Dask graph under a random token: Dask names its tasks by
    hashing their arguments, and the plan's key must not be hashed into a task name."""

    def __init__(self, plan):
        self.plan = plan
        self.token = secrets.token_hex(16)

    def __dask_tokenize__(self):
        return self.token

    def __repr__(self) -> str:
        return "<textdp release plan>"


def _dask_partition(part, box, column, offsets, lengths, partition_info=None):
    """``map_partitions`` function: partition ``partition_info['number']`` sanitized from its offset."""
    import pandas as pd

    i = partition_info["number"]
    if len(part) != lengths[i]:
        raise InputError(f"partition {i} of the dask frame had {lengths[i]} rows when counted and {len(part)} now: "
                         "its partitions are not deterministic; persist it first (df = df.persist())")
    s = part if column is None else part[column]
    released = _sanitize_block(box.plan, column, s.tolist(), offsets[i])
    new = pd.Series(released, index=s.index, name=s.name, dtype=s.dtype if isinstance(s.dtype, pd.StringDtype)
                    else object)
    if column is None:
        return new
    part = part.copy(deep=False)
    part[column] = new
    return part


def _dask_len(part) -> int:
    return len(part)


class _DaskJob(_Job):
    record_index_rule = "partition offset (sum of the lengths of the partitions before it) + row in the partition"

    def __init__(self, data, column, eng, *, own_engine=False, **_):
        import dask.dataframe as dd

        if eng is not None and not isinstance(eng, LocalEngine) and getattr(eng, "client", None) is None:
            raise ParameterError(f"a dask frame runs on a Dask engine (or locally), not on the {eng.name} engine")
        self.data, self.eng, self.own_engine = data, eng, own_engine
        if isinstance(data, dd.Series):
            self.kind = "dask.dataframe.Series"
            if column is not None:
                raise ParameterError("column= applies to a table; a dask Series is the text column itself")
            self.column, dtype = None, data.dtype
        else:
            self.kind = "dask.dataframe.DataFrame"
            self.column = _pick_column(list(data.columns), column, "dask DataFrame")
            self.other_columns = [str(c) for c in data.columns if c != self.column]
            dtype = data.dtypes[self.column]
        _check_pandas_dtype(dtype, self.column if self.column is not None else data.name)

    def _client(self):
        if self.eng is not None:
            return getattr(self.eng, "client", None)  # a local engine: Dask's threads, no client
        try:
            from distributed import default_client

            return default_client()
        except (ImportError, ValueError):
            return None

    def run(self, plan):
        client = self._client()
        threads = {} if client is not None else {"scheduler": "threads", "num_workers": getattr(self.eng, "workers",
                                                                                                None)}
        counted = self.data.map_partitions(_dask_len, meta=(None, "int64"))
        lengths = [int(n) for n in (client.compute(counted, sync=True) if client is not None
                                    else counted.compute(**threads))]
        offsets = [sum(lengths[:i]) for i in range(len(lengths))]
        mapped = self.data.map_partitions(_dask_partition, _Opaque(plan), self.column, offsets, lengths,
                                          meta=self.data._meta, token="textdp-sanitize")
        if client is None:
            return mapped.persist(**threads)
        from distributed import futures_of

        out = client.persist(mapped)
        futures = futures_of(out)
        for f in futures:  # waits for each partition; a failed one raises its task's exception
            if f.exception() is not None:  # (after the engine's own retries)
                f.result()
        if self.own_engine:  # the cluster this call started closes: the partitions come to this process
            import dask
            import dask.dataframe as dd

            parts = client.gather(futures)
            return dd.from_delayed([dask.delayed(p) for p in parts], meta=self.data._meta,
                                   divisions=out.divisions)
        return out

    def engine_info(self, eng) -> dict:
        if eng is not None:
            return eng.describe()
        client = self._client()
        if client is not None:
            return {"engine": "dask", "workers": len(client.scheduler_info().get("workers", {}))}
        return {"engine": "dask", "scheduler": "threads"}


# ------------------------------------------------------------------------------------- spark
_SPARK_ERROR = re.compile(r"textdp\.errors\.(InputError|ParameterError): ([^\n]*)")


def _spark_count(batches):
    """``mapInArrow`` function: one row (partition id, rows) per partition."""
    import pyarrow as pa
    from pyspark import TaskContext

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"p": [TaskContext.get().partitionId()], "n": [n]},
                                     schema=pa.schema([("p", pa.int64()), ("n", pa.int64())]))


def _spark_partition(plan, column, offsets, lengths, batches):
    """``mapInArrow`` function: the partition's batches with the text column sanitized, records
    numbered from the partition's offset."""
    import pyarrow as pa
    from pyspark import TaskContext

    p = TaskContext.get().partitionId()
    first = offsets.get(p, 0)
    seen = 0
    for b in batches:
        j = b.schema.get_field_index(column)
        released = _sanitize_block(plan, column, b.column(j).to_pylist(), first + seen)
        seen += b.num_rows
        cols = list(b.columns)
        cols[j] = pa.array(released, type=b.schema.field(j).type)
        yield pa.RecordBatch.from_arrays(cols, schema=b.schema)
    if seen != lengths.get(p, 0):
        raise InputError(f"partition {p} of the Spark DataFrame had {lengths.get(p, 0)} rows when counted and {seen} "
                         "now: its partitioning is not deterministic; read it from files or pass index_column=")


def _spark_indexed(plan, column, index_column, batches):
    """``mapInArrow`` function: records numbered by ``index_column``."""
    import pyarrow as pa

    for b in batches:
        j = b.schema.get_field_index(column)
        k = b.schema.get_field_index(index_column)
        released = _sanitize_indexed(plan, column, b.column(j).to_pylist(), b.column(k).to_pylist())
        cols = list(b.columns)
        cols[j] = pa.array(released, type=b.schema.field(j).type)
        yield pa.RecordBatch.from_arrays(cols, schema=b.schema)


class _SparkJob(_Job):
    kind = "pyspark.sql.DataFrame"

    def __init__(self, data, column, eng, *, index_column, **_):
        from pyspark.sql import types as T

        self.data, self.eng, self.index_column = data, eng, index_column
        spark = data.sparkSession
        if eng is not None and (getattr(eng, "session", None) is None
                                or eng.session.sparkContext is not spark.sparkContext):
            raise ParameterError("a Spark DataFrame runs in its own Spark session: pass engine=None (or the "
                                 "SparkEngine whose session made it)")
        if str(spark.conf.get("spark.io.encryption.enabled", "false")).lower() != "true":
            raise ParameterError("the Spark session must encrypt what it writes to local disk (the release key "
                                 "travels inside the tasks): build it with .config('spark.io.encryption.enabled', "
                                 "'true')")
        self.column = _pick_column(data.columns, column, "Spark DataFrame")
        self.other_columns = [c for c in data.columns if c != self.column]
        dtype = data.schema[self.column].dataType
        if not isinstance(dtype, T.StringType):
            raise InputError(f"column {self.column!r} has type {dtype.simpleString()}, not text; the text column "
                             "must hold strings")
        if index_column is not None:
            if index_column == self.column or index_column not in data.columns:
                raise InputError(f"index_column {index_column!r} must be another column of the DataFrame "
                                 f"(columns: {', '.join(data.columns[:10])})")
            itype = data.schema[index_column].dataType
            if not isinstance(itype, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
                raise InputError(f"index_column {index_column!r} has type {itype.simpleString()}; it must hold "
                                 "integers")
            self.record_index_rule = "the value of the index column"
        else:
            self.record_index_rule = "partition offset (rows of the partitions with a lower id) + row in the partition"

    def _action(self, fn):
        """Run a Spark action; a textdp error raised in a task comes back as itself (one line)."""
        try:
            return fn()
        except Exception as e:  # a Py4J / PySpark wrapper around the task's Python traceback
            m = _SPARK_ERROR.search(str(e))
            if m is None:
                raise
            raise (InputError if m.group(1) == "InputError" else ParameterError)(m.group(2)) from None

    def run(self, plan):
        from pyspark.sql import functions as F

        df = self.data
        if self.index_column is None:
            rows = self._action(lambda: df.mapInArrow(_spark_count, "p long, n long").collect())
            lengths = {int(r["p"]): int(r["n"]) for r in rows}
            offsets, total = {}, 0
            for p in sorted(lengths):
                offsets[p] = total
                total += lengths[p]
            fn = functools.partial(_spark_partition, plan, self.column, offsets, lengths)
        else:
            c = F.col(self.index_column)
            s = self._action(lambda: df.agg(F.count(F.lit(1)).alias("rows"), F.count(c).alias("indexed"),
                                            F.countDistinct(c).alias("distinct"), F.min(c).alias("low")).collect()[0])
            if s["indexed"] != s["rows"] or s["distinct"] != s["rows"] or (s["rows"] and s["low"] < 0):
                raise InputError(f"index_column {self.index_column!r} must hold unique non-negative integers without "
                                 "nulls")
            fn = functools.partial(_spark_indexed, plan, self.column, self.index_column)
        mapped = df.mapInArrow(fn, df.schema)
        # computed now (the ledger commits after success) and cut from its lineage: the returned
        # DataFrame no longer holds the function that carries the key
        return self._action(lambda: mapped.localCheckpoint(eager=True))

    def discard(self, out) -> None:
        try:
            out.unpersist()
        except Exception:  # pragma: no cover - best effort on an error path
            pass

    def engine_info(self, eng) -> dict:
        if eng is not None:
            return eng.describe()
        try:
            return {"engine": "spark", "workers": int(self.data.sparkSession.sparkContext.defaultParallelism)}
        except Exception:  # Spark Connect: no SparkContext on the client
            return {"engine": "spark"}


_RUNNERS = {
    "pandas.Series": _PandasJob, "pandas.DataFrame": _PandasJob, "datasets.Dataset": _DatasetsJob,
    "dask.dataframe.DataFrame": _DaskJob, "dask.dataframe.Series": _DaskJob, "pyspark.sql.DataFrame": _SparkJob,
}
