"""Benchmark: textdp's fixed start-up cost (issue 14, item 3), against its goals and the machine's floor.

    python benchmarks/bench_startup.py                 # 5 runs of each case, interleaved; medians
    python benchmarks/bench_startup.py --runs 9 --plot # more runs; also time `audit --grid --plot`
    python benchmarks/bench_startup.py --quick         # 3 runs (benchmarks/performance.py --quick)
    git archive 9ad2b82 src | tar -x -C /tmp/base      # an older tree's sources, then:
    python benchmarks/bench_startup.py --baseline-src /tmp/base/src   # the same cases on it, interleaved

Cases (each a fresh process, as a user types it; wall seconds, median of ``--runs``):

* ``textdp --help``                                                       goal < 0.3 s
* a one-line sanitize: ``textdp sanitize one.txt -o one.out.txt -e 3 --no-ledger --seed 1 --overwrite``
  (one line "hello world", GloVe 6B 50d, the public 30k-word output vocabulary)  goal < 0.8 s
* ``textdp audit --grid habernal2022 --seed 1 -o DIR --overwrite -q`` (252 cells, N = 10^7, no plot)
                                                                           goal < 1.5 s

Floors, measured in the same run: ``python -c pass`` (the interpreter) and ``python -c "import numpy"``
(the least any numerical command pays). Runs are interleaved (case A, B, C, floors, A, B, ...) so
that every case sees the same machine load; the load average is printed before and after. One
warm-up round is not counted: it fills textdp's caches (the table's geometry, GloVe's word list,
Python's bytecode, written even when the caller sets PYTHONDONTWRITEBYTECODE), which a user's
second run finds. The first-run cost with an empty
``TEXTDP_CACHE`` is printed once, for information. CPU seconds (user + system of the child) are
printed beside the wall times: on a loaded machine they move less than wall time. With
``--baseline-src DIR`` every case also runs on the sources in DIR (``PYTHONPATH=DIR``, e.g. the tree
before a change), interleaved with the current ones, and the table gives current/baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENTRY = "import sys; sys.argv[0] = 'textdp'; from textdp.cli.main import main; main()"


def _textdp(*args: str) -> list[str]:
    """The command line of the ``textdp`` console script (the same import and call)."""
    return [sys.executable, "-c", ENTRY, *args]


def _run(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one child process; raises if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr.decode(errors='replace')[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each case (median reported)")
    ap.add_argument("--quick", action="store_true", help="3 runs of each case (benchmarks/performance.py --quick)")
    ap.add_argument("--plot", action="store_true", help="also time `audit --grid ... --plot` (matplotlib)")
    ap.add_argument("--baseline-src", metavar="DIR", help="also run every case on the textdp sources in DIR "
                    "(PYTHONPATH=DIR), interleaved, and print current/baseline")
    args = ap.parse_args()
    if args.quick:
        args.runs = min(args.runs, 3)

    with tempfile.TemporaryDirectory(prefix="textdp-bench-startup-") as tmp:
        _bench(args, Path(tmp))


def _bench(args, work: Path) -> None:
    (work / "one.txt").write_text("hello world\n", encoding="utf-8")
    # bytecode is cached as in a normal installation (pip compiles it; an editable install writes
    # __pycache__ on first import): a PYTHONDONTWRITEBYTECODE=1 in the caller's environment would
    # make every run recompile textdp's modules (about 0.15-0.3 s of CPU)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["TEXTDP_LEDGER_DIR"] = str(work / "ledgers")
    cases = {
        "textdp --help": (_textdp("--help"), 0.3),
        "sanitize one line": (_textdp("sanitize", "one.txt", "-o", "one.out.txt", "-e", "3", "--no-ledger",
                                      "--seed", "1", "--overwrite"), 0.8),
        "audit --grid -o DIR": (_textdp("audit", "--grid", "habernal2022", "--seed", "1", "-o", "grid",
                                        "--overwrite", "-q"), 1.5),
    }
    if args.plot:
        cases["audit --grid --plot"] = (_textdp("audit", "--grid", "habernal2022", "--seed", "1", "-o", "gridp",
                                                "--overwrite", "--plot", "-q"), None)
    floors = {"python -c pass": [sys.executable, "-c", "pass"],
              "python -c 'import numpy'": [sys.executable, "-c", "import numpy"]}

    base_env = None
    if args.baseline_src:
        src = Path(args.baseline_src).resolve()
        if not (src / "textdp" / "cli" / "main.py").is_file():
            raise SystemExit(f"--baseline-src {src}: no textdp/cli/main.py there")
        base_env = {**env, "PYTHONPATH": str(src), "TEXTDP_CACHE": str(work / "baseline-cache")}
    load0 = os.getloadavg()
    cold_env = {**env, "TEXTDP_CACHE": str(work / "cold-cache")}
    cold = _run(cases["sanitize one line"][0], work, cold_env)  # empty cache: computes and stores them
    for cmd in [c for c, _ in cases.values()] + list(floors.values()):  # warm-up (not timed)
        _run(cmd, work, env)
        if base_env is not None:
            _run(cmd, work, base_env)
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in [*cases, *floors]}
    base: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(args.runs):
        for name, (cmd, _) in cases.items():
            times[name].append(_run(cmd, work, env))
            if base_env is not None:
                base[name].append(_run(cmd, work, base_env))
        for name, cmd in floors.items():
            times[name].append(_run(cmd, work, env))
    load1 = os.getloadavg()

    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    f_py, f_np = med["python -c pass"][0], med["python -c 'import numpy'"][0]
    print(f"textdp start-up, {args.runs} interleaved runs per case (median), {os.cpu_count()} CPUs, "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"floors: python -c pass {f_py:.3f} s wall ({med['python -c pass'][1]:.3f} s CPU); "
          f"python -c 'import numpy' {f_np:.3f} s wall ({med['python -c ' + repr('import numpy')][1]:.3f} s CPU)")
    print()
    print(f"{'case':<22} {'wall s':>7} {'CPU s':>7} {'goal s':>7} {'wall/goal':>9} {'met':>4} "
          f"{'/python':>8} {'/numpy':>7}")
    for name, (_, goal) in cases.items():
        w, c = med[name]
        g = f"{goal:7.2f}" if goal else "      –"
        ratio = f"{w / goal:9.2f}" if goal else "        –"
        met = ("yes" if w < goal else "NO") if goal else "–"
        print(f"{name:<22} {w:7.3f} {c:7.3f} {g} {ratio} {met:>4} {w / f_py:8.1f} {w / f_np:7.2f}")
    if base_env is not None:
        print()
        print(f"baseline: the same commands on {args.baseline_src} (interleaved with the runs above)")
        print(f"{'case':<22} {'base wall':>9} {'base CPU':>9} {'now/base wall':>13} {'now/base CPU':>12}")
        for name in cases:
            bw = statistics.median(w for w, _ in base[name])
            bc = statistics.median(c for _, c in base[name])
            print(f"{name:<22} {bw:9.3f} {bc:9.3f} {med[name][0] / bw:13.2f} {med[name][1] / bc:12.2f}")
    print()
    for name, (_, goal) in cases.items():  # for benchmarks/performance.py's summary table
        if goal:
            w = med[name][0]
            tag = {"textdp --help": "help", "sanitize one line": "sanitize_one_line",
                   "audit --grid -o DIR": "audit_grid"}[name]
            print(f"RESULT startup.{tag} {w:.3f} s wall (goal < {goal:g} s: {'met' if w < goal else 'NOT met'}; "
                  f"{w / f_np:.2f}x python -c 'import numpy', {w / f_py:.1f}x python -c pass; load {load1[0]:.1f})")
    grid_s = json.loads((work / "grid" / "habernal2022.json").read_text())["wall_s"]
    print(f"audit --grid: the 252 cells took {grid_s:.2f} s of its wall time (the grid's own wall_s, last run)")
    print(f"first one-line sanitize with an empty TEXTDP_CACHE (computes the table's geometry and GloVe's "
          f"word list, then stores them): {cold[0]:.3f} s wall, {cold[1]:.3f} s CPU")
    all_met = all(med[n][0] < g for n, (_, g) in cases.items() if g)
    print("goals met:", "all" if all_met else "not all (see the 'met' column; the machine's load is above)")


if __name__ == "__main__":
    main()
