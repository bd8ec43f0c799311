"""`textdp audit` end to end, user mechanisms from the command line, and bad input."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.audit import audit_mechanism
from textdp.cli.main import app
from textdp.errors import ParameterError

runner = CliRunner()


@pytest.fixture
def user_mechs(tmp_path, monkeypatch):
    (tmp_path / "usermechs.py").write_text(textwrap.dedent("""
        import numpy as np

        def good(x, rng):
            n = x.shape[1]
            return x + rng.laplace(0.0, n / 1.0, x.shape)

        def leaky(x, rng):
            return x + rng.laplace(0.0, 0.1, x.shape)

        def wrong_shape(x, rng):
            return x[:, :1]

        def nan(x, rng):
            y = x.copy(); y[0, 0] = np.nan
            return y

        def raises(x, rng):
            raise RuntimeError("boom")

        def text(x, rng):
            return np.full(x.shape, "a")

        not_callable = 3
    """))
    (tmp_path / "broken_import.py").write_text("import no_such_module_xyz\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(*args):
    return runner.invoke(app, ["audit", *args])


def test_cli_zoo_mechanism_table(tmp_path):
    r = _run("-m", "adept", "-e", "1", "--dims", "1,8", "--samples", "2e4", "--seed", "1", "-q")
    assert r.exit_code == 0, r.output
    assert "VIOLATION" in r.output and "adept" in r.output
    r = _run("-m", "laplace", "-e", "1", "--dims", "2", "--samples", "2e4", "--seed", "1", "-q", "--fail-on-violation")
    assert r.exit_code == 0 and "VIOLATION" not in r.output
    r = _run("-m", "dptext", "-e", "1", "--dims", "2", "--samples", "1e4", "--seed", "1", "-q", "--fail-on-violation")
    assert r.exit_code == 3


def test_cli_user_mechanism_module_and_file(user_mechs):
    r = _run("-m", "usermechs:good", "-e", "1", "--dims", "1,4", "--samples", "2e4", "--seed", "2", "-q", "--json")
    assert r.exit_code == 0, r.output
    cells = json.loads(r.stdout)["cells"]
    assert [c["n"] for c in cells] == [1, 4] and not any(c["violation"] for c in cells)
    r = _run("-m", "usermechs.py:leaky", "-e", "1", "--dims", "4", "--samples", "2e4", "--seed", "2", "-q", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["cells"][0]["violation"] is True


@pytest.mark.parametrize("spec,needle", [
    ("usermechs:wrong_shape", "returned shape"),
    ("usermechs:nan", "NaN"),
    ("usermechs:raises", "RuntimeError: boom"),
    ("usermechs:text", "dtype"),
    ("usermechs:not_callable", "not callable"),
    ("usermechs:missing", "has no attribute"),
    ("no_such_pkg_abc.mod:f", "cannot import module"),
    ("broken_import:f", "importing 'broken_import' failed"),
    ("nofile.py:f", "does not exist"),
    ("not-a-mechanism", "unknown mechanism"),
])
def test_cli_bad_mechanisms_exit_2_with_one_line(user_mechs, spec, needle):
    r = _run("-m", spec, "-e", "1", "--dims", "2", "--samples", "100", "-q")
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args,needle", [
    (["-m", "laplace", "-e", "1", "--dims", "0"], "--dims"),
    (["-m", "laplace", "-e", "1", "--dims", "-3,2"], "--dims"),
    (["-m", "laplace", "-e", "1", "--dims", "x"], "--dims"),
    (["-m", "laplace", "-e", "1", "--samples", "0"], "--samples"),
    (["-m", "laplace", "-e", "1", "--samples", "-5"], "--samples"),
    (["-m", "laplace", "-e", "1", "--samples", "1.5"], "--samples"),
    (["-m", "laplace", "-e", "0"], "epsilon"),
    (["-m", "laplace"], "--epsilon"),
    (["-m", "laplace", "-e", "1", "--alpha", "1.5"], "alpha"),
    (["-m", "usermechs:good", "-e", "1", "--fast"], "sufficient-statistic"),
    (["-m", "laplace", "-e", "1", "--statistic", "median"], "--statistic"),
    (["--grid", "nope"], "unknown grid"),
    ([], "--mechanism"),
])
def test_cli_bad_parameters(user_mechs, args, needle):
    r = _run(*args, "-q")
    assert r.exit_code == 2, r.output
    assert needle in r.output


def test_api_bad_inputs():
    with pytest.raises(ParameterError, match="dimension"):
        audit_mechanism("laplace", 1.0, 0, 100)
    with pytest.raises(ParameterError, match="samples"):
        audit_mechanism("laplace", 1.0, 2, 0)
    with pytest.raises(ParameterError, match="unknown mechanism"):
        audit_mechanism("zzz", 1.0, 2, 10)
    with pytest.raises(ParameterError, match="returned shape"):
        audit_mechanism(lambda x, rng: x.T, 1.0, 3, 10)
    with pytest.raises(ParameterError, match="NaN"):
        audit_mechanism(lambda x, rng: x * np.nan, 1.0, 3, 10)
    with pytest.raises(ParameterError, match="claimed epsilon"):
        audit_mechanism(lambda x, rng: x, None, 3, 10)


def test_cli_grid_outputs(tmp_path):
    out = tmp_path / "res"
    # a 6 mechanisms x 2 ε x 2 n slice of the grid (the full grid's verdicts: test_audit.py)
    r = _run("--grid", "habernal2022", "--fast", "--samples", "1e6", "-e", "0.5,10", "--dims", "1,64", "--seed", "1",
             "-o", str(out), "--plot", "-q")
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "habernal2022.json").read_text())
    assert len(doc["cells"]) == 24
    flagged = {m: v[0] for m, v in doc["flagged"].items()}
    assert flagged["dptext"] == 4 and flagged["copy"] == 4 and flagged["adept"] == 2
    assert flagged["laplace"] == flagged["random"] == flagged["wrong-sensitivity"] == 0
    assert all(c["published_consistent"] for c in doc["cells"])
    csv_lines = (out / "habernal2022.csv").read_text().splitlines()
    assert len(csv_lines) == 25 and csv_lines[0].startswith("mechanism,epsilon,n")
    assert (out / "habernal2022.png").read_bytes()[:4] == b"\x89PNG"
    assert "dptext: flagged 4/4" in r.output
    # existing outputs are refused without --overwrite, nothing else changes
    r2 = _run("--grid", "habernal2022", "--fast", "--samples", "1e4", "-o", str(out), "-q")
    assert r2.exit_code == 2 and "--overwrite" in r2.output
    assert json.loads((out / "habernal2022.json").read_text())["settings"]["samples"] == 10**6


def test_cli_grid_writes_the_plot_only_on_request(tmp_path):
    """Without --plot: JSON and CSV only (matplotlib is not imported); --plot needs --output."""
    out = tmp_path / "res"
    r = _run("--grid", "habernal2022", "-m", "laplace", "-e", "1", "-n", "1", "-N", "1000", "-o", str(out), "-q")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["habernal2022.csv", "habernal2022.json"]
    r = _run("--grid", "habernal2022", "-m", "laplace", "-e", "1", "-n", "1", "-N", "1000", "--plot", "-q")
    assert r.exit_code == 2 and "--plot" in r.output and "--output" in r.output


def test_cli_list():
    r = _run("--list")
    assert r.exit_code == 0 and "dptext" in r.output and "BROKEN" in r.output


def test_cli_grid_defaults_to_exact_shortcut_and_full_noise_is_opt_in(tmp_path):
    out = tmp_path / "g"
    r = _run("--grid", "habernal2022", "--samples", "1e4", "-e", "1", "--dims", "1", "--seed", "2", "-o", str(out), "-q")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "habernal2022.json").read_text())["settings"]["sampler"] == "sufficient-statistic"
    r = _run("--grid", "habernal2022", "--full-noise", "--samples", "1e3", "-e", "1", "--dims", "1", "--seed", "2",
             "-o", str(out), "-q", "--overwrite")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "habernal2022.json").read_text())["settings"]["sampler"] == "full"


def test_cli_grid_json_file_and_stdout_are_standard_json(tmp_path):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    out = tmp_path / "res"
    # ε = 20 with 1,000 samples: a zero count, so ε̂ and its upper bound are infinite
    r = _run("--grid", "habernal2022", "-m", "laplace", "-e", "20", "--dims", "1", "--samples", "1000", "--seed", "1",
             "-o", str(out), "-q", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "habernal2022.json").read_text(), parse_constant=refuse)
    assert doc["cells"][0]["epsilon_hat"] == "inf" and doc["cells"][0]["epsilon_upper"] == "inf"
    printed = json.loads(r.stdout, parse_constant=refuse)
    assert "inf" in json.dumps(printed)
