"""Compatibility module: the sanitizers moved to one module per family (issue 15).

:mod:`textdp.sanitize.base` (the shared :class:`TokenSanitizer`), :mod:`textdp.sanitize.santext`
(SanText, SanText+), :mod:`textdp.sanitize.perturbation` (FBDD/CMP and the other embedding-perturbation
mechanisms) and the other family modules listed in :mod:`textdp.sanitize`. Old imports from here keep
working; new code imports from the family modules.
"""

from __future__ import annotations

from textdp.sanitize.base import (  # noqa: F401
    _EXP_MECHANISM_LIMIT,
    _EXP_MECHANISM_MAX_EPSILON,
    CORPUS_FREQUENCIES_WARNING,
    CORPUS_VOCABULARY_WARNING,
    FUSED_MAX_ROWS,
    OOV_POLICIES,
    OUTPUT_VOCABULARIES,
    SanitizeStats,
    TokenSanitizer,
    check_epsilon,
    check_unit,
)
from textdp.sanitize.perturbation import FBDD  # noqa: F401
from textdp.sanitize.santext import SanText, SanTextPlus  # noqa: F401
from textdp.sanitize.sampling import squared_norms  # noqa: F401

__all__ = ["TokenSanitizer", "SanText", "SanTextPlus", "FBDD", "SanitizeStats", "OOV_POLICIES", "OUTPUT_VOCABULARIES",
           "check_epsilon", "check_unit"]
