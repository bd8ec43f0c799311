"""Vectorised float inverse-CDF noise of the audit zoo (:mod:`textdp.mechanisms.zoo`).

Imported lazily, on the first call of a zoo mechanism (numba is not loaded by ``textdp --help``).
Each function computes, from the uniforms ``U = rng.random(shape)`` of the caller's generator,
exactly the float formula of the official code (Habernal 2022, ``experiment.py``), element by
element in the same order of operations, so the values are bit-identical to the numpy
expressions quoted below for the same ``U``:

* Laplace: ``x + b·(−sgn(U−½)·ln(1 − 2|U−½|))``;
* DPText: ``x + b·(−sgn(U)·ln(1 − 2|U|))`` with NaN set to 0.

The logarithm is numpy's (SIMD) ``np.log`` on a block of ``BLOCK`` values; the passes before
and after it are numba loops over the same block, in a scratch buffer kept per thread: the only
array allocated per call is the output (a fresh 512 KiB scratch per call costs more than the
arithmetic: the C library hands freed memory back to the OS and every page faults again).
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

__all__ = ["laplace_add", "dptext_add", "BLOCK"]

#: values per block (512 KiB of float64: the scratch buffer of a thread stays in its L2 cache)
BLOCK = 1 << 16
_local = threading.local()


def _scratch() -> np.ndarray:
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = np.empty(BLOCK)
    return buf


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


def _add(x: np.ndarray, scale: float, rng: np.random.Generator, argument, finish) -> np.ndarray:
    u = rng.random(x.shape)  # all uniforms first: the same stream as the official code's one call
    uf = u.reshape(-1)
    xf = _flat(x)
    buf = _scratch()
    b = float(scale)
    with np.errstate(divide="ignore", invalid="ignore"):  # ln 0 = −inf and ln(<0) = NaN, as in the official code
        for s in range(0, uf.size, BLOCK):
            e = min(s + BLOCK, uf.size)
            t = buf[: e - s]
            argument(uf[s:e], t)
            np.log(t, out=t)
            finish(uf[s:e], t, xf[s:e], b, uf[s:e])
    return u


def laplace_add(x: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``x + scale·L`` with ``L = −sgn(U−½)·ln(1−2|U−½|)``, ``U = rng.random(x.shape)``.

    x: float64 array (any shape); returns a new float64 array of the same shape.
    """
    return _add(x, scale, rng, _centred_log_argument, _laplace_finish)


def dptext_add(x: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``x + scale·T`` with DPText's ``T = −sgn(U)·ln(1−2|U|)``, NaN → 0, ``U = rng.random(x.shape)``.

    x: float64 array (any shape); returns a new float64 array of the same shape.
    """
    return _add(x, scale, rng, _dptext_log_argument, _dptext_finish)
