"""Numba kernels of the collapsed Gibbs sampler (CGS) for LDA.

Layout (chosen for cache locality: the inner loop runs over topics of one word):

* ``W`` (N,) int32 word id of each token, ``D`` (N,) int32 document id, tokens
  sorted by document; ``Z`` (N,) int32 topic of each token (updated in place).
* ``nwk`` (V, K) int32 true topic-word counts n_k^(w) (word-major);
  ``ndk`` (M, K) int32 document-topic counts n_m^(k); ``nk`` (K,) int64 topic totals.
* ``U`` (N,) float64 uniforms in [0, 1), one per token and sweep, drawn in bulk
  by the caller from the run's single explicit generator
  (:func:`textdp.noise.make_rng`). The kernels hold no random state of their own,
  so a run is exactly one stream of randomness and reproducible from its seed.

True integer counts are only ever changed by the -1/+1 bookkeeping of a token
move; noisy views (HDP-LDA) enter as separate float arrays.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _draw(p, K, u):
    """Index of the first cumulative weight above ``u`` (p holds cumulative weights)."""
    target = u * p[K - 1]
    for k in range(K - 1):
        if p[k] > target:
            return k
    return K - 1


@njit(cache=True, nogil=True)
def init_counts(W, D, Z, nwk, ndk, nk):
    """Fill the count arrays (zeroed by the caller) from the assignments."""
    for i in range(W.shape[0]):
        k = Z[i]
        nwk[W[i], k] += 1
        ndk[D[i], k] += 1
        nk[k] += 1


@njit(cache=True, nogil=True)
def sweep_symmetric(W, D, Z, nwk, ndk, nk, alpha, beta, vbeta, U):
    """One CGS sweep with symmetric priors (Griffiths & Steyvers 2004, Eq. 5):

    p(z_i = k | z_-i, w) ∝ (n_{k,-i}^{(w_i)} + β) / (n_{k,-i} + Vβ) · (n_{m_i,-i}^{(k)} + α)
    """
    K = nk.shape[0]
    p = np.empty(K, dtype=np.float64)
    inv = np.empty(K, dtype=np.float64)
    for k in range(K):
        inv[k] = 1.0 / (nk[k] + vbeta)
    for i in range(W.shape[0]):
        w = W[i]
        d = D[i]
        k = Z[i]
        nwk[w, k] -= 1
        ndk[d, k] -= 1
        nk[k] -= 1
        inv[k] = 1.0 / (nk[k] + vbeta)
        cum = 0.0
        for j in range(K):
            cum += (nwk[w, j] + beta) * inv[j] * (ndk[d, j] + alpha)
            p[j] = cum
        k = _draw(p, K, U[i])
        Z[i] = k
        nwk[w, k] += 1
        ndk[d, k] += 1
        nk[k] += 1
        inv[k] = 1.0 / (nk[k] + vbeta)


@njit(cache=True, nogil=True)
def sweep_prior(W, D, Z, nwk, ndk, nk, alpha, beta_wk, beta_k, U):
    """One CGS sweep with an asymmetric per-topic-word prior β_{k,w} (OLP-LDA's β^l):

    p(z_i = k | ·) ∝ (n_{k,-i}^{(w_i)} + β_{k,w_i}) / (n_{k,-i} + Σ_w β_{k,w}) · (n_{m_i,-i}^{(k)} + α)

    ``beta_wk`` (V, K) float64, ``beta_k`` (K,) float64 = its column sums.
    """
    K = nk.shape[0]
    p = np.empty(K, dtype=np.float64)
    inv = np.empty(K, dtype=np.float64)
    for k in range(K):
        inv[k] = 1.0 / (nk[k] + beta_k[k])
    for i in range(W.shape[0]):
        w = W[i]
        d = D[i]
        k = Z[i]
        nwk[w, k] -= 1
        ndk[d, k] -= 1
        nk[k] -= 1
        inv[k] = 1.0 / (nk[k] + beta_k[k])
        cum = 0.0
        for j in range(K):
            cum += (nwk[w, j] + beta_wk[w, j]) * inv[j] * (ndk[d, j] + alpha)
            p[j] = cum
        k = _draw(p, K, U[i])
        Z[i] = k
        nwk[w, k] += 1
        ndk[d, k] += 1
        nk[k] += 1
        inv[k] = 1.0 / (nk[k] + beta_k[k])


@njit(cache=True, nogil=True)
def sweep_fixed_phi(W, D, Z, phi_wk, ndk, alpha, U, nwk, nk, update_word_counts):
    """One sweep with the topic-word term held fixed for the whole sweep.

    p(z_i = k | ·) ∝ φ_{k,w_i} · (n_{m_i,-i}^{(k)} + α), ``phi_wk`` (V, K) float64.

    Used (a) to fold in new documents (φ from a trained model; only ``ndk``
    changes) and (b) by HDP-LDA, where φ comes from the *noisy* released counts
    of this iteration and the true counts ``nwk``/``nk`` are still kept up to date
    (``update_word_counts=True``) for the next noisy release.
    """
    K = ndk.shape[1]
    p = np.empty(K, dtype=np.float64)
    for i in range(W.shape[0]):
        w = W[i]
        d = D[i]
        k = Z[i]
        ndk[d, k] -= 1
        if update_word_counts:
            nwk[w, k] -= 1
            nk[k] -= 1
        cum = 0.0
        for j in range(K):
            cum += phi_wk[w, j] * (ndk[d, j] + alpha)
            p[j] = cum
        k = _draw(p, K, U[i])
        Z[i] = k
        ndk[d, k] += 1
        if update_word_counts:
            nwk[w, k] += 1
            nk[k] += 1


@njit(cache=True, nogil=True)
def accumulate_theta(ndk, doc_len, alpha, theta_sum):
    """theta_sum += (n_m^(k) + α) / (N_m + Kα)."""
    M, K = ndk.shape
    for d in range(M):
        den = doc_len[d] + K * alpha
        for k in range(K):
            theta_sum[d, k] += (ndk[d, k] + alpha) / den


@njit(cache=True, nogil=True)
def _doc_topic_log_likelihood(ndk, doc_len, alpha):
    """log p(z | α): the document-topic part of the joint likelihood (symmetric α)."""
    M, K = ndk.shape
    ll = M * math.lgamma(K * alpha)
    lga = math.lgamma(alpha)
    for d in range(M):
        ll -= math.lgamma(doc_len[d] + K * alpha)
        for k in range(K):
            c = ndk[d, k]
            if c > 0:
                ll += math.lgamma(c + alpha) - lga
    return ll


@njit(cache=True, nogil=True)
def log_likelihood_symmetric(nwk, ndk, nk, doc_len, alpha, beta):
    """Joint log p(w, z) with Dirichlet-multinomial terms (Griffiths & Steyvers 2004, Eq. 2-3)."""
    V, K = nwk.shape
    ll = K * math.lgamma(V * beta)
    lgb = math.lgamma(beta)
    for k in range(K):
        ll -= math.lgamma(nk[k] + V * beta)
    for w in range(V):
        for k in range(K):
            c = nwk[w, k]
            if c > 0:
                ll += math.lgamma(c + beta) - lgb
    return ll + _doc_topic_log_likelihood(ndk, doc_len, alpha)


@njit(cache=True, nogil=True)
def log_likelihood_prior(nwk, ndk, nk, doc_len, alpha, beta_wk, beta_k):
    """Joint log p(w, z) under the asymmetric topic-word prior β_{k,w}."""
    V, K = nwk.shape
    ll = 0.0
    for k in range(K):
        ll += math.lgamma(beta_k[k]) - math.lgamma(nk[k] + beta_k[k])
    for w in range(V):
        for k in range(K):
            c = nwk[w, k]
            if c > 0:
                b = beta_wk[w, k]
                ll += math.lgamma(c + b) - math.lgamma(b)
    return ll + _doc_topic_log_likelihood(ndk, doc_len, alpha)


@njit(cache=True, nogil=True)
def token_log_prob(W, D, phi_wk, theta):
    """Σ_i log Σ_k θ_{d_i,k} φ_{k,w_i} over the given tokens (float64)."""
    K = phi_wk.shape[1]
    s = 0.0
    for i in range(W.shape[0]):
        w = W[i]
        d = D[i]
        acc = 0.0
        for k in range(K):
            acc += theta[d, k] * phi_wk[w, k]
        s += math.log(acc)
    return s


# ------------------------------------------------------------------------------------------------------------
# Approximate parallel sampler (AD-LDA, Newman et al. 2009): NOT the exact collapsed Gibbs chain
# ------------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def sweep_range_symmetric(W, D, Z, nwk, ndk, nk, alpha, beta, vbeta, U, start, end):
    """One worker's part of an AD-LDA sweep: tokens ``start:end`` (whole documents), symmetric priors.

    Same conditional as :func:`sweep_symmetric`, but ``nwk`` (V, K) int32 and ``nk`` (K,) int64 are the
    worker's own copies of the topic-word counts, stale with respect to the other workers' moves during
    the sweep (Newman, Asuncion, Smyth & Welling 2009, JMLR 10, Sec. 2.1, AD-LDA); ``ndk`` (M, K) int32 is
    shared, each worker touching only the rows of its own documents. ``U`` (end - start,) float64 holds
    this worker's uniforms. Per document it keeps q_k = (n_m^(k) + α) / (n_k + Vβ) and updates the two
    entries a move changes, so a token costs one product per topic; the draw counts the cumulative
    weights at or below u·Σ (the same index as :func:`_draw`, without a data-dependent branch).
    Called from several threads at once (``nogil``), one per worker.
    """
    K = nk.shape[0]
    p = np.empty(K, dtype=np.float64)
    q = np.empty(K, dtype=np.float64)
    cur = -1
    for i in range(start, end):
        w = W[i]
        d = D[i]
        k = Z[i]
        if d != cur:
            cur = d
            for j in range(K):
                q[j] = (ndk[d, j] + alpha) / (nk[j] + vbeta)
        nwk[w, k] -= 1
        ndk[d, k] -= 1
        nk[k] -= 1
        q[k] = (ndk[d, k] + alpha) / (nk[k] + vbeta)
        cum = 0.0
        for j in range(K):
            cum += (nwk[w, j] + beta) * q[j]
            p[j] = cum
        target = U[i - start] * cum
        k = 0
        for j in range(K - 1):
            k += p[j] <= target
        Z[i] = k
        nwk[w, k] += 1
        ndk[d, k] += 1
        nk[k] += 1
        q[k] = (ndk[d, k] + alpha) / (nk[k] + vbeta)


@njit(cache=True, nogil=True)
def merge_worker_counts(nwk, local, row_start, row_end):
    """AD-LDA's global update for word rows ``row_start:row_end``: n ← n + Σ_p (n_p − n), then every
    worker's copy ← n. ``nwk`` (V, K) int32 the counts at the start of the sweep; ``local`` (P, V, K)
    int32 the workers' copies after it. Row ranges are disjoint, so several threads merge at once."""
    P = local.shape[0]
    K = nwk.shape[1]
    for v in range(row_start, row_end):
        for k in range(K):
            g = nwk[v, k]
            s = g
            for p in range(P):
                s += local[p, v, k] - g
            nwk[v, k] = s
            for p in range(P):
                local[p, v, k] = s


# ------------------------------------------------------------------------------------------------------------
# HDP-LDA's fixed-view sweep over a partition of documents (any engine; exact, see textdp.topics.distributed)
# ------------------------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def sweep_documents_fixed_phi(W, offsets, Z, phi_wk, alpha, U):
    """One sweep with the topic-word term fixed, over whole documents: document ``d`` holds tokens
    ``offsets[d]:offsets[d + 1]`` of ``W``/``Z``/``U``.

    p(z_i = k | ·) ∝ φ_{k,w_i} · (n_{m_i,-i}^{(k)} + α), ``phi_wk`` (V, K) float64; the document's
    topic counts are rebuilt from ``Z`` at its start, so each document depends only on its own
    tokens, assignments and uniforms, φ and α: the same conditional and the same floating-point
    operations as :func:`sweep_fixed_phi` (``update_word_counts=False``), hence the same draws for
    any partition of the documents. ``Z`` (N,) int32 is updated in place; ``U`` (N,) float64."""
    K = phi_wk.shape[1]
    p = np.empty(K, dtype=np.float64)
    nd = np.zeros(K, dtype=np.int32)
    for d in range(offsets.shape[0] - 1):
        lo = offsets[d]
        hi = offsets[d + 1]
        for k in range(K):
            nd[k] = 0
        for i in range(lo, hi):
            nd[Z[i]] += 1
        for i in range(lo, hi):
            w = W[i]
            k = Z[i]
            nd[k] -= 1
            cum = 0.0
            for j in range(K):
                cum += phi_wk[w, j] * (nd[j] + alpha)
                p[j] = cum
            k = _draw(p, K, U[i])
            Z[i] = k
            nd[k] += 1
