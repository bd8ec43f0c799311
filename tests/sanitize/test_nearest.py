"""The exact nearest-word search (textdp.sanitize.nearest): the same columns as a brute-force search of the
same float64 scores, for both prefilters, any tile width and block, with ties, near-ties, negative scores
and huge queries; and the prefilter's error bound holds on this machine's GEMM."""

from __future__ import annotations

import numpy as np
import pytest

import textdp.sanitize.nearest as nearest
from textdp.errors import ParameterError
from textdp.sanitize.nearest import NearestSearch, half_squared_norms

PREFILTERS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(not nearest._torch_available(),
                                                                    reason="torch not installed"))]


def _scores(q, y):
    """The search's float64 score written out in numpy, in the kernel's order: four partial sums over
    t = 0, 4, 8, ... / 1, 5, ... (each in increasing t), ((a0 + a1) + (a2 + a3)) - h."""
    q, y = np.asarray(q, dtype=np.float64), np.asarray(y, dtype=np.float64)
    m = y.shape[1]
    acc = [np.zeros((len(q), len(y))) for _ in range(4)]
    t = 0
    while t + 4 <= m:
        for r in range(4):
            acc[r] += q[:, None, t + r] * y[None, :, t + r]
        t += 4
    while t < m:
        acc[0] += q[:, None, t] * y[None, :, t]
        t += 1
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) - half_squared_norms(y)[None]


def _brute(q, y, k):
    s = _scores(q, y)
    order = np.lexsort((np.broadcast_to(np.arange(len(y)), s.shape), -s), axis=1)[:, :k]
    return order, np.take_along_axis(s, order, 1)


def _table(v, m, seed, scale=1.0):
    g = np.random.Generator(np.random.PCG64(seed))  # test data
    return (g.standard_normal((v, m)) * scale * (1 + 2 * g.random((v, 1)))).astype(np.float32)


@pytest.mark.parametrize("prefilter", PREFILTERS)
@pytest.mark.parametrize("radius", [0.0, 0.3, 3.0, 30.0, 1e6])
def test_search_equals_brute_force(prefilter, radius):
    """Random table (norms spread over 3x), noisy points at several noise radii (the noise far larger than
    the table at 30 and 1e6, as at small eps): top 1 and top 2 equal a brute force of the same scores."""
    y = _table(700, 12, 1)
    g = np.random.Generator(np.random.PCG64(2))
    base = y[g.integers(0, 700, 600)].astype(np.float64)
    u = g.standard_normal((600, 12))
    q = base + radius * u / np.linalg.norm(u, axis=1, keepdims=True)
    search = NearestSearch(y, prefilter)
    for k in (1, 2):
        cols, scores = search(q, k)
        ref_cols, ref_scores = _brute(q, y, k)
        np.testing.assert_array_equal(cols, ref_cols)
        np.testing.assert_array_equal(scores, ref_scores)


@pytest.mark.parametrize("prefilter", PREFILTERS)
@pytest.mark.parametrize("tile", [1, 5, 64, 100000])
def test_result_does_not_depend_on_tiles_blocks_or_prefilter(monkeypatch, prefilter, tile):
    """Any tile width; 700 queries span three blocks of 256 and each row equals its own one-row search."""
    monkeypatch.setattr(nearest, "TILE_WORDS", {"torch": tile, "numpy": tile})
    y = _table(300, 7, 3)
    g = np.random.Generator(np.random.PCG64(4))
    q = y[g.integers(0, 300, 700)] + 2.0 * g.standard_normal((700, 7))
    cols, scores = NearestSearch(y, prefilter)(q, 2)
    np.testing.assert_array_equal(cols, _brute(q, y, 2)[0])
    one = NearestSearch(y, prefilter)
    for i in (0, 255, 256, 511, 699):
        c1, s1 = one(q[i:i + 1], 2)
        np.testing.assert_array_equal(c1[0], cols[i])
        np.testing.assert_array_equal(s1[0], scores[i])


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_ties_go_to_the_lowest_column(prefilter):
    """Small integers: every score is exact in every precision, so the prefilter sees the ties too; the
    table has duplicate rows and equidistant words."""
    g = np.random.Generator(np.random.PCG64(5))
    y = g.integers(-2, 3, (200, 4)).astype(np.float32)
    q = g.integers(-4, 5, (500, 4)).astype(np.float64)
    search = NearestSearch(y, prefilter)
    for k in (1, 2):
        cols, _ = search(q, k)
        np.testing.assert_array_equal(cols, _brute(q, y, k)[0])
    s = _scores(q, y)
    srt = np.sort(s, axis=1)
    assert (srt[:, -1] == srt[:, -2]).mean() > 0.2  # many exact ties at the top


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_near_ties_are_resolved_by_the_float64_score(prefilter):
    """Words that differ in the last float32 bit of one coordinate: their scores differ far below the
    prefilter's resolution, and the search still returns the float64 order."""
    g = np.random.Generator(np.random.PCG64(6))
    base = g.standard_normal((50, 8)).astype(np.float32)
    y = np.repeat(base, 4, axis=0)
    y[1::4, 0] = np.nextafter(y[1::4, 0], np.float32(np.inf))
    y[2::4, 0] = np.nextafter(y[2::4, 0], np.float32(-np.inf))
    y[3::4, 3] = np.nextafter(y[3::4, 3], np.float32(np.inf))
    q = np.repeat(base.astype(np.float64), 6, axis=0) * 3.0 + 0.01 * g.standard_normal((300, 8))
    search = NearestSearch(y, prefilter)
    for k in (1, 2):
        np.testing.assert_array_equal(search(q, k)[0], _brute(q, y, k)[0])


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_negative_and_huge_scores(prefilter):
    """Noisy points at the origin (every score negative: the bfloat16 prefilter's scalar path) and beyond
    the float32-safe range (scored exactly on every column)."""
    y = _table(300, 6, 7) + 3.0
    g = np.random.Generator(np.random.PCG64(8))
    q = np.vstack([np.zeros((3, 6)), 1e-3 * g.standard_normal((100, 6)), -y[:50].astype(np.float64),
                   1e32 * g.standard_normal((5, 6))])
    search = NearestSearch(y, prefilter)
    assert (_scores(q[:103], y).max(axis=1) < 0).all()
    for k in (1, 2):
        np.testing.assert_array_equal(search(q, k)[0], _brute(q, y, k)[0])


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_small_tables(prefilter):
    y = _table(1, 3, 9)
    cols, scores = NearestSearch(y, prefilter)(np.ones((4, 3)), 2)
    assert (cols[:, 0] == 0).all() and (cols[:, 1] == -1).all() and np.isinf(scores[:, 1]).all()
    empty = NearestSearch(np.zeros((0, 3), dtype=np.float32), prefilter)(np.ones((2, 3)), 1)
    assert (empty[0] == -1).all()
    cols, _ = NearestSearch(y, prefilter)(np.zeros((0, 3)), 1)
    assert cols.shape == (0, 1)


def test_bfloat16_prefilter_error_is_within_the_bound():
    """The derivation's premise on this machine's torch: every prefilter score ``a`` (the bfloat16 GEMM the
    search runs) is within ``B0 + c|a|`` of the exact float64 score, on GloVe-like and on wide tables."""
    torch = pytest.importorskip("torch")
    for v, m, radius, seed in ((4000, 50, 17.0, 10), (3000, 300, 5.0, 11), (2000, 7, 1e4, 12)):
        y = _table(v, m, seed, scale=0.6)
        g = np.random.Generator(np.random.PCG64(seed))
        u = g.standard_normal((256, m))
        q = y[g.integers(0, v, 256)] + radius * u / np.linalg.norm(u, axis=1, keepdims=True)
        search = NearestSearch(y, "torch")
        qa = np.zeros((256, search.k_terms), dtype=np.float32)
        qa[:, :m] = q
        qa[:, m:m + 2] = 1.0
        xt = torch.from_numpy(np.ascontiguousarray(qa.T)).to(torch.bfloat16)
        b0 = search.bounds(np.linalg.norm(q, axis=1))
        worst = 0.0
        for t, (s0, mat) in enumerate(search.tiles):
            a = torch.mm(mat, xt).to(torch.float64).numpy()  # (tile, 256)
            exact = _scores(q, search.yp[s0:s0 + mat.shape[0]]).T
            ratio = np.abs(a - exact) / (b0[t][None] + search.c_out * np.abs(a))
            worst = max(worst, float(ratio.max()))
        assert 0.0 < worst <= 1.0, worst


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_a_pickled_search_gives_the_same_result(prefilter):
    import pickle

    y = _table(100, 5, 13)
    q = np.random.Generator(np.random.PCG64(14)).standard_normal((40, 5)) * 4
    search = NearestSearch(y, prefilter)
    cols = search(q, 2)[0]
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(search))(q, 2)[0], cols)


def test_prefilter_choice():
    assert nearest.resolve_prefilter("numpy") == "numpy"
    assert nearest.resolve_prefilter("auto") in ("numpy", "torch")
    with pytest.raises(ParameterError, match="prefilter must be one of"):
        nearest.resolve_prefilter("gpu")


def test_auto_prefilter_imports_torch_only_for_large_jobs(monkeypatch):
    """"auto": numpy for a short job while torch is not imported (its import costs more than the search),
    torch for a large one when installed, and torch whenever it is already imported."""
    import sys

    monkeypatch.delenv(nearest.PREFILTER_ENV, raising=False)
    monkeypatch.setattr(nearest, "_torch_available", lambda: True)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert nearest.resolve_prefilter("auto", queries=10) == "numpy"
    assert nearest.resolve_prefilter("auto", queries=nearest.AUTO_TORCH_QUERIES) == "torch"
    assert nearest.resolve_prefilter("auto") == "torch"
    monkeypatch.setitem(sys.modules, "torch", object())
    assert nearest.resolve_prefilter("auto", queries=10) == "torch"
    monkeypatch.setattr(nearest, "_torch_available", lambda: False)
    monkeypatch.delitem(sys.modules, "torch")
    assert nearest.resolve_prefilter("auto", queries=10 ** 6) == "numpy"


def test_prefilter_from_the_environment(monkeypatch):
    monkeypatch.setenv(nearest.PREFILTER_ENV, "numpy")
    assert nearest.resolve_prefilter("auto") == "numpy"
    monkeypatch.setenv(nearest.PREFILTER_ENV, "bad")
    with pytest.raises(ParameterError):
        nearest.resolve_prefilter("auto")


@pytest.mark.parametrize("name", ["fbdd", "vickrey"])
def test_mechanism_output_is_the_same_with_either_prefilter(monkeypatch, name):
    """Seeded FBDD and Vickrey on GloVe 6B 50d with the default output vocabulary: the same release with
    the numpy and the torch prefilter and with 1 or 2 workers."""
    pytest.importorskip("torch")
    from textdp.sanitize import make_mechanism
    from textdp.sanitize.perturbation import EmbeddingPerturbation

    text = ["the quick brown fox jumps over the lazy dog , again and again"] * 40
    outs = []
    for prefilter, workers in (("numpy", 1), ("torch", 2), ("torch", 1)):
        monkeypatch.setattr(EmbeddingPerturbation, "nearest_prefilter", prefilter)
        outs.append(make_mechanism(name, "glove-6b-50d", 3.0, rng=5, workers=workers).sanitize(text))
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("t", [0.0, 0.3, 0.5, 1.0])
def test_vickrey_pairs_kernel_matches_the_numpy_rule(t):
    """The kernel's pair order and coin probability equal the numpy formulation it replaced (distances
    in float64, the pair ordered by (distance, column), p = (1-t) d2 / (t d1 + (1-t) d2), 1 on a zero
    denominator or without a second word), including exact ties and q exactly on a word."""
    from textdp.sanitize._nearest_kernels import vickrey_pairs

    g = np.random.Generator(np.random.PCG64(21))  # test data
    y = np.round(g.normal(size=(40, 5)), 1).astype(np.float32)
    y[7] = y[3]  # two words at the same point: equal distances, order by column
    q = g.normal(size=(600, 5))
    q[:20] = y[g.integers(0, 40, 20)]  # noisy points exactly on a word
    first, second = g.integers(0, 40, 600), g.integers(0, 40, 600)
    first[20:40], second[20:40] = 7, 3
    second[40:60] = -1
    w1, w2, p = (np.empty(600, dtype=np.int64), np.empty(600, dtype=np.int64), np.empty(600))
    vickrey_pairs(q, first, second, y.astype(np.float32), t, w1, w2, p)
    yd = y.astype(np.float64)
    ok = second >= 0
    b = np.where(ok, second, first)
    d1 = np.sqrt(((q - yd[first]) ** 2).sum(axis=1))
    d2 = np.sqrt(((q - yd[b]) ** 2).sum(axis=1))
    swap = ok & ((d2 < d1) | ((d2 == d1) & (second < first)))
    e1, e2 = np.where(swap, second, first), np.where(swap, first, b)
    d1, d2 = np.where(swap, d2, d1), np.where(swap, d1, d2)
    num, den = (1 - t) * d2, t * d1 + (1 - t) * d2
    ep = np.where(ok, np.clip(np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0), 0, 1), 1.0)
    np.testing.assert_array_equal(w1, e1)
    np.testing.assert_array_equal(w2[ok], e2[ok])
    np.testing.assert_allclose(p, ep, rtol=1e-12, atol=0)
    assert (w1[20:40] == 3).all() and (p[40:60] == 1.0).all()
