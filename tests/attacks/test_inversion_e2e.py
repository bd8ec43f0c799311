"""End to end: the tiny preset through the API and the CLI; bad input gives clear errors."""

import json

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from textdp.attacks.inversion import preset_config, run_inversion, split_data, write_report  # noqa: E402
from textdp.data import Dataset  # noqa: E402
from textdp.errors import InputError, OutputError, ParameterError  # noqa: E402


@pytest.fixture
def cache(textdp_cache, monkeypatch):
    monkeypatch.setenv("TEXTDP_CACHE", str(textdp_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return textdp_cache


def test_tiny_preset_end_to_end(cache, tmp_path):
    rep = run_inversion("rotten-tomatoes", preset="tiny", seeds=[0])
    s = rep.summary.set_index("method")
    assert set(s.index) == {"tr", "vtg", "vmi", "tr-vtg"}
    cfg = preset_config("tiny")
    n = cfg.n_templates * 2  # 2 labels
    assert (rep.metrics["n_texts"] == n).all()
    for col in ("rr_vocab", "rr_match", "att_acc", "target_acc"):
        assert rep.metrics[col].between(0, 1).all(), col
    assert (rep.metrics["ppl"] > 1).all()
    # TR texts start with their template; VMI texts have no template
    tr = rep.texts[rep.texts["method"] == "tr"]
    assert all(t.startswith(tpl) for t, tpl in zip(tr["text"], tr["template"]))
    assert rep.card["targets"]["none"]["train_acc"] >= 0.0 and "heldout_acc" in rep.card["targets"]["none"]
    t = rep.card["targets"]["none"]  # whether the target learned is recorded (a no-learn target is flagged)
    assert 0.5 <= t["majority_rate"] <= 1.0
    assert t["learned"] == (t["train_acc"] > t["majority_rate"] + 0.05)
    assert rep.card["evaluator"]["private_acc"] > 0.9
    assert 0 <= rep.card["kendall_public_vs_private"]["top10"]["distance"] <= 1
    out = write_report(rep, tmp_path / "res")
    for f in ("inverted.csv", "metrics.csv", "summary.csv", "summary.md", "examples.csv", "plot.png", "report.json"):
        assert (out / f).exists(), f
    assert len(pd.read_csv(out / "inverted.csv")) == 3 * n
    assert json.loads((out / "report.json").read_text())["dataset"] == "rotten-tomatoes"
    with pytest.raises(OutputError):
        write_report(rep, tmp_path / "res")
    write_report(rep, tmp_path / "res", overwrite=True)
    # the models were cached: a second run trains nothing
    rep2 = run_inversion("rotten-tomatoes", preset="tiny", seeds=[0], methods=["vtg"])
    assert rep2.card["targets"]["none"]["cached"] and rep2.card["generator"]["cached"]
    vtg1 = rep.texts[rep.texts["method"] == "vtg"]["text"].tolist()
    assert rep2.texts["text"].tolist() == vtg1  # same seed, same texts


def test_cli_attack_invert_tiny(cache, tmp_path):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    out = tmp_path / "cli-out"
    r = CliRunner().invoke(app, ["attack", "invert", "--dataset", "rotten-tomatoes", "--method", "tr,vtg",
                                 "--preset", "tiny", "--seed", "1", "--seeds", "1", "--output", str(out), "-q", "--json"])
    assert r.exit_code == 0, r.output
    js = json.loads(r.stdout)
    assert {row["method"] for row in js["summary"]} == {"tr", "vtg", "tr-vtg"}
    assert (out / "plot.png").exists()
    # existing output without --overwrite: exit 2, one line
    r = CliRunner().invoke(app, ["attack", "invert", "--preset", "tiny", "--output", str(out), "-q"])
    assert r.exit_code == 2 and "already exists" in r.output
    r = CliRunner().invoke(app, ["attack", "invert", "--preset", "huge", "--output", str(tmp_path / "x"), "-q"])
    assert r.exit_code == 2 and "unknown preset" in r.output
    r = CliRunner().invoke(app, ["attack", "invert", "--method", "gan", "--output", str(tmp_path / "y"), "-q"])
    assert r.exit_code == 2 and "--method" in r.output
    r = CliRunner().invoke(app, ["attack", "invert", "--dataset", "nope", "--preset", "tiny", "--output",
                                 str(tmp_path / "z"), "-q"])
    assert r.exit_code == 2 and "unknown dataset" in r.output


def _ds(labels, n):
    df = pd.DataFrame({"text": [f"text number {i} is fine" for i in range(n)], "label": [labels[i % len(labels)] for i in range(n)]})
    return Dataset("toy", df, df.head(10))


def test_bad_datasets_and_presets():
    cfg = preset_config("tiny")
    with pytest.raises(InputError, match="label"):
        split_data(_ds(["only"], 200), cfg)
    with pytest.raises(InputError, match="fewer than"):
        split_data(_ds(["a", "b"], 30), cfg)
    with pytest.raises(ParameterError, match="unknown preset"):
        preset_config("gpu-cluster")
    with pytest.raises(ParameterError):
        run_inversion(_ds(["a", "b"], 200), preset="tiny", methods=["nope"])
    with pytest.raises(ParameterError):
        run_inversion(_ds(["a", "b"], 200), preset="tiny", defence="magic")


def test_model_that_cannot_load_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from textdp.models.classifier import load_classifier
    from textdp.noise import make_rng

    with pytest.raises(InputError, match="local model folder"):
        load_classifier("no-such-org/no-such-model", ["a", "b"], rng=make_rng(0))
