"""Regression tests: `textdp evaluate` / `textdp topics export` reject bad options
before any data is loaded, model trained or folder created (exit 2, one line)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.errors import InputError, ParameterError
from textdp.evaluate import SweepConfig

runner = CliRunner()


def _run(args):
    return runner.invoke(app, args)


@pytest.mark.parametrize("extra, needle", [
    (["--prior", "zz"], "--prior"),
    (["--w", "2"], "--w"),
    (["--w", "nan"], "--w"),
    (["--p", "nan"], "--p"),
    (["--p", "-0.1"], "--p"),
    (["-e", "1,,2"], "empty item"),
    (["-e", "1,"], "empty item"),
    (["-e", "0"], "epsilon"),
    (["-e", "inf"], "epsilon"),
    (["-m", "santext,zz"], "unknown mechanism"),
    (["-m", "santext,,fbdd"], "empty item"),
    (["--attacks", "bayes,,mask"], "empty item"),
    (["--attacks", "bayes,zz"], "unknown attack"),
    (["--model", "nosuch-model-xyz"], "not available offline"),
    (["--model", "./no/such/folder"], "does not exist"),
    (["--model", "~/no_such_textdp_model"], "does not exist"),
    (["--mlm", "/no/such/mlm"], "does not exist"),
    (["--mlm-preset", "huge"], "--mlm-preset"),
    (["--embeddings", "zz"], "--embeddings"),
    (["--max-attack-tokens", "0"], "--max-attack-tokens"),
    (["--epochs", "0"], "--epochs"),
    (["--pretraining", "zz"], "pretraining"),
    (["--workers", "0"], "--workers"),
])
def test_evaluate_rejects_before_any_work(tmp_path, extra, needle):
    out = tmp_path / "rep"
    r = _run(["evaluate", "--max-docs", "20", "-o", str(out), *extra])
    assert r.exit_code == 2, r.output
    lines = [l for l in r.output.strip().splitlines() if l.strip()]
    assert len(lines) == 1, r.output  # one line, no HF retry noise, no traceback
    assert needle in lines[0]
    assert "Retrying" not in r.output and "Traceback" not in r.output
    assert not out.exists()  # nothing created (no OUTPUT/cache)


def test_sweepconfig_validate_direct():
    with pytest.raises(ParameterError):
        SweepConfig(prior="zz").validate()
    with pytest.raises(ParameterError):
        SweepConfig(w=float("nan")).validate()
    with pytest.raises(InputError, match="not available offline"):
        SweepConfig(model="nosuch-model-xyz").validate()
    with pytest.raises(InputError, match="does not exist"):
        SweepConfig(model="/no/such/dir").validate()
    # valid defaults pass and normalise
    cfg = SweepConfig(prior="Uniform", epsilons=[3, 1]).validate()
    assert cfg.prior == "uniform" and cfg.epsilons == (1.0, 3.0)


def test_evaluate_missing_model_message_is_whole(tmp_path):
    r = _run(["evaluate", "--model", "nosuch", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    msg = r.output.strip()
    assert msg.endswith("models")  # not cut mid-word
    assert "'nosuch'" in msg


def test_topics_export_bad_format_creates_nothing(tmp_path):
    out = tmp_path / "z"
    r = _run(["topics", "export", str(tmp_path / "no-model"), "--format", "zz", "--output", str(out)])
    assert r.exit_code == 2, r.output
    assert "format" in r.output
    assert not out.exists()
