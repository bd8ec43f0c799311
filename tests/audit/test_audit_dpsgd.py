"""One-run audit of DP-SGD (``textdp audit dpsgd``, :func:`textdp.audit.dpsgd.audit_dpsgd`) on a CPU-sized
task: the deliberately broken DP-SGD (noise multiplier / 10, claim unchanged) is flagged at a claimed
ε <= 2 and the correct one is not.

Threat model of the flag check: white box, final model only (the canary rows' alignment with each
canary's gradient; with plain SGD these rows hold the sum of every step's noisy gradient). Task: the
first 2,000 Rotten Tomatoes training snippets + 1,000 canary sentences, expected batch 64, 4
epochs (157 steps), ε = 2 at δ = 1e-5. Fixed seeds (a simulation, not a release). Measured with
these seeds: correct bound 0.21, broken 2.86 (claimed 2.00, ceiling 5.81).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.audit.dpsgd import BROKEN_FACTOR, audit_dpsgd
from textdp.cli.main import app
from textdp.errors import ParameterError

runner = CliRunner()
SMALL = dict(max_examples=2000, batch_size=64, epochs=4.0)
CLI_SMALL = ["--max-examples", "2000", "--batch-size", "64", "--epochs", "4", "--canaries", "1000", "-e", "2"]


@pytest.fixture(scope="module")
def correct():
    return audit_dpsgd(2.0, 1e-5, 1000, seed=1, **SMALL)


@pytest.fixture(scope="module")
def broken_cli():
    """The broken replica through the CLI: --json and --fail-on-violation (exit status 3 when flagged)."""
    r = runner.invoke(app, ["audit", "dpsgd", *CLI_SMALL, "--broken", "--seed", "1", "-q", "--json",
                            "--fail-on-violation"])
    return r


def test_correct_dpsgd_is_not_flagged(correct):
    a = correct.audit
    assert 1.9 < correct.claimed_epsilon <= 2.0 and correct.delta == 1e-5
    assert correct.sigma_used == correct.sigma and not correct.broken
    assert not correct.flagged and a.epsilon_lower <= correct.claimed_epsilon
    assert a.ceiling == pytest.approx(5.809, abs=1e-3) and a.epsilon_lower < a.attainable <= a.ceiling
    assert correct.steps == 157 and correct.included == int(correct.canary_included.sum())
    assert 400 < correct.included < 600 and correct.canary_scores.shape == (1000,)
    assert correct.test_accuracy > 0.5  # the run learns something (majority class: 0.58)


def test_broken_dpsgd_is_flagged_at_claimed_epsilon_2(broken_cli, correct):
    assert broken_cli.exit_code == 3, broken_cli.output
    d = json.loads(broken_cli.stdout)
    assert d["broken"] is True and d["flagged"] is True
    assert d["claimed_epsilon"] == pytest.approx(correct.claimed_epsilon)  # the claim is unchanged
    assert d["claimed_epsilon"] <= 2.0
    assert d["sigma_used"] == pytest.approx(d["sigma"] / BROKEN_FACTOR)
    assert d["audit"]["epsilon_lower"] > d["claimed_epsilon"] + 0.3
    assert d["audit"]["epsilon_lower"] <= d["audit"]["ceiling"]
    assert "not for release" in d["seed_note"] and d["seed"]["seeded"] is True
    assert "white box" in d["threat_model"]


def test_loss_and_gradient_scores_rank_canaries_alike_and_seed_reproduces():
    kw = dict(max_examples=400, batch_size=32, epochs=1.0, fdp=False, seed=5)
    g = audit_dpsgd(2.0, 1e-5, 200, score="gradient", **kw)
    lo = audit_dpsgd(2.0, 1e-5, 200, score="loss", **kw)
    assert np.array_equal(g.canary_included, lo.canary_included)
    assert np.array_equal(np.argsort(g.canary_scores, kind="stable"), np.argsort(lo.canary_scores, kind="stable"))
    assert [r.correct for r in g.audit.rows] == [r.correct for r in lo.audit.rows]
    assert "black box" in lo.threat_model and "white box" in g.threat_model
    again = audit_dpsgd(2.0, 1e-5, 200, score="gradient", **kw)
    assert np.array_equal(again.canary_scores, g.canary_scores)  # --seed reproduces the whole simulation


def test_cli_text_output_names_claim_bound_ceiling_and_verdict():
    r = runner.invoke(app, ["audit", "dpsgd", "--max-examples", "400", "--batch-size", "32", "--epochs", "1",
                            "--canaries", "200", "--seed", "2", "-q"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    from textdp.audit.one_run import ceiling

    for needle in ("one-run audit of DP-SGD", "claimed   ε =", "bound     ε ≥", f"ceiling   ln(q/(1−q)) = {ceiling(200, 0.05):.2f}",
                   "f-DP", "verdict   ok", "simulation_rng: PCG64DXSM", "seed 2: a reproducible research run, not for release"):
        assert needle in out, (needle, out)


@pytest.mark.parametrize("args,needle", [
    (["--score", "margin"], "score must be one of"),
    (["--guesses", "5"], "--guesses must be K_PLUS,K_MINUS"),
    (["--guesses", "600,600"], "0 < k+ + k- <= 1000 canaries"),
    (["--alpha", "1.5"], "--alpha must be in (0, 1)"),
    (["-e", "-1"], "epsilon must be a finite number"),
    (["--delta", "0"], "delta must be in (0, 1)"),
    (["--canaries", "1"], "canaries must be a whole number"),
    (["--max-examples", "0"], "--max-examples must be a whole number"),
    (["no-such-dataset"], "unknown dataset"),
])
def test_cli_bad_input_is_one_line_exit_2(args, needle):
    r = runner.invoke(app, ["audit", "dpsgd", *args])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.output, r.output


def test_parent_options_before_the_subcommand_are_refused():
    r = runner.invoke(app, ["audit", "--alpha", "0.1", "dpsgd"])
    assert r.exit_code == 2 and "dpsgd" in r.output


def test_api_bad_values_raise_parameter_error():
    with pytest.raises(ParameterError, match="batch_size 5000 is larger"):
        audit_dpsgd(2.0, 1e-5, 10, max_examples=100, batch_size=5000, seed=0)


def test_empty_poisson_batches_still_step():
    """q = 1/55: most of the 12 Poisson batches are empty; each still takes a (noise-only) step."""
    r = audit_dpsgd(2.0, 1e-5, 10, max_examples=50, batch_size=1, epochs=0.2, seed=3, fdp=False)
    assert r.steps == 12 and r.sample_rate == pytest.approx(1 / 55)
    assert np.all(np.isfinite(r.canary_scores)) and np.any(r.canary_scores != 0)  # the noise reached the rows
