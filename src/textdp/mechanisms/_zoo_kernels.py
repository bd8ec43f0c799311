"""Vectorised float inverse-CDF noise of the audit zoo (:mod:`textdp.mechanisms.zoo`).

Imported lazily, on the first call of a zoo mechanism (numba is not loaded by ``textdp --help``).
Each function computes, from the uniforms ``U = rng.random(shape)`` of the caller's generator,
exactly the float formula of the official code (Habernal 2022, ``experiment.py``), element by
element in the same order of operations, so the values are bit-identical to the numpy
expressions quoted below for the same ``U``:

* Laplace: ``x + b·(−sgn(U−½)·ln(1 − 2|U−½|))``;
* DPText: ``x + b·(−sgn(U)·ln(1 − 2|U|))`` with NaN set to 0.

The logarithm is numpy's (SIMD) ``np.log`` on a whole block; the passes before and after it
are numba loops over cache-sized blocks, so no temporary array is allocated per operation.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["laplace_add", "dptext_add"]


@njit(cache=True, nogil=True)
def _centred_log_argument(u, t):
    """``t = 1 − 2|u − ½|`` (exact in float64: ``u`` is a multiple of 2**-53)."""
    for i in range(u.size):
        t[i] = 1.0 - 2.0 * abs(u[i] - 0.5)


@njit(cache=True, nogil=True)
def _laplace_finish(u, log_t, x, b, out):
    """``out = x + b·(−sgn(u − ½)·log_t)``; ``out`` may be ``u``.

    ``log_t <= 0``, so ``−sgn(v)·log_t`` is ``copysign(−log_t, v)`` for ``v ≠ 0``; for ``v = 0``
    (``log_t = ln 1 = 0``) both are a zero and ``x + b·(±0) = x`` (``x`` is not ``−0.0``), so the
    branch-free form gives the same value as the formula."""
    for i in range(u.size):
        out[i] = x[i] + b * math.copysign(-log_t[i], u[i] - 0.5)


@njit(cache=True, nogil=True)
def _dptext_log_argument(u, t):
    """``t = 1 − 2|u|`` (negative for ``u > ½``: its log is NaN, set to 0 afterwards)."""
    for i in range(u.size):
        t[i] = 1.0 - 2.0 * abs(u[i])


@njit(cache=True, nogil=True)
def _dptext_finish(u, log_t, x, b, out):
    """``out = x + b·T``, ``T = −sgn(u)·log_t`` with NaN → 0; ``out`` may be ``u``."""
    for i in range(u.size):
        s = 1.0 if u[i] > 0.0 else (-1.0 if u[i] < 0.0 else 0.0)
        v = -s * log_t[i]
        if v != v:
            v = 0.0
        out[i] = x[i] + b * v


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).reshape(-1)


def laplace_add(x: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``x + scale·L`` with ``L = −sgn(U−½)·ln(1−2|U−½|)``, ``U = rng.random(x.shape)``.

    x: float64 array (any shape); returns a new float64 array of the same shape.
    """
    u = rng.random(x.shape)
    uf = u.reshape(-1)
    t = np.empty_like(uf)
    _centred_log_argument(uf, t)
    with np.errstate(divide="ignore"):  # U = 0 gives ln 0 = −inf, as in the official code
        np.log(t, out=t)
    _laplace_finish(uf, t, _flat(x), float(scale), uf)
    return u


def dptext_add(x: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``x + scale·T`` with DPText's ``T = −sgn(U)·ln(1−2|U|)``, NaN → 0, ``U = rng.random(x.shape)``.

    x: float64 array (any shape); returns a new float64 array of the same shape.
    """
    u = rng.random(x.shape)
    uf = u.reshape(-1)
    t = np.empty_like(uf)
    _dptext_log_argument(uf, t)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(t, out=t)
    _dptext_finish(uf, t, _flat(x), float(scale), uf)
    return u
