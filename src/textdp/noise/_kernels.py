"""numba kernel of the fast exact discrete Laplace / Gaussian samplers (optional accelerator).

Imported lazily by :mod:`textdp.noise.exact`; when numba is missing, ``AVAILABLE``
is False and the numpy evaluation (:func:`textdp.noise.exact._evaluate_numpy`) is
used. The kernel is a *pure function* of the uniform 64-bit words it is given:
it never draws randomness (no numba RNG); the words come from the caller's
``numpy.random.Generator``. It mirrors ``_evaluate_numpy`` decision by decision
(same float formulas, same certified thresholds, same order of checks), so both
paths give the same statuses and values for the same words (up to an ulp of
``exp``/``log`` between libm and numpy, which can only move a candidate between
"decided" and "undecided" with probability ~2**-60); candidates that cannot be
certified (status 2) are finished exactly in Python
(:func:`textdp.noise.exact._exact_candidate`). See ``exact.py`` for the
construction and its proof.
"""

from __future__ import annotations

import math

import numpy as np

try:  # numba is in the `topics` extra
    from numba import njit

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised through TEXTDP_NOISE_BACKEND=numpy in the tests
    AVAILABLE = False

_SCALE = float(1 << 62)
_LN2_62 = 62.0 * math.log(2.0)
_U_MIN = 1 << 42

if AVAILABLE:

    @njit(cache=True, nogil=True, inline="always")
    def _x(gamma):
        """2**62 exp(-min(gamma, 700)) (see exact._thresholds)."""
        if gamma > 700.0:
            gamma = 700.0
        return math.exp(-gamma) * _SCALE

    @njit(cache=True, nogil=True, inline="always")
    def _lo(x, margin):
        return np.int64(x * (1.0 - margin))

    @njit(cache=True, nogil=True, inline="always")
    def _hi(x, margin):
        return np.int64(x * (1.0 + margin)) + 1

    @njit(cache=True, nogil=True)
    def evaluate(words, m, qbits, inv_step, lam, margin, k_tol, gauss, t_g, sig2, den_g, cap, val, status):
        """Evaluate candidates (columns of ``words``, uint64 ``(ncols, c)``) in place into
        ``val`` (int64) and ``status`` (int8: 0 rejected, 1 accepted, 2 undecided)."""
        ncols = words.shape[0]
        c = words.shape[1]
        two = np.uint64(2)
        one = np.uint64(1)
        mmask = np.uint64(m - 1)
        qshift = np.uint64(64 - qbits)
        sh = np.int64(62 - qbits)
        for i in range(c):
            w1 = words[0, i]
            u = np.int64(w1 >> two)
            b = np.int64(w1 & one)
            # K = floor(-ln(R) / step), certified away from integers (exact._estimate_k)
            v = (_LN2_62 - math.log(u + 0.5)) * inv_step
            kf = math.floor(v)
            f = v - kf
            if not (f > k_tol and f < 1.0 - k_tol and u >= _U_MIN):
                status[i] = 2
                continue
            k = np.int64(kf)
            y = k * m
            if m > 1:
                w2 = words[1, i]
                r = np.int64(w2 & mmask)
                if r > 0:
                    a = np.int64(w2 >> qshift)
                    xx = r * lam  # exp(-xx) for xx <= 2**-16 (exact._exp_small)
                    p = xx * (1.0 / 6.0)
                    p = 0.5 - p
                    p = p * xx
                    p = 1.0 - p
                    p = p * xx
                    p = 1.0 - p
                    x = p * _SCALE
                    if ((a + 1) << sh) <= _lo(x, margin):
                        pass
                    elif (a << sh) >= _hi(x, margin):
                        status[i] = 0
                        continue
                    else:
                        status[i] = 2
                        continue
                y += r
            if b == 1 and y == 0:
                status[i] = 0
                continue
            if gauss:
                if y > cap:
                    status[i] = 0
                    continue
                aa = y * t_g - sig2
                if aa < 0:
                    aa = -aa
                a2 = np.uint64(aa) * np.uint64(aa)
                u3 = np.int64(words[ncols - 1, i] >> two)
                x = _x(float(a2) / den_g)
                if u3 >= _hi(x, margin):
                    status[i] = 0
                    continue
                if u3 >= _lo(x, margin):
                    status[i] = 2
                    continue
            val[i] = -y if b == 1 else y
            status[i] = 1
