"""DP-Prompt and DP-MLM (textdp.sanitize.dp_prompt, textdp.sanitize.dp_mlm) on tiny RANDOMLY
INITIALISED models of the real architectures (Gemma 3 causal LM, textdp's word-level BERT MLM;
tests/sanitize/tiny_lm.py), never the real weights.

* law: keyed draws against the exact clipped-softmax law of one step (chi-square), and the real
  generation / rewriting path draws exactly what the tested sampler draws on the same stream;
* audit: the per-token ratio bound under clipping, max over tokens and pairs of contexts of
  ln p/p' <= 2(b_u - b_l)/T + epsilon0, on the realised (integer) law, and the same contexts
  exceed it without clipping (the check can fail);
* parameters: bad values get one line, from the API and the CLI.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from textdp.errors import ParameterError
from textdp.noise.keyed import ReleaseKey
from textdp.sanitize.document import clipped_draw, clipped_law

DISTRIBUTION_TESTED = ("dp-prompt", "dp-mlm")
AUDITED = ("dp-prompt", "dp-mlm")

DOCS = ["good film . fun story", "boring plot , bad actor", "great scene ; fun", "the story of one more actor",
        "aardvark", "do n't", "movie ( plot ) 's good"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from tiny_lm import tiny_model_env

    env = tiny_model_env(tmp_path_factory)
    return env["TEXTDP_CAUSAL_LM"], env["TEXTDP_DP_MLM_MODEL"]


def _prompt(models, **kw):
    from textdp.sanitize.dp_prompt import DPPrompt

    kw.setdefault("b_l", -1.5)
    kw.setdefault("b_u", 2.0)
    kw.setdefault("temperature", 0.7)
    return DPPrompt(None, model=models[0], **kw)


def _mlm(models, **kw):
    from textdp.sanitize.dp_mlm import DPMLM

    kw.setdefault("b_l", -1.5)
    kw.setdefault("b_u", 2.0)
    kw.setdefault("temperature", 0.7)
    return DPMLM(None, model=models[1], **kw)


def _chi_square(draws: np.ndarray, law: np.ndarray) -> float:
    """p-value of the draws (indices into ``law``) against ``law`` (cells with expectation < 5 merged)."""
    n = len(draws)
    counts = np.bincount(draws, minlength=len(law)).astype(float)
    exp = law * n
    order = np.argsort(exp)
    small = order[np.cumsum(exp[order]) < 5.0]
    keep = np.setdiff1d(np.arange(len(law)), small)
    obs = np.concatenate([counts[keep], [counts[small].sum()]]) if len(small) else counts
    ex = np.concatenate([exp[keep], [exp[small].sum()]]) if len(small) else exp
    return float(stats.chisquare(obs, ex).pvalue)


def _clip_bites(logits, mech):
    x = logits[mech.allowed_tokens]
    return (x > mech.b_u).any() and (x < mech.b_l).any() and ((x > mech.b_l) & (x < mech.b_u)).any()


# ----------------------------------------------------------------------------------- law
def test_dp_prompt_draws_follow_the_clipped_softmax(models):
    mech = _prompt(models)
    logits = mech.next_logits(mech.prompt_ids(DOCS[0]))
    assert _clip_bites(logits, mech)  # the bounds change the law here: the test covers clipping
    law = clipped_law(logits, mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, mech.eta).probabilities()[0]
    ideal = np.exp(np.clip(logits[mech.allowed_tokens], mech.b_l, mech.b_u) / mech.temperature)
    ideal /= ideal.sum()
    mix = (1 - mech.eta) * ideal + mech.eta / len(ideal)
    assert np.abs(np.log(law / mix)).max() <= mech.sampling_epsilon0
    n = 20000
    key = ReleaseKey.from_seed(7)
    ids = clipped_draw(np.repeat(logits[None], n, 0), mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature,
                       key, np.arange(n), np.zeros(n, dtype=np.int64), mech.eta)
    col = np.searchsorted(mech.allowed_tokens, ids)
    assert _chi_square(col, law) > 1e-4


def test_dp_prompt_generation_draws_what_the_sampler_draws(models):
    """The first generated token of record r is the keyed draw (r, 0) from the prompt's law."""
    mech = _prompt(models, max_new_tokens=1, rng=3)
    doc = DOCS[1]
    logits = mech.next_logits(mech.prompt_ids(doc))
    mech.begin_release()
    key = mech._release_key
    n = 24
    out, _ = mech.sanitize_with_stats([doc] * n, first_record=0)
    direct = clipped_draw(np.repeat(logits[None], n, 0), mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature,
                          key, np.arange(n), np.zeros(n, dtype=np.int64), mech.eta)
    tok = mech.lm.tokenizer
    expected = ["" if int(t) in mech.eos_ids else tok.decode([int(t)]).strip() for t in direct]
    assert out == expected
    assert len(set(out)) > 3  # not a constant output


def test_dp_mlm_draws_follow_the_clipped_softmax_and_the_rewrite_path(models):
    mech = _mlm(models, rng=5)
    from textdp.models.mlm import UNK
    from textdp.sanitize.corpus import tokenize_texts

    doc = DOCS[3]
    tok = tokenize_texts([doc], mech._table)
    ids = np.where(tok.rows >= 0, tok.rows, UNK)
    logits = mech.position_logits(ids)
    assert _clip_bites(logits[2], mech)
    law = clipped_law(logits[2:3], mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, mech.eta).probabilities()[0]
    n = 20000
    key = ReleaseKey.from_seed(11)
    y = clipped_draw(np.repeat(logits[2:3], n, 0), mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, key,
                     np.arange(n), np.full(n, 2), mech.eta)
    assert _chi_square(y - mech.allowed_tokens[0], law) > 1e-4
    # the rewrite path: record r, position i draws (r, i) from position i's law
    mech.begin_release()
    out, _ = mech.sanitize_with_stats([doc] * 12, first_record=100)
    for r, text in enumerate(out):
        d = clipped_draw(logits, mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, mech._release_key,
                         np.full(len(ids), 100 + r), np.arange(len(ids)), mech.eta)
        assert text.split() == [mech._words[t] for t in d]
    assert mech.sanitize([""]) == [""]


def test_output_does_not_depend_on_chunking(models):
    for mech in (_prompt(models, max_new_tokens=3, rng=9), _mlm(models, rng=9)):
        whole = mech.sanitize(DOCS)
        mech2 = type(mech)(None, model=mech.model_arg, b_l=mech.b_l, b_u=mech.b_u, temperature=mech.temperature,
                           rng=9, **({"max_new_tokens": 3} if mech.name == "dp-prompt" else {}))
        mech2.begin_release()
        parts = mech2.sanitize_with_stats(DOCS[:3], first_record=0)[0] + \
            mech2.sanitize_with_stats(DOCS[3:], first_record=3)[0]
        assert parts == whole, mech.name


# ----------------------------------------------------------------------------------- audit
def _max_log_ratio(p, q):
    return float(np.abs(np.log(p) - np.log(q)).max())


def test_dp_prompt_per_token_ratio_bound_under_clipping(models):
    """max over tokens and over all pairs of 7 contexts of |ln p/p'| on the realised law is at most
    2(b_u - b_l)/T + epsilon0, exactly; without clipping the same contexts exceed it."""
    mech = _prompt(models, b_l=-0.5, b_u=0.5)  # narrow bounds: the unclipped law breaks the bound
    bound = 2 * (mech.b_u - mech.b_l) / mech.temperature
    assert math.isclose(mech.epsilon_token, bound)
    logits = np.stack([mech.next_logits(mech.prompt_ids(d)) for d in DOCS])
    laws = clipped_law(logits, mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, mech.eta).probabilities()
    worst = max(_max_log_ratio(laws[i], laws[j]) for i in range(len(DOCS)) for j in range(i))
    assert worst <= bound + mech.sampling_epsilon0
    assert worst > 0.3 * bound  # the contexts do move the law
    raw = logits[:, mech.allowed_tokens] / mech.temperature
    raw = np.exp(raw - raw.max(axis=1, keepdims=True))
    raw /= raw.sum(axis=1, keepdims=True)
    assert max(_max_log_ratio(raw[i], raw[j]) for i in range(len(DOCS)) for j in range(i)) > bound
    g = mech.guarantee
    assert g.unit == "document" and math.isclose(g.epsilon, mech.max_new_tokens * (bound + mech.sampling_epsilon0))


def test_dp_mlm_ratio_bound_and_every_position_moves(models):
    """One changed word: every position's law stays within 2(b_u - b_l)/T + epsilon0 of the
    other document's, the changed position's own law does not move (its word is masked) and the
    other positions do (hence the per-word guarantee counts the positions that see the word)."""
    mech = _mlm(models)
    from textdp.models.mlm import UNK
    from textdp.sanitize.corpus import tokenize_texts

    def laws(doc):
        tok = tokenize_texts([doc], mech._table)
        lg = mech.position_logits(np.where(tok.rows >= 0, tok.rows, UNK))
        return clipped_law(lg, mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, mech.eta).probabilities()

    bound = 2 * (mech.b_u - mech.b_l) / mech.temperature
    a, b = laws("good film . fun story"), laws("good film . bad story")
    ratios = [_max_log_ratio(a[i], b[i]) for i in range(5)]
    assert max(ratios) <= bound + mech.sampling_epsilon0
    assert ratios[3] == 0.0  # position 3's word is masked: its law ignores it
    assert ratios[0] > 1e-3 and ratios[4] > 1e-3  # unchanged positions see the changed word
    g = mech.guarantee
    assert mech.window == 14 and mech.positions_per_word == 26
    assert g.unit == "token" and g.neighbours == "replace-one"
    assert math.isclose(g.epsilon, 26 * (bound + mech.sampling_epsilon0))


def _sensitive_mlm(folder, std=0.5, seed=1):
    """The tiny MLM with its encoder matrices redrawn at a larger scale (seeded torch generator):
    each position's law then depends strongly on its context (the default init barely moves it)."""
    import torch
    from tiny_lm import build_tiny_mlm

    from textdp.models.mlm import MaskedLM

    build_tiny_mlm(folder / "base")
    m = MaskedLM.load(folder / "base")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, prm in m.model.bert.encoder.named_parameters():
            if prm.dim() == 2:
                prm.copy_(torch.randn(prm.shape, generator=gen) * std)
    m.save(folder / "sensitive")
    return folder / "sensitive"


def _position_laws(mech, words):
    ids = np.asarray([mech._words.tolist().index(w) for w in words], dtype=np.int64)
    lg = mech.position_logits(ids)
    return clipped_law(lg, mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, mech.eta).probabilities()


def test_dp_mlm_per_word_guarantee_exact_over_all_positions(tmp_path):
    """Exact privacy loss of replacing ONE word: the L draws are independent given the document, so
    the largest log-ratio of the released document's law over all outputs is
    max(sum_i max_v ln p_i/q_i, sum_i max_v ln q_i/p_i) over the realised (integer) laws. Over a few
    contexts of L = 2W - 1 = 27 words (the length where one word is seen by the most positions) and
    several replacements of the middle word, it exceeds the old per-position claim 2(b_u - b_l)/T +
    epsilon0 and never exceeds the stated 2(W - 1) x (2(b_u - b_l)/T + epsilon0)."""
    from tiny_lm import WORDS

    from textdp.sanitize.dp_mlm import DPMLM

    mech = DPMLM(None, model=str(_sensitive_mlm(tmp_path)), b_l=-1.5, b_u=2.0, temperature=0.7)
    w = mech.window
    per_position = mech.epsilon_token + mech.sampling_epsilon0
    assert mech.guarantee.epsilon == pytest.approx(2 * (w - 1) * per_position)
    rng = np.random.default_rng(0)  # test contexts, not DP noise
    losses = []
    for _ in range(3):
        doc = [str(x) for x in rng.choice(WORDS, 2 * w - 1)]
        p = np.log(_position_laws(mech, doc))
        for other in ("aardvark", "film", "bad", "."):
            if other == doc[w - 1]:
                continue
            doc2 = list(doc)
            doc2[w - 1] = other
            lr = p - np.log(_position_laws(mech, doc2))
            assert np.abs(lr[w - 1]).max() == 0.0  # the replaced position's own law ignores its word
            assert np.abs(lr).max() <= per_position  # every position within the per-position bound
            losses.append(max(lr.max(axis=1).sum(), (-lr).max(axis=1).sum()))
    print("exact per-word losses", np.round(losses, 3), "per position", per_position, "stated", mech.guarantee.epsilon)
    assert max(losses) > per_position, losses  # the old claim (epsilon per token) is violated
    assert max(losses) <= mech.guarantee.epsilon, losses


def test_dp_mlm_window_count_is_exact(tmp_path):
    """positions_seeing_a_word is exactly what the code's windows do: replacing word k moves only
    positions whose window (window_start) holds k, and the count formula, its closed forms and its
    maximum 2(W - 1) over all lengths agree with a brute-force count."""
    from tiny_lm import WORDS

    from textdp.sanitize.dp_mlm import DPMLM, max_positions_per_word, positions_seeing_a_word, window_start

    def brute(n, width):
        wn = min(n, width)
        def holds(j, k):
            return window_start(j, n, width) <= k < window_start(j, n, width) + wn

        return max((sum(1 for j in range(n) if j != k and holds(j, k)) for k in range(n)), default=0)

    for width in (1, 2, 5, 6, 14, 15):
        counts = [positions_seeing_a_word(n, width) for n in range(1, 4 * width + 3)]
        assert counts == [brute(n, width) for n in range(1, 4 * width + 3)]
        assert max_positions_per_word(width) == max(1, 2 * (width - 1))
        assert max(counts) == 2 * (width - 1)  # width 1: the window is the masked word alone, 0
        assert counts[2 * width - 2] == 2 * (width - 1)  # n = 2W - 1
        assert all(c == width + width // 2 - 1 for c in counts[2 * width - 1:])  # n >= 2W
    mech = DPMLM(None, model=str(_sensitive_mlm(tmp_path)), b_l=-1.5, b_u=2.0, temperature=0.7)
    w = mech.window
    rng = np.random.default_rng(1)
    for n in (5, 20, 27, 30):
        doc = [str(x) for x in rng.choice(WORDS[:-1], n)]  # never "more": the replacement below
        base = _position_laws(mech, doc)
        seen_max = 0
        for k in range(n):
            doc2 = list(doc)
            doc2[k] = "more"
            moved = {j for j, row in enumerate(np.abs(base - _position_laws(mech, doc2)).max(axis=1)) if row > 0}
            window = {j for j in range(n) if j != k and window_start(j, n, w) <= k < window_start(j, n, w) + min(n, w)}
            assert moved <= window, (n, k)
            seen_max = max(seen_max, len(window))
        assert seen_max == positions_seeing_a_word(n, w)


def test_lm_cards_name_the_model_without_its_path(tmp_path):
    """The card names a local model folder by its name and a hash of its config/tokenizer files,
    never by its path; the curator's terminal (JSON summary) keeps the path."""
    import json

    from tiny_lm import build_tiny_gemma, build_tiny_mlm
    from typer.testing import CliRunner

    from textdp.cli.main import app
    from textdp.sanitize.document import model_identity

    src = tmp_path / "in.txt"
    src.write_text("good film\nbad plot\n", encoding="utf-8")
    for name, folder, extra in (("dp-mlm", build_tiny_mlm(tmp_path / "my-mlm"), []),
                                ("dp-prompt", build_tiny_gemma(tmp_path / "my-lm"), ["-P", "max_new_tokens=3"])):
        out = tmp_path / f"{name}.txt"
        r = CliRunner().invoke(app, ["sanitize", str(src), "-m", name, "-e", "50", "-P", f"model={folder}", *extra,
                                     "--no-ledger", "-o", str(out), "--json"])
        assert r.exit_code == 0, r.output
        card_text = (tmp_path / f"{name}.txt.card.json").read_text(encoding="utf-8")
        assert str(tmp_path) not in card_text and str(tmp_path.resolve()) not in card_text
        card = json.loads(card_text)
        ident = model_identity(folder)
        assert ident.startswith(folder.name + " sha256:") and card["parameters"]["model"] == ident
        assert card["data"]["model"].get("path", ident) == ident
        assert str(folder) in r.output  # the curator's terminal keeps the path
    assert model_identity(tmp_path / "my-mlm") != model_identity(tmp_path / "my-lm")


# ----------------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("kw, msg", [
    ({"temperature": 0.0}, "T > 0"),
    ({"temperature": -1.0}, "T > 0"),
    ({"b_l": 1.0, "b_u": 1.0}, "b_l < b_u"),
    ({"b_l": 2.0, "b_u": 1.0}, "b_l < b_u"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
])
def test_bad_parameters_one_line_api(kw, msg):
    from textdp.sanitize.dp_prompt import DPPrompt

    with pytest.raises(ParameterError, match=msg.replace("(", r"\(")) as e:
        DPPrompt(None, model="/nonexistent/model", **{"temperature": 1.0, **kw})  # refused before any load
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name, params, msg", [
    ("dp-prompt", ["-P", "b_l=3", "-P", "b_u=1"], "b_l < b_u"),
    ("dp-prompt", ["-P", "max_new_tokens=0"], "max_new_tokens must be >= 1"),
    ("dp-prompt", ["-P", "temperature=0"], "T > 0"),
    ("dp-mlm", ["-P", "b_l=0", "-P", "b_u=0"], "b_l < b_u"),
    ("dp-mlm", ["-P", "temperature=-2"], "T > 0"),
])
def test_bad_parameters_one_line_cli(tmp_path, name, params, msg):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    src = tmp_path / "in.txt"
    src.write_text("good film\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["sanitize", str(src), "-m", name, "-e", "5", "--no-ledger", "-o",
                                 str(tmp_path / "o.txt"), *params])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and msg in lines[0], r.output
    assert not (tmp_path / "o.txt").exists()


def test_epsilon_sets_the_temperature(models):
    mech = _prompt(models, temperature=None, epsilon=70.0, max_new_tokens=5)
    assert math.isclose(mech.temperature, 5 * 2 * (2.0 + 1.5) / 70.0)
    with pytest.raises(ParameterError, match="disagree"):
        _prompt(models, temperature=1.0, epsilon=70.0)
    m = _mlm(models, temperature=None, epsilon=7.0)
    assert math.isclose(m.temperature, 2 * 3.5 / 7.0)


def test_missing_model_is_one_line(monkeypatch, tmp_path):
    import importlib.util

    from textdp.errors import InputError, MissingPackageError
    from textdp.models.pretrained import GEMMA_INSTALL, GEMMA_PACKAGE, load_causal_lm

    with pytest.raises(InputError, match="does not exist"):
        load_causal_lm(tmp_path / "nothing-here")
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        monkeypatch.delenv("TEXTDP_CAUSAL_LM", raising=False)
        with pytest.raises(MissingPackageError) as e:
            load_causal_lm(None)
        assert GEMMA_INSTALL in str(e.value) and "\n" not in str(e.value)


def test_dp_mlm_with_a_local_hugging_face_mlm(tmp_path):
    """A user's local HF MLM folder: outputs are whole-word tokens only (no ##, special or unused
    token), the ratio bound holds per position, and a seeded rewrite keeps the word count."""
    from tiny_lm import build_tiny_hf_bert

    from textdp.sanitize.corpus import tokenize_texts
    from textdp.sanitize.dp_mlm import DPMLM

    folder = build_tiny_hf_bert(tmp_path / "bert")
    mech = DPMLM(None, model=str(folder), b_l=-0.5, b_u=0.5, temperature=0.7, rng=4)
    allowed = set(mech._words[mech.allowed_tokens].tolist())
    assert not any(w.startswith(("##", "[")) for w in allowed) and "film" in allowed and len(allowed) == 27
    bound = 2 * (mech.b_u - mech.b_l) / mech.temperature

    def laws(doc):
        lg = mech.document_logits(tokenize_texts([doc], mech._table))
        return clipped_law(lg, mech.allowed_tokens, mech.b_l, mech.b_u, mech.temperature, mech.eta).probabilities()

    a, b = laws("good film . fun story"), laws("good film . bad story")
    assert max(_max_log_ratio(a[i], b[i]) for i in range(5)) <= bound + mech.sampling_epsilon0
    out = mech.sanitize(DOCS)
    assert [len(o.split()) for o in out] == [len(d.split()) for d in DOCS]
    assert all(w in allowed for o in out for w in o.split())
