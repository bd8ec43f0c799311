"""Benchmark of the engines (issue 16): one release of a folder of Parquet parts on local threads, Dask and Spark.

    python benchmarks/bench_engines.py --size 2MB               # all engines, 3 repetitions each
    python benchmarks/bench_engines.py --size 2GB --engines local,dask --repeat 1
    python benchmarks/bench_engines.py --size 50MB --data /tmp/corpus-50MB   # keep (or reuse) the corpus
    python benchmarks/bench_engines.py --overhead-only          # each engine's cost per (empty) task

Data: a generated corpus of ``--size`` bytes of raw UTF-8 text (the documents' characters, no separators) in
``--parts`` Parquet parts (64 by default; one ``text`` column). Words are drawn from a Zipf law (exponent
1.07, rank = the word's position) over the default public output vocabulary of GloVe 6B 50d
(:func:`textdp.sanitize.vocabulary.public_vocabulary`: its first 30,000 words), documents of 5 + Poisson(20)
words, from a fixed seed (a simulation generator: data, not a release).

Release: :func:`textdp.engines.parts.sanitize_parts` (the path of ``textdp sanitize FOLDER --engine ...``:
a reading map that hashes every part, then the sanitizing map that writes every output part), ``--mechanism``
(SanText by default) at eps 3 over glove-6b-50d, one sampler thread per task, no ledger.

Configurations, each with N = 1 and N = 2 workers: ``local`` (LocalEngine(N): N partitions at a time on threads
of this process), ``dask`` (a LocalCluster of N worker processes, one thread each), ``spark`` (``local[N,2]``).
Every configuration first runs one untimed release of a tiny corpus (cluster start-up, imports, the embedding
table and numba compilation on each worker are not timed; the start-up seconds are printed apart), then
``--repeat`` timed releases of the corpus. Runs are interleaved so that ratios compare runs made under the same
machine load: local 1, local 2, dask 1 and dask 2 round-robin (both Dask clusters up at once); then Spark
local[1] round-robin with local 1, then Spark local[2] with local 2 (one Spark context per process at a time).
Medians are reported. For each: wall seconds of the whole release, tokens/s and MB/s of raw text, the tasks'
CPU seconds (thread CPU time inside the tasks: tokens per task-CPU-second is the rate of one worker on a free
core, less sensitive to the load of this shared machine), and the peak RSS of each worker process (Spark: its
Python workers, and the JVM apart). Ratios: scaling 1 -> 2 workers (goal >= 1.7x) and each engine's overhead
over the local path at equal cores (goal <= 15 %). The script also checks that every configuration wrote
byte-identical output parts (exactly-once noise: the same seeded release on every engine).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

EPS = 3.0
SEED = 1234
ZIPF_S = 1.07


# ------------------------------------------------------------------------------------------------ corpus
def parse_size(text: str) -> int:
    """``"50MB"`` -> 50_000_000 bytes (KB, MB, GB, TB: powers of 1000; a plain number is bytes)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?b?)?\s*", text.lower())
    if not m:
        raise SystemExit(f"--size: expected a size such as 50MB or 2GB, got {text!r}")
    unit = (m.group(2) or "b").rstrip("b") or "b"
    return int(float(m.group(1)) * {"b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[unit])


class ZipfWords:
    """Documents of 5 + Poisson(20) words drawn from a Zipf law over the public vocabulary."""

    def __init__(self, seed: int = SEED):
        import numpy as np

        from textdp.embeddings import load_embeddings
        from textdp.noise import simulation_rng
        from textdp.sanitize.vocabulary import public_vocabulary

        self.words = np.array(list(public_vocabulary(load_embeddings("glove-6b-50d")).words), dtype=object)
        rank = np.arange(1, len(self.words) + 1, dtype=np.float64)
        p = rank ** -ZIPF_S
        self.p = p / p.sum()
        wlen = np.array([len(w.encode("utf-8")) for w in self.words], dtype=np.float64)
        words_per_doc = 5 + 20
        self.mean_doc_bytes = words_per_doc * float(self.p @ wlen) + (words_per_doc - 1)  # words + spaces
        self.rng = simulation_rng(seed)

    def documents(self, n: int) -> list[str]:
        import numpy as np

        lengths = 5 + self.rng.poisson(20, size=n)
        toks = self.words[self.rng.choice(len(self.words), size=int(lengths.sum()), p=self.p)].tolist()
        docs, start = [], 0
        for e in np.cumsum(lengths).tolist():
            docs.append(" ".join(toks[start:e]))
            start = e
        return docs


def generate_corpus(folder: Path, total_bytes: int, parts: int, seed: int = SEED) -> dict:
    """Write ``parts`` Parquet parts of Zipfian documents (about ``total_bytes`` of raw text) to ``folder``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    z = ZipfWords(seed)
    folder.mkdir(parents=True, exist_ok=True)
    n_docs = n_tokens = n_bytes = 0
    for i in range(parts):
        docs = z.documents(max(1, int(round(total_bytes / parts / z.mean_doc_bytes))))
        pq.write_table(pa.table({"text": pa.array(docs, type=pa.string())}), folder / f"part-{i:05d}.parquet")
        n_docs += len(docs)
        n_tokens += sum(d.count(" ") + 1 for d in docs)
        n_bytes += sum(len(d.encode("utf-8")) for d in docs)
    return {"documents": n_docs, "words": n_tokens, "bytes": n_bytes}


def chunk_rate(mechanism: str, n_docs: int) -> dict:
    """One task's steady work at scale: one full chunk of ``n_docs`` documents sanitized in this
    process (one sampler thread): tokens/s, tokens per thread-CPU-second, bytes per token."""
    from textdp.sanitize import make_mechanism

    docs = ZipfWords(SEED + 2).documents(n_docs)
    mech = make_mechanism(mechanism, "glove-6b-50d", EPS, rng=SEED, workers=1)
    mech.begin_release()
    mech.sanitize_with_stats(docs[:50], first_record=0)  # load and compile outside the timing
    t0, c0 = time.perf_counter(), time.thread_time()
    _, st = mech.sanitize_with_stats(docs, first_record=0)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    return {"docs": n_docs, "tokens": st.tokens, "bytes": nbytes, "wall": wall, "cpu": cpu}


def corpus_facts(folder: Path) -> dict:
    import pyarrow.parquet as pq

    n_docs = n_bytes = 0
    for f in sorted(folder.glob("*.parquet")):
        col = pq.read_table(f, columns=["text"]).column("text").to_pylist()
        n_docs += len(col)
        n_bytes += sum(len(d.encode("utf-8")) for d in col)
    return {"documents": n_docs, "words": None, "bytes": n_bytes}


# ----------------------------------------------------------------------------------------- measurement
def _measured_task(fn, item):
    """Run ``fn(item)`` and report this process's id, peak RSS (KiB) and the task's thread CPU seconds."""
    c0 = time.thread_time()
    out = fn(item)
    cpu = time.thread_time() - c0
    return out, os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, cpu


def _engine_class():
    from textdp.engines import Engine

    class Measured(Engine):
        """An engine whose tasks also report their process's peak memory and their CPU time."""

        def __init__(self, inner):
            self.inner, self.name, self.workers = inner, inner.name, inner.workers
            self.rss: dict[int, int] = {}
            self.cpu = 0.0

        def map(self, fn, items, *, description=None, progress=None):
            import functools

            out = self.inner.map(functools.partial(_measured_task, fn), items, description=description,
                                 progress=progress)
            for _, pid, rss, cpu in out:
                self.rss[pid] = max(self.rss.get(pid, 0), rss)
                self.cpu += cpu
            return [r[0] for r in out]

        def describe(self):
            return self.inner.describe()

        def close(self):
            pass

    return Measured


def jvm_peak_mb(engine) -> float | None:
    """Peak resident memory (VmHWM) of the Spark JVM the engine started, in MB (None when unknown)."""
    try:
        pid = engine.session.sparkContext._gateway.proc.pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except Exception:
        return None
    return None


def part_digests(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.name.startswith("part-")}


class Config:
    def __init__(self, label: str, engine, workers: int):
        self.label, self.engine, self.workers = label, engine, workers
        self.startup = 0.0
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.tokens = 0
        self.rss: dict[int, int] = {}
        self.jvm_mb: float | None = None
        self.digests: dict | None = None


def one_release(cfg: Config, corpus: Path, work: Path, mechanism: str, chunk_size: int, timed: bool = True):
    from textdp.engines.parts import sanitize_parts
    from textdp.sanitize import make_mechanism

    mech = make_mechanism(mechanism, "glove-6b-50d", EPS, rng=SEED, workers=1)
    eng = _engine_class()(cfg.engine)
    out = work / f"out-{cfg.label.replace(' ', '-')}"
    t0 = time.perf_counter()
    r = sanitize_parts(corpus, out, mech, engine=eng, ledger=False, chunk_size=chunk_size)
    wall = time.perf_counter() - t0
    if timed:
        cfg.wall.append(wall)
        cfg.cpu.append(eng.cpu)
        cfg.tokens = r.stats.tokens
        for pid, rss in eng.rss.items():
            cfg.rss[pid] = max(cfg.rss.get(pid, 0), rss)
        if cfg.digests is None:
            cfg.digests = part_digests(out)
    shutil.rmtree(out, ignore_errors=True)
    return wall


def start(cfg: Config, tiny: Path, work: Path, mechanism: str, chunk_size: int) -> None:
    """Start the engine and run the untimed warm-up release (start-up seconds kept apart)."""
    t0 = time.perf_counter()
    if hasattr(cfg.engine, "start"):
        cfg.engine.start()
    one_release(cfg, tiny, work, mechanism, chunk_size, timed=False)
    cfg.startup = time.perf_counter() - t0


def round_robin(cfgs: list[Config], corpus: Path, work: Path, mechanism: str, chunk_size: int, repeat: int):
    for k in range(repeat):
        for cfg in cfgs:
            w = one_release(cfg, corpus, work, mechanism, chunk_size)
            print(f"  rep {k + 1}: {cfg.label:<14} {w:8.2f} s", flush=True)


# ---------------------------------------------------------------------------------------------- report
def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(cfgs: dict[str, Config], raw_bytes: int, parts: int) -> None:
    mb = raw_bytes / 1e6
    print("\nconfiguration    start-up s   wall s (median)   tokens/s      MB/s   tokens/task-CPU-s"
          "   peak RSS/worker MB")
    for label, c in cfgs.items():
        if not c.wall:
            continue
        w = _med(c.wall)
        cpu = _med(c.cpu)
        peak = max(c.rss.values()) / 1024 if c.rss else float("nan")
        extra = f" (JVM {c.jvm_mb:,.0f})" if c.jvm_mb else ""
        print(f"{label:<16} {c.startup:10.1f} {w:14.2f} {c.tokens / w:12,.0f} {mb / w:9.3f} {c.tokens / cpu:15,.0f}"
              f" {peak:15,.0f}{extra}   [{len(c.rss)} worker process(es); walls "
              f"{', '.join(f'{x:.1f}' for x in c.wall)}]")

    digests = {label: c.digests for label, c in cfgs.items() if c.digests is not None}
    same = len({tuple(sorted(d.items())) for d in digests.values()}) == 1
    print(f"\noutput parts byte-identical across {', '.join(digests)}: {'yes' if same else 'NO'}")
    print(f"RESULT engines.identical_output {'yes' if same else 'no'} (goal: yes; {parts} parts)")

    def ratio(a, b):
        return _med(cfgs[b].wall) / _med(cfgs[a].wall) if a in cfgs and b in cfgs and cfgs[a].wall and \
            cfgs[b].wall else None

    print()
    for eng in ("local", "dask", "spark"):
        s = ratio(f"{eng} 2", f"{eng} 1")
        if s is not None:
            goal = "goal >= 1.7" if eng != "local" else "reference: threads of one process"
            print(f"RESULT engines.{eng}_scaling_1_to_2_workers x{s:.2f} ({goal})")
    for eng in ("dask", "spark"):
        for n in (1, 2):
            if f"{eng} {n}" in cfgs and f"local {n}" in cfgs and cfgs[f"{eng} {n}"].wall:
                # the local runs interleaved with this engine's (Spark: its own block's)
                ref = getattr(cfgs[f"{eng} {n}"], "local_ref", None) or cfgs[f"local {n}"]
                over = _med(cfgs[f"{eng} {n}"].wall) / _med(ref.wall) - 1
                print(f"RESULT engines.{eng}_overhead_{n}w {100 * over:+.1f} % (goal <= 15 %; wall against local "
                      f"{n} run interleaved with it)")


def projection(rate: dict, cfgs: dict, total: float = 1e12, workers: int = 100) -> None:
    """The time of a ``total``-byte corpus on ``workers`` workers from the measured per-worker rates."""
    bpt = rate["bytes"] / rate["tokens"]
    tokens = total / bpt
    wall_rate, cpu_rate = rate["tokens"] / rate["wall"], rate["tokens"] / rate["cpu"]
    print(f"\none full chunk ({rate['docs']:,} documents, {rate['tokens']:,} tokens, {rate['bytes'] / 1e6:.1f} MB): "
          f"{rate['wall']:.1f} s wall, {rate['cpu']:.1f} s thread CPU -> {wall_rate:,.0f} tokens/s "
          f"({wall_rate * bpt / 1e6:.3f} MB/s) on this loaded machine, {cpu_rate:,.0f} tokens/CPU-s "
          f"({cpu_rate * bpt / 1e6:.3f} MB/CPU-s)")
    eff = None
    for eng in ("dask", "spark"):
        if f"{eng} 1" in cfgs and f"{eng} 2" in cfgs and cfgs[f"{eng} 1"].wall and cfgs[f"{eng} 2"].wall:
            s = _med(cfgs[f"{eng} 1"].wall) / _med(cfgs[f"{eng} 2"].wall)
            eff = s / 2 if eff is None else max(eff, s / 2)
    print(f"projection: {total / 1e12:g} TB of raw text = {tokens:,.0f} tokens ({bpt:.2f} bytes/token) on {workers} "
          f"workers, one chunk-sized task after another, the engine's per-task cost left out:")
    for what, r in (("at this run's wall rate per worker", wall_rate), ("at the CPU rate (a free core)", cpu_rate)):
        h = tokens / (r * workers) / 3600
        line = f"  {what}: {h:,.1f} h with linear scaling"
        if eff:
            line += (f"; {h / min(1.0, eff):,.1f} h at the scaling efficiency measured here from 1 to 2 "
                     f"workers ({eff:.2f})")
        print(line)


def _noop(x):
    return x


def task_cost(engine, n: int = 64, repeat: int = 3) -> float:
    """Median seconds per task of a map of ``n`` tasks that do nothing (the engine's own cost)."""
    engine.map(_noop, range(n))
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        engine.map(_noop, range(n))
        walls.append(time.perf_counter() - t0)
    return _med(walls) / n


def overhead_only(counts) -> None:
    """The per-task cost of each engine (maps of 64 empty tasks), without any release."""
    from textdp.engines import LocalEngine
    from textdp.engines.dask import DaskEngine
    from textdp.engines.spark import SparkEngine

    for n in counts:
        for label, make in (("local", lambda: LocalEngine(n)), ("dask", lambda: DaskEngine(workers=n)),
                            ("spark", lambda: SparkEngine(workers=n))):
            with make() as eng:
                if hasattr(eng, "start"):
                    eng.start()
                print(f"{label} {n}: {1000 * task_cost(eng):8.2f} ms per empty task (median of 3 maps of 64)",
                      flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2MB", help="raw text of the generated corpus (e.g. 2MB, 50MB, 2GB)")
    ap.add_argument("--parts", type=int, default=64)
    ap.add_argument("--engines", default="local,dask,spark", help="comma list of local, dask, spark")
    ap.add_argument("--workers", default="1,2", help="worker counts to run (comma list)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mechanism", default="santext")
    ap.add_argument("--chunk-size", type=int, default=50_000, help="rows per chunk inside a task")
    ap.add_argument("--no-chunk-rate", dest="chunk_rate", action="store_false",
                    help="skip timing one full chunk (the per-worker rate used for the 1 TB projection)")
    ap.add_argument("--overhead-only", action="store_true",
                    help="only the engines' cost per task (maps of 64 empty tasks), no release")
    ap.add_argument("--data", default=None, help="corpus folder to reuse (generated there when absent)")
    a = ap.parse_args(argv)
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    counts = [int(x) for x in a.workers.split(",")]
    if "local" not in engines:
        engines.insert(0, "local")  # the reference of every overhead ratio

    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores", flush=True)
    if a.overhead_only:
        overhead_only(counts)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="textdp-bench-engines-"))
    try:
        target = parse_size(a.size)
        corpus = Path(a.data) if a.data else work / "corpus"
        t0 = time.perf_counter()
        if corpus.is_dir() and any(corpus.glob("*.parquet")):
            facts = corpus_facts(corpus)
            print(f"corpus: reusing {corpus}")
        else:
            facts = generate_corpus(corpus, target, a.parts)
            print(f"corpus: generated in {time.perf_counter() - t0:.1f} s")
        n_parts = len(list(corpus.glob("*.parquet")))
        print(f"corpus: {facts['bytes'] / 1e6:,.2f} MB of raw text, {facts['documents']:,} documents"
              + (f", {facts['words']:,} words" if facts["words"] else "") + f", {n_parts} Parquet parts; "
              f"mechanism {a.mechanism} eps {EPS:g}, glove-6b-50d, one sampler thread per task", flush=True)
        tiny = work / "tiny"
        generate_corpus(tiny, 4000, 4, seed=SEED + 1)

        from textdp.engines import LocalEngine

        cfgs: dict[str, Config] = {}
        block = []
        for n in counts:
            cfgs[f"local {n}"] = Config(f"local {n}", LocalEngine(n), n)
            block.append(cfgs[f"local {n}"])
        if "dask" in engines:
            from textdp.engines.dask import DaskEngine

            for n in counts:
                cfgs[f"dask {n}"] = Config(f"dask {n}", DaskEngine(workers=n), n)
                block.append(cfgs[f"dask {n}"])
        print("\nblock 1: " + ", ".join(c.label for c in block) + " (round-robin)", flush=True)
        for c in block:
            start(c, tiny, work, a.mechanism, a.chunk_size)
            print(f"  {c.label:<14} started + warm-up release in {c.startup:.1f} s", flush=True)
        try:
            round_robin(block, corpus, work, a.mechanism, a.chunk_size, a.repeat)
        finally:
            for c in block:
                c.engine.close()
        if "spark" in engines:
            from textdp.engines.spark import SparkEngine

            for n in counts:
                ref = Config(f"local {n}*", LocalEngine(n), n)
                sp = Config(f"spark {n}", SparkEngine(workers=n), n)
                print(f"\nblock spark {n}: spark local[{n},2] round-robin with local {n}", flush=True)
                start(ref, tiny, work, a.mechanism, a.chunk_size)
                start(sp, tiny, work, a.mechanism, a.chunk_size)
                print(f"  spark {n} started + warm-up release in {sp.startup:.1f} s", flush=True)
                try:
                    round_robin([ref, sp], corpus, work, a.mechanism, a.chunk_size, a.repeat)
                    sp.jvm_mb = jvm_peak_mb(sp.engine)
                finally:
                    sp.engine.close()
                sp.local_ref = ref
                cfgs[f"spark {n}"] = sp
                cfgs[f"local {n}*"] = ref
        rate = None
        if a.chunk_rate:
            print(f"\none task's steady work: one chunk of {a.chunk_size:,} documents in this process", flush=True)
            rate = chunk_rate(a.mechanism, a.chunk_size)
        report(cfgs, facts["bytes"], n_parts)
        if rate is not None:
            projection(rate, cfgs)
        print(f"\nload average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; "
              f"total {time.perf_counter() - t0:.0f} s  (local N* = the local runs interleaved with Spark N)")
    finally:
        shutil.rmtree(work, ignore_errors=True)  # a --data corpus lives outside it and is kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
