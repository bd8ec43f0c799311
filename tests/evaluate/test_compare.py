"""`textdp compare` (issue 15, item 3): the ε search, the exact and Monte Carlo privacy metric, the CLI
(bad input: one line, exit 2, nothing created; a run writes its report files). Tiny tables only."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.attacks.bayes import bayes_optimum
from textdp.cli.main import app
from textdp.embeddings import Embeddings
from textdp.errors import ParameterError
from textdp.evaluate.compare import (CompareConfig, find_epsilon, privacy_point, wilson_interval,
                                     word_level_mechanisms)
from textdp.sanitize import make_mechanism

runner = CliRunner()
WORDS = ["film", "movie", "bad", "good", "great", "plot", "actor", "scene", "boring", "fun", "story", "dull",
         "nice", "awful", "the", "a", "is", "was", "and", "it"]
COUNTS = {w: 1 + (i * 7) % 5 for i, w in enumerate(WORDS)}  # the attacked tokens' counts (informed prior)


def _emb(seed=5, scale=0.6):
    g = np.random.Generator(np.random.PCG64(seed))  # test data, not DP noise
    vec = (g.standard_normal((len(WORDS), 4)) * scale).astype(np.float32)
    return Embeddings(list(WORDS), vec, source="test-table", kind="word", lowercase=True)


def _santext(eps, **kw):
    return make_mechanism("santext", _emb(), eps, output_vocabulary="full", **kw)


# ------------------------------------------------------------------------------------- search
def test_bisection_meets_the_target_on_a_tiny_table():
    """On SanText over a 20-word table: the metric grows with ε (checked), and the ε found meets the
    target while the next larger evaluated ε does not, within the stopping rule."""
    grid = [0.25, 0.5, 1, 2, 4, 8, 16]
    vals = [privacy_point(_santext(e), COUNTS).value for e in grid]
    assert all(a <= b + 1e-12 for a, b in zip(vals, vals[1:])), vals  # monotone in ε
    target = 0.5 * (vals[0] + vals[-1])
    calls = []

    def evaluate(e):
        calls.append(e)
        return privacy_point(_santext(e), COUNTS)

    known = {}
    res = find_epsilon(evaluate, target, start=1.0, max_evaluations=12, tolerance=0.005, known=known)
    assert res.status == "found"
    lo, hi = res.bracket
    assert res.epsilon == lo and known[lo].value <= target < known[hi].value
    assert (target - 0.005 <= res.value <= target) or hi / lo <= 1.02
    assert len(calls) == res.evaluations <= 12 and len(set(calls)) == len(calls)  # no point evaluated twice
    # a second target reuses the cache: no repeated evaluation
    res2 = find_epsilon(evaluate, target * 0.9, start=1.0, max_evaluations=12, tolerance=0.005, known=known)
    assert len(set(calls)) == len(calls) and res2.epsilon < res.epsilon


def test_search_reports_targets_out_of_range():
    f = lambda e: 1 - math.exp(-e)  # noqa: E731 - monotone, in (0, 1)
    below = find_epsilon(f, 1e-6, eps_min=1e-2, eps_max=10, max_evaluations=10)
    assert below.status == "below range" and below.epsilon is None
    above = find_epsilon(f, 0.9999999, eps_min=1e-2, eps_max=10, max_evaluations=10)
    assert above.status == "above range" and above.epsilon == 10
    mid = find_epsilon(f, 0.5, max_evaluations=20, tolerance=1e-4)
    assert mid.status == "found" and abs(mid.epsilon - math.log(2)) / math.log(2) < 0.03
    with pytest.raises(ParameterError):
        find_epsilon(f, 0.5, eps_min=0, eps_max=1)


# ------------------------------------------------------------------------------------- metric
@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_exact_path_is_the_bayes_optimum(eps):
    mech = _santext(eps)
    pt = privacy_point(mech, COUNTS)
    assert pt.method == "exact" and pt.ci_low == pt.value == pt.ci_high
    assert pt.value == bayes_optimum(mech, COUNTS, k=5).top1
    # and that is Σ_y max_x π(x) p(y|x) from the mechanism's own probabilities
    P = mech.probabilities(WORDS)
    pi = np.array([COUNTS[w] for w in WORDS], float)
    pi /= pi.sum()
    assert pt.value == pytest.approx((pi[:, None] * P).max(axis=0).sum(), rel=1e-9)


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_monte_carlo_interval_covers_the_exact_value_for_santext(eps):
    """SanText has both: the held-out Monte Carlo estimate's 95 % interval holds the exact optimum
    (fixed seeds; 400 + 400 draws per attacked token), and the estimate is not a constant."""
    mech = _santext(eps)
    exact = privacy_point(mech, COUNTS).value
    mc = privacy_point(mech, COUNTS, force_monte_carlo=True, mc_train=400, mc_test=400, seeds=(11, 12))
    assert mc.method == "monte-carlo" and mc.n == 400 * sum(COUNTS.values())
    assert mc.ci_low <= exact <= mc.ci_high, (mc, exact)
    assert mc.ci_high - mc.ci_low < 0.03  # an informative interval, not [0, 1]


def test_monte_carlo_is_the_default_for_a_continuous_mechanism():
    mech = make_mechanism("fbdd", _emb(), 4.0, output_vocabulary="full")
    pt = privacy_point(mech, COUNTS, mc_train=50, mc_test=50, seeds=(1, 2))
    assert pt.method == "monte-carlo" and 0 <= pt.ci_low <= pt.value <= pt.ci_high <= 1


def test_wilson_interval():
    lo, hi = wilson_interval(50, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4) and hi == pytest.approx(0.5962, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)


def test_default_mechanisms_are_the_word_level_ones():
    word, doc = word_level_mechanisms()
    cfg = CompareConfig(targets=[0.3]).validate()
    assert list(cfg.mechanisms) == word and {"santext", "santext+", "fbdd"} <= set(word)
    assert [n for n, _ in cfg.apart] == doc


# ------------------------------------------------------------------------------------- CLI
def _tiny_task(tmp_path):
    g = np.random.Generator(np.random.PCG64(3))  # test data
    emb = tmp_path / "tiny.glove.txt"
    emb.write_text("".join(w + " " + " ".join(f"{x:.4f}" for x in g.standard_normal(4) * 0.6) + "\n"
                           for w in WORDS), encoding="utf-8")
    pos, neg = ["good", "great", "fun", "nice"], ["bad", "boring", "dull", "awful"]
    rows = []
    for i in range(40):
        lab = i % 2
        words = [g.choice(pos if lab else neg), "film", g.choice(["the", "a", "it"]), "is",
                 g.choice(pos if lab else neg)]
        rows.append({"text": " ".join(words), "label": lab})
    df = pd.DataFrame(rows)
    tr, te = tmp_path / "train.csv", tmp_path / "test.csv"
    df.iloc[:30].to_csv(tr, index=False)
    df.iloc[30:].to_csv(te, index=False)
    return f"{tr},{te}", str(emb)


def test_cli_writes_the_report(tmp_path):
    data, emb = _tiny_task(tmp_path)
    out = tmp_path / "rep"
    r = runner.invoke(app, ["compare", "-d", data, "--embeddings", emb, "--output-vocabulary", "full",
                            "-m", "santext,fbdd", "-t", "0.4", "-e", "2", "--mc-draws", "20,20", "--seed", "0",
                            "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    for f in ("results.csv", "sweep.csv", "evaluations.csv", "frontier.png", "report.html", "results.json"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    def no_nan(c):
        raise AssertionError(f"results.json holds {c}: not standard JSON")

    res = json.loads((out / "results.json").read_text(), parse_constant=no_nan)
    rows = {x["mechanism"]: x for x in res["results"]}
    assert rows["santext"]["privacy_method"] == "exact" and rows["fbdd"]["privacy_method"] == "monte-carlo"
    for x in rows.values():
        assert x["status"] != "found" or x["privacy"] <= 0.4
        assert 0 <= x["utility"] <= 1
    assert {x["mechanism"] for x in res["sweep"]} == {"santext", "fbdd"} and res["dp_release"] is False
    assert "santext" in r.output and "monte-carlo" in r.output
    # the same command again: refused (a finished report), nothing changed
    again = runner.invoke(app, ["compare", "-d", data, "--embeddings", emb, "--output-vocabulary", "full",
                                "-m", "santext", "-t", "0.4", "-o", str(out), "-q"])
    assert again.exit_code == 2 and "--overwrite" in again.output


@pytest.mark.parametrize("extra, needle", [
    (["-t", "1.5"], "--targets"),
    (["-t", "0.2,,0.3"], "empty item"),
    (["-t", "none"], "nothing to do"),
    (["-e", "0"], "--epsilons"),
    (["-m", "santext,zz"], "unknown mechanism"),
    (["--metric", "zz"], "--metric"),
    (["--mc-draws", "10"], "--mc-draws"),
    (["--privacy-docs", "0"], "--privacy-docs"),
    (["--limit", "1"], "--limit"),
    (["--embeddings", "zz"], "--embeddings"),
    (["-d", "no-such-dataset"], "unknown dataset"),
])
def test_cli_bad_input_is_one_line_and_leaves_nothing(tmp_path, extra, needle):
    out = tmp_path / "rep"
    r = runner.invoke(app, ["compare", "--limit", "20", "-o", str(out), *extra])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], r.output
    assert "Traceback" not in r.output
    assert not out.exists()
