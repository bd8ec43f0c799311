"""`textdp sanitize FOLDER|GLOB --engine local` (issue 16): a folder of parts out, the single-file path unchanged.

E2 adds the --engine dask|spark runs on top (tests/engines/test_dask.py, test_spark.py).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.data import io
from textdp.engines.parts import CARD_NAME, SUCCESS, read_parts_output

runner = CliRunner()

TEXTS = ["good film , great movie", "bad movie !\tawful film", None, "a film nobody saw", "great great good",
         "awful awful", "", "movie film good"]


def _run(*args):
    return runner.invoke(app, ["sanitize", *map(str, args)])


def _lake(tmp_path, sizes=(3, 2, 3), fmt="parquet", name="lake"):
    d = tmp_path / name
    d.mkdir()
    df = pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS, "label": list("pnpnpnpn")})
    start = 0
    for i, n in enumerate(sizes):
        io.write_table(df.iloc[start:start + n].reset_index(drop=True), d / f"p{i}.{fmt}")
        start += n
    return d, df


def _error_line(r):
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1, r.output
    return lines[0]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_folder_gives_the_same_texts_as_the_single_file_path(tmp_path, small_glove_file, fmt):
    lake, df = _lake(tmp_path, fmt=fmt)
    whole = tmp_path / f"whole.{fmt}"
    io.write_table(df, whole)
    common = ["-m", "santext", "-e", "2", "--embeddings", small_glove_file, "--seed", 5, "--ledger-dir",
              tmp_path / "led"]
    r1 = _run(whole, "-o", tmp_path / f"single.{fmt}", *common)
    assert r1.exit_code == 0, r1.output
    r2 = _run(lake, "-o", tmp_path / "parts", "--json", *common)
    assert r2.exit_code == 0, r2.output
    summary = json.loads(r2.stdout[r2.stdout.index("{"):])
    assert summary["parts"] == 3 and summary["engine"] == {"engine": "local", "workers": 1}
    assert summary["private"]["documents"] == len(TEXTS)
    single = [t for d, _ in io.iter_table_chunks(tmp_path / f"single.{fmt}", nulls="keep") for t in d["text"]]
    parts = read_parts_output(tmp_path / "parts")
    assert parts["text"].tolist() == single  # byte-identical texts, nulls kept
    assert parts["label"].tolist() == df["label"].tolist()
    assert (tmp_path / "parts" / SUCCESS).is_file()
    card = json.loads((tmp_path / "parts" / CARD_NAME).read_text())
    assert card["output"] == "parts" and "lake" not in json.dumps(card)
    # one ledger per dataset content: the whole file and the 3-part folder are two datasets here
    ledgers = sorted(p.name for p in (tmp_path / "led").glob("*.jsonl"))
    assert len(ledgers) == 2 and any(n.startswith("lake-") for n in ledgers)


def test_glob_input_and_workers_do_not_change_the_bytes(tmp_path, small_glove_file):
    lake, _ = _lake(tmp_path)
    common = ["-m", "santext", "-e", "2", "--embeddings", small_glove_file, "--seed", 5, "--no-ledger", "-q"]
    assert _run(lake, "-o", tmp_path / "a", "--workers", 1, *common).exit_code == 0
    r = _run(str(lake / "*.parquet"), "-o", tmp_path / "b", "--workers", 2, *common)
    assert r.exit_code == 0, r.output
    for i in range(3):
        assert (tmp_path / "a" / f"part-{i:05d}.parquet").read_bytes() == \
            (tmp_path / "b" / f"part-{i:05d}.parquet").read_bytes()
    card = json.loads((tmp_path / "b" / CARD_NAME).read_text())
    assert "not recorded" in card["ledger"]


def test_default_output_is_beside_the_folder(tmp_path, small_glove_file):
    lake, _ = _lake(tmp_path)
    r = _run(lake, "-m", "santext", "-e", "2", "--embeddings", small_glove_file, "--seed", 1, "--no-ledger")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "lake.santext" / SUCCESS).is_file()
    assert "named after the input" in r.output


def test_an_output_named_like_a_file_is_a_folder_with_a_warning(tmp_path, small_glove_file):
    lake, _ = _lake(tmp_path)
    common = ["-m", "santext", "-e", "2", "--embeddings", small_glove_file, "--seed", 1, "--no-ledger"]
    r = _run(lake, "-o", tmp_path / "rt.csv", *common)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "rt.csv" / SUCCESS).is_file()
    assert "rt.csv is a folder of parts" in " ".join(r.output.split())
    r = _run(lake, "-o", tmp_path / "plain", *common)
    assert r.exit_code == 0 and "folder of parts (a release" not in " ".join(r.output.split())


def test_budget_refusal_and_force_on_a_folder(tmp_path, small_glove_file):
    lake, _ = _lake(tmp_path)
    led = tmp_path / "led"
    r = runner.invoke(app, ["budget", "set", str(lake), "--epsilon", "1", "--ledger-dir", str(led)])
    assert r.exit_code == 0, r.output
    common = ["-m", "santext", "-e", "2", "--embeddings", small_glove_file, "--seed", 1, "--ledger-dir", led]
    r = _run(lake, "-o", tmp_path / "out", *common)
    assert r.exit_code == 2 and "exceeded" in _error_line(r)
    assert not (tmp_path / "out").exists()
    r = _run(lake, "-o", tmp_path / "out", "--force", *common)
    assert r.exit_code == 0, r.output
    card = json.loads((tmp_path / "out" / CARD_NAME).read_text())
    assert card["forced"] is True and "lake" not in card["forced_reason"]
    entries = [json.loads(x) for f in led.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert [e["type"] for e in entries] == ["budget", "reservation", "release"]


@pytest.mark.parametrize("case", ["empty", "mixed", "exists", "inside", "glob-no-output", "scheduler-local",
                                  "limit", "engine", "no-match"])
def test_bad_usage_one_line_exit_2(tmp_path, small_glove_file, case):
    lake, _ = _lake(tmp_path)
    args = [lake, "-o", tmp_path / "out"]
    if case == "empty":
        (tmp_path / "empty").mkdir()
        args = [tmp_path / "empty", "-o", tmp_path / "out"]
        want = "holds no parts"
    elif case == "mixed":
        io.write_table(pd.DataFrame({"text": ["good film"]}), lake / "x.csv")
        want = "mix formats"
    elif case == "exists":
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "f").write_text("x")
        want = "already exists"
    elif case == "inside":
        args = [lake, "-o", lake / "out"]
        want = "inside the input"
    elif case == "glob-no-output":
        args = [str(lake / "*.parquet")]
        want = "give --output"
    elif case == "scheduler-local":
        args += ["--scheduler", "tcp://127.0.0.1:8786"]
        want = "--scheduler applies"
    elif case == "limit":
        args += ["--limit", "2"]
        want = "--limit applies"
    elif case == "engine":
        args += ["--engine", "ray"]
        want = "--engine must be"
    else:
        args = [str(tmp_path / "nothing" / "*.parquet"), "-o", tmp_path / "out"]
        want = "no file matches"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = _run(*args, "-m", "santext", "-e", "2", "--embeddings", small_glove_file, "--ledger-dir", tmp_path / "led")
    assert r.exit_code == 2, r.output
    assert want in _error_line(r)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, no ledger, input untouched
