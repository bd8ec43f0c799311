"""Regression tests for CLI robustness bugs found by a hostile tester: rich markup injection,
SIGTERM cleanup, out-of-range audit sizes, sys.exit in user mechanisms, card name collisions,
output permissions, and messages that advise options that do not exist."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.accounting.card import card_path
from textdp.cli._common import fail
from textdp.cli.main import app
from textdp.data import io
from textdp.errors import InputError

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def _run(*args):
    return runner.invoke(app, [*map(str, args)])


# 1. rich markup injection -------------------------------------------------------------------

def test_fail_prints_markup_literally(capsys):
    import typer

    with pytest.raises(typer.Exit) as e:
        fail("bad [/red]x.csv and [bold]secret[/bold] [nan]")
    assert e.value.exit_code == 2
    err = capsys.readouterr().err
    assert "bad [/red]x.csv and [bold]secret[/bold] [nan]" in err


def test_missing_input_with_markup_name_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _run("sanitize", "[/red]x.csv", "-e", "1")
    assert r.exit_code == 2, r.output
    assert "[/red]x.csv" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("col", ["[/bold]", "[bold]secret"])
def test_text_column_markup_is_kept(tmp_path, col):
    src = tmp_path / "in.csv"
    io.write_table(pd.DataFrame({"text": ["a b", "c d"]}), src)
    r = _run("sanitize", src, "-e", "1", "--text-column", col, "-o", tmp_path / "o.csv")
    assert r.exit_code == 2, r.output
    assert col in r.output


def test_bounds_nan_message_keeps_brackets():
    r = _run("bounds", "mse", "-e", "1", "--diam", "nan")
    assert r.exit_code == 2, r.output
    assert "[nan]" in r.output and "Traceback" not in r.output


@pytest.mark.slow
def test_sanitize_output_with_markup_path_prints_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _run("sanitize", "rotten-tomatoes", "-e", "3", "--limit", "5", "-o", "[/x].csv", "--seed", "0")
    assert r.exit_code == 0, r.output
    assert "[/x].csv" in r.output and (tmp_path / "[/x].csv").exists()
    assert (tmp_path / "[/x].csv.card.json").exists()


def test_sanitize_summary_escapes_paths(capsys):
    from textdp.cli import sanitize as S

    s = {"mechanism": "santext", "guarantee": "[bold]g", "worst_case_epsilon_per_token": 2.0,
         "output_vocabulary": {"kind": "file", "name": "file [red]v.txt", "size": 3},
         "private": {"documents": 1, "tokens": 2, "share_changed": 0.5, "oov_tokens": 0, "oov_policy": "keep",
                     "tokens_per_second": 3, "seconds_total": 1.0, "seconds_sanitizing": 0.5},
         "output": "[/x].csv", "card": "[/x].csv.card.json"}
    S._print_summary(s, None)
    out = capsys.readouterr().out
    assert "[/x].csv" in out and "[bold]g" in out and "[red]v.txt" in out


# 2. SIGTERM cleans up like Ctrl-C -----------------------------------------------------------

_SLOW = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import textdp.cli.main as m
    from textdp.cli._common import handle_errors
    from textdp.data.io import atomic_output

    @m.app.command("slow-write")
    @handle_errors
    def slow_write(out: str):
        with atomic_output(out) as tmp:
            Path(tmp).write_text("partial")
            print("ready", flush=True)
            time.sleep(60)

    sys.argv = ["textdp", "slow-write", sys.argv[1]]
    m.main()
""")


def test_sigterm_removes_temporary_files(tmp_path):
    out = tmp_path / "o.csv"
    p = subprocess.Popen([sys.executable, "-c", _SLOW, str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert any(f.name.endswith(".tmp") for f in tmp_path.iterdir())
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode in (130, 143)
    assert "interrupted" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# 3. MemoryError hint, audit sizes, sys.exit in mechanisms ----------------------------------

def test_memory_error_hint_is_generic(capsys):
    import typer

    from textdp.cli._common import handle_errors

    @handle_errors
    def boom():
        raise MemoryError

    with pytest.raises(typer.Exit) as e:
        boom()
    assert e.value.exit_code == 1
    err = capsys.readouterr().err
    assert "out of memory" in err and "--block-size" not in err


@pytest.mark.parametrize("args", [["--samples", "1e30"], ["--samples", "1.5"], ["--dims", "1e7"],
                                  ["--dims", "4.5"]])
def test_audit_rejects_huge_sizes(args):
    r = _run("audit", "-m", "laplace", "-e", "1", "--dims", "4", *args)
    assert r.exit_code == 2, r.output
    assert "unexpected" not in r.output


def test_user_mechanism_sys_exit_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "exitmech.py").write_text("import sys\ndef privatize(x, rng):\n    sys.exit(0)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    r = _run("audit", "-m", "exitmech:privatize", "-e", "1", "--dims", "1", "--samples", "1000")
    assert r.exit_code == 2, r.output
    assert "sys.exit" in r.output


def test_user_module_sys_exit_at_import_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "exitmod.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    r = _run("audit", "-m", "exitmod:privatize", "-e", "1", "--dims", "1", "--samples", "1000")
    assert r.exit_code == 2, r.output
    assert "SystemExit" in r.output


def test_sampler_error_mentions_cli_flag():
    from textdp.audit.core import audit_mechanism
    from textdp.errors import ParameterError

    with pytest.raises(ParameterError, match="--full-noise"):
        audit_mechanism(lambda x, rng: x, 1.0, n=1, samples=100, sampler="sufficient-statistic")


# 4. card names keep the whole output name ----------------------------------------------------

def test_card_names_do_not_collide():
    assert card_path("r.fbdd.tsv") != card_path("r.fbdd.txt")
    assert card_path("d/r.fbdd.tsv") == Path("d/r.fbdd.tsv.card.json")
    assert card_path("folder") == Path("folder.card.json")


# 5. output permissions ------------------------------------------------------------------------

def test_atomic_output_uses_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        p = io.write_table(pd.DataFrame({"text": ["a"]}), tmp_path / "o.csv")
        with io.atomic_output_dir(tmp_path / "d") as d:
            (d / "x").write_text("x")
    finally:
        os.umask(old)
    assert p.stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755


# 6. messages advise only what exists ------------------------------------------------------------

def test_messages_do_not_advise_missing_options(tmp_path):
    with pytest.raises(InputError) as e:
        io.detect_format(tmp_path / "x.weird")
    assert "--format" not in str(e.value) and ".csv" in str(e.value)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe bad\n")
    with pytest.raises(InputError) as e:
        io.read_table(bad)
    assert "--encoding" not in str(e.value) and "UTF-8" in str(e.value)


# 3. usage errors are one line (the installed entry point, not CliRunner) ----------------------

@pytest.mark.parametrize("args, needle", [
    (["sanitize", "rotten-tomatoes", "--epsilon", "abc"], "--epsilon"),
    (["sanitize", "rotten-tomatoes", "--epsilon", "1", "--no-such-option"], "--no-such-option"),
    (["no-such-command"], "no-such-command"),
    (["sanitize", "rotten-tomatoes"], "--epsilon"),
])
def test_usage_errors_are_one_line(args, needle):
    r = subprocess.run([sys.executable, "-m", "textdp.cli.main", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr and "╭" not in r.stderr and r.stdout == ""


def test_help_and_version_still_exit_zero():
    for args in (["--version"], ["sanitize", "--help"]):
        r = subprocess.run([sys.executable, "-m", "textdp.cli.main", *args], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and r.stdout.strip(), (args, r.stderr)


@pytest.mark.parametrize("raised, code", [("pipe", 141), ("abort", 130)])
def test_entry_point_handles_closed_pipes_and_aborts(monkeypatch, raised, code):
    """`textdp --help | head -1` (BrokenPipeError) and typer's Abort end with an exit code, not a
    traceback (session 2: Abort lives in typer, not typer._click, and raised AttributeError)."""
    import typer

    import textdp.cli.main as m

    def fake_app(**kw):
        raise BrokenPipeError if raised == "pipe" else typer.Abort()

    monkeypatch.setattr(m, "app", fake_app)
    monkeypatch.setattr(os, "dup2", lambda *a: None)  # keep pytest's stdout
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # leave pytest's SIGTERM handler alone
    with pytest.raises(SystemExit) as e:
        m.main()
    assert e.value.code == code


def test_a_finished_run_ignores_late_interrupts(monkeypatch):
    """Once a command has returned (outputs and ledger release in place), SIGINT/SIGTERM/SIGHUP during
    interpreter shutdown are ignored (an atexit hook), so a finished run never exits 130; a failed one
    keeps them. main() itself gives back the handlers it found: a caller running it in-process is not
    left with signals ignored or with textdp's handler."""
    import atexit

    import textdp.cli.main as m

    for rv, ignored in ((0, True), (None, True), (2, False)):
        hooks = []
        monkeypatch.setattr(m, "app", lambda **kw: rv)
        monkeypatch.setattr(atexit, "register", lambda f: hooks.append(f))
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        with pytest.raises(SystemExit) as e:
            m.main()
        assert e.value.code == (rv or 0)
        assert {sig: signal.getsignal(sig) for sig in before} == before
        assert (hooks == [m._ignore_late_signals]) is ignored, hooks
    calls = []
    monkeypatch.setattr(signal, "signal", lambda sig, handler: calls.append((sig, handler)))
    m._ignore_late_signals()
    assert set(calls) == {(signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, signal.SIG_IGN),
                          (signal.SIGHUP, signal.SIG_IGN)}


def test_a_finished_run_exits_0_with_signals_ignored_at_shutdown(tmp_path):
    """The atexit hook, in a real interpreter: a SIGTERM sent to itself from a later atexit hook (which
    runs after textdp's, hooks being last-in first-out) does not change a finished run's status 0."""
    code = textwrap.dedent("""
        import atexit, os, signal, sys
        atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))  # runs after main()'s hook
        sys.argv = ["textdp", "--version"]
        from textdp.cli.main import main
        main()
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_the_console_script_ignores_signals_as_soon_as_a_run_has_finished():
    """The ``textdp`` script (``entry``): a SIGTERM sent while Python waits for threads at exit, before any
    atexit hook runs, does not change a finished run's status 0 (with handlers given back first and the
    signals ignored only from an atexit hook on, it exited 143)."""
    from importlib.metadata import entry_points

    assert [e.value for e in entry_points(group="console_scripts") if e.name == "textdp"] == ["textdp.cli.main:entry"]
    code = textwrap.dedent("""
        import os, signal, sys, threading
        threading._register_atexit(lambda: os.kill(os.getpid(), signal.SIGTERM))  # before atexit hooks
        sys.argv = ["textdp", "--version"]
        from textdp.cli.main import entry
        entry()
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
