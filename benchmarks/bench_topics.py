"""Benchmark of textdp's collapsed Gibbs sampler against `lda` and tomotopy, and the cost of the DP variants.

Data: 20 Newsgroups train split (built-in `20newsgroups`), lower-cased, letters-only tokens, English stop words
and words with fewer than 5 occurrences removed (textdp.topics.Corpus.from_texts); perplexity on the test split
(same vocabulary), all models scored by textdp's fold-in protocol (50 sweeps, 10 burn-in, α = 0.1).
Setting: K = 20, α = 0.1, β = 0.01, 200 iterations, single thread (tomotopy: workers=1, ParallelScheme.NONE,
no hyperparameter optimisation; lda: log-likelihood only at the end).

DP cost: seconds per sweep on the same corpus for the non-private kernel, HDP-LDA's step (sweep with the fixed
noisy view + a discrete-Laplace release of the (V, K) counts every sweep, or every 5 sweeps) and OLP-LDA's asymmetric-prior kernel; LP-LDA runs
the non-private kernel on its reconstructed corpus, so its per-token cost is reported with its one-off
randomized-response encoding.

Usage: python benchmarks/bench_topics.py [--quick] [--iterations N] [--test-docs N]
  --quick: 30 iterations and 2000 test documents (for a busy machine); the full run is the default.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--test-docs", type=int, default=None)
    a = ap.parse_args()
    iters = a.iterations or (30 if a.quick else 200)
    n_test = a.test_docs or (2000 if a.quick else None)
    K, alpha, beta = 20, 0.1, 0.01

    from textdp.data.datasets import load_dataset
    from textdp.noise import make_rng
    from textdp.topics import HDPLDA, LDA, LPLDA, Corpus, perplexity
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
    print(f"K = {K}, alpha = {alpha}, beta = {beta}, {iters} iterations, single thread"
          + ("  [--quick]" if a.quick else ""))

    # warm up numba (compilation is cached, but keep it out of the timing in any case)
    LDA(K, alpha, beta, 1, seed=0, ll_every=0).fit(train.subset(range(50)))

    rows = []
    t0 = time.perf_counter()
    ours = LDA(K, alpha, beta, iters, seed=0, ll_every=0).fit(train)
    t_ours = time.perf_counter() - t0
    rows.append(("textdp", t_ours, ours.topic_word))

    try:
        import lda as lda_pkg
        from scipy import sparse

        logging.getLogger("lda").setLevel(logging.WARNING)
        X = sparse.csr_matrix((np.ones(N, np.int64), (train.doc_ids, train.word_ids)),
                              shape=(train.n_docs, train.n_words))
        t0 = time.perf_counter()
        m = lda_pkg.LDA(K, n_iter=iters, alpha=alpha, eta=beta, random_state=0, refresh=iters).fit(X)
        rows.append(("lda " + lda_pkg.__version__, time.perf_counter() - t0, m.topic_word_))
    except ImportError:
        print("lda not installed (pip install lda): skipped")

    try:
        import tomotopy as tp

        mdl = tp.LDAModel(k=K, alpha=alpha, eta=beta, seed=0)
        mdl.optim_interval = 0
        voc = train.vocabulary
        for d in train.documents():
            mdl.add_doc([voc[i] for i in d])
        t0 = time.perf_counter()
        mdl.train(iters, workers=1, parallel=tp.ParallelScheme.NONE)
        t_tp = time.perf_counter() - t0
        idx = {w: i for i, w in enumerate(voc)}
        phi = np.zeros((K, len(voc)))
        cols = [idx[w] for w in mdl.used_vocabs]
        for k in range(K):
            phi[k, cols] = mdl.get_topic_word_dist(k)
        rows.append(("tomotopy " + tp.__version__, t_tp, phi))
    except ImportError:
        print("tomotopy not installed (pip install tomotopy): skipped")

    print("\nNon-private collapsed Gibbs sampling (same corpus, same run of this script)")
    print(f"{'library':<18}{'seconds':>10}{'tokens/s':>14}{'perplexity':>12}")
    ppl = {}
    for name, secs, phi in rows:
        p = perplexity(phi, test, alpha, rng=0)
        ppl[name] = p
        print(f"{name:<18}{secs:>10.1f}{N * iters / secs:>14,.0f}{p:>12.1f}")
    base = rows[0]
    for name, secs, _ in rows[1:]:
        print(f"textdp / {name}: speed x{secs / base[1]:.2f}, perplexity ratio {ppl[base[0]] / ppl[name]:.3f}")

    # --- cost of the DP variants per sweep on the same corpus ---------------------------------------------------
    reps = max(3, min(10, iters // 10))
    st = GibbsState(train, K, alpha, beta, make_rng(1))

    def time_it(fn):
        fn()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t) / reps

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
    print(f"\nCost per sweep ({reps} sweeps each, after one warm-up)")
    print(f"{'sampler':<44}{'s/sweep':>9}{'ns/token':>10}{'x non-private':>15}")
    for name, t, n in (("non-private (symmetric prior)", t_plain, N),
                       ("HDP-LDA, release every sweep", t_hdp, N),
                       (f"HDP-LDA, release every {spr} sweeps", t_hdp5, N),
                       ("OLP-LDA (asymmetric prior beta^l)", t_olp, N),
                       (f"LP-LDA CGS on reconstructed corpus ({rc.n_tokens} tok)", t_lp, rc.n_tokens)):
        print(f"{name:<44}{t:>9.3f}{t / n * 1e9:>10.1f}{(t / n) / per_tok:>15.2f}")
    print(f"LP/OLP one-off randomized response + reconstruction (f = 0.2, {train.n_docs} x {train.n_words} bits): "
          f"{t_enc:.1f} s")


if __name__ == "__main__":
    main()
