"""``textdp budget``: show and set a dataset's privacy budget (the ledger).

Currencies (see :mod:`textdp.accounting.ledger`): a budget names the currency it caps
(``--currency metric/token``, ``dp/document/replace-one``, ...); without ``--currency``
it caps every currency that has no budget of its own, each separately. Every term is
charged: ε (and δ) in a DP currency; ε and the additive ε₀ in a metric currency.
"""

from __future__ import annotations

import math
import os
from typing import Optional

import typer

from textdp.cli._common import esc, handle_errors, opt_json, out_console, print_json

budget_app = typer.Typer(
    help="Privacy-budget ledger of a dataset: what was released, what is left. Each guarantee spends one "
         "currency (its composition group): metric/token (SanText, SanText+, FBDD: the metric ε per unit of "
         "embedding distance AND the additive ε₀ per token, e.g. SanText+'s ln(1/p), both summed over releases), "
         "dp/document/replace-one (DP per document), dp/token/replace-one (DP or LDP per token), group/token "
         "(CusText, CusText+: ε-DP between words of the same group only; no wildcard budget covers it), ... A budget "
         "names its currency (--currency); one set without it caps every currency without its own budget. "
         "Under a budget, a release with an infinite term (SanText+ with p = 0) or in a currency no budget "
         "names is refused unless --force (recorded as forced, stated on the card).",
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


def announce_forced(led, reservation: str) -> dict:
    """For the releasing commands (sanitize, topics train) after ``led.reserve(..., force=True)``:
    when the reservation overrode a refusal, print one warning line on stderr and return the
    card fields that state it (``{"forced": True, "forced_reason": ...}``); otherwise ``{}``."""
    from textdp.cli._common import err_console

    reason = led.forced_reason(reservation)
    if reason is None:
        return {}
    err_console.print("[bold yellow]warning:[/] released with --force although the budget refuses it (recorded as "
                      f"forced in the ledger and on the card): {esc(reason)}",
                      highlight=False, soft_wrap=True)
    # the card travels with the release: the refusal's wording names the dataset (a file's path), the
    # curator's information, so the card says "the dataset" (the ledger keeps the original wording)
    card_reason = reason
    for name in sorted({str(led.dataset), os.path.abspath(str(led.dataset)), os.path.basename(str(led.dataset))}
                       - {""}, key=len, reverse=True):
        card_reason = card_reason.replace(repr(name), "the dataset").replace(name, "the dataset")
    return {"forced": True, "forced_reason": card_reason}


#: the card's statement for a release made with --no-ledger (a parameter-level fact: on every such card,
#: whether or not the dataset has a budget)
NOT_RECORDED = ("not recorded in any privacy-budget ledger (--no-ledger): its spend is not counted against any "
                "budget of the dataset")


def announce_unrecorded(dataset: str, ledger_dir=None) -> bool:
    """For ``--no-ledger`` (sanitize, topics train): when ``dataset`` has a budget in its ledger, print one warning
    line on stderr (this release is not counted against it); returns whether it printed. Silent
    when the dataset has no ledger or no budget, or the ledger cannot be read."""
    from textdp.cli._common import err_console
    from textdp.errors import TextDPError

    try:
        from textdp.accounting.ledger import Ledger

        led = Ledger(dataset, ledger_dir)
        budgets = led.budgets() if led.exists() else {}
    except (TextDPError, OSError, ValueError):
        return False
    if not budgets:
        return False
    from textdp.accounting.ledger import Budget

    caps = "; ".join(Budget.describe(b) for b in budgets.values())
    err_console.print(f"[bold yellow]warning:[/] --no-ledger: this release is not recorded in the budget ledger of "
                      f"the dataset, which has a budget ({esc(caps)}): its spend is not counted; the card says it is "
                      "not recorded", highlight=False, soft_wrap=True)
    return True


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
    A folder or a glob of parts is identified by its manifest (every part hashed on this machine:
    the same ledger as ``textdp sanitize FOLDER``). A named pipe or a device, and a ledger folder
    that is a file, are refused.
    """
    from pathlib import Path

    from textdp.accounting.ledger import Ledger
    from textdp.data.datasets import is_builtin, list_datasets
    from textdp.errors import InputError

    from textdp.data.parts import is_parts_input

    if is_parts_input(dataset):  # a folder or glob of parts: identified by its manifest, hashed here (issue 16)
        _check_ledger_dir(ledger_dir)
        return Ledger(dataset, ledger_dir)
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
    document_tokens: Optional[int] = typer.Option(
        None, "--document-tokens", help="Also show the worst case per document of this many tokens (tokens "
        "replaced position-wise: a per-token figure times L). Default: no per-document column."),
    as_json: bool = opt_json(),
):
    """Show the budgets, the spend of every term per currency, the worst case in plain DP and every release."""
    from rich.table import Table

    from textdp.errors import ParameterError

    if document_tokens is not None and document_tokens < 1:
        raise ParameterError(f"--document-tokens must be a positive number of tokens, got {document_tokens}")
    led = _open(dataset, ledger_dir, creating=False)
    _check_not_deleted(led, dataset)
    summary = led.summary(document_tokens=document_tokens)
    if as_json:
        summary["release_log"] = [
            {k: e.get(k) for k in ("time", "command", "group", "guarantee", "input_sha256", "seeded", "forced",
                                   "forced_reason")}
            for e in led.releases()
        ]
        summary["open_reservation_log"] = [
            {k: e.get(k) for k in ("id", "time", "command", "group", "guarantee", "pid", "host", "outputs")}
            for e in led.open_reservations()
        ]
        print_json(summary)
        return
    out_console.print(f"dataset: {dataset}  (ledger {summary['ledger']})", highlight=False, markup=False)
    budgets = summary["budgets"]
    out_console.print("budget: " + ("; ".join(_budget_text(b) for b in budgets.values()) if budgets
                                    else "none set (textdp budget set DATASET --epsilon E [--currency C])"),
                      highlight=False, markup=False)
    if not summary["chain_ok"]:
        out_console.print("[bold red]warning:[/] the ledger's hash chain is broken: it was edited by hand")
    if not summary["groups"]:
        out_console.print("no releases recorded")
        return
    L = document_tokens
    t = Table(title="spend per currency (every term charged)")
    cols = ["currency", "composed guarantee", "spent", "budget", "remaining", "worst case ε per token"]
    if L is not None:
        cols.append(f"worst case ε per document ({L} tokens)")
    for c in cols:
        t.add_column(c, no_wrap=c == "currency")
    for key, g in summary["groups"].items():
        spent = f"ε {_fmt(g['epsilon'])}" + (f", ε₀ {_fmt(g['epsilon0'])}" if "epsilon0" in g else
                                             (f", δ {_fmt(g['delta'])}" if g.get("delta") else ""))
        b = g["budget"]
        if b is None:
            cap = "not budgeted (refused without --force)" if not g["budgeted"] else "-"
            rem = "-"
        else:
            cap = _budget_text(b, currency=False)
            rem = f"ε {_fmt(g['remaining_epsilon'])}" + (
                f", ε₀ {_fmt(g['remaining_epsilon0'])}" if "remaining_epsilon0" in g else "")
        wc = g["worst_case_epsilon_per_token"]
        row = [key, g["describe"], spent, cap, rem, _fmt(wc) if wc is not None else g["worst_case_note"]]
        if L is not None:
            wd = g.get("worst_case_epsilon_per_document")
            row.append(_fmt(wd) if wd is not None else g["worst_case_note"])
        t.add_row(*(esc(str(x)) for x in row))
    out_console.print(t)
    w = summary["worst_case"]
    if w["per_token"] is not None:
        out_console.print(f"worst case over every currency, in plain DP: ε = {_fmt(w['per_token'])} per token"
                          + (f", ε = {_fmt(w['per_document'])} per document of {L} tokens"
                             if L is not None and w.get("per_document") is not None else ""),
                          highlight=False, markup=False, soft_wrap=True)
    else:
        out_console.print("worst case over every currency, in plain DP: not computed (a currency has no figure; "
                          "see its row)", highlight=False, markup=False, soft_wrap=True)
    r = Table(title=_plural(summary["releases"], "release"))
    for c in ("time", "command", "guarantee", "currency", "seeded", "forced"):
        r.add_column(c)
    from textdp.accounting.guarantees import guarantee_from_dict

    for e in led.releases():
        r.add_row(e.get("time", ""), e.get("command", ""), guarantee_from_dict(e["guarantee"]).describe(),
                  e.get("group", ""), "yes" if e.get("seeded") else "no", "yes" if e.get("forced") else "no")
    out_console.print(r)
    opened = led.open_reservations()
    if opened:
        o = Table(title=f"{_plural(len(opened), 'open reservation')} (counted as spent: a release in progress, or a run "
                        "killed before it could record or cancel)")
        for c in ("id", "time", "command", "guarantee", "process"):
            o.add_column(c)
        for e in opened:
            o.add_row(str(e.get("id", ""))[:12], e.get("time", ""), e.get("command", ""),
                      guarantee_from_dict(e["guarantee"]).describe(), esc(_process_text(e)))
        out_console.print(o)
        out_console.print("an abandoned reservation (its run is gone): `textdp budget reservations DATASET` tells, "
                          "`textdp budget settle DATASET ID` closes it", highlight=False, markup=False, soft_wrap=True)


def _reservation_state(e: dict) -> dict:
    """What is known of an open reservation's run and release: ``process`` (running | gone |
    unknown), ``on_disk`` (the recorded outputs that exist), and what ``settle`` would do."""
    import socket

    from textdp.data.io import process_alive

    pid, host = e.get("pid"), e.get("host")
    if host is None or not isinstance(pid, int):
        process = "unknown"  # recorded before reservations named their machine
    elif host != socket.gethostname():
        process = "unknown"  # another machine: its processes cannot be checked from here
    else:
        process = "running" if (pid == os.getpid() or process_alive(pid)) else "gone"
    outputs = e.get("outputs")
    on_disk = [o for o in outputs or [] if os.path.lexists(o)]
    if outputs is None:
        settle, why = "commit", "its outputs were not recorded, so whether it reached disk is unknown (the safe side)"
    elif on_disk:
        settle, why = "commit", (f"{'its ' + ('card' if on_disk[0].endswith('.card.json') else 'output') + ' exists' if len(on_disk) == 1 else 'its output and card exist'}"
                                 f" ({', '.join(on_disk)}): a release that reached disk is spent")
    else:
        settle, why = "cancel", "no output or card of it exists: nothing was released"
    return {"process": process, "outputs": outputs, "on_disk": on_disk, "settle": settle, "why": why}


def _process_text(e: dict) -> str:
    st = _reservation_state(e)
    where = f"pid {e.get('pid')}" + (f" on {e['host']}" if e.get("host") else "")
    return {"running": f"{where}: running", "gone": f"{where}: gone (abandoned)",
            "unknown": f"{where}: cannot be checked from this machine"}[st["process"]]


@budget_app.command("reservations")
@handle_errors
def reservations(
    dataset: str = typer.Argument(..., help="Dataset: a file path or a built-in dataset name."),
    ledger_dir: Optional[str] = _opt_ledger_dir(),
    as_json: bool = opt_json(),
):
    """List the open reservations of DATASET: whether their run is still running or gone (abandoned:
    killed before it could record or cancel), what of their release is on disk, and what
    `textdp budget settle` would do with each."""
    from textdp.accounting.guarantees import guarantee_from_dict

    led = _open(dataset, ledger_dir, creating=False)
    _check_not_deleted(led, dataset)
    rows = []
    for e in led.open_reservations():
        st = _reservation_state(e)
        rows.append({"id": e.get("id"), "time": e.get("time"), "command": e.get("command"), "group": e.get("group"),
                     "guarantee": e.get("guarantee"), "pid": e.get("pid"), "host": e.get("host"),
                     "forced": bool(e.get("forced")), **st})
    if as_json:
        print_json({"dataset": dataset, "ledger": str(led.path), "open_reservations": rows})
        return
    if not rows:
        out_console.print(f"{dataset}: no open reservations", highlight=False, markup=False)
        return
    out_console.print(f"{_plural(len(rows), 'open reservation')} of {dataset} (each counted as spent until closed):",
                      highlight=False, markup=False, soft_wrap=True)
    for e, r in zip(led.open_reservations(), rows):
        would = (f"{r['settle']}: {r['why']}" if r["process"] != "running" else
                 "refused: its run is still running and closes it itself")
        for line in (f"{r['id']}  {r['time']}  {r['command']}",
                     f"  guarantee: {guarantee_from_dict(e['guarantee']).describe()}" + ("  (forced)" if r["forced"] else ""),
                     f"  process: {_process_text(e)}",
                     f"  settle would {would}"):
            out_console.print(line, highlight=False, markup=False, soft_wrap=True)
    out_console.print("close an abandoned one with `textdp budget settle DATASET ID` (an id prefix is enough)",
                      highlight=False, markup=False, soft_wrap=True)


@budget_app.command("settle")
@handle_errors
def settle(
    dataset: str = typer.Argument(..., help="Dataset: a file path or a built-in dataset name."),
    reservation: str = typer.Argument(..., help="The reservation's id, or a unique start of it (see `textdp budget "
                                      "reservations DATASET`)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Settle without asking for confirmation."),
    ledger_dir: Optional[str] = _opt_ledger_dir(),
    as_json: bool = opt_json(),
):
    """Close a reservation abandoned by a run that was killed (SIGKILL, power loss): cancel it when no
    output or card of its release exists (its budget is available again), otherwise commit its charge
    (a release that reached disk is spent). Refused while its run is still running. Recorded in the
    ledger."""
    import json as _json

    from textdp.accounting.guarantees import guarantee_from_dict
    from textdp.errors import InputError

    led = _open(dataset, ledger_dir, creating=False)
    _check_not_deleted(led, dataset)
    e = led.find_open_reservation(reservation)
    st = _reservation_state(e)
    rid = e["id"]
    if st["process"] == "running":
        raise InputError(f"reservation {rid[:12]} belongs to a run that is still running (pid {e.get('pid')} on this "
                         "machine): it records or cancels it itself; stop that run first")
    what = (f"reservation {rid[:12]} ({e.get('command', '')}, {guarantee_from_dict(e['guarantee']).describe()}, "
            f"{e.get('time', '')})")
    action = ("cancel it (its budget becomes available again)" if st["settle"] == "cancel" else
              "commit its charge (it stays spent, as a release)")
    if not yes:
        note = "" if st["process"] == "gone" else " Its run cannot be checked from this machine: make sure it has ended."
        try:
            ok = typer.confirm(f"{what}: {st['why']}. Settle it, i.e. {action}?{note}", default=False, err=True)
        except (typer.Abort, EOFError):
            ok = False
        if not ok:
            from textdp.cli._common import fail

            fail("not settled: nothing was changed (answer y, or pass --yes)", 1)
    card = None
    if st["settle"] == "commit":
        for o in st["on_disk"]:
            if o.endswith(".card.json"):
                try:
                    card = _json.loads(open(o, encoding="utf-8").read())
                except (OSError, ValueError):
                    card = None
    entry = led.settle(rid, commit=st["settle"] == "commit", reason=st["why"], card=card)
    result = {"dataset": dataset, "reservation": rid,
              "settled": {"cancel": "cancelled", "commit": "committed"}[st["settle"]],
              "reason": st["why"], "entry": entry.get("type")}
    if as_json:
        print_json(result)
        return
    out_console.print(f"settled {what}: " + ("cancelled: its budget is available again" if st["settle"] == "cancel"
                                             else "committed: its charge is recorded as a release")
                      + f" ({st['why']})", highlight=False, markup=False, soft_wrap=True)


@budget_app.command("set")
@handle_errors
def set_(
    dataset: str = typer.Argument(..., help="Dataset: a file path or a built-in dataset name."),
    epsilon: float = typer.Option(..., "--epsilon", help="Budget: the largest composed ε in the currency (metric "
                                  "currencies: per unit of distance)."),
    currency: Optional[str] = typer.Option(
        None, "--currency", help="The currency this budget caps: metric/token (metric ε and ε₀ per token: "
        "SanText, SanText+, FBDD), dp/document/replace-one (DP per document), dp/token/replace-one (DP or LDP per "
        "token), group/token (CusText, CusText+: ε and ε₀ per token between words of the same group), or another "
        "group key; short forms metric-token, dp-document, ldp-token, custext. Default: every currency "
        "without a budget of its own, each capped separately (the behaviour before currencies), except group/token, "
        "which only a budget naming it covers."),
    epsilon0: Optional[float] = typer.Option(None, "--epsilon0", help="Metric currencies: the largest composed "
                                             "additive ε₀ per token (SanText+'s ln(1/p) + sampler cost). "
                                             "Default: the --epsilon number."),
    delta: Optional[float] = typer.Option(None, "--delta", help="DP currencies: largest composed δ (approximate DP)."),
    ledger_dir: Optional[str] = _opt_ledger_dir(),
    as_json: bool = opt_json(),
):
    """Set (or change) the privacy budget of DATASET in one currency, or in every one without --currency.

    Later releases over it, with an infinite term, or in a currency no budget names are refused (unless --force).
    """
    from textdp.accounting.composition import parse_currency

    if currency is not None:
        currency = parse_currency(currency)  # a typo: one line before the ledger is opened
    led = _open(dataset, ledger_dir, creating=True)
    entry = led.set_budget(epsilon, delta, currency=currency, epsilon0=epsilon0)
    summary = led.summary()
    if as_json:
        print_json(summary)
        return
    from textdp.accounting.ledger import Budget

    out_console.print(f"budget of {dataset}: {_budget_text(Budget.from_entry(entry).to_dict())}",
                      highlight=False, markup=False)
    for key, g in summary["groups"].items():
        rem = g["remaining_epsilon"]
        rem0 = g.get("remaining_epsilon0")
        if g["budget"] is None:
            out_console.print(f"  {esc(str(key))}: spent ε = {_fmt(g['epsilon'])}, not budgeted: further releases "
                              "in it are refused without --force", highlight=False)
            continue
        over = (rem is not None and rem < 0) or (rem0 is not None and rem0 < 0)
        out_console.print(f"  {esc(str(key))}: spent ε = {_fmt(g['epsilon'])}"
                          + (f", ε₀ = {_fmt(g['epsilon0'])}" if "epsilon0" in g else "")
                          + f", remaining {_fmt(rem)}" + (f", ε₀ {_fmt(rem0)}" if rem0 is not None else "")
                          + ("  [bold red](already over budget)[/]" if over else ""), highlight=False)


def _budget_text(b: dict, currency: bool = True) -> str:
    """``ε = 5, ε₀ = 2 (metric/token)`` for a budget dict (``currency=False``: without the currency)."""
    text = f"ε = {b['epsilon']:g}"
    if b.get("delta"):
        text += f", δ = {b['delta']:g}"
    cur = b.get("currency")
    if b.get("epsilon0") is not None:
        text += f", ε₀ = {b['epsilon0']:g}"
    elif cur is None or str(cur).startswith(("metric/", "group/")):
        text += " (ε₀ capped by ε too)" if not currency else ""
    if currency:
        text += f" in {cur}" if cur else " in every currency without its own budget"
    return text


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
