"""`textdp topics` end to end on a tiny file corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textdp.cli.main import app

from .conftest import synthetic


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    """80 documents over 30 made-up words; their word list (a public vocabulary file) is VOCAB beside it."""
    c, _ = synthetic(M=80, L=30, seed=4)
    p = tmp_path_factory.mktemp("topics") / "docs.txt"
    p.write_text("\n".join(" ".join(c.vocabulary[i] for i in d) for d in c.documents()) + "\n", "utf-8")
    (p.parent / "vocab.txt").write_text("\n".join(c.vocabulary) + "\n", "utf-8")
    return p


def _vocab(corpus_file):
    return corpus_file.parent / "vocab.txt"


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_train_show_evaluate_export(corpus_file, tmp_path):
    out = tmp_path / "model"
    led = tmp_path / "ledgers"
    r = _run("topics", "train", corpus_file, "--k", 3, "--iterations", 20, "--vocabulary", _vocab(corpus_file),
             "--seed", 0, "-o", out, "--ledger-dir", led, "--json", "-q")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["method"] == "lda" and s["private"]["n_docs"] == 80 and len(s["top_words"]) == 3
    assert s["vocabulary"]["source"] == "file" and s["vocabulary"]["size"] == 30 and s["warnings"] == []
    assert (out / "model.card.json").exists() and s["ledger"]
    r = _run("topics", "show", out, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["n_topics"] == 3
    held = tmp_path / "held.txt"  # held-out documents from the same topics (another seed)
    hc, _ = synthetic(M=20, L=30, seed=5)
    held.write_text("\n".join(" ".join(hc.vocabulary[i] for i in d) for d in hc.documents()) + "\n", "utf-8")
    r = _run("topics", "evaluate", out, held, "--iterations", 5, "--burn-in", 1, "--seed", 0, "--json")
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    assert 1 < ev["perplexity"] < 30 and -1 <= ev["npmi_mean"] <= 1
    r = _run("topics", "export", out, "--format", "csv", "-o", tmp_path / "csv")
    assert r.exit_code == 0 and (tmp_path / "csv" / "topic_word.csv").exists()
    # existing output without --overwrite: exit 2, one line
    r = _run("topics", "train", corpus_file, "--k", 3, "--iterations", 2, "--vocabulary", _vocab(corpus_file), "-o", out,
             "--no-ledger")
    assert r.exit_code == 2 and "already exists" in r.output


@pytest.mark.parametrize("privacy,extra", [("hdp", ["--epsilon", 50, "--max-doc-length", 30]),
                                           ("lp", ["--flip", 0.1]),
                                           ("olp", ["--epsilon", 5, "--batch-size", 40]),
                                           ("olp", ["--flip", 0.3, "--batch-size", 30, "--lambda", 0.2])])
def test_private_variants(corpus_file, tmp_path, privacy, extra):
    out = tmp_path / privacy
    if "--lambda" in extra:
        extra = [*extra, "--prior-corpus", corpus_file]
    r = _run("topics", "train", corpus_file, "--k", 3, "--iterations", 5, "--vocabulary", _vocab(corpus_file),
             "--seed", 0, "--privacy", privacy, *extra, "-o", out, "--no-ledger", "--json", "-q")
    assert r.exit_code == 0, r.output
    g = json.loads(r.stdout)["guarantee"]
    assert g["kind"] in ("pure-dp", "local-dp")
    card = json.loads((out / "model.card.json").read_text())
    assert card["guarantee"] == g and card["mechanism"] == f"topics.{privacy}-lda"


@pytest.mark.parametrize("args,msg", [
    (["--k", 0], "K must be"),
    (["--alpha", -1], "alpha"),
    (["--beta", 0], "beta"),
    (["--privacy", "lp", "--flip", 1.2], "flip"),
    (["--privacy", "hdp"], "needs --epsilon"),
    (["--privacy", "magic"], "unknown --privacy"),
    (["--k", 500], "fewer than K"),
    (["--k", 0], "(--k)"),
    (["--min-count", 0], "--min-count must be at least 1"),
    (["--max-vocab", 1], "--max-vocab must be at least 2"),
    (["--privacy", "olp", "-e", 1, "--lambda", 2], "(--lambda) must be in [0, 1]"),
    (["--privacy", "olp", "-e", 1, "--batch-size", 0], "(--batch-size) must be >= 1"),
    (["--privacy", "hdp", "-e", 1, "--max-doc-length", 0], "(--max-doc-length) must be >= 1"),
    (["--privacy", "hdp", "-e", 1, "--sweeps-per-release", 0], "(--sweeps-per-release) must be >= 1"),
    (["--privacy", "hdp", "-e", 1, "--delta", 1], "(--delta) must be in [0, 1)"),
    (["--privacy", "lp", "-e", 1, "--threshold", -1], "(--threshold) must be >= 0"),
    (["--alpha", 0], "(--alpha)"),
])
def test_bad_input_exit_2(corpus_file, tmp_path, args, msg):
    r = _run("topics", "train", corpus_file, "--vocabulary", _vocab(corpus_file), "--iterations", 1,
             "-o", tmp_path / "x", "--no-ledger", *args)
    assert r.exit_code == 2, r.output
    assert msg in r.output and "Traceback" not in r.output
    assert not (tmp_path / "x").exists()


def test_single_word_vocabulary_exit_2(tmp_path):
    p = tmp_path / "one.txt"
    p.write_text("apple apple\napple\n", "utf-8")
    r = _run("topics", "train", p, "--k", 1, "--vocabulary", "corpus", "--min-count", 1, "-o", tmp_path / "x",
             "--no-ledger")
    assert r.exit_code == 2 and "single word" in r.output


def test_unknown_dataset_names_the_built_in_ones(tmp_path):
    r = CliRunner().invoke(app, ["topics", "train", "nope-ds", "-q", "--no-ledger", "-o", str(tmp_path / "m")])
    assert r.exit_code == 2 and "neither a file nor a built-in dataset" in r.output and "rotten-tomatoes" in r.output
    assert not (tmp_path / "m").exists()


def test_evaluate_file_trained_model_requires_held_out_input(corpus_file, tmp_path):
    """The model's files do not name its training file; the budget ledger (the curator's) does the check."""
    out, led = tmp_path / "model", tmp_path / "ledgers"
    r = _run("topics", "train", corpus_file, "--k", 3, "-i", 5, "--vocabulary", _vocab(corpus_file), "--seed", 0,
             "-o", out, "--ledger-dir", led, "-q")
    assert r.exit_code == 0, r.output
    r = _run("topics", "evaluate", out, "-i", 3, "--burn-in", 1)  # no INPUT: the training file is not held out
    assert r.exit_code == 2, r.output
    assert "give held-out documents as INPUT" in r.output and "perplexity" not in r.output
    assert corpus_file.name not in r.output  # the model does not know it
    r = _run("topics", "evaluate", out, corpus_file, "-i", 3, "--burn-in", 1, "--seed", 0, "--ledger-dir", led)
    assert r.exit_code == 2 and "is the file the model was trained on" in r.output, r.output
    assert "perplexity" not in r.output
    copy = tmp_path / "renamed.txt"  # the ledger goes by content: a copy under another name is refused too
    copy.write_bytes(corpus_file.read_bytes())
    r = _run("topics", "evaluate", out, copy, "-i", 3, "--burn-in", 1, "--ledger-dir", led)
    assert r.exit_code == 2 and "is the file the model was trained on" in r.output, r.output
    held = tmp_path / "held.txt"  # held-out documents from the same topics (another seed)
    hc, _ = synthetic(M=20, L=30, seed=5)
    held.write_text("\n".join(" ".join(hc.vocabulary[i] for i in d) for d in hc.documents()) + "\n", "utf-8")
    r = _run("topics", "evaluate", out, held, "-i", 3, "--burn-in", 1, "--seed", 0, "--ledger-dir", led)
    assert r.exit_code == 0, r.output
    assert f"3 sweeps, burn-in 1) on {held}: " in r.output
    # another model trained on the same file with other parameters is not this model's release
    other = tmp_path / "other"
    r = _run("topics", "train", corpus_file, "--k", 2, "-i", 2, "--vocabulary", _vocab(corpus_file), "-o", other,
             "--no-ledger", "-q")
    assert r.exit_code == 0, r.output
    r = _run("topics", "evaluate", other, corpus_file, "-i", 2, "--burn-in", 1, "--ledger-dir", led,
             "--no-coherence")  # trained with --no-ledger: nothing to check, and the note says so
    assert r.exit_code == 0, r.output
    assert "records no release of this model" in r.output and "--no-ledger" in r.output


def test_evaluate_builtin_model_uses_and_names_the_test_split(tmp_path):
    import numpy as np

    from textdp.topics import TopicModel

    vocab = ["said", "year", "people", "government", "film", "music", "game", "market"]
    phi = np.random.default_rng(0).dirichlet(np.ones(len(vocab)), size=2)  # test data, not DP noise
    out = TopicModel(phi, vocab, alpha=0.1, beta=0.01, info={"input": "bbc-news"}).save(tmp_path / "m")
    r = _run("topics", "evaluate", out, "-i", 2, "--burn-in", 1, "--limit", 8, "--no-coherence", "--seed", 0)
    assert r.exit_code == 0, r.output
    assert "on bbc-news (test split):" in r.output
    r = _run("topics", "evaluate", out, "-i", 2, "--burn-in", 1, "--limit", 8, "--no-coherence", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["split"] == "test"


@pytest.mark.parametrize("cmd,args,needle", [
    ("evaluate", ["-i", 0], "--iterations must be at least 1"),
    ("evaluate", ["-i", 5, "--burn-in", 5], "--burn-in must be in [0, --iterations) = [0, 5), got 5"),
    ("evaluate", ["--protocol", "loo"], "--protocol must be fold-in or completion"),
    ("evaluate", ["--top", 0], "--top must be at least 1"),  # printed an NPMI of 0.000 before
    ("show", ["--top", 0], "--top must be at least 1"),       # printed empty topics before
])
def test_evaluate_and_show_options_checked_before_reading(tmp_path, monkeypatch, cmd, args, needle):
    import textdp.topics

    def no_loading(*a, **k):
        raise AssertionError("the model was read before the options were checked")

    monkeypatch.setattr(textdp.topics, "load_model", no_loading)
    r = _run("topics", cmd, tmp_path / "model", *args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "unexpected" not in r.output


def test_cli_tradeoff_json_is_standard_json(tmp_path):
    """The non-private row has ε = inf: written as the string "inf", not the non-JSON Infinity."""
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    out = tmp_path / "tr.png"
    r = _run("topics", "tradeoff", "bbc-news", "--limit", 60, "-i", 2, "-k", 3, "--epsilons", 1, "--methods", "lp",
             "--seed", 0, "-o", out, "-q", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout, parse_constant=refuse)
    eps = {row["method"]: row["epsilon"] for row in doc["rows"]}
    assert eps == {"none": "inf", "lp": 1.0}


@pytest.mark.parametrize("below", ["x", "x/y"])
def test_cli_export_under_a_file_names_the_file(corpus_file, tmp_path, below):
    model = tmp_path / "model"
    r = _run("topics", "train", corpus_file, "--k", 2, "--iterations", 2, "--vocabulary", _vocab(corpus_file),
             "--seed", 0, "-o", model, "--ledger-dir", tmp_path / "ledgers", "-q")
    assert r.exit_code == 0, r.output
    notes = tmp_path / "notes.txt"
    notes.write_text("n\n")
    r = _run("topics", "export", model, "-o", notes / below)
    assert r.exit_code == 2, r.output
    msg = r.output.strip()
    assert len(msg.splitlines()) == 1 and f"{str(notes)!r} is a file, not a folder" in msg, msg
    assert "create its parent first" not in msg
    assert notes.read_text() == "n\n"


def test_train_creates_missing_output_folders(corpus_file, tmp_path):
    """Like sanitize, `topics train -o missing/folder/model` makes the folders above the model (issue 13, item 9)."""
    out = tmp_path / "missing" / "folder" / "model"
    r = _run("topics", "train", corpus_file, "--k", 3, "--iterations", 2, "--vocabulary", _vocab(corpus_file),
             "--seed", 0, "-o", out, "--no-ledger", "-q")
    assert r.exit_code == 0, r.output
    assert (out / "model.card.json").exists() and (out / "model.npz").exists()


def test_train_failing_leaves_no_created_folders(corpus_file, tmp_path):
    """A run that fails after the output checks (here: no word of the vocabulary file occurs) leaves no folder."""
    vocab = tmp_path / "other-words.txt"
    vocab.write_text("zebra\nquokka\nnarwhal\n", "utf-8")
    out = tmp_path / "missing" / "folder" / "model"
    r = _run("topics", "train", corpus_file, "--k", 3, "--iterations", 2, "--vocabulary", vocab, "-o", out,
             "--no-ledger", "-q")
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "missing").exists()


def test_train_over_budget_record_removes_created_folders(corpus_file, tmp_path, monkeypatch):
    """The ledger refusing the release after the model was written removes the model and the folders made for it."""
    from textdp.accounting.ledger import Ledger
    from textdp.errors import BudgetExceededError

    def refuse(self, *a, **k):
        raise BudgetExceededError("over budget (test)")

    monkeypatch.setattr(Ledger, "record", refuse)
    out = tmp_path / "missing" / "folder" / "model"
    r = _run("topics", "train", corpus_file, "--k", 3, "--iterations", 2, "--vocabulary", _vocab(corpus_file),
             "--seed", 0, "-o", out, "--ledger-dir", tmp_path / "ledgers", "-q")
    assert r.exit_code == 2 and "over budget" in r.output, r.output
    assert not (tmp_path / "missing").exists()


def test_train_reservation_names_its_outputs_so_settle_can_cancel_it(corpus_file, tmp_path, monkeypatch):
    """Like sanitize, `topics train` reserves with the model folder and its card (issue 13, item 1): a run
    killed before the model reached disk is settled by cancelling, not by committing its charge."""
    import textdp.cli.topics as cli_topics
    from textdp.accounting.ledger import Ledger

    led = tmp_path / "ledgers"
    Ledger(str(corpus_file), led).set_budget(5.0)
    out = tmp_path / "model"

    def killed(*a, **k):  # the run dies during training, before its reservation is closed
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_topics, "_train_and_release", killed)
    monkeypatch.setattr(Ledger, "cancel", lambda self, reservation: None)  # as when killed (SIGKILL)
    r = _run("topics", "train", corpus_file, "--privacy", "hdp", "-e", 1, "--k", 3, "--iterations", 2,
             "--vocabulary", _vocab(corpus_file), "-o", out, "--ledger-dir", led, "-q")
    assert r.exit_code == 130, r.output
    (opened,) = Ledger(str(corpus_file), led).open_reservations()
    assert opened["outputs"] == [str(out), str(out / "model.card.json")]
    r = _run("budget", "reservations", corpus_file, "--ledger-dir", led, "--json")
    (row,) = json.loads(r.stdout)["open_reservations"]
    assert row["settle"] == "cancel" and row["on_disk"] == [], row  # nothing of it reached disk
    out.mkdir()
    (out / "model.card.json").write_text("{}")
    r = _run("budget", "reservations", corpus_file, "--ledger-dir", led, "--json")
    (row,) = json.loads(r.stdout)["open_reservations"]
    assert row["settle"] == "commit" and len(row["on_disk"]) == 2, row  # its release is on disk: spent


def test_train_no_ledger_over_a_budget_warns_once_and_the_card_says_unrecorded(corpus_file, tmp_path):
    """As sanitize: --no-ledger over a dataset with a budget prints one warning line, and the card of every
    --no-ledger model states that it is not recorded (issue 13, item 7)."""
    from textdp.accounting.ledger import Ledger
    from textdp.cli.budget import NOT_RECORDED

    led = tmp_path / "ledgers"
    env = {"TEXTDP_LEDGER_DIR": str(led)}  # --ledger-dir is refused with --no-ledger: the default folder

    def train(out, *extra):
        return CliRunner().invoke(app, [str(a) for a in (
            "topics", "train", corpus_file, "--privacy", "hdp", "-e", 1, "--k", 3, "--iterations", 2,
            "--vocabulary", _vocab(corpus_file), "--seed", 0, "-o", tmp_path / out, "-q", *extra)], env=env)

    r = train("a", "--no-ledger")  # no budget: nothing to warn about
    assert r.exit_code == 0 and r.output == "", r.output
    Ledger(str(corpus_file), led).set_budget(5.0)
    r = train("b", "--no-ledger")
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "--no-ledger" in lines[0] and "has a budget" in lines[0], r.output
    for name in ("a", "b"):
        assert json.loads((tmp_path / name / "model.card.json").read_text())["ledger"] == NOT_RECORDED
    assert [e["type"] for e in Ledger(str(corpus_file), led).entries()] == ["budget"]
    r = train("c")  # recorded: the card says nothing about a ledger, the ledger has the release
    assert r.exit_code == 0, r.output
    assert "ledger" not in json.loads((tmp_path / "c" / "model.card.json").read_text())
    assert [e["type"] for e in Ledger(str(corpus_file), led).entries()] == ["budget", "reservation", "release"]


def test_fewer_documents_than_topics_leaves_no_ledger_trace(tmp_path):
    """Final review finding: a refused run (K > documents) must not write a reservation/cancel pair."""
    p = tmp_path / "one.txt"
    p.write_text("apples and oranges grow on trees in the garden\n", "utf-8")
    led = tmp_path / "led"
    r = _run("topics", "train", p, "--k", 5, "--privacy", "hdp", "--epsilon", 2, "-o", tmp_path / "m",
             "--ledger-dir", led)
    assert r.exit_code == 2 and "fewer than K=5" in r.output, r.output
    assert not led.exists() or not any(led.iterdir())
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("privacy,extra", [("none", []), ("lp", ["--flip", 0.1]), ("olp", ["--epsilon", 5]),
                                           ("hdp", ["--epsilon", 50, "--max-doc-length", 30])])
def test_private_variants_print_their_terminal_summary(corpus_file, tmp_path, privacy, extra):
    """Without -q the terminal path runs too (it crashed for lp/olp, whose `workers` default to None)."""
    out = tmp_path / privacy
    r = _run("topics", "train", corpus_file, "--k", 3, "--iterations", 3, "--vocabulary", _vocab(corpus_file),
             "--seed", 0, "--privacy", privacy, *extra, "-o", out, "--no-ledger")
    assert r.exit_code == 0, r.output
    assert (out / "model.card.json").exists()
