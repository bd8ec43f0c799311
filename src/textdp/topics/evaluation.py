"""Evaluation of topic models: fold-in, held-out perplexity, NPMI coherence, top words.

Fold-in protocol (fixed; the same for every method so numbers compare):

* φ (K, V) is held fixed. For each held-out document, topics are initialised
  uniformly at random and ``iterations`` Gibbs sweeps are run on the document's
  own topic counts only (:func:`textdp.topics._kernels.sweep_fixed_phi`), with the
  model's α. θ_d = (n_d^(k) + α)/(N_d + Kα) is averaged over the sweeps after
  ``burn_in`` (defaults: 50 sweeps, 10 burn-in, as in the spec's "20-50 sweeps,
  averaged").
* ``protocol="fold-in"`` (default, the spec's): θ is estimated on all tokens of the
  document and the same tokens are scored. ``protocol="completion"`` (document
  completion, Wallach et al. 2009): θ is estimated on the even-position tokens and
  only the odd-position tokens are scored, which avoids scoring tokens that
  informed θ.
* perplexity = exp(− Σ_d Σ_{i∈d} log Σ_k θ_{d,k} φ_{k,w_i} / N_scored).
"""

from __future__ import annotations

import numpy as np

from textdp.errors import ParameterError
from textdp.noise import make_rng
from textdp.topics import _kernels as kern
from textdp.topics.corpus import Corpus

__all__ = ["fold_in", "perplexity", "npmi_coherence", "top_word_ids"]


def _check_phi(phi: np.ndarray, corpus: Corpus) -> np.ndarray:
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2 or phi.shape[1] != corpus.n_words:
        raise ParameterError(f"topic-word matrix has shape {phi.shape}, the corpus has {corpus.n_words} words; "
                             "use the model's vocabulary for the corpus")
    if not np.all(np.isfinite(phi)) or np.any(phi < 0):
        raise ParameterError("topic-word matrix has negative or non-finite entries")
    return phi


def fold_in(phi: np.ndarray, corpus: Corpus, alpha: float, iterations: int = 50, burn_in: int = 10,
            rng=None, token_mask: np.ndarray | None = None) -> np.ndarray:
    """Document-topic distributions θ (M, K) float64 of ``corpus`` under fixed φ (K, V).

    ``token_mask`` (N,) bool: only these tokens inform θ (documents with no masked
    token get the prior mean 1/K). ``rng``: generator or seed (textdp.noise.make_rng).
    Raises ParameterError for bad shapes, iterations < 1 or burn_in >= iterations.
    """
    phi = _check_phi(phi, corpus)
    iterations, burn_in = int(iterations), int(burn_in)
    if iterations < 1 or not (0 <= burn_in < iterations):
        raise ParameterError(f"fold-in needs iterations >= 1 and 0 <= burn_in < iterations, got {iterations}, {burn_in}")
    rng = make_rng(rng)
    K = phi.shape[0]
    W, D = corpus.word_ids, corpus.doc_ids
    if token_mask is not None:
        W, D = W[token_mask], D[token_mask]
    W = np.ascontiguousarray(W, dtype=np.int32)
    D = np.ascontiguousarray(D, dtype=np.int32)
    phi_wk = np.ascontiguousarray(phi.T)
    M = corpus.n_docs
    Z = rng.integers(0, K, size=W.shape[0]).astype(np.int32)
    ndk = np.zeros((M, K), dtype=np.int32)
    np.add.at(ndk, (D, Z), 1)
    doc_len = np.bincount(D, minlength=M).astype(np.int64)
    theta_sum = np.zeros((M, K), dtype=np.float64)
    dummy_w = np.zeros((1, 1), dtype=np.int32)
    dummy_k = np.zeros(1, dtype=np.int64)
    for it in range(iterations):
        U = rng.random(W.shape[0])
        kern.sweep_fixed_phi(W, D, Z, phi_wk, ndk, float(alpha), U, dummy_w, dummy_k, False)
        if it >= burn_in:
            kern.accumulate_theta(ndk, doc_len, float(alpha), theta_sum)
    return theta_sum / (iterations - burn_in)


def perplexity(phi: np.ndarray, corpus: Corpus, alpha: float, protocol: str = "fold-in", iterations: int = 50,
               burn_in: int = 10, rng=None) -> float:
    """Held-out perplexity of ``corpus`` under φ (K, V) (see the module docstring for the protocol).

    Raises ParameterError for an unknown protocol or a corpus with no token to score.
    """
    phi = _check_phi(phi, corpus)
    phi = phi / phi.sum(axis=1, keepdims=True)
    if protocol == "fold-in":
        mask = None
        score = np.ones(corpus.n_tokens, dtype=bool)
    elif protocol == "completion":
        pos = np.arange(corpus.n_tokens) - np.repeat(corpus.doc_ptr[:-1], corpus.doc_lengths)
        mask = pos % 2 == 0
        score = ~mask
    else:
        raise ParameterError(f"unknown perplexity protocol {protocol!r}; use 'fold-in' or 'completion'")
    if not score.any():
        raise ParameterError("no held-out token to score (documents too short for 'completion')")
    theta = fold_in(phi, corpus, alpha, iterations, burn_in, rng, token_mask=mask)
    W = np.ascontiguousarray(corpus.word_ids[score], dtype=np.int32)
    D = np.ascontiguousarray(corpus.doc_ids[score], dtype=np.int32)
    lp = kern.token_log_prob(W, D, np.ascontiguousarray(phi.T), theta)
    return float(np.exp(-lp / W.shape[0]))


def top_word_ids(phi: np.ndarray, n: int = 10) -> np.ndarray:
    """(K, n) int64 ids of the n most probable words of each topic (ties: lower id first)."""
    phi = np.asarray(phi)
    n = min(int(n), phi.shape[1])
    return np.argsort(-phi, axis=1, kind="stable")[:, :n]


def npmi_coherence(phi: np.ndarray, corpus: Corpus, top_n: int = 10) -> np.ndarray:
    """NPMI coherence (K,) float64 of each topic's ``top_n`` words over ``corpus``'s documents.

    NPMI(a, b) = log[P(a,b) / (P(a)P(b))] / (−log P(a,b)), with document
    co-occurrence probabilities over the documents of ``corpus`` (Bouma 2009;
    Lau et al. 2014); a pair that never co-occurs scores −1. Each topic's value is
    the mean over its top-word pairs.
    """
    phi = _check_phi(phi, corpus)
    top = top_word_ids(phi, top_n)
    X = corpus.doc_word_binary().tocsc()
    M = corpus.n_docs
    out = np.zeros(top.shape[0])
    for k, words in enumerate(top):
        sub = X[:, words].astype(np.float64)
        co = (sub.T @ sub).toarray() / M
        p = np.diag(co).copy()
        vals = []
        for a in range(len(words)):
            for b in range(a + 1, len(words)):
                pab = co[a, b]
                if pab <= 0 or p[a] <= 0 or p[b] <= 0:
                    vals.append(-1.0)
                elif pab >= 1.0:
                    vals.append(1.0)
                else:
                    vals.append(np.log(pab / (p[a] * p[b])) / -np.log(pab))
        out[k] = float(np.mean(vals)) if vals else 0.0
    return out
