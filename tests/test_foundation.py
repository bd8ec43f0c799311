"""Tests of the shared primitives: generators, guarantees, readers/writers, datasets, embeddings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from textdp.accounting import MetricDP, PureDP, guarantee_from_dict
from textdp.data import io, load_dataset
from textdp.data.tokenize import WordTokenizer
from textdp.embeddings import load_embeddings
from textdp.errors import InputError, OutputError, ParameterError
from textdp.noise import make_rng, random_source


def test_seeded_generators_reproduce_and_default_is_fresh():
    a = make_rng(7).random(5)
    b = make_rng(7).random(5)
    assert np.array_equal(a, b)
    c, d = make_rng().random(5), make_rng().random(5)
    assert not np.array_equal(c, d)
    assert random_source(3).describe()["seeded"] is True
    assert "not for release" in random_source(3).describe()["note"]
    assert random_source().describe()["generator"] == "ChaCha20"


def test_spawned_streams_are_independent():
    kids = random_source(1).spawn(4)
    draws = [k.random(1000) for k in kids]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.allclose(draws[i], draws[j])
            assert abs(np.corrcoef(draws[i], draws[j])[0, 1]) < 0.15


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "x"])
def test_guarantee_rejects_bad_epsilon(bad):
    with pytest.raises(ParameterError):
        PureDP(epsilon=bad)


def test_guarantee_roundtrip():
    g = MetricDP(epsilon=3.0)
    assert guarantee_from_dict(g.to_dict()) == g
    assert "metric LDP per token" in g.describe()


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet", ".txt"])
def test_write_read_roundtrip(tmp_path, suffix):
    df = pd.DataFrame({"text": ["a b, c", "d \"e\" f", "ünï cödé"], "label": ["x", "y", "z"]})
    p = tmp_path / f"t{suffix}"
    io.write_table(df, p)
    got, col = io.read_table(p)
    assert col == "text"
    assert got["text"].tolist() == df["text"].tolist()
    if suffix != ".txt":
        assert got["label"].tolist() == df["label"].tolist()
    chunks = list(io.iter_table_chunks(p, chunksize=2))
    assert sum(len(c) for c, _ in chunks) == 3


def test_reader_errors(tmp_path):
    empty = tmp_path / "e.csv"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        io.read_table(empty)
    bad = tmp_path / "b.txt"
    bad.write_bytes(b"fine line\nsecond\n\xff\xfe bad bytes\n")
    with pytest.raises(InputError, match="line 3"):
        io.read_table(bad)
    nocol = tmp_path / "n.csv"
    nocol.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="text-column"):
        io.read_table(nocol)
    with pytest.raises(InputError, match="no column"):
        io.read_table(nocol, text_column="zzz")


def test_output_checks_and_atomicity(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("text\nhello\n")
    with pytest.raises(OutputError, match="input"):
        io.check_output_path(src, [src], overwrite=True)
    with pytest.raises(OutputError, match="overwrite"):
        io.check_output_path(src, [], overwrite=False)
    out = tmp_path / "out.csv"
    with pytest.raises(RuntimeError):
        with io.atomic_output(out) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("boom")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]


def test_builtin_dataset_split_is_deterministic():
    a = load_dataset("rotten-tomatoes")
    b = load_dataset("rotten-tomatoes")
    assert a.train["text"].tolist()[:50] == b.train["text"].tolist()[:50]
    assert set(a.labels) == {"fresh", "rotten"}
    assert len(a.train) > 4 * len(a.test) * 0.9
    assert not set(a.train["id"]) & set(a.test["id"])


def test_unknown_dataset():
    with pytest.raises(InputError, match="built-in datasets"):
        load_dataset("nope")


def test_glove_is_memory_mapped_and_lowercase():
    e = load_embeddings()
    assert len(e) == 400_000 and e.dim == 50
    assert isinstance(e.vectors, np.memmap)
    assert e.words[0] == "the"
    assert np.allclose(e.vectors[0, :3], [0.418, 0.24968, -0.41242], atol=1e-5)


def test_minilm_vocab_has_no_special_tokens():
    e = load_embeddings("minilm")
    assert e.kind == "wordpiece"
    assert not any(w.startswith("[") and w.endswith("]") and (w[1:-1].isupper() or w.startswith("[unused")) for w in e.words)
    toks = e.tokenizer().tokenize("[CLS] the patient [MASK] recovered [SEP]")
    assert "[CLS]" not in toks and "[MASK]" not in toks and "[SEP]" not in toks


def test_text_embedding_file(small_glove_file):
    e = load_embeddings(small_glove_file)
    assert len(e) == 6 and e.dim == 3 and e.lowercase


def test_word_tokenizer_spans_roundtrip():
    tk = WordTokenizer()
    text = "I don't  like\nit's 3.5 films!"
    toks, spans = tk.tokenize_with_spans(text)
    assert toks == ["i", "do", "n't", "like", "it", "'s", "3.5", "films", "!"]
    assert tk.substitute(text, spans, [text[s:e] for s, e in spans]) == text


def test_excerpt_is_short_marked_and_ends_on_a_word_when_it_can():
    from textdp.errors import excerpt

    e = excerpt("the quick brown fox jumps over the lazy dog and keeps running")
    assert e == "«the quick brown fox jumps over the lazy…»"
    assert excerpt("short text") == "«short text»"
    long_word = excerpt("y" * 100)
    assert long_word == "«" + "y" * 40 + "…»"  # no space to cut at: cut at the limit
    assert len(excerpt("a\nb " * 50)) <= 40 + 3 and "\n" not in excerpt("a\nb " * 50)
