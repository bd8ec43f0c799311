"""Goodness-of-fit helpers for the trust tests (fixed seeds, stated significance levels)."""

from __future__ import annotations

import numpy as np
from scipy import stats

ALPHA = 1e-3  # significance level of every goodness-of-fit test in tests/trust


def chi2_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray, min_expected: float = 20.0) -> float:
    """Chi-square goodness-of-fit p-value of integer ``samples`` against ``pmf`` on ``support``.

    Cells with expected count < ``min_expected`` are pooled into one "rest" cell
    (which also collects samples outside ``support``).
    """
    samples = np.asarray(samples)
    n = samples.size
    pmf = np.asarray(pmf, dtype=np.float64)
    pmf = pmf / pmf.sum()
    idx = {int(v): i for i, v in enumerate(support)}
    counts = np.zeros(len(support) + 1)
    vals, cnt = np.unique(samples, return_counts=True)
    for v, c in zip(vals.tolist(), cnt.tolist()):
        counts[idx.get(int(v), len(support))] += c
    expected = np.concatenate([pmf * n, [0.0]])
    big = expected[:-1] >= min_expected
    obs = np.concatenate([counts[:-1][big], [counts[:-1][~big].sum() + counts[-1]]])
    exp = np.concatenate([expected[:-1][big], [expected[:-1][~big].sum()]])
    if exp[-1] < 1e-12:  # nothing pooled: drop the rest cell unless samples fell there
        if obs[-1] > 0:
            return 0.0
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def discrete_laplace_pmf(support: np.ndarray, scale: float) -> np.ndarray:
    return np.exp(-np.abs(support) / scale)


def discrete_gaussian_pmf(support: np.ndarray, sigma: float) -> np.ndarray:
    return np.exp(-(support.astype(float) ** 2) / (2 * sigma**2))
