"""The closed-form oracle (spec B.4) against its known values and the published table."""

from __future__ import annotations

import math

import pytest

from textdp.audit import laplace_oracle, load_published, zoo_oracle
from textdp.audit.grid import _published_check


def test_closed_form_values():
    assert math.isclose(laplace_oracle(1.0, 1), math.log(2 * math.exp(0.5) - 1), rel_tol=1e-12)
    assert math.isclose(laplace_oracle(1.0, 1), 0.8318, abs_tol=1e-4)  # published MC value: 0.8325
    assert math.isclose(laplace_oracle(0.1, 128, scale=10.0), 0.958, abs_tol=2e-3)
    assert math.isclose(laplace_oracle(1.0, 128, scale=1.0), 13.74, abs_tol=1e-2)
    assert math.isclose(zoo_oracle("adept", 0.1, 1), 0.0976, abs_tol=1e-3)
    assert zoo_oracle("random", 1.0, 8) == 0.0
    assert math.isinf(zoo_oracle("dptext", 0.1, 128)) and math.isinf(zoo_oracle("copy", 5, 2))
    assert math.isclose(zoo_oracle("wrong-sensitivity", 1.0, 1), 1.0, rel_tol=1e-12)


def test_laplace_falls_and_adept_grows_with_n():
    dims = [1, 2, 8, 32, 64, 128]
    lap = [zoo_oracle("laplace", 1.0, n) for n in dims]
    adept = [zoo_oracle("adept", 1.0, n) for n in dims]
    assert all(v <= 1.0 for v in lap) and lap[-1] < lap[2] < lap[0]
    assert all(a < b for a, b in zip(adept, adept[1:]))


def test_every_published_cell_is_consistent_with_the_oracle():
    pub = load_published()
    assert len(pub) == 252
    bad = [k for k, v in pub.items() if not _published_check(*k, v, len(pub))["published_consistent"]]
    assert bad == []


def test_published_inf_cells_are_only_unresolvable_ones():
    pub = load_published()
    for (m, e, n), v in pub.items():
        if m in ("adept",) and math.isinf(v):
            # finite true value above the official code's ceiling ln(N_pub)
            n_pub = 10**7 if n <= 16 else 10**6
            assert zoo_oracle(m, e, n) > math.log(n_pub) - 1.0


@pytest.mark.parametrize("eps", [0.1, 1.0, 10.0])
def test_correct_laplace_never_exceeds_epsilon(eps):
    for n in range(1, 70):
        assert zoo_oracle("laplace", eps, n) <= eps + 1e-12
