"""Benchmark of `textdp attack invert`: Text Revealer (TR) vs VTG vs VMI on Rotten Tomatoes.

    python benchmarks/bench_attacks.py            # CPU preset, 3 seeds, 50 templates (100 texts/method/seed)
    python benchmarks/bench_attacks.py --quick    # 400 private / 1600 public texts, smaller models (busy CPUs)
    python benchmarks/bench_attacks.py --defence dpsgd
    python benchmarks/bench_attacks.py --tune       # issue 18: TR knobs selected on a public-data proxy target
    python benchmarks/bench_attacks.py --verdict --seeds 5 --out DIR   # issue 18: the verdict run
    python benchmarks/bench_attacks.py --verdict-combine DIR1 DIR2 ...  # one summary over per-seed runs

Prints what is compared, on what data, the one-off training times (models are
cached under $TEXTDP_CACHE afterwards), the attack time per method, the metrics
(mean ± std over seeds) and the TR/VTG and TR/VMI ratios, all from the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

#: where --tune writes its selection and --verdict reads it (tracked: the selection is part of the result)
TUNING_FILE = Path(__file__).with_name("attacks_tuning.json")


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


# =========================================================================== issue 18: tuning and verdict
def _models(cfg, *, tune: bool, log):
    """Data, (proxy) target, generator and scorer of the memorising setting (cached after the first run)."""
    from textdp.attacks.inversion import split_data
    from textdp.attacks.inversion.pipeline import prepare_generator, prepare_target
    from textdp.attacks.inversion.verdict import proxy_data

    data = split_data("rotten-tomatoes", cfg)
    t0 = time.perf_counter()
    out = {"data": data}
    if tune:
        out["proxy"] = proxy_data(data, cfg)
        out["target"], out["tinfo"] = prepare_target(out["proxy"], cfg)
    else:
        out["target"], out["tinfo"] = prepare_target(data, cfg)
    log(f"target ({'public proxy' if tune else 'memorising'}): {'cached' if out['tinfo']['cached'] else 'trained'} "
        f"in {time.perf_counter() - t0:.0f} s")
    t0 = time.perf_counter()
    # the generator reads only the public split (its cache key also hashes the private split)
    out["gen"], out["vocab"], out["ginfo"] = prepare_generator(data, out["target"], cfg)
    log(f"generator ({cfg.generator}) ready in {time.perf_counter() - t0:.0f} s")
    return out


def _templates(data, cfg):
    from textdp.attacks.inversion.templates import build_templates, template_labels

    tpl = build_templates(list(data.public["text"]), style=cfg.template_style, n_min=cfg.template_n_min,
                          n_max=cfg.template_n_max, min_freq=cfg.template_min_freq, n_templates=cfg.n_templates,
                          drop_contained=cfg.template_drop_contained, template_fraction=cfg.template_fraction,
                          adjective_source=cfg.adjective_source, labels=list(data.public["label"]))
    return tpl, template_labels(tpl, list(data.public["text"]), list(data.public["label"]))


def _lengths(data, clf, cfg):
    import numpy as np

    avg = int(round(float(np.mean([len(x) for x in clf.token_ids(list(data.private["text"]))]))))
    cap = cfg.gen_length_cap
    return (avg if cap is None else min(avg, cap)), avg


def _target_lines(tinfo) -> list[str]:
    lines = [f"target: train acc {tinfo['train_acc']:.3f}, held-out acc {tinfo['heldout_acc']:.3f}, "
             f"public acc {tinfo.get('public_acc', float('nan')):.3f}; dropout {tinfo.get('dropout')}, weight decay "
             f"{tinfo.get('weight_decay')}, {tinfo.get('canaries_inserted', 0)} canaries inserted; training "
             f"{tinfo.get('train_seconds', 'n/a')} s wall, {tinfo.get('cpu_seconds', float('nan')):.0f} s CPU, "
             f"{tinfo.get('steps')} steps"]
    if tinfo.get("memorisation"):
        lines.append("memorisation (reviews: private vs non-member): " + tinfo["memorisation"]["line"])
    if tinfo.get("canary_memorisation"):
        lines.append("memorisation (canaries: inserted vs reference): " + tinfo["canary_memorisation"]["line"])
    return lines


def _cfg(a):
    """The memorising preset, or with --smoke the tiny preset with 8 canaries (a plumbing check in a minute)."""
    from textdp.attacks.inversion import preset_config

    if a.smoke:
        return preset_config("tiny").with_overrides(canaries=8, canary_pool=8, canary_secret_len=2,
                                                    target_dropout=0.0, target_weight_decay=0.0, n_templates=3,
                                                    vmi_steps=3)
    return preset_config("memorising")


def _start(a):
    """A verdict/tuning run's start: torch's threads (--threads), a flushing printer, the clocks, the config."""
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    return (lambda s: print(s, flush=True)), time.perf_counter(), time.process_time(), _cfg(a)


def tune(a) -> int:
    """Issue 18 item 4: TR knobs on the public proxy; writes the selection to --tuning-file."""
    from textdp.attacks.inversion.verdict import TUNING_GRID, tune_on_public

    log, t0, c0, cfg = _start(a)
    M = _models(cfg, tune=True, log=log)
    proxy = M["proxy"]
    print(f"public proxy: {len(proxy.private)} public texts as members (+{len(proxy.canaries.inserted)} proxy "
          f"canaries, key {proxy.canaries.seed}), {len(proxy.nonmember)} other public texts as non-members; the "
          f"private split is not read")
    for line in _target_lines(M["tinfo"]):
        print("proxy " + line)
    tpl, tl = _templates(M["data"], cfg)
    tpl, tl = tpl[:a.tune_templates], tl[:a.tune_templates]
    gen_length, avg = _lengths(proxy, M["target"], cfg)
    sel = tune_on_public(proxy, M["target"], M["gen"], M["vocab"], cfg, tpl, tl,
                         gen_length=gen_length, vmi_length=avg, grid=TUNING_GRID, seeds=a.tune_seeds, log=log)
    sel["proxy_target"] = {k: M["tinfo"].get(k) for k in ("train_acc", "heldout_acc", "public_acc", "memorisation",
                                                         "canary_memorisation", "train_seconds", "cpu_seconds")}
    sel["generator"] = {k: M["ginfo"].get(k) for k in ("parameters", "vocab_size", "d_model", "layers",
                                                       "final_train_loss")}
    sel["wall_seconds"] = round(time.perf_counter() - t0, 1)
    sel["cpu_seconds"] = round(time.process_time() - c0, 1)
    Path(a.tuning_file).write_text(json.dumps(sel, indent=1, default=str) + "\n")
    b = sel["grid"][sel["selected_index"]]
    print(f"selected (configuration {sel['selected_index'] + 1} of {len(sel['grid'])}): {sel['selected']}; objective "
          f"{b['objective']:+.4f} vs VTG {sel['vtg']['objective']:+.4f}; PPL {b['ppl']:.1f} vs VTG "
          f"{sel['vtg']['ppl']:.1f}")
    print(f"wrote {a.tuning_file}; total {sel['wall_seconds']:.0f} s wall, {sel['cpu_seconds']:.0f} s CPU")
    return 0


def _pct(v, s=None, digits=2):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{100 * v:.{digits}f}" + ("" if s is None else f" ± {100 * s:.{digits}f}")


def _print_verdict(texts, canaries, metrics, controls) -> None:
    from textdp.attacks.inversion.verdict import verdict_line, verdict_summary

    summ = verdict_summary(texts, canaries, metrics)
    t = summ["table"]
    n_can = controls.get("canaries", {}).get("n_inserted", 0)
    print(f"seeds {sorted(set(metrics['seed']))}; per method and seed "
          f"{int(metrics['n_texts'].iloc[0])} review texts (+ canary-prefix texts for TR and VTG)")
    print("| method | seeds | per-text recovery % (non-member) | private-only hits per text (non-member) | "
          "RR private-only % (non-member) | RR vocab % (non-member) | canary recall % (reference) | "
          f"canaries recovered of {n_can} (reference) | Acc % (non-member evaluator) | PPL |")
    print("|" + "---|" * 10)
    for _, r in t.iterrows():
        print(f"| {r['method'].upper()} | {r['seeds']} | {_pct(r['rec'], r['rec_std'])} ({_pct(r['rec_nm'])}) | "
              f"{r['po']:.3f} ± {r['po_std']:.3f} ({r['po_nm']:.3f}) | "
              f"{_pct(r['rr_private_only'], r['rr_private_only_std'])} ({_pct(r['rr_private_only_nm'])}) | "
              f"{_pct(r['rr_vocab'], r['rr_vocab_std'])} ({_pct(r['rr_vocab_nm'])}) | "
              f"{_pct(r['can_recall'], r['can_recall_std'], 1)} ({_pct(r['can_ref_recall'], None, 1)}) | "
              f"{r['can_recovered']:.1f} ({r['can_ref_recovered']:.1f}) | "
              f"{_pct(r['ev'], r['ev_std'], 1)} ({_pct(r['ev_nm'], None, 1)}) | {r['ppl']:.1f} ± {r['ppl_std']:.1f} |")
    names = {"rec": "per-text recovery (members)", "rec_nm": "per-text recovery (non-members)",
             "rec_x": "per-text recovery, members minus non-members", "po": "private-only hits per text",
             "po_nm": "non-member-only hits per text (control)", "po_x": "private-only minus non-member-only hits",
             "ev": "evaluator accuracy", "ev_nm": "non-member evaluator accuracy",
             "nll_tok": "fluency: scorer NLL per word (nats; > 0 = TR less fluent)",
             "can_recall": "canary recall (inserted)", "can_ref_recall": "canary recall (reference, control)",
             "can_recovered": "canary recovered (inserted)", "can_ref_recovered": "canary recovered (reference)"}
    print("paired TR - VTG (same seed, label, template, sample; mean over templates or canaries, 95% Student-t "
          "interval over them):")
    g = summ["gaps"]
    for k, name in names.items():
        if k in g:
            x = g[k]
            scale = 1 if k in ("po", "po_nm", "po_x", "nll_tok") else 100
            unit = "" if scale == 1 else " points"
            print(f"  {name}: {scale * x['mean']:+.3f}{unit} (95% CI {scale * x['lo']:+.3f} to {scale * x['hi']:+.3f}; "
                  f"{x['n_pairs']} pairs, {x['n_clusters']} clusters)")
    mia = controls.get("memorisation") or {}
    cs = controls.get("search") or {}
    print("positive controls: " + (mia.get("line", "no memorisation report")))
    if cs:
        print(f"  white-box canary search ({cs['n_fillings']} fillings scored with the target's loss, top "
              f"{cs['texts'] // max(1, len(controls.get('labels', [1, 1])))} per label): recovered "
              f"{cs['inserted_recovered']} of {cs['inserted']} inserted canaries (chance {cs['chance_hits']:.2f}), "
              f"{cs['reference_recovered']} of {cs['reference']} reference canaries; median rank inserted "
              f"{cs['median_rank_inserted']:.0f} vs reference {cs['median_rank_reference']:.0f}; mean exposure "
              f"{cs['mean_exposure_inserted']:.2f} vs {cs['mean_exposure_reference']:.2f} bits (max "
              f"{cs['max_exposure_bits']:.0f})")
    print("VERDICT: " + verdict_line(g, mia.get("mia_auc"), cs.get("inserted_recovered"), cs.get("chance_hits")))


def verdict(a) -> int:
    """Issue 18 item 5: TR, VTG, VMI against the memorising target, every control in the same run."""
    import pandas as pd
    import torch

    from textdp.attacks.inversion.canaries import canary_search
    from textdp.attacks.inversion.verdict import Scorer, apply_tuning, attack_seed, canary_control, seed_metrics

    log, t0, c0, cfg = _start(a)
    sel = None
    if not a.no_tuning and Path(a.tuning_file).exists():
        sel = json.loads(Path(a.tuning_file).read_text())
        cfg = apply_tuning(cfg, sel["selected"])
    if a.templates:
        cfg = cfg.with_overrides(n_templates=a.templates)
    M = _models(cfg, tune=False, log=log)
    data, clf = M["data"], M["target"]
    print(f"verdict run: TR vs VTG vs VMI against the memorising target; data {data.name}: {len(data.public)} public, "
          f"{len(data.private)} private reviews + {len(data.canaries.inserted)} canaries, {len(data.nonmember)} "
          f"non-member reviews, {len(data.canaries.reference)} reference canaries")
    print(f"TR knobs: {'public-proxy selection ' + str(sel['selected']) + ' from ' + str(a.tuning_file) if sel else 'cpu preset (no tuning file)'}"
          f" -> {cfg.pplm}")
    for line in _target_lines(M["tinfo"]):
        print(line)
    g = M["ginfo"]
    from textdp.attacks.inversion.fluency import SCORER_NAME

    print(f"generator {cfg.generator}: {g.get('parameters', 0):,} params, d={g.get('d_model')}, {g.get('layers')} "
          f"layers, vocab {g.get('vocab_size')}, final loss {g.get('final_train_loss', float('nan')):.2f}; fluency "
          f"scorer: {SCORER_NAME} (shares nothing with the generators)")
    tpl, tl = _templates(data, cfg)
    gen_length, avg = _lengths(data, clf, cfg)
    sc = Scorer(data)
    ref_ppl = sc.reference_ppl()
    print(f"templates {len(tpl)}; generated length {gen_length}; evaluator (TF-IDF + LR on private): "
          f"private acc {sc.ev_info['private_acc']:.3f}, held-out {sc.ev_info['heldout_acc']:.3f}; scorer PPL of the "
          f"real texts: private {ref_ppl['private']:.1f}, non-member {ref_ppl['nonmember']:.1f}")
    tc = time.process_time()
    search = canary_search(clf, data.canaries, max_len=cfg.max_len)
    controls = {"memorisation": M["tinfo"].get("memorisation"), "canary_memorisation": M["tinfo"].get("canary_memorisation"),
                "search": canary_control(search, data.canaries), "labels": list(data.labels),
                "canaries": {"n_inserted": len(data.canaries.inserted), "pool": list(data.canaries.pool),
                             "secret_len": data.canaries.secret_len, "seed": data.canaries.seed},
                "reference_ppl": ref_ppl, "tuning": sel and {"selected": sel["selected"], "file": str(a.tuning_file)},
                "pplm": dict(cfg.pplm.__dict__), "templates": len(tpl), "target": {k: M["tinfo"].get(k) for k in (
                    "train_acc", "heldout_acc", "public_acc", "train_seconds", "cpu_seconds", "steps")}}
    cs = controls["search"]
    print(f"white-box canary search: {time.process_time() - tc:.0f} s CPU; recovered {cs['inserted_recovered']} of "
          f"{cs['inserted']} inserted (chance {cs['chance_hits']:.2f}), {cs['reference_recovered']} reference")
    seeds = list(range(a.seed_start, a.seed_start + a.seeds))
    texts, cans, timing = [], [], []
    for s in seeds:
        for m in ("tr", "vtg", "vmi"):
            t, c, tm = attack_seed(m, clf=clf, generator=M["gen"], vocab=M["vocab"], data=data, cfg=cfg, templates=tpl,
                                   template_label=tl, seed=s, gen_length=gen_length, vmi_length=avg, sc=sc)
            texts.append(t)
            cans.append(c)
            timing.append({"method": m, "seed": s, **tm})
            log(f"seed {s} {m.upper()}: {tm['seconds']:.0f} s wall, {tm['cpu_seconds']:.0f} s CPU")
    texts, cans = pd.concat(texts, ignore_index=True), pd.concat(cans, ignore_index=True)
    met = seed_metrics(texts, cans, sc).merge(pd.DataFrame(timing), on=["method", "seed"])
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        texts.to_csv(out / "texts.csv", index=False)
        cans.to_csv(out / "canaries.csv", index=False)
        met.to_csv(out / "metrics.csv", index=False)
        (out / "controls.json").write_text(json.dumps(controls, indent=1, default=str) + "\n")
    print()
    _print_verdict(texts, cans, met, controls)
    print("attack seconds per seed (mean): " + ", ".join(
        f"{m.upper()} {g['seconds'].mean():.0f} s wall / {g['cpu_seconds'].mean():.0f} s CPU"
        for m, g in met.groupby("method", sort=False)))
    print(f"total {time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU (torch threads "
          f"{torch.get_num_threads()})")
    return 0


def verdict_combine(dirs) -> int:
    import pandas as pd

    texts = pd.concat([pd.read_csv(Path(d) / "texts.csv", keep_default_na=False, na_values=[""]) for d in dirs],
                      ignore_index=True)
    texts["text"] = texts["text"].fillna("").astype(str)
    texts["template"] = texts["template"].fillna("").astype(str)
    cans = pd.concat([pd.read_csv(Path(d) / "canaries.csv") for d in dirs], ignore_index=True)
    met = pd.concat([pd.read_csv(Path(d) / "metrics.csv") for d in dirs], ignore_index=True)
    controls = json.loads((Path(dirs[0]) / "controls.json").read_text())
    print(f"combined {len(dirs)} verdict runs: {', '.join(map(str, dirs))}")
    _print_verdict(texts, cans, met.drop(columns=["seconds", "cpu_seconds"], errors="ignore"), controls)
    print("attack seconds per seed (mean): " + ", ".join(
        f"{m.upper()} {g['seconds'].mean():.0f} s wall / {g['cpu_seconds'].mean():.0f} s CPU"
        for m, g in met.groupby("method", sort=False)))
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
    ap.add_argument("--tune", action="store_true",
                    help="issue 18 item 4: select TR's knobs (grid of 12) on a public-data proxy target; writes "
                         "--tuning-file")
    ap.add_argument("--tune-templates", type=int, default=10, help="review templates per tuning configuration")
    ap.add_argument("--tune-seeds", type=int, nargs="+", default=[101], help="attack seeds of the tuning")
    ap.add_argument("--verdict", action="store_true",
                    help="issue 18 item 5: TR, VTG and VMI against the memorising target with canaries, the "
                         "non-member controls, the paired TR - VTG gaps and the positive controls")
    ap.add_argument("--tuning-file", default=str(TUNING_FILE), help="the --tune selection (read by --verdict)")
    ap.add_argument("--no-tuning", action="store_true", help="--verdict with the cpu preset's TR knobs")
    ap.add_argument("--templates", type=int, default=None, help="--verdict: review templates (default: preset's 50)")
    ap.add_argument("--out", default=None, help="--verdict: write texts/canaries/metrics CSVs and controls.json here")
    ap.add_argument("--smoke", action="store_true",
                    help="--tune/--verdict on the tiny preset with 8 canaries (plumbing check; numbers mean nothing)")
    ap.add_argument("--verdict-combine", nargs="+", default=None, metavar="DIR",
                    help="one verdict summary over the --out folders of several --verdict runs (e.g. one per seed)")
    a = ap.parse_args(argv)
    if a.combine:
        return _combine(a.combine)
    if a.verdict_combine:
        return verdict_combine(a.verdict_combine)
    if a.tune:
        return tune(a)
    if a.verdict:
        return verdict(a)

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
