"""The audit's simulation generator (issue 14, item 4): PCG64DXSM, seeded reproducibly by the
seed and from the OS's CSPRNG without one, stated in the output; the zoo's vectorised noise is
the official code's float formula bit for bit; the numba statistics equal numpy's."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.audit import audit_mechanism
from textdp.cli.main import app
from textdp.errors import ParameterError
from textdp.mechanisms.zoo import make_zoo_mechanism
from textdp.noise import make_rng, simulation_rng, simulation_source

runner = CliRunner()


def test_simulation_rng_is_pcg64dxsm_seeded_or_fresh():
    a, b = simulation_rng(7), simulation_rng(7)
    assert type(a.bit_generator).__name__ == "PCG64DXSM"
    assert np.array_equal(a.random(16), b.random(16))
    assert not np.array_equal(simulation_rng(7).random(16), simulation_rng(8).random(16))
    # unseeded: 256 bits from the OS's CSPRNG, so two runs never repeat each other
    assert not np.array_equal(simulation_rng().random(16), simulation_rng().random(16))
    g = make_rng(1)
    assert simulation_rng(g) is g
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ParameterError):
            simulation_rng(bad)
    d = simulation_source(3).describe()
    assert d["generator"] == "PCG64DXSM" and d["cryptographic"] is False and d["seeded"] is True
    assert "never for releases" in d["note"]
    assert simulation_source().describe()["seeded"] is False


def test_spawned_streams_are_independent_and_reproducible():
    s1, s2 = simulation_source(5).spawn(3), simulation_source(5).spawn(3)
    draws = [g.random(8) for g in s1]
    assert all(np.array_equal(d, g.random(8)) for d, g in zip(draws, s2))
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])


def _recording_mechanism():
    seen = []

    def mech(x, rng):
        seen.append((type(rng.bit_generator).__name__, float(rng.random())))
        return x + rng.laplace(0.0, x.shape[1], x.shape)

    return mech, seen


def test_audit_draws_from_the_simulation_generator_seeded_or_fresh():
    firsts = []
    for seed in (11, 11, None, None):
        mech, seen = _recording_mechanism()
        r = audit_mechanism(mech, 1.0, 2, 3000, seed=seed, workers=1)
        assert {name for name, _ in seen} == {"PCG64DXSM"}
        assert r.seed["generator"] == "PCG64DXSM" and r.seed["seeded"] is (seed is not None)
        assert r.to_dict()["simulation_rng"].startswith("PCG64DXSM (non-cryptographic")
        firsts.append([u for _, u in seen])
    assert firsts[0] == firsts[1]                  # the same seed: the same draws
    assert firsts[2] != firsts[3] and firsts[2] != firsts[0]   # no seed: fresh draws every run


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("name", ["laplace", "adept", "wrong-sensitivity", "dptext"])
def test_zoo_noise_is_the_official_float_formula_bit_for_bit(name, backend, monkeypatch):
    monkeypatch.setenv("TEXTDP_AUDIT_BACKEND", backend)
    n, eps = 8, 0.7
    m = make_zoo_mechanism(name, eps, n)
    for value in (0.0, 1.0):
        x = np.full((5000, n), value)
        y = m(x, simulation_rng(3))
        u = simulation_rng(3).random(x.shape)   # the same uniforms, through the official numpy expressions
        with np.errstate(divide="ignore", invalid="ignore"):
            if name == "dptext":
                t = -np.sign(u) * np.log(1 - 2 * np.abs(u))
                t[np.isnan(t)] = 0.0
            else:
                t = -np.sign(u - 0.5) * np.log(1 - 2 * np.abs(u - 0.5))
        ref = x + m.scale * t
        if name == "wrong-sensitivity":
            ref = 0.5 * ref
        assert np.array_equal(y, ref)
        assert np.array_equal(x, np.full((5000, n), value))   # the input is left as it was


def test_builtin_zoo_mechanisms_leave_their_input_unchanged():
    # the audit passes the built-in zoo a view of its records, not a copy (textdp.audit.core._task_stats)
    from textdp.mechanisms.zoo import ZOO

    for name in ZOO:
        for value in (0.0, 1.0):
            x = np.full((300, 3), value)
            make_zoo_mechanism(name, 1.0, 3)(x, simulation_rng(1))
            assert np.array_equal(x, np.full((300, 3), value)), name


@pytest.mark.parametrize("n", [1, 2, 7])
def test_statistics_kernel_equals_numpy(n):
    from textdp.audit._kernels import bit_and_clipped_histograms, bit_histogram

    g = simulation_rng(2)
    y = g.laplace(0.5, 2.0, (20000, n))
    y[::97] = np.inf
    y[1::89] = -np.inf
    bits = np.bincount(np.count_nonzero(y >= 0.5, axis=1), minlength=n + 1)
    t = np.clip(y, 0.0, 1.0).mean(axis=1)
    clip = np.bincount(np.minimum((t * 1000).astype(np.int64), 999), minlength=1000)
    h = np.zeros(n + 1, np.int64)
    assert bit_histogram(y, h) == 0 and np.array_equal(h, bits)
    h2, c2 = np.zeros(n + 1, np.int64), np.zeros(1000, np.int64)
    assert bit_and_clipped_histograms(y, h2, c2) == 0
    assert np.array_equal(h2, bits) and np.array_equal(c2, clip)
    y[3, 0] = y[10, n - 1] = np.nan
    assert bit_histogram(y, np.zeros(n + 1, np.int64)) == 2


def test_both_backends_give_the_same_seeded_audit(monkeypatch):
    results = {}
    for backend in ("numba", "numpy"):
        monkeypatch.setenv("TEXTDP_AUDIT_BACKEND", backend)
        r = audit_mechanism("laplace", 1.0, 4, 20_000, seed=6, workers=2, chunk_elements=30_000)
        results[backend] = (r.counts_D, r.counts_D2, r.strong)
    assert results["numba"] == results["numpy"]
    monkeypatch.setenv("TEXTDP_AUDIT_BACKEND", "fast")
    with pytest.raises(ParameterError, match="TEXTDP_AUDIT_BACKEND"):
        audit_mechanism("laplace", 1.0, 4, 100, seed=6)


RECORDER = """
    import os
    import numpy as np

    def mech(x, rng):
        with open(os.environ["RECORD_DRAWS"], "a") as f:
            f.write(f"{type(rng.bit_generator).__name__} {rng.random()!r}\\n")
        return x + rng.laplace(0.0, x.shape[1], x.shape)
"""


def test_cli_seed_reproduces_the_draws_and_no_seed_gives_fresh_ones(tmp_path, monkeypatch):
    (tmp_path / "recorder.py").write_text(textwrap.dedent(RECORDER))
    monkeypatch.chdir(tmp_path)
    runs = []
    for i, seed in enumerate(["5", "5", None, None]):
        log = tmp_path / f"draws{i}.txt"
        monkeypatch.setenv("RECORD_DRAWS", str(log))
        args = ["audit", "-m", "recorder.py:mech", "-e", "1", "--dims", "1,3", "-N", "2000", "--workers", "1", "-q"]
        r = runner.invoke(app, args + (["--seed", seed] if seed else []))
        assert r.exit_code == 0, r.output
        lines = log.read_text().splitlines()
        assert len(lines) > 4 and {ln.split()[0] for ln in lines} == {"PCG64DXSM"}
        runs.append(lines)
    assert runs[0] == runs[1]                          # --seed 5 twice: the same draws
    assert runs[2] != runs[3] and runs[2] != runs[0]   # no --seed: fresh draws every run


def test_cli_output_states_the_simulation_generator():
    r = runner.invoke(app, ["audit", "-m", "laplace", "-e", "1", "--dims", "2", "-N", "1000", "--seed", "4", "-q"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # the line may wrap
    assert "simulation_rng: PCG64DXSM (non-cryptographic, seed 4; audit noise is not a release)" in text
    r = runner.invoke(app, ["audit", "-m", "laplace", "-e", "1", "--dims", "2", "-N", "1000", "--json", "-q"])
    doc = json.loads(r.stdout)
    assert doc["settings"]["simulation_rng"] == ("PCG64DXSM (non-cryptographic, seeded from the OS's CSPRNG; "
                                                 "audit noise is not a release)")
    assert doc["settings"]["seed"]["generator"] == "PCG64DXSM" and doc["settings"]["seed"]["cryptographic"] is False
    assert doc["cells"][0]["seed"]["generator"] == "PCG64DXSM"
    r = runner.invoke(app, ["audit", "--grid", "habernal2022", "-m", "laplace", "-e", "1", "-n", "1", "-N", "1000",
                            "--seed", "2", "-q"])
    assert r.exit_code == 0 and "simulation_rng: PCG64DXSM (non-cryptographic, seed 2;" in " ".join(r.output.split())
