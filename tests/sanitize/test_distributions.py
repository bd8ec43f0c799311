"""Distribution tests of SanText, SanText+ and FBDD (significance level 1e-3 each,
fixed seeds, sample sizes large enough that a wrong distribution fails).

SanText/SanText+ are tested on their secure (float-safe, integer-weighted)
sampler, the default and only path, with both backends (numba kernel and the
numpy fallback through textdp.noise.ExactCategorical)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import textdp.sanitize.perturbation as mechanisms_module
from textdp.audit.metric import worst_excess
from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA, ExactCategorical, make_rng
from textdp.sanitize import FBDD, SanText, SanTextPlus, sampling

ALPHA = 1e-3
#: registry coverage (tests/test_registry_coverage.py): the exact laws are checked against the draws here
#: (chi-square), and the audits at the claimed epsilon are the exact ratio-bound tests over every pair of
#: words (test_ratio_bound_holds_for_all_pairs, test_santext_plus_ratio_bound_on_sensitive_outputs); FBDD's
#: noise laws are tested here, its audit lives with the other perturbation mechanisms
DISTRIBUTION_TESTED = ("santext", "santext+", "fbdd")
AUDITED = ("santext", "santext+")
BACKENDS = ["numba", "numpy"]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    if request.param == "numba" and not sampling.numba_available():
        pytest.skip("numba not installed")
    monkeypatch.setenv(sampling.BACKEND_ENV, request.param)
    return request.param


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


def _worst_ratio_excess(p, d, eps):
    """max over x != x', y of log p[x,y] - log p[x',y] - eps d(x,x') (inf where an output is possible for
    one input only): the metric audit's exact check (textdp.audit.metric.worst_excess)."""
    return worst_excess(p, eps * d)


def test_ideal_probabilities_match_formula(small_emb):
    m = SanText(small_emb, epsilon=2.0, output_vocabulary="full", rng=1)
    p = m.ideal_probabilities(list(range(len(small_emb))))
    d = _pairwise(small_emb.vectors)
    ref = np.exp(-1.0 * d)
    ref /= ref.sum(axis=1, keepdims=True)
    assert np.allclose(p, ref, rtol=1e-10, atol=0)
    assert np.allclose(p.sum(axis=1), 1.0)


def test_probabilities_are_the_mixed_law_actually_sampled(small_emb, backend):
    m = SanText(small_emb, epsilon=2.0, output_vocabulary="full", rng=1)
    words = list(range(len(small_emb)))
    real = m.probabilities(words)
    ideal = m.ideal_probabilities(words)
    v = len(small_emb)
    mixed = (1 - DEFAULT_ETA) * ideal + DEFAULT_ETA / v
    assert np.allclose(real.sum(axis=1), 1.0, rtol=1e-12)
    # float-safe law = (1 - eta) p + eta/V up to the float slack (numba exp: 1e-8 relative)
    assert np.abs(real / mixed - 1).max() < 1e-7
    assert np.abs(real / ideal - 1).max() > DEFAULT_ETA / 10  # the mix is really there
    # and it is exactly the integer law of textdp.noise's construction on the same log-weights
    logw = -np.sqrt(np.maximum(m._kernel(m.output_rows).scaled_sq(small_emb.vectors[words]), 0))
    np.fill_diagonal(logw, 0.0)
    ref = ExactCategorical(logw, DEFAULT_ETA).probabilities()
    assert np.abs(real / ref - 1).max() < 1e-7


def test_no_outcome_has_probability_zero_even_where_the_ideal_underflows(make_emb, backend):
    emb = make_emb(v=10, m=3, seed=5, scale=50.0)  # distances ~100: exp(-eps d/2) underflows at eps=40
    m = SanText(emb, epsilon=40.0, output_vocabulary="full", rng=0)
    ideal = m.ideal_probabilities(list(range(10)))
    assert (ideal == 0).any()  # the float softmax gives zeros: the support would depend on the input
    real = m.probabilities(list(range(10)))
    assert (real > 0).all() and real.min() >= DEFAULT_ETA / 10 * (1 - 1e-6)
    # the guarantee still holds for the realised law: log-ratio <= eps d + epsilon0
    d = _pairwise(emb.vectors)
    assert _worst_ratio_excess(real, d, 40.0) <= m.guarantee.epsilon0
    assert _worst_ratio_excess(ideal, d, 40.0) == math.inf  # ...while the float softmax breaks it


@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_santext_sampled_frequencies_match_exact_distribution(small_emb, eps, backend):
    m = SanText(small_emb, epsilon=eps, output_vocabulary="full", rng=7)
    for word in (0, 5):
        draws = m.sample_rows(np.full(30000, word))  # one row, many draws
        assert _chisq(m.output_positions(draws), m.probabilities([word])[0]) > ALPHA
    # many distinct words with few draws each, pooled per word
    rows = np.tile(np.arange(len(small_emb)), 3000)
    draws = m.output_positions(m.sample_rows(rows)).reshape(3000, -1)
    p = m.probabilities(list(range(len(small_emb))))
    for w in range(len(small_emb)):
        assert _chisq(draws[:, w], p[w]) > ALPHA / len(small_emb)


def test_sample_block_matches_its_law_with_skewed_rows():
    """Block level: rows with skewed weights, a far cluster, some rows without a self column."""
    g0 = np.random.Generator(np.random.PCG64(5))  # test data, not DP noise
    v = 700
    s = g0.random(v) * 6
    s[100:140] += 60.0  # a far region: ideal weight ~e^-60, still drawable at >= eta/V
    block = np.tile(s**2, (4000, 1))
    counts = np.ones(4000, dtype=np.int64)
    self_cols = np.full(4000, -1)
    probs = sampling.block_probabilities(block[:1].copy(), self_cols[:1])[0]
    assert (probs[100:140] > 0).all() and probs[100:140].max() < 2 * DEFAULT_ETA / v
    rng = make_rng(11)
    for numba in ([True, False] if sampling.numba_available() else [False]):
        d1 = sampling.sample_block(block.copy(), self_cols, counts, rng, numba=numba)
        assert _chisq(d1, probs) > ALPHA
        d2 = sampling.sample_block(block[:1].copy(), self_cols[:1], np.array([40000]), rng, numba=numba)
        assert _chisq(d2, probs) > ALPHA


def test_backends_agree_on_laws_and_seeded_draws(small_emb, monkeypatch):
    if not sampling.numba_available():
        pytest.skip("numba not installed")
    rows = np.repeat(np.arange(12), 500)
    res = {}
    for be in BACKENDS:
        monkeypatch.setenv(sampling.BACKEND_ENV, be)
        m = SanText(small_emb, epsilon=1.5, output_vocabulary="full", rng=21)
        res[be] = (m.probabilities(list(range(12))), m.sample_rows(rows))
    assert np.abs(res["numba"][0] / res["numpy"][0] - 1).max() < 1e-7
    assert np.array_equal(res["numba"][1], res["numpy"][1])  # same generator consumption


def test_uniform_below_is_exact_and_in_range():
    rng = make_rng(4)
    bounds = np.array([1, 2, 3, 7, 2**62 + 12345, 2**63 - 1] * 2000, dtype=np.uint64)
    u = sampling.uniform_below(bounds, rng)
    assert (u < bounds).all() and u.dtype == np.uint64
    assert (u[bounds == 1] == 0).all()
    sevens = u[bounds == 7].astype(np.int64)
    assert stats.chisquare(np.bincount(sevens, minlength=7)).pvalue > ALPHA


def test_ratio_bound_holds_for_all_pairs(make_emb, backend):
    emb = make_emb(v=15, m=3, seed=9)
    d = _pairwise(emb.vectors)
    for eps in (0.3, 2.0, 8.0, 60.0):
        m = SanText(emb, epsilon=eps, output_vocabulary="full", rng=0)
        p = m.probabilities(list(range(15)))
        eps0 = m.guarantee.epsilon0
        assert 0 < eps0 < 1e-4 * max(eps, 1.0)
        # p[x, y] / p[x', y] <= exp(eps * d(x, x') + epsilon0)  for all x, x', y
        assert _worst_ratio_excess(p, d, eps) <= eps0
        # and the bound is not vacuous: some pair comes within a factor 3 of it
        ratio = p[:, None, :] / p[None, :, :]
        assert (np.log(ratio) / np.maximum(eps * d[:, :, None], 1e-12)).max() > 0.3


def test_the_ratio_check_catches_a_broken_sampler(make_emb):
    """Test of the test: a float32 softmax (what the old sampler computed) violates it."""
    emb = make_emb(v=15, m=3, seed=9, scale=20.0)
    d = _pairwise(emb.vectors)
    eps = 8.0
    w = np.exp(-(eps / 2) * d.astype(np.float32)).astype(np.float32)
    p = w / w.sum(axis=1, keepdims=True)
    assert _worst_ratio_excess(p.astype(np.float64), d, eps) > 1e-3


def test_epsilon0_is_accounted_in_the_guarantee_and_is_small(small_emb):
    m = SanText(small_emb, epsilon=3.0, rng=0)
    g = m.guarantee
    assert g.kind == "metric-dp" and g.epsilon == 3.0
    assert g.epsilon0 == m.sampling_epsilon0 > 0
    assert "+" in g.describe()
    radius = sampling.table_geometry(small_emb.vectors)[1]
    bigger = sampling.sampling_epsilon0(3.0, small_emb.dim, 10 * radius, len(small_emb))
    assert bigger > g.epsilon0  # grows with the table radius (GEMM error)
    plus = SanTextPlus(small_emb, epsilon=3.0, p=0.3, rng=0)
    assert plus.guarantee.epsilon0 == pytest.approx(math.log(1 / 0.3) + plus.sampling_epsilon0, rel=1e-15)
    for bad in (0.0, 1.0, -0.5, 1e-300, "x"):
        with pytest.raises(ParameterError):
            SanText(small_emb, epsilon=3.0, eta=bad)


def test_epsilon_to_infinity_is_identity_and_to_zero_is_uniform(small_emb, backend):
    big = SanText(small_emb, epsilon=1e5, output_vocabulary="full", rng=3)
    assert np.allclose(big.probabilities(list(range(12))), np.eye(12), atol=2 * DEFAULT_ETA)
    rows = np.repeat(np.arange(12), 50)
    assert np.array_equal(big.sample_rows(rows), rows)
    tiny = SanText(small_emb, epsilon=1e-9, output_vocabulary="full", rng=3)
    assert np.allclose(tiny.probabilities(list(range(12))), 1 / 12, atol=1e-8)
    draws = tiny.output_positions(tiny.sample_rows(np.zeros(24000, dtype=np.int64)))
    assert _chisq(draws, np.full(12, 1 / 12)) > ALPHA


def test_santext_plus_sensitive_never_emit_nonsensitive_and_keep_rate(make_emb, backend):
    emb = make_emb(v=20, m=4, seed=4)
    # corpus counts: word i appears 20 - i times -> the rarest half is sensitive at w = 0.5
    texts = [" ".join(f"w{i}" for i in range(20) for _ in range(20 - i))]
    m = SanTextPlus(emb, epsilon=2.0, w=0.5, p=0.3, rng=2).fit(texts)
    sens = set(m.sensitive_words)
    assert sens == {f"w{i}" for i in range(10, 20)}
    assert m.guarantee.epsilon0 == pytest.approx(math.log(1 / 0.3), rel=1e-4)
    # sensitive inputs: outputs only in V_S
    out = m.sample_rows(np.repeat(np.arange(10, 20), 2000))
    assert set(emb.words[i] for i in np.unique(out)) <= sens
    # non-sensitive inputs: kept at rate 1 - p (exact Bernoulli), otherwise emitted into V_S
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
    # every sensitive output has positive probability from every input (float-safe mix)
    scols = m.output_positions(m.sensitive_rows)
    assert (p[:, scols] > 0).all()
    # exact distribution of a non-sensitive word, sampled
    out = m.output_positions(m.sample_rows(np.full(30000, 3)))
    assert _chisq(out, m.probabilities([3])[0]) > ALPHA


def test_santext_plus_ratio_bound_on_sensitive_outputs(make_emb, backend):
    """The audit of SanText+ at its claimed (eps, eps0)-UMLDP, exactly from the realised law: for every
    sensitive output y and every pair of inputs, p(y|x) <= exp(eps d(x,x') + eps0) p(y|x'); every
    non-sensitive output comes from its own input only (checked in the test above); the bound is tight
    for some pair (not vacuous)."""
    emb = make_emb(v=16, m=3, seed=11)
    d = _pairwise(emb.vectors)
    texts = [" ".join(f"w{i}" for i in range(16) for _ in range(16 - i))]
    for eps, p_ in ((0.5, 0.3), (3.0, 0.1), (12.0, 0.6)):
        m = SanTextPlus(emb, epsilon=eps, w=0.5, p=p_, frequencies="corpus", rng=0).fit(texts)
        law = m.probabilities(list(range(16)))
        scols = m.output_positions(m.sensitive_rows)
        excess = _worst_ratio_excess(law[:, scols], d, eps)
        assert excess <= m.guarantee.epsilon0, (eps, p_, excess, m.guarantee.epsilon0)
        if eps == 0.5:  # not vacuous: at small eps a non-sensitive/sensitive pair comes close to ln(1/p)
            assert excess > 0.9 * math.log(1 / p_)


def test_santext_plus_edge_parameters(make_emb):
    emb = make_emb(v=10)
    texts = [" ".join(f"w{i}" for i in range(10))]
    all_sens = SanTextPlus(emb, epsilon=1.0, w=1.0, p=0.5, rng=0).fit(texts)
    st = SanText(emb, epsilon=1.0, rng=0).fit(texts)
    assert np.allclose(all_sens.probabilities(list(range(10))), st.probabilities(list(range(10))))
    none = SanTextPlus(emb, epsilon=1.0, w=0.0, p=0.0, rng=0).fit(texts)
    assert none.sanitize(texts) == texts  # nothing sensitive, nothing resampled
    assert math.isinf(none.guarantee.epsilon0)
    for seed in range(16):  # refused whatever the keep/resample coins say (the failure must not depend on them)
        with pytest.raises(ParameterError, match="no sensitive word"):
            SanTextPlus(emb, epsilon=1.0, w=0.0, p=0.5, rng=seed).fit(texts).sanitize(["w1"])
    with pytest.raises(ParameterError, match="no sensitive word"):
        SanTextPlus(emb, epsilon=1.0, w=0.0, p=0.5, rng=0).fit(texts).sanitize(texts)
    for bad in (dict(w=1.5), dict(w=-0.1), dict(p=float("nan")), dict(p=2)):
        with pytest.raises(ParameterError):
            SanTextPlus(emb, epsilon=1.0, **bad)
    for eps in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ParameterError):
            SanText(emb, epsilon=eps)


def test_fbdd_noise_radius_and_direction_laws(make_emb, monkeypatch):
    emb = make_emb(v=10, m=6)
    eps = 2.5
    m = FBDD(emb, epsilon=eps, output_vocabulary="full", rng=8)
    # the noise comes from the per-token keyed streams (textdp.noise.keyed)
    calls = []
    real = mechanisms_module.keyed.keyed_laplace_vectors
    monkeypatch.setattr(mechanisms_module.keyed, "keyed_laplace_vectors",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    z = m.noise(20000)
    assert calls
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(a=6, scale=1 / eps).cdf).pvalue > ALPHA
    u = z / r[:, None]
    # the first coordinate of a uniform direction on S^{m-1}: (u1 + 1)/2 ~ Beta((m-1)/2, (m-1)/2)
    for j in (0, 5):
        assert stats.kstest((u[:, j] + 1) / 2, stats.beta((6 - 1) / 2, (6 - 1) / 2).cdf).pvalue > ALPHA
    # FBDD output = nearest word of phi(x) + z, checked against a direct search
    g = np.random.Generator(np.random.PCG64(1))
    rows = g.integers(0, 10, 500)
    a = m.sample_rows(rows, make_rng(5))
    noise_ = FBDD(emb, epsilon=eps, output_vocabulary="full").noise(500, make_rng(5))
    q = emb.vectors[rows].astype(np.float64) + noise_
    ref = np.argmin(((q[:, None, :] - emb.vectors[None].astype(np.float64)) ** 2).sum(-1), axis=1)
    assert (a == ref).mean() > 0.99  # float32 search may break near-ties differently
    assert m.guarantee.epsilon == eps and m.guarantee.kind == "metric-dp"
    # the clipped float noise is charged: a = 2 m 2^-52 V / eta (FBDD docstring)
    a = 2 * 6 * 2.0**-52 * 10 / m.eta
    assert m.guarantee.epsilon0 == pytest.approx(np.log((1 + a) / (1 - a)))
    assert np.isfinite(m.guarantee.worst_case_epsilon)
    assert m.parameters()["eta"] == 2.0**-20
    # large epsilon: identity
    assert np.array_equal(FBDD(emb, epsilon=1e6, output_vocabulary="full", rng=0).sample_rows(rows), rows)


def test_seeded_runs_reproduce_for_any_worker_count_and_secure_runs_differ(make_emb):
    emb = make_emb(v=60)
    texts = [" ".join(f"w{i}" for i in range(60))] * 20
    kw = dict(epsilon=0.5, block_bytes=1024)  # 16-row blocks: 4 blocks, each with its own stream
    a = SanText(emb, rng=42, workers=1, **kw).sanitize(texts)
    b = SanText(emb, rng=42, workers=3, **kw).sanitize(texts)
    c = SanText(emb, **kw).sanitize(texts)
    assert a == b and a != c


def test_fit_then_sanitize_tokenizes_once_and_equal_results(make_emb, monkeypatch):
    emb = make_emb(v=20)
    texts = [f"w{i} w{(i * 7) % 20} , w{(i * 3) % 20}" for i in range(50)]
    calls = []
    real = SanText.tokenize
    monkeypatch.setattr(SanText, "tokenize", lambda self, t: calls.append(len(t)) or real(self, t))
    a = SanText(emb, epsilon=1.0, rng=5).fit(texts).sanitize(texts)
    assert calls == [50]
    b = SanText(emb, epsilon=1.0, rng=5).fit(texts).sanitize(list(texts[:-1]) + ["w1 w2"])  # different: re-tokenized
    assert len(calls) == 3 and len(b) == len(a) == 50
