"""The verdict experiment (issue 18 items 4-5): paired intervals by hand, the verdict rules,
the public-only proxy, the tuning grid, canaries through split_data / prepare_target, and one
tiny end-to-end seed (tiny random models only)."""

import math

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from scipy.stats import t as student_t  # noqa: E402

from textdp.attacks.inversion import preset_config, split_data  # noqa: E402
from textdp.attacks.inversion.verdict import (  # noqa: E402
    TUNING_GRID, apply_tuning, paired_gap, proxy_data, tune_on_public, verdict_line,
)
from textdp.errors import ParameterError  # noqa: E402


@pytest.fixture
def cache(textdp_cache, monkeypatch):
    monkeypatch.setenv("TEXTDP_CACHE", str(textdp_cache / "verdict"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return textdp_cache


def test_paired_gap_by_hand():
    keys = ("seed", "template")
    a = pd.DataFrame({"seed": [0, 0, 1, 1, 0, 1], "template": ["x", "y", "x", "y", "z", "z"],
                      "v": [0.5, 0.2, 0.7, 0.1, 0.4, 0.4]})
    b = pd.DataFrame({"seed": [0, 0, 1, 1, 0, 1], "template": ["x", "y", "x", "y", "z", "z"],
                      "v": [0.1, 0.2, 0.3, 0.3, 0.0, 0.2]})
    # differences: x: 0.4, 0.4 -> 0.4; y: 0.0, -0.2 -> -0.1; z: 0.4, 0.2 -> 0.3
    g = paired_gap(a, b, "v", keys, "template")
    cm = np.array([0.4, -0.1, 0.3])
    half = student_t.ppf(0.975, 2) * cm.std(ddof=1) / math.sqrt(3)
    assert g["mean"] == pytest.approx(cm.mean()) and g["n_pairs"] == 6 and g["n_clusters"] == 3
    assert (g["lo"], g["hi"]) == pytest.approx((cm.mean() - half, cm.mean() + half))
    one = paired_gap(a[a["template"] == "x"], b, "v", keys, "template")
    assert one["mean"] == pytest.approx(0.4) and math.isnan(one["lo"])
    with pytest.raises(ParameterError):
        paired_gap(a.assign(seed=9), b, "v", keys, "template")


def test_verdict_rules():
    above = {"mean": 0.2, "lo": 0.1, "hi": 0.3}
    zero = {"mean": 0.0, "lo": -0.1, "hi": 0.1}
    assert verdict_line({"po_x": above, "can_recall": zero}, 0.95, 10, 4.0).startswith("HOLDS")
    assert verdict_line({"po_x": zero, "can_recall": above, "can_ref_recall": zero}, 0.95, 10, 4.0).startswith("HOLDS")
    # a canary gap that the reference canaries show as well is not leakage
    assert not verdict_line({"po_x": zero, "can_recall": above, "can_ref_recall": above}, 0.95, 10,
                            4.0).startswith("HOLDS")
    assert verdict_line({"po_x": zero, "can_recall": zero}, 0.95, 10, 4.0).startswith("DOES NOT HOLD")
    assert verdict_line({"po_x": zero, "can_recall": zero}, 0.85, 10, 4.0).startswith("NOT SETTLED")
    assert verdict_line({"po_x": zero, "can_recall": zero}, 0.95, 3, 4.0).startswith("NOT SETTLED")


def test_tuning_grid():
    assert 1 <= len(TUNING_GRID) <= 12
    assert max(g["num_iterations"] for g in TUNING_GRID) == 10 and all(g["num_iterations"] <= 10 for g in TUNING_GRID)
    for knob in ("stepsize", "kl_scale", "gm_scale", "window_length"):
        assert len({g[knob] for g in TUNING_GRID}) >= 2, knob
    cfg = apply_tuning(preset_config("memorising"), TUNING_GRID[4])
    assert cfg.pplm.num_iterations == 10 and cfg.pplm.stepsize == 1.0 and cfg.validate()
    with pytest.raises(ParameterError):
        tune_on_public(None, None, None, None, cfg, [], [], gen_length=2, vmi_length=2,
                       grid=list(TUNING_GRID) + [TUNING_GRID[0]])


def _tiny_cfg():
    return preset_config("tiny").with_overrides(canaries=8, canary_pool=8, canary_secret_len=2, target_dropout=0.0,
                                               target_weight_decay=0.0, target_epochs=3, max_len=32)


def test_canaries_in_split_and_proxy_never_reads_private():
    cfg = _tiny_cfg()
    d = split_data("rotten-tomatoes", cfg)
    assert d.canaries is not None and len(d.canaries.inserted) == 8 and len(d.canaries.reference) == 8
    assert not set(d.private["text"]) & set(d.canaries.inserted["text"])  # private holds only the reviews
    tf = d.training_frame()
    assert len(tf) == len(d.private) + 8 and set(d.canaries.inserted["text"]) <= set(tf["text"])
    plain = split_data("rotten-tomatoes", cfg.with_overrides(canaries=0))
    assert plain.canaries is None and plain.fingerprint() != d.fingerprint()
    p = proxy_data(d, cfg)
    assert set(p.private["text"]) <= set(d.public["text"]) and set(p.nonmember["text"]) <= set(d.public["text"])
    assert not set(p.private["text"]) & set(p.nonmember["text"])
    assert not (set(p.private["text"]) | set(p.nonmember["text"])) & set(d.private["text"])
    assert p.private["label"].value_counts().to_dict() == d.private["label"].value_counts().to_dict()
    assert p.canaries.seed == cfg.canary_seed + 1 and set(p.canaries.inserted["secret"]) != set(d.canaries.inserted["secret"])
    assert proxy_data(d, cfg).private.equals(p.private)  # deterministic


def test_prepare_target_trains_on_canaries_without_dropout(cache):
    import torch

    from textdp.attacks.inversion.pipeline import prepare_target

    cfg = _tiny_cfg()
    d = split_data("rotten-tomatoes", cfg)
    clf, info = prepare_target(d, cfg)
    assert info["canaries_inserted"] == 8 and info["dropout"] == 0.0 and info["weight_decay"] == 0.0
    assert info["memorisation"]["mia_n_members"] == len(d.private)  # reviews only
    cm = info["canary_memorisation"]
    assert cm["mia_n_members"] == 8 and cm["mia_n_nonmembers"] == 8 and 0 <= cm["mia_auc"] <= 1
    assert all(m.p == 0.0 for m in clf.model.modules() if isinstance(m, torch.nn.Dropout))
    _, again = prepare_target(d, cfg)  # cached under a key that holds the canaries and the regularisation
    assert again["cached"] and again["canaries_inserted"] == 8


def test_one_tiny_seed_end_to_end(cache):
    """TR, VTG and VMI for one seed on tiny models, canary rows included, then the summary
    and a two-configuration tuning on the public proxy."""
    from textdp.attacks.inversion.pipeline import prepare_generator, prepare_target
    from textdp.attacks.inversion.templates import build_templates, template_labels
    from textdp.attacks.inversion.verdict import Scorer, attack_seed, seed_metrics, verdict_summary

    cfg = _tiny_cfg().with_overrides(n_templates=2, vmi_steps=2)
    d = split_data("rotten-tomatoes", cfg)
    clf, _ = prepare_target(d, cfg)
    gen, vocab, _ = prepare_generator(d, clf, cfg)
    tpl = build_templates(list(d.public["text"]), n_min=2, n_max=3, min_freq=3, n_templates=2)
    tl = template_labels(tpl, list(d.public["text"]), list(d.public["label"]))
    sc = Scorer(d)
    texts, cans = [], []
    for m in ("tr", "vtg", "vmi"):
        t, c, timing = attack_seed(m, clf=clf, generator=gen, vocab=vocab, data=d, cfg=cfg, templates=tpl,
                                   template_label=tl, seed=4, gen_length=4, vmi_length=5, sc=sc)
        assert timing["cpu_seconds"] >= 0
        texts.append(t)
        cans.append(c)
    texts, cans = pd.concat(texts, ignore_index=True), pd.concat(cans, ignore_index=True)
    rv = texts[texts["kind"] == "review"]
    assert rv.groupby("method").size().to_dict() == {"tr": 4, "vtg": 4, "vmi": 4}
    assert texts[texts["kind"] == "canary"].groupby("method").size().to_dict() == {"tr": 8, "vtg": 8}
    for col in ("rec", "rec_nm", "ev", "ev_nm"):
        assert rv[col].between(0, 1).all(), col
    assert (rv["po"] >= 0).all() and (rv["ntok"] > 0).all()
    assert cans.groupby(["method", "set"]).size().to_dict() == {(m, s): 8 for m in ("tr", "vtg", "vmi")
                                                                for s in ("inserted", "reference")}
    # VTG's texts depend only on the seed
    again, _, _ = attack_seed("vtg", clf=clf, generator=gen, vocab=vocab, data=d, cfg=cfg, templates=tpl,
                              template_label=tl, seed=4, gen_length=4, vmi_length=5, sc=sc)
    assert list(again["text"]) == list(texts[texts["method"] == "vtg"]["text"])
    met = seed_metrics(texts, cans, sc)
    assert set(met["method"]) == {"tr", "vtg", "vmi"} and (met["ppl"] > 1).all()
    summ = verdict_summary(texts, cans, met)
    assert {"rec", "po_x", "ev", "nll_tok", "can_recall", "can_ref_recall"} <= set(summ["gaps"])
    assert summ["gaps"]["rec"]["n_pairs"] == 4 and summ["gaps"]["can_recall"]["n_clusters"] == 8
    proxy = proxy_data(d, cfg)
    pclf, _ = prepare_target(proxy, cfg)
    sel = tune_on_public(proxy, pclf, gen, vocab, cfg, tpl[:1], tl[:1], gen_length=3, vmi_length=4,
                         grid=TUNING_GRID[:2])
    assert sel["selected"] in [dict(g) for g in TUNING_GRID[:2]] and len(sel["grid"]) == 2
    assert all(set(e) >= {"objective", "ppl", "admissible", "knobs"} for e in sel["grid"])
