"""`textdp evaluate` refuses options that do not apply (one line naming the option and why, exit 2,
before any work) instead of silently ignoring them (issue 13); every command README.md and
docs/evaluate.md show still runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def no_work(monkeypatch):
    """Loading data, training or sweeping fails the test: every refusal comes before any work."""
    import textdp.data.datasets
    import textdp.data.io
    import textdp.evaluate
    import textdp.evaluate.pretrain

    def forbidden(*a, **k):
        raise AssertionError("work started before the options were checked")

    for mod, name in ((textdp.data.datasets, "load_dataset"), (textdp.data.io, "read_table"),
                      (textdp.evaluate, "run_sweep"), (textdp.evaluate.pretrain, "compare_pretraining")):
        monkeypatch.setattr(mod, name, forbidden)


@pytest.mark.parametrize("args, option, why", [
    # the columns of a TRAIN,TEST file pair, with a built-in dataset (also at their default values)
    (["--text-column", "body"], "--text-column", "built-in dataset"),
    (["--text-column", "text"], "--text-column", "built-in dataset"),
    (["-d", "bbc-news", "--label-column", "label"], "--label-column", "built-in dataset"),
    (["--pretraining", "tiny", "--label-column", "y"], "--label-column", "built-in dataset"),
    # SanText+ settings without santext+
    (["-m", "santext,fbdd", "--w", "0.5"], "--w", "no santext+"),
    (["-m", "santext", "--p", "0.3"], "--p", "no santext+"),
    (["-m", "fbdd", "--frequencies", "corpus"], "--frequencies", "no santext+"),
    # mask-token attack settings without mask
    (["--attacks", "bayes", "--mlm", "some/model"], "--mlm", "no mask"),
    (["--attacks", "bayes", "--mlm-preset", "tiny"], "--mlm-preset", "no mask"),
    (["--attacks", "none", "--max-mask-positions", "10"], "--max-mask-positions", "no mask"),
    (["--attacks", "mask", "--mlm", "{tmp}", "--mlm-preset", "tiny"], "--mlm-preset", "--mlm names the model"),
    # Bayes attack settings without bayes
    (["--attacks", "mask", "--prior", "uniform"], "--prior", "no bayes"),
    (["--attacks", "none", "--max-attack-tokens", "50"], "--max-attack-tokens", "no bayes"),
    # fine-tuning epochs with TF-IDF
    (["--epochs", "2"], "--epochs", "tfidf"),
    (["--model", "TFIDF", "--epochs", "1"], "--epochs", "tfidf"),
    # the pretraining encoder without --pretraining
    (["--pretraining-encoder", "minilm"], "--pretraining-encoder", "no --pretraining"),
])
def test_options_that_do_not_apply_are_refused(tmp_path, no_work, args, option, why):
    out = tmp_path / "out"
    r = _run("evaluate", "--max-docs", 20, "-o", out, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1, r.output
    assert lines[0].startswith(f"error: {option} ") and why in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["-m", "santext+", "--w", "0.5", "--p", "0.2", "--frequencies", "corpus"],
    ["-m", "SanTextPlus,fbdd", "--w", "0.5"],
    ["--attacks", "mask", "--mlm-preset", "tiny", "--max-mask-positions", "10"],
    ["--attacks", "bayes", "--prior", "uniform", "--max-attack-tokens", "10"],
    ["--model", "minilm", "--epochs", "1"],
    ["--pretraining", "tiny", "--pretraining-encoder", "word-mlm"],
])
def test_options_that_apply_are_accepted(tmp_path, fake_work, args):
    r = _run("evaluate", "-o", tmp_path / "out", *args)
    assert r.exit_code == 0, r.output
    assert fake_work


@pytest.fixture
def fake_work(monkeypatch):
    """run_sweep and compare_pretraining replaced by stand-ins that record their calls."""
    import textdp.evaluate
    import textdp.evaluate.pretrain
    from textdp.evaluate import SweepResult

    calls = []

    def sweep(cfg, output, **kw):
        calls.append(("sweep", cfg))
        rows = pd.DataFrame([{"mechanism": "none", "epsilon": None}] +
                            [{"mechanism": m, "epsilon": e} for m in cfg.mechanisms for e in cfg.epsilons])
        return SweepResult(rows, {}, {}, cfg)

    def pretraining(dataset, mechanism, epsilon, **kw):
        calls.append(("pretraining", dataset, kw))
        return {"encoder": kw.get("encoder"), "preset": kw.get("preset"), "plain": 0.5, "control": 0.5,
                "sanitization_aware": 0.5, "gain": 0.0}

    monkeypatch.setattr(textdp.evaluate, "run_sweep", sweep)
    monkeypatch.setattr(textdp.evaluate.pretrain, "compare_pretraining", pretraining)
    return calls


def _documented_commands() -> list[str]:
    """Every complete `textdp evaluate` command in a code block of README.md and docs/evaluate.md (lines
    joined at a trailing backslash; synopses with [optional] or a|b alternatives left out)."""
    found = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "evaluate.md"):
        text = doc.read_text("utf-8")
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = re.sub(r"^\$\s+(time\s+)?", "", line.strip()).split("  #")[0].strip()
                if re.match(r"textdp evaluate -", line) and not re.search(r"\[|\||\.\.\.|\bDIR\b|PRESET", line):
                    found.append(line)
    return found


DOCUMENTED = _documented_commands()


def test_the_docs_show_evaluate_commands():
    assert len(DOCUMENTED) >= 5, DOCUMENTED  # the extraction keeps finding them
    assert any("--pretraining" in c for c in DOCUMENTED) and any("--attacks mask" in c for c in DOCUMENTED)


@pytest.mark.parametrize("command", DOCUMENTED + [
    # docs/evaluate.md: "textdp evaluate --dataset train.csv,test.csv --text-column body --label-column sentiment"
    "textdp evaluate --dataset {tr},{te} --text-column body --label-column sentiment -o eval/",
    # docs/evaluate.md: a MiniLM run with one epoch
    "textdp evaluate --model minilm --mechanisms santext --epsilons 3 --epochs 1 --max-docs 1000",
])
def test_documented_commands_still_run(tmp_path, monkeypatch, fake_work, command):
    monkeypatch.chdir(tmp_path)
    for name in ("tr", "te"):
        pd.DataFrame({"body": ["good film", "bad film"], "sentiment": ["pos", "neg"]}).to_csv(f"{name}.csv",
                                                                                            index=False)
    args = shlex.split(command.format(tr="tr.csv", te="te.csv"))[2:]
    args = [str(tmp_path / Path(a).name) if a.startswith("/tmp/") else a for a in args]  # outputs in tmp_path
    r = _run("evaluate", *args)
    assert r.exit_code == 0, (command, r.output)
    assert len(fake_work) == 1
