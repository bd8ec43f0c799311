"""Per-record keyed randomness (textdp.noise.keyed; issue 12 items 8-9): a real ChaCha20, a 256-bit
key never shown, exact laws, streams addressed by record and token only."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from textdp.noise import keyed
from textdp.noise.keyed import ReleaseKey

ALPHA = 1e-3


def test_chacha20_block_matches_rfc8439_test_vector():
    """RFC 8439 Sec. 2.3.2: key 00..1f, block counter 1, nonce 00:00:00:09:00:00:00:4a:00:00:00:00
    (state words 12-15 = 1, 0x09000000, 0x4a000000, 0)."""
    key = ReleaseKey(bytes(range(32)), seeded=True)
    out = keyed.chacha20_block(key, 1 | (0x09000000 << 32), 0x4A000000)
    expected = ("e4e7f110 15593bd1 1fdd0f50 c47120a3 c7f4d1c7 0368c033 9aaa2204 4e6cd4c3 "
                "466482d2 09aa9f07 05d7c214 a2028bd9 d19c12b5 b94e16de e883d0cb 4e3c50a2").split()
    assert [f"{w:08x}" for w in out] == expected


def test_release_key_is_256_bits_from_the_os_and_never_shown(monkeypatch):
    import secrets

    asked = []
    real = secrets.token_bytes
    monkeypatch.setattr(secrets, "token_bytes", lambda n: asked.append(n) or real(n))
    k = ReleaseKey.fresh()
    assert asked == [32] and k.words.shape == (8,) and not k.seeded
    assert "secret" in repr(k) and str(int(k.words[0])) not in repr(k)
    assert ReleaseKey.from_seed(3).words.tolist() == ReleaseKey.from_seed(3).words.tolist()
    assert ReleaseKey.from_seed(3).words.tolist() != ReleaseKey.from_seed(3, release=1).words.tolist()


def test_generic_generator_is_keyed_with_256_bits(monkeypatch):
    """random_source(None) keys ChaCha20 directly (not through SeedSequence's 128-bit pool)."""
    import secrets

    from textdp.noise.rng import random_source

    bits = []
    real = secrets.randbits
    monkeypatch.setattr(secrets, "randbits", lambda n: bits.append(n) or real(n))
    src = random_source(None)
    assert bits == [256] and src.seed_sequence is None and src.key is not None
    g = src.generator()
    setup = g.bit_generator.state["state"]["keysetup"].astype(np.uint64).tolist()  # 8 x 32-bit key words
    assert sum(int(w) << (32 * i) for i, w in enumerate(setup)) == src.key
    a, b = src.spawn(2)
    assert a.integers(0, 2**62) != b.integers(0, 2**62)
    assert "key" not in repr(src) or str(src.key) not in repr(src)


def test_streams_depend_only_on_record_and_position():
    key = ReleaseKey.from_seed(1)
    s = np.array([5, 5, 9, 0]), np.array([0, 1, 0, 3])
    w = keyed.keyed_words(key, *s, keyed.MAIN, 3)
    again = keyed.keyed_words(key, s[0][::-1], s[1][::-1], keyed.MAIN, 3)[::-1]
    np.testing.assert_array_equal(w, again)  # order of the request does not matter
    assert len({tuple(r) for r in w.tolist()}) == 4
    other = keyed.keyed_words(key, *s, keyed.COIN, 3)
    assert not np.array_equal(w, other)  # purposes are separate streams


def test_uniform_below_is_uniform():
    key = ReleaseKey.from_seed(2)
    n = 60_000
    for bound in (7, 2**40 + 3, 2**62 + 12345):
        u = keyed.keyed_uniform_below(key, np.arange(n), np.zeros(n, dtype=np.int64), keyed.MAIN,
                                      np.full(n, bound, dtype=np.uint64))
        assert u.max() < bound
        if bound == 7:
            counts = np.bincount(u.astype(np.int64), minlength=7)
            assert stats.chisquare(counts).pvalue > ALPHA
        else:
            assert stats.kstest(u.astype(np.float64) / float(bound), "uniform").pvalue > ALPHA


@pytest.mark.parametrize("p", [0.3, 2.0**-20 * 3, 0.999])
def test_bernoulli_is_exact(p):
    key = ReleaseKey.from_seed(4)
    n = 400_000
    x = keyed.keyed_bernoulli(key, np.arange(n), np.zeros(n, dtype=np.int64), keyed.COIN, p)
    assert stats.binomtest(int(x.sum()), n, p).pvalue > ALPHA


@pytest.mark.parametrize("m", [5, 50])  # 50: the radius is -ln of 4 products of keyed.RADIUS_RUN uniforms
def test_laplace_vectors_have_the_multivariate_laplace_law(m):
    key = ReleaseKey.from_seed(5)
    n, scale = 30_000, 0.4
    z = keyed.keyed_laplace_vectors(key, np.arange(n), np.zeros(n, dtype=np.int64), keyed.MAIN, m, scale)
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(a=m, scale=scale).cdf).pvalue > ALPHA
    u = z / r[:, None]
    assert stats.kstest((u[:, 0] + 1) / 2, stats.beta((m - 1) / 2, (m - 1) / 2).cdf).pvalue > ALPHA
    assert math.isclose(keyed.LAPLACE_TRUNCATION, 2.0**-52)


# -- bit vectors (keyed_bernoulli_bits: LP/OLP-LDA's randomized response) --------------------------------------
@pytest.mark.parametrize("p", [0.3, 0.1, 2.0**-20 * 3, 0.999])
def test_bernoulli_bits_are_exact(p):
    key = ReleaseKey.from_seed(6)
    x = keyed.keyed_bernoulli_bits(key, np.arange(40), 10_007, keyed.BITS, p)  # 10_007: a partial last block
    assert x.shape == (40, 10_007) and x.dtype == np.bool_
    assert stats.binomtest(int(x.sum()), x.size, p).pvalue > ALPHA
    if p == 0.3:  # neighbouring bits (same block, next block) and records are independent
        pairs = x[:, :-1].astype(np.int64) * 2 + x[:, 1:]
        obs = np.bincount(pairs.ravel(), minlength=4)
        exp = np.array([(1 - p) ** 2, (1 - p) * p, p * (1 - p), p * p]) * pairs.size
        assert stats.chisquare(obs, exp).pvalue > ALPHA
        assert stats.binomtest(int((x[:-1] & x[1:]).sum()), x[1:].size, p * p).pvalue > ALPHA


def test_bernoulli_bits_take_an_exact_dyadic_fraction():
    from fractions import Fraction

    key = ReleaseKey.from_seed(7)
    f = 5e-324  # the smallest subnormal: f / 2 rounds to 0 as a float, Fraction(f) / 2 does not
    assert f / 2 == 0.0
    assert not keyed.keyed_bernoulli_bits(key, np.arange(3), 50, keyed.BITS, Fraction(f) / 2).any()
    np.testing.assert_array_equal(keyed.keyed_bernoulli_bits(key, [1, 2], 20, keyed.BITS, Fraction(0.3)),
                                  keyed.keyed_bernoulli_bits(key, [1, 2], 20, keyed.BITS, 0.3))
    assert keyed.keyed_bernoulli_bits(key, [0], 5, keyed.BITS, 1.0).all()
    assert not keyed.keyed_bernoulli_bits(key, [0], 5, keyed.BITS, 0).any()
    with pytest.raises(Exception, match="dyadic"):
        keyed.keyed_bernoulli_bits(key, [0], 5, keyed.BITS, Fraction(1, 3))
    with pytest.raises(Exception, match="two different purposes"):
        keyed.keyed_bernoulli_bits(key, [0], 5, keyed.BITS, 0.5, tie_purpose=keyed.BITS)


def test_bernoulli_bit_depends_only_on_record_and_index():
    """Bit j of record r is the same whatever n_bits, whichever other records are requested and in
    what order (chunking, workers), and it is word j % 8 of block ((j >> 15), BITS, (j >> 3) & 4095)."""
    key = ReleaseKey.from_seed(8)
    p = 0.37
    full = keyed.keyed_bernoulli_bits(key, [3, 11, 40_000], 70_000, keyed.BITS, p)  # > 32 768 bits: 3 positions
    for n_bits in (1, 7, 8, 9, 1000, 32_768, 32_769, 65_600):
        part = keyed.keyed_bernoulli_bits(key, [11], n_bits, keyed.BITS, p)
        np.testing.assert_array_equal(part[0], full[1, :n_bits])
    alone = keyed.keyed_bernoulli_bits(key, [40_000, 5, 3], 70_000, keyed.BITS, p)
    np.testing.assert_array_equal(alone[[2, 0]], full[[0, 2]])
    # the address of each bit: the top 62 bits of its word against p's first 62-bit word (no tie here)
    from textdp.noise.exact import _dyadic_words

    p0 = _dyadic_words(p)[0][0]
    for j in (0, 5, 8, 32_767, 32_768, 32_775, 69_999):
        blk = (j >> 3) & 4095
        w = keyed.keyed_words(key, [11], [j >> 15], keyed.BITS, blk * 8 + 8)[0, blk * 8 + j % 8]
        assert full[1, j] == (int(w) >> 2 < p0)
    assert not np.array_equal(full[0], keyed.keyed_bernoulli_bits(key, [3], 70_000, keyed.MAIN, p)[0])


def test_bernoulli_bit_ties_are_resolved_from_the_tie_purpose():
    """Force the 2^-62 tie: p's first word is the main word of bit j itself, and p's second word 2^61
    (one half); the bit is then decided by the first word at (position j, BITS_TIE)."""
    from fractions import Fraction

    key = ReleaseKey.from_seed(9)
    for r, j in ((0, 0), (4, 13), (7, 40_001)):
        blk = (j >> 3) & 4095
        u = int(keyed.keyed_words(key, [r], [j >> 15], keyed.BITS, blk * 8 + 8)[0, blk * 8 + j % 8]) >> 2
        p = Fraction(u * 2**62 + 2**61, 2**124)
        tie = int(keyed.keyed_words(key, [r], [j], keyed.BITS_TIE, 1)[0, 0]) >> 2
        bits = keyed.keyed_bernoulli_bits(key, [r], j + 1, keyed.BITS, p)
        assert bits[0, j] == (tie < 2**61)
        other = keyed.keyed_bernoulli_bits(key, [r], j + 1, keyed.BITS, p, tie_purpose=keyed.COIN)
        coin = int(keyed.keyed_words(key, [r], [j], keyed.COIN, 1)[0, 0]) >> 2
        assert other[0, j] == (coin < 2**61)
    # p's expansion ends at the tie word: U = p exactly is not < p
    r, j = 2, 3
    u = int(keyed.keyed_words(key, [r], [0], keyed.BITS, 8)[0, j]) >> 2
    assert not keyed.keyed_bernoulli_bits(key, [r], 4, keyed.BITS, Fraction(u, 2**62))[0, j]
