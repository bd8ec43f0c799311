"""The metric-DP audit of word sanitizers (textdp.audit.metric, ``textdp audit sanitizer``).

* the audit FLAGS a SanText whose law is exp(-eps d) (real guarantee 2 eps d) while it claims eps d, and
  does not flag the correct SanText: exactly (from the laws) and from samples;
* the same for a sampled continuous mechanism: FBDD with its noise scale halved against the correct FBDD;
* the sampled lower bounds are valid: never above the exact loss of the same pair (SanText, known law);
* UMLDP (SanText+) and group-DP (CusText) claims are read from the guarantee and not refuted;
* your own sampler ``module:function`` and pyPANTERA's through the same code;
* bad input: one line, exit 2.

Fixed seeds; the sampled audits state their simultaneous confidence (alpha = 0.05, Bonferroni inside).
"""

from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.audit.broken_sanitizers import HalfNoiseFBDD, MisScaledSanText
from textdp.audit.metric import (MetricClaim, audit_sanitizer, callable_target, claim_from_guarantee,
                                 cp_log_ratio_lower, exact_loss_matrix, sanitizer_target, worst_excess)
from textdp.cli.main import app
from textdp.embeddings import Embeddings
from textdp.errors import ParameterError
from textdp.sanitize import FBDD, SanText, make_mechanism

runner = CliRunner()


def _emb(v=15, m=4, seed=3, scale=1.0):
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    vec = (g.standard_normal((v, m)) * scale).astype(np.float32)
    return Embeddings([f"w{i}" for i in range(v)], vec, source="test", kind="word", lowercase=True)


def _all_words(mech, emb):
    return sanitizer_target(mech, words=list(emb.words))


# ------------------------------------------------------------------------------------------ SanText
def test_exact_audit_flags_the_misscaled_santext_and_not_the_correct_one():
    emb = _emb()
    good = audit_sanitizer(_all_words(SanText(emb, 2.0, output_vocabulary="full"), emb), seed=1)
    bad = audit_sanitizer(_all_words(MisScaledSanText(emb, 2.0, output_vocabulary="full"), emb), seed=1)
    assert good.method == bad.method == "exact"
    assert good.claim.epsilon == bad.claim.epsilon == 2.0  # the broken one claims what the correct one does
    assert good.verdict == "not refuted" and not good.flagged
    assert bad.verdict == "FLAG" and bad.flagged
    # every kind of pair is caught: the closest, the random and the searched worst
    for kind in ("closest", "random", "search"):
        assert bad.worst[kind][0].flagged and bad.worst[kind][0].loss > bad.worst[kind][0].claim
        assert not any(p.flagged for p in good.worst[kind])
    # not vacuous: the correct mechanism's worst pair uses a good part of its claim
    assert 0.4 < good.worst["search"][0].ratio <= 1.0
    # the mis-scaled law's worst pair is about the claim times (1 + something): between 1 and 2
    assert 1.0 < bad.worst["search"][0].ratio <= 2.0 + 1e-9


def test_sampled_audit_flags_the_misscaled_santext_and_its_bounds_are_valid():
    """The same verdicts from samples (method='sampled' on mechanisms whose exact law is known), and every
    sampled lower bound is at most the exact loss of its pair (validity, at the stated confidence)."""
    emb = _emb()
    for cls, flag in ((SanText, False), (MisScaledSanText, True)):
        mech = cls(emb, 2.0, output_vocabulary="full")
        t = _all_words(mech, emb)
        s = audit_sanitizer(t, method="sampled", samples=20_000, alpha=0.05, seed=3)
        assert s.method == "sampled" and s.flagged is flag, (cls.__name__, s.worst)
        exact = exact_loss_matrix(mech.probabilities(list(emb.words)))
        idx = {w: i for i, w in enumerate(emb.words)}
        for p in s.pairs:
            a, b = idx[p.word_a], idx[p.word_b]
            assert p.loss <= exact[a, b] + 1e-12, (p, exact[a, b])
        assert max(p.loss for p in s.pairs) > 0.5  # the bounds are not trivially 0


# ------------------------------------------------------------------------------------------ FBDD (sampled)
def test_sampled_audit_flags_fbdd_with_halved_noise_and_not_the_correct_fbdd():
    emb = _emb(v=12, m=2, seed=5)
    good = audit_sanitizer(_all_words(FBDD(emb, 1.5, output_vocabulary="full"), emb), samples=20_000, seed=1)
    bad = audit_sanitizer(_all_words(HalfNoiseFBDD(emb, 1.5, output_vocabulary="full"), emb), samples=20_000, seed=1)
    assert good.method == bad.method == "sampled"
    assert good.claim.epsilon == bad.claim.epsilon == 1.5
    assert not good.flagged and good.verdict == "not refuted"
    assert bad.flagged and bad.verdict == "FLAG"
    assert bad.worst["closest"][0].flagged  # caught on a closest pair too, not only by the search
    worst_good = max(p.ratio for p in good.pairs)
    assert 0.5 < worst_good <= 1.0  # the correct one comes close to its claim without exceeding it


def test_auto_method_and_guarantee_claims():
    emb = _emb()
    f = sanitizer_target(FBDD(emb, 1.0, output_vocabulary="full"), n_words=4, seed=0)
    assert not f.exact and f.claim.kind == "metric-dp" and f.claim.epsilon0 > 0
    with pytest.raises(ParameterError, match="no exact law"):
        audit_sanitizer(f, method="exact")
    g = make_mechanism("truncated-gumbel", emb, 1.0, output_vocabulary="full")
    c = claim_from_guarantee(g.guarantee)
    assert math.isinf(c.epsilon) and "no metric claim" in c.text() and math.isfinite(c.worst_case_epsilon)
    assert math.isinf(c.bound(np.array([0.5, 2.0])).min())


# ------------------------------------------------------------------------------------------ UMLDP, group DP
def test_santext_plus_umldp_and_custext_group_claims_are_not_refuted():
    emb = _emb(v=20, m=3, seed=4)
    plus = make_mechanism("santext+", emb, 2.0, output_vocabulary="full", w=0.5, p=0.3)
    r = audit_sanitizer(_all_words(plus, emb), seed=0)
    assert r.claim.kind == "umldp" and r.claim.sensitive_outputs_only
    assert not r.flagged and not r.umldp_violations and r.verdict == "not refuted"
    assert r.max_loss == math.inf  # a kept non-sensitive word: the plain-DP loss is unbounded, as the card says
    cus = make_mechanism("custext", emb, 2.0, output_vocabulary="full", k=5)
    r = audit_sanitizer(_all_words(cus, emb), seed=0)
    assert r.claim.within_groups and not r.flagged
    # closest pairs are taken inside a group (the claim covers no other pair)
    assert all(math.isfinite(p.claim) and p.claim == pytest.approx(2.0 + r.claim.epsilon0) for p in r.worst["closest"])
    assert r.max_loss == math.inf  # words of different groups: disjoint outputs, as GroupDP says


def test_exact_helpers_agree_with_the_definition():
    p = np.array([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.0, 0.0, 1.0]])
    m = exact_loss_matrix(p)
    assert m[0, 1] == pytest.approx(math.log(2)) and m[1, 0] == math.inf and m[2, 0] == math.inf
    assert m[0, 2] == math.inf and np.all(np.diag(m) == 0)
    d = np.ones((3, 3))
    assert worst_excess(p[:2], d[:2, :2] * 10) == math.inf
    assert worst_excess(p[:2, :2] / p[:2, :2].sum(1, keepdims=True), np.full((2, 2), 1.0)) < 0
    lo = cp_log_ratio_lower(np.array([[900, 100], [100, 900]]), 1000, 1e-3)
    assert 0 < lo[0, 1, 0] < math.log(9) and np.isneginf(cp_log_ratio_lower(np.array([[0, 5], [5, 0]]), 5, 0.01)[0, 1, 0])


# ------------------------------------------------------------------------------------------ your own sampler
def _rr(eps_real, words):
    """k-ary randomized response over ``words``: eps_real-DP (discrete metric)."""
    k = len(words)
    keep = math.exp(eps_real) / (math.exp(eps_real) + k - 1)

    def f(word, n, rng):
        out = np.array(words, dtype=object)[rng.integers(0, k, n)]
        out[rng.random(n) < keep - (1 - keep) / (k - 1)] = word  # P(word) = keep exactly
        return list(out)
    return f


def test_callable_sampler_with_a_discrete_claim():
    words = ["a", "b", "c", "d"]
    claim = MetricClaim(1.0, 0.0, "discrete", "pure-dp")
    ok = audit_sanitizer(callable_target(_rr(1.0, words), claim, words), samples=20_000, seed=2)
    leaky = audit_sanitizer(callable_target(_rr(2.0, words), claim, words), samples=20_000, seed=2)
    assert not ok.flagged and leaky.flagged
    assert max(p.loss for p in ok.pairs) > 0.7  # close to the true eps = 1


@pytest.fixture
def user_samplers(tmp_path, monkeypatch):
    (tmp_path / "mysan.py").write_text(textwrap.dedent("""
        import math
        import numpy as np
        WORDS = ["good", "great", "bad", "awful", "film", "movie"]

        def rr(word, n, rng, eps=1.0):
            keep = math.exp(eps) / (math.exp(eps) + len(WORDS) - 1)
            out = np.array(WORDS, dtype=object)[rng.integers(0, len(WORDS), n)]
            out[rng.random(n) < keep - (1 - keep) / (len(WORDS) - 1)] = word
            return list(out)

        def leaky(word, n, rng):
            return rr(word, n, rng, eps=3.0)

        def short(word, n, rng):
            return [word] * (n - 1)

        def numbers(word, n, rng):
            return list(range(n))

        def boom(word, n, rng):
            raise RuntimeError("boom")
    """))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(*args):
    return runner.invoke(app, ["audit", "sanitizer", *args])


def test_cli_user_sampler_discrete_and_euclidean(user_samplers, small_glove_file):
    words = "good,great,bad,awful"
    r = _run("mysan.py:rr", "-e", "1", "--metric", "discrete", "--words", words, "-N", "1e4", "--seed", "1", "-q",
             "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "not refuted" and doc["method"] == "sampled" and doc["claim"]["metric"] == "discrete"
    r = _run("mysan.py:leaky", "-e", "1", "--metric", "discrete", "--words", words, "-N", "1e4", "--seed", "1", "-q",
             "--fail-on-flag")
    assert r.exit_code == 3, r.output
    assert "FLAG" in r.output
    # euclidean claim over the given embeddings: d(good, great) = 0.14, so eps = 1 per unit is refuted
    r = _run("mysan.py:rr", "-e", "1", "--embeddings", str(small_glove_file), "--words", words, "-N", "1e4",
             "--seed", "1", "-q", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "FLAG" and doc["claim"]["metric"] == "euclidean"


def test_cli_named_mechanisms(small_glove_file):
    args = ["--embeddings", str(small_glove_file), "--words", "good,great,bad,awful,film,movie", "-q"]
    r = _run("santext", "-e", "3", *args, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["method"] == "exact" and doc["verdict"] == "not refuted"
    r = _run("santext-misscaled", "-e", "3", *args, "--fail-on-flag")
    assert r.exit_code == 3 and "FLAG" in r.output and "santext-misscaled" in r.output
    r = _run("fbdd-half-noise", "-e", "3", *args, "-N", "2000", "--seed", "2")
    assert r.exit_code == 0 and "sampled" in r.output, r.output


@pytest.mark.parametrize("args,needle", [
    (["nosuch"], "unknown sanitizer"),
    (["mysan.py:rr", "--words", "good,bad"], "--epsilon"),
    (["mysan.py:rr", "-e", "1", "--words", "good,zzzq", "--embeddings", "TINY"], "without an embedding"),
    (["mysan.py:short", "-e", "1", "--metric", "discrete", "--words", "good,bad", "-N", "100"], "returned 199 words for n = 200"),
    (["mysan.py:numbers", "-e", "1", "--metric", "discrete", "--words", "good,bad", "-N", "100"], "words (str)"),
    (["mysan.py:boom", "-e", "1", "--metric", "discrete", "--words", "good,bad", "-N", "100"], "RuntimeError: boom"),
    (["mysan.py:nothere", "-e", "1", "--words", "good,bad"], "has no attribute"),
    (["nofile.py:f", "-e", "1", "--words", "good,bad"], "does not exist"),
    (["santext", "--embeddings", "TINY", "--words", "good"], "at least 2 distinct words"),
    (["santext", "--embeddings", "TINY", "-N", "0"], "--samples"),
    (["santext", "--embeddings", "TINY", "--method", "magic"], "--method"),
    (["santext", "--embeddings", "TINY", "--metric", "discrete"], "--metric"),
    (["santext", "--embeddings", "TINY", "--alpha", "2"], "alpha"),
    (["santext", "--embeddings", "TINY", "--param", "zz=1"], "no parameter"),
    (["fbdd", "--embeddings", "TINY", "--method", "exact", "--words", "good,bad"], "no exact law"),
    (["dp-prompt", "--embeddings", "TINY"], "document-level"),
    (["pypantera.nosuch", "--embeddings", "TINY"], "unknown pypantera mechanism"),
])
def test_cli_bad_input_is_one_line_exit_2(user_samplers, small_glove_file, args, needle):
    args = [str(small_glove_file) if a == "TINY" else a for a in args]
    r = _run(*args, "-q")
    assert r.exit_code == 2, r.output
    assert needle in r.output, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_options_of_audit_itself_are_refused_before_the_subcommand():
    r = runner.invoke(app, ["audit", "-m", "laplace", "sanitizer", "santext"])
    assert r.exit_code == 2 and "--mechanism" in r.output and "after its name" in r.output


# ------------------------------------------------------------------------------------------ peers
def test_pypantera_samplers_run_through_the_same_audit():
    from textdp.audit.peers import pypantera_available, pypantera_target

    if not pypantera_available():
        pytest.skip("pypantera is not installed")
    emb = _emb(v=12, m=3, seed=6)
    t = pypantera_target("santext", emb, 2.0, vocabulary=list(emb.words), words=["w0", "w1", "w2", "w3"])
    assert t.claim.epsilon == 2.0 and t.name == "pypantera santext"
    r = audit_sanitizer(t, samples=3000, seed=1)
    assert r.method == "sampled" and not r.failed_words and max(p.loss for p in r.pairs) > 0
    assert not r.flagged  # pyPANTERA's SanText samples the paper's law (float64 softmax)
    state = np.random.get_state()[1][:4].copy()
    pypantera_target("cmp", emb, 2.0, vocabulary=list(emb.words), words=["w0", "w1"]).sample(0, 10, np.random.default_rng(1))
    assert np.array_equal(np.random.get_state()[1][:4], state)  # numpy's global state is restored


def test_pypantera_custext_law_has_an_infinite_loss_between_neighbours():
    """pyPANTERA's CusText gives every word its own top-k set (its _getCustomizedMapping): two close words
    with different sets have an output one can produce and the other cannot (loss inf > eps). Its sampler
    cannot run under numpy 2 (float32 probabilities), so its law is audited exactly (LawTarget)."""
    from textdp.audit.peers import pypantera_available, pypantera_target

    if not pypantera_available():
        pytest.skip("pypantera is not installed")
    emb = _emb(v=30, m=3, seed=2)
    t = pypantera_target("custext", emb, 3.0, vocabulary=list(emb.words), words=list(emb.words[:12]), law=True, k=5)
    r = audit_sanitizer(t, seed=0)
    assert r.method == "exact" and r.flagged and math.isinf(r.worst["closest"][0].loss)
    assert r.claim.discrete and r.worst["closest"][0].claim == 3.0
    sampled = pypantera_target("custext", emb, 3.0, vocabulary=list(emb.words), words=list(emb.words[:4]), k=5)
    res = None
    try:
        res = audit_sanitizer(sampled, samples=200, seed=0)
    except ParameterError as exc:  # every word failed: its sampler refuses float32 probabilities
        assert "probabilities do not sum to 1" in str(exc)
    if res is not None:  # some words sampled (numpy accepted their float32 sums): those failing are reported
        assert all("probabilities" in m for m in res.failed_words.values())


def test_sampled_result_states_its_ceiling():
    words = ["a", "b"]
    claim = MetricClaim(1.0, 0.0, "discrete", "pure-dp")
    r = audit_sanitizer(callable_target(lambda w, n, rng: [w] * n, claim, words), samples=1000, seed=0)
    assert r.flagged and r.verdict == "FLAG"  # the identity: each output is impossible from the other word
    # an output seen 1000/1000 times against 0/1000 is the largest bound 1000 draws can give
    top = r.worst["search"][0]
    assert top.counts[:2] == (1000, 0) and top.loss == pytest.approx(r.ceiling, rel=1e-12)
    assert 5.0 < r.ceiling < math.log(1000)
