"""Text sanitization with token-level (and document-level) differential privacy.

One module per family of mechanisms, over the shared base :class:`textdp.sanitize.base.TokenSanitizer`
(formulas, guarantees and papers in each module and class docstring):

* :mod:`textdp.sanitize.santext` -- SanText, SanText+ (Yue et al. 2021).
* :mod:`textdp.sanitize.perturbation` -- embedding perturbation + nearest word: FBDD/CMP (Feyisetan et al.
  2020), Mahalanobis (Xu et al. 2020), Vickrey (Xu et al. 2021).
* :mod:`textdp.sanitize.custext` -- CusText, CusText+ (Chen et al. 2023).
* :mod:`textdp.sanitize.tem` -- TEM (Carvalho et al. 2023); :mod:`textdp.sanitize.gumbel` -- TruncatedGumbel
  (Carvalho et al. 2021).
* :mod:`textdp.sanitize.diffractor` -- 1-Diffractor (Meisenbacher et al. 2024).
* :mod:`textdp.sanitize.dp_prompt` -- DP-Prompt (Utpala et al. 2023); :mod:`textdp.sanitize.dp_mlm` -- DP-MLM
  (Meisenbacher et al. 2024).

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

import importlib
import inspect

from textdp.mechanisms.registry import MechanismInfo, register
from textdp.sanitize.base import OOV_POLICIES, OUTPUT_VOCABULARIES, SanitizeStats, TokenSanitizer
from textdp.sanitize.perturbation import FBDD
from textdp.sanitize.santext import SanText, SanTextPlus
from textdp.sanitize.stats import plausible_deniability, privacy_statistics

__all__ = [
    "SanText", "SanTextPlus", "FBDD", "TokenSanitizer", "SanitizeStats", "OOV_POLICIES", "OUTPUT_VOCABULARIES",
    "MECHANISMS", "make_mechanism", "sanitize_texts", "plausible_deniability", "privacy_statistics",
]

#: the family modules; each ends with ``REGISTERED = ((name, class, description, tags), ...)``
_FAMILIES = ("santext", "perturbation", "custext", "tem", "gumbel", "diffractor", "dp_prompt", "dp_mlm")

#: CLI / registry names -> classes (every family, in the order above)
MECHANISMS: dict[str, type] = {}
for _family in _FAMILIES:
    for _name, _cls, _desc, _tags in importlib.import_module(f"textdp.sanitize.{_family}").REGISTERED:
        MECHANISMS[_name] = _cls
        register(MechanismInfo(name=_name, factory=_cls, capability="sanitize", description=_desc, tags=tuple(_tags)))

#: options every sanitizer takes (the rest are the class's own keyword-only parameters)
_COMMON = ("output_vocabulary", "oov", "unk_token", "rng", "block_bytes", "device", "workers", "eta")


def canonical_name(name: str) -> str:
    """The registry name of ``name`` (case, ``_`` and ``plus`` spellings accepted: ``SanTextPlus`` ->
    ``santext+``, ``dp_prompt`` -> ``dp-prompt``); ParameterError listing the known names otherwise."""
    from textdp.errors import ParameterError

    key = str(name).strip().lower().replace("_", "-")
    if key in MECHANISMS:
        return key
    for cand in (key.replace("plus", "+").replace("-+", "+"), key.replace("-", ""), key.replace("-", "").replace("plus", "+")):
        if cand in MECHANISMS:
            return cand
    raise ParameterError(f"unknown mechanism {name!r}; use one of {', '.join(MECHANISMS)}")


def mechanism_parameters(name: str) -> dict[str, inspect.Parameter]:
    """The mechanism's own keyword parameters (beyond ``embeddings``, ``epsilon`` and the common options)."""
    cls = MECHANISMS[canonical_name(name)]
    params = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind is p.KEYWORD_ONLY and p.name not in _COMMON and p.name not in params:
                params[p.name] = p
        break
    return params


def make_mechanism(name: str, embeddings="glove-6b-50d", epsilon: float = 3.0, **kwargs) -> TokenSanitizer:
    """Build a sanitizer by its registry name (``textdp.sanitize.MECHANISMS``; ``santextplus`` and
    other spellings accepted, see :func:`canonical_name`).

    ``kwargs``: the common options (``output_vocabulary``, ``oov``, ``rng``, ``block_bytes``, ``device``,
    ``workers``) and the mechanism's own parameters (``w``, ``p``, ``frequencies`` for SanText+; see each
    class). A parameter set to None takes the class default. Raises ParameterError for an unknown name, a
    parameter the mechanism does not take, or a bad value.
    """
    from textdp.errors import ParameterError

    key = canonical_name(name)
    own = mechanism_parameters(key)
    for k in list(kwargs):
        if k in _COMMON or k in own:
            if kwargs[k] is None:
                del kwargs[k]
            continue
        if kwargs[k] is None:
            del kwargs[k]
            continue
        takers = sorted(n for n in MECHANISMS if k in mechanism_parameters(n))
        where = f"it applies to {', '.join(takers)}" if takers else "no sanitizer takes it"
        known = ", ".join(own) or "none"
        raise ParameterError(f"{key} has no parameter {k!r} ({where}); {key}'s own parameters: {known}")
    return MECHANISMS[key](embeddings, epsilon, **kwargs)


def sanitize_texts(texts, mechanism: TokenSanitizer, progress=None) -> tuple[list[str], SanitizeStats]:
    """Sanitize ``texts`` (sequence of str) with ``mechanism``.

    Fits the mechanism on ``texts`` first when it is not fitted (corpus output
    vocabulary). Returns ``(sanitized_texts, stats)``; ``progress(k)`` is called
    as tokens finish. Per-token guarantee: ``mechanism.guarantee``.
    """
    return mechanism.sanitize_with_stats(texts, progress=progress)
