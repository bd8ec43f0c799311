"""Nearest-word search of the embedding-perturbation mechanisms (textdp.sanitize.perturbation.NearestSearch):
the exact float64 nearest / two nearest output words, ties to the lowest column, for both prefilters
(numpy float32, torch bfloat16), against a brute-force float64 search on random tables, exact ties and
adversarial near-ties; and seeded outputs identical across prefilters and worker counts."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import textdp.sanitize.perturbation as pert
from textdp.embeddings import Embeddings
from textdp.sanitize.perturbation import FBDD, Mahalanobis, NearestSearch, Vickrey, error_coefficients, squared_distances

PREFILTERS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch not installed"))]


def _brute(q, y, k):
    """Brute force: float64 squared distances summed in index order, stable sort (ties: lowest column)."""
    d = squared_distances(np.asarray(q, dtype=np.float64)[:, None, :], np.asarray(y, dtype=np.float64)[None])
    o = np.argsort(d, axis=1, kind="stable")[:, :k]
    return o, np.take_along_axis(d, o, 1)


def _check(search, q, y):
    for k in (1, 2):
        cols, d = search(q, k)
        o, do = _brute(q, y, k)
        np.testing.assert_array_equal(cols, o)
        np.testing.assert_array_equal(d, do)


@pytest.mark.parametrize("prefilter", PREFILTERS)
@pytest.mark.parametrize("tile", [7, 2048])
def test_random_tables(monkeypatch, prefilter, tile):
    monkeypatch.setattr(pert, "SEARCH_TILE", tile)
    g = np.random.Generator(np.random.PCG64(1))  # test data
    for v, m, scale in ((300, 5, 1.0), (2500, 50, 0.5), (40, 3, 1e-3), (64, 8, 1e4)):
        y = g.standard_normal((v, m)) * scale
        q = y[g.integers(0, v, 200)] + g.standard_normal((200, m)) * scale * 0.5
        _check(NearestSearch(y, prefilter), q, y)


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_exact_ties(monkeypatch, prefilter):
    """Small-integer tables: duplicated words and equidistant words, many exact float64 ties."""
    monkeypatch.setattr(pert, "SEARCH_TILE", 8)
    g = np.random.Generator(np.random.PCG64(3))
    y = g.integers(-2, 3, (40, 3)).astype(np.float64)
    q = g.integers(-3, 4, (300, 3)).astype(np.float64)
    _check(NearestSearch(y, prefilter), q, y)
    d = squared_distances(q[:, None], y[None])
    o = np.argsort(d, axis=1, kind="stable")
    assert (d[np.arange(300), o[:, 0]] == d[np.arange(300), o[:, 1]]).any()  # ties occurred


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_adversarial_near_ties(prefilter):
    """Words placed so that the nearest and the runner-up differ by ~1e-7 relative (below float32's and far
    below bfloat16's resolution of the scores), the exact winner sometimes at a higher column than a word
    that the rounded scores rank first: the prefilter must keep both and the exact pass must decide."""
    g = np.random.Generator(np.random.PCG64(5))
    m, n = 50, 300
    q = g.standard_normal((n, m)) * 3
    rows = []
    for i in range(n):
        base = q[i] + g.standard_normal(m) * 0.8
        r = np.linalg.norm(q[i] - base)
        direction = g.standard_normal(m)
        direction /= np.linalg.norm(direction)
        rel = g.choice([1e-7, -1e-7, 3e-8, 0.0])
        # a second word at distance r (1 + rel) from q, in another direction
        other = q[i] + direction * r * (1 + rel)
        rows.extend([other, base] if i % 2 else [base, other])
    y = np.asarray(rows)
    y = np.concatenate([y, g.standard_normal((500, m)) * 3])
    cols, d = NearestSearch(y, prefilter)(q, 2)
    o, do = _brute(q, y, 2)
    np.testing.assert_array_equal(cols, o)
    np.testing.assert_array_equal(d, do)
    # the float32 score argmax (the old search) gets some of them wrong: the test has teeth
    y32 = y.astype(np.float32)
    s32 = q.astype(np.float32) @ y32.T - 0.5 * (y32 * y32).sum(1)
    assert (s32.argmax(1) != o[:, 0]).any()


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_error_bound_holds(prefilter):
    """|a_j - d_j| <= B_j (NearestSearch's docstring) for each prefilter's GEMM (the search's own tiles),
    and the bound is not vacuous (B below 1e-3 of the distances for float32, below 0.1 for bfloat16)."""
    alpha, beta, c = error_coefficients(50, prefilter)
    g = np.random.Generator(np.random.PCG64(6))
    y = g.standard_normal((3000, 50)) * 0.7
    q = g.standard_normal((64, 50)) * 2
    d = squared_distances(q[:, None], y[None])
    qq = (q * q).sum(1)
    n = (y * y).sum(1)
    tiles = NearestSearch(y, prefilter).tiles
    if prefilter == "torch":
        import torch

        left = torch.from_numpy(np.hstack([q, np.ones((64, 2))]).astype(np.float32)).to(torch.bfloat16)
        s = np.hstack([torch.mm(left, t).float().numpy() for _, t in tiles])
    else:
        qa = np.hstack([q, np.ones((64, 1))]).astype(np.float32)
        s = np.hstack([qa @ t for _, t in tiles])
    a = qq[:, None] + s.astype(np.float64)
    b = alpha * np.sqrt(qq)[:, None] * np.sqrt(n)[None] + beta * n[None] + c * qq[:, None] + 2.0 ** -96
    assert (np.abs(a - d) <= b).all()
    assert (b / d).max() < (1e-3 if prefilter == "numpy" else 0.1)


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_huge_noisy_points_are_searched_exactly(prefilter):
    g = np.random.Generator(np.random.PCG64(7))
    y = g.standard_normal((100, 4))
    q = g.standard_normal((20, 4)) * 1e20  # ||q||^2 ~ 1e40: past float32
    _check(NearestSearch(y, prefilter), q, y)


def _emb(v=3000, m=50, seed=8):
    g = np.random.Generator(np.random.PCG64(seed))
    vec = (g.standard_normal((v, m)) * 0.5).astype(np.float32)
    return Embeddings([f"w{i}" for i in range(v)], vec, source="test", kind="word", lowercase=True)


@pytest.mark.parametrize("cls,kw", [(FBDD, {}), (Mahalanobis, {"lam": 0.3}), (Vickrey, {"t": 0.5})])
def test_seeded_outputs_do_not_depend_on_prefilter_or_workers(cls, kw):
    emb = _emb()
    g = np.random.Generator(np.random.PCG64(9))
    text = [" ".join(f"w{i}" for i in g.integers(0, 3000, 400)) for _ in range(3)]
    outs = []
    for pf in ["numpy"] + (["torch"] if importlib.util.find_spec("torch") else []):
        for workers in (1, 2):
            mech = cls(emb, 3.0, output_vocabulary="full", rng=11, workers=workers, **kw)
            mech.nearest_prefilter = pf
            outs.append(mech.sanitize(text))
    assert all(o == outs[0] for o in outs[1:])
    # and they are the brute-force nearest words of the same noisy points (FBDD)
    if cls is FBDD:
        mech = FBDD(emb, 3.0, output_vocabulary="full")
        rows = np.arange(3000)
        out = mech.sample_rows(rows, np.random.default_rng(4))
        qn = emb.vectors[rows].astype(np.float64) + mech.noise(len(rows), np.random.default_rng(4))
        o, _ = _brute(qn, emb.vectors, 1)
        assert (out == o[:, 0]).mean() > 0.999  # the uniform share eta = 2^-20 may replace a few
