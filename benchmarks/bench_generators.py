"""Text Revealer's generators (issue 18 item 2) and the fluency scorer (item 3), measured on CPU.

  .venv/bin/python benchmarks/bench_generators.py --scratch            # scratch vs scratch-large
  .venv/bin/python benchmarks/bench_generators.py --gemma gemma --steps 8   # Gemma 3 270M + LoRA

Data: rotten-tomatoes, the attack's public/private split (``cpu`` preset); everything trained
here sees the PUBLIC split only; perplexities are measured on the first ``--heldout`` reviews of
the dataset's test split (never trained on).

Printed, for each generator:
* held-out perplexity per WORD: ``exp(total NLL / (words + one end-of-text per review))``, the
  words being the fluency scorer's (lowercased, BERT-style word/punctuation split), so that
  models with different tokenizers are on one scale (the from-scratch models read lowercased
  WordPieces -- the target's uncased vocabulary -- while Gemma reads the cased text: its task is
  harder); an out-of-vocabulary WordPiece of a from-scratch model costs
  ``log p([UNK]) - log(number of unseen WordPiece types)`` (the pipeline's former correction);
* perplexity per model token;
* fluency of its own samples: 40 VTG continuations (20 tokens, top-k 10, banned tokens never
  emitted) of the first two words of held-out reviews, scored by the public word 3-gram
  Kneser-Ney scorer (textdp.attacks.inversion.fluency), which shares nothing with any generator;
* training time (process CPU seconds and wall seconds; the machine is shared, see ``uptime``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _setup(heldout: int):
    from textdp.attacks.inversion.config import preset_config
    from textdp.attacks.inversion.fluency import NgramFluencyScorer
    from textdp.attacks.inversion.pipeline import split_data

    cfg = preset_config("cpu")
    data = split_data("rotten-tomatoes", cfg)
    held = list(data.heldout["text"].head(heldout))
    scorer = NgramFluencyScorer(list(data.public["text"]))
    prompts = [" ".join(t.split()[:2]) for t in held[:40]]
    return cfg, data, held, scorer, prompts


def _n_words(texts):
    from textdp.attacks.inversion.fluency import words

    return sum(len(words(t)) + 1 for t in texts)


def _scratch_ppl(model, vocab, clf, texts):
    from textdp.models.causal_lm import sequence_nll

    enc = vocab.encode(clf.token_ids(texts))
    nll, cnt = sequence_nll(model, enc, bos=vocab.bos, eos=vocab.eos)
    n_oov_types = max(1, len(clf.vocab_tokens) - len(vocab))
    n_unk = sum(sum(1 for g in row if g == vocab.unk) for row in enc)
    total = nll.sum() + n_unk * np.log(n_oov_types)
    return float(np.exp(total / _n_words(texts))), float(np.exp(total / cnt.sum())), n_unk / max(1, cnt.sum())


def _vtg_samples(model, prompt_ids, eos, banned, decode):
    """VTG continuations (20 tokens, top-k 10) of each prompt, rows of equal prompt length batched;
    row i sampled with seed 1000 + i."""
    import torch

    from textdp.attacks.inversion.pplm import PPLMConfig, generate

    cfg = PPLMConfig(gen_length=20, top_k=10)
    out = [""] * len(prompt_ids)
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(prompt_ids):
        groups.setdefault(len(ids), []).append(i)
    for idx in groups.values():
        res = generate(model, None, None, torch.tensor([prompt_ids[i] for i in idx]), None, cfg,
                       [1000 + i for i in idx], perturb=False, eos=eos, banned=banned)
        for i, row in zip(idx, res["ids"].tolist()):
            out[i] = decode(row)
    return out


def _scratch_samples(model, vocab, clf, prompts):
    ids = [[vocab.bos] + vocab.encode(clf.token_ids([p]))[0] for p in prompts]
    return _vtg_samples(model, ids, vocab.eos, [vocab.bos, vocab.unk], vocab.decode)


def run_scratch(args):
    from textdp.attacks.inversion.pipeline import SCRATCH_GENERATORS, prepare_generator
    from textdp.models.classifier import load_classifier
    from textdp.noise import make_rng

    cfg, data, held, scorer, prompts = _setup(args.heldout)
    # only the target's WordPiece tokenizer is needed: an untrained 3-layer MiniLM has the same one
    clf = load_classifier(cfg.target_model, data.labels, num_layers=cfg.target_layers, rng=make_rng(0))
    print(f"public texts: {len(data.public)}, held-out reviews: {len(held)} ({_n_words(held)} words + ends); "
          f"fluency scorer {scorer.name}: held-out reviews {scorer.perplexity(held):.1f}, "
          f"their words shuffled {scorer.perplexity([' '.join(np.random.default_rng(0).permutation(t.split())) for t in held]):.1f}")
    for name in ("scratch", "scratch-large"):
        c = dataclasses.replace(cfg, generator=name)
        w0, c0 = time.perf_counter(), _cpu()
        model, vocab, info = prepare_generator(data, clf, c, device="cpu")
        w1, c1 = time.perf_counter() - w0, _cpu() - c0
        ppl_w, ppl_t, unk = _scratch_ppl(model, vocab, clf, held)
        samples = _scratch_samples(model, vocab, clf, prompts)
        sizes = {**{"gen_d_model": cfg.gen_d_model, "gen_layers": cfg.gen_layers, "gen_heads": cfg.gen_heads,
                    "gen_epochs": cfg.gen_epochs, "gen_max_vocab": cfg.gen_max_vocab}, **SCRATCH_GENERATORS[name]}
        print(f"{name}: {sizes}, {info['parameters']:,} params, vocab {info['vocab_size']}; "
              f"training {'cached' if info.get('cached') else str(info['train_seconds']) + ' s'} "
              f"(this call: {w1:.0f} s wall, {c1:.0f} s CPU); held-out PPL per word {ppl_w:.1f}, per WordPiece "
              f"{ppl_t:.1f} ([UNK] {100 * unk:.2f} % of tokens); samples' fluency {scorer.perplexity(samples):.1f}")
        for s in samples[:3]:
            print(f"    {s}")


def run_gemma(args):
    import copy

    import torch

    from textdp.attacks.inversion.gpt2_generator import HFCausalLMAdapter, resolve_generator
    from textdp.models.finetune import FineTuneConfig, causal_lm_nll, finetune_causal_lm
    from textdp.models.pretrained import banned_token_ids, load_causal_lm
    from textdp.noise import make_rng

    cfg, data, held, scorer, prompts = _setup(args.heldout)
    path = resolve_generator(args.gemma)
    w0, c0 = time.perf_counter(), _cpu()
    lm = load_causal_lm(path, "cpu")
    tok = lm.tokenizer
    print(f"model: {lm.info['architecture']}, {lm.info['parameters']:,} params, tokenizer {len(tok)} "
          f"(loaded in {time.perf_counter() - w0:.0f} s wall); torch threads {torch.get_num_threads()}")
    rows = int(lm.model.get_output_embeddings().weight.shape[0])
    banned = banned_token_ids(tok, rows, keep=(tok.eos_token_id,))
    print(f"banned output rows: {len(banned)} (added tokens {len(tok.added_tokens_decoder)}, "
          f"special ids {len(set(tok.all_special_ids))}, rows past the tokenizer {max(0, rows - len(tok))}; "
          f"end-of-text allowed)")

    def measure(model, label):
        w, c = time.perf_counter(), _cpu()
        nll, cnt = causal_lm_nll(model, tok, held, batch_size=4)
        ppl_w, ppl_t = float(np.exp(nll.sum() / _n_words(held))), float(np.exp(nll.sum() / cnt.sum()))
        def decode(row):
            row = row[1:]
            if tok.eos_token_id in row:
                row = row[: row.index(tok.eos_token_id)]
            return tok.decode(row, skip_special_tokens=True).strip()

        ids = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        samples = _vtg_samples(HFCausalLMAdapter(model), ids, tok.eos_token_id, banned.tolist(), decode)
        print(f"{label}: held-out PPL per word {ppl_w:.1f}, per model token {ppl_t:.1f}; samples' fluency "
              f"{scorer.perplexity(samples):.1f} ({time.perf_counter() - w:.0f} s wall, {_cpu() - c:.0f} s CPU)")
        for s in samples[:3]:
            print(f"    {s}")

    measure(lm.model, "Gemma as loaded")
    ft = FineTuneConfig(method=args.method, steps=args.steps, batch_size=args.batch, max_tokens=args.tokens,
                        lr=args.lr, lora_r=8, lora_alpha=16)
    model = copy.deepcopy(lm.model)
    w, c = time.perf_counter(), _cpu()
    losses = []
    model, stats = finetune_causal_lm(model, tok, list(data.public["text"]), ft, rng=make_rng(29),
                                      on_step=lambda s, t, l: losses.append(round(l, 3)))
    print(f"fine-tuning {ft.to_dict()} on {stats['texts']} public texts: {stats['trainable_parameters']:,} trainable "
          f"params; losses {losses}; {stats['seconds_per_step']:.1f} s wall per step ({_cpu() - c:.0f} s CPU in "
          f"all, {time.perf_counter() - w:.0f} s wall)")
    measure(model, f"Gemma + {args.method} ({args.steps} steps)")
    print(f"total: {time.perf_counter() - w0:.0f} s wall, {_cpu() - c0:.0f} s CPU")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scratch", action="store_true", help="train/load scratch and scratch-large and compare them")
    ap.add_argument("--gemma", default=None, help="a pretrained causal LM (folder, .gguf, or gemma) to fine-tune")
    ap.add_argument("--method", default="lora", choices=["lora", "full"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--heldout", type=int, default=200, help="held-out reviews (test split) to measure on")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if not args.scratch and not args.gemma:
        ap.error("nothing to do: pass --scratch and/or --gemma")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"uptime: {os.getloadavg()}")
    if args.scratch:
        run_scratch(args)
    if args.gemma:
        run_gemma(args)


if __name__ == "__main__":
    main()
