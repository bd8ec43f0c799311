"""Metrics of model inversion (spec ``text-revealer.md`` §6; Zhang et al. 2022 §3.2).

* :func:`filter_tokens` — the token filter ``F``: lowercase, strip accents (as
  BERT-uncased does), remove special tokens, split into words and punctuation
  with ``\\w+|[^\\w\\s]`` (BERT's basic tokenizer also splits at every
  punctuation mark, so ``don't`` -> ``don ' t`` on both the private and the
  generated side), drop punctuation and NLTK's English stop words.
* :func:`lcs_length` / :func:`match_ground_truth` — ground truth of an inverted
  text: the private text of the same label with the longest common subsequence
  of filtered tokens (ties: higher ``LCS/|F(x)|``, then lower index); matcher
  ``"longest_block"`` uses the longest contiguous match instead.
* :func:`recovery_rates` — RR (a) matched, (b) vocabulary (corpus coverage, the
  paper's reading), (c) private-only (private words never seen in the public
  data: leakage the generator's domain prior cannot explain).
* :func:`kendall_topk_distance` — Fagin, Kumar & Sivakumar (2003) ``K^(p)``
  between two top-k lists, with ties handled as in Fagin et al. (2004): a pair
  tied in one ranking and ordered in the other costs ``p``.
* :func:`attack_accuracy` — share of inverted texts that an independent
  evaluation classifier assigns to the attacked label.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from typing import Iterable, Mapping, Sequence

import numpy as np

from textdp.attacks.inversion.stopwords import NLTK_ENGLISH_STOPWORDS
from textdp.errors import ParameterError

__all__ = [
    "filter_tokens", "word_tokens", "lcs_length", "longest_block", "match_ground_truth", "recovery_rates",
    "kendall_topk_distance", "topk_ranking", "attack_accuracy", "SPECIAL_TOKENS",
]

SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "<|endoftext|>")
_SPECIAL_RE = re.compile(r"\[(?:CLS|SEP|PAD|UNK|MASK|unused\d+)\]|<\|endoftext\|>", re.IGNORECASE)
_WORD_RE = re.compile(r"\w+|[^\w\s]")
_PUNCT = set(string.punctuation)


def _strip_accents(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def word_tokens(text: str) -> list[str]:
    """Lowercased, accent-stripped word and punctuation tokens, special tokens removed
    and WordPiece ``##`` continuations glued back onto the previous word."""
    text = _SPECIAL_RE.sub(" ", text)
    text = re.sub(r"\s*##", "", text)  # "perform ##ance" -> "performance"
    return _WORD_RE.findall(_strip_accents(text.lower()))


def filter_tokens(text: str, stopwords: frozenset[str] | set[str] = NLTK_ENGLISH_STOPWORDS) -> list[str]:
    """The filter ``F`` of spec §6.1: word tokens without punctuation, special tokens and stop words."""
    return [t for t in word_tokens(text) if t not in stopwords and not all(c in _PUNCT for c in t)]


# --------------------------------------------------------------------------- LCS (numba)
try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is in the topics extra; fall back to python
    def njit(*a, **k):
        return (lambda f: f) if not (a and callable(a[0])) else a[0]


@njit(cache=True)
def _lcs_many(q, flat, offsets, contiguous):
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.int64)
    m = len(q)
    prev = np.zeros(m + 1, dtype=np.int64)
    cur = np.zeros(m + 1, dtype=np.int64)
    for c in range(n):
        a, b = offsets[c], offsets[c + 1]
        for j in range(m + 1):
            prev[j] = 0
        best = 0
        for i in range(a, b):
            cur[0] = 0
            x = flat[i]
            for j in range(1, m + 1):
                if q[j - 1] == x:
                    cur[j] = prev[j - 1] + 1
                    if cur[j] > best:
                        best = cur[j]
                elif contiguous:
                    cur[j] = 0
                else:
                    cur[j] = prev[j] if prev[j] > cur[j - 1] else cur[j - 1]
            for j in range(m + 1):
                prev[j] = cur[j]
        out[c] = best if contiguous else prev[m]
    return out


def _encode(lists: Sequence[Sequence[str]], index: dict[str, int]) -> list[np.ndarray]:
    return [np.array([index.setdefault(t, len(index)) for t in toks], dtype=np.int64) for toks in lists]


def _scores(query: Sequence[str], cands: Sequence[Sequence[str]], contiguous: bool) -> np.ndarray:
    index: dict[str, int] = {}
    q, *cs = _encode([query] + list(cands), index)
    if not cs:
        return np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(cs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in cs])
    flat = np.concatenate(cs) if offsets[-1] else np.zeros(0, dtype=np.int64)
    return _lcs_many(q, flat, offsets, contiguous)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common (not necessarily contiguous) subsequence of two token lists."""
    return int(_scores(a, [b], False)[0])


def longest_block(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common contiguous run of two token lists."""
    return int(_scores(a, [b], True)[0])


def match_ground_truth(inverted: Sequence[Sequence[str]], private: Sequence[Sequence[str]],
                       matcher: str = "lcs") -> tuple[np.ndarray, np.ndarray]:
    """Ground truth of each inverted text among ``private`` (filtered token lists).

    Returns ``(index (N,) int64, score (N,) int64)``: for each inverted text the
    private text maximising the LCS (``matcher="lcs"``) or longest contiguous match
    (``"longest_block"``); ties broken by the higher ``score / |F(x)|`` and then
    the lower index. ``index`` is -1 when ``private`` is empty.
    """
    if matcher not in ("lcs", "longest_block"):
        raise ParameterError(f"matcher must be 'lcs' or 'longest_block', got {matcher!r}")
    lens = np.array([max(len(p), 1) for p in private], dtype=np.float64)
    idx = np.full(len(inverted), -1, dtype=np.int64)
    best = np.zeros(len(inverted), dtype=np.int64)
    if not private:
        return idx, best
    for k, q in enumerate(inverted):
        s = _scores(q, private, matcher == "longest_block")
        ratio = s / lens
        # lexsort: last key is primary -> (-score, -ratio, index)
        order = np.lexsort((np.arange(len(s)), -ratio, -s))
        idx[k] = order[0]
        best[k] = s[order[0]]
    return idx, best


def recovery_rates(inverted: Mapping[str, Sequence[str]], private: Mapping[str, Sequence[str]],
                   public_vocab: set[str] | None = None, matcher: str = "lcs",
                   stopwords=NLTK_ENGLISH_STOPWORDS) -> dict:
    """Recovery rates of spec §6.3, per label and macro-averaged over labels.

    ``inverted[a]``: generated texts for label ``a``; ``private[a]``: the private
    texts of label ``a``; ``public_vocab``: the filtered words of the public data
    (needed for RR (c)). Returns a dict with ``rr_match``, ``rr_vocab``,
    ``rr_private_only`` (fractions in [0, 1]; NaN when undefined), ``per_label``
    and ``matches`` (per label: list of (inverted index, private index)).

    * (a) ``rr_match`` = mean over x̂ of |set F(x̂) ∩ set F(g(x̂))| / |set F(g(x̂))|;
    * (b) ``rr_vocab`` = |U_a ∩ P_a| / |P_a| with U_a, P_a the filtered word sets;
    * (c) ``rr_private_only`` = as (b) with P_a replaced by P_a minus the public words.
    """
    per_label: dict[str, dict] = {}
    matches: dict[str, list] = {}
    for a, texts in inverted.items():
        priv = [filter_tokens(t, stopwords) for t in private.get(a, [])]
        keep = [i for i, p in enumerate(priv) if p]
        priv_k = [priv[i] for i in keep]
        inv = [filter_tokens(t, stopwords) for t in texts]
        U = set().union(*inv) if inv else set()
        P = set().union(*priv_k) if priv_k else set()
        rr_vocab = len(U & P) / len(P) if P else float("nan")
        rr_priv = float("nan")
        if public_vocab is not None:
            Pp = P - public_vocab
            rr_priv = len(U & Pp) / len(Pp) if Pp else float("nan")
        rr_match = float("nan")
        m: list = []
        if inv and priv_k:
            gi, _ = match_ground_truth(inv, priv_k, matcher)
            vals = []
            for k, g in enumerate(gi):
                gs = set(priv_k[g])
                vals.append(len(set(inv[k]) & gs) / len(gs))
                m.append((k, keep[g]))
            rr_match = float(np.mean(vals))
        matches[a] = m
        per_label[a] = {"rr_match": rr_match, "rr_vocab": rr_vocab, "rr_private_only": rr_priv,
                        "n_inverted": len(texts), "n_private": len(private.get(a, [])),
                        "private_words": len(P),
                        "private_only_words": len(P - public_vocab) if public_vocab is not None else None}

    def macro(key):
        vals = [v[key] for v in per_label.values() if not np.isnan(v[key])]
        return float(np.mean(vals)) if vals else float("nan")

    return {"rr_match": macro("rr_match"), "rr_vocab": macro("rr_vocab"),
            "rr_private_only": macro("rr_private_only"), "per_label": per_label, "matches": matches}


# --------------------------------------------------------------------------- Kendall top-k
def topk_ranking(counts: Mapping[str, int] | Iterable[str], k: int) -> dict[str, int]:
    """Top-``k`` items by frequency as ``{item: rank}`` with competition ranks
    (equal counts share a rank, so ties are kept). Boundary ties are cut in
    alphabetical order so that exactly ``min(k, n)`` items are returned."""
    if not isinstance(counts, Mapping):
        counts = Counter(counts)
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    ranks: dict[str, int] = {}
    for pos, (w, c) in enumerate(items):
        ranks[w] = pos if pos == 0 or c != items[pos - 1][1] else ranks[items[pos - 1][0]]
    return ranks


def kendall_topk_distance(r1: Mapping[str, float], r2: Mapping[str, float], p: float = 0.5) -> float:
    """Normalised Kendall distance ``K^(p)`` between two top-k rankings (Fagin et al. 2003).

    ``r1``, ``r2``: ``{item: rank}`` (lower rank = more frequent; equal ranks are
    ties). Over unordered pairs {i, j} of the union:
    1. both in both lists: 1 if their order strictly disagrees, ``p`` if tied in
       exactly one list, else 0;
    2. both in one list, only ``i`` in the other: 1 if ``j`` is strictly above ``i``
       in the list that has both, ``p`` if they are tied there, else 0;
    3. ``i`` only in one list and ``j`` only in the other: 1;
    4. both only in the same list: ``p``.
    Divided by the value for disjoint lists, ``k1·k2 + p·(C(k1,2) + C(k2,2))``:
    0 = identical, 1 = disjoint. Raises ParameterError for p outside [0, 1].
    """
    if not 0.0 <= p <= 1.0:
        raise ParameterError(f"Kendall penalty p must be in [0, 1], got {p}")
    items = sorted(set(r1) | set(r2))
    k1, k2 = len(r1), len(r2)
    norm = k1 * k2 + p * (k1 * (k1 - 1) / 2 + k2 * (k2 - 1) / 2)
    if norm == 0:
        return 0.0
    total = 0.0
    for a_i in range(len(items)):
        i = items[a_i]
        for a_j in range(a_i + 1, len(items)):
            j = items[a_j]
            in1 = (i in r1, j in r1)
            in2 = (i in r2, j in r2)
            if all(in1) and all(in2):
                s1 = np.sign(r1[i] - r1[j])
                s2 = np.sign(r2[i] - r2[j])
                if s1 * s2 < 0:
                    total += 1
                elif (s1 == 0) != (s2 == 0):
                    total += p
            elif all(in1) or all(in2):
                both, other = (r1, r2) if all(in1) else (r2, r1)
                if i in other or j in other:  # case 2
                    present, absent = (i, j) if i in other else (j, i)
                    if both[absent] < both[present]:
                        total += 1
                    elif both[absent] == both[present]:
                        total += p
                else:  # case 4
                    total += p
            else:  # case 3: one only in r1, the other only in r2
                total += 1
    return float(total / norm)


def attack_accuracy(predicted: Sequence[int], target: Sequence[int]) -> float:
    """Share of inverted texts whose evaluator prediction equals the attacked label."""
    predicted, target = np.asarray(predicted), np.asarray(target)
    if len(predicted) != len(target):
        raise ParameterError("attack_accuracy: predicted and target lengths differ")
    return float((predicted == target).mean()) if len(target) else float("nan")
