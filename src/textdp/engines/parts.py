"""Sanitize a dataset of parts (a folder or a glob of Parquet/CSV/TSV/JSONL/TXT files) on an engine.

:func:`sanitize_parts` is the library call behind ``textdp sanitize INPUT --engine ...`` when
INPUT is a folder or a glob (issue 16). The driver (this process) never reads the data; it
plans, reserves the budget, and commits:

1. **Reading map** (on the engine's workers, one task per part): each part's row count, size
   and SHA-256, the text column found, and -- only for a corpus-dependent law
   (``output_vocabulary="corpus"``, SanText+'s ``frequencies="corpus"``) -- its vocabulary
   counts, summed on the driver into the mechanism's fitted counts.
2. **Manifest** (driver): parts in record order (:func:`textdp.data.parts.find_parts`), each
   with the size and hash its worker computed, combined into the dataset's identity
   (:func:`textdp.data.parts.manifest_identity`): the key of its budget ledger.
3. **Reservation** (driver, once): :meth:`textdp.accounting.ledger.Ledger.reserve`.
4. **Sanitizing map** (workers, one task per part, or per run of whole row groups of a Parquet
   part of more than ``task_rows`` rows): part ``i`` holds records
   ``offset_i .. offset_i + rows_i - 1`` (``offset_i`` = rows of the parts before it; a row
   group's first record = ``offset_i`` + the rows of the part's earlier row groups), each
   document drawn from the release's keyed streams at its global index
   (:func:`textdp.engines.base.sanitize_records`), so a retried or speculative task writes
   the same bytes and any split of the same rows gives the same texts. The task writes
   ``part-NNNNN.EXT`` (``NNNNN`` = the task's position, ``EXT`` = the format) under a
   temporary name in the output folder and renames it into place (whichever attempt's rename
   wins, the bytes are the same), after checking that the input part still has the size and
   SHA-256 of the reading map (a part changed between the two passes fails the job).
5. **Commit** (driver, after every task succeeded): the privacy card
   ``_privacy.card.json``, the textdp output marker, then ``_SUCCESS`` LAST, then the ledger
   records the release (closing the reservation).

A job that fails for good (a task's error after the engine's retries, Ctrl-C, a refused final
record) deletes every part it committed and every temporary file, then cancels the
reservation. If a part cannot be deleted, the release reached disk: the reservation is settled
as a charge (the release is spent) and the error says so.

The output folder: a new folder (its missing parents are created) or an empty one; with
``overwrite=True`` an existing textdp output folder is replaced only when the new job succeeds
(the job then writes into a temporary sibling folder, swapped in at the end). Names starting
with ``.`` or ``_`` (the card, the marker, ``_SUCCESS``, temporary parts) are the files that
Spark, Dask and pyarrow skip when they read the folder back as a dataset.

What the release reveals (design.md, "Everything the output reveals is part of the release"):
the output parts' names are their positions, never the input's names; the card holds the
mechanism, its parameters, its guarantee, the engine's name and worker count and public facts
only (no row count, size, hash or name of an input part). The manifest (input names, sizes,
hashes, row counts) is the curator's: returned in :class:`PartsResult`, kept by the ledger as
one digest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from textdp.data import io
from textdp.data.parts import PartsInput, find_parts, manifest_identity
from textdp.engines.base import Engine, LocalEngine, ReleasePlan, sanitize_records
from textdp.errors import EmptyInputError, InputError, OutputError, ParameterError, TextDPError

__all__ = ["sanitize_parts", "PartsResult", "PartInfo", "SUCCESS", "CARD_NAME", "part_name", "read_parts_output"]

#: the marker written last into a complete output folder (Hadoop/Spark's convention)
SUCCESS = "_SUCCESS"
#: the privacy card's file name inside an output folder (``_``: skipped by dataset readers)
CARD_NAME = "_privacy.card.json"
#: the output marker's ``kind``
OUTPUT_KIND = "sanitized-parts"
_EXT = {"parquet": ".parquet", "csv": ".csv", "tsv": ".tsv", "jsonl": ".jsonl", "txt": ".txt"}
_PART = re.compile(r"^part-\d{5,}\.(parquet|csv|tsv|jsonl|txt)$")
_TEMP = re.compile(r"^\.part-\d{5,}\.(parquet|csv|tsv|jsonl|txt)\..*\.tmp$")

#: how the card states the record numbering
RECORD_INDEX_RULE = ("records are numbered globally (input parts in sorted path order, then row within a part); "
                     "each document's noise is drawn at its record's index, so the output does not depend on "
                     "how the engine split or retried the work")


def part_name(i: int, fmt: str) -> str:
    """``part-00000.parquet``: the output name of part ``i`` (0-based) in format ``fmt``."""
    return f"part-{int(i):05d}{_EXT[fmt]}"


@dataclass(frozen=True)
class PartInfo:
    """One part of the manifest (the curator's: never on a card). ``relative``: its path under
    the input's base folder; ``first_record``: the global index of its first row."""

    relative: str
    rows: int
    size: int
    sha256: str
    first_record: int


@dataclass
class PartsResult:
    """What :func:`sanitize_parts` released. ``output``: the folder; ``card``: its card's path;
    ``card_data``: the card; ``stats``: the curator's private counts summed over parts
    (:class:`textdp.sanitize.base.SanitizeStats`, never on the card); ``manifest``: the
    input's parts (curator only); ``dataset_sha256``: the manifest identity;
    ``ledger``: the ledger file that recorded the release (None with ``ledger=False``);
    ``ledger_entry``: its ``release`` entry."""

    output: Path
    card: Path
    card_data: dict
    parts: int
    records: int
    stats: Any
    manifest: list[PartInfo]
    dataset_sha256: str
    text_column: str
    other_columns: list[str]
    engine: dict
    ledger: Path | None = None
    ledger_entry: dict | None = None
    output_parts: int = 0
    forced: bool = False
    seconds: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- tasks
@dataclass(frozen=True, repr=False)
class _ReadTask:
    path: str
    relative: str
    fmt: str
    text_column: str | None
    chunk_size: int
    vocabulary: ReleasePlan | None = None  # a keyless plan: count the vocabulary (corpus-dependent laws)

    def __repr__(self):
        return f"_ReadTask(part {self.relative!r})"


@dataclass(frozen=True, repr=False)
class _SanitizeTask:
    plan: ReleasePlan
    path: str
    relative: str
    fmt: str
    text_column: str
    first_record: int
    rows: int
    size: int
    sha256: str
    out_path: str
    chunk_size: int
    row_groups: tuple[int, int] | None = None  # a Parquet file split by row group: [start, stop) of this task
    mtime_ns: int | None = None  # the part's modification time in the reading pass (row-group tasks)
    check_hash: bool = True  # re-hash the part before the rename (row-group tasks: the file's first task only)

    def __repr__(self):
        return f"_SanitizeTask(part {self.relative!r}, first record {self.first_record})"


def _changed(relative: str, what: str) -> InputError:
    return InputError(f"input part {relative!r} changed while the job read it (its {what} differs from the first "
                      "pass: is another program still writing it?); nothing was released; rerun once the "
                      "input is complete")


def _chunks(path, text_column, chunk_size):
    # a null text passes through unchanged; each JSON Lines row keeps its own keys; .txt as TextLines
    return io.iter_table_chunks(path, text_column=text_column, chunksize=chunk_size, nulls="keep",
                                row_keys=True, plain_text=True)


def _read_part(task: _ReadTask) -> dict:
    """Reading map: rows, size and SHA-256 of one part (and its vocabulary counts when asked)."""
    import numpy as np

    before = io.file_state(task.path)
    sha = io.file_sha256(task.path)
    rows = 0
    row_groups = None
    col = task.text_column
    mech = None
    if task.vocabulary is not None:
        mech = task.vocabulary.mechanism()
        mech._fitted = None  # a worker's cached mechanism: this task's counts only
    try:
        try:
            _first_chunk(task)
        except EmptyInputError:  # a part without rows: passed through as an empty output part
            if io.file_state(task.path) != before:
                raise _changed(task.relative, "size, modification time or inode") from None
            out = {"rows": 0, "size": int(before[0]), "sha256": sha, "text_column": None,
                   "mtime_ns": int(before[1]), "row_groups": None, "columns": _empty_columns(task.path, task.fmt)}
            if mech is not None:
                none = np.zeros(0, dtype=np.int64)
                out["vocabulary"] = (none, none, 0, 0, 0)
            return out
        if task.fmt == "parquet" and mech is None:  # the row count is in the footer; check the column on one row
            import pyarrow.parquet as pq

            for _, col in _chunks(task.path, task.text_column, 1):
                break
            meta = pq.ParquetFile(task.path).metadata
            rows = meta.num_rows
            row_groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        else:
            for df, col in _chunks(task.path, task.text_column, task.chunk_size):
                rows += len(df)
                if mech is not None:
                    mech.partial_fit(["" if t is None else t for t in df[col].tolist()], keep_tokens=False)
        if io.file_state(task.path) != before:
            raise _changed(task.relative, "size, modification time or inode")
        if task.fmt == "parquet" and row_groups is None:
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(task.path).metadata
            row_groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        out = {"rows": int(rows), "size": int(before[0]), "sha256": sha, "text_column": col,
               "mtime_ns": int(before[1]), "row_groups": row_groups}
        if mech is not None:
            f = mech._fitted
            nz = np.flatnonzero(f.counts)
            out["vocabulary"] = (nz.astype(np.int64), f.counts[nz].astype(np.int64), int(f.documents),
                                 int(f.tokens), int(f.oov_tokens))
        return out
    finally:
        if mech is not None:
            mech._fitted = None


def _first_chunk(task: _ReadTask) -> None:
    """Read one row of the part (EmptyInputError when it has none; InputError when it is unreadable)."""
    for _ in _chunks(task.path, task.text_column, 1):
        break


def _empty_columns(path, fmt: str) -> list[str] | None:
    """The column names of a part without rows (Parquet: its schema; CSV/TSV: its header line), or None when
    the format has none to read (JSON Lines, plain text, an empty file)."""
    src = Path(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return [str(n) for n in pq.read_schema(src).names]
    if fmt in ("csv", "tsv"):
        import pandas as pd

        try:
            return [str(c) for c in pd.read_csv(src, nrows=0, sep="\t" if fmt == "tsv" else ",").columns]
        except (pd.errors.EmptyDataError, ValueError, OSError):
            return None
    return None


def _empty_part(task: _SanitizeTask, before) -> dict:
    """The output part of an input part without rows: a fresh empty file of the same format with the same
    columns (a Parquet schema without its key-value metadata, a CSV header line), nothing copied from the
    input's bytes."""
    src = Path(task.path)
    cols = _empty_columns(src, task.fmt) or []
    with io.atomic_output(task.out_path) as tmp:
        if task.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            # names and types only: no schema or field metadata of the input (pandas attrs, field notes)
            schema = pa.schema([pa.field(f.name, f.type, f.nullable) for f in pq.read_schema(src)])
            pq.write_table(schema.empty_table(), tmp)
        elif task.fmt in ("csv", "tsv"):
            import pandas as pd

            sep = "\t" if task.fmt == "tsv" else ","
            Path(tmp).write_text(pd.DataFrame(columns=cols).to_csv(index=False, sep=sep) if cols else "", "utf-8")
        else:
            Path(tmp).write_bytes(b"")
        if io.file_state(task.path) != before or (task.check_hash and io.file_sha256(task.path) != task.sha256):
            raise _changed(task.relative, "content")
    return {"rows": 0, "stats": None, "other_columns": [c for c in cols if c != task.text_column]}


def _sanitize_part(task: _SanitizeTask) -> dict:
    """Sanitizing map: write output part ``task.out_path`` (temporary name, then rename)."""
    from textdp.data.io import ROW_KEYS, TextLines

    before = io.file_state(task.path)
    if before[0] != task.size or (task.mtime_ns is not None and before[1] != task.mtime_ns):
        raise _changed(task.relative, "size or modification time")
    if task.rows == 0:
        return _empty_part(task, before)
    stats = None
    n = 0
    other: list[str] = []
    chunks = (_chunks(task.path, task.text_column, task.chunk_size) if task.row_groups is None else
              _row_group_chunks(task.path, task.text_column, task.chunk_size, *task.row_groups))
    with io.TableWriter(task.out_path, text_column=task.text_column) as writer:
        for df, col in chunks:
            if n == 0:
                other = [str(c) for c in df.columns if c != col and c != ROW_KEYS]
            released, st = sanitize_records(task.plan, df[col].tolist(), task.first_record + n)
            if isinstance(df, TextLines):
                df[col] = released
            else:
                import pandas as pd

                df[col] = pd.Series(released, index=df.index, dtype=object)
            writer.write(df)
            n += len(df)
            stats = st if stats is None else stats.merge(st)
        # the part must be the one the reading map hashed (checked before the rename commits it)
        if n != task.rows:
            raise _changed(task.relative, f"row count ({n:,} now, {task.rows:,} before)")
        if io.file_state(task.path) != before:
            raise _changed(task.relative, "size, modification time or inode")
        if task.check_hash and io.file_sha256(task.path) != task.sha256:
            raise _changed(task.relative, "content (SHA-256)")
    return {"rows": n, "stats": stats, "other_columns": other}


def _row_group_chunks(path: str, text_column: str, chunk_size: int, start: int, stop: int):
    """Chunks of row groups ``start .. stop - 1`` of a Parquet file, checked as
    :func:`textdp.data.io.iter_table_chunks` checks them (nulls kept)."""
    import pyarrow.parquet as pq

    p = Path(path)
    n = 0
    try:
        pf = pq.ParquetFile(p)
        for batch in pf.iter_batches(batch_size=chunk_size, row_groups=list(range(start, stop))):
            if batch.num_rows == 0:
                continue
            df, col = io._finish(batch.to_pandas(ignore_metadata=True), p, text_column, "keep", first_row=n)
            n += len(df)
            yield df, col
    except (OSError, ValueError) as exc:
        if isinstance(exc, TextDPError):
            raise
        from textdp.errors import excerpt

        raise InputError(f"{p.name}: cannot read as parquet ({type(exc).__name__}: {excerpt(str(exc), 100)})") from None


def _plan_tasks(manifest: list, infos: list, task_rows: int | None) -> list[tuple[int, tuple[int, int] | None, int, int]]:
    """``(part, row_groups, first_record, rows)`` of each sanitizing task: one per part, except a
    Parquet part of more than ``task_rows`` rows with several row groups, split into runs of whole
    row groups of about ``task_rows`` rows (first record = the part's offset + the rows of its
    earlier row groups)."""
    out = []
    for i, (m, info) in enumerate(zip(manifest, infos)):
        groups = info.get("row_groups")
        if task_rows is None or not groups or len(groups) < 2 or m.rows <= task_rows:
            out.append((i, None, m.first_record, m.rows))
            continue
        start, first, acc = 0, m.first_record, 0
        for g, n in enumerate(groups):
            acc += n
            if acc >= task_rows or g == len(groups) - 1:
                out.append((i, (start, g + 1), first, acc))
                first += acc
                start, acc = g + 1, 0
    return out


# -------------------------------------------------------------------------------------------- driver
def _check_output(out: Path, parts: PartsInput, overwrite: bool, ledger_dir) -> None:
    if not str(out).strip():
        raise ParameterError("the output folder is empty; give a folder name such as out/")
    # a folder input (its files are the parts; a subfolder is refused) and a recursive glob would read an
    # output folder under them as input next time; a single file or a flat glob would not
    from textdp.data.parts import has_glob

    inside_base = Path(parts.label).is_dir() or (has_glob(parts.label) and "**" in parts.label)
    if inside_base:
        target = Path(os.path.abspath(out))
        bases = {parts.base}
        with contextlib.suppress(OSError):
            bases.add(parts.base.resolve())
            target = target.resolve() if target.exists() else target.parent.resolve() / target.name
        if any(target == b or b in target.parents for b in bases):
            raise OutputError(f"output folder {str(out)!r} is inside the input {parts.label!r}; write it elsewhere "
                              "(a later run would read the output as input)")
    io.check_output_dir(out, overwrite=overwrite, inputs=list(parts.paths), create_parents=True)
    if ledger_dir is not False:
        from textdp.accounting.ledger import check_output_outside_ledgers

        check_output_outside_ledgers(out, None if ledger_dir is True else ledger_dir)


def _engine_of(engine) -> tuple[Engine, bool]:
    """``(engine, owned)``: an Engine as given (the caller closes it), else one made here."""
    if engine is None:
        return LocalEngine(), True
    if isinstance(engine, Engine):
        return engine, False
    if isinstance(engine, str):
        from textdp.engines import get_engine

        return get_engine(engine), True
    raise ParameterError(f"engine must be an Engine or one of local, dask, spark, got {type(engine).__name__}")


def _vocabulary_plan(mech) -> ReleasePlan | None:
    """A keyless plan to count a corpus-dependent mechanism's vocabulary on the workers."""
    if not getattr(mech, "corpus_dependent", False):
        return None
    call = getattr(mech, "_init_call", None)
    if call is None:
        raise ParameterError(f"{type(mech).__name__} cannot be sent to workers (built without its constructor)")
    args, kwargs = call
    kwargs = {k: v for k, v in kwargs.items() if k != "rng"}
    return ReleasePlan(type(mech), tuple(args), kwargs, None, {}, None)


def _set_fitted(mech, results) -> None:
    """Sum the parts' vocabulary counts into ``mech``'s fitted counts (driver)."""
    import numpy as np

    from textdp.sanitize.base import _Fitted

    counts = np.zeros(len(mech.embeddings), dtype=np.int64)
    docs = tokens = oov = 0
    for r in results:
        idx, val, d, t, o = r["vocabulary"]
        np.add.at(counts, idx, val)
        docs, tokens, oov = docs + d, tokens + t, oov + o
    if tokens == 0:
        raise InputError("the input has no words to sanitize (all documents are empty)")
    mech._fitted = _Fitted(counts, docs, tokens, oov)
    mech._prepared = False


def _forced_fields(led, reservation: str, label: str) -> dict:
    """The card's statement of a reservation forced past a refusal (the dataset's path replaced)."""
    reason = led.forced_reason(reservation)
    if reason is None:
        return {}
    for name in sorted({label, os.path.abspath(label), os.path.basename(label.rstrip("/"))} - {""}, key=len,
                       reverse=True):
        reason = reason.replace(repr(name), "the dataset").replace(name, "the dataset")
    return {"forced": True, "forced_reason": reason}


#: the card's statement when the release is not recorded (``ledger=False``)
NOT_RECORDED = ("not recorded in any privacy-budget ledger (--no-ledger): its spend is not counted against any "
                "budget of the dataset")


def _write_json(path: Path, data: dict) -> None:
    from textdp.accounting.card import to_jsonable

    with io.atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps(to_jsonable(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n",
                             encoding="utf-8")


def _remove_release(job_dir: Path, names: list[str], remove_dir: bool) -> list[tuple[Path, str]]:
    """Delete what the job wrote in ``job_dir``: its parts, their temporary files, the card, the
    marker and ``_SUCCESS`` (and the folder when ``remove_dir``). Returns ``(path, why)`` of what
    could not be deleted (empty: nothing of the release is left)."""
    left: list[tuple[Path, str]] = []
    try:
        present = list(job_dir.iterdir()) if job_dir.is_dir() else []
    except OSError as exc:
        return [(job_dir, io.describe_os_error(exc, job_dir, "delete"))]
    ours = set(names) | {SUCCESS, CARD_NAME, io.OUTPUT_MARKER}
    for p in present:
        if p.name in ours or _TEMP.match(p.name) or (p.name.startswith(".") and p.name.endswith(".tmp")
                                                     and any(p.name.startswith(f".{n}.") for n in ours)):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                left.append((p, io.describe_os_error(exc, p, "delete")))
    for n in names:  # a part that could not even be listed
        if (job_dir / n).exists() and not any(q == job_dir / n for q, _ in left):
            left.append((job_dir / n, "still present after deletion"))
    if remove_dir and not left:
        with contextlib.suppress(OSError):
            job_dir.rmdir()
    return left


def sanitize_parts(
    input: str | os.PathLike,
    output_dir: str | os.PathLike,
    mech,
    *,
    engine: Engine | str | None = None,
    text_column: str | None = None,
    overwrite: bool = False,
    ledger: bool | str | os.PathLike = True,
    force: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    chunk_size: int = 50_000,
    command: str | None = None,
    card_fields: dict | None = None,
    on_reserved: Callable[[Any, str], dict | None] | None = None,
    task_rows: int | None = 100_000,
) -> PartsResult:
    """Sanitize every part of ``input`` with ``mech`` on ``engine``; write a folder of parts.

    ``input``: a folder of parts, a glob (``"lake/*.parquet"``, ``"**"`` recursive) or one
    file; every part has one format (Parquet, CSV, TSV, JSONL or TXT; see
    :mod:`textdp.data.parts` for which files count). ``output_dir``: a new or empty folder
    (an existing textdp output folder with ``overwrite=True``); it receives
    ``part-00000.EXT`` ... (one per task: per input part, see ``task_rows``; same format, other
    columns, nulls and row order kept), ``_privacy.card.json``, a textdp marker and ``_SUCCESS``
    (written last). The folder must be on storage that every worker and the driver see.
    ``mech``: a sanitizer built by its constructor (e.g. :func:`textdp.sanitize.make_mechanism`);
    its embeddings given by name or path must be readable on every worker. This call begins
    its release (one key for the whole job, sent to workers in memory only, in the task
    arguments; see :class:`~textdp.engines.base.ReleasePlan`). ``engine``: an
    :class:`~textdp.engines.base.Engine` (the caller closes it), a name (``local``, ``dask``,
    ``spark``: made and closed here) or None (:class:`~textdp.engines.base.LocalEngine`, one
    part at a time). ``text_column``: the text column (default: guessed per part; the parts
    must agree). ``ledger``: True (the default ledger folder), a ledger folder, or False (not
    recorded; the card says so). ``force``: record even when the ledger refuses (recorded as
    forced; the card says so). ``progress(stage, done, total)``: called on the driver as parts
    finish, ``stage`` ``"reading"`` then ``"sanitizing"``. ``chunk_size``: rows per chunk a
    task holds in memory. ``command``: the ledger entry's command text. ``card_fields``: extra
    top-level card fields (the CLI's). ``on_reserved(ledger, reservation_id)``: called once
    the budget is reserved; returns card fields (the CLI prints its ``--force`` warning
    there; default: the forced fields computed here). ``task_rows``: a Parquet part of more rows than
    this, with several row groups, is split into tasks of whole row groups of about this many rows
    (its first task re-hashes the file; the others check its size and modification time); each task
    writes its own output part. None: one task per part. The texts do not depend on it.

    Records: global index = parts in sorted path order, then row; each document's draws
    come from the release key at its index (exactly-once noise: a retried task rewrites the
    same bytes; any split of the same rows gives the same texts).

    Raises InputError (no parts, mixed formats, an unreadable or changed part, text columns
    that differ between parts), OutputError (an existing output without ``overwrite``, an
    output inside the input or the ledger folder, a write error), ParameterError,
    BudgetExceededError (over the budget without ``force``); a task's own error after the
    engine's retries is raised as is. On any failure nothing of the release is left and the
    reservation is cancelled -- or, when a written part cannot be deleted, charged (the error
    says so).
    """
    import time

    t0 = time.perf_counter()
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ParameterError(f"chunk_size must be a positive number of rows, got {chunk_size!r}")
    if task_rows is not None and (isinstance(task_rows, bool) or not isinstance(task_rows, int) or task_rows < 1):
        raise ParameterError(f"task_rows must be a positive number of rows or None, got {task_rows!r}")
    if not hasattr(mech, "begin_release") or not hasattr(mech, "sanitize_with_stats"):
        raise ParameterError(f"mech must be a textdp sanitizer, got {type(mech).__name__}")
    parts = find_parts(input)
    out = Path(output_dir)
    ledger_dir = ledger if not isinstance(ledger, bool) else (True if ledger else False)
    _check_output(out, parts, overwrite, ledger_dir)
    eng, owned = _engine_of(engine)
    command = command or f"sanitize --mechanism {getattr(mech, 'name', type(mech).__name__)} (parts)"

    def bar(stage, total=len(parts)):
        if progress is None:
            return None
        state = {"done": 0}
        progress(stage, 0, total)

        def step(k):
            state["done"] += k
            progress(stage, state["done"], total)
        return step

    try:
        # ---- 1. reading map: rows, sizes, hashes (and corpus counts) computed where the parts are
        vocab = _vocabulary_plan(mech)
        reads = [_ReadTask(str(p), r, parts.fmt, text_column, chunk_size, vocab)
                 for p, r in zip(parts.paths, parts.relative)]
        infos = eng.map(_read_part, reads, description="reading the parts", progress=bar("reading"))
        cols = {}
        for r, info in zip(parts.relative, infos):
            if info["text_column"] is not None:  # None: a part without rows
                cols.setdefault(info["text_column"], r)
        if not cols:
            raise EmptyInputError(f"{parts.label}: no rows to read (every part is empty)")
        if len(cols) > 1:
            shown = ", ".join(f"{c!r} ({r})" for c, r in cols.items())
            raise InputError(f"the parts of {parts.label!r} have different text columns: {shown}; pass "
                             "--text-column (text_column=) naming the column every part has")
        col = next(iter(cols))
        for r, info in zip(parts.relative, infos):  # a part without rows must still have the text column
            have = info.get("columns") if info["text_column"] is None else None
            if have is not None and col not in have:
                raise InputError(f"{r}: no column {col!r} (columns: {', '.join(have[:10]) or 'none'}); every part "
                                 "must have the text column, an empty one too")
        manifest, offset = [], 0
        for r, info in zip(parts.relative, infos):
            manifest.append(PartInfo(r, info["rows"], info["size"], info["sha256"], offset))
            offset += info["rows"]
        identity = manifest_identity([(m.size, m.sha256) for m in manifest])
        if vocab is not None:
            _set_fitted(mech, infos)
        t_read = time.perf_counter()
        # ---- 2. the ledger (identified by the manifest) and the output folder
        led = None
        if ledger is not False:
            from textdp.accounting.ledger import Ledger

            led = Ledger.for_content(parts.label, identity, None if ledger is True else ledger)
            if not force:
                led.check(mech.guarantee)  # a refusal known now costs no writing
        return _release(parts, manifest, _plan_tasks(manifest, infos, task_rows), infos, identity, col, out, mech,
                        eng, led, overwrite, force, bar, chunk_size, command, card_fields or {}, on_reserved, t0,
                        t_read)
    finally:
        if owned:
            eng.close()


def _release(parts, manifest, planned, infos, identity, col, out, mech, eng, led, overwrite, force, bar, chunk_size,
             command, card_fields, on_reserved, t0, t_read) -> PartsResult:
    import time

    names = [part_name(k, parts.fmt) for k in range(len(planned))]
    io.check_output_dir(out, overwrite=overwrite, inputs=list(parts.paths), create_parents=True)  # again, just before
    staging = out.is_dir() and any(out.iterdir())  # --overwrite of an earlier output: swapped in at the end
    created: list[Path] = []
    reservation = None
    job_dir = out
    old = None  # with staging: the earlier release, moved aside by the swap
    fields = dict(card_fields)
    try:
        if led is not None:
            reservation = led.reserve(mech.guarantee, command=command, force=force, outputs=[out])
            extra = on_reserved(led, reservation) if on_reserved is not None else _forced_fields(
                led, reservation, parts.label)
            fields.update(extra or {})
        elif "ledger" not in fields:
            fields["ledger"] = NOT_RECORDED
        try:
            if staging:
                parent = out.parent if str(out.parent) else Path(".")
                io.remove_dead_leftovers(out)
                job_dir = Path(tempfile.mkdtemp(prefix=f".{out.name}.{io._owner_tag()}.", suffix=".tmp", dir=parent))
                os.chmod(job_dir, 0o777 & ~io._umask())
            else:
                created = io.make_missing_folders(out)
                # marked as textdp's from the start (deleted with the parts if the job fails): a folder left by
                # a killed job (parts, no _SUCCESS) is then recognised and replaced by a rerun with --overwrite
                _write_json(out / io.OUTPUT_MARKER, _marker())
        except OSError as exc:
            raise OutputError(io.describe_os_error(exc, out, "write")) from None
        # ---- 3. the sanitizing map: one key, sent inside each task
        mech.begin_release()
        plan = ReleasePlan.of(mech)
        tasks = []
        for (i, groups, first, rows), n in zip(planned, names):
            m = manifest[i]
            tasks.append(_SanitizeTask(
                plan, str(parts.paths[i]), m.relative, parts.fmt, col, first, rows, m.size, m.sha256,
                str(job_dir / n), chunk_size, groups, None if groups is None else infos[i]["mtime_ns"],
                groups is None or groups[0] == 0))
        results = eng.map(_sanitize_part, tasks, description="sanitizing the parts",
                          progress=bar("sanitizing", len(tasks)))
        stats = None
        other: list[str] = []
        for t, r in zip(tasks, results):
            if r["rows"] != t.rows:
                raise _changed(t.relative, "row count")
            stats = r["stats"] if stats is None else (stats if r["stats"] is None else stats.merge(r["stats"]))
            other += [c for c in r["other_columns"] if c not in other]
        missing = [n for n in names if not (job_dir / n).is_file()]
        if missing:
            raise OutputError(f"the engine reported success but part {missing[0]!r} is not in {str(out)!r} (is the "
                              "output folder on storage every worker shares?)")
        t_san = time.perf_counter()
        # ---- 4. commit: card, marker, _SUCCESS last
        card = _parts_card(mech, out, other, eng, fields)
        _write_json(job_dir / CARD_NAME, card)
        _write_json(job_dir / io.OUTPUT_MARKER, _marker())
        with io.atomic_output(job_dir / SUCCESS) as tmp:
            Path(tmp).write_bytes(b"")
        if staging:
            old = _swap(job_dir, out, overwrite, parts)  # the earlier release is kept aside until recorded
            job_dir = out
        entry = None
        if led is not None:
            entry = led.record(mech.guarantee, card=card, input_hash=identity, command=command, force=force,
                               reservation=reservation)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
            old = None
        return PartsResult(
            output=out, card=out / CARD_NAME, card_data=card, parts=len(manifest), output_parts=len(tasks),
            records=sum(m.rows for m in manifest), stats=stats, manifest=manifest, dataset_sha256=identity,
            text_column=col, other_columns=other, engine=eng.describe(),
            ledger=None if led is None else led.path, ledger_entry=entry, forced=bool(fields.get("forced")),
            seconds={"reading": t_read - t0, "sanitizing": t_san - t_read, "total": time.perf_counter() - t0})
    except BaseException as exc:
        left = _remove_release(job_dir, names, remove_dir=staging or job_dir in created or bool(created))
        if not left:
            io.remove_empty_folders(created)
            if old is not None:  # the new release was swapped in, then not recorded: the earlier one comes back
                with contextlib.suppress(OSError):
                    os.replace(old / "d", out)
                    old.rmdir()
        if led is not None and reservation is not None:
            if left:
                with contextlib.suppress(TextDPError, OSError):
                    led.settle(reservation, commit=True, by="textdp sanitize (parts)",
                               reason=f"{len(left)} file(s) of a failed job could not be deleted from the output "
                                      "folder: a release that reached disk is spent")
            else:
                led.cancel(reservation)
        if left:
            where, why = left[0]
            charged = "its budget is charged in the ledger" if led is not None else "it is not recorded (no ledger)"
            raise OutputError(f"the job failed ({_one_line(exc)}) and {len(left)} file(s) it wrote could not be "
                              f"deleted (first: {str(where)!r}: {why}); that release reached disk, so {charged}; "
                              "delete the folder by hand") from exc
        raise


def _one_line(exc: BaseException) -> str:
    s = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {s[0][:200]}" if s else type(exc).__name__


def _marker() -> dict:
    from textdp import __version__

    return {"format": "textdp-output", "kind": OUTPUT_KIND, "textdp_version": __version__}


def _swap(job_dir: Path, out: Path, overwrite: bool, parts: PartsInput) -> Path | None:
    """Replace the earlier output folder ``out`` by the finished ``job_dir`` (``--overwrite``); returns
    the hidden folder that holds the earlier release (as ``d``), for the caller to delete once the new
    release is recorded (or to put back), or None when ``out`` was empty."""
    io.check_output_dir(out, overwrite=overwrite, inputs=list(parts.paths), create_parents=True)
    try:
        return io.replace_folder(job_dir, out)
    except OSError as exc:
        raise OutputError(io.describe_os_error(exc, out, "write")) from None


def _parts_card(mech, out: Path, other_columns, eng: Engine, fields: dict) -> dict:
    """The card of a folder release: the sanitizer's card (:func:`textdp.sanitize.cards.sanitizer_card`)
    with the engine and the record numbering; nothing about the input parts."""
    from textdp.accounting.card import build_card
    from textdp.sanitize.cards import sanitizer_card

    data = {"engine": eng.describe(), "records": RECORD_INDEX_RULE,
            "layout": "one output part per task (an input part, or a run of row groups of a large Parquet part), "
                      "named by its position (part-00000, ...), same format, other columns, nulls and row order "
                      "kept; _SUCCESS is written last"}
    return sanitizer_card(mech, out.name, other_columns=other_columns, data=data,
                          build=lambda **kw: build_card(**kw, **fields))


def read_parts_output(folder: str | os.PathLike, text_column: str | None = None):
    """Read a complete output folder of :func:`sanitize_parts` back as one pandas DataFrame (parts in
    order). InputError when ``_SUCCESS`` is missing (an incomplete or failed job)."""
    import pandas as pd

    d = Path(folder)
    if not (d / SUCCESS).is_file():
        raise InputError(f"{str(d)!r} has no {SUCCESS} marker: the job did not finish; do not use its parts")
    names = sorted(p.name for p in d.iterdir() if _PART.match(p.name))
    frames = []
    for n in names:
        try:
            frames += [df for df, _ in io.iter_table_chunks(d / n, text_column=text_column, nulls="keep")]
        except EmptyInputError:  # an empty part (from an input part without rows)
            continue
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
