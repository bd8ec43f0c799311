"""Shared CLI plumbing: error handling, exit codes, consoles, common options.

Exit codes: 0 ok; 2 bad usage, bad input or an environment error such as
permission denied or a full disk (one line, no traceback); 1 unexpected error
(with a hint to report it); 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP (a closed terminal or SSH session);
after each of these no output is left behind and a budget reservation is cancelled. Progress and messages go to
stderr; results go to stdout.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape as esc

from textdp.errors import TextDPError

err_console = Console(stderr=True)
out_console = Console()

ISSUE_URL = "https://github.com/textdp/textdp/issues"


class Terminated(KeyboardInterrupt):
    """Raised by the entry point's SIGTERM handler (``timeout``, ``kill``): it cleans up like
    Ctrl-C (atomic writers remove their temporary files, a budget reservation is cancelled)
    and exits 143 = 128 + SIGTERM."""

    signum = signal.SIGTERM


class HungUp(Terminated):
    """Raised by the entry point's SIGHUP handler (the terminal or SSH session was closed):
    the same clean-up as SIGTERM, exit 129 = 128 + SIGHUP."""

    signum = getattr(signal, "SIGHUP", 1)


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit with ``code`` (also when stderr is gone: a closed terminal)."""
    try:
        err_console.print(f"[bold red]error:[/] {esc(str(message))}", highlight=False, soft_wrap=True)
    except (OSError, ValueError):  # the terminal went away (SIGHUP): the exit code still says it
        pass
    raise typer.Exit(code)


def handle_errors(func: Callable) -> Callable:
    """Decorator for command functions: TextDPError and operating-system errors caused by the
    environment (permission denied, disk full, ...: see :func:`textdp.data.io.describe_os_error`)
    -> one line + exit 2; Ctrl-C -> exit 130, SIGTERM -> 143; other exceptions -> one line +
    exit 1 with a hint (traceback with TEXTDP_DEBUG=1)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        import os

        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except TextDPError as exc:
            fail(str(exc), 2)
        except KeyboardInterrupt as exc:  # Ctrl-C: 130; SIGTERM (see textdp.cli.main): 143
            signum = getattr(exc, "signum", signal.SIGINT)
            kept = getattr(exc, "textdp_kept", None)  # e.g. evaluate keeps finished cells to resume from
            fail("interrupted" + (f" ({signal.Signals(signum).name})" if signum != signal.SIGINT else "")
                 + (f"; {kept}" if kept else "; no output was written"), 128 + signum)
        except MemoryError:
            fail("out of memory; try a smaller input or sizes", 1)
        except BrokenPipeError:  # the reader of stdout left: the entry point exits quietly (141)
            raise
        except OSError as exc:  # permission denied, disk full, a file where a folder should be, ...
            from textdp.data.io import describe_os_error, is_user_os_error

            signum = getattr(sys.modules.get("textdp.cli.main"), "_SIGNAL_RECEIVED", 0)
            if signum:  # e.g. writing to a terminal closed by SIGHUP: report the signal, not the write
                fail(f"interrupted ({signal.Signals(signum).name}); no output was written", 128 + signum)

            if not is_user_os_error(exc) or os.environ.get("TEXTDP_DEBUG"):
                _unexpected(exc)
            fail(describe_os_error(exc), 2)
        except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
            _unexpected(exc)

    return wrapper


def _unexpected(exc: BaseException) -> None:
    """A bug: one line with exit 1 (the traceback with TEXTDP_DEBUG=1)."""
    import os

    if os.environ.get("TEXTDP_DEBUG"):
        raise exc
    fail(
        f"unexpected {type(exc).__name__}: {str(exc)[:200]} (a bug: rerun with TEXTDP_DEBUG=1 "
        f"and report it at {ISSUE_URL})",
        1,
    )


def progress(quiet: bool = False, transient: bool = False):
    """A rich progress bar on stderr (disabled with ``quiet``); it disappears when the block raises.

    When the line is too wide (an 80-column terminal, a log), the bar shrinks first and a long
    description is cut (at most 40 columns, with "…"); the counter and the times are never cut.
    Returns a ``rich.progress.Progress`` (imported here, not when the CLI starts)."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.table import Column

    from textdp.cli._progress import CountColumn, ErrorClearingProgress

    return ErrorClearingProgress(
        TextColumn("[progress.description]{task.description}",
                   table_column=Column(no_wrap=True, overflow="ellipsis", max_width=40)),
        BarColumn(),
        CountColumn(),
        TimeElapsedColumn(table_column=Column(no_wrap=True)),
        TimeRemainingColumn(table_column=Column(no_wrap=True)),
        console=err_console,
        disable=quiet,
        transient=transient,
    )


def json_safe(obj: Any) -> Any:
    """:func:`textdp.accounting.card.json_safe` (imported on first use, not when the CLI starts)."""
    from textdp.accounting.card import json_safe as _json_safe

    return _json_safe(obj)


def __getattr__(name: str):
    """``CountColumn`` (rich's progress module) is loaded on first use: ``textdp --help`` does
    not import it."""
    if name == "CountColumn":
        from textdp.cli._progress import CountColumn

        return CountColumn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def print_json(obj: Any) -> None:
    """Machine-readable result on stdout (``--json``): standard JSON (no NaN or Infinity,
    see :func:`json_safe`); values JSON cannot hold are written as strings."""
    sys.stdout.write(json.dumps(json_safe(obj), indent=2, default=str, allow_nan=False) + "\n")
    sys.stdout.flush()


def split_list(text: str, option: str) -> list[str]:
    """Items of a comma list option, stripped; an empty list or item ("1,,2", "1,") is a ParameterError."""
    from textdp.errors import ParameterError

    if not text or not text.strip():
        raise ParameterError(f"{option} is empty; give a comma list such as 1,2,3")
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise ParameterError(f"{option} {text!r} has an empty item; separate items with single commas and no trailing comma")
    return items


def parse_floats(text: str, option: str) -> list[float]:
    """A comma list of numbers (``--epsilon 0.5,1,2``); errors as :func:`split_list`."""
    from textdp.errors import ParameterError

    items = split_list(text, option)
    try:
        return [float(x) for x in items]
    except ValueError:
        raise ParameterError(f"{option} must be a comma-separated list of numbers, got {text!r}") from None


# Option factories shared by every command (same names and help everywhere).
def opt_seed(help_text: str | None = None):
    return typer.Option(None, "--seed", help=help_text or "Seed for a reproducible research run (recorded in the card; "
                        "not for release). Default: cryptographically secure randomness.")


def opt_output(help_text: str = "Output path."):
    return typer.Option(None, "--output", "-o", help=help_text)


def opt_overwrite():
    return typer.Option(False, "--overwrite", help="Replace an existing output.")


def opt_quiet(help_text: str | None = None):
    return typer.Option(False, "--quiet", "-q", help=help_text or "No progress bars (stderr), notes or summary (stdout); "
                        "errors and warnings about the privacy budget are still printed on stderr, and --json still "
                        "prints its summary on stdout.")


def opt_json():
    return typer.Option(False, "--json", help="Print a machine-readable summary on stdout.")


def opt_engine(what: str = "the work"):
    """``--engine local|dask|spark`` (issue 16): where ``what`` runs."""
    return typer.Option("local", "--engine", help=f"Where {what} runs: local (this process) | dask (a Dask "
                        "cluster: --scheduler ADDRESS, else a local cluster of --workers processes) | spark (a "
                        "Spark session: --scheduler MASTER-URL, else local[--workers]). Needs the engines extra: "
                        "pip install 'textdp[engines]'.")


def opt_scheduler():
    """``--scheduler ADDRESS`` of a running Dask scheduler or Spark master."""
    return typer.Option(None, "--scheduler", help="Address of a running cluster: a Dask scheduler "
                        "(tcp://HOST:8786) or a Spark master URL (spark://HOST:7077). Default: a local one.")


def engine_from_options(engine: str, scheduler, workers):
    """The :class:`textdp.engines.Engine` the options name (ParameterError for a bad one);
    ``None`` for the plain local path (``--engine local`` without a scheduler)."""
    from textdp.engines import get_engine

    if str(engine).strip().lower() == "local":
        if scheduler is not None:
            from textdp.errors import ParameterError

            raise ParameterError("--scheduler applies to --engine dask or spark, not local")
        return None
    return get_engine(engine, workers=workers, scheduler=scheduler)
