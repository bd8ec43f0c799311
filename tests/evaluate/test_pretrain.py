"""Sanitization-aware pretraining pieces: continued MLM training of a WordPiece encoder
(MiniLM with a fresh tied head) and its path into the classifier (textdp.models.mlm.EncoderMLM,
textdp.evaluate.pretrain)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # torch's default threads spin on a loaded 2-core machine
pytest.importorskip("transformers")

from textdp.errors import InputError, ParameterError  # noqa: E402
from textdp.models.mlm import IGNORE, EncoderMLM, EncoderMLMPreset  # noqa: E402

WORDS = ["the", "movie", "was", "great", "and", "funny", "but", "too", "long", "actors", "good", "story"]
SWAP = {"movie": "film", "great": "fine", "funny": "comic", "long": "lengthy", "good": "decent"}


def corpus(n, rng):
    orig = [[WORDS[i] for i in rng.integers(0, len(WORDS), 12)] for _ in range(n)]
    san = [[SWAP.get(w, w) for w in d] for d in orig]
    return orig, san


@pytest.fixture(scope="module")
def tiny_encoder_dir(tmp_path_factory):
    """A small random BERT on MiniLM's WordPiece vocabulary, saved like a local model folder."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from textdp.models.classifier import minilm_dir

    d = tmp_path_factory.mktemp("tinybert")
    tok = AutoTokenizer.from_pretrained(str(minilm_dir()), local_files_only=True)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    BertForMaskedLM(cfg).save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return d


def test_minilm_gets_a_fresh_mlm_head_tied_to_its_input_embeddings():
    m = EncoderMLM.from_encoder("minilm", seed=0)
    assert m.info["head_tied_to_input_embeddings"]
    assert m.model.get_output_embeddings().weight is m.model.get_input_embeddings().weight
    orig, san = corpus(30, np.random.default_rng(0))
    losses = m.train(san, targets=orig, preset=EncoderMLMPreset(steps=12, batch_size=4, max_len=24, warmup=2),
                     seed=0)
    assert len(losses) == 12
    # the fresh head starts near ln(30522) ~ 10.3 and learns the 12-word vocabulary fast
    assert np.mean(losses[-4:]) < 0.6 * np.mean(losses[:3]), losses


def test_word_pairs_become_wordpiece_labels(tiny_encoder_dir):
    m = EncoderMLM.from_encoder(str(tiny_encoder_dir))
    # 'unbelievably' splits into several pieces; 'cat' is one piece
    xs, ys = m.encode_pairs([["cat", "unbelievably"]], [["unbelievably", "cat"]], width=30)
    pc, pu = m._pieces["cat"], m._pieces["unbelievably"]
    assert len(pc) == 1 and len(pu) > 1
    assert xs[0].tolist() == pc + pu
    assert ys[0].tolist() == [pu[0]] + [pc[0]] + [IGNORE] * (len(pu) - 1)
    with pytest.raises(InputError):
        m.encode_pairs([["a", "b"]], [["a"]], width=30)


def test_continued_encoder_loads_into_the_classifier_path(tiny_encoder_dir, tmp_path):
    from textdp.evaluate.utility import TransformerModel
    from textdp.models.classifier import load_classifier

    m = EncoderMLM.from_encoder(str(tiny_encoder_dir), seed=0)
    orig, san = corpus(40, np.random.default_rng(1))
    losses = m.train(san, targets=orig, preset=EncoderMLMPreset(steps=40, batch_size=8, max_len=24, lr=3e-3,
                                                                head_lr=3e-3, warmup=4), seed=0)
    assert np.mean(losses[-8:]) < 0.85 * np.mean(losses[:8]), losses
    path = m.save(tmp_path / "aware")
    clf = load_classifier(str(path), ["neg", "pos"], rng=np.random.default_rng(0))
    trained = m.model.get_input_embeddings().weight.detach()
    assert torch.equal(clf.model.get_input_embeddings().weight.detach(), trained)
    texts = [" ".join(d) for d in san[:16]]
    labels = ["pos" if "fine" in d else "neg" for d in san[:16]]
    tm = TransformerModel(str(path), epochs=1, batch_size=8, max_len=24, seed=0).fit(texts, labels)
    assert set(tm.predict(texts[:4])) <= {"neg", "pos"}


def test_pretraining_options_are_checked():
    from textdp.evaluate.pretrain import compare_pretraining, pretrain_preset

    assert pretrain_preset("realistic", "minilm") == pretrain_preset("small", "minilm")
    assert pretrain_preset("tiny", "word-mlm").mlm_preset == "tiny"
    with pytest.raises(ParameterError):
        pretrain_preset("tiny", "gpt2")
    with pytest.raises(ParameterError):
        pretrain_preset("huge", "minilm")
    with pytest.raises(ParameterError):
        compare_pretraining(preset="tiny", encoder="bert")


def test_cli_refuses_an_unknown_pretraining_encoder():
    from typer.testing import CliRunner

    from textdp.cli.main import app

    r = CliRunner().invoke(app, ["evaluate", "--pretraining", "tiny", "--pretraining-encoder", "elmo",
                                 "--mechanisms", "santext", "--epsilons", "3"])
    assert r.exit_code == 2
    assert "elmo" in r.output


def test_pretraining_reads_the_given_columns_before_any_training(tmp_path, monkeypatch):
    import pandas as pd

    import textdp.sanitize as san
    from textdp.errors import InputError
    from textdp.evaluate.pretrain import compare_pretraining

    tr, te = tmp_path / "tr.csv", tmp_path / "te.csv"
    for f in (tr, te):
        pd.DataFrame({"body": ["a good film", "a bad film"] * 5, "sentiment": ["pos", "neg"] * 5}).to_csv(f, index=False)
    reached = []

    def stop(*a, **kw):  # the first step after the task data is loaded
        reached.append(True)
        raise RuntimeError("stop here")

    monkeypatch.setattr(san, "make_mechanism", stop)
    with pytest.raises(InputError, match="--text-column"):  # default columns: refused before any work
        compare_pretraining(f"{tr},{te}", preset="tiny")
    assert not reached
    with pytest.raises(RuntimeError, match="stop here"):
        compare_pretraining(f"{tr},{te}", preset="tiny", text_column="body", label_column="sentiment")
    assert reached
