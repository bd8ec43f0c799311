"""Benchmark of textdp's collapsed Gibbs sampler against `lda` and tomotopy at 1 and 2 workers, and the cost of
the DP variants.

Data: 20 Newsgroups train split (built-in `20newsgroups`), lower-cased, letters-only tokens, English stop words
and words with fewer than 5 occurrences removed (textdp.topics.Corpus.from_texts); perplexity on the test split
(same vocabulary), all models scored by textdp's fold-in protocol (50 sweeps, 10 burn-in, α = 0.1).
Setting: K = 20, α = 0.1, β = 0.01, 200 iterations, no hyperparameter optimisation (tomotopy optim_interval = 0;
lda: log-likelihood only at the end).

Samplers, each timed over the whole training run (textdp: LDA.fit including its random start; tomotopy: train(),
after the documents were added):
* textdp, 1 worker: the exact collapsed Gibbs chain (LDA(workers=1));
* textdp, 2 workers: the approximate parallel sampler AD-LDA (LDA(workers=2); not the exact chain);
* tomotopy, 1 worker (ParallelScheme.NONE) and 2 workers (ParallelScheme.DEFAULT, what tomotopy picks);
* lda (single thread), one run only (it is 5x slower).
The four textdp/tomotopy configurations run interleaved, --reps times (default 3), and the median is reported, so
that the ratios compare runs made under the same machine load; CPU/wall (process CPU seconds over wall seconds)
shows how many cores a run actually got, and token-it/CPU-s the work done per CPU second (less sensitive to the
load; times the number of workers, the wall-clock rate on free cores with perfect scaling). The wall-clock ratios
are the ones to quote. Perplexity is that of each configuration's first repetition.

DP cost: seconds per sweep on the same corpus for the non-private kernel, HDP-LDA's step (sweep with the fixed
noisy view + a discrete-Laplace release of the (V, K) counts every sweep, or every 5 sweeps) and OLP-LDA's asymmetric-prior kernel; LP-LDA runs
the non-private kernel on its reconstructed corpus, so its per-token cost is reported with its one-off
randomized-response encoding.

Usage: python benchmarks/bench_topics.py [--quick] [--iterations N] [--test-docs N] [--reps N] [--no-lda]
  --quick: 30 iterations and 2000 test documents (for a busy machine); the full run is the default.

Engine mode (issue 16, item 5): python benchmarks/bench_topics.py --engine local,dask,spark [--iterations 20]
[--sweeps-per-release 10] [--reps 3]. HDP-LDA (epsilon 10, seed 0, documents truncated to 200 tokens) on the same
corpus, its sweeps on each engine started with 2 workers, once over 1 partition of the documents (one worker
works) and once over 2 (two workers), interleaved --reps times (median reported), after one warm-up fit per
engine (cluster start-up, worker imports and numba loading are not timed); one engine at a time (an idle
cluster's processes would share the machine otherwise). Besides wall seconds it reports the
share of the time spent outside Engine.map (the driver: initial view, every release's noise, the counts rebuilt
from the assignments, phi), which no worker count shortens, and it checks that every run gave the same model.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time

import numpy as np


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} CPUs)"
    except OSError:  # pragma: no cover
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--test-docs", type=int, default=None)
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions of each textdp/tomotopy run")
    ap.add_argument("--no-lda", action="store_true", help="skip the `lda` package (single thread, slow)")
    ap.add_argument("--engine", default=None, help="engine mode: comma-separated engines among local, dask, spark "
                    "(HDP-LDA's sweeps over 1 and 2 partitions on each)")
    ap.add_argument("--sweeps-per-release", type=int, default=10, help="engine mode: HDP-LDA's sweeps per release")
    a = ap.parse_args()
    if a.engine:
        return engine_bench(a)
    iters = a.iterations or (30 if a.quick else 200)
    n_test = a.test_docs or (2000 if a.quick else None)
    reps = max(1, a.reps)
    K, alpha, beta = 20, 0.1, 0.01

    from textdp.data.datasets import load_dataset
    from textdp.noise import make_rng
    from textdp.topics import HDPLDA, LDA, Corpus, perplexity
    from textdp.topics.lda import GibbsState
    from textdp.topics.privacy import reconstruct_corpus, rr_encode, rr_estimate, rr_variance

    ds = load_dataset("20newsgroups")
    train = Corpus.from_texts(ds.train.text.tolist(), min_count=5, vocabulary="corpus")  # as lda/tomotopy users do
    test_texts = ds.test.text.tolist()
    if n_test:
        test_texts = test_texts[:n_test]
    test = train.transform_texts(test_texts)
    N = train.n_tokens
    print(f"20 Newsgroups train: {train.n_docs} documents, {N} tokens, V = {train.n_words}; "
          f"test: {test.n_docs} documents, {test.n_tokens} tokens")
    print(f"K = {K}, alpha = {alpha}, beta = {beta}, {iters} iterations" + ("  [--quick]" if a.quick else ""))
    print(f"load average before: {_load()}")

    # warm up numba (compilation is cached, but keep it out of the timing in any case), both samplers
    LDA(K, alpha, beta, 1, seed=0, ll_every=0).fit(train.subset(range(50)))
    LDA(K, alpha, beta, 1, seed=0, ll_every=0, workers=2).fit(train.subset(range(50)))

    def textdp_run(workers):
        def run():
            t0, c0 = time.perf_counter(), time.process_time()
            m = LDA(K, alpha, beta, iters, seed=0, ll_every=0, workers=workers).fit(train)
            return time.perf_counter() - t0, time.process_time() - c0, m.topic_word
        return run

    configs = [("textdp exact CGS", 1, textdp_run(1)), ("textdp AD-LDA (approximate)", 2, textdp_run(2))]
    try:
        import tomotopy as tp

        voc = train.vocabulary
        idx = {w: i for i, w in enumerate(voc)}

        def tomotopy_run(workers, scheme):
            def run():
                mdl = tp.LDAModel(k=K, alpha=alpha, eta=beta, seed=0)
                mdl.optim_interval = 0
                for d in train.documents():
                    mdl.add_doc([voc[i] for i in d])
                t0, c0 = time.perf_counter(), time.process_time()
                mdl.train(iters, workers=workers, parallel=scheme)
                secs, cpu = time.perf_counter() - t0, time.process_time() - c0
                phi = np.zeros((K, len(voc)))
                cols = [idx[w] for w in mdl.used_vocabs]
                for k in range(K):
                    phi[k, cols] = mdl.get_topic_word_dist(k)
                return secs, cpu, phi
            return run

        import warnings

        warnings.filterwarnings("ignore", message="The training result may differ")  # tomotopy, workers != 1
        configs += [(f"tomotopy {tp.__version__} (NONE)", 1, tomotopy_run(1, tp.ParallelScheme.NONE)),
                    (f"tomotopy {tp.__version__} (DEFAULT)", 2, tomotopy_run(2, tp.ParallelScheme.DEFAULT))]
    except ImportError:
        print("tomotopy not installed (pip install tomotopy): skipped")

    times = {name: [] for name, _, _ in configs}
    cpus = {name: [] for name, _, _ in configs}
    phis = {}
    for _ in range(reps):  # interleaved: every configuration sees the same spread of machine load
        for name, _, run in configs:
            secs, cpu, phi = run()
            times[name].append(secs)
            cpus[name].append(cpu)
            phis.setdefault(name, phi)
    rows = [(name, w, float(np.median(times[name])), float(np.median(cpus[name]) / np.median(times[name])),
             phis[name]) for name, w, _ in configs]

    if not a.no_lda:
        try:
            import lda as lda_pkg
            from scipy import sparse

            logging.getLogger("lda").setLevel(logging.WARNING)
            X = sparse.csr_matrix((np.ones(N, np.int64), (train.doc_ids, train.word_ids)),
                                  shape=(train.n_docs, train.n_words))
            t0, c0 = time.perf_counter(), time.process_time()
            m = lda_pkg.LDA(K, n_iter=iters, alpha=alpha, eta=beta, random_state=0, refresh=iters).fit(X)
            secs = time.perf_counter() - t0
            rows.append((f"lda {lda_pkg.__version__} (one run)", 1, secs, (time.process_time() - c0) / secs,
                         m.topic_word_))
        except ImportError:
            print("lda not installed (pip install lda): skipped")

    print(f"\nNon-private LDA, 1 and 2 workers (median of {reps} interleaved repetitions; same corpus, same run)")
    print(f"{'sampler':<32}{'workers':>8}{'seconds':>9}{'token-it/s':>14}{'CPU/wall':>10}{'token-it/CPU-s':>16}"
          f"{'perplexity':>12}")
    ppl, rate = {}, {}
    for name, w, secs, cw, phi in rows:
        ppl[name] = perplexity(phi, test, alpha, rng=0)
        rate[name] = N * iters / secs
        print(f"{name:<32}{w:>8}{secs:>9.1f}{rate[name]:>14,.0f}{cw:>10.2f}{rate[name] / cw:>16,.0f}"
              f"{ppl[name]:>12.1f}")
    names = [r[0] for r in rows]
    t1, t2 = names[0], names[1]
    print("ratios of token-iterations/s (perplexity ratio in brackets):")
    print(f"  textdp 2 workers (AD-LDA) / 1 worker (exact): x{rate[t2] / rate[t1]:.2f} ({ppl[t2] / ppl[t1]:.3f})")
    tomo = [n for n in names if n.startswith("tomotopy")]
    if tomo:
        o1, o2 = tomo
        print(f"  tomotopy 2 workers / 1 worker: x{rate[o2] / rate[o1]:.2f} ({ppl[o2] / ppl[o1]:.3f})")
        print(f"  textdp / tomotopy, 1 worker: x{rate[t1] / rate[o1]:.2f} ({ppl[t1] / ppl[o1]:.3f})")
        print(f"  textdp / tomotopy, 2 workers: x{rate[t2] / rate[o2]:.2f} ({ppl[t2] / ppl[o2]:.3f})")
        print(f"RESULT topics.vs_tomotopy_2w x{rate[t2] / rate[o2]:.2f} token-iterations/s (goal >= 1; perplexity "
              f"ratio {ppl[t2] / ppl[o2]:.3f}); textdp 2 workers {rate[t2]:.3g} token-it/s (issue's mark 2.0e7)")
    for n in names:
        if n.startswith("lda "):
            print(f"  textdp 1 worker / {n}: x{rate[t1] / rate[n]:.2f} ({ppl[t1] / ppl[n]:.3f})")
    print(f"load average after: {_load()}")

    # --- cost of the DP variants per sweep on the same corpus ---------------------------------------------------
    n_sweeps = max(3, min(10, iters // 10))
    st = GibbsState(train, K, alpha, beta, make_rng(1))

    def time_it(fn):
        fn()
        t = time.perf_counter()
        for _ in range(n_sweeps):
            fn()
        return (time.perf_counter() - t) / n_sweeps

    t_plain = time_it(st.sweep)
    hdp = HDPLDA(K, epsilon=1.0, iterations=iters, alpha=alpha, beta=beta)
    scale = hdp.accounting()["scale"]
    box = {"phi": np.ascontiguousarray(st.phi().T)}

    def hdp_step():
        st.sweep_with_view(box["phi"])
        view = hdp.noisy_view(st.nwk, scale, st.rng)
        box["phi"] = np.ascontiguousarray(hdp._phi_from_view(view))

    t_hdp = time_it(hdp_step)
    spr = 5

    def hdp_step5():
        for _ in range(spr - 1):
            st.sweep_with_view(box["phi"])
        hdp_step()

    t_hdp5 = time_it(hdp_step5) / spr
    st.set_prior(np.full((train.n_words, K), beta) + 0.5 * st.nwk)
    t_olp = time_it(st.sweep)
    st.set_prior(None)
    rng = make_rng(2)
    t0 = time.perf_counter()
    rep = rr_encode(train, 0.2, rng)
    rc = reconstruct_corpus(rep, rr_estimate(rep.counts(), rep.n_docs, 0.2), train.vocabulary, rng, 1.0,
                            rr_variance(rep.n_docs, 0.2))
    t_enc = time.perf_counter() - t0
    st_lp = GibbsState(rc, K, alpha, beta, make_rng(3))
    t_lp = time_it(st_lp.sweep)
    per_tok = t_plain / N
    print(f"\nCost per sweep ({n_sweeps} sweeps each, after one warm-up)")
    print(f"{'sampler':<44}{'s/sweep':>9}{'ns/token':>10}{'x non-private':>15}")
    for name, t, n in (("non-private (symmetric prior)", t_plain, N),
                       ("HDP-LDA, release every sweep", t_hdp, N),
                       (f"HDP-LDA, release every {spr} sweeps", t_hdp5, N),
                       ("OLP-LDA (asymmetric prior beta^l)", t_olp, N),
                       (f"LP-LDA CGS on reconstructed corpus ({rc.n_tokens} tok)", t_lp, rc.n_tokens)):
        print(f"{name:<44}{t:>9.3f}{t / n * 1e9:>10.1f}{(t / n) / per_tok:>15.2f}")
    print(f"LP/OLP one-off randomized response + reconstruction (f = 0.2, {train.n_docs} x {train.n_words} bits): "
          f"{t_enc:.1f} s")


def engine_bench(a):
    """HDP-LDA's sweeps on the engines: 1 partition against 2 on a 2-worker engine, same run (see the docstring)."""
    import statistics

    from textdp.data.datasets import load_dataset
    from textdp.engines import get_engine
    from textdp.engines.base import Engine
    from textdp.topics import HDPLDA, Corpus

    names = [n.strip().lower() for n in a.engine.split(",") if n.strip()]
    iters, spr, reps = a.iterations or 20, a.sweeps_per_release, max(1, a.reps)
    K = 20

    class Timed(Engine):
        """The engine, with the seconds spent inside map() counted, and each task's CPU seconds (its thread's, on
        the worker): ``cpu`` their sum, ``critical`` the sum over maps of the largest task's (the map's length on
        free cores with no scheduling cost)."""

        def __init__(self, inner):
            self.inner, self.name, self.workers = inner, inner.name, inner.workers
            self.seconds = self.cpu = self.critical = 0.0

        def map(self, fn, items, **kw):
            t = time.perf_counter()
            try:
                out = self.inner.map(functools.partial(_task_cpu, fn), items, **kw)
            finally:
                self.seconds += time.perf_counter() - t
            self.cpu += sum(c for c, _ in out)
            self.critical += max(c for c, _ in out)
            return [r for _, r in out]

    ds = load_dataset("20newsgroups")
    train = Corpus.from_texts(ds.train.text.tolist(), min_count=5, vocabulary="corpus")
    n_trunc = int(np.minimum(train.doc_lengths, 200).sum())
    print(f"20 Newsgroups train: {train.n_docs} documents, {train.n_tokens} tokens ({n_trunc} after truncation to "
          f"200 per document), V = {train.n_words}")
    print(f"HDP-LDA: K = {K}, epsilon 10, {iters} iterations, a release every {spr} sweeps "
          f"({-(-iters // spr)} releases of V x K = {train.n_words * K} noisy counts), seed 0; median of {reps} "
          "interleaved repetitions")
    print(f"load average before: {_load()}")

    def fit(engine, parts):
        timed = Timed(engine)
        m = HDPLDA(K, epsilon=10.0, iterations=iters, sweeps_per_release=spr, seed=0, ll_every=0, engine=timed,
                   partitions=parts)
        c0, t0 = time.process_time(), time.perf_counter()
        model = m.fit(train)
        wall = time.perf_counter() - t0
        return wall, timed.seconds, time.process_time() - c0, model.topic_word, timed.cpu, timed.critical

    results, reference = {}, None
    for name in names:  # one engine at a time: an idle cluster's processes share this session's CPU otherwise
        t = time.perf_counter()
        with get_engine(name, workers=2) as engine:
            fit(engine, 2)  # warm-up: cluster start, worker imports, numba's cached kernels
            print(f"{name}: engine started and warmed up in {time.perf_counter() - t:.1f} s "
                  f"(load average {_load()})")
            for _ in range(reps):
                for parts in (1, 2):
                    wall, in_map, cpu, phi, task_cpu, critical = fit(engine, parts)
                    if reference is None:
                        reference = phi
                    results.setdefault((name, parts), []).append((wall, in_map, cpu, np.array_equal(phi, reference),
                                                                  task_cpu, critical))
    print(f"\n{'engine':<8}{'partitions':>11}{'seconds':>9}{'in map':>8}{'driver':>8}{'driver %':>9}"
          f"{'proc CPU/wall':>15}{'task CPU':>10}{'critical':>10}{'same model':>11}")
    med = {}
    for (name, parts), runs in results.items():
        wall, in_map, cpu, _, task_cpu, critical = (statistics.median(r[i] for r in runs) if i != 3 else None
                                                    for i in range(6))
        med[(name, parts)] = (wall, in_map, wall - in_map, critical)
        print(f"{name:<8}{parts:>11}{wall:>9.2f}{in_map:>8.2f}{wall - in_map:>8.2f}{100 * (wall - in_map) / wall:>8.0f}%"
              f"{cpu / wall:>15.2f}{task_cpu:>10.2f}{critical:>10.2f}{str(all(r[3] for r in runs)):>11}")
    print("\nseconds: wall time of the fit; in map: inside Engine.map; driver: the rest (initial view, noise, counts);"
          "\nproc CPU/wall: the driver process's CPU over wall time (local threads included); task CPU: CPU seconds of"
          "\nall tasks (thread time, on the workers); critical: the sum over maps of the largest task's CPU seconds")
    print("\nspeed-up of 2 workers over 1 (same engine, same run; measured wall time of the whole fit / inside "
          "Engine.map only):")
    for name in names:
        (w1, m1, _, c1), (w2, m2, d2, c2) = med[(name, 1)], med[(name, 2)]
        print(f"RESULT hdp_2_workers_speedup_{name} {w1 / w2:.2f} (goal >= 1.7; sweeps only: {m1 / m2:.2f})")
    print("estimate, not a measurement: on two free cores, wall = driver + critical path of the tasks:")
    for name in names:
        (w1, m1, d1, c1), (w2, m2, d2, c2) = med[(name, 1)], med[(name, 2)]
        print(f"  {name}: 1 partition {d1 + c1:.2f} s, 2 partitions {d2 + c2:.2f} s: x{(d1 + c1) / (d2 + c2):.2f} "
              f"(tasks' critical path alone x{c1 / c2:.2f})")
    print(f"load average after: {_load()}")


def _task_cpu(fn, item):
    """``(CPU seconds of this thread while running fn(item), fn(item))``: run on the engine's workers."""
    c = time.thread_time()
    out = fn(item)
    return time.thread_time() - c, out


if __name__ == "__main__":
    main()
