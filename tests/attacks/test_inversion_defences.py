"""Defences: DP-SGD fine-tuning reports an epsilon within its target; bad DP parameters are refused."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("opacus")

from textdp.errors import ParameterError  # noqa: E402
from textdp.models.classifier import fine_tune_dp, tiny_classifier  # noqa: E402
from textdp.noise import make_rng  # noqa: E402

from .conftest import SENTS  # noqa: E402


def test_dpsgd_epsilon_within_target():
    rng = make_rng(3)
    clf = tiny_classifier(["neg", "pos"], rng=rng, hidden=16, layers=1, heads=2, intermediate=32)
    info = fine_tune_dp(clf, SENTS, [1, 0, 1, 0, 1, 0] * 3, epsilon=4.0, epochs=1, batch_size=6, max_len=16, rng=rng)
    assert 0 < info["epsilon_spent"] <= 4.0 + 1e-6
    assert info["delta"] == pytest.approx(1 / (10 * len(SENTS)))
    assert info["noise_multiplier"] > 0
    # only the last layer, pooler and head were trainable
    assert not clf.model.bert.embeddings.word_embeddings.weight.requires_grad
    assert all(p.requires_grad for p in clf.model.classifier.parameters())


def test_dpsgd_bad_parameters():
    rng = make_rng(4)
    clf = tiny_classifier(["neg", "pos"], rng=rng, hidden=16, layers=1, heads=2, intermediate=32)
    with pytest.raises(ParameterError):
        fine_tune_dp(clf, SENTS, [0, 1] * 9, epsilon=0.0, rng=rng)
    with pytest.raises(ParameterError):
        fine_tune_dp(clf, SENTS, [0, 1] * 9, epsilon=1.0, delta=2.0, rng=rng)
