"""1-Diffractor (Meisenbacher et al. 2024, arXiv 2405.01678): the lists, the exact law, draws against
the law (chi-square, significance 1e-3, fixed seeds), the guarantee's ratio bound checked exactly on
every pair / the closest pairs / random pairs, and agreement with the reference code's formula.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from textdp.audit.metric import worst_excess
from textdp.embeddings import Embeddings
from textdp.errors import ParameterError
from textdp.sanitize import make_mechanism
from textdp.sanitize.diffractor import Diffractor, build_lists, nearest_columns

#: registry coverage (tests/test_registry_coverage.py): the exact law is checked against seeded draws
#: (test_draws_follow_the_exact_law) and the audit at the claimed epsilon is the exact ratio bound over
#: every pair, the closest pairs and random pairs (test_ratio_bound_*)
DISTRIBUTION_TESTED = ("1-diffractor",)
AUDITED = ("1-diffractor",)

ALPHA = 1e-3
WORDS = ["film", "movie", ".", "do", "n't", "bad", ";", "good", "great", ",", "'s", "(", ")", "plot", "actor",
         "scene", "boring", "fun", "story", "aardvark"]


def _emb(n=None, dim=4, seed=5, scale=0.6):
    words = list(WORDS) if n is None else [f"w{i}" for i in range(n)]
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    vec = (g.standard_normal((len(words), dim)) * scale).astype(np.float32)
    return Embeddings(words, vec, source="test-table", kind="word", lowercase=True)


def _chisq(observed_idx, probs):
    obs = np.bincount(observed_idx, minlength=len(probs))
    exp = probs * len(observed_idx)
    assert obs[exp == 0].sum() == 0, "drew an outcome of probability zero"
    order = np.argsort(exp)
    e, o = exp[order], obs[order]
    small = np.cumsum(e) < 5  # pool the smallest cells so the chi-square approximation holds
    if small.any():
        e = np.concatenate([[e[small].sum()], e[~small]])
        o = np.concatenate([[o[small].sum()], o[~small]])
    return stats.chisquare(o, e * o.sum() / e.sum()).pvalue


def _reference_chain(y, start):
    """The paper's list (greedy nearest neighbour), restated naively: from ``start``, append the
    nearest unused row (exact float64 squared distance, ties to the smaller row)."""
    n = len(y)
    used = np.zeros(n, dtype=bool)
    order = [start]
    used[start] = True
    cur = start
    for _ in range(n - 1):
        best, nxt = math.inf, -1
        for c in range(n):
            if used[c]:
                continue
            d = 0.0
            for t in range(y.shape[1]):
                d += (y[cur, t] - y[c, t]) ** 2
            if d < best:
                best, nxt = d, c
        order.append(nxt)
        used[nxt] = True
        cur = nxt
    return np.array(order)


# ------------------------------------------------------------------------------------------ lists
def test_lists_are_permutations_built_deterministically():
    emb = _emb()
    a = make_mechanism("1-diffractor", emb, 1.0, rng=1)
    b = make_mechanism("1-diffractor", emb, 2.5, rng=7, n_lists=3)
    assert a.lists == b.lists  # parameters other than n_lists and the seed do not move them
    assert len(a.lists) == 3
    for lst in a.lists:
        assert sorted(lst) == sorted(a.output_words)
    assert len({tuple(lst) for lst in a.lists}) == 3  # three different orderings


@pytest.mark.parametrize("n,dim,dups", [(300, 8, 0), (150, 3, 40)])
def test_lists_equal_the_naive_greedy_chain(n, dim, dups):
    """The certified candidate search (32 GEMM candidates per word, full scans when they run out)
    gives exactly the naive chain, exact ties (duplicated vectors) included."""
    y = _emb(n=n, dim=dim, seed=3).vectors.astype(np.float64)
    if dups:
        y[n - dups:] = y[:dups]  # exact ties
    lists = build_lists(y, 3)
    sq = (y * y).sum(axis=1)
    starts = np.lexsort((np.arange(n), -sq))
    for k in range(3):
        np.testing.assert_array_equal(lists[k], _reference_chain(y, int(starts[k])))


def test_nearest_columns_are_exact():
    x = _emb(n=200, dim=6, seed=8).vectors.astype(np.float64)
    y = _emb(n=500, dim=6, seed=9).vectors.astype(np.float64)
    y[7] = y[3]  # a tie: the smaller column wins
    x[0] = y[3] + 1e-3
    d = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    np.testing.assert_array_equal(nearest_columns(x, y), d.argmin(axis=1))
    assert nearest_columns(x[:1], y)[0] == 3


# ------------------------------------------------------------------------------------------ law
@pytest.mark.parametrize("n_out", [1, 2, 3, 20])
def test_integer_law_is_consistent(n_out):
    """The closed-form cumulative sums used by the sampler's binary search equal the weights of
    :meth:`probabilities`, for every input index and every output index."""
    emb = _emb()
    m = make_mechanism("1-diffractor", emb, 0.8, output_vocabulary=WORDS[:n_out], n_lists=2)
    m._prepare()
    for i in range(n_out):
        w = m._row_weights(i)
        assert (w > 0).all() and w.sum() == m._T[i]
        if n_out > 1:
            np.testing.assert_array_equal(m._cumulative(np.full(n_out, i), np.arange(n_out)), np.cumsum(w))
    p = m.probabilities(WORDS)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)


def test_draws_follow_the_exact_law():
    emb = _emb()
    m = make_mechanism("1-diffractor", emb, 0.7, rng=1)
    words = ["film", "good", "aardvark", "."]
    p = m.probabilities(words)
    n = 30_000
    for r, w in enumerate(words):
        draws = m.sample_rows(np.repeat(m.input_rows([w]), n), rng=100 + r)
        pval = _chisq(m.output_positions(draws), p[r])
        assert pval > ALPHA, (w, pval)


def test_chi_square_detects_a_shifted_law():
    """The check above can fail: the draws against the law of a neighbouring word are rejected."""
    emb = _emb()
    m = make_mechanism("1-diffractor", emb, 0.7, rng=1)
    p = m.probabilities(["good", "great"])
    draws = m.sample_rows(np.repeat(m.input_rows(["good"]), 30_000), rng=5)
    assert _chisq(m.output_positions(draws), p[1]) < ALPHA


def test_inputs_outside_the_output_vocabulary_take_their_nearest_output_word():
    emb = _emb()
    out = WORDS[:12]
    m = make_mechanism("1-diffractor", emb, 1.0, output_vocabulary=out, rng=2)
    v = emb.vectors.astype(np.float64)
    for w in WORDS[12:]:
        d = ((v[:12] - v[WORDS.index(w)]) ** 2).sum(axis=1)
        nearest = out[int(d.argmin())]
        np.testing.assert_array_equal(m.probabilities([w]), m.probabilities([nearest]))
        assert m.distance(w, nearest) == 0


# ------------------------------------------------------------------------------------------ guarantee
def _excess(m, words):
    """max over pairs and outputs of ln p(y|x) - ln p(y|x') - eps d(x,x') (exact law)."""
    d = np.array([[m.distance(a, b) for b in words] for a in words], dtype=np.float64)
    return worst_excess(m.probabilities(words), m.epsilon * d)  # distinct words (textdp.audit.metric)


@pytest.mark.parametrize("eps", [0.05, 0.7, 3.0, 40.0])
def test_ratio_bound_holds_for_all_pairs(eps):
    m = make_mechanism("1-diffractor", _emb(), eps, rng=1)
    g = m.guarantee
    assert _excess(m, WORDS) <= g.epsilon0 + 1e-12
    # one list alone attains it (eps·|Δ index| exactly) while the uniform share is negligible
    one = make_mechanism("1-diffractor", _emb(), eps, rng=1, n_lists=1)
    if eps <= 3:
        assert abs(_excess(one, WORDS)) <= 1e-5  # the uniform share lowers ratios by ~eta only
    else:  # eps = 40: the uniform share eta caps the ratio of neighbouring words far below eps
        assert _excess(one, WORDS) < -10


def test_ratio_bound_on_closest_and_random_pairs():
    """A 400-word table (list index distances up to 399): every word against its closest word in the
    metric and against 30 random words; the uniform share keeps every ratio finite."""
    emb = _emb(n=400, dim=8, seed=11)
    m = make_mechanism("1-diffractor", emb, 0.3, rng=1)
    words = emb.words
    p = m.probabilities(words)
    logp = np.log(p)
    pos = m._positions[:, m._input_cols(m.input_rows(words))]  # (K, 400)
    d = np.abs(pos[:, :, None] - pos[:, None, :]).max(axis=0)
    e0 = m.guarantee.epsilon0
    g = np.random.Generator(np.random.PCG64(4))  # which pairs, not DP noise
    worst = -np.inf
    for a in range(len(words)):
        dd = d[a].astype(np.float64)
        dd[a] = np.inf
        closest = int(dd.argmin())
        for b in [closest, *g.integers(0, len(words), 30).tolist()]:
            if b == a:
                continue
            excess = (logp[a] - logp[b]).max() - m.epsilon * d[a, b]
            assert excess <= e0 + 1e-12, (a, b, d[a, b], excess)
            worst = max(worst, excess)
    assert worst > -1e-3  # some pair attains the bound (to ~eta): the check is not vacuous
    assert m.guarantee.worst_case_epsilon >= (logp[:, None, :] - logp[None, :, :]).max()


def test_ratio_bound_check_can_fail():
    """With a smaller epsilon claimed than used, the same check fails (exact law of eps=2 against 1)."""
    m = make_mechanism("1-diffractor", _emb(), 2.0, rng=1)
    m._prepare()  # the eps=2 law
    m.epsilon = 1.0  # the claim
    assert _excess(m, WORDS) > 0.5


def test_guarantee_names_the_list_metric():
    m = make_mechanism("1-diffractor", _emb(), 1.0)
    g = m.guarantee
    assert "list index" in g.metric and "euclidean" not in g.metric.lower()
    assert 0 < g.epsilon0 < 1e-6
    assert math.isfinite(g.worst_case_epsilon)
    assert math.isinf(make_mechanism("1-diffractor", _emb(), 1.0, oov="keep").guarantee.worst_case_epsilon)
    assert any("not per unit of embedding distance" in w for w in m.card_warnings())
    assert "list-index distance" in m.card_units()["epsilon"]


# ------------------------------------------------------------------------------------------ the paper
def _reference_geometric_law(i, n, eps, zmax=400):
    """sjmeis/Diffractor, src/diffractor/core.py, apply_privacy_mechanism (method "geometric",
    sensitivity 1): p = 1 - exp(-eps); noise = Geometric(p) - Geometric(p) (numpy's geometric on
    {1, 2, ...}); new index = clip(idx + noise, 0, len - 1). Restated as a law by convolution."""
    p = 1.0 - math.exp(-eps)
    g = np.arange(1, zmax + 1)
    pg = (1 - p) ** (g - 1) * p  # P(G = g)
    law = np.zeros(n)
    for z in range(-(zmax - 1), zmax):
        # P(G1 - G2 = z) = sum_g P(G2 = g) P(G1 = g + z)
        g2 = g[(g + z >= 1) & (g + z <= zmax)]
        pz = float((pg[g2 - 1] * pg[g2 + z - 1]).sum())
        law[min(max(i + z, 0), n - 1)] += pz
    return law


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_law_agrees_with_the_reference_code(eps):
    """The reference code perturbs the index in every list and picks one candidate uniformly
    (core.py, ``_pick_final_word``): the mixture over lists of the clamped geometric law. textdp's
    ideal law equals it; the sampled law differs only by the uniform share eta and the rounding."""
    m = make_mechanism("1-diffractor", _emb(), eps, rng=1)
    n = len(m.output_words)
    ideal = m.ideal_probabilities(WORDS)
    real = m.probabilities(WORDS)
    for r, w in enumerate(WORDS):
        c = m._input_cols(m.input_rows([w]))[0]
        ref = np.zeros(n)
        for k in range(m.n_lists):
            ref[m._lists[k]] += _reference_geometric_law(int(m._positions[k, c]), n, eps) / m.n_lists
        np.testing.assert_allclose(ideal[r], ref, rtol=1e-9, atol=1e-15)
        assert np.abs(real[r] - ref).max() <= m.eta + 1e-12


# ------------------------------------------------------------------------------------------ parameters
@pytest.mark.parametrize("bad", [0, -1, 1.5, "x", True, None])
def test_bad_n_lists_is_one_clear_line(bad):
    if bad is None:  # make_mechanism treats None as the default
        assert make_mechanism("1-diffractor", _emb(), 1.0, n_lists=None).n_lists == 3
        return
    with pytest.raises(ParameterError, match="n_lists must be an integer >= 1") as err:
        Diffractor(_emb(), 1.0, n_lists=bad)
    assert "\n" not in str(err.value)


def test_cli_runs_with_its_own_parameter(tmp_path):
    from textdp.cli.main import app

    emb = _emb()
    table = tmp_path / "table.glove.txt"
    table.write_text("".join(f"{w} {' '.join(f'{x:.6f}' for x in v)}\n" for w, v in zip(emb.words, emb.vectors)),
                     encoding="utf-8")
    src = tmp_path / "in.txt"
    src.write_text("good film . fun story\nboring plot , bad actor\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", "1-diffractor", "-e", "2", "--embeddings", str(table),
                                 "-o", str(out), "--no-ledger", "--param", "n_lists=2", "--seed", "3", "-q"])
    assert r.exit_code == 0, r.output
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", "1-diffractor", "-e", "2", "--embeddings", str(table),
                                 "-o", str(out), "--no-ledger", "--param", "n_lists=0", "--overwrite"])
    assert r.exit_code == 2 and "n_lists must be an integer >= 1" in r.output


@pytest.mark.parametrize("eps", [1e-12, 800.0])
def test_extreme_epsilons_give_a_valid_law(eps):
    m = make_mechanism("1-diffractor", _emb(), eps, rng=1)
    p = m.probabilities(WORDS)
    assert (p > 0).all()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)
    draws = m.sample_rows(m.input_rows(WORDS * 50), rng=1)
    if eps > 100:
        assert (draws == m.input_rows(WORDS * 50)).mean() > 0.99
    assert m.guarantee.worst_case_epsilon >= 0


def test_lists_are_cached_by_the_table_and_a_bad_cache_is_rebuilt(tmp_path, monkeypatch):
    import textdp.sanitize.diffractor as dmod

    monkeypatch.setenv("TEXTDP_CACHE", str(tmp_path))
    emb = _emb(n=2100, dim=5, seed=21)  # tables of at least 2048 output words are cached
    first = make_mechanism("1-diffractor", emb, 1.0, output_vocabulary="full", n_lists=2).lists
    files = list((tmp_path / "diffractor").glob("lists-*.npy"))
    assert len(files) == 1

    def no_build(*a, **k):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(dmod, "build_lists", no_build)
    assert make_mechanism("1-diffractor", emb, 3.0, output_vocabulary="full", n_lists=2).lists == first
    monkeypatch.undo()
    monkeypatch.setenv("TEXTDP_CACHE", str(tmp_path))
    files[0].write_bytes(b"not an array")  # a damaged cache only costs the rebuild
    assert make_mechanism("1-diffractor", emb, 1.0, output_vocabulary="full", n_lists=2).lists == first
    moved = Embeddings(emb.words, emb.vectors * 2, source="test-table", kind="word", lowercase=True)
    other = make_mechanism("1-diffractor", moved, 1.0, output_vocabulary="full", n_lists=2)
    other.lists  # another table (here: the vectors scaled) has its own cache entry
    assert len(list((tmp_path / "diffractor").glob("lists-*.npy"))) == 2
