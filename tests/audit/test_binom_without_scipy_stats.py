"""The audit's Binomial law and normal quantile without importing scipy.stats (its import is about
0.5 s of an audit's start-up; issue 14, item 3): bit for bit what scipy.stats computes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import binom, norm

from textdp.audit.oracle import binom_logcdf, binom_logsf, binom_pmf

_PS = [0.0, 1e-300, 1e-12, 0.017, 0.3, 0.5, 0.5 - 2**-40, 0.73, 1 - 1e-12, 1.0]


@pytest.mark.parametrize("n", [1, 2, 3, 8, 17, 64, 128, 1001])
def test_binomial_pmf_and_log_tails_equal_scipy_stats(n):
    g = np.random.default_rng(n)  # test points only
    k = np.arange(n + 1)
    for p in _PS + list(g.random(10)):
        assert binom_pmf(k, n, p).tobytes() == binom.pmf(k, n, p).tobytes(), (n, p)
        if 0.0 < p < 1.0:
            for j in {0, n // 2, n - 1}:
                assert binom_logcdf(j, n, p) == float(binom.logcdf(j, n, p)), (n, p, j)
                assert binom_logsf(j, n, p) == float(binom.logsf(j, n, p)), (n, p, j)


def test_normal_quantile_of_the_published_check_equals_scipy_stats():
    from scipy.special import ndtri

    for q in (0.005, 0.005 / 252, 0.005 / 24, 1e-9):
        assert float(-ndtri(q)) == float(norm.isf(q))


def test_the_audit_package_does_not_import_scipy_stats():
    code = "import sys, textdp.audit, textdp.audit.grid; print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
