"""Benchmark: textdp's sanitizers against pypantera's (and mldp-text's) on the same reviews and vocabulary.

    python benchmarks/bench_mechanisms.py                          # the issue's run: 500 reviews, whole corpus
    python benchmarks/bench_mechanisms.py --quick                  # = --docs 100 (the peers are slow)
    python benchmarks/bench_mechanisms.py --mldp-python /path/to/mldp-venv/bin/python   # also mldp-text
    python benchmarks/bench_mechanisms.py --skip-corpus            # only the peer comparison

Every measurement runs in its own child process (cold imports, clean memory), eps = 3, GloVe 6B 50d:

1. **Peers** (issue 15, item 4): the first N (default 500) Rotten Tomatoes reviews, sanitized by textdp and by
   pypantera 1.0.2 (PyPI package ``pypantera``, top-level package ``src``) for every mechanism both have:
   CMP (textdp ``fbdd``), Mahalanobis, Vickrey (CMP noise), CusText, SanText, TEM; with mldp-text (run by
   ``--mldp-python``, a separate environment: it pins numpy < 2) also for CMP, Mahalanobis, Vickrey, TEM and
   TruncatedGumbel. The SAME output vocabulary for all: the corpus words that have a GloVe vector, written
   once as a GloVe text file (the peers' input) and as a word list (textdp's ``output_vocabulary``). Set-up
   (loading the table, building indexes, a 5-review warm-up for textdp) is not timed; the timed call is the
   sanitization of the N reviews. tokens/s uses each tool's own token count (the peers split on
   whitespace). textdp: median of ``--reps`` runs; peers: ``--peer-reps`` runs (default 1: they take minutes).
   Prints the ratio textdp / peer (goal >= 100x each) as ``RESULT`` lines. A mechanism not (yet) registered
   in textdp is skipped with the reason; a peer that fails (pypantera's CusText on numpy 2) is reported with
   its error.
2. **Whole corpus**: every registered word-level textdp sanitizer on all 12,808 reviews with the default
   (public) output vocabulary: CPU seconds after imports (load + sanitize), and of the sanitize call alone
   (goal < 10 s CPU each after imports).

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


def stage_pypantera(name: str, tmp: str, reps: str) -> dict:
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
    tokens = int(sum(len(t.lower().split()) for t in docs))
    try:
        mech = cls({"embPath": os.path.join(tmp, "vocab.glove.txt"), "epsilon": EPS, **kw})
        runs = []
        for _ in range(int(reps)):
            data = pd.DataFrame({"id": range(len(docs)), "text": docs})
            t0, c0 = time.perf_counter(), _cpu()
            mech.obfuscateText(data, 1)
            runs.append((time.perf_counter() - t0, _cpu() - c0))
    except Exception as exc:  # noqa: BLE001 - a peer's failure is a result (e.g. CusText on numpy 2)
        line = (str(exc).strip().splitlines() or [""])[0][:160]
        return {"error": f"{type(exc).__name__}: {line}"}
    wall = statistics.median(r[0] for r in runs)
    return {"tokens": tokens, "wall_s": wall, "cpu_s": statistics.median(r[1] for r in runs),
            "tokens_per_s": tokens / wall, "reps": len(runs)}


#: run by the separate mldp-text environment's python (it cannot import textdp's numpy 2 stack)
MLDP_SCRIPT = r"""
import json, os, sys, time, resource
tmp, cls_name, kw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
try:
    from gensim.models import KeyedVectors
    import mldp_text.mechanisms as M
    kv = KeyedVectors.load_word2vec_format(os.path.join(tmp, "vocab.glove.txt"), binary=False, no_header=True)
    mech = getattr(M, cls_name)(3.0, embedding_matrix=kv, dim=kv.vector_size, use_faiss=False,
                                vocab=list(kv.key_to_index), **kw)
    docs = json.load(open(os.path.join(tmp, "docs.json"), encoding="utf-8"))
    toks = [w for d in docs for w in d.lower().split()]
    t0, c0 = time.perf_counter(), cpu()
    for w in toks:
        mech.replace_word(w)
    wall = time.perf_counter() - t0
    print(json.dumps({"tokens": len(toks), "wall_s": wall, "cpu_s": cpu() - c0, "tokens_per_s": len(toks) / wall,
                      "reps": 1}))
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"}))
"""


def stage_mldp(python: str, name: str, tmp: str) -> dict:
    spec = SHARED[name][2]
    if spec is None:
        return {"skip": "mldp-text has no such mechanism"}
    r = subprocess.run([python, "-c", MLDP_SCRIPT, tmp, spec[0], json.dumps(spec[1])], capture_output=True,
                       text=True)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:160]}"}


def stage_corpus(name: str) -> dict:
    c_start = _cpu()
    from textdp.data import load_dataset
    from textdp.sanitize import make_mechanism

    c_imp, t0 = _cpu(), time.perf_counter()
    texts = load_dataset("rotten-tomatoes").all()["text"].tolist()
    mech = make_mechanism(name, "glove-6b-50d", EPS)
    c1, t1 = _cpu(), time.perf_counter()
    _, st = mech.sanitize_with_stats(texts)
    c2, t2 = _cpu(), time.perf_counter()
    return {"documents": st.documents, "tokens": st.tokens, "imports_cpu_s": c_imp - c_start,
            "after_imports_cpu_s": c2 - c_imp, "after_imports_wall_s": t2 - t0, "sanitize_cpu_s": c2 - c1,
            "sanitize_wall_s": t2 - t1, "output_vocabulary": len(mech.output_words)}


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
    ap.add_argument("--mechanisms", help="comma list: only these textdp names")
    ap.add_argument("--skip-corpus", action="store_true", help="skip the whole-corpus timing")
    ap.add_argument("--skip-peers", action="store_true", help="skip the peer comparison")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stage:
        fn = {"prepare": lambda tmp, n: stage_prepare(tmp, int(n)), "textdp": stage_textdp,
              "pypantera": stage_pypantera, "corpus": stage_corpus}[a.stage]
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
                  f"{a.peer_reps} run(s); tokens/s by each tool's own token count")
            print(f"  {'mechanism':<18} {'textdp tok/s':>13} {'pypantera tok/s':>16} {'ratio':>9} "
                  f"{'mldp-text tok/s':>16} {'ratio':>9}")
            for name in SHARED:
                if only and name not in only:
                    continue
                td = _child("textdp", name, tmp, a.reps)
                if "skip" in td or "error" in td:
                    print(f"  {name:<18} skipped: {td.get('skip') or td.get('error')}")
                    continue
                pp = _child("pypantera", name, tmp, a.peer_reps)
                ml = stage_mldp(a.mldp_python, name, tmp) if a.mldp_python else {"skip": "absent"}
                results[name] = {"textdp": td, "pypantera": pp, "mldp": ml}

                def cols(peer):
                    if "tokens_per_s" not in peer:
                        why = peer.get("skip") or peer.get("error") or "?"
                        return f"{why[:30]:>26}"
                    return f"{peer['tokens_per_s']:>16,.0f} {td['tokens_per_s'] / peer['tokens_per_s']:>8,.0f}x"

                print(f"  {name:<18} {td['tokens_per_s']:>13,.0f} {cols(pp)} {cols(ml)}", flush=True)
                for peer, r in (("pypantera", pp), ("mldp", ml)):
                    if "tokens_per_s" in r:
                        print(f"RESULT mechanisms.{name}.vs_{peer} {td['tokens_per_s'] / r['tokens_per_s']:,.0f}x "
                              "tokens/s (goal >= 100x)")
                    elif "error" in r:
                        print(f"  ({peer} {name} failed: {r['error']})")
    if not a.skip_corpus:
        from textdp.sanitize import MECHANISMS

        names = [n for n, c in MECHANISMS.items() if not getattr(c, "document_level", False)
                 and (not only or n in only)]
        print(f"\n[2] whole corpus (all reviews), default public output vocabulary, one process per mechanism "
              "(CPU seconds; goal < 10 s CPU after imports):")
        print(f"  {'mechanism':<18} {'tokens':>9} {'after imports':>14} {'sanitize':>9} {'wall':>7}")
        for name in names:
            r = _child("corpus", name)
            results.setdefault(name, {})["corpus"] = r
            if "error" in r:
                print(f"  {name:<18} failed: {r['error']}")
                continue
            print(f"  {name:<18} {r['tokens']:>9,} {r['after_imports_cpu_s']:>12.1f} s {r['sanitize_cpu_s']:>7.1f} s "
                  f"{r['after_imports_wall_s']:>5.1f} s", flush=True)
            print(f"RESULT mechanisms.{name}.corpus_cpu_s {r['after_imports_cpu_s']:.1f} (goal < 10)")
        doc = [n for n, c in MECHANISMS.items() if getattr(c, "document_level", False)]
        if doc:
            print(f"  not timed here: {', '.join(doc)} (document-level, language-model based)")
    load1 = os.getloadavg()
    print(f"\nload average at the end {load1[0]:.1f} (1 min) / {load1[1]:.1f} (5 min)")


if __name__ == "__main__":
    main()
