"""Embedding-perturbation mechanisms: noise added to the token's embedding, then the nearest word of
the output vocabulary (post-processing). FBDD / MadLib = CMP (Feyisetan, Balle, Drake, Diethe. *Privacy-
and Utility-Preserving Textual Analysis via Calibrated Multivariate Perturbations.* WSDM 2020).
"""

from __future__ import annotations

import math

import numpy as np

from textdp.accounting import MetricDP
from textdp.noise import make_rng
from textdp.noise import keyed
from textdp.noise.keyed import ReleaseKey
from textdp.sanitize.base import TokenSanitizer
from textdp.sanitize.sampling import squared_norms


class FBDD(TokenSanitizer):
    """FBDD / MadLib (Feyisetan et al. 2020, Sec. 3, Alg. 1): ``y = argmin_v ||phi(v) - (phi(x) + z)||``
    over the output vocabulary, with noise ``z`` of density ``∝ exp(-eps·||z||)``
    drawn as a uniform direction (normalised Gaussians) times a
    ``Gamma(shape=m, scale=1/eps)`` radius (``m`` the embedding dimension), from the
    token's keyed stream (:func:`textdp.noise.keyed.keyed_laplace_vectors`).

    Float safety (issue 12): the float sampler clips each of the ``2m`` exponentials
    and Box-Muller radii it draws with probability ``2^-52`` (the realised law is within
    total variation ``tau = 2m 2^-52`` of the ideal one), which alone could put outputs
    outside the reachable set of one input and not of another (an infinite loss). So a
    uniform share ``eta`` (default ``2^-20``, an exact Bernoulli coin) replaces the
    output by a uniform word of the output vocabulary: every output then has
    probability at least ``eta/V`` from every input, and the truncation is charged as
    ``epsilon0 = ln((1 + a)/(1 - a))``, ``a = tau V / eta`` (mixing cannot raise the
    ideal loss: mediant inequality). The float discretisation of the continuous noise
    below the clipping is not accounted (no float implementation of continuous noise
    is exact); the uniform share caps its effect: no per-token log-ratio exceeds
    :meth:`worst_case_epsilon`. Cards and docs/threat-model.md state this.

    Guarantee: ``eps·d(x,x') + epsilon0`` metric LDP per token (no ``/2``; the
    nearest-word step is post-processing). No closed-form output distribution: use
    :meth:`estimate_probabilities`. Cost: one nearest-neighbour search per token
    occurrence (a GEMM per block of tokens).
    """

    name = "fbdd"
    paper = "Feyisetan et al., WSDM 2020, Sec. 3, Alg. 1 (FBDD/MadLib, CMP)"
    supports_workers = False

    def epsilon0_meaning(self) -> str:
        return "the accounted clipping of its float noise"

    def card_warnings(self) -> list[str]:
        return ["FBDD draws continuous noise in floating point: its clipping is charged in epsilon0, its "
                "discretisation is not accounted (the uniform share eta bounds every per-token log-ratio by "
                "worst_case_epsilon)"]
    exact_probabilities = False
    #: the noise radius is Gamma(m, 1/eps) (mean m/eps) and the nearest-word search runs in float32
    #: (largest value 3.4e38): 1e-20 keeps radius x norm far inside it for tables with norms below 1e14
    epsilon_min = 1e-20
    epsilon_limit_reason = ("its noise vector has length about dim/ε and the nearest-word search runs in "
                            "float32, which overflows for smaller ε")

    def _prepare_mechanism(self) -> None:
        pass

    @property
    def truncation_epsilon0(self) -> float:
        """``ln((1 + a)/(1 - a))`` with ``a = 2m 2^-52 V / eta``: the accounted cost of the clipped
        float noise (class docstring); ``V`` the output vocabulary's size bound."""
        a = 2 * self.embeddings.dim * keyed.LAPLACE_TRUNCATION * self._n_out_bound() / self.eta
        return math.inf if a >= 1 else math.log1p(a) - math.log1p(-a)

    @property
    def guarantee(self) -> MetricDP:
        return MetricDP(epsilon=self.epsilon, metric=f"euclidean ({self.embeddings.source})", unit="token",
                        epsilon0=self.truncation_epsilon0, worst_case_epsilon=self.worst_case_epsilon())

    def worst_case_epsilon(self) -> float:
        """Plain DP per token (:meth:`TokenSanitizer._mixed_worst_case`; the uniform share bounds
        every ratio whatever the float noise does)."""
        return self._mixed_worst_case(self._n_out_bound(), self.truncation_epsilon0)

    def noise(self, n: int, rng=None) -> np.ndarray:
        """``(n, m)`` float64 noise vectors with density ``∝ exp(-eps ||z||)`` (fresh key from ``rng``,
        or the mechanism's next key)."""
        key = ReleaseKey.from_generator(make_rng(rng)) if rng is not None else self._next_key()
        return keyed.keyed_laplace_vectors(key, np.arange(int(n)), np.zeros(int(n), dtype=np.int64), keyed.MAIN,
                                           self.embeddings.dim, 1.0 / self.epsilon)

    def _draw(self, rows, key, streams, positions, progress) -> np.ndarray:
        y = self._vectors(self.output_rows)
        ny = squared_norms(y).astype(np.float32)
        b = self._block_rows(len(self.output_rows))
        out = np.empty(len(rows), dtype=np.int64)
        buf = np.empty((min(b, max(1, len(rows))), len(self.output_rows)), dtype=np.float32)
        m = self.embeddings.dim
        for s in range(0, len(rows), b):
            e = min(len(rows), s + b)
            z = keyed.keyed_laplace_vectors(key, streams[s:e], positions[s:e], keyed.MAIN, m, 1.0 / self.epsilon)
            q = (np.asarray(self.embeddings.vectors[rows[s:e]], dtype=np.float64) + z).astype(np.float32)
            g = buf[: e - s]
            np.matmul(q, y.T, out=g)
            g *= -2.0
            g += ny[None, :]
            out[s:e] = self.output_rows[np.argmin(g, axis=1)]
            if progress is not None:
                progress(e - s)
        mix = np.flatnonzero(keyed.keyed_bernoulli(key, streams, positions, keyed.MIX, self.eta))
        if len(mix):  # the uniform share (class docstring)
            pick = keyed.keyed_uniform_below(key, streams[mix], positions[mix], keyed.MIX_PICK, len(self.output_rows))
            out[mix] = self.output_rows[pick.astype(np.int64)]
        return out


REGISTERED = (
    ("fbdd", FBDD, "FBDD/MadLib (CMP): multivariate Laplace noise + nearest word (eps·d metric LDP per token)",
     ("token", "metric-dp")),
)
