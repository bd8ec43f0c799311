"""Audits of the private LDA trainers (see tests/test_registry_coverage.py).

* topics.lp-lda / topics.olp-lda: the only randomized step that sees the data is the randomized response of
  each document's word vector (reconstruction and CGS are post-processing; OLP-LDA uses the same encoder per
  mini-batch). Neighbours: one document {t} vs {t'}; output: the reported bits (t, t'). The empirical ε lower
  bound (Clopper-Pearson, α = 0.05) must not exceed the claim and, with 20 000 reports, must come close to it
  (the claim is tight for this event).
* topics.hdp-lda: runs of the mechanism (first sweep + one release) on neighbouring corpora; the lower bound
  for a released-count event must not exceed the claimed ε (fast: noise drawn in bulk; slow: end to end).
* topics.hdp-lda-paper (broken replica): its calibration assumes L1 sensitivity 2 per replaced token. A coupled
  run (same uniforms on D and D') shows the true counts moving by more than 2 (the replaced token's document
  re-assigns other tokens), refuting the claim; the document-level bound 2·L is never exceeded.
"""

from __future__ import annotations

import numpy as np
import pytest

from textdp.audit import empirical_epsilon_lower_bound
from textdp.noise import make_rng
from textdp.topics import HDPLDA, Corpus, lp_epsilon, rr_encode

AUDITED = ("topics.lp-lda", "topics.olp-lda", "topics.hdp-lda", "topics.hdp-lda-paper")
ALPHA = 0.05


def test_audit_randomized_response_at_claimed_epsilon():
    f = 0.5
    n = 20_000
    voc = ["tt", "uu", "vv"]
    out = []
    for word in (0, 1):
        rep = rr_encode(Corpus.from_word_ids([[word]] * n, voc), f, make_rng(10 + word))
        bits = np.zeros((n, 3), bool)
        rows = np.repeat(np.arange(n), np.diff(rep.indptr))
        bits[rows, rep.indices] = True
        code = bits[:, 0] * 2 + bits[:, 1]
        out.append(np.bincount(code, minlength=4))
    b = empirical_epsilon_lower_bound(out[0], out[1], ALPHA)
    claimed = lp_epsilon(f)
    assert b.epsilon_lower <= claimed
    assert b.epsilon_lower > 0.85 * claimed  # the mechanism really spends its ε (no accidental over-noising)


D_HDP = Corpus.from_word_ids([[0, 1], [2, 3], [2, 2]], ["aa", "bb", "cc", "dd"])
DP_HDP = Corpus.from_word_ids([[1, 1], [2, 3], [2, 2]], ["aa", "bb", "cc", "dd"])


def _hdp_audit(counts_D, counts_Dp, mech):
    b = empirical_epsilon_lower_bound(counts_D, counts_Dp, ALPHA)
    assert counts_D[1] > counts_Dp[1]  # the event does see the change
    assert b.epsilon_lower <= mech.guarantee.epsilon


def test_audit_hdp_lda_bulk_noise_not_refuted():
    """Sweep per run (GibbsState, as HDPLDA.release), then the release's noise drawn for all runs in one call
    (the same distribution: independent discrete Laplace per cell); 5 000 runs per corpus."""
    from textdp.topics import GibbsState

    mech = HDPLDA(2, epsilon=1.0, iterations=1, max_doc_length=2)
    scale = mech.accounting()["scale"]
    assert scale == 4.0
    n = 5_000
    counts = []
    for corpus, seed in ((D_HDP, 1), (DP_HDP, 2)):
        rng = make_rng(seed)
        true = np.empty((n, 4, 2), np.int32)
        for r in range(n):
            st = GibbsState(corpus, 2, mech.alpha, mech.beta, rng)
            st.sweep_with_view(np.ascontiguousarray(rng.dirichlet(np.ones(4), size=2).T))
            true[r] = st.nwk
        view = mech.noisy_view(true, scale, rng)
        hits = int((view[:, 0, :].sum(axis=1) >= 1).sum())
        counts.append(np.array([n - hits, hits]))
    _hdp_audit(counts[0], counts[1], mech)


@pytest.mark.slow
def test_audit_hdp_lda_end_to_end_not_refuted():
    mech = HDPLDA(2, epsilon=1.0, iterations=1, max_doc_length=2)
    counts = []
    for corpus, seed in ((D_HDP, 1), (DP_HDP, 2)):
        rng = make_rng(seed)
        hits = sum(int(mech.release(corpus, rng)[0][0].sum() >= 1) for _ in range(5000))
        counts.append(np.array([5000 - hits, hits]))
    _hdp_audit(counts[0], counts[1], mech)


def test_audit_hdp_lda_paper_sensitivity_refuted():
    L = 8
    D = Corpus.from_word_ids([[0] + [2] * (L - 1), [1, 2, 2]], ["tt", "ss", "uu"])
    Dp = Corpus.from_word_ids([[1] + [2] * (L - 1), [1, 2, 2]], ["tt", "ss", "uu"])
    # all three sweeps before the first release: same (data-independent) view on D and D', i.e. the same
    # release history, which is what the per-release sensitivity is conditioned on
    paper = HDPLDA(4, epsilon=1.0, iterations=3, sweeps_per_release=3, alpha=0.01, unit="token-paper")
    doc = HDPLDA(4, epsilon=1.0, iterations=3, sweeps_per_release=3, alpha=0.01, max_doc_length=L)
    l1 = []
    for seed in range(150):
        res = []
        for corpus in (D, Dp):
            snap = []
            paper.release(corpus, make_rng(seed), callback=lambda it, ll, st: snap.append(st.nwk.copy()))
            res.append(snap)
        l1.append(max(np.abs(a.astype(int) - b).sum() for a, b in zip(*res)))
    assert max(l1) > paper.sensitivity  # the claimed Δ₁ = 2 is exceeded: the paper replica is broken
    assert max(l1) <= doc.sensitivity   # the document-level Δ₁ = 2L holds
