"""End-to-end model-inversion experiment: data split, target, generator,
templates, TR / VTG / VMI, metrics over seeds, defences, report files.

:func:`run_inversion` is the library entry point behind ``textdp attack invert``;
:func:`write_report` writes its result folder. Trained models (target,
generator, fluency scorer) are cached under ``$TEXTDP_CACHE/attack-invert``
keyed by a hash of their configuration and data, so repeated runs only pay for
the attack itself.

Honesty controls built in (spec §11.3):
* the target's accuracy on its private training set *and* on held-out data;
* the evaluation classifier (TF-IDF + logistic regression, independent of the
  target by construction) with its own accuracies;
* RR (c) private-only, and a **non-member control**: every RR is also computed
  against an equally sized slice of held-out texts the target never saw
  (``*_nonmember``). Leakage shows as member RR above non-member RR and as TR
  above VTG (same templates, same random numbers, no target);
* TR, VTG and VMI always reported together, mean ± std over attack seeds.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from textdp.attacks.inversion.config import InversionConfig, preset_config
from textdp.attacks.inversion.metrics import (
    attack_accuracy, filter_tokens, kendall_topk_distance, recovery_rates, topk_ranking,
)
from textdp.attacks.inversion.templates import build_templates, jobs_by_prefix_length, template_labels
from textdp.errors import InputError, MissingPackageError, OutputError, ParameterError
from textdp.models.device import resolve_device
from textdp.noise import make_rng, seed_mode

__all__ = ["InversionData", "InversionReport", "split_data", "run_inversion", "write_report", "METHODS",
           "DEFENCES", "generate_texts", "prepare_target", "prepare_generator"]

METHODS = ("tr", "vtg", "vmi")
DEFENCES = ("none", "dpsgd", "santext")
MIN_PRIVATE_PER_LABEL = 5

Progress = Callable[[str, int], Callable[[int], None]]


def _no_progress(desc: str, total: int) -> Callable[[int], None]:
    return lambda n=1: None


# =========================================================================== data
@dataclass
class InversionData:
    """Public/private split of a labelled dataset.

    ``public``/``private``/``heldout``/``nonmember``: DataFrames with ``text`` and
    ``label`` (str). ``private`` trains the target; ``public`` (labels unused except
    for VTG's template labels and ``label_pmi`` templates) trains the generator;
    ``heldout`` is the dataset's test split (target utility); ``nonmember`` is a
    per-label slice of ``heldout`` the size of ``private`` (non-member control).
    ``canaries``: a :class:`textdp.attacks.inversion.canaries.CanarySet` whose inserted
    canaries the target also trains on (``private`` itself holds only the dataset's texts,
    so every metric over ``private`` leaves them out), or None.
    """

    name: str
    labels: list[str]
    public: pd.DataFrame
    private: pd.DataFrame
    heldout: pd.DataFrame
    nonmember: pd.DataFrame
    canaries: object | None = None

    def fingerprint(self) -> str:
        from textdp.models.causal_lm import config_key

        key = {"name": self.name, "pub": len(self.public), "priv": len(self.private),
               "h": pd.util.hash_pandas_object(self.private[["text", "label"]], index=False).sum(),
               "hp": pd.util.hash_pandas_object(self.public[["text", "label"]], index=False).sum()}
        if self.canaries is not None and len(self.canaries.inserted):  # keeps the keys of runs without canaries
            key["canaries"] = pd.util.hash_pandas_object(self.canaries.inserted[["text", "label"]], index=False).sum()
        return config_key(key)

    def training_frame(self) -> pd.DataFrame:
        """What the target trains on: ``private`` followed by the inserted canaries (``text``, ``label``)."""
        if self.canaries is None or not len(self.canaries.inserted):
            return self.private[["text", "label"]]
        return pd.concat([self.private[["text", "label"]], self.canaries.inserted[["text", "label"]]],
                         ignore_index=True)


def split_data(dataset, cfg: InversionConfig) -> InversionData:
    """80/20 public/private split (stratified, deterministic from ``cfg.split_seed``)
    of the dataset's train split; ``dataset``: a built-in name or a
    :class:`textdp.data.Dataset`. Raises InputError for one label or too few texts."""
    from textdp.data import load_dataset

    ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
    train = ds.train[["text", "label"]].astype(str)
    train = train[train["text"].str.strip() != ""].reset_index(drop=True)
    test = ds.test[["text", "label"]].astype(str)
    test = test[test["text"].str.strip() != ""].reset_index(drop=True)
    labels = sorted(set(train["label"]))
    if len(labels) < 2:
        raise InputError(f"dataset {ds.name!r} has {len(labels)} label(s); inversion needs a classifier of >= 2 labels")
    if not 0 < cfg.public_fraction < 1:
        raise ParameterError(f"public_fraction must be in (0, 1), got {cfg.public_fraction}")
    rng = make_rng(cfg.split_seed)  # deterministic split, not DP noise
    pub_idx, priv_idx = [], []
    for lab in labels:
        idx = np.flatnonzero(train["label"].to_numpy() == lab)
        idx = idx[rng.permutation(len(idx))]
        k = int(round(len(idx) * (1 - cfg.public_fraction)))
        priv_idx.extend(idx[:k].tolist())
        pub_idx.extend(idx[k:].tolist())
    pub = train.iloc[sorted(pub_idx)].reset_index(drop=True)
    priv = train.iloc[sorted(priv_idx)].reset_index(drop=True)

    def cap(df, n):
        if n is None or len(df) <= n:
            return df
        per = max(1, n // len(labels))
        parts = [df[df["label"] == l].head(per) for l in labels]
        return pd.concat(parts).sort_index().reset_index(drop=True)

    pub, priv = cap(pub, cfg.max_public), cap(priv, cfg.max_private)
    counts = priv["label"].value_counts()
    small = [l for l in labels if counts.get(l, 0) < MIN_PRIVATE_PER_LABEL]
    if small:
        raise InputError(f"dataset {ds.name!r}: fewer than {MIN_PRIVATE_PER_LABEL} private texts for label(s) "
                         f"{', '.join(small[:5])}; use a larger dataset")
    if len(pub) < 20:
        raise InputError(f"dataset {ds.name!r}: only {len(pub)} public texts; the generator needs more data")
    if len(test) == 0:
        test = priv.iloc[:0]
    nm = []
    for lab in labels:
        cand = test[test["label"] == lab]
        nm.append(cand.head(int(counts.get(lab, 0))))
    nonmember = pd.concat(nm).reset_index(drop=True)
    heldout = test if cfg.max_private is None else test.head(max(200, 2 * len(priv)))
    canaries = None
    if cfg.canaries:
        from textdp.attacks.inversion.canaries import default_min_count, make_canaries

        canaries = make_canaries(list(pub["text"]), labels, int(cfg.canaries), seed=cfg.canary_seed,
                                 pool_size=cfg.canary_pool, secret_len=cfg.canary_secret_len,
                                 public_labels=list(pub["label"]), min_count=default_min_count(len(pub)))
    return InversionData(ds.name, labels, pub, priv, heldout.reset_index(drop=True), nonmember, canaries)


# =========================================================================== models
def _cache_dir(kind: str, key_obj: dict) -> Path:
    from textdp.models.causal_lm import cache_root, config_key

    return cache_root() / "attack-invert" / f"{kind}-{config_key(key_obj)}"


def _atomic_dir(final: Path, writer: Callable[[Path], None], overwrite: bool = True, kind: str = "attack-invert-cache",
                inputs: list | None = None) -> None:
    """Build folder ``final`` atomically through :func:`textdp.data.io.atomic_output_dir`: an
    existing non-empty folder is only replaced when it carries a textdp marker."""
    from textdp.data.io import atomic_output_dir

    with atomic_output_dir(final, overwrite=overwrite, kind=kind, inputs=inputs, create_parents=True) as tmp:
        writer(tmp)


def _santext(texts: list[str], cfg: InversionConfig, rng) -> tuple[list[str], dict]:
    """Sanitise the private training ``texts`` with SanText (Yue et al. 2021) through
    the public API of :mod:`textdp.sanitize`; the vocabulary is fitted on these texts
    (the data owner sanitises its own data). Returns ``(texts, info)``."""
    try:
        from textdp.sanitize import SanText, sanitize_texts
    except ImportError:
        raise MissingPackageError("the santext defence needs textdp.sanitize.SanText, which is not available in "
                                  "this installation; use --defence dpsgd or none") from None
    mech = SanText(cfg.santext_embeddings, epsilon=cfg.santext_epsilon, rng=rng).fit(texts)
    out, stats = sanitize_texts(list(texts), mech)
    if len(out) != len(texts):
        raise InputError("SanText returned a different number of texts")
    g = getattr(mech, "guarantee", None)
    info = {"santext_epsilon": cfg.santext_epsilon, "santext_embeddings": cfg.santext_embeddings,
            "santext_guarantee": repr(g) if g is not None else None,
            "santext_share_changed": getattr(stats, "share_changed", None)}
    return [str(t) for t in out], info


def prepare_target(data: InversionData, cfg: InversionConfig, defence: str = "none",
                   progress: Progress = _no_progress, device: str = "cpu"):
    """The target classifier fine-tuned on ``data.private`` (cached), frozen, on ``device``
    (``auto``/``cpu``/``cuda``; a model trained on a GPU is cached apart from the CPU's).

    ``defence``: ``none`` (AdamW fine-tuning), ``dpsgd`` (Opacus DP-SGD,
    ``cfg.dp_epsilon``), or ``santext`` (fine-tuning on SanText-sanitised private
    text). Returns ``(classifier, info)`` with ``train_acc`` (on the original
    private texts), ``heldout_acc``, ``public_acc``, ``memorisation`` (accuracy on the private
    and on the non-member texts and the loss membership-inference AUC with its 95 % interval,
    :mod:`textdp.attacks.inversion.memorisation`; None with fewer than 2 held-out texts) and,
    for DP-SGD, ε.
    """
    from textdp.models.classifier import TextClassifier, fine_tune, fine_tune_dp, load_classifier, tiny_classifier

    if defence not in DEFENCES:
        raise ParameterError(f"unknown defence {defence!r}; choose one of: {', '.join(DEFENCES)}")
    key = {"kind": "target", "data": data.fingerprint(), "model": cfg.target_model, "layers": cfg.target_layers,
           "epochs": cfg.target_epochs, "lr": cfg.target_lr, "batch": cfg.target_batch, "max_len": cfg.max_len,
           "seed": cfg.model_seed, "defence": defence, "tiny": cfg.tiny_target if cfg.target_model == "tiny" else None}
    if cfg.target_pooling != "cls" and defence != "dpsgd":  # keeps the cache keys of existing cls targets
        key["pooling"] = cfg.target_pooling
    if cfg.target_dropout is not None or cfg.target_weight_decay != 0.01:  # idem for the default recipe
        key["regularisation"] = [cfg.target_dropout, cfg.target_weight_decay]
    if defence == "dpsgd":
        key.update(dp=[cfg.dp_epsilon, cfg.dp_delta, cfg.dp_epochs, cfg.dp_lr, cfg.dp_batch, cfg.dp_max_grad_norm,
                       cfg.dp_trainable_layers, cfg.dp_pooling])
    if defence == "santext":
        key.update(santext=[cfg.santext_epsilon, cfg.santext_embeddings])
    dev = resolve_device(device)
    if dev != "cpu":  # keeps the cache keys of CPU-trained targets
        key["device"] = "cuda"
    folder = _cache_dir("target", key)
    y_priv = data.private["label"].map({l: i for i, l in enumerate(data.labels)}).to_numpy()
    train_frame = data.training_frame()
    if (folder / "info.json").exists():
        clf = TextClassifier.load(folder).to(dev)
        info = json.loads((folder / "info.json").read_text())
        if "memorisation" not in info:  # a target cached before the memorisation report: measure it once
            info["memorisation"] = _memorisation(clf.freeze(), data, cfg)
            _rewrite_json(folder / "info.json", info)
        info["cached"] = True
        return clf.freeze(), info
    rng = make_rng(cfg.model_seed + {"none": 0, "dpsgd": 1, "santext": 2}[defence])
    t0 = time.perf_counter()
    pooling = cfg.dp_pooling if defence == "dpsgd" else cfg.target_pooling
    if cfg.target_model == "tiny":
        clf = tiny_classifier(data.labels, rng=rng, max_len=max(cfg.max_len, 64),
                              pooling="mean" if pooling == "auto" else pooling, **cfg.tiny_target)
    else:
        clf = load_classifier(cfg.target_model, data.labels, num_layers=cfg.target_layers, rng=rng, pooling=pooling)
    if cfg.target_dropout is not None:  # every dropout of the encoder and head (attention reads .p as well)
        import torch

        for mod in clf.model.modules():
            if isinstance(mod, torch.nn.Dropout):
                mod.p = float(cfg.target_dropout)
    train_texts = list(train_frame["text"])
    y_train = train_frame["label"].map({l: i for i, l in enumerate(data.labels)}).to_numpy()
    info: dict = {"defence": defence, "model": clf.source, "layers": cfg.target_layers, "pooling": clf.pooling,
                  "dropout": cfg.target_dropout, "weight_decay": cfg.target_weight_decay,
                  "canaries_inserted": len(train_frame) - len(data.private)}
    if defence == "santext":
        train_texts, sinfo = _santext(train_texts, cfg, rng)
        info.update(sinfo)
    epochs = cfg.dp_epochs if defence == "dpsgd" else cfg.target_epochs
    bs = cfg.dp_batch if defence == "dpsgd" else cfg.target_batch
    adv = progress(f"target ({defence}) training", epochs * math.ceil(len(train_texts) / bs))  # DP: expected steps
    cb = lambda s, tot, loss: adv(1)  # noqa: E731
    if defence == "dpsgd":
        info.update(fine_tune_dp(clf, train_texts, y_train, epsilon=cfg.dp_epsilon, delta=cfg.dp_delta,
                                 epochs=cfg.dp_epochs, lr=cfg.dp_lr, batch_size=cfg.dp_batch,
                                 max_grad_norm=cfg.dp_max_grad_norm, max_len=cfg.max_len,
                                 trainable_layers=cfg.dp_trainable_layers, rng=rng, on_step=cb, device=dev))
    else:
        info.update(fine_tune(clf, train_texts, y_train, epochs=cfg.target_epochs, lr=cfg.target_lr,
                              batch_size=cfg.target_batch, max_len=cfg.max_len, rng=rng, on_step=cb, device=dev,
                              weight_decay=cfg.target_weight_decay))
    info["train_seconds"] = round(time.perf_counter() - t0, 1)
    lab = {l: i for i, l in enumerate(data.labels)}
    info["train_acc"] = clf.accuracy(list(data.private["text"]), y_priv, cfg.max_len)
    info["heldout_acc"] = clf.accuracy(list(data.heldout["text"]), data.heldout["label"].map(lab).to_numpy(), cfg.max_len)
    pub = data.public.head(2000)
    info["public_acc"] = clf.accuracy(list(pub["text"]), pub["label"].map(lab).to_numpy(), cfg.max_len)
    info["memorisation"] = _memorisation(clf.freeze(), data, cfg)
    if data.canaries is not None and len(data.canaries.inserted) >= 2 and len(data.canaries.reference) >= 2:
        info["canary_memorisation"] = _canary_memorisation(clf, data, cfg)
    _atomic_dir(folder, lambda d: (clf.save(d), (d / "info.json").write_text(json.dumps(info))))
    info["cached"] = False
    return clf.freeze(), info


def _memorisation(clf, data: InversionData, cfg: InversionConfig) -> dict | None:
    """:func:`textdp.attacks.inversion.memorisation.memorisation_report` of a target: members =
    the private split (original texts, also for the santext defence), non-members = the
    non-member slice of held-out texts; a dict (``MemorisationReport.to_dict()`` plus ``line``),
    or None when the dataset has fewer than 2 held-out texts."""
    from textdp.attacks.inversion.memorisation import memorisation_report

    if len(data.nonmember) < 2 or len(data.private) < 2:
        return None
    lab = {l: i for i, l in enumerate(data.labels)}
    rep = memorisation_report(clf, list(data.private["text"]), data.private["label"].map(lab).to_numpy(),
                              list(data.nonmember["text"]), data.nonmember["label"].map(lab).to_numpy(),
                              max_len=cfg.max_len)
    return {**rep.to_dict(), "line": rep.line()}


def _canary_memorisation(clf, data: InversionData, cfg: InversionConfig) -> dict:
    """The memorisation report with the inserted canaries as members and the never-inserted
    reference canaries (same format, same draw) as non-members."""
    from textdp.attacks.inversion.memorisation import memorisation_report

    lab = {l: i for i, l in enumerate(data.labels)}
    ins, ref = data.canaries.inserted, data.canaries.reference
    rep = memorisation_report(clf, list(ins["text"]), ins["label"].map(lab).to_numpy(), list(ref["text"]),
                              ref["label"].map(lab).to_numpy(), max_len=cfg.max_len)
    return {**rep.to_dict(), "line": rep.line()}


def _rewrite_json(path: Path, obj: dict) -> None:
    """Replace a small JSON file atomically (temporary file in the same folder, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


#: from-scratch generators (``cfg.generator``) and the knobs each overrides: ``scratch`` keeps
#: ``gen_d_model``/``gen_layers``/... as configured (3 layers, d 128, 8k WordPieces, 3 epochs in the cpu
#: preset); ``scratch-large`` is 4 layers, d 256, 8 heads, 16k WordPieces, 5 epochs (held-out
#: perplexity vs the small one: docs/attacks.md, "Generators and fluency")
SCRATCH_GENERATORS = {"scratch": {}, "scratch-large": {"gen_d_model": 256, "gen_layers": 4, "gen_heads": 8,
                                                       "gen_epochs": 5, "gen_lr": 1e-3, "gen_max_vocab": 16000}}


def finetune_config(cfg: InversionConfig):
    """The :class:`textdp.models.finetune.FineTuneConfig` of a pretrained generator's fine-tuning on
    the public split (``cfg.gen_finetune`` ``lora``/``full``), or None for ``none``."""
    from textdp.models.finetune import FineTuneConfig

    if cfg.gen_finetune == "none":
        return None
    return FineTuneConfig(method=cfg.gen_finetune, steps=cfg.gen_finetune_steps, batch_size=cfg.gen_finetune_batch,
                          max_tokens=cfg.gen_finetune_tokens, lr=cfg.gen_finetune_lr, lora_r=cfg.gen_lora_r,
                          lora_alpha=2 * cfg.gen_lora_r)


def prepare_generator(data: InversionData, clf, cfg: InversionConfig, *, seed_offset: int = 0,
                      progress: Progress = _no_progress, desc: str = "generator", epochs: int | None = None,
                      device: str = "cpu"):
    """The attack's generator, on ``device`` (``auto``/``cpu``/``cuda``; one trained on a GPU is
    cached apart from the CPU's).

    ``cfg.generator`` ``scratch`` or ``scratch-large`` (:data:`SCRATCH_GENERATORS`): a causal LM
    trained from scratch on the public texts' WordPiece ids (cached); returns ``(model, SharedVocab,
    info)``. Otherwise a pretrained causal LM (a folder, a ``.gguf`` file, ``gemma`` or a hub name
    in the local cache), fine-tuned on the public split per ``cfg.gen_finetune`` and saved once under
    ``cfg.gen_cache``
    (:func:`textdp.attacks.inversion.gpt2_generator.prepare_pretrained_generator`); returns
    ``(model, BpeVocab, info)``. ``seed_offset`` gives an independent from-scratch model of the same
    recipe; ``epochs`` overrides ``cfg.gen_epochs``.
    """
    import dataclasses

    if epochs is not None:
        cfg = dataclasses.replace(cfg, gen_epochs=int(epochs))
    from textdp.models.causal_lm import (
        CausalLMConfig, SharedVocab, config_key, load_causal_lm, save_causal_lm, train_causal_lm,
    )

    if cfg.generator not in SCRATCH_GENERATORS and seed_offset == 0:  # pretrained BPE generator
        from textdp.attacks.inversion.gpt2_generator import prepare_pretrained_generator

        return prepare_pretrained_generator(clf, cfg.generator, progress=progress,
                                            public_texts=list(data.public["text"]), finetune=finetune_config(cfg),
                                            cache=cfg.gen_cache, seed=cfg.model_seed, device=device)
    if SCRATCH_GENERATORS.get(cfg.generator):
        cfg = dataclasses.replace(cfg, **SCRATCH_GENERATORS[cfg.generator])
    tokens = clf.vocab_tokens
    key = {"kind": "generator", "data": data.fingerprint(), "vocab": config_key(tokens), "d": cfg.gen_d_model,
           "L": cfg.gen_layers, "H": cfg.gen_heads, "epochs": cfg.gen_epochs, "lr": cfg.gen_lr,
           "batch": cfg.gen_batch, "block": cfg.gen_block, "min_count": cfg.gen_min_count,
           "max_vocab": cfg.gen_max_vocab, "seed": cfg.model_seed + seed_offset}
    dev = resolve_device(device)
    if dev != "cpu":  # keeps the cache keys of CPU-trained generators
        key["device"] = "cuda"
    folder = _cache_dir("generator", key)
    if (folder / "meta.json").exists():
        model, meta = load_causal_lm(folder)
        model.to(dev)
        vocab = SharedVocab(np.asarray(meta["gen_to_cls"], dtype=np.int64), tokens)
        info = meta["info"]
        info["cached"] = True
        return model, vocab, info
    t0 = time.perf_counter()
    ids = clf.token_ids(list(data.public["text"]))
    vocab = SharedVocab.from_corpus(ids, tokens, min_count=cfg.gen_min_count, max_size=cfg.gen_max_vocab)
    enc = vocab.encode(ids)
    conf = CausalLMConfig(vocab_size=len(vocab), d_model=cfg.gen_d_model, n_layers=cfg.gen_layers,
                          n_heads=cfg.gen_heads, max_len=max(128, cfg.gen_block + 1))
    total = cfg.gen_epochs * math.ceil(len(enc) / cfg.gen_batch)
    adv = progress(f"{desc} training", total)
    model, stats = train_causal_lm(enc, conf, epochs=cfg.gen_epochs, lr=cfg.gen_lr, batch_size=cfg.gen_batch,
                                   block_size=cfg.gen_block, bos=vocab.bos, eos=vocab.eos,
                                   rng=make_rng(cfg.model_seed + seed_offset + 17),
                                   on_step=lambda s, t, l: adv(1), device=dev)
    unk_share = float(np.mean([g == vocab.unk for row in enc for g in row])) if enc else 0.0
    info = {**stats, "vocab_size": len(vocab), "unk_share": unk_share, "train_seconds": round(time.perf_counter() - t0, 1),
            "d_model": cfg.gen_d_model, "layers": cfg.gen_layers, "alignment": "shared WordPiece vocabulary"}
    _atomic_dir(folder, lambda d: save_causal_lm(model, d, {"gen_to_cls": vocab.gen_to_cls.tolist(), "info": info}))
    info["cached"] = False
    return model, vocab, info


def _evaluator(data: InversionData):
    """Independent evaluation classifier: TF-IDF (1-2-grams) + logistic regression on the private texts."""
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
    except ImportError:
        raise MissingPackageError("the evaluation classifier needs scikit-learn; run: pip install 'textdp[nlp]'") from None
    model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1),
                          LogisticRegression(C=20.0, max_iter=2000))
    model.fit(list(data.private["text"]), list(data.private["label"]))
    info = {"model": "tfidf(1-2gram)+logistic-regression (C=20), trained on the private split",
            "private_acc": float(model.score(list(data.private["text"]), list(data.private["label"]))),
            "heldout_acc": float(model.score(list(data.heldout["text"]), list(data.heldout["label"])))
            if len(data.heldout) else float("nan")}
    info["meets_paper_95"] = info["private_acc"] >= 0.95
    return model, info


# =========================================================================== attacks
def _row_seed(key: int, t: int, j: int) -> int:
    return int(np.random.SeedSequence([key, t, j]).generate_state(1, np.uint64)[0] >> 1)


def generate_texts(method: str, *, clf, generator, vocab, templates: Sequence[str], labels: Sequence[str],
                   cfg: InversionConfig, attack_key: int, gen_length: int, vmi_length: int | None = None,
                   template_label: Sequence[str] | None = None, on_text: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Inverted texts of one method for every label.

    TR and VTG: one text per (label, template, sample); the row of (label index a,
    template t, sample s) is sampled with a seed derived from ``(attack_key, t,
    a·num_samples + s)`` only, so TR and VTG share random numbers and TR with
    ``stepsize = 0`` reproduces VTG exactly. VMI: ``len(templates)·num_samples``
    random restarts per label. Returns a DataFrame with columns ``label``,
    ``template``, ``sample``, ``text`` (+ ``label_for_acc``: the attacked label,
    or for VTG the template's majority public label).
    """
    import torch

    from textdp.attacks.inversion.pplm import SharedBridge, generate
    from textdp.attacks.inversion.vmi import vmi_invert

    if method not in METHODS:
        raise ParameterError(f"unknown method {method!r}; choose one of: {', '.join(METHODS)} or all")
    ns = cfg.num_samples
    rows = []
    if method == "vmi":
        length = vmi_length or gen_length
        for a, lab in enumerate(labels):
            texts, _ = vmi_invert(clf, a, len(templates) * ns, length, steps=cfg.vmi_steps, lr=cfg.vmi_lr,
                                  rng=make_rng(_row_seed(attack_key, 10**6, a)))
            for r, tx in enumerate(texts):
                rows.append({"label": lab, "template": "", "sample": r, "text": tx, "label_for_acc": lab})
            if on_text:
                on_text(len(texts))
        return pd.DataFrame(rows)
    if getattr(vocab, "kind", "shared") == "bpe":  # pretrained generator: textdp.attacks.inversion.gpt2_generator
        from textdp.attacks.inversion.gpt2_generator import generate_texts_bpe

        return generate_texts_bpe(method, clf=clf, generator=generator, vocab=vocab, templates=templates, labels=labels,
                                  cfg=cfg, attack_key=attack_key, gen_length=gen_length, template_label=template_label,
                                  on_text=on_text)
    pcfg = cfg.pplm.__class__(**{**cfg.pplm.__dict__, "gen_length": gen_length})
    bridge = SharedBridge.build(vocab, clf) if method == "tr" else None
    tpl_ids = [[vocab.bos] + vocab.encode(clf.token_ids([t]))[0] for t in templates]
    # never emit begin-of-text or [UNK] (same ban for TR and VTG)
    banned = [b for b in (getattr(vocab, "bos", None), getattr(vocab, "unk", None)) if b is not None]
    jobs = [(a, t, s) for a in range(len(labels)) for t in range(len(templates)) for s in range(ns)]
    out: dict[tuple, str] = {}
    for chunk in jobs_by_prefix_length(tpl_ids, len(labels), ns, cfg.batch_size):
        prefix = torch.tensor([tpl_ids[t] for _, t, _ in chunk], dtype=torch.long)
        seeds = [_row_seed(attack_key, t, a * ns + s) for a, t, s in chunk]
        res = generate(generator, clf if method == "tr" else None, bridge, prefix, [a for a, _, _ in chunk],
                       pcfg, seeds, perturb=(method == "tr"), eos=vocab.eos, banned=banned)
        for (a, t, s), ids in zip(chunk, res["ids"].tolist()):
            out[(a, t, s)] = vocab.decode(ids)
        if on_text:
            on_text(len(chunk))
    for a, t, s in jobs:
        rows.append({"label": labels[a], "template": templates[t], "sample": s, "text": out[(a, t, s)],
                     "label_for_acc": (template_label[t] if (method == "vtg" and template_label) else labels[a])})
    return pd.DataFrame(rows)


# =========================================================================== run
@dataclass
class InversionReport:
    """Result of :func:`run_inversion`.

    ``texts``: one row per inverted text (defence, method, seed, label, template,
    text, target/evaluator predictions, matched ground truth); ``metrics``: one
    row per (defence, method, seed); ``summary``: mean ± std over seeds, with the
    paired ``tr-vtg`` gap; ``card``: everything else (config, data sizes, target
    and evaluator accuracies, generator, Kendall, timings, seed mode).
    """

    texts: pd.DataFrame
    metrics: pd.DataFrame
    summary: pd.DataFrame
    card: dict = field(default_factory=dict)


METRIC_COLUMNS = ("rr_vocab", "rr_match", "rr_private_only", "att_acc", "target_acc", "ppl",
                  "rr_vocab_nonmember", "rr_private_only_nonmember")


def _summarise(metrics: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (d, m), g in metrics.groupby(["defence", "method"], sort=False):
        row = {"defence": d, "method": m, "seeds": len(g)}
        for c in METRIC_COLUMNS:
            v = g[c].to_numpy(dtype=float)
            row[c] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
            row[c + "_std"] = float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else 0.0
        rows.append(row)
    # paired TR - VTG gap per seed
    for d, g in metrics.groupby("defence", sort=False):
        tr, vtg = g[g["method"] == "tr"].set_index("seed"), g[g["method"] == "vtg"].set_index("seed")
        common = tr.index.intersection(vtg.index)
        if len(common):
            row = {"defence": d, "method": "tr-vtg", "seeds": len(common)}
            for c in METRIC_COLUMNS:
                diff = (tr.loc[common, c] - vtg.loc[common, c]).to_numpy(dtype=float)
                row[c] = float(np.nanmean(diff)) if np.isfinite(diff).any() else float("nan")
                row[c + "_std"] = float(np.nanstd(diff, ddof=1)) if np.isfinite(diff).sum() > 1 else 0.0
            rows.append(row)
    return pd.DataFrame(rows)


def run_inversion(dataset="rotten-tomatoes", *, methods: Sequence[str] = METHODS, defence: str = "none",
                  preset: str | InversionConfig = "cpu", seeds: Sequence[int | None] = (0, 1, 2),
                  progress: Progress | None = None, log: Callable[[str], None] | None = None,
                  device: str = "cpu") -> InversionReport:
    """Run Text Revealer and its baselines against a classifier trained on private data.

    ``dataset``: built-in name or :class:`textdp.data.Dataset`. ``methods``:
    subset of ``("tr", "vtg", "vmi")``. ``defence``: ``none``, ``dpsgd`` or
    ``santext`` — a defended run also attacks the undefended target so the report
    compares both. ``preset``: ``cpu``, ``paper``, ``tiny`` or an
    :class:`InversionConfig`. ``seeds``: attack seeds (``None`` = fresh
    cryptographic randomness); models are trained once from ``cfg.model_seed``.
    ``device``: ``auto``, ``cpu`` (default) or ``cuda`` (:func:`textdp.models.device.resolve_device`):
    where the target, the generators and the attacks run (the TF-IDF evaluator stays on the CPU).

    Metrics (fractions in [0, 1]; PPL: perplexity under an independent scorer
    LM, lower = more fluent): see :func:`textdp.attacks.inversion.metrics.recovery_rates`.
    Raises ParameterError / InputError / MissingPackageError on bad input.
    """
    progress = progress or _no_progress
    log = log or (lambda s: None)
    methods = list(dict.fromkeys(methods))
    for m in methods:
        if m not in METHODS:
            raise ParameterError(f"unknown method {m!r}; choose from {', '.join(METHODS)} or all")
    if not methods:
        raise ParameterError("no attack method given")
    if defence not in DEFENCES:
        raise ParameterError(f"unknown defence {defence!r}; choose one of: {', '.join(DEFENCES)}")
    if not seeds:
        raise ParameterError("at least one seed is needed")
    import torch

    device = resolve_device(device)
    t_start = time.perf_counter()
    long_texts = isinstance(dataset, str) and dataset in ("drug-reviews", "20newsgroups", "reuters-r8", "bbc-news")
    cfg = preset if isinstance(preset, InversionConfig) else preset_config(preset, long_texts=long_texts)
    data = split_data(dataset, cfg)
    log(f"data: {data.name}: {len(data.public)} public, {len(data.private)} private, "
        f"{len(data.nonmember)} non-member texts, labels {data.labels}")
    defences = ["none"] if defence == "none" else ["none", defence]
    targets, tinfo = {}, {}
    for d in defences:
        targets[d], tinfo[d] = prepare_target(data, cfg, d, progress, device=device)
        log(f"target[{d}]: train acc {tinfo[d]['train_acc']:.3f}, held-out acc {tinfo[d]['heldout_acc']:.3f}"
            + (f", epsilon {tinfo[d]['epsilon_spent']:.2f}" if d == "dpsgd" else ""))
        majority = float(data.private["label"].value_counts(normalize=True).max())
        tinfo[d]["majority_rate"] = majority
        tinfo[d]["learned"] = bool(tinfo[d]["train_acc"] > majority + TARGET_LEARNED_MARGIN)
        if not tinfo[d]["learned"]:
            log(f"WARNING: target[{d}] did not learn (train acc {tinfo[d]['train_acc']:.3f} vs majority rate "
                f"{majority:.3f}): attack results against it say nothing about memorisation")
    base = targets["none"]
    gen, vocab, ginfo = prepare_generator(data, base, cfg, progress=progress, device=device)
    from textdp.attacks.inversion.fluency import NgramFluencyScorer

    t_sc = time.perf_counter()
    scorer = NgramFluencyScorer(list(data.public["text"]))  # shares no tokenizer, model or recipe with a generator
    sinfo = {**scorer.info, "train_seconds": round(time.perf_counter() - t_sc, 2), "cached": False}
    evaluator, einfo = _evaluator(data)
    log(f"evaluator: private acc {einfo['private_acc']:.3f}, held-out acc {einfo['heldout_acc']:.3f}")
    templates = build_templates(list(data.public["text"]), style=cfg.template_style, n_min=cfg.template_n_min,
                                n_max=cfg.template_n_max, min_freq=cfg.template_min_freq, n_templates=cfg.n_templates,
                                drop_contained=cfg.template_drop_contained, template_fraction=cfg.template_fraction,
                                adjective_source=cfg.adjective_source, labels=list(data.public["label"]))
    tlabels = template_labels(templates, list(data.public["text"]), list(data.public["label"]))
    priv_ids = base.token_ids(list(data.private["text"]))
    avg_len = int(round(float(np.mean([len(x) for x in priv_ids]))))
    if cfg.gen_length == "avg":
        gen_length = avg_len if cfg.gen_length_cap is None else min(avg_len, cfg.gen_length_cap)
    else:
        gen_length = int(cfg.gen_length)
    # data-level statistics
    pub_tok = Counter(w for t in data.public["text"] for w in filter_tokens(t))
    priv_tok = Counter(w for t in data.private["text"] for w in filter_tokens(t))
    public_vocab = set(pub_tok)
    kendall = {}
    for k in cfg.kendall_k:
        dist = kendall_topk_distance(topk_ranking(pub_tok, k), topk_ranking(priv_tok, k), p=cfg.kendall_p)
        kendall[f"top{k}"] = {"distance": dist, "similarity": 1 - dist}
    private_by = {l: list(data.private.loc[data.private["label"] == l, "text"]) for l in data.labels}
    nonmember_by = {l: list(data.nonmember.loc[data.nonmember["label"] == l, "text"]) for l in data.labels}
    lab_idx = {l: i for i, l in enumerate(data.labels)}

    n_per = len(templates) * cfg.num_samples * len(data.labels)
    all_texts, mrows = [], []
    seed_modes = []
    timings: dict[str, list[float]] = {}
    cpu_timings: dict[str, list[float]] = {}
    for run_i, seed in enumerate(seeds):
        seed_label = seed if seed is not None else f"secure#{run_i + 1}"  # unseeded runs: CSPRNG, numbered
        key = int(make_rng(seed).integers(0, 2**62))
        seed_modes.append(seed_mode(seed))
        for d in defences:
            clf = targets[d]
            for m in methods:
                if m == "vtg" and d != "none":
                    continue  # VTG never queries the target: identical under every defence
                adv = progress(f"{m.upper()} seed={seed_label} target={d}", n_per)
                t0, c0 = time.perf_counter(), time.process_time()
                df = generate_texts(m, clf=clf, generator=gen, vocab=vocab, templates=templates, labels=data.labels,
                                    cfg=cfg, attack_key=key, gen_length=gen_length, vmi_length=avg_len,
                                    template_label=tlabels, on_text=adv)
                timings.setdefault(m, []).append(time.perf_counter() - t0)
                cpu_timings.setdefault(m, []).append(time.process_time() - c0)
                texts = list(df["text"])
                inv = {l: list(df.loc[df["label"] == l, "text"]) for l in data.labels}
                rr = recovery_rates(inv, private_by, public_vocab, cfg.matcher)
                rr_nm = recovery_rates(inv, nonmember_by, public_vocab, cfg.matcher)
                ev = evaluator.predict(texts) if texts else []
                with torch.no_grad():
                    tp = clf.predict_proba(texts, cfg.max_len) if texts else np.zeros((0, len(data.labels)))
                y_acc = df["label_for_acc"].map(lab_idx).to_numpy()
                gt = [""] * len(df)
                for l in data.labels:
                    rows_l = np.flatnonzero(df["label"].to_numpy() == l)
                    for k_inv, k_priv in rr["matches"].get(l, []):
                        gt[rows_l[k_inv]] = private_by[l][k_priv]
                ppl = scorer.perplexity(texts)  # fluency: per-word perplexity under the public n-gram scorer
                df = df.assign(defence=d, method=m, seed=seed if seed is not None else -1,
                               evaluator_pred=list(ev), target_pred=[data.labels[i] for i in tp.argmax(1)],
                               target_prob=tp[np.arange(len(tp)), y_acc] if len(tp) else [], ground_truth=gt)
                all_texts.append(df)
                mrows.append({"defence": d, "method": m, "seed": seed if seed is not None else -1,
                              "n_texts": len(df), "rr_vocab": rr["rr_vocab"], "rr_match": rr["rr_match"],
                              "rr_private_only": rr["rr_private_only"],
                              "att_acc": attack_accuracy([lab_idx[p] for p in ev], y_acc),
                              "target_acc": attack_accuracy(tp.argmax(1), y_acc), "ppl": ppl,
                              "rr_vocab_nonmember": rr_nm["rr_vocab"],
                              "rr_private_only_nonmember": rr_nm["rr_private_only"],
                              "seconds": round(timings[m][-1], 2)})
                log(f"{m.upper()} target={d} seed={seed_label}: RR {rr['rr_vocab']:.3f}, "
                    f"Acc {mrows[-1]['att_acc']:.3f}, PPL {ppl:.1f} ({timings[m][-1]:.1f}s)")
    metrics = pd.DataFrame(mrows)
    texts_df = pd.concat(all_texts, ignore_index=True)
    cols = ["defence", "method", "seed", "label", "label_for_acc", "template", "sample", "text", "target_pred",
            "target_prob", "evaluator_pred", "ground_truth"]
    texts_df = texts_df[cols]
    from textdp import __version__

    card = {
        "attack": "Text Revealer model inversion (Zhang, Hidano, Koushanfar 2022) with VTG and VMI baselines",
        "textdp_version": __version__, "dataset": data.name, "labels": data.labels,
        "sizes": {"public": len(data.public), "private": len(data.private), "heldout": len(data.heldout),
                  "nonmember": len(data.nonmember)},
        "avg_private_len_wordpieces": avg_len, "gen_length": gen_length, "templates": templates,
        "template_labels_for_vtg": tlabels, "targets": tinfo, "evaluator": einfo, "generator": ginfo,
        "fluency_scorer": {**sinfo, "metric": "corpus-level perplexity per word (words and punctuation after "
                           "lowercasing, end-of-text included) under an interpolated Kneser-Ney word 3-gram model "
                           "of the public split; unseen words pay p(<unk>) times a character 5-gram spelling "
                           "probability (textdp.attacks.inversion.fluency); shares nothing with any generator"},
        "kendall_public_vs_private": kendall, "methods": methods, "defence": defence,
        "seeds": [s if s is not None else "secure" for s in seeds], "seed_modes": seed_modes,
        "config": cfg.to_dict(), "attack_seconds": {m: round(float(np.mean(v)), 2) for m, v in timings.items()},
        "attack_cpu_seconds": {m: round(float(np.mean(v)), 2) for m, v in cpu_timings.items()},
        "torch_threads": torch.get_num_threads(), "device": device,
        "total_seconds": round(time.perf_counter() - t_start, 1),
        "notes": [
            "RR fractions: rr_vocab = corpus coverage of the private filtered vocabulary (paper's reading), "
            "rr_match = per-text matched RR, rr_private_only = coverage of private words absent from the public data",
            "*_nonmember: the same RR against an equal-sized held-out slice the target never saw (non-member control)",
            "VTG rows use the same texts' (label) partition as TR for RR and the template's majority public label for att_acc",
            "models are trained once (model_seed) and cached; the spread is over attack seeds only",
        ],
    }
    return InversionReport(texts_df, metrics, _summarise(metrics), card)


# =========================================================================== files
def _fmt(v, s, pct=True):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{100 * v:.2f} ± {100 * s:.2f}" if pct else f"{v:.1f} ± {s:.1f}"


def summary_markdown(summary: pd.DataFrame) -> str:
    """The metrics table (percent for rates) as Markdown; the fluency column is the per-word
    perplexity under :class:`textdp.attacks.inversion.fluency.NgramFluencyScorer`, named in its
    header."""
    from textdp.attacks.inversion.fluency import SCORER_NAME

    head = ("| target | method | seeds | RR vocab % | RR matched % | RR private-only % | Acc % | target Acc % | "
            f"fluency (scorer: {SCORER_NAME}; PPL, lower = fluent) | RR vocab non-member % |")
    lines = [head, "|" + "---|" * 10]
    for _, r in summary.iterrows():
        lines.append(f"| {r['defence']} | {r['method'].upper()} | {r['seeds']} | {_fmt(r['rr_vocab'], r['rr_vocab_std'])} | "
                     f"{_fmt(r['rr_match'], r['rr_match_std'])} | {_fmt(r['rr_private_only'], r['rr_private_only_std'])} | "
                     f"{_fmt(r['att_acc'], r['att_acc_std'])} | {_fmt(r['target_acc'], r['target_acc_std'])} | "
                     f"{_fmt(r['ppl'], r['ppl_std'], pct=False)} | "
                     f"{_fmt(r['rr_vocab_nonmember'], r['rr_vocab_nonmember_std'])} |")
    return "\n".join(lines) + "\n"


def _plot(summary: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary[summary["method"] != "tr-vtg"]
    labels = [f"{m.upper()}\n({d})" if d != "none" else m.upper() for d, m in zip(s["defence"], s["method"])]
    x = np.arange(len(s))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, (col, title) in zip(axes, [("rr_vocab", "recovery rate (vocabulary) %"), ("att_acc", "attack accuracy %")]):
        ax.bar(x, 100 * s[col], yerr=100 * s[col + "_std"], capsize=4, color="#4c72b0")
        if col == "rr_vocab":
            ax.scatter(x, 100 * s["rr_vocab_nonmember"], color="#dd8452", zorder=3, label="non-member control")
            ax.legend(fontsize=8)
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: a target whose training accuracy is not this far above the majority rate "did not learn"
TARGET_LEARNED_MARGIN = 0.05


def write_report(report: InversionReport, output: str | os.PathLike, overwrite: bool = False,
                 n_examples: int = 5) -> Path:
    """Write the result folder atomically: ``inverted.csv``, ``metrics.csv``,
    ``summary.csv``, ``summary.md``, ``examples.csv`` (ground truth, inverted),
    ``plot.png`` and ``report.json``. Raises OutputError when ``output`` exists
    (without ``overwrite``), is a file, or its parent folder is missing."""
    from textdp.data.io import check_output_dir

    out = check_output_dir(output, overwrite=overwrite)

    def writer(tmp: Path):
        report.texts.to_csv(tmp / "inverted.csv", index=False)
        report.metrics.to_csv(tmp / "metrics.csv", index=False)
        report.summary.to_csv(tmp / "summary.csv", index=False)
        (tmp / "summary.md").write_text(summary_markdown(report.summary))
        t = report.texts
        first_seed = t["seed"].iloc[0] if len(t) else None
        ex = t[(t["seed"] == first_seed) & (t["ground_truth"] != "")]
        picks = []
        for (d, m), g in ex.groupby(["defence", "method"], sort=False):
            score = g.apply(lambda r: len(set(filter_tokens(r["text"])) & set(filter_tokens(r["ground_truth"]))), axis=1)
            picks.append(g.assign(overlap=score).sort_values("overlap", ascending=False, kind="stable").head(n_examples))
        cols = ["defence", "method", "label", "template", "ground_truth", "text", "overlap"]
        (pd.concat(picks)[cols] if picks else pd.DataFrame(columns=cols)).to_csv(tmp / "examples.csv", index=False)
        _plot(report.summary, tmp / "plot.png")
        (tmp / "report.json").write_text(json.dumps(report.card, indent=2, default=str))

    _atomic_dir(out, writer, overwrite=overwrite, kind="attack-invert-report")
    return out
