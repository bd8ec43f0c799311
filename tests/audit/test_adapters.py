"""Token sanitizers (SanText, FBDD) audited through the [0,1]^n adapter."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.audit import audit_mechanism
from textdp.audit.adapters import TokenPairAdapter
from textdp.errors import ParameterError

sanitize = pytest.importorskip("textdp.sanitize")


def test_santext_is_not_refuted_and_projection_is_exact(small_glove_file):
    mech = sanitize.SanText(str(small_glove_file), epsilon=1.0, output_vocabulary="full", rng=1)
    ad = TokenPairAdapter(mech, "good", "bad")
    assert math.isclose(ad.distance, 2.0)
    assert math.isclose(ad.claimed_epsilon(3), 3 * 1.0 * 2.0)
    # projections: good -> 0, bad -> 1, film (orthogonal, midway) -> 0.5
    rows = mech.input_rows(["good", "bad", "film"])
    assert np.allclose(ad._proj[rows], [0.0, 1.0, 0.5])
    r = audit_mechanism(ad, None, 2, 20_000, seed=3)
    assert r.epsilon == pytest.approx(4.0)
    assert r.epsilon_hat > 0.3 and not r.any_violation


def test_a_sanitizer_with_too_small_a_claim_is_refuted(small_glove_file):
    mech = sanitize.SanText(str(small_glove_file), epsilon=1.0, output_vocabulary="full", rng=1)
    ad = TokenPairAdapter(mech, "good", "bad")
    # the real loss at n = 2 is well above 0.1: claiming 0.1 must be refuted
    assert audit_mechanism(ad, 0.1, 2, 20_000, seed=3).violation


def test_adapter_bad_words(small_glove_file):
    mech = sanitize.SanText(str(small_glove_file), epsilon=1.0, output_vocabulary="full", rng=1)
    with pytest.raises(ParameterError, match="no embedding"):
        TokenPairAdapter(mech, "good", "zzzz")


def test_cli_audits_a_sanitizer_from_a_user_file(small_glove_file, tmp_path, monkeypatch):
    (tmp_path / "mysan.py").write_text(textwrap.dedent(f"""
        from textdp.sanitize import SanText
        from textdp.audit.adapters import TokenPairAdapter
        mech = TokenPairAdapter(SanText({str(small_glove_file)!r}, epsilon=1.0, output_vocabulary="full"),
                                "good", "bad")
    """))
    monkeypatch.chdir(tmp_path)
    from textdp.cli.main import app

    r = CliRunner().invoke(app, ["audit", "-m", "mysan.py:mech", "--dims", "1,2", "--samples", "5000",
                                 "--seed", "1", "-q", "--fail-on-violation"])
    assert r.exit_code == 0, r.output
    assert "mysan.py:mech" in r.output and "VIOLATION" not in r.output


def test_registry_sanitizer_name_explains_the_adapter():
    with pytest.raises(ParameterError, match="TokenPairAdapter"):
        audit_mechanism("santext", 1.0, 2, 10)
