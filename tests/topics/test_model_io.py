"""Saving, loading and exporting topic models; bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from textdp.errors import InputError, OutputError, ParameterError
from textdp.topics import HDPLDA, LDA, LPLDA, OLPLDA, Corpus, TopicModel, load_model, make_trainer


@pytest.fixture(scope="module")
def model(synth):
    corpus, _ = synth
    return LDA(3, alpha=0.3, iterations=30, seed=1).fit(corpus)


def test_save_load_roundtrip(model, tmp_path):
    out = model.save(tmp_path / "m")
    assert {p.name for p in out.iterdir()} == {"model.npz", "model.json", "model.card.json", ".textdp-output.json"}
    back = load_model(out)
    assert np.array_equal(back.topic_word, model.topic_word)
    assert back.vocabulary == model.vocabulary and back.alpha == model.alpha and back.beta == model.beta
    assert back.guarantee == model.guarantee
    assert np.array_equal(back.topic_word_counts, model.topic_word_counts)
    card = json.loads((out / "model.card.json").read_text())
    assert card["guarantee"]["kind"] == "none" and card["randomness"]["seeded"] is True
    assert card["format"] == "textdp-card/1" and card["mechanism"] == "topics.lda"
    with pytest.raises(OutputError):
        model.save(out)
    model.save(out, overwrite=True)
    assert load_model(out).top_words(3) == model.top_words(3)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers


def test_private_model_saves_guarantee_and_no_counts(synth, tmp_path):
    corpus, _ = synth
    m = HDPLDA(3, epsilon=4.0, iterations=4, seed=0, max_doc_length=40).fit(corpus)
    out = m.save(tmp_path / "hdp")
    with np.load(out / "model.npz") as z:
        assert z.files == ["topic_word"]
    meta = json.loads((out / "model.json").read_text())
    assert meta["guarantee"] == {"kind": "pure-dp", "epsilon": 4.0, "unit": "document", "neighbours": "replace-one"}
    assert meta["accounting"]["scale"] == pytest.approx(2 * 40 * 4 / 4.0)
    assert load_model(out).guarantee.epsilon == 4.0


def test_export_gensim_and_csv(model, tmp_path):
    files = model.export(tmp_path / "g", "gensim")
    topics = np.load(files[0])
    assert topics.shape == (3, 30) and np.allclose(topics.sum(1), 1)
    lines = files[1].read_text().splitlines()
    assert lines[0] == "0" and lines[1].split("\t") == ["0", model.vocabulary[0], "0"]
    files = model.export(tmp_path / "c", "csv", top_n=5)
    import pandas as pd

    tw = pd.read_csv(files[0])
    assert list(tw.columns) == ["word", "topic_0", "topic_1", "topic_2"] and len(tw) == 30
    top = pd.read_csv(files[1])
    assert len(top) == 15 and top.groupby("topic")["word"].apply(list).tolist() == model.top_words(5)
    with pytest.raises(OutputError):
        model.export(tmp_path / "c", "csv")
    with pytest.raises(ParameterError):
        model.export(tmp_path / "x", "parquet")
    assert not (tmp_path / "x").exists()  # a refused export creates nothing
    (tmp_path / "afile").write_text("keep")
    with pytest.raises(OutputError):
        model.export(tmp_path / "afile", "csv")
    assert (tmp_path / "afile").read_text() == "keep"


def test_load_rejects_non_model(tmp_path):
    with pytest.raises(InputError):
        load_model(tmp_path)


@pytest.mark.parametrize("kw", [dict(n_topics=0), dict(n_topics=2.5), dict(alpha=0), dict(alpha=-1),
                                dict(beta=0), dict(beta=float("nan")), dict(iterations=0)])
def test_bad_hyperparameters(kw):
    args = dict(n_topics=3) | kw
    with pytest.raises(ParameterError):
        LDA(**args)


@pytest.mark.parametrize("f", [0, 1, -0.1, 1.5, "x"])
def test_bad_flip(f):
    with pytest.raises(ParameterError):
        LPLDA(3, flip=f)
    with pytest.raises(ParameterError):
        OLPLDA(3, flip=f)


def test_flip_and_epsilon_exclusive():
    with pytest.raises(ParameterError):
        LPLDA(3, flip=0.5, epsilon=1.0)
    with pytest.raises(ParameterError):
        LPLDA(3)
    with pytest.raises(ParameterError):
        make_trainer("dp-magic")


def test_empty_documents_skipped_and_small_corpora_rejected():
    for vocabulary in ("public", "corpus"):
        c = Corpus.from_texts(["apple banana", "", "the of and", "banana cherry apple"], min_count=1,
                              vocabulary=vocabulary)
        assert c.n_docs == 2 and c.skipped_docs == 2 and list(c.kept_docs) == [0, 3] and c.n_input_docs == 4
        with pytest.raises(InputError, match="fewer than K"):
            LDA(5, iterations=2).fit(c)
        with pytest.raises(InputError):
            Corpus.from_texts(["", "the and"], min_count=1, vocabulary=vocabulary)
        with pytest.raises(InputError):
            Corpus.from_texts([], vocabulary=vocabulary)
    with pytest.raises(InputError, match="single word"):
        Corpus.from_texts(["apple apple", "apple"], min_count=1, vocabulary="corpus")
    with pytest.raises(InputError, match="no word of the vocabulary"):
        Corpus.from_texts(["zzqx qqzx", "xqzz"])  # nothing of the public list


def test_no_nan_with_extreme_parameters(synth):
    corpus, _ = synth
    for m in (LDA(3, alpha=1e-6, beta=1e-6, iterations=3, seed=0).fit(corpus),
              HDPLDA(3, epsilon=1e-3, iterations=2, seed=0).fit(corpus),
              LPLDA(3, flip=0.9, iterations=2, seed=0, threshold=0).fit(corpus)):
        assert np.all(np.isfinite(m.topic_word))
        assert np.isfinite(m.perplexity(corpus, iterations=3, burn_in=1, seed=0))


def test_public_vocabulary_is_used_as_given():
    c = Corpus.from_texts(["apple banana zebra", "banana cherry"], vocabulary=["banana", "cherry", "apple"])
    assert c.vocabulary == ["banana", "cherry", "apple"]
    assert c.preprocessing["public_vocabulary"] is True and c.preprocessing["vocabulary"]["source"] == "given"
    assert sorted(c.documents()[0].tolist()) == [0, 2]  # zebra (not in the vocabulary) dropped
    assert c.oov_tokens == 1


def _truncate(p, n=100):
    p.write_bytes(p.read_bytes()[:n])


def _edit_json(field, value=None, delete=False):
    def edit(p):
        meta = json.loads(p.read_text())
        if delete:
            del meta[field]
        else:
            meta[field] = value
        p.write_text(json.dumps(meta))
    return edit


@pytest.mark.parametrize("name,damage,needle", [
    ("model.npz", _truncate, "model.npz: BadZipFile"),                      # `head -c 100 model.npz`
    ("model.npz", lambda p: p.write_bytes(b""), "model.npz"),
    ("model.npz", lambda p: p.write_bytes(b"PK\x03\x04" + b"\0" * 60), "model.npz"),
    ("model.json", lambda p: p.write_text("{not json"), "model.json: JSONDecodeError"),
    ("model.json", lambda p: p.write_bytes(b"\xff\xfe\x00"), "model.json"),
    ("model.json", _edit_json("vocabulary", delete=True), "lacks the field 'vocabulary'"),
    ("model.json", _edit_json("vocabulary", ["a", "b"]), "does not match a vocabulary of 2"),
    ("model.json", _edit_json("guarantee", {"kind": "martian"}), "model.json and model.npz"),
    ("model.json", _edit_json("format_version", "x"), "model.json"),
])
def test_corrupt_model_files_give_one_line_input_error(model, tmp_path, name, damage, needle):
    out = model.save(tmp_path / "m")
    damage(out / name)
    with pytest.raises(InputError) as ei:
        load_model(out)
    msg = str(ei.value)
    assert "cannot read the model" in msg and needle in msg and "\n" not in msg


def test_corrupt_model_cli_exit_2(model, tmp_path):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    out = model.save(tmp_path / "m2")
    _truncate(out / "model.npz")
    for cmd in (["topics", "show", str(out)], ["topics", "evaluate", str(out), "--no-coherence"],
                ["topics", "export", str(out), "-o", str(tmp_path / "exp")]):
        r = CliRunner().invoke(app, cmd)
        assert r.exit_code == 2, r.output
        assert "cannot read the model" in r.output and "unexpected" not in r.output and "Traceback" not in r.output
    assert not (tmp_path / "exp").exists()


def test_model_json_with_wrong_types_is_an_input_error(model, tmp_path):
    out = model.save(tmp_path / "m")
    _edit_json("info", [1, 2])(out / "model.json")
    with pytest.raises(InputError, match="'info' is not an object"):
        load_model(out)
