"""Privacy-utility sweeps: sanitize → train → attack for every (mechanism, ε) cell.

:func:`run_sweep` runs one clean baseline cell and one cell per mechanism and ε:

1. sanitize the train and test splits with the mechanism, over its output vocabulary
   (``output_vocabulary``: the public word list by default; with ``corpus`` the words of
   the texts being sanitized, train + test, and no other text);
2. downstream utility (:mod:`textdp.evaluate.utility`): train on sanitized train
   text, score on sanitized test text (the paper's protocol) and on clean test text;
3. privacy on the sanitized test split: the Bayes-optimal mechanism-aware inversion
   (top-1 / top-5; the headline number; by default with the informed prior, the test
   split's own token distribution) next to its exact optimum ``Σ_y max_x π(x)p(y|x)``,
   the mask-token inference attack (success, defence rate) and N_w / S_w;
4. a privacy card (mechanism, parameters, guarantee, seed mode, statistics).

Every finished cell is cached under ``OUTPUT/cache/<config-hash>/`` (its sanitized
texts as Parquet, its result row as JSON, written atomically), so an interrupted
sweep resumes where it stopped, and changing a setting that affects the results
starts a separate cache. The report (:mod:`textdp.evaluate.report`) is written at
the end: ``results.csv``, ``results.json``, PNG plots and ``report.html``.
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from textdp.errors import InputError, OutputError, ParameterError

__all__ = ["SweepConfig", "SweepResult", "run_sweep", "load_task", "CLEAN", "cell_key", "cell_keys",
           "epsilon_text", "mechanism_key"]

CLEAN = "none"  # mechanism name of the clean-text baseline row
_CACHE_VERSION = 5  # 2: transformer defaults (mean pooling, lr 1e-4, auto epochs); 3: Bayes optimum columns;
# 4: output vocabulary (public by default) and SanText+ frequencies in the settings;
# 5: cells keyed by their exact ε (a version-4 cache may hold one ε's cell under another's 6-digit name)


def epsilon_text(eps: float) -> str:
    """The exact text of ε: ``{eps:g}`` ("3", "0.001", "1e+06") when that is exactly ``eps``, else
    ``repr(eps)`` ("1000001.0", "0.30000001"). Two different ε never get the same text (each
    text reads back as its own value), so cells keyed by it never merge."""
    short = f"{float(eps):g}"
    return short if float(short) == float(eps) else repr(float(eps))


def cell_key(mechanism: str, eps: float | None) -> str:
    """Name of a sweep cell: ``clean`` for the baseline, else ``MECHANISM-epsEPS`` with the exact ε
    (:func:`epsilon_text`). It names the cell's cache files, its card and its progress line."""
    return "clean" if mechanism == CLEAN else f"{mechanism}-eps{epsilon_text(eps)}"


def cell_keys(cfg: "SweepConfig") -> list[str]:
    """The names of a validated config's cells, in the order of the report: the clean baseline, then
    every mechanism × ε."""
    return [cell_key(CLEAN, None)] + [cell_key(m, e) for m in cfg.mechanisms for e in cfg.epsilons]


def mechanism_key(name) -> str:
    """A mechanism name as the sweep spells it (``SanTextPlus`` -> ``santext+``, ``dp_mlm`` -> ``dp-mlm``:
    :func:`textdp.sanitize.canonical_name`); an unknown name comes back lower-cased (not checked here)."""
    from textdp.errors import ParameterError
    from textdp.sanitize import canonical_name

    try:
        return canonical_name(name)
    except ParameterError:
        return str(name).strip().lower()


@dataclass
class SweepConfig:
    """Settings of a sweep (see :func:`run_sweep`).

    ``epsilons`` are per token (SanText: per unit of Euclidean embedding distance).
    ``max_docs`` caps each split (first rows; deterministic). ``attacks``: any of
    ``bayes``, ``mask``. ``prior``: prior of the Bayes attack, ``informed`` (the test
    split's own token distribution: the optimal attacker), ``wordfreq`` or ``uniform``. ``mlm``: a masked LM folder or hub name for the mask-token
    attack; ``None`` trains (once, cached) a small MLM of preset ``mlm_preset`` on a
    built-in corpus disjoint from ``dataset``. ``seed``: reproducible research run
    (recorded as not for release); ``None`` = cryptographically secure noise.
    ``output_vocabulary``: the sanitizers' output vocabulary, passed to
    :func:`textdp.sanitize.make_mechanism`: ``public`` (the default: the shipped public
    word list; the mechanism's law does not depend on the corpus), ``corpus`` (the
    paper's choice: the words of the evaluated texts), ``full`` (the whole embedding
    table) or the path of a word-list file. ``frequencies``: how SanText+ ranks its
    sensitive set, ``public`` (default), ``wordfreq`` or ``corpus`` (the paper's choice;
    the old default). Both are part of the cache key. ``device``: ``auto``, ``cpu``
    (default) or ``cuda`` (:func:`textdp.models.device.resolve_device`): where a transformer
    ``model`` and the attack MLM run; a GPU's cells are cached apart from the CPU's.
    """

    dataset: str = "rotten-tomatoes"
    mechanisms: Sequence[str] = ("santext", "santext+", "fbdd")
    epsilons: Sequence[float] = (1.0, 2.0, 3.0)
    model: str = "tfidf"
    max_docs: int | None = None
    embeddings: str = "glove-6b-50d"
    w: float = 0.9
    p: float = 0.3
    attacks: Sequence[str] = ("bayes", "mask")
    prior: str = "informed"
    mlm: str | None = None
    mlm_preset: str = "small"
    max_attack_tokens: int | None = 10000
    max_mask_positions: int | None = 3000
    deniability_words: int = 100
    seed: int | None = None
    output_vocabulary: str = "public"
    frequencies: str = "public"
    model_options: dict = field(default_factory=dict)
    text_column: str = "text"
    label_column: str = "label"
    device: str = "cpu"

    def validate(self) -> "SweepConfig":
        from textdp.models.device import resolve_device

        self.device = resolve_device(self.device)  # cuda without a visible device: refused here
        from textdp.sanitize import MECHANISMS

        mechs = []
        for m in self.mechanisms:
            key = mechanism_key(m)
            if key not in MECHANISMS:
                raise ParameterError(f"unknown mechanism {m!r}; use any of {', '.join(MECHANISMS)}")
            mechs.append(key)
        if not mechs:
            raise ParameterError("no mechanism given; use e.g. --mechanisms santext,santext+,fbdd")
        self.mechanisms = tuple(dict.fromkeys(mechs))
        eps = []
        for e in self.epsilons:
            try:
                v = float(e)
            except (TypeError, ValueError):
                raise ParameterError(f"epsilon {e!r} is not a number") from None
            if not np.isfinite(v) or v <= 0:
                raise ParameterError(f"epsilon must be a positive finite number, got {e!r}")
            eps.append(v)
        if not eps:
            raise ParameterError("no epsilon given; use e.g. --epsilons 1,2,3")
        twice = next((v for i, v in enumerate(eps) if v in eps[:i]), None)
        if twice is not None:  # one cell per ε: a repeated value is a typo, never silently merged
            raise ParameterError(f"--epsilons lists ε = {epsilon_text(twice)} twice; give each value once")
        self.epsilons = tuple(sorted(eps))
        bad = [a for a in self.attacks if a not in ("bayes", "mask")]
        if bad:
            raise ParameterError(f"unknown attack {bad[0]!r}; use bayes and/or mask")
        self.attacks = tuple(self.attacks)
        if self.max_docs is not None and int(self.max_docs) < 2:
            raise ParameterError(f"--max-docs must be at least 2, got {self.max_docs}")
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ParameterError(f"seed must be a non-negative integer, got {self.seed!r}")
        for name in ("w", "p"):
            v = getattr(self, name)
            try:
                fv = float(v)
            except (TypeError, ValueError):
                raise ParameterError(f"--{name} must be a number in [0, 1], got {v!r}") from None
            if not (np.isfinite(fv) and 0.0 <= fv <= 1.0):
                raise ParameterError(f"--{name} must be in [0, 1], got {v!r}")
        from textdp.sanitize.base import OUTPUT_VOCABULARIES

        ov = str(self.output_vocabulary).strip() if self.output_vocabulary is not None else ""
        if ov.lower() in OUTPUT_VOCABULARIES:
            ov = ov.lower()
        elif not ov or not Path(ov).is_file():
            raise ParameterError(f"unknown --output-vocabulary {self.output_vocabulary!r}: use "
                                 f"{', '.join(OUTPUT_VOCABULARIES)} or an existing word-list file (one word per line)")
        self.output_vocabulary = ov
        fr = str(self.frequencies).strip().lower()
        if fr not in ("public", "wordfreq", "corpus"):
            raise ParameterError(f"unknown --frequencies {self.frequencies!r}: use public, wordfreq or corpus")
        self.frequencies = fr
        from textdp.evaluate.privacy import PRIORS

        if not isinstance(self.prior, str) or self.prior.strip().lower() not in PRIORS:
            raise ParameterError(f"unknown --prior {self.prior!r}; use {', '.join(PRIORS)}")
        self.prior = self.prior.strip().lower()
        for name in ("max_attack_tokens", "max_mask_positions"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ParameterError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {v!r}")
        if "mask" in self.attacks and self.mlm is None and self.mlm_preset not in ("tiny", "small", "base"):
            raise ParameterError(f"unknown --mlm-preset {self.mlm_preset!r}; use tiny, small or base")
        emb = str(self.embeddings).strip()
        if emb.lower() not in ("glove", "glove-6b-50d", "glove.6b.50d", "minilm", "all-minilm-l6-v2") \
                and not Path(emb).exists():
            raise InputError(f"unknown --embeddings {emb!r}: use glove-6b-50d, minilm, a GloVe/word2vec text file "
                             "or a local Hugging Face model folder")
        _check_model(self.model, "model", allow_tfidf=True)
        if "mask" in self.attacks and self.mlm is not None:
            _check_model(self.mlm, "masked LM", allow_tfidf=False)
        return self

    def cell_hash(self) -> str:
        """Hash of the settings that change cell results (not the mechanism/ε lists)."""
        d = asdict(self)
        for k in ("mechanisms", "epsilons"):
            d.pop(k)
        if d.get("device", "cpu") == "cpu":  # the keys of CPU sweeps as before the option existed
            d.pop("device", None)
        else:
            d["device"] = "cuda"
        d["model_options"] = {k: v for k, v in sorted(self.model_options.items()) if not callable(v)}
        d["v"] = _CACHE_VERSION
        parts = [x for x in str(self.dataset).split(",") if x]
        if len(parts) == 2 and all(Path(x).is_file() for x in parts):
            # TRAIN,TEST files: their content, not only their names, keys the cache (an edited
            # file must never be answered from cells computed on its old content)
            from textdp.accounting.ledger import hash_input

            d["files_sha256"] = [hash_input(x) for x in parts]
        if self.output_vocabulary not in ("public", "corpus", "full") and Path(self.output_vocabulary).is_file():
            from textdp.accounting.ledger import hash_input

            d["output_vocabulary_sha256"] = hash_input(self.output_vocabulary)  # an edited list: new cells
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _check_model(name, what: str, *, allow_tfidf: bool) -> None:
    """Offline existence check of a model option (no training, no network).

    A path-like value (starts with ``.``, ``~`` or ``/``, or has more than one ``/``)
    must be an existing folder; a bare name must be ``tfidf``/``minilm``, a local
    folder, or already in the local Hugging Face cache.
    """
    s = str(name).strip() if name is not None else ""
    if not s:
        raise ParameterError(f"empty {what} name; use {'tfidf, ' if allow_tfidf else ''}minilm or a local model folder")
    if allow_tfidf and s.lower() in ("tfidf", "minilm", "all-minilm-l6-v2", "minilm-l6"):
        return
    p = Path(s).expanduser()
    if p.is_dir():
        return
    if p.exists():
        raise InputError(f"{what} {s!r} is a file; give a Hugging Face model folder")
    if s.startswith((".", "~", "/")) or "\\" in s or s.count("/") > 1:
        raise InputError(f"{what} folder {s!r} does not exist")
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(s, "config.json")
    except Exception:  # noqa: BLE001 - missing package or invalid repo id: not available
        hit = None
    if not isinstance(hit, str):
        alts = " (or tfidf, minilm)" if allow_tfidf else ""
        raise InputError(f"{what} {s!r} is not available offline; pass a local model folder{alts}; "
                         "textdp never downloads models")


@dataclass
class SweepResult:
    """``rows``: one row per cell (DataFrame); ``cards``: cell key → privacy card;
    ``paths``: name → written file; ``config``: the settings used."""

    rows: pd.DataFrame
    cards: dict
    paths: dict
    config: SweepConfig
    seconds: float = 0.0
    resumed_cells: int = 0


def load_task(cfg: SweepConfig):
    """Train/test DataFrames (``text``, ``label``) of the built-in dataset or a labelled
    file pair ``TRAIN,TEST``. Raises InputError for unknown names, missing labels,
    fewer than 2 classes or empty splits."""
    from textdp.data.datasets import DATASETS, load_dataset

    name = cfg.dataset
    if name.strip().lower() in DATASETS:
        if (cfg.text_column, cfg.label_column) != ("text", "label"):
            raise ParameterError("--text-column / --label-column apply only to TRAIN,TEST files; built-in "
                                 f"datasets such as {name!r} know their columns")
        ds = load_dataset(name)
        train, test = ds.train, ds.test
        tc, lc = "text", "label"
    else:
        from textdp.data.io import read_table

        parts = [p for p in name.split(",") if p]
        if len(parts) == 2 and any(Path(p).exists() for p in parts):
            for p in parts:
                if not Path(p).exists():
                    raise InputError(f"file {p!r} of --dataset TRAIN,TEST does not exist")
        if len(parts) != 2 or not all(Path(p).exists() for p in parts):
            raise InputError(f"unknown dataset {name!r}; use a built-in name ({', '.join(DATASETS)}) or two "
                             "labelled files TRAIN,TEST")
        (train, _), (test, _) = (read_table(p, text_column=cfg.text_column) for p in parts)
        tc, lc = cfg.text_column, cfg.label_column
        for df, p in ((train, parts[0]), (test, parts[1])):
            if lc not in df.columns:
                raise InputError(f"{Path(p).name}: no label column {lc!r}; evaluation needs labelled data "
                                 "(pass --label-column)")
    if cfg.max_docs:
        train, test = train.head(int(cfg.max_docs)), test.head(int(cfg.max_docs))
    train = pd.DataFrame({"text": train[tc].fillna("").astype(str), "label": train[lc]}).reset_index(drop=True)
    test = pd.DataFrame({"text": test[tc].fillna("").astype(str), "label": test[lc]}).reset_index(drop=True)
    for df, split in ((train, "train"), (test, "test")):
        if len(df) == 0:
            raise InputError(f"the {split} split of {name!r} is empty")
        if df["label"].isna().any() or (df["label"].astype(str).str.strip() == "").any():
            raise InputError(f"the {split} split of {name!r} has texts without a label; evaluation needs labels")
    if train["label"].nunique() < 2:
        raise InputError(f"the train split of {name!r} has fewer than 2 labels; utility cannot be measured")
    return train, test


def task_warnings(cfg: SweepConfig, train: pd.DataFrame, test: pd.DataFrame) -> list[str]:
    """Problems of a TRAIN,TEST pair that do not stop a sweep but make its utility
    numbers misleading: test labels never seen in training, or the same file twice."""
    out = []
    unseen = sorted(set(test["label"].astype(str)) - set(train["label"].astype(str)))
    if unseen:
        share = float(test["label"].astype(str).isin(unseen).mean())
        out.append(f"{share:.0%} of the test texts have labels never seen in training "
                   f"({', '.join(map(repr, unseen[:5]))}{', …' if len(unseen) > 5 else ''}): no model can "
                   "predict them; check that TRAIN and TEST use the same labels")
    parts = [x for x in str(cfg.dataset).split(",") if x]
    if len(parts) == 2 and all(Path(x).is_file() for x in parts):
        same = Path(parts[0]).resolve() == Path(parts[1]).resolve()
        if same or train["text"].tolist() == test["text"].tolist():
            out.append("TRAIN and TEST hold the same texts: utility is measured on training data, not held out")
    return out


def _cell_seed(seed: int | None, key: str) -> int | None:
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, zlib.crc32(key.encode())]).generate_state(1)[0])


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _write_json(path: Path, obj) -> None:
    from textdp.data.io import atomic_output

    with atomic_output(path) as tmp:
        Path(tmp).write_text(json.dumps(obj, indent=2, default=_json_default), encoding="utf-8")


def run_sweep(config: SweepConfig, output: str | Path, *, overwrite: bool = False,
              progress: Callable[[str, int, int], None] | None = None,
              stage: Callable[[str], None] | None = None, workers: int = 1, engine=None) -> SweepResult:
    """Run the sweep and write its report into folder ``output`` (see the module docstring).

    ``progress(label, done, total)`` is called after each cell (label: its :func:`cell_key`;
    ``"KEY (cached)"`` for each cell taken from the cache, before any other); ``stage(text)`` with
    what is being done (``"KEY: step"`` while a cell runs in this process, ``"warning: …"``,
    ``"writing the report"`` for that step only). ``workers > 1`` runs the cells that are not cached in that many
    worker processes (spawned; one BLAS/torch thread each; the default attack MLM is
    trained or loaded once before they start); results are identical to
    ``workers=1`` because every cell draws from its own seed. ``engine`` (a
    :class:`textdp.engines.Engine`, e.g. ``get_engine("dask", workers=2)``) runs the cells that are
    not cached on that engine's workers instead (one cell per task; the output folder must be on a
    file system the workers share, since each cell caches its sanitized text there); results are
    identical to ``workers=1``. Refuses an ``output``
    that already holds a finished report unless ``overwrite`` (cached cells are
    reused either way; delete ``OUTPUT/cache`` to recompute). Raises ParameterError /
    InputError / OutputError.
    """
    from textdp.evaluate.report import write_report

    t0 = time.perf_counter()
    cfg = config.validate()
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--output {str(out)!r} is a file; give a folder for the report")
    for up in out.parents:  # a file in the way is reported with the user's path, before any work
        if up.exists():
            if not up.is_dir():
                raise OutputError(f"cannot write {str(out)!r}: {str(up)!r} is a file, not a folder; "
                                  "choose another --output")
            break
    if (out / "results.json").exists() and not overwrite:
        raise OutputError(f"{str(out)!r} already holds a finished report; pass --overwrite or another --output")
    say = stage or (lambda s: None)
    say(f"loading {cfg.dataset}")
    train, test = load_task(cfg)
    for w in task_warnings(cfg, train, test):
        say("warning: " + w)
    cache = out / "cache" / cfg.cell_hash()
    cache.mkdir(parents=True, exist_ok=True)
    _write_json(cache / "config.json", asdict(cfg) | {"model_options": {k: v for k, v in cfg.model_options.items()
                                                                          if not callable(v)}})
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ParameterError(f"workers must be a whole number >= 1, got {workers!r}")
    cells = [(CLEAN, None)] + [(m, e) for m in cfg.mechanisms for e in cfg.epsilons]
    keys = [cell_key(m, e) for m, e in cells]
    assert len(set(keys)) == len(keys), keys  # exact ε: distinct cells never share a name
    recs: dict = {}
    state: dict = {}
    for (m, e), key in zip(cells, keys):
        path = cache / f"{key}.json"
        if path.exists():
            rec = json.loads(path.read_text("utf-8"))
            row = rec.get("row") or {}
            if row.get("mechanism") == m and (e is None or row.get("epsilon") == e):  # this very cell
                recs[key] = rec
    resumed = len(recs)
    todo = [(m, e, k) for (m, e), k in zip(cells, keys) if k not in recs]
    done = 0

    def finish(key: str, rec: dict) -> None:
        nonlocal done
        _write_json(cache / f"{key}.json", rec)
        recs[key] = rec
        done += 1
        if progress:
            progress(key, resumed + done, len(cells))

    if progress:  # the cells taken from the cache, one call each (label "KEY (cached)")
        for i, key in enumerate(k for k in keys if k in recs):
            progress(f"{key} (cached)", i + 1, len(cells))
    if engine is not None and todo:
        if "mask" in cfg.attacks:
            _mlm(cfg, state, say)  # train (and cache) the default MLM once, not in every worker
        wcfg = replace(cfg, model_options={k: v for k, v in cfg.model_options.items() if not callable(v)})
        todo.sort(key=lambda c: (c[0] == CLEAN, c[0] != "fbdd"))
        say(f"{len(todo)} cells on the {engine.name} engine ({engine.workers} workers)")
        items = [(wcfg, m, e, k, train, test, str(cache)) for m, e, k in todo]
        for (m, e, k), rec in zip(todo, engine.map(_cell_task, items)):
            finish(k, rec)
    elif workers > 1 and len(todo) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if "mask" in cfg.attacks:
            _mlm(cfg, state, say)  # train (and cache) the default MLM once, not in every worker
        wcfg = replace(cfg, model_options={k: v for k, v in cfg.model_options.items() if not callable(v)})
        # slowest cells first (FBDD samples its noise per token), the cheap clean baseline last
        todo.sort(key=lambda c: (c[0] == CLEAN, c[0] != "fbdd"))
        n_w = min(int(workers), len(todo))
        say(f"{len(todo)} cells on {n_w} workers")
        with ProcessPoolExecutor(max_workers=n_w, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init) as ex:
            futs = {ex.submit(_cell_job, wcfg, m, e, k, train, test, str(cache)): k for m, e, k in todo}
            for f in as_completed(futs):
                finish(futs[f], f.result())
    else:
        for m, e, k in todo:
            finish(k, _run_cell(cfg, m, e, k, train, test, cache, state, say))
    rows = [recs[k]["row"] for k in keys]
    cards = {k: recs[k].get("card", {}) for k in keys}
    df = pd.DataFrame(rows)
    say("writing the report")
    paths = write_report(df, cards, cfg, out)
    return SweepResult(df, cards, paths, cfg, time.perf_counter() - t0, resumed)


def _worker_init() -> None:
    """Sweep worker: one BLAS / OpenMP / torch thread (the workers share the cores)."""
    import os

    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - ships with scikit-learn
        pass


def _cell_job(cfg, mech_name, eps, key, train, test, cache: str) -> dict:
    """One cell in a worker process (see :func:`run_sweep`)."""
    import sys

    if "torch" in sys.modules:  # pragma: no cover - spawned workers import torch lazily
        sys.modules["torch"].set_num_threads(1)
    return _run_cell(cfg, mech_name, eps, key, train, test, Path(cache), {}, lambda s: None)


def _cell_task(item) -> dict:
    """One cell as an engine task (:meth:`textdp.engines.Engine.map` passes one argument)."""
    return _cell_job(*item)


def _mlm(cfg: SweepConfig, state: dict, say):
    if "mlm" not in state:
        from textdp.models.mlm import default_mlm, load_mlm, public_corpus_for

        if cfg.mlm:
            say(f"loading masked LM {cfg.mlm}")
            state["mlm"] = load_mlm(cfg.mlm)
            if cfg.device != "cpu":
                state["mlm"].to(cfg.device)
        else:
            corpus = public_corpus_for(cfg.dataset)
            say(f"masked LM: {cfg.mlm_preset} preset on {corpus} (trained once, then cached)")
            state["mlm"] = default_mlm(corpus, cfg.mlm_preset, **({"device": cfg.device} if cfg.device != "cpu" else {}))
            held = (getattr(state["mlm"], "info", None) or {}).get("heldout") or {}
            if held and held.get("top1", 1.0) <= held.get("frequency_baseline", 0.0) + 0.01:
                say(f"warning: the {cfg.mlm_preset} MLM does not beat the word-frequency baseline on held-out "
                    f"text (top-1 {held['top1']:.3f} vs {held['frequency_baseline']:.3f}): its mask-token success "
                    "is a weak lower bound; use --mlm-preset small or --mlm PATH")
    return state["mlm"]


def _utility(cfg, train_texts, train_labels, test_san, test_clean, test_labels):
    from textdp.evaluate.utility import evaluate_utility, make_model

    model = make_model(cfg.model, **({"seed": cfg.seed or 0, "device": cfg.device} | dict(cfg.model_options)))
    return evaluate_utility(model, train_texts, train_labels, test_san, test_clean, test_labels)


def _model_name(model) -> str:
    """A model option as a progress line shows it: a folder's last part (the line is cut at 40 columns)."""
    s = str(model).strip().rstrip("/\\")
    return s.replace("\\", "/").rsplit("/", 1)[-1] or s


def _run_cell(cfg, mech_name, eps, key, train, test, cache: Path, state: dict, say) -> dict:
    from textdp.data.io import write_table
    from textdp.evaluate.privacy import (AlignedTokens, aligned_tokens, bayes_attack, deniability_summary,
                                         mask_token_attack)

    t0 = time.perf_counter()
    tr_texts, te_texts = train["text"].tolist(), test["text"].tolist()
    row: dict = {"mechanism": mech_name, "epsilon": eps, "dataset": cfg.dataset, "model": cfg.model,
                 "output_vocabulary": cfg.output_vocabulary,
                 "majority_rate": float(test["label"].astype(str).value_counts(normalize=True).max())}
    card: dict = {}
    seed = _cell_seed(cfg.seed, key)
    attack_rng = np.random.default_rng(seed if seed is not None else 0)  # token subsample only
    if mech_name == CLEAN:
        say(f"{key}: training {_model_name(cfg.model)}")
        u = _utility(cfg, tr_texts, train["label"].tolist(), te_texts, te_texts, test["label"].tolist())
        row.update(u.to_dict())
        row.update({"bayes_top1": 1.0, "bayes_top5": 1.0, "bayes_optimum_top1": 1.0, "bayes_optimum_top5": 1.0,
                    "share_changed": 0.0})
        if "mask" in cfg.attacks:
            from textdp.models.mlm import tokenize_words

            words = tokenize_words(te_texts)
            al = AlignedTokens(words, words, list(range(len(words))), 0)
            say(f"{key}: mask-token attack")
            row.update(mask_token_attack(_mlm(cfg, state, say), al, cfg.max_mask_positions, attack_rng))
        card = {"mechanism": CLEAN, "guarantee": {"kind": "none", "reason": "clean text (no sanitization)"},
                "guarantee_text": "no privacy: clean text baseline"}
        row["seconds"] = time.perf_counter() - t0
        return {"row": row, "card": card}

    from textdp.sanitize import make_mechanism, sanitize_texts

    say(f"{key}: sanitizing")
    kw = {"w": cfg.w, "p": cfg.p, "frequencies": cfg.frequencies} if mech_name == "santext+" else {}
    mech = make_mechanism(mech_name, cfg.embeddings, eps, rng=seed, output_vocabulary=cfg.output_vocabulary, **kw)
    san_path = cache / f"{key}.sanitized.parquet"
    if san_path.exists():
        san = pd.read_parquet(san_path)
        mech.fit(tr_texts + te_texts)
        stats = None
    else:
        mech.fit(tr_texts + te_texts)
        out, stats = sanitize_texts(tr_texts + te_texts, mech)
        san = pd.DataFrame({"split": ["train"] * len(tr_texts) + ["test"] * len(te_texts), "text": out})
        write_table(san, san_path)
    s_tr = san.loc[san["split"] == "train", "text"].tolist()
    s_te = san.loc[san["split"] == "test", "text"].tolist()
    if not any(t.strip() for t in s_tr):
        raise InputError(f"{key}: the sanitized training split is empty (every token dropped?); "
                         "use another --oov policy or check the text column")
    say(f"{key}: training {_model_name(cfg.model)}")
    u = _utility(cfg, s_tr, train["label"].tolist(), s_te, te_texts, test["label"].tolist())
    row.update(u.to_dict())
    al = aligned_tokens(mech, te_texts, s_te)
    o, s = al.flat()
    row["share_changed"] = float(np.mean([a != b for a, b in zip(o, s)])) if o else float("nan")
    row["docs_misaligned"] = al.docs_misaligned
    if "bayes" in cfg.attacks:
        say(f"{key}: Bayes inversion")
        row.update(bayes_attack(mech, al, prior=cfg.prior, k=5, max_tokens=cfg.max_attack_tokens, rng=attack_rng))
    if "mask" in cfg.attacks:
        say(f"{key}: mask-token attack")
        row.update(mask_token_attack(_mlm(cfg, state, say), al, cfg.max_mask_positions, attack_rng))
    say(f"{key}: N_w / S_w")
    den = deniability_summary(mech, n_words=cfg.deniability_words)
    row.update(den)
    g = mech.guarantee
    card = {"mechanism": mech_name, "parameters": mech.parameters(), "guarantee": g.to_dict(),
            "guarantee_text": g.describe(), "embeddings": mech.embeddings.describe(),
            "output_vocabulary": mech.output_vocabulary_info(),
            "output_vocabulary_size": len(mech.output_words), "seed": mech.seed_info,
            "sanitize_stats": stats.to_dict() if stats is not None else None, "plausible_deniability": den}
    row["seconds"] = time.perf_counter() - t0
    return {"row": row, "card": card}
