"""Text sanitization with token-level metric differential privacy.

Mechanisms (see :mod:`textdp.sanitize.mechanisms` for formulas and guarantees):

* :class:`SanText` -- exponential mechanism over embedding distances (Yue et al. 2021).
* :class:`SanTextPlus` -- SanText+ with sensitive / non-sensitive words (UMLDP).
* :class:`FBDD` -- multivariate-Laplace noise + nearest word (Feyisetan et al. 2020).

Quick start::

    from textdp.sanitize import SanText, sanitize_texts
    mech = SanText("glove-6b-50d", epsilon=3, rng=0)   # public output vocabulary; rng=0: reproducible, not for release
    sanitized, stats = sanitize_texts(texts, mech)      # stats: the curator's private counts (never on a card)

The default law of every sanitizer depends only on the token, its parameters and public data
(:mod:`textdp.sanitize.vocabulary`); draws come from per-record keyed streams
(:mod:`textdp.noise.keyed`); the layout rule is :func:`textdp.sanitize.corpus.glue`.

Other capabilities (attacks, evaluation, audit) use ``mech.probabilities(words)``
(exact ``(k, V_out)`` output distributions), ``mech.output_words``,
``mech.sample_rows`` and ``mech.guarantee``; and :func:`make_mechanism` to build
one by its registry name.
"""

from __future__ import annotations

from textdp.mechanisms.registry import MechanismInfo, register
from textdp.sanitize.mechanisms import (
    FBDD,
    OOV_POLICIES,
    OUTPUT_VOCABULARIES,
    SanitizeStats,
    SanText,
    SanTextPlus,
    TokenSanitizer,
)
from textdp.sanitize.stats import plausible_deniability, privacy_statistics

__all__ = [
    "SanText", "SanTextPlus", "FBDD", "TokenSanitizer", "SanitizeStats", "OOV_POLICIES", "OUTPUT_VOCABULARIES",
    "MECHANISMS", "make_mechanism", "sanitize_texts", "plausible_deniability", "privacy_statistics",
]

#: CLI / registry names -> classes
MECHANISMS = {"santext": SanText, "santext+": SanTextPlus, "fbdd": FBDD}


def make_mechanism(name: str, embeddings="glove-6b-50d", epsilon: float = 3.0, **kwargs) -> TokenSanitizer:
    """Build a sanitizer by name (``santext``, ``santext+``/``santextplus``, ``fbdd``).

    ``kwargs`` go to the class (``w``, ``p``, ``frequencies`` for SanText+;
    ``output_vocabulary``, ``oov``, ``rng``, ``block_bytes`` for all).
    Raises ParameterError for an unknown name or bad parameters.
    """
    from textdp.errors import ParameterError

    key = name.strip().lower().replace("plus", "+").replace("_", "")
    if key not in MECHANISMS:
        raise ParameterError(f"unknown mechanism {name!r}; use one of {', '.join(MECHANISMS)}")
    if key != "santext+":
        for k in ("w", "p", "frequencies"):
            if kwargs.get(k) is not None:
                raise ParameterError(f"--{k} applies only to santext+")
            kwargs.pop(k, None)
    return MECHANISMS[key](embeddings, epsilon, **kwargs)


def sanitize_texts(texts, mechanism: TokenSanitizer, progress=None) -> tuple[list[str], SanitizeStats]:
    """Sanitize ``texts`` (sequence of str) with ``mechanism``.

    Fits the mechanism on ``texts`` first when it is not fitted (corpus output
    vocabulary). Returns ``(sanitized_texts, stats)``; ``progress(k)`` is called
    as tokens finish. Per-token guarantee: ``mechanism.guarantee``.
    """
    return mechanism.sanitize_with_stats(texts, progress=progress)


for _name, _cls, _desc in (
    ("santext", SanText, "SanText: exponential mechanism over embedding distances (eps·d metric LDP per token)"),
    ("santext+", SanTextPlus, "SanText+: sensitive/non-sensitive words ((eps, ln 1/p)-UMLDP per token)"),
    ("fbdd", FBDD, "FBDD/MadLib: multivariate Laplace noise + nearest word (eps·d metric LDP per token)"),
):
    register(MechanismInfo(name=_name, factory=_cls, capability="sanitize", description=_desc,
                           tags=("token", "metric-dp")))
