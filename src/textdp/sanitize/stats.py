"""Plausible-deniability statistics (N_w, S_w) and per-document composition for cards.

``N_w`` and ``S_w`` follow Feyisetan et al. 2020 (spec A.8.2): sanitize word ``w``
``k`` times independently; ``N_w`` is the fraction of draws equal to ``w``,
``S_w`` the number of distinct outputs. For SanText / SanText+ both have closed
forms from the exact distribution ``P[w, ·]`` (spec A.3):
``E[N_w] = P[w, w]`` and ``E[S_w(k)] = Σ_y 1 - (1 - P[w, y])^k``.
FBDD has no closed form; they are sampled.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["plausible_deniability", "privacy_statistics", "sample_words"]


def sample_words(mech, n: int = 100) -> np.ndarray:
    """Up to ``n`` output-vocabulary embedding rows spread evenly over the output vocabulary
    in embedding-row order (for GloVe: public frequency order, most frequent first;
    deterministic, no randomness, no corpus count)."""
    mech._prepare()
    order = np.sort(mech.output_rows)
    if len(order) <= n:
        return order
    return order[np.unique(np.linspace(0, len(order) - 1, n).round().astype(int))]


def plausible_deniability(mech, words, k: int = 1000, rng=None, block: int = 16) -> dict[str, np.ndarray]:
    """``N_w`` (expected fraction of ``k`` draws that keep ``w``) and ``S_w``
    (expected number of distinct outputs in ``k`` draws) for each input word.

    words: str or embedding rows (in vocabulary). Exact for mechanisms with
    ``exact_probabilities``; otherwise estimated from ``k`` draws per word.
    Returns ``{"N_w": float64 (n,), "S_w": float64 (n,), "exact": bool}``.
    """
    rows = mech.input_rows(words)
    mech._prepare()
    nw = np.empty(len(rows))
    sw = np.empty(len(rows))
    for s in range(0, len(rows), block):
        r = rows[s : s + block]
        if mech.exact_probabilities:
            p = mech.probabilities(r)
            cols = mech.output_positions(r)
            nw[s : s + block] = np.where(cols >= 0, p[np.arange(len(r)), np.maximum(cols, 0)], 0.0)
            sw[s : s + block] = (1.0 - np.power(1.0 - p, k)).sum(axis=1)
        else:
            draws = mech.sample_rows(np.repeat(r, k), rng).reshape(len(r), k)
            nw[s : s + block] = (draws == r[:, None]).mean(axis=1)
            sw[s : s + block] = [len(np.unique(d)) for d in draws]
    return {"N_w": nw, "S_w": sw, "exact": bool(mech.exact_probabilities)}


def _summary(x: np.ndarray) -> dict:
    if len(x) == 0:
        return {}
    q = np.quantile(x, [0.0, 0.25, 0.5, 0.75, 1.0])
    return {"mean": float(x.mean()), "min": float(q[0]), "q25": float(q[1]), "median": float(q[2]),
            "q75": float(q[3]), "max": float(q[4])}


def privacy_statistics(mech, mean_document_tokens: float | None = None, max_document_tokens: int | None = None,
                       n_words: int = 100, k: int = 1000, n_examples: int = 10) -> dict:
    """The statistics a privacy card carries for a token sanitizer: computed from the
    mechanism and public data only (issue 12). With a corpus-derived law
    (``mech.corpus_dependent``) the N_w / S_w values and the vocabulary's geometry
    would describe the private corpus: only the composition rule and the table's
    diameter bound are returned then. ``mean_document_tokens``/``max_document_tokens``
    are lengths the CALLER states (e.g. for a per-document figure); the CLI passes
    none (a corpus's lengths are private).

    * ``plausible_deniability``: N_w / S_w (``k`` draws) summarised over ``n_words``
      output words spread over the frequency ranking, plus the first ``n_examples`` of them
      first words of that sample (with the corpus vocabulary these words come from the
      sanitized data, like the output vocabulary itself).
    * ``per_document``: composition of the per-token guarantee over a document:
      two documents of equal length L are ``eps·Σ_i d(x_i, x'_i)``-indistinguishable
      (``+ L·eps0`` for SanText+). Reported with the output vocabulary's diameter
      bound ``D <= 2·max_y ||phi(y) - mean||`` and the median distance between
      vocabulary words, for the mean and longest document.
    """
    mech._prepare()
    own_rule = getattr(mech, "card_per_document", None)  # a guarantee that is not metric DP states its own rule
    if getattr(mech, "corpus_dependent", False):
        if callable(own_rule):
            return {"per_document": own_rule()}
        eps0 = float(getattr(mech.guarantee, "epsilon0", 0.0))
        return {"per_document": {
            "rule": "documents of equal length L: eps * sum_i d(x_i, x'_i)" + (" + L * eps0" if eps0 else ""),
            "epsilon_per_unit_distance": mech.epsilon,
            "table_diameter_bound": float(2.0 * mech._geometry()[1]),
            "note": "no plausible-deniability statistics: with a corpus-derived output vocabulary or sensitive "
                    "set they would describe the private corpus"}}
    cached = _cached_statistics(mech, n_words, k, n_examples)
    if cached is None:
        cached = _word_statistics(mech, n_words, k, n_examples)
        _store_statistics(mech, n_words, k, n_examples, cached)
    pd_summary, diameter, table_d, typical = cached
    if callable(own_rule):
        return {"plausible_deniability": pd_summary, "per_document": own_rule()}
    g = mech.guarantee
    eps = mech.epsilon
    eps0 = float(getattr(g, "epsilon0", 0.0))
    per_doc = {
        "rule": "documents of equal length L: eps * sum_i d(x_i, x'_i)" + (" + L * eps0" if eps0 else ""),
        "epsilon_per_unit_distance": eps,
        "vocabulary_diameter_bound": diameter,
        "table_diameter_bound": table_d,
        "median_word_distance": typical,
    }
    if mean_document_tokens is not None:
        mean_l = float(mean_document_tokens)
        max_l = int(max_document_tokens if max_document_tokens is not None else math.ceil(mean_l))
        per_doc.update({
            "mean_document_tokens": mean_l,
            "max_document_tokens": max_l,
            "epsilon_mean_document_all_tokens_typical": eps * mean_l * typical + mean_l * eps0,
            "epsilon_mean_document_all_tokens_worst": eps * mean_l * table_d + mean_l * eps0,
            "epsilon_longest_document_all_tokens_worst": eps * max_l * table_d + max_l * eps0,
            "epsilon_one_token_typical": eps * typical + eps0,
        })
    return {"plausible_deniability": pd_summary, "per_document": per_doc}


def _word_statistics(mech, n_words: int, k: int, n_examples: int) -> tuple[dict, float, float, float]:
    """The part of :func:`privacy_statistics` that depends only on the mechanism and public data:
    (the plausible-deniability summary, the output vocabulary's diameter bound, the table's
    diameter bound, the median word distance)."""
    k_eff = k if mech.exact_probabilities else min(k, 200)
    words = sample_words(mech, n_words)
    # estimates (FBDD) use a fixed public seed: the card's statistics describe the mechanism, not the
    # release, and anyone can recompute them from the parameters and public data
    pd_ = plausible_deniability(mech, words, k=k_eff, rng=0)
    names = mech.embeddings.words
    n_ex = min(n_examples, len(words))
    examples = [{"word": names[int(r)], "N_w": float(pd_["N_w"][i]), "S_w": float(pd_["S_w"][i])}
                for i, r in enumerate(words[:n_ex])]
    y = np.asarray(mech.embeddings.vectors[mech.output_rows], dtype=np.float64)
    diameter = float(2.0 * np.sqrt(((y - y.mean(axis=0)) ** 2).sum(axis=1)).max()) if len(y) else 0.0
    table_d = float(2.0 * mech._geometry()[1])  # any word of the table is an accepted input
    if len(y) > 1:
        i = np.arange(0, len(y), max(1, len(y) // 2000))
        j = (i * 7919 + len(y) // 2) % len(y)
        keep = i != j
        typical = float(np.median(np.sqrt(((y[i[keep]] - y[j[keep]]) ** 2).sum(axis=1)))) if keep.any() else 0.0
    else:
        typical = 0.0
    pd_summary = {
        "draws_per_word": k_eff,
        "exact_expectation": pd_["exact"],
        "words": int(len(words)),
        "N_w": _summary(pd_["N_w"]),
        "S_w": _summary(pd_["S_w"]),
        "examples_across_frequency_ranks": examples,
    }
    return pd_summary, diameter, table_d, typical


# ---- cache of the public part (issue 14, item 3): the same numbers on every run with the same
# mechanism, table and code, about 0.1-0.3 s of a short run (30k output words x 100 words). Kept as JSON under
# cache_dir("privacy-statistics"), keyed by everything they are computed from: textdp's and numpy's
# versions, the table's file identity (path, size, mtime; no table read from files: no cache),
# the mechanism's class, parameters and guarantee, the SHA-256 of its output (and sensitive) rows,
# the arguments, and the SHA-256 of the source of textdp.sanitize, textdp.noise and
# textdp.embeddings (an edited formula is recomputed). JSON keeps every float exactly.
_CODE_PACKAGES = ("sanitize", "noise", "embeddings")
#: output words x sampled words below which the statistics are computed every time (they are cheap)
STATISTICS_CACHE_MIN = 1 << 20


def _code_digest() -> str:
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for pkg in _CODE_PACKAGES:
        for f in sorted((root / pkg).glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _statistics_key(mech, n_words: int, k: int, n_examples: int) -> str | None:
    import hashlib
    import json

    from textdp import __version__

    emb = mech.embeddings
    files = getattr(emb, "files", ())
    if not files or len(mech.output_rows) * int(n_words) < STATISTICS_CACHE_MIN:
        return None  # a table built in memory, or statistics that take milliseconds
    rows = {}
    for name in ("output_rows", "sensitive_rows"):
        arr = getattr(mech, name, None)
        if isinstance(arr, np.ndarray):
            rows[name] = hashlib.sha256(np.ascontiguousarray(arr, dtype=np.int64).tobytes()).hexdigest()
    try:
        key = {"textdp": __version__, "numpy": np.__version__, "table": [list(f) for f in files],
               "shape": list(emb.vectors.shape), "dtype": str(emb.vectors.dtype),
               "mechanism": f"{type(mech).__module__}.{type(mech).__qualname__}",
               "parameters": mech.parameters(), "guarantee": repr(mech.guarantee),
               "output_vocabulary": mech.output_vocabulary_info(), "rows": rows,
               "arguments": [int(n_words), int(k), int(n_examples)], "code": _code_digest()}
        return json.dumps(key, sort_keys=True, default=str)
    except (OSError, TypeError, ValueError):
        return None


def _statistics_path(key: str):
    import hashlib

    from textdp.cache import cache_dir

    return cache_dir("privacy-statistics", create=False) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _cached_statistics(mech, n_words: int, k: int, n_examples: int):
    import json

    key = _statistics_key(mech, n_words, k, n_examples)
    if key is None:
        return None
    try:
        doc = json.loads(_statistics_path(key).read_text(encoding="utf-8"))
        if doc.get("key") != key:
            return None
        v = doc["value"]
        return v["plausible_deniability"], float(v["diameter"]), float(v["table_diameter"]), float(v["typical"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _store_statistics(mech, n_words: int, k: int, n_examples: int, value) -> None:
    import json
    import os

    key = _statistics_key(mech, n_words, k, n_examples)
    if key is None:
        return
    path = _statistics_path(key)
    doc = {"key": key, "value": {"plausible_deniability": value[0], "diameter": value[1],
                                 "table_diameter": value[2], "typical": value[3]}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):  # a read-only cache only costs the next recomputation
        try:
            tmp.unlink()
        except OSError:
            pass
