"""The verdict experiment of issue 18: does Text Revealer reconstruct private text better
than VTG against a target that memorises, with every control in the same run?

Pieces (each a function, :mod:`benchmarks.bench_attacks` ``--tune`` / ``--verdict`` runs them):

* :func:`proxy_data` — a **public-data proxy** of the experiment: the proxy target trains
  on texts drawn from the *public* split (same sizes and recipe as the real target, its own
  canaries drawn with another key); its non-members are other public texts. Nothing of the
  private split is read.
* :func:`tune_on_public` — selects TR's knobs (iterations up to 10, KL scale, fusion
  γ_gm, step size, window) from a grid of at most 12 configurations (:data:`TUNING_GRID`)
  on the proxy only. Objective: TR's per-text recovery on the proxy's members minus on its
  non-members, plus TR's canary token recall on the proxy's inserted canaries minus on its
  reference canaries (both in [0, 1]; the leakage TR extracts beyond what the generator
  knows, since the generator saw members and non-members alike), among the configurations
  whose perplexity is at most twice VTG's on the same rows. Returns a JSON-ready record.
* :func:`attack_seed` — one attack seed of TR, VTG and VMI against a target: the review
  templates (as :func:`textdp.attacks.inversion.pipeline.run_inversion`) and, for TR and VTG,
  the canary format's prefix as one more template (``m`` samples per label, ``m`` = inserted
  canaries per label); per-text scores (:func:`score_texts`) and per-canary recovery.
* :func:`verdict_summary` — means over seeds, the non-member controls, and the **paired TR −
  VTG gaps** with 95 % confidence intervals (:func:`paired_gap`: per-text differences of rows
  with the same seed, label, template and sample, averaged per template (or per canary), then
  a Student-t interval over those clusters), and :func:`verdict_line`.

Per-text metrics (fractions unless said; words are :func:`textdp.attacks.inversion.metrics.filter_tokens`):

* ``rec`` — per-text recovery, ``|F(x) ∩ F(g)| / |F(g)|`` against the ground truth ``g``
  (the private text of the row's label with the longest common subsequence; the per-text
  form of ``rr_match``); ``rec_nm`` the same against the non-member texts;
* ``po`` — private-only hits, the number of distinct words of ``x`` that occur in the
  private texts of the row's label and nowhere in the public split; ``po_nm`` the same for
  the non-member texts (their words absent from the public split);
* ``ev`` / ``ev_nm`` — 1 when the evaluator trained on the private texts / on the
  non-member texts (same TF-IDF + logistic-regression recipe) assigns the row's label;
* ``nll`` / ``ntok`` — negative log-likelihood (nats) and scored words under the fluency
  scorer :class:`textdp.attacks.inversion.fluency.NgramFluencyScorer` (a Kneser-Ney word
  3-gram model of the public split: it shares no tokenizer, model or recipe with any
  generator compared); perplexity per word = ``exp(Σ nll / Σ ntok)``.

Canaries (:mod:`textdp.attacks.inversion.canaries`): per canary and seed, ``recall`` (best
LCS/k over all the method's texts of the seed) and ``recovered`` (secret contiguous in one
text), for the inserted canaries and, as the non-member control, the reference ones.
Everything here reads the private split: it is the curator's measurement, never a release.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from textdp.attacks.inversion.config import InversionConfig
from textdp.attacks.inversion.metrics import filter_tokens, match_ground_truth, recovery_rates
from textdp.errors import ParameterError

__all__ = ["TUNING_GRID", "proxy_data", "tune_on_public", "apply_tuning", "attack_seed", "score_texts",
           "paired_gap", "verdict_summary", "verdict_line", "canary_control"]

#: TR knobs tried on the public proxy (12 configurations): the ``cpu`` preset's choice, one
#: knob changed at a time around it, the same changes at 10 iterations, and PPLM's code defaults.
TUNING_GRID: tuple[dict, ...] = (
    {"stepsize": 0.3, "num_iterations": 3, "window_length": 0, "kl_scale": 0.0, "gm_scale": 0.9},   # cpu preset
    {"stepsize": 0.1, "num_iterations": 3, "window_length": 0, "kl_scale": 0.0, "gm_scale": 0.9},
    {"stepsize": 1.0, "num_iterations": 3, "window_length": 0, "kl_scale": 0.0, "gm_scale": 0.9},
    {"stepsize": 0.3, "num_iterations": 10, "window_length": 0, "kl_scale": 0.0, "gm_scale": 0.9},
    {"stepsize": 1.0, "num_iterations": 10, "window_length": 0, "kl_scale": 0.0, "gm_scale": 0.9},
    {"stepsize": 0.3, "num_iterations": 3, "window_length": 3, "kl_scale": 0.0, "gm_scale": 0.9},
    {"stepsize": 1.0, "num_iterations": 10, "window_length": 3, "kl_scale": 0.0, "gm_scale": 0.9},
    {"stepsize": 0.3, "num_iterations": 3, "window_length": 0, "kl_scale": 0.01, "gm_scale": 0.9},
    {"stepsize": 1.0, "num_iterations": 10, "window_length": 0, "kl_scale": 0.01, "gm_scale": 0.9},
    {"stepsize": 0.3, "num_iterations": 3, "window_length": 0, "kl_scale": 0.0, "gm_scale": 1.0},
    {"stepsize": 1.0, "num_iterations": 10, "window_length": 0, "kl_scale": 0.0, "gm_scale": 1.0},
    {"stepsize": 0.02, "num_iterations": 3, "window_length": 3, "kl_scale": 0.0, "gm_scale": 0.9, "gamma": 1.5},
)
MAX_GRID = 12
PPL_FACTOR = 2.0  # a tuning configuration is admissible when its PPL <= PPL_FACTOR x VTG's on the same rows

Log = Callable[[str], None]


# =========================================================================== data
def proxy_data(data, cfg: InversionConfig):
    """The public-data proxy of ``data`` (an :class:`InversionData`): ``private`` = as many
    public texts per label as ``data.private`` has, ``nonmember`` = as many other public
    texts, ``heldout`` = the non-members, ``public`` = ``data.public`` (the generator and
    the templates stay those of the real run), canaries drawn as ``data``'s with key
    ``cfg.canary_seed + 1`` (another pool and other secrets). Deterministic from
    ``cfg.split_seed``. Raises ParameterError when a label has too few public texts.
    """
    from textdp.attacks.inversion.canaries import default_min_count, make_canaries
    from textdp.attacks.inversion.pipeline import InversionData
    from textdp.noise import make_rng

    rng = make_rng(cfg.split_seed + 1)  # a deterministic split of public data, not DP noise
    counts = data.private["label"].value_counts()
    mem, non = [], []
    for lab in data.labels:
        pool = data.public[data.public["label"] == lab]
        k = int(counts.get(lab, 0))
        if len(pool) < 2 * k:
            raise ParameterError(f"the public split has {len(pool)} texts of label {lab!r}; the proxy needs {2 * k}")
        order = rng.permutation(len(pool))
        mem.append(pool.iloc[np.sort(order[:k])])
        non.append(pool.iloc[np.sort(order[k:2 * k])])
    private = pd.concat(mem).reset_index(drop=True)
    nonmember = pd.concat(non).reset_index(drop=True)
    can = None
    if data.canaries is not None:
        c = data.canaries
        can = make_canaries(list(data.public["text"]), data.labels, len(c.inserted), seed=cfg.canary_seed + 1,
                            pool_size=len(c.pool), secret_len=c.secret_len, n_reference=len(c.reference),
                            prefix=c.prefix, public_labels=list(data.public["label"]),
                            min_count=default_min_count(len(data.public)))
    return InversionData(f"{data.name}-public-proxy", list(data.labels), data.public, private, nonmember.copy(),
                         nonmember, can)


# =========================================================================== scoring
class Scorer:
    """Everything the per-text scores need, built once per data split: filtered word sets,
    both evaluators, the fluency scorer (trained on ``data.public`` only)."""

    def __init__(self, data):
        from textdp.attacks.inversion.fluency import NgramFluencyScorer
        from textdp.attacks.inversion.pipeline import _evaluator

        self.data = data
        self.fluency_scorer = NgramFluencyScorer(list(data.public["text"]))
        self.labels = list(data.labels)
        self.public_vocab = {w for t in data.public["text"] for w in filter_tokens(t)}
        self.priv = {l: [filter_tokens(t) for t in data.private.loc[data.private["label"] == l, "text"]]
                     for l in self.labels}
        self.nm = {l: [filter_tokens(t) for t in data.nonmember.loc[data.nonmember["label"] == l, "text"]]
                   for l in self.labels}
        self.priv_only = {l: set().union(*v) - self.public_vocab if v else set() for l, v in self.priv.items()}
        self.nm_only = {l: set().union(*v) - self.public_vocab if v else set() for l, v in self.nm.items()}
        self.private_by = {l: list(data.private.loc[data.private["label"] == l, "text"]) for l in self.labels}
        self.nonmember_by = {l: list(data.nonmember.loc[data.nonmember["label"] == l, "text"]) for l in self.labels}
        self.evaluator, self.ev_info = _evaluator(data)
        self.evaluator_nm, _ = _evaluator(dataclasses.replace(data, private=data.nonmember, canaries=None))

    def fluency(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per-text NLL (nats) and scored words (end of text included) under the n-gram scorer, (N,) each."""
        if not len(texts):
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        nll, cnt = self.fluency_scorer.nll(list(texts))
        return np.asarray(nll, dtype=np.float64), np.asarray(cnt, dtype=np.int64)

    def reference_ppl(self) -> dict:
        """Perplexity of the real private and non-member texts under the scorer (what fluent looks like)."""
        out = {}
        for name, df in (("private", self.data.private), ("nonmember", self.data.nonmember)):
            nll, cnt = self.fluency(list(df["text"]))
            out[name] = float(np.exp(nll.sum() / max(cnt.sum(), 1)))
        return out


def _rec(texts_f: list[list[str]], refs: list[list[str]]) -> np.ndarray:
    keep = [r for r in refs if r]
    if not keep:
        return np.full(len(texts_f), np.nan)
    gi, _ = match_ground_truth(texts_f, keep, "lcs")
    return np.array([len(set(x) & set(keep[g])) / len(set(keep[g])) for x, g in zip(texts_f, gi)])


def score_texts(df: pd.DataFrame, sc: Scorer) -> pd.DataFrame:
    """Per-text scores (module docstring) of the review rows of ``df`` (columns ``label``,
    ``text``, ``label_for_acc``); returns ``df`` with ``rec``, ``rec_nm``, ``po``, ``po_nm``,
    ``ev``, ``ev_nm``, ``nll``, ``ntok`` added (same row order)."""
    df = df.reset_index(drop=True)
    n = len(df)
    out = {k: np.full(n, np.nan) for k in ("rec", "rec_nm", "po", "po_nm")}
    filt = [filter_tokens(t) for t in df["text"]]
    for lab in sc.labels:
        rows = np.flatnonzero(df["label"].to_numpy() == lab)
        if not len(rows):
            continue
        f = [filt[i] for i in rows]
        out["rec"][rows] = _rec(f, sc.priv[lab])
        out["rec_nm"][rows] = _rec(f, sc.nm[lab])
        out["po"][rows] = [len(set(x) & sc.priv_only[lab]) for x in f]
        out["po_nm"][rows] = [len(set(x) & sc.nm_only[lab]) for x in f]
    texts = list(df["text"])
    ev = sc.evaluator.predict(texts) if n else []
    ev_nm = sc.evaluator_nm.predict(texts) if n else []
    nll, cnt = sc.fluency(texts)
    return df.assign(**out, ev=(np.asarray(ev) == df["label_for_acc"].to_numpy()).astype(float),
                     ev_nm=(np.asarray(ev_nm) == df["label_for_acc"].to_numpy()).astype(float), nll=nll, ntok=cnt)


# =========================================================================== attacks
def _canary_cfg(cfg: InversionConfig, m: int) -> InversionConfig:
    return dataclasses.replace(cfg, num_samples=max(1, int(m)))


def attack_seed(method: str, *, clf, generator, vocab, data, cfg: InversionConfig, templates: Sequence[str],
                template_label: Sequence[str], seed: int, gen_length: int, vmi_length: int,
                sc: Scorer, canary_prompts: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """One seed of one method: ``(texts, canaries, timing)``.

    ``texts``: the generated rows (``kind`` = ``review`` for template rows, ``canary`` for
    rows continuing the canary prefix), review rows scored by :func:`score_texts`;
    ``canaries``: one row per canary (``set`` = inserted | reference, ``canary`` index,
    ``label``, ``recovered``, ``recall``) over all the method's texts of this seed (empty
    without canaries); ``timing``: wall and process CPU seconds. Canary-prefix rows:
    ``m`` = inserted canaries per label samples per label, ``2·k`` tokens (TR and VTG; VMI
    has no prefix and is counted on its own texts).
    """
    from textdp.attacks.inversion.canaries import canary_recovery
    from textdp.attacks.inversion.pipeline import _row_seed, generate_texts
    from textdp.noise import make_rng

    key = int(make_rng(seed).integers(0, 2**62))  # as run_inversion: same texts for the same seed
    t0, c0 = time.perf_counter(), time.process_time()
    df = generate_texts(method, clf=clf, generator=generator, vocab=vocab, templates=templates, labels=data.labels,
                        cfg=cfg, attack_key=key, gen_length=gen_length, vmi_length=vmi_length,
                        template_label=template_label).assign(kind="review")
    parts = [df]
    can = data.canaries
    if can is not None and canary_prompts and method in ("tr", "vtg"):
        m = int(np.ceil(len(can.inserted) / len(data.labels)))
        dc = generate_texts(method, clf=clf, generator=generator, vocab=vocab, templates=[can.prefix.lower()],
                            labels=data.labels, cfg=_canary_cfg(cfg, m), attack_key=_row_seed(key, 10**7, 0),
                            gen_length=2 * can.secret_len, vmi_length=vmi_length, template_label=None)
        parts.append(dc.assign(kind="canary", label_for_acc=dc["label"]))
    timing = {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}
    rev = score_texts(parts[0], sc)
    allt = pd.concat([rev] + parts[1:], ignore_index=True).assign(method=method, seed=seed)
    crow = []
    if can is not None:
        texts = list(allt["text"])
        for name, frame in (("inserted", can.inserted), ("reference", can.reference)):
            rec = canary_recovery(texts, list(frame["secret"]))
            crow.append(rec.assign(set=name, canary=np.arange(len(frame)), label=list(frame["label"]),
                                   method=method, seed=seed))
    cdf = pd.concat(crow, ignore_index=True) if crow else pd.DataFrame(
        columns=["recovered", "recall", "best_text", "set", "canary", "label", "method", "seed"])
    return allt, cdf, timing


def seed_metrics(texts: pd.DataFrame, canaries: pd.DataFrame, sc: Scorer) -> pd.DataFrame:
    """One row per (method, seed): means of the per-text scores over review rows, corpus RR as
    :func:`recovery_rates` (``rr_vocab``, ``rr_private_only`` and their non-member values),
    perplexity, canary recall / recovered count (inserted and reference)."""
    rows = []
    for (m, s), g in texts.groupby(["method", "seed"], sort=False):
        r = g[g["kind"] == "review"]
        inv = {l: list(r.loc[r["label"] == l, "text"]) for l in sc.labels}
        rr = recovery_rates(inv, sc.private_by, sc.public_vocab)
        rr_nm = recovery_rates(inv, sc.nonmember_by, sc.public_vocab)
        row = {"method": m, "seed": s, "n_texts": len(r), "rec": r["rec"].mean(), "rec_nm": r["rec_nm"].mean(),
               "po": r["po"].mean(), "po_nm": r["po_nm"].mean(), "ev": r["ev"].mean(), "ev_nm": r["ev_nm"].mean(),
               "ppl": float(np.exp(r["nll"].sum() / max(r["ntok"].sum(), 1))),
               "rr_vocab": rr["rr_vocab"], "rr_vocab_nm": rr_nm["rr_vocab"],
               "rr_private_only": rr["rr_private_only"], "rr_private_only_nm": rr_nm["rr_private_only"]}
        c = canaries[(canaries["method"] == m) & (canaries["seed"] == s)] if len(canaries) else canaries
        for name, short in (("inserted", "can"), ("reference", "can_ref")):
            cc = c[c["set"] == name] if len(c) else c
            row[f"{short}_recall"] = float(cc["recall"].mean()) if len(cc) else float("nan")
            row[f"{short}_recovered"] = int(cc["recovered"].sum()) if len(cc) else 0
        rows.append(row)
    return pd.DataFrame(rows)


# =========================================================================== statistics
def paired_gap(a: pd.DataFrame, b: pd.DataFrame, value: str, keys: Sequence[str], cluster: str,
               level: float = 0.95) -> dict:
    """Mean of ``a[value] − b[value]`` over rows paired on ``keys``, with a ``level`` interval.

    Differences are averaged within each ``cluster`` value (e.g. the template, or the canary;
    pooling seeds and labels), and the interval is Student's t over those cluster means
    (``n_clusters − 1`` degrees of freedom): rows of one template share its prefix, so they
    are not independent. Returns ``{"mean", "lo", "hi", "n_pairs", "n_clusters"}`` (NaN
    bounds with fewer than 2 clusters). Raises ParameterError when nothing pairs up.
    """
    from scipy.stats import t as student_t

    if not 0 < level < 1:
        raise ParameterError(f"confidence level must be in (0, 1), got {level!r}")
    j = a[list(keys) + [value]].merge(b[list(keys) + [value]], on=list(keys), suffixes=("_a", "_b"))
    if not len(j):
        raise ParameterError(f"no rows pair up on {list(keys)}")
    j = j.assign(d=j[value + "_a"] - j[value + "_b"]).dropna(subset=["d"])
    cm = j.groupby(cluster)["d"].mean().to_numpy(dtype=float)
    k = len(cm)
    mean = float(cm.mean()) if k else float("nan")
    if k < 2:
        return {"mean": mean, "lo": float("nan"), "hi": float("nan"), "n_pairs": int(len(j)), "n_clusters": k}
    half = float(student_t.ppf(0.5 + level / 2, k - 1) * cm.std(ddof=1) / math.sqrt(k))
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n_pairs": int(len(j)), "n_clusters": k}


REVIEW_KEYS = ("seed", "label", "template", "sample")


def verdict_summary(texts: pd.DataFrame, canaries: pd.DataFrame, metrics: pd.DataFrame) -> dict:
    """Means ± std over seeds per method (``table``: DataFrame) and the paired TR − VTG gaps
    (``gaps``: ``{name: paired_gap dict}``) on per-text recovery, private-only hits, evaluator
    accuracy and fluency (per-text NLL per token), each for the members and the non-member
    control, their difference (member gap − non-member gap), and canary recall (inserted,
    reference) — canaries paired on (seed, canary) and clustered by canary."""
    cols = [c for c in metrics.columns if c not in ("method", "seed")]
    rows = []
    for m, g in metrics.groupby("method", sort=False):
        row = {"method": m, "seeds": len(g)}
        for c in cols:
            v = g[c].to_numpy(dtype=float)
            row[c] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
            row[c + "_std"] = float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else 0.0
        rows.append(row)
    table = pd.DataFrame(rows)
    gaps: dict = {}
    rv = texts[texts["kind"] == "review"]
    tr, vtg = rv[rv["method"] == "tr"], rv[rv["method"] == "vtg"]
    if len(tr) and len(vtg):
        tr = tr.assign(nll_tok=tr["nll"] / tr["ntok"].clip(lower=1), rec_x=tr["rec"] - tr["rec_nm"],
                       po_x=tr["po"] - tr["po_nm"])
        vtg = vtg.assign(nll_tok=vtg["nll"] / vtg["ntok"].clip(lower=1), rec_x=vtg["rec"] - vtg["rec_nm"],
                         po_x=vtg["po"] - vtg["po_nm"])
        for v in ("rec", "rec_nm", "rec_x", "po", "po_nm", "po_x", "ev", "ev_nm", "nll_tok"):
            gaps[v] = paired_gap(tr, vtg, v, REVIEW_KEYS, "template")
    if len(canaries):
        c_tr, c_vtg = canaries[canaries["method"] == "tr"], canaries[canaries["method"] == "vtg"]
        if len(c_tr) and len(c_vtg):
            for name in ("inserted", "reference"):
                a, b = c_tr[c_tr["set"] == name], c_vtg[c_vtg["set"] == name]
                a = a.assign(recovered=a["recovered"].astype(float))
                b = b.assign(recovered=b["recovered"].astype(float))
                short = "can" if name == "inserted" else "can_ref"
                gaps[f"{short}_recall"] = paired_gap(a, b, "recall", ("seed", "canary"), "canary")
                gaps[f"{short}_recovered"] = paired_gap(a, b, "recovered", ("seed", "canary"), "canary")
    return {"table": table, "gaps": gaps}


def canary_control(search, canaries) -> dict:
    """The white-box search's recovery under the same counting rule as the attacks
    (:func:`canary_recovery` over all the search's texts), inserted and reference canaries,
    with the exposure figures (:func:`exposure_summary`)."""
    from textdp.attacks.inversion.canaries import canary_recovery, exposure_summary

    texts = list(search.texts["text"])
    ins = canary_recovery(texts, list(canaries.inserted["secret"]))
    ref = canary_recovery(texts, list(canaries.reference["secret"]))
    return {"texts": len(texts), "inserted_recovered": int(ins["recovered"].sum()), "inserted": len(ins),
            "inserted_recall": float(ins["recall"].mean()), "reference_recovered": int(ref["recovered"].sum()),
            "reference": len(ref), "reference_recall": float(ref["recall"].mean()), **exposure_summary(search)}


def verdict_line(gaps: dict, mia_auc: float | None, control_recovered: int | None, chance: float | None) -> str:
    """The verdict in one sentence from the paired gaps and the positive controls.

    Rules (stated in docs/attacks.md): the controls pass when the target's loss MIA AUC
    (on the reviews) is >= 0.9 (the issue's bar) and the white-box canary search recovers more inserted
    canaries than ``chance`` expects (and at least one). The claim **holds** when the
    TR − VTG gap's 95 % interval is above 0 on private-only hits net of the non-member
    control (``po_x``) or on inserted-canary recall while the reference-canary gap's
    interval contains 0 or lies below it; it **does not hold** when the controls pass and
    neither gap's interval lies above 0; otherwise it is **not settled**.
    """
    def above(name):
        g = gaps.get(name)
        return bool(g) and math.isfinite(g.get("lo", float("nan"))) and g["lo"] > 0

    po = above("po_x")
    can = above("can_recall") and not above("can_ref_recall")
    controls = (mia_auc is not None and mia_auc >= 0.9 and control_recovered is not None
                and chance is not None and control_recovered > max(chance, 0) and control_recovered >= 1)
    if po or can:
        what = " and ".join(n for n, ok in (("private-only recovery", po), ("canary recall", can)) if ok)
        return f"HOLDS: TR beats VTG on {what} (paired 95% interval above 0)"
    if controls:
        return ("DOES NOT HOLD: with the positive controls passing, no TR - VTG gap on private-only or canary "
                "recovery has a 95% interval above 0")
    why = []
    if mia_auc is None or mia_auc < 0.9:
        why.append(f"the target's MIA AUC is {mia_auc if mia_auc is not None else float('nan'):.3f} < 0.9")
    if control_recovered is None or chance is None or not (control_recovered > chance and control_recovered >= 1):
        why.append(f"the white-box canary search recovered {control_recovered} canaries (chance {chance})")
    return "NOT SETTLED: TR does not beat VTG, but " + "; ".join(why)


# =========================================================================== tuning
def apply_tuning(cfg: InversionConfig, knobs: dict) -> InversionConfig:
    """``cfg`` with the PPLM knobs of a tuning selection (``{"stepsize": ..., ...}``)."""
    return cfg.with_overrides(**{f"pplm_{k}": v for k, v in knobs.items()})


def tune_on_public(proxy, proxy_clf, generator, vocab, cfg: InversionConfig,
                   templates: Sequence[str], template_label: Sequence[str], *, gen_length: int, vmi_length: int,
                   grid: Sequence[dict] = TUNING_GRID, seeds: Sequence[int] = (101,), log: Log | None = None) -> dict:
    """Select TR's knobs on the public proxy (module docstring). ``proxy``: :func:`proxy_data`;
    ``proxy_clf``: the target trained on it; ``templates``: the review templates to use
    (a subset of the real run's, from public data); ``seeds``: tuning attack seeds (kept
    apart from the verdict's). Returns a JSON-ready dict: ``grid`` (one entry per
    configuration with its metrics, objective and admissibility), ``vtg`` (the baseline on
    the same rows), ``selected`` (the knobs), ``objective`` (its definition), sizes and
    timings. Raises ParameterError for a grid of more than 12 configurations or an empty one.
    """
    if not 1 <= len(grid) <= MAX_GRID:
        raise ParameterError(f"the tuning grid must have 1 to {MAX_GRID} configurations, got {len(grid)}")
    log = log or (lambda s: None)
    sc = Scorer(proxy)

    def run(method, c):
        ts, cs, tm = [], [], []
        for s in seeds:
            t, cdf, timing = attack_seed(method, clf=proxy_clf, generator=generator, vocab=vocab, data=proxy, cfg=c,
                                         templates=templates, template_label=template_label, seed=s,
                                         gen_length=gen_length, vmi_length=vmi_length, sc=sc)
            ts.append(t)
            cs.append(cdf)
            tm.append(timing)
        t, cdf = pd.concat(ts, ignore_index=True), pd.concat(cs, ignore_index=True)
        met = seed_metrics(t, cdf, sc)
        r = t[t["kind"] == "review"]
        res = {"rec": float(r["rec"].mean()), "rec_nm": float(r["rec_nm"].mean()),
               "ppl": float(np.exp(r["nll"].sum() / max(r["ntok"].sum(), 1))),
               "ev": float(r["ev"].mean()),
               "can_recall": float(met["can_recall"].mean()), "can_ref_recall": float(met["can_ref_recall"].mean()),
               "can_recovered": int(met["can_recovered"].sum()),
               "cpu_seconds": float(sum(x["cpu_seconds"] for x in tm)),
               "seconds": float(sum(x["seconds"] for x in tm))}
        rc = 0.0 if math.isnan(res["can_recall"]) else res["can_recall"] - res["can_ref_recall"]
        res["objective"] = (res["rec"] - res["rec_nm"]) + rc
        return res

    t0 = time.perf_counter()
    vtg = run("vtg", cfg)
    log(f"tuning VTG baseline: objective {vtg['objective']:+.4f}, PPL {vtg['ppl']:.1f}")
    entries = []
    for i, knobs in enumerate(grid):
        res = run("tr", apply_tuning(cfg, knobs))
        res["admissible"] = bool(res["ppl"] <= PPL_FACTOR * vtg["ppl"])
        entries.append({"knobs": dict(knobs), **res})
        log(f"tuning {i + 1}/{len(grid)} {knobs}: objective {res['objective']:+.4f} (rec {res['rec']:.4f} - "
            f"{res['rec_nm']:.4f}, canary {res['can_recall']:.3f} - {res['can_ref_recall']:.3f}), "
            f"PPL {res['ppl']:.1f}{'' if res['admissible'] else ' (too disfluent)'}, {res['cpu_seconds']:.0f} s CPU")
    ok = [e for e in entries if e["admissible"]] or entries
    best = max(ok, key=lambda e: e["objective"])  # first of equals: grid order
    return {"selected": best["knobs"], "selected_index": entries.index(best), "grid": entries, "vtg": vtg,
            "objective": "TR per-text recovery on proxy members minus on proxy non-members + TR canary token "
                         "recall on inserted minus reference proxy canaries; admissible when PPL <= "
                         f"{PPL_FACTOR:g} x VTG's on the same rows",
            "proxy": {"name": proxy.name, "private": len(proxy.private), "nonmember": len(proxy.nonmember),
                      "canaries": None if proxy.canaries is None else len(proxy.canaries.inserted)},
            "templates": list(templates), "seeds": list(seeds), "gen_length": gen_length,
            "seconds": round(time.perf_counter() - t0, 1)}
