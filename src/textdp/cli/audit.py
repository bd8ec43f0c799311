"""``textdp audit``: empirical privacy-loss audit (Habernal 2022 sanity check with confidence bounds).

Thin layer over :mod:`textdp.audit`: parsing, progress, printing.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from typer.core import TyperGroup

from textdp.cli._common import engine_from_options, opt_engine, opt_scheduler, err_console, handle_errors, opt_json, opt_overwrite, opt_quiet, opt_seed, out_console, print_json, progress
from textdp.cli._common import parse_floats
from textdp.errors import ParameterError


_floats = parse_floats  # shared strict comma-list parser (textdp.cli._common)


_MAX_DIMS = 10**6
_MAX_SAMPLES = 10**12


def _ints(text: str, name: str) -> list[int]:
    vals = _floats(text, name)
    for v in vals:
        if not math.isfinite(v) or v != int(v) or v < 1:
            raise ParameterError(f"{name} must be positive integers, got {text!r}")
        if name == "--dims" and v > _MAX_DIMS:
            raise ParameterError(f"{name} must be at most {_MAX_DIMS:.0e}, got {text!r}")
    return [int(v) for v in vals]


def _count(text: str, name: str) -> int:
    try:
        v = float(text)
    except ValueError:
        raise ParameterError(f"{name} must be a positive integer such as 1e6, got {text!r}") from None
    if not math.isfinite(v) or v < 1 or v != int(v):
        raise ParameterError(f"{name} must be a positive integer such as 1e6, got {text!r}")
    if v > _MAX_SAMPLES:
        raise ParameterError(f"{name} must be at most {_MAX_SAMPLES:.0e}, got {text!r}")
    return int(v)


@contextlib.contextmanager
def _user_stdout_to_stderr():
    """Around every call into the user's code (importing a ``-m module:function`` mechanism, calling it,
    its ``claimed_epsilon``): what it prints goes to stderr, so stdout holds only the results and
    ``--json`` stays valid JSON. Python-level (``print``, ``sys.stdout``, also from worker threads)
    and, when stdout is the process's own, file-descriptor level (subprocesses, ``os.write(1, ...)``,
    C extensions; output C code keeps in its own stdio buffer past the call is not caught)."""
    sys.stdout.flush()
    saved = None
    if sys.stdout is sys.__stdout__:
        try:
            fd = sys.stdout.fileno()
            sys.stderr.flush()
            saved = os.dup(fd)
            os.dup2(sys.stderr.fileno(), fd)
        except (AttributeError, OSError, ValueError):  # no real file descriptors (embedded, captured)
            if saved is not None:
                os.close(saved)
            saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        try:
            sys.stderr.flush()
        finally:
            if saved is not None:
                os.dup2(saved, fd)
                os.close(saved)


def _wide():
    """stdout console at least 100 columns wide (tables are not squeezed into 80 when piped)."""
    if out_console.is_terminal or out_console.width >= 100:
        return out_console
    from rich.console import Console

    return Console(width=110, highlight=False)


def _cell_text(c, fmt) -> str:
    s = fmt(c.epsilon_hat, c.ceiling)
    if c.violation:
        return f"[bold red]{s} ✗[/]"
    return s


def _print_float_notes(names) -> None:
    """One line per audited zoo mechanism that is not float-safe: its 'ok' is about the ideal law only."""
    from textdp.mechanisms.zoo import ZOO

    for m in dict.fromkeys(names):
        cls = ZOO.get(m)
        probe = cls(1.0, 1) if cls is not None else None
        if probe is not None and not probe.float_safe:
            out_console.print(f"{m}: {probe.float_note}; an 'ok' here is about that ideal law, not its float outputs.",
                              highlight=False, markup=False)


def _print_simulation_rng(settings: dict) -> None:
    """The generator the audit's noise came from: a simulation, not a release (textdp.noise.simulation_rng)."""
    out_console.print(f"simulation_rng: {settings['simulation_rng']}", highlight=False, markup=False)


def _print_cells(cells, alpha: float, settings: dict) -> None:
    from rich import box

    from textdp.audit import format_epsilon as fmt

    ns = sorted({c.samples for c in cells})
    t = Table(title=f"audit: N={', '.join(f'{v:,}' for v in ns)} records per dataset; [ε_lo, ε_hi] "
                    f"{100 * (1 - alpha):g}% (majority vote); thr = selected-threshold attack",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("mechanism", "ε", "n", "ε̂", "ε_lo", "ε_hi", "oracle", "thr ε_lo", "verdict"):
        t.add_column(col, justify="left" if col in ("mechanism", "verdict") else "right")
    for c in cells:
        lo = f"[bold red]{c.epsilon_lower:.4f}[/]" if c.violation else f"{c.epsilon_lower:.4f}"
        strong = "–" if not c.strong else (
            f"[bold red]{c.strong.epsilon_lower:.4f}[/]" if c.strong_violation else f"{c.strong.epsilon_lower:.4f}")
        verdict = "[bold red]VIOLATION[/]" if c.any_violation else "[green]ok[/]"
        t.add_row(c.mechanism, f"{c.epsilon:.4g}", str(c.n), fmt(c.epsilon_hat, c.ceiling), lo,
                  fmt(c.epsilon_upper, c.ceiling), ("∞" if math.isinf(c.oracle) else f"{c.oracle:.4f}") if c.oracle is not None else "–",
                  strong, verdict)
    _wide().print(t)
    out_console.print("ok = not refuted at this confidence (an audit can refute a DP claim, never certify one); "
                      "red = a lower bound above the claimed ε", highlight=False)
    _print_simulation_rng(settings)
    _print_float_notes(c.mechanism for c in cells)


def _print_grid(result) -> None:
    from rich import box

    from textdp.audit import format_epsilon as fmt
    from textdp.audit.grid import summary_text

    mechs = list(dict.fromkeys(c.mechanism for c in result.cells))
    dims = sorted({c.n for c in result.cells})
    for m in mechs:
        cs = [c for c in result.cells if c.mechanism == m]
        broken = " (BROKEN replica)" if any(c.broken for c in cs) else ""
        t = Table(title=f"{m}{broken}: ε̂ (majority vote); ✗ = violation (ε_lo > ε)", title_justify="left",
                  box=box.SIMPLE_HEAD)
        t.add_column("ε", justify="right")
        for d in dims:
            t.add_column(f"n={d}", justify="right")
        for e in sorted({c.epsilon for c in cs}):
            row = {c.n: c for c in cs if c.epsilon == e}
            t.add_row(f"{e:g}", *[_cell_text(row[d], fmt) if d in row else "" for d in dims])
        _wide().print(t)
    out_console.print(summary_text(result), highlight=False)
    _print_simulation_rng(result.settings)
    _print_float_notes(mechs)


#: ``textdp audit SUBCOMMAND``: audits added beside ``textdp audit -m …`` / ``--grid …``, each in its own
#: module (which defines ``register(app)`` registering exactly that name), imported only when it runs or
#: its help is shown; a name whose module does not exist (yet) is not listed.
SUBCOMMANDS = {
    "sanitizer": "textdp.cli.audit_sanitizer",
    "dpsgd": "textdp.cli.audit_dpsgd",
}


class _AuditCommand(TyperGroup):
    """``textdp audit``: a command with its own options (``-m``, ``--grid``, ...: the vector-mechanism
    audit, run when no subcommand is given) and the subcommands of :data:`SUBCOMMANDS`."""

    def __init__(self, **kwargs):
        kwargs["invoke_without_command"] = True
        super().__init__(**kwargs)

    def list_commands(self, ctx) -> list[str]:
        import importlib.util

        return [n for n, mod in SUBCOMMANDS.items() if importlib.util.find_spec(mod) is not None]

    def get_command(self, ctx, cmd_name: str):
        import importlib
        import importlib.util

        cmd = self.commands.get(cmd_name)
        mod = SUBCOMMANDS.get(cmd_name)
        if cmd is not None or mod is None or importlib.util.find_spec(mod) is None:
            return cmd
        from typer.main import get_command

        sub = typer.Typer(add_completion=False)
        importlib.import_module(mod).register(sub)
        cmd = self.commands[cmd_name] = get_command(sub)
        return cmd


def register(app: typer.Typer) -> None:
    @app.command("audit", cls=_AuditCommand)
    @handle_errors
    def audit(
        ctx: typer.Context,
        mechanism: Optional[str] = typer.Option(
            None, "--mechanism", "-m",
            help="Zoo mechanism (laplace, adept, dptext, copy, random, wrong-sensitivity, laplace-secure), "
                 "or your own as package.module:function / file.py:function: f(records (N,n) float array, "
                 "numpy Generator) -> (N,n) array.",
        ),
        epsilon: Optional[str] = typer.Option(None, "--epsilon", "-e", help="Claimed ε per record (comma list allowed)."),
        dims: Optional[str] = typer.Option(None, "--dims", "-n", help="Record dimensions n, comma-separated (default 1,8,128; grid: its own)."),
        samples: Optional[str] = typer.Option(None, "--samples", "-N", help="Records per dataset (e.g. 1e7). Default 1e6; grid default 1e7."),
        grid: Optional[str] = typer.Option(None, "--grid", help="Run a published grid: habernal2022."),
        alpha: float = typer.Option(0.05, "--alpha", help="1 − alpha is the confidence of each lower bound."),
        fast: Optional[bool] = typer.Option(None, "--fast/--full-noise", help="Zoo mechanisms only: draw the exact "
                                  "sufficient statistic (Binomial/Multinomial bit counts; same law as the full noise, "
                                  "checked by a test) instead of full noise arrays. Default: --fast for --grid with zoo "
                                  "mechanisms, --full-noise otherwise."),
        statistic: str = typer.Option("bits", "--statistic", help="Statistic of the threshold attack: bits or clipped-mean (full noise only)."),
        no_strong: bool = typer.Option(False, "--no-strong", help="Only the paper's majority-vote attack."),
        workers: Optional[int] = typer.Option(None, "--workers", help="Threads (default: all cores); with "
                                              "--engine dask|spark, the engine's workers."),
        engine: str = opt_engine("the cells of --grid (one task per mechanism × ε × dimension)"),
        scheduler: Optional[str] = opt_scheduler(),
        fail_on_violation: bool = typer.Option(False, "--fail-on-violation", help="Exit with status 3 if any cell is a violation (for CI)."),
        list_mechanisms: bool = typer.Option(False, "--list", help="List the auditable built-in mechanisms and exit."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Folder for the JSON and CSV of every "
                                              "cell (and the plot with --plot)."),
        plot: bool = typer.Option(False, "--plot", help="Also write STEM.png into --output: ε̂ against n per "
                                  "mechanism (imports matplotlib: a few seconds)."),
        seed: Optional[int] = opt_seed(),
        overwrite: bool = opt_overwrite(),
        quiet: bool = opt_quiet(),
        json_out: bool = opt_json(),
    ):
        """Audit a mechanism's privacy claim empirically: neighbouring records 0^n vs 1^n, a reconstruction
        attack, ε̂ with an exact lower confidence bound, and a verdict (violation iff ε_lo > claimed ε).

        Examples: textdp audit -m laplace -e 1 --dims 1,8,128 --samples 1e7;
        textdp audit --grid habernal2022 --output results/ --plot;
        textdp audit -m mymech.py:privatize -e 2 --dims 16.
        Other audits are subcommands: textdp audit sanitizer NAME (metric-DP audit of a word sanitizer);
        textdp audit dpsgd (one-run audit of DP-SGD on a text classifier).
        """
        from textdp.cli._options import refuse_unused

        if ctx.invoked_subcommand is not None:  # `textdp audit SUBCOMMAND ...`: this command's options do not apply
            refuse_unused(ctx, f"belongs to `textdp audit` itself; give the options of `textdp audit "
                               f"{ctx.invoked_subcommand}` after its name", *ctx.params)
            return
        from textdp import audit as A
        from textdp.audit.grid import GRIDS, GridResult, grid_work, write_grid_outputs

        if list_mechanisms:  # options that do not apply are refused, never silently ignored
            refuse_unused(ctx, "does not apply to --list (it prints the auditable mechanisms and exits)",
                          *(p for p in ctx.params if p not in ("list_mechanisms", "quiet")))
        if output is None:
            refuse_unused(ctx, "replaces existing files under --output; no --output is given", "overwrite")
            refuse_unused(ctx, "writes the plot into --output; no --output is given", "plot")
        if no_strong:
            refuse_unused(ctx, "is the statistic of the threshold attack, which --no-strong leaves out", "statistic")
        if list_mechanisms:
            from textdp.mechanisms.registry import registry

            for name, info in sorted(registry().items()):
                if info.capability == "audit":
                    flag = " [BROKEN: " + info.reason + "]" if info.broken else ""
                    out_console.print(f"{name[len('audit.'):]:<18} {info.description}{flag}", highlight=False, markup=False)
            return
        if grid is None and mechanism is None:
            raise ParameterError("give --mechanism NAME (with --epsilon) or --grid habernal2022; see textdp audit --help")
        if grid is not None and grid not in GRIDS:
            raise ParameterError(f"unknown grid {grid!r}; known: {', '.join(GRIDS)}")
        if statistic not in A.core.STATISTICS:
            raise ParameterError(f"--statistic must be one of {', '.join(A.core.STATISTICS)}, got {statistic!r}")
        if fast is None:  # the published grid at N = 1e7 is hours with full noise; its exact shortcut is seconds
            fast = grid is not None and (mechanism is None or ":" not in mechanism)
        sampler = "sufficient-statistic" if fast else "full"
        on_engine = engine.strip().lower() != "local" or scheduler is not None
        if on_engine and grid is None:
            refuse_unused(ctx, "runs the cells of --grid on an engine; give --grid habernal2022", "engine", "scheduler")
        if fast and not on_engine:
            refuse_unused(ctx, "sets the threads of full-noise sampling; --fast (the default for --grid with zoo "
                               "mechanisms) draws the sufficient statistic in one step", "workers")
        N = _count(samples, "--samples") if samples is not None else None
        stem = grid or "audit"
        if output is not None:
            from textdp.data.io import check_output_path

            if output.exists() and not output.is_dir():
                raise ParameterError(f"--output {str(output)!r} must be a folder")
            for ext in ("json", "csv") + (("png",) if plot else ()):  # also: the folder can be made and written
                check_output_path(output / f"{stem}.{ext}", overwrite=overwrite, create_parents=True)

        # the user's mechanism (imported, called, asked its claimed ε) may print: never onto stdout
        with _user_stdout_to_stderr():
            if grid is not None:
                spec = GRIDS[grid]
                mechs = [mechanism] if mechanism else list(spec.mechanisms)
                epss = _floats(epsilon, "--epsilon") if epsilon else list(spec.epsilons)
                dd = _ints(dims, "--dims") if dims else list(spec.dims)
                N = N or spec.samples
                work = grid_work(mechs, dd, epss, N, strong=not no_strong)
                if not fast and not quiet and work > 5e9:
                    err_console.print(f"note: the full-noise grid draws {work:.2g} noise values (hours on 2 cores); "
                                      f"--fast draws the exact sufficient statistic instead", highlight=False)
                eng = engine_from_options(engine, scheduler, workers)
                try:
                    with progress(quiet) as bar:
                        task = bar.add_task(f"audit {grid}" + (f" on {eng.name}" if eng else ""), total=work)
                        result = A.run_grid(grid, samples=N, mechanisms=mechs, epsilons=epss, dims=dd,
                                            alpha=alpha, seed=seed, sampler=sampler, statistic=statistic,
                                            strong=not no_strong, workers=None if eng else workers,
                                            progress=lambda k: bar.advance(task, k), engine=eng)
                finally:
                    if eng is not None:
                        eng.close()
            else:
                if epsilon is None and ":" not in mechanism:
                    raise ParameterError("give the claimed --epsilon for --mechanism")
                # no --epsilon for your own mechanism: its claimed_epsilon(n) or guarantee.epsilon is used
                epss = _floats(epsilon, "--epsilon") if epsilon is not None else [None]
                dd = _ints(dims or "1,8,128", "--dims")
                N = N or 10**6
                from textdp.audit.core import _cell_seeds

                seeds = _cell_seeds(seed, len(epss) * len(dd))
                if ":" in mechanism:  # import the user's mechanism once, not per cell
                    mechanism = A.core.load_user_mechanism(mechanism)
                cells = []
                per = N + (0 if no_strong else math.ceil(0.1 * N))
                with progress(quiet) as bar:
                    label = str(getattr(mechanism, "name", mechanism)).rsplit(os.sep, 1)[-1]  # file.py:function, not its folders
                    task = bar.add_task(f"audit {label}", total=2 * per * sum(dd) * len(epss))
                    i = 0
                    for e in epss:
                        for d in dd:
                            cells.append(A.audit_mechanism(
                                mechanism, e, d, N, alpha, seeds[i], strong=not no_strong, statistic=statistic,
                                sampler=sampler, workers=workers, progress=lambda k, d=d: bar.advance(task, k * d)))
                            i += 1
                from textdp.noise import simulation_source

                result = GridResult("audit", cells, {}, sum(c.wall_s for c in cells),
                                    {"grid": None, "samples": N, "alpha": alpha, "sampler": sampler,
                                     "statistic": statistic, "strong": not no_strong,
                                     "seed": simulation_source(seed).describe(),
                                     "simulation_rng": A.simulation_statement(seed)})

        paths = write_grid_outputs(result, output, overwrite=overwrite, stem=stem, plot=plot) if output is not None else []
        if json_out:
            print_json({"settings": result.settings, "wall_s": result.wall_s, "outputs": [str(p) for p in paths],
                        "flagged": result.flagged(), "cells": result.rows()})
        else:
            if grid is not None:
                _print_grid(result)
            else:
                _print_cells(result.cells, alpha, result.settings)
            if not quiet:
                for p in paths:
                    err_console.print(f"wrote {p}", highlight=False, markup=False)
        if fail_on_violation and any(c.any_violation for c in result.cells):
            raise typer.Exit(3)
