"""`textdp audit`: stdout holds only results although the user's mechanism prints (issue 13, item 3),
and the progress counter is printed whole in an 80-column log (item 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textdp.cli._common import CountColumn
from textdp.cli.main import app

PRINTING_MECHANISM = """
    import os, sys
    import numpy as np

    print("importing chatty")                      # at import time

    def chatty(x, rng):
        print("called on", x.shape)                # on every call (also from worker threads)
        sys.stdout.write("raw write\\n")
        return x + rng.laplace(0.0, x.shape[1] / 2.0, x.shape)

    class _G:
        epsilon = 2.0

    chatty.guarantee = _G()                        # claimed ε read from the mechanism

    def claimer(x, rng):
        return chatty(x, rng)

    def _claimed(n):
        print("claimed_epsilon asked for n =", n)
        return 2.0

    claimer.claimed_epsilon = _claimed

    def fd_writer(x, rng):
        os.write(1, b"fd-level write\\n")          # below Python: a C library or a subprocess would do this
        return x + rng.laplace(0.0, x.shape[1] / 2.0, x.shape)
"""


@pytest.fixture
def chatty(tmp_path, monkeypatch):
    (tmp_path / "chattymech.py").write_text(textwrap.dedent(PRINTING_MECHANISM), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("chattymech", None)
    yield tmp_path
    sys.modules.pop("chattymech", None)


@pytest.mark.parametrize("spec, extra", [
    ("chattymech:chatty", ["-e", "2"]),
    ("chattymech.py:chatty", ["-e", "2", "--workers", "2"]),
    ("chattymech:claimer", []),          # no -e: claimed_epsilon(n) is user code too
])
def test_json_stays_valid_when_the_mechanism_prints(chatty, spec, extra):
    r = CliRunner().invoke(app, ["audit", "-m", spec, *extra, "--dims", "1,2", "--samples", "2000", "--seed", "1",
                                 "--json", "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # nothing but the JSON summary on stdout
    assert len(doc["cells"]) == 2
    assert "called on" in r.stderr and "raw write" in r.stderr
    if "claimer" not in spec:
        assert "importing chatty" in r.stderr
    else:
        assert "claimed_epsilon asked" in r.stderr


def test_table_output_keeps_the_mechanism_prints_off_stdout(chatty):
    r = CliRunner().invoke(app, ["audit", "-m", "chattymech:chatty", "-e", "2", "--dims", "1", "--samples", "2000",
                                 "--seed", "1", "-q"])
    assert r.exit_code == 0, r.output
    assert "called on" not in r.stdout and "importing" not in r.stdout and "audit:" in r.stdout


def test_fd_level_writes_do_not_reach_stdout(chatty):
    """The installed command: a write to file descriptor 1 goes to stderr too."""
    exe = Path(sys.executable).with_name("textdp")
    env = {**os.environ, "PYTHONPATH": str(chatty)}
    p = subprocess.run([str(exe), "audit", "-m", "chattymech:fd_writer", "-e", "2", "--dims", "1", "--samples", "500",
                        "--seed", "1", "--json", "-q"], capture_output=True, text=True, cwd=chatty, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)
    assert "fd-level write" in p.stderr and "importing chatty" in p.stderr


@pytest.mark.parametrize("done, total, text", [
    (3, 20, " 3/20"), (0, None, "0/?"), (999_999, 999_999, "999999/999999"),
    (100_466_666, 301_400_000, "100.5M/301.4M"), (2.9e12, 8.8e12, "2.9T/8.8T"), (5e3, 2e9, "0.0G/2.0G"),
])
def test_count_column_is_short(done, total, text):
    assert CountColumn.text(done, total) == text


def test_audit_bar_counter_is_whole_in_an_80_column_log(monkeypatch):
    """2e12 noise values: the exact counter (27 characters) used to be cut to '2000000000…' in a log."""
    monkeypatch.setenv("COLUMNS", "80")
    from textdp.cli import _common

    monkeypatch.setattr(_common.err_console, "_width", 80)
    r = CliRunner().invoke(app, ["audit", "-m", "laplace", "-e", "1", "--dims", "1000", "--samples", "1e9", "--fast",
                                 "--no-strong", "--seed", "1", "--json"])
    assert r.exit_code == 0, r.output
    bar = [line for line in r.stderr.splitlines() if line.startswith("audit laplace")]
    assert bar and "2.0T/2.0T" in bar[-1] and "…" not in bar[-1], r.stderr
    json.loads(r.stdout)
