"""Benchmark: textdp SanText vs the SanText of PyPI `pypantera`, on Rotten Tomatoes with GloVe 6B 50d.

    python benchmarks/bench_sanitize.py            # full: whole corpus + 500-review comparison
    python benchmarks/bench_sanitize.py --quick    # 100-review comparison (pypantera is slow)

What it measures (all in this one run, eps = 3):
1. textdp, whole built-in corpus (train + test, ~12.8k snippets), output vocabulary = corpus words
   with a GloVe vector: load (dataset + embeddings), fit + tokenize, sampling, write CSV; peak RSS
   of that stage (run in a child process).
2. textdp with the FULL 400k GloVe output vocabulary on 200 snippets: time and peak RSS (child process).
3. A subset of N reviews sanitized by textdp and by pypantera's SanText with the SAME output
   vocabulary (a GloVe text file holding exactly the corpus words), tokens/s and the ratio.
   pypantera tokenizes by whitespace, so its token count is reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

EPS = 3.0


def stage_corpus(out_dir: str) -> dict:
    t0 = time.perf_counter()
    from textdp.data import io, load_dataset
    from textdp.embeddings import load_embeddings
    from textdp.sanitize import SanText

    t_imp = time.perf_counter()
    frame = load_dataset("rotten-tomatoes").all()
    emb = load_embeddings("glove-6b-50d")
    t_load = time.perf_counter()
    mech = SanText(emb, epsilon=EPS).fit(frame["text"].tolist())
    mech._prepare()
    t_fit = time.perf_counter()
    texts, st = mech.sanitize_with_stats(frame["text"].tolist())
    t_san = time.perf_counter()
    frame["text"] = texts
    io.write_table(frame, os.path.join(out_dir, "rt.santext.csv"))
    t_end = time.perf_counter()
    return {"documents": st.documents, "tokens": st.tokens, "output_vocabulary": len(mech.output_rows),
            "imports_s": t_imp - t0, "load_s": t_load - t_imp, "fit_s": t_fit - t_load,
            "sanitize_s": t_san - t_fit, "sampling_s": st.sampling_seconds, "write_s": t_end - t_san,
            "end_to_end_after_imports_s": t_end - t_imp,
            "sampling_tokens_per_s": st.in_vocabulary_tokens / st.sampling_seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def stage_full(n: int) -> dict:
    from textdp.data import load_dataset
    from textdp.sanitize import SanText

    texts = load_dataset("rotten-tomatoes").all()["text"].head(n).tolist()
    t0 = time.perf_counter()
    mech = SanText("glove-6b-50d", epsilon=EPS, output_vocabulary="full")
    out, st = mech.sanitize_with_stats(texts)
    return {"documents": st.documents, "tokens": st.tokens, "output_vocabulary": len(mech.output_rows),
            "seconds": time.perf_counter() - t0, "distinct_words": st.distinct_input_words,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _child(stage: str, arg: str) -> dict:
    r = subprocess.run([sys.executable, __file__, "--stage", stage, "--arg", arg], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"stage {stage} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(n: int, tmp: str) -> dict:
    import numpy as np

    from textdp.data import load_dataset
    from textdp.embeddings import load_embeddings
    from textdp.sanitize import SanText

    frame = load_dataset("rotten-tomatoes").all()
    corpus = frame["text"].tolist()
    subset = corpus[:n]
    emb = load_embeddings("glove-6b-50d")
    mech = SanText(emb, epsilon=EPS).fit(corpus)  # output vocabulary: the corpus words
    words = mech.output_words
    t0 = time.perf_counter()
    out, st = mech.sanitize_with_stats(subset)
    t_textdp = time.perf_counter() - t0
    res = {"subset_documents": n, "textdp_tokens": st.tokens, "textdp_s": t_textdp,
           "textdp_tokens_per_s": st.tokens / t_textdp, "output_vocabulary": len(words)}
    try:
        import pandas as pd
        from src.SamplingPerturbationMechanism.santext import SanText as PSanText  # pypantera's layout
    except ImportError:
        res["pypantera"] = "not installed (pip install pypantera)"
        return res
    path = os.path.join(tmp, "rt-vocab.glove.txt")
    vec = np.asarray(emb.vectors[mech.output_rows])
    with open(path, "w", encoding="utf-8") as fh:
        for w_, v in zip(words, vec):
            fh.write(w_ + " " + " ".join(f"{x:.6f}" for x in v) + "\n")
    p = PSanText({"embPath": path, "epsilon": EPS})
    data = pd.DataFrame({"id": range(n), "text": subset})
    p_tokens = int(sum(len(t.lower().split()) for t in subset))
    t0 = time.perf_counter()
    p.obfuscateText(data, 1)
    t_p = time.perf_counter() - t0
    res.update({"pypantera_tokens": p_tokens, "pypantera_s": t_p, "pypantera_tokens_per_s": p_tokens / t_p,
                "pypantera_vocabulary": int(p.embMatrix.shape[0]),
                "speedup_tokens_per_s": (st.tokens / t_textdp) / (p_tokens / t_p)})
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="compare on 100 reviews instead of 500")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--arg", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.stage == "corpus":
        print(json.dumps(stage_corpus(a.arg)))
        return
    if a.stage == "full":
        print(json.dumps(stage_full(int(a.arg))))
        return
    n = 100 if a.quick else 500
    print(f"textdp sanitize benchmark: SanText, eps={EPS}, GloVe 6B 50d, built-in rotten-tomatoes; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        c = _child("corpus", tmp)
        print(f"\n[1] textdp, whole corpus: {c['documents']:,} documents, {c['tokens']:,} tokens, "
              f"output vocabulary {c['output_vocabulary']:,}")
        print(f"    imports {c['imports_s']:.2f} s | load data+embeddings {c['load_s']:.2f} s | fit {c['fit_s']:.2f} s"
              f" | sanitize {c['sanitize_s']:.2f} s (sampling {c['sampling_s']:.2f} s = "
              f"{c['sampling_tokens_per_s']:,.0f} tokens/s) | write {c['write_s']:.2f} s")
        print(f"    end to end after imports: {c['end_to_end_after_imports_s']:.2f} s; peak RSS "
              f"{c['peak_rss_mb']:.0f} MB")
        f = _child("full", "200")
        print(f"\n[2] textdp, FULL GloVe output vocabulary ({f['output_vocabulary']:,} words): {f['documents']} "
              f"documents, {f['tokens']:,} tokens, {f['distinct_words']:,} distinct words in "
              f"{f['seconds']:.2f} s; peak RSS {f['peak_rss_mb']:.0f} MB")
        r = compare(n, tmp)
        print(f"\n[3] {n} reviews, same output vocabulary ({r['output_vocabulary']:,} corpus words):")
        print(f"    textdp    : {r['textdp_tokens']:,} tokens in {r['textdp_s']:.2f} s = "
              f"{r['textdp_tokens_per_s']:,.0f} tokens/s")
        if "pypantera_s" in r:
            print(f"    pypantera : {r['pypantera_tokens']:,} tokens in {r['pypantera_s']:.2f} s = "
                  f"{r['pypantera_tokens_per_s']:,.0f} tokens/s")
            print(f"    ratio (tokens/s, textdp / pypantera): {r['speedup_tokens_per_s']:,.0f}x")
        else:
            print(f"    pypantera : {r['pypantera']}")
    print("\nContext (not measured here): the official SanText code needed 64-93 s end to end and 5.5 GB peak "
          "for this corpus on this kind of machine (about 5-8k tokens/s while sampling).")


if __name__ == "__main__":
    main()
