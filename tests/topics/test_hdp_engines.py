"""HDP-LDA's sweeps over partitions of documents on the engines (issue 16, item 5): the seeded model is the same
for one process, 2 local threads, 2 Dask worker processes and Spark local[2,2], with the partitions really taken
by two workers; the guarantee, the accounting and the ledger charge do not depend on the engine; the non-private
and LP/OLP samplers refuse --engine dask|spark in one line."""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.engines.base import Engine, LocalEngine
from textdp.errors import ParameterError
from textdp.noise import make_rng
from textdp.noise.keyed import GIBBS, ReleaseKey, keyed_record_uniforms
from textdp.topics import HDPLDA, GibbsState
from textdp.topics import _kernels as kern
from textdp.topics.distributed import partition_documents

from .conftest import synthetic

KW = dict(n_topics=3, epsilon=50.0, alpha=0.3, iterations=3, sweeps_per_release=2, max_doc_length=25, seed=0)


# ------------------------------------------------------------------------------------------------ engines
# dask_engine, spark_engine: the session fixtures of tests/conftest.py (one LocalCluster of 2 worker processes, one
# Spark session local[2,2]; this module's functions are sent to the workers by value)


def _in_process(fn, item):
    """``fn(item)`` and the id of the process and thread that ran it."""
    import threading

    return (os.getpid(), threading.get_ident()), fn(item)


class Recording(Engine):
    """Runs ``inner``'s map and records which process/thread took each partition."""

    def __init__(self, inner: Engine):
        self.inner, self.name, self.workers, self.takers, self.maps = inner, inner.name, inner.workers, [], 0

    def map(self, fn, items, *, description=None, progress=None):
        out = self.inner.map(functools.partial(_in_process, fn), items, description=description)
        self.maps += 1
        self.takers.append([who for who, _ in out])
        return [r for _, r in out]


@pytest.fixture(scope="module")
def corpus():
    c, _ = synthetic(M=40, L=20, seed=3)
    return c


def _fit(corpus, engine=None, partitions=None):
    """The model and every sweep's assignments (the callback makes one map per sweep)."""
    zs = []
    m = HDPLDA(**KW, engine=engine, partitions=partitions).fit(
        corpus, callback=lambda it, ll, st: zs.append((it, ll, st.Z.copy(), st.check_consistency())))
    return m, zs


@pytest.fixture(scope="module")
def reference(corpus):
    """One process, one partition (the default engine)."""
    return _fit(corpus)


def _same(a, b):
    (ma, za), (mb, zb) = a, b
    np.testing.assert_array_equal(ma.topic_word, mb.topic_word)
    assert [(it, ll) for it, ll, _, _ in za] == [(it, ll) for it, ll, _, _ in zb]
    for (_, _, x, ok_x), (_, _, y, ok_y) in zip(za, zb):
        np.testing.assert_array_equal(x, y)
        assert ok_x and ok_y  # the driver's counts are the tallies of the gathered assignments
    assert ma.guarantee == mb.guarantee and ma.accounting == mb.accounting and ma.params == mb.params
    assert ma.card()["randomness"] == mb.card()["randomness"]


def _two_workers_took_partitions(rec: Recording):
    assert rec.maps == KW["iterations"]  # one map per sweep (callback), two partitions each
    assert all(len(t) == 2 for t in rec.takers)
    assert len({who for t in rec.takers for who in t}) >= 2, rec.takers


# ------------------------------------------------------------------------------------------------ kernel
def test_partition_kernel_draws_what_the_single_state_kernel_draws():
    """sweep_documents_fixed_phi (per document, rebuilt counts) = sweep_fixed_phi on the whole state, given the
    same assignments, view and uniforms; documents split anywhere give the same assignments."""
    c, _ = synthetic(M=30, L=15, seed=7)
    st = GibbsState(c, 4, 0.2, 0.01, make_rng(1))
    phi = np.ascontiguousarray(make_rng(2).dirichlet(np.ones(c.n_words), size=4).T)
    key = ReleaseKey.from_seed(9)
    U = keyed_record_uniforms(key, np.arange(c.n_docs), c.doc_lengths, 1, GIBBS)
    Z0 = st.Z.copy()
    kern.sweep_fixed_phi(st.W, st.D, st.Z, phi, st.ndk, st.alpha, U, st.nwk, st.nk, True)
    offsets = np.concatenate([[0], np.cumsum(c.doc_lengths)]).astype(np.int64)
    whole = Z0.copy()
    kern.sweep_documents_fixed_phi(st.W, offsets, whole, phi, st.alpha, U)
    np.testing.assert_array_equal(whole, st.Z)
    assert not np.array_equal(whole, Z0)  # the sweep moved tokens
    for cut in (1, 13, 29):  # two partitions, each sweeping its own documents with its own uniforms
        a, b = offsets[cut], offsets[-1]
        z = Z0.copy()
        kern.sweep_documents_fixed_phi(st.W[:a], offsets[:cut + 1], z[:a], phi, st.alpha, U[:a])
        kern.sweep_documents_fixed_phi(st.W[a:], offsets[cut:] - a, z[a:b], phi, st.alpha, U[a:])
        np.testing.assert_array_equal(z, st.Z)


def test_partitions_are_whole_documents_of_balanced_size():
    lengths = np.array([5, 1, 1, 1, 9, 2, 2, 3])
    for parts in (1, 2, 3, 8, 20):
        cuts = partition_documents(lengths, parts)
        assert cuts[0][0] == 0 and cuts[-1][1] == lengths.size and len(cuts) == min(parts, lengths.size)
        assert all(a < b for a, b in cuts) and all(b == c for (_, b), (c, _) in zip(cuts[:-1], cuts[1:]))
    # the boundary nearest half of the 24 tokens: 8 | 16 (the other side, 17 | 7, is farther)
    assert [int(lengths[a:b].sum()) for a, b in partition_documents(lengths, 2)] == [8, 16]
    even = np.full(10, 3)
    assert [int(even[a:b].sum()) for a, b in partition_documents(even, 2)] == [15, 15]


# ------------------------------------------------------------------------------------------------ engines
def test_local_threads_and_any_partitioning_give_the_seeded_model(corpus, reference):
    rec = Recording(LocalEngine(2))
    _same(reference, _fit(corpus, rec))
    _two_workers_took_partitions(rec)
    _same(reference, _fit(corpus, LocalEngine(1), partitions=5))
    other_seed = HDPLDA(**(KW | {"seed": 1})).fit(corpus)
    assert not np.array_equal(other_seed.topic_word, reference[0].topic_word)  # the check can fail


def test_dask_two_workers_give_the_seeded_model(corpus, reference, dask_engine):
    rec = Recording(dask_engine)
    _same(reference, _fit(corpus, rec))
    _two_workers_took_partitions(rec)
    assert all(pid != os.getpid() for t in rec.takers for pid, _ in t)  # worker processes, not the driver


def test_spark_local_2_gives_the_seeded_model(corpus, reference, spark_engine):
    rec = Recording(spark_engine)
    _same(reference, _fit(corpus, rec))
    _two_workers_took_partitions(rec)
    assert all(pid != os.getpid() for t in rec.takers for pid, _ in t)


def test_engine_must_be_an_engine():
    with pytest.raises(ParameterError, match="textdp.engines.Engine"):
        HDPLDA(3, epsilon=1.0, engine="dask")
    with pytest.raises(ParameterError, match="partitions"):
        HDPLDA(3, epsilon=1.0, partitions=0)


# ------------------------------------------------------------------------------------------------ CLI
def _docs(tmp_path, corpus):
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(" ".join(corpus.vocabulary[i] for i in d) for d in corpus.documents()) + "\n", "utf-8")
    (tmp_path / "vocab.txt").write_text("\n".join(corpus.vocabulary) + "\n", "utf-8")
    return ["topics", "train", str(docs), "--k", "3", "--iterations", "2", "--vocabulary", str(tmp_path / "vocab.txt"),
            "--seed", "0"]


def test_cli_hdp_on_dask_same_model_and_one_identical_ledger_charge(tmp_path, corpus, dask_engine):
    """The same release from the CLI on one process and on the running Dask cluster (--scheduler): the same
    model file, the same card but its time, one ledger entry each charging the same guarantee."""
    from textdp.accounting.ledger import Ledger
    from textdp.cli.main import app

    base = _docs(tmp_path, corpus) + ["--privacy", "hdp", "-e", "20", "--max-doc-length", "25",
                                      "--ledger-dir", str(tmp_path / "ledgers")]
    r1 = CliRunner().invoke(app, base + ["-o", str(tmp_path / "one")])
    assert r1.exit_code == 0, r1.output
    addr = dask_engine.client.scheduler.address
    r2 = CliRunner().invoke(app, base + ["--engine", "dask", "--scheduler", addr, "-o", str(tmp_path / "dask")])
    assert r2.exit_code == 0, r2.output
    assert "HDP-LDA's sweeps run on dask" in r2.output and addr not in r2.output
    assert (tmp_path / "one" / "model.npz").read_bytes() == (tmp_path / "dask" / "model.npz").read_bytes()
    cards = [json.loads((tmp_path / d / "model.card.json").read_text("utf-8")) for d in ("one", "dask")]
    for c in cards:
        c.pop("created")
    assert cards[0] == cards[1]  # the card says nothing about the engine: the release is the same
    releases = Ledger(str(tmp_path / "docs.txt"), str(tmp_path / "ledgers")).releases()
    assert len(releases) == 2
    assert releases[0]["guarantee"] == releases[1]["guarantee"] == cards[0]["guarantee"]


@pytest.mark.parametrize("privacy,extra", [("none", []), ("lp", ["-e", "4"]), ("olp", ["-e", "4"])])
def test_cli_refuses_other_engines_for_the_collapsed_gibbs_samplers(tmp_path, corpus, privacy, extra):
    from textdp.cli.main import app

    base = _docs(tmp_path, corpus) + ["--privacy", privacy, *extra, "--ledger-dir", str(tmp_path / "ledgers")]
    r = CliRunner().invoke(app, base + ["--engine", "dask", "-o", str(tmp_path / "m")])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --engine dask:") and "stays single-node" in lines[0]
    assert "approximate Gibbs" in lines[0] and "--privacy hdp" in lines[0]
    if privacy == "none":
        assert "inherent-privacy analysis" in lines[0]
    assert not (tmp_path / "m").exists() and not (tmp_path / "ledgers").exists()  # no output, no budget touched
