"""The torch SanText sampler (textdp.sanitize._torch_kernel), run on torch's CPU device.

It must realise the same law as the CPU sampler (numba kernel and numpy backend) and,
given the same keyed uniforms, make the same draws except at float ties (a uniform
falling between the two samplers' cumulative weights at a boundary)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from textdp.errors import ParameterError  # noqa: E402
from textdp.noise import DEFAULT_ETA, ExactCategorical, keyed  # noqa: E402
from textdp.sanitize import _torch_kernel, sampling  # noqa: E402
from textdp.sanitize._torch_kernel import TorchExpSampler, sample_tokens  # noqa: E402

V, M = 3000, 50
#: relative error bound of the numba kernel's weights against an exact exp (its exp: 1e-8; the
#: normaliser carries it too), plus the rounding of integers around 2^62 / V (far smaller)
WEIGHT_TOL = 2.0 * sampling.EXP_RELATIVE_ERROR


def _table(v=V, m=M, seed=0, scale=0.4):
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    return (g.standard_normal((v, m)) * scale).astype(np.float32)


def _setup(eps, v=V, n_rows=24, seed=0, scale=0.4):
    y = _table(v, seed=seed, scale=scale)
    center, _ = sampling.table_geometry(y)
    g = np.random.Generator(np.random.PCG64(seed + 1))
    rows = g.choice(v, n_rows, replace=False)
    sc = np.where(np.arange(n_rows) % 3 == 0, -1, rows)  # some rows without their own column
    return y, center, rows, sc


def _numpy_cdf(y, center, eps, x, sc):
    """The numpy backend's integer cumulative weights (textdp.noise.ExactCategorical on -s)."""
    g = sampling.DistanceKernel(y, eps, center).scaled_sq(x)
    has = np.flatnonzero(sc >= 0)
    g[has, sc[has]] = 0.0
    return ExactCategorical(-np.sqrt(np.maximum(g, 0.0)), DEFAULT_ETA).cdf.view(np.int64)


def _backend(monkeypatch, name):
    """numba: sample_block's numba kernel; fused: the mechanisms' fused numba kernel
    (sampling.fused_sample); numpy: textdp.noise.ExactCategorical."""
    if name in ("numba", "fused") and not sampling.numba_available():
        pytest.skip("numba not installed")
    if name == "fused" and not hasattr(sampling, "fused_sample"):
        pytest.skip("no fused sampler in this version")
    monkeypatch.setenv(sampling.BACKEND_ENV, "numpy" if name == "numpy" else "numba")


@pytest.mark.parametrize("eps, scale", [(0.5, 0.4), (3.0, 0.4), (20.0, 0.4), (3.0, 200.0)])
def test_integer_weights_match_numpy_backend(eps, scale):
    """Input words in the table, and (half the rows) vectors outside it. Scale 200: scaled
    distances in the thousands, where exp(-s) underflows unless each row is offset by its
    smallest s (0 at the row's own column)."""
    y, center, rows, sc = _setup(eps, scale=scale)
    x = y[rows].astype(np.float64)
    g = np.random.Generator(np.random.PCG64(11))  # test data
    x[sc < 0] += g.standard_normal((int((sc < 0).sum()), M)) * 0.3 * scale  # not an output word
    ts = TorchExpSampler(y, eps, center)
    cum = ts.integer_weights(ts.scaled_sq(x), sc).numpy()
    ref = _numpy_cdf(y, center, eps, x, sc)
    c, c_ref = np.diff(cum, prepend=0), np.diff(ref, prepend=0)
    assert (c > 0).all() and (np.diff(cum, axis=1) > 0).all()  # every outcome keeps a positive weight
    # same exp quality (a few ulp) and round-half-up vs half-even: a few units of 2^62 / V scale
    assert np.abs(c - c_ref).max() <= 4 + 1e-12 * c.max()
    assert np.abs(cum[:, -1] - 2**62).max() <= V  # totals within V of 2^62


@pytest.mark.parametrize("backend", ["numba", "fused", "numpy"])
@pytest.mark.parametrize("eps", [0.5, 3.0, 20.0])
def test_realised_law_matches_block_probabilities(eps, backend, monkeypatch):
    _backend(monkeypatch, backend)
    y, center, rows, sc = _setup(eps)
    p_t = TorchExpSampler(y, eps, center).probabilities(y[rows], sc)
    kern = sampling.DistanceKernel(y, eps, center)
    if backend == "fused":
        p_ref = sampling.fused_probabilities(kern, y[rows], sc, DEFAULT_ETA)
    else:
        p_ref = sampling.block_probabilities(kern.scaled_sq(y[rows]), sc)
    assert p_t.shape == p_ref.shape == (len(rows), V)
    np.testing.assert_allclose(p_t.sum(1), 1.0, rtol=1e-12)
    assert (p_t >= DEFAULT_ETA / V * (1 - 1e-9)).all()  # the uniform floor eta / V
    tol = 1e-12 if backend == "numpy" else WEIGHT_TOL
    assert np.abs(p_t / p_ref - 1).max() <= tol


def _draws(backend, monkeypatch, eps, n_tokens, v=V, seed=5):
    """Torch and CPU draws for the same tokens under the same key; the torch cumulative weights
    of the distinct words; the uniforms (one per draw, in the torch sampler's draw order)."""
    _backend(monkeypatch, backend)
    y, center, _, _ = _setup(eps, v)
    g = np.random.Generator(np.random.PCG64(seed))  # test data
    words = g.choice(v, 60, replace=False)
    tokens = words[np.minimum(g.geometric(0.08, n_tokens) - 1, 59)]  # skewed counts, like text
    self_cols = np.where(tokens % 4 == 0, -1, tokens)
    key = keyed.ReleaseKey.from_seed(seed)
    streams, positions = np.arange(n_tokens) // 50, np.arange(n_tokens) % 50
    ts = TorchExpSampler(y, eps, center)
    got = sample_tokens(ts, y, tokens, self_cols, key, streams, positions, block_rows=16)
    # the CPU sampler on the same blocks of distinct words and the same keyed streams
    uniq, first, inverse, counts = np.unique(tokens, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    kern = sampling.DistanceKernel(y, eps, center)
    ref = np.empty(n_tokens, dtype=np.int64)
    cums, us = {}, np.empty(n_tokens, dtype=np.uint64)
    for s in range(0, len(uniq), 16):
        e = min(len(uniq), s + 16)
        occ = order[bounds[s]:bounds[e]]
        st, pos = streams[occ], positions[occ]

        def uniforms(t):
            return keyed.keyed_uniform_below(key, st, pos, keyed.MAIN, t)

        if backend == "fused":
            ref[occ] = sampling.fused_sample(kern, y[uniq[s:e]], self_cols[first[s:e]], counts[s:e], uniforms,
                                             DEFAULT_ETA)
        else:
            ref[occ] = sampling.sample_block(kern.scaled_sq(y[uniq[s:e]]), self_cols[first[s:e]], counts[s:e],
                                             None, DEFAULT_ETA, uniforms=uniforms)
        cum = ts.integer_weights(ts.scaled_sq(y[uniq[s:e]]), self_cols[first[s:e]]).numpy()
        r = np.repeat(np.arange(e - s), counts[s:e])
        us[occ] = keyed.keyed_uniform_below(key, st, pos, keyed.MAIN, cum[r, -1].astype(np.uint64))
        for i in range(e - s):
            cums[int(uniq[s + i])] = cum[i]
    return tokens, got, ref, cums, us


def test_seeded_draws_equal_numpy_backend(monkeypatch):
    """10,000 draws, every one equal: the two integer laws differ by a few units of 2^62 per
    weight, so a tie has probability below V * 8 / 2^62 ~ 5e-15 per draw (about 5e-11 for all)."""
    tokens, got, ref, _, _ = _draws("numpy", monkeypatch, 3.0, 10_000)
    assert len(np.unique(got)) > 100  # a real spread of outputs, not a degenerate law
    assert (got == ref).all()


@pytest.mark.parametrize("backend", ["numba", "fused"])
@pytest.mark.parametrize("eps", [1.0, 3.0])
def test_seeded_draws_equal_numba_except_ties(monkeypatch, eps, backend):
    """10,000 draws against the numba kernel, whose exp is accurate to 1e-8: a draw may differ
    only at a float tie, i.e. when its uniform lies within the weights' error
    (2e-8 of the total) of a cumulative boundary between the two answers. The expected
    number of ties is sum over draws of sum_j |cum_j - cum'_j| / C <~ 10,000 * 2e-8 * V / 2
    (3e-1 at most, 3e-3 measured); more than 3 has probability < 1e-3 even at the bound."""
    tokens, got, ref, cums, us = _draws(backend, monkeypatch, eps, 10_000)
    differ = np.flatnonzero(got != ref)
    assert len(differ) <= 3
    for k in differ:
        cum = cums[int(tokens[k])]
        lo, hi = sorted((int(got[k]), int(ref[k])))
        gap = np.abs(cum[lo:hi].astype(np.float64) - float(us[k])).min()
        assert gap <= WEIGHT_TOL * float(cum[-1]) + V, f"draw {k} differs without a tie"
    # and the draws are the torch sampler's own law: each u falls in its own interval
    c = np.stack([cums[int(t)] for t in tokens])
    j = got
    below = np.where(j > 0, c[np.arange(len(j)), np.maximum(j - 1, 0)], 0)
    assert ((below <= us.astype(np.int64)) & (us.astype(np.int64) < c[np.arange(len(j)), j])).all()


def test_draws_do_not_depend_on_block_size():
    y, center, _, _ = _setup(3.0)
    g = np.random.Generator(np.random.PCG64(9))  # test data
    tokens = g.choice(V, 2000)
    sc = np.where(tokens % 2 == 0, tokens, -1)
    key = keyed.ReleaseKey.from_seed(1)
    st, pos = np.arange(2000), np.zeros(2000, dtype=np.int64)
    ts = TorchExpSampler(y, 3.0, center)
    a = sample_tokens(ts, y, tokens, sc, key, st, pos, block_rows=7)
    b = sample_tokens(ts, y, tokens, sc, key, st, pos, block_rows=1000)
    seen = []
    c = sample_tokens(ts, y, tokens, sc, key, st, pos, block_rows=300, progress=seen.append)
    assert (a == b).all() and (a == c).all()
    assert sum(seen) == 2000


def test_search_is_exact_at_boundaries():
    cum = torch.tensor([[3, 3 + 2**61, 2**62, 2**62 + 5], [1, 2, 3, 4]], dtype=torch.int64)
    rows = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1])
    u = torch.tensor([0, 2, 3, 2**62 - 1, 2**62 + 4, 0, 1, 2, 3])
    assert TorchExpSampler.search(cum, rows, u).tolist() == [0, 0, 1, 2, 3, 0, 1, 2, 3]


def test_accounted_exp_error_is_the_cpu_one():
    assert _torch_kernel.TORCH_EXP_RELATIVE_ERROR < sampling.EXP_RELATIVE_ERROR
    assert _torch_kernel.exp_relative_error() == sampling.EXP_RELATIVE_ERROR


def test_bad_arguments():
    y, center, rows, sc = _setup(1.0, v=50)
    ts = TorchExpSampler(y, 1.0, center)
    with pytest.raises(ParameterError):
        ts.integer_weights(ts.scaled_sq(y[:3]), [0, 1])
    with pytest.raises(ParameterError):
        ts.sample(y[:2], [-1, -1], [1, -1], lambda t: np.zeros(len(t), np.uint64))
    with pytest.raises(ParameterError):
        TorchExpSampler(y, 1.0, center, eta=0.0)


# ---------------------------------------------------------------------------- the mechanisms' hook
def _emb(v=3000, seed=0):
    from textdp.embeddings import Embeddings

    return Embeddings([f"w{i}" for i in range(v)], _table(v, seed=seed, scale=0.62), source="test", kind="word",
                      lowercase=True)


@pytest.mark.parametrize("mech_name", ["santext", "santext+"])
def test_mechanism_on_the_torch_sampler_gives_the_same_release(mech_name):
    """sampler_device (set by device="cuda") routes SanText/SanText+ through the torch kernel; on
    torch's CPU device a seeded release equals the numba/numpy one (a tie has probability ~1e-7
    per token here: none expected in 6,000 tokens) and epsilon0 is unchanged."""
    from textdp.sanitize import make_mechanism

    emb = _emb()
    g = np.random.Generator(np.random.PCG64(4))  # test data
    texts = [" ".join(f"w{int(i)}" for i in g.zipf(1.2, 30) % 3000) for _ in range(200)]
    kw = dict(output_vocabulary=[f"w{i}" for i in range(0, 3000, 2)], rng=7)
    a = make_mechanism(mech_name, emb, 3.0, **kw)
    b = make_mechanism(mech_name, emb, 3.0, **kw)
    b.sampler_device = "cpu"
    out_a, out_b = a.sanitize(texts), b.sanitize(texts)
    assert b._torch_cache is not None  # the torch sampler ran
    assert out_a == out_b
    assert sum(x != y for x, y in zip(" ".join(out_a).split(), " ".join(texts).split())) > 1000  # words did change
    assert a.sampling_epsilon0 == b.sampling_epsilon0 > 0


def test_device_option_of_the_mechanisms(monkeypatch):
    from textdp.sanitize import FBDD, SanText

    emb = _emb(200)
    assert SanText(emb, 1.0, output_vocabulary="full").sampler_device is None  # default: the CPU sampler
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ParameterError, match="sees no CUDA device"):
        SanText(emb, 1.0, device="cuda")
    assert SanText(emb, 1.0, output_vocabulary="full", device="auto").sampler_device is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert SanText(emb, 1.0, output_vocabulary="full", device="auto").sampler_device == "cuda"
    with pytest.raises(ParameterError, match="fbdd has no GPU sampler"):
        FBDD(emb, 1.0, device="cuda")
    assert FBDD(emb, 1.0, output_vocabulary="full", device="auto").device == "cpu"


def test_sanitize_cli_device(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n", "utf-8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = CliRunner().invoke(app, ["sanitize", str(src), "-e", "3", "--device", "cuda", "-o", str(tmp_path / "o.txt")])
    assert r.exit_code == 2 and "sees no CUDA device" in r.output and not (tmp_path / "o.txt").exists()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", "fbdd", "-e", "3", "--device", "cuda",
                                 "-o", str(tmp_path / "o.txt")])
    assert r.exit_code == 2 and "fbdd has no GPU sampler" in r.output
