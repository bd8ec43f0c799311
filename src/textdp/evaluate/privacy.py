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
* :func:`bayes_attack` -- that inversion on the aligned tokens, with the informed prior
  by default (the evaluated text's own token distribution), next to the exact optimum
  (:func:`textdp.attacks.bayes.bayes_optimum`).
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

from textdp.attacks.bayes import (BayesInversion, Channel, ExponentialChannel, NoisyNearestChannel, bayes_optimum,
                                  word_prior)
from textdp.errors import InputError, ParameterError

__all__ = ["aligned_tokens", "AlignedTokens", "channel_for", "bayes_attack", "mask_token_attack",
           "deniability_summary", "token_counts", "PRIORS"]

#: priors of the Bayes attack: ``informed`` (default) is the token distribution of the evaluated
#: text itself, the attacker who knows the distribution the tokens are drawn from (that attack is
#: the optimum); ``wordfreq`` (general-English word frequencies) and ``uniform`` are weaker attackers
PRIORS = ("informed", "wordfreq", "uniform")


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
                rng: np.random.Generator | None = None, inputs=None) -> Channel:
    """The channel ``p(y|x)`` of a fitted textdp sanitizer: outputs ``mech.output_words``,
    inputs (the attacker's hypothesis space) ``inputs`` (words with an embedding; default
    the output words). Exact for SanText and SanText+ (checked against
    ``mech.probabilities`` in the tests; for SanText+ an input outside the output
    vocabulary is sensitive, as in the mechanism); for FBDD an exponential-family
    approximation calibrated on ``n_calibration`` simulated draws from random inputs
    (attacker-side simulation of the public mechanism; ``rng`` drives it)."""
    words = mech.output_words
    vec = np.asarray(mech.embeddings.vectors[mech.output_rows], dtype=np.float64)
    if inputs is None:
        in_words, in_rows, in_vec = words, mech.output_rows, vec
    else:
        in_words = list(inputs)
        in_rows = mech.input_rows(in_words)
        if (in_rows < 0).any():
            bad = in_words[int(np.flatnonzero(in_rows < 0)[0])]
            raise ParameterError(f"channel inputs need an embedding; {bad!r} has none")
        in_vec = np.asarray(mech.embeddings.vectors[in_rows], dtype=np.float64)
    name = getattr(mech, "name", type(mech).__name__.lower())
    eta = float(getattr(mech, "eta", 0.0) or 0.0)  # uniform share of the float-safe sampler, if any
    if name == "fbdd":
        # the attacker simulates the public mechanism on random input words to calibrate
        g = rng if rng is not None else np.random.default_rng(0)
        xi = g.integers(0, len(in_words), size=min(n_calibration, 50 * len(in_words)))
        yi = mech.output_positions(mech.sample_rows(in_rows[xi], g))
        return NoisyNearestChannel(in_words, in_vec, words, vec, mech.epsilon, block=block, calibration=(xi, yi))
    if name == "santext+":
        sens = set(mech.sensitive_words)
        if inputs is not None:
            sens.update(w for w, s in zip(in_words, mech.is_sensitive(in_rows).tolist()) if s)
        return ExponentialChannel(in_words, in_vec, words, vec, mech.epsilon, sensitive=sens,
                                  p=mech.p, block=block, name="santext+", eta=eta)
    return ExponentialChannel(in_words, in_vec, words, vec, mech.epsilon, block=block, name=name, eta=eta)


def token_counts(mech, aligned: AlignedTokens) -> dict[str, int]:
    """Counts of the original tokens of ``aligned`` that have an embedding (the words the
    mechanism's channel covers; out-of-vocabulary tokens are left out, as the attack skips
    them), most frequent first (ties in order of first occurrence). Normalised, this is
    the informed attacker's prior: the real token distribution of the evaluated text."""
    orig, _ = aligned.flat()
    if not orig:
        return {}
    ok = mech.input_rows(orig) >= 0
    c: dict[str, int] = {}
    for w, good in zip(orig, ok.tolist()):
        if good:
            c[w] = c.get(w, 0) + 1
    return dict(sorted(c.items(), key=lambda kv: -kv[1]))


def _subset(n: int, limit: int | None, rng: np.random.Generator | None) -> np.ndarray | None:
    """Sorted indices of a uniform random subset of ``limit`` of ``n`` items, or None when all
    are kept (``limit`` None or ``n <= limit``). Evaluation sampling, not DP noise: without
    ``rng`` a fixed PCG64 seed keeps reports reproducible."""
    if limit is None or n <= limit:
        return None
    g = rng if rng is not None else np.random.default_rng(0)
    return np.sort(g.choice(n, size=limit, replace=False))


def bayes_attack(mech, aligned: AlignedTokens, prior="informed", k: int = 5, max_tokens: int | None = 10000,
                 rng: np.random.Generator | None = None, channel: Channel | None = None,
                 optimum: bool = True) -> dict:
    """Run :class:`BayesInversion` on aligned tokens (a random subset of at most
    ``max_tokens`` tokens when given) and compute the exact optimum.

    ``prior``: ``"informed"`` (default: the token distribution of ``aligned``'s original
    text, :func:`token_counts`; the attacker who knows the distribution the tokens are
    drawn from, whose expected success is the optimum), ``"wordfreq"``, ``"uniform"`` or a
    word→count mapping (add-1 smoothed). Hypothesis space: the text's in-vocabulary words
    for ``informed``; otherwise the output vocabulary plus the text's other in-vocabulary
    words (``channel``, if given, fixes it instead).

    Returns the :meth:`BayesResult.to_dict` entries (``bayes_top1``, ``bayes_top{k}``: the
    chosen prior's success measured on the sanitized tokens), ``bayes_prior``, and
    ``bayes_optimum_top1`` / ``bayes_optimum_top{k}``: the exact optimum
    ``Σ_y max_x π(x)·p(y|x)`` (:func:`textdp.attacks.bayes.bayes_optimum`) with ``π`` the
    text's in-vocabulary token distribution and ``p`` the mechanism's exact law
    (``mech.probabilities``); ``None`` when the mechanism has no closed-form law (FBDD)
    or ``optimum=False``. Out-of-vocabulary tokens are skipped by both (``bayes_skipped``
    counts them in the attacked subset)."""
    orig, san = aligned.flat()
    if not orig:
        raise InputError("no aligned tokens to attack (is the sanitized split empty?)")
    counts = token_counts(mech, aligned)
    if not counts:
        raise InputError("no token can be attacked: no original is in the mechanism's vocabulary")
    if isinstance(prior, str):
        name = prior.strip().lower()
        if name not in PRIORS:
            raise ParameterError(f"unknown prior {prior!r}; use {', '.join(PRIORS)} or a word->count mapping")
    else:
        name = "corpus-counts"
    if channel is not None:
        ch = channel
    else:
        if name == "informed":
            hyp = list(counts)
        else:
            out = mech.output_words
            have = set(out)
            hyp = out + [w for w in counts if w not in have]
        ch = channel_for(mech, rng=rng, inputs=hyp)
    log_prior = word_prior(ch.inputs, counts, smoothing=0.0) if name == "informed" else word_prior(ch.inputs, prior)
    pick = _subset(len(orig), max_tokens, rng)
    if pick is not None:
        orig = [orig[i] for i in pick]
        san = [san[i] for i in pick]
    res = BayesInversion(ch, log_prior, k=k).attack(orig, san)
    d = res.to_dict()
    d["bayes_prior"] = name
    d["bayes_optimum_top1"] = d[f"bayes_optimum_top{res.k}"] = None
    if optimum and getattr(mech, "exact_probabilities", True) and getattr(ch, "exact", True):
        if channel is not None:  # the population the given channel can attack
            idx = ch.input_index()
            counts = {w: c for w, c in counts.items() if w in idx}
        d.update(bayes_optimum(mech, counts, k=res.k).to_dict("bayes_optimum"))
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
