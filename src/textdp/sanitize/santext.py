"""SanText and SanText+ (Yue, Du, Wang, Li, Sun, Chow. *Differential Privacy for Text Analytics via
Natural Text Sanitization.* Findings of ACL 2021, Sec. 4.2, 4.3, App. A.2; spec ``santext-and-audit.md``
Part A): the exponential mechanism over Euclidean embedding distances, sampled by the fused
integer-weighted kernel of :class:`textdp.sanitize.base.TokenSanitizer`.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.accounting import UMLDP, MetricDP
from textdp.errors import ParameterError
from textdp.noise import keyed
from textdp.sanitize.base import _EXP_MECHANISM_LIMIT, _EXP_MECHANISM_MAX_EPSILON, TokenSanitizer, check_unit


class SanText(TokenSanitizer):
    """SanText (Yue et al. 2021, Sec. 4.2): ``p(y|x) = exp(-eps·d(x,y)/2) / Z(x)``
    over the output vocabulary, ``d`` the Euclidean distance of raw embeddings.

    Guarantee: ``eps·d(x,x') + epsilon0`` metric LDP per token (triangle
    inequality: ``p(y|x)/p(y|x') <= exp(eps·d(x,x'))``, spec A.3), where
    ``epsilon0`` (:attr:`sampling_epsilon0`, about ``1.2e-5·eps`` for GloVe 6B
    50d) is the accounted cost of the float-safe integer sampler, which draws
    from ``(1 - eta) p + eta / V`` (:mod:`textdp.sanitize.sampling`).
    Example: ``SanText("glove-6b-50d", epsilon=3).fit(texts).sanitize(texts)``.
    """

    name = "santext"
    paper = "Yue et al., Findings of ACL 2021, Sec. 4.2 (SanText)"
    torch_sampler = True

    def epsilon0_meaning(self) -> str:
        return ("the accounted cost of float-safe sampling (integer weights with a uniform share eta, float64 "
                "distances)")
    epsilon_max = _EXP_MECHANISM_MAX_EPSILON
    epsilon_limit_reason = _EXP_MECHANISM_LIMIT

    def _prepare_mechanism(self) -> None:
        pass

    @property
    def guarantee(self) -> MetricDP:
        return MetricDP(epsilon=self.epsilon, metric=f"euclidean ({self.embeddings.source})", unit="token",
                        epsilon0=self.sampling_epsilon0, worst_case_epsilon=self.worst_case_epsilon())

    def worst_case_epsilon(self) -> float:
        """Largest per-token log-ratio over every pair of accepted inputs (plain DP per token):
        :meth:`TokenSanitizer._mixed_worst_case` over the output vocabulary."""
        return self._mixed_worst_case(self._n_out_bound())

    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        return self._exp_sample(rows, self.output_rows, key, streams, positions, progress)

    def probabilities(self, words) -> np.ndarray:
        """The exact law each word is sampled from: float64 ``(k, V_out)``, the
        integer weights of the float-safe sampler normalised (``(1 - eta) p + eta/V``
        up to a relative ``~1e-8``)."""
        rows = self._known_rows(words)
        return self._exp_realised(rows, self.output_rows)

    def ideal_probabilities(self, words) -> np.ndarray:
        """The paper's ``exp(-eps d/2) / Z`` in float64 (no uniform mix), ``(k, V_out)``."""
        rows = self._known_rows(words)
        return self._exp_probabilities(rows, self.output_rows)


class SanTextPlus(TokenSanitizer):
    """SanText+ (Yue et al. 2021, Sec. 4.3): sensitive / non-sensitive words.

    ``w`` in [0, 1]: the least frequent share ``w`` of the output vocabulary is
    sensitive (``V_S``): exactly ``floor(w·|V_out|)`` words, ordered by count
    (descending) with ties broken by embedding row (for GloVe: general-English
    frequency order), so the rarest words are sensitive. Counts come from the
    fitted texts only (``frequencies="corpus"``, default) or from ``wordfreq``
    (``frequencies="wordfreq"``). Input words outside the output vocabulary
    (unseen in the fitted texts) are treated as sensitive. Unlike the official
    code there is no off-by-one (w = 0 makes no word sensitive) and no dev/test
    text is counted.

    ``p`` in [0, 1]: a non-sensitive word is kept with probability ``1 - p``,
    else resampled into ``V_S``; a sensitive word is always resampled within
    ``V_S`` with ``exp(-eps·d/2) / Z_S(x)``.

    Guarantee (spec A.4, derived): ``(eps, eps0)``-UMLDP per token with
    ``eps0 = ln(1/p) + sampling_epsilon0`` (infinite for ``p = 0``: non-sensitive
    words then get no protection; the second term is the float-safe sampler's
    accounted cost, as for SanText); a non-sensitive output is only ever produced
    by itself. The keep/resample coin is an exact Bernoulli(p)
    (:func:`textdp.noise.bernoulli`).
    OOV tokens (policy ``uniform``) are drawn uniformly from ``V_S``.
    """

    name = "santext+"
    paper = "Yue et al., Findings of ACL 2021, Sec. 4.3 (SanText+)"

    def epsilon0_meaning(self) -> str:
        return "ln(1/p) plus the accounted cost of float-safe sampling"

    def card_units(self) -> dict:
        units = super().card_units()
        units["epsilon"] += (" for every output y in the sensitive set; an output non-sensitive word y is produced "
                             "only by x = y (UMLDP, Yue et al. 2021 Def. 2)")
        return units

    def card_warnings(self) -> list[str]:
        g = self.guarantee
        warnings = []
        if not math.isinf(g.epsilon0) and math.isinf(g.worst_case_epsilon or 0.0):
            warnings.append("santext+ keeps a non-sensitive word unchanged with probability 1 - p and no other input "
                            "ever produces it: an output non-sensitive word reveals its input exactly (UMLDP protects "
                            "the sensitive words; epsilon0 = ln(1/p) bounds only how much more likely a kept word is "
                            "than a resampled one), so the plain-DP worst case per token is unbounded")
        if math.isinf(g.epsilon0):
            warnings.append("p = 0: non-sensitive words are always released unchanged, so epsilon0 is infinite "
                            "and SanText+ gives NO guarantee for them; use p > 0 for a finite epsilon0 = ln(1/p)")
        if self.frequencies == "corpus":
            from textdp.sanitize.base import CORPUS_FREQUENCIES_WARNING

            warnings.append(CORPUS_FREQUENCIES_WARNING)
        return warnings
    torch_sampler = True
    epsilon_max = _EXP_MECHANISM_MAX_EPSILON
    epsilon_limit_reason = _EXP_MECHANISM_LIMIT

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, w: float = 0.9, p: float = 0.3,
                 frequencies: str = "public", **kwargs):
        self.w = check_unit(w, "w")
        self.p = check_unit(p, "p")
        if frequencies not in ("public", "corpus", "wordfreq"):
            raise ParameterError(f"frequencies (--frequencies) must be 'public', 'corpus' or 'wordfreq', "
                                 f"got {frequencies!r}")
        self.frequencies = frequencies
        super().__init__(embeddings, epsilon, **kwargs)

    @property
    def corpus_dependent(self) -> bool:
        return self.output_vocabulary == "corpus" or self.frequencies == "corpus"

    def _prepare_mechanism(self) -> None:
        out = self.output_rows
        if self.frequencies == "public":  # the output vocabulary's public order (GloVe: frequency order)
            freq = np.zeros(len(out))
        elif self.frequencies == "corpus":
            if self._fitted is not None:
                freq = self._fitted.counts[out].astype(np.float64)
            else:
                freq = np.zeros(len(out))
        else:
            try:
                from wordfreq import word_frequency
            except ImportError:
                from textdp.errors import MissingPackageError

                raise MissingPackageError("frequencies='wordfreq' needs wordfreq; run: pip install wordfreq") from None
            words = self.embeddings.words
            freq = np.fromiter((word_frequency(words[r], "en") for r in out.tolist()), dtype=np.float64,
                               count=len(out))
        order = np.lexsort((out, -freq))  # most frequent first; ties by embedding row
        n_sens = int(math.floor(self.w * len(out) + 1e-9))
        sens = np.sort(out[order[len(out) - n_sens:]]) if n_sens else np.zeros(0, dtype=np.int64)
        self.sensitive_rows = sens
        mask = np.ones(len(self.embeddings), dtype=bool)  # words outside the output vocabulary: sensitive
        mask[out] = False
        mask[sens] = True
        self._sensitive_mask = mask

    @property
    def sensitive_words(self) -> list[str]:
        """The sensitive set ``V_S`` (the protected outputs)."""
        self._prepare()
        w = self.embeddings.words
        return [w[i] for i in self.sensitive_rows.tolist()]

    def is_sensitive(self, words) -> np.ndarray:
        """Boolean per input word (str or embedding row)."""
        self._prepare()
        return self._sensitive_mask[self.input_rows(words)]

    @property
    def guarantee(self) -> UMLDP:
        eps0 = math.inf if self.p == 0 else math.log(1.0 / self.p) + self.sampling_epsilon0
        return UMLDP(epsilon=self.epsilon, epsilon0=eps0, metric=f"euclidean ({self.embeddings.source})",
                     sensitive_fraction=self.w, unit="token", worst_case_epsilon=self.worst_case_epsilon())

    def _n_out_bound(self) -> int:
        if self.output_vocabulary == "corpus":
            return len(self.embeddings)
        self._prepare()
        return max(1, len(self.sensitive_rows))

    def worst_case_epsilon(self) -> float:
        """Plain DP per token: infinite when some word is non-sensitive and ``p < 1`` (a kept
        non-sensitive word is produced by no other input); otherwise SanText's figure over V_S."""
        if self.p < 1.0 and self.w < 1.0:
            return math.inf
        return self._mixed_worst_case(self._n_out_bound())

    def parameters(self) -> dict:
        d = super().parameters()
        d.update(w=self.w, p=self.p, frequencies=self.frequencies)
        return d

    def _need_sensitive(self):
        if len(self.sensitive_rows) == 0:
            raise ParameterError(f"w = {self.w:g} leaves no sensitive word to sample from; use a larger w or p = 0")

    def _oov_pool(self) -> np.ndarray:
        self._need_sensitive()
        return self.sensitive_rows

    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        if len(rows) and self.p > 0:  # before any coin: whether the release fails must not depend on the draws
            self._need_sensitive()
        sens = self._sensitive_mask[rows]
        resample = sens.copy()
        non = np.flatnonzero(~sens)
        if len(non) and self.p > 0:
            resample[non] = keyed.keyed_bernoulli(key, streams[non], positions[non], keyed.COIN, self.p)
        out = rows.copy()
        idx = np.flatnonzero(resample)
        if progress is not None and len(rows) - len(idx):
            progress(len(rows) - len(idx))
        if len(idx):
            self._need_sensitive()
            out[idx] = self._exp_sample(rows[idx], self.sensitive_rows, key, streams[idx], positions[idx], progress)
        return out

    def probabilities(self, words) -> np.ndarray:
        """Exact ``(k, V_out)`` rows of the law sampled: sensitive x: the float-safe
        ``exp(-eps d/2)/Z_S`` law on V_S (see :meth:`SanText.probabilities`);
        non-sensitive x: ``1-p`` on x itself plus ``p`` times that row."""
        return self._probabilities(words, ideal=False)

    def ideal_probabilities(self, words) -> np.ndarray:
        """As :meth:`probabilities` with the paper's float64 formula (no uniform mix)."""
        return self._probabilities(words, ideal=True)

    def _probabilities(self, words, ideal: bool) -> np.ndarray:
        rows = self._known_rows(words)
        out = np.zeros((len(rows), len(self.output_rows)))
        cols = self._out_pos[self.sensitive_rows]
        if len(self.sensitive_rows):
            law = self._exp_probabilities if ideal else self._exp_realised
            out[:, cols] = law(rows, self.sensitive_rows)
        sens = self._sensitive_mask[rows]
        for i in np.flatnonzero(~sens).tolist():
            out[i] *= self.p
            out[i, self._out_pos[rows[i]]] += 1.0 - self.p
        if len(self.sensitive_rows) == 0 and sens.any():
            self._need_sensitive()
        return out




REGISTERED = (
    ("santext", SanText, "SanText: exponential mechanism over embedding distances (eps·d metric LDP per token)",
     ("token", "metric-dp")),
    ("santext+", SanTextPlus, "SanText+: sensitive/non-sensitive words ((eps, ln 1/p)-UMLDP per token)",
     ("token", "metric-dp")),
)
