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


def _open(dataset: str, ledger_dir, creating: bool):
    """The dataset's Ledger; InputError (exit 2, one line) for a typo.

    ``creating`` (``budget set``): the dataset must be an existing file or a built-in
    dataset name. Otherwise (show, verify) a plain name must also already have a ledger.
    """
    from pathlib import Path

    from textdp.accounting.ledger import Ledger
    from textdp.data.datasets import is_builtin, list_datasets
    from textdp.errors import InputError

    if Path(dataset).is_dir():
        raise InputError(f"{dataset[:200]!r} is a folder; a budget protects one dataset file (the file you "
                         "pass to textdp sanitize or topics train)")
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
    if led is not None and led.exists():
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
    r = Table(title=f"{summary['releases']} releases")
    for c in ("time", "command", "guarantee", "seeded", "forced"):
        r.add_column(c)
    from textdp.accounting.guarantees import guarantee_from_dict

    for e in led.releases():
        r.add_row(e.get("time", ""), e.get("command", ""), guarantee_from_dict(e["guarantee"]).describe(),
                  "yes" if e.get("seeded") else "no", "yes" if e.get("forced") else "no")
    out_console.print(r)
    opened = led.open_reservations()
    if opened:
        o = Table(title=f"{len(opened)} open reservations (counted as spent: a release in progress, or a run "
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
    if not led.verify():
        raise InputError(f"ledger {led.path} fails its hash chain or its .head record: an entry was edited, "
                         "reordered or removed")
    out_console.print(f"ledger {led.path}: {len(led.entries())} entries, hash chain ok", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(budget_app, name="budget")
