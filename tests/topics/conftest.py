"""Synthetic corpora drawn from known topics (fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from textdp.topics import Corpus


def word(i):
    """Letters-only word names (the tokenizer keeps letters only): wa, wb, ..."""
    return "w" + chr(97 + i // 26) + chr(97 + i % 26)


def synthetic(K=3, V=30, M=150, L=40, alpha=0.3, seed=0, block=None):
    """Topics with disjoint blocks of V/K words (plus a little mass elsewhere)."""
    rng = np.random.default_rng(seed)  # test data only; library code never uses numpy's RNGs directly
    block = block or V // K
    phi = np.full((K, V), 0.02 / V)
    for k in range(K):
        phi[k, k * block:(k + 1) * block] += 0.98 / block
    phi /= phi.sum(1, keepdims=True)
    docs = []
    for _ in range(M):
        th = rng.dirichlet([alpha] * K)
        z = rng.choice(K, size=L, p=th)
        docs.append([int(rng.choice(V, p=phi[k])) for k in z])
    return Corpus.from_word_ids(docs, [word(i) for i in range(V)]), phi


@pytest.fixture(scope="session")
def synth():
    return synthetic()


@pytest.fixture(scope="session")
def synth_split():
    c, phi = synthetic(M=200, seed=1)
    return c.subset(range(150)), c.subset(range(150, 200)), phi
