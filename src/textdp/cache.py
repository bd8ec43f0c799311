"""textdp's cache folder: ``$TEXTDP_CACHE`` or ``~/.cache/textdp``.

Trained models (MLM, causal LM, attack targets), parsed built-in datasets and
budget ledgers live here, each in its own sub-folder. Nothing in it is needed for
correctness: deleting the folder only costs recomputation (ledgers excepted,
see :mod:`textdp.accounting.ledger`).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir(sub: str | None = None, create: bool = True) -> Path:
    """``$TEXTDP_CACHE`` (default ``~/.cache/textdp``), or its sub-folder ``sub``."""
    root = Path(os.environ.get("TEXTDP_CACHE") or Path.home() / ".cache" / "textdp")
    path = root / sub if sub else root
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
