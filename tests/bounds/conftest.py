"""Fixtures of the bounds tests."""

from __future__ import annotations

import math

import numpy as np
import pytest


@pytest.fixture
def synthetic_features():
    """Factory ``(n_rows, d, seed) -> TextFeatures``: unit-norm non-negative rows (TF-IDF-like) with the
    bias column and labels from a noisy linear rule (fast stand-in for a built-in dataset)."""
    from textdp.bounds.features import TextFeatures, add_bias

    def make(n_rows: int, d: int, seed: int):
        g = np.random.default_rng(seed)
        F = np.abs(g.normal(size=(n_rows, d)))
        F /= np.linalg.norm(F, axis=1, keepdims=True)
        y = (F @ g.normal(size=d) + 0.1 * g.normal(size=n_rows) > 0).astype(float)
        return TextFeatures(add_bias(F), y, [f"f{i}" for i in range(d)], math.sqrt(2.0), 1.0,
                            {"data": "synthetic", "n": n_rows, "d": d})

    return make
