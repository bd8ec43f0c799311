"""Reconstruction-success (ReRo) bounds: textdp.bounds.rero (Hayes, Mahloujifar & Balle 2023;
Kaissis et al. 2023) and the comparison games of textdp.bounds.rero_compare."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from textdp.bounds.rero import (
    approx_dp_rero_bound,
    check_kappa,
    gaussian_rero_bound,
    laplace_rero_bound,
    randomized_response_rero_bound,
    rero_bound,
    rero_bound_from_pld,
    rero_mechanism,
    token_reconstruction,
)
from textdp.errors import InputError, ParameterError

KAPPAS = np.array([1e-6, 1e-4, 1e-3, 0.005, 0.01, 0.1, 0.3, 0.5, 0.9])
#: a coarser privacy-loss grid than the default 1e-4 keeps these tests fast; the bound stays an upper bound and
#: moves by less than 1e-5 relative (measured: 7e-6 at worst); one test pins the default's precision
D = 1e-3


# ------------------------------------------------------------------ closed forms against the PLD route


@pytest.mark.parametrize("sigma,sens,releases,disc,rtol", [(0.5, 1.0, 1, D, 2e-5), (2.0, 1.0, 1, None, 1e-6),
                                                            (3.0, 1.5, 4, D, 2e-5)])
def test_gaussian_pld_bound_is_the_gdp_closed_form(sigma, sens, releases, disc, rtol):
    kw = {} if disc is None else {"discretization": disc}  # None: dp-accounting's default grid, 1e-4
    got = rero_bound("gaussian", KAPPAS, sigma=sigma, sensitivity=sens, releases=releases, **kw)
    exact = norm.cdf(norm.ppf(KAPPAS) + sens * math.sqrt(releases) / sigma)  # Φ(Φ⁻¹(κ) + μ)
    assert np.all(got >= exact - 1e-12)  # pessimistic PLD: never below the true bound
    np.testing.assert_allclose(got, exact, rtol=rtol, atol=1e-9)
    np.testing.assert_allclose(gaussian_rero_bound(KAPPAS, sens * math.sqrt(releases) / sigma), exact, rtol=1e-14)


@pytest.mark.parametrize("eps,k", [(0.5, 2), (2.0, 2), (2.0, 10), (1.0, 1000), (6.0, 200)])
def test_randomized_response_pld_bound_is_the_closed_form(eps, k):
    got = rero_bound("randomized-response", KAPPAS, epsilon=eps, categories=k)
    exact = randomized_response_rero_bound(KAPPAS, eps, k)
    assert np.all(got >= exact - 1e-12)
    # the PLD rounds the losses ±ε to its 1e-4 grid (pessimistically): the bound moves by at most ~1e-4 relative
    np.testing.assert_allclose(got, exact, rtol=2e-4, atol=1e-9)


def test_randomized_response_closed_form_by_hand():
    # k = 10, ε = ln 3: r = 1/(3 + 9) = 1/12, p = 3/12; κ = 1/10 lies in the middle piece: p + κ − r
    eps = math.log(3)
    assert randomized_response_rero_bound(0.1, eps, 10) == pytest.approx(3 / 12 + 0.1 - 1 / 12, rel=1e-14)
    assert randomized_response_rero_bound(0.05, eps, 10) == pytest.approx(3 * 0.05, rel=1e-14)  # κ ≤ r: e^ε κ
    # κ = 0.8 > (k − 1) r = 0.75: p + (k − 2) r + e^{−ε}(κ − 0.75)
    assert randomized_response_rero_bound(0.8, eps, 10) == pytest.approx(3 / 12 + 8 / 12 + 0.05 / 3, rel=1e-14)
    # binary RR is the (ε, 0)-DP trade-off curve
    np.testing.assert_allclose(randomized_response_rero_bound(KAPPAS, 1.3, 2), approx_dp_rero_bound(KAPPAS, 1.3),
                               rtol=1e-13)


def test_approx_dp_closed_form_by_hand():
    e = math.exp(1.0)
    # min(1, e^ε κ + δ, 1 − e^{−ε}(1 − δ − κ))
    assert approx_dp_rero_bound(0.1, 1.0, 1e-5) == pytest.approx(e * 0.1 + 1e-5, rel=1e-14)
    assert approx_dp_rero_bound(0.5, 1.0, 0.0) == pytest.approx(1 - 0.5 / e, rel=1e-14)
    assert approx_dp_rero_bound(0.5, 50.0) == 1.0 and approx_dp_rero_bound(0.5, math.inf) == 1.0
    assert approx_dp_rero_bound(0.2, 0.0) == pytest.approx(0.2)  # ε = 0: the prior alone
    np.testing.assert_allclose(rero_bound("dp", KAPPAS, epsilon=1.0, delta=1e-5),
                               approx_dp_rero_bound(KAPPAS, 1.0, 1e-5), rtol=1e-15)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_laplace_pld_bound_is_at_least_the_exact_laplace_trade_off(eps):
    got = rero_bound("laplace", KAPPAS, epsilon=eps, discretization=D)
    exact = laplace_rero_bound(KAPPAS, eps)
    assert np.all(got >= exact - 1e-12)
    np.testing.assert_allclose(got, exact, rtol=2e-5, atol=1e-12)
    # the exact Laplace curve lies below the curve of every ε-DP mechanism (binary RR) ...
    assert np.all(exact <= approx_dp_rero_bound(KAPPAS, eps) + 1e-15)
    # ... strictly between e^{−ε}/2 and 1/2 (Laplace is not the worst ε-DP mechanism)
    mid = np.linspace(math.exp(-eps) / 2, 0.5, 50)
    assert np.max(approx_dp_rero_bound(mid, eps) - laplace_rero_bound(mid, eps)) > 1e-3


def test_laplace_closed_form_by_hand():
    # ε = ln 4: e^{−ε}/2 = 1/8; κ = 0.05 → 4·0.05; κ = 0.25 → 1 − (1/4)/(4·0.25) = 0.75; κ = 0.6 → 1 − 0.4/4
    eps = math.log(4)
    assert laplace_rero_bound(0.05, eps) == pytest.approx(0.2, rel=1e-14)
    assert laplace_rero_bound(0.25, eps) == pytest.approx(0.75, rel=1e-14)
    assert laplace_rero_bound(0.6, eps) == pytest.approx(0.9, rel=1e-14)
    r2 = rero_bound("laplace", [0.01, 0.2], epsilon=0.5, releases=2, discretization=D)  # two releases compose: weaker than one at 0.5
    assert np.all(r2 > laplace_rero_bound([0.01, 0.2], 0.5))


@pytest.mark.parametrize("q,sigma", [(0.01, 1.0), (0.2, 0.8), (1.0, 2.0)])
def test_one_dpsgd_step_is_the_subsampled_gaussian_neyman_pearson_test(q, sigma):
    # P = N(0, σ²), Q = (1 − q) N(0, σ²) + q N(1, σ²): the likelihood ratio rises with x, so the best test at level κ
    # rejects x > c = σ Φ⁻¹(1 − κ), with power (1 − q) κ + q Φ̄((c − 1)/σ)
    c = sigma * norm.ppf(1 - KAPPAS)
    exact = (1 - q) * KAPPAS + q * norm.sf((c - 1) / sigma)
    got = rero_bound("dpsgd", KAPPAS, sigma=sigma, sampling_rate=q, steps=1, discretization=D)
    assert np.all(got >= exact - 1e-12)
    np.testing.assert_allclose(got, exact, rtol=2e-5, atol=1e-10)


def test_dpsgd_without_subsampling_composes_like_the_gaussian():
    got = rero_bound("dpsgd", KAPPAS, sigma=2.0, sampling_rate=1.0, steps=9, discretization=D)
    np.testing.assert_allclose(got, gaussian_rero_bound(KAPPAS, 3 / 2.0), rtol=2e-5, atol=1e-9)  # μ = √T/σ


def test_neyman_pearson_equals_the_hockey_stick_dual_of_the_public_api():
    """rero_bound_from_pld reads dp-accounting's pmf; the public get_delta_for_epsilon gives the same number as
    min(1, inf_ε e^ε κ + δ(ε)) over a fine ε grid (any ε gives an upper bound; the grid's minimum is tight)."""
    from dp_accounting.pld import privacy_loss_distribution as pldm

    pld = pldm.from_gaussian_mechanism(1.0, 1.0, value_discretization_interval=1e-3, sampling_prob=0.05)
    pld = pld.self_compose(50)
    eps = np.arange(-6000, 12001) * 1e-3  # multiples of the discretisation: contains every loss level
    deltas = np.asarray(pld._pmf_remove.get_delta_for_epsilon(eps))  # noqa: SLF001 - the REMOVE pair only
    for k in (1e-4, 0.01, 0.2, 0.6):
        dual = min(1.0, float(np.min(np.exp(eps) * k + deltas)))
        assert rero_bound_from_pld(pld, k, "remove") == pytest.approx(dual, rel=1e-9, abs=1e-12)
    # "both" takes the larger of the two directions
    both = rero_bound_from_pld(pld, KAPPAS, "both")
    assert np.all(both >= rero_bound_from_pld(pld, KAPPAS, "remove") - 1e-15)
    assert np.all(both >= rero_bound_from_pld(pld, KAPPAS, "add") - 1e-15)


def test_little_noise_takes_a_coarser_grid_and_stays_an_upper_bound():
    """μ = Δ/σ = 10 would need 2·10⁶ loss levels at 1e-4: the grid becomes 5e-4 and is named in the source."""
    k = np.array([1e-20, 1e-15, 1e-10])
    b = rero_mechanism("gaussian", sigma=0.1)
    assert "discretisation 0.0005" in b.source
    from textdp.bounds.rero import MAX_LEVELS, _grid

    assert MAX_LEVELS == 400_000 and _grid(1e-4, 20 * 2.0) == 1e-4  # σ ≥ 0.5 keeps dp-accounting's default
    assert _grid(1e-4, 2 * 60.0) == pytest.approx(3e-4)  # Laplace, ε = 60
    exact = gaussian_rero_bound(k, 10.0)
    got = b.bound(k)
    assert np.all(got >= exact - 1e-12)
    np.testing.assert_allclose(got, exact, rtol=1e-4)


# ------------------------------------------------------------------ properties


def test_bounds_are_monotone_and_above_the_baseline():
    k = np.geomspace(1e-6, 0.99, 60)
    rows = {}
    for eps in (0.25, 0.5, 1.0, 2.0):
        rows.setdefault("laplace", []).append(rero_bound("laplace", k, epsilon=eps, discretization=D))
        rows.setdefault("randomized-response", []).append(rero_bound("randomized-response", k, epsilon=eps,
                                                                     categories=7, discretization=D))
        rows.setdefault("dp", []).append(rero_bound("dp", k, epsilon=eps, delta=1e-6))
    for sigma in (4.0, 2.0, 1.0, 0.5):  # decreasing σ: less noise, larger bound
        rows.setdefault("gaussian", []).append(rero_bound("gaussian", k, sigma=sigma, discretization=D))
        rows.setdefault("dpsgd", []).append(rero_bound("dpsgd", k, sigma=sigma, sampling_rate=0.05, steps=20,
                                                       discretization=D))
    for name, curves in rows.items():
        B = np.array(curves)
        assert np.all(np.diff(B, axis=1) >= -1e-12), f"{name}: not non-decreasing in κ"
        assert np.all(np.diff(B, axis=0) >= -1e-12), f"{name}: not non-decreasing in ε (or 1/σ)"
        assert np.all(B >= k - 1e-9) and np.all(B <= 1.0), name
    # DP-SGD: more steps or a larger sampling rate never help the defender
    kw = {"sigma": 1.0, "discretization": D}
    b1 = rero_bound("dpsgd", [1e-3, 0.1], sampling_rate=0.01, steps=100, **kw)
    assert np.all(rero_bound("dpsgd", [1e-3, 0.1], sampling_rate=0.01, steps=400, **kw) >= b1)
    assert np.all(rero_bound("dpsgd", [1e-3, 0.1], sampling_rate=0.04, steps=100, **kw) >= b1)


def test_the_bound_object_reports_what_it_compares():
    b = rero_mechanism("dpsgd", sigma=1.0, sampling_rate=0.01, steps=10, discretization=D)
    d = b.to_dict()
    assert d["mechanism"] == "dpsgd" and d["sampling_rate"] == 0.01 and d["steps"] == 10
    assert "add/remove" in b.neighbours and "REMOVE" in b.source
    assert b.bound(np.full((2, 3), 0.1)).shape == (2, 3)
    assert rero_mechanism("gaussian", sigma=2.0, releases=4, discretization=D).params["mu"] == pytest.approx(1.0)


@pytest.mark.parametrize("call,match", [
    (lambda: rero_bound("dp", 0.0, epsilon=1.0), r"kappa .* must be in \(0, 1\), got 0$"),
    (lambda: rero_bound("dp", [0.1, 1.0], epsilon=1.0), r"must be in \(0, 1\), got 1$"),
    (lambda: rero_bound("dp", -0.5, epsilon=1.0), r"got -0.5$"),
    (lambda: rero_bound("dp", float("nan"), epsilon=1.0), r"got nan$"),
    (lambda: rero_mechanism("dp", epsilon=1.0).bound([0.2, 0.0]), r"got 0$"),
    (lambda: check_kappa([]), r"at least one value"),
    (lambda: check_kappa("abc"), r"must be numbers in \(0, 1\)"),
    (lambda: rero_mechanism("gaussian", sigma=0.0), r"sigma must be a positive finite number, got 0.0$"),
    (lambda: rero_mechanism("gaussian", sigma=-1.0), r"sigma must be a positive finite number"),
    (lambda: rero_mechanism("dpsgd", sigma=-2.0, sampling_rate=0.1, steps=3), r"noise multiplier"),
    (lambda: rero_mechanism("dpsgd", sigma=1.0, sampling_rate=0.0, steps=3), r"sampling_rate q .* \(0, 1\], got 0.0$"),
    (lambda: rero_mechanism("dpsgd", sigma=1.0, sampling_rate=1.5, steps=3), r"\(0, 1\], got 1.5$"),
    (lambda: rero_mechanism("dpsgd", sigma=1.0, sampling_rate=0.1, steps=0), r"steps must be a whole number ≥ 1"),
    (lambda: rero_mechanism("dpsgd", sigma=1.0, steps=3), r"dpsgd needs sampling_rate$"),
    (lambda: rero_mechanism("randomized-response", epsilon=1.0, categories=1), r"categories .* ≥ 2"),
    (lambda: rero_mechanism("laplace", epsilon=0.0), r"epsilon must be a positive finite number"),
    (lambda: rero_mechanism("laplace", epsilon=1.0, sigma=2.0), r"laplace takes no sigma"),
    (lambda: rero_mechanism("dp", epsilon=1.0, delta=1.0), r"delta must be in \[0, 1\)"),
    (lambda: rero_mechanism("exponential", epsilon=1.0), r"unknown mechanism 'exponential'"),
    (lambda: gaussian_rero_bound(0.1, -1.0), r"mu .* must be ≥ 0"),
    (lambda: rero_mechanism("gaussian", sigma=0.01), r"sigma/sensitivity = 0.01 is below 0.02"),
    (lambda: rero_mechanism("gaussian", sigma=0.5, sensitivity=50.0), r"is below 0.02 \(μ = Δ/σ above 50\)"),
    (lambda: rero_mechanism("dpsgd", sigma=0.001, sampling_rate=0.1, steps=3), r"rises to 1 − \(1 − q\)\^T"),
])
def test_bad_input_is_one_clear_line(call, match):
    with pytest.raises(ParameterError, match=match) as ei:
        call()
    assert "\n" not in str(ei.value)


# ------------------------------------------------------------------ token sanitizers: the exact Bayes optimum


def _rr_channel(V: int, eps: float):
    from textdp.attacks.bayes import MatrixChannel

    r = 1.0 / (math.exp(eps) + V - 1)
    P = np.full((V, V), r)
    np.fill_diagonal(P, 1.0 - (V - 1) * r)
    names = [f"w{i}" for i in range(V)]
    return MatrixChannel(P, names, names)


@pytest.mark.parametrize("V,eps", [(2, 1.0), (20, 2.0), (200, 5.0)])
def test_randomized_response_channel_reaches_its_closed_forms(V, eps):
    t = token_reconstruction(_rr_channel(V, eps))
    assert t.kappa == pytest.approx(1 / V) and t.n_inputs == V and t.n_outputs == V
    assert t.bayes_top1 == pytest.approx(math.exp(eps) / (math.exp(eps) + V - 1), rel=1e-12)  # keep probability
    assert t.epsilon_pairs == pytest.approx(eps, rel=1e-12) and t.epsilon_reference == pytest.approx(eps, rel=1e-12)
    assert t.bound == pytest.approx(float(approx_dp_rero_bound(1 / V, eps)), rel=1e-12)
    # the attack is below the exact RR bound, which is below the bound of every ε-DP mechanism
    assert t.bayes_top1 <= float(randomized_response_rero_bound(1 / V, eps, V)) + 1e-12 <= t.bound + 2e-12


def test_hand_built_channel_by_hand():
    from textdp.attacks.bayes import MatrixChannel

    P = np.array([[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.1, 0.2, 0.7]])
    ch = MatrixChannel(P, ["a", "b", "c"], ["a", "b", "c"])
    t = token_reconstruction(ch, np.array([0.5, 0.3, 0.2]))
    # Σ_y max_x π(x) p(y|x) = .30 + .18 + .14 (test_bayes_optimum's worked example)
    assert t.bayes_top1 == pytest.approx(0.62, abs=1e-12) and t.kappa == pytest.approx(0.5)
    # worst pair: column c, 0.7 against 0.1: ε = ln 7; bound min(1, 7/2, 1 − (1 − 1/2)/7) = 13/14
    assert t.epsilon_pairs == pytest.approx(math.log(7)) and t.bound == pytest.approx(13 / 14)
    # best reference b = (.2, .6, .2): the farthest law is c's 0.7 against 0.2, ε = ln 3.5; bound 1 − 0.5/3.5
    assert t.epsilon_reference == pytest.approx(math.log(3.5)) and t.bound_reference == pytest.approx(6 / 7)
    # a prior on one word: nothing to reconstruct, the bound is 1
    one = token_reconstruction(ch, np.array([0.0, 1.0, 0.0]))
    assert one.kappa == 1.0 and one.bayes_top1 == pytest.approx(1.0) and one.bound == 1.0


def test_random_channels_never_beat_their_bounds(rng):
    from textdp.attacks.bayes import MatrixChannel

    for _ in range(30):
        n, m = int(rng.integers(2, 12)), int(rng.integers(2, 12))
        P = rng.dirichlet(np.full(m, float(rng.uniform(0.5, 5.0))), size=n)
        pi = rng.dirichlet(np.ones(n))
        t = token_reconstruction(MatrixChannel(P, [f"x{i}" for i in range(n)], [f"y{j}" for j in range(m)]), pi)
        assert t.kappa == pytest.approx(pi.max())
        assert t.kappa - 1e-12 <= t.bayes_top1 <= t.bound_reference + 1e-12 <= t.bound + 2e-12
        L = np.log(P)
        assert t.epsilon_pairs == pytest.approx(float(np.max(L[:, None, :] - L[None, :, :])), rel=1e-12)


@pytest.fixture(scope="module")
def small_santext():
    from textdp.embeddings import load_embeddings
    from textdp.sanitize import make_mechanism

    emb = load_embeddings("glove-6b-50d")
    return make_mechanism("santext", emb, 1.0, rng=0, output_vocabulary=list(emb.words[:60]))


def test_santext_uses_the_exact_bayes_optimum_of_the_attacks(small_santext):
    from textdp.attacks.bayes import bayes_optimum

    mech = small_santext
    words = mech.output_words
    t = token_reconstruction(mech)
    assert t.kappa == pytest.approx(1 / len(words)) and t.n_inputs == len(words)
    assert t.bayes_top1 == bayes_optimum(mech, np.ones(len(words)), k=1).top1  # the same number, not recomputed
    P = mech.probabilities(words)
    assert t.bayes_top1 == pytest.approx(P.max(axis=0).sum() / len(words), rel=1e-12)  # brute force, uniform π
    L = np.log(P)
    assert t.epsilon_pairs == pytest.approx(float(np.max(L[:, None, :] - L[None, :, :])), rel=1e-12)
    assert t.bayes_top1 <= t.bound_reference <= t.bound
    assert t.epsilon_guarantee is not None and t.epsilon_guarantee >= t.epsilon_pairs - 1e-9
    # a word -> count prior: out-of-vocabulary words are skipped, κ is the largest in-vocabulary share
    counts = {words[0]: 6, words[1]: 3, words[2]: 1, "zzqxv-not-a-word": 10}
    c = token_reconstruction(mech, counts)
    assert c.kappa == pytest.approx(0.6) and c.skipped_mass == pytest.approx(0.5) and c.n_inputs == 3
    assert c.bayes_top1 == pytest.approx(bayes_optimum(mech, counts, k=1).top1, rel=1e-12)
    with pytest.raises(InputError):
        token_reconstruction(mech, {"zzqxv-not-a-word": 1})


def test_approximate_channels_and_other_objects_are_refused():
    from textdp.sanitize import make_mechanism

    fbdd = make_mechanism("fbdd", "glove-6b-50d", 3.0, rng=0, output_vocabulary=["good", "bad", "film"])
    with pytest.raises(ParameterError, match="closed-form"):
        token_reconstruction(fbdd)
    with pytest.raises(ParameterError, match="token sanitizer or a textdp.attacks.bayes.Channel"):
        token_reconstruction(object())


# ------------------------------------------------------------------ the comparison games


def test_glm_candidate_game_attacks_stay_below_the_rero_bound(synthetic_features):
    from textdp.bounds.rero_compare import glm_candidate_game

    f = synthetic_features(60, 6, seed=3)
    g = glm_candidate_game(f, n=40, m=5, lam=0.05, trials=400, rng=7)
    assert g.kappa == pytest.approx(0.2) and g.zero_noise_error < 1e-8  # the reconstruction is exact without noise
    np.testing.assert_allclose(g.rero_bound, norm.cdf(norm.ppf(0.2) + g.mu), rtol=1e-12)  # Φ(Φ⁻¹(κ) + Δ₂/σ)
    games = g.m * g.trials
    # both attacks are valid reconstruction attacks: their success is below the bound (one-sided 99.9 % binomial)
    # (the bound of this candidate set, from its weights' radius, is tighter and must hold too)
    assert 0 < g.weight_radius <= g.sensitivity and np.all(g.rero_bound_instance <= g.rero_bound + 1e-15)
    for s in (g.success_likelihood, g.success_reconstruction):
        for b in (g.rero_bound, g.rero_bound_instance):
            se = np.sqrt(b * (1 - b) / games)
            assert np.all(s <= b + 3.1 * se + 1e-12), (s, b)
    # with little noise the likelihood attack always finds the target, with much noise it falls to about κ
    assert g.success_likelihood[-1] > 0.98
    assert abs(g.success_likelihood[0] - g.kappa) < 4 * math.sqrt(g.kappa * (1 - g.kappa) / games)
    assert np.all(np.diff(g.rdp_mse_bound) <= 1e-15) and np.all(np.diff(g.fil_mse_bound) < 0)  # σ decreases
    with pytest.raises(ParameterError):
        glm_candidate_game(f, n=40, m=1)
    with pytest.raises(InputError, match="distinct candidate"):
        glm_candidate_game(f, n=58, m=5)


def test_token_game_and_figure(tmp_path, synthetic_features):
    from textdp.bounds.rero_compare import glm_candidate_game, plot_rero, token_game

    tg = token_game([1.0, 3.0], vocab_size=40, rr_epsilons=[0.5, 2.0])
    assert tg.kappa == pytest.approx(1 / 40) and len(tg.rows) == 2
    np.testing.assert_allclose(tg.rr_bayes, np.exp([0.5, 2.0]) / (np.exp([0.5, 2.0]) + 39), rtol=1e-12)
    assert tg.rows[0]["bayes_top1"] < tg.rows[1]["bayes_top1"]  # more ε, more success
    for r in tg.rows:
        assert r["bayes_top1"] <= r["bound_reference"] <= r["bound"]
    glm = glm_candidate_game(synthetic_features(60, 6, seed=3), n=40, m=5, lam=0.05, trials=20, rng=1)
    out = tmp_path / "rero.png"
    plot_rero(out, [("σ = 1", rero_mechanism("dp", epsilon=1.0))], np.geomspace(1e-4, 0.99, 50), tokens=tg, glm=glm)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ParameterError, match="vocab_size"):
        token_game([1.0], vocab_size=1)
