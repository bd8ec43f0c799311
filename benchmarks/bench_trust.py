"""Trust benchmarks: (1) floating-point-safe samplers: the exact Laplace/Gaussian samplers
before (CKS20 as written) and after the fast construction, on both backends, vs numpy's
float samplers, in CPU time; the other samplers vs numpy; (2) streaming `textdp sanitize`
over a large generated file: peak memory.

    python benchmarks/bench_trust.py                  # samplers + 5 GB streaming run (hours on 2 cores)
    python benchmarks/bench_trust.py --size 20MB      # smaller streaming run
    python benchmarks/bench_trust.py --skip-samplers --size 10MB,100MB,1GB   # peak RSS against size
    python benchmarks/bench_trust.py --quick          # samplers (fewer draws) + a 5 MB streaming run
    python benchmarks/bench_trust.py --skip-stream    # samplers only

Both generators draw from the same ChaCha20 CSPRNG (textdp.noise.make_rng), so
the ratio isolates the cost of the exact constructions. The streaming run
writes a text file of the requested size (Rotten Tomatoes sentences repeated,
one document per line) into a temporary folder, runs `textdp sanitize` on it as
a child process and reports its peak resident memory (ru_maxrss); the claim to
check is peak RSS < 2 GB whatever the file size.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from textdp.noise import exact, make_rng
from textdp.noise import samplers as S


def _rate(fn, n, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return n / max(best, 1e-9)


def _cpu_rates(fns, n, rounds=5, min_cpu=0.25):
    """Draws per CPU second of each function, measured in interleaved rounds (each round runs
    every function for >= min_cpu CPU seconds); the best round per function is kept, so a
    shared, loaded machine penalises all candidates alike."""
    best = [0.0] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            calls, t0 = 0, time.process_time()
            while True:
                fn()
                calls += 1
                el = time.process_time() - t0
                if el >= min_cpu:
                    break
            best[i] = max(best[i], n * calls / el)
    return best


def _naive_categorical(lw, counts, rng):
    out = []
    for b in range(lw.shape[0]):
        w = np.exp(lw[b] - lw[b].max())
        cdf = np.cumsum(w)
        out.append(np.searchsorted(cdf, rng.random(int(counts[b])) * cdf[-1], side="right"))
    return out


def _cks_laplace(scale, n, rng):
    """The previous sampler: CKS20 Algorithm 2 as written (textdp.noise.exact.*_cks), same law."""
    g = S.laplace_granularity(scale)
    return exact.discrete_laplace_rational_cks(math.ceil(scale / g), 1, n, rng) * g


def _cks_gaussian(sigma, n, rng):
    g = S.gaussian_granularity(sigma)
    return exact.discrete_gaussian_int_cks(math.ceil(sigma / g), n, rng) * g


def _cks_discrete_laplace(scale, n, rng):
    num, den = S._dlap_params(scale)
    return exact.discrete_laplace_rational_cks(num, den, n, rng)


def _with_backend(name, fn):
    def run():
        old = exact.BACKEND
        exact.BACKEND = name
        try:
            return fn()
        finally:
            exact.BACKEND = old
    return run


def bench_exact(quick: bool) -> None:
    """Exact Laplace/Gaussian/discrete Laplace: previous CKS20 code vs the fast samplers
    (numpy fallback and numba kernel) vs numpy's float sampler, CPU time."""
    rng = make_rng(0)
    has_numba = exact.numba_available()
    sizes = (8, 100_000) if quick else (8, 1_000_000)
    print(f"== exact samplers: draws per CPU second (time.process_time, best of {3 if quick else 5} interleaved rounds), "
          f"same ChaCha20 generator; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared)")
    print("   before = CKS20 Algorithms 2/3 as written (the previous textdp code, kept as exact.*_cks);")
    print("   after  = certified geometric candidates (numpy fallback / numba kernel; calls of <= 40 candidates, e.g. 8 values,")
    print("            run on Python ints in both columns); float = numpy's rng.laplace / rng.normal (not float-safe)")
    hdr = f"{'sampler':30s} {'n':>9s} {'before':>12s} {'after numpy':>12s} {'after numba':>12s} {'float':>12s} " \
          f"{'numpy/before':>12s} {'numba/before':>12s}"
    print(hdr)
    cases = [("laplace(scale=1)", lambda n: S.laplace(1.0, n, rng), lambda n: _cks_laplace(1.0, n, rng),
              lambda n: rng.laplace(0, 1.0, n)),
             ("gaussian(sigma=1)", lambda n: S.gaussian(1.0, n, rng), lambda n: _cks_gaussian(1.0, n, rng),
              lambda n: rng.normal(0, 1.0, n))]
    for sc in (1.0, 10.0, 1000.0, 17.3):
        cases.append((f"discrete_laplace({sc:g})", lambda n, sc=sc: S.discrete_laplace(sc, n, rng),
                      lambda n, sc=sc: _cks_discrete_laplace(sc, n, rng), lambda n: rng.laplace(0, 1.0, n)))
    for n in sizes:
        for name, fast, before, flt in cases:
            fns = [lambda: before(n), _with_backend("numpy", lambda: fast(n))]
            if has_numba:
                fns.append(_with_backend("numba", lambda: fast(n)))
            fns.append(lambda: flt(n))
            r = _cpu_rates(fns, n, rounds=3 if quick else 5, min_cpu=0.1 if quick else 0.25)
            rb, rn = r[0], r[1]
            rk = r[2] if has_numba else float("nan")
            print(f"{name:30s} {n:9,d} {rb:12,.0f} {rn:12,.0f} {rk:12,.0f} {r[-1]:12,.0f} {rn / rb:12.1f} {rk / rb:12.1f}")


def bench_samplers(n: int) -> None:
    rng = make_rng(0)
    print(f"\n== other samplers: {n:,} draws each, best of 3 (CPU time), same ChaCha20 generator")
    print(f"{'sampler':52s} {'secure draws/s':>15s} {'numpy draws/s':>14s} {'secure/numpy':>13s}")
    rows = [
        ("bernoulli(0.3) vs rng.random() < 0.3", lambda: S.bernoulli(0.3, n, rng), lambda: rng.random(n) < 0.3, n),
        ("randomized_response(f=0.4)", lambda: S.randomized_response(np.zeros(n, bool), 0.4, rng),
         lambda: np.where(rng.random(n) < 0.4, rng.random(n) < 0.5, False), n),
    ]
    b, v = 200, 20_000
    lw = -np.random.default_rng(0).random((b, v)) * 30  # test data, not noise
    for per_row, tag in ((n // b, "heavy rows"), (5, "light rows")):
        counts = np.full(b, per_row)
        rows.append((f"categorical {b}x{v}, {per_row} draws/row ({tag})",
                     lambda c=counts: S.categorical_from_log_weights(lw, c, rng),
                     lambda c=counts: _naive_categorical(lw, c, rng), int(counts.sum())))
    for name, sec, ref, k in rows:
        rs, rn = _rate(sec, k), _rate(ref, k)
        print(f"{name:52s} {rs:15,.0f} {rn:14,.0f} {rs / rn:13.2f}")


def _parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMG]?)B?\s*", s.upper())
    if not m:
        raise SystemExit(f"bad --size {s!r}; use e.g. 5GB, 200MB")
    return int(float(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)])


def _make_file(path: Path, size: int) -> int:
    from textdp.data.datasets import load_dataset

    lines = [t.replace("\n", " ") + "\n" for t in load_dataset("rotten-tomatoes").train["text"].tolist()]
    block = "".join(lines).encode("utf-8")
    written, docs = 0, 0
    with open(path, "wb") as fh:
        while written < size:
            chunk = block[: size - written] if size - written < len(block) else block
            cut = chunk.rfind(b"\n") + 1 or len(chunk)
            fh.write(chunk[:cut])
            written += cut
            docs += chunk[:cut].count(b"\n")
    return docs


def _proc_kb(pid: int, field: str) -> int | None:
    """``VmHWM`` (peak) or ``VmRSS`` of a live process in kB, from /proc (Linux), else None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def bench_stream(size: int, chunk_size: int, every: float = 30.0) -> dict:
    """Sanitize a generated file of ``size`` bytes as a child process; returns the measurements.

    While it runs, a line every ``every`` seconds gives the bytes written so far and the
    child's peak RSS (VmHWM), so an interrupted run still shows whether memory stayed bounded.
    """
    import json

    with tempfile.TemporaryDirectory(prefix="textdp-bench-") as tmp:
        src = Path(tmp) / "big.txt"
        t = time.perf_counter()
        docs = _make_file(src, size)
        in_mb = src.stat().st_size / 2**20
        print(f"\n== streaming sanitize: generated {in_mb:,.1f} MB, {docs:,} documents "
              f"in {time.perf_counter() - t:.1f} s", flush=True)
        out = Path(tmp) / "big.santext.txt"
        cmd = [sys.executable, "-m", "textdp.cli.main", "sanitize", str(src), "--epsilon", "3", "--mechanism",
               "santext", "-o", str(out), "--chunk-size", str(chunk_size), "--seed", "1",
               "--no-ledger", "-q", "--json"]
        print("command:", " ".join(cmd[2:]), flush=True)
        t = time.perf_counter()
        log_out, log_err = Path(tmp) / "stdout.log", Path(tmp) / "stderr.log"
        with open(log_out, "w") as fo, open(log_err, "w") as fe:
            child = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True)
        next_report = t + every
        while True:  # wait4 gives this child's own rusage (RUSAGE_CHILDREN would mix earlier runs)
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.2)
            if time.perf_counter() >= next_report:
                next_report += every
                hwm = _proc_kb(child.pid, "VmHWM") or 0
                written = sum(f.stat().st_size for f in Path(tmp).iterdir()
                              if f.is_file() and f.name not in (src.name, log_out.name, log_err.name))
                print(f"  [{time.perf_counter() - t:7.0f} s] output so far {written / 2**20:9,.1f} MB "
                      f"({written / 2**20 / in_mb:5.1%} of the input size), peak RSS so far "
                      f"{hwm / 1024:,.0f} MB", flush=True)
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = log_out.read_text(), log_err.read_text()
        wall = time.perf_counter() - t
        peak_mb = usage.ru_maxrss / 1024
        if child.returncode != 0:
            print(stderr[-2000:])
            raise SystemExit(f"sanitize failed with exit code {child.returncode}")
        print(f"input {in_mb:,.1f} MB -> output {out.stat().st_size / 2**20:,.1f} MB in {wall:.1f} s wall "
              f"({usage.ru_utime + usage.ru_stime:.1f} s CPU)")
        st = json.loads(stdout)["private"]  # the curator's counts and timings (not in the card)
        print(f"tokens {st['tokens']:,}, {st['tokens_per_second']:,} tokens/s while sanitizing")
        verdict = "PASS" if peak_mb < 2048 else "FAIL"
        print(f"peak RSS of the sanitize process: {peak_mb:,.0f} MB (bound 2048 MB: {verdict}); "
              f"ratio peak/input = {peak_mb / in_mb:.2f}", flush=True)
        return {"input_mb": in_mb, "tokens": st["tokens"], "wall_s": wall, "peak_mb": peak_mb,
                "cpu_s": usage.ru_utime + usage.ru_stime}


def bench_stream_sizes(sizes: list[int], chunk_size: int) -> None:
    """Peak RSS against input size: flat when the streaming is memory-bounded."""
    rows = [bench_stream(sz, chunk_size) for sz in sizes]
    print("\n== peak memory against input size (same chunk size: flat = streaming is memory-bounded)")
    print(f"{'input MB':>10} {'tokens':>14} {'wall s':>9} {'CPU s':>9} {'peak RSS MB':>12}")
    for r in rows:
        print(f"{r['input_mb']:10,.1f} {r['tokens']:14,} {r['wall_s']:9.1f} {r['cpu_s']:9.1f} {r['peak_mb']:12,.0f}")
    if len(rows) > 1:
        print(f"input grew {rows[-1]['input_mb'] / rows[0]['input_mb']:.0f}x, peak RSS "
              f"{rows[-1]['peak_mb'] / rows[0]['peak_mb']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="5GB", help="size of the generated streaming input (default 5GB); "
                    "a comma list (e.g. 10MB,100MB,1GB) runs each and prints peak RSS against size")
    ap.add_argument("--quick", action="store_true", help="fewer sampler draws and a 5 MB streaming input "
                    "(chunks of 5,000 documents, so it streams ~10 chunks)")
    ap.add_argument("--skip-stream", action="store_true", help="only the sampler benchmark")
    ap.add_argument("--skip-samplers", action="store_true", help="only the streaming benchmark")
    ap.add_argument("--chunk-size", type=int, default=50_000, help="documents per streamed chunk")
    a = ap.parse_args()
    if not a.skip_samplers:
        bench_exact(a.quick)
        bench_samplers(200_000 if a.quick else 1_000_000)
    if not a.skip_stream:
        sizes = [_parse_size(x) for x in ("5MB" if a.quick else a.size).split(",")]
        bench_stream_sizes(sizes, min(a.chunk_size, 5_000) if a.quick else a.chunk_size)


if __name__ == "__main__":
    main()
