"""The ``textdp`` command line. Each command group lives in its own module and
registers itself through ``register(app)``; no logic beyond parsing, progress
and printing lives here."""

from __future__ import annotations

import importlib
import signal as _signal

import typer

from textdp import __version__

app = typer.Typer(
    name="textdp",
    help="Differential privacy for text: sanitize corpora, train private models, audit mechanisms, bound and run attacks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# One module per command (group). Each defines register(app).
_COMMAND_MODULES = (
    "textdp.cli.sanitize",
    "textdp.cli.audit",
    "textdp.cli.topics",
    "textdp.cli.bounds",
    "textdp.cli.evaluate",
    "textdp.cli.attack",
    "textdp.cli.budget",
    "textdp.cli.datasets",
)


def _version(value: bool):
    if value:
        typer.echo(f"textdp {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
):
    """textdp: differential privacy for text."""


for _mod in _COMMAND_MODULES:
    try:
        _m = importlib.import_module(_mod)
    except ModuleNotFoundError as _exc:
        if _exc.name == _mod:  # command module not written yet
            continue
        raise
    _m.register(app)


_SIGTERM_RECEIVED = False
_SIGNAL_RECEIVED = 0  # the first SIGTERM or SIGHUP received (0: none)

#: signals that end a run like Ctrl-C (clean-up, then exit 128 + the signal)
_TERMINATING = tuple(s for s in (getattr(_signal, "SIGTERM", None), getattr(_signal, "SIGHUP", None)) if s is not None)


def _sigterm_to_interrupt(signum, frame):  # noqa: ARG001
    """SIGTERM (``timeout``, ``kill``) and SIGHUP (a closed terminal or SSH session): raise
    Terminated / HungUp, so the command cleans up as for Ctrl-C (temporary files removed, folders
    it created removed, its budget reservation cancelled). Only the first one raises: a second
    signal during that clean-up is ignored, so the clean-up itself is not cut short."""
    global _SIGTERM_RECEIVED, _SIGNAL_RECEIVED
    import signal

    from textdp.cli._common import HungUp, Terminated

    if _SIGNAL_RECEIVED:
        return
    _SIGTERM_RECEIVED = True
    _SIGNAL_RECEIVED = signum
    raise HungUp if signum == getattr(signal, "SIGHUP", None) else Terminated


def _usage_error_line(exc) -> str:
    """One line for a command-line usage error (bad option value, unknown option, ...)."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "textdp"
    msg = " ".join(exc.format_message().split())
    return f"error: {msg} (see '{where} --help')"


def main() -> None:
    """Entry point: runs the app; usage errors are one line on stderr with exit code 2; Ctrl-C
    exits 130, SIGTERM 143 and SIGHUP 129 (128 + the signal), after the same clean-up."""
    import os
    import signal
    import sys

    try:  # typer >= 0.20 vendors click as typer._click; older typer uses click itself
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions as cx
    usage_error = getattr(cx, "UsageError", ())
    click_error = getattr(cx, "ClickException", ())
    abort = tuple(c for c in (getattr(typer, "Abort", None), getattr(cx, "Abort", None)) if c is not None)

    for sig in _TERMINATING:  # SIGTERM (timeout, kill), SIGHUP (terminal closed) clean up like Ctrl-C
        try:
            signal.signal(sig, _sigterm_to_interrupt)
        except (ValueError, OSError):  # not the main thread / unsupported platform
            pass
    try:
        rv = app(standalone_mode=False)
    except BrokenPipeError:  # e.g. `textdp --help | head -1`: the reader left; exit quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        except OSError:
            pass
        sys.exit(141)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare group: show its help, as click does
            exc.show()
            sys.exit(exc.exit_code)
        sys.stderr.write(_usage_error_line(exc) + "\n")
        sys.exit(2)
    except click_error as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except abort:
        try:
            sys.stderr.write("interrupted\n")
        except (OSError, ValueError):  # the terminal went away (SIGHUP)
            pass
        sys.exit(128 + _SIGNAL_RECEIVED if _SIGNAL_RECEIVED else 130)
    if rv == 130 and _SIGNAL_RECEIVED:  # interrupted by SIGTERM/SIGHUP outside a command body: 128 + it
        rv = 128 + _SIGNAL_RECEIVED
    if rv in (0, None):  # the outputs (and the ledger's release) are in place: a Ctrl-C or SIGTERM
        try:             # during interpreter shutdown must not turn a finished run into exit 130
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            for sig in _TERMINATING:
                signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # not the main thread / unsupported platform
            pass
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
