"""Benchmark: textdp's sanitizers against pypantera's (and mldp-text's) on the same reviews and vocabulary.

    python benchmarks/bench_mechanisms.py                          # the issue's run: 500 reviews, search, whole corpus
    python benchmarks/bench_mechanisms.py --quick                  # = --docs 100 (the peers are slow)
    python benchmarks/bench_mechanisms.py --mldp-python /path/to/mldp-venv/bin/python   # also mldp-text
    python benchmarks/bench_mechanisms.py --skip-corpus            # only the peer comparison (and [2])

mldp-text 0.1.2 pins numpy < 2 and scipy < 1.13: give it its own environment, e.g.
``python3.11 -m venv /work/venvs/mldp && /work/venvs/mldp/bin/pip install mldp-text==0.1.2``.

Every measurement runs in its own child process (cold imports, clean memory), eps = 3, GloVe 6B 50d:

1. **Peers** (issue 15, item 4): the first N (default 500) Rotten Tomatoes reviews, sanitized by textdp and by
   pypantera 1.0.2 (PyPI package ``pypantera``, top-level package ``src``) for every mechanism both have:
   CMP (textdp ``fbdd``), Mahalanobis, Vickrey (CMP noise), CusText, SanText, TEM; with mldp-text (run by
   ``--mldp-python``, a separate environment: it pins numpy < 2) also for CMP, Mahalanobis, Vickrey, TEM and
   TruncatedGumbel, with its default faiss index (``--mldp-exhaustive``: its numpy scan of every word). The
   SAME output vocabulary for all: the corpus words that have a GloVe vector, written once as a GloVe text
   file (the peers' input) and as a word list (textdp's ``output_vocabulary``). Set-up (loading the table,
   building indexes, importing torch, a 5-review warm-up for textdp) is not timed; the timed call is the
   sanitization of the N reviews. tokens/s uses each tool's own token count (the peers split on
   whitespace). textdp: median of ``--reps`` runs; peers: ``--peer-reps`` runs (default 1: they take
   minutes), each stopped after ``--peer-budget`` seconds (default 900) at the end of the current 10 reviews
   (pypantera) or review (mldp-text): its tokens/s is then over the reviews done, and the output says how
   many. Prints the ratio textdp / peer (goal >= 100x each) as ``RESULT`` lines. A mechanism not (yet)
   registered in textdp is skipped with the reason; a peer that fails (pypantera's CusText on numpy 2) is
   reported with its error.
2. **Nearest-word search** of fbdd/mahalanobis/vickrey (``--search-tokens`` noisy points of corpus tokens,
   eps 1, 3, 10, 30, default public output vocabulary): agreement of the exact search's two prefilters, of the
   float32 GEMM search textdp used before and of a cluster index (k-means lists, nearest lists probed) with
   the exact search; CPU time per token of each search, one thread, same run.
3. **Whole corpus**: every registered word-level textdp sanitizer on all 12,808 reviews with the default
   (public) output vocabulary: CPU seconds after imports (load + sanitize; the imports of textdp, numba,
   torch and pandas/pyarrow are timed apart), and of the sanitize call alone (goal < 10 s CPU each after
   imports), with the mechanisms' default worker threads (``--corpus-workers N`` to set them).

The machine's load average is printed at the start and the end: on a shared machine the ratios measured
in the same run are the fair figures, the absolute times are not.
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

EPS = 3.0
#: textdp name -> (textdp parameters, pypantera (module, class, extra kwargs) or None, mldp-text (class, kwargs) or None)
SHARED = {
    "fbdd": ({}, ("src.EmbeddingPerturbationMechanism.cmp", "CMP", {}), ("MultivariateCalibrated", {})),
    "mahalanobis": ({"lam": 0.2}, ("src.EmbeddingPerturbationMechanism.mahalanobis", "Mahalanobis", {"lam": 0.2}),
                    ("Mahalanobis", {"lambd": 0.2})),
    "vickrey": ({"t": 0.5}, ("src.EmbeddingPerturbationMechanism.vickrey", "VickreyCMP", {"t": 0.5}),
                ("VickreyMechanism", {})),
    "custext": ({"k": 20}, ("src.SamplingPerturbationMechanism.custext", "CusText", {"k": 20, "distance": "euclidean"}),
                None),
    "santext": ({}, ("src.SamplingPerturbationMechanism.santext", "SanText", {}), None),
    "tem": ({"beta": 0.001}, ("src.SamplingPerturbationMechanism.tem", "TEM", {"beta": 0.001}), ("TEM", {})),
    "truncated-gumbel": ({}, None, ("TruncatedGumbel", {})),
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------------------------------- stages
def stage_prepare(tmp: str, n: int) -> dict:
    """The shared vocabulary (corpus words with a GloVe vector) as a GloVe text file and a word list, and
    the first ``n`` reviews as JSON."""
    import numpy as np

    from textdp.data import load_dataset
    from textdp.embeddings import load_embeddings
    from textdp.sanitize import SanText

    corpus = load_dataset("rotten-tomatoes").all()["text"].tolist()
    emb = load_embeddings("glove-6b-50d")
    mech = SanText(emb, epsilon=EPS, output_vocabulary="corpus").fit(corpus)
    words, vec = mech.output_words, np.asarray(emb.vectors[mech.output_rows])
    with open(os.path.join(tmp, "vocab.glove.txt"), "w", encoding="utf-8") as fh:
        for w, v in zip(words, vec):
            fh.write(w + " " + " ".join(f"{x:.6f}" for x in v) + "\n")
    with open(os.path.join(tmp, "vocab.txt"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(words) + "\n")
    with open(os.path.join(tmp, "docs.json"), "w", encoding="utf-8") as fh:
        json.dump(corpus[:n], fh)
    return {"vocabulary": len(words), "documents": min(n, len(corpus))}


def stage_textdp(name: str, tmp: str, reps: str) -> dict:
    from textdp.sanitize import MECHANISMS, make_mechanism, sampling

    if name not in MECHANISMS:
        return {"skip": f"{name} is not registered in textdp (yet)"}
    docs = json.load(open(os.path.join(tmp, "docs.json"), encoding="utf-8"))
    params = SHARED[name][0]
    mech = make_mechanism(name, "glove-6b-50d", EPS, output_vocabulary=os.path.join(tmp, "vocab.txt"), **params)
    sampling.warm_up()
    try:  # set-up, like the peers' imports: fbdd/mahalanobis/vickrey's search uses torch once it is imported
        import torch  # noqa: F401
    except ImportError:
        pass
    mech.sanitize(docs[:5])  # one-off set-up (tables, lists, kernels), like the peers' constructors
    runs = []
    for _ in range(int(reps)):
        t0, c0 = time.perf_counter(), _cpu()
        _, st = mech.sanitize_with_stats(docs)
        runs.append((time.perf_counter() - t0, _cpu() - c0, st.tokens))
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    return {"tokens": runs[0][2], "wall_s": wall, "cpu_s": cpu, "tokens_per_s": runs[0][2] / wall,
            "output_vocabulary": len(mech.output_words), "reps": len(runs)}


def stage_pypantera(name: str, tmp: str, reps: str, budget: str = "inf") -> dict:
    """pypantera on the reviews, in chunks of 10 (``obfuscateText`` per chunk, each review independent): a
    run stops after the chunk that passes ``budget`` seconds and reports the reviews it sanitized."""
    import importlib

    import pandas as pd

    spec = SHARED[name][1]
    if spec is None:
        return {"skip": "pypantera has no such mechanism"}
    module, cls_name, kw = spec
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except ImportError:
        return {"skip": "pypantera is not installed (pip install pypantera==1.0.2, the bench extra)"}
    docs = json.load(open(os.path.join(tmp, "docs.json"), encoding="utf-8"))
    budget_s = float(budget)
    try:
        mech = cls({"embPath": os.path.join(tmp, "vocab.glove.txt"), "epsilon": EPS, **kw})
        runs = []
        for _ in range(int(reps)):
            wall = cpu = 0.0
            done = 0
            for c in range(0, len(docs), 10):
                part = docs[c:c + 10]
                data = pd.DataFrame({"id": range(len(part)), "text": part})
                t0, c0 = time.perf_counter(), _cpu()
                mech.obfuscateText(data, 1)
                wall, cpu, done = wall + time.perf_counter() - t0, cpu + _cpu() - c0, done + len(part)
                if wall > budget_s:
                    break
            runs.append((wall, cpu, done))
    except Exception as exc:  # noqa: BLE001 - a peer's failure is a result (e.g. CusText on numpy 2)
        line = (str(exc).strip().splitlines() or [""])[0][:160]
        return {"error": f"{type(exc).__name__}: {line}"}
    wall, cpu, done = sorted(runs)[len(runs) // 2]
    tokens = int(sum(len(t.lower().split()) for t in docs[:done]))
    return {"tokens": tokens, "documents": done, "wall_s": wall, "cpu_s": cpu, "tokens_per_s": tokens / wall,
            "reps": len(runs)}


#: run by the separate mldp-text environment's python (it cannot import textdp's numpy 2 stack). mldp-text 0.1.2's
#: mechanisms take one word at a time (``replace_word``) and draw from numpy's global RNG; their default
#: ``use_faiss=True`` searches a faiss IVF index (100 lists, 50 probed: approximate), ``use_faiss=False`` scans every
#: word with numpy. Their TruncatedGumbel constructor calls ``random.sample`` on dict keys, a TypeError on Python
#: >= 3.11, unless ``max_inter_dist``/``min_inter_dist`` are given: the script then passes them, computed as the
#: constructor would from the vocabulary's first word (it draws a random word), and says so.
MLDP_SCRIPT = r"""
import json, os, sys, time, resource
tmp, cls_name, kw, budget, use_faiss = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1"
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
def line(exc):
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
try:
    import numpy as np
    from gensim.models import KeyedVectors
    import mldp_text
    import mldp_text.mechanisms as M
    kv = KeyedVectors.load_word2vec_format(os.path.join(tmp, "vocab.glove.txt"), binary=False, no_header=True)
    cls = getattr(M, cls_name)
    args = dict(embedding_matrix=kv, dim=kv.vector_size, use_faiss=use_faiss, vocab=list(kv.key_to_index), **kw)
    note = ""
    try:
        mech = cls(3.0, **args)
    except TypeError as exc:
        if cls_name != "TruncatedGumbel":
            raise
        d = np.sqrt(((kv.vectors - kv.vectors[0]) ** 2).sum(axis=1).astype(np.float64))
        d = d[d != 0]
        mech = cls(3.0, max_inter_dist=float(d.max()), min_inter_dist=float(d.min()), **args)
        note = f"default constructor failed ({line(exc)}); timed with max/min_inter_dist passed"
    docs = json.load(open(os.path.join(tmp, "docs.json"), encoding="utf-8"))
    tokens = done = 0
    t0, c0 = time.perf_counter(), cpu()
    for d in docs:
        for w in d.lower().split():
            mech.replace_word(w)
        tokens += len(d.lower().split())
        done += 1
        if time.perf_counter() - t0 > budget:
            break
    wall = time.perf_counter() - t0
    print(json.dumps({"tokens": tokens, "documents": done, "wall_s": wall, "cpu_s": cpu() - c0,
                      "tokens_per_s": tokens / wall, "reps": 1, "note": note, "version": mldp_text.__version__}))
except Exception as exc:
    print(json.dumps({"error": line(exc)}))
"""


def stage_mldp(python: str, name: str, tmp: str, budget: float, use_faiss: bool) -> dict:
    spec = SHARED[name][2]
    if spec is None:
        return {"skip": "mldp-text has no such mechanism"}
    r = subprocess.run([python, "-c", MLDP_SCRIPT, tmp, spec[0], json.dumps(spec[1]), str(budget),
                        "1" if use_faiss else "0"], capture_output=True, text=True)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:160]}"}


def stage_corpus(name: str, workers: str = "") -> dict:
    c_start = _cpu()
    from textdp.data import load_dataset
    from textdp.sanitize import make_mechanism

    c_textdp = _cpu()
    # the libraries the mechanisms' kernels import on first use are imports too, timed apart: numba (every
    # word-level mechanism's kernels) and torch (the nearest-word search's bfloat16 prefilter, when installed)
    import numba  # noqa: F401

    c_numba = _cpu()
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    c_torch = _cpu()
    # pandas and pyarrow: the built-in dataset's reader imports them on first use (lazily, so that
    # `import textdp` stays fast); an import too, timed apart
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    c_imp, t0 = _cpu(), time.perf_counter()
    texts = load_dataset("rotten-tomatoes").all()["text"].tolist()
    kw = {"workers": int(workers)} if workers else {}
    mech = make_mechanism(name, "glove-6b-50d", EPS, **kw)
    c1, t1 = _cpu(), time.perf_counter()
    _, st = mech.sanitize_with_stats(texts)
    c2, t2 = _cpu(), time.perf_counter()
    return {"documents": st.documents, "tokens": st.tokens, "imports_cpu_s": c_imp - c_start,
            "import_cpu_s": {"textdp": c_textdp - c_start, "numba": c_numba - c_textdp, "torch": c_torch - c_numba,
                             "pandas": c_imp - c_torch},
            "after_imports_cpu_s": c2 - c_imp, "after_imports_wall_s": t2 - t0, "sanitize_cpu_s": c2 - c1,
            "sanitize_wall_s": t2 - t1, "output_vocabulary": len(mech.output_words),
            "workers": getattr(mech, "workers", None)}


def _dense_float32(y: "np.ndarray", q: "np.ndarray", tiles=None) -> "np.ndarray":
    """The search textdp used before the exact one (its code, commit 9d7ea6f): float32 scores ``q·y_j -
    ||y_j||^2/2`` from one BLAS GEMM per tile of 2,048 words into a preallocated buffer, argmax (ties to the
    lowest column). ``tiles``: the float32 tiles ``[y_j; -||y_j||^2/2]`` (built once by the caller)."""
    import numpy as np

    if tiles is None:
        tiles = _dense_tiles(y)
    qa = np.ones((len(q), y.shape[1] + 1), dtype=np.float32)
    qa[:, :-1] = q
    r = np.arange(len(q))
    best = np.full(len(q), -np.inf, dtype=np.float32)
    arg = np.zeros(len(q), dtype=np.int64)
    buf = np.empty((len(q), 2048), dtype=np.float32)
    for s0, tile in tiles:
        g = buf[:, :tile.shape[1]]
        np.matmul(qa, tile, out=g)
        a = g.argmax(axis=1)
        v = g[r, a]
        up = v > best
        best[up], arg[up] = v[up], a[up] + s0
    return arg


def _dense_tiles(y):
    import numpy as np

    aug = np.empty((y.shape[1] + 1, len(y)), dtype=np.float32)
    aug[:-1] = y.T
    aug[-1] = -0.5 * np.einsum("ij,ij->i", y, y)
    return [(s, np.ascontiguousarray(aug[:, s:s + 2048])) for s in range(0, len(y), 2048)]


def _kmeans(y: "np.ndarray", k: int, iters: int = 15) -> tuple:
    """Lloyd's k-means on the public output embeddings, started from every (V/k)-th word by norm
    (deterministic): centroids ``(k, m)`` and each word's list."""
    import numpy as np

    order = np.argsort(-np.einsum("ij,ij->i", y, y), kind="stable")
    c = y[order[:: max(1, len(y) // k)][:k]].copy()
    for _ in range(iters):
        lab = (y @ c.T - 0.5 * np.einsum("ij,ij->i", c, c)).argmax(axis=1)
        for j in range(k):
            members = y[lab == j]
            if len(members):
                c[j] = members.mean(axis=0)
    lab = (y @ c.T - 0.5 * np.einsum("ij,ij->i", c, c)).argmax(axis=1)
    return c, lab


def stage_search(n: str) -> dict:
    """The nearest-word search of fbdd/mahalanobis/vickrey on noisy points of the first ``n`` in-vocabulary
    corpus tokens (GloVe 6B 50d, default public output vocabulary of 30,000 words), per eps: the exact search
    with each prefilter (agreement must be 1), the previous float32 GEMM search and a cluster index (IVF:
    k-means over the public output embeddings, 128 lists, the noisy point's nearest lists probed) against the
    exact search; and the search's time per token, one thread, median of 3, same run."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from textdp.data import load_dataset
    from textdp.noise.keyed import ReleaseKey
    from textdp.sanitize import make_mechanism
    from textdp.sanitize.nearest import NearestSearch, _torch_available

    n = int(n)
    texts = load_dataset("rotten-tomatoes").all()["text"].tolist()
    mech = make_mechanism("fbdd", "glove-6b-50d", EPS)
    mech._prepare()
    rows = mech.input_rows([w.lower() for t in texts for w in t.split()])
    rows = rows[rows >= 0][:n]
    y = np.asarray(mech.embeddings.vectors[mech.output_rows], dtype=np.float64)
    prefilters = ["numpy"] + (["torch"] if _torch_available() else [])
    searches = {p: NearestSearch(y, p) for p in prefilters}
    cent, lab = _kmeans(y, 128)
    out = {"tokens": int(len(rows)), "output_vocabulary": int(len(y)), "prefilters": prefilters, "eps": {}}
    for eps in (1.0, 3.0, 10.0, 30.0):
        m = make_mechanism("fbdd", "glove-6b-50d", eps)
        m._prepare()
        q = np.asarray(m.embeddings.vectors[rows], dtype=np.float64) + m._keyed_noise(
            ReleaseKey.from_seed(7), np.arange(len(rows)), np.zeros(len(rows), dtype=np.int64))
        exact = {p: searches[p](q, 1)[0][:, 0] for p in prefilters}
        ref = exact[prefilters[-1]]
        f32 = _dense_float32(y, q)
        cs = q @ cent.T - 0.5 * np.einsum("ij,ij->i", cent, cent)
        rank = np.argsort(-cs, axis=1, kind="stable")
        pos = np.argmax(rank == lab[ref][:, None], axis=1)  # where the exact word's list comes in the probe order
        out["eps"][f"{eps:g}"] = {
            "prefilters_agree": float(np.mean([np.mean(exact[p] == ref) for p in prefilters])),
            "float32_agreement": float(np.mean(f32 == ref)),
            "ivf_agreement": {str(p): float(np.mean(pos < p)) for p in (8, 16, 32, 64)},
        }
    m = make_mechanism("fbdd", "glove-6b-50d", EPS)
    m._prepare()
    k = min(len(rows), 4096)
    q = np.asarray(m.embeddings.vectors[rows[:k]], dtype=np.float64) + m._keyed_noise(
        ReleaseKey.from_seed(8), np.arange(k), np.zeros(k, dtype=np.int64))
    times = {}
    tiles = _dense_tiles(y)
    with threadpool_limits(1):
        import contextlib

        ctx = searches.get("torch").single_threaded() if "torch" in searches else contextlib.nullcontext()
        with ctx:
            for _ in range(3):
                for p in prefilters:
                    t0 = time.process_time()
                    for s0 in range(0, k, 256):
                        searches[p](q[s0:s0 + 256], 1)
                    times.setdefault(f"exact ({p} prefilter)", []).append((time.process_time() - t0) / k)
                t0 = time.process_time()
                for s0 in range(0, k, 256):
                    _dense_float32(y, q[s0:s0 + 256], tiles)
                times.setdefault("float32 GEMM (previous)", []).append((time.process_time() - t0) / k)
    out["us_per_token"] = {key: statistics.median(v) * 1e6 for key, v in times.items()}
    return out


def _child(stage: str, *args) -> dict:
    r = subprocess.run([sys.executable, __file__, "--stage", stage, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": f"stage {stage} failed: {(r.stderr.strip().splitlines() or [''])[-1][:200]}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=500, help="reviews for the peer comparison (default 500)")
    ap.add_argument("--quick", action="store_true", help="--docs 100 (the peers take minutes per mechanism)")
    ap.add_argument("--reps", type=int, default=3, help="textdp runs per mechanism (median; default 3)")
    ap.add_argument("--peer-reps", type=int, default=1, help="runs per peer mechanism (default 1)")
    ap.add_argument("--mldp-python", metavar="PATH", help="python of a separate environment with mldp-text "
                    "(it pins numpy < 2, so it cannot share textdp's)")
    ap.add_argument("--peers", default="pypantera,mldp", help="comma list of the peers to run in [1] "
                    "(default pypantera,mldp)")
    ap.add_argument("--mldp-exhaustive", action="store_true", help="run mldp-text with use_faiss=False (numpy "
                    "scan of every word) instead of its default faiss IVF index")
    ap.add_argument("--peer-budget", type=float, default=900.0, help="seconds per peer mechanism: a peer still "
                    "running after that many seconds stops at the end of its current 10 reviews (pypantera) or "
                    "review (mldp-text) and its tokens/s is over the reviews done (default 900)")
    ap.add_argument("--search-tokens", type=int, default=20000, help="corpus tokens for the nearest-word search "
                    "study [2] (default 20000)")
    ap.add_argument("--skip-search", action="store_true", help="skip the nearest-word search study")
    ap.add_argument("--mechanisms", help="comma list: only these textdp names")
    ap.add_argument("--skip-corpus", action="store_true", help="skip the whole-corpus timing")
    ap.add_argument("--corpus-workers", type=int, help="worker threads of each mechanism in the whole-corpus "
                    "timing (default: the mechanism's own, min(4, CPUs))")
    ap.add_argument("--skip-peers", action="store_true", help="skip the peer comparison")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stage:
        fn = {"prepare": lambda tmp, n: stage_prepare(tmp, int(n)), "textdp": stage_textdp,
              "pypantera": stage_pypantera, "corpus": stage_corpus, "search": stage_search}[a.stage]
        print(json.dumps(fn(*a.args)))
        return
    if a.quick:
        a.docs = 100
    only = set(a.mechanisms.split(",")) if a.mechanisms else None
    load0 = os.getloadavg()
    print(f"textdp mechanisms benchmark: eps={EPS}, GloVe 6B 50d, built-in rotten-tomatoes; {os.cpu_count()} CPUs; "
          f"load average at start {load0[0]:.1f} (1 min) / {load0[1]:.1f} (5 min)")
    if a.mldp_python is None:
        print("mldp-text: not run (absent: pass --mldp-python PATH, the python of a separate environment with "
              "mldp-text installed; it pins numpy < 2 and cannot share textdp's environment)")
    elif not os.path.isfile(a.mldp_python):
        print(f"mldp-text: not run (--mldp-python {a.mldp_python!r} does not exist)")
        a.mldp_python = None
    results = {}
    if not a.skip_peers:
        with tempfile.TemporaryDirectory() as tmp:
            prep = _child("prepare", tmp, a.docs)
            if "error" in prep:
                raise SystemExit(prep["error"])
            print(f"\n[1] the first {prep['documents']} reviews, the same output vocabulary for every tool: "
                  f"{prep['vocabulary']:,} corpus words with a GloVe vector; textdp median of {a.reps}, peers "
                  f"{a.peer_reps} run(s), {a.peer_budget:g} s budget each; mldp-text "
                  f"{'use_faiss=False (exhaustive numpy scan)' if a.mldp_exhaustive else 'with its default faiss index'}"
                  f"; tokens/s by each tool's own token count")
            print(f"  {'mechanism':<18} {'textdp tok/s':>13} {'pypantera tok/s':>16} {'ratio':>9} "
                  f"{'mldp-text tok/s':>16} {'ratio':>9}")
            for name in SHARED:
                if only and name not in only:
                    continue
                td = _child("textdp", name, tmp, a.reps)
                if "skip" in td or "error" in td:
                    print(f"  {name:<18} skipped: {td.get('skip') or td.get('error')}")
                    continue
                peers = set(a.peers.split(","))
                pp = (_child("pypantera", name, tmp, a.peer_reps, a.peer_budget) if "pypantera" in peers
                      else {"skip": "not run (--peers)"})
                ml = ({"skip": "not run (--peers)"} if "mldp" not in peers else
                      stage_mldp(a.mldp_python, name, tmp, a.peer_budget, not a.mldp_exhaustive) if a.mldp_python
                      else {"skip": "absent"})
                results[name] = {"textdp": td, "pypantera": pp, "mldp": ml}

                def cols(peer):
                    if "tokens_per_s" not in peer:
                        why = peer.get("skip") or peer.get("error") or "?"
                        return f"{why[:30]:>26}"
                    return f"{peer['tokens_per_s']:>16,.0f} {td['tokens_per_s'] / peer['tokens_per_s']:>8,.0f}x"

                print(f"  {name:<18} {td['tokens_per_s']:>13,.0f} {cols(pp)} {cols(ml)}", flush=True)
                for peer, r in (("pypantera", pp), ("mldp", ml)):
                    if "tokens_per_s" in r:
                        part = ("" if r.get("documents", prep["documents"]) >= prep["documents"] else
                                f" on the {r['documents']} reviews done in the {a.peer_budget:g} s budget")
                        print(f"RESULT mechanisms.{name}.vs_{peer} {td['tokens_per_s'] / r['tokens_per_s']:,.0f}x "
                              f"tokens/s (goal >= 100x){part}")
                        if r.get("note"):
                            print(f"  ({peer} {name}: {r['note']})")
                    elif "error" in r:
                        print(f"  ({peer} {name} failed: {r['error']})")
    if not a.skip_search:
        r = _child("search", a.search_tokens)
        results["search"] = r
        if "error" in r:
            print(f"\n[2] nearest-word search: failed: {r['error']}")
        else:
            print(f"\n[2] nearest-word search of fbdd/mahalanobis/vickrey: {r['tokens']:,} noisy points of corpus "
                  f"tokens, {r['output_vocabulary']:,} public output words; agreement with the exact search "
                  f"(float64 scores; prefilters {', '.join(r['prefilters'])}):")
            print(f"  {'eps':>5} {'prefilters':>10} {'float32 GEMM':>13}   cluster index (128 lists), lists probed: "
                  "8 / 16 / 32 / 64")
            for eps, e in r["eps"].items():
                ivf = " / ".join(f"{e['ivf_agreement'][p]:.4f}" for p in ("8", "16", "32", "64"))
                print(f"  {eps:>5} {e['prefilters_agree']:>10.4f} {e['float32_agreement']:>13.6f}   {ivf}")
                print(f"RESULT mechanisms.search.eps{eps}.float32_agreement {e['float32_agreement']:.6f}")
            print("  search CPU time per token (one thread, 256-token blocks, median of 3): " +
                  ", ".join(f"{k} {v:.1f} us" for k, v in r["us_per_token"].items()))
    if not a.skip_corpus:
        from textdp.sanitize import MECHANISMS

        names = [n for n, c in MECHANISMS.items() if not getattr(c, "document_level", False)
                 and (not only or n in only)]
        print(f"\n[3] whole corpus (all reviews), default public output vocabulary, one process per mechanism "
              "(CPU seconds; goal < 10 s CPU after imports; the imports of textdp, numba, torch and pandas are timed "
              "apart):")
        print(f"  {'mechanism':<18} {'tokens':>9} {'workers':>7} {'after imports':>14} {'sanitize':>9} {'wall':>7}   "
              "imports (textdp/numba/torch/pandas)")
        for name in names:
            r = _child("corpus", name, *([str(a.corpus_workers)] if a.corpus_workers else []))
            results.setdefault(name, {})["corpus"] = r
            if "error" in r:
                print(f"  {name:<18} failed: {r['error']}")
                continue
            print(f"  {name:<18} {r['tokens']:>9,} {r['workers'] or '-':>7} {r['after_imports_cpu_s']:>12.1f} s {r['sanitize_cpu_s']:>7.1f} s "
                  f"{r['after_imports_wall_s']:>5.1f} s   "
                  + "/".join(f"{v:.1f}" for v in r["import_cpu_s"].values()) + " s", flush=True)
            print(f"RESULT mechanisms.{name}.corpus_cpu_s {r['after_imports_cpu_s']:.1f} (goal < 10)")
        doc = [n for n, c in MECHANISMS.items() if getattr(c, "document_level", False)]
        if doc:
            print(f"  not timed here: {', '.join(doc)} (document-level, language-model based)")
    load1 = os.getloadavg()
    print(f"\nload average at the end {load1[0]:.1f} (1 min) / {load1[1]:.1f} (5 min)")


if __name__ == "__main__":
    main()
