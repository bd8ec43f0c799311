"""Memorisation report of an inversion target (issue 18 item 1): the Mann–Whitney AUC against a
brute-force pairwise count, its confidence intervals' coverage, the loss membership-inference
AUC on tiny randomly initialised classifiers (never real weights), bad input."""

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from statistics import NormalDist  # noqa: E402

from textdp.attacks.inversion import preset_config  # noqa: E402
from textdp.attacks.inversion.memorisation import (  # noqa: E402
    auc_confidence_interval, loss_membership_auc, mann_whitney_auc, memorisation_report, per_example_loss,
)
from textdp.errors import ParameterError  # noqa: E402
from textdp.models.classifier import fine_tune, tiny_classifier  # noqa: E402
from textdp.noise import make_rng  # noqa: E402


def brute_auc(pos, neg):
    pos, neg = np.asarray(pos, float)[:, None], np.asarray(neg, float)[None, :]
    return float(((pos > neg) + 0.5 * (pos == neg)).mean())


@pytest.mark.parametrize("n,m,levels", [(1, 1, 3), (7, 13, 3), (50, 40, 5), (200, 300, 1000), (31, 29, 10**6)])
def test_auc_equals_pairwise_count(n, m, levels):
    rng = make_rng(n * 1000 + m)
    for _ in range(5):  # few distinct values: many ties, which count one half
        pos, neg = rng.integers(0, levels, n), rng.integers(0, levels, m)
        assert mann_whitney_auc(pos, neg) == pytest.approx(brute_auc(pos, neg), abs=1e-12)


def test_auc_extremes_and_orientation():
    assert mann_whitney_auc([3, 4, 5], [0, 1, 2]) == 1.0
    assert mann_whitney_auc([0, 1, 2], [3, 4, 5]) == 0.0
    assert mann_whitney_auc([1, 1], [1, 1, 1]) == 0.5
    # losses: lower = member, so separated losses give AUC 1
    r = loss_membership_auc([0.01, 0.02, 0.03], [0.5, 0.7, 0.9])
    assert r.auc == 1.0 and r.ci == (1.0, 1.0) and r.n_members == 3 and r.n_nonmembers == 3


def test_delong_variance_from_pairwise_placements():
    """The sorted placement values give DeLong's interval computed the O(n·m) way."""
    rng = make_rng(5)
    pos, neg = rng.normal(0.7, 1, 40), rng.normal(0, 1, 55)
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = psi.mean(1), psi.mean(0)
    a = psi.mean()
    se = np.sqrt(v10.var(ddof=1) / 40 + v01.var(ddof=1) / 55)
    z = NormalDist().inv_cdf(0.975)
    lo, hi = auc_confidence_interval(pos, neg, 0.95, "delong")
    assert (lo, hi) == pytest.approx((a - z * se, a + z * se), abs=1e-12)


@pytest.mark.parametrize("method", ["delong", "hanley-mcneil"])
@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_interval_coverage(method, shift):
    """Members ~ N(shift, 1), non-members ~ N(0, 1): true AUC = Φ(shift/√2). The 95 % interval must
    cover it in about 95 % of 400 replicates: the test fails below 90 % (5.1 binomial SDs under 0.95,
    p < 1e-6 for a correct interval) or above 99 % (an interval far too wide)."""
    rng = make_rng(11)
    truth = NormalDist().cdf(shift / np.sqrt(2))
    hits = 0
    for _ in range(400):
        lo, hi = auc_confidence_interval(rng.normal(shift, 1, 60), rng.normal(0, 1, 70), 0.95, method)
        hits += lo <= truth <= hi
    assert 0.90 <= hits / 400 <= 0.99


# ----------------------------------------------------------------------------- tiny classifiers
def _random_sentences(words, n, rng, length=8):
    return [" ".join(words[i] for i in rng.integers(0, len(words), length)) for _ in range(n)]


@pytest.fixture(scope="module")
def overfitted():
    """A tiny random BERT (mean pooling) trained to 100 % on 40 random-token sentences with random
    labels, and two more sets of the same distribution it never saw. Fixed seed: with other seeds
    this recipe gave member-vs-non-member AUCs of 0.85 and 1.0 (the non-members' shared, untrained
    token embeddings can land on a confident output), so the > 0.9 check is for this seed."""
    rng = make_rng(2024)
    clf = tiny_classifier(["a", "b"], rng=rng, hidden=32, layers=2, heads=2, intermediate=64, pooling="mean")
    words = [w for w in clf.vocab_tokens if w.isalpha() and w.isascii() and len(w) >= 3]
    train, unseen, nonmem = (_random_sentences(words, 40, rng) for _ in range(3))
    y_train, y_unseen, y_nonmem = (rng.integers(0, 2, 40) for _ in range(3))
    fine_tune(clf, train, y_train, epochs=40, lr=3e-3, batch_size=8, rng=rng, warmup=0.05)
    clf.freeze()
    return clf, (train, y_train), (unseen, y_unseen), (nonmem, y_nonmem)


def test_overfitted_target_has_high_membership_auc(overfitted):
    clf, (tr, ytr), _, (nm, ynm) = overfitted
    rep = memorisation_report(clf, tr, ytr, nm, ynm, max_len=32)
    assert rep.train_acc == 1.0
    assert rep.heldout_acc < 0.8  # random labels: nothing to generalise
    assert rep.membership.auc > 0.9, rep.line()
    assert rep.membership.member_loss < rep.membership.nonmember_loss
    assert rep.membership.ci[0] <= rep.membership.auc <= rep.membership.ci[1]
    d = rep.to_dict()
    assert d["mia_auc"] == rep.membership.auc and d["gap"] == pytest.approx(rep.train_acc - rep.heldout_acc)
    assert "\n" not in rep.line()


def test_never_trained_members_give_auc_about_half(overfitted):
    """Members the target never saw: the AUC's 99 % interval contains 0.5 (fixed seed)."""
    clf, _, (un, yun), (nm, ynm) = overfitted
    r = memorisation_report(clf, un, yun, nm, ynm, max_len=32, level=0.99).membership
    assert r.ci[0] <= 0.5 <= r.ci[1], (r.auc, r.ci)
    assert r.ci[1] - r.ci[0] < 0.4  # the interval is informative, not [0, 1]


def test_per_example_loss_matches_predict_proba(overfitted):
    clf, (tr, ytr), _, _ = overfitted
    loss = per_example_loss(clf, tr, ytr, max_len=32, batch_size=7)
    p = clf.predict_proba(tr, 32)
    assert loss.shape == (40,) and loss.dtype == np.float64
    # float32 logits differ by ~1e-7 between batchings (padding); the losses here are ~1e-3
    np.testing.assert_allclose(loss, -np.log(p[np.arange(40), ytr]), rtol=1e-3, atol=1e-9)


@pytest.mark.parametrize("call", [
    lambda clf: memorisation_report(clf, [], [], ["a b"], [0]),
    lambda clf: memorisation_report(clf, ["a b"], [0], [], []),
    lambda clf: memorisation_report(clf, ["a b", "c d"], [0], ["a b"], [0]),
    lambda clf: memorisation_report(clf, ["a b"], [0], ["a b"], [0, 1]),
    lambda clf: per_example_loss(clf, ["a b"], [2]),
    lambda clf: per_example_loss(clf, ["a b"], [0.5]),
    lambda clf: mann_whitney_auc([], [1.0]),
    lambda clf: mann_whitney_auc([1.0], [np.nan]),
    lambda clf: mann_whitney_auc([[1.0]], [1.0]),
    lambda clf: loss_membership_auc([0.1], [0.2, 0.3]),  # an interval needs 2 per side
    lambda clf: auc_confidence_interval([1, 2], [0, 1], level=1.0),
    lambda clf: auc_confidence_interval([1, 2], [0, 1], method="bootstrap"),
])
def test_bad_input_one_line(call):
    clf = tiny_classifier(["a", "b"], rng=make_rng(1), hidden=16, layers=1, heads=2, intermediate=32)
    with pytest.raises(ParameterError) as e:
        call(clf)
    assert "\n" not in str(e.value) and str(e.value)


# ----------------------------------------------------------------------------- preset and pipeline
def test_memorising_preset():
    c = preset_config("memorising").validate()
    cpu = preset_config("cpu")
    assert c.target_model == "minilm" and c.target_layers is None  # every MiniLM layer, none cut
    assert c.max_private is not None and c.max_private < 2049  # smaller private split than the cpu preset
    assert c.target_epochs > cpu.target_epochs
    # no regulariser, no label noise: memorisation comes from the recipe, canaries are added apart
    assert c.target_dropout == 0.0 and c.target_weight_decay == 0.0
    assert c.canaries >= 24 and 2 * c.canaries <= c.canary_pool ** c.canary_secret_len
    assert (c.gen_d_model, c.n_templates, c.pplm) == (cpu.gen_d_model, cpu.n_templates, cpu.pplm)


def test_prepare_target_reports_memorisation(textdp_cache, monkeypatch):
    """The pipeline measures every target it trains (and a cached one without the report once)."""
    import json

    from textdp.attacks.inversion.pipeline import InversionData, prepare_target

    monkeypatch.setenv("TEXTDP_CACHE", str(textdp_cache / "memo"))
    rng = make_rng(3)
    clf0 = tiny_classifier(["a", "b"], rng=rng)
    words = [w for w in clf0.vocab_tokens if w.isalpha() and w.isascii() and len(w) >= 3]
    frame = lambda n: pd.DataFrame({"text": _random_sentences(words, n, rng),  # noqa: E731
                                    "label": [["a", "b"][i] for i in rng.integers(0, 2, n)]})
    data = InversionData("random", ["a", "b"], frame(30), frame(24), frame(24), frame(24))
    cfg = preset_config("tiny").with_overrides(target_epochs=2, max_len=16)
    _, info = prepare_target(data, cfg)
    m = info["memorisation"]
    assert m["mia_n_members"] == 24 and m["mia_n_nonmembers"] == 24 and 0 <= m["mia_auc"] <= 1
    assert m["train_acc"] == pytest.approx(info["train_acc"])
    # a cache entry from before the report gets it on load, written back
    (info_file,) = (textdp_cache / "memo").rglob("info.json")
    old = json.loads(info_file.read_text())
    del old["memorisation"]
    info_file.write_text(json.dumps(old))
    _, again = prepare_target(data, cfg)
    assert again["cached"] and again["memorisation"]["mia_auc"] == pytest.approx(m["mia_auc"])
    assert "memorisation" in json.loads(info_file.read_text())
