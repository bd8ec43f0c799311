"""Reading and writing text tables: CSV, TSV, JSONL, Parquet and plain text.

* Formats are chosen from the file suffix (``.csv``, ``.tsv``/``.tab``,
  ``.jsonl``/``.ndjson``, ``.parquet``/``.pq``, ``.txt``) or given explicitly.
  Plain text is one document per line, in a column named ``text``.
* Readers check the file before handing it on: missing or empty files,
  undecodable bytes (the first bad line is named), malformed rows and missing
  text columns raise :class:`textdp.errors.InputError` with one line saying what
  is wrong and how to fix it. Raw text appears in errors only as a short, marked
  excerpt (:func:`textdp.errors.excerpt`).
* Writers never write in place: :func:`atomic_output` writes to a temporary file
  in the target folder and renames it on success, so a failure leaves nothing
  behind; :func:`atomic_outputs` does the same for several files of one result
  (all of them appear, or none); an existing output is refused unless
  ``overwrite=True``; an output equal to the input is always refused.
* Operating-system errors (permission denied, disk full, a file where a folder
  should be, ...) while reading or writing are raised as InputError/OutputError
  naming the user's path (not a temporary file); :func:`describe_os_error` words
  any other OSError the same way.
* :func:`iter_table_chunks` streams large inputs in chunks of rows (bounded
  memory); :func:`read_table` reads a whole (small or medium) file.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from textdp.errors import InputError, OutputError, ParameterError, excerpt

__all__ = [
    "FORMATS",
    "detect_format",
    "read_table",
    "iter_table_chunks",
    "write_table",
    "atomic_output",
    "make_missing_folders",
    "remove_empty_folders",
    "atomic_outputs",
    "check_output_path",
    "describe_os_error",
    "guess_text_column",
    "TableWriter",
]

FORMATS = ("csv", "tsv", "jsonl", "parquet", "txt")
_SUFFIX = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "txt",
    ".text": "txt",
}
_TEXT_CANDIDATES = ("text", "sentence", "review", "content", "document", "body", "snippet")


def detect_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The table format of ``path``: ``fmt`` if given, else from the suffix.

    Raises InputError for an unknown suffix (the message lists the accepted ones).
    """
    if fmt:
        fmt = fmt.lower()
        if fmt not in FORMATS:
            raise ParameterError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
        return fmt
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    for s in reversed(suffixes):
        if s in _SUFFIX:
            return _SUFFIX[s]
    raise InputError(
        f"cannot tell the format of {p.name!r} from its suffix; use .csv, .tsv, .jsonl, .parquet "
        "or .txt (rename or copy the file to one of these suffixes)"
    )


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise InputError(f"input file {str(path)!r} does not exist")
    if path.is_dir():
        raise InputError(f"input {str(path)!r} is a directory, not a file")
    if not path.is_file():  # a named pipe, socket or device: read twice (fit, then sanitize), so refused
        raise InputError(f"input {str(path)!r} is not a regular file (a pipe or device); textdp reads its input "
                         "more than once: save it to a file first")
    try:
        if path.stat().st_size == 0:
            raise InputError(f"input file {str(path)!r} is empty")
        with open(path, "rb"):
            pass
    except OSError as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(describe_os_error(exc, path, "read")) from None


MAX_COLUMNS = 10_000  # wider delimited files are refused before parsing (a hostile header can hang pandas)


def _check_width(path: Path, fmt: str) -> None:
    """Refuse CSV/TSV files whose header has more than MAX_COLUMNS fields (reads <= 1 MB)."""
    if fmt not in ("csv", "tsv"):
        return
    with open(path, "rb") as fh:
        head = fh.read(1 << 20).split(b"\n", 1)[0]
    n = head.count(b"," if fmt == "csv" else b"\t") + 1
    if n > MAX_COLUMNS:
        raise InputError(
            f"{path.name}: the header has {n if len(head) < (1 << 20) else 'over ' + str(n)} columns; textdp reads "
            f"at most {MAX_COLUMNS} columns; keep only the text column(s) (e.g. cut -d, -f1)"
        )


def _find_bad_line(path: Path, encoding: str = "utf-8") -> tuple[int, str] | None:
    """First line (1-based) that does not decode, with the decoder's reason; streamed."""
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            try:
                raw.decode(encoding)
            except UnicodeDecodeError as exc:
                return i, exc.reason
    return None


def _decode_error(path: Path, encoding: str) -> InputError:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        head = b""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # a UTF-16 byte-order mark
        return InputError(f"{path.name}: the file is UTF-16 (it starts with a UTF-16 byte-order mark); re-encode "
                          "it as UTF-8 (e.g. iconv -f utf-16 -t utf-8 IN > OUT)")
    bad = _find_bad_line(path, encoding)
    where = f" on line {bad[0]}" if bad else ""
    return InputError(
        f"{path.name}: bytes that are not valid {encoding}{where}; re-encode the file as UTF-8 "
        f"(e.g. iconv -f latin1 -t utf-8 IN > OUT if it is Latin-1)"
    )


def guess_text_column(columns: list[str]) -> str:
    """The text column when the user did not name one: ``text`` or a common synonym,
    else the only string column. Raises InputError when ambiguous."""
    lower = {c.lower(): c for c in map(str, columns)}
    for cand in _TEXT_CANDIDATES:
        if cand in lower:
            return lower[cand]
    if len(columns) == 1:
        return str(columns[0])
    raise InputError(
        f"cannot tell which column holds the text (columns: {', '.join(map(str, columns[:10]))}"
        f"{', …' if len(columns) > 10 else ''}); pass --text-column"
    )


def _finish(df: pd.DataFrame, path: Path, text_column: str | None) -> tuple[pd.DataFrame, str]:
    if df.shape[0] == 0:
        raise InputError(f"{path.name}: no rows to read")
    col = text_column if text_column is not None else guess_text_column(list(df.columns))
    if col not in df.columns:
        raise InputError(
            f"{path.name}: no column {col!r} (columns: {', '.join(map(str, list(df.columns)[:10]))}); "
            "pass the right --text-column"
        )
    if df[col].dtype == object and pd.api.types.infer_dtype(df[col], skipna=True) not in ("string", "empty"):
        if df[col].map(lambda v: isinstance(v, (list, tuple, dict, bytes)) or hasattr(v, "shape")).any():
            raise InputError(f"{path.name}: column {col!r} holds nested values (lists/objects/bytes), not text; "
                             "pass the right --text-column or flatten the file")
    df[col] = df[col].fillna("").astype(str)
    nul = df[col].str.contains("\x00", regex=False)
    if nul.any():
        raise InputError(f"{path.name}: NUL byte in column {col!r} (row {int(nul.to_numpy().argmax()) + 1} of this "
                         "chunk); it looks like a binary file, not text")
    return df, col


def _read_txt(path: Path, encoding: str, nrows: int | None = None) -> pd.DataFrame:
    lines = []
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            if nrows is not None and len(lines) >= nrows:
                break
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError:
                raise InputError(
                    f"{path.name}: bytes that are not valid {encoding} on line {i}; re-encode the file "
                    "as UTF-8 (e.g. iconv -f latin1 -t utf-8 IN > OUT)"
                ) from None
            if i == 1 and line.startswith("\ufeff"):
                line = line[1:]
            lines.append(line.rstrip("\r\n"))
    if "\x00" in "".join(lines[:1000]):
        raise InputError(f"{path.name}: contains NUL bytes; it looks like a binary file, not text")
    return pd.DataFrame({"text": lines})


def read_table(
    path: str | os.PathLike,
    text_column: str | None = None,
    fmt: str | None = None,
    encoding: str = "utf-8",
) -> tuple[pd.DataFrame, str]:
    """Read a whole table and find its text column.

    Returns ``(frame, text_column)``; every column is kept (other columns are
    preserved on output), the text column is ``str`` with missing values as "".

    Raises InputError: missing/empty file, unknown format, undecodable bytes
    (names the first bad line), malformed rows, no rows, missing text column.
    """
    p = Path(path)
    _check_readable(p)
    fmt = detect_format(p, fmt)
    _check_width(p, fmt)
    try:
        if fmt == "txt":
            df = _read_txt(p, encoding)
        elif fmt in ("csv", "tsv"):
            with _long_rows_are_errors():
                df = pd.read_csv(
                    p,
                    sep="," if fmt == "csv" else "\t",
                    dtype=str,
                    keep_default_na=False,
                    encoding=encoding if encoding.lower() not in ("utf-8", "utf8") else "utf-8-sig",
                    quoting=csv.QUOTE_MINIMAL if fmt == "csv" else csv.QUOTE_NONE,
                    engine="c",
                    index_col=False,
                )
        elif fmt == "jsonl":
            df = _read_jsonl(p, encoding)
        else:  # parquet
            df = pd.read_parquet(p)
    except UnicodeDecodeError:
        raise _decode_error(p, encoding) from None
    except pd.errors.EmptyDataError:
        raise InputError(f"{p.name}: no data (the file has no header or rows)") from None
    except pd.errors.ParserError as exc:
        msg = excerpt(str(exc).strip().splitlines()[-1], 100)  # library text may quote input: marked, short
        raise InputError(f"{p.name}: malformed {fmt.upper()} ({msg}); fix the file or give it the suffix of its real format "
                         "(.csv, .tsv, .jsonl, .parquet, .txt)") from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{p.name}: cannot read as {fmt} ({type(exc).__name__}: {excerpt(str(exc), 100)})") from None
    return _finish(df, p, text_column)


@contextlib.contextmanager
def _long_rows_are_errors():
    """A CSV/TSV row with more fields than the header is an error, not a silent shift.

    pandas would use the extra leading fields as the index (``index_col=None``) or drop
    the trailing ones with a ParserWarning (``index_col=False``, used here); this turns
    that warning into ``pd.errors.ParserError``, reported as malformed input.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            yield
        except pd.errors.ParserWarning:
            raise pd.errors.ParserError(
                "a row has more fields than the header; quote text that contains the separator") from None


def _read_jsonl(path: Path, encoding: str, nrows: int | None = None, start: int = 0) -> pd.DataFrame:
    rows = []
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            if i <= start:
                continue
            if nrows is not None and len(rows) >= nrows:
                break
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError:
                raise InputError(
                    f"{path.name}: bytes that are not valid {encoding} on line {i}; re-encode as UTF-8"
                ) from None
            if i == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                raise InputError(
                    f"{path.name}: line {i} is not valid JSON {excerpt(line)}; each line must be one JSON object"
                ) from None
            if not isinstance(obj, dict):
                raise InputError(f"{path.name}: line {i} is JSON but not an object; each line must be a JSON object")
            rows.append(obj)
    return pd.DataFrame(rows, dtype=object)  # object: 123 stays 123 (not 123.0 next to a null)


def iter_table_chunks(
    path: str | os.PathLike,
    text_column: str | None = None,
    fmt: str | None = None,
    chunksize: int = 50_000,
    encoding: str = "utf-8",
) -> Iterator[tuple[pd.DataFrame, str]]:
    """Stream ``(chunk, text_column)`` pairs of at most ``chunksize`` rows.

    Memory is bounded by the chunk size (for Parquet, by one row group). Errors
    as in :func:`read_table`; a decoding error names the line within the file.
    """
    p = Path(path)
    _check_readable(p)
    fmt = detect_format(p, fmt)
    if chunksize < 1:
        raise ParameterError("chunksize must be >= 1")
    _check_width(p, fmt)
    col = text_column
    n = 0
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(p)
            for batch in pf.iter_batches(batch_size=chunksize):
                df, col = _finish(batch.to_pandas(), p, col)
                n += len(df)
                yield df, col
        elif fmt in ("csv", "tsv"):
            reader = pd.read_csv(
                p,
                sep="," if fmt == "csv" else "\t",
                dtype=str,
                keep_default_na=False,
                encoding="utf-8-sig" if encoding.lower() in ("utf-8", "utf8") else encoding,
                quoting=csv.QUOTE_MINIMAL if fmt == "csv" else csv.QUOTE_NONE,
                chunksize=chunksize,
                index_col=False,
            )
            while True:
                with _long_rows_are_errors():
                    df = next(reader, None)
                if df is None:
                    break
                df, col = _finish(df, p, col)
                n += len(df)
                yield df, col
        else:
            yield from _iter_lines_chunks(p, fmt, col, chunksize, encoding)
            return
    except UnicodeDecodeError:
        raise _decode_error(p, encoding) from None
    except pd.errors.EmptyDataError:
        raise InputError(f"{p.name}: no data (the file has no header or rows)") from None
    except pd.errors.ParserError as exc:
        msg = excerpt(str(exc).strip().splitlines()[-1], 100)  # library text may quote input: marked, short
        raise InputError(f"{p.name}: malformed {fmt.upper()} ({msg})") from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, (InputError, ParameterError)):
            raise
        raise InputError(f"{p.name}: cannot read as {fmt} ({type(exc).__name__}: {excerpt(str(exc), 100)})") from None
    if n == 0:
        raise InputError(f"{p.name}: no rows to read")


def _iter_lines_chunks(p: Path, fmt: str, col: str | None, chunksize: int, encoding: str):
    buf: list = []
    n = 0
    with open(p, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError:
                raise InputError(
                    f"{p.name}: bytes that are not valid {encoding} on line {i}; re-encode the file as UTF-8"
                ) from None
            if i == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if fmt == "txt":
                if "\x00" in line:
                    raise InputError(f"{p.name}: NUL byte on line {i}; it looks like a binary file, not text")
                buf.append(line.rstrip("\r\n"))
            else:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except (json.JSONDecodeError, RecursionError):
                    raise InputError(f"{p.name}: line {i} is not valid JSON {excerpt(line)}") from None
                if not isinstance(obj, dict):
                    raise InputError(f"{p.name}: line {i} is JSON but not an object")
                buf.append(obj)
            if len(buf) >= chunksize:
                df = pd.DataFrame({"text": buf}) if fmt == "txt" else pd.DataFrame(buf, dtype=object)
                df, col = _finish(df, p, col)
                n += len(df)
                yield df, col
                buf = []
    if buf:
        df = pd.DataFrame({"text": buf}) if fmt == "txt" else pd.DataFrame(buf, dtype=object)
        df, col = _finish(df, p, col)
        n += len(df)
        yield df, col
    if n == 0:
        raise InputError(f"{p.name}: no rows to read")


# ----------------------------------------------------------------------------- operating-system errors
# errno -> (reason, hint when writing, hint when reading)
_OS_REASONS = {
    errno.EACCES: ("permission denied", "choose a writable folder", "check its permissions (ls -l)"),
    errno.EPERM: ("operation not permitted", "choose a writable folder", "check its permissions (ls -l)"),
    errno.EROFS: ("read-only file system", "choose a folder on a writable disk", None),
    errno.ENOSPC: ("no space left on the device", "free some space or write to another disk", None),
    errno.EDQUOT: ("disk quota exceeded", "free some space or write to another disk", None),
    errno.EFBIG: ("file too large for the file system", "write to another disk", None),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "choose a path made of folders", "check the path"),
    errno.EISDIR: ("it is a folder", "remove or rename the folder, or choose another name", "give a file, not a folder"),
    errno.EEXIST: ("it already exists", "remove or rename it, or choose another name", None),
    errno.ENOENT: ("no such file or folder", "create its folder first", "check the path"),
    errno.ENAMETOOLONG: ("the name is too long", "choose a shorter name", "check the path"),
    errno.ELOOP: ("too many levels of symbolic links", "check the links on the path", "check the links on the path"),
    errno.EIO: ("input/output error", "check the disk", "check the disk"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n)", "raise the limit (ulimit -n)"),
    errno.ENFILE: ("too many open files in the system", "close other programs and retry", "close other programs and retry"),
    errno.EBUSY: ("the file or device is busy", "retry later or choose another name", "retry later"),
    errno.ETXTBSY: ("the file is busy", "retry later or choose another name", "retry later"),
}
#: errnos that only a write can cause: such an error without a file name is attributed to the output
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}
#: temporary names made by atomic_output(s)/atomic_output_dir: ".NAME.XXXXXXXX.tmp" (or .old)
_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.(?:tmp|old)$")


def is_user_os_error(exc: BaseException) -> bool:
    """True for an OSError caused by the environment (permissions, a full disk, a file where a
    folder should be, ...): :func:`describe_os_error` words it; anything else is a bug."""
    return isinstance(exc, OSError) and getattr(exc, "errno", None) in _OS_REASONS


def _user_path(name) -> str | None:
    """The user's path for a file name in an OSError (a temporary name maps to its target)."""
    if name is None:
        return None
    p = Path(os.fsdecode(name))
    m = _TMP_NAME.match(p.name)
    return str(p.with_name(m["name"])) if m else str(p)


def describe_os_error(exc: OSError, path: str | os.PathLike | None = None, action: str | None = None) -> str:
    """One line for an operating-system error: ``cannot ACTION 'PATH': REASON; HINT``.

    ``path`` defaults to the error's file name (a temporary file of :func:`atomic_output` is named
    by its target). ``action`` is ``"read"`` or ``"write"``; when None it is guessed from the error
    (disk full, read-only file system: write; an existing file that cannot be opened: read).
    """
    code = getattr(exc, "errno", None)
    name = str(path) if path is not None else _user_path(getattr(exc, "filename", None))
    if action is None:
        if code in _WRITE_ERRNOS:
            action = "write"
        elif code in (errno.EACCES, errno.EPERM) and name and os.path.isfile(name):
            # an existing file: reading it failed, unless it is readable but read-only
            action = "write" if os.access(name, os.R_OK) and not os.access(name, os.W_OK) else "read"
        elif code in (errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.EEXIST):
            action = "write"
        else:
            action = "use"
    reason, write_hint, read_hint = _OS_REASONS.get(code, (None, None, None))
    if reason is None:
        reason = (exc.strerror or type(exc).__name__).lower() if getattr(exc, "strerror", None) else \
            excerpt(str(exc) or type(exc).__name__, 100)
    if code == errno.EEXIST and name and os.path.exists(name) and not os.path.isdir(name):
        reason, write_hint = "a file of that name is in the way, not a folder", "remove or rename the file, or choose another name"
    if code == errno.ENOTDIR and name:  # name the file that stands where a folder should be
        above = Path(name).parent
        while str(above) not in ("", ".", above.anchor) and not os.path.isfile(above):
            above = above.parent
        if os.path.isfile(above):
            reason = f"{str(above)!r} is a file, not a folder"
    hint = read_hint if action == "read" else write_hint
    hint = hint or ("check the path and its permissions" if action != "write" else "choose another output")
    where = f" {name!r}" if name else ""
    return f"cannot {action}{where}: {reason}; {hint}"


def _write_error(exc: OSError, out: Path) -> OutputError:
    """OutputError naming the output ``out`` for an OSError raised while writing it."""
    if isinstance(exc, OutputError):
        return exc
    return OutputError(describe_os_error(exc, out, "write"))


def _is_about(exc: OSError, paths) -> bool:
    """The error names one of ``paths`` (as its file name or second file name)."""
    want = {os.path.abspath(p) for p in paths}
    return any(n is not None and os.path.abspath(os.fsdecode(n)) in want
               for n in (getattr(exc, "filename", None), getattr(exc, "filename2", None)))


def _check_parent(out: Path, create_parents: bool) -> None:
    """The folder of ``out`` exists and can take new files (or, with ``create_parents``, the first
    existing folder above it can); OutputError otherwise. Advisory: the write itself still checks."""
    parent = out.parent if str(out.parent) else Path(".")
    first = parent
    while not first.exists() and first != first.parent:
        if first.is_symlink():  # a dangling link is in the way
            raise OutputError(f"cannot write {str(out)!r}: {str(first)!r} is a broken link; remove it or "
                              "choose another output")
        first = first.parent
    if first.exists() and not first.is_dir():
        raise OutputError(f"cannot write {str(out)!r}: {str(first)!r} is a file, not a folder; choose another output")
    if first != parent and not create_parents:
        raise OutputError(f"folder {str(parent)!r} of the output does not exist; create it first")
    if first.is_dir() and not os.access(first, os.W_OK | os.X_OK):
        try:
            ro = bool(os.statvfs(first).f_flag & os.ST_RDONLY)
        except (OSError, AttributeError):
            ro = False
        why = "it is on a read-only file system" if ro else "permission denied"
        raise OutputError(f"cannot write {str(out)!r}: {why} (folder {str(first)!r}); choose a writable folder")


def check_output_path(
    output: str | os.PathLike, inputs: list[str | os.PathLike] | None = None, overwrite: bool = False,
    create_parents: bool = False,
) -> Path:
    """Validate an output path before any work is done.

    Raises OutputError when the output is one of the inputs (never allowed), exists
    and ``overwrite`` is False, is a folder, or its folder does not exist (allowed with
    ``create_parents`` when the first existing folder above it is a folder), is a file,
    or cannot take new files (permissions, read-only file system).
    """
    out = Path(output)
    for inp in inputs or []:
        if inp is None:
            continue
        ip = Path(inp)
        if ip.exists() and out.exists() and os.path.samefile(ip, out) or out.resolve() == ip.resolve():
            raise OutputError(f"output {str(out)!r} is the input file; choose another --output")
    if out.exists() and not overwrite:
        raise OutputError(f"output {str(out)!r} already exists; pass --overwrite to replace it")
    if out.exists() and out.is_dir():
        raise OutputError(f"output {str(out)!r} is a directory; give a file name")
    _check_parent(out, create_parents)
    return out


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "wb"):
    """Write ``path`` atomically: yields a temporary path in the same folder, which is
    renamed onto ``path`` when the block succeeds and deleted when it fails.

    Raises OutputError (naming ``path``, not the temporary file) for an operating-system
    error while creating, writing or renaming it: permission denied, disk full, a folder
    of that name, ...
    """
    with atomic_outputs([path]) as (tmp,):
        yield tmp


def make_missing_folders(folder: str | os.PathLike) -> list[Path]:
    """Create ``folder`` and its missing parents; returns those created (outermost first),
    for :func:`remove_empty_folders` to undo on failure."""
    folder = Path(folder)
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    created = []
    for d in reversed(missing):
        d.mkdir()
        created.append(d)
    return created


def remove_empty_folders(dirs: list[Path]) -> None:
    """Remove the folders of ``dirs`` (as returned by :func:`make_missing_folders`) that are
    still empty, innermost first; never raises."""
    for d in reversed(dirs):
        with contextlib.suppress(OSError):
            d.rmdir()  # only if still empty


@contextlib.contextmanager
def atomic_outputs(paths, create_parents: bool = False):
    """Write several files of one result all-or-nothing.

    Yields a list of temporary paths (one per entry of ``paths``, in the same folder as its
    target). When the block succeeds they are renamed onto their targets; when the block
    fails or is interrupted (KeyboardInterrupt, SIGTERM), or a rename fails, the temporary
    files are deleted, targets already replaced get their old contents back, and folders
    created for the outputs (``create_parents``) are removed: either every file appears,
    or none does. An existing target is replaced (check with :func:`check_output_path` first).

    Raises OutputError naming the target for an operating-system error while creating,
    writing or renaming a file.
    """
    outs = [Path(p) for p in paths]
    temps: list[Path] = []
    created: list[Path] = []
    done: list[tuple[Path, Path | None, bool]] = []  # (target, backup of its old contents, existed)
    try:
        for out in outs:
            if out.is_dir() and not out.is_symlink():
                raise OutputError(f"cannot write {str(out)!r}: it is a folder; remove or rename the folder, or "
                                  "choose another name")
        for out in outs:
            parent = out.parent if str(out.parent) else Path(".")
            try:
                if create_parents:
                    created += make_missing_folders(parent)
                fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent)
            except OSError as exc:
                raise _write_error(exc, out) from None
            os.close(fd)
            temps.append(Path(tmp))
        yield list(temps)
        mask = 0o666 & ~_umask()  # mkstemp makes 0600: give the usual 0o666 & ~umask
        for out, tmp in zip(outs, temps):
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(tmp, mask)
                existed = out.exists() or out.is_symlink()
                # several files: keep the old contents until all are in place (a hard link, no gap)
                backup = _backup(out) if len(outs) > 1 and existed and out.is_file() else None
                done.append((out, backup, existed))
                os.replace(tmp, out)
            except OSError as exc:
                raise _write_error(exc, out) from None
        for _, backup, _ in done:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.unlink(backup)
    except BaseException as exc:
        for tmp in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for out, backup, existed in reversed(done):  # undo the renames already made
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, out)
                    if os.path.lexists(backup) and os.path.samefile(backup, out):
                        os.unlink(backup)  # out was never replaced: rename() of a file onto itself is a no-op
                elif not existed:
                    os.unlink(out)
        remove_empty_folders(created)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            hit = next((o for o, t in zip(outs, temps) if _is_about(exc, {o, t})), None)
            if hit is None and getattr(exc, "filename", None) is None and exc.errno in _WRITE_ERRNOS:
                hit = outs[0] if len(outs) == 1 else (outs[0].parent if str(outs[0].parent) else Path("."))
            if hit is not None:
                raise _write_error(exc, hit) from None
        raise


def _backup(out: Path) -> Path:
    """A hard link to ``out`` under a temporary name (a copy where links are not supported)."""
    fd, bak = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent if str(out.parent) else ".")
    os.close(fd)
    os.unlink(bak)
    try:
        os.link(out, bak)
    except OSError:
        import shutil

        shutil.copy2(out, bak)
    return Path(bak)


def _write_frame(df: pd.DataFrame, path: Path, fmt: str, text_column: str, header: bool = True, append=False):
    if fmt == "txt":
        with open(path, "a" if append else "w", encoding="utf-8", newline="\n") as fh:
            for t in df[text_column].astype(str):
                fh.write(t.replace("\r", " ").replace("\n", " ") + "\n")
    elif fmt == "csv":
        df.to_csv(path, index=False, header=header, mode="a" if append else "w", quoting=csv.QUOTE_MINIMAL)
    elif fmt == "tsv":
        # IANA TSV has no quoting: tabs and line breaks inside fields become spaces.
        clean = df.copy()
        for c in clean.columns:
            if clean[c].dtype == object or pd.api.types.is_string_dtype(clean[c].dtype):
                clean[c] = clean[c].astype(str).str.replace(r"[\t\r\n]", " ", regex=True)
        clean.to_csv(path, sep="\t", index=False, header=header, mode="a" if append else "w",
                     quoting=csv.QUOTE_NONE, escapechar=None)
    elif fmt == "jsonl":
        with open(path, "a" if append else "w", encoding="utf-8") as fh:
            df.to_json(fh, orient="records", lines=True, force_ascii=False)
            # pandas omits the trailing newline before some versions; keep lines separated
    else:
        raise ValueError(fmt)


def write_table(
    df: pd.DataFrame, path: str | os.PathLike, text_column: str = "text", fmt: str | None = None
) -> Path:
    """Write ``df`` to ``path`` atomically in the format of its suffix (or ``fmt``).

    Plain text writes only ``text_column``, one document per line (newlines inside a
    document become spaces). Returns the path.
    """
    out = Path(path)
    fmt = detect_format(out, fmt)
    with atomic_output(out) as tmp:
        if fmt == "parquet":
            df.to_parquet(tmp, index=False)
        else:
            _write_frame(df, tmp, fmt, text_column)
    return out


class TableWriter:
    """Incremental, atomic writer for streamed outputs.

    Use as a context manager; call :meth:`write` per chunk. The file appears at
    ``path`` only when the block exits without error.
    """

    def __init__(self, path: str | os.PathLike, text_column: str = "text", fmt: str | None = None):
        self.path = Path(path)
        self.fmt = detect_format(self.path, fmt)
        self.text_column = text_column
        self._cm = None
        self._tmp: Path | None = None
        self._pq = None
        self._first = True
        self.rows = 0

    def __enter__(self):
        self._cm = atomic_output(self.path)
        self._tmp = self._cm.__enter__()
        return self

    def write(self, df: pd.DataFrame) -> None:
        if self.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(df, preserve_index=False)
            if self._pq is None:
                self._pq = pq.ParquetWriter(self._tmp, table.schema)
            self._pq.write_table(table.cast(self._pq.schema))
        else:
            _write_frame(df, self._tmp, self.fmt, self.text_column, header=self._first, append=not self._first)
        self._first = False
        self.rows += len(df)

    def __exit__(self, exc_type, exc, tb):
        if self._pq is not None:
            self._pq.close()
        return self._cm.__exit__(exc_type, exc, tb)


# ----------------------------------------------------------------------------- output folders
#: Marker file written into every folder created by :func:`atomic_output_dir`.
OUTPUT_MARKER = ".textdp-output.json"
# Files that identify folders written by textdp before the marker existed (format-checked).
_LEGACY_MARKERS = {"textdp_mlm.json": None, "model.json": "textdp-"}


def is_textdp_output(path: str | os.PathLike) -> bool:
    """True when folder ``path`` carries a textdp output marker (of any kind)."""
    p = Path(path)
    if (p / OUTPUT_MARKER).is_file():
        return True
    for name, prefix in _LEGACY_MARKERS.items():
        f = p / name
        if not f.is_file():
            continue
        if prefix is None:
            return True
        try:
            fmt = json.loads(f.read_text("utf-8")).get("format", "")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(fmt, str) and fmt.startswith(prefix):
            return True
    return False


def check_output_dir(
    path: str | os.PathLike, overwrite: bool = False, inputs: list | None = None, create_parents: bool = False
) -> Path:
    """Validate an output *folder* before any work is done; returns it as a Path.

    Refuses (OutputError) when: an input lies inside (or is) the folder; it is a file;
    it is a non-empty folder and ``overwrite`` is False; it is a non-empty folder not
    written by textdp (no marker), even with ``overwrite``; its parent folder is
    missing (unless ``create_parents``), is a file, or cannot take new folders
    (permissions, read-only file system). An existing empty folder may be used.
    """
    out = Path(path)
    target = out.resolve()
    for inp in inputs or []:
        if inp is None:
            continue
        ip = Path(inp).resolve()
        if ip == target or target in ip.parents:
            raise OutputError(f"input {str(inp)!r} lies inside the output folder {str(out)!r}; choose another --output")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputError(f"output {str(out)!r} is a file or link; give a new folder name")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise OutputError(f"output folder {str(out)!r} already exists; pass --overwrite to replace it")
        if not is_textdp_output(out):
            raise OutputError(f"folder {str(out)!r} exists and was not written by textdp; choose another --output")
    _check_parent(out, create_parents)
    return out


def _umask() -> int:
    old = os.umask(0o22)
    os.umask(old)
    return old


@contextlib.contextmanager
def atomic_output_dir(
    path: str | os.PathLike, overwrite: bool = False, kind: str = "output", inputs: list | None = None,
    create_parents: bool = False,
):
    """Build an output folder atomically: yields a fresh temporary folder next to ``path``;
    when the block succeeds, a marker file (:data:`OUTPUT_MARKER`, recording ``kind``) is
    written into it and it replaces ``path``; when it fails it is deleted and ``path`` is
    untouched. An existing folder is only ever replaced when it is empty, or when
    ``overwrite`` is True and it carries a textdp marker (see :func:`check_output_dir`,
    which is called first and again just before the swap). New folders get the
    permissions ``0o777 & ~umask``. Parent folders made for it (``create_parents``) are
    removed again when the block fails. Raises OutputError naming ``path`` (or the file
    in it) for an operating-system error: permission denied, disk full, ...
    """
    out = check_output_dir(path, overwrite, inputs, create_parents)
    parent = out.parent if str(out.parent) else Path(".")
    created: list[Path] = []
    tmp = None
    try:
        try:
            if create_parents:
                created = make_missing_folders(parent)
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
            os.chmod(tmp, 0o777 & ~_umask())
        except OSError as exc:
            raise _write_error(exc, out) from None
        yield tmp
        try:
            from textdp import __version__ as version
        except Exception:  # noqa: BLE001
            version = None
        try:
            (tmp / OUTPUT_MARKER).write_text(
                json.dumps({"format": "textdp-output", "kind": kind, "textdp_version": version}), "utf-8")
        except OSError as exc:
            raise _write_error(exc, out) from None
        check_output_dir(out, overwrite, inputs, create_parents)  # re-check: the folder may have changed meanwhile
        try:
            if out.is_dir() and any(out.iterdir()):
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=parent))
                os.replace(out, old / "d")
                try:
                    os.replace(tmp, out)
                except BaseException:
                    os.replace(old / "d", out)
                    with contextlib.suppress(OSError):
                        old.rmdir()
                    raise
                import shutil

                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)  # onto a missing or empty folder
        except OSError as exc:
            raise _write_error(exc, out) from None
    except BaseException as exc:
        import shutil

        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        remove_empty_folders(created)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError) and tmp is not None:
            name = getattr(exc, "filename", None)
            inside = None
            if name is not None:
                with contextlib.suppress(ValueError):
                    inside = Path(os.path.abspath(os.fsdecode(name))).relative_to(os.path.abspath(tmp))
            if inside is not None:
                raise _write_error(exc, out / inside) from None
            if name is None and exc.errno in _WRITE_ERRNOS:
                raise _write_error(exc, out) from None
        raise
