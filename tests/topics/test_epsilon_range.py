"""Supported epsilon ranges of the private LDA trainers: refused at construction (before any
work or budget reservation) in one line naming --epsilon, the limit and why; the limits work."""

from __future__ import annotations

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.errors import ParameterError
from textdp.noise import discrete_laplace, make_rng
from textdp.topics import HDPLDA, LPLDA, OLPLDA, flip_for_epsilon, lp_epsilon, privacy_utility
from textdp.topics.privacy import LP_EPSILON_MAX, LP_EPSILON_MIN

from .conftest import synthetic


@pytest.mark.parametrize("cls", [LPLDA, OLPLDA])
@pytest.mark.parametrize("eps,needle", [(1500, "largest supported is 1400"), (1e300, "largest supported is 1400"),
                                        (1e-300, "smallest supported is 1e-15"), (5e-324, "smallest supported")])
def test_lp_epsilon_out_of_range(cls, eps, needle):
    with pytest.raises(ParameterError, match=needle) as ei:
        cls(3, epsilon=eps)
    msg = str(ei.value)
    assert msg.startswith("--epsilon ") and "flip probability" in msg and "\n" not in msg


def test_lp_limits_work_and_round_trip():
    for e in (LP_EPSILON_MIN, 1.0, 40.0, LP_EPSILON_MAX):
        f = flip_for_epsilon(e)
        assert 0 < f < 1
        assert lp_epsilon(f) <= e * (1 + 1e-9)  # the recorded guarantee is the one of the f actually used
        assert math.isclose(lp_epsilon(f), e, rel_tol=1e-9) or e < 1e-12
    assert LPLDA(3, epsilon=LP_EPSILON_MAX).guarantee.epsilon == pytest.approx(LP_EPSILON_MAX)
    # computed in log space: finite for every f in (0, 1), even where 2/f overflows
    assert lp_epsilon(5e-324) == pytest.approx(2 * (math.log(2) - math.log(5e-324)))
    with pytest.raises(ParameterError, match=r"--flip"):
        LPLDA(3, flip=1.0)


def test_hdp_smallest_epsilon_is_checked_and_works():
    with pytest.raises(ParameterError, match="too small for HDP-LDA") as ei:
        HDPLDA(3, epsilon=1e-300, iterations=200, max_doc_length=200)
    msg = str(ei.value)
    assert msg.startswith("--epsilon 1e-300") and "--max-doc-length" in msg and "--iterations" in msg
    eps_min = float(msg.split("smallest supported here is ")[1].split(" ")[0])
    t = HDPLDA(3, epsilon=eps_min, iterations=200, max_doc_length=200)  # the value the message gives is accepted
    scale = t.accounting()["scale"]
    assert np.all(np.isfinite(discrete_laplace(scale, 4, make_rng(0))))
    assert HDPLDA(3, epsilon=1e300, iterations=2).accounting()["scale"] > 0  # large ε: tiny noise, fine


def test_tradeoff_validates_every_run_first():
    c, _ = synthetic(M=30, L=10, seed=2)
    calls = []
    with pytest.raises(ParameterError, match="largest supported is 1400"):
        privacy_utility(c, c, [1.0, 1500.0], ["hdp", "lp"], n_topics=3, iterations=2,
                        progress=calls.append)
    assert calls == []  # nothing was trained


@pytest.mark.parametrize("args,needle", [(["--privacy", "lp", "-e", "1500"], "largest supported is 1400"),
                                         (["--privacy", "olp", "-e", "1500"], "largest supported is 1400"),
                                         (["--privacy", "lp", "-e", "1e-300"], "smallest supported is 1e-15"),
                                         (["--privacy", "hdp", "-e", "1e-300"], "smallest supported here")])
def test_cli_train_out_of_range_exit_2_no_budget(tmp_path, args, needle):
    c, _ = synthetic(M=30, L=10, seed=2)
    src = tmp_path / "docs.txt"
    src.write_text("\n".join(" ".join(c.vocabulary[i] for i in d) for d in c.documents()) + "\n", "utf-8")
    led = tmp_path / "ledgers"
    r = CliRunner().invoke(app, ["topics", "train", str(src), "--k", "3", "--min-count", "1", "-o",
                                 str(tmp_path / "m"), "--ledger-dir", str(led), *args])
    assert r.exit_code == 2, r.output
    assert "--epsilon" in r.output and needle in r.output and "unexpected" not in r.output
    assert "corpus:" not in r.output  # refused before the corpus was built
    assert not (tmp_path / "m").exists() and not (led.exists() and any(led.iterdir()))


def test_cli_tradeoff_out_of_range_exit_2_before_loading(tmp_path, monkeypatch):
    import textdp.cli.topics as cli_topics

    def no_loading(*a, **k):
        raise AssertionError("the data set was loaded before the parameters were checked")

    monkeypatch.setattr(cli_topics, "_load_texts", no_loading)
    out = tmp_path / "plot.png"
    r = CliRunner().invoke(app, ["topics", "tradeoff", "bbc-news", "--epsilons", "1,1500", "--methods", "hdp,lp",
                                 "-o", str(out), "-q"])
    assert r.exit_code == 2, r.output
    assert "--epsilon 1500.0 is too large for LP/OLP-LDA" in r.output and "unexpected" not in r.output
    assert not out.exists() and not out.with_suffix(".csv").exists()
