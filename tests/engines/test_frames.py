"""The user's own frames (issue 16, items 1 and 4): pandas, Hugging Face datasets, Dask and Spark
give back a frame of the same kind whose seeded text column equals ``mech.sanitize(texts)`` for any
chunking, batch size, process count or partitioning; other columns, row order, index and nulls are
kept; the budget is reserved once, recorded after success and cancelled on failure."""

import json
import threading

import pandas as pd
import pytest

from textdp.accounting.ledger import Ledger
from textdp.engines import LocalEngine, ReleasePlan, sanitize
from textdp.engines import frames as frames_mod
from textdp.engines.frames import LEDGER_NAMED, LEDGER_NOT_RECORDED, LEDGER_UNIDENTIFIED, sanitize_frame
from textdp.errors import BudgetExceededError, InputError, ParameterError
from textdp.sanitize import make_mechanism

TEXTS = ["the movie was great fun", None, "a dull , lifeless film", "i loved it !", "", "not my cup of tea",
         "what a waste of two hours", None, "the acting is superb", "boring .", "a classic", "meh"]


def _mech(seed=7, **kw):
    return make_mechanism("santext", "glove-6b-50d", 3.0, rng=seed, **kw)


def _reference(seed=7, texts=TEXTS, **kw):
    """The seeded stand-alone release of the same texts (a null is the empty document, kept null)."""
    out = _mech(seed, **kw).sanitize(["" if t is None else t for t in texts])
    return [None if t is None else o for t, o in zip(texts, out)]


@pytest.fixture(scope="module")
def reference():
    ref = _reference()
    assert ref[1] is None and ref[7] is None and ref[4] == ""
    assert ref != _reference(seed=8)  # another seed, another release: the comparisons can fail
    return ref


def _values(seq) -> list:
    return [None if v is None or (not isinstance(v, str) and pd.isna(v)) else v for v in seq]


def _frame():
    return pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS, "label": [i % 3 for i in range(len(TEXTS))]},
                        index=[f"r{i}" for i in range(len(TEXTS))][::-1])


def _entries(folder):
    return [json.loads(line) for p in sorted(folder.glob("*.jsonl")) for line in p.read_text().splitlines()]


# ------------------------------------------------------------------------------------- pandas
@pytest.mark.parametrize("how", [dict(chunk_size=3), dict(chunk_size=1000), dict(engine=LocalEngine(2), chunk_size=5)])
def test_pandas_dataframe_keeps_columns_index_order_and_nulls(reference, how, tmp_path):
    df = _frame()
    out, card = sanitize_frame(df, _mech(), ledger=tmp_path, **how)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(df.columns) and list(out.index) == list(df.index)
    assert out["id"].tolist() == df["id"].tolist() and out["label"].tolist() == df["label"].tolist()
    assert _values(out["text"]) == reference
    assert out["text"].dtype == df["text"].dtype
    assert _values(df["text"]) == TEXTS  # the input is not modified
    assert card["ledger"] == LEDGER_UNIDENTIFIED and card["data"]["frame"] == "pandas.DataFrame"
    assert any("(id, label, (the index)) are released unchanged" in w for w in card["warnings"])  # not 0..n-1
    # recorded once, in the ledger of unidentified releases: a reservation closed by the release
    entries = _entries(tmp_path)
    assert [e["type"] for e in entries] == ["reservation", "release"]
    assert entries[1]["reservation"] == entries[0]["id"] and entries[1]["card"] == card
    assert not Ledger.unidentified(tmp_path).identified


def test_pandas_series_object_dtype_and_the_public_alias(reference, tmp_path):
    s = pd.Series(TEXTS, index=range(100, 100 + len(TEXTS)), name="body", dtype=object)
    out, card = sanitize(s, _mech(), ledger=False, chunk_size=4)
    assert isinstance(out, pd.Series) and out.name == "body" and out.dtype == object
    assert list(out.index) == list(s.index)
    assert out.tolist() == reference  # nulls stay None in an object column
    assert card["ledger"] == LEDGER_NOT_RECORDED and card["data"]["frame"] == "pandas.Series"
    assert not list(tmp_path.iterdir())


def test_card_holds_no_statistic_of_the_private_input(tmp_path):
    """Neighbouring frames (one record replaced) get the same card, apart from its time."""
    a, b = _frame(), _frame()
    b.loc["r3", "text"] = "an entirely different and much longer review of another film"
    ca = sanitize_frame(a, _mech(), ledger=False)[1]
    cb = sanitize_frame(b, _mech(), ledger=False)[1]
    ca.pop("created"), cb.pop("created")
    assert ca == cb
    text = json.dumps(ca)
    assert "movie" not in text and "superb" not in text


def test_named_dataset_budget_reserved_once_recorded_and_refused_when_over(reference, tmp_path):
    out, card = sanitize_frame(_frame(), _mech(), dataset_id="Reviews-2026", ledger=tmp_path)
    assert _values(out["text"]) == reference and card["ledger"] == LEDGER_NAMED
    led = Ledger.named("reviews-2026", tmp_path)
    assert [e["type"] for e in led.entries()] == ["reservation", "release"]
    assert "reviews" not in json.dumps(card).lower()  # the dataset's name is the curator's, not the card's
    led.set_budget(4.0)  # 3 spent: a second eps = 3 release is refused before anything is sanitized
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(frames_mod, "sanitize_records", lambda *a: calls.append(a))
        with pytest.raises(BudgetExceededError):
            sanitize_frame(_frame(), _mech(), dataset_id="reviews-2026", ledger=tmp_path)
    assert calls == [] and [e["type"] for e in led.entries()] == ["reservation", "release", "budget"]


def test_a_failed_release_cancels_its_reservation(tmp_path, monkeypatch):
    def boom(plan, texts, first):
        if first >= 6:
            raise RuntimeError("worker lost")
        return [t for t in texts], None

    monkeypatch.setattr(frames_mod, "sanitize_records", boom)
    with pytest.raises(RuntimeError, match="worker lost"):
        sanitize_frame(_frame(), _mech(), dataset_id="reviews", ledger=tmp_path, chunk_size=3)
    led = Ledger.named("reviews", tmp_path)
    assert [e["type"] for e in led.entries()] == ["reservation", "cancel"] and not led.open_reservations()


def test_corpus_vocabulary_is_fitted_on_the_frame_like_mech_sanitize(tmp_path):
    ref = _reference(output_vocabulary="corpus")
    out, card = sanitize_frame(_frame(), _mech(output_vocabulary="corpus"), ledger=False, chunk_size=5)
    assert _values(out["text"]) == ref
    assert any("corpus" in w for w in card["warnings"])


@pytest.mark.parametrize("call, error, match", [
    (lambda: sanitize_frame(_frame(), _mech(), column="body"), InputError, "no column 'body'"),
    (lambda: sanitize_frame(_frame(), _mech(), column="id"), InputError, "column 'id' has dtype int64"),
    (lambda: sanitize_frame(pd.DataFrame({"a": ["x"], "b": ["y"]}), _mech()), InputError, "pass column="),
    (lambda: sanitize_frame(pd.Series(["fine", 3.5, None], dtype=object), _mech()), InputError,
     "holds a number at record 1"),
    (lambda: sanitize_frame(pd.Series(["a", "b"], dtype="category"), _mech()), InputError, "dtype category"),
    (lambda: sanitize_frame(pd.Series(["a"]), _mech(), column="text"), ParameterError, "column= applies"),
    (lambda: sanitize_frame(TEXTS, _mech()), ParameterError, "sanitize_texts"),
    (lambda: sanitize_frame(_frame(), _mech(), dataset_id="../etc"), ParameterError, "plain name"),
    (lambda: sanitize_frame(_frame(), _mech(), dataset_id="x", ledger=False), ParameterError, "drop one"),
    (lambda: sanitize_frame(_frame(), _mech(), num_proc=2), ParameterError, "num_proc applies"),
    (lambda: sanitize_frame(_frame(), _mech(), chunk_size=0), ParameterError, "chunk_size"),
    (lambda: sanitize_frame(_frame(), "santext"), ParameterError, "must be a sanitizer"),
])
def test_bad_input_is_one_line_and_records_nothing(call, error, match, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTDP_LEDGER_DIR", str(tmp_path))
    with pytest.raises(error, match=match) as e:
        call()
    assert "\n" not in str(e.value)
    assert _entries(tmp_path) == []  # refused before the budget is reserved


# ------------------------------------------------------------------------------------- datasets
def test_datasets_same_release_for_any_num_proc_and_batch_size(reference, tmp_path):
    datasets = pytest.importorskip("datasets")  # the engines extra (installed by make setup)
    ds = datasets.Dataset.from_dict({"id": list(range(len(TEXTS))), "text": TEXTS})
    for num_proc, batch_size in [(None, 1000), (2, 3)]:
        out, card = sanitize_frame(ds, _mech(), num_proc=num_proc, batch_size=batch_size, ledger=tmp_path)
        assert isinstance(out, datasets.Dataset) and out.column_names == ["id", "text"]
        assert out["text"] == reference and out["id"] == list(range(len(TEXTS)))
        assert out.features == ds.features
        assert card["data"]["engine"] == {"engine": "datasets", "workers": num_proc or 1}
    with pytest.raises(InputError, match="column 'id' holds Value"):
        sanitize_frame(ds, _mech(), column="id")
    with pytest.raises(ParameterError, match="one at a time"):
        sanitize_frame(datasets.DatasetDict({"train": ds}), _mech())


def test_datasets_cache_never_serves_an_old_release(tmp_path):
    """A file-backed Dataset: two unseeded calls give two releases (no cache file is reused) and
    no cache file name derives from the key."""
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(str(tmp_path / "ds"))
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    a, _ = sanitize_frame(ds, _mech(seed=None), ledger=False, keep_in_memory=False)
    b, _ = sanitize_frame(ds, _mech(seed=None), ledger=False, keep_in_memory=False)
    assert a["text"] != b["text"]
    c, _ = sanitize_frame(ds, _mech(seed=None), ledger=False)  # the default: kept in memory, no cache file
    assert c.cache_files == [] and a.cache_files and a.cache_files != b.cache_files
    assert len(list((tmp_path / "ds").glob("cache-*.arrow"))) == 2


# ------------------------------------------------------------------------------------- dask
_CALLS = {"n": 0}
_LOCK = threading.Lock()


def _shrinks_after_first_pass(part):
    with _LOCK:
        _CALLS["n"] += 1
        n = _CALLS["n"]
    return part if n <= 3 else part.iloc[1:]


def test_dask_same_release_for_1_and_3_partitions_on_the_engines_client(reference, dask_engine, tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    for n in (1, 3):
        ddf = dd.from_pandas(_frame(), npartitions=n, sort=False)
        out, card = sanitize_frame(ddf, _mech(), engine=dask_engine, ledger=tmp_path)
        assert isinstance(out, dd.DataFrame) and out.npartitions == n
        got = dask_engine.client.compute(out, sync=True)  # persisted on the engine's cluster
        assert list(got.index) == list(_frame().index) and got["id"].tolist() == list(range(len(TEXTS)))
        assert _values(got["text"]) == reference
        assert card["data"]["engine"] == {"engine": "dask", "workers": 2}
    # engine="dask" starts a cluster for the call and stops it: the partitions come back first
    mech = _mech()
    mech.begin_release()
    job = frames_mod._DaskJob(dd.from_pandas(_frame(), npartitions=3, sort=False), None, dask_engine, own_engine=True)
    assert _values(job.run(ReleasePlan.of(mech)).compute()["text"]) == reference  # no client needed
    # a pandas frame on the Dask engine (chunks as tasks) and a dask Series on Dask's threads
    assert _values(sanitize_frame(_frame(), _mech(), engine=dask_engine, chunk_size=5)[0]["text"]) == reference
    s, card = sanitize_frame(dd.from_pandas(_frame(), npartitions=3, sort=False)["text"], _mech())
    assert _values(s.compute()) == reference and card["data"]["engine"] == {"engine": "dask", "scheduler": "threads"}


def test_dask_bad_inputs(tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    ddf = dd.from_pandas(_frame(), npartitions=2, sort=False)
    with pytest.raises(InputError, match="column 'id' has dtype int64"):
        sanitize_frame(ddf, _mech(), column="id", ledger=False)
    with pytest.raises(ParameterError, match="fitted before"):
        sanitize_frame(ddf, _mech(output_vocabulary="corpus"), ledger=False)
    # partitions that change between the counting and the sanitizing pass are refused, and the
    # reservation is cancelled
    _CALLS["n"] = 0
    shifting = ddf.map_partitions(_shrinks_after_first_pass, meta=ddf._meta)
    with pytest.raises(InputError, match="not deterministic"):
        sanitize_frame(shifting, _mech(), dataset_id="shifting", ledger=tmp_path)
    assert [e["type"] for e in Ledger.named("shifting", tmp_path).entries()] == ["reservation", "cancel"]


# ------------------------------------------------------------------------------------- spark
def test_spark_same_release_for_1_and_3_partitions_and_an_index_column(reference, spark_engine, tmp_path):
    spark = spark_engine.session
    rows = [(i, t, i % 3) for i, t in enumerate(TEXTS)]
    schema = "id long, text string, label long"
    for n in (1, 3):
        df = spark.createDataFrame(spark.sparkContext.parallelize(rows, n), schema)
        out, card = sanitize_frame(df, _mech(), ledger=tmp_path)
        got = out.collect()
        assert out.columns == ["id", "text", "label"] and out.rdd.getNumPartitions() == n
        assert [r["id"] for r in got] == list(range(len(TEXTS))) and [r["label"] for r in got] == [r[2] for r in rows]
        assert [r["text"] for r in got] == reference
        assert card["data"]["engine"]["engine"] == "spark"
    # rows shuffled across 4 partitions, numbered by their own column
    shuffled = spark.createDataFrame(rows, schema).repartition(4, "label")
    out, card = sanitize_frame(shuffled, _mech(), engine=spark_engine, index_column="id", ledger=False)
    assert sorted((r["id"], r["text"]) for r in out.collect()) == list(enumerate(reference))
    assert card["data"]["records"] == "the value of the index column"
    with pytest.raises(InputError, match="has type bigint"):
        sanitize_frame(shuffled, _mech(), column="label", ledger=False)
    with pytest.raises(ParameterError, match="index_column applies"):
        sanitize_frame(_frame(), _mech(), index_column="id")
    assert len([e for e in _entries(tmp_path) if e["type"] == "release"]) == 2


def test_a_textdp_error_raised_in_a_spark_task_comes_back_as_itself():
    """Spark wraps a task's exception in its own (the Python traceback inside a JVM message);
    the textdp error in it is raised again, one line (the format of a real run, pyspark 4.3)."""
    job = object.__new__(frames_mod._SparkJob)
    wrapped = ("An exception was thrown from the Python worker. Please see the stack trace below.\n"
               "Traceback (most recent call last):\n  File \"frames.py\", line 1, in _spark_partition\n"
               "textdp.errors.InputError: partition 2 of the Spark DataFrame had 4 rows when counted and 3 now\n"
               "\n\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException")

    def fail(message):
        raise RuntimeError(message)

    with pytest.raises(InputError, match=r"^partition 2 of the Spark DataFrame had 4 rows when counted and 3 now$"):
        job._action(lambda: fail(wrapped))
    with pytest.raises(RuntimeError, match="executor lost"):
        job._action(lambda: fail("executor lost"))


def test_pandas_attrs_are_not_released_and_a_default_index_is_not_named(tmp_path):
    df = _frame().reset_index(drop=True)
    df.attrs = {"owner": "alice@example.com"}
    out, card = sanitize_frame(df, _mech(), ledger=False)
    assert out.attrs == {} and out["text"].attrs == {} and df.attrs == {"owner": "alice@example.com"}
    assert any("(id, label) are released unchanged" in w for w in card["warnings"])
    named = df.set_index(pd.Index([f"p{i}@x.org" for i in range(len(df))], name="email"))
    _, card = sanitize_frame(named, _mech(), ledger=False)
    assert any("(id, label, (the index email)) are released unchanged" in w for w in card["warnings"])
