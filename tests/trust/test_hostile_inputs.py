"""Hostile input: every bad file gives a clear one-line InputError (never another
exception), raw text appears only as a short marked excerpt, and large/wide
inputs are read with bounded memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from textdp.data import io
from textdp.errors import InputError

from . import hostile


def _read_all(path):
    df, col = io.read_table(path)
    return df[col].tolist()


def _stream_all(path):
    out = []
    for df, col in io.iter_table_chunks(path, chunksize=2):
        out.extend(df[col].tolist())
    return out


@pytest.mark.parametrize("reader", [_read_all, _stream_all], ids=["read_table", "iter_table_chunks"])
@pytest.mark.parametrize("build", hostile.ERRORS, ids=lambda f: f.__name__)
def test_bad_file_gives_one_line_input_error(tmp_path, build, reader):
    p = build(tmp_path)
    with pytest.raises(InputError) as err:
        reader(p)
    msg = str(err.value)
    assert "\n" not in msg and 0 < len(msg) < 400
    assert "SECRET-PAYLOAD-" + "z" * 41 not in msg  # raw text only as a <= 40-char excerpt


@pytest.mark.parametrize("reader", [_read_all, _stream_all], ids=["read_table", "iter_table_chunks"])
@pytest.mark.parametrize("build", list(hostile.OK), ids=lambda f: f.__name__)
def test_odd_but_valid_files_read_cleanly(tmp_path, build, reader):
    p = build(tmp_path)
    assert reader(p) == hostile.OK[build]


def test_ragged_csv_is_an_error_or_reads(tmp_path):
    p = hostile.ragged_csv(tmp_path)
    try:
        rows = _read_all(p)
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(rows, list)


def _peak_rss_mb(code: str) -> tuple[int, float, str]:
    """Run ``code`` in a fresh interpreter; return (exit code, peak RSS in MB, stderr)."""
    wrapper = code + textwrap.dedent(
        """
        import sys
        # VmHWM belongs to this process's own address space (reset by exec); ru_maxrss is
        # inherited from the forking parent on Linux, so a big pytest process would leak into it
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        print(int(hwm) / 1024.0, file=sys.stderr)
        """
    )
    r = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, timeout=300)
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "nan"
    try:
        peak = float(last)
    except ValueError:
        peak = float("nan")
    return r.returncode, peak, r.stderr


def test_million_columns_csv_is_refused_with_bounded_memory(tmp_path):
    p = hostile.many_columns(tmp_path, 1_000_000)  # ~ 8 MB header + 2 MB row
    code = textwrap.dedent(
        f"""
        from textdp.data import io
        from textdp.errors import InputError
        for f in (io.read_table, lambda q: list(io.iter_table_chunks(q))):
            try:
                f({str(p)!r})
            except InputError as e:
                assert "column" in str(e), str(e)
            else:
                raise SystemExit("no error for a million columns")
        """
    )
    rc, peak, err = _peak_rss_mb(code)
    assert rc == 0, err[-2000:]
    assert peak < 600, f"peak RSS {peak:.0f} MB"


def test_long_single_line_streams_with_bounded_memory(tmp_path):
    p = hostile.long_line(tmp_path, 8)
    code = textwrap.dedent(
        f"""
        from textdp.data import io
        from textdp.errors import InputError
        try:
            n = sum(len(df) for df, _ in io.iter_table_chunks({str(p)!r}))
            assert n == 1, n
        except InputError as e:
            assert "\\n" not in str(e)
        """
    )
    rc, peak, err = _peak_rss_mb(code)
    assert rc == 0, err[-2000:]
    assert peak < 600, f"peak RSS {peak:.0f} MB"


@pytest.mark.slow
def test_100mb_single_line(tmp_path):
    """The corpus entry of issue 8: a 100 MB single line (slow: writes 100 MB)."""
    p = hostile.long_line(tmp_path, 100)
    code = textwrap.dedent(
        f"""
        from textdp.data import io
        from textdp.errors import InputError
        try:
            n = sum(len(df) for df, _ in io.iter_table_chunks({str(p)!r}))
        except InputError as e:
            assert "\\n" not in str(e)
        """
    )
    rc, peak, err = _peak_rss_mb(code)
    assert rc == 0, err[-2000:]
    assert peak < 1500, f"peak RSS {peak:.0f} MB"


_CLI_CASES = [hostile.empty, hostile.binary, hostile.nul_bytes, hostile.mixed_encoding, hostile.nested_json,
              hostile.bad_json_line, hostile.parquet_wrong_schema, hostile.corrupt_parquet]


@pytest.mark.parametrize("build", _CLI_CASES, ids=lambda f: f.__name__)
def test_sanitize_cli_on_bad_files_exits_2_without_partial_output(tmp_path, small_glove_file, build):
    """`textdp sanitize` on each bad file: exit 2, one error line, no traceback, nothing written."""
    from typer.testing import CliRunner

    from textdp.cli.main import app

    data_dir = tmp_path / "in"
    data_dir.mkdir()
    p = build(data_dir)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "sanitized.csv"
    r = CliRunner().invoke(app, ["sanitize", str(p), "--epsilon", "3", "--embeddings", str(small_glove_file),
                                 "-o", str(out), "--no-ledger", "-q"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "error:" in r.output
    assert "SECRET-PAYLOAD-" + "z" * 41 not in r.output
    assert list(out_dir.iterdir()) == []  # no output, no card, no temporary file left behind


# session 2: found by a fresh-user tester -----------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_csv_row_longer_than_header_is_an_error_not_a_shift(tmp_path, stream):
    from textdp.data.io import iter_table_chunks, read_table

    f = tmp_path / "rag.csv"
    f.write_text("id,text\n1,the movie,extra,cols\n2,fine\n")
    with pytest.raises(InputError, match="more fields than the header"):
        list(iter_table_chunks(f, chunksize=1)) if stream else read_table(f)


@pytest.mark.parametrize("stream", [False, True])
def test_nul_byte_in_a_csv_text_column_is_refused(tmp_path, stream):
    from textdp.data.io import iter_table_chunks, read_table

    f = tmp_path / "nul.csv"
    f.write_bytes(b"id,text\n1,the movie\x00 was good\n")
    with pytest.raises(InputError, match="NUL byte"):
        list(iter_table_chunks(f)) if stream else read_table(f)


def test_utf16_gets_the_utf16_hint(tmp_path):
    from textdp.data.io import read_table

    f = tmp_path / "u16.csv"
    f.write_bytes("id,text\n1,a good film\n".encode("utf-16"))
    with pytest.raises(InputError, match="iconv -f utf-16"):
        read_table(f)


@pytest.mark.parametrize("stream", [False, True])
def test_jsonl_numbers_are_refused_and_nulls_are_empty(tmp_path, stream):
    """A number is not text: refused with its line (issue 13: no silent conversion); a null text is
    "" for the commands that read documents (sanitize keeps it as null: tests/test_cli_hardening.py)."""
    from textdp.data.io import iter_table_chunks, read_table

    f = tmp_path / "num.jsonl"
    f.write_text('{"text":"ok"}\n{"text":123}\n{"text":null}\n{"text":"ok film"}\n')
    with pytest.raises(InputError, match="holds a number on line 2, not a string"):
        next(iter_table_chunks(f)) if stream else read_table(f)
    f.write_text('{"text":null}\n{"text":"ok film"}\n')
    df, col = next(iter_table_chunks(f)) if stream else read_table(f)
    assert df[col].tolist() == ["", "ok film"]


def test_a_named_pipe_is_refused_as_not_a_regular_file(tmp_path):
    import os

    fifo = tmp_path / "ff.txt"
    os.mkfifo(fifo)
    for read in (_read_all, _stream_all):
        with pytest.raises(InputError, match="not a regular file"):
            read(fifo)
