"""TruncatedGumbel (Carvalho et al. 2021, BRR; law as in mldp-text 0.1.2): the audit of the paper's eps·d
claim (written before any claim: the class claims only what passes here), the exact law of k, the
truncated Gumbel noise against its CDF, the output against mldp-text's algorithm re-stated in numpy,
the scale formula against mldp-text's, and parameters. Significance level 1e-3 per test (Bonferroni
over the pairs and outputs of an audit), fixed seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import lambertw

from textdp.audit.metric import cp_log_ratio_lower
from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA
from textdp.sanitize import make_mechanism
from textdp.sanitize._gumbel_kernels import exact_sq
from textdp.sanitize.gumbel import NeighbourLists, TruncatedGumbel, mldp_scale


def _exact_sq_numpy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The oracle of :func:`textdp.sanitize._gumbel_kernels.exact_sq`, in numpy: ``sum_t (x_t - y_jt)^2``
    for every row ``j`` of ``y`` (float ``(V, m)``), float64 ``(V,)``, accumulated over ``t = 0 .. m-1``
    in that order (the same roundings, hence the same numbers)."""
    x = np.asarray(x, dtype=np.float64)
    acc = np.zeros(len(y), dtype=np.float64)
    for t in range(len(x)):
        d = x[t] - np.asarray(y[:, t], dtype=np.float64)
        acc += d * d
    return acc


DISTRIBUTION_TESTED = ("truncated-gumbel",)
AUDITED = ("truncated-gumbel",)

ALPHA = 1e-3
N_AUDIT = 100_000


def _pairwise(v):
    v = np.asarray(v, dtype=np.float64)
    return np.sqrt(((v[:, None, :] - v[None, :, :]) ** 2).sum(-1))


def _mech(emb, eps, **kw):
    kw.setdefault("output_vocabulary", "full")
    return TruncatedGumbel(emb, epsilon=eps, rng=11, **kw)


def _counts(m, n_words, n):
    draws = m.output_positions(m.sample_rows(np.repeat(np.arange(n_words), n))).reshape(n_words, n)
    return np.stack([np.bincount(draws[i], minlength=n_words) for i in range(n_words)])


# ------------------------------------------------------------------------------------------ the audit
def test_audit_refutes_the_papers_metric_claim(small_emb):
    """The paper claims eps·d metric DP. At eps = 1 (where its scale formula gives a valid b > 0) the
    Clopper-Pearson lower bound of the log-ratio exceeds eps·d on the closest pairs and on random pairs:
    the claim is false, so the class must not make it."""
    eps = 1.0
    m = _mech(small_emb, eps)
    m._prepare()
    assert not m.scale_flipped and m.b > 0  # the paper's formula itself, not textdp's |b| fallback
    v = len(small_emb)
    counts = _counts(m, v, N_AUDIT)
    lr = cp_log_ratio_lower(counts, N_AUDIT, ALPHA / v**3)  # Bonferroni over (x, x', y)
    d = _pairwise(small_emb.vectors)
    excess = lr.max(axis=2) - eps * d
    dd = d + np.eye(v) * 1e9
    closest = [(i, int(np.argmin(dd[i]))) for i in range(v)]
    g = np.random.Generator(np.random.PCG64(2))  # which pairs, not DP noise
    random_pairs = [tuple(int(a) for a in g.choice(v, 2, replace=False)) for _ in range(20)]
    worst_closest = max(excess[a, b] for a, b in closest)
    worst_random = max(excess[a, b] for a, b in random_pairs)
    assert worst_closest > 1.0, worst_closest  # measured: 5.57 (pair w9-w7: bound 8.50 against eps·d = 2.93)
    assert worst_random > 1.0, worst_random  # measured: 5.42 (pair w2-w10: 8.45 against 3.03)
    # hence no metric claim: guarantee.epsilon is infinite
    assert math.isinf(m.guarantee.epsilon) and "fails the audit" in m.guarantee.describe()


def test_the_farthest_word_is_never_a_candidate(small_emb):
    """Why: the output is one of the k <= n-1 nearest words, so the word x ranks last is reached only
    through the uniform share (probability eta/n): without it (the paper's law) the ratio is infinite
    for every eps."""
    m = _mech(small_emb, 1.0)
    v = len(small_emb)
    d = _pairwise(small_emb.vectors)
    x = 0
    far = int(np.argmax(d[x]))
    near_far = int(np.argmin(d[far] + np.eye(v)[far] * 1e9))
    counts = _counts(m, v, N_AUDIT)
    assert counts[x, far] <= 2  # expected eta/n * N = 0.008
    lo = stats.beta.ppf(ALPHA, counts[near_far, far], N_AUDIT - counts[near_far, far] + 1)
    assert lo > 0
    # p(far | x) is exactly eta/n (the uniform share alone): the log-ratio is at least ln(lo n / eta),
    # far above eps·d(x, near_far) even with the share; without it (the paper's law) it is infinite
    assert math.log(lo * v / DEFAULT_ETA) > 1.0 * d[x, near_far] + 1.0


def test_claimed_worst_case_is_not_refuted_and_is_infinite_where_inputs_leave_the_vocabulary(small_emb):
    m = _mech(small_emb, 3.0)
    v = len(small_emb)
    w = m.guarantee.worst_case_epsilon
    assert w == pytest.approx(math.log((1 - DEFAULT_ETA + DEFAULT_ETA / v) * v / DEFAULT_ETA), rel=1e-12)
    lr = cp_log_ratio_lower(_counts(m, v, 20_000), 20_000, ALPHA / v**3)
    assert lr.max() <= w
    assert math.isinf(_mech(small_emb, 3.0, output_vocabulary=[f"w{i}" for i in range(6)]).guarantee.worst_case_epsilon)
    assert math.isinf(_mech(small_emb, 3.0, oov="keep").guarantee.worst_case_epsilon)
    assert any("fails textdp's audit" in s for s in m.card_warnings())


# ------------------------------------------------------------------------------------------ the law
def test_k_law_is_the_truncated_poisson(make_emb):
    emb = make_emb(v=30, m=4, seed=6)
    m = _mech(emb, 3.0)
    p = m.k_probabilities()
    lam = math.log(29)
    ref = stats.poisson.pmf(np.arange(30), lam)
    ref /= ref.sum()  # conditioned on k <= n - 1 = 29
    assert np.abs(p - ref[: len(p)]).max() < 1e-15 and ref[len(p):].sum() < 1e-16
    k = m.sample_k(200_000, rng=4)
    obs = np.bincount(k, minlength=len(p))
    keep = p * 200_000 >= 5
    e = np.concatenate([p[keep], [p[~keep].sum()]]) * 200_000
    o = np.concatenate([obs[keep], [obs[~keep].sum()]])
    assert stats.chisquare(o, e).pvalue > ALPHA


def test_noise_is_the_truncated_gumbel(small_emb):
    m = _mech(small_emb, 1.0)
    z = m.noise(100_000, rng=5)
    b, hi = m.b, m.d_max
    assert np.abs(z).max() <= hi

    def cdf(x):
        f = stats.gumbel_r.cdf
        return (f(x, scale=b) - f(-hi, scale=b)) / (f(hi, scale=b) - f(-hi, scale=b))

    assert stats.kstest(z, cdf).pvalue > ALPHA


def _mldp_reference(emb_vectors, x, eps, n, rng, b, d_max):
    """mldp-text 0.1.2 TruncatedGumbel.replace_word with use_faiss=False, re-stated (numpy Generator
    instead of its global state): k from utils.truncated_Poisson (rejection on k <= n-1), the k
    nearest by euclidean_dt + argsort, utils.truncated_Gumbel (rejection on |G| <= max_inter_dist),
    the argmin; k = 0 returns the word."""
    vec = np.asarray(emb_vectors, dtype=np.float64)
    dist = np.sqrt(((vec - vec[x]) ** 2).sum(axis=1))
    idx_all = np.lexsort((np.arange(len(vec)), dist))
    out = np.empty(n, dtype=np.int64)
    lam = math.log(len(vec) - 1)
    for t in range(n):
        k = len(vec)
        while k > len(vec) - 1:
            k = rng.poisson(lam)
        if k == 0:
            out[t] = x
            continue
        idx = idx_all[:k]
        noise = []
        while len(noise) < k:
            g = rng.gumbel(0.0, b)
            if abs(g) <= d_max:
                noise.append(g)
        out[t] = idx[int(np.argmin(dist[idx] + np.array(noise)))]
    return out


def test_output_agrees_with_mldp_texts_algorithm(small_emb):
    """Two-sample chi-square (homogeneity) between textdp's keyed draws and mldp-text's algorithm
    re-stated with its own rejection samplers, per word (the uniform share eta = 2^-20 is far below
    what 20,000 draws resolve)."""
    eps = 1.0
    m = _mech(small_emb, eps)
    m._prepare()
    v = len(small_emb)
    rng = np.random.Generator(np.random.PCG64(9))  # the reference algorithm's own randomness
    n = 20_000
    ours = m.output_positions(m.sample_rows(np.repeat(np.arange(v), n))).reshape(v, n)
    for x in (0, 3, 7):
        ref = _mldp_reference(small_emb.vectors, x, eps, n, rng, m.b, m.d_max)
        a, c = np.bincount(ours[x], minlength=v), np.bincount(ref, minlength=v)
        keep = (a + c) > 0
        p = stats.chi2_contingency(np.stack([a[keep], c[keep]]))[1]
        assert p > ALPHA / 3, (x, a, c)


def test_scale_matches_mldp_texts_formula(small_emb):
    """mldp_text/mechanisms.py TruncatedGumbel.__init__: a = (eps - 2(1 + ln n)/d_min)/3; b = 2 d_max /
    Re W(2 a d_max) if a d_min <= 0 else 2 d_max / min(Re W(2 a d_max), ln(a d_min))."""
    m = _mech(small_emb, 1.0)
    m._prepare()
    n, lo, hi = len(small_emb), m.d_min, m.d_max
    for eps in (0.3, 1.0, 3.0, 10.0, 40.0):
        a = (eps - 2 * (1 + np.log(n)) / lo) / 3
        if a * lo <= 0:
            b = 2 * hi / lambertw(2 * a * hi).real
        else:
            b = 2 * hi / np.min(np.array([lambertw(2 * a * hi).real, np.log(a * lo)]))
        assert mldp_scale(eps, n, lo, hi) == pytest.approx(float(b), rel=1e-12)
    # reference distances: the smallest and largest non-zero distance from the first output word
    d0 = _pairwise(small_emb.vectors)[0]
    assert (lo, hi) == (d0[d0 > 0].min(), d0.max())
    flipped = _mech(small_emb, 3.0)
    flipped._prepare()  # eps = 3 on this table: the formula is negative; |b| is used and the card says so
    assert flipped.scale_flipped and flipped.b == pytest.approx(-mldp_scale(3.0, n, lo, hi))
    assert any("negative" in s for s in flipped.card_warnings())


# ------------------------------------------------------------------------------------------ the neighbour lists
def _brute_lists(y, x_rows, vectors, k):
    """The rule, by brute force: the k columns of smallest (exact squared distance, column)."""
    cols, dist = [], []
    for r in x_rows:
        e = _exact_sq_numpy(vectors[r], y)
        order = np.lexsort((np.arange(len(y)), e))[:k]
        cols.append(order)
        dist.append(np.sqrt(e[order]))
    return np.array(cols), np.array(dist)


def test_exact_distance_kernel_is_its_numpy_twin():
    """The kernel sums (x_t - y_t)^2 in float64 in one fixed order, without reassociation or fused
    multiply-adds: bit for bit the numpy twin's column-by-column accumulation."""
    g = np.random.Generator(np.random.PCG64(4))  # test data
    for dtype in (np.float32, np.float64):
        y = (g.standard_normal((2000, 50)) * 3).astype(dtype)
        for _ in range(5):
            x = g.standard_normal(50) * 3
            cols = np.arange(2000)
            np.testing.assert_array_equal(exact_sq(x, y, cols, np.empty(2000)), _exact_sq_numpy(x, y))
    y = np.full((1, 50), 1.5, dtype=np.float32)
    assert exact_sq(np.full(50, 1.5), y, np.array([0]), np.empty(1))[0] == 0.0


@pytest.mark.parametrize("case", ["gaussian", "ties", "offset", "huge"])
def test_lists_are_the_exact_k_nearest_by_value_then_column(case):
    """NeighbourLists against the rule by brute force (every column scored exactly): the same columns in
    the same order and the same distances, bit for bit. "ties": coordinates on a grid of 1/2 (many equal
    distances: the column decides); "offset": a table far from the origin (large norms: the float32
    prefilter's bound grows with them); "huge": an entry of 1e20 (no float32 prefilter: every column is
    scored exactly). Inputs include words outside the output vocabulary."""
    g = np.random.Generator(np.random.PCG64(7))  # test data
    v, m = 3000, 8
    vec = g.standard_normal((v + 200, m))
    if case == "ties":
        vec = np.round(vec * 2) / 2
    elif case == "offset":
        vec = vec + 300.0
    elif case == "huge":
        vec[5, 0] = 1e20
    vec = vec if case == "huge" else vec.astype(np.float32)
    out = np.sort(g.choice(v + 200, v, replace=False))
    lists = NeighbourLists(vec, out, vec.mean(axis=0))
    assert (lists.tiles is None) == (case == "huge")
    x_rows = g.choice(v + 200, 150, replace=False)
    y = vec[out]
    for k in (1, 7, 32, v):
        cols, dist = lists.compute(x_rows, k, block_rows=64)
        ref_cols, ref_dist = _brute_lists(y, x_rows, vec, k)
        np.testing.assert_array_equal(cols, ref_cols)
        np.testing.assert_array_equal(dist, ref_dist)
    own = np.flatnonzero(np.isin(x_rows, out))
    assert len(own) and (dist[own, 0] == 0.0).all()  # d(x, x) = 0 exactly for an output word
    if case == "gaussian":  # the prefilter prunes: about k columns scored per word (k = 1, 7, 32, then all)
        assert lists.scored < 1.2 * (1 + 7 + 32 + v) * len(x_rows)


def test_lists_do_not_depend_on_the_other_words_or_the_block():
    g = np.random.Generator(np.random.PCG64(8))  # test data
    vec = g.standard_normal((4000, 16)).astype(np.float32)
    lists = NeighbourLists(vec, np.arange(0, 4000, 2), vec.mean(axis=0))
    rows = g.choice(4000, 300, replace=False)
    cols, dist = lists.compute(rows, 32, block_rows=128)
    for i in range(20):
        one = lists.compute(rows[i:i + 1], 32, block_rows=1)
        np.testing.assert_array_equal(one[0][0], cols[i])
        np.testing.assert_array_equal(one[1][0], dist[i])
    rc, rd = lists.compute(rows[::-1], 32, block_rows=7)
    np.testing.assert_array_equal(rc[::-1], cols)
    np.testing.assert_array_equal(rd[::-1], dist)


def test_draws_do_not_depend_on_blocks_or_chunks(make_emb):
    emb = make_emb(v=300, m=4, seed=1)
    rows = np.tile(np.arange(300), 3)
    a = _mech(emb, 2.0).sample_rows(rows, rng=3)
    import textdp.sanitize.gumbel as gm

    old = gm._BLOCK, gm._CHUNK
    gm._BLOCK, gm._CHUNK = 7, 50
    try:
        b = _mech(emb, 2.0).sample_rows(rows, rng=3)  # a fresh mechanism: its lists are computed in blocks of 7
    finally:
        gm._BLOCK, gm._CHUNK = old
    np.testing.assert_array_equal(a, b)


def test_a_records_output_does_not_depend_on_the_other_records(make_emb):
    """design.md: the law of one record depends only on that record. Sanitize a corpus, then each
    document alone at the same record index of the same seeded release (a fresh mechanism per document,
    and one mechanism whose memoised lists fill up document by document): the same outputs. Inputs
    include words outside the output vocabulary."""
    emb = make_emb(v=400, m=6, seed=2)
    vocab = [f"w{i}" for i in range(0, 400, 2)]
    g = np.random.Generator(np.random.PCG64(5))  # test data
    docs = [" ".join(f"w{j}" for j in g.integers(0, 400, int(g.integers(1, 30)))) for _ in range(40)]

    def mech():
        return TruncatedGumbel(emb, epsilon=3.0, rng=17, output_vocabulary=vocab)

    whole = mech().sanitize(docs)
    assert sum(a != b for a, b in zip(whole, docs)) > 30  # the mechanism does change the documents
    memo = mech()
    memo.begin_release()
    for i, d in enumerate(docs):
        alone = mech()
        alone.begin_release()
        assert alone.sanitize_with_stats([d], first_record=i)[0] == [whole[i]]
        assert memo.sanitize_with_stats([d], first_record=i)[0] == [whole[i]]


def test_memoised_lists_give_a_fresh_mechanisms_draws(make_emb):
    """A second call reuses the first call's lists (nothing recomputed) and draws what a fresh mechanism
    draws from the same key."""
    emb = make_emb(v=2000, m=8, seed=3)
    g = np.random.Generator(np.random.PCG64(6))  # test data
    first, second = g.integers(0, 2000, 3000), g.integers(0, 1000, 3000)
    m = _mech(emb, 3.0)
    m.sample_rows(np.concatenate([first, np.arange(1000)]), rng=1)
    listed = m._lists.listed
    a = m.sample_rows(second, rng=3)
    assert m._lists.listed == listed  # every word of the second call was memoised by the first
    np.testing.assert_array_equal(a, _mech(emb, 3.0).sample_rows(second, rng=3))


def test_a_pickled_mechanism_carries_no_memo(make_emb):
    """The memo says which input words a call held (private): a pickled copy has none, and recomputes the
    same lists, hence the same draws."""
    import pickle

    emb = make_emb(v=500, m=6, seed=4)
    rows = np.random.Generator(np.random.PCG64(7)).integers(0, 500, 800)  # test data
    m = _mech(emb, 3.0)
    a = m.sample_rows(rows, rng=2)
    assert m._lists.size > 0 and (m._lists.slot >= 0).sum() == m._lists.size
    copy = pickle.loads(pickle.dumps(m._lists))
    assert copy.size == 0 and copy.cols.shape[0] == 0 and (copy.slot < 0).all()
    m._lists = copy
    np.testing.assert_array_equal(m.sample_rows(rows, rng=2), a)
    assert copy.size == m._lists.size > 0


def test_k_beyond_the_lists_takes_the_same_exact_rule(make_emb):
    """Tokens whose k exceeds the memoised list length get their word's k nearest by the same rule: with
    lists of 3 (k > 3 for most tokens at n = 300) the draws equal those with the default 32."""
    emb = make_emb(v=300, m=4, seed=9)
    rows = np.tile(np.arange(300), 4)
    short = _mech(emb, 2.0)
    short.neighbours = 3
    a = short.sample_rows(rows, rng=8)
    assert short._lists.k == 3 and short._lists.listed > 300  # longer lists were computed for k > 3
    np.testing.assert_array_equal(a, _mech(emb, 2.0).sample_rows(rows, rng=8))
    assert (short.sample_k(len(rows), rng=8) > 3).mean() > 0.3


# ------------------------------------------------------------------------------------------ parameters
@pytest.mark.parametrize("kw", [{"scale": 0.0}, {"scale": -1.0}, {"scale": float("inf")}, {"min_distance": 0.0},
                                {"max_distance": float("nan")}, {"min_distance": 2.0, "max_distance": 1.0}])
def test_bad_parameters_get_one_line(small_emb, kw):
    with pytest.raises(ParameterError) as e:
        make_mechanism("truncated-gumbel", small_emb, 1.0, **kw)
    assert "\n" not in str(e.value)


def test_scale_parameter_is_used(small_emb):
    m = _mech(small_emb, 1.0, scale=0.5, max_distance=2.0)
    m._prepare()
    assert m.b == 0.5 and m.d_max == 2.0 and m.parameters()["scale"] == 0.5
    assert np.abs(m.noise(1000, rng=1)).max() <= 2.0


# ------------------------------------------------------------------------------------------ eps and the card
def test_card_warns_where_the_scale_formula_is_outside_its_domain(small_emb):
    """Below eps = 2(1 + ln n)/d_min the paper's formula evaluates Lambert W where it is complex (its real
    part is used) and its scale is not monotone in eps: the card says so; above the threshold it does not."""
    m = _mech(small_emb, 1.0)
    m._prepare()
    n, lo, hi = len(small_emb), m.d_min, m.d_max
    thr = 2 * (1 + np.log(n)) / lo
    dom = m.formula_domain()
    assert dom["threshold"] == pytest.approx(thr) and not dom["in_domain"]
    inside, outside = _mech(small_emb, thr + 50.0), _mech(small_emb, thr / 4)
    assert inside.formula_domain()["in_domain"] and not outside.formula_domain()["in_domain"]
    assert outside.formula_domain()["complex"] == (2 * (thr / 4 - thr) / 3 * hi < -np.exp(-1))
    warn = [s for s in outside.card_warnings() if "outside its domain" in s]
    assert len(warn) == 1 and "not monotone in eps" in warn[0] and "eps does not control the noise" in warn[0]
    assert not [s for s in inside.card_warnings() if "outside its domain" in s]
    assert not [s for s in _mech(small_emb, 1.0, scale=2.0).card_warnings() if "outside its domain" in s]
    # the non-monotonicity the warning states, on GloVe 6B 50d's default figures (n = 30,000)
    b = [abs(mldp_scale(e, 30000, 1.9376, 15.6035)) for e in (0.1, 1, 3, 10, 15, 20, 50, 1000)]
    assert b[4] > 4 * b[2] and b[7] < b[0]  # eps 3 -> 15: four times more noise; eps 1000 less than eps 0.1


def test_card_says_no_guarantee_first(small_emb):
    """The guarantee is filed as metric-dp (the ledger's class) with epsilon inf: its description and the
    card's units say 'no guarantee' first."""
    m = _mech(small_emb, 3.0)
    g = m.guarantee
    assert g.kind == "metric-dp" and math.isinf(g.epsilon)
    assert g.describe().startswith("no guarantee")
    assert m.card_units()["kind"].startswith("no guarantee")


def test_corpus_vocabulary_calibrates_from_public_data(small_emb):
    """With output_vocabulary="corpus" d_min, d_max and n of the scale formula come from the embedding table
    (its first word, its size), not from the corpus's words."""
    a = TruncatedGumbel(small_emb, epsilon=20.0, rng=1, output_vocabulary="corpus").fit(["w3 w5 w7"])
    b = TruncatedGumbel(small_emb, epsilon=20.0, rng=1, output_vocabulary="corpus").fit(["w9 w2"])
    full = _mech(small_emb, 20.0)
    assert a.parameters() == b.parameters()
    for k in ("scale", "min_distance", "max_distance"):
        assert a.parameters()[k] == full.parameters()[k]  # the full table from its first word, n = table size
