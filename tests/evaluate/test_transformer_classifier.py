"""Transformer utility model: pooling, dynamic padding, length buckets, epochs rule, save/load
(tiny randomly initialised BERTs; no MiniLM fine-tuning here -- that is in test_slow_models.py)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from textdp.errors import ParameterError  # noqa: E402
from textdp.models.classifier import (TextClassifier, fine_tune, length_buckets, load_classifier,  # noqa: E402
                                      tiny_classifier)

SENTS = ["a great film with a fine story", "the movie is dull and far too long , far too long", "a warm movie",
         "the plot is a mess", "great acting and a sharp script that never lets go of you", "boring"] * 4
Y = np.array([1, 0, 1, 0, 1, 0] * 4)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_length_buckets_cover_every_index_once_with_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 70, size=1003)
    batches = length_buckets(lengths, 16, rng, pool_batches=8)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1003))
    assert all(1 <= len(b) <= 16 for b in batches)
    # within a batch lengths are close: mean spread far below that of random batches
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    rand = np.mean([np.ptp(lengths[rng.permutation(1003)[:16]]) for _ in range(50)])
    assert spread < rand / 4, (spread, rand)
    # batch order is shuffled: not sorted by length across the epoch
    means = [lengths[b].mean() for b in batches]
    assert not all(a <= b for a, b in zip(means, means[1:]))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_dynamic_padding_gives_the_same_probabilities_as_padding_to_max(pooling):
    clf = tiny_classifier(["neg", "pos"], rng=np.random.default_rng(1), hidden=16, layers=1, heads=2,
                          intermediate=32, pooling=pooling)
    assert clf.pooling == pooling
    clf.model.eval()
    p = clf.predict_proba(SENTS[:6], max_len=32, batch_size=4)  # length-sorted, each batch padded to itself
    enc = clf.tokenizer(SENTS[:6], truncation=True, max_length=32, padding="max_length", return_tensors="pt")
    with torch.no_grad():
        ref = torch.softmax(clf.logits(enc["input_ids"], enc["attention_mask"]), -1).double().numpy()
    np.testing.assert_allclose(p, ref, atol=1e-5)
    assert p.shape == (6, 2) and np.allclose(p.sum(1), 1)
    assert clf.predict_proba([], max_len=32).shape == (0, 2)


def test_mean_pooling_ignores_padding_and_logits_from_embeds_matches_tokens():
    clf = tiny_classifier(["neg", "pos"], rng=np.random.default_rng(2), hidden=16, layers=1, heads=2,
                          intermediate=32, pooling="mean").freeze()
    ids, mask = clf.encode(["a warm movie"], 16)
    pad = torch.full((1, 7), clf.tokenizer.pad_token_id)
    ids2, mask2 = torch.cat([ids, pad], 1), torch.cat([mask, torch.zeros_like(pad)], 1)
    a, b = clf.logits(ids, mask), clf.logits(ids2, mask2)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    e = clf.embedding_matrix()[ids]  # the attack entry point (word-embedding rows)
    torch.testing.assert_close(clf.logits_from_embeds(e, mask), a, atol=1e-5, rtol=1e-5)
    # mean pooling has no pooler, so DP-SGD sees no unused trainable parameters
    assert clf.model.bert.pooler is None


def test_fine_tune_learns_a_separable_toy_task_and_save_load_roundtrip(tmp_path):
    clf = tiny_classifier(["neg", "pos"], rng=np.random.default_rng(3), hidden=16, layers=1, heads=2,
                          intermediate=32, pooling="mean")
    info = fine_tune(clf, SENTS, Y, epochs=12, lr=3e-3, batch_size=6, max_len=32, rng=np.random.default_rng(4))
    assert info["steps"] == 12 * 4 and info["texts"] == 12 * len(SENTS)
    assert info["tokens"] == 12 * sum(len(r) for r in clf.encode_ids(SENTS, 32))
    assert clf.accuracy(SENTS, Y, 32) == 1.0
    clf.save(tmp_path / "m")
    back = TextClassifier.load(tmp_path / "m")
    assert back.pooling == "mean" and back.labels == ["neg", "pos"]
    np.testing.assert_allclose(back.predict_proba(SENTS, 32), clf.predict_proba(SENTS, 32), atol=1e-6)
    # the word-embedding table can be held fixed
    before = clf.embedding_matrix().detach().clone()
    fine_tune(clf, SENTS, Y, epochs=1, lr=1e-2, batch_size=6, max_len=32, rng=np.random.default_rng(5),
              freeze_embeddings=True)
    assert torch.equal(before, clf.embedding_matrix().detach())
    assert clf.embedding_matrix().requires_grad  # restored afterwards


def test_minilm_auto_pooling_is_mean_and_bad_pooling_is_refused():
    clf = load_classifier("minilm", ["a", "b"], rng=np.random.default_rng(0), pooling="auto", num_layers=1)
    assert clf.pooling == "mean"
    assert load_classifier("minilm", ["a", "b"], rng=np.random.default_rng(0), num_layers=1).pooling == "cls"
    with pytest.raises(ParameterError):
        load_classifier("minilm", ["a", "b"], rng=np.random.default_rng(0), pooling="max")


def test_epochs_rule_and_row_fields():
    from textdp.evaluate.utility import TransformerModel, make_model

    m = TransformerModel()
    assert (m.lr, m.batch_size, m.max_len, m.pooling) == (1e-4, 32, 128, "auto")
    assert m.epochs_for(10_000) == 1  # 313 steps >= min_steps
    assert m.epochs_for(3000) == 2  # 94 steps per epoch
    assert m.epochs_for(600) == 3  # capped at max_epochs
    assert TransformerModel(epochs=2).epochs_for(10_000) == 2
    assert make_model("minilm", epochs=None, pooling="mean", seed=1).pooling == "mean"
    with pytest.raises(ParameterError):
        TransformerModel(pooling="max")


def test_cli_sweep_with_a_local_transformer_folder_reports_its_training(tmp_path):
    """The transformer path end to end through `textdp evaluate --model FOLDER` (a tiny
    local BERT folder stands in for MiniLM): rows carry epochs / training CPU time, the
    HTML report says the model was fine-tuned and shows the majority rate."""
    import json

    from typer.testing import CliRunner

    from textdp.cli.main import app

    folder = tmp_path / "tiny"
    tiny_classifier(["fresh", "rotten"], rng=np.random.default_rng(0), hidden=16, layers=1, heads=2,
                    intermediate=32).save(folder)
    out = tmp_path / "rep"
    r = CliRunner().invoke(app, ["evaluate", "--model", str(folder), "--mechanisms", "santext", "--epsilons", "3",
                                 "--max-docs", "40", "--attacks", "none", "--epochs", "2", "-o", str(out),
                                 "--seed", "0", "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["results"]
    assert [x["mechanism"] for x in rows] == ["none", "santext"]
    for x in rows:
        assert x["epochs"] == 2 and x["pooling"] == "cls" and x["train_cpu_seconds"] > 0
        assert 0 <= x["utility_sanitized"] <= 1 and 0.5 <= x["majority_rate"] <= 1
    html = (out / "report.html").read_text("utf-8")
    assert "fine-tuned: cls pooling, 2 epoch(s)" in html and "majority-class rate" in html
    assert html.count("<tr>") == len(rows) + 1
