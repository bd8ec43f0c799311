"""Canaries for the inversion experiment: random-token sentences inserted into the
private split, how many an attack recovers, and a white-box search that shows the
count can register success (issue 18 item 5).

After Carlini, Liu, Erlingsson, Kos & Song (2019), "The Secret Sharer" (§3-§4): a
canary is a sentence of a fixed, public **format** whose **secret** part is random.
Here the format is ``"<prefix> w1 ... wk"`` (default prefix ``My secret code is``; the
``memorising`` preset uses ``k = 2``) and the secret words come from a **pool** of
frequent, label-neutral public words (default 16), so the secret space has
``pool ** k`` fillings and the generator, trained on the public split, can emit every
secret word. Each canary carries a class label (equal shares over the labels) and is
added to the target's training data; as many **reference** canaries are drawn the same
way and never inserted (the non-member control). Everything is drawn from a seeded
ChaCha20 generator (:func:`textdp.noise.make_rng`), never the global RNG.

**Balanced draw.** A classifier carries about one bit per input, so a secret can only be
singled out if no single word gives its label away. The secrets of one label are
therefore the rows of ``k`` independent random permutations of the pool (canary ``j`` of
label ``a`` has ``perm_1[j], ..., perm_k[j]``): with ``pool`` canaries per label every
pool word sits exactly once in every slot of every label, and only the *combination*
tells the label. A label block is redrawn until its secrets are new.

Counting rule (:func:`canary_recovery`), on word tokens (lowercased, accents
stripped, WordPiece ``##`` pieces glued back; :func:`textdp.attacks.inversion.metrics.word_tokens`):

* a canary is **recovered** by a set of texts when one text contains its ``k`` secret
  words **contiguously and in order** (the prefix is not required);
* its **token recall** is the largest ``LCS(secret, text) / k`` over the texts (LCS:
  longest common subsequence of words), in ``{0, 1/k, ..., 1}``.

:func:`canary_search` is the positive control with more access: it enumerates every
filling of the format, scores each with the target's cross-entropy loss for each
label (white-box, one forward pass per filling) and, per label, returns the
``m`` fillings of lowest loss, ``m`` = the number of inserted canaries of that label
(the format and the count are public, as in the Secret Sharer's exposure test). The
rank of each canary among all fillings gives its **exposure** ``log2(N) - log2(rank)``
(Carlini et al. 2019, Definition 2; ``N = pool ** k``).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from textdp.attacks.inversion.metrics import lcs_length, word_tokens
from textdp.attacks.inversion.stopwords import NLTK_ENGLISH_STOPWORDS
from textdp.errors import InputError, ParameterError

__all__ = ["CANARY_PREFIX", "CanarySet", "make_canaries", "canary_recovery", "canary_search", "CanarySearch",
           "exposure_summary", "default_min_count"]

CANARY_PREFIX = "My secret code is"


@dataclass(frozen=True)
class CanarySet:
    """Canaries of one format.

    ``prefix``: the format's fixed text; ``pool``: the words a secret is drawn from;
    ``secret_len``: words per secret; ``inserted``/``reference``: DataFrames with
    ``text`` (prefix + secret), ``label`` (str), ``secret`` (the secret words joined by
    one space); ``seed``: the key of the draw.
    """

    prefix: str
    pool: tuple[str, ...]
    secret_len: int
    inserted: pd.DataFrame
    reference: pd.DataFrame
    seed: int
    labels: tuple[str, ...] = field(default=())

    @property
    def n_fillings(self) -> int:
        """Size of the secret space, ``len(pool) ** secret_len``."""
        return len(self.pool) ** self.secret_len

    def fillings(self) -> list[tuple[str, ...]]:
        """Every secret of the format, in lexicographic order of pool indices (``n_fillings`` tuples)."""
        return list(itertools.product(self.pool, repeat=self.secret_len))

    def text(self, secret: Sequence[str]) -> str:
        """The canary sentence of ``secret`` (a sequence of ``secret_len`` words)."""
        return f"{self.prefix} {' '.join(secret)}"

    def to_dict(self) -> dict:
        """JSON-ready description (the curator's: it names the inserted secrets)."""
        return {"prefix": self.prefix, "pool": list(self.pool), "secret_len": self.secret_len,
                "n_fillings": self.n_fillings, "seed": self.seed, "n_inserted": len(self.inserted),
                "n_reference": len(self.reference),
                "inserted": self.inserted.to_dict("records"), "reference": self.reference.to_dict("records")}


def _pool_candidates(public_texts: Sequence[str], min_count: int, exclude: set[str],
                     public_labels: Sequence[str] | None, max_skew: float) -> list[str]:
    toks = [set(word_tokens(t)) for t in public_texts]
    counts = Counter(w for t in toks for w in t)
    keep = {w for w, c in counts.items() if c >= min_count and w.isascii() and w.isalpha() and len(w) >= 3
            and w not in NLTK_ENGLISH_STOPWORDS and w not in exclude}
    if public_labels is not None:  # label-neutral words: share of each label within max_skew of its overall share
        if len(public_labels) != len(public_texts):
            raise ParameterError(f"{len(public_texts)} public texts but {len(public_labels)} labels")
        overall = Counter(public_labels)
        by = {w: Counter() for w in keep}
        for t, y in zip(toks, public_labels):
            for w in t & keep:
                by[w][y] += 1
        n = len(public_labels)
        keep = {w for w in keep if all(abs(by[w][y] / counts[w] - overall[y] / n) <= max_skew for y in overall)}
    return sorted(keep)


def make_canaries(public_texts: Sequence[str], labels: Sequence[str], n: int, *, seed: int, pool_size: int = 16,
                  secret_len: int = 2, n_reference: int | None = None, prefix: str = CANARY_PREFIX,
                  min_count: int = 20, public_labels: Sequence[str] | None = None,
                  max_skew: float = 0.1) -> CanarySet:
    """Draw ``n`` canaries to insert and ``n_reference`` (default ``n``) never-inserted ones.

    ``public_texts``: the public split (the pool is ``pool_size`` words drawn uniformly
    from its alphabetic, non-stop-word words of length >= 3 that occur in at least
    ``min_count`` texts, prefix words excluded; with ``public_labels``, the labels of the
    public texts, only label-neutral words: in every label, the share of the word's texts
    with that label is within ``max_skew`` of the label's share of all public texts, so no
    secret word carries the class before training); ``labels``: the class labels, assigned
    in equal shares (the remainder to the first labels), each label's secrets drawn as
    rows of ``secret_len`` random permutations of the pool (module docstring), rows
    shuffled; ``seed``: key of the ChaCha20 draw (``make_rng(seed)``). Secrets are
    distinct across all ``n + n_reference`` canaries. Raises ParameterError for sizes that do not fit
    (``n + n_reference > pool_size ** secret_len``) and InputError when the public data
    has fewer than ``pool_size`` candidate words.
    """
    from textdp.noise import make_rng

    n_reference = n if n_reference is None else n_reference
    for name, v, lo in (("n", n, 1), ("n_reference", n_reference, 0), ("pool_size", pool_size, 2),
                        ("secret_len", secret_len, 1), ("min_count", min_count, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ParameterError(f"canaries: {name} must be a whole number >= {lo}, got {v!r}")
    if len(labels) < 1:
        raise ParameterError("canaries need at least one label")
    if n + n_reference > pool_size ** secret_len:
        raise ParameterError(f"{n} + {n_reference} distinct canaries do not fit in {pool_size}^{secret_len} "
                             "secrets; raise pool_size or secret_len")
    cands = _pool_candidates(public_texts, min_count, set(word_tokens(prefix)), public_labels, max_skew)
    if len(cands) < pool_size:
        raise InputError(f"only {len(cands)} public words occur in >= {min_count} texts; canaries need "
                         f"{pool_size}: lower min_count or pool_size")
    rng = make_rng(seed)
    pool = tuple(cands[i] for i in sorted(rng.choice(len(cands), size=pool_size, replace=False).tolist()))
    labs = [str(l) for l in labels]
    seen: set[tuple[int, ...]] = set()

    def block(total: int) -> pd.DataFrame:
        share = [total // len(labs) + (1 if i < total % len(labs) else 0) for i in range(len(labs))]
        rows: list[tuple[tuple[int, ...], str]] = []
        for lab, k in zip(labs, share):
            for _ in range(1000):  # redraw a label's block until its secrets are new
                perms = [rng.permutation(pool_size) for _ in range(secret_len)]
                sec = []
                for j in range(k):  # k may exceed pool_size: further rounds of fresh permutations
                    if j and j % pool_size == 0:
                        perms = [rng.permutation(pool_size) for _ in range(secret_len)]
                    sec.append(tuple(int(p[j % pool_size]) for p in perms))
                if len(set(sec)) == len(sec) and not seen.intersection(sec):
                    break
            else:
                raise ParameterError(f"could not draw {k} new secrets for label {lab!r} in {pool_size}^{secret_len}; "
                                     "raise pool_size or secret_len")
            seen.update(sec)
            rows.extend((x, lab) for x in sec)
        order = rng.permutation(len(rows))
        rows = [rows[i] for i in order]
        words = [tuple(pool[i] for i in x) for x, _ in rows]
        return pd.DataFrame({"text": [f"{prefix} {' '.join(w)}" for w in words], "label": [l for _, l in rows],
                             "secret": [" ".join(w) for w in words]})

    inserted = block(n)
    reference = block(n_reference) if n_reference else pd.DataFrame(columns=["text", "label", "secret"])
    return CanarySet(prefix, pool, int(secret_len), inserted, reference, int(seed), tuple(labs))


def default_min_count(n_public: int) -> int:
    """The pool's document-frequency floor for a public split of ``n_public`` texts:
    ``min(20, max(2, n_public // 100))`` (20 for a full dataset, lower for smoke-test sizes)."""
    return min(20, max(2, int(n_public) // 100))


def _contains(words: Sequence[str], secret: Sequence[str]) -> bool:
    k = len(secret)
    return any(list(words[i:i + k]) == list(secret) for i in range(len(words) - k + 1))


def canary_recovery(texts: Sequence[str], secrets: Sequence[str | Sequence[str]]) -> pd.DataFrame:
    """How well ``texts`` recover each secret (the counting rule of the module docstring).

    ``texts``: generated texts (any tokenisation; compared on :func:`word_tokens`);
    ``secrets``: one secret per canary, a string of words or a word sequence. Returns a
    DataFrame with one row per secret: ``recovered`` (bool: some text holds the secret's
    words contiguously and in order), ``recall`` (float in [0, 1]: the largest
    ``LCS(secret, text) / k`` over the texts; 0 with no texts) and ``best_text`` (the
    index of a text reaching it, -1 with no texts). Raises ParameterError for an empty secret.
    """
    toks = [word_tokens(t) for t in texts]
    rows = []
    for s in secrets:
        sec = word_tokens(s) if isinstance(s, str) else [w.lower() for w in s]
        if not sec:
            raise ParameterError("a canary secret is empty")
        best, arg, hit = 0, -1, False
        for i, w in enumerate(toks):
            lcs = lcs_length(sec, w) if w else 0
            if arg < 0 or lcs > best:
                best, arg = lcs, i
            if lcs == len(sec) and _contains(w, sec):
                hit, arg = True, i
                break
        rows.append({"recovered": hit, "recall": best / len(sec), "best_text": arg})
    return pd.DataFrame(rows, columns=["recovered", "recall", "best_text"])


@dataclass
class CanarySearch:
    """Result of :func:`canary_search`.

    ``texts``: DataFrame (``label``, ``rank``, ``text``, ``loss``): per label the ``m``
    fillings of lowest loss; ``inserted``/``reference``: the canaries with ``rank``
    (1 = lowest loss among all fillings for the canary's label), ``exposure``
    (``log2 N - log2 rank``, bits) and ``loss`` (nats); ``n_fillings`` = N;
    ``chance_hits``: expected number of inserted canaries among the returned texts if
    the ranking were random.
    """

    texts: pd.DataFrame
    inserted: pd.DataFrame
    reference: pd.DataFrame
    n_fillings: int
    chance_hits: float


def canary_search(clf, canaries: CanarySet, *, m: int | dict | None = None, max_len: int = 64,
                  batch_size: int = 256) -> CanarySearch:
    """White-box search over the canary format (positive control, module docstring).

    ``clf``: the target (:class:`textdp.models.classifier.TextClassifier`, labels as in
    ``canaries``); ``m``: fillings returned per label (int, ``{label: int}``, or None =
    the number of inserted canaries of each label). Scores all ``canaries.n_fillings``
    fillings with the target's cross-entropy for every label (eval mode, no gradient);
    ties in loss are broken by filling order. Cost: ``n_fillings`` forward passes. Raises
    ParameterError when a canary label is not one of the target's labels.
    """
    labels = [str(l) for l in clf.labels]
    bad = sorted(set(canaries.inserted["label"]) - set(labels))
    if bad:
        raise ParameterError(f"canary labels {bad} are not target labels {labels}")
    fills = canaries.fillings()
    texts = [canaries.text(f) for f in fills]
    from textdp.attacks.inversion.memorisation import log_probabilities

    loss = -log_probabilities(clf, texts, max_len, batch_size)
    index = {" ".join(f): i for i, f in enumerate(fills)}
    counts = canaries.inserted["label"].value_counts()
    rows, ranks = [], {}
    for j, lab in enumerate(labels):
        k = int(m.get(lab, 0) if isinstance(m, dict) else (counts.get(lab, 0) if m is None else m))
        ordered = np.lexsort((np.arange(len(fills)), loss[:, j]))  # primary: loss, then filling order
        rank = np.empty(len(fills), dtype=np.int64)
        rank[ordered] = np.arange(1, len(fills) + 1)
        ranks[lab] = rank
        for r, i in enumerate(ordered[:k]):
            rows.append({"label": lab, "rank": r + 1, "text": texts[i], "loss": float(loss[i, j])})
    out = pd.DataFrame(rows, columns=["label", "rank", "text", "loss"])
    N = len(fills)

    def ranked(df: pd.DataFrame) -> pd.DataFrame:
        i = [index[s] for s in df["secret"]]
        j = [labels.index(l) for l in df["label"]]
        rk = np.array([ranks[l][ii] for l, ii in zip(df["label"], i)], dtype=np.int64)
        return df.assign(rank=rk, exposure=np.log2(N) - np.log2(rk), loss=loss[i, j])

    n_ins = len(canaries.inserted)
    chance = float(len(out) * n_ins / N)
    return CanarySearch(out, ranked(canaries.inserted), ranked(canaries.reference), N, chance)


def exposure_summary(search: CanarySearch) -> dict:
    """Means of the search's exposure and recovery figures for a report (floats; bits for exposure)."""
    ins, ref = search.inserted, search.reference
    return {"n_fillings": search.n_fillings, "max_exposure_bits": math.log2(search.n_fillings),
            "mean_exposure_inserted": float(ins["exposure"].mean()) if len(ins) else float("nan"),
            "mean_exposure_reference": float(ref["exposure"].mean()) if len(ref) else float("nan"),
            "median_rank_inserted": float(ins["rank"].median()) if len(ins) else float("nan"),
            "median_rank_reference": float(ref["rank"].median()) if len(ref) else float("nan"),
            "chance_hits": search.chance_hits}
