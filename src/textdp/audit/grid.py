"""Audit grids: the published Habernal (2022) grid and user grids, with JSON/CSV/plot outputs.

The published grid: ε ∈ {0.1, 0.2, 0.5, 1, 2, 5, 10} × n ∈ {1, 2, 8, 32, 64, 128} × six
mechanisms (ADePT, WrongSensitivity, Laplace, copy, random, DPText), ``N = 10^7`` records per
dataset in **every** cell (the official code kept only the last 10^6 for n > 16).

Comparison with the published values (``data/habernal2022-results.json``): a published value
is a plug-in estimate at the official sample size ``N_pub`` (10^7 for n ≤ 16, 10^6 above);
it is *consistent* when it lies within ``z* = Φ⁻¹(1 − 0.005/cells)`` delta-method standard
errors of the exact oracle at ``N_pub`` (1% family-wise), or, for a published ``∞``, when a
zero count had probability ≥ 0.001 at ``N_pub`` (an unresolvable cell).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.special import ndtri  # the normal quantile (scipy.stats' isf is -ndtri), without scipy.stats

from textdp.accounting.card import json_safe
from textdp.audit.core import AuditResult, _cell_seeds, audit_mechanism, format_epsilon, simulation_statement
from textdp.audit.oracle import majority_vote_probabilities, majority_vote_se
from textdp.errors import InputError, ParameterError
from textdp.noise import simulation_source
from textdp.mechanisms.zoo import HABERNAL2022_MECHANISMS, OFFICIAL_NAMES, make_zoo_mechanism

__all__ = ["GridSpec", "GRIDS", "GridResult", "run_grid", "load_published", "write_grid_outputs", "plot_grid"]


@dataclass(frozen=True)
class GridSpec:
    name: str
    mechanisms: tuple[str, ...]
    epsilons: tuple[float, ...]
    dims: tuple[int, ...]
    samples: int


GRIDS = {
    "habernal2022": GridSpec(
        "habernal2022", HABERNAL2022_MECHANISMS, (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0), (1, 2, 8, 32, 64, 128), 10**7
    ),
}


def load_published(path: str | Path | None = None) -> dict[tuple[str, float, int], float]:
    """Published values keyed ``(zoo name, ε, n)``; default: the copy shipped with textdp."""
    try:
        if path is None:
            text = resources.files("textdp.audit").joinpath("data/habernal2022-results.json").read_text("utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        raw = json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read published results {str(path)!r}: {exc}") from None
    inv = {v: k for k, v in OFFICIAL_NAMES.items()}
    out = {}
    for cls, by_eps in raw.items():
        name = inv.get(cls, cls)
        for e, by_n in by_eps.items():
            for n, v in by_n.items():
                out[(name, float(e), int(n))] = float(v)
    return out


def _published_check(name: str, eps: float, n: int, value: float, cells: int) -> dict:
    """Consistency of a published value with the exact oracle (a copy of the memoised result)."""
    return dict(_published_check_memo(name, eps, n, value, cells))


@functools.lru_cache(maxsize=4096)  # a pure function: rows() runs for the files and again for the summary
def _published_check_memo(name: str, eps: float, n: int, value: float, cells: int) -> dict:
    m = make_zoo_mechanism(name, eps, n)
    p0, p1 = m.bit_probability(0.0), m.bit_probability(1.0)
    n_pub = 10**7 if n <= 16 else 10**6
    zcrit = float(-ndtri(0.005 / max(cells, 1)))
    if math.isinf(value):
        # probability that some output had a zero count under one dataset and not the other
        l0 = majority_vote_probabilities(p0, n)
        l1 = majority_vote_probabilities(p1, n)
        pz = 0.0
        for a, b in zip(l0, l1):
            for lp in (a, b):
                p = math.exp(lp)
                pz = max(pz, 1.0 if p == 0 else math.exp(n_pub * math.log1p(-p)) if p < 1 else 0.0)
        return {"published_samples": n_pub, "published_z": None, "published_consistent": pz >= 1e-3,
                "published_note": "unresolved (zero count)" if pz >= 1e-3 else "inf but oracle finite and resolvable"}
    from textdp.audit.oracle import majority_vote_oracle

    orc = majority_vote_oracle(p0, p1, n)
    if math.isinf(orc):
        return {"published_samples": n_pub, "published_z": None, "published_consistent": False,
                "published_note": "finite but oracle is inf"}
    se = majority_vote_se(p0, p1, n, n_pub)
    z = (value - orc) / se if se > 0 else 0.0
    return {"published_samples": n_pub, "published_z": z, "published_consistent": abs(z) <= zcrit,
            "published_note": ""}


@dataclass
class GridResult:
    """All cells of a grid run. ``rows()`` gives one flat dict per cell (JSON/CSV)."""

    name: str
    cells: list[AuditResult]
    published: dict = field(default_factory=dict)
    wall_s: float = 0.0
    settings: dict = field(default_factory=dict)

    def rows(self) -> list[dict]:
        out = []
        total = len(self.cells)
        for c in self.cells:
            d = c.to_dict()
            key = (c.mechanism, float(c.epsilon), int(c.n))
            if key in self.published:
                d["published"] = self.published[key]
                d["published_in_ci"] = bool(c.epsilon_lower <= self.published[key] <= c.epsilon_upper)
                d.update(_published_check(c.mechanism, c.epsilon, c.n, self.published[key], total))
            out.append(d)
        return out

    def flagged(self) -> dict[str, tuple[int, int]]:
        """mechanism -> (cells flagged by the majority vote, cells)."""
        res: dict[str, list[int]] = {}
        for c in self.cells:
            r = res.setdefault(c.mechanism, [0, 0])
            r[0] += int(c.violation)
            r[1] += 1
        return {k: (v[0], v[1]) for k, v in res.items()}


def run_grid(
    grid: str | GridSpec = "habernal2022",
    *,
    samples: int | None = None,
    mechanisms=None,
    epsilons=None,
    dims=None,
    alpha: float = 0.05,
    seed: int | None = None,
    sampler: str = "full",
    statistic: str = "bits",
    strong: bool = True,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    compare_published: bool = True,
    engine=None,
) -> GridResult:
    """Run every cell of a grid with :func:`textdp.audit.audit_mechanism`.

    grid: ``"habernal2022"`` or a :class:`GridSpec`; mechanisms / epsilons / dims / samples
    override the grid's. Each cell gets an independent child seed of ``seed``. ``progress``
    is called with the number of noise coordinates (records × n) just finished.
    ``engine`` (a :class:`textdp.engines.Engine`): run the cells as tasks on that engine's workers
    (one task per mechanism × ε × dimension cell, each with its own child seed, so the result is
    the same as in this process; ``progress`` then advances as whole cells finish).
    Returns a :class:`GridResult`.
    """
    if isinstance(grid, str):
        if grid not in GRIDS:
            raise ParameterError(f"unknown grid {grid!r}; known: {', '.join(GRIDS)}")
        spec = GRIDS[grid]
    else:
        spec = grid
    mechs = tuple(mechanisms or spec.mechanisms)
    epss = tuple(float(e) for e in (epsilons or spec.epsilons))
    dd = tuple(int(d) for d in (dims or spec.dims))
    N = int(samples or spec.samples)
    for m in mechs:
        make_zoo_mechanism(m, 1.0, 1)  # validates names early
    t0 = time.perf_counter()
    seeds = _cell_seeds(seed, len(mechs) * len(epss) * len(dd))
    cells = []
    i = 0
    if engine is not None:
        items, sizes = [], []
        for m in mechs:
            for e in epss:
                for n in dd:
                    items.append((m, e, n, N, alpha, seeds[i], strong, statistic, sampler, workers))
                    sizes.append(2 * (N + (max(1, math.ceil(0.1 * N)) if strong else 0)) * n)
                    i += 1
        done = iter(sizes)
        cells = engine.map(_grid_cell, items, progress=(lambda k: progress(sum(next(done) for _ in range(k))))
                           if progress else None)
    for m in mechs if engine is None else ():
        for e in epss:
            for n in dd:
                cb = (lambda k, n=n: progress(k * n)) if progress else None
                cells.append(audit_mechanism(m, e, n, N, alpha, seeds[i], strong=strong, statistic=statistic,
                                             sampler=sampler, workers=workers, progress=cb))
                i += 1
    published = load_published() if compare_published and spec.name == "habernal2022" else {}
    settings = {"grid": spec.name, "samples": N, "alpha": alpha, "sampler": sampler, "statistic": statistic,
                "strong": strong, "seed": simulation_source(seed).describe(),
                "simulation_rng": simulation_statement(seed)}
    return GridResult(spec.name, cells, published, time.perf_counter() - t0, settings)


def _grid_cell(item):
    """One grid cell as an engine task (see :func:`run_grid`)."""
    m, e, n, N, alpha, seed, strong, statistic, sampler, workers = item
    return audit_mechanism(m, e, n, N, alpha, seed, strong=strong, statistic=statistic, sampler=sampler,
                           workers=workers)


def grid_work(mechanisms, dims, epsilons, samples: int, selection_fraction: float = 0.1, strong: bool = True) -> int:
    """Noise coordinates a full-noise grid draws (for progress bars)."""
    per = samples + (max(1, math.ceil(selection_fraction * samples)) if strong else 0)
    return 2 * per * sum(dims) * len(epsilons) * len(mechanisms)


def _csv_text(rows: list[dict]) -> str:
    cols = ["mechanism", "epsilon", "n", "samples", "alpha", "sampler", "epsilon_hat", "epsilon_lower",
            "epsilon_upper", "ceiling", "oracle", "violation", "strong_statistic", "strong_event",
            "strong_epsilon_hat", "strong_epsilon_lower", "strong_violation", "published", "published_in_ci",
            "published_samples", "published_z", "published_consistent", "published_note", "broken", "wall_s"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k) for k in cols})
    return buf.getvalue()


def plot_grid(result: GridResult, path: str | Path) -> None:
    """ε̂ against n per mechanism (log-log), one line per ε with its ``[ε_lo, ε_hi]`` band, the
    claimed ε dashed in the same colour, infinite estimates as ▲ at the ceiling, published values ×."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mechs = list(dict.fromkeys(c.mechanism for c in result.cells))
    epss = sorted({c.epsilon for c in result.cells})
    cols = max(1, min(3, len(mechs)))
    rows = math.ceil(len(mechs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    floor = 1e-3
    for ax, m in zip(axes.flat, mechs):
        for k, e in enumerate(epss):
            cs = sorted((c for c in result.cells if c.mechanism == m and c.epsilon == e), key=lambda c: c.n)
            if not cs:
                continue
            color = cmap(k / max(1, len(epss) - 1))
            ns = np.array([c.n for c in cs])
            ceil_ = np.array([c.ceiling for c in cs])
            hat = np.array([c.epsilon_hat for c in cs])
            lo = np.maximum([c.epsilon_lower for c in cs], floor)
            hi = np.minimum([c.epsilon_upper for c in cs], ceil_)
            shown = np.where(np.isinf(hat), ceil_, np.maximum(hat, floor))
            ax.plot(ns, shown, "-o", color=color, ms=3, lw=1.2, label=f"ε={e:g}")
            ax.fill_between(ns, lo, np.maximum(hi, lo), color=color, alpha=0.2, lw=0)
            inf = np.isinf(hat)
            if inf.any():
                ax.plot(ns[inf], ceil_[inf], "^", color=color, ms=7)
            ax.axhline(e, color=color, ls="--", lw=0.8)
            pub = [result.published.get((m, e, c.n)) for c in cs]
            pv = np.array([np.nan if p is None else (ceil_[j] if math.isinf(p) else max(p, floor))
                           for j, p in enumerate(pub)])
            if np.isfinite(pv).any():
                ax.plot(ns, pv, "x", color="k", ms=4, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(m + (" (BROKEN)" if any(c.broken for c in result.cells if c.mechanism == m) else ""))
        ax.set_xlabel("dimension n")
        ax.set_ylabel("empirical ε (majority vote)")
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(mechs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="lower left")
    n_s = result.settings.get("samples")
    fig.suptitle(f"{result.name}: ε̂ with {100 * (1 - result.settings.get('alpha', 0.05)):g}% bands, "
                 f"N={n_s:,} per dataset; dashed = claimed ε, ▲ = above ceiling ln N, × = published", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def write_grid_outputs(result: GridResult, outdir: str | Path, overwrite: bool = False, stem: str | None = None,
                       plot: bool = True) -> list[Path]:
    """Write ``STEM.json`` (settings + every cell), ``STEM.csv`` and ``STEM.png`` into ``outdir``
    (created if missing) all-or-nothing: on an error or an interrupt no file is left and a folder
    made for them is removed. Raises :class:`OutputError` if a file exists and not ``overwrite``,
    or for an operating-system error (naming the file: permission denied, disk full, ...)."""
    from textdp.data.io import atomic_outputs, check_output_path

    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise ParameterError(f"--output {str(out)!r} must be a folder for audit results")
    stem = stem or result.name
    paths = [out / f"{stem}.json", out / f"{stem}.csv"] + ([out / f"{stem}.png"] if plot else [])
    for p in paths:
        check_output_path(p, overwrite=overwrite, create_parents=True)
    rows = result.rows()
    doc = {"grid": result.name, "settings": result.settings, "wall_s": round(result.wall_s, 3),
           "flagged": {k: list(v) for k, v in result.flagged().items()}, "cells": rows}
    with atomic_outputs(paths, create_parents=True) as tmps:
        Path(tmps[0]).write_text(json.dumps(json_safe(doc), indent=1, default=str, allow_nan=False),
                                 encoding="utf-8")
        Path(tmps[1]).write_text(_csv_text(rows), encoding="utf-8")
        if plot:
            plot_grid(result, tmps[2])
    return paths


def summary_text(result: GridResult) -> str:
    """One line per mechanism: flagged cells and published consistency."""
    lines = []
    rows = result.rows()
    for m, (k, t) in result.flagged().items():
        pub = [r for r in rows if r["mechanism"] == m and "published_consistent" in r]
        ok = sum(bool(r["published_consistent"]) for r in pub)
        extra = f"; published values consistent: {ok}/{len(pub)}" if pub else ""
        lines.append(f"{m}: flagged {k}/{t} cells{extra}")
    return "\n".join(lines)


__all__ += ["summary_text", "grid_work", "format_epsilon"]
