"""``textdp bounds rero`` (thin layer over textdp.bounds.rero): table, JSON, bad input, the figure."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm
from typer.testing import CliRunner

from textdp.cli.main import app

runner = CliRunner()


def test_gaussian_table_and_json_match_the_closed_form():
    r = runner.invoke(app, ["bounds", "rero", "-m", "gaussian", "--sigma", "1,2", "--kappa", "0.001,0.1", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["kappa"] == [0.001, 0.1] and [b["sigma"] for b in d["bounds"]] == [1.0, 2.0]
    for b in d["bounds"]:
        exact = norm.cdf(norm.ppf(d["kappa"]) + 1 / b["sigma"])
        np.testing.assert_allclose(b["bound"], exact, rtol=1e-6)
    r = runner.invoke(app, ["bounds", "rero", "-m", "gaussian", "--sigma", "1,2", "--kappa", "0.001,0.1"])
    assert r.exit_code == 0, r.output
    assert "σ = 1" in r.stdout and "σ = 2" in r.stdout and "0.0183" in r.stdout  # Φ(Φ⁻¹(0.001) + 1)
    assert "neighbours" in r.stdout and "dp-accounting PLD" in r.stdout


def test_dpsgd_and_randomized_response_and_dp():
    r = runner.invoke(app, ["bounds", "rero", "-m", "dpsgd", "--sigma", "1", "--sampling-rate", "1", "--steps", "4",
                            "--kappa", "0.01", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["bounds"][0]["bound"][0] == pytest.approx(float(norm.cdf(norm.ppf(0.01) + 2.0)), rel=1e-6)  # μ = √T/σ
    assert "add/remove" in d["neighbours"]
    r = runner.invoke(app, ["bounds", "rero", "-m", "randomized-response", "-e", repr(math.log(3)), "--categories",
                            "10", "--kappa", "0.1", "--json"])
    assert json.loads(r.stdout)["bounds"][0]["bound"][0] == pytest.approx(3 / 12 + 0.1 - 1 / 12, rel=2e-4)
    r = runner.invoke(app, ["bounds", "rero", "-m", "dp", "-e", "1", "--delta", "1e-5", "--kappa", "0.1", "--json"])
    assert json.loads(r.stdout)["bounds"][0]["bound"][0] == pytest.approx(math.e * 0.1 + 1e-5, rel=1e-12)


def test_sanitizer_rows_are_the_exact_optimum():
    from textdp.bounds.rero_compare import token_game

    r = runner.invoke(app, ["bounds", "rero", "-m", "santext", "-e", "1,3", "--vocab-size", "40", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["kappa"] == pytest.approx(1 / 40) and [x["epsilon"] for x in d["rows"]] == [1.0, 3.0]
    ref = token_game([1.0, 3.0], 40, rr_epsilons=[])
    for got, want in zip(d["rows"], ref.rows):
        assert got["bayes_top1"] == pytest.approx(want["bayes_top1"], rel=1e-12)
        assert got["bayes_top1"] <= got["bound_reference"] <= got["bound"]
    r = runner.invoke(app, ["bounds", "rero", "-m", "santext", "-e", "1", "--vocab-size", "40"])
    assert r.exit_code == 0 and "κ = 0.025" in r.stdout and "success (exact)" in r.stdout
    r = runner.invoke(app, ["bounds", "rero", "-m", "dp", "-e", "1", "-q"])  # --quiet: no summary on stdout
    assert r.exit_code == 0 and r.stdout == ""


@pytest.mark.parametrize("args,needle", [
    (["-m", "gaussian", "--sigma", "0"], "--sigma must be a positive finite number, got 0"),
    (["-m", "gaussian", "--sigma", "1", "--kappa", "0,0.5"], "must be in (0, 1), got 0"),
    (["-m", "gaussian", "--sigma", "1", "--kappa", "1"], "must be in (0, 1), got 1"),
    (["-m", "dpsgd", "--sigma", "1", "--sampling-rate", "1.5", "--steps", "3"], "--sampling-rate must be in (0, 1]"),
    (["-m", "dpsgd", "--sigma", "1", "--sampling-rate", "0", "--steps", "3"], "--sampling-rate must be in (0, 1]"),
    (["-m", "dpsgd", "--sigma", "1", "--sampling-rate", "0.1", "--steps", "0"], "--steps must be at least 1"),
    (["-m", "dpsgd", "--sigma", "1", "--steps", "3"], "--mechanism dpsgd needs --sampling-rate"),
    (["-m", "dpsgd", "--sigma", "1"], "--mechanism dpsgd needs --sampling-rate and --steps"),
    (["-m", "gaussian"], "--mechanism gaussian needs --sigma"),
    (["-m", "laplace", "--sigma", "1"], "--sigma does not apply to --mechanism laplace"),
    (["-m", "fbdd", "-e", "1"], "fbdd has no closed-form output law"),
    (["-m", "nope", "-e", "1"], "--mechanism must be one of"),
    (["-m", "santext", "-e", "1", "--kappa", "0.1"], "--kappa is fixed by the prior"),
    (["-m", "santext", "-e", "1", "--vocab-size", "1"], "--vocab-size must be at least 2"),
    (["-m", "gaussian", "--sigma", "1", "--seed", "1"], "--seed seeds the simulated releases of --plot"),
    (["-m", "gaussian", "--sigma", "1", "--plot", "x.txt"], "--plot must end in .png, .pdf or .svg"),
])
def test_bad_input_is_one_line_with_exit_2(args, needle):
    r = runner.invoke(app, ["bounds", "rero", *args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.output, r.output


def test_plot_is_written_and_not_overwritten(tmp_path, monkeypatch, synthetic_features):
    """The figure's wiring, with the feature game on small synthetic features (the real one reads Rotten
    Tomatoes: see docs/bounds.md for its output and timing)."""
    import textdp.bounds.rero_compare as rc

    real = rc.glm_candidate_game
    monkeypatch.setattr(rc, "glm_candidate_game", lambda rng=None: real(synthetic_features(60, 6, 3), n=40, m=5,
                                                                      lam=0.05, trials=20, rng=rng))
    monkeypatch.setattr(rc, "token_game", lambda *a, **k: rc.TokenGame("santext", 10, 0.1, "glove-6b-50d", [], [],
                                                                       np.array([1.0]), np.array([0.25])))
    out = tmp_path / "rero.png"
    args = ["bounds", "rero", "-m", "dp", "-e", "1", "--kappa", "0.1", "--plot", str(out), "--seed", "0"]
    r = runner.invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    d = json.loads(r.stdout)
    assert d["plot"]["path"] == str(out) and d["plot"]["seed"] == "seeded: not for release"
    assert d["plot"]["features"]["m"] == 5
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "--overwrite" in r.output
    r = runner.invoke(app, args + ["--overwrite"])
    assert r.exit_code == 0, r.output
    assert "non-cryptographic generator" in r.output
