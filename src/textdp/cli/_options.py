"""Options that do not apply are refused, never silently ignored (issue 13, item 4).

Typer gives every option its default, so "was it given?" is asked of click's parameter source.
"""

from __future__ import annotations

import typer

__all__ = ["given", "option_name", "refuse_unused", "opt_device"]


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the parameter ``name`` (the function argument's name) was set on the command line or
    from the environment, as opposed to left at its default."""
    src = ctx.get_parameter_source(name)  # an enum of click's (typer may bring its own copy): compared by name
    return getattr(src, "name", None) in ("COMMANDLINE", "ENVIRONMENT")


def option_name(ctx: typer.Context, name: str) -> str:
    """The option's long flag as the user types it (``text_column`` -> ``--text-column``)."""
    for p in ctx.command.params:
        if p.name == name:
            return next((o for o in p.opts if o.startswith("--")), p.opts[0] if p.opts else name)
    return name


def opt_device(default: str = "cpu"):
    """The ``--device auto|cpu|cuda`` option (:mod:`textdp.models.device`), the same in every command."""
    from textdp.models.device import DEVICE_HELP

    return typer.Option(default, "--device", help=DEVICE_HELP)


def refuse_unused(ctx: typer.Context, why: str, *names: str) -> None:
    """Options that do not apply are refused, never silently ignored: the first of ``names`` given
    on the command line raises ParameterError "--option <why>" (one line, exit 2)."""
    from textdp.errors import ParameterError

    for name in names:
        if given(ctx, name):
            raise ParameterError(f"{option_name(ctx, name)} {why}")
