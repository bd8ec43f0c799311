"""Benchmark of ``textdp audit`` against the official Habernal (2022) code.

What it compares, each job in its own subprocess (wall time and peak RSS measured there):

1. The full published grid (6 mechanisms x 7 ε x 6 n = 252 cells) at N = 10^7 records per
   dataset in EVERY cell, with textdp's exact sufficient-statistic sampler (``--fast``), plus
   the data-driven threshold attack (10% extra selection records). Reference: the official
   code's full grid, 4-5 h and 8.9 GB peak on a 2-core machine (spec, measured), with only
   10^6 records for n > 16. Reproduction: every published value against the exact oracle at the
   official sample size, and the oracle against textdp's 95% intervals.
2. The full-noise path (real mechanism on real arrays, streamed): correct Laplace, ε = 1, at
   the official code's own sample sizes, cell by cell, next to the official code on the same
   cells in the same run (``--official PATH/experiment.py``; keep the official code outside
   the repo). The full-noise grid time is extrapolated from the measured throughput.

Usage::

    python benchmarks/bench_audit.py [--quick] [--official /tmp/habernal_official/experiment.py]

``--quick`` keeps the full-noise cells to n in {1, 8} (the n = 32 and 128 cells of the
official code take about 1 and 3.5 minutes and up to 8.9 GB).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OFFICIAL_GRID_S = (4 * 3600, 5 * 3600)
OFFICIAL_GRID_GB = 8.9


def _maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def job_grid(samples: int, seed: int) -> dict:
    from textdp.audit import run_grid

    t = time.perf_counter()
    g = run_grid(samples=samples, seed=seed, sampler="sufficient-statistic")
    wall = time.perf_counter() - t
    rows = g.rows()
    return {
        "wall_s": wall, "peak_mb": _maxrss_mb(), "cells": len(rows),
        "flagged": g.flagged(),
        "published_consistent": sum(bool(r.get("published_consistent")) for r in rows),
        "published_in_ci": sum(bool(r.get("published_in_ci")) for r in rows),
        "oracle_in_ci": sum(r["epsilon_lower"] <= r["oracle"] <= r["epsilon_upper"] for r in rows),
        "strong_beats_mv": sum((r["strong_epsilon_lower"] or 0) > r["epsilon_lower"] for r in rows),
        "examples": [
            {k: r[k] for k in ("mechanism", "epsilon", "n", "epsilon_hat", "epsilon_lower", "epsilon_upper",
                               "oracle", "published", "strong_epsilon_lower")}
            for r in rows
            if (r["mechanism"], r["epsilon"], r["n"]) in {("adept", 0.1, 128), ("adept", 1.0, 128),
                                                          ("laplace", 1.0, 8), ("dptext", 10.0, 128)}
        ],
    }


def job_textdp_cell(n: int, samples: int, seed: int) -> dict:
    from textdp.audit import audit_mechanism

    t = time.perf_counter()
    r = audit_mechanism("laplace", 1.0, n, samples, seed=seed, strong=False)
    wall = time.perf_counter() - t
    return {"wall_s": wall, "peak_mb": _maxrss_mb(), "epsilon_hat": r.epsilon_hat, "epsilon_lower": r.epsilon_lower,
            "oracle": r.oracle, "draws": 2 * samples * n}


def job_official_cell(path: str, n: int, samples: int) -> dict:
    import contextlib
    import importlib.util
    import io

    import numpy as np

    if not hasattr(np, "infty"):
        np.infty = np.inf  # numpy >= 2 removed it; the official code uses it
    spec = importlib.util.spec_from_file_location("habernal_experiment", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    np.random.seed(1234)
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints large arrays on every call
        v = mod.Experiment.estimate_empirical_loss(n, 1.0, mod.LaplaceMechanism(), number_of_repeats=samples)
    wall = time.perf_counter() - t
    used = samples if n <= 16 else 10 * 10**6  # draws 10 batches of 10^6 for n > 16 (keeps only the last)
    return {"wall_s": wall, "peak_mb": _maxrss_mb(), "epsilon_hat": float(v), "draws": 2 * used * n,
            "counted": 2 * (samples if n <= 16 else 10**6)}


def _sub(job: str, **kw) -> dict:
    cmd = [sys.executable, __file__, "--job", json.dumps({"job": job, **kw})]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"job {job} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="full-noise cells only for n in {1, 8}")
    ap.add_argument("--official", default=os.environ.get("HABERNAL_OFFICIAL"),
                    help="path to the official experiment.py (kept outside the repo) to time it on the same cells")
    ap.add_argument("--official-all", action="store_true", help="also time the official code at n = 128 (8.9 GB)")
    ap.add_argument("--samples", type=float, default=1e7, help="records per dataset in the grid (default 1e7)")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.job:
        kw = json.loads(a.job)
        fn = {"grid": job_grid, "textdp_cell": job_textdp_cell, "official_cell": job_official_cell}[kw.pop("job")]
        print(json.dumps(fn(**kw), default=str))
        return

    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start (shared machine)")
    N = int(a.samples)
    print(f"\n[1] full published grid: 252 cells, N = {N:,} records per dataset in every cell, "
          f"majority vote + threshold attack (exact sufficient-statistic sampler)")
    g = _sub("grid", samples=N, seed=2022)
    lo, hi = OFFICIAL_GRID_S
    print(f"  textdp:   wall {g['wall_s']:.1f} s, peak RSS {g['peak_mb']:.0f} MB (whole process)")
    print(f"  official: {lo / 3600:.0f}-{hi / 3600:.0f} h, {OFFICIAL_GRID_GB} GB peak (spec, measured on this kind of "
          f"machine; only 10^6 records for n > 16)")
    print(f"  ratio:    {lo / g['wall_s']:.0f}-{hi / g['wall_s']:.0f}x faster, "
          f"{OFFICIAL_GRID_GB * 1024 / g['peak_mb']:.0f}x less memory")
    print(f"  flagged (majority vote, 95%): " + ", ".join(f"{m} {k}/{t}" for m, (k, t) in g["flagged"].items()))
    print(f"  published values consistent with the exact oracle at the official N: "
          f"{g['published_consistent']}/{g['cells']}")
    print(f"  exact oracle inside textdp's simultaneous 95% interval: {g['oracle_in_ci']}/{g['cells']}; "
          f"published value inside it: {g['published_in_ci']}/{g['cells']} (official N is 10x smaller for n > 16)")
    print(f"  threshold attack's lower bound above the majority vote's: {g['strong_beats_mv']}/{g['cells']} cells")
    for e in g["examples"]:
        print("   ", json.dumps({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v)
                                 for k, v in e.items()}))

    dims = [1, 8] if a.quick else [1, 8, 32, 128]
    print(f"\n[2] full-noise path (real arrays), correct Laplace, ε = 1, official sample sizes"
          f"{' (quick: n in {1, 8})' if a.quick else ''}")
    print(f"  {'n':>4} {'records':>9} | {'textdp s':>9} {'MB':>6} {'Mdraw/s':>8} | {'official s':>10} {'MB':>6} | ratio")
    total_rate = []
    for n in dims:
        recs = 10**6
        t = _sub("textdp_cell", n=n, samples=recs, seed=1)
        rate = t["draws"] / t["wall_s"] / 1e6
        total_rate.append(rate)
        line = f"  {n:>4} {recs:>9,} | {t['wall_s']:>9.2f} {t['peak_mb']:>6.0f} {rate:>8.1f} |"
        if a.official and n > 32 and not a.official_all:
            line += "        – (official n = 128 takes ~3.5 min and 8.9 GB: --official-all)"
        elif a.official:
            o = _sub("official_cell", path=a.official, n=n, samples=recs)
            line += f" {o['wall_s']:>10.2f} {o['peak_mb']:>6.0f} | {o['wall_s'] / t['wall_s']:.1f}x"
            line += f"  (ε̂ textdp {t['epsilon_hat']:.4f}, official {o['epsilon_hat']:.4f}, oracle {t['oracle']:.4f})"
        else:
            line += "        – (pass --official PATH to time the official code)"
        print(line, flush=True)
    rate = sum(total_rate) / len(total_rate)
    draws = 2 * 1.0 * N * sum([1, 2, 8, 32, 64, 128]) * 7 * 6
    print(f"  extrapolated full-noise grid at N = {N:,}: {draws:.3g} draws / {rate:.1f} M/s = "
          f"{draws / rate / 1e6 / 3600:.1f} h on this machine now (memory stays at the figures above)")


if __name__ == "__main__":
    main()
