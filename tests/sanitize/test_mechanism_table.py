"""The table of sanitizers (issue 15): every registered sanitizer is reachable from the CLI and the
Python API by its name, lists its paper and parameters, and refuses parameters it does not take with
one clear line. Generic over the registry: a new family is checked the moment it registers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.cli.sanitize import MECHANISM_HELP, parse_params
from textdp.errors import ParameterError
from textdp.mechanisms.registry import registry
from textdp.sanitize import MECHANISMS, canonical_name, make_mechanism, mechanism_parameters

SANITIZERS = sorted(n for n, info in registry().items() if info.capability == "sanitize")


def test_registry_and_table_agree():
    assert sorted(MECHANISMS) == SANITIZERS
    for name in SANITIZERS:
        assert registry()[name].factory is MECHANISMS[name]


@pytest.mark.parametrize("name", SANITIZERS)
def test_every_sanitizer_names_its_paper_and_is_listed(name):
    cls = MECHANISMS[name]
    assert cls.paper.strip(), f"{name} has no paper"
    assert cls.name == name, f"{cls.__name__}.name is {cls.name!r}, registered as {name!r}"
    listed = [s.strip() for s in MECHANISM_HELP.split("(")[0].split("|")]
    assert name in listed, f"--mechanism help does not list {name}: {listed}"
    assert canonical_name(name.upper()) == name


def test_mechanisms_command_lists_every_sanitizer_with_parameters():
    r = CliRunner().invoke(app, ["mechanisms", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in json.loads(r.output)}
    assert sorted(rows) == SANITIZERS
    for name, row in rows.items():
        assert set(row["parameters"]) == set(mechanism_parameters(name))
        assert row["paper"] == MECHANISMS[name].paper


@pytest.mark.parametrize("name", SANITIZERS)
def test_unknown_parameter_is_one_clear_line(name):
    with pytest.raises(ParameterError, match="has no parameter 'no_such_knob'"):
        make_mechanism(name, "glove-6b-50d", 1.0, no_such_knob=3)
    with pytest.raises(ParameterError, match="no parameter 'no_such_knob'"):
        parse_params(name, ["no_such_knob=3"])


def test_param_values_are_typed_and_malformed_items_refused():
    assert parse_params("santext+", ["w=0.5", "p=0.25", "frequencies=wordfreq"]) == \
        {"w": 0.5, "p": 0.25, "frequencies": "wordfreq"}
    for bad, msg in ((["w"], "write KEY=VALUE"), (["w=abc"], "not a valid float"), (["w=0.5", "w=0.6"], "twice")):
        with pytest.raises(ParameterError, match=msg):
            parse_params("santext+", bad)


def test_unknown_mechanism_lists_the_known_ones():
    r = CliRunner().invoke(app, ["sanitize", "-m", "no-such-mech", "-e", "1", "--limit", "1", "--no-ledger"])
    assert r.exit_code == 2
    line = r.output.strip()
    assert len(line.splitlines()) == 1 and "unknown mechanism" in line
    for name in SANITIZERS:
        assert name in line
