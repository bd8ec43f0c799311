"""Attacks on text models and sanitised text.

Model inversion (Text Revealer, VTG, VMI): :mod:`textdp.attacks.inversion`.
Bayes-optimal inversion of token-level sanitization, its exact optimum
(:func:`bayes_optimum`) and the exact success of any decision prior
(:func:`expected_success`): :mod:`textdp.attacks.bayes`.
Heavy dependencies (torch, transformers) load only when an attack is used.
"""

__all__ = ["run_inversion", "write_report", "InversionConfig", "InversionReport", "bayes_optimum",
           "expected_success", "BayesInversion", "BayesSuccess"]

_INVERSION = ("run_inversion", "write_report", "InversionConfig", "InversionReport")
_BAYES = ("bayes_optimum", "expected_success", "BayesInversion", "BayesSuccess")


def __getattr__(name):  # lazy: importing textdp.attacks must not import torch
    if name in _INVERSION:
        from textdp.attacks import inversion

        return getattr(inversion, name)
    if name in _BAYES:
        from textdp.attacks import bayes

        return getattr(bayes, name)
    raise AttributeError(f"module 'textdp.attacks' has no attribute {name!r}")
