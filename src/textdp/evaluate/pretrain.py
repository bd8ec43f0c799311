"""Sanitization-aware pretraining (Yue et al. 2021, §4.4 and §5.4; spec A.7), compared
with plain fine-tuning.

Protocol of :func:`compare_pretraining`:

1. *plain encoder*: a word-level BERT MLM pretrained from scratch on clean public
   text (a built-in corpus disjoint from the task; :func:`textdp.models.mlm.default_mlm`
   for the realistic preset) -- the stand-in for public ``bert-base-uncased``;
2. *sanitization-aware encoder*: the same model, further trained with the MLM
   objective on the public text sanitized by the mechanism, with the **original**
   words as labels (inputs = sanitized words, 15 % of positions chosen; masked
   80/10/10 as in the official collator);
3. a *control*: the plain encoder trained for the same number of extra steps on
   clean public text, so that a gain is not just "more training";
4. each encoder is fine-tuned on the sanitized task train split and scored on the
   sanitized test split (the paper reports about +2 points for step 2 over step 1).

Presets: ``tiny`` (seconds to a few minutes on 2 CPU cores: tests and smoke runs,
the numbers are noise) and ``realistic`` (the cached ``small`` MLM, 2,000 further
steps, 2 fine-tuning epochs on up to 5,000 task documents; tens of minutes on a
CPU).
"""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from textdp.errors import ParameterError

__all__ = ["PretrainPreset", "PRETRAIN_PRESETS", "compare_pretraining"]


@dataclass(frozen=True)
class PretrainPreset:
    mlm_preset: str = "small"
    public_docs: int | None = None
    extra_steps: int = 2000
    task_docs: int | None = 5000
    epochs: int = 2
    lr: float = 1e-4
    batch_size: int = 32
    max_len: int = 64
    train_from_scratch: bool = False  # True: train the plain MLM here instead of the cached default


PRETRAIN_PRESETS = {
    "tiny": PretrainPreset(mlm_preset="tiny", public_docs=300, extra_steps=60, task_docs=300, epochs=1, lr=1e-3,
                           batch_size=32, max_len=32, train_from_scratch=True),
    "realistic": PretrainPreset(),
}


def compare_pretraining(dataset: str = "rotten-tomatoes", mechanism: str = "santext", epsilon: float = 3.0,
                        preset: str | PretrainPreset = "tiny", embeddings: str = "glove-6b-50d",
                        seed: int | None = None, corpus: str | None = None,
                        stage: Callable[[str], None] | None = None) -> dict:
    """Run the protocol of the module docstring; returns a dict with the task scores
    (``plain``, ``control``, ``sanitization_aware``: accuracy on sanitized test text),
    ``gain`` (aware − plain), ``gain_vs_control`` and the settings.

    ``epsilon`` is per token; ``seed`` makes the sanitization reproducible (not for
    release). Raises ParameterError / InputError / MissingPackageError."""
    from textdp.data.datasets import load_dataset
    from textdp.evaluate.privacy import aligned_tokens
    from textdp.evaluate.sweep import SweepConfig, load_task
    from textdp.evaluate.utility import TransformerModel, score
    from textdp.models.mlm import PRESETS, MaskedLM, default_mlm, public_corpus_for, tokenize_words
    from textdp.sanitize import make_mechanism

    if isinstance(preset, str):
        if preset not in PRETRAIN_PRESETS:
            raise ParameterError(f"unknown pretraining preset {preset!r}; use {', '.join(PRETRAIN_PRESETS)}")
        pname, preset = preset, PRETRAIN_PRESETS[preset]
    else:
        pname = "custom"
    say = stage or (lambda s: None)
    t0 = time.perf_counter()
    corpus = corpus or public_corpus_for(dataset)
    pub = load_dataset(corpus)
    pub_texts = list(pub.train["text"]) + list(pub.test["text"])
    if preset.public_docs:
        pub_texts = pub_texts[: preset.public_docs]
    mseed = 0 if seed is None else int(seed)
    say(f"plain encoder: MLM ({preset.mlm_preset}) on clean {corpus}")
    if preset.train_from_scratch:
        plain = MaskedLM.train_new(tokenize_words(pub_texts), PRESETS[preset.mlm_preset], seed=mseed, corpus=corpus)
    else:
        plain = default_mlm(corpus, preset.mlm_preset)
    mp = replace(PRESETS[preset.mlm_preset], max_docs=None)

    say(f"sanitizing the public text with {mechanism} ε={epsilon:g}")
    mech = make_mechanism(mechanism, embeddings, epsilon, rng=seed)
    mech.fit(pub_texts)
    san_pub = mech.sanitize(pub_texts)
    al = aligned_tokens(mech, pub_texts, san_pub)

    say(f"sanitization-aware encoder: {preset.extra_steps} MLM steps, sanitized inputs -> original labels")
    aware = MaskedLM(copy.deepcopy(plain.model), plain.vocab, {**plain.info, "losses": []})
    aware.train(al.sanitized, targets=al.original, preset=mp, steps=preset.extra_steps, seed=mseed + 1)
    say(f"control encoder: {preset.extra_steps} more MLM steps on clean public text")
    control = MaskedLM(copy.deepcopy(plain.model), plain.vocab, {**plain.info, "losses": []})
    control.train(al.original, preset=mp, steps=preset.extra_steps, seed=mseed + 1)

    cfg = SweepConfig(dataset=dataset, max_docs=preset.task_docs)
    train, test = load_task(cfg)
    tmech = make_mechanism(mechanism, embeddings, epsilon, rng=None if seed is None else seed + 7)
    tr, te = train["text"].tolist(), test["text"].tolist()
    tmech.fit(tr + te)
    san = tmech.sanitize(tr + te)
    s_tr, s_te = san[: len(tr)], san[len(tr):]
    scores = {}
    with tempfile.TemporaryDirectory(prefix="textdp-pretrain-") as tmp:
        for name, m in (("plain", plain), ("control", control), ("sanitization_aware", aware)):
            say(f"fine-tuning the {name} encoder on sanitized {dataset}")
            d = m.save(Path(tmp) / name)
            model = TransformerModel(str(d), epochs=preset.epochs, lr=preset.lr, batch_size=preset.batch_size,
                                     max_len=preset.max_len, seed=mseed)
            model.fit(s_tr, train["label"].tolist())
            scores[name] = score(test["label"].tolist(), model.predict(s_te), "classification")
    return {
        "dataset": dataset, "public_corpus": corpus, "mechanism": mechanism, "epsilon": float(epsilon),
        "preset": pname, "extra_steps": preset.extra_steps, "task_train_docs": len(tr), "task_test_docs": len(te),
        "plain": scores["plain"], "control": scores["control"], "sanitization_aware": scores["sanitization_aware"],
        "gain": scores["sanitization_aware"] - scores["plain"],
        "gain_vs_control": scores["sanitization_aware"] - scores["control"],
        "aware_mlm_final_loss": float(np.mean(aware.info["losses"][-20:])),
        "seconds": time.perf_counter() - t0, "guarantee": mech.guarantee.describe(),
    }
