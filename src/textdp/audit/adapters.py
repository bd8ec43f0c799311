"""Adapters: audit textdp's token sanitizers (SanText, SanText+, FBDD) in the ``[0,1]^n`` check.

A record of ``n`` coordinates becomes ``n`` tokens: coordinate value 0 is word ``a`` and 1
is word ``b`` (``x >= 0.5`` picks ``b``), so ``D = 0^n`` / ``D' = 1^n`` are the documents
"a a … a" and "b b … b". Each token is sanitized independently by the mechanism; an output
word ``y`` is mapped back to the real line by projecting its embedding onto the segment
from ``a`` to ``b``:

    t(y) = <e(y) − e(a), e(b) − e(a)> / ||e(b) − e(a)||²      (t(a) = 0, t(b) = 1)

so the audit's threshold at 0.5 asks "is the output closer to b than to a along a→b"
(post-processing, so the measured loss is a valid lower bound for the mechanism).

Claimed loss between the two records: metric LDP per token composes over the ``n``
replaced tokens, ``ε_record = n · ε · d(a, b)`` (SanText, FBDD: ``MetricDP``; SanText+:
the same when both words are sensitive, :class:`ParameterError` otherwise).
"""

from __future__ import annotations

import numpy as np

from textdp.accounting.guarantees import MetricDP, UMLDP
from textdp.errors import ParameterError

__all__ = ["TokenPairAdapter"]


class TokenPairAdapter:
    """``f(x, rng) -> y`` on ``(N, n)`` float64 records for a fitted token sanitizer.

    sanitizer: a :class:`textdp.sanitize.TokenSanitizer` (fitted, or with an explicit /
    ``"full"`` output vocabulary); word_a, word_b: two distinct in-vocabulary words.
    ``claimed_epsilon(n)`` gives the claimed record-level loss (see module docstring);
    :func:`textdp.audit.audit_mechanism` uses it when no ``epsilon`` is passed.
    """

    def __init__(self, sanitizer, word_a: str, word_b: str):
        self.sanitizer = sanitizer
        rows = sanitizer.input_rows([word_a, word_b])
        if (rows < 0).any():
            missing = [w for w, r in zip((word_a, word_b), rows) if r < 0]
            raise ParameterError(f"word {missing[0]!r} has no embedding; pick two in-vocabulary words")
        self.row_a, self.row_b = int(rows[0]), int(rows[1])
        E = sanitizer.embeddings.vectors
        ea = np.asarray(E[self.row_a], dtype=np.float64)
        eb = np.asarray(E[self.row_b], dtype=np.float64)
        axis = eb - ea
        d2 = float(axis @ axis)
        if d2 == 0.0:
            raise ParameterError(f"words {word_a!r} and {word_b!r} have the same embedding; pick two distinct words")
        self.distance = float(np.sqrt(d2))
        sanitizer.output_words  # noqa: B018 - builds the output vocabulary (raises if not fitted)
        out = sanitizer.output_rows
        self._proj = np.full(len(E), np.nan)
        self._proj[out] = (np.asarray(E[out], dtype=np.float64) - ea) @ axis / d2
        self.word_a, self.word_b = word_a, word_b
        self.__name__ = f"{getattr(sanitizer, 'name', 'sanitizer')}[{word_a}|{word_b}]"
        self.broken = False

    def claimed_epsilon(self, n: int) -> float:
        """Claimed privacy loss between ``a^n`` and ``b^n``: ``n · ε · d(a, b)``."""
        g = self.sanitizer.guarantee
        if isinstance(g, UMLDP):
            sens = self.sanitizer.is_sensitive([self.word_a, self.word_b])
            if not np.all(sens):
                raise ParameterError("SanText+ protects non-sensitive words only up to ε0; audit two sensitive words")
        elif not isinstance(g, MetricDP):
            raise ParameterError(f"no record-level claim for guarantee {type(g).__name__}")
        return float(n) * float(g.epsilon) * self.distance

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x)
        rows = np.where(x.reshape(-1) >= 0.5, self.row_b, self.row_a).astype(np.int64)
        out = self.sanitizer.sample_rows(rows, rng)
        y = self._proj[np.asarray(out, dtype=np.int64)]
        return y.reshape(x.shape)
