"""Operating-system errors, interrupts and multi-file outputs at the CLI (fresh-user report):

A. permission denied, disk full, a file where a folder should be, a folder where a file should be,
   unreadable inputs: one line naming the path, the OS reason and what to do, exit 2, nothing left;
B. a command's several output files appear all together or not at all (Ctrl-C, errors);
C. no empty line before the error when a progress bar was running;
D. SIGTERM exits 143; `topics tradeoff -o t.txt` fails before any work.

Tests run as root, so permission errors are simulated (monkeypatched) rather than made with chmod.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.data import io
from textdp.errors import InputError, OutputError

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [*map(str, args)])


def _one_error_line(r, code=2):
    lines = r.stderr.splitlines()
    assert r.exit_code == code, (r.exit_code, r.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "unexpected" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.fixture
def corpus(tmp_path, small_glove_file, monkeypatch):
    """A small CSV whose words are all in the tiny GloVe file; cwd = tmp_path."""
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "in.csv"
    pd.DataFrame({"text": ["good film", "bad movie", "great film awful movie"] * 4}).to_csv(src, index=False)
    return src


def _sanitize(src, glove, *args):
    return _run("sanitize", src, "-e", "3", "--embeddings", glove, "--no-ledger", "-q", "--seed", "1", *args)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# A. operating-system errors ----------------------------------------------------------------

def test_describe_os_error_names_the_user_path_reason_and_fix():
    e = PermissionError(errno.EACCES, "Permission denied", "ro/sub/out.txt")
    assert io.describe_os_error(e, action="write") == \
        "cannot write 'ro/sub/out.txt': permission denied; choose a writable folder"
    # a temporary file of atomic_output is named by its target; disk full is a write
    e = OSError(errno.ENOSPC, "No space left on device", "ag/.habernal2022.csv.k2j_x9ab.tmp")
    assert io.describe_os_error(e) == \
        "cannot write 'ag/habernal2022.csv': no space left on the device; free some space or write to another disk"
    assert io.describe_os_error(OSError(errno.EROFS, "Read-only file system", "/x")).startswith(
        "cannot write '/x': read-only file system")
    assert io.is_user_os_error(e) and not io.is_user_os_error(OSError("no errno"))


def test_describe_not_a_directory_names_the_file_in_the_way(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("n")
    e = NotADirectoryError(errno.ENOTDIR, "Not a directory", "notes.txt/ev/cache/x")
    assert io.describe_os_error(e) == \
        "cannot use 'notes.txt/ev/cache/x': 'notes.txt' is a file, not a folder; choose a path made of folders"


def test_write_table_permission_denied_names_the_output_not_the_temp_file(tmp_path, monkeypatch):
    def denied(prefix="", suffix="", dir=None):
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(dir, prefix + "abcdefgh" + suffix))

    monkeypatch.setattr(io.tempfile, "mkstemp", denied)
    out = tmp_path / "ro" / "out.csv"
    with pytest.raises(OutputError) as e:
        io.write_table(pd.DataFrame({"text": ["a"]}), out)
    assert str(e.value) == f"cannot write {str(out)!r}: permission denied; choose a writable folder"


def test_unreadable_input_is_an_input_error(tmp_path, monkeypatch):
    src = tmp_path / "in.csv"
    src.write_text("text\na b\n")
    real_open = open

    def fake_open(file, *a, **k):
        if Path(file) == src:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(io, "open", fake_open, raising=False)
    for read in (lambda: io.read_table(src), lambda: next(io.iter_table_chunks(src))):
        with pytest.raises(InputError, match=r"cannot read '.*in\.csv': permission denied; check its permissions"):
            read()


def test_central_mapping_of_os_errors_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    from textdp.cli._common import handle_errors

    monkeypatch.chdir(tmp_path)
    Path("in.csv").write_text("text\na\n")

    @handle_errors
    def unreadable():
        raise PermissionError(errno.EACCES, "Permission denied", "in.csv")

    with pytest.raises(typer.Exit) as e:
        unreadable()
    assert e.value.exit_code == 2
    assert capsys.readouterr().err.strip() == \
        "error: cannot read 'in.csv': permission denied; check its permissions (ls -l)"

    @handle_errors
    def odd():
        raise OSError("no errno: a bug, not the environment")

    with pytest.raises(typer.Exit) as e:
        odd()
    assert e.value.exit_code == 1 and "unexpected OSError" in capsys.readouterr().err


def test_output_under_a_file_is_refused_before_any_work(corpus, small_glove_file, tmp_path):
    Path("notes.txt").write_text("n")
    before = _files(tmp_path)
    for r in (_sanitize(corpus, small_glove_file, "-o", "notes.txt/out.csv"),
              _run("audit", "-m", "laplace", "-e", "1", "-n", "1", "-N", "100", "-o", "notes.txt/aud", "-q"),
              _run("audit", "--grid", "habernal2022", "-o", "notes.txt/sub/ag", "-q"),
              _run("topics", "tradeoff", "bbc-news", "-o", "notes.txt/t.png", "-q")):
        line = _one_error_line(r)
        assert "'notes.txt' is a file, not a folder" in line
    assert _files(tmp_path) == before


def test_read_only_output_folder_is_refused_before_training(corpus, monkeypatch, tmp_path):
    real_access = os.access
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p).resolve() == ro and mode & os.W_OK else real_access(p, mode))
    r = _run("topics", "train", corpus, "-k", "2", "-i", "1", "--min-count", "1", "-o", "ro/model", "-q", "--no-ledger")
    assert _one_error_line(r) == \
        "error: cannot write 'ro/model': permission denied (folder 'ro'); choose a writable folder"
    r = _run("audit", "-m", "laplace", "-e", "1", "-n", "1", "-N", "100", "-o", "ro/audit", "-q")
    assert "cannot write 'ro/audit/audit.json': permission denied" in _one_error_line(r)
    assert list(ro.iterdir()) == []


def test_sanitize_disk_full_leaves_nothing(corpus, small_glove_file, monkeypatch, tmp_path):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io, "_write_frame", full)
    before = _files(tmp_path)
    r = _sanitize(corpus, small_glove_file, "-o", "new/sub/out.csv")
    assert _one_error_line(r) == ("error: cannot write 'new/sub/out.csv': no space left on the device; "
                                  "free some space or write to another disk")
    assert _files(tmp_path) == before  # no output, no card, no folders made for them


def test_sanitize_card_path_that_is_a_folder(corpus, small_glove_file, tmp_path):
    Path("cc.csv.card.json").mkdir()
    r = _sanitize(corpus, small_glove_file, "-o", "cc.csv", "--overwrite")
    assert "cannot write 'cc.csv.card.json': it is a folder" in _one_error_line(r)
    assert not Path("cc.csv").exists() and not any(Path(".").glob(".*tmp"))


def test_ledger_dir_that_is_a_file(corpus, monkeypatch):
    Path("notes.txt").write_text("n")
    r = _run("budget", "set", corpus, "--epsilon", "1", "--ledger-dir", "notes.txt")
    assert _one_error_line(r) == ("error: cannot write 'notes.txt': a file of that name is in the way, not a "
                                  "folder; remove or rename the file, or choose another name")
    monkeypatch.setenv("TEXTDP_LEDGER_DIR", "notes.txt")
    assert "'notes.txt'" in _one_error_line(_run("budget", "set", corpus, "--epsilon", "1"))


# B. multi-file outputs are all-or-nothing --------------------------------------------------

_FAST_GRID = ("audit", "--grid", "habernal2022", "-m", "laplace", "-e", "1", "-n", "1", "-N", "1000", "--plot", "-q")


@pytest.mark.parametrize("exc, code", [(KeyboardInterrupt, 130),
                                       (OSError(errno.ENOSPC, "No space left on device"), 2)])
def test_audit_grid_outputs_all_or_nothing(tmp_path, monkeypatch, exc, code):
    import textdp.audit.grid as G

    monkeypatch.chdir(tmp_path)

    def plot_fails(result, path):
        Path(path).write_bytes(b"half a png")
        raise exc

    monkeypatch.setattr(G, "plot_grid", plot_fails)
    r = _run(*_FAST_GRID, "-o", "ag/sub")
    line = _one_error_line(r, code)
    if code == 2:
        assert line.startswith("error: cannot write 'ag/sub': no space left on the device")
    assert list(tmp_path.iterdir()) == []  # no csv/json, and the folders made for them are gone
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    r = _run(*_FAST_GRID, "-o", "ag/sub")  # a rerun is not refused with "already exists"
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "ag" / "sub").iterdir()) == \
        ["habernal2022.csv", "habernal2022.json", "habernal2022.png"]


def test_atomic_outputs_failed_commit_restores_replaced_files(tmp_path, monkeypatch):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == b and str(src).endswith(".tmp"):  # the commit, not the restore
            raise OSError(errno.EIO, "Input/output error", str(src), None, str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OutputError, match="cannot write '.*b.txt': input/output error"):
        with io.atomic_outputs([a, b]) as (ta, tb):
            ta.write_text("new a")
            tb.write_text("new b")
    assert a.read_text() == "old a" and b.read_text() == "old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def _fake_tradeoff(monkeypatch, plot_error=None):
    import textdp.topics as T
    import textdp.topics.tradeoff as TT

    calls = []

    def privacy_utility(*a, **k):
        calls.append(1)
        return pd.DataFrame({"method": ["none", "hdp"], "epsilon": [float("inf"), 1.0],
                             "perplexity": [10.0, 20.0], "seconds": [0.1, 0.1]})

    monkeypatch.setattr(T, "privacy_utility", privacy_utility)
    if plot_error is not None:
        def plot(df, path, title="", format=None):
            Path(path).write_bytes(b"half")
            raise plot_error

        monkeypatch.setattr(T, "plot_privacy_utility", plot)
    return calls


def test_tradeoff_interrupted_while_plotting_leaves_no_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _fake_tradeoff(monkeypatch, KeyboardInterrupt())
    r = _run("topics", "tradeoff", "bbc-news", "--limit", "20", "-o", "tt.png", "-q")
    assert "interrupted" in _one_error_line(r, 130)
    assert list(tmp_path.iterdir()) == []


# C. no empty line before the error ---------------------------------------------------------

def test_error_after_progress_bar_has_no_blank_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _run("audit", "-m", "nosuch", "-e", "1")
    assert r.exit_code == 2 and r.stderr.startswith("error: unknown mechanism"), repr(r.stderr)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a b"}\n' * 500 + "nope\n")
    r = _run("sanitize", bad, "-e", "3", "--chunk-size", "50", "--no-ledger", "-o", "o.jsonl")
    assert r.exit_code == 2 and r.stderr.startswith("error: bad.jsonl: line 501"), repr(r.stderr)


# D. SIGTERM exit status, plot suffix checked first -----------------------------------------

def test_tradeoff_unsupported_plot_suffix_fails_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = _fake_tradeoff(monkeypatch)
    for name in ("t.txt", "t"):
        line = _one_error_line(_run("topics", "tradeoff", "bbc-news", "-o", name, "-q"))
        assert f"plot file '{name}' has" in line and "use .png, .pdf or .svg" in line
    assert calls == [] and list(tmp_path.iterdir()) == []
    assert _run("topics", "tradeoff", "bbc-news", "--limit", "20", "-o", "t.svg", "-q").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.svg"]
    assert Path("t.svg").read_text().lstrip().startswith("<?xml")


def test_interrupt_exit_codes(capsys):
    from textdp.cli._common import Terminated, handle_errors

    for exc, code, word in ((KeyboardInterrupt, 130, "interrupted;"), (Terminated, 143, "interrupted (SIGTERM)")):
        @handle_errors
        def cmd():
            raise exc

        with pytest.raises(typer.Exit) as e:
            cmd()
        assert e.value.exit_code == code and word in capsys.readouterr().err


_SLEEPER = textwrap.dedent("""
    import sys, time
    import textdp.cli.main as m
    from textdp.cli._common import handle_errors

    @m.app.command("sleep-a-while")
    @handle_errors
    def sleep_a_while():
        print("ready", flush=True)
        time.sleep(60)

    sys.argv = ["textdp", "sleep-a-while"]
    m.main()
""")


def test_sigterm_exits_143(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", _SLEEPER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert err.strip() == "error: interrupted (SIGTERM); no output was written"
