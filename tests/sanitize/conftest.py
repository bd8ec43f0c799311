"""Fixtures for the sanitizer tests: a small random embedding table."""

from __future__ import annotations

import numpy as np
import pytest

from textdp.embeddings import Embeddings


def make_embeddings(v: int = 12, m: int = 4, seed: int = 3, scale: float = 1.0) -> Embeddings:
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    vec = (g.standard_normal((v, m)) * scale).astype(np.float32)
    return Embeddings([f"w{i}" for i in range(v)], vec, source="test", kind="word", lowercase=True)


@pytest.fixture
def small_emb():
    return make_embeddings()


@pytest.fixture
def make_emb():
    """The factory ``make_embeddings(v, m, seed, scale)``."""
    return make_embeddings
