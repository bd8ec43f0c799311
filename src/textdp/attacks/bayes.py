"""Bayes-optimal, mechanism-aware inversion of token-level sanitization.

An attacker who sees a sanitized token ``y`` and knows the mechanism ``p(y | x)``
exactly (SanText, SanText+, FBDD are public algorithms with public embeddings)
and a prior ``π(x)`` over original words guesses

    x̂(y) = argmax_x  p(y | x) · π(x)                                   (MAP rule)

which maximises the probability of a correct guess among all rules that see only
``y`` (Bayes decision theory, 0-1 loss). Top-k success counts a hit when the true
word is among the k best-scoring candidates. No published SanText evaluation
uses this attack; it is the strongest attack on token-level sanitization that
uses no context and is textdp's headline privacy number (issue 6).

Exact expected success (used by the tests): when original tokens are drawn from
a distribution ``w(x)``, the expected top-1 success is

    E[success] = Σ_y Σ_x w(x) p(y|x) 1[x = x̂(y)] = Σ_y w(x̂(y)) p(y | x̂(y)),

and with top-k sets ``T_k(y)``: ``Σ_y Σ_{x ∈ T_k(y)} w(x) p(y|x)``.
At ε → 0 the likelihood is flat in ``x`` and the rule reduces to ``argmax π``:
the attack is then exactly as good as guessing the most probable word.

The attack is written against a generic *channel* (:class:`Channel`): a
hypothesis space of inputs, an output space, and a method that returns
``log p(y|x)`` for a block of inputs and outputs. :class:`MatrixChannel` holds an
explicit matrix; :class:`ExponentialChannel` is the SanText family
(``p(y|x) ∝ exp(−ε·d(x,y)/2)``, with the SanText+ sensitive/non-sensitive
structure when a sensitive set is given) computed in blocks without
materialising the V×V matrix; :class:`NoisyNearestChannel` is FBDD's
noisy-nearest-neighbour mechanism, approximated by an exponential family whose
scale is fitted to pairs simulated with the public mechanism (see its docstring).

Scores are streamed over input blocks while a running top-k is kept per observed
output, so memory is ``O(block · |Y_obs| + k · |Y_obs|)``.

The exact optimum (:func:`bayes_optimum`) and the exact expected success of any
decision prior (:func:`expected_success`) stream the channel's full rows over
blocks of inputs with a running top-k per output (memory ``O(block · |Y| + k · |Y|)``,
never an inputs × outputs matrix). They are the one place textdp computes these
numbers: the evaluation reports them, and later capabilities (reconstruction
bounds, comparisons at equal privacy) call them. A fitted textdp sanitizer can be
passed directly (:class:`MechanismChannel`: rows from ``mech.probabilities``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from textdp.errors import InputError, MissingPackageError, ParameterError

__all__ = [
    "Channel",
    "MatrixChannel",
    "ExponentialChannel",
    "NoisyNearestChannel",
    "MechanismChannel",
    "word_prior",
    "BayesInversion",
    "BayesResult",
    "BayesSuccess",
    "bayes_optimum",
    "expected_success",
]

#: memory budget of one block of channel rows in :func:`bayes_optimum` / :func:`expected_success`
DEFAULT_BLOCK_BYTES = 32 * 2**20


class Channel:
    """A token mechanism seen as a channel ``p(y | x)``.

    ``inputs``: the attacker's hypothesis space (list of n words);
    ``outputs``: the output space (list of k words). Subclasses implement
    :meth:`log_prob_block`.
    """

    inputs: list[str]
    outputs: list[str]
    exact: bool = True  # False when log p(y|x) is an approximation
    name: str = "channel"

    def log_prob_block(self, input_ids: np.ndarray, output_ids: np.ndarray) -> np.ndarray:
        """``log p(y | x)`` as a ``(len(input_ids), len(output_ids))`` float64 array."""
        raise NotImplementedError

    # helpers ------------------------------------------------------------------
    def input_index(self) -> dict[str, int]:
        if not hasattr(self, "_iidx"):
            self._iidx = {w: i for i, w in enumerate(self.inputs)}
        return self._iidx

    def output_index(self) -> dict[str, int]:
        if not hasattr(self, "_oidx"):
            self._oidx = {w: i for i, w in enumerate(self.outputs)}
        return self._oidx

    def prob_matrix(self, block: int = 2048) -> np.ndarray:
        """The full ``(n, k)`` matrix (small vocabularies only: tests, N_w/S_w)."""
        n, k = len(self.inputs), len(self.outputs)
        if n * k > 50_000_000:
            raise ParameterError(f"the {n}×{k} channel matrix is too large to materialise; use blocks")
        out = np.empty((n, k))
        all_out = np.arange(k)
        for s in range(0, n, block):
            ids = np.arange(s, min(n, s + block))
            out[ids] = np.exp(self.log_prob_block(ids, all_out))
        return out

    def prob_rows(self, input_ids: np.ndarray) -> np.ndarray:
        """``p(· | x)`` over every output: float64 ``(len(input_ids), len(outputs))``."""
        return np.exp(self.log_prob_block(np.asarray(input_ids, dtype=np.int64), np.arange(len(self.outputs))))

    def sample(self, input_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Draw one output per input id (used for tests and N_w/S_w); returns output ids."""
        input_ids = np.asarray(input_ids, dtype=np.int64)
        out = np.empty(len(input_ids), dtype=np.int64)
        all_out = np.arange(len(self.outputs))
        uniq, inv = np.unique(input_ids, return_inverse=True)
        for b in range(0, len(uniq), 256):
            blk = uniq[b:b + 256]
            P = np.exp(self.log_prob_block(blk, all_out))
            cdf = np.cumsum(P, axis=1)
            for j, x in enumerate(blk):
                pos = np.flatnonzero(inv == (b + j))
                u = rng.random(len(pos)) * cdf[j, -1]
                out[pos] = np.minimum(np.searchsorted(cdf[j], u, side="right"), cdf.shape[1] - 1)
        return out


@dataclass
class MatrixChannel(Channel):
    """An explicit channel matrix ``P`` of shape ``(n_inputs, n_outputs)``, rows summing to 1."""

    P: np.ndarray
    inputs: list[str]
    outputs: list[str]
    name: str = "matrix"
    exact: bool = True

    def __post_init__(self):
        self.P = np.asarray(self.P, dtype=np.float64)
        if self.P.shape != (len(self.inputs), len(self.outputs)):
            raise ParameterError(f"matrix shape {self.P.shape} does not match {len(self.inputs)} inputs × "
                                 f"{len(self.outputs)} outputs")
        if (self.P < 0).any() or not np.allclose(self.P.sum(1), 1.0, atol=1e-6):
            raise ParameterError("channel matrix rows must be probability distributions (non-negative, sum 1)")
        with np.errstate(divide="ignore"):
            self._logP = np.log(self.P)

    def log_prob_block(self, input_ids, output_ids):
        return self._logP[np.ix_(np.asarray(input_ids), np.asarray(output_ids))]

    def prob_rows(self, input_ids):
        return self.P[np.asarray(input_ids, dtype=np.int64)]


class MechanismChannel(Channel):
    """A fitted textdp token sanitizer's exact law as a channel.

    ``mech``: any object with ``probabilities(words) -> float64 (k, V_out)`` and
    ``output_words`` (SanText, SanText+; the law its sampler really draws from, see
    :mod:`textdp.sanitize.base`); ``inputs``: the hypothesis space (words the
    mechanism accepts as input; default ``mech.output_words``). Rows come from
    ``mech.probabilities`` (full rows; :meth:`log_prob_block` selects columns, so
    prefer :class:`ExponentialChannel` for attacks on a few observed outputs).
    Mechanisms without a closed form (FBDD, ``exact_probabilities = False``) are
    refused: wrap ``mech.estimate_probabilities`` in a :class:`MatrixChannel`
    instead (it is then an estimate).
    """

    def __init__(self, mech, inputs: Sequence[str] | None = None, name: str | None = None):
        if not getattr(mech, "exact_probabilities", True) or not hasattr(mech, "probabilities"):
            raise ParameterError(f"{getattr(mech, 'name', type(mech).__name__)} has no closed-form output "
                                 "distribution; pass a Channel (e.g. a MatrixChannel of estimate_probabilities)")
        self.mech = mech
        self.outputs = list(mech.output_words)
        self.inputs = list(self.outputs if inputs is None else inputs)
        self.name = name or getattr(mech, "name", type(mech).__name__.lower())
        self.exact = True

    def prob_rows(self, input_ids):
        ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
        P = np.asarray(self.mech.probabilities([self.inputs[i] for i in ids.tolist()]), dtype=np.float64)
        if P.shape != (len(ids), len(self.outputs)):
            raise ParameterError(f"mech.probabilities returned shape {P.shape}, expected "
                                 f"({len(ids)}, {len(self.outputs)})")
        return P

    def log_prob_block(self, input_ids, output_ids):
        with np.errstate(divide="ignore"):
            return np.log(self.prob_rows(input_ids)[:, np.asarray(output_ids, dtype=np.int64)])


def _sq_dists(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    a2 = np.einsum("ij,ij->i", A, A)[:, None]
    b2 = np.einsum("ij,ij->i", B, B)[None, :]
    d2 = a2 + b2 - 2.0 * (A @ B.T)
    np.maximum(d2, 0.0, out=d2)
    return d2


def _logsumexp_rows(M: np.ndarray) -> np.ndarray:
    m = M.max(axis=1, keepdims=True)
    return (m + np.log(np.exp(M - m).sum(axis=1, keepdims=True)))[:, 0]


class ExponentialChannel(Channel):
    """SanText / SanText+ as a channel, computed in blocks (Yue et al. 2021, §4.2–4.3; spec A.3–A.4).

    SanText: ``p(y|x) = exp(−ε·d(x,y)/2) / Z(x)`` over the output set, ``d`` the
    Euclidean distance of raw embeddings.

    SanText+ (``sensitive`` given, probability ``p``): a sensitive input is
    resampled within the sensitive outputs ``V_S``; a non-sensitive input is
    kept with probability ``1 − p`` and otherwise resampled into ``V_S``. So
    ``log p(y|x) = log(p_x) − ε·d(x,y)/2 − log Z_S(x)`` for ``y ∈ V_S``
    (``p_x = 1`` for sensitive ``x``, ``p`` otherwise), ``log(1 − p)`` for
    ``y = x ∈ V_N`` and ``−∞`` for any other non-sensitive output.

    ``eta``: a uniform share mixed into the exponential law, ``(1 − η)·p + η/|V_S|``
    (textdp's float-safe sampler draws from exactly this law; ``η = 0`` is the
    paper's formula).

    ``input_vectors``: ``(n, m)``; ``output_vectors``: ``(k, m)`` float arrays.
    """

    def __init__(self, inputs: Sequence[str], input_vectors: np.ndarray, outputs: Sequence[str],
                 output_vectors: np.ndarray, epsilon: float, sensitive: Iterable[str] | None = None,
                 p: float = 1.0, block: int = 1024, name: str = "santext", eta: float = 0.0):
        if not (epsilon >= 0 and math.isfinite(epsilon)):
            raise ParameterError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.X = np.asarray(input_vectors, dtype=np.float64)
        self.Y = np.asarray(output_vectors, dtype=np.float64)
        if self.X.shape[0] != len(self.inputs) or self.Y.shape[0] != len(self.outputs):
            raise ParameterError("vectors and word lists differ in length")
        centre = self.Y.mean(axis=0) if len(self.Y) else 0.0  # distances are shift-invariant; less cancellation
        self.X, self.Y = self.X - centre, self.Y - centre
        self.epsilon, self.block, self.name = float(epsilon), int(block), name
        if not (0.0 <= eta < 1.0):
            raise ParameterError(f"eta must be in [0, 1), got {eta!r}")
        self.eta = float(eta)
        self.exact = True
        k = len(self.outputs)
        if sensitive is None:
            self.out_sensitive = np.ones(k, dtype=bool)
            self.in_sensitive = np.ones(len(self.inputs), dtype=bool)
            self.p = 1.0
        else:
            s = set(sensitive)
            self.out_sensitive = np.fromiter((w in s for w in self.outputs), bool, k)
            self.in_sensitive = np.fromiter((w in s for w in self.inputs), bool, len(self.inputs))
            if not (0.0 <= p <= 1.0):
                raise ParameterError(f"p must be in [0, 1], got {p!r}")
            self.p = float(p)
        self._sens_cols = np.flatnonzero(self.out_sensitive)
        self._logZ = np.empty(len(self.inputs))
        Ys = self.Y[self._sens_cols]
        for s in range(0, len(self.inputs), self.block):
            d = np.sqrt(_sq_dists(self.X[s:s + self.block], Ys))
            # the max term is 1; the rest in float32 with a float64 sum (relative error ~1e-7)
            m = d.min(axis=1, keepdims=True)
            e = np.exp((-0.5 * self.epsilon * (d - m)).astype(np.float32)).sum(axis=1, dtype=np.float64)
            self._logZ[s:s + self.block] = -0.5 * self.epsilon * m[:, 0] + np.log(e)
        self._x2 = np.einsum("ij,ij->i", self.X, self.X)
        self._y2 = np.einsum("ij,ij->i", self.Y, self.Y)
        self._out_index = {w: j for j, w in enumerate(self.outputs)}
        # the column of each input word among the outputs (for "kept" non-sensitive words)
        self._self_col = np.array([self._out_index.get(w, -1) for w in self.inputs], dtype=np.int64)

    def log_prob_block(self, input_ids, output_ids):
        input_ids = np.asarray(input_ids, dtype=np.int64)
        output_ids = np.asarray(output_ids, dtype=np.int64)
        L = self.X[input_ids] @ self.Y[output_ids].T  # squared distances, in place
        L *= -2.0
        L += self._x2[input_ids, None]
        L += self._y2[None, output_ids]
        np.maximum(L, 0.0, out=L)
        np.sqrt(L, out=L)
        L *= -0.5 * self.epsilon
        L -= self._logZ[input_ids, None]
        if self.eta > 0:  # the float-safe sampler's uniform share: (1 - eta) p + eta / |V_S|
            L += math.log1p(-self.eta)
            np.logaddexp(L, math.log(self.eta / max(1, len(self._sens_cols))), out=L)
        if self.p < 1.0 or not self.out_sensitive.all():
            sens_in = self.in_sensitive[input_ids]
            with np.errstate(divide="ignore"):
                log_p = np.where(sens_in, 0.0, math.log(self.p) if self.p > 0 else -np.inf)
                log_keep = math.log(1.0 - self.p) if self.p < 1 else -np.inf
            L = L + log_p[:, None]
            out_sens = self.out_sensitive[output_ids]
            L[:, ~out_sens] = -np.inf
            keep = (~sens_in[:, None]) & (self._self_col[input_ids][:, None] == output_ids[None, :])
            L[keep] = log_keep
        return L


class NoisyNearestChannel(Channel):
    """FBDD (Feyisetan et al. 2020; spec A.9) as an *approximate*, calibrated channel.

    FBDD adds noise ``z`` with density ``∝ exp(−ε‖z‖)`` to ``φ(x)`` and outputs the
    nearest word. The exact ``p(y|x)`` is the noise mass of ``y``'s Voronoi cell and
    has no closed form. In ``m`` dimensions the noise mass sits on a shell of radius
    about ``m/ε`` (far beyond typical word distances at small ε), so the density at
    the cell centre, ``exp(−ε·d(x,y))``, is badly over-confident. textdp therefore
    uses the exponential family ``p_s(y|x) ∝ exp(−s·d(x,y))`` and fits the single
    scale ``s`` by maximum likelihood on ``calibration`` pairs ``(x_i, y_i)`` that
    the attacker simulates with the public mechanism (the log-likelihood is concave
    in ``s``: golden-section search over ``[10⁻³ε, 2ε]`` in log scale, and ``s = 0``). Without
    calibration pairs ``s = ε``. Results say ``exact = False``.
    """

    def __init__(self, inputs, input_vectors, outputs, output_vectors, epsilon: float, block: int = 1024,
                 name: str = "fbdd", calibration: tuple[np.ndarray, np.ndarray] | None = None):
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.X = np.asarray(input_vectors, dtype=np.float64)
        self.Y = np.asarray(output_vectors, dtype=np.float64)
        self.epsilon, self.name, self.exact, self.block = float(epsilon), name, False, int(block)
        self.scale = self.epsilon
        if calibration is not None and len(calibration[0]):
            xi, yi = (np.asarray(a, dtype=np.int64) for a in calibration)
            D = np.sqrt(_sq_dists(self.X[xi], self.Y))  # (n_cal, k)
            dy = D[np.arange(len(xi)), yi]
            def ll(s: float) -> float:
                return float((-s * dy - _logsumexp_rows(-s * D)).sum())

            # golden-section search on log s (the log-likelihood is concave in s), plus s = 0
            a, b = math.log(self.epsilon * 1e-3), math.log(self.epsilon * 2.0)
            r = (math.sqrt(5) - 1) / 2
            c, d = b - r * (b - a), a + r * (b - a)
            fc, fd = ll(math.exp(c)), ll(math.exp(d))
            for _ in range(14):
                if fc >= fd:
                    b, d, fd = d, c, fc
                    c = b - r * (b - a)
                    fc = ll(math.exp(c))
                else:
                    a, c, fc = c, d, fd
                    d = a + r * (b - a)
                    fd = ll(math.exp(d))
            best_s, best = (math.exp(c), fc) if fc >= fd else (math.exp(d), fd)
            zero = ll(0.0)
            self.scale = best_s if best >= zero else 0.0
            self.calibration_loglik = max(best, zero) / len(xi)
        self._inner = ExponentialChannel(self.inputs, self.X, self.outputs, self.Y, 2.0 * self.scale,
                                         block=block, name=name)

    def log_prob_block(self, input_ids, output_ids):
        return self._inner.log_prob_block(input_ids, output_ids)


def word_prior(words: Sequence[str], source: str | Mapping[str, float] = "wordfreq", smoothing: float = 1.0,
               lang: str = "en") -> np.ndarray:
    """A prior ``π`` over ``words``: ``(len(words),)`` float64 log-probabilities summing (in prob) to 1.

    ``source``: ``"wordfreq"`` (wordfreq's English frequencies, floored at 1e-9 for
    unseen words), ``"uniform"``, or a mapping word → count (e.g. counts from a
    public corpus), add-``smoothing`` smoothed.
    """
    n = len(words)
    if n == 0:
        raise InputError("the prior needs at least one candidate word")
    if isinstance(source, str):
        if source == "uniform":
            w = np.ones(n)
        elif source == "wordfreq":
            try:
                from wordfreq import word_frequency
            except ImportError:
                raise MissingPackageError("the wordfreq prior needs 'wordfreq'; run: pip install 'textdp[data]'") from None
            w = np.fromiter((word_frequency(x, lang) for x in words), float, n)
            w = np.maximum(w, 1e-9)
        else:
            raise ParameterError(f"unknown prior {source!r}; use 'wordfreq', 'uniform' or a word->count mapping")
    else:
        w = np.fromiter((float(source.get(x, 0.0)) for x in words), float, n) + float(smoothing)
        if (w <= 0).all():
            raise ParameterError("corpus-count prior is zero for every candidate; use smoothing > 0")
    with np.errstate(divide="ignore"):
        return np.log(w) - math.log(w.sum())


@dataclass
class BayesResult:
    """Outcome of :meth:`BayesInversion.attack`.

    ``top1``/``topk``: success rates over the attacked tokens; ``prior_top1``: the
    success of guessing ``argmax π`` for every token (the no-observation
    baseline); ``n_tokens``: attacked tokens (originals in the hypothesis space);
    ``n_skipped``: tokens whose original or output is outside the channel;
    ``guesses``: ``(n_tokens, k)`` input ids of the top-k guesses.
    """

    top1: float
    topk: float
    k: int
    prior_top1: float
    n_tokens: int
    n_skipped: int
    exact: bool
    top1_changed: float | None = None
    n_changed: int = 0
    guesses: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {"bayes_top1": self.top1, f"bayes_top{self.k}": self.topk, "bayes_prior_top1": self.prior_top1,
                "bayes_top1_changed": self.top1_changed, "bayes_tokens": self.n_tokens,
                "bayes_changed_tokens": self.n_changed, "bayes_skipped": self.n_skipped,
                "bayes_exact_channel": self.exact}


class BayesInversion:
    """MAP inversion ``argmax_x p(y|x)·π(x)`` (see the module docstring).

    ``channel``: a :class:`Channel`; ``log_prior``: ``(n_inputs,)`` log-probabilities
    over ``channel.inputs`` (e.g. from :func:`word_prior`); ``k``: size of the
    top-k list (default 5).
    """

    def __init__(self, channel: Channel, log_prior: np.ndarray | None = None, k: int = 5, block: int = 1024):
        self.channel = channel
        n = len(channel.inputs)
        self.log_prior = np.zeros(n) - math.log(n) if log_prior is None else np.asarray(log_prior, float)
        if self.log_prior.shape != (n,):
            raise ParameterError(f"prior has shape {self.log_prior.shape}, expected ({n},)")
        if k < 1:
            raise ParameterError(f"k must be >= 1, got {k}")
        self.k, self.block = min(int(k), n), int(block)

    def topk_for_outputs(self, output_ids: np.ndarray) -> np.ndarray:
        """``(len(output_ids), k)`` input ids of the best-scoring candidates, best first.

        Ties inside the top-k are ordered by input index; which of several tied candidates
        enters the top-k at its boundary is deterministic but unspecified."""
        output_ids = np.asarray(output_ids, dtype=np.int64)
        n, k, m = len(self.channel.inputs), self.k, len(output_ids)
        best_s = np.full((m, k), -np.inf)
        best_i = np.zeros((m, k), dtype=np.int64)
        for s in range(0, n, self.block):
            ids = np.arange(s, min(n, s + self.block))
            S = self.channel.log_prob_block(ids, output_ids).T + self.log_prior[ids][None, :]  # (m, b)
            cand_s = np.concatenate([best_s, S], axis=1)
            cand_i = np.concatenate([best_i, np.broadcast_to(ids, (m, len(ids)))], axis=1)
            if cand_s.shape[1] > k:
                part = np.argpartition(-cand_s, k - 1, axis=1)[:, :k]
                cand_s = np.take_along_axis(cand_s, part, 1)
                cand_i = np.take_along_axis(cand_i, part, 1)
            order = np.lexsort((cand_i, -cand_s), axis=1)  # score desc, then index asc
            best_s = np.take_along_axis(cand_s, order, 1)
            best_i = np.take_along_axis(cand_i, order, 1)
        return best_i

    def guess(self, outputs: Sequence[str]) -> list[list[str]]:
        """Top-k guessed original words for each sanitized word (unknown outputs: empty list)."""
        oidx = self.channel.output_index()
        ids = np.array([oidx.get(y, -1) for y in outputs], dtype=np.int64)
        res: list[list[str]] = [[] for _ in outputs]
        ok = ids >= 0
        if ok.any():
            uniq, inv = np.unique(ids[ok], return_inverse=True)
            top = self.topk_for_outputs(uniq)
            words = self.channel.inputs
            for j, r in zip(np.flatnonzero(ok), inv):
                res[j] = [words[i] for i in top[r]]
        return res

    def attack(self, originals: Sequence[str], sanitized: Sequence[str], keep_guesses: bool = False) -> BayesResult:
        """Attack aligned token lists (``originals[i]`` was sanitized to ``sanitized[i]``).

        Tokens whose original is not in ``channel.inputs`` or whose output is not in
        ``channel.outputs`` (e.g. OOV policy outputs) are skipped and counted.
        Raises InputError when the lists differ in length or no token can be attacked.
        """
        if len(originals) != len(sanitized):
            raise InputError(f"{len(originals)} original tokens but {len(sanitized)} sanitized tokens")
        iidx, oidx = self.channel.input_index(), self.channel.output_index()
        x = np.fromiter((iidx.get(t, -1) for t in originals), np.int64, len(originals))
        y = np.fromiter((oidx.get(t, -1) for t in sanitized), np.int64, len(sanitized))
        ok = (x >= 0) & (y >= 0)
        n_ok = int(ok.sum())
        if n_ok == 0:
            raise InputError("no token can be attacked: no original is in the mechanism's vocabulary")
        x, y = x[ok], y[ok]
        uniq, inv = np.unique(y, return_inverse=True)
        top = self.topk_for_outputs(uniq)[inv]  # (n_ok, k)
        hit1 = top[:, 0] == x
        hitk = (top == x[:, None]).any(axis=1)
        changed = np.fromiter((o != s for o, s in zip(np.asarray(originals, object)[ok],
                                                      np.asarray(sanitized, object)[ok])), bool, n_ok)
        prior_best = int(np.argmax(self.log_prior))
        return BayesResult(
            top1=float(hit1.mean()), topk=float(hitk.mean()), k=self.k,
            prior_top1=float((x == prior_best).mean()), n_tokens=n_ok, n_skipped=len(originals) - n_ok,
            exact=bool(getattr(self.channel, "exact", True)),
            top1_changed=float(hit1[changed].mean()) if changed.any() else None, n_changed=int(changed.sum()),
            guesses=top if keep_guesses else None,
        )

    def expected_success(self, input_weights: np.ndarray, k: int = 1) -> float:
        """Exact expected top-``k`` success of this attack (its prior, its channel) when
        originals are drawn from ``input_weights`` (``(n_inputs,)``, normalised here):
        ``Σ_y Σ_{x∈T_k(y)} w(x) p(y|x)``. Streams every output in blocks
        (:func:`expected_success`); equals :func:`bayes_optimum` when the prior is ``w``."""
        res = expected_success(self.channel, input_weights, self.log_prior, k=k)
        return res.top1 if k == 1 else res.topk


# --------------------------------------------------------------------------- exact success
@dataclass
class BayesSuccess:
    """Exact expected success of an attacker who sees one sanitized token.

    ``top1`` / ``topk``: probabilities in [0, 1] (the expected share of tokens whose
    true word is the guess / among the ``k`` guesses) when the original ``x`` is drawn
    from the prior ``π`` (normalised over the channel's inputs) and the output from
    ``p(·|x)``. ``n_inputs``: hypotheses scanned; ``n_outputs``: outputs summed over;
    ``skipped_mass``: share of the prior's mass on words outside the channel's inputs
    (out-of-vocabulary words: left out and the rest renormalised, as
    :meth:`BayesInversion.attack` skips such tokens); ``exact``: the channel is the
    mechanism's exact law (False for FBDD's approximation).
    """

    top1: float
    topk: float
    k: int
    n_inputs: int
    n_outputs: int
    skipped_mass: float = 0.0
    exact: bool = True

    def to_dict(self, prefix: str = "bayes_optimum") -> dict:
        return {f"{prefix}_top1": self.top1, f"{prefix}_top{self.k}": self.topk}


def _as_channel(channel, prior, extra_inputs: bool = False) -> Channel:
    """``channel`` itself, or a :class:`MechanismChannel` over the prior's in-vocabulary words
    (plus the output vocabulary when ``extra_inputs``) for a fitted sanitizer."""
    if isinstance(channel, Channel):
        return channel
    if not hasattr(channel, "probabilities") or not hasattr(channel, "output_words"):
        raise ParameterError(f"expected a Channel or a fitted textdp sanitizer, got {type(channel).__name__}")
    if not isinstance(prior, Mapping):
        return MechanismChannel(channel)  # an array prior is over mech.output_words
    words = [w for w, c in prior.items() if float(c) > 0]
    if hasattr(channel, "input_rows") and words:
        words = [w for w, r in zip(words, channel.input_rows(words).tolist()) if r >= 0]
    if extra_inputs:
        have = set(words)
        words = [w for w in channel.output_words if w not in have] + words
    return MechanismChannel(channel, inputs=words)


def _prior_weights(channel: Channel, prior) -> tuple[np.ndarray, float]:
    """``(n_inputs,)`` weights normalised over the channel's inputs, and the share of the
    prior's mass outside them."""
    n = len(channel.inputs)
    if isinstance(prior, Mapping):
        idx = channel.input_index()
        w = np.zeros(n)
        total = 0.0
        for word, c in prior.items():
            c = prior_weight(word, c)
            total += c
            j = idx.get(word)
            if j is not None:
                w[j] += c
    else:
        w = np.array(prior, dtype=np.float64).reshape(-1)
        if w.shape != (n,):
            raise ParameterError(f"prior has shape {w.shape}, expected ({n},) (one weight per channel input)")
        if not (np.isfinite(w).all() and (w >= 0).all()):
            raise ParameterError("prior weights must be finite and >= 0")
        total = float(w.sum())
    inside = float(w.sum())
    if inside <= 0:
        raise InputError("the prior puts no mass on the channel's inputs (no word can be attacked)")
    return w / inside, 1.0 - inside / total


def prior_weight(word, c) -> float:
    """One prior weight as a float; ParameterError (one line) unless it is a finite number >= 0."""
    try:
        v = float(c)
    except (TypeError, ValueError):
        raise ParameterError(f"prior weight of {word!r} must be a number >= 0, got {c!r}") from None
    if not (v >= 0 and math.isfinite(v)):
        raise ParameterError(f"prior weight of {word!r} must be finite and >= 0, got {c!r}")
    return v


def _stream_success(channel: Channel, value_w: np.ndarray, k: int, block_bytes: int,
                    score_lp: np.ndarray | None = None) -> tuple[float, float, int]:
    """Σ_y of ``value_w(x)·p(y|x)`` over the top-1 / top-k inputs ``x`` by score
    ``p(y|x)·exp(score_lp(x))`` (``score_lp`` None: the score is the value itself, the
    optimum), streamed over input blocks; inputs with zero weight (score_lp = −∞) are never
    guessed. Scores are compared in linear scale (the prior shifted so that its largest
    weight is 1). Top-1 ties go to the lowest input index; which of several inputs tied at
    the k-th place enters the top-k is unspecified (as in BayesInversion)."""
    m = len(channel.outputs)
    if score_lp is None:
        ids_all, rho = np.flatnonzero(value_w > 0), None
    else:
        ids_all = np.flatnonzero(np.isfinite(score_lp))
        rho = np.zeros(len(score_lp))
        if len(ids_all):
            rho[ids_all] = np.exp(score_lp[ids_all] - score_lp[ids_all].max())
    kk = max(1, min(int(k), len(ids_all)))
    rows = max(1, int(block_bytes) // (8 * max(m, 1) * 4))
    b1_s, b1_v = np.full(m, -1.0), np.zeros(m)
    bk_s, bk_v = np.full((kk, m), -1.0), np.zeros((kk, m))
    for s in range(0, len(ids_all), rows):
        ids = ids_all[s:s + rows]
        P = np.asarray(channel.prob_rows(ids), dtype=np.float64)
        V = P * value_w[ids, None]
        S = V if rho is None else P * rho[ids, None]
        m1 = S.max(axis=0)
        c = np.flatnonzero(m1 > b1_s)  # strictly better: earlier blocks (lower indices) win ties
        if len(c):
            b1_s[c] = m1[c]
            # the value of the first (lowest index) of tied maxima
            b1_v[c] = m1[c] if rho is None else V[S[:, c].argmax(axis=0), c]
        if kk > 1:  # merge only the columns where this block beats the current k-th best
            c = np.flatnonzero((S > bk_s.min(axis=0)).any(axis=0))
            if len(c):
                cs, cv = np.concatenate([bk_s[:, c], S[:, c]]), np.concatenate([bk_v[:, c], V[:, c]])
                part = np.argpartition(cs, cs.shape[0] - kk, axis=0)[-kk:]
                bk_s[:, c], bk_v[:, c] = np.take_along_axis(cs, part, 0), np.take_along_axis(cv, part, 0)
    top1 = float(b1_v.sum())
    topk = float(bk_v.sum()) if kk > 1 else top1
    return min(top1, 1.0), min(topk, 1.0), len(ids_all)


def bayes_optimum(channel, prior, k: int = 5, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> BayesSuccess:
    """The exact optimum of any attacker who sees one sanitized token and guesses its original.

    top-1: ``Σ_y max_x π(x)·p(y|x)``; top-k: ``Σ_y`` (sum of the k largest ``π(x)·p(y|x)``
    over ``x``). No rule that sees only ``y`` does better (Bayes decision theory, 0-1
    loss); :class:`BayesInversion` with prior ``π`` attains it.

    ``channel``: a :class:`Channel` (inputs = hypothesis space) or a fitted textdp
    sanitizer with ``probabilities(words) -> float64 (k, V_out)`` (then a
    :class:`MechanismChannel` over the prior's in-vocabulary words is built; rows from
    ``mech.probabilities``, the law the sampler really draws from).
    ``prior``: ``π`` as a mapping word → non-negative weight (e.g. token counts of the
    attacked text; normalised here) or a ``(n_inputs,)`` weight array over
    ``channel.inputs`` (over ``mech.output_words`` for a sanitizer). Prior words outside
    the channel's inputs (out of vocabulary) are left out and the rest renormalised, as
    :meth:`BayesInversion.attack` skips such tokens; their share is ``skipped_mass``.
    ``k``: size of the guess list for ``topk``. ``block_bytes``: memory of one block of
    channel rows (blocks of ``block_bytes / (32·|Y|)`` inputs; memory ``O(block·|Y| + k·|Y|)``).

    Returns :class:`BayesSuccess` (probabilities in [0, 1], per attacked token). Cost:
    one pass over ``|supp π| × |Y|`` channel entries.
    """
    ch = _as_channel(channel, prior)
    w, skipped = _prior_weights(ch, prior)
    top1, topk, n = _stream_success(ch, w, k, block_bytes)
    return BayesSuccess(top1, topk, int(k), n, len(ch.outputs), skipped, bool(getattr(ch, "exact", True)))


def expected_success(channel, prior, decision_prior=None, k: int = 5, *,
                     block_bytes: int = DEFAULT_BLOCK_BYTES) -> BayesSuccess:
    """Exact expected success of the MAP attack with decision prior ``ρ`` when originals
    follow ``π``: ``Σ_x π(x) Σ_y p(y|x)·1[x ∈ T_k(y)]``, ``T_k(y)`` the k inputs with the
    largest ``ρ(x')·p(y|x')`` (``T_1(y) = argmax``, ties to the lowest input index).

    ``channel``, ``prior`` (``π``), ``k``, ``block_bytes``: as :func:`bayes_optimum`;
    for a sanitizer the hypothesis space is ``mech.output_words`` plus the prior's other
    in-vocabulary words. ``decision_prior`` (``ρ``): ``(n_inputs,)`` log-probabilities
    over ``channel.inputs`` (as :class:`BayesInversion` takes), a :func:`word_prior`
    source (``"wordfreq"``, ``"uniform"``, a word → count mapping, add-1 smoothed), or
    ``None`` for ``ρ = π`` (the optimum). Inputs with ``ρ = 0`` are never guessed.
    Always ``<=`` :func:`bayes_optimum` with the same ``π``. Cost: one pass over
    ``|{x: ρ(x) > 0}| × |Y|`` channel entries.
    """
    if decision_prior is None:
        return bayes_optimum(channel, prior, k, block_bytes=block_bytes)
    ch = _as_channel(channel, prior, extra_inputs=True)
    w, skipped = _prior_weights(ch, prior)
    n = len(ch.inputs)
    if isinstance(decision_prior, (str, Mapping)):
        lp = word_prior(ch.inputs, decision_prior)
    else:
        lp = np.asarray(decision_prior, dtype=np.float64).reshape(-1)
        if lp.shape != (n,):
            raise ParameterError(f"decision prior has shape {lp.shape}, expected ({n},)")
        if np.isnan(lp).any() or (lp == np.inf).any():
            raise ParameterError("decision prior must be log-probabilities (no NaN or +inf)")
    top1, topk, n_h = _stream_success(ch, w, k, block_bytes, score_lp=lp)
    return BayesSuccess(top1, topk, int(k), n_h, len(ch.outputs), skipped, bool(getattr(ch, "exact", True)))
