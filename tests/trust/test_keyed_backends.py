"""The keyed samplers' numpy backend (short jobs, no numba start-up) draws exactly what the numba
kernels draw: the same ChaCha20 words, the same acceptance, the same floats (issue 14, item 3)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from textdp.noise import keyed


@pytest.fixture
def backend(monkeypatch):
    """Run a call under one backend: ``backend("numpy", f, *args)``."""

    def run(name, f, *args, **kwargs):
        monkeypatch.setenv(keyed.BACKEND_ENV, name)
        try:
            return f(*args, **kwargs)
        finally:
            monkeypatch.delenv(keyed.BACKEND_ENV)

    return run


def _addresses(n, seed=0):
    g = np.random.default_rng(seed)  # test inputs only (record indices and token positions)
    return g.integers(0, 2**40, n), g.integers(0, 2**48, n)


def test_numpy_chacha20_matches_rfc8439_and_the_kernel():
    key = keyed.ReleaseKey(bytes(range(32)), seeded=True)
    out = keyed.chacha20_block(key, 1 | (0x09000000 << 32), 0x4A000000)  # the numpy backend
    expected = ("e4e7f110 15593bd1 1fdd0f50 c47120a3 c7f4d1c7 0368c033 9aaa2204 4e6cd4c3 "  # RFC 8439 Sec. 2.3.2
                "466482d2 09aa9f07 05d7c214 a2028bd9 d19c12b5 b94e16de e883d0cb 4e3c50a2").split()
    assert [f"{w:08x}" for w in out] == expected
    ref = np.empty(16, np.uint64)
    keyed._kernels()._block(key.words, np.uint64(1 | (0x09000000 << 32)), np.uint64(0x4A000000), ref)
    np.testing.assert_array_equal(out, ref.astype(np.uint32))


def test_lane_parallel_blocks_are_the_scalar_blocks():
    """_blocks_lanes (the vectorised ChaCha20 of the kernels) gives _block's words for every lane, for lane
    counts below, at and above one batch, with counters and streams using both 32-bit halves."""
    kn = keyed._kernels()
    key = keyed.ReleaseKey.from_seed(5).words
    rng = np.random.Generator(np.random.PCG64(11))  # test inputs, not a release
    for n in (1, 7, kn.LANES):
        counters = rng.integers(0, 2**63, n, dtype=np.uint64) | np.uint64(1 << 63)
        streams = rng.integers(0, 2**63, n, dtype=np.uint64)
        x = np.empty((16, kn.LANES), dtype=np.uint32)
        kn._blocks_lanes(key, counters, streams, n, x)
        ref = np.empty(16, dtype=np.uint64)
        for i in range(n):
            kn._block(key, counters[i], streams[i], ref)
            np.testing.assert_array_equal(x[:, i], ref.astype(np.uint32))


@pytest.mark.parametrize("n_words", [1, 7, 8, 9, 40])
def test_words_are_the_same_on_both_backends(backend, n_words):
    key = keyed.ReleaseKey.from_seed(3)
    s, p = _addresses(300)
    a = backend("numpy", keyed.keyed_words, key, s, p, keyed.MIX, n_words)
    b = backend("numba", keyed.keyed_words, key, s, p, keyed.MIX, n_words)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bounds", [
    "small", "powers", "huge",  # bounds 1..1000, powers of two and their neighbours, and above 2**61
])
def test_uniform_below_is_the_same_on_both_backends(backend, bounds):
    key = keyed.ReleaseKey.from_seed(5)
    n = 2000
    s, p = _addresses(n, 1)
    g = np.random.default_rng(2)
    if bounds == "small":
        b = g.integers(1, 1000, n).astype(np.uint64)
    elif bounds == "powers":
        e = g.integers(0, 62, n).astype(np.uint64)
        b = (np.uint64(1) << e) + g.integers(-1, 2, n).astype(np.int64).astype(np.uint64)
        b[b == 0] = 1
    else:
        b = g.integers(2**61 + 1, 2**63 - 1, n, dtype=np.int64).astype(np.uint64)
    a = backend("numpy", keyed.keyed_uniform_below, key, s, p, keyed.MAIN, b)
    c = backend("numba", keyed.keyed_uniform_below, key, s, p, keyed.MAIN, b)
    np.testing.assert_array_equal(a, c)
    assert (a < b).all()


@pytest.mark.parametrize("p", [0.5, 0.3, 2.0**-70 * 3, 1 - 2.0**-53, 0.1234567])
def test_bernoulli_is_the_same_on_both_backends(backend, p):
    key = keyed.ReleaseKey.from_seed(7)
    s, pos = _addresses(3000, 3)
    a = backend("numpy", keyed.keyed_bernoulli, key, s, pos, keyed.COIN, p)
    b = backend("numba", keyed.keyed_bernoulli, key, s, pos, keyed.COIN, p)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("p", [0.5, 0.3, Fraction(0.3) / 2])
def test_bernoulli_bits_are_the_same_on_both_backends(backend, p):
    key = keyed.ReleaseKey.from_seed(9)
    s = [0, 5, 123_456]
    a = backend("numpy", keyed.keyed_bernoulli_bits, key, s, 70_001, keyed.BITS, p)  # > 32 768 bits: 3 positions
    b = backend("numba", keyed.keyed_bernoulli_bits, key, s, 70_001, keyed.BITS, p)
    np.testing.assert_array_equal(a, b)


def test_bernoulli_bit_ties_are_the_same_on_both_backends(backend):
    """A bit whose word equals p's first word exactly is decided by the tie purpose on both."""
    key = keyed.ReleaseKey.from_seed(11)
    u = int(keyed.keyed_words(key, [4], [0], keyed.BITS, 8)[0, 2]) >> 2
    for p in (Fraction(u, 2**62), Fraction(2 * u + 1, 2**63), Fraction(2 * u - 1, 2**63)):
        a = backend("numpy", keyed.keyed_bernoulli_bits, key, [4], 8, keyed.BITS, p)
        b = backend("numba", keyed.keyed_bernoulli_bits, key, [4], 8, keyed.BITS, p)
        np.testing.assert_array_equal(a, b)


# 15, 16, 17, 33: either side of a run of keyed.RADIUS_RUN uniforms multiplied before one logarithm;
# 300: more blocks per token than one batch of lanes holds
@pytest.mark.parametrize("dim", [1, 2, 3, 15, 16, 17, 33, 50, 300])
def test_laplace_vectors_are_the_same_on_both_backends(backend, monkeypatch, dim):
    key = keyed.ReleaseKey.from_seed(13)
    s, p = _addresses(min(60, 4096 // dim), 4)  # keyed_laplace_vectors takes the numpy twin up to 4096 values only
    with monkeypatch.context() as mp:  # the numpy run must not fall through to the kernel
        mp.setattr(keyed, "_kernels", lambda: pytest.fail("the numpy backend called the numba kernel"))
        a = backend("numpy", keyed.keyed_laplace_vectors, key, s, p, keyed.MAIN, dim, 0.37)
    b = backend("numba", keyed.keyed_laplace_vectors, key, s, p, keyed.MAIN, dim, 0.37)
    np.testing.assert_array_equal(a, b)  # bit for bit: same words, same float operations


def test_auto_backend_uses_numpy_for_a_short_job_then_numba():
    """auto, in a fresh process: a short job draws without importing numba; past
    NUMPY_BLOCK_BUDGET blocks the numba kernels take over (same draws either way)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from textdp.noise import keyed\n"
        "key = keyed.ReleaseKey.from_seed(1)\n"
        "keyed.NUMPY_BLOCK_BUDGET = 100\n"
        "a = keyed.keyed_uniform_below(key, np.arange(60), np.zeros(60, np.int64), keyed.MAIN, 1000)\n"
        "print('numba' in sys.modules)\n"
        "b = keyed.keyed_uniform_below(key, np.arange(60), np.zeros(60, np.int64), keyed.MAIN, 1000)\n"
        "print('textdp.noise._keyed_kernels' in sys.modules, bool((a == b).all()))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != keyed.BACKEND_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_backend_variable_is_checked(monkeypatch):
    monkeypatch.setenv(keyed.BACKEND_ENV, "bogus")
    with pytest.raises(Exception, match="TEXTDP_KEYED_BACKEND"):
        keyed.keyed_words(keyed.ReleaseKey.from_seed(1), [0], [0], keyed.MAIN, 1)


def test_record_uniforms_are_the_same_on_both_backends_and_are_the_documented_words(backend):
    """keyed_record_uniforms (HDP-LDA's Gibbs uniforms, issue 16): both backends give the same floats; value j
    of record r at step t is word j % 8 of the block at position t << 20 | j >> 15, block (j >> 3) & 4095;
    a record's values do not depend on the other records requested."""
    key = keyed.ReleaseKey.from_seed(11)
    streams, lengths = np.array([5, 0, 17, 9, 123456789]), np.array([3, 0, 33000, 9, 1])
    a = backend("numpy", keyed.keyed_record_uniforms, key, streams, lengths, 4)
    b = backend("numba", keyed.keyed_record_uniforms, key, streams, lengths, 4)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (33013,) and a.min() >= 0.0 and a.max() < 1.0
    rec17 = a[3:3 + 33000]
    w = keyed.keyed_words(key, [17], [4 << 20], keyed.GIBBS, 32768)[0]
    np.testing.assert_array_equal(rec17[:32768], (w >> np.uint64(11)).astype(np.float64) * 2.0**-53)
    w = keyed.keyed_words(key, [17], [(4 << 20) | 1], keyed.GIBBS, 232)[0]  # values 32768.. use the next position
    np.testing.assert_array_equal(rec17[32768:], (w >> np.uint64(11)).astype(np.float64) * 2.0**-53)
    np.testing.assert_array_equal(keyed.keyed_record_uniforms(key, [9], [9], 4), a[-10:-1])
    assert not np.array_equal(keyed.keyed_record_uniforms(key, [9], [9], 5), a[-10:-1])  # another step
    with pytest.raises(keyed.ParameterError):
        keyed.keyed_record_uniforms(key, [1], [2], 2**28)
