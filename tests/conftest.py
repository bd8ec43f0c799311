"""Shared fixtures. Statistical tests use fixed seeds and stated significance levels."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _isolated_budget_ledgers(tmp_path_factory, monkeypatch):
    """CLI runs in tests append to a temporary ledger folder, never to ~/.cache/textdp/ledgers."""
    monkeypatch.setenv("TEXTDP_LEDGER_DIR", str(tmp_path_factory.mktemp("ledgers")))


@pytest.fixture
def rng():
    """A seeded generator (tests only: DP code defaults to a CSPRNG)."""
    from textdp.noise import make_rng

    return make_rng(12345)


@pytest.fixture
def small_glove_file(tmp_path):
    """A tiny GloVe-format text file with 6 words in 3 dimensions."""
    words = {"good": [1, 0, 0], "great": [0.9, 0.1, 0], "bad": [-1, 0, 0], "awful": [-0.9, -0.1, 0],
             "film": [0, 1, 0], "movie": [0, 0.95, 0.05]}
    p = tmp_path / "tiny.glove.txt"
    p.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in words.items()), encoding="utf-8")
    return p
