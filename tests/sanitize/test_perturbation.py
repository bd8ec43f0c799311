"""Embedding-perturbation mechanisms (textdp.sanitize.perturbation): FBDD (CMP), Mahalanobis and Vickrey.

* noise laws: the radius ``||Sigma_lambda^{-1/2} z||`` ~ Gamma(m, 1/eps) and a uniform direction (KS
  tests), the second moment ``E[z z^T] = (m + 1)/eps^2 Sigma_lambda``;
* outputs: two-sample chi-square of textdp's draws against draws of the paper's formulas written here
  with a numpy Generator (test data), Vickrey's threshold at t = 0 and t = 1 and its coin;
* audit: the metric-DP ratio bound ``p(y|x) <= exp(eps d(x,x') + epsilon0) p(y|x')`` on the closest and
  on random word pairs with Clopper-Pearson bounds (and a check that the audit can fail);
* peers: pypantera 1.0.2 (run) and mldp-text 0.1.2 (formulas restated, file and line cited).

Significance level 1e-3 per test (Bonferroni inside the audit), fixed seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from textdp.audit.metric import cp_log_ratio_lower
from textdp.embeddings import Embeddings
from textdp.errors import ParameterError
from textdp.noise import keyed, make_rng
from textdp.noise.keyed import ReleaseKey
from textdp.sanitize import make_mechanism
from textdp.noise.keyed import keyed_bernoulli_per_token as bernoulli_per_token
from textdp.sanitize.perturbation import FBDD, Mahalanobis, Vickrey, regularized_covariance

DISTRIBUTION_TESTED = ("mahalanobis", "vickrey")
AUDITED = ("fbdd", "mahalanobis", "vickrey")

ALPHA = 1e-3


def _table(v=8, m=3, seed=4, scales=(2.0, 1.0, 0.4, 0.3, 0.2, 0.1)):
    """Test embeddings with an anisotropic covariance (so Sigma_lambda is not a multiple of I)."""
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    vec = (g.standard_normal((v, m)) * np.asarray(scales[:m])).astype(np.float32)
    return Embeddings([f"w{i}" for i in range(v)], vec, source="test", kind="word", lowercase=True)


def _sqrtm(a):
    w, u = np.linalg.eigh(a)
    return (u * np.sqrt(np.clip(w, 0, None))) @ u.T


def _inv_sqrtm(a):
    w, u = np.linalg.eigh(a)
    return (u / np.sqrt(w)) @ u.T


# ------------------------------------------------------------------------------------------ noise laws
@pytest.mark.parametrize("lam", [0.2, 0.7, 1.0])
def test_mahalanobis_noise_law(lam):
    emb = _table(v=40, m=5)
    eps, m = 1.7, 5
    mech = Mahalanobis(emb, epsilon=eps, lam=lam, output_vocabulary="full", rng=2)
    sig = regularized_covariance(emb.vectors, lam)
    # Sigma_lambda (Xu et al. 2020): lam Sigma/mean(diag Sigma) + (1 - lam) I, Sigma with divisor n
    x = emb.vectors.astype(np.float64)
    cov = np.cov(x, rowvar=False, ddof=0)
    np.testing.assert_allclose(sig, lam * cov / np.mean(np.diag(cov)) + (1 - lam) * np.eye(m), rtol=1e-10, atol=1e-12)
    z = mech.noise(20000, make_rng(1))
    w = z @ _inv_sqrtm(sig)  # back to the multivariate Laplace r·u
    r = np.linalg.norm(w, axis=1)
    assert stats.kstest(r, stats.gamma(a=m, scale=1 / eps).cdf).pvalue > ALPHA
    u = w / r[:, None]
    for j in range(m):  # a uniform direction's coordinate: (u_j + 1)/2 ~ Beta((m-1)/2, (m-1)/2)
        assert stats.kstest((u[:, j] + 1) / 2, stats.beta((m - 1) / 2, (m - 1) / 2).cdf).pvalue > ALPHA / m
    # E[z z^T] = E[r^2]/m Sigma_lambda = (m + 1)/eps^2 Sigma_lambda (relative error ~ 2% at n = 20000)
    second = z.T @ z / len(z)
    np.testing.assert_allclose(second, (m + 1) / eps**2 * sig, atol=0.08 * (m + 1) / eps**2 * np.abs(sig).max())
    if lam >= 0.7:  # the test can tell the laws apart: the Euclidean radius of z is not Gamma(m, 1/eps)
        assert stats.kstest(np.linalg.norm(z, axis=1), stats.gamma(a=m, scale=1 / eps).cdf).pvalue < ALPHA
    # the noise comes from the per-token keyed streams: the same key gives the same vectors
    np.testing.assert_array_equal(z, mech.noise(20000, make_rng(1)))


def test_mahalanobis_at_lambda_zero_is_fbdd_and_vickrey_at_t_zero_is_its_noise_mechanism():
    emb = _table()
    rows = np.repeat(np.arange(8), 300)
    kw = dict(output_vocabulary="full")
    f = FBDD(emb, 1.5, rng=3, **kw).sample_rows(rows)
    np.testing.assert_array_equal(Mahalanobis(emb, 1.5, lam=0.0, rng=3, **kw).sample_rows(rows), f)
    np.testing.assert_array_equal(Vickrey(emb, 1.5, t=0.0, rng=3, **kw).sample_rows(rows), f)
    mh = Mahalanobis(emb, 1.5, lam=0.6, rng=3, **kw).sample_rows(rows)
    assert (mh != f).any()
    np.testing.assert_array_equal(Vickrey(emb, 1.5, t=0.0, noise="mahalanobis", lam=0.6, rng=3, **kw).sample_rows(rows),
                                  mh)


def _direct(emb, q):
    """float64 distances of the noisy points to every word, sorted columns (nearest first)."""
    d = np.sqrt(((q[:, None, :] - emb.vectors[None].astype(np.float64)) ** 2).sum(-1))
    return d, np.argsort(d, axis=1, kind="stable")


@pytest.mark.parametrize("noise", ["cmp", "mahalanobis"])
def test_vickrey_threshold_one_outputs_the_second_nearest_word(noise):
    """t = 1: p = 0, the output is always w2, the second nearest word of the noisy point (Xu et al. 2021,
    the rule of pypantera's vickrey.py line 98); t = 0: always w1 (above). Checked against a direct float64 search of the same noise."""
    emb = _table(v=30, m=4)
    mech = Vickrey(emb, 2.0, t=1.0, noise=noise, output_vocabulary="full")
    g = np.random.Generator(np.random.PCG64(9))
    rows = g.integers(0, 30, 3000)
    out = mech.sample_rows(rows, make_rng(5))
    q = emb.vectors[rows].astype(np.float64) + mech.noise(len(rows), make_rng(5))
    _, order = _direct(emb, q)
    assert (out == order[:, 1]).mean() > 0.995  # float32 search: near-ties may differ; eta ~ 1e-6
    assert (out == order[:, 0]).mean() < 0.01
    mech0 = Vickrey(emb, 2.0, t=0.0, noise=noise, output_vocabulary="full")
    assert (mech0.sample_rows(rows, make_rng(5)) == order[:, 0]).mean() > 0.995


@pytest.mark.parametrize("t", [0.25, 0.5, 0.8])
def test_vickrey_coin_follows_the_paper_probability(t):
    """Given the noisy point, w1 is output with p = (1-t) d2 / (t d1 + (1-t) d2): the count of w1
    outputs against sum p (normal approximation) and per decile of p (chi-square)."""
    emb = _table(v=30, m=4)
    mech = Vickrey(emb, 1.0, t=t, output_vocabulary="full")
    g = np.random.Generator(np.random.PCG64(10))
    rows = g.integers(0, 30, 40000)
    out = mech.sample_rows(rows, make_rng(6))
    q = emb.vectors[rows].astype(np.float64) + mech.noise(len(rows), make_rng(6))
    d, order = _direct(emb, q)
    d1, d2 = d[np.arange(len(q)), order[:, 0]], d[np.arange(len(q)), order[:, 1]]
    p = (1 - t) * d2 / (t * d1 + (1 - t) * d2)
    np.testing.assert_allclose(mech.first_probability(d1, d2), p, rtol=1e-12)
    ok = (out == order[:, 0]) | (out == order[:, 1])
    assert ok.mean() > 0.995
    first = (out == order[:, 0])[ok]
    pk = p[ok]
    zscore = (first.sum() - pk.sum()) / math.sqrt((pk * (1 - pk)).sum())
    assert abs(zscore) < stats.norm.isf(ALPHA / 2)
    edges = np.quantile(pk, np.linspace(0, 1, 11))
    b = np.clip(np.searchsorted(edges, pk, side="right") - 1, 0, 9)
    obs = np.bincount(b, weights=first, minlength=10)
    exp = np.bincount(b, weights=pk, minlength=10)
    var = np.bincount(b, weights=pk * (1 - pk), minlength=10)
    assert stats.chi2(10).sf((((obs - exp) ** 2) / var).sum()) > ALPHA


@pytest.mark.parametrize("prefilter", ["numpy", "torch"])
@pytest.mark.parametrize("tile", [1, 3, 8, 2048])
def test_nearest_search_top_two_with_exact_ties(monkeypatch, tile, prefilter):
    """The mechanism's search returns the nearest and second nearest columns, ties to the lowest column,
    for any tile width and either prefilter: small-integer embeddings (every score exact, many exact ties)
    against a stable sort of the exact squared distances."""
    import textdp.sanitize.nearest as nearest

    if prefilter == "torch":
        pytest.importorskip("torch")
    monkeypatch.setattr(nearest, "TILE_WORDS", {"torch": tile, "numpy": tile})
    monkeypatch.setattr(FBDD, "nearest_prefilter", prefilter)
    g = np.random.Generator(np.random.PCG64(3))  # test data
    vec = g.integers(-2, 3, (40, 3)).astype(np.float32)  # duplicates and equidistant words
    emb = Embeddings([f"w{i}" for i in range(40)], vec, source="ints", kind="word", lowercase=True)
    mech = FBDD(emb, 1.0, output_vocabulary="full")
    mech._prepare()
    q = g.integers(-3, 4, (600, 3)).astype(np.float64)
    first, second = mech._nearest(q, 2)
    assert mech._search.prefilter == prefilter
    d2 = ((q[:, None, :] - vec[None].astype(np.float64)) ** 2).sum(-1)
    order = np.argsort(d2, axis=1, kind="stable")
    np.testing.assert_array_equal(first, order[:, 0])
    np.testing.assert_array_equal(second, order[:, 1])
    np.testing.assert_array_equal(mech._nearest(q, 1)[0], order[:, 0])
    assert (d2[np.arange(600), order[:, 0]] == d2[np.arange(600), order[:, 1]]).any()  # ties occurred


def test_vickrey_probability_edge_cases():
    emb = _table()
    assert Vickrey(emb, 1.0, t=1.0).first_probability(0.0, 0.7) == 1.0  # q exactly on w1: 0/0, w1
    assert Vickrey(emb, 1.0, t=1.0).first_probability(0.2, 0.7) == 0.0
    assert Vickrey(emb, 1.0, t=0.0).first_probability(0.2, 0.7) == 1.0
    assert Vickrey(emb, 1.0, t=0.0).first_probability(0.0, 0.0) == 1.0  # two words at the same point
    assert Vickrey(emb, 1.0, t=0.5).first_probability(1.0, 3.0) == pytest.approx(0.75)
    one = Embeddings(["only"], np.zeros((1, 3), dtype=np.float32), source="one", kind="word", lowercase=True)
    assert Vickrey(one, 1.0, output_vocabulary="full", rng=0).sanitize(["only only"]) == ["only only"]


def test_bernoulli_per_token_is_keyed_bernoulli_token_by_token():
    key = ReleaseKey.from_seed(7)
    n = 400
    s, pos = np.arange(n), np.arange(n) % 5
    for p in (0.0, 1.0, 0.5, 1 / 3, 2.0**-60, 1 - 2.0**-53, 0.123456789):
        ours = bernoulli_per_token(key, s, pos, keyed.COIN, np.full(n, p))
        ref = keyed.keyed_bernoulli(key, s, pos, keyed.COIN, p)
        np.testing.assert_array_equal(ours, ref)
    ps = np.random.Generator(np.random.PCG64(1)).random(n)  # mixed probabilities: token by token
    ours = bernoulli_per_token(key, s, pos, keyed.COIN, ps)
    ref = np.array([keyed.keyed_bernoulli(key, s[i:i + 1], pos[i:i + 1], keyed.COIN, float(ps[i]))[0] for i in range(n)])
    np.testing.assert_array_equal(ours, ref)
    with pytest.raises(ParameterError):
        bernoulli_per_token(key, s[:1], pos[:1], keyed.COIN, [1.5])


# ------------------------------------------------------------------------------------------ output law
def _reference_draws(emb, name, eps, n_per_word, rng, lam=0.2, t=0.5, noise="cmp"):
    """The papers' laws, written directly (float64, numpy Generator; test data): Mahalanobis noise
    z = Sigma_lambda^{1/2} r u (Xu et al. 2020), nearest word; Vickrey's coin on the two nearest
    words (Xu et al. 2021)."""
    x = emb.vectors.astype(np.float64)
    v, m = x.shape
    rows = np.repeat(np.arange(v), n_per_word)
    n = len(rows)
    gauss = rng.standard_normal((n, m))
    z = gauss / np.linalg.norm(gauss, axis=1, keepdims=True) * rng.gamma(m, 1 / eps, size=n)[:, None]
    if name == "mahalanobis" or noise == "mahalanobis":
        xc = x - x.mean(0)
        cov = xc.T @ xc / v
        z = z @ _sqrtm(lam * cov / np.mean(np.diag(cov)) + (1 - lam) * np.eye(m))
    d, order = _direct(emb, x[rows] + z)
    if name != "vickrey":
        return rows, order[:, 0]
    d1, d2 = d[np.arange(n), order[:, 0]], d[np.arange(n), order[:, 1]]
    p = (1 - t) * d2 / (t * d1 + (1 - t) * d2)
    return rows, np.where(rng.random(n) < p, order[:, 0], order[:, 1])


@pytest.mark.parametrize("name,kw", [("fbdd", {}), ("mahalanobis", dict(lam=0.5)), ("vickrey", dict(t=0.5)),
                                     ("vickrey", dict(t=0.3, noise="mahalanobis", lam=0.8))])
def test_output_law_matches_the_papers_formula(name, kw):
    """Two-sample chi-square per input word: textdp's keyed draws against the formula's draws."""
    emb = _table()
    eps = 2.0
    mech = make_mechanism(name, emb, eps, output_vocabulary="full", rng=11, **kw)
    n = 6000
    rows = np.repeat(np.arange(8), n)
    ours = mech.sample_rows(rows)
    ref_rows, ref = _reference_draws(emb, name, eps, n, np.random.Generator(np.random.PCG64(12)), **kw)
    for i in range(8):
        a = np.bincount(ours[rows == i], minlength=8)
        b = np.bincount(ref[ref_rows == i], minlength=8)
        keep = (a + b) > 0
        table = np.vstack([a[keep], b[keep]])
        if table.shape[1] > 1:
            assert stats.chi2_contingency(table)[1] > ALPHA / 8, (name, i, a, b)


def test_output_law_check_detects_a_wrong_threshold():
    """Test of the test: Vickrey at t = 0.5 against the formula at t = 0.2 is rejected."""
    emb = _table()
    mech = make_mechanism("vickrey", emb, 2.0, output_vocabulary="full", rng=11, t=0.5)
    n = 6000
    rows = np.repeat(np.arange(8), n)
    ours = mech.sample_rows(rows)
    ref_rows, ref = _reference_draws(emb, "vickrey", 2.0, n, np.random.Generator(np.random.PCG64(12)), t=0.2)
    pvals = []
    for i in range(8):
        a, b = np.bincount(ours[rows == i], minlength=8), np.bincount(ref[ref_rows == i], minlength=8)
        keep = (a + b) > 0
        pvals.append(stats.chi2_contingency(np.vstack([a[keep], b[keep]]))[1])
    assert min(pvals) < ALPHA / 8


# ------------------------------------------------------------------------------------------ audit
def _audit(mech, pairs, dist, n, bound_eps, alpha=ALPHA):
    """Largest lower confidence bound of ln p(y|x)/p(y|x') - (bound_eps d(x,x') + epsilon0) over the
    pairs (both directions) and outputs, with Bonferroni over every comparison (two-sided Clopper-Pearson
    at alpha / (2 |pairs| V) per output: textdp.audit.metric.cp_log_ratio_lower at half that level)."""
    rows = np.unique(np.asarray(pairs).reshape(-1))
    draws = mech.sample_rows(np.repeat(rows, n))
    v = len(mech.output_rows)
    counts = np.stack([np.bincount(mech.output_positions(draws[i * n:(i + 1) * n]), minlength=v)
                       for i in range(len(rows))])
    at = {int(r): i for i, r in enumerate(rows)}
    lr = cp_log_ratio_lower(counts, n, alpha / (2 * len(pairs) * v) / 2)
    e0 = mech.guarantee.epsilon0
    worst = -np.inf
    for x, xp in pairs:
        for s, t in ((x, xp), (xp, x)):
            vals = lr[at[int(s)], at[int(t)]]
            vals = vals[np.isfinite(vals)]  # outputs never seen from s bound nothing
            if len(vals):
                worst = max(worst, float(vals.max()) - (bound_eps * dist(s, t) + e0))
    return worst


def _pairs(mech, dist, k_random=4, seed=3):
    v = len(mech.embeddings)
    d = np.array([[dist(i, j) if i != j else np.inf for j in range(v)] for i in range(v)])
    i, j = np.unravel_index(np.argmin(d), d.shape)
    g = np.random.Generator(np.random.PCG64(seed))  # which random pairs: test data
    rnd = [tuple(g.choice(v, 2, replace=False)) for _ in range(k_random)]
    return [(int(i), int(j))] + [(int(a), int(b)) for a, b in rnd]


@pytest.mark.parametrize("name,kw", [("fbdd", {}), ("mahalanobis", dict(lam=0.5)), ("vickrey", dict(t=0.5)),
                                     ("vickrey", dict(t=0.75, noise="mahalanobis", lam=0.5))])
def test_ratio_bound_holds_at_the_claimed_epsilon(name, kw):
    """The guarantee eps·d(x,x') + epsilon0 (d Euclidean, or d_RM for Mahalanobis noise) on the closest
    pair and on random pairs of a 6-word table: no output's Clopper-Pearson lower bound of the ratio
    exceeds it; and the same audit at eps/4 does flag a violation (the check has power)."""
    emb = _table(v=6, m=2, seed=5, scales=(1.0, 0.5))
    eps = 1.5
    mech = make_mechanism(name, emb, eps, output_vocabulary="full", rng=21, **kw)
    x = emb.vectors.astype(np.float64)
    if name == "mahalanobis" or kw.get("noise") == "mahalanobis":
        sig = regularized_covariance(x, kw["lam"])

        def dist(a, b):  # d_RM, written out
            return float(math.sqrt((x[a] - x[b]) @ np.linalg.solve(sig, x[a] - x[b])))
    else:
        def dist(a, b):
            return float(np.linalg.norm(x[a] - x[b]))
    assert dist(0, 3) == pytest.approx(float(mech.metric_distance(0, 3)), rel=1e-9)
    pairs = _pairs(mech, dist)
    n = 40000
    assert _audit(mech, pairs, dist, n, eps) <= 0.0
    assert _audit(mech, pairs, dist, n, eps / 4) > 0.0


def test_mahalanobis_metric_and_worst_case():
    emb = _table(v=10, m=3)
    mech = Mahalanobis(emb, 2.0, lam=0.4, output_vocabulary="full")
    sig = regularized_covariance(emb.vectors, 0.4)
    x = emb.vectors.astype(np.float64)
    d = x[2] - x[7]
    assert mech.metric_distance(2, 7) == pytest.approx(math.sqrt(d @ np.linalg.solve(sig, d)), rel=1e-10)
    g = mech.guarantee
    assert g.kind == "metric-dp" and g.epsilon == 2.0 and "regularized mahalanobis" in g.metric and "0.4" in g.metric
    a = 2 * 3 * 2.0**-52 * 10 / mech.eta
    assert g.epsilon0 == pytest.approx(math.log((1 + a) / (1 - a)))
    assert math.isfinite(g.worst_case_epsilon) and g.worst_case_epsilon >= FBDD(emb, 2.0).guarantee.worst_case_epsilon
    assert math.isinf(Mahalanobis(emb, 2.0, oov="keep").guarantee.worst_case_epsilon)
    units = mech.card_units()
    assert all("d_RM" in units[k] for k in ("epsilon", "per_document", "epsilon0"))
    assert "eps*d(x" not in str(units)
    v = Vickrey(emb, 2.0, noise="mahalanobis", lam=0.4, output_vocabulary="full")
    assert v.guarantee.metric == g.metric and v.guarantee.epsilon0 == g.epsilon0
    assert Vickrey(emb, 2.0).guarantee.metric.startswith("euclidean")
    assert Vickrey(emb, 2.0).parameters()["t"] == 0.5 and "lam" not in Vickrey(emb, 2.0).parameters()


@pytest.mark.parametrize("name,kw,needle", [
    ("mahalanobis", dict(lam=-0.1), "lam"), ("mahalanobis", dict(lam=1.5), "lam"),
    ("mahalanobis", dict(lam=float("nan")), "lam"), ("vickrey", dict(t=1.2), "t "), ("vickrey", dict(t=-1), "t "),
    ("vickrey", dict(noise="gauss"), "noise"), ("vickrey", dict(lam=0.3), "noise=mahalanobis"),
    ("vickrey", dict(noise="mahalanobis", lam=2), "lam"),
])
def test_bad_parameters_get_one_line(name, kw, needle):
    with pytest.raises(ParameterError) as ei:
        make_mechanism(name, _table(), 1.0, **kw)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_cli_params_and_workers(tmp_path):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    emb = _table(v=12, m=3)
    p = tmp_path / "t.glove.txt"
    p.write_text("".join(f"{w} {' '.join(f'{x:.6f}' for x in v)}\n" for w, v in zip(emb.words, emb.vectors)),
                 encoding="utf-8")
    src = tmp_path / "in.txt"
    src.write_text("w1 w2 w3\nw4 w5 w1\n" * 300, encoding="utf-8")
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"o{workers}.txt"
        r = CliRunner().invoke(app, ["sanitize", str(src), "-m", "vickrey", "-e", "2", "--embeddings", str(p),
                                     "--param", "t=0.7", "--param", "noise=mahalanobis", "--param", "lam=0.3",
                                     "--workers", workers, "--seed", "4", "-o", str(out), "--no-ledger", "-q"])
        assert r.exit_code == 0, r.output
        outs.append(out.read_text(encoding="utf-8"))
    assert outs[0] == outs[1]  # every token draws from its own keyed stream
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", "mahalanobis", "-e", "2", "--embeddings", str(p),
                                 "--param", "lam=2", "-o", str(tmp_path / "x.txt"), "--no-ledger", "-q"])
    assert r.exit_code == 2 and "lam" in r.output


# ------------------------------------------------------------------------------------------ peers
@pytest.fixture
def pypantera(tmp_path):
    pytest.importorskip("src.EmbeddingPerturbationMechanism.mahalanobis")
    emb = _table(v=12, m=4, seed=6)
    path = tmp_path / "emb.txt"
    path.write_text("".join(f"{w} {' '.join(f'{x:.7f}' for x in v)}\n" for w, v in zip(emb.words, emb.vectors)),
                    encoding="utf-8")
    return emb, str(path)


def _peer_global_rng(seed):
    """pypantera draws from numpy's global RNG (numpy.random.*): seeded here for a reproducible test and
    restored afterwards (textdp itself never uses it)."""
    state = np.random.get_state()
    np.random.seed(seed)
    return state


def test_pypantera_mahalanobis_sigma_agrees_and_its_noise_renormalises(pypantera):
    """pypantera 1.0.2 mahalanobis.py lines 63-65 build Sigma_lambda^{1/2} exactly as we do (cov with
    divisor n over mean variance); its pullNoise (lines 79-91) renormalises Sigma^{1/2} u to unit length
    (line 85), so its ||z|| ~ Gamma(m, 1/eps) and ||z||_RM is not: a different law from the paper's
    law (density ∝ exp(-eps ||z||_RM)), which textdp follows (test_mahalanobis_noise_law)."""
    from src.EmbeddingPerturbationMechanism.mahalanobis import Mahalanobis as PeerMahalanobis

    emb, path = pypantera
    eps, lam, m = 2.0, 0.6, 4
    peer = PeerMahalanobis({"embPath": path, "epsilon": eps, "lam": lam})
    ours = Mahalanobis(emb, eps, lam=lam, output_vocabulary="full")
    ours._prepare()
    np.testing.assert_allclose(np.real(peer._sigmaLoc), ours._sqrt_sigma, rtol=1e-5, atol=1e-6)
    state = _peer_global_rng(3)
    try:
        z = np.array([peer.pullNoise() for _ in range(4000)])
    finally:
        np.random.set_state(state)
    gamma = stats.gamma(a=m, scale=1 / eps).cdf
    assert stats.kstest(np.linalg.norm(z, axis=1), gamma).pvalue > ALPHA
    rm = np.linalg.norm(z @ _inv_sqrtm(ours._sigma_lambda), axis=1)
    assert stats.kstest(rm, gamma).pvalue < ALPHA  # not the paper's law
    zo = ours.noise(4000, make_rng(3))
    assert stats.kstest(np.linalg.norm(zo @ _inv_sqrtm(ours._sigma_lambda), axis=1), gamma).pvalue > ALPHA


def test_pypantera_vickrey_rule_agrees_on_the_same_noisy_points(pypantera):
    """pypantera vickrey.py line 98: p = (1-t) d[:,1] / (t d[:,0] + (1-t) d[:,1]) is the probability of
    closest[:,0] (line 99), closest = np.argpartition(distance, 2)[:, :2] (line 95). numpy documents no
    order inside the partition; numpy 2.x returns the two nearest sorted for kth = 2 (checked here), so
    the rule is the paper's. Their processText (run here on the same noisy points) picks w1 as often as
    our p says (normal approximation), and our formula equals line 98 with the pair sorted."""
    from src.EmbeddingPerturbationMechanism.vickrey import VickreyCMP

    emb, path = pypantera
    t = 0.3
    mech = Vickrey(emb, 1.0, t=t, output_vocabulary="full")
    g = np.random.Generator(np.random.PCG64(2))
    d1 = g.random(1000)
    d2 = d1 + g.random(1000)
    np.testing.assert_allclose(mech.first_probability(d1, d2), ((1 - t) * d2) / (t * d1 + (1 - t) * d2), rtol=1e-12)
    dist = g.random((2000, 50))
    closest = np.argpartition(dist, 2, axis=1)[:, :2]  # vickrey.py:95
    assert (dist[np.arange(2000), closest[:, 0]] <= dist[np.arange(2000), closest[:, 1]]).all()
    peer = VickreyCMP({"embPath": path, "epsilon": 1.0, "t": t})
    rows = g.integers(0, 12, 4000)
    q = emb.vectors[rows].astype(np.float64) + mech.noise(4000, make_rng(8))
    state = _peer_global_rng(5)
    try:
        words = peer.processText(q).split(" ")
    finally:
        np.random.set_state(state)
    out = np.array([int(w[1:]) for w in words])
    d, order = _direct(emb, q)
    n = np.arange(len(q))
    p = mech.first_probability(d[n, order[:, 0]], d[n, order[:, 1]])
    ok = (out == order[:, 0]) | (out == order[:, 1])
    assert ok.all()
    zscore = ((out == order[:, 0]).sum() - p.sum()) / math.sqrt((p * (1 - p)).sum())
    assert abs(zscore) < stats.norm.isf(ALPHA / 2)
    ours = mech._select(q, order[:, 0], order[:, 1], ReleaseKey.from_seed(3), np.arange(4000),
                        np.zeros(4000, dtype=np.int64))
    assert abs((ours == order[:, 0]).sum() - p.sum()) / math.sqrt((p * (1 - p)).sum()) < stats.norm.isf(ALPHA / 2)


def test_mldp_text_formulas():
    """mldp-text 0.1.2 (not installed: pins numpy < 2; formulas restated from mldp_text/mechanisms.py):
    line 343: cov_mat = np.cov(E, rowvar=False) / np.var(E) (divisor n - 1, over the variance of all
    entries around their grand mean); line 360: Z = Gamma(n, 1/eps) · sqrtm(lambd cov_mat + (1 - lambd) I)
    · u (the paper's law, no renormalisation). Its Sigma is ours times a positive factor c (c != 1 in
    general, so its Sigma_lambda differs for 0 < lambda < 1); at c = 1 its noise is ours: KS on
    ||z||_RM and on a projection."""
    emb = _table(v=40, m=4, seed=8)
    x = emb.vectors.astype(np.float64)
    lam, eps, m = 0.2, 1.5, 4
    mldp_cov = np.cov(x, rowvar=False) / np.var(x)  # mechanisms.py:343
    ours_cov = regularized_covariance(x, 1.0)
    c = mldp_cov[0, 0] / ours_cov[0, 0]
    np.testing.assert_allclose(mldp_cov, c * ours_cov, rtol=1e-10)
    assert abs(c - 1) > 1e-3  # the normalisations differ on this table
    sig = regularized_covariance(x, lam)
    g = np.random.Generator(np.random.PCG64(4))
    u = g.standard_normal((8000, m))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    z_mldp = g.gamma(m, 1 / eps, size=8000)[:, None] * (u @ _sqrtm(sig))  # mechanisms.py:360 with our Sigma_lambda
    z_ours = Mahalanobis(emb, eps, lam=lam, output_vocabulary="full").noise(8000, make_rng(4))
    inv = _inv_sqrtm(sig)
    assert stats.ks_2samp(np.linalg.norm(z_mldp @ inv, axis=1), np.linalg.norm(z_ours @ inv, axis=1)).pvalue > ALPHA
    assert stats.ks_2samp(z_mldp[:, 0], z_ours[:, 0]).pvalue > ALPHA


def test_the_vector_gather_above_its_memory_cap_draws_the_same(monkeypatch):
    """Above ``_GATHER_BYTES`` the distinct words' vectors are read block by block: the same draws."""
    import textdp.sanitize.perturbation as pert

    emb = _table(v=30, m=4)
    rows = np.random.Generator(np.random.PCG64(4)).integers(0, 30, 2000)  # test data
    a = Vickrey(emb, 2.0, output_vocabulary="full").sample_rows(rows, make_rng(3))
    monkeypatch.setattr(pert, "_GATHER_BYTES", 0)
    b = Vickrey(emb, 2.0, output_vocabulary="full").sample_rows(rows, make_rng(3))
    np.testing.assert_array_equal(a, b)
