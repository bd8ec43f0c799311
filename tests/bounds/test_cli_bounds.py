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
    # the Gaussian path, now named: the same numbers as before issue 12
    r = runner.invoke(app, ["bounds", "mse", "--epsilon", "1", "--delta", "1e-5", "--mechanism", "gaussian", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["epsilon2"] == pytest.approx(0.07185140465483661, rel=1e-9)
    assert d["mse_lower_bound_unbiased"] == pytest.approx(3.3558998741525907, rel=1e-9)
    assert d["mechanism"]["mechanism"] == "gaussian"


def test_bare_approx_dp_is_refused_in_one_line():
    r = runner.invoke(app, ["bounds", "mse", "--epsilon", "1", "--delta", "1e-5"])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    assert "implies no MSE lower bound" in lines[0] and "--mechanism" in lines[0] and "Traceback" not in r.output


def test_randomized_response_gives_the_rr_exact_bound():
    import math

    k, eps = 3, math.log(2)  # P = (1/2, 1/4, 1/4), Q = (1/4, 1/2, 1/4): D₂ = log(11/8)
    r = runner.invoke(app, ["bounds", "mse", "--mechanism", "randomized-response", "--epsilon", repr(eps),
                            "--categories", str(k), "--range", "0,10", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["epsilon2"] == pytest.approx(math.log(11 / 8), rel=1e-12)
    assert d["mse_lower_bound_unbiased"] == pytest.approx(25 / (11 / 8 - 1), rel=1e-9)
    # the pure-DP worst case (binary RR) is smaller: the exact curve is the tighter (larger) bound
    r2 = runner.invoke(app, ["bounds", "mse", "--epsilon", repr(eps), "--kind", "dp", "--range", "0,10", "--json"])
    assert json.loads(r2.stdout)["mse_lower_bound_unbiased"] < d["mse_lower_bound_unbiased"]


def test_card_of_a_topic_model(tmp_path):
    from textdp.bounds import discrete_laplace_rdp
    from textdp.topics import HDPLDA

    h = HDPLDA(n_topics=5, epsilon=10.0, delta=1e-6, iterations=20, max_doc_length=50)
    acc = h.accounting()
    card = {"format": "textdp-card/1", "mechanism": "topics.hdp-lda", "parameters": h.params(),
            "guarantee": h.guarantee.to_dict(), "statistics": acc}
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.card.json").write_text(json.dumps(card), encoding="utf-8")
    r = runner.invoke(app, ["bounds", "mse", "--card", str(model), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["epsilon2"] == pytest.approx(discrete_laplace_rdp(2.0, acc["scale"], 100, 20), rel=1e-12)
    assert d["mechanism"]["mechanism"] == "discrete-laplace" and d["mechanism"]["unit"] == "document"
    r = runner.invoke(app, ["bounds", "mse", "--card", str(model), "--epsilon", "1"])
    assert r.exit_code == 2 and "leave out --epsilon" in r.output
    r = runner.invoke(app, ["bounds", "mse", "--card", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no privacy card" in r.output


@pytest.mark.parametrize("args", [
    ["--epsilon", "-1"], ["--epsilon", "nan"], ["--epsilon", "1", "--diam", "0"], ["--epsilon", "1", "--delta", "1.5"],
    ["--epsilon", "1", "--range", "5,1"], ["--epsilon", "1", "--kind", "zcdp"],
    ["--epsilon", "1", "--scale", "2"], ["--mechanism", "staircase", "--epsilon", "1"],
    ["--mechanism", "randomized-response"], ["--mechanism", "gaussian", "--epsilon", "1", "--kind", "dp"],
    ["--mechanism", "randomized-response", "--epsilon", "1", "--categories", "1"],
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


def test_dpsgd_cli_cuda_without_a_device_is_refused_before_loading(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    import textdp.bounds

    def no_loading(*a, **k):
        raise AssertionError("features were computed before the device was checked")

    monkeypatch.setattr(textdp.bounds, "text_features", no_loading)
    r = runner.invoke(app, ["bounds", "dpsgd", "--device", "cuda"])
    assert r.exit_code == 2, r.output
    assert "no CUDA device" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("cmd,args,needle", [
    ("glm", ["--targets", "0"], "--targets must be at least 1"),
    ("glm", ["--targets", "-3"], "--targets must be at least 1"),           # was a ValueError (exit 1)
    ("glm", ["--targets", "50", "--n-records", "20"], "--targets 50 is more than --n-records 20"),
    ("glm", ["--trials", "-1"], "--trials must be at least 0"),
    ("glm", ["--max-features", "0"], "--max-features must be at least 1"),
    ("glm", ["--n-records", "1"], "--n-records must be 0 (all records) or at least 2"),
    ("glm", ["--features", "bert"], "--features must be 'tfidf' or 'glove'"),
    ("glm", ["--sigma", "0"], "--sigma must be a positive"),
    ("glm", ["--lam", "-1"], "--lam must be a positive"),
    ("dpsgd", ["--epochs", "0"], "--epochs must be at least 1"),
    ("dpsgd", ["--probes", "0"], "--probes must be at least 1"),
    ("dpsgd", ["--batch-size", "0"], "--batch-size must be at least 1"),
    ("dpsgd", ["--clip", "0"], "--clip must be a positive"),
    ("dpsgd", ["--noise-multiplier", "0"], "--noise-multiplier must be a positive"),
    ("dpsgd", ["--lr", "0"], "--lr must be a positive"),
    ("dpsgd", ["--delta", "2"], "--delta must be in (0, 1)"),
    ("dpsgd", ["--subsampling", "x"], "--subsampling must be"),
    ("dpsgd", ["--model", "mlp", "--hidden", "0"], "--hidden must be at least 1"),          # silently ran before
    ("dpsgd", ["--model", "cnn"], "--model must be 'logreg' or 'mlp'"),
    ("dpsgd", ["--device", "tpu"], "--device must be auto, cpu or cuda"),
    ("mse", ["--epsilon", "1", "--order", "1"], "--order must be at least 2"),
])
def test_bad_options_are_named_and_refused_before_loading(monkeypatch, tmp_path, cmd, args, needle):
    import textdp.bounds

    def no_loading(*a, **k):
        raise AssertionError("features were computed before the options were checked")

    monkeypatch.setattr(textdp.bounds, "text_features", no_loading)
    out = tmp_path / "out"
    extra = ["-o", str(out)] if cmd != "mse" else []
    r = runner.invoke(app, ["bounds", cmd, *args, *extra])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output and "unexpected" not in r.output
    assert not out.exists()
