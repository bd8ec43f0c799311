"""Canaries of the inversion experiment (issue 18 item 5): the keyed balanced draw, the
counting rule on fixed strings worked out by hand, and the white-box search over the format."""

import math

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from textdp.attacks.inversion.canaries import (  # noqa: E402
    CANARY_PREFIX, CanarySet, canary_recovery, canary_search, exposure_summary, make_canaries,
)
from textdp.attacks.inversion.metrics import word_tokens  # noqa: E402
from textdp.attacks.inversion.stopwords import NLTK_ENGLISH_STOPWORDS  # noqa: E402
from textdp.errors import InputError, ParameterError  # noqa: E402

WORDS = ["garden", "velvet", "river", "candle", "planet", "silver", "harbor", "meadow", "pencil", "rocket",
         "castle", "forest", "window", "bottle", "ladder", "marble", "thunder", "pepper", "saddle", "violin"]


def _public(n=400, seed=0):
    """Public texts where every word of WORDS is in many texts, equally often under both labels."""
    r = np.random.default_rng(seed)  # test data only; the code under test never sees this generator
    texts = [" ".join(r.choice(WORDS, 6)) + " is the" for _ in range(n)]
    return texts, ["fresh" if i % 2 else "rotten" for i in range(n)]


def test_draw_is_keyed_balanced_and_distinct():
    texts, labs = _public()
    state = np.random.get_state()
    a = make_canaries(texts, ["fresh", "rotten"], 32, seed=5, pool_size=16, secret_len=2, public_labels=labs)
    assert str(np.random.get_state()) == str(state)  # the global numpy RNG is never touched
    b = make_canaries(texts, ["fresh", "rotten"], 32, seed=5, pool_size=16, secret_len=2, public_labels=labs)
    c = make_canaries(texts, ["fresh", "rotten"], 32, seed=6, pool_size=16, secret_len=2, public_labels=labs)
    pd.testing.assert_frame_equal(a.inserted, b.inserted)
    pd.testing.assert_frame_equal(a.reference, b.reference)
    assert a.pool == b.pool and not a.inserted.equals(c.inserted)
    assert len(a.pool) == 16 and set(a.pool) <= set(WORDS) and not set(a.pool) & NLTK_ENGLISH_STOPWORDS
    assert a.n_fillings == 256 and len(a.fillings()) == 256
    for df in (a.inserted, a.reference):
        assert len(df) == 32 and df["label"].value_counts().to_dict() == {"fresh": 16, "rotten": 16}
        assert all(t == f"{CANARY_PREFIX} {s}" for t, s in zip(df["text"], df["secret"]))
        # balanced: every pool word exactly once in every slot of every label
        for lab, g in df.groupby("label"):
            for slot in range(2):
                assert sorted(s.split()[slot] for s in g["secret"]) == sorted(a.pool), (lab, slot)
    secrets = list(a.inserted["secret"]) + list(a.reference["secret"])
    assert len(set(secrets)) == 64


def test_pool_is_label_neutral_with_public_labels():
    texts, labs = _public()
    texts += ["awful terrible mess"] * 40 + ["wonderful moving gem"] * 40
    labs += ["rotten"] * 40 + ["fresh"] * 40
    can = make_canaries(texts, ["fresh", "rotten"], 4, seed=1, pool_size=16, public_labels=labs)
    assert not {"awful", "terrible", "mess", "wonderful", "moving", "gem"} & set(can.pool)


def test_bad_sizes():
    texts, labs = _public()
    with pytest.raises(ParameterError):
        make_canaries(texts, ["a", "b"], 40, seed=1, pool_size=4, secret_len=2)  # 80 > 16 secrets
    with pytest.raises(ParameterError):
        make_canaries(texts, ["a", "b"], 0, seed=1)
    with pytest.raises(InputError):
        make_canaries(texts[:3], ["a", "b"], 4, seed=1, pool_size=16)  # too few frequent public words


def test_counting_rule_by_hand():
    texts = ["my secret code is blue river today",   # 0
             "the river blue",                        # 1
             "the CAFÉ noir",                         # 2
             "blue riv ##er"]                         # 3: WordPieces glued back -> "blue river"
    got = canary_recovery(texts, ["blue river", "river blue", "blue today", "green river", "green fields",
                                  "cafe noir", ["Blue", "River"]])
    # blue river: contiguous in text 0 -> recovered, recall 2/2
    # river blue: contiguous in text 1 (text 0 has them in the other order: LCS 1)
    # blue today: text 0 has both in order but not contiguous: recall 1, not recovered
    # green river: only "river" anywhere: recall 1/2 (first text reaching it: 0)
    # green fields: nothing: recall 0 (best_text: the first text)
    # cafe noir: lowercased and accent-stripped match in text 2
    # a word sequence is lowercased the same way
    assert got["recovered"].tolist() == [True, True, False, False, False, True, True]
    assert got["recall"].tolist() == [1.0, 1.0, 1.0, 0.5, 0.0, 1.0, 1.0]
    assert got["best_text"].tolist() == [0, 1, 0, 0, 0, 2, 0]
    none = canary_recovery([], ["blue river"])
    assert none["recovered"].tolist() == [False] and none["recall"].tolist() == [0.0]
    assert none["best_text"].tolist() == [-1]
    assert canary_recovery(["a b c"], ["x y z"])["recall"].tolist() == [0.0]
    assert canary_recovery(["x a y b z"], ["x y z"])["recall"].tolist() == [1.0]
    assert canary_recovery(["x y q z"], ["x y z"])["recovered"].tolist() == [False]
    with pytest.raises(ParameterError):
        canary_recovery(["a"], [""])


# ----------------------------------------------------------------------------- white-box search
class TableClassifier:
    """A stand-in target whose logits are a fixed table per text (the search only needs
    encode_ids / encode / logits / labels / model / device)."""

    def __init__(self, labels, table):
        self.labels = list(labels)
        self.table = table  # text -> logits (C,)
        self.model = torch.nn.Linear(1, 1)
        self.device = torch.device("cpu")
        self._ix: dict[str, int] = {}
        self._rows: list[np.ndarray] = []

    def encode_ids(self, texts, max_len=64):
        return [word_tokens(t)[:max_len] for t in texts]

    def encode(self, texts, max_len=64):
        ids = []
        for t in texts:
            if t not in self._ix:
                self._ix[t] = len(self._rows)
                self._rows.append(np.asarray(self.table(t), dtype=np.float64))
            ids.append([self._ix[t]])
        return torch.tensor(ids), torch.ones(len(ids), 1, dtype=torch.long)

    def logits(self, ids, mask):
        return torch.tensor(np.stack([self._rows[i] for i in ids[:, 0].tolist()]))


def _canaries():
    texts, labs = _public()
    return make_canaries(texts, ["fresh", "rotten"], 16, seed=3, pool_size=8, secret_len=2, public_labels=labs)


def test_search_registers_success_on_a_memorising_target():
    """A target that is confident exactly on the inserted canaries (for their label) and
    undecided elsewhere: the search returns exactly the inserted canaries, rank 1..8 per label,
    exposure log2(64) - log2(rank), and the counting rule counts all of them, no reference."""
    can = _canaries()
    lab = dict(zip(can.inserted["text"], can.inserted["label"]))

    def table(t):
        if t in lab:
            return [8.0, -8.0] if lab[t] == "fresh" else [-8.0, 8.0]
        return [0.0, 0.0]

    s = canary_search(TableClassifier(["fresh", "rotten"], table), can)
    assert s.n_fillings == 64 and len(s.texts) == 16
    assert s.texts.groupby("label").size().to_dict() == {"fresh": 8, "rotten": 8}
    assert set(s.texts["text"]) == set(can.inserted["text"])
    assert sorted(s.inserted["rank"]) == sorted(list(range(1, 9)) * 2)
    assert np.allclose(s.inserted["exposure"], 6 - np.log2(s.inserted["rank"]))
    assert (s.reference["rank"] > 8).all()
    assert s.chance_hits == pytest.approx(16 * 16 / 64)
    rec = canary_recovery(list(s.texts["text"]), list(can.inserted["secret"]))
    assert rec["recovered"].all()
    assert not canary_recovery(list(s.texts["text"]), list(can.reference["secret"]))["recovered"].any()
    summ = exposure_summary(s)
    assert summ["max_exposure_bits"] == 6 and summ["mean_exposure_inserted"] > summ["mean_exposure_reference"]


def test_search_order_and_ranks_follow_the_loss():
    """Any table: per label the returned texts are the m lowest-loss fillings in order, and a
    canary's rank is 1 + the number of fillings with a strictly lower loss (no ties here)."""
    can = _canaries()
    r = np.random.default_rng(11)  # the table's values only
    vals = {" ".join(f): r.normal(size=2) for f in can.fillings()}
    clf = TableClassifier(["fresh", "rotten"], lambda t: vals[t[len(can.prefix) + 1:]])
    s = canary_search(clf, can, m=5)
    for j, lab in enumerate(["fresh", "rotten"]):
        loss = {k: -(v[j] - np.logaddexp(v[0], v[1])) for k, v in vals.items()}
        best = sorted(loss, key=loss.get)[:5]
        got = s.texts[s.texts["label"] == lab]
        assert [t[len(can.prefix) + 1:] for t in got["text"]] == best
        assert np.allclose(got["loss"], [loss[b] for b in best])
        for _, row in s.inserted[s.inserted["label"] == lab].iterrows():
            assert row["rank"] == 1 + sum(v < loss[row["secret"]] for v in loss.values())


def test_search_runs_on_a_tiny_bert():
    from textdp.models.classifier import tiny_classifier
    from textdp.noise import make_rng

    can = _canaries()
    clf = tiny_classifier(["fresh", "rotten"], rng=make_rng(2), hidden=16, layers=1, heads=2, intermediate=32)
    s = canary_search(clf, can, max_len=16, batch_size=7)
    assert len(s.texts) == 16 and (s.texts.groupby("label")["loss"].apply(lambda x: x.is_monotonic_increasing)).all()
    assert s.inserted["rank"].between(1, 64).all() and math.isfinite(s.inserted["exposure"].sum())
    with pytest.raises(ParameterError):
        canary_search(tiny_classifier(["a", "b"], rng=make_rng(2), hidden=16, layers=1, heads=2, intermediate=32),
                      can)


def test_canary_set_text_and_dict():
    can = _canaries()
    assert isinstance(can, CanarySet)
    assert can.text(("a", "b")) == f"{CANARY_PREFIX} a b"
    d = can.to_dict()
    assert d["n_fillings"] == 64 and d["n_inserted"] == 16 and len(d["inserted"]) == 16
