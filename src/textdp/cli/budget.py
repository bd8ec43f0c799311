"""``textdp budget``: show and set a dataset's privacy budget (the ledger)."""

from __future__ import annotations

import math
from typing import Optional

import typer

from textdp.cli._common import esc, handle_errors, opt_json, out_console, print_json

budget_app = typer.Typer(help="Privacy-budget ledger of a dataset: what was released, what is left.",
                         no_args_is_help=True)


def _opt_ledger_dir():
    return typer.Option(None, "--ledger-dir", help="Folder of the ledgers (default: $TEXTDP_LEDGER_DIR or "
                        "$TEXTDP_CACHE/ledgers).")


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.4g}"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    """``1 release``, ``2 releases`` (``plural`` for irregular words)."""
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


def _check_ledger_dir(ledger_dir) -> None:
    """InputError (one line) when the ledger folder (``--ledger-dir``, else $TEXTDP_LEDGER_DIR or
    the cache) or a folder above it is a file: nothing could ever be recorded there, so
    show/verify must not report an empty ledger under it."""
    from pathlib import Path

    import errno
    import os

    from textdp.accounting.ledger import ledger_dir as default_dir
    from textdp.data.io import describe_os_error
    from textdp.errors import InputError

    d = Path(ledger_dir) if ledger_dir is not None else default_dir()
    first = d
    while not first.exists() and first != first.parent and str(first.parent) not in ("", "."):
        first = first.parent
    if first.exists() and not first.is_dir():
        # the very line `budget set` (and sanitize, topics train) give when they try to create it
        code = errno.EEXIST if first == d else errno.ENOTDIR
        raise InputError(describe_os_error(OSError(code, os.strerror(code), str(d)), d, "write"))


def _orphan_heads(led) -> list:
    """``.head`` sidecars of this dataset's ledgers (any file name) whose ledger file is gone."""
    heads = {led.head_path}
    if led.directory.is_dir() and led.key != led.id:
        heads.update(led.directory.glob(f"*-{led.key}.jsonl.head"))
    return sorted(h for h in heads if h.exists() and not h.with_suffix("").exists())


def _check_not_deleted(led, dataset: str) -> None:
    """InputError when the dataset's ledger file was deleted but its ``.head`` is still there:
    the spend is unknown, so it must never be shown as "no releases"."""
    from textdp.errors import InputError

    if led.path.exists():
        return
    heads = _orphan_heads(led)
    if heads:
        ledger = heads[0].with_suffix("")
        raise InputError(f"privacy ledger {str(ledger)!r} is missing but its .head sidecar exists (the ledger was "
                         f"deleted): what was spent on {dataset[:200]!r} is unknown; restore the ledger from a backup")


def _open(dataset: str, ledger_dir, creating: bool):
    """The dataset's Ledger; InputError (exit 2, one line) for a typo.

    ``creating`` (``budget set``): the dataset must be an existing file or a built-in
    dataset name. Otherwise (show, verify) a plain name must also already have a ledger.
    A folder, a named pipe or a device, and a ledger folder that is a file, are refused.
    """
    from pathlib import Path

    from textdp.accounting.ledger import Ledger
    from textdp.data.datasets import is_builtin, list_datasets
    from textdp.errors import InputError

    if Path(dataset).is_dir():
        raise InputError(f"{dataset[:200]!r} is a folder; a budget protects one dataset file (the file you "
                         "pass to textdp sanitize or topics train)")
    if Path(dataset).exists() and not Path(dataset).is_file():
        raise InputError(f"{dataset[:200]!r} is not a regular file (a pipe or device); a budget protects one "
                         "dataset file, as textdp sanitize reads one: save it to a file first")
    _check_ledger_dir(ledger_dir)
    if Path(dataset).exists():
        return Ledger(dataset, ledger_dir)
    if is_builtin(dataset):
        return Ledger(dataset.strip(), ledger_dir)
    led = None
    if not creating:
        try:
            led = Ledger(dataset, ledger_dir)
        except Exception:  # a missing path or a bad name: reported below
            led = None
    if led is not None and (led.exists() or _orphan_heads(led)):
        return led  # a ledger made through the Python API under a plain name
    raise InputError(f"{dataset[:200]!r} is neither an existing file nor a built-in dataset "
                     f"({', '.join(list_datasets())})" + ("" if creating else " with a ledger"))


@budget_app.command("show")
@handle_errors
def show(
    dataset: str = typer.Argument(..., help="Dataset: a file path or a built-in dataset name."),
    ledger_dir: Optional[str] = _opt_ledger_dir(),
    as_json: bool = opt_json(),
):
    """Show the budget, the spend per guarantee group and every release of DATASET."""
    from rich.table import Table

    led = _open(dataset, ledger_dir, creating=False)
    _check_not_deleted(led, dataset)
    summary = led.summary()
    if as_json:
        summary["release_log"] = [
            {k: e.get(k) for k in ("time", "command", "group", "guarantee", "input_sha256", "seeded", "forced")}
            for e in led.releases()
        ]
        summary["open_reservation_log"] = [
            {k: e.get(k) for k in ("id", "time", "command", "group", "guarantee", "pid")}
            for e in led.open_reservations()
        ]
        print_json(summary)
        return
    b = summary["budget"]
    out_console.print(f"dataset: {dataset}  (ledger {summary['ledger']})", highlight=False, markup=False)
    out_console.print("budget: " + (f"ε = {b['epsilon']:g}" + (f", δ = {b['delta']:g}" if b["delta"] else "")
                                    if b else "none set (textdp budget set DATASET --epsilon E)"), highlight=False)
    if not summary["chain_ok"]:
        out_console.print("[bold red]warning:[/] the ledger's hash chain is broken: it was edited by hand")
    if not summary["groups"]:
        out_console.print("no releases recorded")
        return
    t = Table(title="spend per guarantee group")
    for c in ("group", "composed guarantee", "ε spent", "δ", "ε remaining"):
        t.add_column(c)
    for key, g in summary["groups"].items():
        t.add_row(key, g["describe"], _fmt(g["epsilon"]), _fmt(g["delta"]), _fmt(g["remaining_epsilon"]))
    out_console.print(t)
    r = Table(title=_plural(summary["releases"], "release"))
    for c in ("time", "command", "guarantee", "seeded", "forced"):
        r.add_column(c)
    from textdp.accounting.guarantees import guarantee_from_dict

    for e in led.releases():
        r.add_row(e.get("time", ""), e.get("command", ""), guarantee_from_dict(e["guarantee"]).describe(),
                  "yes" if e.get("seeded") else "no", "yes" if e.get("forced") else "no")
    out_console.print(r)
    opened = led.open_reservations()
    if opened:
        o = Table(title=f"{_plural(len(opened), 'open reservation')} (counted as spent: a release in progress, or a run "
                        "killed before it could record or cancel)")
        for c in ("time", "command", "guarantee", "pid"):
            o.add_column(c)
        for e in opened:
            o.add_row(e.get("time", ""), e.get("command", ""), guarantee_from_dict(e["guarantee"]).describe(),
                      str(e.get("pid", "")))
        out_console.print(o)


@budget_app.command("set")
@handle_errors
def set_(
    dataset: str = typer.Argument(..., help="Dataset: a file path or a built-in dataset name."),
    epsilon: float = typer.Option(..., "--epsilon", help="Budget: the largest composed ε per guarantee group."),
    delta: Optional[float] = typer.Option(None, "--delta", help="Largest composed δ (approximate DP)."),
    ledger_dir: Optional[str] = _opt_ledger_dir(),
    as_json: bool = opt_json(),
):
    """Set (or change) the privacy budget of DATASET; later releases over it are refused."""
    led = _open(dataset, ledger_dir, creating=True)
    led.set_budget(epsilon, delta)
    summary = led.summary()
    if as_json:
        print_json(summary)
        return
    out_console.print(f"budget of {dataset}: ε = {epsilon:g}" + (f", δ = {delta:g}" if delta else ""),
                      highlight=False, markup=False)
    for key, g in summary["groups"].items():
        rem = g["remaining_epsilon"]
        out_console.print(f"  {esc(str(key))}: spent ε = {_fmt(g['epsilon'])}, remaining {_fmt(rem)}"
                          + ("  [bold red](already over budget)[/]" if rem is not None and rem < 0 else ""),
                          highlight=False)


@budget_app.command("verify")
@handle_errors
def verify(
    dataset: str = typer.Argument(..., help="Dataset: a file path or a built-in dataset name."),
    ledger_dir: Optional[str] = _opt_ledger_dir(),
):
    """Check the ledger's hash chain (exit 2 when an entry was edited or removed)."""
    from textdp.errors import InputError

    led = _open(dataset, ledger_dir, creating=False)
    _check_not_deleted(led, dataset)
    if not led.verify():
        raise InputError(f"ledger {led.path} fails its hash chain or its .head record: an entry was edited, "
                         "reordered or removed")
    out_console.print(f"ledger {led.path}: {_plural(len(led.entries()), 'entry', 'entries')}, hash chain ok", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(budget_app, name="budget")
