"""Property-based tests (hypothesis) of tokenization, the file readers and CLI
argument parsing, plus a bounded run of the atheris fuzzer when it is installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from textdp.data import io
from textdp.data.tokenize import WordTokenizer
from textdp.errors import TextDPError

REPO = Path(__file__).resolve().parents[2]
_FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# text without the characters that plain-text/CSV formats cannot carry faithfully
_doc = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r\n\x85\u2028\u2029\x0b\x0c\x1c\x1d\x1e"),
               min_size=1, max_size=60).filter(lambda s: s.strip() == s and s != "")


@_FAST
@given(st.text(max_size=200))
def test_tokenizer_spans_are_ordered_in_bounds_and_substitution_roundtrips(text):
    tok = WordTokenizer(lowercase=False)
    toks, spans = tok.tokenize_with_spans(text)
    assert len(toks) == len(spans)
    last = 0
    for t, (s, e) in zip(toks, spans):
        assert last <= s < e <= len(text)
        assert text[s:e] == t
        last = e
    assert WordTokenizer.substitute(text, spans, toks) == text
    assert WordTokenizer(lowercase=True).tokenize(text) == [t.lower() for t in toks]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(_doc, min_size=1, max_size=8), suffix=st.sampled_from([".csv", ".jsonl", ".parquet", ".tsv"]))
def test_write_read_roundtrip_any_text(tmp_path_factory, docs, suffix):
    if suffix == ".tsv":
        docs = [d.replace("\t", " ").replace('"', "'") for d in docs]
    p = tmp_path_factory.mktemp("rt") / f"t{suffix}"
    io.write_table(pd.DataFrame({"text": docs}), p)
    df, col = io.read_table(p)
    assert df[col].tolist() == docs
    assert [t for c, k in io.iter_table_chunks(p, chunksize=3) for t in c[k]] == docs


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=400), fmt=st.sampled_from(["csv", "tsv", "jsonl", "parquet", "txt"]))
def test_readers_on_arbitrary_bytes_raise_only_textdp_errors(tmp_path_factory, body, fmt):
    """Hypothesis-driven fuzzing (always on): any byte string is read or refused
    with a one-line TextDPError, never another exception."""
    p = tmp_path_factory.mktemp("fz") / f"input.{fmt}"
    p.write_bytes(body)
    for read in (lambda: io.read_table(p), lambda: list(io.iter_table_chunks(p, chunksize=2))):
        try:
            read()
        except TextDPError as exc:
            assert "\n" not in str(exc)


_ARG = st.one_of(
    st.sampled_from(["show", "set", "verify", "--epsilon", "--delta", "--json", "--ledger-dir", "-1", "0", "nan",
                     "inf", "1e308", "3", "x", "", "--", "-h"]),
    st.text(max_size=12),
)


@settings(max_examples=20, deadline=None)
@given(st.lists(_ARG, max_size=6))
def test_cli_argument_parsing_never_crashes(tmp_path_factory, argv):
    from textdp.cli.main import app

    d = str(tmp_path_factory.mktemp("led"))
    r = CliRunner().invoke(app, ["budget", *argv, "--ledger-dir", d] if argv[:1] in (["show"], ["set"], ["verify"])
                           else ["budget", *argv])
    assert r.exit_code in (0, 2), (argv, r.output)
    assert "Traceback" not in r.output


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_atheris_fuzz_readers_bounded(tmp_path):
    """A few seconds of coverage-guided fuzzing of the readers (CI-bounded)."""
    r = subprocess.run(
        [sys.executable, str(REPO / "fuzz" / "fuzz_readers.py"), "-max_total_time=1", "-runs=500", "-rss_limit_mb=4096",
         f"-artifact_prefix={tmp_path}/"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert not list(tmp_path.glob("crash-*"))
