"""``textdp bounds`` CLI (thin layer): outputs, exit codes, files."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from textdp.cli.main import app

runner = CliRunner()


def test_mse_worked_example_json():
    r = runner.invoke(app, ["bounds", "mse", "--epsilon", "2", "--range", "0,100", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert round(d["mse_lower_bound_unbiased"]) == 391
    assert d["std_lower_bound_unbiased"] == pytest.approx(19.78, abs=0.01)


def test_mse_table_and_conversions():
    r = runner.invoke(app, ["bounds", "mse", "--epsilon", "2", "--diam", "100", "--kind", "dp", "--gamma", "5"])
    assert r.exit_code == 0 and "biased" in r.stdout and "Membership" in r.stdout
    r = runner.invoke(app, ["bounds", "mse", "--epsilon", "1", "--delta", "1e-5", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["epsilon2"] > 0


@pytest.mark.parametrize("args", [
    ["--epsilon", "-1"], ["--epsilon", "nan"], ["--epsilon", "1", "--diam", "0"], ["--epsilon", "1", "--delta", "1.5"],
    ["--epsilon", "1", "--range", "5,1"], ["--epsilon", "1", "--kind", "zcdp"],
])
def test_mse_bad_input_exit_2(args):
    r = runner.invoke(app, ["bounds", "mse", *args])
    assert r.exit_code == 2
    assert "Traceback" not in r.output


def test_glm_small_run_writes_outputs(tmp_path):
    out = tmp_path / "glm"
    r = runner.invoke(app, ["bounds", "glm", "rotten-tomatoes", "--n-records", "150", "--max-features", "40",
                            "--sigma", "1e-4", "--lam", "0.05", "--trials", "30", "--targets", "10", "--seed", "1",
                            "--output", str(out), "--json", "-q"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["max_reconstruction_error_at_zero_noise"] < 1e-6
    assert 0.0 <= s["share_below_fil_bound"] <= 1.0
    assert (out / "records.csv").exists() and (out / "attack_vs_bound.png").exists()
    assert json.loads((out / "summary.json").read_text())["targets"] == 10
    # existing non-empty output needs --overwrite
    r2 = runner.invoke(app, ["bounds", "glm", "--n-records", "150", "--trials", "0", "--output", str(out)])
    assert r2.exit_code == 2


def test_glm_bad_sigma_lam():
    for extra in (["--sigma", "0"], ["--lam", "-1"]):
        r = runner.invoke(app, ["bounds", "glm", "--n-records", "100", "--max-features", "20", *extra])
        assert r.exit_code == 2, r.output


@pytest.mark.slow
def test_dpsgd_cli_small(tmp_path):
    out = tmp_path / "epochs.csv"
    r = runner.invoke(app, ["bounds", "dpsgd", "--n-records", "200", "--max-features", "50", "--epochs", "1",
                            "--batch-size", "20", "--seed", "0", "--output", str(out), "--json", "-q"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["epochs"][0]["eta_max"] >= d["epochs"][0]["eta_median"] > 0
    assert out.exists()
