"""The approximate parallel sampler (AD-LDA, ``LDA(workers>1)``): count bookkeeping, convergence to the exact
sampler's held-out perplexity on planted topics, and its refusal wherever a privacy claim rests on the exact chain."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from typer.testing import CliRunner

from textdp.errors import ParameterError
from textdp.noise import make_rng
from textdp.topics import (
    HDPLDA,
    LDA,
    LPLDA,
    OLPLDA,
    GibbsState,
    InherentPrivacyMonitor,
    ParallelGibbsState,
    make_trainer,
    perplexity,
)
from textdp.topics import _kernels as kern
from textdp.topics.distributed import PartitionedState

from .conftest import synthetic


@pytest.fixture(scope="module")
def planted():
    """3 planted topics over 30 words; 150 training and 50 held-out documents of 40 tokens."""
    c, phi = synthetic(K=3, V=30, M=200, L=40, alpha=0.3, seed=1)
    return c.subset(range(150)), c.subset(range(150, 200)), phi


def test_counts_stay_exact_tallies_after_every_sweep(synth):
    corpus, _ = synth
    seen = []

    def check(it, ll, st):
        assert isinstance(st, ParallelGibbsState)
        assert st.check_consistency()  # nwk, ndk, nk equal the counts recomputed from Z
        assert int(st.nwk.sum()) == corpus.n_tokens and int(st.nk.sum()) == corpus.n_tokens
        assert np.array_equal(st.ndk.sum(axis=1), corpus.doc_lengths)
        assert st.Z.min() >= 0 and st.Z.max() < st.K
        assert np.all(st.nwk >= 0) and np.all(st.ndk >= 0)
        for p in range(st.workers):  # every worker starts the next sweep from the merged counts
            assert np.array_equal(st.local[p], st.nwk) and np.array_equal(st.local_nk[p], st.nk)
        seen.append(it)

    LDA(3, iterations=6, seed=2, workers=3, ll_every=1).fit(corpus, callback=check)
    assert seen == list(range(1, 7))


def test_merge_adds_every_workers_changes(synth):
    corpus, _ = synth
    st = ParallelGibbsState(corpus, 3, 0.1, 0.01, make_rng(1), workers=2)
    try:
        before = st.nwk.copy()
        st._run(st._sample_part)  # sampling only: the workers' copies differ from the global counts
        deltas = [st.local[p].astype(np.int64) - before for p in range(2)]
        assert all(np.abs(d).sum() > 0 for d in deltas)
        st._run(st._merge_part)
        assert np.array_equal(st.nwk, before + deltas[0] + deltas[1])
    finally:
        st.close()


def test_documents_split_at_boundaries_in_balanced_parts(synth):
    corpus, _ = synth
    for P in (2, 3, 5):
        st = ParallelGibbsState(corpus, 3, 0.1, 0.01, make_rng(0), workers=P)
        st.close()
        b = st.bounds
        assert b[0] == 0 and b[-1] == corpus.n_tokens and np.all(np.diff(b) >= 0) and len(b) == P + 1
        for i in b[1:-1]:  # each split is the first token of a document
            assert st.D[i] != st.D[i - 1]
        assert np.abs(np.diff(b) - corpus.n_tokens / P).max() <= corpus.doc_lengths.max()


def test_one_worker_kernel_is_the_exact_conditional(synth):
    # the AD-LDA kernel run over the whole corpus with one copy of the counts draws exactly the tokens the
    # exact kernel draws from the same state and uniforms: the approximation is only the stale copies
    corpus, _ = synth
    st = GibbsState(corpus, 3, 0.3, 0.01, make_rng(3))
    for _ in range(5):
        st.sweep()
    U = make_rng(4).random(corpus.n_tokens)
    Z, nwk, ndk, nk = st.Z.copy(), st.nwk.copy(), st.ndk.copy(), st.nk.copy()
    kern.sweep_symmetric(st.W, st.D, st.Z, st.nwk, st.ndk, st.nk, 0.3, 0.01, st.V * 0.01, U)
    kern.sweep_range_symmetric(st.W, st.D, Z, nwk, ndk, nk, 0.3, 0.01, st.V * 0.01, U, 0, corpus.n_tokens)
    assert np.array_equal(Z, st.Z) and np.array_equal(nwk, st.nwk) and np.array_equal(nk, st.nk)


def test_converges_to_the_exact_samplers_perplexity_on_planted_topics(planted):
    train, test, phi = planted
    truth = perplexity(phi, test, 0.3, rng=0)

    def ppl(workers, iterations, seed):
        m = LDA(3, alpha=0.3, beta=0.01, iterations=iterations, seed=seed, workers=workers).fit(train)
        return perplexity(m.topic_word, test, 0.3, rng=0), m

    exact = np.median([ppl(1, 150, s)[0] for s in range(3)])
    start = np.median([ppl(2, 1, s)[0] for s in range(3)])
    for workers in (2, 4):
        runs = [ppl(workers, 150, s) for s in range(3)]
        approx = np.median([p for p, _ in runs])
        # the check has power: one sweep from the random start is far off (about 1.75x the planted model's)
        assert start > 1.5 * truth, (start, truth)
        assert abs(approx / exact - 1) < 0.01, (workers, approx, exact)
        assert abs(approx / truth - 1) < 0.02, (workers, approx, truth)
        # and the planted topics are recovered (random topics are about 1.9 apart in L1)
        cost = np.abs(runs[0][1].topic_word[:, None, :] - phi[None, :, :]).sum(-1)
        r, c = linear_sum_assignment(cost)
        assert np.all(cost[r, c] < 0.25), cost[r, c]


def test_seeded_runs_reproduce_for_a_given_worker_count(synth):
    corpus, _ = synth
    a = LDA(3, iterations=10, seed=7, workers=2).fit(corpus)
    b = LDA(3, iterations=10, seed=7, workers=2).fit(corpus)
    assert np.array_equal(a.topic_word_counts, b.topic_word_counts)


def test_card_states_the_approximate_sampler(synth):
    corpus, _ = synth
    m = LDA(3, iterations=3, seed=0, workers=2).fit(corpus)
    card = m.card()
    assert "approximate parallel sampler (AD-LDA" in card["guarantee_text"]
    assert "not the exact collapsed Gibbs chain; no inherent-privacy claim" in card["guarantee_text"]
    assert card["parameters"]["workers"] == 2 and "AD-LDA" in card["parameters"]["sampler"]
    assert "PCG64" in card["randomness"]["sampler_generator"]
    exact = LDA(3, iterations=3, seed=0).fit(corpus).card()  # the exact sampler's card is unchanged
    assert "workers" not in exact["parameters"] and "sampler_generator" not in exact["randomness"]
    assert "AD-LDA" not in json.dumps(exact)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_worker_counts_refused(bad):
    with pytest.raises(ParameterError, match="workers"):
        LDA(3, workers=bad)


def test_inherent_privacy_monitor_refused_with_the_approximate_sampler(synth):
    corpus, _ = synth
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mon = InherentPrivacyMonitor(0, 1, 0.01)
    with pytest.raises(ParameterError, match="exact chain"):
        LDA(3, iterations=2, seed=0, workers=2).fit(corpus, callback=mon)
    LDA(3, iterations=2, seed=0).fit(corpus, callback=mon)  # the exact sampler is monitored as before
    assert len(mon.per_iteration) == 2


def test_parallel_state_has_no_asymmetric_prior_or_fixed_view(synth):
    corpus, _ = synth
    st = ParallelGibbsState(corpus, 3, 0.1, 0.01, make_rng(0), workers=2)
    try:
        with pytest.raises(ParameterError, match="symmetric prior"):
            st.set_prior(np.full((corpus.n_words, 3), 0.05))
        with pytest.raises(ParameterError, match="exact sampler"):
            st.sweep_with_view(np.full((corpus.n_words, 3), 1.0 / corpus.n_words))
    finally:
        st.close()
    with pytest.raises(ParameterError, match="workers >= 2"):
        ParallelGibbsState(corpus, 3, 0.1, 0.01, make_rng(0), workers=1)


def test_private_trainers_refuse_or_never_use_the_parallel_sampler(synth):
    corpus, _ = synth
    for build in (lambda: HDPLDA(3, epsilon=1.0, workers=2), lambda: make_trainer("hdp", n_topics=3, workers=2)):
        with pytest.raises(ParameterError, match="exact collapsed Gibbs chain.*non-private LDA only"):
            build()
    # LP/OLP-LDA's ``workers`` are threads of the randomized-response encoding; their sampler stays exact
    for trainer in (HDPLDA(3, epsilon=1.0, iterations=2, seed=0, max_doc_length=40),
                    LPLDA(3, epsilon=4.0, iterations=2, seed=0, workers=2),
                    OLPLDA(3, epsilon=4.0, iterations=2, seed=0, batch_size=100, workers=2)):
        states = []
        trainer.fit(corpus, callback=lambda it, ll, st: states.append(type(st)))
        # HDP-LDA's driver state is PartitionedState (a GibbsState of the exact fixed-view chain, whose sweeps
        # run over partitions of documents: textdp.topics.distributed); never the approximate AD-LDA state
        exact = {PartitionedState} if isinstance(trainer, HDPLDA) else {GibbsState}
        assert states and set(states) == exact, (type(trainer).__name__, states)
        assert not any(issubclass(t, ParallelGibbsState) for t in states)


def test_cli_workers(tmp_path):
    from textdp.cli.main import app

    c, _ = synthetic(M=60, L=30, seed=4)
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(" ".join(c.vocabulary[i] for i in d) for d in c.documents()) + "\n", "utf-8")
    (tmp_path / "vocab.txt").write_text("\n".join(c.vocabulary) + "\n", "utf-8")
    base = ["topics", "train", str(docs), "--k", "3", "--iterations", "5", "--vocabulary",
            str(tmp_path / "vocab.txt"), "--seed", "0", "--no-ledger"]
    r = CliRunner().invoke(app, base + ["--workers", "2", "-o", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert "approximate parallel sampler (AD-LDA" in r.output and "no inherent-privacy claim" in r.output
    card = json.loads((tmp_path / "m" / "model.card.json").read_text("utf-8"))
    assert card["parameters"]["workers"] == 2
    # HDP-LDA's --workers are its engine's (partitions of documents, exact: tests/topics/test_hdp_engines.py)
    r = CliRunner().invoke(app, base + ["--privacy", "hdp", "--epsilon", "1", "--workers", "2", "-o",
                                        str(tmp_path / "hdp")])
    assert r.exit_code == 0, r.output
    assert "AD-LDA" not in r.output and "HDP-LDA's sweeps run on local (2 workers)" in r.output
    for privacy, extra in (("lp", ["--epsilon", "4"]), ("olp", ["--epsilon", "4"])):
        r = CliRunner().invoke(app, base + ["--privacy", privacy, *extra, "--workers", "2", "-o", str(tmp_path / privacy)])
        assert r.exit_code == 2, r.output
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and "--workers 2" in lines[0] and "exact collapsed Gibbs chain" in lines[0], r.output
        assert not (tmp_path / privacy).exists()
    r = CliRunner().invoke(app, base + ["--workers", "0", "-o", str(tmp_path / "m0")])
    assert r.exit_code == 2 and "--workers" in r.output
