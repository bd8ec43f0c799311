"""Privacy cards: one JSON file beside every released output.

A card states what was released and under which guarantee, so a reader of the
output (or the budget ledger) never has to guess. Layout (``textdp-card/1``)::

    {
      "format": "textdp-card/1",
      "mechanism": "santext",             # registry name
      "parameters": {...},                # everything needed to rerun it
      "guarantee": {...},                 # Guarantee.to_dict(): kind, epsilon, unit, neighbours, ...
      "guarantee_text": "3·d(x,x′) metric LDP per token (...)",
      "units": {...},                     # what each parameter is per (token, document, ...)
      "data": {...},                      # input, sizes, vocabulary sizes, ...
      "output": "path/of/the/output",
      "randomness": {...},                # RandomSource.describe(): seeded?, generator, note
      "statistics": {...},                # mechanism-specific (e.g. N_w, S_w, per-document composition)
      "textdp_version": "0.1.0",
      "created": "2026-...Z",
      ...extra keys
    }

The card of output ``DIR/NAME.EXT`` is ``DIR/NAME.EXT.card.json`` (:func:`card_path`).
Non-finite numbers are written as the strings ``"inf"``, ``"-inf"``, ``"nan"`` so
the file is strict JSON; numpy scalars and arrays become plain JSON values.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["CARD_FORMAT", "card_path", "check_card_path", "build_card", "write_card", "read_card", "to_jsonable",
           "json_safe"]

CARD_FORMAT = "textdp-card/1"


def card_path(output: str | os.PathLike) -> Path:
    """``DIR/NAME.EXT.card.json`` for output ``DIR/NAME.EXT`` (the full file name is kept, so outputs
    that differ only in their suffix, e.g. ``r.fbdd.tsv`` and ``r.fbdd.txt``, get distinct cards)."""
    out = Path(output)
    return out.with_name(f"{out.name}.card.json")


def check_card_path(output: str | os.PathLike, overwrite: bool = False) -> Path:
    """The card path of ``output``; OutputError if it exists and ``overwrite`` is False,
    or if it is a folder or a link (never replaced, even with ``overwrite``)."""
    from textdp.errors import OutputError

    p = card_path(output)
    if p.is_dir() or p.is_symlink():
        raise OutputError(f"cannot write {str(p)!r}: it is a {'folder' if p.is_dir() else 'link'} (the privacy "
                          "card's path); move it away or choose another --output")
    if p.exists() and not overwrite:
        raise OutputError(f"privacy card {str(p)!r} already exists; pass --overwrite to replace it")
    return p


def to_jsonable(obj: Any) -> Any:
    """Plain-JSON version of ``obj`` (numpy values, dataclasses with ``to_dict``,
    paths, non-finite floats as strings)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return to_jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(v) for v in obj]
    if np is not None:
        if isinstance(obj, np.ndarray):
            return to_jsonable(obj.tolist())
        if isinstance(obj, np.generic):
            return to_jsonable(obj.item())
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, os.PathLike):
        return str(obj)
    return str(obj)


def build_card(
    *,
    mechanism: str,
    parameters: dict,
    guarantee=None,
    units: dict | None = None,
    data: dict | None = None,
    randomness: dict | None = None,
    statistics: dict | None = None,
    output: str | os.PathLike | None = None,
    **extra: Any,
) -> dict:
    """Assemble a card (a JSON-ready dict; see the module docstring for keys).

    guarantee: a :class:`textdp.accounting.Guarantee` (or its dict) or None.
    randomness: usually ``random_source(seed).describe()`` or a mechanism's
    ``seed_info``. Extra keyword arguments are added as top-level keys.
    """
    from textdp import __version__

    g_dict = None
    g_text = None
    if guarantee is not None:
        if hasattr(guarantee, "to_dict"):
            g_dict = guarantee.to_dict()
            g_text = guarantee.describe() if hasattr(guarantee, "describe") else None
        else:
            g_dict = dict(guarantee)
    card = {
        "format": CARD_FORMAT,
        "mechanism": mechanism,
        "parameters": parameters,
        "guarantee": g_dict,
        "guarantee_text": g_text,
        "units": units or {},
        "data": data or {},
        "output": str(output) if output is not None else None,
        "randomness": randomness or {},
        "statistics": statistics or {},
        "textdp_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    card.update(extra)
    return to_jsonable(card)


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float made standard JSON: NaN -> None (``null``),
    +/-inf -> the strings ``"inf"``/``"-inf"`` (as in the privacy cards,
    :func:`to_jsonable`). Recurses into dicts, lists, tuples and
    numpy arrays; numpy scalars become Python numbers; anything else is returned as is."""
    if isinstance(obj, float):  # numpy float64 too
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return float(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if type(obj).__module__ == "numpy":  # np.float32, np.int64, np.bool_, ndarray, ...
        tolist = getattr(obj, "tolist", None)
        if callable(tolist):
            return json_safe(tolist())
    return obj


def write_card(card: dict, output: str | os.PathLike, overwrite: bool = True) -> Path:
    """Write ``card`` atomically beside ``output`` (at :func:`card_path`); returns the path."""
    from textdp.data.io import atomic_output

    path = check_card_path(output, overwrite=overwrite)
    with atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps(to_jsonable(card), indent=2, ensure_ascii=False, allow_nan=False) + "\n",
                             encoding="utf-8")
    return path


def read_card(path: str | os.PathLike) -> dict:
    """Read a card (or the card of an output path)."""
    p = Path(path)
    if not p.name.endswith(".card.json"):
        p = card_path(p)
    return json.loads(p.read_text(encoding="utf-8"))
