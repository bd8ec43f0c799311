"""Command-line interface (Typer). Thin layer over the public Python API."""
