"""Attacks on text models and sanitised text.

Model inversion (Text Revealer, VTG, VMI): :mod:`textdp.attacks.inversion`.
Heavy dependencies (torch, transformers) load only when an attack is used.
"""

__all__ = ["run_inversion", "write_report", "InversionConfig", "InversionReport"]


def __getattr__(name):  # lazy: importing textdp.attacks must not import torch
    if name in ("run_inversion", "write_report", "InversionConfig", "InversionReport"):
        from textdp.attacks import inversion

        return getattr(inversion, name)
    raise AttributeError(f"module 'textdp.attacks' has no attribute {name!r}")
