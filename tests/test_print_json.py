"""`--json` output (textdp.cli._common.print_json) is standard JSON: no NaN or Infinity."""

from __future__ import annotations

import json
import math

import numpy as np

from textdp.cli._common import json_safe, print_json


def _strict_loads(text):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_print_json_writes_non_finite_floats_as_standard_json(capsys):
    print_json({"nan": math.nan, "inf": math.inf, "ninf": -math.inf, "np": np.float32("nan"),
                "arr": np.array([1.5, np.inf]), "rows": [{"x": np.float64("-inf")}], "t": (2, np.int64(3)),
                "ok": 0.25, "flag": np.bool_(True), "s": "inf"})
    doc = _strict_loads(capsys.readouterr().out)
    assert doc == {"nan": None, "inf": "inf", "ninf": "-inf", "np": None, "arr": [1.5, "inf"],
                   "rows": [{"x": "-inf"}], "t": [2, 3], "ok": 0.25, "flag": True, "s": "inf"}


def test_json_safe_leaves_other_values_to_the_default_str(capsys):
    class Thing:
        def __str__(self):
            return "thing"

    assert json_safe({"a": Thing()})["a"].__class__ is Thing
    print_json({"a": Thing()})
    assert _strict_loads(capsys.readouterr().out) == {"a": "thing"}
