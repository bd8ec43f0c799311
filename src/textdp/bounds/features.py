"""Text features for the bound experiments: TF-IDF or mean-GloVe vectors of a built-in
dataset (or any DataFrame with ``text`` and ``label``), rows scaled to the unit ball, with
the constant bias column the GLM attack needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from textdp._lazy import lazy_module
from textdp.errors import InputError, ParameterError

# imported on first use: `textdp bounds mse` and the other closed-form bounds never build features
pd = lazy_module("pandas")
sp = lazy_module("scipy.sparse")

__all__ = ["TextFeatures", "text_features", "add_bias"]


def add_bias(X):
    """Prepend the constant bias column 1: ``(n, d)`` → ``(n, d+1)`` (CSR stays CSR)."""
    if sp.issparse(X):
        return sp.hstack([sp.csr_matrix(np.ones((X.shape[0], 1))), X], format="csr")
    X = np.asarray(X, dtype=np.float64)
    return np.hstack([np.ones((X.shape[0], 1)), X])


@dataclass
class TextFeatures:
    """X: ``(n, d+1)`` float64 (CSR for TF-IDF, dense for GloVe), column 0 the bias 1 and
    every data row of norm ≤ 1 (so ‖x‖ ≤ √2 = ``norm_bound``); y: ``(n,)`` in {0, 1};
    diam: per-coordinate data range (1: TF-IDF values lie in [0, 1]; 2 for GloVe in [−1, 1])."""

    X: object
    y: np.ndarray
    feature_names: list
    norm_bound: float
    diam: float
    info: dict


def text_features(
    data: str | pd.DataFrame = "rotten-tomatoes",
    kind: str = "tfidf",
    max_features: int = 5000,
    n_records: int | None = None,
    split: str = "train",
    positive_label: str | None = None,
) -> TextFeatures:
    """Features of a built-in dataset name (``textdp.data.load_dataset``) or a DataFrame.

    kind: ``"tfidf"`` (sklearn TfidfVectorizer, ``max_features`` terms, l2 rows) or
    ``"glove"`` (mean of glove-6b-50d word vectors, l2 rows). n_records: the first n rows
    (deterministic). Labels become binary: ``positive_label`` (default: the first label in
    sorted order) vs the rest. Raises InputError (empty data, one class) / ParameterError.
    """
    if isinstance(data, str):
        from textdp.data import load_dataset

        ds = load_dataset(data)
        if split not in ("train", "test"):
            raise ParameterError(f"split must be 'train' or 'test', got {split!r}")
        df = getattr(ds, split)
        name = data
    else:
        df, name = data, "dataframe"
    if "text" not in df.columns or "label" not in df.columns:
        raise InputError("the data needs 'text' and 'label' columns")
    if n_records is not None:
        if int(n_records) < 2:
            raise ParameterError(f"n_records must be ≥ 2, got {n_records!r}")
        df = df.iloc[: int(n_records)]
    texts = df["text"].astype(str).tolist()
    labels = df["label"].astype(str).to_numpy()
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise InputError("the data has a single class; the GLM experiments need two")
    pos = classes[0] if positive_label is None else str(positive_label)
    if pos not in classes:
        raise ParameterError(f"positive_label {positive_label!r} is not a label; labels: {', '.join(classes[:10])}")
    y = (labels == pos).astype(np.float64)
    if kind == "tfidf":
        from sklearn.feature_extraction.text import TfidfVectorizer

        if int(max_features) < 1:
            raise ParameterError(f"max_features must be ≥ 1, got {max_features!r}")
        vec = TfidfVectorizer(max_features=int(max_features), norm="l2", dtype=np.float64)
        F = vec.fit_transform(texts).tocsr()
        names = list(vec.get_feature_names_out())
        diam = 1.0
    elif kind == "glove":
        from textdp.embeddings import load_embeddings

        emb = load_embeddings("glove-6b-50d")
        tok = emb.tokenizer()
        V = np.asarray(emb.vectors, dtype=np.float64)
        F = np.zeros((len(texts), emb.dim))
        for r, t in enumerate(texts):  # once per document, not a hot path
            ids = [emb.index[w] for w in tok.tokenize(t) if w in emb.index]
            if ids:
                F[r] = V[ids].mean(axis=0)
        nr = np.linalg.norm(F, axis=1, keepdims=True)
        F = F / np.where(nr > 0, nr, 1.0)
        names = [f"glove{k}" for k in range(emb.dim)]
        diam = 2.0
    else:
        raise ParameterError(f"kind must be 'tfidf' or 'glove', got {kind!r}")
    X = add_bias(F)
    return TextFeatures(X, y, names, math.sqrt(2.0), diam,
                        {"data": name, "kind": kind, "n": len(texts), "d": X.shape[1] - 1, "positive_label": pos,
                         "positive_share": float(y.mean())})
