"""Metrics of model inversion on fixed strings with hand-computed values."""

import math

import pytest

from textdp.attacks.inversion.metrics import (
    attack_accuracy, filter_tokens, kendall_topk_distance, lcs_length, longest_block, match_ground_truth,
    recovery_rates, topk_ranking,
)
from textdp.attacks.inversion.stopwords import NLTK_ENGLISH_STOPWORDS
from textdp.errors import ParameterError


def test_stopword_list_is_nltk_size():
    assert len(NLTK_ENGLISH_STOPWORDS) == 179
    assert "the" in NLTK_ENGLISH_STOPWORDS and "film" not in NLTK_ENGLISH_STOPWORDS


def test_filter_drops_punctuation_specials_stopwords_and_merges_wordpieces():
    assert filter_tokens("[CLS] The perform ##ance was GREAT, isn't it? [SEP]") == ["performance", "great"]
    assert filter_tokens("Café <|endoftext|> ... !!") == ["cafe"]
    assert filter_tokens("") == []


def test_lcs_and_longest_block_hand_values():
    a = ["a", "b", "c", "d", "e"]
    b = ["a", "x", "c", "e", "d"]
    assert lcs_length(a, b) == 3  # a c e  (or a c d)
    assert longest_block(a, b) == 1
    assert longest_block(["x", "b", "c", "d"], ["b", "c", "d", "y"]) == 3
    assert lcs_length([], ["a"]) == 0


def test_match_ground_truth_tie_breaks():
    inv = [["good", "film", "great"]]
    priv = [["good", "film", "long", "boring", "story"], ["good", "film"], ["great"]]
    idx, score = match_ground_truth(inv, priv)
    # LCS 2 for texts 0 and 1: text 1 has the higher LCS/|F(x)| (2/2 > 2/5)
    assert idx[0] == 1 and score[0] == 2
    idx, _ = match_ground_truth([["zzz"]], [["a"], ["b"]])
    assert idx[0] == 0  # all zero: lowest index
    with pytest.raises(ParameterError):
        match_ground_truth(inv, priv, matcher="nope")


def test_recovery_rates_hand_computed():
    inverted = {"pos": ["great acting and a fine story", "the plot twist"], "neg": ["dull movie"]}
    private = {"pos": ["Great acting, great story!", "A fine plot with a secret twist."],
               "neg": ["A dull, dull movie.", "Boring."]}
    public_vocab = {"great", "story", "plot", "movie", "boring"}
    r = recovery_rates(inverted, private, public_vocab)
    # pos: P = {great, acting, story, fine, plot, secret, twist}; U = {great, acting, fine, story, plot, twist}
    assert r["per_label"]["pos"]["rr_vocab"] == pytest.approx(6 / 7)
    # private-only P \ Pub = {acting, fine, secret, twist}; recovered {acting, fine, twist}
    assert r["per_label"]["pos"]["rr_private_only"] == pytest.approx(3 / 4)
    # neg: P = {dull, movie, boring}; U = {dull, movie}
    assert r["per_label"]["neg"]["rr_vocab"] == pytest.approx(2 / 3)
    assert r["rr_vocab"] == pytest.approx((6 / 7 + 2 / 3) / 2)
    # matched: "great acting fine story" -> text 0 (LCS great acting story = 3); set overlap 3/3
    # "plot twist" -> text 1 (LCS 2); set(F(g)) = {fine, plot, secret, twist}: overlap 2/4
    assert r["per_label"]["pos"]["rr_match"] == pytest.approx((1 + 0.5) / 2)
    # neg: "dull movie" -> text 0 {dull, movie}: 1.0
    assert r["rr_match"] == pytest.approx((0.75 + 1.0) / 2)
    assert r["matches"]["pos"] == [(0, 0), (1, 1)]


def test_kendall_identical_disjoint_and_hand_case():
    r = {"a": 0, "b": 1, "c": 2}
    assert kendall_topk_distance(r, r) == 0.0
    assert kendall_topk_distance(r, {"x": 0, "y": 1, "z": 2}) == pytest.approx(1.0)
    # tau1 = a b c, tau2 = a c d, p = 1/2: penalties {b,c} (case 2) and {b,d} (case 3) -> 2 / (9 + 0.5*6)
    assert kendall_topk_distance(r, {"a": 0, "c": 1, "d": 2}, p=0.5) == pytest.approx(2 / 12)
    # p = 0: same pairs, normaliser 9
    assert kendall_topk_distance(r, {"a": 0, "c": 1, "d": 2}, p=0.0) == pytest.approx(2 / 9)
    # fully reversed common lists: all 3 pairs disagree -> 3 / 12
    assert kendall_topk_distance(r, {"c": 0, "b": 1, "a": 2}) == pytest.approx(3 / 12)
    with pytest.raises(ParameterError):
        kendall_topk_distance(r, r, p=2)


def test_kendall_ties():
    # a and b tied in tau1, ordered in tau2: penalty p on {a,b}; other pairs agree
    t1 = topk_ranking({"a": 5, "b": 5, "c": 1}, 3)
    assert t1 == {"a": 0, "b": 0, "c": 2}
    t2 = {"a": 0, "b": 1, "c": 2}
    assert kendall_topk_distance(t1, t2, p=0.5) == pytest.approx(0.5 / 12)
    assert kendall_topk_distance(t1, t2, p=0.0) == 0.0
    # a tie in the list that holds both, case 2: tau1 = {a:0, b:0}, tau2 = {a:0, z:1}
    # {a,b}: case 2 tied -> p; {a,z}: case 2, z below a -> 0; {b,z}: case 3 -> 1 ; norm = 4 + p*(1+1)
    assert kendall_topk_distance({"a": 0, "b": 0}, {"a": 0, "z": 1}, p=0.5) == pytest.approx(1.5 / 5)


def test_topk_ranking_cuts_boundary_ties_alphabetically():
    assert list(topk_ranking(["x", "y", "y", "z", "w"], 2)) == ["y", "w"]


def test_attack_accuracy():
    assert attack_accuracy([0, 1, 1, 0], [0, 1, 0, 0]) == 0.75
    assert math.isnan(attack_accuracy([], []))
