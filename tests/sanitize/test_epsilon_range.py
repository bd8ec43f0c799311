"""Each sanitizer's supported epsilon range: refused in one line naming --epsilon and the limit,
before the embeddings are loaded and before any budget is touched; the limits themselves work."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.errors import ParameterError
from textdp.sanitize import FBDD, SanText, SanTextPlus

runner = CliRunner()


@pytest.mark.parametrize("cls,eps,needle", [
    (SanText, 1e200, "largest supported is 1e+100"),
    (SanTextPlus, 1e300, "largest supported is 1e+100"),
    (FBDD, 5e-324, "smallest supported is 1e-20"),
    (FBDD, 1e-40, "smallest supported is 1e-20"),
])
def test_out_of_range_epsilon_is_refused_before_loading_embeddings(cls, eps, needle):
    # the embeddings name does not exist: the epsilon check must come first
    with pytest.raises(ParameterError, match=re.escape(needle)) as ei:
        cls("no-such-embeddings.txt", epsilon=eps)
    msg = str(ei.value)
    assert msg.startswith(f"--epsilon {eps!r} is too ") and "\n" not in msg and "float" in msg


def test_limits_themselves_work(small_emb):
    texts = ["w1 w2 w3", "w4 w5"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no overflow / invalid value anywhere
        for cls in (SanText, SanTextPlus):
            m = cls(small_emb, epsilon=cls.epsilon_max, output_vocabulary="full", rng=0).fit(texts)
            assert m.sanitize(texts) == texts or cls is SanTextPlus  # eps huge: SanText keeps every word
            assert np.isfinite(m.guarantee.epsilon0)
        fb = FBDD(small_emb, epsilon=FBDD.epsilon_min, output_vocabulary="full", rng=0)
        z = fb.noise(200)
        assert np.isfinite(z).all()
        out = fb.sample_rows(np.arange(12).repeat(50))
    # at eps = 1e-20 the noise swamps the input: outputs spread over the vocabulary (a NaN search gives row 0 only)
    assert len(np.unique(out)) > 3


@pytest.mark.parametrize("mech,eps,needle", [
    ("santext", "1e200", "largest supported is 1e+100"),
    ("santext+", "1e300", "largest supported is 1e+100"),
    ("fbdd", "5e-324", "smallest supported is 1e-20"),
])
def test_cli_out_of_range_epsilon_exit_2_no_budget_no_output(tmp_path, monkeypatch, small_glove_file, mech, eps,
                                                              needle):
    ledgers = tmp_path / "ledgers"
    monkeypatch.setenv("TEXTDP_LEDGER_DIR", str(ledgers))
    src = tmp_path / "notes.txt"
    src.write_text("good film\nbad movie\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    r = runner.invoke(app, ["sanitize", str(src), "-m", mech, "-e", eps, "--embeddings", str(small_glove_file),
                            "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert "--epsilon" in r.output and needle in r.output and "Traceback" not in r.output
    assert "unexpected" not in r.output
    assert not out.exists() and not (ledgers.exists() and any(ledgers.iterdir()))


@pytest.mark.parametrize("kwargs,needle", [
    ({"oov": "leak"}, "(--oov)"),
    ({"output_vocabulary": "foo"}, "(--output-vocabulary)"),
    ({"block_bytes": 104}, "(--block-size, in MiB)"),
])
def test_other_parameter_errors_name_the_option_before_loading(kwargs, needle):
    with pytest.raises(ParameterError, match=re.escape(needle)):
        SanText("no-such-embeddings.txt", epsilon=1.0, **kwargs)
    with pytest.raises(ParameterError, match=re.escape("(--frequencies)")):
        SanTextPlus("no-such-embeddings.txt", epsilon=1.0, frequencies="foo")
