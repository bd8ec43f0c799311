"""Output folders are never deleted unless textdp wrote them (data-loss regressions)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.data.io import OUTPUT_MARKER, atomic_output_dir, check_output_dir, is_textdp_output
from textdp.errors import OutputError

WORDS = "apple banana cherry grape lemon mango olive peach pear plum".split()


def _victim(tmp_path):
    v = tmp_path / "victim"
    v.mkdir()
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(12)) for i in range(40)]
    (v / "r.csv").write_text("text\n" + "\n".join(lines) + "\n", "utf-8")
    (v / "thesis.tex").write_text("precious", "utf-8")
    return v


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _train(*args):
    return CliRunner().invoke(app, ["topics", "train", *map(str, args), "--k", "2", "--iterations", "2",
                                    "--min-count", "1", "--no-ledger", "-q"])


def test_topics_cli_refuses_folder_holding_its_input(tmp_path):
    v = _victim(tmp_path)
    before = _snapshot(v)
    r = _train(v / "r.csv", "-o", v, "--overwrite")
    assert r.exit_code == 2, r.output
    assert "inside the output folder" in r.output
    assert _snapshot(v) == before


def test_topics_cli_refuses_unmarked_folder_even_with_overwrite(tmp_path):
    v = _victim(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me", "utf-8")
    r = _train(v / "r.csv", "-o", other, "--overwrite")
    assert r.exit_code == 2, r.output
    assert "not written by textdp" in r.output
    assert _snapshot(other) == {"notes.txt": b"keep me"}


def test_topics_cli_replaces_its_own_model_and_uses_empty_folder(tmp_path):
    v = _victim(tmp_path)
    out = tmp_path / "model"
    out.mkdir()  # an existing empty folder may be used
    r = _train(v / "r.csv", "-o", out)
    assert r.exit_code == 0, r.output
    assert (out / "model.npz").exists() and json.loads((out / OUTPUT_MARKER).read_text())["kind"] == "topic-model"
    (out / "model.json").touch()
    r = _train(v / "r.csv", "-o", out, "--overwrite")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "model.json").read_text())["format"].startswith("textdp")
    assert _snapshot(v)["thesis.tex"] == b"precious"


def test_helper_replaces_marked_folder(tmp_path):
    out = tmp_path / "o"
    with atomic_output_dir(out, kind="test") as d:
        (d / "a.txt").write_text("1")
    assert is_textdp_output(out)
    with pytest.raises(OutputError, match="already exists"):
        with atomic_output_dir(out, kind="test"):
            pass
    with atomic_output_dir(out, overwrite=True, kind="other-kind") as d:
        (d / "b.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == sorted([OUTPUT_MARKER, "b.txt"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_helper_refuses_unmarked_nonempty_folder(tmp_path):
    out = tmp_path / "v3"
    out.mkdir()
    (out / "mine.txt").write_text("x")
    with pytest.raises(OutputError, match="not written by textdp"):
        with atomic_output_dir(out, overwrite=True) as d:
            (d / "z").write_text("z")
    assert _snapshot(out) == {"mine.txt": b"x"}
    assert [p.name for p in tmp_path.iterdir()] == ["v3"]


def test_helper_refuses_folder_containing_input(tmp_path):
    out = tmp_path / "v"
    (out / "sub").mkdir(parents=True)
    (out / OUTPUT_MARKER).write_text("{}")  # even a textdp folder
    with pytest.raises(OutputError, match="inside the output folder"):
        check_output_dir(out, overwrite=True, inputs=[out / "sub" / "in.csv"])
    with pytest.raises(OutputError, match="inside the output folder"):
        check_output_dir(out, overwrite=True, inputs=[out])
    assert (out / "sub").is_dir()


def test_helper_failure_leaves_target_untouched(tmp_path):
    out = tmp_path / "o"
    with atomic_output_dir(out) as d:
        (d / "a").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output_dir(out, overwrite=True) as d:
            (d / "a").write_text("new")
            raise RuntimeError("boom")
    assert (out / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_helper_permissions_follow_umask(tmp_path):
    old = os.umask(0o027)
    try:
        with atomic_output_dir(tmp_path / "p"):
            pass
    finally:
        os.umask(old)
    assert (tmp_path / "p").stat().st_mode & 0o777 == 0o750


def test_attack_atomic_dir_refuses_unmarked_report_folder(tmp_path):
    from textdp.attacks.inversion.pipeline import _atomic_dir

    v3 = tmp_path / "v3"
    v3.mkdir()
    (v3 / "paper.pdf").write_text("x")
    with pytest.raises(OutputError, match="not written by textdp"):
        _atomic_dir(v3, lambda d: (d / "report.json").write_text("{}"), overwrite=True, kind="attack-invert-report")
    assert _snapshot(v3) == {"paper.pdf": b"x"}
    out = tmp_path / "rep"
    _atomic_dir(out, lambda d: (d / "report.json").write_text("1"), overwrite=False, kind="attack-invert-report")
    _atomic_dir(out, lambda d: (d / "report.json").write_text("2"), overwrite=True, kind="attack-invert-report")
    assert (out / "report.json").read_text() == "2" and is_textdp_output(out)


def test_mlm_save_refuses_unmarked_folder(tmp_path):
    pytest.importorskip("torch")
    from textdp.models.mlm import MaskedLM

    v = tmp_path / "cache"
    v.mkdir()
    (v / "data.bin").write_text("x")
    m = MaskedLM.__new__(MaskedLM)  # save() refuses before touching the model
    with pytest.raises(OutputError, match="not written by textdp"):
        m.save(v)
    assert _snapshot(v) == {"data.bin": b"x"}
