"""Issue 12, item 4: a topic model's released files are DP as its card says.

* Trained from the CLI with the default (public) vocabulary, two corpora that differ in one
  document release the same vocabulary, and a word that occurs in that document only (and in
  no public list) is in none of the released files (their bytes, and the npz members unzipped).
* ``--vocabulary corpus`` does release it, and its card and terminal say so.
* No released file holds an exact statistic of the private input: every key of the card and
  of model.json is on an allow-list, and no key anywhere is a known private statistic.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.errors import InputError
from textdp.topics import Corpus, rr_encode
from textdp.topics.vocabulary import (
    CORPUS_VOCABULARY_LOCAL_WARNING,
    CORPUS_VOCABULARY_WARNING,
    PUBLIC_LIST_FILE,
    PUBLIC_LIST_SHA256,
    public_vocabulary,
    read_vocabulary,
    wordfreq_list,
)
from textdp.noise import make_rng

RARE = "zorbquaxle"  # occurs in one document of corpus B only, and in no public list

MODES = {
    "none": [],
    "hdp": ["--epsilon", 50, "--max-doc-length", 30],
    "lp": ["--epsilon", 4],
    "olp": ["--epsilon", 4, "--batch-size", 25],
}


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory):
    """Two files of 60 English documents (words of the public list, 3 topics) differing in document 7 only:
    B's document 7 holds RARE and a few other words."""
    words = list(public_vocabulary().words[200:230])
    rng = np.random.default_rng(3)  # test data only
    docs = [[words[10 * (m % 3) + int(j)] for j in rng.integers(0, 10, size=25)] for m in range(60)]
    a = [" ".join(d) for d in docs]
    b = list(a)
    b[7] = f"{RARE} {words[0]} {words[1]} {RARE}"
    d = tmp_path_factory.mktemp("neighbours")
    (d / "a.txt").write_text("\n".join(a) + "\n", "utf-8")
    (d / "b.txt").write_text("\n".join(b) + "\n", "utf-8")
    return d / "a.txt", d / "b.txt"


def _released_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and, for zip files (npz), every member unzipped."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            out[str(p.relative_to(folder))] = data
            if zipfile.is_zipfile(p):
                with zipfile.ZipFile(p) as z:
                    for n in z.namelist():
                        out[f"{p.name}:{n}"] = z.read(n)
    return out


def _train(src, out, privacy, *extra):
    r = _run("topics", "train", src, "--k", 3, "--iterations", 3, "--seed", 0, "--privacy", privacy,
             *MODES[privacy], "-o", out, "--no-ledger", "-q", "--json", *extra)
    assert r.exit_code == 0, r.output
    return r


@pytest.mark.parametrize("privacy", list(MODES))
def test_neighbouring_corpora_release_the_same_vocabulary_and_no_rare_word(neighbours, tmp_path, privacy):
    assert RARE not in set(public_vocabulary().words)
    a, b = neighbours
    _train(a, tmp_path / "a", privacy)
    _train(b, tmp_path / "b", privacy)
    ma = json.loads((tmp_path / "a" / "model.json").read_text("utf-8"))
    mb = json.loads((tmp_path / "b" / "model.json").read_text("utf-8"))
    assert ma["vocabulary"] == mb["vocabulary"] == list(public_vocabulary().words)
    for fmt in ("gensim", "csv"):
        r = _run("topics", "export", tmp_path / "b", "--format", fmt, "-o", tmp_path / f"b-{fmt}")
        assert r.exit_code == 0, r.output
    needle = RARE.encode()
    for folder in (tmp_path / "b", tmp_path / "b-gensim", tmp_path / "b-csv"):
        for name, data in _released_bytes(folder).items():
            assert needle not in data and needle.upper() not in data, f"{RARE!r} in {folder.name}/{name}"
    # the cards of neighbouring corpora say the same (data-dependent values only where they come from the DP
    # output: LP/OLP-LDA's reconstructed-corpus sizes)
    ca = json.loads((tmp_path / "a" / "model.card.json").read_text("utf-8"))
    cb = json.loads((tmp_path / "b" / "model.card.json").read_text("utf-8"))
    for c in (ca, cb):
        c.pop("created"), c.pop("output")
        c["data"].pop("input")
        for k in ("reconstructed_docs", "reconstructed_tokens", "batches"):
            c["statistics"].pop(k, None)
    assert ca == cb
    assert ca["warnings"] == [] and ca["data"]["vocabulary"]["sha256"] == PUBLIC_LIST_SHA256


@pytest.mark.parametrize("privacy", ["none", "lp"])
def test_corpus_vocabulary_is_released_and_says_so(neighbours, tmp_path, privacy):
    _, b = neighbours
    r = _train(b, tmp_path / "m", privacy, "--vocabulary", "corpus", "--min-count", 1)
    out = " ".join(r.output.split())
    assert "WARNING (not covered by the guarantee)" in out and "released unprotected" in out
    meta = json.loads((tmp_path / "m" / "model.json").read_text("utf-8"))
    assert RARE in meta["vocabulary"]  # the grep above would have found it
    card = json.loads((tmp_path / "m" / "model.card.json").read_text("utf-8"))
    assert CORPUS_VOCABULARY_WARNING in card["warnings"]
    assert (CORPUS_VOCABULARY_LOCAL_WARNING in card["warnings"]) == (privacy == "lp")
    voc = card["data"]["vocabulary"]
    assert voc["source"] == "corpus" and voc["covered_by_guarantee"] is False
    assert "size" not in voc and "n_words" not in card["data"]  # no vocabulary size on its card
    r = _run("topics", "show", tmp_path / "m")
    assert r.exit_code == 0 and "released unprotected" in " ".join(r.output.split()) and "UNPROTECTED" in r.output
    r = _run("topics", "train", b, "--k", 3, "-i", 2, "--vocabulary", "corpus", "--min-count", 1, "-o",
             tmp_path / "m2", "--no-ledger")  # the plain terminal summary says it too
    assert r.exit_code == 0 and "released unprotected" in " ".join(r.output.split()), r.output


# -- no exact statistic of the private input in a released file -------------------------------------------------
CARD_KEYS = {"format", "mechanism", "parameters", "guarantee", "guarantee_text", "units", "data", "output",
             "randomness", "statistics", "textdp_version", "created", "release", "seed", "warnings",
             "ledger"}  # "ledger": the parameter-level statement of a --no-ledger release
CARD_DATA_KEYS = {"input", "n_topics", "vocabulary", "n_words"}
MODEL_KEYS = {"format", "format_version", "textdp_version", "method", "n_topics", "alpha", "beta", "params",
              "guarantee", "accounting", "seed", "info", "vocabulary"}
PREPROCESSING_KEYS = {"lowercase", "unicode", "token_pattern", "public_vocabulary", "vocabulary", "max_doc_length"}
VOCABULARY_KEYS = {"source", "name", "size", "sha256", "list_sha256", "first", "made_by",
                   "covered_by_guarantee", "min_count", "max_vocab", "stop_words"}
STATISTICS_KEYS = {  # parameters and the accounting; LP/OLP also facts of the randomized reports
    "none": {"mechanism", "note"},
    "hdp": {"scale", "epsilon_per_release", "composition", "noise", "epsilon", "delta", "releases",
            "sensitivity_l1", "mechanism", "unit", "max_doc_length", "sweeps_per_release", "not_credited",
            "not_released", "epsilon_achieved"},
    "lp": {"mechanism", "flip", "epsilon", "formula", "unit", "post_processing", "reconstructed_docs",
           "reconstructed_tokens"},
    "olp": {"mechanism", "flip", "epsilon", "formula", "unit", "post_processing", "batches"},
}
OLP_BATCH_KEYS = {"batch", "skipped", "reconstructed_tokens", "omega_mean", "gaussian_fallback_words"}
PRIVATE_KEYS = {"n_docs", "n_tokens", "docs", "documents", "tokens", "skipped_docs", "oov_tokens", "seconds",
                "n_input_docs", "input_sha256", "input_hash", "word_counts", "doc_lengths", "batch_docs"}


def _all_keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _all_keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _all_keys(v)


@pytest.mark.parametrize("privacy", list(MODES))
@pytest.mark.parametrize("vocabulary", ["public", "corpus"])
def test_released_keys_are_on_the_allow_list(neighbours, tmp_path, privacy, vocabulary):
    a, _ = neighbours
    extra = ["--vocabulary", "corpus", "--min-count", 1] if vocabulary == "corpus" else []
    _train(a, tmp_path / "m", privacy, *extra)
    card = json.loads((tmp_path / "m" / "model.card.json").read_text("utf-8"))
    meta = json.loads((tmp_path / "m" / "model.json").read_text("utf-8"))
    assert set(card) <= CARD_KEYS, set(card) - CARD_KEYS
    assert set(card["data"]) <= CARD_DATA_KEYS, set(card["data"]) - CARD_DATA_KEYS
    assert set(card["data"]["vocabulary"]) <= VOCABULARY_KEYS
    assert set(card["statistics"]) <= STATISTICS_KEYS[privacy], set(card["statistics"]) - STATISTICS_KEYS[privacy]
    for batch in card["statistics"].get("batches", []):
        assert set(batch) <= OLP_BATCH_KEYS, set(batch) - OLP_BATCH_KEYS
    assert set(meta) <= MODEL_KEYS, set(meta) - MODEL_KEYS
    info_keys = {"input", "preprocessing"} | ({"log_likelihood"} if privacy == "lp" else set())
    assert set(meta["info"]) <= info_keys, set(meta["info"]) - info_keys
    assert set(meta["info"]["preprocessing"]) <= PREPROCESSING_KEYS
    assert meta["accounting"] == card["statistics"]
    for doc in (card, meta):
        assert not set(_all_keys(doc)) & PRIVATE_KEYS, set(_all_keys(doc)) & PRIVATE_KEYS
    with np.load(tmp_path / "m" / "model.npz") as z:  # the non-private model's counts are its release
        assert z.files == (["topic_word", "topic_word_counts"] if privacy == "none" else ["topic_word"])


def test_private_statistics_go_to_the_terminal_marked_private(neighbours, tmp_path):
    a, _ = neighbours
    r = _run("topics", "train", a, "--k", 3, "-i", 2, "--seed", 0, "-o", tmp_path / "m", "--no-ledger")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("private (curator only"))
    assert "60 documents" in line and "public list wordfreq-en-20k" in line
    s = json.loads(_train(a, tmp_path / "j", "none").stdout)
    assert s["private"]["n_docs"] == 60 and "n_docs" not in s and s["vocabulary"]["source"] == "public"


# -- the local trainers: every input document reports once ----------------------------------------------------------
def test_empty_documents_report_too():
    """A document whose only vocabulary word became out-of-vocabulary must not vanish from the reports."""
    voc = ["film", "music", "game"]
    full = Corpus.from_texts(["film music", "game", "music"], vocabulary=voc)
    emptied = Corpus.from_texts(["film music", "zorbquaxle", "music"], vocabulary=voc)
    assert emptied.n_docs == 2 and emptied.n_input_docs == 3
    for c in (full, emptied):
        rep = rr_encode(c, 0.5, make_rng(0))
        assert rep.n_docs == 3


def test_olp_batches_follow_the_input_documents(neighbours):
    from textdp.topics import OLPLDA

    words = list(public_vocabulary().words[200:230])
    texts = [" ".join(words[(m + j) % 30] for j in range(8)) for m in range(40)]
    texts[3] = "zorbquaxle"  # empty over the vocabulary
    c = Corpus.from_texts(texts, vocabulary=words)
    m = OLPLDA(2, epsilon=8, iterations=2, batch_size=10, seed=0, threshold=0).fit(c)
    assert m.private["batch_docs"] == [10, 10, 10, 10]  # input documents per batch, the empty one included
    assert len(m.accounting["batches"]) == 4


# -- the public list and word-list files ------------------------------------------------------------------------
def test_shipped_public_list_is_pinned_and_packaged():
    from importlib import resources

    data = resources.files("textdp.topics").joinpath("data", PUBLIC_LIST_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == PUBLIC_LIST_SHA256
    v = public_vocabulary()
    assert len(v) == 20_000 and len(set(v.words)) == 20_000 and v.words[0] == "just"
    assert public_vocabulary(500).words == v.words[:500] and public_vocabulary(500).describe()["first"] == 500
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    assert "topics/data/*.txt" in pyproject.read_text("utf-8")  # installed with the package (wheel too)


def test_public_list_rebuilds_from_wordfreq_3_1_1():
    wordfreq = pytest.importorskip("wordfreq")
    from importlib.metadata import version

    if version("wordfreq") != "3.1.1":
        pytest.skip("the shipped list was made with wordfreq 3.1.1")
    assert tuple(wordfreq_list()) == public_vocabulary().words


def test_vocabulary_file(tmp_path):
    p = tmp_path / "v.txt"
    p.write_text("Film\n\nmusic\nfilm\ngame\n", "utf-8")
    v = read_vocabulary(p)
    assert v.words == ("film", "music", "game") and v.describe()["list_sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert read_vocabulary(p, 2).words == ("film", "music")
    p.write_text("film\ndon't\n", "utf-8")
    with pytest.raises(InputError, match="line 2"):
        read_vocabulary(p)
    with pytest.raises(InputError, match="not found"):
        read_vocabulary(tmp_path / "missing.txt")


def test_cli_vocabulary_file_checked_before_any_work(neighbours, tmp_path):
    a, _ = neighbours
    r = _run("topics", "train", a, "--vocabulary", tmp_path / "missing.txt", "-o", tmp_path / "m",
             "--ledger-dir", tmp_path / "ledgers")
    assert r.exit_code == 2 and "vocabulary file" in r.output and not (tmp_path / "m").exists()
    assert not (tmp_path / "ledgers").exists()
    r = _run("topics", "train", a, "--k", 3, "-i", 2, "--min-count", 3, "-o", tmp_path / "m", "--no-ledger")
    assert r.exit_code == 0 and "--min-count selects words of a corpus vocabulary only" in " ".join(r.output.split())


def test_evaluate_says_held_out_words_outside_the_vocabulary_are_dropped(neighbours, tmp_path):
    a, b = neighbours
    _train(a, tmp_path / "m", "none")
    r = _run("topics", "evaluate", tmp_path / "m", b, "-i", 3, "--burn-in", 1, "--seed", 0)
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "outside the model's vocabulary (20000 words) are dropped" in out and ": 2 of " in out


# -- the training file's name and path are the curator's, not part of the release -----------------------------
def test_released_files_name_no_training_file_but_a_builtin_dataset(neighbours, tmp_path):
    from textdp.topics.model import FILE_INPUT

    folder = tmp_path / "curator-private-dir-8093"
    folder.mkdir()
    src = folder / "patients-ward7-4711.txt"  # names that occur nowhere else
    src.write_bytes(neighbours[0].read_bytes())
    out = folder / "released"  # next to the input: the card does not carry the folder either
    led = tmp_path / "ledgers"
    assert _run("budget", "set", src, "--epsilon", 1, "--ledger-dir", led).exit_code == 0
    r = _run("topics", "train", src, "--k", 3, "-i", 3, "--seed", 0, "--privacy", "hdp", *MODES["hdp"], "-o", out,
             "--ledger-dir", led, "-q", "--json", "--force")  # forced over the budget: the card states why
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["input"] == str(src)  # the curator's own summary keeps the path
    needles = [src.name, src.stem, str(src), str(src.resolve()), folder.name, str(folder)]
    files = _released_bytes(out)
    assert {"model.json", "model.npz", "model.card.json"} <= set(files)
    for name, data in files.items():
        for needle in needles:
            assert needle.encode() not in data, f"{needle!r} in {name}"
    card = json.loads((out / "model.card.json").read_text("utf-8"))
    meta = json.loads((out / "model.json").read_text("utf-8"))
    assert card["data"]["input"] == meta["info"]["input"] == FILE_INPUT
    assert card["output"] == "model.npz"
    assert card["forced"] is True and "privacy budget of the dataset exceeded" in card["forced_reason"]
    # a built-in dataset is public: its name stays
    r = _run("topics", "train", "bbc-news", "--limit", 20, "--k", 2, "-i", 2, "--max-vocab", 300, "--seed", 0,
             "-o", tmp_path / "bbc", "--no-ledger", "-q")
    assert r.exit_code == 0, r.output
    card = json.loads((tmp_path / "bbc" / "model.card.json").read_text("utf-8"))
    meta = json.loads((tmp_path / "bbc" / "model.json").read_text("utf-8"))
    assert card["data"]["input"] == meta["info"]["input"] == "bbc-news"


def test_saving_a_model_never_writes_a_file_path_given_through_the_api(tmp_path):
    from textdp.topics import TopicModel
    from textdp.topics.model import FILE_INPUT

    phi = np.full((2, 3), 1 / 3)
    secret = str(tmp_path / "secret-input-5521.csv")
    TopicModel(phi, ["aa", "bb", "cc"], alpha=0.1, beta=0.01, info={"input": secret}).save(tmp_path / "m")
    for name, data in _released_bytes(tmp_path / "m").items():
        assert b"secret-input-5521" not in data and str(tmp_path).encode() not in data, name
    assert json.loads((tmp_path / "m" / "model.json").read_text("utf-8"))["info"]["input"] == FILE_INPUT
