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


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_dp_linear_probe_trains_only_the_head():
    """trainable_layers=0: DP-SGD on the linear head over frozen pooled features; the encoder is untouched."""
    import torch

    rng = make_rng(5)
    clf = tiny_classifier(["neg", "pos"], rng=rng, hidden=16, layers=1, heads=2, intermediate=32, pooling="mean")
    enc_before, head_before = _state(clf.model.bert), _state(clf.model.classifier)
    info = fine_tune_dp(clf, SENTS, [1, 0, 1, 0, 1, 0] * 3, epsilon=4.0, epochs=3, batch_size=6, max_len=16,
                        trainable_layers=0, lr=1e-2, max_grad_norm=1.0, rng=rng)
    assert info["trainable_layers"] == 0
    assert 0 < info["epsilon_spent"] <= 4.0 + 1e-6 and info["noise_multiplier"] > 0
    enc_after, head_after = _state(clf.model.bert), _state(clf.model.classifier)
    assert all(torch.equal(enc_before[k], enc_after[k]) for k in enc_before)
    assert any(not torch.equal(head_before[k], head_after[k]) for k in head_before)
    # the trained head is the model's head: predictions go through it (no stale Opacus wrapper)
    assert clf.predict_proba(SENTS[:2], max_len=16).shape == (2, 2)


def test_dp_linear_probe_learns_when_noise_is_small():
    """With a large epsilon the DP linear probe fits a task its frozen features separate
    (the words of each class are disjoint), so the head-only path really trains."""
    rng = make_rng(6)
    texts = ["good great fine nice"] * 30 + ["bad awful dull poor"] * 30
    y = [1] * 30 + [0] * 30
    clf = tiny_classifier(["neg", "pos"], rng=rng, hidden=16, layers=1, heads=2, intermediate=32, pooling="mean")
    fine_tune_dp(clf, texts, y, epsilon=1e4, epochs=40, batch_size=20, max_len=16, trainable_layers=0,
                 lr=5e-2, max_grad_norm=1.0, rng=rng)
    assert clf.accuracy(texts, y, 16) == 1.0


def test_pooled_features_shapes_and_pooling():
    import torch

    rng = make_rng(7)
    for pooling in ("mean", "cls"):
        clf = tiny_classifier(["neg", "pos"], rng=rng, hidden=16, layers=1, heads=2, intermediate=32, pooling=pooling)
        f = clf.pooled_features(SENTS[:5], max_len=16, batch_size=2)
        assert f.shape == (5, 16) and f.dtype == torch.float32 and not f.requires_grad
        # batching and ordering do not change a row
        g = clf.pooled_features([SENTS[3]], max_len=16)
        assert torch.allclose(f[3], g[0], atol=1e-5)
        # the head applied to the features gives the model's own logits (eval mode)
        ids, mask = clf.encode(SENTS[:5], 16)
        clf.model.eval()  # logits without dropout, as the features are computed
        with torch.no_grad():
            assert torch.allclose(clf.model.classifier(f), clf.logits(ids, mask), atol=1e-4)


def test_dpsgd_negative_trainable_layers_refused():
    rng = make_rng(8)
    clf = tiny_classifier(["neg", "pos"], rng=rng, hidden=16, layers=1, heads=2, intermediate=32)
    with pytest.raises(ParameterError):
        fine_tune_dp(clf, SENTS, [0, 1] * 9, epsilon=1.0, trainable_layers=-1, rng=rng)
