"""TEM, the Truncated Exponential Mechanism (Carvalho, Vasiloudis, Feyisetan, Wang. *TEM: High Utility
Metric Differential Privacy on Text.* SIAM SDM 2023, pp. 883-890; arXiv 2107.07928, Algorithm 1 and its
privacy theorem): an exponential mechanism over a *clipped* embedding distance, sampled exactly by the
fused integer-weighted kernel of :class:`textdp.sanitize.base.TokenSanitizer` with the distance clip
built into the kernel (:class:`textdp.sanitize.sampling.DistanceKernel`, ``cap``).

Source of the algorithm: the paper's Algorithm 1 as restated by issue 15 and as implemented by both
peers (pypantera 1.0.2 ``SamplingPerturbationMechanism/tem.py``; mldp-text 0.1.2 ``mechanisms.py`` TEM),
which agree on it except for the ⊥ score (see tests/sanitize/test_tem.py); the paper's full text was not
available when this was written, so its algorithm and theorem numbering are not checked.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.accounting import MetricDP
from textdp.errors import ParameterError
from textdp.sanitize.base import _EXP_MECHANISM_LIMIT, _EXP_MECHANISM_MAX_EPSILON, TokenSanitizer
from textdp.sanitize.sampling import DistanceKernel

_U = 2.0**-53

#: the paper's default failure probability beta of the candidate threshold (pypantera's example and
#: mldp-text's fixed value are both 0.001)
DEFAULT_BETA = 0.001


def paper_gamma(epsilon: float, n_words: int, beta: float = DEFAULT_BETA) -> float:
    """The paper's threshold ``gamma = (2/eps) ln((1 - beta) |W| / beta)`` (TEM, Algorithm 1's input
    choice; the same formula in mldp-text ``mechanisms.py`` TEM.replace_word, which rounds it to one
    decimal, and in pypantera ``SamplingPerturbationMechanism/tem.py`` line 52, which uses ``|W| - 1``).
    ``n_words``: ``|W|``, the output vocabulary's size (>= 1); ``beta`` in (0, 1). Returns a float >= 0
    when ``(1 - beta) |W| >= beta``."""
    return max(0.0, (2.0 / float(epsilon)) * math.log((1.0 - beta) * int(n_words) / beta))


class TEM(TokenSanitizer):
    """TEM (Carvalho et al. 2023, Algorithm 1): for an input word ``x`` and threshold ``gamma``

    * candidates ``L_x = {y in W : d(x, y) <= gamma}`` with score ``-d(x, y)``;
    * the bucket ``⊥`` with score ``-gamma + 2 ln|W \\ L_x| / eps`` (absent when ``L_x = W``);
    * Gumbel noise of scale ``2/eps`` added to every score, the largest wins; if ``⊥`` wins the output
      is a uniform word of ``W \\ L_x``.

    ``W`` is the output vocabulary and ``d`` the Euclidean distance of raw embeddings.

    **Induced law** (derived here; the Gumbel-max trick turns noisy scores ``f_i + G_i``, ``G_i ~
    Gumbel(0, 2/eps)``, into ``P(i) ∝ exp(eps f_i / 2)``): a candidate ``y in L_x`` has weight
    ``exp(-eps d(x,y)/2)``; ``⊥`` has weight ``exp(eps/2 (-gamma + 2 ln n/eps)) = n exp(-eps gamma/2)``
    with ``n = |W \\ L_x|``, shared uniformly by its ``n`` words, so each word outside ``L_x`` has
    weight ``exp(-eps gamma/2)``. Since ``d(x,y) > gamma`` exactly outside ``L_x``::

        p(y | x) = exp(-eps min(d(x,y), gamma) / 2) / Z(x)          over the output vocabulary

    an exponential mechanism with utility ``-min(d, gamma)``. Sampling it directly is the same law as the
    paper's two-stage algorithm (the ``⊥`` bucket's mass ``n exp(-eps gamma/2)/Z(x)`` is exactly the
    total weight of the words outside ``L_x``). It is drawn by the fused float-safe integer sampler
    (:func:`textdp.sanitize.sampling.fused_sample`) with every scaled distance clipped at
    ``(eps/2) gamma`` inside the kernel: integer weights with a uniform share ``eta``, an exact keyed
    uniform integer and an integer search; all words outside ``L_x`` get the identical integer weight.

    **Guarantee** (the paper's theorem: TEM is ``eps·d_X``-private): ``min(d, gamma)`` is 1-Lipschitz
    in ``x`` (``|min(d(x,y),g) - min(d(x',y),g)| <= |d(x,y) - d(x',y)| <= d(x,x')``), so numerator
    and normaliser each move by at most ``exp(eps min(d(x,x'), gamma)/2)``:
    ``p(y|x) <= exp(eps min(d(x,x'), gamma) + epsilon0) p(y|x')``, i.e. ``eps·d`` metric LDP per token
    (and never more than ``eps·gamma``: plain ``eps·gamma``-DP between in-vocabulary words, in
    :attr:`worst_case_epsilon`). ``epsilon0`` is the float-safe sampler's accounted cost
    (:func:`textdp.sanitize.sampling.sampling_epsilon0`) plus ``12 u eps R`` for the rounding of the
    clip (``u = 2^-53``, ``R`` the table's radius).

    Parameters (keyword-only; ``--param KEY=VALUE`` on the CLI):

    gamma: the threshold, in units of Euclidean embedding distance (>= 0; ``inf``: no truncation,
        which is SanText). Default None: the paper's ``(2/eps) ln((1 - beta) |W| / beta)``
        (:func:`paper_gamma`), ``|W|`` the output vocabulary's size (the embedding table's size with
        ``output_vocabulary="corpus"``, so the threshold stays data-independent). With GloVe 6B 50d,
        the 30,000-word public vocabulary and eps = 3 it is 11.5, beyond most distances (the
        truncation then only flattens the far tail).
    beta: the paper's failure probability in (0, 1) for the default gamma (default 0.001).

    Raises ParameterError (one line) for gamma < 0 or NaN, beta outside (0, 1).
    Example: ``TEM("glove-6b-50d", epsilon=3, gamma=5.0).sanitize(texts)``.
    """

    name = "tem"
    paper = ("Carvalho, Vasiloudis, Feyisetan, Wang, SIAM SDM 2023 (arXiv 2107.07928), Algorithm 1 "
             "(TEM, the truncated exponential mechanism)")
    epsilon_max = _EXP_MECHANISM_MAX_EPSILON
    epsilon_limit_reason = _EXP_MECHANISM_LIMIT

    def __init__(self, embeddings="glove-6b-50d", epsilon: float = 3.0, *, gamma: float | None = None,
                 beta: float = DEFAULT_BETA, **kwargs):
        if gamma is not None:
            try:
                g = float(gamma)
            except (TypeError, ValueError):
                raise ParameterError(f"gamma (--param gamma) must be a number >= 0, got {gamma!r}") from None
            if not g >= 0:  # also NaN
                raise ParameterError(f"gamma (--param gamma) must be >= 0 (a distance threshold), got {gamma!r}")
            gamma = g
        try:
            b = float(beta)
        except (TypeError, ValueError):
            raise ParameterError(f"beta (--param beta) must be a number in (0, 1), got {beta!r}") from None
        if not 0.0 < b < 1.0:
            raise ParameterError(f"beta (--param beta) must be in (0, 1), got {beta!r}")
        self.gamma_param = gamma
        self.beta = b
        super().__init__(embeddings, epsilon, **kwargs)

    # ------------------------------------------------------------------ the threshold
    @property
    def gamma(self) -> float:
        """The threshold in use: the given ``gamma`` or the paper's default (:func:`paper_gamma`)."""
        if self.gamma_param is not None:
            return self.gamma_param
        return paper_gamma(self.epsilon, self._n_out_bound(), self.beta)

    @property
    def cap(self) -> float:
        """The clip of the scaled distance ``(eps/2) d`` in the sampler: ``(eps/2) gamma``."""
        g = self.gamma
        return math.inf if math.isinf(g) else 0.5 * self.epsilon * g

    def _prepare_mechanism(self) -> None:
        self._kernel_cache = None

    def _kernel(self, out_rows: np.ndarray) -> DistanceKernel:
        cap = self.cap
        key = (id(out_rows), len(out_rows), cap)
        cache = getattr(self, "_kernel_cache", None)
        if cache is None or cache[0] != key:
            vec = self.embeddings.vectors
            y = vec if len(out_rows) == len(vec) and np.array_equal(out_rows, np.arange(len(vec))) else vec[out_rows]
            cache = (key, DistanceKernel(y, self.epsilon, self._geometry()[0], cap=cap))
            self._kernel_cache = cache
        return cache[1]

    # ------------------------------------------------------------------ guarantee
    @property
    def sampling_epsilon0(self) -> float:
        """The fused sampler's accounted cost (:func:`textdp.sanitize.sampling.sampling_epsilon0`) plus
        ``12 u eps R`` for the float rounding of the clip ``(eps/2) gamma`` (it moves a clipped
        distance by at most ``3 u`` of the largest scaled distance ``eps R``; ``4x`` on a ratio)."""
        return super().sampling_epsilon0 + 12 * _U * self.epsilon * self._geometry()[1]

    def epsilon0_meaning(self) -> str:
        return ("the accounted cost of float-safe sampling (integer weights with a uniform share eta, float64 "
                "distances clipped at gamma)")

    @property
    def guarantee(self) -> MetricDP:
        return MetricDP(epsilon=self.epsilon, metric=f"euclidean ({self.embeddings.source})", unit="token",
                        epsilon0=self.sampling_epsilon0, worst_case_epsilon=self.worst_case_epsilon())

    def worst_case_epsilon(self) -> float:
        """Plain DP per token over every pair of accepted inputs: two words with embeddings differ by at
        most ``min(eps min(2R, gamma), ln(hi/lo)) + epsilon0`` (the clipped law's bound ``eps
        min(d, gamma)``, or the uniform share's floor ``lo = eta/V`` against the ceiling ``hi = 1 - eta
        + eta/V``); an out-of-vocabulary token under ``oov="uniform"`` against a word: ``max(ln(V hi),
        ln(1/eta)) + epsilon0`` (as :meth:`TokenSanitizer._mixed_worst_case`); other OOV policies:
        infinite."""
        if self.oov != "uniform":
            return math.inf
        e0 = self.sampling_epsilon0
        v = max(1, int(self._n_out_bound()))
        hi, lo = 1.0 - self.eta + self.eta / v, self.eta / v
        pair = min(self.epsilon * min(2.0 * self._geometry()[1], self.gamma), math.log(hi / lo)) + e0
        oov = max(math.log(v * hi), math.log(1.0 / self.eta)) + e0
        return max(pair, oov)

    def card_units(self) -> dict:
        units = super().card_units()
        units["epsilon"] += (f"; TEM's law exp(-eps*min(d,gamma)/2)/Z gives the sharper bound exp(eps*min(d(x,x'), "
                             f"gamma) + epsilon0) with gamma = {self.gamma:.6g}")
        return units

    def parameters(self) -> dict:
        d = super().parameters()
        d.update(gamma=self.gamma, beta=self.beta,
                 gamma_rule="given" if self.gamma_param is not None else "paper: (2/eps) ln((1-beta)|W|/beta)")
        return d

    # ------------------------------------------------------------------ sampling and laws
    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        return self._exp_sample(rows, self.output_rows, key, streams, positions, progress)

    def _rows(self, words) -> np.ndarray:
        rows = self._known_rows(words)
        return rows

    def probabilities(self, words) -> np.ndarray:
        """The exact law each word is sampled from: float64 ``(k, V_out)``, the integer weights of the
        float-safe sampler normalised (``(1 - eta) p + eta/V`` up to a relative ~1e-8, ``p`` the law of
        the class docstring)."""
        return self._exp_realised(self._rows(words), self.output_rows)

    def ideal_probabilities(self, words) -> np.ndarray:
        """The paper's law ``exp(-eps min(d, gamma)/2) / Z`` in float64 (direct differences, no uniform
        mix): ``(k, V_out)``."""
        rows = self._rows(words)
        y = np.asarray(self.embeddings.vectors[self.output_rows], dtype=np.float64)
        out = np.empty((len(rows), len(self.output_rows)))
        g = self.gamma
        for i, r in enumerate(rows.tolist()):
            d = np.sqrt(((y - np.asarray(self.embeddings.vectors[r], dtype=np.float64)) ** 2).sum(axis=1))
            dc = np.minimum(d, g)
            w = np.exp(-0.5 * self.epsilon * (dc - dc.min()))
            out[i] = w / w.sum()
        return out

    def candidate_mask(self, words) -> np.ndarray:
        """bool ``(k, V_out)``: ``L_x`` of each word, the output words within ``gamma`` (float64 direct
        distances); the rest form the ``⊥`` bucket."""
        rows = self._rows(words)
        y = np.asarray(self.embeddings.vectors[self.output_rows], dtype=np.float64)
        x = np.asarray(self.embeddings.vectors[rows], dtype=np.float64)
        d = np.sqrt(((x[:, None, :] - y[None, :, :]) ** 2).sum(axis=-1))
        return d <= self.gamma


REGISTERED = (
    ("tem", TEM, "TEM: truncated exponential mechanism, exp(-eps·min(d, gamma)/2) (eps·d metric LDP per token)",
     ("token", "metric-dp")),
)
