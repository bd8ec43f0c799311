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


def test_laplace_vectors_have_the_multivariate_laplace_law():
    key = ReleaseKey.from_seed(5)
    n, m, scale = 30_000, 5, 0.4
    z = keyed.keyed_laplace_vectors(key, np.arange(n), np.zeros(n, dtype=np.int64), keyed.MAIN, m, scale)
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(a=m, scale=scale).cdf).pvalue > ALPHA
    u = z / r[:, None]
    assert stats.kstest((u[:, 0] + 1) / 2, stats.beta((m - 1) / 2, (m - 1) / 2).cdf).pvalue > ALPHA
    assert math.isclose(keyed.LAPLACE_TRUNCATION, 2.0**-52)
