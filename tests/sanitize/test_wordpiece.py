"""WordPiece mode (`--embeddings minilm`): no special token is ever emitted, and the
sanitized text is readable (it re-tokenizes into vocabulary pieces; at a huge epsilon
it round-trips to the input's pieces)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.accounting.card import card_path
from textdp.cli.main import app
from textdp.data import io
from textdp.data.tokenize import SPECIAL_TOKEN_RE
from textdp.errors import TextDPError

SPECIAL_IN_TEXT = re.compile(r"\[(?:cls|sep|pad|mask|unk|unused\d+)\]", re.IGNORECASE)
DOCS = [
    "The film's unremarkable screenplay, honestly [MASK] and [CLS] tokens!",
    "[SEP] [PAD] [UNK] [unused5] are special only to BERT.",
    "Naïve café owners love Zorblax-7 and über-long words like antidisestablishmentarianism.",
    "a plain review : good acting , bad script",
]


@pytest.fixture(scope="module")
def minilm():
    from textdp.embeddings import load_embeddings

    try:
        return load_embeddings("minilm")
    except TextDPError as e:  # the offline MiniLM package is not installed
        pytest.skip(str(e))


def test_vocabulary_and_outputs_have_no_special_tokens(minilm):
    from textdp.sanitize import SanText

    assert minilm.kind == "wordpiece"
    assert not [w for w in minilm.words if SPECIAL_TOKEN_RE.match(w)]
    full = SanText(minilm, epsilon=0.5, output_vocabulary="full", rng=1)
    assert not [w for w in full.output_words if SPECIAL_TOKEN_RE.match(w)]
    m = SanText(minilm, epsilon=1.0, rng=2).fit(DOCS)
    out = m.sanitize(DOCS * 5)  # eps = 1: most pieces are replaced
    assert m.last_stats.share_changed > 0.5
    for doc in out:
        assert isinstance(doc, str) and doc.strip()
        assert not SPECIAL_IN_TEXT.search(doc), doc
        pieces = m.tokenizer.tokenize_batch([doc])[0]
        assert pieces and all(p in minilm.index for p in pieces)  # readable: only vocabulary pieces
        assert not [p for p in pieces if SPECIAL_TOKEN_RE.match(p)]


def test_round_trip_at_huge_epsilon_gives_the_input_pieces(minilm):
    from textdp.sanitize import SanText

    m = SanText(minilm, epsilon=1e4, rng=3).fit(DOCS)
    out = m.sanitize(DOCS)
    tk = m.tokenizer
    assert m.last_stats.oov_tokens == 0  # WordPiece covers every word (no [UNK] for these)
    for src, doc in zip(DOCS, out):
        assert tk.tokenize_batch([doc])[0] == tk.tokenize_batch([src])[0]
        assert not SPECIAL_IN_TEXT.search(doc) or SPECIAL_IN_TEXT.search(src)
        # special-token look-alikes in the input come back as ordinary text pieces ("[ mask ]")
    assert "[ mask ]" in out[0] and "[ cls ]" in out[0]


def test_cli_wordpiece_mode(tmp_path, minilm):
    src = tmp_path / "reviews.csv"
    io.write_table(pd.DataFrame({"id": range(len(DOCS)), "text": DOCS}), src)
    out = tmp_path / "reviews.santext.csv"
    r = CliRunner().invoke(app, ["sanitize", str(src), "--embeddings", "minilm", "-e", "2", "--seed", "4",
                                 "-o", str(out), "--json", "--no-ledger"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert summary["private"]["documents"] == len(DOCS) and summary["private"]["tokens"] > 40
    got, col = io.read_table(out)
    assert got["id"].astype(str).tolist() == [str(i) for i in range(len(DOCS))]
    for doc in got[col]:
        assert not SPECIAL_IN_TEXT.search(doc), doc
    card = json.loads(card_path(out).read_text())
    assert card["data"]["embeddings"]["kind"] == "wordpiece"
    assert card["guarantee"]["epsilon0"] > 0
