"""CusText and CusText+ (Chen et al., Findings of ACL 2023): groups, exact law, draws, the ratio
audit at the claimed epsilon, the ledger currency, parameters, and agreement with pypantera.

Law under test (src/textdp/sanitize/custext.py): the output vocabulary is partitioned into groups of
k words; a word x of group G is replaced by y in G with probability
``exp(eps u(x,y)/2) / Z``, ``u(x,y) = -(d(x,y) - d_min)/(d_max - d_min)`` over G (sensitivity 1).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from textdp.accounting import GroupDP, MetricDP
from textdp.accounting.composition import compose, group_key, parse_currency
from textdp.accounting.ledger import CurrencyNotBudgetedError, Ledger
from textdp.embeddings import Embeddings
from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA
from textdp.sanitize import make_mechanism
from textdp.sanitize.custext import build_groups

#: registry coverage (tests/test_registry_coverage.py): chi-square of the draws against the exact law
#: (test_draws_follow_the_exact_law), and the exact ratio audit at the claimed epsilon on the closest and
#: on random pairs of every group (test_ratio_bound_audit_on_closest_and_random_pairs)
DISTRIBUTION_TESTED = ("custext", "custext+")
AUDITED = ("custext", "custext+")
ALPHA = 1e-3
NAMES = ("custext", "custext+")


def _emb(n=60, dim=5, seed=7, extra=()):
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    words = [f"w{i}" for i in range(n)] + list(extra)
    vec = g.standard_normal((len(words), dim)).astype(np.float32)
    return Embeddings(words, vec, source="custext-test-table", kind="word", lowercase=True)


def _naive_groups(vec, k):
    """The greedy partition restated plainly: float64 direct distances, ties by index."""
    y = np.asarray(vec, dtype=np.float64)
    left = list(range(len(y)))
    group = np.full(len(y), -1)
    g = 0
    while left:
        lead = left[0]
        d = {j: (-1.0 if j == lead else float(((y[j] - y[lead]) ** 2).sum())) for j in left}
        chosen = sorted(left, key=lambda j: (d[j], j))[:k]
        group[chosen] = g
        left = [j for j in left if j not in chosen]
        g += 1
    return group


# ------------------------------------------------------------------ groups
@pytest.mark.parametrize("k", [2, 3, 7, 20, 60])
def test_groups_partition_the_output_vocabulary(k):
    emb = _emb()
    m = make_mechanism("custext", emb, 2.0, k=k, rng=0)
    groups = m.groups()
    flat = [w for g in groups for w in g]
    assert sorted(flat) == sorted(m.output_words) and len(flat) == len(set(flat))  # a partition
    sizes = [len(g) for g in groups]
    assert sizes[:-1] == [k] * (len(sizes) - 1) and 1 <= sizes[-1] <= k
    # the greedy rule: each group's first word is the first word left in the public order
    assert [g[0] for g in groups] == sorted((g[0] for g in groups), key=lambda w: int(w[1:]))
    np.testing.assert_array_equal(build_groups(emb.vectors, k), _naive_groups(emb.vectors, k))


def test_group_building_breaks_exact_ties_by_the_public_order():
    g = np.random.Generator(np.random.PCG64(3))
    base = g.standard_normal((8, 3))
    vec = np.concatenate([base, base, base[:4]])  # many exact distance ties
    for k in (2, 3, 5):
        np.testing.assert_array_equal(build_groups(vec, k), _naive_groups(vec, k))


@pytest.mark.parametrize("name", NAMES)
def test_output_always_inside_the_group(name):
    """Every draw lies in the input's group, also for input words outside the output vocabulary
    (they take the group of their nearest output word)."""
    emb = _emb(n=80)
    vocab = [f"w{i}" for i in range(0, 80, 2)] + ["the", "of"] if name == "custext+" else \
        [f"w{i}" for i in range(0, 80, 2)]
    emb = _emb(n=80, extra=("the", "of"))
    m = make_mechanism(name, emb, 1.0, k=6, output_vocabulary=vocab, rng=2)
    inputs = [f"w{i}" for i in range(80)] + (["the", "of"] if name == "custext+" else [])
    rows = m.input_rows(inputs)
    draws = m.sample_rows(np.repeat(rows, 200), rng=5).reshape(len(rows), 200)
    words = emb.words
    for word, group, d in zip(inputs, m.groups(inputs), draws):
        got = {words[r] for r in d.tolist()}
        assert got <= set(group), (word, got - set(group))
        if word not in vocab:  # nearest output word's group
            x = emb.vectors[emb.index[word]].astype(np.float64)
            dist = [float(((emb.vectors[emb.index[v]] - x) ** 2).sum()) for v in vocab]
            assert group == m.groups([vocab[int(np.argmin(dist))]])[0]
    if name == "custext+":
        assert m.kept_words == ["the", "of"]
        assert (draws[-2:] == rows[-2:, None]).all()  # stop words released unchanged


# ------------------------------------------------------------------ the law
def _formula(emb, x, group, eps):
    """The paper's sampling function restated: exp(eps u / 2)/Z, u = -(d - d_min)/(d_max - d_min)."""
    xv = emb.vectors[emb.index[x]].astype(np.float64)
    d = np.array([np.sqrt(((emb.vectors[emb.index[y]].astype(np.float64) - xv) ** 2).sum()) for y in group])
    u = -(d - d.min()) / (d.max() - d.min())
    w = np.exp(eps * u / 2)
    return w / w.sum()


@pytest.mark.parametrize("eps", [0.5, 3.0, 30.0])
def test_ideal_law_is_the_paper_formula_and_the_sampled_law_its_float_safe_version(eps):
    emb = _emb()
    m = make_mechanism("custext", emb, eps, k=7, rng=0)
    words = [f"w{i}" for i in range(0, 60, 5)]
    ideal, real = m.ideal_probabilities(words), m.probabilities(words)
    cols = {w: i for i, w in enumerate(m.output_words)}
    for i, (w, group) in enumerate(zip(words, m.groups(words))):
        idx = [cols[y] for y in group]
        np.testing.assert_allclose(ideal[i, idx], _formula(emb, w, group, eps), rtol=1e-9)
        mixed = (1 - DEFAULT_ETA) * ideal[i, idx] + DEFAULT_ETA / len(group)
        np.testing.assert_allclose(real[i, idx], mixed, rtol=1e-9)
        assert ideal[i].sum() == pytest.approx(1.0) and real[i].sum() == pytest.approx(1.0)
        outside = np.setdiff1d(np.arange(len(cols)), idx)
        assert (real[i, outside] == 0).all() and (ideal[i, outside] == 0).all()


def _chisq(draw_cols, probs):
    obs = np.bincount(draw_cols, minlength=len(probs))
    keep = probs > 0
    assert obs[~keep].sum() == 0, "drew an outcome of probability zero"
    e, o = probs[keep] * len(draw_cols), obs[keep]
    return stats.chisquare(o, e * o.sum() / e.sum()).pvalue


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", [1.0, 6.0])
def test_draws_follow_the_exact_law(name, eps):
    """Chi-square (level 1e-3 each) of 20,000 seeded keyed draws per word against ``probabilities``."""
    emb = _emb(extra=("the",))
    m = make_mechanism(name, emb, eps, k=7, rng=11)
    words = ["w0", "w13", "w29", "w44", "w59"]
    p = m.probabilities(words)
    rows = m.input_rows(words)
    n = 20_000
    draws = m.output_positions(m.sample_rows(np.repeat(rows, n), rng=17)).reshape(len(words), n)
    for i in range(len(words)):
        assert _chisq(draws[i], p[i]) > ALPHA, words[i]
    # a wrong law fails: the uniform law over the group
    wrong = (p[0] > 0) / (p[0] > 0).sum()
    assert _chisq(draws[0], wrong) < ALPHA
    if name == "custext+":
        r = m.input_rows(["the"])
        assert (m.sample_rows(np.repeat(r, 100), rng=1) == r[0]).all()
        assert m.probabilities(["the"])[0, m.output_positions(r)[0]] == 1.0


# ------------------------------------------------------------------ the audit
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", [0.5, 3.0, 12.0])
def test_ratio_bound_audit_on_closest_and_random_pairs(name, eps):
    """Exact audit of the claim on the realised law: for the closest pair and 10 random pairs of
    every group, max over outputs of ln p(y|x)/p(y|x') <= eps + epsilon0. Also records how tight
    the bound is (the largest ratio reaches more than half of eps)."""
    emb = _emb(n=90)
    m = make_mechanism(name, emb, eps, k=9, rng=0)
    g = m.guarantee
    assert isinstance(g, GroupDP) and g.epsilon == eps and 0 < g.epsilon0 < 1e-10
    bound = g.epsilon + g.epsilon0
    rng = np.random.Generator(np.random.PCG64(1))  # picks the audited pairs, not DP noise
    worst = 0.0
    for group in m.groups():
        logp = np.log(m.probabilities(group)[:, m.output_positions(m.input_rows(group))])
        vec = emb.vectors[m.input_rows(group)].astype(np.float64)
        d = np.sqrt(((vec[:, None] - vec[None]) ** 2).sum(-1)) + np.eye(len(group)) * 1e9
        i, j = np.unravel_index(np.argmin(d), d.shape)
        pairs = [(i, j), (j, i)] + [tuple(rng.choice(len(group), 2, replace=False)) for _ in range(10)]
        for a, b in pairs:
            r = float((logp[a] - logp[b]).max())
            assert r <= bound, (group[a], group[b], r, bound)
            worst = max(worst, r)
    assert worst > 0.5 * eps  # the audit looks at ratios near the claim, not only at easy pairs
    # the exact ratio over all pairs of a group reaches the bound's order: eps/2 + log-normaliser ratio
    assert math.isinf(g.worst_case_epsilon)  # different groups: told apart with certainty


def test_the_audit_catches_per_token_top_k_sets():
    """The audit fails the per-token top-k design of pypantera (and of the authors' 'aggressive'
    strategy): two neighbouring words get different output sets, so some output has probability 0
    under one and not the other (an infinite log-ratio). With groups that never happens."""
    emb = _emb()
    y = emb.vectors.astype(np.float64)
    d = np.sqrt(((y[:, None] - y[None]) ** 2).sum(-1))
    k = 7
    topk = [set(np.argsort(d[i], kind="stable")[:k].tolist()) for i in range(len(y))]
    nearest = np.argsort(d, axis=1)[:, 1]
    assert any(topk[i] != topk[int(nearest[i])] for i in range(len(y)))  # supports differ: ratio = inf
    m = make_mechanism("custext", emb, 3.0, k=k, rng=0)
    p = m.probabilities(emb.words)
    for group in m.groups():
        rows = p[m.input_rows(group)]
        assert ((rows > 0) == (rows[0] > 0)).all()  # one support per group


def test_epsilon_extremes():
    emb = _emb()
    m = make_mechanism("custext", emb, 1e-9, k=6, rng=0)
    p = m.probabilities(["w3"])
    nz = p[0][p[0] > 0]
    np.testing.assert_allclose(nz, 1 / 6, rtol=1e-8)  # eps -> 0: uniform over the group
    m = make_mechanism("custext", emb, 1e4, k=6, rng=0)
    r = m.input_rows(["w3"])
    assert m.probabilities(["w3"])[0, m.output_positions(r)[0]] > 1 - 1e-5  # eps -> inf: the word itself


# ------------------------------------------------------------------ the ledger
def _custext_guarantee():
    return make_mechanism("custext", _emb(), 2.0, k=7, rng=0).guarantee


def test_group_currency_and_composition():
    g = _custext_guarantee()
    assert group_key(g) == "group/token"
    assert parse_currency("custext") == parse_currency("group-token") == parse_currency("group/token") == "group/token"
    c = compose([g, g])
    assert isinstance(c, GroupDP) and c.epsilon == 4.0 and c.epsilon0 == 2 * g.epsilon0 and math.isinf(
        c.worst_case_epsilon)
    from textdp.accounting.guarantees import guarantee_from_dict

    assert guarantee_from_dict(json.loads(json.dumps(g.to_dict(), default=str))) == g


@pytest.mark.parametrize("currency", [None, "metric/token", "dp/token"])
def test_ledger_refuses_custext_under_a_budget_that_does_not_name_its_currency(tmp_path, currency):
    led = Ledger("toy", tmp_path / "ledgers")
    led.set_budget(100.0, currency=currency)
    g = _custext_guarantee()
    with pytest.raises(CurrencyNotBudgetedError) as err:
        led.check(g)
    assert "group/token" in str(err.value) and len(str(err.value).splitlines()) == 1
    e = led.record(g, command="sanitize --mechanism custext", force=True)
    assert e["forced"] is True and "group/token" in e["forced_reason"]
    if currency is None:  # the wildcard still covers the other currencies
        led.check(MetricDP(epsilon=1.0))


def test_ledger_accepts_custext_under_a_named_budget_and_caps_it(tmp_path):
    led = Ledger("toy", tmp_path / "ledgers")
    led.set_budget(5.0, currency="group/token")
    g = _custext_guarantee()  # eps = 2
    led.record(g, command="sanitize --mechanism custext")
    led.record(g, command="sanitize --mechanism custext")
    with pytest.raises(Exception) as err:  # 6 > 5
        led.check(g)
    assert "exceeded" in str(err.value)
    assert led.summary()["groups"]["group/token"]["epsilon"] == 4.0


def test_cli_ledger_refusal_and_force(tmp_path):
    from textdp.cli.main import app

    src = tmp_path / "in.txt"
    src.write_text("w1 w2 w3\nw4 w5\n", encoding="utf-8")
    table = tmp_path / "t.glove.txt"
    emb = _emb()
    table.write_text("".join(f"{w} {' '.join(f'{x:.6f}' for x in v)}\n" for w, v in zip(emb.words, emb.vectors)),
                     encoding="utf-8")
    d = str(tmp_path / "ledgers")
    runner = CliRunner()
    assert runner.invoke(app, ["budget", "set", str(src), "--epsilon", "10", "--ledger-dir", d]).exit_code == 0
    base = ["sanitize", str(src), "-m", "custext", "-e", "2", "-P", "k=5", "--embeddings", str(table),
            "--ledger-dir", d, "--overwrite", "-q"]
    r = runner.invoke(app, [*base, "-o", str(tmp_path / "a.txt")])
    assert r.exit_code != 0 and "group/token" in r.output and "Traceback" not in r.output, r.output
    r = runner.invoke(app, [*base, "-o", str(tmp_path / "b.txt"), "--force"])
    assert r.exit_code == 0, r.output
    card = json.loads((tmp_path / "b.txt.card.json").read_text(encoding="utf-8"))
    assert card["guarantee"]["kind"] == "group-dp" and card["parameters"]["k"] == 5
    assert any("group" in w for w in card["warnings"])


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("k", [0, 1, -3, 2.5, True, "x"])
def test_bad_k_is_one_line(k):
    """k = 1 too (the review released a whole corpus unchanged, charged as 3-DP, with -P k=1)."""
    with pytest.raises(ParameterError) as err:
        make_mechanism("custext", _emb(), 1.0, k=k)
    assert "k" in str(err.value) and len(str(err.value).splitlines()) == 1


def test_k_larger_than_the_output_vocabulary_is_refused():
    m = make_mechanism("custext", _emb(n=10), 1.0, k=11)
    with pytest.raises(ParameterError, match="larger than the output vocabulary"):
        m.probabilities(["w1"])


@pytest.mark.parametrize("value, words", [("0", "k"), ("1", "no protection"), ("abc", "k"), ("100000", "larger than the output vocabulary")])
def test_bad_k_through_the_cli_is_one_line(tmp_path, value, words):
    from textdp.cli.main import app

    src = tmp_path / "in.txt"
    src.write_text("w1 w2\n", encoding="utf-8")
    table = tmp_path / "t.glove.txt"
    emb = _emb()
    table.write_text("".join(f"{w} {' '.join(f'{x:.6f}' for x in v)}\n" for w, v in zip(emb.words, emb.vectors)),
                     encoding="utf-8")
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", "custext", "-e", "1", "-P", f"k={value}",
                                 "--embeddings", str(table), "--no-ledger", "-o", str(tmp_path / "o.txt")])
    msg = r.output.strip()
    assert r.exit_code == 2 and len(msg.splitlines()) == 1 and msg.startswith("error:") and words in msg, msg


def test_custext_plus_stop_words_parameter():
    emb = _emb(extra=("the", "of", "film"))
    assert make_mechanism("custext+", emb, 1.0, k=5, stop_words="none").kept_words == []
    assert make_mechanism("custext+", emb, 1.0, k=5, stop_words=["film"]).kept_words == ["film"]
    with pytest.raises(ParameterError):
        make_mechanism("custext+", emb, 1.0, stop_words="english")
    m = make_mechanism("custext+", emb, 1.0, k=5)
    assert "stop words" in m.guarantee.describe() and any("NOT protected" in w for w in m.card_warnings())


# ------------------------------------------------------------------ peer agreement
def test_ideal_law_agrees_with_pypantera(tmp_path):
    """pypantera 1.0.2's CusText (``src/SamplingPerturbationMechanism/custext.py`` lines 84-94:
    ``newSimDistList = [-(x-min_dist)/min_max_dist ...]``, ``p ∝ exp(eps x / 2)``) gives each word
    the law over its own k nearest words. For the first word of the public order, that set IS its
    group (it is built first, from all words), so the two laws must agree (to pypantera's float32).

    pypantera's sampler itself (``processText``: ``np.random.choice(..., p=float32 list)``) raises
    "probabilities do not sum to 1" on numpy 2 for most words (2,098 of 2,400 calls on a random
    400 x 50 table with k in {20, 50}, eps in {1, 3, 10}; numpy 2.4.6): only its formula is compared."""
    pp = pytest.importorskip("src.SamplingPerturbationMechanism.custext")
    emb = _emb(n=40, dim=6)
    path = tmp_path / "emb.txt"
    path.write_text("".join(f"{w} {' '.join(f'{x:.6f}' for x in v)}\n" for w, v in zip(emb.words, emb.vectors)),
                    encoding="utf-8")
    ours_emb = Embeddings(list(emb.words), np.array([[float(f"{x:.6f}") for x in v] for v in emb.vectors],
                                                    dtype=np.float32), source="pp", kind="word", lowercase=True)
    for eps, k in [(1.0, 5), (3.0, 8), (10.0, 12)]:
        peer = pp.CusText({"embPath": str(path), "epsilon": eps, "k": k, "distance": "euclidean"})
        sim, prob = peer._getCustomizedMapping("w0")
        m = make_mechanism("custext", ours_emb, eps, k=k, rng=0)
        group = m.groups(["w0"])[0]
        assert set(sim["w0"]) == set(group)
        p = m.ideal_probabilities(["w0"])[0]
        ours = [p[m.output_positions(m.input_rows([w]))[0]] for w in sim["w0"]]
        np.testing.assert_allclose(ours, np.asarray(prob["w0"], dtype=np.float64), rtol=2e-5)
