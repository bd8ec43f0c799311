"""``textdp mechanisms``: list the sanitizers with their papers, guarantees and parameters."""

from __future__ import annotations

import typer

from textdp.cli._common import esc, handle_errors, opt_json, out_console, print_json

__all__ = ["register", "mechanisms_command"]


@handle_errors
def mechanisms_command(json_out: bool = opt_json()):
    """List the text sanitizers (`textdp sanitize --mechanism NAME`): paper, guarantee and own parameters
    (pass them with --param KEY=VALUE)."""
    from textdp.mechanisms.registry import registry
    from textdp.sanitize import MECHANISMS, mechanism_parameters

    reg = registry()
    rows = []
    for name, cls in MECHANISMS.items():
        params = {k: (None if p.default is p.empty else p.default) for k, p in mechanism_parameters(name).items()}
        rows.append({"name": name, "description": reg[name].description, "paper": cls.paper,
                     "level": "document" if cls.document_level else "token",
                     "exact_law": bool(cls.exact_probabilities), "parameters": params})
    if json_out:
        print_json(rows)
        return rows
    from rich.table import Table

    t = Table(title="text sanitizers (textdp sanitize INPUT -m NAME -e EPS [-P KEY=VALUE ...])")
    for c in ("name", "guarantee and law", "paper", "parameters (defaults)"):
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(r["name"], esc(r["description"]), esc(r["paper"]),
                  esc(", ".join(f"{k}={v}" for k, v in r["parameters"].items()) or "-"))
    out_console.print(t)
    return rows


def register(app: typer.Typer) -> None:
    app.command("mechanisms")(mechanisms_command)
