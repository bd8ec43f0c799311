"""Coverage-guided fuzzing of textdp's file readers (atheris / libFuzzer).

Run:   python fuzz/fuzz_readers.py -max_total_time=60          (needs `pip install atheris`)
Any exception other than a textdp.errors.TextDPError (one-line user error) is a
crash: atheris prints the input and writes it to crash-<sha1> in the current
folder; add it to the corpus in tests/trust/hostile.py.

The first byte of each input chooses the format (csv, tsv, jsonl, parquet,
txt); the rest is written to a temporary file read with both read_table and
iter_table_chunks.
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["textdp"]):
    from textdp.data import io
    from textdp.errors import TextDPError

_FORMATS = ("csv", "tsv", "jsonl", "parquet", "txt")
_TMP = tempfile.mkdtemp(prefix="textdp-fuzz-")


def test_one_input(data: bytes) -> None:
    if not data:
        return
    fmt = _FORMATS[data[0] % len(_FORMATS)]
    path = os.path.join(_TMP, f"input.{fmt}")
    with open(path, "wb") as fh:
        fh.write(data[1:])
    try:
        io.read_table(path)
    except TextDPError:
        pass
    try:
        for _ in io.iter_table_chunks(path, chunksize=3):
            pass
    except TextDPError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
