"""One command for textdp's performance goals (issue 14): every benchmark, then their ratios in one table.

    python benchmarks/performance.py                 # full runs (about 20-30 minutes on 2 cores)
    python benchmarks/performance.py --quick         # smaller runs (about 8-12 minutes)
    python benchmarks/performance.py --official PATH/SanText.py   # also the official SanText code's sampler
    python benchmarks/performance.py --audit-official PATH/experiment.py   # the official Habernal code

Runs, each in its own process, and streams their output:
  bench_sanitize.py  the sampling step against its floor (BLAS GEMM + one exp pass, same shapes and threads),
                     1 vs 2 workers, default and full 400k vocabulary; whole Rotten Tomatoes end to end with the
                     default and the full vocabulary; textdp vs pypantera (and the official SanText code)
  bench_startup.py   `textdp --help`, a one-line sanitize, `audit --grid` without plots, against their goals
  bench_audit.py     audit draws/s against numpy's generator and the official code's approach
  bench_bounds.py    one DP-SGD epoch with the FIL accountant against an Opacus RDP-only epoch
  bench_topics.py    collapsed Gibbs sampling against tomotopy at 1 and 2 workers
  bench_mechanisms.py  every shared mechanism against pypantera (and mldp-text with its own python) on the
                     same reviews and vocabulary; whole Rotten Tomatoes per word-level mechanism
Every benchmark prints ``RESULT name value (goal ...)`` lines; the table at the end gathers them. The
machine's load average is printed with it: on a shared machine the ratios (measured in the same run) are
the fair figures, the absolute times are not.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smaller run of every benchmark")
    ap.add_argument("--official", metavar="PATH", help="the official SanText code's SanText.py")
    ap.add_argument("--audit-official", metavar="PATH", help="the official Habernal (2022) code's experiment.py "
                    "(bench_audit.py --official; without it bench_audit runs its faithful reimplementation)")
    ap.add_argument("--only", help="comma-separated subset: sanitize,startup,audit,bounds,topics,mechanisms")
    a = ap.parse_args()
    q = ["--quick"] if a.quick else []
    jobs = {
        "sanitize": ["bench_sanitize.py", *q, *(["--official", a.official] if a.official else [])],
        "startup": ["bench_startup.py", *q],
        "audit": ["bench_audit.py", "--quick", *(["--official", a.audit_official] if a.audit_official else [])],
        "bounds": ["bench_bounds.py", "--quick"],
        "topics": ["bench_topics.py", "--quick"],
        "mechanisms": ["bench_mechanisms.py", *q],
    }
    if a.only:
        keep = [j.strip() for j in a.only.split(",")]
        bad = [j for j in keep if j not in jobs]
        if bad:
            print(f"error: unknown benchmark(s) {', '.join(bad)}; choose from {', '.join(jobs)}", file=sys.stderr)
            return 2
        jobs = {k: v for k, v in jobs.items() if k in keep}
    results, failed = [], []
    t0 = time.time()
    for name, (script, *args) in jobs.items():
        path = HERE / script
        print(f"\n=== {script} {' '.join(args)} ===", flush=True)
        if not path.exists():
            failed.append(f"{name} (missing {script})")
            continue
        proc = subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("RESULT "):
                results.append((name, line[len("RESULT "):].strip()))
        if proc.wait():
            failed.append(f"{name} (exit {proc.returncode})")
    load = os.getloadavg()
    print(f"\n=== summary ({time.time() - t0:.0f} s; load average now {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}) ===")
    width = max((len(r.split()[0]) for _, r in results), default=10)
    for _, r in results:
        key, _, rest = r.partition(" ")
        print(f"  {key:<{width}}  {rest}")
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
