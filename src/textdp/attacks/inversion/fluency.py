"""A fluency scorer independent of every generator: a smoothed word n-gram language model
trained on the public split.

Why not a neural LM: the attack compares generators of different kinds (textdp's from-scratch
WordPiece LMs, a pretrained BPE LM such as Gemma 3 270M and its fine-tune, VMI's embedding
search). A scorer that shares a generator's tokenizer, architecture or training recipe favours
that generator's output (it has the same blind spots); one generator scoring its own output is
worse. This scorer shares none of them: it sees words, not sub-word tokens, and its parameters are
counts.

**Model** (:class:`NgramFluencyScorer`, named :data:`SCORER_NAME` in reports):

* text normalisation, applied to the training texts and to every scored text alike: Unicode NFKD,
  combining marks removed, lowercased (the from-scratch generators cannot produce capitals, so
  case is not scored), then split into words and punctuation marks as BERT's basic tokenizer does
  (``\\w+`` runs and single non-space, non-word characters): ``"It's fine."`` ->
  ``it ' s fine .``; spacing is not scored;
* an interpolated Kneser-Ney word 3-gram model (Chen & Goodman 1999, §3.5; absolute discount
  ``D = 0.75`` at every order; the unigram level interpolated with a uniform distribution over the
  vocabulary), with ``<s> <s>`` before and ``</s>`` after each text;
* vocabulary: the words seen at least ``min_count`` (2) times in the public texts; the others are
  ``<unk>`` in training, so ``p(<unk> | context)`` is learned from rare public words;
* a word outside the vocabulary costs ``-log p(<unk> | context) - log p_char(spelling)``, with
  ``p_char`` an interpolated Witten-Bell character 5-gram model (Witten & Bell 1991) of the public
  vocabulary's word types, ending with an end-of-word symbol; an unseen character is one shared
  ``<unk-char>`` symbol. So glued or made-up words are not cheap.

**Metric**: corpus-level perplexity per word, ``exp(total NLL / (words + end-of-text symbols))``
(:meth:`NgramFluencyScorer.perplexity`); lower is more fluent. Deterministic (counting only).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter, defaultdict
from typing import Iterable, Sequence

import numpy as np

from textdp.errors import InputError, ParameterError

__all__ = ["NgramFluencyScorer", "SCORER_NAME", "words"]

#: the scorer's name in reports ("fluency (scorer: NAME)")
SCORER_NAME = "public-word-3gram-KN"
_WORD = re.compile(r"\w+|[^\w\s]")
BOS, EOS, UNK = "<s>", "</s>", "<unk>"


def words(text: str) -> list[str]:
    """The scorer's words of ``text``: NFKD, combining marks removed, lowercased, split into
    ``\\w+`` runs and single punctuation marks (module docstring)."""
    t = unicodedata.normalize("NFKD", str(text))
    t = "".join(c for c in t if not unicodedata.combining(c)).lower()
    return _WORD.findall(t)


class _CharModel:
    """Interpolated Witten-Bell character n-gram model of word spellings (``</w>`` ends a word)."""

    END, UNKC = "\x00end", "\x00unk"

    def __init__(self, types: Iterable[str], order: int = 5):
        self.order = order
        chars = sorted({c for w in types for c in w})
        self.alphabet = set(chars)
        self.n_symbols = len(chars) + 2  # + end-of-word + unknown character
        self.counts: list[dict] = [defaultdict(Counter) for _ in range(order)]  # level k: context of k chars
        for w in types:
            seq = list(w) + [self.END]
            for i, c in enumerate(seq):
                for k in range(order):
                    if i - k < 0:
                        break
                    self.counts[k][tuple(seq[i - k:i])][c] += 1

    def _sym(self, c: str) -> str:
        return c if c in self.alphabet else self.UNKC

    def logprob(self, word: str) -> float:
        """Natural log-probability of the spelling ``word`` followed by end-of-word."""
        seq = [self._sym(c) for c in word] + [self.END]
        total = 0.0
        for i, c in enumerate(seq):
            p = 1.0 / self.n_symbols
            for k in range(min(self.order - 1, i) + 1):  # lower orders first
                ctx = tuple(seq[i - k:i])
                cnt = self.counts[k].get(ctx)
                if not cnt:
                    break
                n, t = sum(cnt.values()), len(cnt)
                p = (cnt.get(c, 0) + t * p) / (n + t)
            total += math.log(p)
        return total


class NgramFluencyScorer:
    """Interpolated Kneser-Ney word 3-gram LM with a character model for unseen words (module
    docstring), trained on ``texts`` (the public split).

    ``min_count``: a word enters the vocabulary when seen at least so often; ``discount``: the
    Kneser-Ney discount D in (0, 1); ``char_order``: order of the spelling model. Raises InputError
    when ``texts`` holds no word, ParameterError for a bad knob.
    """

    name = SCORER_NAME

    def __init__(self, texts: Sequence[str], *, min_count: int = 2, discount: float = 0.75, char_order: int = 5):
        if not 0 < discount < 1 or min_count < 1 or char_order < 1:
            raise ParameterError("fluency scorer: 0 < discount < 1, min_count >= 1, char_order >= 1")
        toks = [words(t) for t in texts]
        freq = Counter(w for ws in toks for w in ws)
        if not freq:
            raise InputError("the fluency scorer needs public texts with words")
        self.D = float(discount)
        self.min_count = int(min_count)
        self.vocab = {w for w, c in freq.items() if c >= min_count} | {UNK, EOS}
        self.chars = _CharModel(sorted(freq), char_order)
        c3: Counter = Counter()
        for ws in toks:
            seq = [BOS, BOS] + [w if w in self.vocab else UNK for w in ws] + [EOS]
            c3.update(zip(seq, seq[1:], seq[2:]))
        # top order: raw counts; lower orders: continuation counts (distinct left neighbours)
        self.c3 = c3
        self.c3_ctx: Counter = Counter()
        self.t3_ctx: Counter = Counter()
        n2: Counter = Counter()
        for (u, v, w), c in c3.items():
            self.c3_ctx[(u, v)] += c
            self.t3_ctx[(u, v)] += 1
            n2[(v, w)] += 1
        self.n2 = n2
        self.n2_ctx: Counter = Counter()
        self.t2_ctx: Counter = Counter()
        n1: Counter = Counter()
        for (v, w), c in n2.items():
            self.n2_ctx[v] += c
            self.t2_ctx[v] += 1
            n1[w] += 1
        self.n1 = n1
        self.n1_total = sum(n1.values())
        self.t1 = len(n1)
        self.V = len(self.vocab)
        self.info = {"name": self.name, "texts": len(toks), "words": int(sum(freq.values())),
                     "vocabulary": self.V, "min_count": self.min_count, "discount": self.D,
                     "char_order": char_order, "trigrams": len(c3)}

    # ------------------------------------------------------------------ probabilities
    def _p1(self, w: str) -> float:
        D = self.D
        return (max(self.n1.get(w, 0) - D, 0.0) + D * self.t1 / self.V) / self.n1_total

    def _p2(self, v: str, w: str) -> float:
        n = self.n2_ctx.get(v, 0)
        if not n:
            return self._p1(w)
        D = self.D
        return (max(self.n2.get((v, w), 0) - D, 0.0) + D * self.t2_ctx[v] * self._p1(w)) / n

    def _p3(self, u: str, v: str, w: str) -> float:
        n = self.c3_ctx.get((u, v), 0)
        if not n:
            return self._p2(v, w)
        D = self.D
        return (max(self.c3.get((u, v, w), 0) - D, 0.0) + D * self.t3_ctx[(u, v)] * self._p2(v, w)) / n

    # ------------------------------------------------------------------ scoring
    def text_nll(self, text: str) -> tuple[float, int]:
        """``(nll, n)``: the natural-log negative log-likelihood of ``text``'s words and its
        end-of-text symbol, and the number of predicted symbols (words + 1)."""
        u, v = BOS, BOS
        nll = 0.0
        ws = words(text)
        for w in ws + [EOS]:
            key = w if w in self.vocab else UNK
            nll -= math.log(self._p3(u, v, key))
            if key == UNK:
                nll -= self.chars.logprob(w)
            u, v = v, key
        return nll, len(ws) + 1

    def nll(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per-text NLL (nats, float64) and predicted symbols (int64), each of shape (N,)."""
        out = [self.text_nll(t) for t in texts]
        return (np.array([o[0] for o in out], dtype=np.float64), np.array([o[1] for o in out], dtype=np.int64))

    def perplexity(self, texts: Sequence[str]) -> float:
        """Corpus-level perplexity per word of ``texts`` (``exp(sum NLL / sum symbols)``; NaN for
        no texts); lower is more fluent."""
        if len(texts) == 0:
            return float("nan")
        nll, n = self.nll(texts)
        return float(np.exp(nll.sum() / n.sum()))
