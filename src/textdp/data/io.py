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
  memory); :func:`read_table` reads a whole (small or medium) file. With
  ``plain_text=True`` a ``.txt`` input comes in :class:`TextLines` chunks (no pandas
  import: a short run starts faster); :class:`TableWriter` writes either kind.
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

from textdp._lazy import lazy_module
from textdp.errors import EmptyInputError, InputError, OutputError, ParameterError, excerpt

pd = lazy_module("pandas")  # imported on first use: plain text is read and written without pandas

__all__ = [
    "FORMATS",
    "detect_format",
    "read_table",
    "iter_table_chunks",
    "write_table",
    "atomic_output",
    "make_missing_folders",
    "remove_dead_leftovers",
    "remove_empty_folders",
    "atomic_outputs",
    "check_output_path",
    "describe_os_error",
    "guess_text_column",
    "TableWriter",
    "TextLines",
    "InputWatch",
    "file_state",
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
            raise EmptyInputError(f"input file {str(path)!r} is empty")
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


def _guess_encoding(path: Path) -> tuple[str, str] | None:
    """``(name, iconv -f argument)`` of the likely encoding of a file that is not UTF-8, from its
    first 64 KiB: a UTF-32/UTF-16 byte-order mark, UTF-16 without one (NUL bytes at every other
    position), else a single-byte encoding (Windows-1252 when bytes 0x80-0x9F occur, which are
    its curly quotes and dashes, else Latin-1). None when it cannot tell (no high bytes)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return None
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32 (it starts with a UTF-32 byte-order mark)", "utf-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 (it starts with a UTF-16 byte-order mark)", "utf-16"
    sample = head[: len(head) // 2 * 2]
    if len(sample) >= 4:
        even, odd = sample[0::2], sample[1::2]
        if odd.count(0) >= 0.3 * len(odd) and even.count(0) < 0.05 * len(even):
            return "UTF-16 little-endian (every other byte is NUL)", "utf-16le"
        if even.count(0) >= 0.3 * len(even) and odd.count(0) < 0.05 * len(odd):
            return "UTF-16 big-endian (every other byte is NUL)", "utf-16be"
    if any(b >= 0x80 for b in head):
        for cut in range(4):  # valid UTF-8 at the start (a bad byte further on): no single-byte guess
            try:
                head[: len(head) - cut].decode("utf-8")
                return None
            except UnicodeDecodeError:
                continue
        if any(0x80 <= b <= 0x9F for b in head):
            return "Windows-1252 (a Western single-byte encoding)", "windows-1252"
        return "Latin-1 (ISO-8859-1, a Western single-byte encoding)", "latin1"
    return None


_BINARY_MAGIC = (b"\x7fELF", b"\x1f\x8b", b"PK\x03\x04", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd", b"MZ",
                 b"\x89PNG", b"\xff\xd8\xff", b"%PDF")


def _looks_binary(path: Path) -> bool:
    """Whether the file's first 64 KiB look like binary data (an executable, an archive, compressed
    or image data) rather than text in some encoding: a known magic number, a NUL byte that is not
    UTF-16's pattern, or more than 5 % control bytes other than tab, newline, carriage return, form feed."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    if not head:
        return False
    if head.startswith(_BINARY_MAGIC):
        return True
    guess_utf = head.startswith((b"\xff\xfe", b"\xfe\xff"))
    if not guess_utf and b"\x00" in head:
        even, odd = head[0::2], head[1::2]
        utf16 = (odd.count(0) >= 0.3 * max(1, len(odd)) and even.count(0) < 0.05 * max(1, len(even))) or \
                (even.count(0) >= 0.3 * max(1, len(even)) and odd.count(0) < 0.05 * max(1, len(odd)))
        if not utf16:
            return True
    control = sum(1 for b in head if b < 0x20 and b not in (0x09, 0x0A, 0x0C, 0x0D, 0x00))
    return not guess_utf and control > 0.05 * len(head)


def _reencode_hint(path: Path, source: str) -> str:
    """``iconv -f SOURCE -t UTF-8 'in.txt' > 'in.utf8.txt'``: a re-encoding line for ``path``."""
    import shlex

    out = path.with_name(f"{path.stem}.utf8{path.suffix}")
    return f"iconv -f {source} -t utf-8 {shlex.quote(path.name)} > {shlex.quote(out.name)}"


def _decode_error(path: Path, encoding: str, line: int | None = None) -> InputError:
    """One line for a file that is not ``encoding``: the likely encoding (a UTF-16/UTF-32
    byte-order mark or NUL pattern, else Latin-1/Windows-1252) and the iconv line that converts it;
    ``line``: the first bad line when the caller knows it (else it is searched)."""
    guess = _guess_encoding(path)
    if guess is not None and guess[1].startswith("utf-"):
        return InputError(f"{path.name}: the file is {guess[0]}, not {encoding}; re-encode it as UTF-8: "
                          f"{_reencode_hint(path, guess[1])}")
    if _looks_binary(path):
        return InputError(f"{path.name}: it looks like a binary file (an executable, an archive, compressed or "
                          "image data), not text; give a CSV/TSV/JSONL/Parquet/TXT file")
    if line is None:
        bad = _find_bad_line(path, encoding)
        line = bad[0] if bad else None
    where = f" on line {line}" if line else ""
    if guess is not None:
        return InputError(f"{path.name}: bytes that are not valid {encoding}{where}; it looks like "
                          f"{guess[0]}: re-encode it as UTF-8: {_reencode_hint(path, guess[1])}")
    return InputError(f"{path.name}: bytes that are not valid {encoding}{where}; re-encode the file as UTF-8 "
                      f"(e.g. {_reencode_hint(path, 'latin1')} if it is Latin-1)")


def _check_not_utf16(path: Path, fmt: str, encoding: str) -> None:
    """Refuse a UTF-16/UTF-32 text file up front (before a parser reads its NUL bytes as text),
    naming the encoding and the iconv line."""
    if fmt == "parquet" or encoding.lower().replace("_", "-") not in ("utf-8", "utf8"):
        return
    guess = _guess_encoding(path)
    if guess is not None and guess[1].startswith("utf-"):
        raise _decode_error(path, encoding)


def _nul_error(path: Path, where: str) -> InputError:
    """A NUL byte in text: UTF-16 without a byte-order mark (named, with its iconv line), else binary."""
    guess = _guess_encoding(path)
    if guess is not None and guess[1].startswith("utf-"):
        return InputError(f"{path.name}: the file is {guess[0]}, not UTF-8; re-encode it as UTF-8: "
                          f"{_reencode_hint(path, guess[1])}")
    return InputError(f"{path.name}: NUL byte {where}; it looks like a binary file, not text")


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


#: hidden column of the frames read with ``row_keys=True``: each JSON Lines row's own keys, in its own
#: order, so that a writer gives every row back exactly its keys (and no other row's); dropped by
#: every other format
ROW_KEYS = "__textdp_row_keys__"


def _value_kind(v) -> str:
    if isinstance(v, bool):
        return "true/false value"
    if isinstance(v, (int, float)) or type(v).__module__ == "numpy" and getattr(v, "shape", None) == ():
        return "number"
    if isinstance(v, dict):
        return "JSON object"
    if isinstance(v, (list, tuple)) or hasattr(v, "shape"):
        return "list"
    if isinstance(v, bytes):
        return "bytes value"
    return f"{type(v).__name__} value"


class TextLines:
    """The lines of a plain-text chunk as a one-column table named ``text``: the part of the
    ``pandas.DataFrame`` interface the streaming commands use (``columns``, ``len``, ``df[col]``
    with ``tolist()``, ``df[col] = values``, ``head(n)``, ``shape``), so a ``.txt`` input is read and
    written without importing pandas. :meth:`to_pandas` gives the DataFrame (writers of other
    formats use it)."""

    def __init__(self, lines: list, column: str = "text"):
        self._data = {column: list(lines)}

    @property
    def columns(self) -> list[str]:
        return list(self._data)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), len(self._data)

    def __len__(self) -> int:
        return len(next(iter(self._data.values())))

    def __getitem__(self, column: str) -> "_TextColumn":
        return _TextColumn(self._data[column])

    def __setitem__(self, column: str, values) -> None:
        values = list(values)
        if len(values) != len(self):
            raise ValueError(f"{len(values)} values for {len(self)} rows")
        self._data[column] = values

    def head(self, n: int) -> "TextLines":
        out = TextLines([])
        out._data = {k: v[:max(0, int(n))] for k, v in self._data.items()}
        return out

    def copy(self) -> "TextLines":
        return self.head(len(self))

    def to_pandas(self):
        return pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in self._data.items()})


class _TextColumn(list):
    """One column of :class:`TextLines` (a list with pandas' ``tolist``)."""

    def tolist(self) -> list:
        return list(self)


def _finish_lines(lines: list[str], path: Path, text_column: str | None) -> tuple[TextLines, str]:
    """:func:`_finish` for plain-text lines (one column ``text`` of strings; NULs are refused by the reader)."""
    if not lines:
        raise EmptyInputError(f"{path.name}: no rows to read")
    col = text_column if text_column is not None else guess_text_column(["text"])
    if col != "text":
        raise InputError(f"{path.name}: no column {col!r} (columns: text); pass the right --text-column")
    return TextLines(lines), col


def _finish(df: pd.DataFrame, path: Path, text_column: str | None, nulls: str = "empty",
            lines: list[int] | None = None, first_row: int = 0) -> tuple[pd.DataFrame, str]:
    """Find and check the text column of one chunk.

    A text column must hold strings: a numeric, boolean or date column (Parquet), or a non-string
    value (JSON Lines: a number, true/false, a list or an object) is refused with one line naming
    the column (and the line or row). Missing values (JSON null, Parquet null): ``nulls="empty"``
    makes them "" (commands that read text as documents), ``"keep"`` keeps them as None (sanitize
    passes them through unchanged). ``lines``: the file line of each row (JSON Lines), for messages;
    ``first_row``: rows before this chunk (messages name the row within the file).
    """
    if df.shape[0] == 0:
        raise EmptyInputError(f"{path.name}: no rows to read")
    col = text_column if text_column is not None else guess_text_column(list(df.columns))
    if col not in df.columns:
        raise InputError(
            f"{path.name}: no column {col!r} (columns: {', '.join(map(str, list(df.columns)[:10]))}); "
            "pass the right --text-column"
        )
    s = df[col]
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    if not (s.dtype == object or pd.api.types.is_string_dtype(s.dtype)):
        kind = ("true/false" if pd.api.types.is_bool_dtype(s.dtype) else
                "numeric" if pd.api.types.is_numeric_dtype(s.dtype) else
                "date/time" if pd.api.types.is_datetime64_any_dtype(s.dtype) else str(s.dtype))
        raise InputError(f"{path.name}: text column {col!r} holds {kind} values ({s.dtype}), not strings; textdp "
                         "reads text only: pass the right --text-column, or store the column as strings")
    isnull = s.isna().to_numpy()
    if s.dtype == object and pd.api.types.infer_dtype(s, skipna=True) not in ("string", "empty"):
        bad = [i for i, v in enumerate(s.tolist()) if not isnull[i] and not isinstance(v, str)]
        if bad:
            v = s.iloc[bad[0]]
            where = f"line {lines[bad[0]]}" if lines is not None else f"row {first_row + bad[0] + 1}"
            if isinstance(v, (list, tuple, dict, bytes)) or hasattr(v, "shape") and getattr(v, "shape", ()) != ():
                raise InputError(f"{path.name}: column {col!r} holds nested values (lists/objects/bytes), not text "
                                 f"({where}); pass the right --text-column or flatten the file")
            raise InputError(f"{path.name}: text column {col!r} holds a {_value_kind(v)} on {where}, not a string; "
                             "textdp reads text only: pass the right --text-column, or write the value as a string")
    if nulls == "keep":  # an object Series: a list with None would become NaN
        s = pd.Series([None if isnull[i] else v for i, v in enumerate(s.tolist())], index=df.index, dtype=object)
    else:
        s = s.where(~isnull, "").astype(str)
    df[col] = s
    nul = s.str.contains("\x00", regex=False, na=False)
    if nul.any():
        i = int(nul.to_numpy().argmax())
        raise _nul_error(path, f"in column {col!r} ({f'line {lines[i]}' if lines is not None else f'row {first_row + i + 1}'})")
    return df, col


def _jsonl_frame(objs: list[dict], lines: list[int], path: Path, col: str | None, nulls: str = "empty",
                 row_keys: bool = False, first_row: int = 0) -> tuple[pd.DataFrame, str]:
    """The frame of JSON Lines rows ``objs`` (read from file lines ``lines``) and its text column.
    A row without the text field is refused with its line number (a row without text is written
    with ``null``); ``row_keys``: add :data:`ROW_KEYS`."""
    df = pd.DataFrame(objs, dtype=object)  # object: 123 stays 123 (not 123.0 next to a null)
    if df.shape[1] == 0:
        raise InputError(f"{path.name}: line {lines[0]} is an empty JSON object; each line needs the text field")
    if col is None:
        col = guess_text_column(list(df.columns))
    if col in df.columns:
        for obj, i in zip(objs, lines):
            if col not in obj:
                raise InputError(f"{path.name}: line {i} has no {col!r} field; every line needs the text field "
                                 f"(write \"{col}\": null for a row without text)")
    df, col = _finish(df, path, col, nulls, lines, first_row)
    if row_keys:
        df[ROW_KEYS] = [tuple(o) for o in objs]
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
                raise _decode_error(path, encoding, i) from None
            if i == 1 and line.startswith("\ufeff"):
                line = line[1:]
            lines.append(line.rstrip("\r\n"))
    if "\x00" in "".join(lines[:1000]):
        raise _nul_error(path, "in the text")
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
    _check_not_utf16(p, fmt, encoding)
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
            objs, numbers = _read_jsonl(p, encoding)
            if not objs:
                raise EmptyInputError(f"{p.name}: no rows to read")
            return _jsonl_frame(objs, numbers, p, text_column)
        else:  # parquet
            import pyarrow.parquet as pq

            df = pq.read_table(p).to_pandas(ignore_metadata=True)  # every stored column, an index's too
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


def _read_jsonl(path: Path, encoding: str, nrows: int | None = None, start: int = 0):
    """``(rows, line numbers)`` of a JSON Lines file (blank lines skipped)."""
    rows, numbers = [], []
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            if i <= start:
                continue
            if nrows is not None and len(rows) >= nrows:
                break
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError:
                raise _decode_error(path, encoding, i) from None
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
            numbers.append(i)
    return rows, numbers


def iter_table_chunks(
    path: str | os.PathLike,
    text_column: str | None = None,
    fmt: str | None = None,
    chunksize: int = 50_000,
    encoding: str = "utf-8",
    nulls: str = "empty",
    row_keys: bool = False,
    plain_text: bool = False,
) -> Iterator[tuple[pd.DataFrame, str]]:
    """Stream ``(chunk, text_column)`` pairs of at most ``chunksize`` rows.

    Memory is bounded by the chunk size (for Parquet, by one row group). Errors
    as in :func:`read_table`; a decoding error names the line within the file.
    ``nulls``: ``"empty"`` (missing texts become "") or ``"keep"`` (None); ``row_keys``:
    JSON Lines chunks carry :data:`ROW_KEYS` (each row's own keys, for the writers);
    ``plain_text``: a ``.txt`` input comes as :class:`TextLines` chunks instead of DataFrames
    (the same rows and checks, without importing pandas).
    """
    p = Path(path)
    _check_readable(p)
    fmt = detect_format(p, fmt)
    if chunksize < 1:
        raise ParameterError("chunksize must be >= 1")
    _check_width(p, fmt)
    _check_not_utf16(p, fmt, encoding)
    col = text_column
    n = 0
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(p)
            for batch in pf.iter_batches(batch_size=chunksize):
                # ignore_metadata: every stored column stays a column (pandas would make a stored index the
                # frame's index, which the writer then drops): it is released, as other columns are, and named
                df, col = _finish(batch.to_pandas(ignore_metadata=True), p, col, nulls, first_row=n)
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
                df, col = _finish(df, p, col, nulls, first_row=n)
                n += len(df)
                yield df, col
        else:
            yield from _iter_lines_chunks(p, fmt, col, chunksize, encoding, nulls, row_keys, plain_text)
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
        raise EmptyInputError(f"{p.name}: no rows to read")


def _iter_lines_chunks(p: Path, fmt: str, col: str | None, chunksize: int, encoding: str, nulls: str = "empty",
                       row_keys: bool = False, plain_text: bool = False):
    buf: list = []
    numbers: list[int] = []
    n = 0

    def frame():
        if fmt == "txt":
            if plain_text:
                return _finish_lines(buf, p, col)
            return _finish(pd.DataFrame({"text": buf}), p, col, nulls, first_row=n)
        return _jsonl_frame(buf, numbers, p, col, nulls, row_keys, first_row=n)

    with open(p, "rb") as fh:
        for i, raw in enumerate(fh, start=1):
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError:
                raise _decode_error(p, encoding, i) from None
            if i == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if fmt == "txt":
                if "\x00" in line:
                    raise _nul_error(p, f"on line {i}")
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
                numbers.append(i)
            if len(buf) >= chunksize:
                df, col = frame()
                n += len(df)
                yield df, col
                buf, numbers = [], []
    if buf:
        df, col = frame()
        n += len(df)
        yield df, col
    if n == 0:
        raise EmptyInputError(f"{p.name}: no rows to read")


# ----------------------------------------------------------------------------- inputs read more than once
def file_state(path: str | os.PathLike) -> tuple[int, int, int]:
    """``(size, mtime_ns, inode)`` of a file: taken before a file is first read, compared by
    :class:`InputWatch` at later reads."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def file_sha256(path: str | os.PathLike, block: int = 1 << 22) -> str:
    """SHA-256 (hex) of a file's bytes, streamed."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(block)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


class InputWatch:
    """Detects that an input file read in several passes changed between them (documents
    appended while it is being read, the file replaced): its size, modification time (ns) or
    inode differ from ``state`` (:func:`file_state`, taken before the first read), or its
    SHA-256 differs from ``sha256`` (computed now when not given). :meth:`check` raises
    InputError (one line) on a change; ``full=True`` also re-hashes the file."""

    def __init__(self, path: str | os.PathLike, state: tuple[int, int, int] | None = None, sha256: str | None = None):
        self.path = Path(path)
        self.state = file_state(self.path) if state is None else state
        self.sha256 = sha256 if sha256 is not None else file_sha256(self.path)

    def changed(self, full: bool = False) -> str | None:
        """What changed (``"size"``, ``"modification time"``, ...) or None."""
        try:
            now = file_state(self.path)
        except OSError:
            return "existence (it was removed or renamed)"
        what = [w for w, a, b in zip(("size", "modification time", "inode (it was replaced)"), self.state, now) if a != b]
        if what:
            return " and ".join(what)
        if full:
            try:
                if file_sha256(self.path) != self.sha256:
                    return "content (SHA-256)"
            except OSError:
                return "existence (it was removed or renamed)"
        return None

    def error(self, what: str) -> InputError:
        return InputError(f"input {str(self.path)!r} changed while it was being read (its {what} differs from when "
                          "the run started: is another program still writing it?); nothing was written or charged "
                          "to the budget; rerun once the file is complete")

    def check(self, full: bool = False) -> None:
        what = self.changed(full)
        if what is not None:
            raise self.error(what)


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
#: temporary names made by atomic_output(s)/atomic_output_dir: ".NAME.PID@HOST.XXXXXXXX.tmp" (PID@HOST:
#: the writing process, see :func:`_owner_tag`), ".NAME.XXXXXXXX.old" (backups) and the older
#: ".NAME.XXXXXXXX.tmp"
_TMP_NAME = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<pid>[0-9]+)@(?P<host>[A-Za-z0-9-]*)\.)?[A-Za-z0-9_]{8}\.(?:tmp|old)$")


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
    if code == errno.ENOENT and name and action == "write" and Path(name).parent.is_dir():
        # the folder is there, yet creating a file or folder in it says "no such file": a virtual file
        # system (/proc, /sys) that takes no new entries; "create its folder first" would mislead
        folder = str(Path(name).parent)
        reason = (f"the folder {folder!r} does not accept new files or folders (a virtual file system such as "
                  "/proc or /sys)")
        write_hint = "choose a folder on a regular disk"
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


def _host_tag() -> str:
    """This machine's name as it appears in temporary file names (letters, digits and '-')."""
    import socket

    try:
        host = socket.gethostname()
    except OSError:  # pragma: no cover
        host = ""
    return re.sub(r"[^A-Za-z0-9-]+", "-", host)[:40] or "host"


def _owner_tag() -> str:
    """``PID@HOST`` of this process: temporary files carry it, so that a later run can tell a dead
    process's leftover (removed) from a live one's (kept)."""
    return f"{os.getpid()}@{_host_tag()}"


def process_alive(pid: int) -> bool:
    """True when process ``pid`` exists on this machine (or cannot be checked: the safe side)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists under another user, or unknown: keep its files
        return True
    return True


def remove_dead_leftovers(target: str | os.PathLike) -> list[Path]:
    """Remove the temporary files (and folders) that a killed textdp run (SIGKILL, power loss)
    left next to ``target``: ``.NAME.PID@HOST.XXXXXXXX.tmp`` whose HOST is this machine and whose
    process PID no longer runs. A live process's temporary file, another machine's (a shared
    disk: its process cannot be checked from here) and names without PID@HOST are kept.
    Returns what was removed; never raises."""
    import glob
    import shutil

    target = Path(target)
    parent = target.parent if str(target.parent) else Path(".")
    host, me = _host_tag(), os.getpid()
    removed = []
    try:
        candidates = list(parent.glob(f".{glob.escape(target.name)}.*@*.tmp"))
    except OSError:
        return removed
    for c in candidates:
        m = _TMP_NAME.match(c.name)
        if m is None or m["name"] != target.name or m["pid"] is None or m["host"] != host:
            continue
        pid = int(m["pid"])
        if pid == me or process_alive(pid):
            continue
        try:
            if c.is_dir() and not c.is_symlink():
                shutil.rmtree(c)
            else:
                c.unlink()
            removed.append(c)
        except OSError:
            continue
    return removed


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
        try:
            d.mkdir()
        except OSError as exc:  # one line naming the folder, worded as a write (e.g. /proc takes no folders)
            remove_empty_folders(created)
            raise _write_error(exc, d) from None
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
                remove_dead_leftovers(out)  # a killed run's temporary file for this output (never a live one's)
                fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.{_owner_tag()}.", suffix=".tmp", dir=parent)
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
    """Write (or append) ``df`` in ``fmt``. A missing text (None) is an empty line (txt) or an empty
    field (CSV, TSV) and ``null`` in JSON Lines. A frame with :data:`ROW_KEYS` written as JSON Lines
    gives each row exactly its own keys, in its own order; other formats drop that column."""
    if ROW_KEYS in df.columns:
        if fmt == "jsonl":
            cols = [c for c in df.columns if c != ROW_KEYS]
            with open(path, "a" if append else "w", encoding="utf-8") as fh:
                for rec, keys in zip(df[cols].itertuples(index=False, name=None), df[ROW_KEYS]):
                    row = dict(zip(cols, rec))
                    fh.write(json.dumps({k: row[k] for k in keys}, ensure_ascii=False, default=str) + "\n")
            return
        df = df.drop(columns=[ROW_KEYS])
    if fmt == "txt":
        with open(path, "a" if append else "w", encoding="utf-8", newline="\n") as fh:
            for t in df[text_column]:
                t = "" if t is None else str(t)
                fh.write(t.replace("\r", " ").replace("\n", " ") + "\n")
    elif fmt == "csv":
        df.to_csv(path, index=False, header=header, mode="a" if append else "w", quoting=csv.QUOTE_MINIMAL)
    elif fmt == "tsv":
        # IANA TSV has no quoting: tabs and line breaks inside fields become spaces.
        clean = df.copy()
        for c in clean.columns:
            if clean[c].dtype == object or pd.api.types.is_string_dtype(clean[c].dtype):
                clean[c] = clean[c].map(lambda v: "" if v is None or v is pd.NA or isinstance(v, float) and v != v
                                        else str(v)).str.replace(r"[\t\r\n]", " ", regex=True)
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
            _without_attrs(df.drop(columns=[ROW_KEYS], errors="ignore")).to_parquet(tmp, index=False)
        else:
            _write_frame(df, tmp, fmt, text_column)
    return out


def _without_attrs(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (a copy the caller owns) with no pandas ``attrs``, on the frame or on its columns: pyarrow stores
    them in the Parquet file's metadata, and an input's attrs (an owner, a source, a note) are not part of the
    release."""
    df.attrs = {}
    for c in df.columns:
        if df[c].attrs:
            df[c].attrs = {}
    return df


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

    def write(self, df: pd.DataFrame | TextLines) -> None:
        """Append a chunk: a DataFrame, or :class:`TextLines` (written as plain text without pandas)."""
        if isinstance(df, TextLines) and self.fmt != "txt":
            df = df.to_pandas()
        if self.fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(_without_attrs(df.drop(columns=[ROW_KEYS], errors="ignore")),
                                         preserve_index=False)
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


def replace_folder(new: Path, out: Path) -> Path | None:
    """Put the finished folder ``new`` at ``out`` by rename: onto a missing or empty ``out`` directly; else the
    earlier ``out`` is first moved into a hidden sibling folder (as ``d``), put back if the second rename fails,
    and that sibling is returned for the caller to delete once the new folder is committed (or to restore).
    OSError as raised by the renames."""
    if not (out.is_dir() and any(out.iterdir())):
        os.replace(new, out)
        return None
    parent = out.parent if str(out.parent) else Path(".")
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=parent))
    os.replace(out, old / "d")
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old / "d", out)
        with contextlib.suppress(OSError):
            old.rmdir()
        raise
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
            remove_dead_leftovers(out)
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{_owner_tag()}.", suffix=".tmp", dir=parent))
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
            old = replace_folder(tmp, out)
        except OSError as exc:
            raise _write_error(exc, out) from None
        if old is not None:
            import shutil

            shutil.rmtree(old, ignore_errors=True)
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
