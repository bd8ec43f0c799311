"""Benchmark of ``textdp audit`` against the official Habernal (2022) code.

What it compares, each job in its own subprocess (wall time and peak RSS measured there):

1. The full published grid (6 mechanisms x 7 ε x 6 n = 252 cells) at N = 10^7 records per
   dataset in EVERY cell, with textdp's exact sufficient-statistic sampler (``--fast``), plus
   the data-driven threshold attack (10% extra selection records). Reference: the official
   code's full grid, 4-5 h and 8.9 GB peak on a 2-core machine (spec, measured), with only
   10^6 records for n > 16. Reproduction: every published value against the exact oracle at the
   official sample size, and the oracle against textdp's 95% intervals.
2. The full-noise path (real mechanism on real arrays, streamed): correct Laplace, ε = 1, in
   noise draws per second at equal drawn records (10^7 records per dataset at n = 1, 10^6 at
   n = 8; at n = 32 the official code draws 10 batches of 10^6 records and counts only the
   last, textdp draws and counts 10^7), three repetitions back to back, medians. Side by side
   in the same run:
   * textdp's full-noise audit (the simulation generator PCG64DXSM, all cores and 1 thread), its
     numba kernels loaded before the timed call (their one-time load is printed apart; an audit
     shorter than about 2^24 values computes the same values with numpy and skips that load);
   * the floor: numpy's own Laplace generation, ``Generator(PCG64).laplace`` in blocks of 2^20
     on one thread (with PCG64 uniforms and ChaCha20 Laplace, textdp's generator before);
   * the official code (``--official PATH/experiment.py``; keep the official code outside the
     repo), or, without it, a faithful reimplementation of its inner loop named
     ``reference``: legacy MT19937 uniforms (``RandomState(1234).uniform``, the generator
     behind the official code's global ``np.random.uniform``), the same inverse-CDF formula,
     ``np.where`` thresholds, ``np.round`` of the row means, ``np.tile`` and the count matrix,
     without the official code's prints.

Usage::

    python benchmarks/bench_audit.py [--quick] [--official /tmp/habernal_official/experiment.py [--reference]]
                                     [--reps 3] [--skip-grid]
    python benchmarks/bench_audit.py --sanitizers [--quick]    (metric-DP audit of word sanitizers and peers)

``--dpsgd`` runs only the one-run audit of DP-SGD instead (issue 17): ``textdp audit dpsgd``'s bag-of-words
logistic regression on Rotten Tomatoes (10,246 training snippets), Opacus DP-SGD calibrated to ε = 1, 2, 4, 8
at δ = 1e-5 (expected batch 256, 4 epochs), with 1,000 and 10,000 canary sentences, plus the broken replica
(noise multiplier / 10, claim unchanged) with 1,000 canaries; per run the claimed ε, the one-run lower bound
(default grid of 8 guess counts, 95%), its f-DP refinement, the ceiling ln(q/(1−q)), the flag, the test
accuracy and the wall time of training and of the bound (one process; the torch/Opacus import is timed apart)::

    python benchmarks/bench_audit.py --dpsgd [--seed 1]

``--quick`` keeps the full-noise cells to n in {1, 8} (the official code's n = 32 cell draws
6.4·10^8 values, about a minute per repetition, and peaks near 2.3 GB).
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


def job_textdp_cell(n: int, samples: int, seed: int, workers: int | None = None) -> dict:
    os.environ["TEXTDP_AUDIT_BACKEND"] = "numba"  # the steady rate; a short audit's numpy start is not measured
    from textdp.audit import audit_mechanism

    t = time.perf_counter()
    audit_mechanism("laplace", 1.0, 2, 1000, seed=0, strong=False, workers=1)  # loads numba and its cached kernels
    warm = time.perf_counter() - t
    t = time.perf_counter()
    r = audit_mechanism("laplace", 1.0, n, samples, seed=seed, strong=False, workers=workers)
    wall = time.perf_counter() - t
    return {"wall_s": wall, "warmup_s": warm, "peak_mb": _maxrss_mb(), "epsilon_hat": r.epsilon_hat,
            "epsilon_lower": r.epsilon_lower, "oracle": r.oracle, "draws": 2 * samples * n,
            "generator": r.seed["generator"]}


def _official_plan(n: int, samples: int) -> tuple[int, int]:
    """(batches, records per batch) of the official ``estimate_empirical_loss``."""
    return (10, 10**6) if n > 16 else (1, samples)


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
    np.random.seed(1234)  # the official code's own seeding (its global state), as in its main()
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # it prints large arrays on every call
        v = mod.Experiment.estimate_empirical_loss(n, 1.0, mod.LaplaceMechanism(), number_of_repeats=samples)
    wall = time.perf_counter() - t
    batches, per = _official_plan(n, samples)
    return {"wall_s": wall, "peak_mb": _maxrss_mb(), "epsilon_hat": float(v), "draws": 2 * batches * per * n,
            "counted": 2 * per}


def job_reference_cell(n: int, samples: int) -> dict:
    """The official code's inner loop, reimplemented (see the module docstring): what its approach costs."""
    import numpy as np

    rs = np.random.RandomState(1234)  # MT19937, the legacy generator of np.random.uniform
    batches, per = _official_plan(n, samples)
    F = np.zeros((2, 2), dtype=int)
    t = time.perf_counter()
    for _ in range(batches):
        for row, value in ((0, 0.0), (1, 1.0)):
            x = np.zeros((per, n)) if value == 0.0 else np.ones((per, n))
            u = rs.uniform(0, 1, x.size)
            noise = (-np.sign(u - 0.5) * np.log(1 - 2 * np.abs(u - 0.5))).reshape(x.shape)
            y = x + (n / 1.0) * noise
            bits = np.where(y < 0.5, 0, 1)
            votes = np.round(np.mean(bits, axis=1)).astype(int)
            full = np.tile(np.expand_dims(votes, axis=1), (1, n))
            F[row, 0] = np.sum(np.where(full == 0, 1, 0))  # assigned, not accumulated, as in the official code
            F[row, 1] = np.sum(np.where(full == 1, 1, 0))
    wall = time.perf_counter() - t
    with np.errstate(divide="ignore"):
        p0, p1 = F[:, 0] / F[:, 0].sum(), F[:, 1] / F[:, 1].sum()
        eps = max(abs(np.log(p0[0]) - np.log(p0[1])), abs(np.log(p1[0]) - np.log(p1[1])))
    return {"wall_s": wall, "peak_mb": _maxrss_mb(), "epsilon_hat": float(eps), "draws": 2 * batches * per * n,
            "counted": 2 * per}


def job_floor(draws: int = 1 << 25) -> dict:
    """Single-thread noise generation in numpy, in blocks of 2^20: draws per second."""
    import numpy as np
    from randomgen import ChaCha

    block = 1 << 20
    k = max(1, draws // block)
    out = np.empty(block)

    def rate(fn):
        fn()
        t = time.perf_counter()
        for _ in range(k):
            fn()
        return k * block / (time.perf_counter() - t)

    pcg = np.random.Generator(np.random.PCG64(1))
    dxsm = np.random.Generator(np.random.PCG64DXSM(1))
    chacha = np.random.Generator(ChaCha(seed=1, rounds=20))
    return {
        "pcg64_laplace": rate(lambda: pcg.laplace(0.0, 1.0, block)),
        "pcg64_uniform": rate(lambda: pcg.random(out=out)),
        "dxsm_uniform": rate(lambda: dxsm.random(out=out)),
        "chacha_laplace": rate(lambda: chacha.laplace(0.0, 1.0, block)),
        "chacha_uniform": rate(lambda: chacha.random(out=out)),
    }


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
    ap.add_argument("--reference", action="store_true",
                    help="with --official, also time the reimplementation of its inner loop (always timed without it)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the full-noise comparison (median)")
    ap.add_argument("--skip-grid", action="store_true", help="only the full-noise comparison [2]")
    ap.add_argument("--samples", type=float, default=1e7, help="records per dataset in the grid (default 1e7)")
    ap.add_argument("--dpsgd", action="store_true", help="only the one-run audit of DP-SGD (issue 17) at eps 1, 2, 4, 8 "
                    "with 1,000 and 10,000 canaries")
    ap.add_argument("--seed", type=int, default=1, help="seed of the --dpsgd runs (a simulation, not a release)")
    ap.add_argument("--sanitizers", action="store_true", help="only the metric-DP audit of every textdp word sanitizer, "
                    "the broken replicas and pyPANTERA's / mldp-text's implementations (issue 17; "
                    "benchmarks/_audit_sanitizers.py; with --quick: fewer words and draws)")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.job:
        kw = json.loads(a.job)
        fn = {"grid": job_grid, "textdp_cell": job_textdp_cell, "official_cell": job_official_cell,
              "reference_cell": job_reference_cell, "floor": job_floor}[kw.pop("job")]
        print(json.dumps(fn(**kw), default=str))
        return

    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start (shared machine)")
    if a.dpsgd:
        _dpsgd_section(a.seed)
        return
    if a.sanitizers:
        sys.path.insert(0, str(HERE))
        import _audit_sanitizers

        _audit_sanitizers.run(quick=a.quick, seed=a.seed)
        return
    N = int(a.samples)
    if not a.skip_grid:
        _grid_section(N)
    _noise_section(a, N)


def _grid_section(N: int) -> None:
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


def _median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def _noise_section(a, N: int) -> None:
    dims = [1, 8] if a.quick else [1, 8, 32]
    others = (["official"] if a.official else []) + (["reference"] if a.reference or not a.official else [])
    print(f"\n[2] full-noise audit throughput: correct Laplace, ε = 1, majority vote only; million noise draws per "
          f"second (M/s) at equal drawn records; {a.reps} repetitions back to back, medians"
          f"{' (quick: n in {1, 8})' if a.quick else ''}")
    if "reference" in others:
        print("  reference = the official code's inner loop reimplemented in this file (legacy MT19937 uniforms, the "
              "same formula, thresholds, rounding and counting; without its prints)"
              + ("" if a.official else "; pass --official PATH to time the official code itself"))
    runs: dict = {n: {k: [] for k in ["all", "one"] + others} for n in dims}
    floors = []
    for rep in range(a.reps):
        floors.append(_sub("floor"))
        for n in dims:
            # the official code's own N is 10^7 for n <= 16 and 10 batches of 10^6 above; n = 8 runs at 10^6
            # (at 10^7 the official code would peak near 4.7 GB on a shared machine)
            batches, per = (10, 10**6) if n > 16 else (1, 10**7 if n == 1 else 10**6)
            runs[n]["all"].append(_sub("textdp_cell", n=n, samples=batches * per, seed=1 + rep))
            runs[n]["one"].append(_sub("textdp_cell", n=n, samples=batches * per, seed=1 + rep, workers=1))
            if "official" in others:
                runs[n]["official"].append(_sub("official_cell", path=a.official, n=n, samples=per))
            if "reference" in others:
                runs[n]["reference"].append(_sub("reference_cell", n=n, samples=per))
        print(f"  (repetition {rep + 1}/{a.reps} done; load average {os.getloadavg()[0]:.1f})", flush=True)
    fl = {k: _median([f[k] for f in floors]) / 1e6 for k in floors[0]}
    print(f"  floor, numpy on 1 thread, blocks of 2^20: PCG64 Generator.laplace {fl['pcg64_laplace']:.1f} M/s; "
          f"PCG64 uniforms {fl['pcg64_uniform']:.0f} M/s, PCG64DXSM uniforms {fl['dxsm_uniform']:.0f} M/s; "
          f"ChaCha20 (the audit's generator before) Generator.laplace {fl['chacha_laplace']:.1f} M/s, uniforms "
          f"{fl['chacha_uniform']:.0f} M/s")
    head = f"  {'n':>4} {'drawn records':>14} | textdp M/s: {os.cpu_count()} threads, 1 |"
    for o in others:
        head += f" {o} M/s | textdp/{o}: {os.cpu_count()} thr, 1 |"
    print(head + " textdp/floor: 2 thr, 1 | peak MB textdp, " + ", ".join(others))
    rates = []

    def per_s(xs):
        return [x["draws"] / x["wall_s"] / 1e6 for x in xs]

    worst = {}
    for n in dims:
        r = runs[n]
        t_all, t_one = per_s(r["all"]), per_s(r["one"])
        rates.append(_median(t_all))
        for o in others:
            ratio = _median([x / y for x, y in zip(t_all, per_s(r[o]))])
            worst[o] = min(worst.get(o, ratio), ratio)
        line = f"  {n:>4} {r['all'][0]['draws'] // (2 * n):>14,} | {_median(t_all):>7.1f} {_median(t_one):>7.1f} |"
        for o in others:
            ro = per_s(r[o])
            line += (f" {_median(ro):>6.1f} | {_median([x / y for x, y in zip(t_all, ro)]):>5.1f}x "
                     f"{_median([x / y for x, y in zip(t_one, ro)]):>5.1f}x |")
        fp = [f["pcg64_laplace"] / 1e6 for f in floors]
        line += (f" {_median([x / y for x, y in zip(t_all, fp)]):>5.2f}x {_median([x / y for x, y in zip(t_one, fp)]):>5.2f}x"
                 f" | {_median([x['peak_mb'] for x in r['all']]):.0f}, "
                 + ", ".join(f"{_median([x['peak_mb'] for x in r[o]]):.0f}" for o in others))
        print(line)
    for o, ratio in worst.items():
        print(f"RESULT audit.full_noise_vs_{o} {ratio:.1f}x draws/s at equal drawn records, lowest cell "
              f"(goal >= 5x; {os.cpu_count()} threads)")
    for n in dims:
        r = runs[n]
        print(f"  n = {n}: ε̂ textdp {r['all'][0]['epsilon_hat']:.4f} (seed 1), "
              + ", ".join(f"{o} {r[o][0]['epsilon_hat']:.4f}" for o in others)
              + f", oracle {r['all'][0]['oracle']:.4f}")
    print(f"  textdp's generator: {runs[dims[0]]['all'][0]['generator']}; one-time load of its numba kernels "
          f"{_median([x['warmup_s'] for x in runs[dims[0]]['all']]):.2f} s per process (not in the rates)")
    rate = _median(rates)
    draws = 2 * 1.0 * N * sum([1, 2, 8, 32, 64, 128]) * 7 * 6
    print(f"  extrapolated full-noise grid at N = {N:,}: {draws:.3g} draws / {rate:.1f} M/s = "
          f"{draws / rate / 1e6 / 3600:.1f} h on this machine now")


def _dpsgd_section(seed: int) -> None:
    t0 = time.perf_counter()
    import opacus  # noqa: F401  (timed apart: the one-time import of torch and Opacus)
    import torch

    from textdp.audit.dpsgd import audit_dpsgd

    print(f"\n[dpsgd] one-run audit of DP-SGD (Steinke, Nasr & Jagielski 2023) on rotten-tomatoes: bag-of-words "
          f"logistic regression (2^12 hashed word rows + one row per canary), Opacus DP-SGD, delta = 1e-5, expected "
          f"batch 256, 4 epochs, clip 0.5, lr 8; white-box score (final model); 95% confidence, default grid of 8 "
          f"guess counts (union bound); seed {seed} (not for release); torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads; import of torch + Opacus {time.perf_counter() - t0:.1f} s")
    head = (f"  {'eps':>4} {'m':>6} {'replica':>7} | {'claimed':>7} {'sigma':>6} {'steps':>5} | {'bound':>6} {'f-DP':>6} "
            f"{'mu':>5} | {'ceiling':>7} {'attain':>6} | {'flag':>4} | {'acc':>5} | {'train s':>7} {'bound s':>7}")
    print(head)
    rows = []
    for m in (1000, 10_000):
        for eps in (1.0, 2.0, 4.0, 8.0):
            for broken in ((False, True) if m == 1000 else (False,)):
                r = audit_dpsgd(eps, 1e-5, m, seed=seed, broken=broken)
                a = r.audit
                rows.append(r)
                print(f"  {eps:>4g} {m:>6,} {'BROKEN' if broken else 'correct':>7} | {r.claimed_epsilon:>7.3f} "
                      f"{r.sigma_used:>6.3f} {r.steps:>5} | {a.epsilon_lower:>6.3f} {a.fdp_epsilon_lower:>6.3f} "
                      f"{a.gdp_mu_lower:>5.2f} | {a.ceiling:>7.2f} {a.attainable:>6.2f} | {'FLAG' if r.flagged else 'ok':>4} | "
                      f"{r.test_accuracy:>5.3f} | {r.seconds['train']:>7.1f} {r.seconds['audit']:>7.1f}", flush=True)
    ok = [r for r in rows if not r.broken]
    bad = [r for r in rows if r.broken]
    print(f"  correct runs flagged: {sum(r.flagged for r in ok)}/{len(ok)}; broken replicas flagged: "
          f"{sum(r.flagged for r in bad)}/{len(bad)} (at claimed eps <= 2: "
          f"{sum(r.flagged for r in bad if r.claimed_epsilon <= 2)}/{sum(r.claimed_epsilon <= 2 for r in bad)})")
    print(f"  total {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
