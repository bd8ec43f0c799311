"""Shared CLI plumbing: error handling, exit codes, consoles, common options.

Exit codes: 0 ok; 2 bad usage or bad input (one line, no traceback);
1 unexpected error (with a hint to report it). Progress and messages go to
stderr; results go to stdout.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable

import typer
from rich.console import Console
from rich.markup import escape as esc
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from textdp.errors import TextDPError

err_console = Console(stderr=True)
out_console = Console()

ISSUE_URL = "https://github.com/textdp/textdp/issues"


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {esc(str(message))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def handle_errors(func: Callable) -> Callable:
    """Decorator for command functions: TextDPError -> one line + exit 2; other
    exceptions -> one line + exit 1 with a hint (traceback with TEXTDP_DEBUG=1)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        import os

        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except TextDPError as exc:
            fail(str(exc), 2)
        except KeyboardInterrupt:
            fail("interrupted; no output was written", 130)
        except MemoryError:
            fail("out of memory; try a smaller input or sizes", 1)
        except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
            if os.environ.get("TEXTDP_DEBUG"):
                raise
            fail(
                f"unexpected {type(exc).__name__}: {str(exc)[:200]} (a bug: rerun with TEXTDP_DEBUG=1 "
                f"and report it at {ISSUE_URL})",
                1,
            )

    return wrapper


class _ErrorClearingProgress(Progress):
    """A progress display that removes itself when the block fails, so an error is one line
    (no half-drawn "0/?" bar above it)."""

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is not None:
            self.live.transient = True
        return super().__exit__(exc_type, exc_val, exc_tb)


def progress(quiet: bool = False, transient: bool = False) -> Progress:
    """A rich progress bar on stderr (disabled with ``quiet``); it disappears when the block raises."""
    return _ErrorClearingProgress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=quiet,
        transient=transient,
    )


def print_json(obj: Any) -> None:
    """Machine-readable result on stdout (``--json``)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
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
def opt_seed():
    return typer.Option(None, "--seed", help="Seed for a reproducible research run (recorded in the card; not for release). Default: cryptographically secure randomness.")


def opt_output(help_text: str = "Output path."):
    return typer.Option(None, "--output", "-o", help=help_text)


def opt_overwrite():
    return typer.Option(False, "--overwrite", help="Replace an existing output.")


def opt_quiet():
    return typer.Option(False, "--quiet", "-q", help="No progress bars or summaries on stderr.")


def opt_json():
    return typer.Option(False, "--json", help="Print a machine-readable summary on stdout.")
