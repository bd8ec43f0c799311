"""Sweeps, utility, attacks on real sanitizers, the report and the CLI (textdp.evaluate)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from textdp.errors import InputError, OutputError, ParameterError
from textdp.evaluate import SweepConfig, channel_for, evaluate_utility, load_task, make_model, run_sweep

EPS = (0.001, 4.0, 16.0)
DOCS = 1000  # per split


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "report"
    cfg = SweepConfig("rotten-tomatoes", ["santext"], EPS, max_docs=DOCS, attacks=["bayes"], seed=0,
                      max_attack_tokens=3000, deniability_words=20)
    return run_sweep(cfg, out), out, cfg


def _row(df, eps):
    return df[(df.mechanism == "santext") & np.isclose(df.epsilon.fillna(-1), eps)].iloc[0]


def test_clean_accuracy_well_above_chance(sweep):
    res, _, _ = sweep
    clean = res.rows[res.rows.mechanism == "none"].iloc[0]
    _, test = load_task(SweepConfig(max_docs=DOCS))
    majority = test["label"].value_counts(normalize=True).max()
    assert clean.utility_clean > majority + 0.06  # binary task: chance 0.5, majority about 0.57


def test_utility_and_bayes_success_grow_with_epsilon(sweep):
    df = sweep[0].rows
    u = [_row(df, e).utility_sanitized for e in EPS]
    b = [_row(df, e).bayes_top1 for e in EPS]
    tol = 0.03  # about 1.4 standard errors of a difference of two accuracies on 1000 test texts
    assert all(y >= x - tol for x, y in zip(u, u[1:])) and u[-1] > u[0] + 0.05, u
    assert all(y >= x - 0.01 for x, y in zip(b, b[1:])) and b[-1] > 0.8 > 0.1 > b[0], b


def test_default_informed_attack_reaches_the_exact_optimum(sweep):
    res, out, cfg = sweep
    assert cfg.prior == "informed"
    for eps in EPS:
        r = _row(res.rows, eps)
        assert r.bayes_prior == "informed"
        opt, n = r.bayes_optimum_top1, r.bayes_tokens
        # measured on a sample of the sanitized tokens: within a 99.9 % binomial interval of its expectation
        assert abs(r.bayes_top1 - opt) <= 3.29 * np.sqrt(opt * (1 - opt) / n) + 1e-9, (eps, r.bayes_top1, opt)
        assert r.bayes_optimum_top5 >= opt
    html = (out / "report.html").read_text("utf-8")
    assert "bayes_optimum_top1" in html and "informed" in html
    data = json.loads((out / "results.json").read_text())
    assert all("bayes_optimum_top1" in x for x in data["results"])


def test_bayes_at_tiny_epsilon_is_no_better_than_the_prior(sweep):
    r = _row(sweep[0].rows, 0.001)
    # the attack reduces to guessing the prior's mode: identical on the same tokens
    assert r.bayes_top1 <= r.bayes_prior_top1 + 1e-9
    assert r.share_changed > 0.99


def test_report_has_plots_table_and_cards(sweep):
    res, out, _ = sweep
    html = (out / "report.html").read_text("utf-8")
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) >= 3
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]{200,}"', html)) == len(pngs)
    assert "<table>" in html and html.count("<tr>") == len(res.rows) + 1
    assert "metric LDP per token" in html  # the privacy card of a SanText cell
    assert "http" not in html.split("<body>")[1].split("<h2>Settings")[0]  # self-contained
    data = json.loads((out / "results.json").read_text())
    assert len(data["results"]) == len(res.rows) == 1 + len(EPS)
    csv = pd.read_csv(out / "results.csv")
    assert list(csv["mechanism"]) == list(res.rows["mechanism"])


def test_interrupted_sweep_resumes_and_finished_report_needs_overwrite(sweep):
    res, out, cfg = sweep
    with pytest.raises(OutputError):
        run_sweep(cfg, out)
    again = run_sweep(cfg, out, overwrite=True)
    assert again.resumed_cells == len(res.rows)
    pd.testing.assert_frame_equal(again.rows, res.rows)
    # a setting that changes results uses a separate cache
    assert replace(cfg, max_docs=DOCS - 100).cell_hash() != cfg.cell_hash()


def test_channel_matches_mechanism_probabilities():
    from textdp.sanitize import make_mechanism

    texts = ["a good film , a great movie", "the bad , awful plot of the film", "good acting and a bad script"]
    for name, kw in (("santext", {}), ("santext+", {"w": 0.5, "p": 0.3})):
        mech = make_mechanism(name, "glove-6b-50d", 2.0, rng=0, output_vocabulary="corpus", **kw).fit(texts)
        ch = channel_for(mech)
        words = mech.output_words
        P = mech.probabilities(words)
        Q = ch.prob_matrix()
        np.testing.assert_allclose(Q, P, rtol=1e-6, atol=1e-12)
        # inputs outside the output vocabulary (as with a public vocabulary): still the mechanism's law
        out = [w for w in words if w not in ("awful", "script")] + ["movies", "cinema"]
        mech = make_mechanism(name, "glove-6b-50d", 2.0, rng=0, output_vocabulary=out, **kw).fit(texts)
        inputs = ["awful", "script", "good", "the", "film"]
        ch = channel_for(mech, inputs=inputs)
        assert ch.outputs == mech.output_words and ch.inputs == inputs
        np.testing.assert_allclose(ch.prob_matrix(), mech.probabilities(inputs), rtol=1e-6, atol=1e-12)


def test_fbdd_calibrated_channel_beats_uncalibrated_on_heavy_noise():
    from textdp.attacks.bayes import BayesInversion
    from textdp.evaluate.privacy import AlignedTokens, bayes_attack
    from textdp.sanitize import make_mechanism

    train, test = load_task(SweepConfig(max_docs=300))
    texts = train["text"].tolist()
    mech = make_mechanism("fbdd", "glove-6b-50d", 2.0, rng=1).fit(texts)
    san = mech.sanitize(texts[:150])
    from textdp.evaluate import aligned_tokens

    al = aligned_tokens(mech, texts[:150], san)
    res = bayes_attack(mech, al, rng=np.random.default_rng(0))
    assert res["bayes_exact_channel"] is False
    # near-random output at this ε: the calibrated attack must not fall below the prior guess by much
    assert res["bayes_top1"] >= res["bayes_prior_top1"] - 0.01


def test_bad_input():
    with pytest.raises(InputError):
        load_task(SweepConfig("no-such-dataset"))
    with pytest.raises(ParameterError):
        SweepConfig(mechanisms=["rot13"]).validate()
    with pytest.raises(ParameterError):
        SweepConfig(epsilons=[0]).validate()
    with pytest.raises(ParameterError):
        SweepConfig(epsilons=["abc"]).validate()
    with pytest.raises(InputError):
        make_model("./no/such/model/folder")
    with pytest.raises(InputError):  # empty sanitized split
        evaluate_utility(make_model("tfidf"), ["", " "], ["a", "b"], ["x"], ["x"], ["a"])
    with pytest.raises(InputError):  # texts without labels
        evaluate_utility(make_model("tfidf"), ["good", "bad"], ["a", None], ["x"], ["x"], ["a"])


def test_unlabelled_files_and_offline_model(tmp_path):
    tr, te = tmp_path / "train.csv", tmp_path / "test.csv"
    pd.DataFrame({"text": ["good film", "bad film"]}).to_csv(tr, index=False)
    pd.DataFrame({"text": ["great"]}).to_csv(te, index=False)
    with pytest.raises(InputError, match="label"):
        load_task(SweepConfig(f"{tr},{te}"))
    m = make_model("no-such-org/no-such-model-xyz")
    with pytest.raises(InputError, match="local model folder"):
        m.fit(["good", "bad"], ["a", "b"])


def test_cli_end_to_end_with_mask_attack(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from textdp.cli.main import app
    from textdp.models.mlm import PRESETS, MaskedLM, tokenize_words
    from textdp.data.datasets import load_dataset

    bbc = load_dataset("bbc-news").train["text"].tolist()[:60]
    mlm = MaskedLM.train_new(tokenize_words(bbc), replace(PRESETS["tiny"], steps=20, vocab_size=800), seed=0)
    mlm_dir = mlm.save(tmp_path / "mlm")
    out = tmp_path / "rep"
    r = CliRunner().invoke(app, ["evaluate", "--mechanisms", "santext,fbdd", "--epsilons", "3", "--max-docs", "80",
                                 "--mlm", str(mlm_dir), "--max-mask-positions", "300", "-o", str(out), "--seed",
                                 "0", "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    rows = {x["mechanism"]: x for x in data["results"]}
    assert set(rows) == {"none", "santext", "fbdd"}
    assert 0 <= rows["santext"]["mask_success"] <= 1
    assert rows["santext"]["mask_defence"] == pytest.approx(1 - rows["santext"]["mask_success"])
    assert (out / "report.html").exists()
    again = CliRunner().invoke(app, ["evaluate", "--mechanisms", "santext,fbdd", "--epsilons", "3", "--max-docs",
                                     "80", "--mlm", str(mlm_dir), "--max-mask-positions", "300", "-o", str(out),
                                     "--seed", "0", "--quiet", "--overwrite"], env={"COLUMNS": "80"})
    assert again.exit_code == 0, again.output  # the terminal table: readable at 80 columns, nothing cut
    assert "…" not in again.stdout and "santext" in again.stdout and "fbdd" in again.stdout
    assert "opt" in again.stdout  # the exact optimum next to the attack
    assert rows["santext"]["bayes_optimum_top1"] is not None and rows["fbdd"]["bayes_optimum_top1"] is None
    # every number of every shown column is printed whole, however wide the table (it used to drop the last
    # columns at 80 terminal columns without a mark once the mask attack added its column)
    for col in ("utility_sanitized", "bayes_top1", "mask_success", "N_w_median", "S_w_mean"):
        v = rows["santext"].get(col)
        if isinstance(v, float) and v == v:
            assert f"{v:.3f}" in again.stdout, col
    bad = CliRunner().invoke(app, ["evaluate", "--mechanisms", "rot13", "-o", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "unknown mechanism" in bad.output
    bad = CliRunner().invoke(app, ["evaluate", "--dataset", "nope", "-o", str(tmp_path / "y")])
    assert bad.exit_code == 2 and "unknown dataset" in bad.output


def test_results_say_the_evaluation_is_not_a_release(sweep):
    _, out, _ = sweep
    data = json.loads((out / "results.json").read_text())
    assert data["dp_release"] is False and "is a DP release" in data["note"] and "neither" in data["note"]
    assert "Not a release" in (out / "report.html").read_text("utf-8")


def _file_pair(tmp_path, text_col="text", label_col="label"):
    """A small labelled TRAIN,TEST pair of CSV files; returns (train path, test path)."""
    texts = ["a good film", "a bad film", "great acting", "dull plot", "fine story", "awful script"] * 5
    labels = ["pos", "neg"] * 15
    tr, te = tmp_path / "tr.csv", tmp_path / "te.csv"
    pd.DataFrame({text_col: texts, label_col: labels}).to_csv(tr, index=False)
    pd.DataFrame({text_col: texts[:10], label_col: labels[:10]}).to_csv(te, index=False)
    return tr, te


def test_cli_files_with_other_column_names(tmp_path):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    tr, te = _file_pair(tmp_path, "body", "sentiment")
    ds = f"{tr},{te}"
    base = ["evaluate", "-d", ds, "-m", "santext", "-e", "3", "--attacks", "none", "--seed", "0", "-q"]
    r = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "r0")])
    assert r.exit_code == 2 and "--text-column" in r.output, r.output
    r = CliRunner().invoke(app, [*base, "--text-column", "body", "-o", str(tmp_path / "r1")])
    assert r.exit_code == 2 and "--label-column" in r.output and "sentiment" not in r.output.split("column")[0], r.output
    r = CliRunner().invoke(app, [*base, "--text-column", "body", "--label-column", "sentiment", "-o",
                                 str(tmp_path / "r2"), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["results"]
    assert [x["mechanism"] for x in rows] == ["none", "santext"]
    r = CliRunner().invoke(app, [*base, "--text-column", " ", "-o", str(tmp_path / "r3")])
    assert r.exit_code == 2 and "--text-column" in r.output


def test_cli_pretraining_writes_its_result_and_names_what_it_ignores(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import textdp.evaluate.pretrain as pre
    from textdp.cli.main import app

    calls = []

    def fake(dataset, mechanism, epsilon, **kw):
        calls.append((mechanism, epsilon))
        assert (kw["text_column"], kw["label_column"]) == ("text", "label")
        return {"encoder": "word-mlm", "preset": "tiny", "plain": 0.6, "control": 0.61, "sanitization_aware": 0.62,
                "gain": 0.02}

    monkeypatch.setattr(pre, "compare_pretraining", fake)
    out = tmp_path / "pre"
    r = CliRunner().invoke(app, ["evaluate", "--pretraining", "tiny", "-m", "santext,fbdd", "-e", "3,5",
                                 "--max-docs", "50", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert calls == [("santext", 3.0)]
    assert "compares one cell" in r.output and "--max-docs" in r.output
    assert "--model" not in r.output and "--workers" not in r.output  # only options the user typed
    saved = json.loads((out / "pretraining.json").read_text())
    assert saved["gain"] == 0.02 and saved["dp_release"] is False \
        and "neither this report nor the sanitized text kept in cache/ is a DP release" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["evaluate", "--pretraining", "tiny", "-m", "santext", "-e", "3", "-o", str(out)])
    assert r.exit_code == 2 and "--overwrite" in r.output


def test_an_output_under_a_file_is_refused_with_the_users_path(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    with pytest.raises(OutputError, match="notes.txt' is a file"):
        run_sweep(SweepConfig("rotten-tomatoes", ["santext"], [3.0], max_docs=20, attacks=[]), f / "ev")
    assert f.read_text() == "x"


def test_cli_interrupt_says_the_finished_cells_are_kept(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import textdp.evaluate as ev
    from textdp.cli.main import app

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(ev, "run_sweep", interrupted)
    r = CliRunner().invoke(app, ["evaluate", "-m", "santext", "-e", "3", "--max-docs", "20", "-o", str(tmp_path / "x")])
    assert r.exit_code == 130
    assert "finished cells are kept in" in r.output and "no output was written" not in r.output, r.output


def test_cache_is_keyed_by_file_content_not_names(tmp_path):
    """An edited TRAIN/TEST file is never answered from cells computed on its old content."""
    tr, te = _file_pair(tmp_path)
    cfg = SweepConfig(f"{tr},{te}", ["santext"], [3.0], attacks=[], seed=1)
    h1 = cfg.cell_hash()
    first = run_sweep(cfg, tmp_path / "out")
    assert h1 == cfg.cell_hash()  # stable while the files are unchanged
    pd.read_csv(te).assign(label="pos").to_csv(te, index=False)  # same name, new content
    assert cfg.cell_hash() != h1
    again = run_sweep(cfg, tmp_path / "out", overwrite=True)
    assert again.resumed_cells == 0 and first.resumed_cells == 0


def test_dataset_file_pair_errors_name_the_missing_file_and_misused_columns(tmp_path):
    tr = tmp_path / "tr.csv"
    pd.DataFrame({"text": ["a", "b"], "label": ["x", "y"]}).to_csv(tr, index=False)
    with pytest.raises(InputError, match="missing.csv' of --dataset TRAIN,TEST does not exist"):
        load_task(SweepConfig(f"{tr},{tmp_path / 'missing.csv'}"))
    with pytest.raises(ParameterError, match="apply only to TRAIN,TEST files"):
        load_task(SweepConfig("rotten-tomatoes", text_column="body"))


def test_misleading_file_pairs_are_warned_about(tmp_path):
    from textdp.evaluate.sweep import task_warnings

    texts = ["a good film", "a bad film", "great acting", "dull plot"] * 3
    tr, te, te2 = tmp_path / "tr.csv", tmp_path / "te.csv", tmp_path / "te2.csv"
    pd.DataFrame({"text": texts, "label": ["pos", "neg"] * 6}).to_csv(tr, index=False)
    pd.DataFrame({"text": texts[:4], "label": ["1"] * 4}).to_csv(te, index=False)
    pd.DataFrame({"text": texts[:4], "label": ["pos", "neg"] * 2}).to_csv(te2, index=False)
    for ds, needle in ((f"{tr},{te}", "never seen in training"), (f"{tr},{tr}", "same texts")):
        cfg = SweepConfig(ds)
        w = task_warnings(cfg, *load_task(cfg))
        assert len(w) == 1 and needle in w[0], w
    cfg = SweepConfig(f"{tr},{te2}")
    assert task_warnings(cfg, *load_task(cfg)) == []
    stages = []
    run_sweep(SweepConfig(f"{tr},{te}", ["santext"], [3.0], attacks=[], seed=0), tmp_path / "o", stage=stages.append)
    assert any(s.startswith("warning: 100% of the test texts") for s in stages)
