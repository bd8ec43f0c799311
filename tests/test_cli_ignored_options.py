"""Options that do not apply are refused with one line naming the option, exit 2, before any work:
never silently ignored (issue 13, item 4). Combinations the docs show keep working."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from textdp.cli.main import app


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def no_work(monkeypatch):
    """Reading a dataset, a table or text features, or running an attack fails the test: every refusal
    comes before any work."""
    import textdp.attacks.inversion
    import textdp.bounds
    import textdp.data.datasets
    import textdp.data.io

    def forbidden(*a, **k):
        raise AssertionError("work started before the options were checked")

    monkeypatch.setattr(textdp.data.datasets, "load_dataset", forbidden)
    monkeypatch.setattr(textdp.data.io, "read_table", forbidden)
    monkeypatch.setattr(textdp.bounds, "text_features", forbidden)
    monkeypatch.setattr(textdp.attacks.inversion, "run_inversion", forbidden)


@pytest.fixture
def models(tmp_path):
    """Two tiny saved topic models: one trained on a built-in dataset, one on a file."""
    import numpy as np

    from textdp.topics import TopicModel
    from textdp.topics.model import FILE_INPUT

    vocab = ["said", "year", "people", "government", "film", "music", "game", "market"]
    phi = np.random.default_rng(0).dirichlet(np.ones(len(vocab)), size=2)  # test data, not DP noise
    builtin = TopicModel(phi, vocab, alpha=0.1, beta=0.01, info={"input": "bbc-news"}).save(tmp_path / "builtin")
    onfile = TopicModel(phi, vocab, alpha=0.1, beta=0.01, info={"input": FILE_INPUT}).save(tmp_path / "onfile")
    held = tmp_path / "held.txt"
    held.write_text("film music game\nsaid year people\n", "utf-8")
    return {"builtin": builtin, "onfile": onfile, "held": held}


REFUSED = [
    # topics train: another method's options, file-only options on a built-in dataset (and the reverse), ledger
    (["topics", "train", "bbc-news", "--text-column", "body"], "--text-column", "built-in dataset"),
    (["topics", "train", "{held}", "--split", "all"], "--split", "used whole"),
    (["topics", "train", "bbc-news", "--delta", "1e-6"], "--delta", "--privacy hdp, not none"),
    (["topics", "train", "bbc-news", "--privacy", "lp", "-e", "2", "--delta", "1e-6"], "--delta", "not lp"),
    (["topics", "train", "bbc-news", "--privacy", "lp", "-e", "2", "--max-doc-length", "50"], "--max-doc-length", "hdp"),
    (["topics", "train", "bbc-news", "--privacy", "olp", "-e", "2", "--sweeps-per-release", "2"],
     "--sweeps-per-release", "hdp"),
    (["topics", "train", "bbc-news", "--privacy", "hdp", "-e", "2", "--batch-size", "10"], "--batch-size", "olp"),
    (["topics", "train", "bbc-news", "--privacy", "lp", "-e", "2", "--lambda", "0.3"], "--lambda", "olp"),
    (["topics", "train", "bbc-news", "--privacy", "lp", "-e", "2", "--prior-variance", "1"], "--prior-variance", "olp"),
    (["topics", "train", "bbc-news", "--privacy", "lp", "-e", "2", "--prior-corpus", "20newsgroups"],
     "--prior-corpus", "olp"),
    (["topics", "train", "bbc-news", "--privacy", "hdp", "-e", "2", "--threshold", "2"], "--threshold", "lp or olp"),
    (["topics", "train", "bbc-news", "--threshold", "2"], "--threshold", "lp or olp"),
    (["topics", "train", "bbc-news", "--no-ledger", "--ledger-dir", "{tmp}/led"], "--ledger-dir", "--no-ledger"),
    # topics evaluate / export / tradeoff
    (["topics", "evaluate", "{builtin}", "--no-coherence", "--top", "5"], "--top", "--no-coherence"),
    (["topics", "evaluate", "{builtin}", "--text-column", "body"], "--text-column", "built-in dataset"),
    (["topics", "evaluate", "{builtin}", "bbc-news", "--text-column", "body"], "--text-column", "built-in dataset"),
    (["topics", "evaluate", "{builtin}", "--ledger-dir", "{tmp}/led"], "--ledger-dir", "built-in dataset"),
    (["topics", "evaluate", "{builtin}", "{held}", "--ledger-dir", "{tmp}/led"], "--ledger-dir", "trained on"),
    (["topics", "export", "{builtin}", "-o", "{tmp}/exp", "--top", "5"], "--top", "--format csv"),
    (["topics", "tradeoff", "bbc-news", "--methods", "lp,olp", "--max-doc-length", "50", "-o", "{tmp}/t.png"],
     "--max-doc-length", "hdp runs"),
    (["topics", "tradeoff", "bbc-news", "--methods", "lp", "--sweeps-per-release", "2", "-o", "{tmp}/t.png"],
     "--sweeps-per-release", "hdp runs"),
    (["topics", "tradeoff", "bbc-news", "--methods", "hdp,lp", "--batch-size", "50", "-o", "{tmp}/t.png"],
     "--batch-size", "olp runs"),
    # audit
    (["audit", "--list", "-m", "laplace"], "--mechanism", "--list"),
    (["audit", "--list", "--json"], "--json", "--list"),
    (["audit", "-m", "laplace", "-e", "1", "--overwrite"], "--overwrite", "no --output"),
    (["audit", "-m", "laplace", "-e", "1", "--no-strong", "--statistic", "clipped-mean"], "--statistic", "--no-strong"),
    (["audit", "--grid", "habernal2022", "--workers", "2"], "--workers", "--fast"),
    (["audit", "-m", "laplace", "-e", "1", "--fast", "--workers", "2"], "--workers", "--fast"),
    # bounds
    (["bounds", "mse", "-e", "1", "--kind", "dp", "--order", "3"], "--order", "--kind dp"),
    (["bounds", "mse", "-e", "1", "--mechanism", "laplace", "--order", "3"], "--order", "exact curve"),
    (["bounds", "mse", "-e", "1", "--gamma-mode", "absolute"], "--gamma-mode", "--gamma"),
    (["bounds", "glm", "--trials", "0", "--targets", "5"], "--targets", "--trials 0"),
    (["bounds", "glm", "--features", "glove", "--max-features", "50"], "--max-features", "glove"),
    (["bounds", "glm", "--overwrite"], "--overwrite", "no --output"),
    (["bounds", "dpsgd", "--hidden", "16"], "--hidden", "--model logreg"),
    (["bounds", "dpsgd", "--features", "glove", "--max-features", "50"], "--max-features", "glove"),
    (["bounds", "dpsgd", "--overwrite"], "--overwrite", "no --output"),
    # attack invert
    (["attack", "invert", "-o", "{tmp}/inv", "--dp-epsilon", "4"], "--dp-epsilon", "--defence is none"),
    (["attack", "invert", "-o", "{tmp}/inv", "--defence", "dpsgd", "--santext-epsilon", "4"], "--santext-epsilon",
     "--defence is dpsgd"),
    (["attack", "invert", "-o", "{tmp}/inv", "--method", "vtg,vmi", "--stepsize", "0.1"], "--stepsize", "no tr"),
    (["attack", "invert", "-o", "{tmp}/inv", "--method", "vmi", "--kl-scale", "0.1"], "--kl-scale", "no tr"),
]


@pytest.mark.parametrize("args, option, needle", REFUSED, ids=[" ".join(a[:2]) + " " + o for a, o, _ in REFUSED])
def test_option_that_does_not_apply_is_refused(tmp_path, models, no_work, args, option, needle):
    subs = {"tmp": tmp_path, **models}
    r = _run(*[a.format(**subs) for a in args])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {option} ") and needle in err, err
    assert "unexpected" not in err
    assert r.stdout == ""
    assert not (tmp_path / "exp").exists() and not (tmp_path / "inv").exists() and not (tmp_path / "led").exists()


@pytest.mark.parametrize("args", [
    ["audit", "--list", "-q"],
    ["bounds", "mse", "-e", "1", "--order", "2", "--kind", "rdp", "--json"],
    ["bounds", "mse", "-e", "1", "--order", "3", "--json"],
    ["bounds", "mse", "-e", "1", "--gamma", "0.1", "--gamma-mode", "absolute", "--json"],
    ["bounds", "mse", "--epsilon", "1", "--delta", "1e-5", "--mechanism", "gaussian", "--json"],  # README
    ["topics", "evaluate", "{builtin}", "{held}", "--no-coherence", "-i", "2", "--burn-in", "1", "--json"],
    ["topics", "evaluate", "{onfile}", "{held}", "--ledger-dir", "{tmp}/led", "-i", "2", "--burn-in", "1", "--top", "3",
     "--json"],
    ["topics", "export", "{builtin}", "-o", "{tmp}/csv", "--format", "csv", "--top", "3"],
])
def test_options_that_apply_still_work(tmp_path, models, args):
    subs = {"tmp": tmp_path, **models}
    r = _run(*[a.format(**subs) for a in args])
    assert r.exit_code == 0, r.output
    if "--json" in args:
        json.loads(r.stdout)


def test_min_count_with_a_public_vocabulary_is_a_documented_note(tmp_path, models):
    """--min-count with --vocabulary public: ignored as documented, with a note (not refused)."""
    r = _run("topics", "train", models["held"], "--min-count", "2", "--k", "2", "-i", "2", "--no-ledger", "--seed", "0",
             "-o", tmp_path / "m", "--json")
    assert r.exit_code == 0, r.output
    assert "note: --min-count" in r.stderr and "ignored with --vocabulary public" in r.stderr
