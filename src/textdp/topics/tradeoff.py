"""Privacy-utility trade-off: held-out perplexity against ε for each private trainer,
with the non-private sampler as a horizontal reference line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Sequence

from textdp.errors import ParameterError
from textdp.topics.corpus import Corpus

__all__ = ["privacy_utility", "plot_privacy_utility", "plot_format", "check_runs"]


def plot_format(path: str | Path) -> str:
    """The image format of plot file ``path`` from its suffix (``png``, ``pdf``, ``svg``, or any
    other format matplotlib writes). Raises ParameterError for a missing or unsupported suffix, so
    a bad name fails before any work."""
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in known:
        got = f"suffix {'.' + fmt!r}" if fmt else "no suffix"
        raise ParameterError(f"plot file {str(path)!r} has {got}; use .png, .pdf or .svg")
    return fmt


def check_runs(epsilons: Sequence[float], methods: Sequence[str], method_params: dict | None = None, **common) -> None:
    """Validate every (method, ε) run of :func:`privacy_utility` by building its trainer (cheap, no
    data needed): raises ParameterError (e.g. an ε outside LP-LDA's supported range) before any work.
    ``common``: the keyword arguments every trainer gets (n_topics, alpha, beta, iterations, seed)."""
    from textdp.topics import make_trainer

    if not epsilons:
        raise ParameterError("give at least one epsilon (--epsilons)")
    for e in epsilons:
        if not (float(e) > 0 and math.isfinite(float(e))):
            raise ParameterError(f"every epsilon (--epsilons) must be positive and finite, got {e!r}")
    method_params = method_params or {}
    for m in methods:
        for e in epsilons:
            make_trainer(m, **(dict(common) | method_params.get(m, {}) | {"epsilon": float(e)}))


def privacy_utility(train: Corpus, test: Corpus, epsilons: Sequence[float], methods: Sequence[str] = ("hdp", "lp", "olp"),
                    n_topics: int = 20, alpha: float = 0.1, beta: float = 0.01, iterations: int = 100,
                    seed: int | None = None, method_params: dict | None = None, protocol: str = "fold-in",
                    progress: Callable[[str], None] | None = None):
    """Train every method at every ε on ``train`` and score held-out perplexity on ``test``.

    Returns a pandas DataFrame with columns method, epsilon, guarantee, perplexity,
    seconds; the non-private run is the row with method ``none`` and epsilon inf.
    Every (method, ε) is validated before the first run (ParameterError, nothing trained).
    ``method_params``: extra keyword arguments per method (e.g. {"olp": {"batch_size": 500}}).
    LP/OLP-LDA get ε through f = 2/(e^{ε/2}+1) (local DP per replaced word; each document
    reports once, so it covers the whole run); HDP-LDA's ε is central DP per document for the
    whole run (all releases composed). The neighbouring relations differ; the plot's legend names them.
    """
    import pandas as pd

    from textdp.topics import make_trainer

    method_params = method_params or {}
    common = dict(n_topics=n_topics, alpha=alpha, beta=beta, iterations=iterations, seed=seed)
    check_runs(epsilons, methods, method_params, **common)
    rows = []

    def run(method, eps):
        kw = dict(common) | method_params.get(method, {})
        if method != "none":
            kw["epsilon"] = float(eps)
        if progress:
            progress(f"{method} ε={eps:g}" if method != "none" else "non-private")
        model = make_trainer(method, **kw).fit(train)
        ppl = model.perplexity(test, protocol=protocol, seed=seed)
        rows.append({"method": method, "epsilon": float(eps), "guarantee": model.guarantee.describe(),
                     "perplexity": ppl, "seconds": model.private.get("seconds")})

    run("none", math.inf)
    for m in methods:
        for e in epsilons:
            run(m, e)
    return pd.DataFrame(rows)


# Every method's ε covers the whole training run (HDP-LDA: all noisy releases composed; LP/OLP-LDA: each
# document reports once); what differs is the neighbouring relation, which the legend names.
_LABELS = {"hdp": "HDP-LDA (central DP, ε per document)", "lp": "LP-LDA (local DP, ε per replaced word)",
           "olp": "OLP-LDA (local DP, ε per replaced word)", "hdp-paper": "HDP-LDA (paper's Δ₁=2, ε per token)"}
XLABEL = "ε for the whole training run (unit per method: see legend)"


def plot_privacy_utility(df, path: str | Path, title: str = "", format: str | None = None) -> Path:
    """Perplexity (log scale) against ε (log scale) per method, non-private as a dashed line, written
    atomically to ``path`` as PNG/PDF/SVG: ``format``, or from the suffix (:func:`plot_format`; raises
    ParameterError for an unsupported one)."""
    fmt = format or plot_format(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    base = df[df.method == "none"]
    for m, g in df[df.method != "none"].groupby("method", sort=False):
        g = g.sort_values("epsilon")
        ax.plot(g.epsilon, g.perplexity, marker="o", label=_LABELS.get(m, m))
    if len(base):
        ax.axhline(float(base.perplexity.iloc[0]), color="k", ls="--", label="non-private CGS")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(XLABEL)
    ax.set_ylabel("held-out perplexity")
    ax.set_title(title or "Privacy-utility trade-off of DP LDA")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    from textdp.data.io import atomic_output

    out = Path(path)
    with atomic_output(out) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120)
    plt.close(fig)
    return out
