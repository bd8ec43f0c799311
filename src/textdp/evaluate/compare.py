"""Mechanisms compared at equal measured privacy (``textdp compare``).

The ε of a metric-DP sanitizer is per unit of embedding distance: the same ε means different
protection for SanText, FBDD or CusText, and for one mechanism on different embeddings. This
module puts every word-level sanitizer on one *empirical* privacy axis, finds for each the ε at
which a privacy target is met, and measures the utility there:

1. **Privacy metric** (:func:`privacy_point`), on the tokens of the first ``privacy_docs`` test
   documents (the attacked population; ``π`` their token distribution):

   * ``bayes`` (default): the top-1 success of the Bayes-optimal informed attacker who sees one
     sanitized token and knows the mechanism and ``π`` (issue 6; :mod:`textdp.attacks.bayes`).
     For a mechanism with a closed-form law (``cls.exact_probabilities``) it is the exact
     optimum ``Σ_y max_x π(x)·p(y|x)`` computed by :func:`textdp.attacks.bayes.bayes_optimum`
     from ``mech.probabilities`` (no confidence interval: no sampling). For a continuous-noise
     mechanism (FBDD, Mahalanobis, Vickrey, TruncatedGumbel: no closed form) it is a **held-out
     Monte Carlo** estimate: each attacked token is sanitized ``mc_train`` times to estimate the
     joint law of (original, output), the plug-in MAP rule ``x̂(y) = argmax_x n(x, y)`` is fixed
     from those draws (an output never drawn is guessed as itself when it is a hypothesis, else as
     the prior's mode), and its success is measured on ``mc_test`` fresh draws per token, with a
     95 % Wilson interval. That rule is one attacker among those the optimum ranges over, so the
     estimate is a lower bound on the optimum up to its sampling error (a plug-in rule from
     finitely many draws is not quite the optimal rule); the table says which method each row used.
   * ``nw``: plausible deniability, the median ``N_w`` (probability that a word is kept) over
     ``deniability_words`` output words (:func:`textdp.evaluate.privacy.deniability_summary`;
     exact for closed-form laws, 200 draws per word otherwise).

   Both grow with ε (less privacy); a target is *met* at ε when the metric is at most the target.

2. **Search** (:func:`find_epsilon`): bisection over log ε (bracket by factors of 10 from
   ``start``, then log-linear interpolation, safeguarded), at most ``max_evaluations``
   evaluations per target, ε rounded to 4 significant digits; every evaluation is cached (in
   memory, shared by the targets, and on disk) so a second target or a re-run reuses it. The
   reported ε is the largest evaluated ε whose metric meets the target; the search stops when a
   point meets it within ``tolerance`` below the target or the bracket is narrower than 2 %.

3. **Utility** at each found ε (and at each ``epsilons`` value of the plain sweep): the
   ``textdp evaluate`` cell (:func:`textdp.evaluate.sweep.run_sweep`'s cells: sanitize train and
   test, train ``model`` on sanitized train text, accuracy on sanitized test text), with the
   binomial standard error ``sqrt(a(1-a)/n_test)`` of the test accuracy (the randomness of the
   test set, not of the sanitizer).

Document-level (LM-based) mechanisms have no token-recovery attack: they are listed apart, never
placed on the axis. Output folder (as ``textdp evaluate``): ``results.csv`` (equal-privacy table),
``sweep.csv``, ``evaluations.csv`` (every privacy evaluation of the search), ``frontier.png``,
``report.html`` and ``results.json`` (written last: marks a finished report); ``cache/`` lets an
interrupted run resume. Nothing here is a DP release (:data:`textdp.evaluate.report.NOT_A_RELEASE`).

Quick start::

    from textdp.evaluate.compare import CompareConfig, run_compare
    res = run_compare(CompareConfig("rotten-tomatoes", ["santext", "fbdd"], targets=[0.25], limit=500, seed=0),
                      "compare-out")
    print(res.table[["mechanism", "target", "epsilon", "privacy", "utility", "utility_se"]])
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from textdp.errors import InputError, OutputError, ParameterError, TextDPError

__all__ = ["CompareConfig", "CompareResult", "PrivacyPoint", "SearchResult", "METRICS", "privacy_point",
           "find_epsilon", "wilson_interval", "word_level_mechanisms", "run_compare"]

#: privacy metrics of the common axis: name -> what it measures
METRICS = {"bayes": "Bayes-optimal informed attacker, top-1 recovery rate",
           "nw": "plausible deniability N_w (median share of draws that keep the word)"}
_CACHE_VERSION = 1


# --------------------------------------------------------------------------------------- metric
@dataclass
class PrivacyPoint:
    """The privacy metric of one mechanism at one ε. ``value`` in [0, 1] (higher = less private);
    ``ci_low``/``ci_high``: 95 % interval (equal to ``value`` for an exact figure, NaN when the
    method gives none); ``method``: ``exact`` | ``monte-carlo`` | ``sampled``; ``n``: held-out
    draws (Monte Carlo) or words (N_w); ``topk``: the top-5 success (exact path only)."""

    epsilon: float
    value: float
    ci_low: float
    ci_high: float
    method: str
    n: int = 0
    topk: float | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def wilson_interval(hits: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (``hits`` of ``n``; 95 % by default)."""
    if n <= 0:
        return float("nan"), float("nan")
    p = hits / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def _mc_bayes(mech, counts: Mapping[str, int], mc_train: int, mc_test: int, seeds: tuple) -> PrivacyPoint:
    """Held-out Monte Carlo estimate of the informed attacker's top-1 success (module docstring)."""
    words = list(counts)
    rows = mech.input_rows(words)
    w = np.fromiter((counts[x] for x in words), np.int64, len(words))
    ok = rows >= 0
    words, rows, w = [x for x, g in zip(words, ok.tolist()) if g], rows[ok], w[ok]
    if not len(words):
        raise InputError("no attacked token is in the mechanism's vocabulary")
    n_in, n_out = len(words), len(mech.output_words)
    x_tr = np.repeat(np.arange(n_in), w * int(mc_train))
    y_tr = mech.output_positions(mech.sample_rows(rows[x_tr], seeds[0]))
    keys, cnt = np.unique(y_tr.astype(np.int64) * n_in + x_tr, return_counts=True)
    ys, xs = keys // n_in, keys % n_in
    # per output: the input with the most joint draws (ties: larger prior weight, then lower index)
    order = np.lexsort((xs, -w[xs], -cnt, ys))
    ys, xs = ys[order], xs[order]
    first = np.ones(len(ys), dtype=bool)
    first[1:] = ys[1:] != ys[:-1]
    guess = np.full(n_out, int(np.argmax(w)), dtype=np.int64)  # never drawn: the prior's mode ...
    idx = {x: i for i, x in enumerate(words)}
    for j, y in enumerate(mech.output_words):  # ... or the output itself when it is a hypothesis
        i = idx.get(y)
        if i is not None:
            guess[j] = i
    guess[ys[first]] = xs[first]
    x_te = np.repeat(np.arange(n_in), w * int(mc_test))
    y_te = mech.output_positions(mech.sample_rows(rows[x_te], seeds[1]))
    hits = int((guess[y_te] == x_te).sum())
    lo, hi = wilson_interval(hits, len(x_te))
    return PrivacyPoint(float(mech.epsilon), hits / len(x_te), lo, hi, "monte-carlo", len(x_te))


def privacy_point(mech, counts: Mapping[str, int], metric: str = "bayes", *, mc_train: int = 10, mc_test: int = 5,
                  seeds: tuple = (None, None), deniability_words: int = 100, force_monte_carlo: bool = False
                  ) -> PrivacyPoint:
    """The privacy metric of a fitted word-level sanitizer ``mech`` at its ε (see the module docstring).

    ``counts``: word -> count of the attacked tokens (the informed prior ``π``, e.g.
    :func:`textdp.evaluate.privacy.token_counts`); ``metric``: ``bayes`` or ``nw``. For ``bayes``
    the exact optimum (:func:`textdp.attacks.bayes.bayes_optimum`) when ``mech.exact_probabilities``
    and not ``force_monte_carlo``, else the held-out Monte Carlo estimate with ``mc_train`` /
    ``mc_test`` draws per attacked token and ``seeds`` (train, test: ints for a reproducible run,
    None for the mechanism's CSPRNG keys). Returns :class:`PrivacyPoint`.
    """
    t0 = time.perf_counter()
    if metric not in METRICS:
        raise ParameterError(f"unknown privacy metric {metric!r}; use {', '.join(METRICS)}")
    if metric == "nw":
        from textdp.evaluate.privacy import deniability_summary

        d = deniability_summary(mech, n_words=deniability_words)
        v = float(d["N_w_median"])
        exact = bool(d["N_w_S_w_exact"])
        pt = PrivacyPoint(float(mech.epsilon), v, v if exact else float("nan"), v if exact else float("nan"),
                          "exact" if exact else "sampled", int(deniability_words))
    elif getattr(mech, "exact_probabilities", False) and not force_monte_carlo:
        from textdp.attacks.bayes import bayes_optimum

        r = bayes_optimum(mech, dict(counts), k=5)
        pt = PrivacyPoint(float(mech.epsilon), r.top1, r.top1, r.top1, "exact", int(sum(counts.values())), r.topk)
    else:
        pt = _mc_bayes(mech, counts, mc_train, mc_test, seeds)
    pt.seconds = time.perf_counter() - t0
    return pt


# --------------------------------------------------------------------------------------- search
@dataclass
class SearchResult:
    """Outcome of :func:`find_epsilon`. ``epsilon``: the largest evaluated ε whose metric meets the
    target (``value <= target``), None when none does; ``value``/``point``: its metric;
    ``bracket``: (largest ε meeting, smallest ε above the target) among the evaluations
    (None where absent); ``status``: ``found`` | ``above range`` (met even at the largest ε tried:
    the target is looser than the mechanism's weakest privacy) | ``below range`` (not met even at
    the smallest ε tried: stricter than the ε → 0 limit, e.g. the prior's mode); ``evaluations``:
    how many new evaluations this search made."""

    target: float
    epsilon: float | None
    value: float | None
    status: str
    bracket: tuple
    evaluations: int
    point: object = None


def _round_eps(e: float) -> float:
    return float(f"{e:.4g}")


def find_epsilon(evaluate: Callable[[float], object], target: float, *, start: float = 1.0, eps_min: float = 1e-3,
                 eps_max: float = 1e4, max_evaluations: int = 10, tolerance: float = 0.01,
                 known: dict | None = None) -> SearchResult:
    """Bisection over log ε for the ε at which a metric that grows with ε meets ``target``.

    ``evaluate(eps)`` returns the metric (a float, or an object with ``.value``); ``known``: ε ->
    result of earlier evaluations (shared between targets; new ones are added). Brackets by factors
    of 10 from ``start`` within ``[eps_min, eps_max]``, then interpolates in log ε (a step never
    closer than 10 % of the bracket's log-width to its ends). Stops when an evaluated point meets
    the target within ``tolerance`` (``target - tolerance <= value <= target``), when the bracket is
    narrower than a factor 1.02, when the 95 % interval of an estimated (Monte Carlo) point that
    meets the target reaches it, or after ``max_evaluations`` new evaluations.
    """
    if not (0 < eps_min < eps_max) or not math.isfinite(eps_min):
        raise ParameterError(f"bad ε search range [{eps_min!r}, {eps_max!r}]")
    pts = known if known is not None else {}
    new = 0

    def val(e):
        r = pts[e]
        return float(getattr(r, "value", r))

    def f(e):
        nonlocal new
        e = min(max(_round_eps(e), eps_min), eps_max)
        if e not in pts:
            pts[e] = evaluate(e)
            new += 1
        return e, val(e)

    def bracket():
        ok = [e for e in pts if val(e) <= target]
        bad = [e for e in pts if val(e) > target]
        lo = max(ok) if ok else None
        hi = min((e for e in bad if lo is None or e > lo), default=None)
        return lo, hi

    def done():
        lo, hi = bracket()
        if lo is not None and target - tolerance <= val(lo) <= target:
            return True
        if lo is not None and getattr(pts[lo], "method", "exact") != "exact" and \
                getattr(pts[lo], "ci_high", -1.0) >= target:  # an estimate whose interval holds the target
            return True
        return lo is not None and hi is not None and hi / lo <= 1.02

    lo, hi = bracket()
    if lo is None and hi is None:
        f(start)
        lo, hi = bracket()
    while hi is None and new < max_evaluations and (lo is None or lo < eps_max):  # go up
        e, v = f(min(eps_max, (lo if lo is not None else start) * 10))
        lo, hi = bracket()
        if e >= eps_max:
            break
    while lo is None and new < max_evaluations:  # go down
        e, v = f(max(eps_min, hi / 10))
        lo, hi = bracket()
        if e <= eps_min:
            break
    step = 0
    while lo is not None and hi is not None and not done() and new < max_evaluations:
        a, b = math.log(lo), math.log(hi)
        fa, fb = val(lo), val(hi)
        # log-linear interpolation, every other step a plain bisection (interpolation alone can
        # creep towards one end of the bracket)
        t = 0.5 if fb == fa or step % 2 else (target - fa) / (fb - fa)
        t = min(0.9, max(0.1, t))
        step += 1
        e = _round_eps(math.exp(a + t * (b - a)))
        if e in pts or not (lo < e < hi):
            e = _round_eps(math.sqrt(lo * hi))
            if e in pts or not (lo < e < hi):
                break
        f(e)
        lo, hi = bracket()
    lo, hi = bracket()
    if lo is None:
        status = "below range"
    elif hi is None:
        status = "above range"
    else:
        status = "found"
    return SearchResult(float(target), lo, val(lo) if lo is not None else None, status, (lo, hi), new,
                        pts.get(lo) if lo is not None else None)


# --------------------------------------------------------------------------------------- config
def word_level_mechanisms() -> tuple[list[str], list[str]]:
    """The registered sanitizers split into (word-level, document-level) names, in registry order."""
    from textdp.sanitize import MECHANISMS

    word = [n for n, c in MECHANISMS.items() if not getattr(c, "document_level", False)]
    doc = [n for n, c in MECHANISMS.items() if getattr(c, "document_level", False)]
    return word, doc


@dataclass
class CompareConfig:
    """Settings of :func:`run_compare` (module docstring).

    ``dataset``: a built-in labelled dataset or ``TRAIN,TEST`` files (as ``textdp evaluate``);
    ``mechanisms``: registry names (None: every registered word-level sanitizer); ``metric``:
    ``bayes`` | ``nw``; ``targets``: privacy targets in (0, 1); ``epsilons``: the plain ε sweep
    (may be empty); ``limit``: at most N documents per split; ``privacy_docs``: the first N test
    documents form the attacked population; ``mc_train``/``mc_test``: Monte Carlo draws per
    attacked token; ``eps_min``/``eps_max``/``eps_start``: the search range and its first point;
    ``max_evaluations``: per target and mechanism; ``tolerance``: how far below the target a
    point may be and still end the search; ``seed``: reproducible research run (not for
    release), None = CSPRNG; ``model``, ``embeddings``, ``output_vocabulary``,
    ``text_column``, ``label_column``: as :class:`textdp.evaluate.sweep.SweepConfig`.
    """

    dataset: str = "rotten-tomatoes"
    mechanisms: Sequence[str] | None = None
    metric: str = "bayes"
    targets: Sequence[float] = (0.25, 0.5)
    epsilons: Sequence[float] = ()
    limit: int | None = None
    privacy_docs: int = 100
    mc_train: int = 10
    mc_test: int = 5
    eps_min: float = 1e-3
    eps_max: float = 1e4
    eps_start: float = 1.0
    max_evaluations: int = 10
    tolerance: float = 0.01
    deniability_words: int = 100
    model: str = "tfidf"
    embeddings: str = "glove-6b-50d"
    output_vocabulary: str = "public"
    seed: int | None = None
    text_column: str = "text"
    label_column: str = "label"
    apart: tuple = field(default=(), init=False)  # (name, reason) of mechanisms not placed on the axis

    def validate(self) -> "CompareConfig":
        from textdp.evaluate.sweep import mechanism_key
        from textdp.sanitize import MECHANISMS, canonical_name

        word, doc = word_level_mechanisms()
        names = list(word) if self.mechanisms is None else [canonical_name(mechanism_key(m) if
                                                                           mechanism_key(m) in MECHANISMS else m)
                                                            for m in self.mechanisms]
        names = list(dict.fromkeys(names))
        apart = [(n, "document-level: no token-recovery attack is named for it, so it has no place on this "
                     "privacy axis") for n in (doc if self.mechanisms is None else [n for n in names if n in doc])]
        self.mechanisms = tuple(n for n in names if n not in doc)
        self.apart = tuple(apart)
        if not self.mechanisms:
            raise ParameterError("no word-level mechanism to compare; use e.g. --mechanisms santext,fbdd")
        self.metric = str(self.metric).strip().lower()
        if self.metric not in METRICS:
            raise ParameterError(f"unknown --metric {self.metric!r}; use {' or '.join(METRICS)}")
        self.targets = tuple(sorted(_floats(self.targets, "--targets", lambda v: 0 < v < 1, "in (0, 1)")))
        self.epsilons = tuple(sorted(_floats(self.epsilons, "--epsilons", lambda v: 0 < v < math.inf,
                                             "positive and finite")))
        if not self.targets and not self.epsilons:
            raise ParameterError("nothing to do: give --targets and/or --epsilons")
        for name in ("privacy_docs", "mc_train", "mc_test", "max_evaluations", "deniability_words"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ParameterError(f"--{name.replace('_', '-')} must be a whole number >= 1, got {v!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, (int, np.integer))
                                       or self.limit < 2):
            raise ParameterError(f"--limit must be a whole number >= 2, got {self.limit!r}")
        for name in ("eps_min", "eps_max", "eps_start", "tolerance"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise ParameterError(f"--{name.replace('_', '-')} must be a positive number, got {v!r}")
        if not (self.eps_min < self.eps_max) or not (self.eps_min <= self.eps_start <= self.eps_max):
            raise ParameterError(f"the ε search range needs eps_min <= eps_start <= eps_max, got "
                                 f"{self.eps_min}, {self.eps_start}, {self.eps_max}")
        self.sweep_config().validate()  # dataset name, embeddings, model, output vocabulary, seed
        return self

    def sweep_config(self):
        """The :class:`textdp.evaluate.sweep.SweepConfig` of the utility cells (no attacks)."""
        from textdp.evaluate.sweep import SweepConfig

        return SweepConfig(dataset=self.dataset, mechanisms=self.mechanisms, epsilons=(1.0,), model=self.model,
                           max_docs=self.limit, embeddings=self.embeddings, attacks=(), seed=self.seed,
                           output_vocabulary=self.output_vocabulary, text_column=self.text_column,
                           label_column=self.label_column, deniability_words=self.deniability_words)

    def privacy_hash(self) -> str:
        """Hash of the settings that change a privacy evaluation (not the targets or mechanisms)."""
        d = {k: getattr(self, k) for k in ("metric", "limit", "privacy_docs", "mc_train", "mc_test",
                                            "deniability_words", "seed")}
        d.update(cells=self.sweep_config().validate().cell_hash(), v=_CACHE_VERSION)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _floats(values, option: str, ok, what: str) -> list[float]:
    out = []
    for e in values:
        try:
            v = float(e)
        except (TypeError, ValueError):
            raise ParameterError(f"{option}: {e!r} is not a number") from None
        if not ok(v):
            raise ParameterError(f"{option} values must be {what}, got {e!r}")
        if v in out:
            raise ParameterError(f"{option} lists {e!r} twice; give each value once")
        out.append(v)
    return out


# --------------------------------------------------------------------------------------- run
@dataclass
class CompareResult:
    """``table``: one row per mechanism × target (the equal-privacy table); ``sweep``: one row per
    mechanism × ε of the plain sweep; ``evaluations``: every privacy evaluation; ``apart``:
    (mechanism, reason) not placed on the axis; ``paths``: written files; ``seconds``: wall time."""

    table: pd.DataFrame
    sweep: pd.DataFrame
    evaluations: pd.DataFrame
    clean: dict
    apart: list
    paths: dict
    config: CompareConfig
    seconds: float


def _json_load(path: Path):
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def run_compare(config: CompareConfig, output: str | Path, *, overwrite: bool = False,
                stage: Callable[[str], None] | None = None) -> CompareResult:
    """Run the comparison (module docstring) and write its report into folder ``output``.

    ``stage(text)`` is called with what is being done. Refuses an ``output`` that is a file or
    already holds a finished report (``results.json``) unless ``overwrite``. A folder this call
    created is removed again when it fails before any result was cached. Raises ParameterError /
    InputError / OutputError.
    """
    t0 = time.perf_counter()
    cfg = config.validate()
    say = stage or (lambda s: None)
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--output {str(out)!r} is a file; give a folder for the report")
    for up in out.parents:
        if up.exists():
            if not up.is_dir():
                raise OutputError(f"cannot write {str(out)!r}: {str(up)!r} is a file, not a folder; choose another "
                                  "--output")
            break
    if (out / "results.json").exists() and not overwrite:
        raise OutputError(f"{str(out)!r} already holds a finished report; pass --overwrite or another --output")
    from textdp.evaluate.sweep import load_task

    scfg = cfg.sweep_config().validate()
    say(f"loading {cfg.dataset}")
    train, test = load_task(scfg)
    created = not out.exists()
    try:
        return _run(cfg, scfg, train, test, out, say, t0)
    except TextDPError:
        if created and out.is_dir() and not any(p.is_file() and p.suffix == ".json" and p.name != "config.json"
                                                for p in out.rglob("*")):
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise


def _run(cfg: CompareConfig, scfg, train, test, out: Path, say, t0: float) -> CompareResult:
    from textdp.evaluate.privacy import AlignedTokens, _words, token_counts
    from textdp.evaluate.sweep import CLEAN, _cell_seed, _run_cell, _write_json, cell_key, epsilon_text
    from textdp.sanitize import MECHANISMS, make_mechanism

    all_texts = train["text"].tolist() + test["text"].tolist()
    priv_texts = test["text"].tolist()[: cfg.privacy_docs]
    cache = out / "cache" / scfg.cell_hash()
    pcache = out / "cache" / f"privacy-{cfg.privacy_hash()}"
    cache.mkdir(parents=True, exist_ok=True)
    pcache.mkdir(parents=True, exist_ok=True)
    cfg_d = {k: v for k, v in asdict(cfg).items()}
    _write_json(pcache / "config.json", cfg_d)
    counts_by_tok: dict = {}
    evals: list[dict] = []

    def build(name: str, eps: float, seed):
        kw = {"w": scfg.w, "p": scfg.p, "frequencies": scfg.frequencies} if name == "santext+" else {}
        mech = make_mechanism(name, scfg.embeddings, eps, rng=seed, output_vocabulary=scfg.output_vocabulary, **kw)
        if mech.corpus_dependent:
            mech.fit(all_texts)
        return mech

    def counts_for(mech) -> dict:
        key = (str(mech.embeddings.source), bool(mech.embeddings.lowercase))
        if key not in counts_by_tok:
            w = _words(mech, priv_texts)
            counts_by_tok[key] = token_counts(mech, AlignedTokens(w, w, list(range(len(w))), 0))
            if not counts_by_tok[key]:
                raise InputError(f"the first {cfg.privacy_docs} test documents of {cfg.dataset!r} have no token "
                                 "with an embedding: nothing to attack")
        return counts_by_tok[key]

    def evaluator(name: str, known: dict):
        def evaluate(eps: float):
            key = f"{name}-eps{epsilon_text(eps)}"
            path = pcache / f"{key}.json"
            rec = _json_load(path) if path.exists() else None
            if rec and rec.get("mechanism") == name and rec.get("epsilon") == eps:
                pt = PrivacyPoint(**rec["point"])
                cached = True
            else:
                seed = _cell_seed(cfg.seed, "privacy-" + key)
                mech = build(name, eps, seed)
                seeds = (None, None) if seed is None else (_cell_seed(seed, "train"), _cell_seed(seed, "test"))
                say(f"{name}: privacy at ε={epsilon_text(eps)}")
                pt = privacy_point(mech, counts_for(mech), cfg.metric, mc_train=cfg.mc_train, mc_test=cfg.mc_test,
                                   seeds=seeds, deniability_words=cfg.deniability_words)
                _write_json(path, {"mechanism": name, "epsilon": eps, "point": pt.to_dict()})
                cached = False
            evals.append({"mechanism": name, **pt.to_dict(), "cached": cached})
            return pt
        return evaluate

    state: dict = {}
    say_cell = say

    def cell(name: str, eps: float | None) -> dict:
        key = cell_key(name, eps)
        path = cache / f"{key}.json"
        rec = _json_load(path) if path.exists() else None
        row = (rec or {}).get("row") or {}
        if not (rec and row.get("mechanism") == name and (eps is None or row.get("epsilon") == eps)):
            rec = _run_cell(scfg, name, eps, key, train, test, cache, state, say_cell)
            _write_json(path, rec)
        return rec

    say("clean baseline")
    clean = cell(CLEAN, None)["row"]
    rows, sweep_rows = [], []
    points: dict[str, dict] = {}
    for name in cfg.mechanisms:
        cls = MECHANISMS[name]
        known = points.setdefault(name, {})
        evaluate = evaluator(name, known)
        lo_lim = max(cfg.eps_min, float(getattr(cls, "epsilon_min", 0.0)) or cfg.eps_min)
        hi_lim = min(cfg.eps_max, float(getattr(cls, "epsilon_max", math.inf)))
        start = min(max(cfg.eps_start, lo_lim), hi_lim)
        for eps in cfg.epsilons:  # first: the search then starts from these points
            if eps not in known:
                known[eps] = evaluate(eps)
        for target in cfg.targets:
            res = find_epsilon(evaluate, target, start=start, eps_min=lo_lim, eps_max=hi_lim,
                               max_evaluations=cfg.max_evaluations, tolerance=cfg.tolerance, known=known)
            r = {"mechanism": name, "target": target, "status": res.status, "epsilon": res.epsilon,
                 "bracket_low": res.bracket[0], "bracket_high": res.bracket[1],
                 "evaluations": len(known), "exact_law": bool(getattr(cls, "exact_probabilities", False))}
            pt = res.point
            if pt is not None:
                r.update(privacy=pt.value, privacy_ci_low=pt.ci_low, privacy_ci_high=pt.ci_high,
                         privacy_method=pt.method, privacy_n=pt.n)
                say(f"{name}: utility at ε={epsilon_text(res.epsilon)} (target {target:g})")
                r.update(_utility_fields(cell(name, res.epsilon)["row"]))
            else:
                least = min(known)  # the smallest ε tried (the search went down to it)
                q = known[least]
                r.update(privacy=q.value, privacy_ci_low=q.ci_low, privacy_ci_high=q.ci_high,
                         privacy_method=q.method, privacy_n=q.n,
                         note=f"not met: even ε={epsilon_text(least)} gives {q.value:.3f}")
            rows.append(r)
        for eps in cfg.epsilons:
            pt = known[eps]
            say(f"{name}: utility at ε={epsilon_text(eps)} (sweep)")
            s = {"mechanism": name, "epsilon": eps, "privacy": pt.value, "privacy_ci_low": pt.ci_low,
                 "privacy_ci_high": pt.ci_high, "privacy_method": pt.method}
            s.update(_utility_fields(cell(name, eps)["row"]))
            sweep_rows.append(s)
    table = pd.DataFrame(rows)
    sweep = pd.DataFrame(sweep_rows)
    ev = pd.DataFrame(evals).drop_duplicates(subset=["mechanism", "epsilon"], keep="first") if evals else pd.DataFrame()
    if len(ev):
        ev = ev.sort_values(["mechanism", "epsilon"], kind="stable").reset_index(drop=True)
    say("writing the report")
    paths = write_compare_report(table, sweep, ev, _utility_fields(clean), cfg, out)
    return CompareResult(table, sweep, ev, _utility_fields(clean), list(cfg.apart), paths, cfg,
                         time.perf_counter() - t0)


def _utility_fields(row: dict) -> dict:
    u, n = row.get("utility_sanitized"), row.get("n_test")
    se = (math.sqrt(max(u * (1 - u), 0.0) / n) if row.get("metric") == "accuracy" and u is not None and n
          else float("nan"))
    return {"utility": u, "utility_se": se, "utility_clean": row.get("utility_clean"),
            "utility_metric": row.get("metric"), "n_test": n, "share_changed": row.get("share_changed"),
            "N_w_median": row.get("N_w_median"), "cell_seconds": row.get("seconds")}


# --------------------------------------------------------------------------------------- report
_COLORS = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22"]


def plot_frontier(table: pd.DataFrame, sweep: pd.DataFrame, clean: dict, cfg: CompareConfig, path: Path) -> None:
    """Utility (y) against the privacy metric (x, the common axis): one curve per mechanism through
    its equal-privacy points (filled) and sweep points (open), error bars = the Monte Carlo 95 %
    interval (x) and ±1.96 standard errors of the accuracy (y); dashed verticals at the targets."""
    from textdp.evaluate.report import _mpl

    plt = _mpl()
    fig, ax = plt.subplots(figsize=(7.0, 4.8), dpi=110)
    names = list(dict.fromkeys(list(table.get("mechanism", pd.Series(dtype=str)))
                               + list(sweep.get("mechanism", pd.Series(dtype=str)))))
    for i, name in enumerate(names):
        c = _COLORS[i % len(_COLORS)]
        parts = []
        if len(table):
            t = table[(table["mechanism"] == name) & table["utility"].notna()] if "utility" in table else table[:0]
            parts.append(t.assign(kind="target"))
        if len(sweep):
            parts.append(sweep[sweep["mechanism"] == name].assign(kind="sweep"))
        g = pd.concat(parts) if parts else pd.DataFrame()
        if not len(g) or g["utility"].isna().all():
            continue
        g = g.sort_values("privacy")
        ax.plot(g["privacy"], g["utility"], "-", color=c, lw=1.2, label=name)
        for kind, mk, face in (("target", "o", c), ("sweep", "o", "white")):
            h = g[g["kind"] == kind]
            if not len(h):
                continue
            xerr = np.vstack([(h["privacy"] - h["privacy_ci_low"]).clip(lower=0).fillna(0),
                              (h["privacy_ci_high"] - h["privacy"]).clip(lower=0).fillna(0)])
            ax.errorbar(h["privacy"], h["utility"], xerr=xerr, yerr=1.96 * h["utility_se"].fillna(0), fmt=mk,
                        color=c, mfc=face, ms=5, capsize=2, lw=0.8)
        for _, r in g.iterrows():
            ax.annotate(f"ε={r['epsilon']:.3g}", (r["privacy"], r["utility"]), textcoords="offset points",
                        xytext=(4, 3), fontsize=6, color=c)
    for t in cfg.targets:
        ax.axvline(t, ls=":", color="grey", lw=0.8)
    if clean.get("utility") is not None:
        ax.axhline(clean["utility"], ls="--", color="black", lw=0.8, label="clean text")
    xlabel = ("Bayes-optimal informed attacker, top-1 recovery (exact; Monte Carlo for continuous noise)"
              if cfg.metric == "bayes" else "median N_w (share of draws keeping the word)")
    ax.set_xlabel(xlabel + "  → less private", fontsize=8)
    ax.set_ylabel(f"{clean.get('utility_metric') or 'accuracy'} on sanitized test text ({cfg.model})", fontsize=8)
    ax.set_title(f"privacy–utility frontiers at equal measured privacy: {cfg.dataset}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def _html_table(df: pd.DataFrame, cols: list[str]) -> str:
    import html

    def fmt(c, v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "–"
        if c in ("epsilon", "bracket_low", "bracket_high"):
            return f"{v:.4g}"
        if isinstance(v, float):
            return f"{v:.3f}"
        return html.escape(str(v))

    cols = [c for c in cols if c in df.columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt(c, r.get(c))}</td>" for c in cols) + "</tr>"
                   for r in df.to_dict("records"))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


TABLE_COLUMNS = ["mechanism", "target", "status", "epsilon", "privacy", "privacy_ci_low", "privacy_ci_high",
                 "privacy_method", "utility", "utility_se", "utility_clean", "share_changed", "evaluations", "note"]
SWEEP_COLUMNS = ["mechanism", "epsilon", "privacy", "privacy_ci_low", "privacy_ci_high", "privacy_method",
                 "utility", "utility_se", "share_changed"]


def write_compare_report(table: pd.DataFrame, sweep: pd.DataFrame, evaluations: pd.DataFrame, clean: dict,
                         cfg: CompareConfig, out: Path) -> dict:
    """Write ``results.csv``, ``sweep.csv``, ``evaluations.csv``, ``frontier.png``, ``report.html`` and,
    last, ``results.json`` into ``out`` (each atomically). Returns name -> path."""
    import base64
    import html

    from textdp.data.io import atomic_output
    from textdp.evaluate.report import NOT_A_RELEASE

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, df in (("results.csv", table), ("sweep.csv", sweep), ("evaluations.csv", evaluations)):
        with atomic_output(out / name) as tmp:
            df.to_csv(tmp, index=False)
        paths[name] = out / name
    png = out / "frontier.png"
    with atomic_output(png) as tmp:
        plot_frontier(table, sweep, clean, cfg, Path(tmp))
    paths["frontier.png"] = png
    b64 = base64.b64encode(png.read_bytes()).decode("ascii")
    metric = METRICS[cfg.metric]
    apart = "".join(f"<li><b>{html.escape(n)}</b>: {html.escape(r)}</li>" for n, r in cfg.apart)
    cfg_d = asdict(cfg)
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>textdp compare: {html.escape(cfg.dataset)}</title>
<style>
body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}
th{{background:#f3f3f3}} img{{max-width:760px}} code{{background:#f5f5f5}}
</style></head><body>
<h1>Mechanisms at equal measured privacy: {html.escape(cfg.dataset)}</h1>
<p>Privacy axis: <b>{html.escape(metric)}</b>, on the tokens of the first {cfg.privacy_docs} test documents
(the informed prior is their token distribution). <code>exact</code> rows are the exact optimum
Σ<sub>y</sub> max<sub>x</sub> π(x)p(y|x) from the mechanism's closed-form law; <code>monte-carlo</code> rows
(continuous-noise mechanisms) are the held-out success of a plug-in MAP attacker fitted on {cfg.mc_train} draws
per token and scored on {cfg.mc_test} fresh draws per token, with a 95&nbsp;% Wilson interval: a lower bound
on the optimum up to sampling error. For each target, ε is the largest evaluated ε whose metric does not exceed
it (bisection over log ε). Utility: model <code>{html.escape(str(cfg.model))}</code> trained on sanitized train
text, {html.escape(str(clean.get('utility_metric') or 'accuracy'))} on sanitized test text; ± is the binomial
standard error over the {clean.get('n_test')} test texts. Clean-text utility: {clean.get('utility') or float('nan'):.3f}.</p>
<p><i>Not a release:</i> {html.escape(NOT_A_RELEASE)}.</p>
<h2>Frontiers</h2>
<figure><img alt="privacy-utility frontiers" src="data:image/png;base64,{b64}"></figure>
<h2>Equal-privacy table</h2>
{_html_table(table, TABLE_COLUMNS) if len(table) else '<p>no targets</p>'}
<h2>Plain ε sweep</h2>
{_html_table(sweep, SWEEP_COLUMNS) if len(sweep) else '<p>no --epsilons given</p>'}
<h2>Not on the axis</h2>
{f'<ul>{apart}</ul>' if apart else '<p>none</p>'}
<h2>Every privacy evaluation of the search</h2>
{_html_table(evaluations, ['mechanism', 'epsilon', 'value', 'ci_low', 'ci_high', 'method', 'n', 'seconds'])
 if len(evaluations) else '<p>none</p>'}
<h2>Settings</h2>
<pre>{html.escape(json.dumps(cfg_d, indent=2, default=str))}</pre>
</body></html>
"""
    with atomic_output(out / "report.html") as tmp:
        Path(tmp).write_text(doc, encoding="utf-8")
    paths["report.html"] = out / "report.html"

    def recs(df):
        return json.loads(df.to_json(orient="records")) if len(df) else []

    from textdp.accounting.card import json_safe

    with atomic_output(out / "results.json") as tmp:  # last: marks a finished report (standard JSON: no NaN)
        Path(tmp).write_text(json.dumps(json_safe({"config": cfg_d, "metric": metric, "results": recs(table),
                                         "sweep": recs(sweep), "evaluations": recs(evaluations), "clean": clean,
                                         "apart": [{"mechanism": n, "reason": r} for n, r in cfg.apart],
                                         "dp_release": False, "note": NOT_A_RELEASE}), indent=2, default=str,
                                        allow_nan=False), encoding="utf-8")
    paths["results.json"] = out / "results.json"
    return paths
