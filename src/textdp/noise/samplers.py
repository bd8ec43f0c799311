"""Floating-point-safe noise samplers used by every DP release in textdp.

The signatures here are the contract the capabilities rely on. Each sampler
takes an explicit ``numpy.random.Generator`` (from :func:`textdp.noise.make_rng`,
a ChaCha20 CSPRNG by default).

Why not ``rng.laplace`` / ``rng.normal`` / softmax + ``choice``?
    Textbook float samplers leak the input through the low-order bits of their
    outputs (Mironov, "On significance of the least significant bits for
    differential privacy", CCS 2012), their tails are truncated at ~2**-53, and
    Delta-Siege (Lokna et al., CCS 2023) found violations in the float
    Gaussian/Laplace samplers of Opacus, diffprivlib, OpenDP and PyDP. A
    softmax + cumulative-sum sampler gives probability exactly 0 to outcomes
    whose weight is below 2**-53 of the total, so the support depends on the
    input and pure (metric) DP fails outright.

What this module does instead (design notes in ``docs/trust.md``):

* :func:`laplace` and :func:`gaussian` return ``g * Z`` where ``g`` is a power
  of two (the *granularity*) and ``Z`` is an exact discrete Laplace / discrete
  Gaussian integer (the laws of Canonne, Kamath & Steinke 2020), sampled from
  uniform 64-bit words with certified decisions and an exact continuation
  (:mod:`textdp.noise.exact`; numpy, or an optional numba kernel). This is the construction of
  Google's secure noise (``Secure_Noise_Generation.pdf``) with CKS20 sampling.
  The integer scale is rounded *up* (``ceil(scale / g) * g >= scale``), so the
  noise is never smaller than requested. Granularity: ``scale * 2**-40`` for
  Laplace, ``sigma * 2**-12`` for Gaussian (the limit of exact int64 arithmetic
  in CKS20 Algorithm 3). To release ``value + noise`` safely, use
  :func:`laplace_mechanism` / :func:`gaussian_mechanism`: they snap the values
  to the same grid first (so every sum is exact in float64) and inflate the
  scale to pay for the rounding (the *discretisation cost*, see each docstring).
* :func:`randomized_response` uses exact Bernoulli draws of a dyadic rational.
* :func:`categorical_from_log_weights` (the exponential mechanism of SanText,
  SanText+, ...) mixes the target law with a tiny uniform share ``eta`` (which
  can only lower the privacy loss), converts it to integer weights summing to
  about 2**62, and samples an index with one exact uniform integer and an
  integer binary search. Its extra privacy loss is bounded by
  :func:`categorical_discretisation_epsilon` (2.4e-7 for a 2**19-word
  vocabulary) and recorded in cards.
* :func:`gamma` and :func:`uniform_direction` (FBDD's radius and direction)
  are continuous draws snapped to a dyadic grid (2**-40 relative). FBDD only
  releases the *nearest vocabulary word* to ``phi(w) + noise``, a discrete
  post-processing: the low-order bits never leave the process. The residual
  deviation from the ideal law is documented in ``docs/threat-model.md``.

Throughput (``benchmarks/bench_trust.py``): see ``docs/trust.md``.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.errors import ParameterError
from textdp.noise import exact

__all__ = [
    "laplace",
    "gaussian",
    "randomized_response",
    "categorical_from_log_weights",
    "categorical_from_weights",
    "gamma",
    "uniform_direction",
    "discrete_laplace",
    "discrete_gaussian",
    "bernoulli",
    "laplace_granularity",
    "gaussian_granularity",
    "snap_to_grid",
    "laplace_mechanism",
    "gaussian_mechanism",
    "laplace_mechanism_params",
    "gaussian_mechanism_params",
    "ExactCategorical",
    "categorical_discretisation_epsilon",
    "DEFAULT_ETA",
    "LAPLACE_BITS",
    "GAUSSIAN_BITS",
]

LAPLACE_BITS = 40  # noise resolution: scale * 2**-40
GAUSSIAN_BITS = 12  # noise resolution: sigma * 2**-12 (CKS20 Alg. 3 in exact int64)
DEFAULT_ETA = 2.0**-20  # uniform share mixed into the exponential mechanism
_WEIGHT_BITS = 62  # integer weights of a categorical row sum to ~2**62
_FLOAT_SLACK = 2.0**-40  # bound on the relative float error of a computed probability


def _positive(x: float, name: str) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a positive finite number, got {x!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise ParameterError(f"{name} must be a positive finite number, got {x!r}")
    return x


def _pow2_at_least(x: float) -> int:
    """Smallest k with 2**k >= x (x > 0)."""
    m, e = math.frexp(x)  # x = m * 2**e, 0.5 <= m < 1
    return e - 1 if m == 0.5 else e


def laplace_granularity(scale: float) -> float:
    """The power-of-two grid ``g`` of :func:`laplace` noise of this scale (``~scale * 2**-40``)."""
    scale = _positive(scale, "scale")
    g = math.ldexp(1.0, _pow2_at_least(scale) - LAPLACE_BITS)
    if g == 0.0:
        raise ParameterError(f"scale {scale!r} is too small for a float-safe grid; rescale the data")
    return g


def gaussian_granularity(sigma: float) -> float:
    """The power-of-two grid ``g`` of :func:`gaussian` noise of this sigma (``~sigma * 2**-12``)."""
    sigma = _positive(sigma, "sigma")
    g = math.ldexp(1.0, _pow2_at_least(sigma) - GAUSSIAN_BITS)
    if g == 0.0:
        raise ParameterError(f"sigma {sigma!r} is too small for a float-safe grid; rescale the data")
    return g


_LAPLACE_PARAMS: dict = {}
_GAUSSIAN_PARAMS: dict = {}
_DLAP_PARAMS: dict = {}


def _cached(cache: dict, key, fn):
    """``fn(key)`` memoised on the (hashable, non-NaN) parameter value; validation errors are not cached."""
    try:
        return cache[key]
    except (KeyError, TypeError):
        pass
    val = fn(key)
    try:
        if len(cache) > 1024:
            cache.clear()
        cache[key] = val
    except TypeError:
        pass
    return val


def _laplace_params(scale) -> tuple[float, int]:
    scale = _positive(scale, "scale")
    g = laplace_granularity(scale)
    return g, math.ceil(scale / g)


def _gaussian_params(sigma) -> tuple[float, int]:
    sigma = _positive(sigma, "sigma")
    g = gaussian_granularity(sigma)
    return g, math.ceil(sigma / g)


def laplace(scale: float, size, rng: np.random.Generator) -> np.ndarray:
    """Laplace(0, scale) noise of shape ``size`` (float64), float-safe.

    Returns ``g * Z`` with ``g = laplace_granularity(scale)`` (a power of two,
    about ``scale * 2**-40``) and ``Z`` exact discrete Laplace with
    ``P(Z = z) ∝ exp(-|z| / t)``, ``t = ceil(scale / g)`` (so the effective
    scale ``t * g`` is ``>= scale`` and ``< scale * (1 + 2**-39)``).
    Reference: Canonne, Kamath & Steinke (2020), Algorithm 2.

    Raises ParameterError for a non-positive or non-finite scale.
    """
    g, t = _cached(_LAPLACE_PARAMS, scale, _laplace_params)
    return exact.discrete_laplace_int(t, size, rng) * g  # int64 * power of two: exact float64


def gaussian(sigma: float, size, rng: np.random.Generator) -> np.ndarray:
    """N(0, sigma^2) noise of shape ``size`` (float64), float-safe.

    Returns ``g * Z`` with ``g = gaussian_granularity(sigma)`` (a power of two,
    about ``sigma * 2**-12``) and ``Z`` an exact discrete Gaussian
    ``N_Z(0, s^2)``, ``s = ceil(sigma / g)`` in ``(2**11, 2**12]`` (effective
    sigma ``s * g`` in ``[sigma, sigma * (1 + 2**-11))``).
    Privacy: CKS20 Theorem 14 -- the discrete Gaussian gives ``Delta^2/(2 s^2)``
    zero-concentrated DP for an integer sensitivity ``Delta`` (in units of g),
    the same as the continuous Gaussian; see :func:`gaussian_mechanism`.
    """
    g, s = _cached(_GAUSSIAN_PARAMS, sigma, _gaussian_params)
    return exact.discrete_gaussian_int(s, size, rng) * g  # int64 * power of two: exact float64


def discrete_laplace(scale: float, size, rng: np.random.Generator) -> np.ndarray:
    """Exact discrete Laplace on the integers: ``P(Z = z) ∝ exp(-|z| / scale)``; int64.

    ``scale`` is used as the exact rational value of the float, rounded *up* to
    49 significant bits when it has more (more noise, never less).
    """
    num, den = _cached(_DLAP_PARAMS, scale, _dlap_params)
    # P(z) ∝ exp(-|z| den / num): CKS20 Algorithm 2 with t = num, s = den (z = floor(X / s))
    shape = exact._as_size(size)
    n = math.prod(shape) if shape else 1
    out = exact.discrete_laplace_rational(num, den, n, rng)
    return out.reshape(shape) if shape else out[0]


def _dlap_params(scale) -> tuple[int, int]:
    scale = _positive(scale, "scale")
    num, den = scale.as_integer_ratio()
    while num >= (1 << 49):  # round up to fewer bits: (num/den) <= ceil(num/2)/(den/2)
        if den > 1:
            num, den = -(-num // 2), den // 2
        else:
            raise ParameterError(f"scale {scale!r} is too large for the exact discrete Laplace")
    return num, den


def discrete_gaussian(sigma: int, size, rng: np.random.Generator) -> np.ndarray:
    """Exact discrete Gaussian on the integers, ``P(Z = z) ∝ exp(-z^2 / (2 sigma^2))``; int64.

    ``sigma`` must be an integer in [1, 4096] (exact int64 arithmetic in CKS20
    Algorithm 3); for real-valued noise use :func:`gaussian`.
    """
    if isinstance(sigma, bool) or float(sigma) != int(sigma) or not (1 <= int(sigma) <= 4096):
        raise ParameterError(f"discrete_gaussian needs an integer sigma in [1, 4096], got {sigma!r}")
    return exact.discrete_gaussian_int(int(sigma), size, rng)


def bernoulli(p: float, size, rng: np.random.Generator) -> np.ndarray:
    """Exact Bernoulli(p) (bool array): ``p`` is a float, i.e. an exact dyadic rational."""
    p = float(p)
    if not (0.0 <= p <= 1.0):
        raise ParameterError(f"probability must be in [0, 1], got {p!r}")
    return exact.bernoulli_dyadic(p, size, rng)


def snap_to_grid(values, granularity: float) -> np.ndarray:
    """Round ``values`` to the nearest multiple of the power-of-two ``granularity`` (float64).

    Exact: ``x / g`` and ``k * g`` are exact in binary floating point for a
    power of two ``g`` (barring over/underflow); ties go to even.
    """
    g = float(granularity)
    return np.rint(np.asarray(values, dtype=np.float64) / g) * g


def _stable_grid(gran, base: float, inflate) -> tuple[float, float]:
    """Find a grid g and an inflated noise parameter whose own grid is g (so that
    values snapped to g and the noise lie on the same lattice)."""
    g = gran(base)
    for _ in range(8):
        param = inflate(g)
        if gran(param) == g:
            return g, param
        g = gran(param)
    raise ParameterError("the discretisation cost is too large for this many coordinates; rescale the data")


def laplace_mechanism(values, sensitivity: float, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Release ``values + Laplace`` with pure epsilon-DP, float-safely (float64 array).

    ``sensitivity``: L1 sensitivity of ``values`` (sum over coordinates) per
    protected unit. Steps: (1) snap values to the grid ``g`` of the noise
    (values and noise MUST share the lattice: off-lattice inputs would be
    revealed by ``output mod g``); (2) add ``g * DLap`` noise of scale
    ``(sensitivity + d g) / epsilon``, where ``d`` is the number of coordinates:
    snapping moves each coordinate by at most ``g/2``, so snapped neighbours
    differ by at most ``sensitivity + d g`` in L1. The discretisation cost is
    thus a scale factor ``1 + d g / sensitivity`` (about
    ``1 + d 2**-40 / epsilon``), paid in noise, so the guarantee is exactly
    ``epsilon``. Every sum is exact in float64 while ``|value| < 2**52 g``.
    """
    x = np.asarray(values, dtype=np.float64)
    g, scale = laplace_mechanism_params(x.size, sensitivity, epsilon)
    return snap_to_grid(x, g) + laplace(scale, x.shape, rng)


def laplace_mechanism_params(n_coords: int, sensitivity: float, epsilon: float) -> tuple[float, float]:
    """``(granularity, scale)`` used by :func:`laplace_mechanism` for ``n_coords`` values
    (for cards: the scale includes the discretisation cost)."""
    sensitivity = _positive(sensitivity, "sensitivity")
    epsilon = _positive(epsilon, "epsilon")
    d = max(1, int(n_coords))
    return _stable_grid(laplace_granularity, sensitivity / epsilon, lambda g: (sensitivity + d * g) / epsilon)


def gaussian_mechanism(values, l2_sensitivity: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Release ``values + N(0, sigma'^2)`` float-safely, ``sigma' = sigma (1 + sqrt(d) g / Delta)``.

    Values are snapped to the noise grid ``g`` (the lattice of the discrete
    Gaussian; see :func:`laplace_mechanism` for why it must be the same one).
    Snapping moves a d-dimensional vector by at most ``sqrt(d) g / 2``, so
    snapped neighbours differ by at most ``Delta + sqrt(d) g`` in L2; the noise
    is inflated by that factor so the zCDP parameter stays
    ``rho = Delta^2 / (2 sigma^2)`` (CKS20 Theorems 14-15; the multivariate
    correction ``tau`` of Theorem 15 is below 1e-100 for ``s > 2**11``).
    ``sigma`` is what a caller would pass to a continuous Gaussian.
    """
    x = np.asarray(values, dtype=np.float64)
    g, sig = gaussian_mechanism_params(x.size, l2_sensitivity, sigma)
    return snap_to_grid(x, g) + gaussian(sig, x.shape, rng)


def gaussian_mechanism_params(n_coords: int, l2_sensitivity: float, sigma: float) -> tuple[float, float]:
    """``(granularity, sigma_eff)`` used by :func:`gaussian_mechanism` for ``n_coords`` values.

    The inflation ``sigma_eff / sigma = 1 + sqrt(d) g / Delta`` with
    ``g ~ sigma 2**-12`` is small for scalars and short vectors (d = 100 and
    sigma = Delta: +0.2 %) but grows with sqrt(d) (d = 10**6: +24 %); for
    DP-SGD-sized vectors use Opacus' secure mode instead.
    """
    delta = _positive(l2_sensitivity, "l2_sensitivity")
    sigma = _positive(sigma, "sigma")
    d = max(1, int(n_coords))
    return _stable_grid(gaussian_granularity, sigma, lambda g: sigma * (1.0 + math.sqrt(d) * g / delta))


def gamma(shape: float, scale: float, size, rng: np.random.Generator) -> np.ndarray:
    """Gamma(shape, scale) draws (the radius of multivariate Laplace noise), float64.

    Continuous draw (numpy's Marsaglia-Tsang on the CSPRNG) snapped to the grid
    ``scale * 2**-40`` (power of two), so no input-independent low-order bits
    are emitted. Use only where the result is post-processed into a discrete
    output (FBDD's nearest word); the snapping changes each draw by at most
    ``2**-41 * scale``.
    """
    shape_ = _positive(shape, "shape")
    scale = _positive(scale, "scale")
    g = laplace_granularity(scale)
    return snap_to_grid(rng.gamma(shape_, scale, size), g)


def uniform_direction(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, dim)`` unit vectors uniform on the sphere (normalised Gaussians), float64.

    Coordinates are snapped to the grid 2**-40 after normalising (norm 1 within
    ``sqrt(dim) * 2**-41``). Same use restriction as :func:`gamma`.
    """
    n, dim = int(n), int(dim)
    if n < 0 or dim < 1:
        raise ParameterError(f"need n >= 0 and dim >= 1, got n={n}, dim={dim}")
    g = rng.standard_normal((n, dim))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    bad = norms[:, 0] == 0
    if bad.any():  # probability ~0; redraw deterministically-safe
        g[bad] = 1.0
        norms[bad] = math.sqrt(dim)
    return snap_to_grid(g / norms, 2.0**-40)


def randomized_response(bits: np.ndarray, flip_probability: float, rng: np.random.Generator) -> np.ndarray:
    """Randomized response as in LP-LDA: with probability ``f`` the bit is replaced
    by a fair coin (so it flips with probability ``f/2``). ``bits``: bool/0-1
    array; returns the same shape (uint8).

    Exact: the replacement event is an exact Bernoulli(f) (:func:`bernoulli`),
    the coin an exact uniform bit. Guarantee: ``ln((2 - f) / f)``-LDP per bit.
    """
    try:
        f = float(flip_probability)
    except (TypeError, ValueError):
        raise ParameterError(f"flip probability f must be in (0, 1), got {flip_probability!r}") from None
    if not (0 < f < 1):
        raise ParameterError(f"flip probability f must be in (0, 1), got {flip_probability!r}")
    b = np.asarray(bits).astype(bool)
    replace = exact.bernoulli_dyadic(f, b.shape, rng)
    coin = rng.integers(0, 2, size=b.shape).astype(bool)
    return np.where(replace, coin, b).astype(np.uint8)


# ---------------------------------------------------------------- exponential mechanism


def categorical_discretisation_epsilon(n_outcomes: int, eta: float = DEFAULT_ETA) -> float:
    """Extra privacy loss of :func:`categorical_from_log_weights` over the ideal law.

    The sampler draws from ``r_i = c_i / C`` where ``c_i = rint(2**62 q_i)`` and
    ``q = (1 - eta) p + eta / V`` is the target law ``p`` mixed with the uniform
    law on the ``V`` outcomes. (i) Mixing cannot increase the loss:
    ``q(y|x)/q(y|x') <= max(p(y|x)/p(y|x'), 1)`` (mediant inequality).
    (ii) Every ``q_i >= eta / V``, so rounding to integers changes each
    probability by a relative ``<= 2**-63 V / eta`` (and the total ``C`` by
    ``<= 2**-63 V``); float evaluation of ``q`` adds a relative error
    ``<= 2**-40``. The log-ratio of the realised law therefore exceeds the
    ideal one by at most ``4 (2**-63 V / eta + 2**-40)`` -- the value returned,
    an additive epsilon per draw (per token for SanText) recorded in cards.
    """
    v = int(n_outcomes)
    eta = float(eta)
    return 4.0 * (2.0**-63 * v / eta + _FLOAT_SLACK)


def _check_eta(eta: float, v: int) -> float:
    eta = float(eta)
    if not (0 < eta < 1):
        raise ParameterError(f"eta must be in (0, 1), got {eta!r}")
    if 2.0**_WEIGHT_BITS * eta / v < 2.0**10:
        raise ParameterError(f"eta={eta:g} is too small for {v} outcomes (need eta >= {v * 2.0 ** -52:.3g})")
    return eta


def _search_rows(cdf: np.ndarray, rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """For each draw i, the smallest j with ``cdf[rows[i], j] > u[i]`` (int64).

    Draws are grouped by row (a stable sort when ``rows`` is not already
    grouped) and each group is one ``np.searchsorted`` on its row's integer CDF:
    a Python loop over *distinct rows*, never over draws.
    """
    out = np.empty(rows.size, dtype=np.int64)
    if rows.size == 0:
        return out
    if rows.size > 1 and np.any(rows[1:] < rows[:-1]):
        order = np.argsort(rows, kind="stable")
    else:
        order = None
    r_sorted = rows if order is None else rows[order]
    u_sorted = u if order is None else u[order]
    bounds = np.flatnonzero(np.diff(r_sorted)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [rows.size]])
    res = np.empty(rows.size, dtype=np.int64)
    for a, b in zip(starts.tolist(), stops.tolist()):
        res[a:b] = np.searchsorted(cdf[r_sorted[a]], u_sorted[a:b], side="right")
    if order is None:
        return res
    out[order] = res
    return out


class ExactCategorical:
    """Float-safe exponential-mechanism sampler over ``B`` rows of ``V`` outcomes.

    Build once from log-weights (e.g. SanText's ``-eps * D / 2`` over a whole
    vocabulary), then sample any number of draws by row index, vectorised.

    log_w: ``(B, V)`` float64 unnormalised log-weights (``-inf`` allowed; NaN not).
    eta: uniform share mixed in (default 2**-20; see
    :func:`categorical_discretisation_epsilon` for the privacy accounting).
    Memory: ``8 B V`` bytes (uint64 cumulative weights).
    """

    def __init__(self, log_w: np.ndarray, eta: float = DEFAULT_ETA):
        log_w = np.asarray(log_w, dtype=np.float64)
        if log_w.ndim != 2 or log_w.shape[1] < 1:
            raise ParameterError(f"log-weights must be a (rows, outcomes) array, got shape {log_w.shape}")
        self.eta = _check_eta(eta, log_w.shape[1])
        self.n_rows, self.n_outcomes = log_w.shape
        self.cdf = np.cumsum(_integer_weights(log_w, self.eta, log=True), axis=1).view(np.uint64)

    @property
    def extra_epsilon(self) -> float:
        """Additive privacy loss of the discretisation (see :func:`categorical_discretisation_epsilon`)."""
        return categorical_discretisation_epsilon(self.n_outcomes, self.eta)

    def probabilities(self) -> np.ndarray:
        """The exact law sampled, ``(B, V)`` float64 (for tests and audits)."""
        c = np.diff(self.cdf, axis=1, prepend=np.zeros((self.n_rows, 1), dtype=np.uint64))
        return c.astype(np.float64) / self.cdf[:, -1:].astype(np.float64)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw per entry of ``rows`` (int array of row indices); int64 outcome indices."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_rows):
            raise ParameterError(f"row index out of range [0, {self.n_rows})")
        flat_rows = rows.ravel()
        totals = self.cdf[flat_rows, -1]
        u = rng.integers(0, totals, dtype=np.uint64) if flat_rows.size else np.zeros(0, np.uint64)
        return _search_rows(self.cdf, flat_rows, u).reshape(rows.shape)


_BLOCK_ELEMS = 1 << 22  # rows are processed in blocks of about 4M weights (32 MB)


def categorical_from_log_weights(
    log_w: np.ndarray, counts: np.ndarray, rng: np.random.Generator, *, eta: float = DEFAULT_ETA
) -> list[np.ndarray]:
    """Exponential-mechanism style sampling from unnormalised log-weights, float-safe.

    log_w: ``(B, V)`` float64, row b the log-weights of distribution b.
    counts: ``(B,)`` int, how many independent draws from each row.
    Returns a list of B int64 arrays (indices into V), ``counts[b]`` long each.

    Draws from ``(1 - eta) softmax(log_w[b]) + eta / V`` with exact integer
    sampling (see :class:`ExactCategorical`); the extra privacy loss per draw is
    ``categorical_discretisation_epsilon(V, eta)`` (about 2.4e-7 for V = 2**19).
    Rows are processed in blocks, so memory stays near 64 MB whatever B is.
    Raises ParameterError for NaN/+inf weights, an empty row or negative counts.
    """
    log_w = np.asarray(log_w, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    if log_w.ndim != 2:
        raise ParameterError(f"log-weights must be a (rows, outcomes) array, got shape {log_w.shape}")
    b, v = log_w.shape
    if counts.shape != (b,):
        raise ParameterError(f"counts must have shape ({b},), got {counts.shape}")
    if (counts < 0).any():
        raise ParameterError("counts must be >= 0")
    if v < 1:
        raise ParameterError("log-weights need at least one outcome per row")
    eta = _check_eta(eta, v)
    out_flat = _blocked(log_w, counts, rng, eta, log=True)
    offsets = np.cumsum(counts)
    return np.split(out_flat, offsets[:-1])


def _integer_weights(w: np.ndarray, eta: float, log: bool = False) -> np.ndarray:
    """(B, V) weights (or log-weights) -> (B, V) int64 ``rint(2**62 ((1 - eta) w / sum(w) + eta / V))``."""
    v = w.shape[1]
    if log:
        if np.isnan(w).any() or (w == np.inf).any():
            raise ParameterError("log-weights must be finite or -inf (no NaN or +inf)")
        mx = w.max(axis=1, keepdims=True)
        if not np.all(np.isfinite(mx)):
            raise ParameterError("every row of log-weights needs at least one finite entry")
        q = np.exp(w - mx)
    else:
        q = w
    tot = q.sum(axis=1, keepdims=True, dtype=np.float64)
    if not np.all(np.isfinite(tot)) or (not log and q.min() < 0):
        raise ParameterError("weights must be finite and non-negative")
    if not np.all(tot > 0):
        raise ParameterError("every weight row needs a positive sum")
    q = np.multiply(q, (1.0 - eta) * 2.0**_WEIGHT_BITS / tot, dtype=np.float64)
    q += eta / v * 2.0**_WEIGHT_BITS + 0.5  # + 0.5 then truncation = round half up
    return q.astype(np.int64)


_GATHER = 1 << 21  # elements gathered at once in the two-level search


def _sample_integer_rows(c: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Exact draws from integer-weight rows ``c`` (int64 ``(R, V)``, row sums < 2**63).

    Returns int64 ``(counts.sum(),)`` grouped by row. Rows with many draws: full
    cumulative sum + ``searchsorted``. Rows with few draws: two-level search -- exact
    integer chunk sums (about sqrt(V) chunks) pick a chunk, the chunk's own cumulative
    sum picks the column -- so the cost is one pass over the row plus O(sqrt V) per draw.
    """
    r_, v = c.shape
    out = np.empty(int(counts.sum()), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    chunk = max(16, int(math.isqrt(v)))
    starts = np.arange(0, v, chunk)
    n_chunks = starts.size
    heavy = counts > max(8, n_chunks)
    for b in np.flatnonzero(heavy).tolist():
        cdf = np.cumsum(c[b])
        u = rng.integers(0, cdf[-1], size=int(counts[b]))
        out[offsets[b]:offsets[b + 1]] = np.searchsorted(cdf, u, side="right")
    light = np.flatnonzero(~heavy & (counts > 0))
    if light.size == 0:
        return out
    cl = c[light]
    sums = np.add.reduceat(cl, starts, axis=1)  # exact int64 chunk sums
    cum = np.cumsum(sums, axis=1)
    rows = np.repeat(np.arange(light.size), counts[light])
    dest = np.concatenate([np.arange(offsets[b], offsets[b + 1]) for b in light.tolist()])
    u = rng.integers(0, cum[rows, -1])
    offs = np.arange(chunk)
    step = max(1, _GATHER // max(n_chunks, chunk))
    for s0 in range(0, rows.size, step):
        r = rows[s0:s0 + step]
        uu = u[s0:s0 + step]
        k = (cum[r] <= uu[:, None]).sum(axis=1)
        rem = uu - np.where(k > 0, cum[r, np.maximum(k - 1, 0)], 0)
        cols = starts[k][:, None] + offs
        vals = np.where(cols < v, cl[r[:, None], np.minimum(cols, v - 1)], 0)
        j = (np.cumsum(vals, axis=1) <= rem[:, None]).sum(axis=1)
        out[dest[s0:s0 + step]] = starts[k] + j
    return out


def categorical_from_weights(
    weights: np.ndarray, counts: np.ndarray, rng: np.random.Generator, *, eta: float = DEFAULT_ETA
) -> np.ndarray:
    """Float-safe draws from categorical rows given by non-negative weights.

    weights: ``(B, V)`` float32/float64, finite, non-negative, each row with a
    positive sum (not modified). counts: ``(B,)`` draws per row.
    Returns int64 ``(counts.sum(),)``: first the ``counts[0]`` draws of row 0,
    then those of row 1, ... -- the contract of
    ``textdp.sanitize.sampling.sample_categorical_rows``, so it can replace it.

    Law: ``(1 - eta) w / sum(w) + eta / V`` sampled exactly with integer weights
    (see :func:`categorical_discretisation_epsilon`). A weight that underflowed to
    0 upstream still gets probability ``>= eta / V``, so the support never depends
    on the input. Rows are processed in blocks of about 4M weights.
    """
    w = np.asarray(weights)
    counts = np.asarray(counts, dtype=np.int64)
    if w.ndim != 2 or w.shape[1] < 1:
        raise ParameterError(f"weights must be a (rows, outcomes) array, got shape {w.shape}")
    b, v = w.shape
    if counts.shape != (b,) or (counts < 0).any():
        raise ParameterError(f"counts must be {b} non-negative integers")
    return _blocked(w, counts, rng, _check_eta(eta, v), log=False)


def _blocked(w: np.ndarray, counts: np.ndarray, rng, eta: float, log: bool) -> np.ndarray:
    b, v = w.shape
    out = np.empty(int(counts.sum()), dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    step = max(1, _BLOCK_ELEMS // v)
    for start in range(0, b, step):
        stop = min(b, start + step)
        c = counts[start:stop]
        keep = np.flatnonzero(c)
        if keep.size == 0:
            continue
        ints = _integer_weights(w[start:stop][keep], eta, log=log)
        out[offsets[start]:offsets[stop]] = _sample_integer_rows(ints, c[keep], rng)
    return out
