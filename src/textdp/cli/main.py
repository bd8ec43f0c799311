"""The ``textdp`` command line. Each command group lives in its own module and
registers itself through ``register(app)``; no logic beyond parsing, progress
and printing lives here."""

from __future__ import annotations

import importlib

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


def _sigterm_to_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def main() -> None:
    import signal

    try:  # SIGTERM (timeout, kill) cleans up like Ctrl-C: atomic writers remove temp files
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    except (ValueError, OSError):  # not the main thread / unsupported platform
        pass
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
