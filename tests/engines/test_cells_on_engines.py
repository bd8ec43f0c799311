"""Issue 16 item 6: evaluation cells (mechanism × ε) and audit cells (mechanism × ε × dimension) run as
engine tasks and give the same results as in one process."""

import math

import pandas as pd

from textdp.audit.grid import run_grid
from textdp.engines import LocalEngine
from textdp.evaluate import SweepConfig, run_sweep


def _cells(res):
    df = res.rows.drop(columns=[c for c in res.rows.columns if "second" in c or "cpu" in c.lower()])
    return df.reset_index(drop=True)


def test_sweep_cells_on_an_engine_match_one_process(tmp_path):
    cfg = SweepConfig("rotten-tomatoes", ["santext", "tem"], [2.0], max_docs=60, attacks=["bayes"],
                      seed=0, max_attack_tokens=200, deniability_words=5)
    one = run_sweep(cfg, tmp_path / "one")
    done = []
    eng = run_sweep(cfg, tmp_path / "eng", engine=LocalEngine(2), progress=lambda k, d, t: done.append(k))
    assert len(done) == len(one.rows) == 3  # the clean baseline and two cells, each reported once
    pd.testing.assert_frame_equal(_cells(one), _cells(eng))


def test_audit_grid_cells_on_an_engine_match_one_process():
    kw = dict(samples=3000, mechanisms=("laplace", "wrong-sensitivity"), epsilons=(1.0, 4.0), dims=(1, 3), seed=5,
              compare_published=False)
    one = run_grid(**kw)
    seen = []
    eng = run_grid(**kw, engine=LocalEngine(2), progress=seen.append)
    def facts(res):  # everything but the wall time
        return [{k: str(v) for k, v in vars(c).items() if k != "wall_s"} for c in res.cells]

    assert facts(one) == facts(eng)
    assert len(facts(one)) == 8
    assert sum(seen) == sum(2 * (3000 + math.ceil(0.1 * 3000)) * n for n in (1, 3)) * 2 * 2


def test_cli_audit_grid_engine_option(tmp_path):
    import json

    from typer.testing import CliRunner

    from textdp.cli.main import app

    r = CliRunner()
    base = ["audit", "--grid", "habernal2022", "--mechanism", "laplace", "--epsilon", "1", "--dims", "1,2",
            "--samples", "2000", "--seed", "4", "--json", "-q"]
    one = r.invoke(app, base)
    eng = r.invoke(app, base + ["--engine", "dask", "--workers", "1"])  # a local Dask cluster of one process
    assert one.exit_code == 0, one.output
    assert eng.exit_code == 0, eng.output
    strip = lambda o: [{k: v for k, v in c.items() if "wall" not in k and "second" not in k}
                       for c in json.loads(o)["cells"]]
    assert strip(one.stdout) == strip(eng.stdout)
    bad = r.invoke(app, ["audit", "-m", "laplace", "-e", "1", "--engine", "dask"])
    assert bad.exit_code == 2 and "--grid" in bad.output


def test_bad_cluster_addresses_get_one_line_quickly(tmp_path):
    """Review finding: a dead or non-Dask address hung or printed a JVM/memory error; now one line."""
    import socket

    import pytest

    from textdp.engines import get_engine
    from textdp.errors import ParameterError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, addr, needle in (("dask", f"tcp://127.0.0.1:{port}", "cannot reach the Dask scheduler"),
                               ("dask", "notaurl", "with its port"),
                               ("spark", f"spark://127.0.0.1:{port}", "cannot reach the Spark master")):
        eng = get_engine(name, scheduler=addr)
        with pytest.raises(ParameterError, match=needle):
            eng.start()
