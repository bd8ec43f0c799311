"""GloVe/word2vec text files: a word listed twice is refused (issue 13, item 6)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.embeddings import load_embeddings
from textdp.errors import InputError


def _write(tmp_path, lines, name="dup.glove.txt"):
    p = tmp_path / name
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p


def test_duplicate_word_is_refused_with_both_line_numbers(tmp_path):
    # the second 'good' row would change the table's diameter (epsilon0) and, with the full
    # vocabulary as output, make 'good' an output twice
    p = _write(tmp_path, ["good 1 0 0", "bad -1 0 0", "film 0 1 0", "good 9 9 9"])
    with pytest.raises(InputError) as e:
        load_embeddings(p)
    msg = str(e.value)
    assert "'good'" in msg and "lines 1 and 4" in msg and "\n" not in msg


def test_duplicate_word_after_a_word2vec_header(tmp_path):
    p = _write(tmp_path, ["3 2", "a 1 0", "b 0 1", "a 1 1"])
    with pytest.raises(InputError, match=r"'a'.*lines 2 and 4"):
        load_embeddings(p)


def test_distinct_words_still_load(tmp_path):
    p = _write(tmp_path, ["good 1 0", "Good 0 1", "bad -1 0"])  # case differs: different words
    e = load_embeddings(p, lowercase=False)
    assert e.words == ["good", "Good", "bad"] and e.index == {"good": 0, "Good": 1, "bad": 2}


def test_cli_refuses_duplicate_embedding_word_with_exit_2(tmp_path):
    emb = _write(tmp_path, ["good 1 0 0", "great 0.9 0.1 0", "bad -1 0 0", "film 0 1 0", "great 0 0 1"])
    src = tmp_path / "in.txt"
    src.write_text("a good film\na bad film\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    r = CliRunner().invoke(app, ["sanitize", str(src), "--mechanism", "santext", "--epsilon", "2", "--embeddings",
                                 str(emb), "--output", str(out), "--seed", "1", "--no-ledger", "-q"])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "'great'" in err and "lines 2 and 5" in err, err
    assert not out.exists()
