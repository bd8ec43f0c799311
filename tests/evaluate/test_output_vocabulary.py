"""`textdp evaluate --output-vocabulary`: the option reaches the mechanisms, keys the cell
cache (cells of different vocabularies never mix) and is recorded in results.json."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.errors import ParameterError
from textdp.evaluate import SweepConfig, run_sweep


def _pair(tmp_path):
    texts = ["a good film", "a bad film", "great acting", "dull plot", "fine story", "awful script"] * 3
    labels = ["pos", "neg"] * 9
    tr, te = tmp_path / "tr.csv", tmp_path / "te.csv"
    pd.DataFrame({"text": texts, "label": labels}).to_csv(tr, index=False)
    pd.DataFrame({"text": texts[:6], "label": labels[:6]}).to_csv(te, index=False)
    return f"{tr},{te}"


def test_cache_key_differs_per_vocabulary_and_word_list_content(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("good\nbad\nfilm\n", encoding="utf-8")
    keys = {v: SweepConfig(output_vocabulary=v).validate().cell_hash() for v in ("public", "corpus", "full", str(words))}
    assert len(set(keys.values())) == 4, keys
    assert SweepConfig().validate().output_vocabulary == "public"  # the default
    assert SweepConfig(output_vocabulary="Corpus").validate().cell_hash() == keys["corpus"]
    assert SweepConfig(frequencies="corpus").validate().cell_hash() != keys["public"]
    words.write_text("good\nbad\nplot\n", encoding="utf-8")  # same name, new list: new cells
    assert SweepConfig(output_vocabulary=str(words)).validate().cell_hash() != keys[str(words)]
    for bad, needle in (("nope", "--output-vocabulary"), (str(tmp_path / "missing.txt"), "--output-vocabulary")):
        with pytest.raises(ParameterError, match=needle):
            SweepConfig(output_vocabulary=bad).validate()
    with pytest.raises(ParameterError, match="--frequencies"):
        SweepConfig(frequencies="zz").validate()


def test_mechanisms_get_the_option_and_cells_never_mix(tmp_path, monkeypatch):
    import textdp.sanitize as sz

    calls = []
    real = sz.make_mechanism

    def spy(name, *a, **kw):
        calls.append((name, kw.get("output_vocabulary"), kw.get("frequencies")))
        return real(name, *a, **kw)

    monkeypatch.setattr(sz, "make_mechanism", spy)
    ds, out = _pair(tmp_path), tmp_path / "out"
    base = dict(mechanisms=["santext", "santext+"], epsilons=[3.0], attacks=[], seed=0, deniability_words=3)
    res = {}
    for vocab, freq in (("public", "public"), ("corpus", "corpus")):
        res[vocab] = run_sweep(SweepConfig(ds, output_vocabulary=vocab, frequencies=freq, **base), out,
                               overwrite=True)
        data = json.loads((out / "results.json").read_text("utf-8"))
        assert data["config"]["output_vocabulary"] == vocab and data["config"]["frequencies"] == freq
        assert {r["output_vocabulary"] for r in data["results"]} == {vocab}
        kinds = {k: c["output_vocabulary"]["kind"] for k, c in data["cards"].items() if k != "clean"}
        assert kinds == {"santext-eps3": vocab, "santext+-eps3": vocab}
    assert calls == [("santext", "public", None), ("santext+", "public", "public"),
                     ("santext", "corpus", None), ("santext+", "corpus", "corpus")]
    assert res["corpus"].resumed_cells == 0  # nothing answered from the public cells
    assert len([p for p in (out / "cache").iterdir() if p.is_dir()]) == 2
    # the corpus vocabulary holds only the pair's words; the public one 30,000 words
    sizes = {v: r.cards["santext-eps3"]["output_vocabulary_size"] for v, r in res.items()}
    assert sizes["corpus"] < 20 < 30000 == sizes["public"], sizes


def test_cli_passes_the_option_and_rejects_a_bad_one(tmp_path, monkeypatch):
    import textdp.evaluate as ev
    from textdp.cli.main import app

    seen = {}

    def fake(cfg, output, **kw):
        seen["cfg"] = cfg
        raise KeyboardInterrupt

    monkeypatch.setattr(ev, "run_sweep", fake)
    r = CliRunner().invoke(app, ["evaluate", "-m", "santext+", "-e", "3", "--max-docs", "20", "--output-vocabulary",
                                 "corpus", "--frequencies", "corpus", "-o", str(tmp_path / "x")])
    assert r.exit_code == 130 and seen["cfg"].output_vocabulary == "corpus" and seen["cfg"].frequencies == "corpus"
    r = CliRunner().invoke(app, ["evaluate", "--max-docs", "20", "--output-vocabulary", "zz", "-o",
                                 str(tmp_path / "y")])
    assert r.exit_code == 2 and "--output-vocabulary" in r.output and not (tmp_path / "y").exists(), r.output
