"""Start-up is lazy (issue 14, item 3): what a command imports, checked without timing (speed is
measured by benchmarks/bench_startup.py). Each check runs a fresh interpreter and lists the heavy
modules it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import typer
from typer.testing import CliRunner

from textdp.cli import main as cli_main

HEAVY = ("numpy", "pandas", "pyarrow", "scipy", "numba", "matplotlib", "torch", "sklearn", "transformers")


def _loaded_after(argv: list[str], tmp_path, env: dict | None = None) -> tuple[int, set[str], str]:
    """Run ``textdp ARGV`` in a fresh interpreter; its exit code, the HEAVY top-level packages and
    textdp modules it imported, and its output."""
    code = textwrap.dedent(f"""
        import json, sys
        sys.argv = ["textdp"] + {argv!r}
        from textdp.cli.main import main
        try:
            main()
        except SystemExit as e:
            rc = e.code
        else:
            rc = 0
        mods = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r} and "." not in m
                      or m.startswith("textdp.") or m == "scipy.stats")
        sys.__stderr__.write("\\nLOADED " + json.dumps([rc, mods]) + "\\n")
    """)
    full_env = {**os.environ, "TEXTDP_LEDGER_DIR": str(tmp_path / "ledgers"), "COLUMNS": "100", **(env or {})}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=full_env)
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("LOADED ")]
    assert line, r.stderr
    rc, mods = json.loads(line[-1][len("LOADED "):])
    return rc, set(mods), r.stdout + r.stderr


def test_help_imports_no_numerical_library_and_no_capability(tmp_path):
    for argv, code in ((["--help"], 0), ([], 2), (["--version"], 0)):  # no arguments: the help, exit 2 (click)
        rc, mods, out = _loaded_after(argv, tmp_path)
        assert rc == code, out
        assert not mods & set(HEAVY), (argv, mods & set(HEAVY))
        assert not {m for m in mods if m.startswith(("textdp.noise", "textdp.sanitize", "textdp.audit",
                                                     "textdp.accounting", "textdp.data", "textdp.mechanisms"))}


def test_a_command_imports_only_its_own_module(tmp_path):
    rc, mods, out = _loaded_after(["datasets", "--help"], tmp_path)
    assert rc == 0, out
    cli = {m for m in mods if m.startswith("textdp.cli.") and m not in ("textdp.cli.main", "textdp.cli._common")}
    assert cli == {"textdp.cli.datasets"}
    assert not mods & set(HEAVY)


def test_one_line_plain_text_sanitize_needs_no_pandas_numba_or_scipy(tmp_path, small_glove_file):
    (tmp_path / "one.txt").write_text("good film\n", encoding="utf-8")
    rc, mods, out = _loaded_after(["sanitize", "one.txt", "-o", "one.out.txt", "-e", "3", "--no-ledger", "--seed",
                                   "1", "--embeddings", str(small_glove_file), "--output-vocabulary", "full", "-q"],
                                  tmp_path, env={"TEXTDP_CACHE": str(tmp_path / "cache")})
    assert rc == 0, out
    assert (tmp_path / "one.out.txt").read_text(encoding="utf-8").count("\n") == 1
    assert not mods & {"pandas", "pyarrow", "numba", "scipy", "matplotlib", "torch"}, mods & set(HEAVY)


def test_audit_grid_without_plot_does_not_import_matplotlib_or_scipy_stats(tmp_path):
    rc, mods, out = _loaded_after(["audit", "--grid", "habernal2022", "-m", "laplace", "-e", "1", "-n", "1", "-N",
                                   "1000", "-o", "res", "-q"], tmp_path)
    assert rc == 0, out
    assert "matplotlib" not in mods and "scipy.stats" not in mods
    assert sorted(p.name for p in (tmp_path / "res").iterdir()) == ["habernal2022.csv", "habernal2022.json"]


def _eager_app() -> typer.Typer:
    """The root app as it was built before lazy loading: every module registered up front."""
    import importlib

    app = typer.Typer(name="textdp", help=cli_main.app.info.help, no_args_is_help=True, add_completion=False,
                      pretty_exceptions_enable=False)
    app.callback()(cli_main._root)
    for mod in cli_main._COMMAND_MODULES.values():
        importlib.import_module(mod).register(app)
    return app


def test_lazy_help_is_the_eager_help():
    """The command list of `textdp --help` (read from registrations) and every command's own help
    (built on demand) are what typer shows for the fully built app."""
    runner = CliRunner()
    eager = _eager_app()
    env = {"COLUMNS": "100"}
    for argv in (["--help"], *[[name, "--help"] for name in cli_main._COMMAND_MODULES]):
        lazy_out = runner.invoke(cli_main.app, argv, env=env)
        eager_out = runner.invoke(eager, argv, env=env)
        assert lazy_out.exit_code == eager_out.exit_code == 0, argv
        assert lazy_out.output == eager_out.output, argv
    assert list(cli_main._COMMAND_MODULES) == [  # typer lists single commands before groups
        *(c.name for c in eager.registered_commands), *(g.name for g in eager.registered_groups)]


def test_unknown_command_still_suggests_the_close_one():
    r = CliRunner().invoke(cli_main.app, ["sanitiz"])
    assert r.exit_code == 2
    assert "No such command 'sanitiz'" in r.output and "Did you mean 'sanitize'" in r.output
