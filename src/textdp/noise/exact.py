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

Vectorisation: each sampler keeps an index array of the draws still "in
flight" and runs the rejection loops of CKS20 on all of them at once, so the
Python loop count is the *maximum* number of rounds (a few tens for a million
draws), not the number of samples.

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
    "discrete_gaussian_int",
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
    """An interval [a, b] certainly containing exp(-num/den) (decimal's exp is correctly rounded)."""
    import decimal

    ctx = decimal.Context(prec=digits, rounding=decimal.ROUND_HALF_EVEN)
    v = ctx.exp(ctx.divide(decimal.Decimal(-num), decimal.Decimal(den)))
    # correctly rounded exp of a correctly rounded quotient: |v - exp(-num/den)| < 4 ulp(v) to be safe
    ulp4 = decimal.Decimal(4).scaleb(v.adjusted() - digits + 1)
    exact = decimal.Context(prec=digits + 10)  # v +- 4 ulp is exact at this precision
    return Fraction(exact.subtract(v, ulp4)), Fraction(exact.add(v, ulp4))


def _resolve_exact(u: int, num: int, den: int, rng: np.random.Generator) -> bool:
    """Exact [R < exp(-num/den)] for R uniform on [u/2**62, (u+1)/2**62): draw further bits of R
    until it is separated from a high-precision interval around exp(-num/den)."""
    bits, r = 62, u
    digits = 40
    a, b = _exp_interval_decimal(num, den, digits)
    while True:
        lo_r, hi_r = Fraction(r, 1 << bits), Fraction(r + 1, 1 << bits)
        if hi_r <= a:
            return True
        if lo_r >= b:
            return False
        if hi_r - lo_r < (b - a):  # R's interval is narrower than p's: refine p
            digits *= 2
            a, b = _exp_interval_decimal(num, den, digits)
            continue
        r = (r << 62) | int(rng.integers(0, 1 << 62))
        bits += 62


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


def discrete_laplace_rational(t: int, s: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws with P(Z = z) proportional to exp(-|z| s / t) (CKS20 Algorithm 2).

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
    n = int(np.prod(shape)) if shape else 1
    out = discrete_laplace_rational(int(t), 1, n, rng)
    return out.reshape(shape) if shape else out[0]


def discrete_gaussian_int(sigma: int, size, rng: np.random.Generator) -> np.ndarray:
    """Discrete Gaussian N_Z(0, sigma^2), integer ``sigma`` in [1, 4096] (CKS20 Algorithm 3).

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
        y = discrete_laplace_rational(t, 1, m, rng)
        ay = np.abs(y)
        small = ay <= cap
        # gamma = (|y| - s^2/t)^2 / (2 s^2) = (|y| t - s^2)^2 / (2 s^2 t^2)
        a = np.abs(ay[small] * t - s * s).astype(np.uint64)  # < 2**32
        c = np.zeros(m, dtype=bool)
        c[small] = bernoulli_exp(a * a, den, rng)
        out[todo[c]] = y[c]
        todo = todo[~c]
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
