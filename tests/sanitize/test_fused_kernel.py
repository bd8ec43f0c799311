"""The fused, cache-resident sampler (textdp.sanitize.sampling.fused_sample): same law as the
block sampler, exact integer search, draws independent of block size and worker count."""

import numpy as np
import pytest

from textdp.noise import make_rng
from textdp.sanitize import SanText, sampling

pytestmark = pytest.mark.skipif(not sampling.numba_available(), reason="numba not installed")


def _table(v, m=12, seed=0):
    return np.random.default_rng(seed).standard_normal((v, m))


@pytest.mark.parametrize("v", [7, sampling.TILE, 2 * sampling.TILE + 37])
def test_fused_law_matches_block_sampler_on_every_tile_layout(v):
    y = _table(v)
    kern = sampling.DistanceKernel(y, 2.5, y.mean(0))
    x = np.concatenate([y[[0, v - 1, v // 2]], y[[1]] + 0.4])
    sc = np.array([0, v - 1, v // 2, -1])
    p_fused = sampling.fused_probabilities(kern, x, sc)
    for numba in (True, False):
        p_block = sampling.block_probabilities(kern.scaled_sq(x), sc, numba=numba)
        assert np.abs(p_fused / p_block - 1).max() < 1e-7
    assert np.allclose(p_fused.sum(axis=1), 1.0)
    # the tiled scaled_sq is the plain formula
    d2 = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1) * (2.5 / 2) ** 2
    assert np.allclose(kern.scaled_sq(x), d2, atol=1e-9)


def test_far_rows_use_their_minimum_as_offset():
    """eps so large that every weight exp(-s) underflows below e^-512 for an input without its own
    word: the slow path must give the block sampler's law (mass on the nearest word), not a uniform one."""
    y = _table(300)
    kern = sampling.DistanceKernel(y, 1e4, y.mean(0))
    x = y[[3]] + 0.05
    p_fused = sampling.fused_probabilities(kern, x, [-1])
    p_block = sampling.block_probabilities(kern.scaled_sq(x), [-1], numba=False)
    assert p_fused.argmax() == 3 and p_fused.max() > 0.99
    assert np.abs(p_fused / p_block - 1).max() < 1e-7


def test_search_recomputes_the_chunk_sums_bit_for_bit():
    """Every cumulative boundary u = C_j - 1 and u = C_j lands on column j and j + 1: the recomputed
    integer weights in the search equal the ones summed into the chunk sums."""
    v = 1000
    y = _table(v, seed=3)
    kern = sampling.DistanceKernel(y, 1.0, y.mean(0))
    x = y[[10, 20]]
    ws = sampling.FusedWorkspace(kern, 2)
    ws, base = sampling._fused_law(kern, x, np.array([10, 20]), sampling.DEFAULT_ETA, ws)
    c = sampling._kernels.fused_integer_weights(ws.w, v, ws.scale, base, np.empty((2, v), dtype=np.int64))
    cum = np.cumsum(c, axis=1)
    assert np.array_equal(cum[:, -1], ws.csum[:2, -1])
    chunk = sampling._kernels.CHUNK
    assert np.array_equal(cum[:, chunk - 1::chunk], ws.csum[:2, : v // chunk])
    for r in range(2):
        u = np.concatenate([cum[r] - 1, cum[r][:-1]]).astype(np.uint64)
        want = np.concatenate([np.arange(v), np.arange(1, v)])
        got = sampling._kernels.fused_search(ws.w, v, ws.csum, ws.scale, base, np.full(len(u), r, np.int64), u,
                                             np.empty(len(u), dtype=np.int64))
        assert np.array_equal(got, want)


def test_fused_draws_follow_the_law():
    from scipy import stats

    v = 1500
    y = _table(v, seed=5)
    kern = sampling.DistanceKernel(y, 3.0, y.mean(0))
    x = y[[7]]
    p = sampling.fused_probabilities(kern, x, [7])[0]
    rng = make_rng(9)
    n = 60000
    draws = sampling.fused_sample(kern, x, [7], np.array([n]), lambda t: sampling.uniform_below(t, rng))
    obs = np.bincount(draws, minlength=v)
    big = p * n >= 5
    o = np.concatenate([obs[big], [obs[~big].sum()]])
    e = np.concatenate([p[big], [p[~big].sum()]]) * n
    assert stats.chisquare(o, e).pvalue > 1e-3


def test_seeded_output_independent_of_block_size_and_workers(make_emb, monkeypatch):
    monkeypatch.setenv(sampling.BACKEND_ENV, "numba")
    emb = make_emb(v=300)
    texts = [" ".join(f"w{(i * 7 + j) % 300}" for j in range(40)) for i in range(60)]
    runs = [SanText(emb, epsilon=1.0, output_vocabulary="full", rng=3, workers=w, block_bytes=bb).sanitize(texts)
            for w, bb in ((1, 1024), (2, 1024), (1, 8 * 300 * 40), (2, 32 * 2**20))]
    assert all(r == runs[0] for r in runs[1:])
    # and the numpy backend draws the same words (same keyed uniforms; laws equal to ~1e-8)
    monkeypatch.setenv(sampling.BACKEND_ENV, "numpy")
    assert SanText(emb, epsilon=1.0, output_vocabulary="full", rng=3).sanitize(texts) == runs[0]


def test_portable_and_native_integer_rounding_agree():
    """_iweight is ``int64(rint(y))`` where the CPU converts packed float64 to int64 (AVX-512DQ) and the
    integer bit trick elsewhere: both must give the same integers, ties to even included."""
    rng = np.random.default_rng(2)
    y = np.concatenate([rng.uniform(0, 2.0**62, 3000), rng.integers(0, 2**40, 3000) + 0.5,
                        rng.uniform(0, 1e9, 3000), [0.0, 0.5, 1.5, 2.0**52 - 0.5, 2.0**52, 2.0**53 + 2, 2.0**62]])
    got = np.array([sampling._kernels._rint_i64(float(t)) for t in y])
    assert np.array_equal(got, np.rint(y).astype(np.int64))
    one = np.array([sampling._kernels._iweight(float(t), 1.0, 0.0) for t in y])
    assert np.array_equal(one, got)
