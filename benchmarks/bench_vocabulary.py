"""Benchmark: how large should the sanitizers' PUBLIC output vocabulary be? (issue 12, item 2)

    python benchmarks/bench_vocabulary.py                      # the full curve (~15 min of CPU; 40+ min wall
                                                               # on the shared 2-core machine at load 7-9)
    python benchmarks/bench_vocabulary.py --quick              # 5k/30k/corpus, eps 3, 1,000 snippets
    python benchmarks/bench_vocabulary.py --epsilons 3 --sizes 10000,30000 --output /tmp/vocab

The public vocabulary of size N is the first N words of the GloVe 6B table in its own order (GloVe's
file is sorted by frequency in its public training corpus, Wikipedia + Gigaword), passed as
``output_vocabulary=emb.words[:N]``; ``full`` is the whole table (400k words). The reference row is the
old default, the corpus's own words (``output_vocabulary="corpus"``, fitted on the whole corpus), which
is NOT data-independent. Data: the whole built-in Rotten Tomatoes corpus (train + test snippets,
sanitized in one call, as ``textdp sanitize`` would). Measured per (mechanism, epsilon, vocabulary):

* utility: TF-IDF + logistic regression (``textdp.evaluate.utility``) trained on the sanitized train
  split, accuracy on the clean test split and on the sanitized test split;
* Bayes optimum: the informed attacker's exact expected top-1 success ``sum_y max_x pi(x) p(y|x)``,
  ``pi`` the true token distribution of the sanitized text (tokens with an embedding; each is an input
  of the mechanism whether or not it is an output word), ``p`` from ``mech.probabilities`` (the exact
  law the float-safe sampler draws from), computed in row blocks; with it the expected share of those
  tokens that come back unchanged, ``sum_x pi(x) p(x|x)``;
* OOV share: corpus tokens that are not output words (they are still sanitized, but can never come
  back as themselves) and tokens with no embedding at all (replaced uniformly, policy ``uniform``);
* speed: CPU seconds (``time.process_time``, all threads) of sanitizing the whole corpus, after a
  warm-up call on a few snippets (numba start-up and the distance kernel are not timed).

SanText at each epsilon; SanText+ (defaults w=0.9, p=0.3) at ``--plus-epsilons``. For the public
vocabularies SanText+ is not fitted, so its sensitive set is the rarest 90 % of the N words in the
table's order (public frequencies); the corpus row keeps the old corpus counts. A fixed seed: a
research run, not a release. Results are appended to OUTPUT/vocabulary-curve.json as they come
(``--resume`` reuses them); the table goes to stdout and the plot to OUTPUT/vocabulary-curve.png.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

FULL = 400_000
DEFAULT_SIZES = "5000,10000,20000,30000,50000,100000,full"


def _parse_sizes(s: str) -> list:
    out = []
    for part in s.split(","):
        part = part.strip().lower()
        if not part:
            continue
        if part in ("full", "corpus"):
            out.append(part)
        else:
            out.append(int(float(part.replace("k", "e3"))))
    return out


def _label(v) -> str:
    if v == "corpus":
        return "corpus"
    if v == "full":
        return "full"
    return f"{v // 1000}k" if v % 1000 == 0 else str(v)


def _tokens(texts) -> list[str]:
    from textdp.data.tokenize import WordTokenizer

    split = WordTokenizer.split
    return list(itertools.chain.from_iterable(split(t)[1::2] for t in texts))


def bayes_optimum(mech, rows: np.ndarray, weights: np.ndarray, block_entries: int, threads: int) -> dict:
    """Exact ``sum_y max_x pi(x) p(y|x)`` and ``sum_x pi(x) p(x|x)`` over the distinct input rows
    ``rows`` with probabilities ``weights`` (sum 1), from ``mech.probabilities`` in row blocks of at most
    ``block_entries`` float64 entries (``threads`` blocks at a time)."""
    out_words = mech.output_words
    v = len(out_words)
    col = {w: j for j, w in enumerate(out_words)}
    emb_words = mech.embeddings.words
    self_col = np.array([col.get(emb_words[r], -1) for r in rows.tolist()], dtype=np.int64)
    b = max(1, min(len(rows), block_entries // max(1, v)))
    blocks = [(s, min(len(rows), s + b)) for s in range(0, len(rows), b)]

    def run(i):
        s, e = blocks[i]
        p = mech.probabilities(rows[s:e])
        if p.shape != (e - s, v):
            raise RuntimeError(f"probabilities returned {p.shape}, expected {(e - s, v)}")
        sc = self_col[s:e]
        ok = sc >= 0
        kept = float((weights[s:e][ok] * p[np.flatnonzero(ok), sc[ok]]).sum())
        p *= weights[s:e, None]
        return p.max(axis=0), kept

    best = np.zeros(v)
    kept = 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    if threads > 1 and len(blocks) > 1:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for m, k in pool.map(run, range(len(blocks))):
                np.maximum(best, m, out=best)
                kept += k
    else:
        for i in range(len(blocks)):
            m, k = run(i)
            np.maximum(best, m, out=best)
            kept += k
    return {"bayes_optimum": float(best.sum()), "expected_unchanged": kept,
            "bayes_cpu_s": time.process_time() - c0, "bayes_wall_s": time.perf_counter() - t0}


def run_one(mech_name: str, eps: float, vocab, ctx: dict, args) -> dict:
    from textdp.evaluate.utility import evaluate_utility, make_model
    from textdp.sanitize import SanText, SanTextPlus

    emb, texts, n_train = ctx["emb"], ctx["texts"], ctx["n_train"]
    cls = SanText if mech_name == "santext" else SanTextPlus
    kw = {} if mech_name == "santext" else {"w": args.w, "p": args.p}
    if vocab == "corpus" or vocab == "full":
        ov = vocab
    else:
        ov = emb.words[:vocab]
    row = {"mechanism": mech_name, "epsilon": eps, "vocabulary": _label(vocab), "seed": args.seed}
    if kw:
        row.update(kw)
    mech = cls(emb, epsilon=eps, output_vocabulary=ov, rng=args.seed, **kw)
    c0 = time.process_time()
    if vocab == "corpus":
        mech.fit(texts)  # the old default: the corpus's own words (and, for SanText+, corpus counts)
    row["fit_cpu_s"] = time.process_time() - c0
    out_words = mech.output_words
    row["output_words"] = len(out_words)
    if mech_name == "santext+":
        try:
            row["sensitive_words"] = len(mech.sensitive_words)
        except Exception:  # noqa: BLE001 - informative only
            pass
    # OOV shares (over all corpus tokens)
    out_set = set(out_words)
    tok_rows = ctx["tok_rows"]
    emb_words = emb.words
    in_emb = tok_rows >= 0
    distinct = ctx["distinct_rows"]
    distinct_out = np.fromiter((emb_words[r] in out_set for r in distinct.tolist()), dtype=bool, count=len(distinct))
    row["oov_output_share"] = float(1.0 - ctx["distinct_counts"][distinct_out].sum() / len(tok_rows))
    row["no_embedding_share"] = float((~in_emb).mean())
    row["distinct_not_output"] = int((~distinct_out).sum())
    # speed: warm-up call, then the whole corpus
    mech.sanitize(texts[: args.warmup_docs])
    c0, t0 = time.process_time(), time.perf_counter()
    sanitized = mech.sanitize(texts)
    row["sanitize_cpu_s"] = time.process_time() - c0
    row["sanitize_wall_s"] = time.perf_counter() - t0
    st = getattr(mech, "last_stats", None)
    if st is not None and getattr(st, "tokens", 0):
        row["observed_unchanged"] = 1.0 - st.changed_tokens / st.tokens  # over all tokens (OOV count as changed)
    # utility (textdp.evaluate.utility)
    c0 = time.process_time()
    res = evaluate_utility(make_model("tfidf"), sanitized[:n_train], ctx["train_labels"], sanitized[n_train:],
                           ctx["test_clean"], ctx["test_labels"])
    row["utility_clean_test"] = res.utility_clean
    row["utility_sanitized_test"] = res.utility_sanitized
    row["utility_cpu_s"] = time.process_time() - c0
    # Bayes optimum
    size = len(out_words)
    if args.bayes_max_size and size > args.bayes_max_size:
        row["bayes_skipped"] = f"output vocabulary {size:,} > --bayes-max-size {args.bayes_max_size:,}"
    else:
        row.update(bayes_optimum(mech, distinct, ctx["distinct_counts"] / ctx["distinct_counts"].sum(),
                                 args.block_entries, args.threads))
    return row


def _fmt(v, f="{:.3f}"):
    return "—" if v is None or (isinstance(v, float) and np.isnan(v)) else f.format(v)


def table(rows: list[dict], baseline: dict | None) -> str:
    head = (f"{'mechanism':<10} {'eps':>4} {'vocab':>7} {'|V_out|':>8} {'OOV-out':>8} {'no-emb':>7} "
            f"{'acc clean':>9} {'acc san':>8} {'Bayes opt':>9} {'unchanged':>9} {'CPU s':>7} {'wall s':>7}")
    lines = [head, "-" * len(head)]
    prev = None
    for r in rows:
        key = (r["mechanism"], r["epsilon"])
        if prev is not None and key != prev:
            lines.append("")
        prev = key
        lines.append(
            f"{r['mechanism']:<10} {r['epsilon']:>4g} {r['vocabulary']:>7} {r['output_words']:>8,} "
            f"{_fmt(r['oov_output_share'] * 100, '{:.1f}%'):>8} {_fmt(r['no_embedding_share'] * 100, '{:.1f}%'):>7} "
            f"{_fmt(r.get('utility_clean_test')):>9} {_fmt(r.get('utility_sanitized_test')):>8} "
            f"{_fmt(r.get('bayes_optimum')):>9} {_fmt(r.get('expected_unchanged')):>9} "
            f"{_fmt(r.get('sanitize_cpu_s'), '{:.2f}'):>7} {_fmt(r.get('sanitize_wall_s'), '{:.2f}'):>7}")
    if baseline:
        lines.append("")
        lines.append(f"no sanitization: acc clean {baseline['utility_clean_test']:.3f}"
                     + (f"; majority class {baseline['majority_class']:.3f}" if baseline.get("majority_class") else ""))
    return "\n".join(lines)


def plot(rows: list[dict], path: str, baseline: dict | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    (a_u, a_b), (a_o, a_t) = axes
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["mechanism"], r["epsilon"]), []).append(r)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((mech, eps), rs) in enumerate(sorted(groups.items())):
        c = colors[i % len(colors)]
        name = ("SanText" if mech == "santext" else "SanText+") + f" ε={eps:g}"
        ls = "-" if mech == "santext" else "--"
        pub = sorted((r for r in rs if r["vocabulary"] != "corpus"), key=lambda r: r["output_words"])
        ref = [r for r in rs if r["vocabulary"] == "corpus"]
        x = [r["output_words"] for r in pub]

        def line(ax, key, label=name, style=ls, marker="o", **kw):
            pts = [(xx, r.get(key)) for xx, r in zip(x, pub) if r.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), style, marker=marker, color=c, label=label, **kw)
            for r in ref:
                if r.get(key) is not None:
                    ax.scatter([r["output_words"]], [r[key]], marker="*", s=140, color=c, edgecolor="k",
                               zorder=5)

        line(a_u, "utility_clean_test")
        line(a_b, "bayes_optimum")
        line(a_t, "sanitize_cpu_s")
        if i == 0:
            pts = [(xx, r["oov_output_share"] * 100) for xx, r in zip(x, pub)]
            a_o.plot(*zip(*pts), "-o", color="k", label="tokens not in the output vocabulary")
            for r in ref:
                a_o.scatter([r["output_words"]], [r["oov_output_share"] * 100], marker="*", s=140, color="k",
                            zorder=5)
            a_o.axhline(pub[0]["no_embedding_share"] * 100 if pub else 0, color="grey", ls=":",
                        label="tokens with no embedding")
    if baseline:
        a_u.axhline(baseline["utility_clean_test"], color="grey", ls=":", label="no sanitization")
        if baseline.get("majority_class"):
            a_u.axhline(baseline["majority_class"], color="grey", ls="--", label="majority class")
    a_u.set_title("utility: TF-IDF+LR, sanitized train → clean test (accuracy)")
    a_b.set_title("informed attacker's exact top-1 (Bayes optimum)")
    a_o.set_title("corpus tokens outside the output vocabulary (%)")
    a_t.set_title("CPU seconds to sanitize the whole corpus")
    a_t.axhline(8, color="r", ls=":", label="issue budget 8 s")
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.set_xlabel("output vocabulary size N (first N GloVe words; ★ = corpus vocabulary)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    a_t.set_yscale("log")
    a_o.set_yscale("log")
    fig.suptitle("Rotten Tomatoes (whole corpus), GloVe 6B 50d: public output vocabulary size vs utility, "
                 "privacy, OOV, speed", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilons", default="1,3,8", help="SanText epsilons (comma-separated)")
    ap.add_argument("--plus-epsilons", default="3", help="SanText+ epsilons ('' for none)")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="output vocabulary sizes: numbers, 'full' (400k)")
    ap.add_argument("--no-corpus", action="store_true", help="skip the corpus-vocabulary reference row")
    ap.add_argument("--output", default="benchmarks/results/vocabulary", help="folder for the JSON and the PNG")
    ap.add_argument("--docs", type=int, default=0, help="use only the first N train and N/4 test snippets (0 = all)")
    ap.add_argument("--seed", type=int, default=20240612)
    ap.add_argument("--w", type=float, default=0.9)
    ap.add_argument("--p", type=float, default=0.3)
    ap.add_argument("--bayes-max-size", type=int, default=100_000,
                    help="skip the Bayes optimum above this output vocabulary size (0 = never skip)")
    ap.add_argument("--block-entries", type=int, default=16_000_000, help="float64 entries per probability block")
    ap.add_argument("--threads", type=int, default=2, help="probability blocks computed at once")
    ap.add_argument("--warmup-docs", type=int, default=50)
    ap.add_argument("--resume", action="store_true", help="reuse (and keep) rows already in OUTPUT/vocabulary-curve.json "
                    "(same seed and --docs)")
    ap.add_argument("--quick", action="store_true", help="= --epsilons 3 --plus-epsilons '' --sizes 5000,30000 --docs 1000")
    args = ap.parse_args(argv)
    if args.quick:
        args.epsilons, args.plus_epsilons, args.sizes, args.docs = "3", "", "5000,30000", 1000
    eps_list = [float(e) for e in args.epsilons.split(",") if e.strip()]
    plus_list = [float(e) for e in args.plus_epsilons.split(",") if e.strip()]
    sizes = _parse_sizes(args.sizes)
    if not args.no_corpus and "corpus" not in sizes:
        sizes.append("corpus")
    os.makedirs(args.output, exist_ok=True)
    json_path = os.path.join(args.output, "vocabulary-curve.json")
    png_path = os.path.join(args.output, "vocabulary-curve.png")

    from textdp.data.datasets import load_dataset
    from textdp.embeddings import load_embeddings
    from textdp.evaluate.utility import evaluate_utility, make_model

    ds = load_dataset("rotten-tomatoes")
    train, test = ds.train, ds.test
    if args.docs:
        train, test = train.head(args.docs), test.head(max(1, args.docs // 4))
    tc, lc = ds.text_column, ds.label_column
    emb = load_embeddings("glove-6b-50d")
    texts = train[tc].astype(str).tolist() + test[tc].astype(str).tolist()
    toks = _tokens(texts)
    index = emb.index
    tok_rows = np.fromiter((index.get(t.lower(), -1) for t in toks), dtype=np.int64, count=len(toks))
    distinct, counts = np.unique(tok_rows[tok_rows >= 0], return_counts=True)
    ctx = {"emb": emb, "texts": texts, "n_train": len(train), "train_labels": train[lc].tolist(),
           "test_labels": test[lc].tolist(), "test_clean": test[tc].astype(str).tolist(), "tok_rows": tok_rows,
           "distinct_rows": distinct, "distinct_counts": counts.astype(np.float64)}
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"textdp output-vocabulary benchmark: built-in rotten-tomatoes ({len(train):,} train + {len(test):,} test "
          f"snippets, {len(toks):,} tokens, {len(distinct):,} distinct words with an embedding), GloVe 6B 50d; "
          f"seed {args.seed} (research run); {os.cpu_count()} CPUs, load average {load1:.1f} at start; "
          f"python {platform.python_version()}", flush=True)

    done: dict = {}
    baseline = None
    if args.resume and os.path.exists(json_path):
        with open(json_path) as fh:
            old = json.load(fh)
        if old.get("docs") == args.docs:
            baseline = old.get("baseline")
            for r in old.get("rows", []):
                if r.get("seed") == args.seed:
                    done[(r["mechanism"], r["epsilon"], r["vocabulary"], r["seed"], args.docs)] = r
    if baseline is None:
        c0 = time.process_time()
        base = evaluate_utility(make_model("tfidf"), ctx["texts"][: ctx["n_train"]], ctx["train_labels"],
                                ctx["test_clean"], ctx["test_clean"], ctx["test_labels"])
        baseline = {"utility_clean_test": base.utility_clean, "cpu_s": time.process_time() - c0}
    labels = list(ctx["test_labels"])
    baseline["majority_class"] = max(labels.count(l) for l in set(labels)) / len(labels)
    print(f"no sanitization: TF-IDF+LR accuracy {baseline['utility_clean_test']:.3f} "
          f"({baseline['cpu_s']:.1f} s CPU per fit+test); majority class {baseline['majority_class']:.3f}",
          flush=True)

    configs = [("santext", e, v) for e in eps_list for v in sizes]
    configs += [("santext+", e, v) for e in plus_list for v in sizes]
    rows: list[dict] = []
    t_start = time.perf_counter()

    def save():
        with open(json_path + ".tmp", "w") as fh:
            json.dump({"docs": args.docs, "baseline": baseline, "rows": rows + list(done.values())}, fh, indent=1)
        os.replace(json_path + ".tmp", json_path)

    for mech_name, eps, vocab in configs:
        key = (mech_name, eps, _label(vocab), args.seed, args.docs)
        if key in done:
            rows.append(done.pop(key))
            continue
        t0 = time.perf_counter()
        r = run_one(mech_name, eps, vocab, ctx, args)
        r["row_wall_s"] = time.perf_counter() - t0
        rows.append(r)
        save()
        print(f"  [{time.perf_counter() - t_start:6.0f} s] {mech_name} eps={eps:g} {_label(vocab)}: "
              f"acc {r['utility_clean_test']:.3f}/{r['utility_sanitized_test']:.3f}, "
              f"Bayes {_fmt(r.get('bayes_optimum'))}, sanitize {r['sanitize_cpu_s']:.2f} s CPU, "
              f"Bayes {_fmt(r.get('bayes_cpu_s'), '{:.0f}')} s CPU, row {r['row_wall_s']:.0f} s wall", flush=True)
    rows.extend(done.values())  # --resume: rows of earlier runs with other settings are kept
    done.clear()
    rows.sort(key=lambda r: (r["mechanism"], r["epsilon"], r["vocabulary"] == "corpus", r["output_words"]))
    save()
    print()
    print("OOV-out: corpus tokens that are not output words (still sanitized; never output as themselves); "
          "no-emb: tokens without a GloVe vector (replaced uniformly).")
    print("acc clean / acc san: TF-IDF+LR trained on sanitized train, accuracy on clean / sanitized test. "
          "Bayes opt: exact informed top-1 sum_y max_x pi(x)p(y|x); unchanged: sum_x pi(x)p(x|x) "
          "(tokens with an embedding). CPU s / wall s: sanitize the whole corpus after a warm-up call.")
    print()
    print(table(rows, baseline))
    skipped = [r for r in rows if r.get("bayes_skipped")]
    if skipped:
        print(f"\nBayes optimum not computed for {len(skipped)} row(s): {skipped[0]['bayes_skipped']} "
              "(cost ~ distinct words x output words).")
    plot(rows, png_path, baseline)
    load2 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nwrote {json_path} and {png_path}; total {time.perf_counter() - t_start:.0f} s wall, "
          f"load average {load2:.1f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
