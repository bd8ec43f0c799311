"""The exact optimum of the one-token attacker and the informed (default) prior of the Bayes
attack (textdp.attacks.bayes.bayes_optimum / expected_success, textdp.evaluate.bayes_attack)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from textdp.attacks.bayes import (BayesInversion, MatrixChannel, MechanismChannel, bayes_optimum,
                                  expected_success, word_prior)
from textdp.errors import InputError, ParameterError

X = ["a", "b", "c"]
PI = np.array([0.5, 0.3, 0.2])  # the true distribution of the original words
P = np.array([[0.6, 0.3, 0.1],   # p(y | a)
              [0.2, 0.6, 0.2],   # p(y | b)
              [0.1, 0.2, 0.7]])  # p(y | c)


def test_hand_built_channel_attack_equals_the_optimum_computed_by_hand(rng):
    # π(x)·p(y|x):      y=a    y=b    y=c
    #   x=a             .30    .15    .05
    #   x=b             .06    .18    .06
    #   x=c             .02    .04    .14
    # top-1 optimum = max per column = .30 + .18 + .14 = .62
    # top-2 optimum = two largest per column = (.30+.06) + (.18+.15) + (.14+.06) = .36 + .33 + .20 = .89
    ch = MatrixChannel(P, X, X)
    opt = bayes_optimum(ch, PI, k=2)
    assert opt.top1 == pytest.approx(0.62, abs=1e-12)
    assert opt.topk == pytest.approx(0.89, abs=1e-12)
    assert bayes_optimum(ch, {"a": 50, "b": 30, "c": 20}, k=2).top1 == pytest.approx(0.62, abs=1e-12)  # counts
    # the attack with the informed prior π guesses a, b, c for outputs a, b, c ...
    atk = BayesInversion(ch, np.log(PI), k=2)
    guesses = atk.guess(X)
    assert [g[0] for g in guesses] == ["a", "b", "c"]
    # ... so its expected top-1 success is π(a)p(a|a) + π(b)p(b|b) + π(c)p(c|c) = .30 + .18 + .14 = .62
    by_guess = sum(PI[X.index(g[0])] * P[X.index(g[0]), j] for j, g in enumerate(guesses))
    assert by_guess == pytest.approx(0.62, abs=1e-12)
    assert atk.expected_success(PI, k=1) == pytest.approx(0.62, abs=1e-12)
    assert atk.expected_success(PI, k=2) == pytest.approx(0.89, abs=1e-12)
    assert expected_success(ch, PI, None, k=2).top1 == pytest.approx(0.62, abs=1e-12)
    # and measured on sampled tokens it agrees (binomial 99.9 % interval, n = 20000)
    n = 20_000
    x = rng.choice(3, size=n, p=PI)
    y = ch.sample(x, rng)
    res = atk.attack([X[i] for i in x], [X[j] for j in y])
    assert abs(res.top1 - 0.62) <= 3.29 * math.sqrt(0.62 * 0.38 / n)


def test_hand_built_channel_mismatched_priors_by_hand():
    ch = MatrixChannel(P, X, X)
    # ρ = (.45, .5, .05): ρ(x)·p(y|x) = [[.27 .135 .045], [.10 .30 .10], [.005 .01 .035]]
    # guesses: y=a -> a, y=b -> b, y=c -> b; success = π(a)p(a|a) + π(b)(p(b|b) + p(c|b)) = .30 + .24 = .54
    rho = np.log([0.45, 0.5, 0.05])
    assert expected_success(ch, PI, rho, k=1).top1 == pytest.approx(0.54, abs=1e-12)
    assert BayesInversion(ch, rho, k=1).expected_success(PI) == pytest.approx(0.54, abs=1e-12)
    # ρ = (.1, .1, .8): every output is guessed "c"; success = π(c) = .2
    assert expected_success(ch, PI, np.log([0.1, 0.1, 0.8]), k=1).top1 == pytest.approx(0.2, abs=1e-12)
    # uniform ρ: argmax_x p(y|x) is a, b, c here, so it happens to reach the optimum .62
    assert expected_success(ch, PI, "uniform", k=1).top1 == pytest.approx(0.62, abs=1e-12)


@pytest.mark.parametrize("k", [1, 3])
def test_blocks_and_random_priors_never_beat_the_optimum(k, rng):
    n, m = 40, 25
    Q = rng.dirichlet(np.full(m, 0.3), size=n)
    pi = rng.dirichlet(np.ones(n))
    ch = MatrixChannel(Q, [f"x{i}" for i in range(n)], [f"y{j}" for j in range(m)])
    V = pi[:, None] * Q
    brute = np.sort(V, axis=0)[::-1][:k].sum()
    for bb in (1, 8 * m * 4 * 3, 10**8):  # one input per block, three per block, one block
        got = bayes_optimum(ch, pi, k=k, block_bytes=bb)
        assert got.topk == pytest.approx(brute, rel=1e-12) and got.n_inputs == n and got.n_outputs == m
    for _ in range(5):
        rho = np.log(rng.dirichlet(np.ones(n)))
        assert expected_success(ch, pi, rho, k=k).topk <= brute + 1e-12
        assert expected_success(ch, pi, rho, k=k, block_bytes=1).topk == pytest.approx(
            BayesInversion(ch, rho, k=k).expected_success(pi, k=k), rel=1e-12)


def test_prior_words_outside_the_inputs_are_skipped_and_bad_priors_refused():
    ch = MatrixChannel(P, X, X)
    got = bayes_optimum(ch, {"a": 5, "b": 3, "c": 2, "zz-oov": 10})
    assert got.top1 == pytest.approx(0.62) and got.skipped_mass == pytest.approx(0.5)
    with pytest.raises(InputError):
        bayes_optimum(ch, {"zz": 1})
    with pytest.raises(ParameterError):
        bayes_optimum(ch, np.ones(2))
    with pytest.raises(ParameterError):
        bayes_optimum(ch, {"a": -1.0})
    with pytest.raises(ParameterError):
        expected_success(ch, PI, np.zeros(2))


# ---------------------------------------------------------------- a small real mechanism
TEXTS = ["a good film , a great movie", "the bad , awful plot of the film", "good acting and a bad script",
         "the film is good and the plot is great"]


def _aligned(mech, copies: int):
    from textdp.evaluate import aligned_tokens

    docs = TEXTS * copies
    return aligned_tokens(mech, docs, mech.sanitize(docs))


@pytest.fixture(scope="module")
def mechs():
    """A small explicit output vocabulary (fast): 300 frequent GloVe words plus the texts' words
    except "awful" and "script", so that some inputs lie outside the output vocabulary (as with
    a public vocabulary)."""
    from textdp.embeddings import load_embeddings
    from textdp.sanitize import make_mechanism

    emb = load_embeddings("glove-6b-50d")
    text_words = {w for t in TEXTS for w in t.split()} - {"awful", "script"}
    vocab = sorted(set(emb.words[:300]) | text_words)
    return {name: make_mechanism(name, emb, 3.0, rng=0, output_vocabulary=vocab, **kw).fit(TEXTS)
            for name, kw in (("santext", {}), ("santext+", {"w": 0.5, "p": 0.3}))}


@pytest.mark.parametrize("name", ["santext", "santext+"])
def test_default_prior_attack_equals_the_optimum_on_a_real_mechanism(mechs, name):
    from textdp.evaluate import bayes_attack, channel_for, token_counts

    mech = mechs[name]
    al = _aligned(mech, 300)
    counts = token_counts(mech, al)
    res = bayes_attack(mech, al, max_tokens=None, rng=np.random.default_rng(0))
    assert res["bayes_prior"] == "informed" and res["bayes_skipped"] == 0
    assert "awful" in counts and "awful" not in mech.output_words  # an input outside the output vocabulary
    # brute force over the mechanism's exact law: Σ_y max_x π(x) p(y|x)
    words = list(counts)
    pi = np.array([counts[w] for w in words], float)
    pi /= pi.sum()
    V = pi[:, None] * mech.probabilities(words)
    assert res["bayes_optimum_top1"] == pytest.approx(V.max(axis=0).sum(), rel=1e-9)
    assert res["bayes_optimum_top5"] == pytest.approx(np.sort(V, axis=0)[-5:].sum(), rel=1e-9)
    # the attack's own decisions (its channel, the informed prior) reach the optimum exactly ...
    atk = BayesInversion(channel_for(mech, inputs=words), word_prior(words, counts, smoothing=0), k=5)
    assert atk.expected_success(pi, k=1) == pytest.approx(res["bayes_optimum_top1"], rel=1e-6)
    assert atk.expected_success(pi, k=5) == pytest.approx(res["bayes_optimum_top5"], rel=1e-6)
    # ... and its success measured on the sanitized tokens agrees (binomial 99.9 % interval)
    n, opt = res["bayes_tokens"], res["bayes_optimum_top1"]
    assert abs(res["bayes_top1"] - opt) <= 3.29 * math.sqrt(opt * (1 - opt) / n) + 1e-9
    # mismatched priors: never above the optimum, and the API still takes them
    for prior in ("wordfreq", "uniform"):
        assert expected_success(mech, counts, prior, k=1).top1 <= opt + 1e-9
        r = bayes_attack(mech, al, prior=prior, max_tokens=2000, rng=np.random.default_rng(0))
        assert r["bayes_prior"] == prior and 0 <= r["bayes_top1"] <= 1
        assert r["bayes_optimum_top1"] == pytest.approx(opt)  # the optimum does not depend on the prior used


def test_mechanism_channel_is_the_mechanism_law_and_fbdd_is_refused(mechs):
    from textdp.sanitize import make_mechanism

    mech = mechs["santext"]
    ch = MechanismChannel(mech, inputs=["good", "film"])
    np.testing.assert_allclose(ch.prob_rows([0, 1]), mech.probabilities(["good", "film"]))
    fbdd = make_mechanism("fbdd", "glove-6b-50d", 3.0, rng=0).fit(TEXTS)
    with pytest.raises(ParameterError, match="closed-form"):
        bayes_optimum(fbdd, {"good": 1})


def test_sweep_config_prior_default_and_choices():
    from textdp.evaluate import SweepConfig

    assert SweepConfig().validate().prior == "informed"
    for p in ("wordfreq", "uniform", "Informed"):
        assert SweepConfig(prior=p).validate().prior == p.lower()
    with pytest.raises(ParameterError, match="informed"):
        SweepConfig(prior="lm").validate()
