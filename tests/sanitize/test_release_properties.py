"""What every registered sanitizer's release must have (issue 12; design.md, "Everything the output
reveals is part of the release"), checked generically over the registry: a new sanitizer is
tested here the moment it is registered (no pending list for these properties).

(a) layout: given the output tokens, the output text is the same whether a touching token was
    kept or replaced (the layout is a function of the input layout and the output tokens);
(b) law: under default options, mechanisms fitted on corpora that differ in one token have the
    same law for every word, and the same seed gives the same draws for every token of the
    unchanged documents;
(c) card: every field except the time is recomputed from the released file's name, the
    parameters and public data alone, and neighbouring inputs give identical cards.

Document-level mechanisms (DP-Prompt, DP-MLM) are exempt from (a) only (DOCUMENT_LEVEL): they run
here on tiny randomly initialised language models (tests/sanitize/tiny_lm.py), named through the
environment variables that set their default models.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.accounting.card import build_card, card_path
from textdp.cli.main import app
from textdp.cli.sanitize import _card
from textdp.data.tokenize import WordTokenizer
from textdp.embeddings import Embeddings
from textdp.mechanisms.registry import registry
from textdp.sanitize import make_mechanism, privacy_statistics

SANITIZERS = sorted(n for n, info in registry().items() if info.capability == "sanitize")
#: document-level sanitizers: the token-layout test (a) does not apply to them (a document in, a document
#: out: DP-Prompt writes a new text of its own length; DP-MLM's output words are drawn in context)
DOCUMENT_LEVEL: tuple[str, ...] = ("dp-mlm", "dp-prompt")
WORDS = ["film", "movie", ".", "do", "n't", "bad", ";", "good", "great", ",", "'s", "(", ")", "plot", "actor",
         "scene", "boring", "fun", "story", "aardvark"]


@pytest.fixture(autouse=True)
def _tiny_language_models(request, monkeypatch, tmp_path_factory):
    """The document-level mechanisms' default models: tiny random ones (never the real weights)."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if params.get("name") in DOCUMENT_LEVEL:
        from tiny_lm import tiny_model_env

        for k, v in tiny_model_env(tmp_path_factory).items():
            monkeypatch.setenv(k, v)


def test_registry_has_the_sanitizers():
    assert {"santext", "santext+", "fbdd"} <= set(SANITIZERS)


def _emb(seed=5, scale=0.6):
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    vec = (g.standard_normal((len(WORDS), 4)) * scale).astype(np.float32)
    return Embeddings(list(WORDS), vec, source="test-table", kind="word", lowercase=True)


def _mech(name, emb, epsilon=1.0, **kw):
    return make_mechanism(name, emb, epsilon, **kw)


# ------------------------------------------------------------------------------------------ (a)
@pytest.mark.parametrize("name", [n for n in SANITIZERS if n not in DOCUMENT_LEVEL])
def test_layout_is_a_function_of_the_output_tokens(name):
    """Over many draws of two inputs with touching tokens, equal output tokens always give the
    same text, and the case that broke the old rule (a kept pair and a replaced pair with the
    same output tokens) actually occurs."""
    emb = _emb()
    inputs = ["film.", "movie.", "don't", "bad;good", "good;bad", "(plot)", "scene's"]
    texts_by_tokens = defaultdict(set)
    kept_by_tokens = defaultdict(set)
    tk = WordTokenizer()
    for epsilon in (0.5, 3.0, 10.0):  # spread-out and concentrated laws (FBDD needs a large eps to keep)
        mech = _mech(name, emb, epsilon=epsilon, rng=11)
        for i in range(1200):  # at least 100 draws; up to 1200 until a kept/replaced collision has occurred
            # (1-diffractor: touching inputs are 10+ list positions apart on this table, the first collision
            # comes near draw 850 at eps = 0.5)
            for src, out in zip(inputs, mech.sanitize(inputs)):
                toks = tuple(tk.tokenize(out))
                texts_by_tokens[toks].add(out)
                kept_by_tokens[toks].add(tuple(tk.tokenize(src)) == toks)
            if i >= 99 and any(len(v) == 2 for v in kept_by_tokens.values()):
                break
    for toks, texts in texts_by_tokens.items():
        assert len(texts) == 1, f"{name}: output tokens {toks} written as {sorted(texts)}"
    # the test is not vacuous: some token pair came out both from a kept and from a replaced input
    assert any(len(v) == 2 for v in kept_by_tokens.values()), f"{name}: no kept/replaced collision was drawn"


def test_layout_rule_keeps_the_text_readable():
    from textdp.sanitize.corpus import glue

    assert glue("do", "n't") and glue("film", ".") and glue("movie", "'s") and glue("(", "plot")
    assert not glue(";", "good") and not glue("bad", "(") and not glue("film", "movie")


# ------------------------------------------------------------------------------------------ (b)
def _corpora():
    a = ["good film . fun story", "boring plot , bad actor", "great scene ; fun"]
    b = ["good film . fun story", "boring plot , aardvark actor", "great scene ; fun"]  # one token differs
    return a, b


@pytest.mark.parametrize("name", SANITIZERS)
def test_law_does_not_depend_on_the_rest_of_the_corpus(name):
    emb = _emb()
    a, b = _corpora()
    ma, mb = _mech(name, emb, rng=3).fit(a), _mech(name, emb, rng=3).fit(b)
    assert ma.output_words == mb.output_words
    if ma.exact_probabilities:
        np.testing.assert_array_equal(ma.probabilities(WORDS), mb.probabilities(WORDS))
    oa, ob = ma.sanitize(a), mb.sanitize(b)
    assert oa[0] == ob[0] and oa[2] == ob[2], f"{name}: unchanged documents drew differently"


@pytest.mark.parametrize("name", [n for n in SANITIZERS if registry()[n].factory.exact_probabilities])
def test_law_test_detects_a_corpus_dependent_law(name):
    """The check above can fail: with the paper's corpus vocabulary the law moves."""
    emb = _emb()
    a, b = _corpora()
    ma = _mech(name, emb, rng=3, output_vocabulary="corpus").fit(a)
    mb = _mech(name, emb, rng=3, output_vocabulary="corpus").fit(b)
    assert ma.output_words != mb.output_words


def test_santext_plus_sensitive_set_is_public_by_default():
    emb = _emb()
    a, b = _corpora()
    sa = make_mechanism("santext+", emb, 1.0, w=0.5, p=0.3).fit(a).sensitive_words
    sb = make_mechanism("santext+", emb, 1.0, w=0.5, p=0.3).fit(b).sensitive_words
    assert sa == sb
    ca = make_mechanism("santext+", emb, 1.0, w=0.5, p=0.3, frequencies="corpus").fit(a).sensitive_words
    cb = make_mechanism("santext+", emb, 1.0, w=0.5, p=0.3, frequencies="corpus").fit(b).sensitive_words
    assert ca != cb  # the explicit corpus option does depend on the corpus (and its card says so)


# ------------------------------------------------------------------------------------------ (c)
def _glove_file(tmp_path):
    emb = _emb()
    p = tmp_path / "table.glove.txt"
    p.write_text("".join(f"{w} {' '.join(f'{x:.6f}' for x in v)}\n" for w, v in zip(emb.words, emb.vectors)),
                 encoding="utf-8")
    return p


def _release(tmp_path, sub, name, docs, *extra):
    d = tmp_path / sub
    d.mkdir()
    src = d / "private-input.txt"
    src.write_text("\n".join(docs) + "\n", encoding="utf-8")
    out = d / "released.txt"
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", name, "-e", "1.5", "--embeddings",
                                 str(_glove_file(tmp_path)), "-o", str(out), "--no-ledger", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(card_path(out).read_text(encoding="utf-8")), out


@pytest.mark.parametrize("name", SANITIZERS)
def test_card_holds_nothing_but_parameters_and_public_data(tmp_path, name):
    a, _ = _corpora()
    neighbour = ["good film . fun story", "boring plot , xyzzy actor qwerty", "great scene ; fun", "one more"]
    card_a, out = _release(tmp_path, "a", name, a)
    card_b, _ = _release(tmp_path, "b", name, neighbour)
    for c in (card_a, card_b):
        c.pop("created")
    assert card_a == card_b  # different documents, tokens, OOV tokens, words: the same card
    # recomputed from the released file's name, the card's parameters and the public table only
    params = dict(card_a["parameters"])
    mech = make_mechanism(name, str(_glove_file(tmp_path)), params.pop("epsilon"), **{
        k: v for k, v in params.items() if k in ("oov", "eta", "output_vocabulary", "w", "p", "frequencies",
                                                 "unk_token")})
    expected = json.loads(json.dumps(_card(mech, out, privacy_statistics, build_card), default=str))
    expected.pop("created")
    from textdp.cli.budget import NOT_RECORDED

    expected["ledger"] = NOT_RECORDED  # _release runs with --no-ledger: a parameter-level statement
    assert json.loads(json.dumps(expected)) == card_a
    text = json.dumps(card_a)
    for private in ("private-input", "xyzzy", "qwerty"):
        assert private not in text, private

    def keys(x):
        if isinstance(x, dict):
            for k, v in x.items():
                yield k
                yield from keys(v)
        elif isinstance(x, list):
            for v in x:
                yield from keys(v)

    found = set(keys(card_a)) & {"documents", "tokens", "changed_tokens", "oov_tokens", "input", "file", "sha256_input",
                                 "input_hash", "distinct_input_words_fitted", "max_document_tokens", "run"}
    assert not found, found


@pytest.mark.parametrize("name", [n for n in SANITIZERS if n not in DOCUMENT_LEVEL])
def test_corpus_vocabulary_card_does_not_depend_on_the_corpus(tmp_path, name):
    """With --output-vocabulary corpus the card states that the vocabulary is the corpus's, and nothing
    else of it: neighbouring corpora (one document changed, one added) and an unrelated one-document corpus
    give identical cards except the time (1-diffractor's epsilon0 and worst case and truncated-gumbel's
    scale and reference distances were functions of the corpus's distinct words)."""
    a, _ = _corpora()
    neighbour = ["good film . fun story", "boring plot , xyzzy actor qwerty", "great scene ; fun", "one more"]
    cards = [_release(tmp_path, sub, name, docs, "--output-vocabulary", "corpus")[0]
             for sub, docs in (("a", a), ("b", neighbour), ("c", ["movie scene , plot"]))]
    for c in cards:
        c.pop("created")
    assert cards[0] == cards[1], f"{name}: neighbouring corpora give different cards"
    assert cards[0] == cards[2], f"{name}: the card depends on the corpus"
    assert cards[0]["parameters"]["output_vocabulary"] == "corpus"
    assert "size" not in cards[0]["data"]["output_vocabulary"]


def test_corpus_vocabulary_card_states_what_is_unprotected(tmp_path):
    a, _ = _corpora()
    card, _ = _release(tmp_path, "c", "santext", a, "--output-vocabulary", "corpus")
    assert any("UNPROTECTED" in w for w in card["warnings"])
    assert "size" not in card["data"]["output_vocabulary"]  # the corpus vocabulary's size is private


# ------------------------------------------------------------------------------------------ worst case
@pytest.mark.parametrize("name", [n for n in SANITIZERS if registry()[n].factory.exact_probabilities])
def test_worst_case_epsilon_bounds_every_log_ratio(name):
    """guarantee.worst_case_epsilon (plain DP per token) is at least the largest log-ratio of the
    exact channel over every pair of words, and over an OOV token (uniform) against any word."""
    emb = _emb()
    # the settings that leave nothing unprotected (SanText+ and CusText+ otherwise keep words, an infinite
    # worst case that test_worst_case_is_infinite_where_something_is_released_unprotected checks)
    kw = {"santext+": dict(w=1.0), "custext+": dict(stop_words="none")}.get(name, {})
    mech = _mech(name, emb, epsilon=2.0, rng=1, **kw)
    p = mech.probabilities(WORDS)
    wc = mech.guarantee.worst_case_epsilon
    logp = np.log(p)
    pair = (logp[:, None, :] - logp[None, :, :]).max()
    oov = np.abs(logp - np.log(1.0 / p.shape[1])).max()
    assert np.isfinite(wc) and max(pair, oov) <= wc + 1e-9


def test_worst_case_is_infinite_where_something_is_released_unprotected():
    emb = _emb()
    assert math.isinf(make_mechanism("santext", emb, 1.0, oov="unk").guarantee.worst_case_epsilon)
    assert math.isinf(make_mechanism("santext", emb, 1.0, oov="keep").guarantee.worst_case_epsilon)
    assert math.isinf(make_mechanism("santext+", emb, 1.0, w=0.9, p=0.3).guarantee.worst_case_epsilon)
    assert math.isfinite(make_mechanism("fbdd", emb, 1.0).guarantee.worst_case_epsilon)
    assert math.isinf(make_mechanism("custext+", emb, 1.0).guarantee.worst_case_epsilon)  # stop words kept
    assert math.isinf(make_mechanism("custext", emb, 1.0, k=5).guarantee.worst_case_epsilon)  # four groups


def test_text_is_nfc_normalised_before_tokenizing():
    from textdp.embeddings import Embeddings

    emb = Embeddings(["café", "tea"], np.array([[0, 1], [1, 0]], dtype=np.float32), source="t", kind="word",
                     lowercase=True)
    m = make_mechanism("santext", emb, 1e6, oov="keep", rng=0)  # huge eps: in-vocabulary words come back
    nfd = "cafe\u0301 tea"
    out = m.sanitize([nfd])[0]
    assert out == "café tea" and "\u0301" not in out
    assert m.tokenize([nfd]).rows.tolist() == m.tokenize(["café tea"]).rows.tolist()


def test_forced_card_does_not_name_the_input(tmp_path):
    """--force over a budget: the card states the overridden refusal without the input's path."""
    a, _ = _corpora()
    src = tmp_path / "secret-patients-2026.txt"
    src.write_text("\n".join(a) + "\n", encoding="utf-8")
    led = tmp_path / "ledgers"
    r = CliRunner().invoke(app, ["budget", "set", str(src), "--epsilon", "1", "--ledger-dir", str(led)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out" / "released.txt"
    r = CliRunner().invoke(app, ["sanitize", str(src), "-e", "3", "--embeddings", str(_glove_file(tmp_path)),
                                 "-o", str(out), "--ledger-dir", str(led), "--force", "-q"])
    assert r.exit_code == 0, r.output
    card = json.loads(card_path(out).read_text(encoding="utf-8"))
    assert card.get("forced") is True and card.get("forced_reason")
    assert "secret-patients" not in json.dumps(card) and str(tmp_path) not in json.dumps(card)


def test_progress_lines_keep_their_labels_and_tiny_corpus_vocabulary_warns(tmp_path):
    """Issue 13 item 9: in a log, the counting bar stays 'counting the vocabulary' (it used to be
    relabelled as the card step), and the corpus vocabulary of a 2-line file warns (privately) that
    it is tiny."""
    import subprocess
    import sys

    src = tmp_path / "tiny.txt"
    src.write_text("good film .\nbad movie\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "textdp.cli.main", "sanitize", str(src), "-e", "3", "--embeddings",
                        str(_glove_file(tmp_path)), "-o", str(tmp_path / "o.txt"), "--no-ledger",
                        "--output-vocabulary", "corpus"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert any(ln.startswith("counting the vocabulary") for ln in lines), r.stderr
    assert any(ln.startswith("writing the privacy card") for ln in lines), r.stderr
    assert "warning (private): the output vocabulary has only" in r.stderr.replace("\n", " ")


def test_santext_plus_card_and_terminal_explain_the_unbounded_worst_case(tmp_path):
    a, _ = _corpora()
    card, _ = _release(tmp_path, "splus", "santext+", a)
    assert any("reveals its input exactly" in w for w in card["warnings"])
    assert "sensitive set" in card["units"]["epsilon"]
    src = tmp_path / "private-name.txt"
    src.write_text("\n".join(a) + "\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", "santext+", "-e", "1", "--embeddings",
                                 str(_glove_file(tmp_path)), "--no-ledger", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert "tokens_per_second" in summary["private"] and "tokens_per_second" not in summary
    assert any("named after the input" in w for w in summary["private"]["warnings"])


@pytest.mark.parametrize("name", [n for n in SANITIZERS if n not in DOCUMENT_LEVEL])
def test_a_pickled_mechanism_leaves_the_last_calls_statistics_behind(name):
    """``last_stats`` holds the last call's exact counts of a private input: a pickled or deep-copied
    mechanism carries none, and still draws what the original draws."""
    import copy
    import pickle

    emb = _emb()
    a, _ = _corpora()
    mech = _mech(name, emb, rng=3)
    mech.sanitize(a)
    assert mech.last_stats is not None and mech.last_stats.tokens > 0
    for clone in (pickle.loads(pickle.dumps(mech)), copy.deepcopy(mech)):
        assert clone.last_stats is None
        assert mech.last_stats is not None  # the original keeps its own
    twin = _mech(name, emb, rng=3)
    twin.sanitize(a)
    assert pickle.loads(pickle.dumps(twin)).sanitize(a) == mech.sanitize(a)
