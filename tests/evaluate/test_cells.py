"""Sweep cells are keyed by their exact ε (issue 13, item 2: two ε equal to 6 significant digits gave
two identical rows), duplicate ε are refused, and evaluate's progress has a line per cell with
"writing the report" for that step only (issue 13, item 9)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.errors import ParameterError
from textdp.evaluate import SweepConfig, run_sweep

CLOSE = (1000000.0, 1000001.0)  # equal to 6 significant digits: "{:g}" writes both as 1e+06


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def pair(tmp_path):
    texts = ["a good film", "a bad film", "great acting", "dull plot", "fine story", "awful script"] * 5
    labels = ["pos", "neg"] * 15
    tr, te = tmp_path / "tr.csv", tmp_path / "te.csv"
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tr, index=False)
    pd.DataFrame({"text": texts[:10], "label": labels[:10]}).to_csv(te, index=False)
    return f"{tr},{te}"


@pytest.mark.parametrize("values", [CLOSE, (0.1, 0.1 + 1e-12), (1e-4, 2e-4), (3.0, 3.0000001), (1e-300, 2e-300)])
def test_epsilon_texts_are_exact_so_they_never_merge(values):
    from textdp.evaluate.report import epsilon_column
    from textdp.evaluate.sweep import cell_key, epsilon_text

    for text in (epsilon_text, epsilon_column):
        labels = [text(v) for v in values]
        assert len(set(labels)) == len(values), labels
        assert all(float(s) == v for s, v in zip(labels, values))  # each reads back as its own value
    assert len({cell_key("santext", v) for v in values}) == len(values)


def test_short_epsilons_keep_their_short_names():
    from textdp.evaluate.report import epsilon_column
    from textdp.evaluate.sweep import cell_key

    # the names of existing cells (cache files, cards, seeds) and the table's look are unchanged
    assert [cell_key("santext", e) for e in (1.0, 3.0, 0.001, 16.0, 1e6)] == \
        ["santext-eps1", "santext-eps3", "santext-eps0.001", "santext-eps16", "santext-eps1e+06"]
    assert [epsilon_column(e) for e in (1.0, 0.5, 16.0)] == ["1.000", "0.500", "16.000"]
    assert epsilon_column(float("nan")) == "–" and epsilon_column(1000001.0) == "1000001.0"


def test_cells_of_close_epsilons_are_kept_apart(pair, tmp_path):
    cfg = SweepConfig(pair, ["santext"], list(CLOSE), attacks=[], seed=0)
    res = run_sweep(cfg, tmp_path / "out")
    assert res.rows["epsilon"].tolist()[1:] == list(CLOSE)  # two rows, each with its own ε
    assert list(res.cards) == ["clean", "santext-eps1e+06", "santext-eps1000001.0"]
    for key, eps in zip(list(res.cards)[1:], CLOSE):  # each cell sanitized with its own ε
        assert res.cards[key]["parameters"]["epsilon"] == eps
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [r["epsilon"] for r in data["results"]][1:] == list(CLOSE) and len(data["cards"]) == 3
    cached = sorted(p.name for p in (tmp_path / "out" / "cache").glob("*/santext-*.json"))
    assert cached == ["santext-eps1000001.0.json", "santext-eps1e+06.json"]
    html = (tmp_path / "out" / "report.html").read_text("utf-8")
    assert "<td>1e+06</td>" in html and "<td>1000001.0</td>" in html  # the report's table keeps them apart


def test_a_cached_cell_is_used_only_for_its_own_epsilon(pair, tmp_path):
    cfg = SweepConfig(pair, ["santext"], [3.0], attacks=[], seed=0)
    first = run_sweep(cfg, tmp_path / "out")
    (cell,) = (tmp_path / "out" / "cache").glob("*/santext-eps3.json")
    rec = json.loads(cell.read_text())
    rec["row"]["epsilon"] = 3.0000001  # as a cell of another ε would be
    cell.write_text(json.dumps(rec))
    again = run_sweep(cfg, tmp_path / "out", overwrite=True)
    assert again.resumed_cells == 1  # the clean baseline only; the ε = 3 cell is computed again
    assert again.rows["epsilon"].tolist()[1] == 3.0 and first.rows["epsilon"].tolist()[1] == 3.0


@pytest.mark.parametrize("eps, needle", [("2,2", "'2' twice"), ("1,1.0", "'1' and '1.0' are the same ε"),
                                         ("1e6,3,1000000", "'1e6' and '1000000' are the same ε")])
def test_duplicate_epsilons_are_refused(tmp_path, eps, needle):
    r = _run("evaluate", "-e", eps, "-m", "santext", "--attacks", "none", "-o", tmp_path / "o")
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0] and "--epsilons" in lines[0], r.output
    assert not (tmp_path / "o").exists()
    with pytest.raises(ParameterError, match="twice"):
        SweepConfig(epsilons=[float(x) for x in eps.split(",")]).validate()


def test_cli_table_and_progress_name_every_cell(pair, tmp_path):
    """Without a terminal (a log) the progress shows its final state: one line per cell, named by its
    key, and "writing the report" on its own line (it used to be the only line, for the whole run)."""
    r = _run("evaluate", "-d", pair, "-m", "santext", "-e", "1e6,1000001,0.0001,0.0002", "--attacks", "none",
             "--seed", 0, "-o", tmp_path / "o")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    bars = [x for x in lines if "━" in x]
    names = [x.split("━")[0].strip() for x in bars]
    assert names[0].startswith("loading ")
    assert names[1:] == ["clean", "santext-eps0.0001", "santext-eps0.0002", "santext-eps1e+06",
                     "santext-eps1000001.0", "writing the report"], names
    assert all("1/1" in x for x in bars)
    table = [x.split() for x in lines if x.strip().startswith("santext ")]
    assert [row[1] for row in table] == ["0.0001", "0.0002", "1e+06", "1000001.0"], lines
    r = _run("evaluate", "-d", pair, "-m", "santext", "-e", "1e6,1000001,0.0001,0.0002", "--attacks", "none",
             "--seed", 0, "-o", tmp_path / "o", "--overwrite")
    assert r.exit_code == 0, r.output
    names = [x.split("━")[0].strip() for x in r.output.splitlines() if "━" in x]
    assert names[1:] == ["clean (cached)", "santext-eps0.0001 (cached)", "santext-eps0.0002 (cached)",
                         "santext-eps1e+06 (cached)", "santext-eps1000001.0 (cached)", "writing the report"], names


def test_progress_lines_follow_the_cells_of_a_parallel_run(pair, tmp_path):
    stages, done = [], []
    run_sweep(SweepConfig(pair, ["santext"], [1.0, 3.0], attacks=[], seed=0), tmp_path / "o",
              stage=stages.append, progress=lambda k, d, t: done.append((k, d, t)), workers=2)
    assert {k for k, _, _ in done} == {"clean", "santext-eps1", "santext-eps3"}
    assert [d for _, d, _ in done] == [1, 2, 3] and stages[-1] == "writing the report"
    assert stages.count("writing the report") == 1 and not any("cells done" in s for s in stages)
    assert all(t == 3 for _, _, t in done)
