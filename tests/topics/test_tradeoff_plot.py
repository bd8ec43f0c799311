"""The trade-off plot's axis and legend agree on what ε is for each method."""

from __future__ import annotations

import math

import pandas as pd

from textdp.topics import plot_privacy_utility


def test_axis_and_legend_units_are_consistent(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    seen = {}
    real = Figure.savefig

    def spy(self, *a, **k):
        ax = self.axes[0]
        seen["x"] = ax.get_xlabel()
        seen["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        return real(self, *a, **k)

    monkeypatch.setattr(Figure, "savefig", spy)
    df = pd.DataFrame({"method": ["none", "hdp", "hdp", "lp", "lp", "olp", "olp"],
                       "epsilon": [math.inf, 1, 4, 1, 4, 1, 4],
                       "perplexity": [800, 2100, 2000, 10000, 1600, 7000, 1500]})
    out = plot_privacy_utility(df, tmp_path / "p.png")
    assert out.exists()
    # the x-axis says what all methods share (ε of the whole run) and defers the unit to the legend ...
    assert "whole training run" in seen["x"] and "legend" in seen["x"]
    legend = dict(zip(["hdp", "lp", "olp"], seen["legend"]))
    # ... whose entries each name the neighbouring unit, as the guarantees do
    assert "ε per document" in legend["hdp"] and "central" in legend["hdp"]
    assert "ε per replaced word" in legend["lp"] and "local" in legend["lp"]
    assert "ε per replaced word" in legend["olp"] and "local" in legend["olp"]
    assert "non-private" in seen["legend"][-1]
