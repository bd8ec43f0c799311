"""Benchmark of `textdp attack invert`: Text Revealer (TR) vs VTG vs VMI on Rotten Tomatoes.

    python benchmarks/bench_attacks.py            # CPU preset, 3 seeds, 50 templates (100 texts/method/seed)
    python benchmarks/bench_attacks.py --quick    # 400 private / 1600 public texts, smaller models (busy CPUs)
    python benchmarks/bench_attacks.py --defence dpsgd

Prints what is compared, on what data, the one-off training times (models are
cached under $TEXTDP_CACHE afterwards), the attack time per method, the metrics
(mean ± std over seeds) and the TR/VTG and TR/VMI ratios, all from the same run.
"""

from __future__ import annotations

import argparse
import sys
import time


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b > 1e-9 else "n/a (denominator 0)"


def _combine(paths) -> int:
    import pandas as pd

    from textdp.attacks.inversion.pipeline import _summarise, summary_markdown

    m = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    print(f"combined {len(paths)} runs: seeds {sorted(set(m['seed']))}")
    print(summary_markdown(_summarise(m)))
    s = m.groupby("method")
    print("attack seconds per seed (mean): wall " + ", ".join(f"{k.upper()} {v:.0f}" for k, v in s["seconds"].mean().items())
          + "; CPU " + ", ".join(f"{k.upper()} {v:.0f}" for k, v in s["attack_cpu_seconds"].mean().items()))
    g = _summarise(m).set_index(["defence", "method"])
    for other in ("vtg", "vmi"):
        if ("none", "tr") in g.index and ("none", other) in g.index:
            t, o = g.loc[("none", "tr")], g.loc[("none", other)]
            print(f"ratio TR/{other.upper()}: RR vocab {_ratio(t['rr_vocab'], o['rr_vocab'])}, RR matched "
                  f"{_ratio(t['rr_match'], o['rr_match'])}, RR private-only {_ratio(t['rr_private_only'], o['rr_private_only'])}, "
                  f"Acc {_ratio(t['att_acc'], o['att_acc'])}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smaller run: 400 private / 1600 public texts, MiniLM cut to 2 layers, a d=64 generator, "
                         "25 templates, 16 generated tokens")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--defence", default="none", choices=["none", "dpsgd", "santext"])
    ap.add_argument("--dataset", default="rotten-tomatoes")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--seed-start", type=int, default=0, help="first attack seed (seeds are seed-start, +1, ...)")
    ap.add_argument("--metrics-out", default=None, help="also write the per-seed metrics table (CSV) here")
    ap.add_argument("--combine", nargs="+", default=None, metavar="CSV",
                    help="only print mean ± std over the per-seed metrics CSVs of runs made with --metrics-out "
                         "(e.g. one process per seed on a busy machine)")
    a = ap.parse_args(argv)
    if a.combine:
        return _combine(a.combine)

    import torch

    from textdp.attacks.inversion import preset_config, run_inversion, summary_markdown

    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = preset_config("cpu")
    if a.quick:  # a smaller real-data run for a busy 2-core machine (see --help)
        cfg = cfg.with_overrides(max_private=400, max_public=1600, target_layers=2, target_epochs=6, target_lr=2e-4,
                                 gen_d_model=64, gen_layers=2, gen_epochs=3, gen_max_vocab=4000, gen_block=48,
                                 scorer_epochs=2, n_templates=25, gen_length_cap=16)
    from textdp.cli._common import progress

    t0, c0 = time.perf_counter(), time.process_time()
    with progress() as bar:
        def prog(desc, total):
            task = bar.add_task(desc, total=total)
            return lambda n=1: bar.advance(task, n)

        rep = run_inversion(a.dataset, preset=cfg, seeds=list(range(a.seed_start, a.seed_start + a.seeds)),
                            defence=a.defence, progress=prog,
                            log=lambda s: bar.console.print("  " + s, highlight=False, markup=False))
    wall = time.perf_counter() - t0
    c = rep.card
    print(f"textdp attack invert benchmark: TR vs VTG vs VMI, preset cpu{' --quick' if a.quick else ''}, "
          f"{a.seeds} seeds, defence {a.defence}")
    print(f"data: {c['dataset']} train split -> {c['sizes']['public']} public / {c['sizes']['private']} private "
          f"texts; non-member control {c['sizes']['nonmember']} held-out texts; labels {c['labels']}")
    print(f"templates: {len(c['templates'])} ({cfg.template_n_min}-{cfg.template_n_max}-grams, freq > "
          f"{cfg.template_min_freq}); generated length {c['gen_length']} WordPieces (mean private length "
          f"{c['avg_private_len_wordpieces']}); torch threads {torch.get_num_threads()}")
    for d, t in c["targets"].items():
        extra = f", epsilon {t['epsilon_spent']:.2f}" if d == "dpsgd" else ""
        print(f"target[{d}] {t['model']} layers={t.get('layers')}: train acc {t['train_acc']:.3f}, held-out acc "
              f"{t['heldout_acc']:.3f}, public acc {t['public_acc']:.3f}{extra}; training "
              f"{'cached' if t['cached'] else str(t['train_seconds']) + ' s'}")
    g = c["generator"]
    print(f"generator: {g['parameters']:,} params, vocab {g['vocab_size']}, final loss {g['final_train_loss']:.2f}; "
          f"training {'cached' if g['cached'] else str(g['train_seconds']) + ' s'}; fluency scorer: "
          f"{'cached' if c['fluency_scorer']['cached'] else str(c['fluency_scorer']['train_seconds']) + ' s'}")
    e = c["evaluator"]
    print(f"evaluator (TF-IDF + LR): private acc {e['private_acc']:.3f}, held-out acc {e['heldout_acc']:.3f}")
    k = c["kendall_public_vs_private"]
    print("Kendall top-k public vs private: " + ", ".join(f"{n} distance {v['distance']:.3f}" for n, v in k.items()))
    print("attack seconds per seed (mean, wall): " + ", ".join(f"{m.upper()} {s:.1f}" for m, s in c["attack_seconds"].items()))
    cpu = c.get("attack_cpu_seconds", {})
    print("attack CPU seconds per seed (mean, process_time over all threads): "
          + ", ".join(f"{m.upper()} {s:.1f}" for m, s in cpu.items()))
    print(f"attack part per seed, all methods: {sum(c['attack_seconds'].values()):.1f} s wall, "
          f"{sum(cpu.values()):.1f} s CPU (goal: < 300 s wall on 2 cores)")
    print()
    print(summary_markdown(rep.summary))
    if a.metrics_out:
        rep.metrics.assign(attack_cpu_seconds=[c["attack_cpu_seconds"].get(m, float("nan"))
                                               for m in rep.metrics["method"]]).to_csv(a.metrics_out, index=False)
    s = rep.summary[rep.summary["defence"] == "none"].set_index("method")
    for other in ("vtg", "vmi"):
        if "tr" in s.index and other in s.index:
            print(f"ratio TR/{other.upper()}: RR vocab {s.loc['tr', 'rr_vocab'] / s.loc[other, 'rr_vocab']:.3f}, "
                  f"RR private-only {_ratio(s.loc['tr', 'rr_private_only'], s.loc[other, 'rr_private_only'])}, "
                  f"Acc {_ratio(s.loc['tr', 'att_acc'], s.loc[other, 'att_acc'])}, attack time "
                  f"{c['attack_seconds']['tr'] / max(c['attack_seconds'][other], 1e-9):.1f}x")
    print(f"total wall time {wall:.0f} s, total CPU time {time.process_time() - c0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
