"""Heavier checks of the attack MLM and sanitization-aware pretraining (minutes on 2 cores):
run with `pytest -m slow tests/evaluate/test_pretrain_slow.py`."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")


def test_small_default_mlm_beats_word_frequency_on_held_out_text(tmp_path):
    from textdp.models.mlm import default_mlm

    m = default_mlm("bbc-news", "small", root=tmp_path)
    L = m.info["losses"]
    assert np.mean(L[-50:]) < np.mean(L[:50])
    h = m.info["heldout"]
    assert h["top1"] > h["frequency_baseline"] + 0.03, h


def test_minilm_pretraining_comparison_tiny_preset_runs():
    from textdp.evaluate.pretrain import compare_pretraining

    res = compare_pretraining("rotten-tomatoes", "santext", 3.0, preset="tiny", seed=0, encoder="minilm")
    assert res["encoder"] == "minilm"
    for k in ("plain", "control", "sanitization_aware"):
        assert 0.0 <= res[k] <= 1.0
    assert res["gain"] == pytest.approx(res["sanitization_aware"] - res["plain"])
    assert np.isfinite(res["aware_mlm_final_loss"])
