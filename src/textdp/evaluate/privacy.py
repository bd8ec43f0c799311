"""Privacy of sanitized text: aligned tokens, the Bayes-optimal inversion for a textdp
sanitizer, the mask-token inference attack, and N_w / S_w.

* :func:`aligned_tokens` -- re-tokenize clean and sanitized documents with the
  mechanism's own tokenizer and pair them position by position. Word-level
  sanitizers replace every token span by one vocabulary word, so the counts match
  except where a replacement word re-tokenizes into several tokens (e.g.
  ``u.s.``) or a token was dropped (``oov="drop"``); those documents are left
  out of the attacks and counted (``docs_misaligned``).
* :func:`channel_for` -- the exact channel of a fitted SanText / SanText+ (and the
  approximate FBDD channel) over its output vocabulary, for
  :class:`textdp.attacks.bayes.BayesInversion`.
* :func:`mask_token_attack` -- SanText's mask-token inference (Yue et al. 2021,
  §5.3; spec A.8.1): mask each sanitized position, let an MLM predict it from the
  sanitized context, success when the prediction equals the *original* token;
  defence rate = 1 − success. Positions are gathered by index (not by searching
  ``[MASK]`` ids) and masks are passed by keyword, avoiding the official script's
  faults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from textdp.attacks.bayes import BayesInversion, Channel, ExponentialChannel, NoisyNearestChannel, word_prior
from textdp.errors import InputError

__all__ = ["aligned_tokens", "AlignedTokens", "channel_for", "bayes_attack", "mask_token_attack",
           "deniability_summary"]


@dataclass
class AlignedTokens:
    """``original[i]`` and ``sanitized[i]``: word lists of aligned document ``i``;
    ``doc_index``: its index in the input; ``docs_misaligned``: documents left out."""

    original: list[list[str]]
    sanitized: list[list[str]]
    doc_index: list[int]
    docs_misaligned: int

    @property
    def n_tokens(self) -> int:
        return sum(len(d) for d in self.original)

    def flat(self) -> tuple[list[str], list[str]]:
        return ([w for d in self.original for w in d], [w for d in self.sanitized for w in d])


def _words(mech, texts: Sequence[str]) -> list[list[str]]:
    tok = mech.tokenize(list(texts))
    flat = tok.raw_tokens(np.arange(tok.n_tokens)) if tok.n_tokens else np.zeros(0, dtype=object)
    if mech.embeddings.lowercase:
        flat = np.array([w.lower() for w in flat.tolist()], dtype=object)
    out, pos = [], 0
    for n in tok.lengths.tolist():
        out.append(flat[pos:pos + n].tolist())
        pos += n
    return out


def aligned_tokens(mech, clean: Sequence[str], sanitized: Sequence[str]) -> AlignedTokens:
    """Pair the tokens of ``clean[i]`` and ``sanitized[i]`` (see the module docstring)."""
    if len(clean) != len(sanitized):
        raise InputError(f"{len(clean)} clean but {len(sanitized)} sanitized documents")
    a, b = _words(mech, clean), _words(mech, sanitized)
    o, s, idx, bad = [], [], [], 0
    for i, (x, y) in enumerate(zip(a, b)):
        if len(x) != len(y):
            bad += 1
            continue
        if x:
            o.append(x)
            s.append(y)
            idx.append(i)
    return AlignedTokens(o, s, idx, bad)


def channel_for(mech, block: int = 1024, n_calibration: int = 1500,
                rng: np.random.Generator | None = None) -> Channel:
    """The channel ``p(y|x)`` of a fitted textdp sanitizer over its output vocabulary
    (inputs = outputs = ``mech.output_words``): exact for SanText and SanText+
    (checked against ``mech.probabilities`` in the tests); for FBDD an exponential-family
    approximation calibrated on ``n_calibration`` simulated draws (attacker-side simulation
    of the public mechanism; ``rng`` drives it)."""
    words = mech.output_words
    rows = mech.output_rows
    vec = np.asarray(mech.embeddings.vectors[rows], dtype=np.float64)
    name = getattr(mech, "name", type(mech).__name__.lower())
    eta = float(getattr(mech, "eta", 0.0) or 0.0)  # uniform share of the float-safe sampler, if any
    if name == "fbdd":
        # the attacker simulates the public mechanism on random vocabulary words to calibrate
        g = rng if rng is not None else np.random.default_rng(0)
        xi = g.integers(0, len(words), size=min(n_calibration, 50 * len(words)))
        yi = mech.output_positions(mech.sample_rows(rows[xi], g))
        return NoisyNearestChannel(words, vec, words, vec, mech.epsilon, block=block, calibration=(xi, yi))
    if name == "santext+":
        return ExponentialChannel(words, vec, words, vec, mech.epsilon, sensitive=mech.sensitive_words,
                                  p=mech.p, block=block, name="santext+", eta=eta)
    return ExponentialChannel(words, vec, words, vec, mech.epsilon, block=block, name=name, eta=eta)


def _subset(n: int, limit: int | None, rng: np.random.Generator | None) -> np.ndarray | None:
    """Sorted indices of a uniform random subset of ``limit`` of ``n`` items, or None when all
    are kept (``limit`` None or ``n <= limit``). Evaluation sampling, not DP noise: without
    ``rng`` a fixed PCG64 seed keeps reports reproducible."""
    if limit is None or n <= limit:
        return None
    g = rng if rng is not None else np.random.default_rng(0)
    return np.sort(g.choice(n, size=limit, replace=False))


def bayes_attack(mech, aligned: AlignedTokens, prior="wordfreq", k: int = 5, max_tokens: int | None = 10000,
                 rng: np.random.Generator | None = None, channel: Channel | None = None) -> dict:
    """Run :class:`BayesInversion` on aligned tokens (a random subset of at most
    ``max_tokens`` tokens when given). ``prior``: ``"wordfreq"``, ``"uniform"`` or a
    word→count mapping. Returns the :meth:`BayesResult.to_dict` entries."""
    ch = channel or channel_for(mech, rng=rng)
    orig, san = aligned.flat()
    if not orig:
        raise InputError("no aligned tokens to attack (is the sanitized split empty?)")
    pick = _subset(len(orig), max_tokens, rng)
    if pick is not None:
        orig = [orig[i] for i in pick]
        san = [san[i] for i in pick]
    atk = BayesInversion(ch, word_prior(ch.inputs, prior), k=k)
    res = atk.attack(orig, san)
    d = res.to_dict()
    d["bayes_prior"] = prior if isinstance(prior, str) else "corpus-counts"
    return d


def mask_token_attack(mlm, aligned: AlignedTokens, max_positions: int | None = 5000,
                      rng: np.random.Generator | None = None, batch_size: int = 256) -> dict:
    """Mask-token inference with ``mlm`` (``predict_masked(docs, positions)``) on the
    sanitized documents. Success when the top prediction equals the original word.

    Returns ``mask_success`` (all positions, the paper's rate), ``mask_defence`` (1 −
    success), ``mask_success_changed`` (positions the sanitizer changed),
    ``mask_positions``."""
    pos = [(i, j) for i, d in enumerate(aligned.sanitized) for j in range(len(d))]
    if not pos:
        raise InputError("no sanitized tokens to attack")
    pick = _subset(len(pos), max_positions, rng)
    if pick is not None:
        pos = [pos[i] for i in pick]
    pred = mlm.predict_masked(aligned.sanitized, pos, k=1, batch_size=batch_size)
    hit = np.array([p[0] == aligned.original[i][j] if p else False for p, (i, j) in zip(pred, pos)])
    changed = np.array([aligned.original[i][j] != aligned.sanitized[i][j] for i, j in pos])
    return {"mask_success": float(hit.mean()), "mask_defence": float(1 - hit.mean()),
            "mask_success_changed": float(hit[changed].mean()) if changed.any() else None,
            "mask_positions": len(pos)}


def deniability_summary(mech, n_words: int = 100, k: int = 1000) -> dict:
    """Median ``N_w`` and mean ``S_w`` over ``n_words`` output words spread over the
    frequency ranking (``textdp.sanitize.plausible_deniability``; exact for
    SanText(+), sampled with ``min(k, 200)`` draws for FBDD)."""
    from textdp.sanitize import plausible_deniability
    from textdp.sanitize.stats import sample_words

    words = sample_words(mech, n_words)
    kk = k if getattr(mech, "exact_probabilities", True) else min(k, 200)
    pdn = plausible_deniability(mech, words, k=kk)
    return {"N_w_median": float(np.median(pdn["N_w"])), "N_w_mean": float(np.mean(pdn["N_w"])),
            "S_w_mean": float(np.mean(pdn["S_w"])), "S_w_median": float(np.median(pdn["S_w"])),
            "N_w_S_w_draws": kk, "N_w_S_w_exact": bool(pdn["exact"])}
