"""Distribution tests of SanText, SanText+ and FBDD (significance level 1e-3 each,
fixed seeds, sample sizes large enough that a wrong distribution fails)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from textdp.errors import ParameterError
from textdp.sanitize import FBDD, SanText, SanTextPlus
from textdp.sanitize.sampling import sample_categorical_rows


ALPHA = 1e-3


def _chisq(observed_idx, probs):
    obs = np.bincount(observed_idx, minlength=len(probs))
    exp = probs * len(observed_idx)
    keep = exp > 0
    assert obs[~keep].sum() == 0, "drew an outcome of probability zero"
    # pool tiny cells so the chi-square approximation holds
    order = np.argsort(exp[keep])
    e, o = exp[keep][order], obs[keep][order]
    small = np.cumsum(e) < 5
    if small.any():
        e = np.concatenate([[e[small].sum()], e[~small]])
        o = np.concatenate([[o[small].sum()], o[~small]])
    return stats.chisquare(o, e * o.sum() / e.sum()).pvalue


def _pairwise(v):
    v = v.astype(np.float64)
    return np.sqrt(((v[:, None, :] - v[None, :, :]) ** 2).sum(-1))


def test_probabilities_match_formula(small_emb):
    m = SanText(small_emb, epsilon=2.0, output_vocabulary="full", rng=1)
    p = m.probabilities(list(range(len(small_emb))))
    d = _pairwise(small_emb.vectors)
    ref = np.exp(-1.0 * d)
    ref /= ref.sum(axis=1, keepdims=True)
    assert np.allclose(p, ref, rtol=1e-10, atol=0)
    assert np.allclose(p.sum(axis=1), 1.0)


@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_santext_sampled_frequencies_match_exact_distribution(small_emb, eps):
    m = SanText(small_emb, epsilon=eps, output_vocabulary="full", rng=7)
    for word in (0, 5):
        draws = m.sample_rows(np.full(30000, word))  # heavy-row path
        assert _chisq(m.output_positions(draws), m.probabilities([word])[0]) > ALPHA
    # light-row path: many distinct words with few draws each, pooled per word
    rows = np.tile(np.arange(len(small_emb)), 3000)
    draws = m.output_positions(m.sample_rows(rows)).reshape(3000, -1)
    p = m.probabilities(list(range(len(small_emb))))
    for w in range(len(small_emb)):
        assert _chisq(draws[:, w], p[w]) > ALPHA / len(small_emb)


def test_block_sampler_light_and_heavy_paths_and_rejection():
    rng = np.random.Generator(np.random.PCG64(5))
    v = 700
    w = (rng.random(v) ** 6).astype(np.float32)  # skewed weights, many chunks
    w[100:140] = 0  # a zero chunk region must never be drawn
    probs = w.astype(np.float64) / w.astype(np.float64).sum()
    block = np.tile(w, (4000, 1))
    counts = np.ones(4000, dtype=np.int64)  # light path: chunk search + rejection
    from textdp.noise import make_rng

    g = make_rng(11)
    d1 = sample_categorical_rows(block, counts, g)
    assert _chisq(d1, probs) > ALPHA
    d2 = sample_categorical_rows(w[None, :], np.array([40000]), g)  # heavy path
    assert _chisq(d2, probs) > ALPHA
    assert not np.isin(d1, np.arange(100, 140)).any() and not np.isin(d2, np.arange(100, 140)).any()


def test_ratio_bound_holds_for_all_pairs(make_emb):
    emb = make_emb(v=15, m=3, seed=9)
    d = _pairwise(emb.vectors)
    for eps in (0.3, 2.0, 8.0):
        p = SanText(emb, epsilon=eps, output_vocabulary="full", rng=0).probabilities(list(range(15)))
        # p[x, y] / p[x', y] <= exp(eps * d(x, x'))  for all x, x', y
        ratio = p[:, None, :] / p[None, :, :]
        bound = np.exp(eps * d)[:, :, None]
        assert (ratio <= bound * (1 + 1e-9)).all()
        # and the bound is not vacuous: some pair comes within a factor 3 of it
        assert (np.log(ratio) / np.maximum(eps * d[:, :, None], 1e-12)).max() > 0.3


def test_epsilon_to_infinity_is_identity_and_to_zero_is_uniform(small_emb):
    big = SanText(small_emb, epsilon=1e5, output_vocabulary="full", rng=3)
    assert np.allclose(big.probabilities(list(range(12))), np.eye(12))
    rows = np.repeat(np.arange(12), 50)
    assert np.array_equal(big.sample_rows(rows), rows)
    tiny = SanText(small_emb, epsilon=1e-9, output_vocabulary="full", rng=3)
    assert np.allclose(tiny.probabilities(list(range(12))), 1 / 12, atol=1e-8)
    draws = tiny.output_positions(tiny.sample_rows(np.zeros(24000, dtype=np.int64)))
    assert _chisq(draws, np.full(12, 1 / 12)) > ALPHA


def test_santext_plus_sensitive_never_emit_nonsensitive_and_keep_rate(make_emb):
    emb = make_emb(v=20, m=4, seed=4)
    # corpus counts: word i appears 20 - i times -> the rarest half is sensitive at w = 0.5
    texts = [" ".join(f"w{i}" for i in range(20) for _ in range(20 - i))]
    m = SanTextPlus(emb, epsilon=2.0, w=0.5, p=0.3, rng=2).fit(texts)
    sens = set(m.sensitive_words)
    assert sens == {f"w{i}" for i in range(10, 20)}
    assert m.guarantee.epsilon0 == pytest.approx(math.log(1 / 0.3))
    # sensitive inputs: outputs only in V_S
    out = m.sample_rows(np.repeat(np.arange(10, 20), 2000))
    assert set(emb.words[i] for i in np.unique(out)) <= sens
    # non-sensitive inputs: kept at rate 1 - p, otherwise emitted into V_S
    n = 20000
    for word in (0, 7):
        out = m.sample_rows(np.full(n, word))
        kept = int((out == word).sum())
        assert stats.binomtest(kept, n, 0.7).pvalue > ALPHA
        assert set(emb.words[i] for i in np.unique(out[out != word])) <= sens
    # a non-sensitive output is produced only by itself
    p = m.probabilities(list(range(20)))
    for y in range(10):
        col = m.output_positions([y])[0]
        assert np.count_nonzero(p[:, col]) == 1 and p[y, col] == pytest.approx(0.7)
    # exact distribution of a non-sensitive word, sampled
    out = m.output_positions(m.sample_rows(np.full(30000, 3)))
    assert _chisq(out, m.probabilities([3])[0]) > ALPHA


def test_santext_plus_edge_parameters(make_emb):
    emb = make_emb(v=10)
    texts = [" ".join(f"w{i}" for i in range(10))]
    all_sens = SanTextPlus(emb, epsilon=1.0, w=1.0, p=0.5, rng=0).fit(texts)
    st = SanText(emb, epsilon=1.0, rng=0).fit(texts)
    assert np.allclose(all_sens.probabilities(list(range(10))), st.probabilities(list(range(10))))
    none = SanTextPlus(emb, epsilon=1.0, w=0.0, p=0.0, rng=0).fit(texts)
    assert none.sanitize(texts) == texts  # nothing sensitive, nothing resampled
    assert math.isinf(none.guarantee.epsilon0)
    with pytest.raises(ParameterError, match="no sensitive word"):
        SanTextPlus(emb, epsilon=1.0, w=0.0, p=0.5, rng=0).fit(texts).sanitize(texts)
    for bad in (dict(w=1.5), dict(w=-0.1), dict(p=float("nan")), dict(p=2)):
        with pytest.raises(ParameterError):
            SanTextPlus(emb, epsilon=1.0, **bad)
    for eps in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ParameterError):
            SanText(emb, epsilon=eps)


def test_fbdd_noise_radius_and_direction_laws(make_emb):
    emb = make_emb(v=10, m=6)
    eps = 2.5
    m = FBDD(emb, epsilon=eps, output_vocabulary="full", rng=8)
    z = m.noise(20000)
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(a=6, scale=1 / eps).cdf).pvalue > ALPHA
    u = z / r[:, None]
    # the first coordinate of a uniform direction on S^{m-1}: (u1 + 1)/2 ~ Beta((m-1)/2, (m-1)/2)
    for j in (0, 5):
        assert stats.kstest((u[:, j] + 1) / 2, stats.beta((6 - 1) / 2, (6 - 1) / 2).cdf).pvalue > ALPHA
    # FBDD output = nearest word of phi(x) + z, checked against a direct search
    g = np.random.Generator(np.random.PCG64(1))
    rows = g.integers(0, 10, 500)
    from textdp.noise import make_rng

    a = m.sample_rows(rows, make_rng(5))
    noise = FBDD(emb, epsilon=eps, output_vocabulary="full").noise(500, make_rng(5))
    q = emb.vectors[rows].astype(np.float64) + noise
    ref = np.argmin(((q[:, None, :] - emb.vectors[None].astype(np.float64)) ** 2).sum(-1), axis=1)
    assert (a == ref).mean() > 0.99  # float32 search may break near-ties differently
    assert m.guarantee.epsilon == eps and m.guarantee.kind == "metric-dp"
    # large epsilon: identity
    assert np.array_equal(FBDD(emb, epsilon=1e6, output_vocabulary="full", rng=0).sample_rows(rows), rows)


def test_seeded_runs_reproduce_and_secure_runs_differ(small_emb):
    texts = ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w0"] * 20
    a = SanText(small_emb, epsilon=0.5, rng=42).sanitize(texts)
    b = SanText(small_emb, epsilon=0.5, rng=42).sanitize(texts)
    c = SanText(small_emb, epsilon=0.5).sanitize(texts)
    assert a == b and a != c
