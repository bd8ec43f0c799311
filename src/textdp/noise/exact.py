"""Exact integer samplers (Canonne, Kamath & Steinke, NeurIPS 2020: "The Discrete
Gaussian for Differential Privacy", Algorithms 1-3), vectorised over numpy arrays.

Every random draw here is a uniform *integer* from the generator
(``Generator.integers``, which is unbiased), and every decision compares such
integers with integers or with a *certified interval*: Bernoulli(exp(-gamma))
(:func:`bernoulli_exp_frac`) compares the first 62 bits of a uniform real with
``numpy.exp`` widened by a 2**-40 relative margin and finishes the rare
undecided draws (probability ~2**-39) with more random bits against a correctly
rounded ``decimal`` evaluation, so the output law is exactly the stated one
(given that numpy's exp is within the margin; the integer-only CKS20 Algorithm 1
is kept as :func:`bernoulli_exp_frac_cks`). This is what makes the float samplers built on top
(:mod:`textdp.noise.samplers`) immune to the low-order-bit attacks of Mironov
(CCS 2012) and to the Box-Muller/inversion sampler bugs reported by Delta-Siege
(Lokna et al., CCS 2023).

Fast path: :func:`discrete_laplace_rational` and :func:`discrete_gaussian_int`
(behind every ``laplace``/``gaussian``/``discrete_laplace`` release) realise the
laws of CKS20 Algorithms 2 and 3 from one or two uniform 64-bit words per
candidate with certified float decisions, evaluated in bulk by numpy or by an
optional numba kernel (:mod:`textdp.noise._kernels`, a pure function of the
words: randomness only ever comes from the caller's Generator); see the comment
block "fast exact samplers" below for the construction and its proof. The
CKS20 algorithms as written are kept as :func:`discrete_laplace_rational_cks`
and :func:`discrete_gaussian_int_cks` (references in the tests).

Limits (checked, documented where they are enforced):

* :func:`bernoulli_exp` needs ``den * K < 2**63`` for the CKS counter ``K``;
  denominators are kept below ``2**49`` so that ``K`` could reach ``2**14``
  (the probability that it reaches even 30 is ``1/30!``).
* :func:`discrete_laplace_int` takes an integer scale ``t < 2**50``.
* :func:`discrete_gaussian_int` takes an integer ``sigma`` in ``[1, 4096]``
  and treats a proposal with ``|Y| > (2**32 - 1) // (sigma + 1)`` (more than
  255 scales out) as rejected. Such a proposal would be accepted with
  probability below ``exp(-30000)``, so the output law differs from the exact
  discrete Gaussian by less than that in total variation.
"""

from __future__ import annotations

import math
import os
import sys
from fractions import Fraction

import numpy as np

__all__ = [
    "bernoulli_dyadic",
    "bernoulli_exp",
    "bernoulli_exp_frac",
    "bernoulli_exp_frac_cks",
    "EXP_MARGIN",
    "bernoulli_exp_one",
    "discrete_laplace_int",
    "discrete_laplace_rational",
    "discrete_laplace_rational_cks",
    "discrete_gaussian_int",
    "discrete_gaussian_int_cks",
    "numba_available",
    "BACKEND_ENV",
]

_MAX_DEN = 1 << 49
_WORD = 62  # bits per word in bernoulli_dyadic


def _as_size(size) -> tuple[int, ...]:
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


def bernoulli_exp_frac_cks(num: np.ndarray, den: int, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for ``0 <= num <= den`` (CKS20 Algorithm 1, integers only).

    num: int64 array; den: int ``< 2**49``. Returns a bool array of num's shape.

    Algorithm 1 keeps a counter K (from 1) and stops at the first failure of
    A ~ Bernoulli(gamma / K); the output is ``K odd``. All draws still running
    in round r share K = r, so each round is one bulk draw of uniform integers
    on ``{0, ..., den*K - 1}`` compared with ``num``.
    """
    num_arr = np.asarray(num, dtype=np.int64)
    flat = num_arr.ravel()
    den = int(den)
    k_final = np.zeros(flat.size, dtype=np.int64)
    active = np.arange(flat.size)
    k = 1
    while active.size:
        a = rng.integers(0, den * k, size=active.size) < flat[active]
        k_final[active[~a]] = k
        active = active[a]
        k += 1
    return ((k_final & 1) == 1).reshape(num_arr.shape)


#: Relative half-width of the interval certified around numpy's ``exp(-gamma)``.
#: numpy/libm evaluate exp within a few ulps (2**-50); the margin is 2**10 times that.
EXP_MARGIN = 2.0**-40
_SCALE = float(1 << 62)


def _exp_interval_decimal(num: int, den: int, digits: int) -> tuple[Fraction, Fraction]:
    """An interval [a, b] certainly containing exp(-num/den), of relative width about 8 * 10**-digits.

    ``decimal``'s divide and exp are correctly rounded. The quotient is computed with
    enough extra digits that its rounding moves exp(-q) by under 10**-4 ulp of the
    result whatever the size of ``num/den``; the result is then within 0.51 ulp, and
    the interval is ``v ± 4 ulp``. The exponent range is unbounded in practice
    (``decimal.MIN_EMIN``), so tiny probabilities do not underflow.
    """
    import decimal

    dctx = dict(rounding=decimal.ROUND_HALF_EVEN, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX)
    qctx = decimal.Context(prec=digits + len(str(num // den)) + 5, **dctx)
    q = qctx.divide(decimal.Decimal(-num), decimal.Decimal(den))
    v = decimal.Context(prec=digits, **dctx).exp(q)
    ulp4 = decimal.Decimal(4).scaleb(v.adjusted() - digits + 1)
    exact = decimal.Context(prec=digits + 10, **dctx)  # v +- 4 ulp is exact at this precision
    return Fraction(exact.subtract(v, ulp4)), Fraction(exact.add(v, ulp4))


class _LazyUniform:
    """A uniform real R in [0, 1) known through its first ``bits`` bits ``r``
    (R uniform on ``[r / 2**bits, (r + 1) / 2**bits)``); further bits are drawn
    from ``rng`` (62 at a time) only when a comparison needs them."""

    __slots__ = ("r", "bits", "rng")

    def __init__(self, r: int, bits: int, rng: np.random.Generator):
        self.r, self.bits, self.rng = int(r), int(bits), rng

    def _extend(self) -> None:
        self.r = (self.r << 62) | int(self.rng.integers(0, 1 << 62))
        self.bits += 62

    def lt_exp(self, num: int, den: int) -> bool:
        """Exact ``[R < exp(-num/den)]`` for integers ``num >= 0``, ``den >= 1``."""
        num, den = int(num), int(den)
        if num == 0:
            return True
        if num >= den << 20:
            # p = exp(-g) < 2**-floor(g): decided False as soon as R >= 2**-floor(g). Otherwise R has
            # more than floor(g) > 2**20 leading zero bits (probability < 2**-(2**20)): fall through.
            kb = num // den
            while self.bits <= kb + 64:
                if self.r >= 1 << max(0, self.bits - kb):  # lower end of R >= 2**-kb
                    return False
                self._extend()
        digits = 40
        a, b = _exp_interval_decimal(num, den, digits)
        while True:
            lo_r, hi_r = Fraction(self.r, 1 << self.bits), Fraction(self.r + 1, 1 << self.bits)
            if hi_r <= a:
                return True
            if lo_r >= b:
                return False
            if hi_r - lo_r < (b - a):  # R's interval is narrower than p's: refine p
                digits *= 2
                a, b = _exp_interval_decimal(num, den, digits)
                continue
            self._extend()


def _resolve_exact(u: int, num: int, den: int, rng: np.random.Generator) -> bool:
    """Exact [R < exp(-num/den)] for R uniform on [u/2**62, (u+1)/2**62): draw further bits of R
    until it is separated from a high-precision interval around exp(-num/den)."""
    return _LazyUniform(u, 62, rng).lt_exp(num, den)


def bernoulli_exp_frac(num: np.ndarray, den: int, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for ``0 <= num <= den``, exact, one uniform draw per decision.

    Lazy comparison of a uniform real R with p = exp(-num/den): the first 62 bits
    of R (one uniform integer u) decide ``R < p`` unless ``u / 2**62`` falls in the
    certified interval ``p_float * (1 ± EXP_MARGIN)`` (probability about 2**-39);
    those rare draws are finished exactly by :func:`_resolve_exact` (more bits of R
    against a correctly rounded ``decimal`` evaluation of p). The law is exactly
    Bernoulli(p) provided numpy's ``exp`` errs by less than ``EXP_MARGIN``
    relative (it errs by a few 2**-53). :func:`bernoulli_exp_frac_cks` is the
    integer-only CKS20 Algorithm 1 with the same law (used in the tests).
    """
    num_arr = np.asarray(num, dtype=np.int64)
    flat = num_arr.ravel()
    den = int(den)
    p = np.exp(-(flat / den))
    lo = np.floor(p * (1.0 - EXP_MARGIN) * _SCALE).astype(np.int64)
    hi = np.ceil(np.minimum(p * (1.0 + EXP_MARGIN), 1.0) * _SCALE).astype(np.int64)
    u = rng.integers(0, 1 << 62, size=flat.size, dtype=np.int64)
    out = u < lo
    for i in np.flatnonzero((u >= lo) & (u < hi)).tolist():
        out[i] = _resolve_exact(int(u[i]), int(flat[i]), den, rng)
    return out.reshape(num_arr.shape)


def bernoulli_exp_one(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` independent Bernoulli(exp(-1)) draws (bool array)."""
    return bernoulli_exp_frac(np.ones(int(n), dtype=np.int64), 1, rng)


def bernoulli_exp(num: np.ndarray, den, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for any ``num >= 0`` (CKS20 Algorithm 1, both cases).

    ``gamma = num/den`` is split into ``floor(gamma)`` factors exp(-1) (all must
    succeed) and the fractional remainder. num: int64 array (or uint64 up to
    2**64); den: int ``< 2**49``.
    """
    num = np.asarray(num)
    den = int(den)
    if num.dtype == np.uint64:
        q = (num // np.uint64(den)).astype(np.int64)
        r = (num % np.uint64(den)).astype(np.int64)
    else:
        num = num.astype(np.int64)
        q, r = np.divmod(num, den)
    out = bernoulli_exp_frac(r, den, rng)
    # floor(gamma) successive Bernoulli(exp(-1)), stopping at the first failure
    rem = q.ravel().copy()
    alive = np.flatnonzero(out & (rem > 0))
    while alive.size:
        ok = bernoulli_exp_one(alive.size, rng)
        out[alive[~ok]] = False
        rem[alive] -= 1
        alive = alive[ok]
        alive = alive[rem[alive] > 0]
    return out.reshape(num.shape)


def _geometric_exp_one(n: int, rng: np.random.Generator) -> np.ndarray:
    """Number of successes before the first failure of Bernoulli(exp(-1)) trials
    (Geometric with P(V = v) = (1 - e^-1) e^-v), int64."""
    v = np.zeros(n, dtype=np.int64)
    alive = np.arange(n)
    while alive.size:
        ok = bernoulli_exp_one(alive.size, rng)
        alive = alive[ok]
        v[alive] += 1
    return v


def discrete_laplace_rational_cks(t: int, s: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws with P(Z = z) proportional to exp(-|z| s / t): CKS20 Algorithm 2 as
    written (reference implementation, same law as :func:`discrete_laplace_rational`).

    t, s: positive ints with ``t < 2**49``; returns int64.
    """
    t, s, n = int(t), int(s), int(n)
    if not (1 <= t < _MAX_DEN) or s < 1:
        raise ValueError("discrete Laplace needs integers 1 <= t < 2**49 and s >= 1")
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        u = rng.integers(0, t, size=m)
        d = bernoulli_exp_frac(u, t, rng)
        u = u[d]
        idx = todo[d]
        v = _geometric_exp_one(u.size, rng)
        x = u + t * v
        y = x // s
        b = rng.integers(0, 2, size=u.size).astype(bool)
        ok = ~(b & (y == 0))
        out[idx[ok]] = np.where(b[ok], -y[ok], y[ok])
        done = np.zeros(n, dtype=bool)
        done[idx[ok]] = True
        todo = todo[~done[todo]]
    return out


def discrete_laplace_int(t: int, size, rng: np.random.Generator) -> np.ndarray:
    """Discrete Laplace with integer scale ``t``: P(Z = z) ∝ exp(-|z| / t); int64 of shape ``size``."""
    shape = _as_size(size)
    n = math.prod(shape) if shape else 1
    out = discrete_laplace_rational(int(t), 1, n, rng)
    return out.reshape(shape) if shape else out[0]


def discrete_gaussian_int_cks(sigma: int, size, rng: np.random.Generator) -> np.ndarray:
    """Discrete Gaussian N_Z(0, sigma^2), integer ``sigma`` in [1, 4096]: CKS20 Algorithm 3
    as written (reference implementation, same law as :func:`discrete_gaussian_int`).

    P(Z = z) ∝ exp(-z^2 / (2 sigma^2)). Returns int64 of shape ``size``.
    """
    s = int(sigma)
    if not (1 <= s <= 4096):
        raise ValueError("discrete_gaussian_int needs an integer sigma in [1, 4096]")
    shape = _as_size(size)
    n = int(np.prod(shape)) if shape else 1
    t = s + 1  # floor(sigma) + 1
    cap = ((1 << 32) - 1) // t
    den = 2 * s * s * t * t  # < 2**49
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        m = todo.size
        y = discrete_laplace_rational_cks(t, 1, m, rng)
        ay = np.abs(y)
        small = ay <= cap
        # gamma = (|y| - s^2/t)^2 / (2 s^2) = (|y| t - s^2)^2 / (2 s^2 t^2)
        a = np.abs(ay[small] * t - s * s).astype(np.uint64)  # < 2**32
        c = np.zeros(m, dtype=bool)
        c[small] = bernoulli_exp(a * a, den, rng)
        out[todo[c]] = y[c]
        todo = todo[~c]
    return out.reshape(shape) if shape else out[0]


# ---------------------------------------------------------------- fast exact samplers
#
# Construction (same laws as CKS20 Algorithms 2 and 3, fewer random words, no
# per-round Python loop). Let lam = s/t (the discrete Laplace of CKS20 Alg. 2 has
# P(Y = y) ∝ exp(-y lam) for its magnitude Y = floor(X / s)). Pick a power of two
# m = 2**j (m = 1 when lam >= 2**-16, else the largest with m lam <= 2**-16). A
# *candidate* is built from one or two uniform 64-bit words:
#
#   K = #{k >= 1 : R < exp(-k m lam)}  (R = bits 2..63 of word 1, a uniform real), so
#       P(K >= k) = exp(-k m lam): K = floor(-ln(R) / (m lam)) is geometric; the float
#       value of -ln(R) is certified to be far enough from every threshold k m lam
#       (_estimate_k: error < 2**-41.5, tolerance E_TOL = 2**-36);
#   r = the low j bits of word 2, uniform on {0, ..., m-1}; accepted with probability
#       exp(-r lam), compared with the top bits of word 2 (a second uniform real);
#   B = bit 0 of word 1 (a fair sign); rejected when B = 1 and Y = 0.
#
# Then P(K = k, r, accepted) ∝ exp(-k m lam) exp(-r lam) = exp(-(k m + r) lam), so
# Y = k m + r (every y >= 0 exactly once) has P(Y = y | accepted) ∝ exp(-y lam): the
# magnitude law of CKS20 Alg. 2, and (1 - 2B) Y after the zero rejection is the
# discrete Laplace P(Z = z) ∝ exp(-|z| s / t) exactly. For the discrete Gaussian
# (Alg. 3) a third word decides C ~ Bernoulli(exp(-(|Y| t - sigma^2)^2 / (2 sigma^2 t^2)))
# on top of a candidate with t = sigma + 1, s = 1; every candidate is an independent
# trial of the whole rejection sampler, so the accepted ones are i.i.d. with the exact law.
#
# Certified comparisons: [R < exp(-gamma)] with R known to 62 bits (integer u) is
# decided by integer bounds lo <= 2**62 exp(-gamma) <= hi computed from float exp with
# the relative margin EXP_MARGIN = 2**-40 (true when gamma <= 700 is computed with
# relative error <= 2**-52 and exp within a few ulps: total < 2**-42; for gamma > 700,
# lo = 0 and hi = 1 hold trivially): u < lo -> True, u >= hi -> False (for the r step,
# exp(-x) with x <= 2**-16 is a cubic Taylor polynomial, error < 2**-50). K is certified
# in log space (above). Anything else (probability at most ~2**-17 per candidate: K
# near a threshold or R < 2**-20) makes the candidate *undecided*; it is finished exactly
# in Python (_exact_candidate: more bits of the same R against correctly rounded decimal
# values), never discarded, so no bias.
#
# Vectorisation: candidates are evaluated in bulk (numpy, or the numba kernel in
# textdp.noise._kernels -- a pure function of the words, mirroring _evaluate_numpy);
# a call draws ~n / acceptance candidates plus a small margin, keeps the first n
# accepted in candidate order and tops up the (rare) shortfall with another batch.

#: environment variable selecting the evaluation backend: auto (default) | numba | numpy
BACKEND_ENV = "TEXTDP_NOISE_BACKEND"
#: ``auto`` switches to the numba kernel once a batch, or the process total on the numpy path, reaches this
#: many candidates: ~0.8 s of numpy evaluation, about numba's start-up (import 0.6 s + LLVM 0.6 s + kernel
#: 0.2 s of CPU); 2**20 when numba is already imported (only the kernel and perhaps LLVM remain to load)
AUTO_NUMBA_MIN_CANDIDATES = 1 << 23
AUTO_NUMBA_MIN_CANDIDATES_IMPORTED = 1 << 20
_GEOM_STEP = 2.0**-16  # bound on m * lam (spacing of the K thresholds, rejection rate of r)
#: K = floor(-ln(R) / step) is certified when the float estimate of -ln(R) is this far from a multiple
#: of step (its error is below 2**-41.5, see _estimate_k); otherwise the candidate takes the exact path
E_TOL = 2.0**-36
_U_MIN = 1 << 42  # ... and R >= 2**-20 (the width of R's 62-bit interval in -ln(R) is then <= 2**-42)
_SCALAR_MAX = 40  # batches up to this size are evaluated on Python ints (unless the numba kernel is loaded)
_BATCH = 1 << 20  # candidates evaluated at once (bounds memory: ~8 words of temporaries each)
_RAW64: tuple = ()


def _raw64() -> tuple:
    """Bit generator classes whose ``random_raw`` outputs are uniform 64-bit words."""
    global _RAW64
    if not _RAW64:
        r = np.random
        classes = [r.PCG64, r.PCG64DXSM, r.Philox, r.SFC64]
        from textdp.noise.rng import _ChaCha

        if _ChaCha is not None:
            classes.append(_ChaCha)
        _RAW64 = tuple(classes)
    return _RAW64
_LN2_62 = 62.0 * math.log(2.0)
_kernels = None
_numpy_total = 0  # candidates evaluated on the numpy path in this process (for the auto backend)
#: evaluation backend: "auto" | "numba" | "numpy" (see _backend); set from $TEXTDP_NOISE_BACKEND at import
BACKEND = (os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto")


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` independent uniform 64-bit words (uint64) from ``rng``.

    ``random_raw`` of a 64-bit bit generator gives exactly ``rng.integers(0, 2**64,
    dtype=uint64)`` without the per-call overhead of ``Generator.integers``.
    """
    bg = rng.bit_generator
    if type(bg) in _raw64():
        return bg.random_raw(n)
    return rng.integers(0, 1 << 64, size=n, dtype=np.uint64)


def numba_available() -> bool:
    """Whether the numba kernel can be used (imports numba on first call)."""
    global _kernels
    if _kernels is None:
        from textdp.noise import _kernels as k

        _kernels = k
    return bool(_kernels.AVAILABLE)


def _backend(n_candidates: int) -> str:
    """``"scalar"``, ``"numpy"`` or ``"numba"`` for a batch of ``n_candidates``.

    Batches of up to 40 candidates always run on Python ints (cheaper than any array call).
    Larger ones follow :data:`BACKEND` (default from ``$TEXTDP_NOISE_BACKEND`` at import):
    ``numpy`` (vectorised numpy), ``numba`` (the kernel), or ``auto``: numba once it is
    loaded, or for a batch -- or a process total on the numpy path -- of at least
    ``AUTO_NUMBA_MIN_CANDIDATES`` (2**23; 2**20 when numba is already imported), i.e. once the
    numpy path has cost about what numba's start-up (~1.4 s of CPU cold) would; else numpy.
    Every backend realises the same law and, for the same words, the same draws.
    """
    mode = BACKEND
    if mode not in ("auto", "numba", "numpy"):
        from textdp.errors import ParameterError

        raise ParameterError(f"{BACKEND_ENV} must be auto, numba or numpy, got {mode!r}")
    if n_candidates <= _SCALAR_MAX:
        return "scalar"
    if mode == "auto":
        if _kernels is not None and _kernels.AVAILABLE:
            return "numba"
        need = AUTO_NUMBA_MIN_CANDIDATES_IMPORTED if "numba" in sys.modules else AUTO_NUMBA_MIN_CANDIDATES
        if max(n_candidates, _numpy_total) >= need and numba_available():
            return "numba"
    elif mode == "numba":
        if not numba_available():
            from textdp.errors import ParameterError

            raise ParameterError(f"{BACKEND_ENV}=numba needs numba (pip install numba); or set {BACKEND_ENV}=numpy")
        return "numba"
    return "scalar" if n_candidates <= _SCALAR_MAX else "numpy"


class _Plan:
    """Parameters of the candidate sampler for P(Y = y) ∝ exp(-y s / t) (see the comment above)."""

    def __init__(self, t: int, s: int, gauss: int = 0):
        self.t, self.s, self.gauss = t, s, gauss
        lam = Fraction(s, t)
        if lam >= Fraction(_GEOM_STEP):
            j = 0
        else:
            j = (t // (s << 16)).bit_length() - 1  # m s <= t 2**-16 < 2 m s
        self.j, self.m = j, 1 << j
        self.qbits = min(62, 64 - j)  # bits of word 2 left for the acceptance of r
        self.step = float(self.m * lam)  # m lam, correctly rounded
        self.inv_step = 1.0 / self.step
        self.lam = float(lam)
        self.ncols = (2 if j else 1) + (1 if gauss else 0)
        lam_f = self.lam
        racc = 1.0 if j == 0 else -math.expm1(-self.step) / (self.m * -math.expm1(-lam_f))
        self.acceptance = racc * (1.0 + 0.5 * math.expm1(-lam_f))
        if gauss:  # Alg. 3 on top: t = sigma + 1, s = 1
            sig = gauss
            self.t_g, self.sig2, self.den_g = t, sig * sig, 2 * sig * sig * t * t
            self.cap = ((1 << 32) - 1) // t
            self.acceptance *= _gauss_c_rate(sig)
        else:
            self.t_g = self.sig2 = self.den_g = 1
            self.cap = 0


def _gauss_c_rate(sig: int) -> float:
    """P(C = 1) in CKS20 Alg. 3 (float approximation; only sizes the batches)."""
    t = sig + 1
    y = np.arange(0, min(((1 << 32) - 1) // t, 60 * t) + 1, dtype=np.float64)
    w = np.exp(-y / t) * np.where(y == 0, 1.0, 2.0)
    c = np.exp(-((y - sig * sig / t) ** 2) / (2.0 * sig * sig))
    return float((w * c).sum() / w.sum())


_PLANS: dict = {}


def _plan(t: int, s: int, gauss: int = 0) -> _Plan:
    key = (t, s, gauss)
    p = _PLANS.get(key)
    if p is None:
        if len(_PLANS) > 4096:
            _PLANS.clear()
        p = _PLANS[key] = _Plan(t, s, gauss)
    return p


def _thresholds(gamma: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lo, hi, x)``: int64 bounds ``lo <= 2**62 exp(-gamma) <= hi`` and ``x = 2**62 exp(-gamma)``
    in float, certified when ``gamma`` carries relative error <= 2**-52 and ``margin >= 2**-40``.

    ``gamma`` is clipped at 700: beyond, 2**62 exp(-700) < 1e-285 gives ``lo = 0, hi = 1``,
    which bound any smaller probability too. ``lo = trunc(x (1 - margin))``;
    ``hi = trunc(x (1 + margin)) + 1`` (at least the ceiling; a larger upper bound stays valid).
    """
    x = np.exp(-np.minimum(gamma, 700.0))
    x *= _SCALE
    return _bounds(x, margin) + (x,)


def _bounds(x: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    lo = (x * (1.0 - margin)).astype(np.int64)
    hi = (x * (1.0 + margin)).astype(np.int64)
    hi += 1
    return lo, hi


def _estimate_k(u: np.ndarray, plan: _Plan, k_tol: float) -> tuple[np.ndarray, np.ndarray]:
    """K for the candidates with 62-bit prefixes ``u`` and whether it is certified (bool).

    ``K = #{k >= 1 : R < exp(-k step)} = floor(-ln(R) / step)``. For every R in
    ``[u, u + 1) 2**-62`` with ``u >= 2**42``, ``e = 62 ln 2 - ln(u + 0.5)`` (float) is within
    2**-41.5 of ``-ln(R)``: the interval itself spans ``ln(1 + 1/u) <= 2**-42``, ``log`` errs
    by a few ulps of a value below 44 (2**-45), the constant and the subtraction by 2**-47,
    and ``v = e / step`` adds a relative 2**-51 (2**-46.5 in units of -ln R). So when the
    fractional part of ``v`` is more than ``k_tol = E_TOL / step`` (``E_TOL = 2**-36``, 45
    times the bound) from 0 and 1, no R of the interval lies on another side of a
    threshold ``k step``: K = floor(v) exactly. The numba kernel uses the same formula.
    """
    v = np.log(u + 0.5)
    np.subtract(_LN2_62, v, out=v)
    v *= plan.inv_step
    k = np.floor(v)
    v -= k  # fractional part
    ok = (v > k_tol) & (v < 1.0 - k_tol) & (u >= _U_MIN)
    return k.astype(np.int64), ok


def _exp_small(x: np.ndarray) -> np.ndarray:
    """exp(-x) for ``0 <= x <= 2**-16``: ``1 - x (1 - x (1/2 - x/6))``, truncation error
    ``x**4 / 24 < 2**-68`` and rounding below 2**-50 (relative)."""
    p = x * (1.0 / 6.0)
    np.subtract(0.5, p, out=p)
    p *= x
    np.subtract(1.0, p, out=p)
    p *= x
    np.subtract(1.0, p, out=p)
    return p


def _evaluate_numpy(words: np.ndarray, plan: _Plan, margin: float, k_tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised candidate evaluation: (val int64, status int8: 0 rejected, 1 accepted, 2 undecided).
    Mirrors ``textdp.noise._kernels.evaluate`` check by check."""
    w1 = words[0]
    u = (w1 >> np.uint64(2)).view(np.int64)
    neg = (w1 & np.uint64(1)).view(np.int64)
    k, ok = _estimate_k(u, plan, k_tol)
    status = np.where(ok, np.int8(1), np.int8(2))
    y = k
    y *= plan.m
    if plan.j:  # accept r with probability exp(-r lam): top qbits of word 2, certified
        w2 = words[1]
        r = (w2 & np.uint64(plan.m - 1)).view(np.int64)
        a = (w2 >> np.uint64(64 - plan.qbits)).view(np.int64)
        x = _exp_small(r * plan.lam)
        x *= _SCALE
        lo, hi = _bounds(x, margin)
        sh = 62 - plan.qbits
        acc = ((a + 1) << sh) <= lo
        acc |= r == 0
        rej = (a << sh) >= hi
        rej &= ~acc
        live = status == 1
        status[live & rej] = 0
        status[live & ~acc & ~rej] = 2
        y += r
    status[(status == 1) & (neg == 1) & (y == 0)] = 0
    if plan.gauss:  # C ~ Bernoulli(exp(-(|y| t - sigma^2)^2 / (2 sigma^2 t^2))): word 3, certified
        live = status == 1
        ycap = np.minimum(np.abs(y), plan.cap)
        ycap *= plan.t_g
        ycap -= plan.sig2
        aa = np.abs(ycap).view(np.uint64)
        aa *= aa  # < 2**64, exact
        lo, hi, _ = _thresholds(aa.astype(np.float64) / plan.den_g, margin)
        u3 = (words[plan.ncols - 1] >> np.uint64(2)).view(np.int64)
        status[live & ((y > plan.cap) | (u3 >= hi))] = 0
        status[live & (y <= plan.cap) & (u3 < hi) & (u3 >= lo)] = 2
    val = np.where(neg == 1, -y, y)
    return val, status


_LOG = math.log
_EXP = math.exp


def _scalar_candidate(w1: int, w2: int, w3: int, plan: _Plan, lo_f: float, hi_f: float,
                      k_tol: float) -> tuple[int, int]:
    """One candidate on Python ints: (status, value), the same checks as ``_evaluate_numpy``."""
    u = w1 >> 2
    v = (_LN2_62 - _LOG(u + 0.5)) * plan.inv_step
    kf = math.floor(v)
    f = v - kf
    if not (f > k_tol and f < 1.0 - k_tol and u >= _U_MIN):
        return 2, 0
    y = kf * plan.m
    if plan.j:
        r = w2 & (plan.m - 1)
        if r > 0:
            a = w2 >> (64 - plan.qbits)
            sh = 62 - plan.qbits
            xx = r * plan.lam
            p = xx * (1.0 / 6.0)
            p = 0.5 - p
            p = p * xx
            p = 1.0 - p
            p = p * xx
            p = 1.0 - p
            x = p * _SCALE
            if ((a + 1) << sh) > int(x * lo_f):
                return (0, 0) if (a << sh) >= int(x * hi_f) + 1 else (2, 0)
        y += r
    b = w1 & 1
    if b and y == 0:
        return 0, 0
    if plan.gauss:
        if y > plan.cap:
            return 0, 0
        aa = abs(y * plan.t_g - plan.sig2)
        g = float(aa * aa) / plan.den_g
        x = _EXP(-(g if g < 700.0 else 700.0)) * _SCALE
        u3 = w3 >> 2
        if u3 >= int(x * hi_f) + 1:
            return 0, 0
        if u3 >= int(x * lo_f):
            return 2, 0
    return 1, (-y if b else y)


def _evaluate_scalar(words: np.ndarray, plan: _Plan, margin: float, k_tol: float,
                     need: int | None = None, rng: np.random.Generator | None = None) -> tuple[list, list]:
    """Small batches on Python ints (cheaper than ~60 numpy calls on a few elements).

    Without ``need``: every candidate's (value, status), as ``_evaluate_numpy``. With ``need``
    and ``rng``: candidates are taken in order, undecided ones finished exactly, and the loop
    stops at the ``need``-th accepted one; returns (accepted values, []).
    """
    cols = words.tolist()
    c = len(cols[0])
    w2s = cols[1] if plan.j else [0] * c
    w3s = cols[plan.ncols - 1] if plan.gauss else w2s
    lo_f, hi_f = 1.0 - margin, 1.0 + margin
    if need is None:
        res = [_scalar_candidate(w1, w2, w3, plan, lo_f, hi_f, k_tol) for w1, w2, w3 in zip(cols[0], w2s, w3s)]
        return [v for _, v in res], [st for st, _ in res]
    out = []
    for i, (w1, w2, w3) in enumerate(zip(cols[0], w2s, w3s)):
        st, v = _scalar_candidate(w1, w2, w3, plan, lo_f, hi_f, k_tol)
        if st == 2:
            st, v = _exact_candidate(words[:, i], plan, rng)
        if st == 1:
            out.append(v)
            if len(out) == need:
                break
    return out, []


def _evaluate_numba(words: np.ndarray, plan: _Plan, margin: float, k_tol: float) -> tuple[np.ndarray, np.ndarray]:
    c = words.shape[1]
    val = np.zeros(c, dtype=np.int64)
    status = np.zeros(c, dtype=np.int8)
    _kernels.evaluate(words, plan.m, plan.qbits, plan.inv_step, plan.lam, float(margin), float(k_tol),
                      bool(plan.gauss), plan.t_g, plan.sig2, float(plan.den_g), plan.cap, val, status)
    return val, status


def _exact_candidate(row: np.ndarray, plan: _Plan, rng: np.random.Generator) -> tuple[int, int]:
    """Finish one candidate exactly (the words of ``row`` plus more bits from ``rng`` where a
    comparison needs them); returns (status 0/1, value)."""
    w1 = int(row[0])
    R = _LazyUniform(w1 >> 2, 62, rng)
    t, s, m = plan.t, plan.s, plan.m
    ms = m * s
    u = w1 >> 2
    k = max(0, int(math.floor(-math.log((u + 0.5) * 2.0**-62) / plan.step)))
    while k > 0 and not R.lt_exp(k * ms, t):  # R >= p_k: K < k
        k -= 1
    while R.lt_exp((k + 1) * ms, t):  # R < p_{k+1}: K >= k + 1
        k += 1
    y = k * m
    if plan.j:
        w2 = int(row[1])
        r = w2 & (m - 1)
        if not _LazyUniform(w2 >> (64 - plan.qbits), plan.qbits, rng).lt_exp(r * s, t):
            return 0, 0
        y += r
    neg = w1 & 1
    if neg and y == 0:
        return 0, 0
    if plan.gauss:
        if y > plan.cap:
            return 0, 0
        a = y * plan.t_g - plan.sig2
        if not _LazyUniform(int(row[plan.ncols - 1]) >> 2, 62, rng).lt_exp(a * a, plan.den_g):
            return 0, 0
    return 1, (-y if neg else y)


def _sample(plan: _Plan, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` accepted candidates (int64), in candidate order.

    Candidates are i.i.d. trials; the first ``n`` accepted ones are kept. Undecided
    candidates are finished exactly (``_exact_candidate``) in order, up to the n-th
    accepted one: which candidates are looked at depends only on the earlier ones.
    """
    global _numpy_total
    out = np.empty(n, dtype=np.int64)
    filled = 0
    margin = EXP_MARGIN
    k_tol = min(0.25, E_TOL * plan.inv_step)
    while filled < n:
        need = n - filled
        mean = need / plan.acceptance
        c = min(_BATCH, int(mean + 4.0 * math.sqrt(mean) + 8))
        words = _words(rng, c * plan.ncols).reshape(plan.ncols, c)
        how = _backend(c)
        if how == "scalar":
            res, _ = _evaluate_scalar(words, plan, margin, k_tol, need, rng)
            out[filled:filled + len(res)] = res
            filled += len(res)
            continue
        if how == "numba":
            val, status = _evaluate_numba(words, plan, margin, k_tol)
        else:
            _numpy_total += c
            val, status = _evaluate_numpy(words, plan, margin, k_tol)
        und = np.flatnonzero(status == 2)
        if und.size:
            before = np.cumsum(status == 1)  # accepted candidates up to each index
            extra = 0
            for i in und.tolist():
                if before[i] + extra >= need:
                    break
                status[i], val[i] = _exact_candidate(words[:, i], plan, rng)
                extra += int(status[i] == 1)
        acc = np.flatnonzero(status == 1)[:need]
        out[filled:filled + acc.size] = val[acc]
        filled += acc.size
    return out


def discrete_laplace_rational(t: int, s: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws with P(Z = z) proportional to exp(-|z| s / t), exact; int64.

    t, s: positive ints with ``t < 2**49``. Same law as CKS20 Algorithm 2
    (:func:`discrete_laplace_rational_cks`), built from one uniform 64-bit word per
    candidate (two when ``t / s > 2**16``): see the comment block above.
    """
    t, s, n = int(t), int(s), int(n)
    if not (1 <= t < _MAX_DEN) or s < 1:
        raise ValueError("discrete Laplace needs integers 1 <= t < 2**49 and s >= 1")
    return _sample(_plan(t, s), n, rng)


def discrete_gaussian_int(sigma: int, size, rng: np.random.Generator) -> np.ndarray:
    """Discrete Gaussian N_Z(0, sigma^2), integer ``sigma`` in [1, 4096] (CKS20 Algorithm 3).

    P(Z = z) ∝ exp(-z^2 / (2 sigma^2)). Returns int64 of shape ``size``. Same law as
    :func:`discrete_gaussian_int_cks` (including its treatment of proposals with
    ``|Y| > (2**32 - 1) // (sigma + 1)`` as rejected), two uniform words per candidate.
    """
    s = int(sigma)
    if not (1 <= s <= 4096):
        raise ValueError("discrete_gaussian_int needs an integer sigma in [1, 4096]")
    shape = _as_size(size)
    n = math.prod(shape) if shape else 1
    out = _sample(_plan(s + 1, 1, gauss=s), n, rng)
    return out.reshape(shape) if shape else out[0]


def _dyadic_words(p: float) -> tuple[list[int], bool]:
    """Binary expansion of ``p`` in (0, 1) as 62-bit words (exact: floats are dyadic)."""
    f = Fraction(p)
    num, den = f.numerator, f.denominator
    nbits = den.bit_length() - 1  # den = 2**nbits
    nwords = max(1, -(-nbits // _WORD))
    total = nwords * _WORD
    scaled = num << (total - nbits)
    words = [(scaled >> (_WORD * (nwords - 1 - i))) & ((1 << _WORD) - 1) for i in range(nwords)]
    return words, True


def bernoulli_dyadic(p: float, size, rng: np.random.Generator) -> np.ndarray:
    """Exact Bernoulli(p) for a float ``p`` in [0, 1] (every float is a dyadic rational).

    Compares uniform 62-bit words against the binary expansion of ``p`` word by
    word; a draw is decided at the first differing word (undecided with
    probability 2**-62 per word). Returns a bool array of shape ``size``.
    """
    shape = _as_size(size)
    n = int(np.prod(shape)) if shape else 1
    p = float(p)
    if not (0.0 <= p <= 1.0):
        raise ValueError("p must be in [0, 1]")
    if p == 0.0 or p == 1.0:
        out = np.full(n, p == 1.0)
        return out.reshape(shape) if shape else bool(out[0])
    words, _ = _dyadic_words(p)
    out = np.zeros(n, dtype=bool)
    undecided = np.arange(n)
    for w in words:
        if not undecided.size:
            break
        u = rng.integers(0, 1 << _WORD, size=undecided.size, dtype=np.int64)
        out[undecided[u < w]] = True
        undecided = undecided[u == w]
    # still equal after the last word: U == p exactly, so U < p is False (already False)
    return out.reshape(shape) if shape else bool(out[0])
