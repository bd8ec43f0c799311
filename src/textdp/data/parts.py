"""A dataset stored as parts: a folder or a glob of Parquet/CSV/TSV/JSONL/TXT files (issue 16).

:func:`find_parts` lists the parts of an input in the order that numbers its records: sorted
by their path relative to the input's base folder (Python string order, the same on every
machine), then row within the file. :func:`manifest_identity` combines per-part sizes and
SHA-256 digests (computed where the parts are read, e.g. on an engine's workers) into one
dataset identity, the key of the dataset's budget ledger.

Which files are parts: in a folder, every file directly inside it whose name does not start
with ``.`` or ``_`` (hidden files, ``_SUCCESS``, ``_privacy.card.json``: the names Spark, Dask
and pyarrow skip too); a glob (``*``, ``?``, ``[...]``, ``**`` recursive) takes the files it
matches under the same rule. Every part must have one format (from its suffix,
:func:`textdp.data.io.detect_format`). A folder holding a subfolder or a file of another format
is refused (InputError, one line): a release never silently leaves data out.
"""

from __future__ import annotations

import glob as _glob
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from textdp.errors import InputError

__all__ = ["PartsInput", "find_parts", "is_parts_input", "has_glob", "manifest_identity", "MANIFEST_FORMAT"]

#: the version tag hashed into a manifest of several parts
MANIFEST_FORMAT = "textdp-manifest/1"


def has_glob(s: str | os.PathLike) -> bool:
    """True when ``s`` holds a glob character (``*``, ``?``, ``[``)."""
    return _glob.has_magic(str(s))


def is_parts_input(s: str | os.PathLike) -> bool:
    """True when ``s`` names a folder or is a glob (a dataset of parts), False for a single path."""
    return has_glob(s) or Path(s).is_dir()


def _skipped(name: str) -> bool:
    return name.startswith((".", "_"))


@dataclass(frozen=True)
class PartsInput:
    """The parts of an input. ``base``: the folder the relative paths start from; ``label``: the
    input as the user gave it (the curator's, never on a card); ``paths``: absolute paths in
    record order; ``relative``: the same, relative to ``base`` (POSIX separators); ``fmt``: the
    common format (``parquet``, ``csv``, ``tsv``, ``jsonl`` or ``txt``)."""

    base: Path
    label: str
    paths: tuple[Path, ...]
    relative: tuple[str, ...]
    fmt: str

    def __len__(self) -> int:
        return len(self.paths)


def _glob_base(pattern: str) -> Path:
    """The longest leading folder of ``pattern`` without glob characters."""
    parts = Path(pattern).parts
    keep = []
    for p in parts:
        if has_glob(p):
            break
        keep.append(p)
    if len(keep) == len(parts):  # no magic at all: the pattern's folder
        keep = keep[:-1]
    return Path(*keep) if keep else Path(".")


def find_parts(input: str | os.PathLike) -> PartsInput:
    """The parts of ``input`` (a folder, a glob, or one file) in record order.

    Raises InputError (one line) when nothing matches, a folder holds a subfolder or a file
    without a table suffix, the parts mix formats, or a match is not a regular file.
    """
    from textdp.data.io import detect_format

    label = str(input)
    if not label.strip():
        raise InputError("the input is empty; give a file, a folder of parts or a glob such as 'data/*.parquet'")
    if has_glob(label):
        base = _glob_base(label)
        found = []
        for m in _glob.glob(label, recursive=True):
            p = Path(m)
            if _skipped(p.name) or p.is_dir():
                continue
            found.append(p)
        if not found:
            raise InputError(f"no file matches {label!r} (names starting with '.' or '_' are skipped); check the "
                             "pattern (quote it so that the shell does not expand it)")
    else:
        p = Path(label)
        if not p.exists():
            raise InputError(f"{label!r} does not exist; give a file, a folder of parts or a glob")
        if p.is_dir():
            base = p
            found = []
            try:
                entries = sorted(p.iterdir())
            except OSError as exc:
                from textdp.data.io import describe_os_error

                raise InputError(describe_os_error(exc, p, "read")) from None
            for e in entries:
                if _skipped(e.name):
                    continue
                if e.is_dir():
                    raise InputError(f"folder {label!r} holds a subfolder {e.name!r}: only the files directly inside "
                                     "it are read; move the subfolder away or give a glob such as "
                                     f"'{label.rstrip('/')}/**/*.parquet'")
                found.append(e)
            if not found:
                raise InputError(f"folder {label!r} holds no parts (files whose names do not start with '.' or "
                                 "'_'); give a folder of Parquet/CSV/JSONL/TXT files")
        else:
            base = p.parent
            found = [p]
    rel = []
    for f in found:
        if not f.is_file():
            raise InputError(f"{str(f)!r} is not a regular file (a pipe, socket or device); parts must be files")
        try:
            r = f.resolve().relative_to(base.resolve()).as_posix()
        except ValueError:  # a symlinked part pointing elsewhere: its name under the base
            r = os.path.relpath(f, base).replace(os.sep, "/")
        rel.append(r)
    order = sorted(range(len(found)), key=lambda i: rel[i])
    paths = tuple(Path(os.path.abspath(found[i])) for i in order)
    relative = tuple(rel[i] for i in order)
    fmts = {}
    for p, r in zip(paths, relative):
        try:
            fmts.setdefault(detect_format(p), r)
        except InputError:
            raise InputError(f"part {r!r} of {label!r} has no table suffix (.parquet, .csv, .tsv, .jsonl, .txt); "
                             "move it out of the input or narrow the glob") from None
    if len(fmts) > 1:
        shown = ", ".join(f"{f} ({r})" for f, r in fmts.items())
        raise InputError(f"the parts of {label!r} mix formats: {shown}; every part must have the same format")
    return PartsInput(Path(os.path.abspath(base)), label, paths, relative, next(iter(fmts)))


def manifest_identity(parts) -> str:
    """The SHA-256 (hex) that identifies a dataset of parts, from ``parts``: ``(size, sha256)`` of
    each part in record order. One part: that part's own SHA-256 (a file given alone or as a
    one-part folder shares its budget ledger). Several: SHA-256 of ``MANIFEST_FORMAT`` and one
    line ``SIZE SHA256`` per part. Names and paths are left out: a renamed or moved dataset
    keeps its identity, as a renamed file does; any changed byte or a re-split of the same rows
    is a different dataset (near-duplicates are not detected)."""
    parts = [(int(size), str(sha).lower()) for size, sha in parts]
    if not parts:
        raise InputError("a dataset of parts needs at least one part")
    for _, sha in parts:
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise ValueError(f"not a SHA-256 digest: {sha[:70]!r}")
    if len(parts) == 1:
        return parts[0][1]
    h = hashlib.sha256((MANIFEST_FORMAT + "\n").encode())
    for size, sha in parts:
        h.update(f"{size} {sha}\n".encode())
    return h.hexdigest()
