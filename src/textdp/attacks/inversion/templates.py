"""Generation templates from an n-gram analysis of the public data (spec §4).

Two styles, both from Zhang et al. 2022 App. A.3:

* ``"ngram"`` (the paper's long-text/Yelp recipe): ``n_min..n_max``-word n-grams
  with frequency strictly above ``min_freq``, ranked by frequency (longer first on
  ties, then alphabetically); optionally drop an n-gram contained in a
  higher-ranked longer one; keep ``n_templates``.
* ``"phrase_adj"`` (the paper's short-text/Emotion recipe): frequent 2-3-word
  phrases combined with frequent one-word "adjectives"; each pair is scored by
  ``freq(phrase) * freq(adj)`` and the top ``n_templates`` kept. No POS tagger
  works offline, so adjectives come from ``adjective_source``: ``"label_pmi"``
  (unigrams with the highest PMI with some label in the *labelled* public data:
  an assumption beyond the paper's unlabelled public data, stated in the run
  card) or ``"wordlist:PATH"`` (one word per line).

n-grams never span punctuation, and templates made only of stop words are
dropped. ``template_fraction`` (Table 4 ablation) keeps the first
``ceil(f·L)`` words (at least one). Output order is deterministic.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Sequence

from textdp.attacks.inversion.stopwords import NLTK_ENGLISH_STOPWORDS
from textdp.errors import InputError, ParameterError

__all__ = ["build_templates", "template_labels"]

_TOK = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


def _segments(text: str) -> list[list[str]]:
    """Lowercased word runs between punctuation marks."""
    segs, cur = [], []
    for t in _TOK.findall(text.lower()):
        if re.fullmatch(r"\w+(?:'\w+)?", t):
            cur.append(t)
        else:
            if cur:
                segs.append(cur)
            cur = []
    if cur:
        segs.append(cur)
    return segs


def _ngram_counts(texts: Sequence[str], n_min: int, n_max: int) -> Counter:
    c: Counter = Counter()
    for t in texts:
        for seg in _segments(t):
            for n in range(n_min, n_max + 1):
                for i in range(len(seg) - n + 1):
                    c[tuple(seg[i:i + n])] += 1
    return c


def _contains(big: tuple, small: tuple) -> bool:
    n = len(small)
    return any(big[i:i + n] == small for i in range(len(big) - n + 1))


def _all_stop(g: tuple) -> bool:
    return all(w in NLTK_ENGLISH_STOPWORDS for w in g)


def _cut(words: tuple, fraction: float) -> tuple:
    return words[: max(1, math.ceil(fraction * len(words)))]


def _pmi_adjectives(texts, labels, min_freq, k):
    if labels is None:
        raise InputError("adjective_source='label_pmi' needs public labels; use 'wordlist:PATH' instead")
    uni = Counter()
    per = defaultdict(Counter)
    for t, y in zip(texts, labels):
        ws = {w for seg in _segments(t) for w in seg}
        for w in ws:
            uni[w] += 1
            per[y][w] += 1
    n = len(texts)
    ny = Counter(labels)
    scored = []
    for w, c in uni.items():
        if c <= min_freq or w in NLTK_ENGLISH_STOPWORDS or not w.isalpha():
            continue
        best = max(math.log((per[y][w] / n) / ((c / n) * (ny[y] / n))) for y in ny if per[y][w] > 0)
        scored.append((best, c, w))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2]))
    return [(w, c) for _, c, w in scored[:k]]


def build_templates(texts: Sequence[str], *, style: str = "ngram", n_min: int = 3, n_max: int = 8,
                    min_freq: int = 20, n_templates: int = 320, drop_contained: bool = True,
                    template_fraction: float = 1.0, adjective_source: str = "label_pmi",
                    labels: Sequence[str] | None = None, n_adjectives: int = 20) -> list[str]:
    """Templates (strings of lowercased words) from public ``texts``.

    Raises ParameterError for bad settings and InputError when no n-gram passes
    the frequency threshold (lower ``min_freq`` or use more public data).
    """
    if style not in ("ngram", "phrase_adj"):
        raise ParameterError(f"template style must be 'ngram' or 'phrase_adj', got {style!r}")
    if not 1 <= n_min <= n_max:
        raise ParameterError(f"need 1 <= n_min <= n_max, got {n_min}, {n_max}")
    if n_templates < 1 or min_freq < 0 or not 0 < template_fraction <= 1:
        raise ParameterError("n_templates >= 1, min_freq >= 0 and 0 < template_fraction <= 1 are required")
    if style == "ngram":
        counts = _ngram_counts(texts, n_min, n_max)
        cands = [(g, c) for g, c in counts.items() if c > min_freq and not _all_stop(g)]
        cands.sort(key=lambda gc: (-gc[1], -len(gc[0]), gc[0]))
        kept: list[tuple] = []
        for g, _ in cands:
            if drop_contained and any(len(k) > len(g) and _contains(k, g) for k in kept):
                continue
            kept.append(g)
            if len(kept) >= n_templates:
                break
        out = kept[:n_templates]
    else:
        counts = _ngram_counts(texts, 2, 3)
        phrases = sorted(((g, c) for g, c in counts.items() if c > min_freq), key=lambda gc: (-gc[1], gc[0]))
        if adjective_source == "label_pmi":
            adjs = _pmi_adjectives(texts, labels, min_freq, n_adjectives)
        elif adjective_source.startswith("wordlist:"):
            p = Path(adjective_source.split(":", 1)[1])
            if not p.is_file():
                raise InputError(f"adjective word list {str(p)!r} does not exist")
            words = {w.strip().lower() for w in p.read_text(encoding="utf-8").splitlines() if w.strip()}
            uni = _ngram_counts(texts, 1, 1)
            adjs = sorted(((w, uni[(w,)]) for w in words if uni[(w,)] > min_freq), key=lambda wc: (-wc[1], wc[0]))
            adjs = adjs[:n_adjectives]
        else:
            raise ParameterError(f"adjective_source must be 'label_pmi' or 'wordlist:PATH', got {adjective_source!r}")
        phrases = phrases[: max(1, 4 * n_templates)]
        pairs = sorted(((pc * ac, g + (w,)) for g, pc in phrases for w, ac in adjs if w not in g),
                       key=lambda s: (-s[0], s[1]))
        out = []
        seen = set()
        for _, g in pairs:
            if g not in seen and not _all_stop(g):
                seen.add(g)
                out.append(g)
            if len(out) >= n_templates:
                break
    out = [_cut(g, template_fraction) for g in out]
    res, seen = [], set()
    for g in out:
        s = " ".join(g)
        if s not in seen:
            seen.add(s)
            res.append(s)
    if not res:
        raise InputError(f"no {style} template occurs more than {min_freq} times in the public data; "
                         "lower min_freq or use a larger dataset")
    return res


def template_labels(templates: Sequence[str], texts: Sequence[str], labels: Sequence[str]) -> list[str]:
    """VTG's label of each template (paper §4.1): the label under which the template
    occurs most often in the labelled public data (ties and absences: the most
    frequent label overall, then alphabetical)."""
    overall = Counter(labels)
    default = sorted(overall, key=lambda y: (-overall[y], y))[0]
    low = [" " + " ".join(w for s in _segments(t) for w in s) + " " for t in texts]
    out = []
    for tpl in templates:
        needle = " " + tpl + " "
        c = Counter(y for t, y in zip(low, labels) if needle in t)
        out.append(sorted(c, key=lambda y: (-c[y], y))[0] if c else default)
    return out


def jobs_by_prefix_length(tpl_ids, n_labels: int, n_samples: int, batch_size: int):
    """The generation jobs ``(label, template, sample)`` in batches of at most ``batch_size`` whose templates
    have the same number of tokens (``tpl_ids[t]``: the token ids of template ``t``), shortest first, so
    that each batch's prefixes stack into one tensor without padding."""
    by_len: dict[int, list] = {}
    for a in range(n_labels):
        for t in range(len(tpl_ids)):
            for s in range(n_samples):
                by_len.setdefault(len(tpl_ids[t]), []).append((a, t, s))
    for L in sorted(by_len):
        group = by_len[L]
        for b in range(0, len(group), batch_size):
            yield group[b:b + batch_size]
