"""The ``textdp`` command line. Each command group lives in its own module and
registers itself through ``register(app)``; no logic beyond parsing, progress
and printing lives here.

Start-up is lazy: a command's module is imported, and its options built, only when that
command runs or its own ``--help`` is shown. ``textdp --help`` lists the commands from their
registrations (help text only), so it imports neither numpy nor any capability."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import signal as _signal

import typer
from typer.core import TyperCommand, TyperGroup

from textdp import __version__

# One module per command (group), in the order `textdp --help` lists them (typer lists single
# commands before groups). Each module defines register(app), which registers exactly that name.
_COMMAND_MODULES = {
    "sanitize": "textdp.cli.sanitize",
    "mechanisms": "textdp.cli.mechanisms",
    "compare": "textdp.cli.compare",
    "audit": "textdp.cli.audit",
    "evaluate": "textdp.cli.evaluate",
    "datasets": "textdp.cli.datasets",
    "topics": "textdp.cli.topics",
    "bounds": "textdp.cli.bounds",
    "attack": "textdp.cli.attack",
    "budget": "textdp.cli.budget",
}


def _registered(name: str) -> typer.Typer | None:
    """A fresh Typer holding what ``name``'s module registers (None: the module is not written yet)."""
    module = _COMMAND_MODULES[name]
    try:
        m = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:  # command module not written yet
            return None
        raise
    sub = typer.Typer(add_completion=False)
    m.register(sub)
    return sub


def _listing_entry(name: str, sub: typer.Typer) -> TyperCommand:
    """What the command list of ``textdp --help`` shows for ``name`` (name, help, panel, flags),
    read from the registration without building the command's options; the same text typer
    would show for the built command (tests/test_cli_startup.py compares the two)."""
    from typer.main import solve_typer_info_help

    for info in sub.registered_commands:
        if info.name == name:
            doc = inspect.getdoc(info.callback) if info.help is None else inspect.cleandoc(info.help)
            return TyperCommand(name=name, help=doc, short_help=info.short_help, hidden=info.hidden,
                                deprecated=info.deprecated, rich_help_panel=info.rich_help_panel)
    for info in sub.registered_groups:
        if info.name == name:
            from typer.main import solve_typer_info_defaults

            solved = solve_typer_info_defaults(info)
            return TyperCommand(name=name, help=solve_typer_info_help(info), short_help=solved.short_help,
                                hidden=solved.hidden, deprecated=solved.deprecated,
                                rich_help_panel=solved.rich_help_panel)
    raise RuntimeError(f"{_COMMAND_MODULES[name]}.register() did not register {name!r}")


class _LazyGroup(TyperGroup):
    """The root group: commands are built on first use (see the module docstring)."""

    _listing = False

    def list_commands(self, ctx) -> list[str]:
        return [n for n in _COMMAND_MODULES if n in self.commands or self._exists(n)]

    @staticmethod
    def _exists(name: str) -> bool:
        return importlib.util.find_spec(_COMMAND_MODULES[name]) is not None

    def get_command(self, ctx, cmd_name: str):
        cmd = self.commands.get(cmd_name)
        if cmd is not None or cmd_name not in _COMMAND_MODULES:
            return cmd
        sub = _registered(cmd_name)
        if sub is None:
            return None
        if self._listing:  # the command list of `textdp --help`: help text only
            return _listing_entry(cmd_name, sub)
        from typer.main import get_group

        cmd = get_group(sub).commands[cmd_name]
        self.commands[cmd_name] = cmd
        return cmd

    def resolve_command(self, ctx, args):
        if args and args[0] not in _COMMAND_MODULES:  # "Did you mean ...?" needs the names
            for n in self.list_commands(ctx):
                self.commands.setdefault(n, TyperCommand(name=n))
        return super().resolve_command(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="textdp",
    help="Differential privacy for text: sanitize corpora, train private models, audit mechanisms, bound and run attacks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
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


_SIGNAL_RECEIVED = 0  # the first SIGTERM or SIGHUP received (0: none)

#: signals that end a run like Ctrl-C (clean-up, then exit 128 + the signal)
_TERMINATING = tuple(s for s in (getattr(_signal, "SIGTERM", None), getattr(_signal, "SIGHUP", None)) if s is not None)


def _sigterm_to_interrupt(signum, frame):  # noqa: ARG001
    """SIGTERM (``timeout``, ``kill``) and SIGHUP (a closed terminal or SSH session): raise
    Terminated / HungUp, so the command cleans up as for Ctrl-C (temporary files removed, folders
    it created removed, its budget reservation cancelled). Only the first one raises: a second
    signal during that clean-up is ignored, so the clean-up itself is not cut short."""
    global _SIGNAL_RECEIVED
    import signal

    from textdp.cli._common import HungUp, Terminated

    if _SIGNAL_RECEIVED:
        return
    _SIGNAL_RECEIVED = signum
    raise HungUp if signum == getattr(signal, "SIGHUP", None) else Terminated


def _usage_error_line(exc) -> str:
    """One line for a command-line usage error (bad option value, unknown option, ...)."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "textdp"
    msg = " ".join(exc.format_message().split())
    return f"error: {msg} (see '{where} --help')"


def entry() -> None:
    """The ``textdp`` console script: :func:`main` in a process that ends with it. A finished run
    ignores SIGINT, SIGTERM and SIGHUP from the moment its outputs are in place, so a late signal
    (while Python waits for threads and runs its exit hooks) never turns it into exit 130/143."""
    main(exiting=True)


def main(*, exiting: bool = False) -> None:
    """Runs the app; usage errors are one line on stderr with exit code 2; Ctrl-C exits 130,
    SIGTERM 143 and SIGHUP 129 (128 + the signal), after the same clean-up; ends with
    ``SystemExit``. Called in a caller's own process (``exiting=False``), it gives back the
    SIGTERM/SIGHUP handlers it found, and a finished run ignores SIGINT, SIGTERM and SIGHUP only
    from interpreter shutdown on (an ``atexit`` hook); ``exiting=True`` (:func:`entry`) ignores
    them as soon as the run has finished."""
    global _SIGNAL_RECEIVED
    import signal

    _SIGNAL_RECEIVED = 0  # an earlier in-process run's signal is not this run's
    try:  # typer >= 0.20 vendors click as typer._click; older typer uses click itself
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import exceptions as cx
    usage_error = getattr(cx, "UsageError", ())
    click_error = getattr(cx, "ClickException", ())
    abort = tuple(c for c in (getattr(typer, "Abort", None), getattr(cx, "Abort", None)) if c is not None)

    previous = {}
    for sig in _TERMINATING:  # SIGTERM (timeout, kill), SIGHUP (terminal closed) clean up like Ctrl-C
        try:
            previous[sig] = signal.signal(sig, _sigterm_to_interrupt)
        except (ValueError, OSError):  # not the main thread / unsupported platform
            pass
    try:
        _run(usage_error, click_error, abort, exiting)
    finally:  # a caller that runs main() in its own process gets its handlers back
        for sig, handler in ({} if exiting else previous).items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (ValueError, OSError):  # pragma: no cover - set above on the same thread
                pass


def _ignore_late_signals() -> None:
    """atexit hook of a finished run: SIGINT, SIGTERM and SIGHUP during interpreter shutdown are
    ignored (the outputs and the ledger's release are in place, so the exit status stays 0)."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in _TERMINATING:
            signal.signal(sig, signal.SIG_IGN)
    except (ValueError, OSError):  # not the main thread / unsupported platform
        pass


def _run(usage_error, click_error, abort, exiting: bool) -> None:
    """:func:`main`'s body: runs the app and exits with its status (``SystemExit``)."""
    import atexit
    import os
    import sys

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
    if rv in (0, None):  # the outputs (and the ledger's release) are in place: a Ctrl-C or SIGTERM during
        if exiting:      # interpreter shutdown must not turn a finished run into exit 130/143
            _ignore_late_signals()
        else:  # at exit only: an in-process caller keeps its handlers meanwhile
            atexit.unregister(_ignore_late_signals)
            atexit.register(_ignore_late_signals)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    entry()
