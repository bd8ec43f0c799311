"""Regression tests: `textdp attack invert` rejects bad knobs and missing target
models before any work (exit 2, one-line message, nothing created)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from textdp.attacks.inversion import preset_config
from textdp.cli.main import app
from textdp.errors import ParameterError

runner = CliRunner()


@pytest.mark.parametrize("extra, needle", [
    (["--stepsize", "nan"], "--stepsize"),
    (["--stepsize", "inf"], "--stepsize"),
    (["--stepsize", "0"], "--stepsize"),
    (["--kl-scale", "nan"], "--kl-scale"),
    (["--gm-scale", "nan"], "gm_scale"),
    (["--gm-scale", "2"], "gm_scale"),
    (["--dp-epsilon", "nan"], "--dp-epsilon"),
    (["--dp-epsilon", "-1"], "--dp-epsilon"),
    (["--santext-epsilon", "inf"], "--santext-epsilon"),
    (["--templates", "0"], "--templates"),
    (["--num-iterations", "0"], "--num-iterations"),
    (["--gen-length", "0"], "--gen-length"),
    (["--target-layers", "0"], "--target-layers"),
    (["--defence", "zz"], "--defence"),
    (["--target", "/nope"], "does not exist"),
    (["--target", "./nope"], "does not exist"),
    (["--target", "nosuch-model-xyz"], "not available offline"),
])
def test_invert_rejects_before_any_work(tmp_path, extra, needle):
    out = tmp_path / "atk"
    r = runner.invoke(app, ["attack", "invert", "--preset", "tiny", "-o", str(out), *extra])
    assert r.exit_code == 2, r.output
    lines = [l for l in r.output.strip().splitlines() if l.strip()]
    assert len(lines) == 1, r.output
    assert needle in lines[0]
    assert "Retrying" not in r.output and "Traceback" not in r.output
    assert not out.exists()


@pytest.mark.parametrize("preset", ["cpu", "paper", "tiny"])
def test_presets_validate(preset):
    assert preset_config(preset).validate().preset == preset


def test_validate_direct():
    cfg = preset_config("tiny")
    with pytest.raises(ParameterError, match="finite"):
        cfg.with_overrides(pplm_stepsize=float("nan")).validate()
    with pytest.raises(ParameterError):
        cfg.with_overrides(santext_epsilon=0.0).validate()
