"""The bad-file corpus, generated at test time (never committed).

Each builder writes one hostile file into a folder and returns its path. The
``EXPECT`` map says what a reader must do: ``"error"`` (a one-line InputError)
or ``"ok"`` (read, with the given check).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def empty(d: Path) -> Path:
    p = d / "empty.csv"
    p.write_bytes(b"")
    return p


def header_only(d: Path) -> Path:
    p = d / "header_only.csv"
    p.write_bytes(b"text,label\n")
    return p


def binary(d: Path) -> Path:
    p = d / "binary.txt"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return p


def binary_csv(d: Path) -> Path:
    p = d / "binary.csv"
    p.write_bytes(b"text\n" + np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return p


def nul_bytes(d: Path) -> Path:
    p = d / "nul.txt"
    p.write_bytes(b"first line\nsecond \x00\x00 line\n")
    return p


def bom(d: Path) -> Path:
    p = d / "bom.csv"
    p.write_bytes("\ufefftext,label\nhello world,1\n".encode("utf-8"))
    return p


def crlf(d: Path) -> Path:
    p = d / "crlf.txt"
    p.write_bytes(b"line one\r\nline two\r\n")
    return p


def mixed_encoding(d: Path) -> Path:
    p = d / "mixed.txt"
    p.write_bytes("caf\u00e9 ok\n".encode("utf-8") + "caf\u00e9 latin1\n".encode("latin-1") + b"end\n")
    return p


def long_line(d: Path, megabytes: int = 8) -> Path:
    p = d / f"long_line_{megabytes}mb.txt"
    with open(p, "wb") as fh:
        chunk = b"word " * (1 << 18)  # 1.25 MB
        for _ in range(int(megabytes * (1 << 20) / len(chunk)) + 1):
            fh.write(chunk)
        fh.write(b"\n")
    return p


def many_columns(d: Path, n: int = 1_000_000) -> Path:
    p = d / "wide.csv"
    with open(p, "w") as fh:
        fh.write(",".join(f"c{i}" for i in range(n)) + "\n")
        fh.write(",".join("x" for _ in range(n)) + "\n")
    return p


def nested_json(d: Path, depth: int = 100_000) -> Path:
    p = d / "nested.jsonl"
    p.write_text('{"text": ' + "[" * depth + "]" * depth + "}\n")
    return p


def json_not_object(d: Path) -> Path:
    p = d / "array.jsonl"
    p.write_text(json.dumps([1, 2, 3]) + "\n")
    return p


def bad_json_line(d: Path) -> Path:
    p = d / "bad.jsonl"
    p.write_text('{"text": "fine"}\n{"text": "SECRET-PAYLOAD-' + "z" * 200 + '"\n')
    return p


def parquet_wrong_schema(d: Path) -> Path:
    import pandas as pd

    p = d / "wrong.parquet"
    pd.DataFrame({"a": [1, 2], "b": [3.0, 4.0]}).to_parquet(p)
    return p


def parquet_nested_text(d: Path) -> Path:
    import pandas as pd

    p = d / "nested_text.parquet"
    pd.DataFrame({"text": [[1, 2], [3]]}).to_parquet(p)
    return p


def corrupt_parquet(d: Path) -> Path:
    p = d / "corrupt.parquet"
    p.write_bytes(b"PAR1" + b"\x00garbage" * 100 + b"PAR1")
    return p


def ragged_csv(d: Path) -> Path:
    p = d / "ragged.csv"
    p.write_text('text,label\n"unclosed quote,1\nx,2\n')
    return p


ERRORS = [empty, header_only, binary, binary_csv, nul_bytes, mixed_encoding, nested_json, json_not_object,
          bad_json_line, parquet_wrong_schema, parquet_nested_text, corrupt_parquet]
OK = {bom: ["hello world"], crlf: ["line one", "line two"]}
